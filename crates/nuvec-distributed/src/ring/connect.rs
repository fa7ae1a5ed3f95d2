//! Forming the ring's connections: every rank listens on its first hostfile address and
//! connects to every higher rank (a full mesh, so send/recv work between any two ranks).
//! A hello frame carries each side's rank and group size, so a stray connection is dropped
//! and ranks that disagree on the group get an error saying so.

use super::frame::{Header, Kind, HEADER_BYTES};
use super::peer::Peer;
use crate::hostfile::Address;
use crate::Options;
use nuvec_core::{DType, Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long a connector waits between attempts while its peer is not listening yet.
const RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// How long an accepted connection may take to introduce itself before it is dropped.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

fn init_error(rank: Option<usize>, reason: String) -> Error {
    Error::Distributed {
        op: "init".into(),
        rank,
        reason,
    }
}

fn hello(rank: usize, size: usize) -> [u8; HEADER_BYTES] {
    Header {
        kind: Kind::Hello,
        dtype: DType::U8,
        sequence: rank as u64,
        bytes: size as u64,
    }
    .encode()
}

/// Reads a hello frame: the sender's (rank, size).
fn read_hello(
    stream: &mut TcpStream,
    timeout: Duration,
) -> std::result::Result<(usize, usize), String> {
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut raw = [0u8; HEADER_BYTES];
    stream
        .read_exact(&mut raw)
        .map_err(|e| format!("no hello ({e})"))?;
    let header = Header::decode(&raw)?;
    if header.kind != Kind::Hello {
        return Err(format!("expected a hello frame, got {}", header.describe()));
    }
    Ok((header.sequence as usize, header.bytes as usize))
}

/// Binds this rank's listener on the first address that resolves.
fn listen(address: &Address, rank: usize) -> Result<TcpListener> {
    let candidates = address
        .resolve()
        .map_err(|reason| init_error(None, format!("rank {rank}: {reason}")))?;
    let mut last = String::from("no address");
    for candidate in candidates {
        match TcpListener::bind(candidate) {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                return Err(init_error(
                    None,
                    format!("rank {rank} cannot listen on {address}: the port is already in use by another process"),
                ))
            }
            Err(e) => last = format!("{candidate}: {e}"),
        }
    }
    Err(init_error(
        None,
        format!("rank {rank} cannot listen on {address}: {last}"),
    ))
}

/// Connects to `peer`'s address, retrying until `deadline` while it is not listening yet.
fn connect(address: &Address, peer: usize, deadline: Instant) -> Result<TcpStream> {
    loop {
        let candidates = address
            .resolve()
            .map_err(|reason| init_error(Some(peer), reason))?;
        for candidate in &candidates {
            let remaining = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10));
            if let Ok(stream) =
                TcpStream::connect_timeout(candidate, remaining.min(Duration::from_secs(5)))
            {
                return Ok(stream);
            }
        }
        if Instant::now() >= deadline {
            return Err(init_error(
                Some(peer),
                format!("could not connect to {address} before the timeout: the rank never started listening"),
            ));
        }
        std::thread::sleep(RETRY_INTERVAL);
    }
}

/// Connects this rank to every other rank; entry `j` of the result is the connection to rank
/// `j` (`None` for this rank itself).
pub(crate) fn form_mesh(
    nodes: &[Vec<Address>],
    rank: usize,
    options: &Options,
) -> Result<Vec<Option<Peer>>> {
    let size = nodes.len();
    let deadline = Instant::now() + options.timeout;
    let own = nodes[rank]
        .first()
        .ok_or_else(|| init_error(None, format!("rank {rank} has no address in the hostfile")))?;
    let listener = listen(own, rank)?;
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();

    // Introduce ourselves to every higher rank (their listeners queue us until they accept).
    for (peer, addresses) in nodes.iter().enumerate().skip(rank + 1) {
        let address = addresses
            .first()
            .ok_or_else(|| init_error(Some(peer), "no address in the hostfile".into()))?;
        let mut stream = connect(address, peer, deadline)?;
        stream
            .write_all(&hello(rank, size))
            .map_err(|e| init_error(Some(peer), format!("sending hello: {e}")))?;
        streams[peer] = Some(stream);
    }

    // Accept every lower rank; drop connections that are not a nuvec peer of this group.
    listener
        .set_nonblocking(true)
        .map_err(|e| init_error(None, e.to_string()))?;
    let mut missing: Vec<usize> = (0..rank).collect();
    while !missing.is_empty() {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| init_error(None, e.to_string()))?;
                let Ok((peer, peer_size)) = read_hello(&mut stream, HELLO_TIMEOUT) else {
                    continue; // A stray connection: not a nuvec rank.
                };
                if peer_size != size {
                    let _ = stream.write_all(&hello(rank, size));
                    return Err(init_error(
                        Some(peer),
                        format!("rank {peer} believes the group has {peer_size} ranks, this rank (rank {rank}) has {size}"),
                    ));
                }
                if peer >= rank || !missing.contains(&peer) {
                    return Err(init_error(
                        Some(peer),
                        format!("a second process claims rank {peer} (or a rank connected out of order): check MLX_RANK on every process"),
                    ));
                }
                stream
                    .write_all(&hello(rank, size))
                    .map_err(|e| init_error(Some(peer), format!("answering hello: {e}")))?;
                missing.retain(|&m| m != peer);
                streams[peer] = Some(stream);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(init_error(
                        missing.first().copied(),
                        format!(
                            "timed out after {:.1} s waiting for ranks {missing:?} to connect",
                            options.timeout.as_secs_f64()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(init_error(None, format!("accepting connections: {e}"))),
        }
    }

    // Read the answers of the higher ranks.
    for (peer, slot) in streams.iter_mut().enumerate().skip(rank + 1) {
        let Some(stream) = slot.as_mut() else {
            continue;
        };
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        let (answer_rank, answer_size) =
            read_hello(stream, remaining).map_err(|reason| init_error(Some(peer), reason))?;
        if answer_size != size {
            return Err(init_error(
                Some(peer),
                format!("rank {peer} believes the group has {answer_size} ranks, this rank (rank {rank}) has {size}"),
            ));
        }
        if answer_rank != peer {
            return Err(init_error(
                Some(peer),
                format!("the process at rank {peer}'s address says it is rank {answer_rank}"),
            ));
        }
    }
    streams
        .into_iter()
        .enumerate()
        .map(|(peer, stream)| match stream {
            Some(stream) => Peer::new(peer, stream)
                .map(Some)
                .map_err(|e| init_error(Some(peer), e.to_string())),
            None => Ok(None),
        })
        .collect()
}
