//! [`Options`]: how a group forms and how long it waits.

use std::time::Duration;

/// Default seconds a rank waits for a peer before failing the operation.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 30;

/// Settings for forming a group.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How long to wait for a peer (to connect, or to send its part of a collective) before
    /// failing with an error naming it.
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
        }
    }
}

impl Options {
    /// Options with the given timeout.
    pub fn with_timeout(timeout: Duration) -> Options {
        Options { timeout }
    }

    /// Options from the environment: `NUVEC_DISTRIBUTED_TIMEOUT` (seconds, default 30).
    pub fn from_env() -> Result<Options, String> {
        let mut options = Options::default();
        if let Ok(value) = std::env::var("NUVEC_DISTRIBUTED_TIMEOUT") {
            let seconds: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0)
                .ok_or_else(|| format!("NUVEC_DISTRIBUTED_TIMEOUT must be a positive number of seconds, got {value:?}"))?;
            options.timeout = Duration::from_secs_f64(seconds);
        }
        Ok(options)
    }
}
