//! What macOS's tools print, read: Thunderbolt ports and their cables from `system_profiler
//! SPThunderboltDataType -json`, interface names from `networksetup -listallhardwareports`,
//! addresses from `ifconfig`, RDMA devices from `ibv_devices`; and the commands that set up a
//! Thunderbolt cable's network as `mlx.distributed_config` does.

use super::topology::{End, Link, Topology};
use serde_json::Value;
use std::collections::HashMap;

/// One Thunderbolt port of a host: its network interface, its domain's UUID and the UUID of
/// the domain at the other end of its cable, if any.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ThunderboltPort {
    pub(crate) iface: String,
    pub(crate) uuid: String,
    pub(crate) connected_to: Option<String>,
}

/// `networksetup -listallhardwareports`: hardware port name → device (`Thunderbolt 1` → `en2`).
pub(crate) fn parse_hardware_ports(text: &str) -> HashMap<String, String> {
    let mut ports = HashMap::new();
    let mut port = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("Hardware Port:") {
            port = Some(name.trim().to_string());
        } else if let Some(device) = line.strip_prefix("Device:") {
            if let Some(name) = port.take() {
                ports.insert(name, device.trim().to_string());
            }
        }
    }
    ports
}

/// The Thunderbolt ports of `system_profiler SPThunderboltDataType -json`, in the order of
/// their interfaces' names. A bus without a domain UUID (no Thunderbolt networking) is left
/// out; `host` names the host in errors.
pub(crate) fn parse_thunderbolt(
    json: &str,
    hardware_ports: &HashMap<String, String>,
    host: &str,
) -> Result<Vec<ThunderboltPort>, String> {
    let value: Value = serde_json::from_str(json).map_err(|e| {
        format!("{host}: system_profiler SPThunderboltDataType -json printed no JSON ({e})")
    })?;
    let buses = value
        .get("SPThunderboltDataType")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            format!("{host}: system_profiler's output has no \"SPThunderboltDataType\" list")
        })?;
    let mut ports = Vec::new();
    for bus in buses {
        let Some(uuid) = bus.get("domain_uuid_key").and_then(Value::as_str) else {
            continue;
        };
        let tag = bus
            .get("receptacle_1_tag")
            .and_then(|t| t.get("receptacle_id_key"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!("{host}: Thunderbolt bus {uuid} has no receptacle_1_tag.receptacle_id_key")
            })?;
        let port_name = format!("Thunderbolt {tag}");
        let iface = hardware_ports.get(&port_name).ok_or_else(|| {
            format!(
                "{host}: networksetup lists no hardware port \"{port_name}\" (the interface of \
                 Thunderbolt receptacle {tag})"
            )
        })?;
        let connected_to = bus
            .get("_items")
            .and_then(Value::as_array)
            .and_then(|items| {
                items
                    .iter()
                    .find_map(|item| item.get("domain_uuid_key").and_then(Value::as_str))
            })
            .map(str::to_string);
        ports.push(ThunderboltPort {
            iface: iface.clone(),
            uuid: uuid.to_string(),
            connected_to,
        });
    }
    ports.sort_by(|a, b| a.iface.cmp(&b.iface));
    Ok(ports)
}

/// The cables between the hosts' Thunderbolt ports, each with its own /30 network numbered
/// as `mlx.distributed_config` numbers them: cables in the order met (host by host, each
/// host's ports in order), 192.168.a.b + 1 for the end met first and + 2 for the other, the
/// next cable 4 addresses on. A cable to a machine that is not among the hosts is left out.
pub(crate) fn thunderbolt_links(hosts: &[Vec<ThunderboltPort>]) -> Result<Vec<Link>, String> {
    let mut by_uuid = HashMap::new();
    for (h, ports) in hosts.iter().enumerate() {
        for (p, port) in ports.iter().enumerate() {
            by_uuid.insert(port.uuid.as_str(), (h, p));
        }
    }
    let mut assigned = std::collections::HashSet::new();
    let mut links = Vec::new();
    let mut block: u32 = 0;
    for (h, ports) in hosts.iter().enumerate() {
        for (p, port) in ports.iter().enumerate() {
            let Some(&(peer, peer_port)) = port
                .connected_to
                .as_deref()
                .and_then(|uuid| by_uuid.get(uuid))
            else {
                continue;
            };
            if !assigned.insert((h, p)) {
                continue;
            }
            assigned.insert((peer, peer_port));
            if block >= 256 * 256 {
                return Err("more cables than 192.168.0.0/16 has /30 networks for".into());
            }
            let address = |offset: u32| format!("192.168.{}.{}", block / 256, block % 256 + offset);
            links.push(Link::new(
                End {
                    host: h,
                    iface: port.iface.clone(),
                    address: Some(address(1)),
                },
                End {
                    host: peer,
                    iface: hosts[peer][peer_port].iface.clone(),
                    address: Some(address(2)),
                },
            ));
            block += 4;
        }
    }
    Ok(links)
}

/// The commands that give host `host` its ends of the cables: the Thunderbolt bridge off,
/// each interface its address on a /30, and a route to each peer through its cable.
pub(crate) fn setup_commands(topology: &Topology, host: usize) -> Vec<String> {
    let mut commands = vec!["sudo ifconfig bridge0 down".to_string()];
    for link in &topology.links {
        let Some((mine, theirs)) = link.end_at(host) else {
            continue;
        };
        let (Some(address), Some(peer)) = (&mine.address, &theirs.address) else {
            continue;
        };
        commands.push(format!(
            "sudo ifconfig {} inet {address} netmask 255.255.255.252",
            mine.iface
        ));
        commands.push(format!(
            "sudo route change {peer} -interface {}",
            mine.iface
        ));
    }
    commands
}

