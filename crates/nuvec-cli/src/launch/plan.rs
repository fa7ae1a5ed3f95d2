//! What each rank gets: exactly the environment and files mlx.launch writes for the backend
//! (pure, so it is tested without starting anything).

use super::hosts::Host;
use serde_json::Value;

/// A backend as mlx.launch names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaunchBackend {
    Ring,
    Jaccl,
    JacclRing,
    Mpi,
    Nccl,
}

impl LaunchBackend {
    pub(crate) fn parse(name: &str) -> Result<LaunchBackend, String> {
        Ok(match name {
            "ring" => LaunchBackend::Ring,
            "jaccl" => LaunchBackend::Jaccl,
            "jaccl-ring" => LaunchBackend::JacclRing,
            "mpi" => LaunchBackend::Mpi,
            "nccl" => LaunchBackend::Nccl,
            other => {
                return Err(format!(
                    "unknown backend {other:?} (ring, jaccl, jaccl-ring, mpi or nccl)"
                ))
            }
        })
    }

    /// mlx.launch's name of the backend.
    pub(crate) fn name(self) -> &'static str {
        match self {
            LaunchBackend::Ring => "ring",
            LaunchBackend::Jaccl => "jaccl",
            LaunchBackend::JacclRing => "jaccl-ring",
            LaunchBackend::Mpi => "mpi",
            LaunchBackend::Nccl => "nccl",
        }
    }
}

/// Settings that shape every rank's environment.
#[derive(Clone, Debug)]
pub(crate) struct PlanOptions {
    pub(crate) backend: LaunchBackend,
    pub(crate) starting_port: u16,
    pub(crate) connections_per_ip: usize,
    pub(crate) verbose: bool,
    /// `K=V` entries from `--env` and the hostfile.
    pub(crate) env: Vec<String>,
    /// NCCL's port on rank 0's host (`--nccl-port`).
    pub(crate) nccl_port: u16,
    /// Ranks per host (`-n`): NCCL's ranks take GPU `rank % repeat_hosts`.
    pub(crate) repeat_hosts: usize,
}

/// One rank's launch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RankPlan {
    pub(crate) rank: usize,
    pub(crate) host: Host,
    /// Variables in the order mlx.launch exports them.
    pub(crate) env: Vec<(String, String)>,
    /// Variables whose value is the path of a file holding these contents.
    pub(crate) files: Vec<(String, String)>,
}

/// Splits `K=V` (`K` alone means `K=`), refusing names outside `[A-Za-z0-9_]`.
pub(crate) fn parse_env(entry: &str) -> Result<(String, String), String> {
    let (key, value) = entry.split_once('=').unwrap_or((entry, ""));
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "--env {entry:?}: variable names use only letters, digits and _"
        ));
    }
    Ok((key.to_string(), value.to_string()))
}

