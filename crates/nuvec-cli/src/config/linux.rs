//! What Linux's tools print, read: interfaces and their IPv4 addresses from `ip -j addr`, and
//! RDMA devices with the network interfaces they sit on from `/sys/class/infiniband`.

use super::facts::Interface;
use serde_json::Value;

/// The shell command that lists RDMA devices, one per line: the device, then its network
/// interfaces (`mlx5_0 enp1s0f0`). Prints nothing where there are none.
pub(crate) const RDMA_LISTING: &str = "for d in /sys/class/infiniband/*; do [ -d \"$d\" ] || \
     continue; printf '%s' \"${d##*/}\"; for n in \"$d\"/device/net/*; do [ -e \"$n\" ] && \
     printf ' %s' \"${n##*/}\"; done; echo; done";

/// `ip -j addr`'s interfaces: name, whether it is up (the administrative flag), and IPv4
/// addresses with their prefix lengths. `host` names the host in errors.
pub(crate) fn parse_ip_addr(json: &str, host: &str) -> Result<Vec<Interface>, String> {
    let value: Value = serde_json::from_str(json)
        .map_err(|e| format!("{host}: `ip -j addr` printed no JSON ({e})"))?;
    let list = value
        .as_array()
        .ok_or_else(|| format!("{host}: `ip -j addr` printed no list of interfaces"))?;
    let mut interfaces = Vec::new();
    for entry in list {
        let Some(name) = entry.get("ifname").and_then(Value::as_str) else {
            continue;
        };
        let up = entry
            .get("flags")
            .and_then(Value::as_array)
            .is_some_and(|flags| flags.iter().any(|f| f == "UP"));
        let addresses = entry
            .get("addr_info")
            .and_then(Value::as_array)
            .map(|infos| {
                infos
                    .iter()
                    .filter(|info| info.get("family").and_then(Value::as_str) == Some("inet"))
                    .filter_map(|info| {
                        let address = info.get("local")?.as_str()?.parse().ok()?;
                        let prefix = u8::try_from(info.get("prefixlen")?.as_u64()?).ok()?;
                        Some((address, prefix))
                    })
                    .collect()
            })
            .unwrap_or_default();
        interfaces.push(Interface {
            name: name.to_string(),
            up,
            addresses,
        });
    }
    Ok(interfaces)
}

/// [`RDMA_LISTING`]'s lines: each device and its network interfaces.
pub(crate) fn parse_rdma_listing(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let device = words.next()?.to_string();
            Some((device, words.map(str::to_string).collect()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addr_json_gives_interfaces_their_ipv4_networks() {
        let json = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/config/linux-ip-addr.json"
        ))
        .unwrap();
        let interfaces = parse_ip_addr(&json, "node-1").unwrap();
        let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["lo", "cpa"]);
        assert!(!interfaces[0].up && interfaces[1].up);
        assert_eq!(
            interfaces[1].addresses,
            [("192.168.0.1".parse().unwrap(), 30)]
        );
        let error = parse_ip_addr("ip: command not found", "node-1").unwrap_err();
        assert!(error.starts_with("node-1: "), "{error}");
    }

    #[test]
    fn rdma_devices_come_with_their_network_interfaces() {
        let listing = "mlx5_0 enp1s0f0\nmlx5_1 enp1s0f1\nrxe0\n";
        assert_eq!(
            parse_rdma_listing(listing),
            [
                ("mlx5_0".to_string(), vec!["enp1s0f0".to_string()]),
                ("mlx5_1".to_string(), vec!["enp1s0f1".to_string()]),
                ("rxe0".to_string(), vec![]),
            ]
        );
    }
}
