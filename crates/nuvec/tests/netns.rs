//! Ranks on hosts of their own: network namespaces joined by veth pairs, which the tests
//! create and remove.
//!
//! - Two hosts: a link cut while the group is idle is reported by `health()` within the
//!   keepalive window; a partition during a collective ends in an error (not a hang) that
//!   stays after the link heals, and a new group then forms over the healed link.
//! - Three and four hosts cabled as a ring, as `mlx.distributed_config --over thunderbolt`
//!   sets up a Thunderbolt ring, with the hostfile it writes: every collective, messages
//!   between every pair (round the ring where they share no cable), `health()`, and a killed
//!   rank named by every survivor.
//!
//! Needs root and iproute2 (`ip`); where namespaces cannot be created the tests say so and
//! skip, unless `NUVEC_REQUIRE_NETNS` is set (CI sets it where it can create them).

use nuvec::distributed::{self, Options};
use nuvec::prelude::*;
use nuvec_test_support::ranks::{is_child, launch_ranks, Launch};
use nuvec_test_support::test_name;

#[path = "common/mod.rs"]
mod common;
use std::time::{Duration, Instant};

fn ip(args: &[&str]) -> Result<(), String> {
    nuvec_test_support::sshd::run("ip", args)
}

/// Two namespaces joined by a veth pair, removed on drop.
struct Hosts {
    namespaces: [String; 2],
    links: [String; 2],
    addresses: [String; 2],
}