/// `ifconfig`'s interfaces and their IPv4 addresses with prefix lengths (`netmask 0xffffff00`
/// is /24), and whether each is up.
pub(crate) fn parse_ifconfig(text: &str) -> Vec<super::facts::Interface> {
    let mut interfaces: Vec<super::facts::Interface> = Vec::new();
    for line in text.lines() {
        if !line.starts_with(['\t', ' ']) {
            if let Some((name, rest)) = line.split_once(": ") {
                interfaces.push(super::facts::Interface {
                    name: name.to_string(),
                    up: rest.contains("<UP") || rest.contains(",UP"),
                    addresses: Vec::new(),
                });
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(current), ["inet", address, rest @ ..]) =
            (interfaces.last_mut(), words.as_slice())
        else {
            continue;
        };
        let prefix = rest
            .windows(2)
            .find(|w| w[0] == "netmask")
            .and_then(|w| u32::from_str_radix(w[1].trim_start_matches("0x"), 16).ok())
            .map_or(32, |mask| mask.count_ones() as u8);
        if let Ok(address) = address.parse() {
            current.addresses.push((address, prefix));
        }
    }
    interfaces
}

/// `ibv_devices`' RDMA devices over Thunderbolt (`rdma_en2`, …).
pub(crate) fn parse_ibv_devices(text: &str) -> Vec<String> {
    text.split_whitespace()
        .filter(|w| w.starts_with("rdma_"))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/config");

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
    }

    fn three_macs() -> Vec<Vec<ThunderboltPort>> {
        (1..=3)
            .map(|i| {
                let ports = parse_hardware_ports(&fixture(&format!("mac{i}-hardware-ports.txt")));
                parse_thunderbolt(&fixture(&format!("mac{i}-thunderbolt.json")), &ports, "mac")
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn hardware_ports_map_thunderbolt_receptacles_to_interfaces() {
        let ports = parse_hardware_ports(&fixture("mac1-hardware-ports.txt"));
        assert_eq!(ports["Thunderbolt 1"], "en2");
        assert_eq!(ports["Thunderbolt 2"], "en3");
        assert_eq!(ports["Ethernet"], "en0");
        assert_eq!(ports["Thunderbolt Bridge"], "bridge0");
    }

    #[test]
    fn thunderbolt_ports_and_their_cables_are_read_from_system_profiler() {
        let macs = three_macs();
        // mac1's third bus has no cable; the Thunderbolt 4 controller without a domain is
        // not a port.
        assert_eq!(macs[0].len(), 3);
        assert_eq!(macs[0][0].iface, "en2");
        assert!(macs[0][2].connected_to.is_none());
        // Every cable is seen from both ends.
        let links = thunderbolt_links(&macs).unwrap();
        let pairs: Vec<(usize, usize, &str, &str)> = links
            .iter()
            .map(|l| {
                (
                    l.ends[0].host,
                    l.ends[1].host,
                    l.ends[0].iface.as_str(),
                    l.ends[1].iface.as_str(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                (0, 1, "en2", "en2"),
                (0, 2, "en3", "en3"),
                (1, 2, "en3", "en2")
            ]
        );
        let addresses: Vec<[&str; 2]> = links
            .iter()
            .map(|l| [0, 1].map(|e| l.ends[e].address.as_deref().unwrap()))
            .collect();
        assert_eq!(
            addresses,
            [
                ["192.168.0.1", "192.168.0.2"],
                ["192.168.0.5", "192.168.0.6"],
                ["192.168.0.9", "192.168.0.10"]
            ]
        );
    }

    #[test]
    fn setup_gives_each_cable_end_its_address_and_a_route_to_the_peer() {
        let topology = Topology {
            names: vec!["mac1".into(), "mac2".into(), "mac3".into()],
            links: thunderbolt_links(&three_macs()).unwrap(),
        };
        assert_eq!(
            setup_commands(&topology, 1),
            [
                "sudo ifconfig bridge0 down",
                "sudo ifconfig en2 inet 192.168.0.2 netmask 255.255.255.252",
                "sudo route change 192.168.0.1 -interface en2",
                "sudo ifconfig en3 inet 192.168.0.9 netmask 255.255.255.252",
                "sudo route change 192.168.0.10 -interface en3",
            ]
        );
    }

    #[test]
    fn malformed_system_profiler_output_names_the_host() {
        let ports = parse_hardware_ports(&fixture("mac1-hardware-ports.txt"));
        let error = parse_thunderbolt("not json", &ports, "mac-7").unwrap_err();
        assert!(error.starts_with("mac-7: "), "{error}");
        let error = parse_thunderbolt(&fixture("mac1-thunderbolt.json"), &HashMap::new(), "mac-7")
            .unwrap_err();
        assert!(error.contains("Thunderbolt 1"), "{error}");
    }

    #[test]
    fn ifconfig_addresses_and_rdma_devices_are_read() {
        let interfaces = parse_ifconfig(&fixture("mac1-ifconfig.txt"));
        let en0 = interfaces.iter().find(|i| i.name == "en0").unwrap();
        assert!(en0.up);
        assert_eq!(en0.addresses, [("10.0.1.21".parse().unwrap(), 24)]);
        let en2 = interfaces.iter().find(|i| i.name == "en2").unwrap();
        assert_eq!(en2.addresses, [("192.168.0.1".parse().unwrap(), 30)]);
        assert_eq!(
            parse_ibv_devices(&fixture("mac1-ibv-devices.txt")),
            ["rdma_en2", "rdma_en3", "rdma_en4"]
        );
    }
}
