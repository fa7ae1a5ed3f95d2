//! Failures: calls that differ between ranks, peers that leave or stall; every rank's error
//! names the rank at fault, promptly.

use super::*;

#[test]
fn mismatched_calls_give_errors_naming_both_sides() {
    run_ranks(
        test_name!(),
        2,
        TIMEOUT,
        references::mismatched_calls_give_errors,
    );
}

#[test]
fn a_peer_that_leaves_fails_pending_collectives_naming_it() {
    run_ranks(test_name!(), 3, Duration::from_secs(20), |group| {
        let x = ops::ones(&[1 << 16], DType::F32);
        if group.rank() == 2 {
            // Leaving the group closes this rank's connections, as an exiting process does.
            group.close();
            return;
        }
        let start = std::time::Instant::now();
        let error = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the failure took {:?}",
            start.elapsed()
        );
        assert!(
            error.contains("all_sum") && error.contains("rank "),
            "{error}"
        );
        if group.rank() == 0 {
            // Rank 0 reads from rank 2, the one that left.
            assert!(error.contains("rank 2"), "{error}");
        }
        let later = distributed::all_gather(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(later.contains("failed earlier"), "{later}");
        assert!(group.health().is_err());
    });
}

/// Rank 1 of 2 is busy elsewhere for longer than the group's timeout (2 s) before an
/// `all_sum` of `elements` floats: rank 0 times out, naming it, after about the timeout.
fn a_stalled_peer_is_named(test: &str, elements: i32) {
    run_ranks(test, 2, Duration::from_secs(2), |group| {
        let x = ops::ones(&[elements], DType::F32);
        if group.rank() == 1 {
            // Busy elsewhere for longer than the timeout, then too late.
            std::thread::sleep(Duration::from_secs(8));
            assert!(distributed::all_sum(&x, Some(&group)).check().is_err());
            return;
        }
        let start = std::time::Instant::now();
        let error = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        let waited = start.elapsed();
        assert!(
            error.contains("rank 1") && error.contains("timed out"),
            "{error}"
        );
        assert!(
            waited >= Duration::from_millis(1900) && waited < Duration::from_secs(7),
            "waited {waited:?}"
        );
    });
}

#[test]
fn a_stalled_peer_times_out_with_an_error_naming_it() {
    a_stalled_peer_is_named(test_name!(), 16);
}

#[test]
fn a_stalled_peer_in_a_ring_sum_times_out_naming_it() {
    a_stalled_peer_is_named(test_name!(), 1 << 18);
}

/// Rank 3 of 4 calls `all_max` of `elements` floats where the others call `all_sum`: every
/// rank fails naming both calls and rank 3, and the group refuses further work.
fn mismatched_reductions_fail_everywhere(test: &str, elements: i32) {
    run_ranks(test, 4, TIMEOUT, |group| {
        let x = ops::ones(&[elements], DType::F32);
        let result = if group.rank() == 3 {
            distributed::all_max(&x, Some(&group))
        } else {
            distributed::all_sum(&x, Some(&group))
        };
        let error = result.check().unwrap_err().to_string();
        assert!(
            error.contains("all_sum") && error.contains("all_max") && error.contains("rank 3"),
            "rank {}: {error}",
            group.rank()
        );
        let later = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(later.contains("failed earlier"), "{later}");
    });
}

#[test]
fn mismatched_small_reductions_on_4_ranks_fail_everywhere_naming_both_calls() {
    mismatched_reductions_fail_everywhere(test_name!(), 8);
}

#[test]
fn mismatched_ring_reductions_on_4_ranks_fail_everywhere_naming_both_calls() {
    // 1 MB: the ring, its chunks through shared memory.
    mismatched_reductions_fail_everywhere(test_name!(), 1 << 18);
}

