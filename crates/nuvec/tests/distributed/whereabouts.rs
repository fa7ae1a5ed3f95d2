//! When a collective fails, every surviving rank's error ends with where each rank is: the
//! call (number, type, shape and the line that made it) each is in, which one left, which one
//! did not answer. Four ranks, one at fault in each way the flight recorder must report.

use super::*;

/// The group's timeout in these tests: the stalled rank sleeps past it.
const GROUP_TIMEOUT: Duration = Duration::from_secs(2);

/// How each test's odd rank behaves at the group's second collective.
#[derive(Clone, Copy)]
enum Fault {
    /// Sleeps past the timeout before calling it.
    Stalls,
    /// Calls `all_sum` where the others call `all_gather`.
    CallsAnother,
    /// Skips it: its next call is the others' third.
    Skips,
    /// Its process ends.
    IsKilled,
}

const ODD: usize = 2;

/// Runs the fault on 4 ranks: every rank first sums once (collective #0), then the others
/// gather 1024 floats (collective #1) and rank [`ODD`] does what `fault` says. Returns each
/// rank's error text to `check` (the odd rank's too, where it gets one).
fn run_fault(test: &str, fault: Fault, check: impl Fn(usize, &str)) {
    run_fault_with(test, fault, Vec::new(), check)
}

/// [`run_fault`] with extra environment for every rank.
fn run_fault_with(
    test: &str,
    fault: Fault,
    env: Vec<(String, String)>,
    check: impl Fn(usize, &str),
) {
    let launch = Launch {
        env,
        group_timeout: Some(GROUP_TIMEOUT),
        expendable: vec![ODD],
        ..Launch::default()
    };
    launch_ranks(test, 4, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        let rank = group.rank();
        distributed::all_sum(&array![1.0f32], Some(&group))
            .eval()
            .unwrap();
        let x = ops::ones(&[1024], DType::F32);
        let outcome = match (rank == ODD, fault) {
            (true, Fault::Stalls) => {
                std::thread::sleep(GROUP_TIMEOUT * 3);
                distributed::all_gather(&x, Some(&group)).check()
            }
            (true, Fault::CallsAnother) => distributed::all_sum(&x, Some(&group)).check(),
            (true, Fault::Skips) => distributed::all_max(&x, Some(&group)).check(),
            (true, Fault::IsKilled) => std::process::exit(3),
            (false, Fault::Skips) => distributed::all_gather(&x, Some(&group))
                .check()
                .and_then(|()| distributed::all_max(&x, Some(&group)).check()),
            (false, _) => distributed::all_gather(&x, Some(&group)).check(),
        };
        let error = outcome.expect_err("a call of the group's second collective must fail");
        check(rank, &error.to_string());
    });
}

/// The phrase for the three ranks other than [`ODD`], all in the gather.
fn the_others_in_the_gather() -> &'static str {
    "ranks 0, 1 and 3 are in all_gather #1 (float32 [1024], "
}

fn where_part(error: &str) -> &str {
    error
        .split_once("where the ranks are: ")
        .map_or("", |(_, after)| after)
}

/// What every rank but the stalled one reports: that rank silent, the others in the gather.
fn the_stalled_rank_is_silent(rank: usize, error: &str) {
    if rank == ODD {
        return;
    }
    let report = where_part(error);
    assert!(
        report.starts_with("rank 2 did not answer within 0.5 s")
            && report.contains(the_others_in_the_gather())
            && report.contains("whereabouts.rs:"),
        "rank {rank}: {error}"
    );
}

#[test]
fn a_stalled_rank_is_reported_as_silent_and_the_others_where_they_wait() {
    run_fault(test_name!(), Fault::Stalls, the_stalled_rank_is_silent);
}

/// The same over TCP alone, where the gather's frames share the connections with the notices.
#[test]
fn a_stalled_rank_is_reported_as_silent_over_tcp_alone() {
    let tcp = vec![("NUVEC_RING_SHARED_MEMORY".to_string(), "off".to_string())];
    run_fault_with(test_name!(), Fault::Stalls, tcp, the_stalled_rank_is_silent);
}

#[test]
fn a_rank_that_calls_another_collective_is_reported_in_it() {
    run_fault(test_name!(), Fault::CallsAnother, |rank, error| {
        let report = where_part(error);
        assert!(
            report.starts_with("rank 2 is in all_sum #1 (float32 [1024], ")
                && report.contains(the_others_in_the_gather()),
            "rank {rank}: {error}"
        );
    });
}

#[test]
fn a_rank_that_skips_a_collective_is_reported_one_call_ahead() {
    run_fault(test_name!(), Fault::Skips, |rank, error| {
        let report = where_part(error);
        assert!(
            report.starts_with("rank 2 is in all_max #1 (float32 [1024], ")
                && report.contains(the_others_in_the_gather()),
            "rank {rank}: {error}"
        );
    });
}

#[test]
fn a_killed_rank_is_reported_as_gone() {
    run_fault(test_name!(), Fault::IsKilled, |rank, error| {
        let report = where_part(error);
        assert!(
            report.starts_with("rank 2 left (the connection closed)")
                && report.contains(the_others_in_the_gather()),
            "rank {rank}: {error}"
        );
    });
}
