//! Groups that fail loudly and re-form: ranks killed (SIGKILL) mid-collective, stopped
//! (SIGSTOP), never started, or gone while the group is idle; survivors close the failed group,
//! form a new one in the same processes and carry on; forming and closing leaks nothing.

use nuvec::distributed::{self, Group, Options};
use nuvec::prelude::*;
use nuvec_test_support::ranks::{launch_ranks, Launch};
use nuvec_test_support::test_name;
use std::time::{Duration, Instant};

/// Sends `signal` to this process (through `kill(1)`, so the test needs no unsafe code).
fn signal_self(signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), std::process::id().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
}

/// Every rank's listening addresses, from the hostfile the launcher wrote.
fn hostfile_nodes() -> Vec<Vec<String>> {
    let path = std::env::var("MLX_HOSTFILE").expect("MLX_HOSTFILE");
    distributed::read_hostfile(&path)
        .expect("reading the hostfile")
        .iter()
        .map(|rank| rank.iter().map(ToString::to_string).collect())
        .collect()
}

/// A data-parallel loop: each step all-sums every member's contribution (its original rank
/// plus one) and checks the total. When a collective fails, the error must name `victim`
/// and come quickly; the survivors then close the group, form a new one over the remaining
/// ranks and redo the step. The loop returns once the group has been re-formed and
/// `steps_after` steps have passed in the new group, so a victim that dies late is still
/// waited for (the launch's timeout bounds the wait); a second failure fails the test.
fn data_parallel_loop(mut group: Group, victim: usize, steps_after: usize, elements: i32) {
    let original_rank = group.rank();
    let mut members: Vec<usize> = (0..group.size()).collect();
    let mut step = 0;
    // The step at which the group was re-formed, once it has been.
    let mut reformed_at = None;
    while reformed_at.is_none_or(|at| step < at + steps_after) {
        let x = ops::full(&[elements], (original_rank + 1) as f64, DType::F32);
        let start = Instant::now();
        match distributed::all_sum(&x, Some(&group)).to_vec::<f32>() {
            Ok(total) => {
                let expected: usize = members.iter().map(|r| r + 1).sum();
                assert!(
                    total.iter().all(|&v| v == expected as f32),
                    "step {step}: expected {expected}, got {}",
                    total[0]
                );
                step += 1;
            }
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.contains(&format!("rank {victim}")),
                    "the error should name rank {victim}: {message}"
                );
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the loss took {:?} to report",
                    start.elapsed()
                );
                let later = distributed::all_sum(&x, Some(&group))
                    .check()
                    .unwrap_err()
                    .to_string();
                assert!(later.contains("failed earlier"), "{later}");
                assert!(reformed_at.is_none(), "the group failed twice: {message}");
                // Close the failed group and re-form over the survivors, in this process.
                group.close();
                members.retain(|&r| r != victim);
                let nodes: Vec<Vec<String>> = members
                    .iter()
                    .map(|&r| hostfile_nodes()[r].clone())
                    .collect();
                let new_rank = members.iter().position(|&r| r == original_rank).unwrap();
                group = distributed::init_with(
                    &nodes,
                    new_rank,
                    &Options::with_timeout(Duration::from_secs(20)),
                )
                .expect("re-forming over the survivors");
                assert_eq!(group.size(), members.len());
                reformed_at = Some(step);
            }
        }
    }
    group.close();
}

fn a_killed_rank_is_named_and_the_survivors_continue(test_name: &str, n: usize) {
    let victim = n - 1;
    let launch = Launch {
        expendable: vec![victim],
        ..Launch::default()
    };
    launch_ranks(test_name, n, Duration::from_secs(30), &launch, |group| {
        let group = group.expect("joining the group");
        // 8 MB per all_sum: long enough that the kill lands mid-collective.
        let elements = 1 << 21;
        if group.rank() == victim {
            let x = ops::full(&[elements], (victim + 1) as f64, DType::F32);
            for i in 0.. {
                if i == 2 {
                    std::thread::spawn(|| {
                        std::thread::sleep(Duration::from_millis(3));
                        signal_self("KILL");
                    });
                }
                let _ = distributed::all_sum(&x, Some(&group)).check();
            }
        }
        data_parallel_loop(group, victim, 3, elements);
    });
}

#[test]
fn a_rank_killed_mid_collective_is_named_and_2_ranks_continue_as_1() {
    a_killed_rank_is_named_and_the_survivors_continue(test_name!(), 2);
}

