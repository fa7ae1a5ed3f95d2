//! `--over ethernet`: every network two hosts share is a candidate link (an address of each in
//! the same IPv4 network), each is measured by the probe, and the hostfile is written over the
//! links that carried traffic, the fastest first.

use super::facts::{Interface, Platform};
use super::hostfile::{jaccl_entries, ring_entries};
use super::topology::{find_ring, is_full_mesh, End, Link, Topology};
use super::{linux, macos, probe, Backend, Session};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Every host's interfaces, asked in parallel.
fn discover(session: &Session) -> Result<Vec<Vec<Interface>>, String> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = session
            .names
            .iter()
            .zip(&session.facts)
            .map(|(host, facts)| {
                scope.spawn(move || {
                    let (command, step) = match facts.platform {
                        Platform::Linux => {
                            ("ip -j addr show", "listing interfaces with ip -j addr")
                        }
                        Platform::MacOs => ("ifconfig", "listing interfaces with ifconfig"),
                    };
                    let done = session
                        .remote
                        .run(host, command, Duration::from_secs(20), step)?;
                    if !done.success() {
                        return Err(format!("{host} ({step}): {}", done.reason()));
                    }
                    match facts.platform {
                        Platform::Linux => linux::parse_ip_addr(&done.stdout, host),
                        Platform::MacOs => Ok(macos::parse_ifconfig(&done.stdout)),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("listing interfaces panicked".into()))
            })
            .collect()
    })
}

/// Whether an address can carry a link between hosts (not loopback, link-local or
/// unspecified).
fn usable(address: Ipv4Addr) -> bool {
    !(address.is_loopback() || address.is_link_local() || address.is_unspecified())
}

fn network(address: Ipv4Addr, prefix: u8) -> u32 {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    u32::from(address) & mask
}

/// A link for every pair of addresses of two hosts in the same network (same prefix length and
/// network), in host order.
pub(crate) fn candidate_links(hosts: &[Vec<Interface>]) -> Vec<Link> {
    let addresses = |h: usize| {
        hosts[h].iter().flat_map(move |i| {
            i.addresses
                .iter()
                .filter(|(a, _)| usable(*a))
                .map(move |&(a, p)| (i.name.as_str(), a, p))
        })
    };
    let mut links = Vec::new();
    for a in 0..hosts.len() {
        for b in a + 1..hosts.len() {
            for (ia, aa, pa) in addresses(a) {
                for (ib, ab, pb) in addresses(b) {
                    if pa == pb && aa != ab && network(aa, pa) == network(ab, pb) {
                        let end = |host, iface: &str, address: Ipv4Addr| End {
                            host,
                            iface: iface.to_string(),
                            address: Some(address.to_string()),
                        };
                        links.push(Link::new(end(a, ia, aa), end(b, ib, ab)));
                    }
                }
            }
        }
    }
    links
}

/// Why no hostfile can be written: the hosts without links and the dead links, and --dot.
fn no_topology(topology: &Topology, wanted: &str) -> String {
    let mut reasons = Vec::new();
    let counts = topology.counts();
    for (i, name) in topology.names.iter().enumerate() {
        if counts[i].iter().all(|&c| c == 0) {
            reasons.push(format!(
                "{name} shares no working network with any other host"
            ));
        }
    }
    for link in topology.dead_links() {
        reasons.push(format!("{}: no traffic", link.describe(&topology.names)));
    }
    let mut message = format!("the links that carry traffic form no {wanted} through every host");
    for reason in reasons {
        message.push_str("\n  - ");
        message.push_str(&reason);
    }
    message.push_str("\n(run with --dot to see the links)");
    message
}

/// For each host, an address every other host has a working link to (JACCL's coordinator
/// needs one on rank 0).
fn common_addresses(topology: &Topology) -> Vec<Vec<String>> {
    let n = topology.names.len();
    (0..n)
        .map(|host| {
            let mut candidates: Vec<String> = topology
                .links
                .iter()
                .filter(|l| l.alive)
                .filter_map(|l| l.end_at(host)?.0.address.clone())
                .collect();
            candidates.dedup();
            candidates
                .into_iter()
                .filter(|address| {
                    (0..n).filter(|&o| o != host).all(|other| {
                        topology.links_between(host, other).iter().any(|l| {
                            l.end_at(host).and_then(|(mine, _)| mine.address.as_ref())
                                == Some(address)
                        })
                    })
                })
                .take(1)
                .collect()
        })
        .collect()
}

/// Each host's RDMA devices by network interface.
fn rdma_devices(session: &Session) -> Result<Vec<Vec<(String, String)>>, String> {
    let mut all = Vec::new();
    for (host, facts) in session.names.iter().zip(&session.facts) {
        let (command, step) = match facts.platform {
            Platform::Linux => (
                linux::RDMA_LISTING,
                "listing RDMA devices in /sys/class/infiniband",
            ),
            Platform::MacOs => ("ibv_devices", "listing RDMA devices with ibv_devices"),
        };
        let done = session
            .remote
            .run(host, command, Duration::from_secs(20), step)?;
        let by_iface: Vec<(String, String)> = match facts.platform {
            Platform::Linux => linux::parse_rdma_listing(&done.stdout)
                .into_iter()
                .flat_map(|(device, ifaces)| ifaces.into_iter().map(move |i| (i, device.clone())))
                .collect(),
            Platform::MacOs => macos::parse_ibv_devices(&done.stdout)
                .into_iter()
                .map(|d| (d.trim_start_matches("rdma_").to_string(), d))
                .collect(),
        };
        if by_iface.is_empty() {
            return Err(format!(
                "{host} ({step}): no RDMA device; JACCL needs one on every host's links"
            ));
        }
        all.push(by_iface);
    }
    Ok(all)
}

