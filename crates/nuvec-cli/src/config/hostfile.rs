//! The hostfile `nuvec config` writes: mlx.launch's `{"backend", "envs", "hosts"}` form (as
//! `mlx.distributed_config` writes it, four-space indents), which `nuvec launch` reads too.

use super::topology::Topology;
use serde_json::Value;

/// One host of the hostfile.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HostEntry {
    pub(crate) ssh: String,
    pub(crate) ips: Vec<String>,
    pub(crate) rdma: Vec<Value>,
}

/// A value as Python's `json.dumps(..., indent=4)` writes it at nesting depth `depth`.
fn python_pretty(value: &Value, depth: usize) -> String {
    match value {
        Value::Array(items) if !items.is_empty() => {
            let inner = "    ".repeat(depth + 1);
            let items: Vec<String> = items.iter().map(|v| python_pretty(v, depth + 1)).collect();
            format!(
                "[\n{inner}{}\n{}]",
                items.join(&format!(",\n{inner}")),
                "    ".repeat(depth)
            )
        }
        other => other.to_string(),
    }
}

/// The hostfile's text, as `mlx.distributed_config` writes it (Python's `json.dump` with
/// `indent=4`, its keys in its order).
pub(crate) fn render(backend: &str, envs: &[String], hosts: &[HostEntry]) -> String {
    let host = |h: &HostEntry| {
        format!(
            "{{\n            \"ssh\": {},\n            \"ips\": {},\n            \"rdma\": {}\n        }}",
            Value::from(h.ssh.as_str()),
            python_pretty(&Value::from(h.ips.clone()), 3),
            python_pretty(&Value::from(h.rdma.clone()), 3)
        )
    };
    let hosts = if hosts.is_empty() {
        "[]".to_string()
    } else {
        let hosts: Vec<String> = hosts.iter().map(host).collect();
        format!("[\n        {}\n    ]", hosts.join(",\n        "))
    };
    format!(
        "{{\n    \"backend\": {},\n    \"envs\": {},\n    \"hosts\": {hosts}\n}}\n",
        Value::from(backend),
        python_pretty(&Value::from(envs.to_vec()), 1),
    )
}

/// The ring's hosts in ring order, each with its addresses on the links to the host before it
/// (the one that connects to it), fastest first, `width` of them.
pub(crate) fn ring_entries(topology: &Topology, ring: &[usize], width: usize) -> Vec<HostEntry> {
    let n = ring.len();
    ring.iter()
        .enumerate()
        .map(|(position, &node)| {
            let before = ring[(position + n - 1) % n];
            let ips = if n == 1 {
                vec!["127.0.0.1".to_string()]
            } else {
                topology
                    .links_between(node, before)
                    .into_iter()
                    .take(width)
                    .filter_map(|link| link.end_at(node)?.0.address.clone())
                    .collect()
            };
            HostEntry {
                ssh: topology.names[node].clone(),
                ips,
                rdma: Vec::new(),
            }
        })
        .collect()
}