#[test]
fn a_rank_killed_mid_collective_is_named_and_3_ranks_continue_as_2() {
    a_killed_rank_is_named_and_the_survivors_continue(test_name!(), 3);
}

#[test]
fn a_rank_killed_mid_collective_is_named_and_4_ranks_continue_as_3() {
    a_killed_rank_is_named_and_the_survivors_continue(test_name!(), 4);
}

/// The last of `n` ranks stops (SIGSTOP) after a first `all_sum` of `elements` floats; every
/// other rank's next `all_sum` fails once the group timeout (3 s) has passed, naming it.
fn a_stopped_rank_is_named_at_the_timeout(test_name: &str, n: usize, elements: i32) {
    let victim = n - 1;
    let launch = Launch {
        expendable: vec![victim],
        group_timeout: Some(Duration::from_secs(3)),
        ..Launch::default()
    };
    launch_ranks(test_name, n, Duration::from_secs(20), &launch, |group| {
        let group = group.expect("joining the group");
        let x = ops::ones(&[elements], DType::F32);
        distributed::all_sum(&x, Some(&group)).check().unwrap();
        if group.rank() == victim {
            signal_self("STOP");
            unreachable!("a stopped rank is killed by the test, never continued");
        }
        let start = Instant::now();
        let error = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        let waited = start.elapsed();
        assert!(
            error.contains(&format!("rank {victim}")) && error.contains("timed out"),
            "rank {}: {error}",
            group.rank()
        );
        assert!(
            waited >= Duration::from_millis(2900) && waited < Duration::from_secs(10),
            "waited {waited:?}"
        );
        assert!(group.health().is_err());
    });
}

#[test]
fn a_stopped_rank_fails_the_collective_at_the_timeout_naming_it() {
    a_stopped_rank_is_named_at_the_timeout(test_name!(), 2, 1 << 16);
}

/// Small sums on 4 ranks go through rank 0: when rank 3 stops, rank 0 times out on it and
/// tells ranks 1 and 2, which were waiting on rank 0 (half a timeout longer), so every rank
/// names rank 3.
#[test]
fn a_stopped_rank_fails_a_small_sum_on_4_ranks_naming_it_on_every_rank() {
    a_stopped_rank_is_named_at_the_timeout(test_name!(), 4, 64);
}

#[test]
fn a_rank_that_never_starts_fails_formation_naming_it() {
    let launch = Launch {
        absent: vec![2],
        group_timeout: Some(Duration::from_secs(3)),
        ..Launch::default()
    };
    launch_ranks(test_name!(), 3, Duration::from_secs(20), &launch, |group| {
        let error = group.unwrap_err().to_string();
        assert!(
            error.contains("[init]") && error.contains("rank 2"),
            "{error}"
        );
    });
}

#[test]
fn a_rank_gone_while_idle_is_found_by_health_and_init_forms_a_new_group() {
    launch_ranks(
        test_name!(),
        3,
        Duration::from_secs(30),
        &Launch::default(),
        |group| {
            let group = group.expect("joining the group");
            let x = ops::ones(&[1024], DType::F32);
            distributed::all_sum(&x, Some(&group)).check().unwrap();
            if group.rank() == 2 {
                return; // The process ends; its connections close with it.
            }
            let error = nuvec_test_support::wait_until_unhealthy(
                &group,
                Duration::from_secs(20),
                Duration::from_millis(50),
            );
            assert!(error.contains("rank 2"), "{error}");
            // Let the other survivor notice too before this one closes its connections (a
            // survivor that closed first would be the peer the other's health reports).
            std::thread::sleep(Duration::from_secs(1));
            // `init` never returns the failed default group: pointed at a hostfile of the
            // survivors, it forms a new one in this process.
            let survivors = &hostfile_nodes()[..2];
            let path =
                std::env::temp_dir().join(format!("nuvec-survivors-{}.json", std::process::id()));
            let json = serde_json::to_string(survivors).unwrap();
            std::fs::write(&path, json).unwrap();
            std::env::set_var("MLX_HOSTFILE", &path);
            let regrouped = distributed::init(true).expect("forming the survivors' group");
            assert_eq!((regrouped.size(), regrouped.rank()), (2, group.rank()));
            assert!(group.is_closed(), "init closes the failed default group");
            let total = distributed::all_sum(&x, None).to_vec::<f32>().unwrap();
            assert!(total.iter().all(|&v| v == 2.0));
            regrouped.close();
            let _ = std::fs::remove_file(&path);
        },
    );
}