/// Configures over the networks the hosts share.
pub(super) fn configure(session: &Session) -> Result<(), String> {
    if session.args.auto_setup {
        super::warn("--auto-setup has nothing to set up over ethernet: the hosts' networks are used as they are");
    }
    session.log("listing every host's interfaces");
    let interfaces = discover(session)?;
    let mut topology = Topology {
        names: session.names.clone(),
        links: candidate_links(&interfaces),
    };
    if topology.names.len() > 1 {
        probe::probe_all(
            &session.remote,
            &mut topology,
            &session.nuvec,
            session.args.probe_bytes,
        );
    }
    if session.args.dot {
        print!("{}", topology.dot());
        return Ok(());
    }
    let counts = topology.counts();
    let backend = session.args.backend;
    let written = match backend {
        None | Some(Backend::Ring) => {
            let (ring, width) = find_ring(&counts).ok_or_else(|| no_topology(&topology, "ring"))?;
            let entries = ring_entries(&topology, &ring, width);
            session.save(backend.map_or("", Backend::name), &entries)?;
            ring
        }
        Some(Backend::Jaccl) | Some(Backend::JacclRing) => {
            let mesh = backend == Some(Backend::Jaccl);
            let order = if mesh {
                if !is_full_mesh(&counts) {
                    return Err(no_topology(&topology, "full mesh"));
                }
                (0..topology.names.len()).collect()
            } else {
                find_ring(&counts)
                    .ok_or_else(|| no_topology(&topology, "ring"))?
                    .0
            };
            let ips = common_addresses(&topology);
            if ips[order[0]].is_empty() {
                return Err(format!(
                    "JACCL's coordinator (rank 0, {}) needs an address every other host reaches; \
                     none of its networks joins them all",
                    topology.names[order[0]]
                ));
            }
            let devices = rdma_devices(session)?;
            let device = |host: usize, iface: &str| {
                devices[host]
                    .iter()
                    .find(|(i, _)| i == iface)
                    .map(|(_, d)| d.clone())
            };
            let width = find_ring(&counts).map_or(1, |r| r.1);
            let entries =
                jaccl_entries(&topology, &order, &ips, (!mesh).then_some(width), &device)?;
            session.save(backend.map_or("", Backend::name), &entries)?;
            order
        }
    };
    for link in topology.dead_links() {
        super::warn(&format!(
            "{}: no traffic (not used)",
            link.describe(&topology.names)
        ));
    }
    session.log(&format!(
        "ring order: {}",
        written
            .iter()
            .map(|&i| topology.names[i].as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interface(name: &str, addresses: &[(&str, u8)]) -> Interface {
        Interface {
            name: name.into(),
            up: true,
            addresses: addresses
                .iter()
                .map(|(a, p)| (a.parse().unwrap(), *p))
                .collect(),
        }
    }

    #[test]
    fn hosts_sharing_a_network_are_candidate_links_and_loopback_is_not() {
        let hosts = vec![
            vec![
                interface("lo", &[("127.0.0.1", 8)]),
                interface("eth0", &[("10.0.0.1", 24)]),
                interface("tb0", &[("192.168.0.1", 30)]),
            ],
            vec![
                interface("lo", &[("127.0.0.1", 8)]),
                interface("eth0", &[("10.0.0.2", 24)]),
                interface("tb1", &[("192.168.0.2", 30)]),
            ],
            vec![
                interface("eth0", &[("10.0.0.3", 24)]),
                interface("tb0", &[("192.168.0.5", 30)]),
            ],
        ];
        let links = candidate_links(&hosts);
        let described: Vec<String> = links
            .iter()
            .map(|l| l.describe(&["a".into(), "b".into(), "c".into()]))
            .collect();
        assert_eq!(
            described,
            [
                "a eth0 (10.0.0.1) ↔ b eth0 (10.0.0.2)",
                "a tb0 (192.168.0.1) ↔ b tb1 (192.168.0.2)",
                "a eth0 (10.0.0.1) ↔ c eth0 (10.0.0.3)",
                "b eth0 (10.0.0.2) ↔ c eth0 (10.0.0.3)",
            ]
        );
        let topology = Topology {
            names: vec!["a".into(), "b".into(), "c".into()],
            links,
        };
        assert_eq!(common_addresses(&topology)[0], ["10.0.0.1"]);
    }

    #[test]
    fn a_host_without_links_and_a_dead_link_are_both_named() {
        let hosts = vec![
            vec![interface("e0", &[("192.168.0.1", 30)])],
            vec![interface("e0", &[("192.168.0.2", 30)])],
            vec![interface("e0", &[("172.16.0.9", 24)])],
        ];
        let mut topology = Topology {
            names: vec!["a".into(), "b".into(), "c".into()],
            links: candidate_links(&hosts),
        };
        topology.links[0].alive = false;
        let message = no_topology(&topology, "ring");
        assert!(message.contains("c shares no working network"), "{message}");
        assert!(
            message.contains("a e0 (192.168.0.1) ↔ b e0 (192.168.0.2): no traffic"),
            "{message}"
        );
        assert!(
            message.ends_with("(run with --dot to see the links)"),
            "{message}"
        );
    }
}
