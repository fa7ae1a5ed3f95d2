//! MLX's ring hostfile: a JSON list with one entry per rank, each a list of `"host:port"`
//! addresses that rank listens on. nuvec also accepts IPv6 (`"[::1]:5000"`) and host names,
//! and treats the empty file `mlx.launch -n 1` writes as a group of one.

use nuvec_core::{Error, Result};
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

/// One `host:port` address of a rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// The host: an IPv4 or IPv6 address (without brackets) or a host name.
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl Address {
    /// Parses `"host:port"`, `"[v6]:port"`; the port is after the last colon.
    pub fn parse(text: &str) -> std::result::Result<Address, String> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} has no :port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{text:?} has an invalid port {port:?}"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(format!("{text:?} has no host"));
        }
        if host.contains(':') && !text.starts_with('[') {
            return Err(format!(
                "{text:?}: write IPv6 addresses in brackets, as \"[::1]:5000\""
            ));
        }
        Ok(Address {
            host: host.to_string(),
            port,
        })
    }

    /// Resolves the address (DNS for host names).
    pub fn resolve(&self) -> std::result::Result<Vec<SocketAddr>, String> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map(|addrs| addrs.collect())
            .map_err(|e| format!("cannot resolve {self}: {e}"))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

fn hostfile_error(reason: String) -> Error {
    Error::Distributed {
        op: "init".into(),
        rank: None,
        reason,
    }
}

/// Parses a hostfile's text: one entry per rank, each a list of addresses (or a single
/// address string). Empty text is a group of one with no addresses.
pub fn parse_hostfile(text: &str) -> Result<Vec<Vec<Address>>> {
    if text.trim().is_empty() {
        return Ok(vec![Vec::new()]);
    }
    let json: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| hostfile_error(format!("the hostfile is not valid JSON: {e}")))?;
    let ranks = json.as_array().ok_or_else(|| {
        hostfile_error("the hostfile must be a JSON list, one entry per rank".into())
    })?;
    if ranks.is_empty() {
        return Err(hostfile_error("the hostfile lists no ranks".into()));
    }
    ranks
        .iter()
        .enumerate()
        .map(|(rank, entry)| {
            let items: Vec<&serde_json::Value> = match entry {
                serde_json::Value::Array(list) => list.iter().collect(),
                single @ serde_json::Value::String(_) => vec![single],
                other => {
                    return Err(hostfile_error(format!(
                        "rank {rank}: expected a list of \"host:port\" strings, got {other}"
                    )))
                }
            };
            if items.is_empty() && ranks.len() > 1 {
                return Err(hostfile_error(format!("rank {rank} has no address")));
            }
            items
                .into_iter()
                .map(|item| {
                    let text = item.as_str().ok_or_else(|| {
                        hostfile_error(format!("rank {rank}: {item} is not a string"))
                    })?;
                    Address::parse(text)
                        .map_err(|reason| hostfile_error(format!("rank {rank}: {reason}")))
                })
                .collect()
        })
        .collect()
}

/// Reads and parses the hostfile at `path`.
pub fn read_hostfile(path: &str) -> Result<Vec<Vec<Address>>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        hostfile_error(format!(
            "cannot read the hostfile {path:?} (MLX_HOSTFILE): {e}"
        ))
    })?;
    parse_hostfile(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mlx_hostfiles_with_ipv6_and_names() {
        let nodes = parse_hostfile(
            r#"[["127.0.0.1:5000", "127.0.0.1:5001"], ["[::1]:6000"], ["localhost:7000"]]"#,
        )
        .unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(
            nodes[0][1],
            Address {
                host: "127.0.0.1".into(),
                port: 5001
            }
        );
        assert_eq!(nodes[1][0].host, "::1");
        assert_eq!(nodes[1][0].to_string(), "[::1]:6000");
        assert_eq!(nodes[2][0].host, "localhost");
    }

    #[test]
    fn the_empty_file_of_mlx_launch_n1_is_a_group_of_one() {
        assert_eq!(parse_hostfile("\n").unwrap(), vec![Vec::<Address>::new()]);
    }

    #[test]
    fn bad_hostfiles_give_errors_naming_the_rank() {
        let error = parse_hostfile(r#"[["127.0.0.1:5000"], ["127.0.0.1"]]"#)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rank 1") && error.contains("no :port"),
            "{error}"
        );
        assert!(parse_hostfile("{").is_err());
        assert!(parse_hostfile("[]").is_err());
        assert!(parse_hostfile(r#"[["::1:5000"]]"#)
            .unwrap_err()
            .to_string()
            .contains("brackets"));
    }
}
