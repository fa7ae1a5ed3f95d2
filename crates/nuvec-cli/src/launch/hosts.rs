//! The hosts a launch runs on: `--hosts a,b` with `-n`, or mlx.launch's hostfile (a list of
//! `{"ssh", "ips", "rdma"}` hosts, or `{"backend", "envs", "hosts"}` around such a list).

use serde_json::Value;

/// One rank's host.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Host {
    /// The name ssh connects to (or a local address).
    pub(crate) ssh: String,
    /// Addresses the ring listens on, in order.
    pub(crate) ips: Vec<String>,
    /// Per peer: `null`, a device name or a list of names (JACCL).
    pub(crate) rdma: Vec<Value>,
}

impl Host {
    /// Whether the rank runs on this machine without ssh (mlx.launch: only `127.0.0.1`;
    /// nuvec also takes `localhost` and `::1`).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self.ssh.as_str(), "127.0.0.1" | "localhost" | "::1")
    }
}

/// What a launcher hostfile holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LaunchHostfile {
    pub(crate) backend: Option<String>,
    pub(crate) envs: Vec<String>,
    pub(crate) hosts: Vec<Host>,
}

/// The port written into `address` (`10.0.0.1:5000`, `[::1]:5000`, `mac2:5000`), if any. A
/// bare IPv6 address (`fe80::1`) has none.
fn written_port(address: &str) -> Option<&str> {
    if address.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let (host, port) = address.rsplit_once(':')?;
    let bare_ipv6 = host.contains(':') && !host.starts_with('[');
    (!bare_ipv6 && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())).then_some(port)
}

/// Refuses an address with a port: the launcher numbers the ports itself.
fn refuse_port(address: &str, place: &str) -> Result<(), String> {
    match written_port(address) {
        Some(port) => Err(format!(
            "{place} {address:?} has a port ({port}); give addresses without ports: the \
             launcher numbers the ring's ports from --starting-port (-p), one per rank and IP"
        )),
        None => Ok(()),
    }
}

/// `--hosts a,b,c` with each host repeated `repeats` times; a host that is an IP address is
/// also its ring address, and `localhost` listens on `127.0.0.1`.
pub(crate) fn parse_host_list(list: &str, repeats: usize) -> Result<Vec<Host>, String> {
    if repeats == 0 {
        return Err("-n/--repeat-hosts must be at least 1".into());
    }
    let mut hosts = Vec::new();
    for name in list.split(',') {
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("--hosts {list:?} has an empty host name"));
        }
        refuse_port(name, "--hosts entry")?;
        let ips = if name.parse::<std::net::IpAddr>().is_ok() {
            vec![name.to_string()]
        } else if name == "localhost" {
            vec!["127.0.0.1".to_string()]
        } else {
            Vec::new()
        };
        for _ in 0..repeats {
            hosts.push(Host {
                ssh: name.to_string(),
                ips: ips.clone(),
                rdma: Vec::new(),
            });
        }
    }
    Ok(hosts)
}

/// What `nuvec launch --hostfile` takes, and the ring's file it is often confused with.
const TWO_FORMATS: &str = "--hostfile takes mlx.launch's hostfile, a list of hosts such as \
     [{\"ssh\": \"mac1\", \"ips\": [\"10.0.0.1\"]}, {\"ssh\": \"mac2\", \"ips\": [\"10.0.0.2\"]}] \
     (or {\"backend\": ..., \"envs\": [...], \"hosts\": [...]}); a list of address lists such as \
     [[\"10.0.0.1:5000\"], [\"10.0.0.2:5000\"]] is the ring's own MLX_HOSTFILE, which the launcher \
     writes for each rank: run the program with MLX_HOSTFILE and MLX_RANK set instead, or write the \
     launcher's form";

fn parse_host(index: usize, value: &Value) -> Result<Host, String> {
    if value.is_array() {
        return Err(format!(
            "host {index} is a list, not an object: {TWO_FORMATS}"
        ));
    }
    let object = value
        .as_object()
        .ok_or_else(|| format!("host {index} must be an object with \"ssh\""))?;
    let ssh = object
        .get("ssh")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("host {index} has no \"ssh\" name"))?
        .to_string();
    let ips = match object.get("ips") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ips)) => ips
            .iter()
            .map(|ip| {
                let ip = ip
                    .as_str()
                    .ok_or_else(|| format!("host {index}: \"ips\" must hold strings"))?;
                refuse_port(ip, &format!("host {index}'s \"ips\" entry"))?;
                Ok::<_, String>(ip.to_string())
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(format!("host {index}: \"ips\" must be a list")),
    };
    let rdma = match object.get("rdma") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(rdma)) => rdma.clone(),
        Some(_) => return Err(format!("host {index}: \"rdma\" must be a list")),
    };
    Ok(Host { ssh, ips, rdma })
}

