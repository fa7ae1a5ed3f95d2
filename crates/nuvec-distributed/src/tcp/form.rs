//! Forming a group's TCP connections: every rank listens on its hostfile addresses and
//! connects to every other rank (a full mesh, so send/recv work between any two ranks), once
//! per address both ranks list and direction: the lower rank of each pair connects first.
//! Each connection opens with the handshake of `handshake.rs` (ranks, group size and, with a
//! key, proofs from both ends); `accept.rs` takes the connections that arrive.

use super::accept::Acceptor;
use super::connection::{Connection, Poll, SPIN, YIELD};
use super::handshake::{connect_side, Local};
use super::progress::{init_error, Progress};
use crate::hostfile::Address;
use crate::options::Polling;
use crate::Options;
use nuvec_core::Result;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connector waits between attempts while its peer is not listening yet.
const RETRY_INTERVAL: Duration = Duration::from_millis(50);

/// Binds this rank's listener on the first address that resolves.
fn listen(address: &Address, rank: usize, progress: &Progress) -> Result<TcpListener> {
    let listener = bind(address, rank)?;
    progress.log(|| format!("listening on {address}"));
    Ok(listener)
}

fn bind(address: &Address, rank: usize) -> Result<TcpListener> {
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
fn connect(
    address: &Address,
    peer: usize,
    deadline: Instant,
    progress: &Progress,
) -> Result<TcpStream> {
    let began = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
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
                progress.log(|| {
                    format!(
                        "connected to rank {peer} at {candidate} ({attempts} attempt(s), {})",
                        progress.since(began)
                    )
                });
                return Ok(stream);
            }
        }
        if Instant::now() >= deadline {
            return Err(init_error(
                Some(peer),
                format!(
                    "could not connect to {address} within {}: the rank never started listening \
                     there (is it running, with this hostfile?)",
                    progress.gave_up()
                ),
            ));
        }
        progress.waiting(|| format!("rank {peer} at {address}"));
        std::thread::sleep(RETRY_INTERVAL);
    }
}

/// How many connections ranks `a` and `b` share: one per address both list (MLX's hostfile
/// gives each rank one or more addresses to spread large transfers over).
pub(crate) fn connections_between(nodes: &[Vec<Address>], a: usize, b: usize) -> usize {
    nodes[a].len().min(nodes[b].len()).max(1)
}

