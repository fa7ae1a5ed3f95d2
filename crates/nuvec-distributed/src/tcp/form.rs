//! Forming a group's TCP connections: every rank listens on its hostfile addresses; ring
//! neighbours connect (the left one opens), and so do other pairs where one can reach the
//! other (`pairs.rs` says which). Each connection opens with the handshake of `handshake.rs`
//! (ranks, group size and, with a key, proofs from both ends); `accept.rs` takes the
//! connections that arrive.

use super::accept::{Acceptor, Expected};
use super::connection::{Connection, Poll, SPIN, YIELD};
use super::formed::{agree, Formed};
use super::handshake::{connect_side, incarnation, Local};
use super::pairs::{connections_between, has_optional_pairs, neighbours, opener};
use super::progress::{init_error, Progress};
use crate::hostfile::Address;
use crate::options::Polling;
use crate::Options;
use nuvec_core::Result;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connector waits between attempts while its peer is not listening yet.
const RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// How long a rank waits for an answer from a rank it need not reach (one that is not its
/// ring neighbour) before it takes the address as unreachable from here.
const OPTIONAL_CONNECT: Duration = Duration::from_secs(3);

/// Binds this rank's listener on the first address that resolves.
fn listen(address: &Address, rank: usize, progress: &Progress) -> Result<TcpListener> {
    let listener = bind(address, rank)?;
    progress.log(|| format!("listening on {address}"));
    Ok(listener)
}

