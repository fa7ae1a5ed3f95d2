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

/// `--hosts a,b,c` with each host repeated `repeats` times; a host that is an IP address is
/// also its ring address.
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
        let ips = if name.parse::<std::net::IpAddr>().is_ok() {
            vec![name.to_string()]
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

fn parse_host(index: usize, value: &Value) -> Result<Host, String> {
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
                ip.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("host {index}: \"ips\" must hold strings"))
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
            let backend = match object.get("backend") {
                None | Some(Value::Null) => None,
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