impl Hosts {
    /// Creates the hosts; `tag` keeps concurrent tests apart.
    fn create(tag: u32) -> Result<Hosts, String> {
        let id = std::process::id() % 10_000;
        let hosts = Hosts {
            namespaces: [format!("nuvec{id}{tag}a"), format!("nuvec{id}{tag}b")],
            links: [format!("nv{id}{tag}a"), format!("nv{id}{tag}b")],
            addresses: [
                format!("10.{}.{}.1", 100 + tag, id % 250),
                format!("10.{}.{}.2", 100 + tag, id % 250),
            ],
        };
        for ns in &hosts.namespaces {
            ip(&["netns", "add", ns])?;
        }
        ip(&[
            "link",
            "add",
            &hosts.links[0],
            "type",
            "veth",
            "peer",
            "name",
            &hosts.links[1],
        ])?;
        for side in 0..2 {
            let (ns, link) = (&hosts.namespaces[side], &hosts.links[side]);
            ip(&["link", "set", link, "netns", ns])?;
            let cidr = format!("{}/24", hosts.addresses[side]);
            ip(&["-n", ns, "addr", "add", &cidr, "dev", link])?;
            ip(&["-n", ns, "link", "set", link, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    fn launch(&self, group_timeout: Duration, port: u16) -> Launch {
        Launch {
            addresses: self
                .addresses
                .iter()
                .map(|a| format!("{a}:{port}"))
                .collect(),
            prefix: self
                .namespaces
                .iter()
                .map(|ns| ["ip", "netns", "exec", ns].map(String::from).to_vec())
                .collect(),
            env: vec![
                ("NUVEC_TEST_LINK".into(), self.links[0].clone()),
                ("NUVEC_TEST_ADDRESSES".into(), self.addresses.join(",")),
            ],
            group_timeout: Some(group_timeout),
            ..Launch::default()
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The hosts, or `None` after saying visibly why namespaces cannot be made here.
fn hosts_or_skip(tag: u32) -> Option<Hosts> {
    if is_child() {
        return None;
    }
    match Hosts::create(tag) {
        Ok(hosts) => Some(hosts),
        Err(reason) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_NETNS").is_none(),
                "NUVEC_REQUIRE_NETNS is set but namespaces cannot be created: {reason}"
            );
            nuvec_test_support::skip(&format!("cannot create network namespaces here ({reason})"));
            None
        }
    }
}

/// Rank 0 (in the first namespace) sets its end of the link down or up.
fn set_link(state: &str) {
    let link = std::env::var("NUVEC_TEST_LINK").unwrap();
    ip(&["link", "set", &link, state]).expect("changing the link");
}

#[test]
fn a_cut_link_is_reported_by_health_within_the_keepalive_window() {
    let name = test_name!();
    let hosts = hosts_or_skip(1);
    if hosts.is_none() && !is_child() {
        return;
    }
    let launch = hosts
        .as_ref()
        .map_or_else(Launch::default, |h| h.launch(Duration::from_secs(20), 5601));
    launch_ranks(name, 2, Duration::from_secs(60), &launch, |group| {
        let group = group.expect("forming across the veth link");
        let x = ops::ones(&[1024], DType::F32);
        distributed::all_sum(&x, Some(&group)).check().unwrap();
        group.health().expect("healthy before the cut");
        if group.rank() == 0 {
            // Let this rank's last bytes reach the peer first: returning from a collective
            // means they were handed to the kernel, not that they arrived.
            std::thread::sleep(Duration::from_millis(300));
            set_link("down");
        }
        let start = Instant::now();
        let error = nuvec_test_support::wait_until_unhealthy(
            &group,
            Duration::from_secs(40),
            Duration::from_millis(200),
        );
        let peer = 1 - group.rank();
        assert!(error.contains(&format!("rank {peer}")), "{error}");
        // Keepalive: 5 s idle, then 5 probes 2 s apart.
        assert!(
            start.elapsed() < Duration::from_secs(25),
            "reported after {:?}: {error}",
            start.elapsed()
        );
        eprintln!(
            "rank {} saw the cut after {:?}: {error}",
            group.rank(),
            start.elapsed()
        );
    });
}

#[test]
fn a_partition_during_a_collective_heals_into_an_error_not_a_hang() {
    let name = test_name!();
    let hosts = hosts_or_skip(2);
    if hosts.is_none() && !is_child() {
        return;
    }
    let launch = hosts
        .as_ref()
        .map_or_else(Launch::default, |h| h.launch(Duration::from_secs(3), 5602));
    launch_ranks(name, 2, Duration::from_secs(60), &launch, |group| {
        let group = group.expect("forming across the veth link");
        let x = ops::ones(&[1 << 16], DType::F32);
        distributed::all_sum(&x, Some(&group)).check().unwrap();
        if group.rank() == 0 {
            // Let this rank's last bytes reach the peer first: returning from a collective
            // means they were handed to the kernel, not that they arrived.
            std::thread::sleep(Duration::from_millis(300));
            set_link("down");
        } else {
            std::thread::sleep(Duration::from_millis(800));
        }
        let start = Instant::now();
        let error = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        let waited = start.elapsed();
        let peer = 1 - group.rank();
        assert!(error.contains(&format!("rank {peer}")), "{error}");
        assert!(
            waited < Duration::from_secs(10),
            "waited {waited:?}: {error}"
        );
        // The partition heals; the failed group keeps refusing work, at once.
        if group.rank() == 0 {
            set_link("up");
        }
        std::thread::sleep(Duration::from_secs(2));
        let start = Instant::now();
        let later = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(later.contains("failed earlier"), "{later}");
        assert!(start.elapsed() < Duration::from_secs(1));
        group.close();
        // A new group forms over the healed link and works.
        let addresses = std::env::var("NUVEC_TEST_ADDRESSES").unwrap();
        let nodes: Vec<Vec<String>> = addresses
            .split(',')
            .map(|a| vec![format!("{a}:5603")])
            .collect();
        let options = Options::with_timeout(Duration::from_secs(20));
        let regrouped = distributed::init_with(&nodes, group.rank(), &options)
            .expect("re-forming over the healed link");
        let total = distributed::all_sum(&x, Some(&regrouped))
            .to_vec::<f32>()
            .unwrap();
        assert!(total.iter().all(|&v| v == 2.0));
        regrouped.close();
    });
}

/// Hosts cabled as a ring the way `mlx.distributed_config --over thunderbolt` configures a
/// Thunderbolt ring (its `IPConfigurator`): every cable is its own /30 subnet of
/// 192.168.0.0/16, numbered in the order the tool meets the cables (host by host, each host's
/// cables in port order), the host that meets a cable first taking `.1` of its block and the
/// other host `.2`, blocks 4 apart. Each namespace holds only the ends of its own two cables,
/// with no routes between hosts that are not cabled together.
struct CabledRing {
    namespaces: Vec<String>,
    /// The hostfile the tool writes for the ring backend (`configure_ring`).
    hostfile: String,
}

impl CabledRing {
    // Cables join two hosts: the loop indexes both ends' rows.
    #[allow(clippy::needless_range_loop)]
    fn create(n: usize, tag: u32) -> Result<CabledRing, String> {
        let id = std::process::id() % 10_000;
        let namespaces: Vec<String> = (0..n).map(|i| format!("nuvec{id}r{tag}h{i}")).collect();
        let ring = CabledRing {
            namespaces,
            hostfile: String::new(),
        };
        for ns in &ring.namespaces {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        // Host i's ports: its cable to host i + 1, then its cable to host i - 1.
        let mut ip_on_cable_to = vec![vec![String::new(); n]; n];
        let mut next_block = 0;
        for host in 0..n {
            for peer in [(host + 1) % n, (host + n - 1) % n] {
                if !ip_on_cable_to[host][peer].is_empty() {
                    continue;
                }
                let (ends, addresses) = (
                    [
                        format!("nc{id}{tag}{host}{peer}a"),
                        format!("nc{id}{tag}{host}{peer}b"),
                    ],
                    [
                        format!("192.168.0.{}", next_block + 1),
                        format!("192.168.0.{}", next_block + 2),
                    ],
                );
                next_block += 4;
                ip(&[
                    "link", "add", &ends[0], "type", "veth", "peer", "name", &ends[1],
                ])?;
                for (side, node) in [host, peer].into_iter().enumerate() {
                    let ns = &ring.namespaces[node];
                    ip(&["link", "set", &ends[side], "netns", ns])?;
                    let cidr = format!("{}/30", addresses[side]);
                    ip(&["-n", ns, "addr", "add", &cidr, "dev", &ends[side]])?;
                    ip(&["-n", ns, "link", "set", &ends[side], "up"])?;
                }
                ip_on_cable_to[host][peer] = addresses[0].clone();
                ip_on_cable_to[peer][host] = addresses[1].clone();
            }
        }
        // The ring is hosts 0, 1, …, n − 1; rank i's "ips" are its addresses on the cables to
        // the rank before it.
        let entries: Vec<String> = (0..n)
            .map(|i| {
                let before = (i + n - 1) % n;
                format!(
                    r#"{{"ssh": "{}", "ips": ["{}"], "rdma": []}}"#,
                    ring.namespaces[i], ip_on_cable_to[i][before]
                )
            })
            .collect();
        let mut ring = ring;
        ring.hostfile = format!("[{}]", entries.join(", "));
        Ok(ring)
    }

    /// The ranks' start: the ring addresses `mlx.launch` (and `nuvec launch`) give the
    /// hostfile's hosts (each IP with the next port from `port`), each rank in its namespace.
    fn launch(&self, group_timeout: Duration, port: u16) -> Launch {
        let hosts: serde_json::Value = serde_json::from_str(&self.hostfile).unwrap();
        let addresses = hosts
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, host)| format!("{}:{}", host["ips"][0].as_str().unwrap(), port + i as u16))
            .collect();
        Launch {
            addresses,
            prefix: self
                .namespaces
                .iter()
                .map(|ns| ["ip", "netns", "exec", ns].map(String::from).to_vec())
                .collect(),
            group_timeout: Some(group_timeout),
            ..Launch::default()
        }
    }
}

impl Drop for CabledRing {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The cabled ring, or `None` after saying visibly why namespaces cannot be made here.
fn cabled_ring_or_skip(n: usize, tag: u32) -> Option<CabledRing> {
    if is_child() {
        return None;
    }
    match CabledRing::create(n, tag) {
        Ok(ring) => Some(ring),
        Err(reason) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_NETNS").is_none(),
                "NUVEC_REQUIRE_NETNS is set but namespaces cannot be created: {reason}"
            );
            nuvec_test_support::skip(&format!("cannot create network namespaces here ({reason})"));
            None
        }
    }
}

/// Every collective, messages between every pair, a large message between the ranks
/// furthest apart, and `health()`, on `n` hosts cabled as a ring.
fn everything_works_on_a_cabled_ring(name: &str, n: usize, tag: u32, port: u16) {
    let ring = cabled_ring_or_skip(n, tag);
    if ring.is_none() && !is_child() {
        return;
    }
    let launch = ring
        .as_ref()
        .map_or_else(Launch::default, |r| r.launch(Duration::from_secs(30), port));
    launch_ranks(name, n, Duration::from_secs(120), &launch, |group| {
        let group = group.expect("forming over the cabled ring");
        common::collectives::check_collectives(group);
        common::collectives::send_and_recv_everywhere(group);
        // 4 MB: the ring's lanes, over every connection of the pair.
        let big = ops::ones(&[1 << 20], DType::F32);
        let total = distributed::all_sum(&big, Some(&group))
            .to_vec::<f32>()
            .unwrap();
        assert!(total.iter().all(|&v| v == n as f32));
        // 1 MB between ranks 0 and n / 2, the furthest apart: no cable joins them from 4 on.
        let far = n / 2;
        let message = ops::arange(0.0, (1 << 18) as f64, 1.0, DType::F32);
        if group.rank() == 0 {
            distributed::send(&message, far, Some(&group))
                .eval()
                .unwrap();
        } else if group.rank() == far {
            let got = distributed::recv(&[1 << 18], DType::F32, 0, Some(&group));
            assert_eq!(
                got.to_vec::<f32>().unwrap(),
                message.to_vec::<f32>().unwrap()
            );
        }
        group.health().expect("healthy after the checks");
        let done = distributed::all_sum(&ops::ones(&[1], DType::F32), Some(&group));
        assert_eq!(done.to_vec::<f32>().unwrap(), [n as f32]);
    });
}

#[test]
fn on_three_hosts_cabled_as_a_ring_every_collective_and_message_works() {
    everything_works_on_a_cabled_ring(test_name!(), 3, 3, 5610);
}

#[test]
fn on_four_hosts_cabled_as_a_ring_every_collective_and_message_works() {
    everything_works_on_a_cabled_ring(test_name!(), 4, 4, 5620);
}

#[test]
fn on_four_hosts_cabled_as_a_ring_a_killed_rank_is_named_by_every_survivor() {
    let name = test_name!();
    let ring = cabled_ring_or_skip(4, 5);
    if ring.is_none() && !is_child() {
        return;
    }
    let mut launch = ring
        .as_ref()
        .map_or_else(Launch::default, |r| r.launch(Duration::from_secs(10), 5630));
    launch.expendable = vec![2];
    launch_ranks(name, 4, Duration::from_secs(90), &launch, |group| {
        let group = group.expect("forming over the cabled ring");
        let x = ops::ones(&[1000], DType::F32);
        distributed::all_sum(&x, Some(&group)).check().unwrap();
        if group.rank() == 2 {
            std::process::exit(0);
        }
        std::thread::sleep(Duration::from_millis(500));
        let error = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(error.contains("rank 2"), "rank {}: {error}", group.rank());
        let health = group.health().unwrap_err().to_string();
        assert!(health.contains("rank 2"), "rank {}: {health}", group.rank());
        eprintln!("rank {} names the lost rank: {error}", group.rank());
    });
}
