//! The handshake that opens the ring's connections: pre-shared-key authentication, ranks that
//! disagree about the group, ports in use and hostile clients, each with its documented
//! outcome within a bound. Ranks are threads of this process
//! forming groups with `init_with` (the handshake is the same as across processes).

use nuvec::distributed::{self, Group, Options};
use nuvec::{array, Result};
use nuvec_test_support::ranks::{free_ports, launch_ranks, Launch};
use nuvec_test_support::test_name;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SECRET: &str = "correct horse battery staple 42";
const OTHER_SECRET: &str = "incorrect horse battery staple 7";
/// Formation timeout of these tests: what a rank that must wait for its deadline waits.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Slack over a bound for a loaded machine.
const SLACK: Duration = Duration::from_secs(4);

fn loopback(ports: &[u16]) -> Vec<Vec<String>> {
    ports
        .iter()
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .collect()
}

/// Starts rank `rank` forming its group on a thread; the thread returns the outcome and how
/// long formation took.
fn start_rank(
    nodes: &[Vec<String>],
    rank: usize,
    options: Options,
) -> JoinHandle<(Result<Group>, Duration)> {
    let nodes = nodes.to_vec();
    std::thread::spawn(move || {
        let start = Instant::now();
        let group = distributed::init_with(&nodes, rank, &options);
        (group, start.elapsed())
    })
}