/// JSON as Python's `json.dumps` writes it (", " between items), so files match mlx.launch's.
fn python_json(value: &Value) -> String {
    match value {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

/// The ring's addresses: one port per (rank, ip, connection) from `starting_port` on.
pub(crate) fn ring_addresses(
    hosts: &[Host],
    starting_port: u16,
    connections: usize,
) -> Result<Vec<Vec<String>>, String> {
    if let Some(host) = hosts.iter().find(|h| h.ips.is_empty()) {
        return Err(format!(
            "the ring backend needs IP addresses; host {:?} has none (use IPs in --hosts, or \"ips\" in the hostfile)",
            host.ssh
        ));
    }
    let mut port = u32::from(starting_port);
    let mut addresses = Vec::new();
    for host in hosts {
        let mut node = Vec::new();
        for ip in &host.ips {
            for _ in 0..connections {
                let p = u16::try_from(port).map_err(|_| {
                    format!("ports run past 65535 from --starting-port {starting_port}")
                })?;
                node.push(if ip.contains(':') {
                    format!("[{ip}]:{p}")
                } else {
                    format!("{ip}:{p}")
                });
                port += 1;
            }
        }
        addresses.push(node);
    }
    Ok(addresses)
}

/// Every rank's plan.
pub(crate) fn plan(hosts: &[Host], options: &PlanOptions) -> Result<Vec<RankPlan>, String> {
    if options.connections_per_ip == 0 {
        return Err("--connections-per-ip must be at least 1".into());
    }
    let mut env: Vec<(String, String)> = options
        .env
        .iter()
        .map(|e| parse_env(e))
        .collect::<Result<_, _>>()?;
    let mut files = Vec::new();
    match options.backend {
        LaunchBackend::Ring => {
            let addresses =
                ring_addresses(hosts, options.starting_port, options.connections_per_ip)?;
            let json = Value::from(addresses);
            // A single rank gets an empty file, as mlx.launch writes.
            let contents = if hosts.len() > 1 {
                python_json(&json)
            } else {
                String::new()
            };
            if options.verbose {
                env.push(("MLX_RING_VERBOSE".into(), "1".into()));
            }
            files.push(("MLX_HOSTFILE".to_string(), contents));
        }
        LaunchBackend::Jaccl | LaunchBackend::JacclRing => {
            let coordinator = hosts[0].ips.first().ok_or(
                "the jaccl backend needs an IP address for rank 0 (the coordinator) in the hostfile",
            )?;
            let n = hosts.len();
            // Local ranks without devices (`-n N`) get the emulated fabric and a full mesh of
            // made-up devices, so any program can run over JACCL's algorithms here.
            let emulated = hosts.iter().all(|h| h.is_local() && h.rdma.is_empty());
            let rdma_of = |i: usize| -> Vec<Value> {
                if !emulated {
                    return hosts[i].rdma.clone();
                }
                (0..n)
                    .map(|j| {
                        if i == j {
                            Value::Null
                        } else {
                            Value::from(format!("emulated{}_{}", i.min(j), i.max(j)))
                        }
                    })
                    .collect()
            };
            if emulated {
                env.push(("NUVEC_JACCL_FABRIC".into(), "emulated".into()));
            }
            let well_formed = (0..n).all(|i| {
                let rdma = rdma_of(i);
                rdma.len() == n && rdma[i].is_null()
            });
            if !well_formed {
                return Err(format!(
                    "the jaccl backend needs an \"rdma\" list of {n} entries per host with null for the host itself"
                ));
            }
            let coordinator = if coordinator.contains(':') {
                format!("[{coordinator}]:{}", options.starting_port)
            } else {
                format!("{coordinator}:{}", options.starting_port)
            };
            env.push(("MLX_JACCL_COORDINATOR".into(), coordinator));
            if options.backend == LaunchBackend::JacclRing {
                env.push(("MLX_JACCL_RING".into(), "1".into()));
            }
            let rows = Value::from((0..n).map(|i| Value::from(rdma_of(i))).collect::<Vec<_>>());
            files.push(("MLX_IBV_DEVICES".to_string(), python_json(&rows)));
        }
        LaunchBackend::Mpi => {}
        LaunchBackend::Nccl => {
            // As mlx.launch: rank 0's first IP and --nccl-port for NCCL's bootstrap, the
            // world's size, and each rank's GPU (below).
            let host_ip = hosts[0].ips.first().ok_or(
                "the nccl backend needs an IP address for rank 0, reachable from every rank (use IPs in --hosts, or \"ips\" in the hostfile)",
            )?;
            if options.verbose {
                env.push(("NCCL_DEBUG".into(), "INFO".into()));
            }
            env.push(("NCCL_HOST_IP".into(), host_ip.clone()));
            env.push(("NCCL_PORT".into(), options.nccl_port.to_string()));
            env.push(("MLX_WORLD_SIZE".into(), hosts.len().to_string()));
        }
    }
    Ok(hosts
        .iter()
        .enumerate()
        .map(|(rank, host)| {
            let mut env = env.clone();
            if options.backend == LaunchBackend::Nccl {
                let gpu = rank % options.repeat_hosts.max(1);
                env.push(("CUDA_VISIBLE_DEVICES".into(), gpu.to_string()));
            }
            env.push(("MLX_RANK".into(), rank.to_string()));
            RankPlan {
                rank,
                host: host.clone(),
                env,
                files: files.clone(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::hosts::{parse_host_list, parse_launch_hostfile};

    fn ring(starting_port: u16, connections: usize, verbose: bool) -> PlanOptions {
        PlanOptions {
            backend: LaunchBackend::Ring,
            starting_port,
            connections_per_ip: connections,
            verbose,
            env: vec!["A=1".into(), "B".into()],
            nccl_port: 12345,
            repeat_hosts: 1,
        }
    }

    /// The files and variables mlx.launch 0.32.4 writes (recorded with `env` dumps, see
    /// ../shared/reference/mlx.md §8.2).
    #[test]
    fn ring_ranks_get_what_mlx_launch_writes() {
        let hosts = parse_host_list("127.0.0.1", 2).unwrap();
        let plans = plan(&hosts, &ring(32323, 1, false)).unwrap();
        assert_eq!(
            plans[0].files,
            [(
                "MLX_HOSTFILE".to_string(),
                r#"[["127.0.0.1:32323"], ["127.0.0.1:32324"]]"#.to_string()
            )]
        );
        assert_eq!(
            plans[1].env,
            [("A", "1"), ("B", ""), ("MLX_RANK", "1")].map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let plans = plan(&hosts, &ring(40000, 2, true)).unwrap();
        assert_eq!(
            plans[1].files[0].1,
            r#"[["127.0.0.1:40000", "127.0.0.1:40001"], ["127.0.0.1:40002", "127.0.0.1:40003"]]"#
        );
        assert!(plans[0]
            .env
            .contains(&("MLX_RING_VERBOSE".into(), "1".into())));
        let single = plan(&hosts[..1], &ring(32323, 1, false)).unwrap();
        assert_eq!(single[0].files[0].1, "");
    }

    #[test]
    fn the_ring_refuses_hosts_without_addresses() {
        let hosts = parse_host_list("mac1,mac2", 1).unwrap();
        let error = plan(&hosts, &ring(32323, 1, false)).unwrap_err();
        assert!(
            error.contains("\"mac1\"") && error.contains("IP"),
            "{error}"
        );
    }

    #[test]
    fn jaccl_ranks_get_the_device_file_and_coordinator() {
        let hostfile = parse_launch_hostfile(
            r#"[{"ssh": "m1", "ips": ["10.0.0.1"], "rdma": [null, "rdma_en2"]},
                {"ssh": "m2", "ips": ["10.0.0.2"], "rdma": [["rdma_en2", "rdma_en3"], null]}]"#,
        )
        .unwrap();
        let options = PlanOptions {
            backend: LaunchBackend::JacclRing,
            ..ring(32323, 1, false)
        };
        let plans = plan(&hostfile.hosts, &options).unwrap();
        assert_eq!(
            plans[1].files[0].1,
            r#"[[null, "rdma_en2"], [["rdma_en2", "rdma_en3"], null]]"#
        );
        assert!(plans[0]
            .env
            .contains(&("MLX_JACCL_COORDINATOR".into(), "10.0.0.1:32323".into())));
        assert!(plans[0]
            .env
            .contains(&("MLX_JACCL_RING".into(), "1".into())));
        let mut broken = hostfile.hosts.clone();
        broken[0].rdma.pop();
        assert!(plan(&broken, &options).unwrap_err().contains("rdma"));
    }

    #[test]
    fn local_jaccl_ranks_without_devices_get_the_emulated_fabric_and_a_mesh() {
        let hosts = parse_host_list("127.0.0.1", 3).unwrap();
        let options = PlanOptions {
            backend: LaunchBackend::Jaccl,
            ..ring(5000, 1, false)
        };
        let plans = plan(&hosts, &options).unwrap();
        assert_eq!(
            plans[2].files[0].1,
            r#"[[null, "emulated0_1", "emulated0_2"], ["emulated0_1", null, "emulated1_2"], ["emulated0_2", "emulated1_2", null]]"#
        );
        assert!(plans[1]
            .env
            .contains(&("NUVEC_JACCL_FABRIC".into(), "emulated".into())));
        // Hosts with devices keep them and get no emulation.
        let remote = parse_launch_hostfile(
            r#"[{"ssh": "m1", "ips": ["10.0.0.1"], "rdma": [null, "d"]},
                {"ssh": "m2", "ips": ["10.0.0.2"], "rdma": ["d", null]}]"#,
        )
        .unwrap();
        let plans = plan(&remote.hosts, &options).unwrap();
        assert!(!plans[0].env.iter().any(|(k, _)| k == "NUVEC_JACCL_FABRIC"));
    }

    #[test]
    fn bad_variable_names_are_refused() {
        assert!(parse_env("A-B=1").unwrap_err().contains("letters"));
        assert_eq!(parse_env("K").unwrap(), ("K".into(), String::new()));
        assert_eq!(parse_env("K=a=b").unwrap(), ("K".into(), "a=b".into()));
    }

    /// mlx.launch 0.32.4's `launch_nccl`: rank 0's first IP and the port for NCCL's
    /// bootstrap, the world's size, each rank's GPU (`rank % -n`), then the rank.
    #[test]
    fn nccl_ranks_get_what_mlx_launch_writes() {
        let hosts = parse_host_list("127.0.0.1", 4).unwrap();
        let options = PlanOptions {
            backend: LaunchBackend::parse("nccl").unwrap(),
            starting_port: 32323,
            connections_per_ip: 1,
            verbose: true,
            env: vec!["A=1".into()],
            nccl_port: 23456,
            repeat_hosts: 4,
        };
        let plans = plan(&hosts, &options).unwrap();
        assert_eq!(plans.len(), 4);
        assert!(plans[2].files.is_empty());
        let expected = [
            ("A", "1"),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_HOST_IP", "127.0.0.1"),
            ("NCCL_PORT", "23456"),
            ("MLX_WORLD_SIZE", "4"),
            ("CUDA_VISIBLE_DEVICES", "2"),
            ("MLX_RANK", "2"),
        ];
        assert_eq!(
            plans[2].env,
            expected.map(|(k, v)| (k.to_string(), v.to_string()))
        );
        // Two hosts of two ranks each: GPUs 0 and 1 on each.
        let hosts = parse_host_list("10.0.0.1,10.0.0.2", 2).unwrap();
        let options = PlanOptions {
            repeat_hosts: 2,
            verbose: false,
            env: Vec::new(),
            ..options
        };
        let plans = plan(&hosts, &options).unwrap();
        let gpus: Vec<&str> = (plans.iter())
            .map(|p| {
                p.env
                    .iter()
                    .find(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
                    .unwrap()
                    .1
                    .as_str()
            })
            .collect();
        assert_eq!(gpus, ["0", "1", "0", "1"]);
        assert!(plans[3]
            .env
            .contains(&("NCCL_HOST_IP".to_string(), "10.0.0.1".to_string())));
    }
}