/// Each rank calls `op` with `elements[rank]` floats, sizes that take different paths
/// (through rank 0 up to 16 or 64 KB, recursive doubling up to 64 KB, the ring above), so
/// ranks wait on connections their peers never write to: every rank fails well before the
/// group timeout (20 s) with an error naming another rank's call.
fn mismatched_sizes_fail_promptly(group: Group, op: &str, elements: &[usize]) {
    let rank = group.rank();
    let x = ops::ones(&[elements[rank] as i32], DType::F32);
    let start = std::time::Instant::now();
    let result = match op {
        "all_sum" => distributed::all_sum(&x, Some(&group)),
        "all_gather" => distributed::all_gather(&x, Some(&group)),
        _ => distributed::sum_scatter(&x, Some(&group)),
    };
    let error = result.check().unwrap_err().to_string();
    let took = start.elapsed();
    let names_another_size = elements
        .iter()
        .filter(|&&e| e != elements[rank])
        .any(|e| error.contains(&format!("{op} of {} bytes", e * 4)));
    assert!(
        took < Duration::from_secs(10),
        "rank {rank}: the failure took {took:?}: {error}"
    );
    assert!(names_another_size, "rank {rank}: {error}");
}

/// Runs [`mismatched_sizes_fail_promptly`] as the test `test`, one rank per entry of
/// `elements`, under a group timeout of 20 s.
fn run_mismatched_sizes(test: &str, op: &'static str, elements: &'static [usize]) {
    let launch = Launch {
        group_timeout: Some(Duration::from_secs(20)),
        ..Launch::default()
    };
    launch_ranks(test, elements.len(), TIMEOUT, &launch, |group| {
        mismatched_sizes_fail_promptly(group.unwrap(), op, elements)
    });
}

#[test]
fn sums_of_sizes_on_different_paths_fail_promptly_on_2_ranks() {
    run_mismatched_sizes(test_name!(), "all_sum", &[16, 1 << 18]);
}

#[test]
fn sums_of_sizes_on_different_paths_fail_promptly_on_4_ranks() {
    run_mismatched_sizes(test_name!(), "all_sum", &[1 << 18, 16, 1 << 18, 1 << 18]);
}

#[test]
fn sums_where_rank_0_takes_another_path_fail_promptly_on_4_ranks() {
    run_mismatched_sizes(test_name!(), "all_sum", &[16, 1 << 18, 1 << 18, 1 << 18]);
}

#[test]
fn sums_through_rank_0_and_by_doubling_fail_promptly_on_4_ranks() {
    run_mismatched_sizes(test_name!(), "all_sum", &[16, 16, 8192, 16]);
}

#[test]
fn gathers_of_sizes_on_different_paths_fail_promptly_on_3_ranks() {
    run_mismatched_sizes(test_name!(), "all_gather", &[16, 1 << 16, 1 << 16]);
}

#[test]
fn gathers_of_different_sizes_read_from_memory_fail_promptly_on_2_ranks() {
    run_mismatched_sizes(test_name!(), "all_gather", &[1 << 14, 1 << 16]);
}

#[test]
fn scatters_of_sizes_on_different_paths_fail_promptly_on_2_ranks() {
    run_mismatched_sizes(test_name!(), "sum_scatter", &[16, 1 << 18]);
}

/// Rank `leaver` leaves a group of 4 before a small `all_sum`: every other rank's call fails
/// quickly with an error naming it.
fn a_rank_leaving_a_small_sum_is_named(group: Group, leaver: usize) {
    let x = ops::ones(&[16], DType::F32);
    if group.rank() == leaver {
        group.close();
        return;
    }
    let start = std::time::Instant::now();
    let error = distributed::all_sum(&x, Some(&group))
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "the failure took {:?}",
        start.elapsed()
    );
    assert!(
        error.contains("all_sum") && error.contains(&format!("rank {leaver}")),
        "rank {}: {error}",
        group.rank()
    );
}

#[test]
fn a_rank_leaving_a_small_sum_on_4_ranks_is_named_by_every_other_rank() {
    run_ranks(test_name!(), 4, Duration::from_secs(20), |group| {
        a_rank_leaving_a_small_sum_is_named(group, 3)
    });
}

#[test]
fn rank_0_leaving_a_small_sum_on_4_ranks_is_named_by_every_other_rank() {
    run_ranks(test_name!(), 4, Duration::from_secs(20), |group| {
        a_rank_leaving_a_small_sum_is_named(group, 0)
    });
}