/// JACCL's hosts in `order`: each with its `ips` (rank 0's first is the coordinator) and its
/// RDMA devices towards every other host. A full mesh (`ring` None) names the first cable's
/// device of every pair; a ring names `width` devices towards each neighbour and every cable
/// to any other host it is cabled to (what a sub-group would need), `null` where there is
/// none. `device(host, iface)` is the RDMA device on that interface.
pub(crate) fn jaccl_entries(
    topology: &Topology,
    order: &[usize],
    ips: &[Vec<String>],
    ring: Option<usize>,
    device: &dyn Fn(usize, &str) -> Option<String>,
) -> Result<Vec<HostEntry>, String> {
    let n = order.len();
    let mut entries = Vec::new();
    for (position, &node) in order.iter().enumerate() {
        let neighbours = [order[(position + n - 1) % n], order[(position + 1) % n]];
        let mut row = Vec::new();
        for &other in order {
            let links = topology.links_between(node, other);
            let take = match ring {
                _ if other == node => 0,
                None => 1,
                Some(width) if neighbours.contains(&other) => width,
                Some(_) => links.len(),
            };
            let mut names = Vec::new();
            for link in links.into_iter().take(take) {
                let iface = &link.end_at(node).expect("a link between the two").0.iface;
                names.push(device(node, iface).ok_or_else(|| {
                    format!(
                        "{}: no RDMA device on {iface} (its link to {})",
                        topology.names[node], topology.names[other]
                    )
                })?);
            }
            row.push(match names.len() {
                0 => Value::Null,
                1 => Value::from(names.remove(0)),
                _ => Value::from(names),
            });
        }
        entries.push(HostEntry {
            ssh: topology.names[node].clone(),
            ips: ips[node].clone(),
            rdma: row,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::super::topology::{End, Link};
    use super::*;

    fn cable(a: usize, ia: &str, b: usize, ib: &str, block: u32) -> Link {
        let end = |host, iface: &str, offset| End {
            host,
            iface: iface.into(),
            address: Some(format!("192.168.0.{}", block + offset)),
        };
        Link::new(end(a, ia, 1), end(b, ib, 2))
    }

    /// Four Macs cabled 0-1-2-3-0, and 0-2 with a second cable.
    fn four() -> Topology {
        Topology {
            names: ["m0", "m1", "m2", "m3"].map(String::from).to_vec(),
            links: vec![
                cable(0, "en2", 1, "en2", 0),
                cable(0, "en3", 3, "en2", 4),
                cable(0, "en4", 2, "en4", 8),
                cable(1, "en3", 2, "en2", 12),
                cable(2, "en3", 3, "en3", 16),
            ],
        }
    }

    #[test]
    fn ring_hosts_listen_on_the_cable_from_the_host_before_them() {
        let entries = ring_entries(&four(), &[0, 1, 2, 3], 1);
        let ips: Vec<&str> = entries.iter().map(|e| e.ips[0].as_str()).collect();
        // m0's address on its cable to m3, m1's on the cable to m0, …
        assert_eq!(
            ips,
            ["192.168.0.5", "192.168.0.2", "192.168.0.14", "192.168.0.18"]
        );
        let text = render("ring", &["A=1".into()], &entries[..1]);
        let python = "{\n    \"backend\": \"ring\",\n    \"envs\": [\n        \"A=1\"\n    ],\n    \"hosts\": [\n        {\n            \"ssh\": \"m0\",\n            \"ips\": [\n                \"192.168.0.5\"\n            ],\n            \"rdma\": []\n        }\n    ]\n}\n";
        assert_eq!(text, python);
        let text = render("ring", &[], &entries);
        let parsed = crate::launch::hosts::parse_launch_hostfile(&text).unwrap();
        assert_eq!(parsed.backend.as_deref(), Some("ring"));
        assert_eq!(parsed.hosts[3].ips, ["192.168.0.18"]);
    }

    #[test]
    fn hostfiles_are_written_as_pythons_json_module_writes_them() {
        let host = HostEntry {
            ssh: "m0".into(),
            ips: vec!["1.2.3.4".into()],
            rdma: vec![
                Value::Null,
                "rdma_en2".into(),
                Value::from(vec!["rdma_en3", "rdma_en4"]),
            ],
        };
        let python = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/config/python-hostfile.json"
        ))
        .unwrap();
        assert_eq!(render("jaccl", &[], &[host]), python);
    }

    #[test]
    fn jaccl_rings_name_neighbours_and_every_other_cable() {
        let t = four();
        let ips = vec![vec!["10.0.0.1".to_string()]; 4];
        let device = |_: usize, iface: &str| Some(format!("rdma_{iface}"));
        let ring = jaccl_entries(&t, &[0, 1, 2, 3], &ips, Some(1), &device).unwrap();
        assert_eq!(
            ring[0].rdma,
            [
                Value::Null,
                "rdma_en2".into(),
                "rdma_en4".into(),
                "rdma_en3".into()
            ]
        );
        assert_eq!(ring[1].rdma[3], Value::Null);
        let error = jaccl_entries(&t, &[0, 1, 2, 3], &ips, Some(1), &|_, _| None).unwrap_err();
        assert_eq!(error, "m0: no RDMA device on en2 (its link to m1)");
    }
}
