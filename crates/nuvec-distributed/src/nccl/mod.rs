//! The NCCL backend. Its rendezvous needs no GPU: reading mlx.launch's
//! NCCL environment ([`Launch`]) and handing rank 0's NCCL unique id to every rank
//! ([`share_unique_id`]).
//!
//! MLX's NCCL backend sends the id over a plain socket at `NCCL_HOST_IP:NCCL_PORT`, so anyone
//! who can reach the port can join the communicator (or feed ranks a forged id). nuvec forms
//! the same star with the ring's handshake: with a key (`NUVEC_DISTRIBUTED_KEY`) every
//! connection proves it, a wrong key is refused and named, and the key never appears in a
//! message; every wait ends within the group's timeout, naming the rank that did not come.
//! The communicator (`communicator.rs`, the `nccl` feature) is made on top of it.

use crate::hostfile::Address;
use crate::Options;
use nuvec_core::{Error, Result};
use std::io::{Read, Write};

/// Bytes of an NCCL unique id (`ncclUniqueId`).
pub const ID_BYTES: usize = 128;

fn nccl_error(rank: Option<usize>, reason: String) -> Error {
    Error::Distributed {
        op: "nccl init".into(),
        rank,
        reason,
    }
}

/// One rank's place in a group launched for NCCL, from mlx.launch's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank (`MLX_RANK`).
    pub rank: usize,
    /// The group's size (`MLX_WORLD_SIZE`).
    pub size: usize,
    /// Where rank 0 listens (`NCCL_HOST_IP`, `NCCL_PORT`).
    pub host: Address,
}

impl Launch {
    /// The launch the process environment describes, `None` when `NCCL_HOST_IP` is not set.
    pub fn from_env() -> Result<Option<Launch>> {
        Launch::from_vars(&|name| std::env::var(name).ok())
    }

    /// [`Launch::from_env`] over `env`; an error names the variable that is missing or wrong.
    ///
    /// ```
    /// use nuvec_distributed::nccl::Launch;
    /// let env = |name: &str| match name {
    ///     "NCCL_HOST_IP" => Some("10.0.0.1".to_string()),
    ///     "NCCL_PORT" => Some("12345".to_string()),
    ///     "MLX_RANK" => Some("1".to_string()),
    ///     "MLX_WORLD_SIZE" => Some("2".to_string()),
    ///     _ => None,
    /// };
    /// let launch = Launch::from_vars(&env)?.unwrap();
    /// assert_eq!((launch.rank, launch.size, launch.host.to_string()), (1, 2, "10.0.0.1:12345".to_string()));
    /// # Ok::<(), nuvec_core::Error>(())
    /// ```
    pub fn from_vars(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
        let Some(ip) = env("NCCL_HOST_IP") else {
            return Ok(None);
        };
        let number = |name: &str| -> Result<usize> {
            let text = env(name).ok_or_else(|| {
                nccl_error(None, format!("NCCL_HOST_IP is set but {name} is not"))
            })?;
            text.trim()
                .parse()
                .map_err(|_| nccl_error(None, format!("{name} must be a number, got {text:?}")))
        };
        let (rank, size) = (number("MLX_RANK")?, number("MLX_WORLD_SIZE")?);
        if size == 0 || rank >= size {
            return Err(nccl_error(
                None,
                format!("MLX_RANK={rank} is not a rank of MLX_WORLD_SIZE={size}"),
            ));
        }
        let port = number("NCCL_PORT")?;
        let port = u16::try_from(port)
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| nccl_error(None, format!("NCCL_PORT must be 1 to 65535, got {port}")))?;
        let host = ip
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return Err(nccl_error(None, "NCCL_HOST_IP is empty".into()));
        }
        Ok(Some(Launch {
            rank,
            size,
            host: Address { host, port },
        }))
    }
}

/// Hands rank 0's NCCL unique id to every rank: rank 0 passes `Some(id)` and listens at
/// `launch.host`, every other rank passes `None` and connects there. Every rank returns the
/// id. Connections are handshaken as the ring's (authenticated by the options' key), and
/// every wait ends within the options' timeout with an error naming the rank it waited for.
pub fn share_unique_id(
    launch: &Launch,
    id: Option<[u8; ID_BYTES]>,
    options: &Options,
) -> Result<[u8; ID_BYTES]> {
    let rank = launch.rank;
    options.validate().map_err(|e| nccl_error(Some(rank), e))?;
    match (rank, id) {
        (0, None) => {
            return Err(nccl_error(
                Some(0),
                "rank 0 must bring the unique id it shares".into(),
            ))
        }
        (r, Some(_)) if r != 0 => {
            return Err(nccl_error(
                Some(r),
                "only rank 0 brings the unique id; the others receive it".into(),
            ))
        }
        _ => {}
    }
    let streams = crate::tcp::form_star(&launch.host, rank, launch.size, options)?;
    if let Some(id) = id {
        for (peer, stream) in streams.iter().enumerate().skip(1) {
            let mut stream = stream.as_ref().expect("rank 0 holds every connection");
            stream
                .set_write_timeout(Some(options.timeout))
                .and_then(|()| stream.write_all(&id))
                .map_err(|e| {
                    nccl_error(
                        Some(0),
                        format!("sending the unique id to rank {peer}: {e}"),
                    )
                })?;
        }
        return Ok(id);
    }
    let mut stream = streams[0].as_ref().expect("a connection to rank 0");
    let mut received = [0u8; ID_BYTES];
    stream
        .set_read_timeout(Some(options.timeout))
        .and_then(|()| stream.read_exact(&mut received))
        .map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    "it sent nothing within the timeout (NUVEC_DISTRIBUTED_TIMEOUT)".to_string()
                }
                std::io::ErrorKind::UnexpectedEof => "its connection closed".to_string(),
                _ => e.to_string(),
            };
            nccl_error(Some(rank), format!("waiting for rank 0's unique id: {why}"))
        })?;
    Ok(received)
}

#[cfg(feature = "nccl")]
pub mod communicator;
#[cfg(test)]
mod tests;
