//! The rendezvous in one process: ranks as threads on loopback.

use super::*;
use std::time::Duration;

fn launch(rank: usize, size: usize, port: u16) -> Launch {
    Launch {
        rank,
        size,
        host: Address {
            host: "127.0.0.1".into(),
            port,
        },
    }
}

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn options(key: &str) -> Options {
    Options::default().timeout(Duration::from_secs(3)).key(key)
}

/// Each rank's outcome when ranks `0..size` run with `key_of(rank)`, rank 0 bringing `id`.
fn run(
    size: usize,
    id: [u8; ID_BYTES],
    key_of: impl Fn(usize) -> String + Sync,
) -> Vec<Result<[u8; ID_BYTES]>> {
    let port = port();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let key_of = &key_of;
                scope.spawn(move || {
                    let mine = (rank == 0).then_some(id);
                    share_unique_id(&launch(rank, size, port), mine, &options(&key_of(rank)))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a rank's thread"))
            .collect()
    })
}

#[test]
fn every_rank_receives_rank_zeros_id() {
    let mut id = [0u8; ID_BYTES];
    for (i, b) in id.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    for outcome in run(4, id, |_| "a shared secret of sixteen+ bytes".into()) {
        assert_eq!(outcome.unwrap(), id);
    }
}

#[test]
fn a_rank_with_another_key_is_refused_without_showing_either_key() {
    let outcomes = run(3, [9; ID_BYTES], |rank| {
        if rank == 2 {
            "the wrong secret, also sixteen+".into()
        } else {
            "a shared secret of sixteen+ bytes".into()
        }
    });
    let error = outcomes[2].as_ref().unwrap_err().to_string();
    assert!(error.contains("key"), "{error}");
    assert!(!error.contains("sixteen"), "{error}");
    // Rank 0 waited for rank 2, which never proved the key, and names it.
    let waiting = outcomes[0].as_ref().unwrap_err().to_string();
    assert!(
        waiting.contains("rank 2") && !waiting.contains("sixteen"),
        "{waiting}"
    );
}

#[test]
fn rank_zero_names_a_rank_that_never_came() {
    let port = port();
    let short = Options::default().timeout(Duration::from_millis(700));
    let error = share_unique_id(&launch(0, 2, port), Some([1; ID_BYTES]), &short)
        .unwrap_err()
        .to_string();
    assert!(error.contains("rank 1"), "{error}");
}

#[test]
fn the_environment_is_read_as_mlx_launch_writes_it_and_checked() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(Launch::from_vars(&env(&[])).unwrap(), None);
    let ok = Launch::from_vars(&env(&[
        ("NCCL_HOST_IP", "10.1.2.3"),
        ("NCCL_PORT", "12345"),
        ("MLX_RANK", "3"),
        ("MLX_WORLD_SIZE", "4"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!((ok.rank, ok.size, ok.host.port), (3, 4, 12345));
    for (vars, says) in [
        (
            &[
                ("NCCL_HOST_IP", "h"),
                ("MLX_RANK", "0"),
                ("MLX_WORLD_SIZE", "2"),
            ][..],
            "NCCL_PORT is not",
        ),
        (
            &[
                ("NCCL_HOST_IP", "h"),
                ("NCCL_PORT", "1"),
                ("MLX_RANK", "2"),
                ("MLX_WORLD_SIZE", "2"),
            ][..],
            "MLX_RANK=2 is not a rank",
        ),
        (
            &[
                ("NCCL_HOST_IP", "h"),
                ("NCCL_PORT", "99999"),
                ("MLX_RANK", "0"),
                ("MLX_WORLD_SIZE", "2"),
            ][..],
            "NCCL_PORT must be 1 to 65535",
        ),
        (
            &[
                ("NCCL_HOST_IP", "h"),
                ("NCCL_PORT", "x"),
                ("MLX_RANK", "0"),
                ("MLX_WORLD_SIZE", "2"),
            ][..],
            "NCCL_PORT must be a number",
        ),
    ] {
        let vars: &'static [(&'static str, &'static str)] =
            Box::leak(vars.to_vec().into_boxed_slice());
        let error = Launch::from_vars(&env(vars)).unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
    }
}

#[test]
fn only_rank_zero_brings_the_id() {
    let port = port();
    let error = share_unique_id(
        &launch(1, 2, port),
        Some([0; ID_BYTES]),
        &Options::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("only rank 0"), "{error}");
    let error = share_unique_id(&launch(0, 2, port), None, &Options::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("rank 0 must bring"), "{error}");
}