/// Threads and open descriptors of this process (Linux's /proc).
fn threads_and_descriptors() -> (usize, usize) {
    let count = |dir: &str| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    (count("/proc/self/task"), count("/proc/self/fd"))
}

/// [`threads_and_descriptors`] once two samples 100 ms apart agree (at most 5 s): joined
/// threads and closed sockets may take a moment to leave /proc.
fn settled_threads_and_descriptors() -> (usize, usize) {
    let start = Instant::now();
    let mut last = threads_and_descriptors();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = threads_and_descriptors();
        if now == last || start.elapsed() > Duration::from_secs(5) {
            return now;
        }
        last = now;
    }
}

/// Resident memory of this process in bytes (Linux's /proc).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Forms a 2-rank group (both ranks threads of this process), runs a collective and closes it.
fn form_use_close(ports: &[u16]) {
    let nodes: Vec<Vec<String>> = ports
        .iter()
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .collect();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let nodes = nodes.clone();
            std::thread::spawn(move || {
                let options =
                    Options::with_timeout(Duration::from_secs(20)).key("a 16-byte secret!");
                let group = distributed::init_with(&nodes, rank, &options).expect("forming");
                let total = distributed::all_sum(&array![1.0, 2.0], Some(&group))
                    .to_vec::<f32>()
                    .unwrap();
                assert_eq!(total, [2.0, 4.0]);
                // Two sums at once: the first goes to the group's worker thread, which
                // `close` must stop.
                let (a, b) = (
                    distributed::all_sum(&array![1.0], Some(&group)),
                    distributed::all_sum(&(array![2.0] * 2.0), Some(&group)),
                );
                eval(&[a.clone(), b.clone()]).unwrap();
                assert_eq!(
                    (a.item::<f32>().unwrap(), b.item::<f32>().unwrap()),
                    (2.0, 8.0)
                );
                group.close();
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
}

#[test]
fn fifty_cycles_of_forming_and_closing_leak_no_threads_descriptors_or_memory() {
    if !std::path::Path::new("/proc/self/task").exists() {
        nuvec_test_support::skip("counting threads and descriptors needs Linux's /proc");
        return;
    }
    // In a process of its own, so the other tests' threads do not blur the counts.
    launch_ranks(
        test_name!(),
        1,
        Duration::from_secs(120),
        &Launch::default(),
        |_| {
            let ports = nuvec_test_support::ranks::free_ports(2);
            // Lazily started workers and the allocator's per-thread arenas exist from here on.
            for _ in 0..25 {
                form_use_close(&ports);
            }
            // Settled, as `after` is below: a thread of the last cycle may still be leaving.
            let before = settled_threads_and_descriptors();
            let memory_before = resident_bytes();
            for _ in 0..50 {
                form_use_close(&ports);
            }
            // Joined threads may take a moment to leave /proc.
            let start = Instant::now();
            let mut after = threads_and_descriptors();
            while after != before && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(50));
                after = threads_and_descriptors();
            }
            assert_eq!(
                after, before,
                "(threads, descriptors) before and after 50 cycles"
            );
            // Each cycle's connections, queues and threads are gone: memory stays flat (the
            // bound leaves room for allocator noise; 40 KB kept per cycle would exceed it).
            let grown = resident_bytes().saturating_sub(memory_before);
            assert!(grown < 2 << 20, "resident memory grew by {grown} bytes");
        },
    );
}

#[test]
fn health_waits_for_a_collective_in_progress_instead_of_interleaving() {
    let nodes: Vec<Vec<String>> = nuvec_test_support::ranks::free_ports(2)
        .iter()
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .collect();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let nodes = nodes.clone();
            std::thread::spawn(move || {
                let options = Options::with_timeout(Duration::from_secs(20));
                let group = distributed::init_with(&nodes, rank, &options).expect("forming");
                // Another thread probes the group over and over while collectives run.
                let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let probing = {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        let mut probes = 0;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            group.health().expect("healthy while collectives run");
                            probes += 1;
                        }
                        probes
                    })
                };
                for round in 0..4 {
                    let x = ops::full(&[1 << 22], (rank + round) as f64, DType::F32);
                    let total = distributed::all_sum(&x, Some(&group))
                        .to_vec::<f32>()
                        .unwrap();
                    let expected = (2 * round + 1) as f32;
                    assert!(total.iter().all(|&v| v == expected), "round {round}");
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                assert!(probing.join().unwrap() > 0);
                // Both ranks are done before either closes.
                distributed::all_sum(&array![0.0], Some(&group))
                    .check()
                    .unwrap();
                group.close();
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
}