fn form(options: &[Options]) -> Vec<(Result<Group>, Duration)> {
    let nodes = loopback(&free_ports(options.len()));
    let handles: Vec<_> = options
        .iter()
        .enumerate()
        .map(|(rank, o)| start_rank(&nodes, rank, o.clone()))
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn keyed(secret: &str) -> Options {
    Options::with_timeout(TIMEOUT).key(secret)
}

fn error_of(outcome: &(Result<Group>, Duration)) -> String {
    let error = match &outcome.0 {
        Ok(group) => panic!("rank {} formed a group", group.rank()),
        Err(e) => e.to_string(),
    };
    for secret in [SECRET, OTHER_SECRET] {
        assert!(!error.contains(secret), "the key leaked into: {error}");
    }
    error
}

fn all_sum_on_every_rank(groups: Vec<Group>) {
    let handles: Vec<_> = groups
        .into_iter()
        .map(|g| {
            std::thread::spawn(move || {
                let sum = distributed::all_sum(&array![1.0, 2.0], Some(&g)).to_vec::<f32>();
                let size = g.size() as f32;
                g.close();
                assert_eq!(sum.unwrap(), [size, 2.0 * size]);
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
}

#[test]
fn ranks_holding_the_same_key_form_a_group_and_run_collectives() {
    let outcomes = form(&[keyed(SECRET), keyed(SECRET), keyed(SECRET)]);
    let groups = outcomes
        .into_iter()
        .map(|(g, _)| g.expect("forming with the same key"))
        .collect();
    all_sum_on_every_rank(groups);
}

#[test]
fn different_keys_fail_on_both_ranks_with_an_error_saying_so_long_before_the_timeout() {
    let patient = Duration::from_secs(60);
    let outcomes = form(&[
        Options::with_timeout(patient).key(SECRET),
        Options::with_timeout(patient).key(OTHER_SECRET),
    ]);
    // The connecting rank checks the other's proof first, fails at once and tells the other.
    let first = error_of(&outcomes[0]);
    assert!(
        first.contains("rank 1") && first.contains("different keys"),
        "{first}"
    );
    assert!(outcomes[0].1 < SLACK, "took {:?}", outcomes[0].1);
    // The accepting rank cannot authenticate that notice (it could come from an intruder), so
    // it gives rank 0 two seconds to prove the key, then fails naming the different keys.
    let second = error_of(&outcomes[1]);
    assert!(
        second.contains("rank 0 refused this rank's proof")
            && second.contains("different keys")
            && second.contains("NUVEC_DISTRIBUTED_KEY"),
        "{second}"
    );
    assert!(
        outcomes[1].1 >= Duration::from_secs(2) && outcomes[1].1 < Duration::from_secs(2) + SLACK,
        "took {:?}",
        outcomes[1].1
    );
}

#[test]
fn a_key_on_the_connecting_rank_only_fails_both_at_once() {
    let outcomes = form(&[keyed(SECRET), Options::with_timeout(TIMEOUT)]);
    let first = error_of(&outcomes[0]);
    assert!(
        first.contains("rank 1 has no pre-shared key and this rank has one")
            && first.contains("NUVEC_DISTRIBUTED_KEY"),
        "{first}"
    );
    let second = error_of(&outcomes[1]);
    assert!(
        second.contains("rank 0 authenticates with a pre-shared key and this rank has none"),
        "{second}"
    );
    for (_, took) in &outcomes {
        assert!(*took < SLACK, "took {took:?}");
    }
}

#[test]
fn a_key_on_the_accepting_rank_only_is_refused_and_reported() {
    let outcomes = form(&[Options::with_timeout(TIMEOUT), keyed(SECRET)]);
    let first = error_of(&outcomes[0]);
    assert!(
        first.contains("rank 1 requires a pre-shared key and this rank has none"),
        "{first}"
    );
    assert!(outcomes[0].1 < SLACK, "took {:?}", outcomes[0].1);
    let second = error_of(&outcomes[1]);
    assert!(
        second.contains("claiming rank 0: it had no pre-shared key"),
        "{second}"
    );
    assert!(outcomes[1].1 < TIMEOUT + SLACK, "took {:?}", outcomes[1].1);
}

#[test]
fn keys_shorter_than_16_bytes_are_refused_without_showing_them() {
    let nodes = loopback(&free_ports(2));
    let error = distributed::init_with(&nodes, 0, &keyed("tiny secret"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("11 bytes") && error.contains("at least 16"),
        "{error}"
    );
    assert!(!error.contains("tiny secret"), "{error}");
    // A group of one refuses it too: the mistake shows before the cluster grows.
    let single = distributed::init_with(&loopback(&[1]), 0, &keyed("short"))
        .unwrap_err()
        .to_string();
    assert!(single.contains("at least 16"), "{single}");
}

/// Connects to `port` once it listens.
fn connect_when_listening(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => return stream,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("port {port} never listened: {e}"),
        }
    }
}

fn stray_clients_do_not_delay_formation(options: Options) {
    let ports = free_ports(2);
    let nodes = loopback(&ports);
    let accepting = start_rank(&nodes, 1, options.clone());
    // A client that says nothing, and one that sends garbage, arrive before rank 0.
    let mut silent = connect_when_listening(ports[1]);
    let mut garbage = connect_when_listening(ports[1]);
    garbage.write_all(&[0x5a; 300]).unwrap();
    let connecting = start_rank(&nodes, 0, options);
    let mut groups = Vec::new();
    for handle in [connecting, accepting] {
        let (group, took) = handle.join().unwrap();
        groups.push(group.expect("forming beside stray clients"));
        // Well under the 5 s a stray may take to finish its handshake.
        assert!(took < Duration::from_secs(4), "formation took {took:?}");
    }
    all_sum_on_every_rank(groups);
    // Both strays are dropped within their handshake deadline.
    for stream in [&mut silent, &mut garbage] {
        stream
            .set_read_timeout(Some(Duration::from_secs(5) + SLACK))
            .unwrap();
        let mut sink = [0u8; 256];
        let dropped = loop {
            match stream.read(&mut sink) {
                Ok(0) | Err(_) => break true,
                Ok(_) => continue,
            }
        };
        assert!(dropped);
    }
}

#[test]
fn stray_clients_are_dropped_without_delaying_a_keyed_group() {
    stray_clients_do_not_delay_formation(keyed(SECRET));
}

#[test]
fn stray_clients_are_dropped_without_delaying_a_group_without_key() {
    stray_clients_do_not_delay_formation(Options::with_timeout(TIMEOUT));
}

/// Forwards the connections a rank of a group of two opens to its peer (both directions'
/// connections) from `listener` to `target`, recording what the client sent on the first.
fn recording_proxy(listener: TcpListener, target: u16) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let forwards: Vec<_> = (0..2)
            .map(|_| {
                let (client, _) = listener.accept().unwrap();
                let server = connect_when_listening(target);
                std::thread::spawn(move || forward(client, server))
            })
            .collect();
        let mut recorded: Vec<Vec<u8>> = forwards.into_iter().map(|f| f.join().unwrap()).collect();
        recorded.swap_remove(0)
    })
}

/// Copies bytes both ways between `client` and `server` until both close; returns what the
/// client sent.
fn forward(mut client: TcpStream, mut server: TcpStream) -> Vec<u8> {
    let (mut client_reader, mut server_writer) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    let upstream = std::thread::spawn(move || {
        let mut recorded = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = client_reader.read(&mut buf) {
            if n == 0 || server_writer.write_all(&buf[..n]).is_err() {
                break;
            }
            recorded.extend_from_slice(&buf[..n]);
        }
        let _ = server_writer.shutdown(std::net::Shutdown::Write);
        recorded
    });
    let _ = std::io::copy(&mut server, &mut client);
    let _ = client.shutdown(std::net::Shutdown::Write);
    upstream.join().unwrap()
}

#[test]
fn a_replayed_handshake_is_refused() {
    let ports = free_ports(2);
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let recorder = recording_proxy(proxy, ports[1]);
    // Rank 0 reaches rank 1 through the proxy, which records rank 0's half of the handshake.
    let through_proxy = loopback(&[ports[0], proxy_port]);
    let direct = loopback(&ports);
    let connecting = start_rank(&through_proxy, 0, keyed(SECRET));
    let accepting = start_rank(&direct, 1, keyed(SECRET));
    let groups = [connecting, accepting]
        .map(|h| h.join().unwrap().0.expect("forming through the proxy"))
        .to_vec();
    all_sum_on_every_rank(groups);
    let recorded = recorder.join().unwrap();
    assert!(
        recorded.len() >= 2 * 84,
        "recorded {} bytes",
        recorded.len()
    );

    // An intruder replays rank 0's hello and proof to a new formation of rank 1.
    let accepting = start_rank(&direct, 1, keyed(SECRET));
    let mut intruder = connect_when_listening(ports[1]);
    intruder.write_all(&recorded[..2 * 84]).unwrap();
    let outcome = accepting.join().unwrap();
    let error = error_of(&outcome);
    assert!(
        error.contains("claiming rank 0") && error.contains("replayed handshake"),
        "{error}"
    );
    assert!(outcome.1 < TIMEOUT + SLACK, "took {:?}", outcome.1);
}

#[test]
fn ranks_that_disagree_on_the_group_size_both_get_errors_saying_so() {
    let ports = free_ports(3);
    let three = loopback(&ports);
    let two = loopback(&ports[..2]);
    let options = Options::with_timeout(TIMEOUT);
    let first = start_rank(&three, 0, options.clone());
    let second = start_rank(&two, 1, options);
    let outcomes = [first, second].map(|h| h.join().unwrap());
    let error = error_of(&outcomes[0]);
    assert!(
        error.contains("rank 1 believes the group has 2 ranks, this rank (rank 0) has 3"),
        "{error}"
    );
    let error = error_of(&outcomes[1]);
    assert!(
        error.contains("rank 0 believes the group has 3 ranks, this rank (rank 1) has 2"),
        "{error}"
    );
    for (_, took) in &outcomes {
        assert!(*took < SLACK, "took {took:?}");
    }
}

#[test]
fn two_processes_claiming_the_same_rank_get_errors_saying_so() {
    let ports = free_ports(4);
    let genuine = loopback(&ports[..3]);
    // The impostor claims rank 1 but listens elsewhere.
    let impostor = loopback(&[ports[0], ports[3], ports[2]]);
    let options = Options::with_timeout(TIMEOUT);
    let accepting = start_rank(&genuine, 2, options.clone());
    let first = start_rank(&genuine, 1, options.clone());
    let second = start_rank(&impostor, 1, options);
    let error = error_of(&accepting.join().unwrap());
    assert!(error.contains("a second process claims rank 1"), "{error}");
    let claimants = [first, second].map(|h| error_of(&h.join().unwrap()));
    assert!(
        claimants
            .iter()
            .any(|e| e.contains("another process already joined as rank 1")),
        "{claimants:?}"
    );
}

#[test]
fn a_port_already_in_use_is_reported_as_such() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let nodes = loopback(&[port, free_ports(1)[0]]);
    let error = distributed::init_with(&nodes, 0, &Options::with_timeout(TIMEOUT))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("127.0.0.1:{port}")) && error.contains("already in use"),
        "{error}"
    );
}

#[test]
fn init_authenticates_with_nuvec_distributed_key() {
    let launch = Launch {
        env: vec![("NUVEC_DISTRIBUTED_KEY".into(), SECRET.into())],
        ..Launch::default()
    };
    launch_ranks(test_name!(), 2, Duration::from_secs(20), &launch, |group| {
        let group = group.expect("forming with the key from the environment");
        let total = distributed::all_sum(&array![1.0], Some(&group)).to_vec::<f32>();
        assert_eq!(total.unwrap(), [2.0]);
    });
}

#[test]
fn init_refuses_a_short_nuvec_distributed_key() {
    let launch = Launch {
        env: vec![("NUVEC_DISTRIBUTED_KEY".into(), "0123456789".into())],
        ..Launch::default()
    };
    launch_ranks(test_name!(), 2, Duration::from_secs(20), &launch, |group| {
        let error = group.unwrap_err().to_string();
        assert!(
            error.contains("10 bytes") && !error.contains("0123456789"),
            "{error}"
        );
    });
}