/// A port free now on `address`'s host (the kernel's pick, released at once): where a group
/// split off this one listens.
pub(crate) fn free_port(address: &Address, rank: usize) -> Result<u16> {
    let any = Address {
        host: address.host.clone(),
        port: 0,
    };
    let listener = bind(&any, rank)?;
    let port = listener.local_addr().map_err(|e| {
        init_error(
            None,
            format!("rank {rank} cannot read its listening port: {e}"),
        )
    })?;
    Ok(port.port())
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

/// Whether the formation is abandoned: an acceptor of this rank failed, and its error (a
/// refused rank, say) is the one to report.
type Abandoned<'a> = &'a (dyn Fn() -> bool + Sync);

/// Connects to `peer`'s address, retrying until `deadline` while it is not listening yet (or
/// until the formation is abandoned).
fn connect(
    address: &Address,
    peer: usize,
    (deadline, abandoned): (Instant, Abandoned<'_>),
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
        if abandoned() {
            return Err(init_error(Some(peer), "formation abandoned".into()));
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

/// Connects rank `rank` to the others: entry `j` of the result holds its connections to rank
/// `j`, first the `m` it writes on (one per address both list, in order), then the `m` it
/// reads from, where `m` is [`connections_between`]; entry `j` is empty where the two ranks
/// could not connect (see below). Each socket carries data one way only, so a rank that sends
/// and receives at once (the two ranks of a ring, every exchange of a doubling) never takes
/// the lock of the socket its peer's data arrives on.
///
/// One rank of each pair opens both directions' connections ([`super::pairs::opener`]): for each
/// address of the other rank, first the one it writes on, then the one it reads from, each
/// with the handshake done before the next is opened, so the accepting rank tells them apart
/// by their order (it hands over an accepted connection before the verdict that lets the
/// opener go on). Ring neighbours must connect; other pairs connect where the opener can
/// reach its peer's address, and from four ranks on the ranks then tell each other round the
/// ring which pairs did, so both ends of every pair agree.
pub(crate) fn form_mesh(
    nodes: &[Vec<Address>],
    rank: usize,
    options: &Options,
    polling: Polling,
) -> Result<Mesh> {
    let size = nodes.len();
    let deadline = Instant::now() + options.timeout;
    let progress = Arc::new(Progress::new(rank, options.timeout));
    let local = Local {
        rank,
        size,
        key: options.key_material().cloned(),
        incarnation: incarnation().map_err(|reason| init_error(None, reason))?,
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
    let between = |a: usize, b: usize| connections_between(nodes, a, b);
    let others = || (0..size).filter(move |&peer| peer != rank);
    let openers: Vec<usize> = others().filter(|&p| opener(size, p, rank) == p).collect();
    // This rank listens on each of its addresses that another rank connects to.
    let mut acceptors = Vec::new();
    for (index, own) in nodes[rank].iter().enumerate() {
        let mut expected = Expected::default();
        for &peer in openers.iter().filter(|&&p| between(p, rank) > index) {
            let list = match neighbours(size, peer, rank) {
                true => &mut expected.required,
                false => &mut expected.optional,
            };
            list.extend([peer, peer]);
        }
        let left = (rank + size - 1) % size;
        if index == 0 && has_optional_pairs(size) {
            // The left neighbour's relay connections, should the group not be a full mesh.
            expected.optional.extend([left, left]);
        }
        if index > 0 && expected.required.is_empty() && expected.optional.is_empty() {
            break;
        }
        let listener = listen(own, rank, &progress)?;
        acceptors.push(Acceptor::start(
            listener,
            local.clone(),
            expected,
            deadline,
            &progress,
        )?);
    }
    let mut formed = Formed::new(nodes, rank);
    let opened: Vec<usize> = others()
        .filter(|&p| opener(size, rank, p) == rank)
        .collect();
    let (required, optional): (Vec<usize>, Vec<usize>) = opened
        .iter()
        .partition(|&&peer| neighbours(size, rank, peer));
    let failed: Vec<_> = acceptors.iter().map(Acceptor::failed).collect();
    let abandoned = || failed.iter().any(|flag| flag.load(Ordering::Relaxed));
    let until = (deadline, &abandoned as Abandoned<'_>);
    let mut connecting = || -> Result<Vec<Reached>> {
        for &peer in &required {
            for (index, address) in nodes[peer].iter().take(between(rank, peer)).enumerate() {
                for way in 0..2 {
                    let mut stream = connect(address, peer, until, &progress)?;
                    handshake(&mut stream, &local, peer, deadline, &progress)?;
                    formed.opened(peer, index, way, stream);
                }
            }
        }
        open_all_optional(nodes, &optional, (&local, until), &progress)
    };
    let reached = match connecting() {
        Ok(reached) => reached,
        Err(error) => return Err(acceptor_error(&mut acceptors).unwrap_or(error)),
    };
    let mut reachable = vec![false; size];
    for (peer, [to, from]) in reached.into_iter().flatten() {
        reachable[peer] = true;
        formed.opened(peer, 0, 0, to);
        formed.opened(peer, 0, 1, from);
    }
    // The ring neighbours' connections first: the agreement goes round on them.
    for (index, acceptor) in acceptors.iter_mut().enumerate() {
        let wanted = openers
            .iter()
            .filter(|&&p| neighbours(size, p, rank) && between(p, rank) > index)
            .count();
        let mut arrived = 0;
        while arrived < 2 * wanted {
            let (peer, stream) = acceptor.next()?.ok_or_else(|| {
                init_error(None, "the acceptor ended before the ring formed".into())
            })?;
            arrived += usize::from(neighbours(size, peer, rank));
            formed.accepted(peer, index, stream)?;
        }
    }
    let mut complete = true;
    if has_optional_pairs(size) {
        let table = agree(&mut formed, &reachable, deadline)?;
        complete = (0..size).all(|a| {
            (a + 1..size).all(|b| {
                let from = opener(size, a, b);
                neighbours(size, a, b) || table[from * size + (a + b - from)] == 1
            })
        });
        for (index, acceptor) in acceptors.iter().enumerate() {
            let mut settled: Vec<usize> = openers
                .iter()
                .filter(|&&p| !neighbours(size, p, rank) && between(p, rank) > index)
                .filter(|&&p| table[p * size + rank] == 1)
                .flat_map(|&p| [p, p])
                .collect();
            if index == 0 && !complete {
                let left = (rank + size - 1) % size;
                settled.extend([left, left]);
            }
            acceptor.settle(settled);
        }
        if !complete {
            // Messages between unconnected ranks go round the ring on connections of their
            // own (`ring/relay.rs`), opened like the ring's.
            let right = (rank + 1) % size;
            for _ in 0..2 {
                let mut stream = connect(&nodes[right][0], right, until, &progress)?;
                handshake(&mut stream, &local, right, deadline, &progress)?;
                formed.relay_opened.push(stream);
            }
        }
    }
    for (index, acceptor) in acceptors.iter_mut().enumerate() {
        while let Some((peer, stream)) = acceptor.next()? {
            formed.accepted(peer, index, stream)?;
        }
    }
    drop(acceptors);
    let relay = match complete {
        true => None,
        false => Some(formed.relay()?),
    };
    let connections = formed.finish(read_poll(nodes, rank, polling), &progress)?;
    Ok(Mesh {
        connections,
        complete,
        relay,
    })
}

/// A rank's connections, as [`form_mesh`] formed them.
pub(crate) struct Mesh {
    /// Entry `j`: the connections to rank `j`, those this rank writes on first; empty where
    /// the two ranks did not connect.
    pub(crate) connections: Vec<Vec<Connection>>,
    /// Whether every pair of ranks connected, as every rank knows after the formation.
    pub(crate) complete: bool,
    /// Where it did not, the connections of the relay that carries messages round the ring:
    /// to the right neighbour, from it, from the left neighbour, to it.
    pub(crate) relay: Option<[TcpStream; 4]>,
}

/// An optional pair's outcome: the peer and the two connections, or `None` where it could not
/// be reached.
type Reached = Option<(usize, [TcpStream; 2])>;

/// Opens the optional pairs' connections, each in a thread of its own (an unreachable address
/// may take [`OPTIONAL_CONNECT`] to give up on): for each peer, its two connections, or `None`
/// where it cannot be reached.
fn open_all_optional(
    nodes: &[Vec<Address>],
    optional: &[usize],
    (local, until): (&Local, (Instant, Abandoned<'_>)),
    progress: &Progress,
) -> Result<Vec<Reached>> {
    std::thread::scope(|scope| {
        let attempts: Vec<_> = optional
            .iter()
            .map(|&peer| {
                let address = &nodes[peer][0];
                scope.spawn(move || open_optional(address, peer, local, until, progress))
            })
            .collect();
        attempts
            .into_iter()
            .zip(optional)
            .map(|(attempt, &peer)| {
                let outcome = attempt.join().unwrap_or_else(|_| {
                    Err(init_error(
                        Some(peer),
                        "the connecting thread panicked".into(),
                    ))
                })?;
                Ok(outcome.map(|pair| (peer, pair)))
            })
            .collect()
    })
}

/// The error of an acceptor that failed, if one did: it explains why connecting failed too.
fn acceptor_error(acceptors: &mut [Acceptor]) -> Option<nuvec_core::Error> {
    acceptors.iter_mut().find_map(Acceptor::error)
}

/// The handshake on `stream`, opened to rank `peer`.
fn handshake(
    stream: &mut TcpStream,
    local: &Local,
    peer: usize,
    deadline: Instant,
    progress: &Progress,
) -> Result<()> {
    let began = Instant::now();
    connect_side(stream, local, peer, deadline).map_err(|reason| init_error(Some(peer), reason))?;
    progress.log(|| {
        format!(
            "handshake with rank {peer} done ({})",
            progress.since(began)
        )
    });
    Ok(())
}

/// Opens the two connections of an optional pair to `peer`'s first address, or `None` when
/// this rank cannot reach it (no route, no answer within [`OPTIONAL_CONNECT`]): the two ranks
/// then talk round the ring.
fn open_optional(
    address: &Address,
    peer: usize,
    local: &Local,
    until: (Instant, Abandoned<'_>),
    progress: &Progress,
) -> Result<Option<[TcpStream; 2]>> {
    let Some(mut to) = connect_if_reachable(address, peer, until, progress)? else {
        return Ok(None);
    };
    let deadline = until.0;
    handshake(&mut to, local, peer, deadline, progress)?;
    let mut from = connect(address, peer, until, progress)?;
    handshake(&mut from, local, peer, deadline, progress)?;
    Ok(Some([to, from]))
}

/// [`connect`] to a rank that may not be reachable from here: `None` when the network says
/// so (no route to it) or nothing answers within [`OPTIONAL_CONNECT`]; a refused connection
/// (nothing listening yet) is tried again until `deadline`, as for a required one.
fn connect_if_reachable(
    address: &Address,
    peer: usize,
    (deadline, abandoned): (Instant, Abandoned<'_>),
    progress: &Progress,
) -> Result<Option<TcpStream>> {
    let began = Instant::now();
    loop {
        let candidates = address
            .resolve()
            .map_err(|reason| init_error(Some(peer), reason))?;
        let mut refused = false;
        let mut unreachable = String::new();
        for candidate in &candidates {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(10), OPTIONAL_CONNECT);
            match TcpStream::connect_timeout(candidate, wait) {
                Ok(stream) => return Ok(Some(stream)),
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => refused = true,
                Err(e) => unreachable = format!("{candidate}: {e}"),
            }
        }
        if abandoned() {
            return Err(init_error(Some(peer), "formation abandoned".into()));
        }
        if !refused || Instant::now() >= deadline {
            progress.log(|| {
                format!(
                    "rank {peer} at {address} is not reachable from here ({unreachable}, after {}): \
                     messages between the two go round the ring",
                    progress.since(began)
                )
            });
            return Ok(None);
        }
        std::thread::sleep(RETRY_INTERVAL);
    }
}

/// Forms a star through `coordinator` (JACCL's side channel, NCCL's rendezvous): rank 0 listens there and
/// accepts every other rank, each of which connects and handshakes as the ring's ranks do (with
/// the key's proofs when one is set). Entry `j` of rank 0's result is its connection to rank
/// `j`; every other rank gets its connection to rank 0 in entry 0.
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
        incarnation: incarnation().map_err(|reason| init_error(None, reason))?,
    };
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    if rank == 0 {
        let expected = Expected {
            required: (1..size).collect(),
            optional: Vec::new(),
        };
        let listener = listen(coordinator, rank, &progress)?;
        let acceptor = Acceptor::start(listener, local, expected, deadline, &progress)?;
        for (peer, stream) in acceptor.finish()? {
            streams[peer] = Some(stream);
        }
    } else {
        let mut stream = connect(coordinator, 0, (deadline, &|| false), &progress)?;
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
            handles
                .into_iter()
                .map(|h| h.join().unwrap().connections)
                .collect()
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