/// Connects this rank to every other rank, one connection per direction: entry `j` of the
/// result holds this rank's connections to rank `j`, first the `m` it opened (to rank `j`'s
/// addresses, in order), on which it writes to rank `j`, then the `m` that rank `j` opened
/// (arriving on this rank's addresses, in order), on which it reads from rank `j`, where `m`
/// is [`connections_between`]. Each socket then carries data one way only, so a rank that
/// sends and receives at once (the two ranks of a ring, every exchange of a doubling) never
/// takes the lock of the socket its peer's data arrives on.
///
/// Formation runs in two phases: first every rank connects to the higher ranks and accepts
/// the lower ones; once a rank has its lower ranks' connections, it connects back to them
/// and accepts the higher ranks' connections back. A group that cannot form (keys, sizes or
/// ranks that disagree, a rank that never comes) thus fails in the first phase, where each
/// pair has one connecting and one accepting end.
pub(crate) fn form_mesh(
    nodes: &[Vec<Address>],
    rank: usize,
    options: &Options,
    polling: Polling,
) -> Result<Vec<Vec<Connection>>> {
    let size = nodes.len();
    let deadline = Instant::now() + options.timeout;
    let progress = Arc::new(Progress::new(rank, options.timeout));
    let local = Local {
        rank,
        size,
        key: options.key_material().cloned(),
    };
    if nodes[rank].is_empty() {
        return Err(init_error(
            None,
            format!("rank {rank} has no address in the hostfile"),
        ));
    }
    for (peer, addresses) in nodes.iter().enumerate() {
        if addresses.is_empty() {
            return Err(init_error(Some(peer), "no address in the hostfile".into()));
        }
    }
    // This rank listens on each of its addresses that another rank connects to.
    let mut listeners = Vec::new();
    for (index, own) in nodes[rank].iter().enumerate() {
        let used =
            (0..size).any(|other| other != rank && connections_between(nodes, other, rank) > index);
        if index > 0 && !used {
            break;
        }
        listeners.push(listen(own, rank, &progress)?);
    }
    let mut streams: Vec<Vec<Option<TcpStream>>> = (0..size)
        .map(|peer| {
            (0..2 * connections_between(nodes, rank, peer))
                .map(|_| None)
                .collect()
        })
        .collect();
    let lower: Vec<usize> = (0..rank).collect();
    let higher: Vec<usize> = (rank + 1..size).collect();
    for (accept_from, connect_to) in [(&lower, &higher), (&higher, &lower)] {
        let acceptors = listeners
            .into_iter()
            .enumerate()
            .map(|(index, listener)| {
                let expected = accept_from
                    .iter()
                    .copied()
                    .filter(|&other| connections_between(nodes, other, rank) > index)
                    .collect();
                Acceptor::start(listener, local.clone(), expected, deadline, &progress)
            })
            .collect::<Result<Vec<_>>>()?;
        for &peer in connect_to {
            for (index, address) in nodes[peer]
                .iter()
                .take(connections_between(nodes, rank, peer))
                .enumerate()
            {
                let mut stream = connect(address, peer, deadline, &progress)?;
                let began = Instant::now();
                connect_side(&mut stream, &local, peer, deadline)
                    .map_err(|reason| init_error(Some(peer), reason))?;
                progress.log(|| {
                    format!(
                        "handshake with rank {peer} done ({})",
                        progress.since(began)
                    )
                });
                streams[peer][index] = Some(stream);
            }
        }
        listeners = Vec::new();
        for (index, acceptor) in acceptors.into_iter().enumerate() {
            let (accepted, listener) = acceptor.finish()?;
            for (peer, stream) in accepted {
                let opened = connections_between(nodes, rank, peer);
                streams[peer][opened + index] = Some(stream);
            }
            listeners.push(listener);
        }
    }
    streams[rank].clear();
    progress.log(|| {
        let count: usize = streams.iter().map(Vec::len).sum();
        format!("group of {size} formed with {count} connection(s)")
    });
    let poll = read_poll(nodes, rank, polling);
    streams
        .into_iter()
        .enumerate()
        .map(|(peer, connections)| {
            connections
                .into_iter()
                .map(|stream| {
                    let stream = stream.ok_or_else(|| {
                        init_error(Some(peer), "a connection was not formed".into())
                    })?;
                    Connection::new(peer, stream, poll)
                        .map_err(|e| init_error(Some(peer), e.to_string()))
                })
                .collect()
        })
        .collect()
}

/// Forms a star through `coordinator` (JACCL's side channel): rank 0 listens there and
/// accepts every other rank, each of which connects and handshakes as the ring's ranks do (with
/// the key's proofs when one is set). Entry `j` of rank 0's result is its connection to rank
/// `j`; every other rank gets its connection to rank 0 in entry 0.
#[cfg(feature = "jaccl")]
pub(crate) fn form_star(
    coordinator: &Address,
    rank: usize,
    size: usize,
    options: &Options,
) -> Result<Vec<Option<TcpStream>>> {
    let deadline = Instant::now() + options.timeout;
    let progress = Arc::new(Progress::new(rank, options.timeout));
    let local = Local {
        rank,
        size,
        key: options.key_material().cloned(),
    };
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    if rank == 0 {
        let acceptor = Acceptor::start(
            listen(coordinator, rank, &progress)?,
            local,
            (1..size).collect(),
            deadline,
            &progress,
        )?;
        for (peer, stream) in acceptor.finish()?.0 {
            streams[peer] = Some(stream);
        }
    } else {
        let mut stream = connect(coordinator, 0, deadline, &progress)?;
        connect_side(&mut stream, &local, 0, deadline).map_err(|reason| {
            init_error(Some(0), format!("the coordinator {coordinator}: {reason}"))
        })?;
        streams[0] = Some(stream);
    }
    Ok(streams)
}

