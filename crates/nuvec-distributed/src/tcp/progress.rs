//! What a rank says while its group forms: with `MLX_RING_VERBOSE` set (by `nuvec launch
//! --verbose` and by mlx.launch's), each step of the formation (listening, each connection
//! and handshake, how long it took); without it, one line per rank when the group is still
//! forming after a few seconds, naming what it waits for and when it gives up.

use nuvec_core::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// An error of the formation, naming the rank it concerns when there is one.
pub(crate) fn init_error(rank: Option<usize>, reason: String) -> Error {
    Error::Distributed {
        op: "init".into(),
        rank,
        reason,
    }
}

/// How long a formation runs before a rank says what it is waiting for.
const PATIENCE: Duration = Duration::from_secs(5);

/// The variable that sets how long formation (and every later wait) may take.
pub(crate) const TIMEOUT_VARIABLE: &str = "NUVEC_DISTRIBUTED_TIMEOUT";

/// One rank's account of its group's formation; shared by the threads that form it.
#[derive(Debug)]
pub(crate) struct Progress {
    rank: usize,
    started: Instant,
    timeout: Duration,
    verbose: bool,
    waited: AtomicBool,
}

/// Whether `MLX_RING_VERBOSE` asks for the formation's log (set, and not empty, 0 or false).
fn verbose_from_env() -> bool {
    std::env::var("MLX_RING_VERBOSE").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "off"))
}

impl Progress {
    /// The account of rank `rank`'s formation, which gives up after `timeout`.
    pub(crate) fn new(rank: usize, timeout: Duration) -> Progress {
        Progress {
            rank,
            started: Instant::now(),
            timeout,
            verbose: verbose_from_env(),
            waited: AtomicBool::new(false),
        }
    }

    /// With `MLX_RING_VERBOSE`, a line on stderr about a step of the formation, with the
    /// time since it began.
    pub(crate) fn log(&self, step: impl FnOnce() -> String) {
        if self.verbose {
            let at = self.started.elapsed().as_secs_f64() * 1e3;
            let line = format!("[ring] rank {} at {at:.1} ms: {}\n", self.rank, step());
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }

    /// Once the formation has run for a few seconds, says once (per rank) what it is waiting
    /// for (`waiting`, e.g. "rank 1 at 127.0.0.1:45002") and when it gives up.
    pub(crate) fn waiting(&self, waiting: impl FnOnce() -> String) {
        if self.started.elapsed() < PATIENCE || self.waited.swap(true, Ordering::Relaxed) {
            return;
        }
        let line = format!(
            "rank {}: waiting for {}; gives up after {} s, {TIMEOUT_VARIABLE}\n",
            self.rank,
            waiting(),
            seconds(self.timeout)
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    /// How long the formation has taken so far, for the log.
    pub(crate) fn since(&self, then: Instant) -> String {
        format!("{:.1} ms", then.elapsed().as_secs_f64() * 1e3)
    }

    /// The timeout, in words, for errors.
    pub(crate) fn gave_up(&self) -> String {
        format!("{} s ({TIMEOUT_VARIABLE})", seconds(self.timeout))
    }
}

/// `30` for 30 s, `2.5` for 2.5 s.
fn seconds(duration: Duration) -> String {
    let s = duration.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_as_whole_or_tenths_of_seconds() {
        assert_eq!(seconds(Duration::from_secs(30)), "30");
        assert_eq!(seconds(Duration::from_millis(2500)), "2.5");
        let progress = Progress::new(0, Duration::from_secs(30));
        assert_eq!(progress.gave_up(), "30 s (NUVEC_DISTRIBUTED_TIMEOUT)");
    }
}
