//! [`Options`]: how a group forms, how long it waits and which key authenticates it.

use crate::auth::Key;
use std::time::Duration;

/// Default seconds a rank waits for a peer before failing the operation.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 30;

/// Settings for forming a group. `Debug` shows whether a key is set, never the key.
///
/// ```
/// use nuvec_distributed::Options;
/// use std::time::Duration;
/// let options = Options::default()
///     .timeout(Duration::from_secs(5))
///     .key("a secret of at least sixteen bytes");
/// assert_eq!(options.timeout, Duration::from_secs(5));
/// assert!(options.has_key());
/// assert!(!format!("{options:?}").contains("sixteen"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How long to wait for a peer (to connect, or to send its part of a collective) before
    /// failing with an error naming it.
    pub timeout: Duration,
    key: Option<Key>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            key: None,
        }
    }
}

impl Options {
    /// Options with the given timeout (and no key).
    pub fn with_timeout(timeout: Duration) -> Options {
        Options::default().timeout(timeout)
    }

    /// Sets how long to wait for a peer.
    pub fn timeout(mut self, timeout: Duration) -> Options {
        self.timeout = timeout;
        self
    }

    /// Authenticates every connection with this pre-shared secret, which must be the same on
    /// every rank and at least 16 bytes long (a shorter one is refused when the group forms;
    /// `openssl rand -hex 32` makes a good one). A host without it cannot join the group. The
    /// traffic itself is not encrypted: on an untrusted network, run the group over a VPN.
    pub fn key(mut self, secret: impl AsRef<[u8]>) -> Options {
        self.key = Some(Key::new(secret.as_ref()));
        self
    }

    /// Whether a key is set.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    pub(crate) fn key_material(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    /// Refuses a key that is too short (the error never shows it).
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.key.as_ref().map_or(Ok(()), Key::validate)
    }

    /// Options from the environment: `NUVEC_DISTRIBUTED_TIMEOUT` (seconds, default 30) and
    /// `NUVEC_DISTRIBUTED_KEY` (the pre-shared secret, if set).
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
        if let Some(secret) = std::env::var_os("NUVEC_DISTRIBUTED_KEY") {
            options = options.key(secret.as_encoded_bytes());
        }
        Ok(options)
    }
}