/// How reads wait before sleeping, as `polling` says; [`Polling::Auto`]: [`SPIN`] when this
/// machine has a core for each of the group's ranks on it (ranks whose first address has this
/// rank's host), else [`YIELD`], because spinning ranks would take the cores their peers need.
fn read_poll(nodes: &[Vec<Address>], rank: usize, polling: Polling) -> Poll {
    match polling {
        Polling::Auto => {
            let host = nodes[rank].first().map(|a| a.host.as_str());
            let here = nodes
                .iter()
                .filter(|addresses| addresses.first().map(|a| a.host.as_str()) == host)
                .count();
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if here <= cores {
                SPIN
            } else {
                YIELD
            }
        }
        Polling::Spin => SPIN,
        Polling::Yield => YIELD,
        Polling::Off => Poll::Off,
    }
}

#[cfg(test)]
mod tests {
    use super::super::connection_tests::free_port;
    use super::*;

    fn nodes(hosts: &[&str]) -> Vec<Vec<Address>> {
        hosts
            .iter()
            .enumerate()
            .map(|(i, h)| vec![Address::parse(&format!("{h}:{}", 5000 + i)).unwrap()])
            .collect()
    }

    #[test]
    fn reads_spin_only_when_the_ranks_here_have_a_core_each_and_else_yield() {
        let auto = Polling::Auto;
        assert_eq!(read_poll(&nodes(&["10.0.0.1", "10.0.0.2"]), 0, auto), SPIN);
        let crowded: Vec<&str> = vec!["127.0.0.1"; 4096];
        assert_eq!(read_poll(&nodes(&crowded), 3, auto), YIELD);
        assert_eq!(read_poll(&nodes(&crowded), 3, Polling::Spin), SPIN);
    }

    #[test]
    fn every_pair_gets_a_connection_each_way_per_shared_address() {
        // Three ranks; ranks 0 and 2 list two addresses, rank 1 one.
        let addresses = [2, 1, 2];
        let nodes: Vec<Vec<Address>> = addresses
            .iter()
            .map(|&count| {
                (0..count)
                    .map(|_| Address::parse(&format!("127.0.0.1:{}", free_port())).unwrap())
                    .collect()
            })
            .collect();
        let options = Options::with_timeout(Duration::from_secs(10));
        let formed: Vec<Vec<Vec<Connection>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3)
                .map(|rank| {
                    let (nodes, options) = (&nodes, &options);
                    scope.spawn(move || form_mesh(nodes, rank, options, Polling::Auto).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, peers) in formed.iter().enumerate() {
            assert!(peers[rank].is_empty());
            for (other, connections) in peers.iter().enumerate().filter(|(o, _)| *o != rank) {
                let shared = addresses[rank].min(addresses[other]);
                assert_eq!(connections.len(), 2 * shared, "rank {rank} to {other}");
                assert!(connections.iter().all(|c| c.rank == other));
            }
        }
        // What a rank writes on the connections it opened arrives on those its peer reads.
        for (from, to) in [(0, 2), (2, 0), (1, 2), (0, 1)] {
            let shared = addresses[from].min(addresses[to]);
            for index in 0..shared {
                let message = [from as u8, to as u8, index as u8, 7];
                formed[from][to][index]
                    .write_through("test", &[&message], usize::MAX, Duration::from_secs(5))
                    .unwrap();
                let mut got = [0u8; 4];
                formed[to][from][shared + index]
                    .read_exact("test", &mut got, Duration::from_secs(5))
                    .unwrap();
                assert_eq!(got, message, "{from} -> {to} on connection {index}");
            }
        }
    }
}