/// A rank that calls another collective than its peer: both fail, each rank's trace holds the
/// call with how it ended and where the program made it, and with `NUVEC_DISTRIBUTED_TRACE`
/// set each rank writes its records there as JSON.
#[test]
fn a_failed_collective_is_in_every_rank_s_trace_and_written_where_asked() {
    let dir = std::env::temp_dir().join(format!("nuvec-trace-test-{}", std::process::id()));
    let launch = Launch {
        env: vec![("NUVEC_DISTRIBUTED_TRACE".into(), dir.display().to_string())],
        group_timeout: Some(Duration::from_secs(20)),
        ..Launch::default()
    };
    launch_ranks(test_name!(), 2, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        let rank = group.rank();
        distributed::all_sum(&array![1.0f32], Some(&group))
            .eval()
            .unwrap();
        let x = ops::ones(&[8], DType::F32);
        let call = match rank {
            0 => distributed::all_sum(&x, Some(&group)),
            _ => distributed::all_gather(&x, Some(&group)),
        };
        call.check().unwrap_err();
        let trace = group.trace();
        let ops: Vec<&str> = trace.iter().map(|r| r.op).collect();
        let mine = if rank == 0 { "all_sum" } else { "all_gather" };
        assert_eq!(ops, ["all_sum", mine], "rank {rank}");
        assert_eq!(trace[0].state, distributed::State::Done);
        assert!(matches!(trace[1].state, distributed::State::Failed(_)));
        assert_eq!((trace[1].sequence, trace[1].shape.clone()), (1, vec![8]));
        assert_eq!((trace[0].bytes, trace[1].bytes), (4, 32));
        // Each call's times: the first ended before the second began, which ended too.
        let first_end = trace[0].ended.expect("the finished call's end");
        let second_end = trace[1].ended.expect("the failed call's end");
        assert!(
            trace[0].started <= first_end
                && first_end <= trace[1].started
                && trace[1].started <= second_end,
            "{trace:?}"
        );
        assert!(
            trace[1].location.file().ends_with("failures.rs"),
            "{}",
            trace[1]
        );
        let dir = std::env::var("NUVEC_DISTRIBUTED_TRACE").unwrap();
        let written = std::fs::read_to_string(format!("{dir}/rank-{rank}.json")).unwrap();
        assert!(
            written.contains(&format!("\"op\": \"{mine}\"")) && written.contains("\"failed\""),
            "{written}"
        );
        let json: serde_json::Value = serde_json::from_str(&written).unwrap();
        let failed = &json["records"][1];
        let (start, end) = (failed["start_ns"].as_u64(), failed["end_ns"].as_u64());
        assert!(
            failed["bytes"] == 32 && start.zip(end).is_some_and(|(s, e)| s <= e),
            "{written}"
        );
    });
    let _ = std::fs::remove_dir_all(dir);
}

/// A job that looks stuck but has not failed: with `NUVEC_DISTRIBUTED_TRACE` set, `SIGUSR1`
/// makes a rank write its records, and the rank goes on.
#[test]
fn sigusr1_makes_a_rank_write_its_trace_and_go_on() {
    let dir = std::env::temp_dir().join(format!("nuvec-trace-signal-{}", std::process::id()));
    let launch = Launch {
        env: vec![("NUVEC_DISTRIBUTED_TRACE".into(), dir.display().to_string())],
        ..Launch::default()
    };
    launch_ranks(test_name!(), 2, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        let rank = group.rank();
        distributed::all_sum(&array![1.0f32, 2.0], Some(&group))
            .eval()
            .unwrap();
        let dir = std::env::var("NUVEC_DISTRIBUTED_TRACE").unwrap();
        let path = std::path::Path::new(&dir).join(format!("rank-{rank}.json"));
        // The shell's own kill: no procps needed.
        let status = std::process::Command::new("sh")
            .args(["-c", &format!("kill -USR1 {}", std::process::id())])
            .status()
            .expect("running sh");
        assert!(status.success());
        let start = std::time::Instant::now();
        let written = loop {
            match std::fs::read_to_string(&path) {
                Ok(text) if text.contains("\"records\"") => break text,
                _ if start.elapsed() > Duration::from_secs(10) => {
                    panic!("rank {rank}: no trace at {} after SIGUSR1", path.display())
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        assert!(
            written.contains("\"op\": \"all_sum\"") && written.contains("\"done\""),
            "{written}"
        );
        let sum = distributed::all_sum(&array![1.0f32], Some(&group));
        assert_eq!(sum.to_vec::<f32>().unwrap(), [2.0]);
    });
    let _ = std::fs::remove_dir_all(dir);
}