/// Parses a launcher hostfile's text.
pub(crate) fn parse_launch_hostfile(text: &str) -> Result<LaunchHostfile, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let (hosts, backend, envs) = match &value {
        Value::Array(hosts) => (hosts.as_slice(), None, Vec::new()),
        Value::Object(object) => {
            let hosts = object
                .get("hosts")
                .and_then(Value::as_array)
                .ok_or("an object hostfile needs a \"hosts\" list")?;
            // mlx.distributed_config writes "" when it leaves the choice to the launcher.
            let backend = match object.get("backend") {
                None | Some(Value::Null) => None,
                Some(Value::String(b)) if b.is_empty() => None,
                Some(Value::String(b)) => Some(b.clone()),
                Some(_) => return Err("\"backend\" must be a string".into()),
            };
            let envs = match object.get("envs") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(envs)) => envs
                    .iter()
                    .map(|e| {
                        e.as_str()
                            .map(str::to_string)
                            .ok_or("\"envs\" must hold strings")
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("\"envs\" must be a list of \"K=V\" strings".into()),
            };
            (hosts.as_slice(), backend, envs)
        }
        _ => return Err("expected a list of hosts or an object with \"hosts\"".into()),
    };
    if hosts.is_empty() {
        return Err("the hostfile lists no hosts".into());
    }
    Ok(LaunchHostfile {
        backend,
        envs,
        hosts: hosts
            .iter()
            .enumerate()
            .map(|(i, h)| parse_host(i, h))
            .collect::<Result<_, _>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_repeat_each_host_and_take_ips_as_addresses() {
        let hosts = parse_host_list("127.0.0.1,mac2", 2).unwrap();
        let names: Vec<&str> = hosts.iter().map(|h| h.ssh.as_str()).collect();
        assert_eq!(names, ["127.0.0.1", "127.0.0.1", "mac2", "mac2"]);
        assert_eq!(hosts[0].ips, ["127.0.0.1"]);
        assert!(hosts[2].ips.is_empty());
        assert!(parse_host_list("a,,b", 1).unwrap_err().contains("empty"));
        assert!(parse_host_list("a", 0).is_err());
    }

    #[test]
    fn localhost_listens_on_the_loopback_address() {
        let hosts = parse_host_list("localhost", 2).unwrap();
        assert!(hosts.iter().all(Host::is_local));
        assert_eq!(hosts[1].ips, ["127.0.0.1"]);
    }

    #[test]
    fn ports_in_hosts_and_hostfile_ips_are_refused_with_the_option_to_use() {
        for list in [
            "10.0.0.1:5000",
            "mac2:22",
            "[::1]:5000",
            "a,127.0.0.1:32323",
        ] {
            let error = parse_host_list(list, 1).unwrap_err();
            assert!(error.contains("--starting-port"), "{list}: {error}");
        }
        for list in ["fe80::1", "::1", "mac2", "10.0.0.1"] {
            assert!(parse_host_list(list, 1).is_ok(), "{list}");
        }
        let file = r#"[{"ssh": "m1", "ips": ["10.0.0.1:5000"]}]"#;
        let error = parse_launch_hostfile(file).unwrap_err();
        assert!(
            error.contains("host 0") && error.contains("--starting-port"),
            "{error}"
        );
    }

    #[test]
    fn a_ring_hostfile_is_refused_with_both_formats_explained() {
        let ring = r#"[["127.0.0.1:5000"], ["127.0.0.1:5001"]]"#;
        let error = parse_launch_hostfile(ring).unwrap_err();
        for needle in ["MLX_HOSTFILE", "\"ssh\"", "MLX_RANK"] {
            assert!(error.contains(needle), "{needle}: {error}");
        }
    }

    #[test]
    fn both_hostfile_forms_of_mlx_launch_parse() {
        let list = r#"[{"ssh": "m1", "ips": ["10.0.0.1"], "rdma": [null, "rdma_en2"]},
                       {"ssh": "m2", "ips": ["10.0.0.2"], "rdma": ["rdma_en2", null]}]"#;
        let parsed = parse_launch_hostfile(list).unwrap();
        assert_eq!(parsed.hosts.len(), 2);
        assert_eq!(parsed.hosts[1].rdma[0], Value::from("rdma_en2"));
        let object = r#"{"backend": "jaccl", "envs": ["A=1"], "hosts": [{"ssh": "m1"}]}"#;
        let parsed = parse_launch_hostfile(object).unwrap();
        assert_eq!(parsed.backend.as_deref(), Some("jaccl"));
        assert_eq!(parsed.envs, ["A=1"]);
        assert!(parsed.hosts[0].ips.is_empty());
        let unset = r#"{"backend": "", "envs": [], "hosts": [{"ssh": "m1"}]}"#;
        assert_eq!(parse_launch_hostfile(unset).unwrap().backend, None);
    }

    #[test]
    fn malformed_hostfiles_say_what_is_wrong() {
        for (text, expected) in [
            ("{", "not JSON"),
            ("[]", "no hosts"),
            ("[{\"ips\": []}]", "host 0 has no \"ssh\""),
            (
                "[{\"ssh\": \"a\", \"ips\": \"x\"}]",
                "\"ips\" must be a list",
            ),
            ("{\"hosts\": 3}", "\"hosts\" list"),
        ] {
            let error = parse_launch_hostfile(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
