//! [`Options`]: how a group forms, how long it waits, which key authenticates it, and how the
//! ring moves bytes. Every environment variable of the ring (`NUVEC_RING_*`) is read here.

use crate::auth::Key;
use std::time::Duration;

/// Default seconds a rank waits for a peer before failing the operation.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 30;

/// Settings for forming a group. `Debug` shows whether a key is set, never the key.
///
/// ```
/// use nuvec_distributed::{Options, Polling, SharedMemory};
/// use std::time::Duration;
/// let options = Options::default()
///     .timeout(Duration::from_secs(5))
///     .key("a secret of at least sixteen bytes")
///     .polling(Polling::Yield)
///     .shared_memory(SharedMemory::Off);
/// assert_eq!(options.timeout, Duration::from_secs(5));
/// assert!(options.has_key());
/// assert!(!format!("{options:?}").contains("sixteen"));
/// // Unset ring settings come from `NUVEC_RING_*` when the group forms.
/// assert_eq!((options.polling, options.streaming_stores), (Some(Polling::Yield), None));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How long to wait for a peer (to connect, or to send its part of a collective) before
    /// failing with an error naming it.
    pub timeout: Duration,
    key: Option<Key>,
    /// How the ring's reads wait; `None`: `NUVEC_RING_POLL`, read when the group forms.
    pub polling: Option<Polling>,
    /// Whether ranks on one machine use shared memory; `None`: `NUVEC_RING_SHARED_MEMORY`.
    pub shared_memory: Option<SharedMemory>,
    /// How senders copy into shared memory; `None`: `NUVEC_RING_STREAMING_STORES`.
    pub streaming_stores: Option<StreamingStores>,
    /// Whether this rank reads other ranks' memory for large all-gathers on one machine;
    /// `None`: `NUVEC_RING_CROSS_MEMORY`.
    pub cross_memory: Option<CrossMemory>,
    /// Whether collectives on one machine time their two paths to choose between them;
    /// `None`: `NUVEC_RING_TUNING`.
    pub tuning: Option<Tuning>,
}

/// How a ring's read waits for data before it sleeps in the kernel (`NUVEC_RING_POLL`:
/// `auto`, `spin`, `yield`, `off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polling {
    /// Spin when this machine has a core for each of the group's ranks on it, else yield.
    Auto,
    /// Poll on the CPU briefly (for machines with a core per local rank).
    Spin,
    /// Poll, yielding the core between polls (for more local ranks than cores).
    Yield,
    /// Sleep at once.
    Off,
}

/// Whether ranks on one machine move large payloads and ring chunks through shared memory
/// (`NUVEC_RING_SHARED_MEMORY`: `auto`, `off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedMemory {
    /// Where two ranks find they share a machine.
    Auto,
    /// Never: everything on TCP.
    Off,
}

/// Whether a rank reads the blocks of a large all-gather straight out of the other ranks'
/// memory on its machine (`NUVEC_RING_CROSS_MEMORY`: `auto`, `off`): one copy instead of two.
/// Linux only, and only where the kernel lets one rank's process trace the other's (nuvec
/// does not loosen that); where it refuses, the ranks fall back to shared memory on their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossMemory {
    /// Where the kernel allows it.
    Auto,
    /// Never: this rank receives every block through shared memory.
    Off,
}

/// Whether the ring's collectives on one machine choose between their two paths (posting
/// through shared memory, or reading each other's memory; for two ranks' sums, the mailboxes
/// or the ring) by timing both on their first calls of each size, the same way on every rank
/// (`NUVEC_RING_TUNING`: `auto`, `off`). Both paths give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tuning {
    /// Time both paths on the first calls of each size, then keep the faster.
    Auto,
    /// Keep the fixed thresholds measured when nuvec was tuned.
    Off,
}

/// How a sender copies into shared memory (`NUVEC_RING_STREAMING_STORES`: `auto`, `on`,
/// `off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamingStores {
    /// Plain stores, streaming ones while timed copies show the cores share no cache.
    Auto,
    /// Always streaming stores (which bypass the cache).
    On,
    /// Always plain stores.
    Off,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            key: None,
            polling: None,
            shared_memory: None,
            streaming_stores: None,
            cross_memory: None,
            tuning: None,
        }
    }
}

/// The value of the environment variable `name` among `choices` (unset or empty: the first),
/// or an error naming the variable and the choices.
fn choice_of<T: Copy>(name: &str, value: Option<&str>, choices: &[(&str, T)]) -> Result<T, String> {
    let value = value.map(str::trim).unwrap_or("");
    if value.is_empty() {
        return Ok(choices[0].1);
    }
    choices
        .iter()
        .find(|(word, _)| *word == value)
        .map(|(_, choice)| *choice)
        .ok_or_else(|| {
            let words: Vec<&str> = choices.iter().map(|(word, _)| *word).collect();
            format!("{name} must be {}, got {value:?}", words.join(", "))
        })
}

/// The ring's settings for one group: those of the options, the environment's for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingSettings {
    pub(crate) polling: Polling,
    pub(crate) shared_memory: SharedMemory,
    pub(crate) streaming_stores: StreamingStores,
    pub(crate) cross_memory: CrossMemory,
    pub(crate) tuning: Tuning,
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

    /// Sets how the ring's reads wait (instead of `NUVEC_RING_POLL`).
    pub fn polling(mut self, polling: Polling) -> Options {
        self.polling = Some(polling);
        self
    }

    /// Sets whether ranks on one machine use shared memory (instead of
    /// `NUVEC_RING_SHARED_MEMORY`).
    pub fn shared_memory(mut self, shared_memory: SharedMemory) -> Options {
        self.shared_memory = Some(shared_memory);
        self
    }

    /// Sets how senders copy into shared memory (instead of `NUVEC_RING_STREAMING_STORES`).
    pub fn streaming_stores(mut self, streaming_stores: StreamingStores) -> Options {
        self.streaming_stores = Some(streaming_stores);
        self
    }

    /// Sets whether this rank reads other ranks' memory for large all-gathers (instead of
    /// `NUVEC_RING_CROSS_MEMORY`).
    pub fn cross_memory(mut self, cross_memory: CrossMemory) -> Options {
        self.cross_memory = Some(cross_memory);
        self
    }

    /// Sets whether collectives on one machine time their two paths (instead of
    /// `NUVEC_RING_TUNING`).
    pub fn tuning(mut self, tuning: Tuning) -> Options {
        self.tuning = Some(tuning);
        self
    }

    /// The ring's settings: those set here, the environment's (`NUVEC_RING_*`) for the rest.
    pub(crate) fn ring_settings(&self) -> Result<RingSettings, String> {
        self.ring_settings_from(&|name| std::env::var(name).ok())
    }

    /// [`Options::ring_settings`] with the environment's variables read by `var`.
    fn ring_settings_from(
        &self,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<RingSettings, String> {
        use Polling as P;
        let read = |name: &str| var(name);
        let polling = match self.polling {
            Some(polling) => polling,
            None => choice_of(
                "NUVEC_RING_POLL",
                read("NUVEC_RING_POLL").as_deref(),
                &[
                    ("auto", P::Auto),
                    ("spin", P::Spin),
                    ("yield", P::Yield),
                    ("off", P::Off),
                ],
            )?,
        };
        let shared_memory = match self.shared_memory {
            Some(choice) => choice,
            None => choice_of(
                "NUVEC_RING_SHARED_MEMORY",
                read("NUVEC_RING_SHARED_MEMORY").as_deref(),
                &[("auto", SharedMemory::Auto), ("off", SharedMemory::Off)],
            )?,
        };
        let streaming_stores = match self.streaming_stores {
            Some(choice) => choice,
            None => choice_of(
                "NUVEC_RING_STREAMING_STORES",
                read("NUVEC_RING_STREAMING_STORES").as_deref(),
                &[
                    ("auto", StreamingStores::Auto),
                    ("on", StreamingStores::On),
                    ("off", StreamingStores::Off),
                ],
            )?,
        };
        let cross_memory = match self.cross_memory {
            Some(choice) => choice,
            None => choice_of(
                "NUVEC_RING_CROSS_MEMORY",
                read("NUVEC_RING_CROSS_MEMORY").as_deref(),
                &[("auto", CrossMemory::Auto), ("off", CrossMemory::Off)],
            )?,
        };
        let tuning = match self.tuning {
            Some(choice) => choice,
            None => choice_of(
                "NUVEC_RING_TUNING",
                read("NUVEC_RING_TUNING").as_deref(),
                &[("auto", Tuning::Auto), ("off", Tuning::Off)],
            )?,
        };
        Ok(RingSettings {
            polling,
            shared_memory,
            streaming_stores,
            cross_memory,
            tuning,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(options: &Options, vars: &[(&str, &str)]) -> Result<RingSettings, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        options.ring_settings_from(&|name| {
            vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn ring_settings_come_from_the_options_else_the_environment_else_auto() {
        let auto = RingSettings {
            polling: Polling::Auto,
            shared_memory: SharedMemory::Auto,
            streaming_stores: StreamingStores::Auto,
            cross_memory: CrossMemory::Auto,
            tuning: Tuning::Auto,
        };
        assert_eq!(settings(&Options::default(), &[]), Ok(auto));
        let from_env = settings(
            &Options::default(),
            &[
                ("NUVEC_RING_POLL", " yield "),
                ("NUVEC_RING_SHARED_MEMORY", "off"),
                ("NUVEC_RING_CROSS_MEMORY", "off"),
                ("NUVEC_RING_TUNING", "off"),
            ],
        )
        .unwrap();
        assert_eq!(from_env.tuning, Tuning::Off);
        assert_eq!(from_env.polling, Polling::Yield);
        assert_eq!(from_env.shared_memory, SharedMemory::Off);
        assert_eq!(from_env.cross_memory, CrossMemory::Off);
        // What the options set wins over the environment.
        let options = Options::default()
            .polling(Polling::Off)
            .streaming_stores(StreamingStores::On);
        let both = settings(&options, &[("NUVEC_RING_POLL", "spin")]).unwrap();
        assert_eq!(
            (both.polling, both.streaming_stores),
            (Polling::Off, StreamingStores::On)
        );
    }

    #[test]
    fn a_bad_ring_variable_is_named_with_its_choices() {
        for (name, value) in [
            ("NUVEC_RING_POLL", "fast"),
            ("NUVEC_RING_SHARED_MEMORY", "yes"),
            ("NUVEC_RING_STREAMING_STORES", "maybe"),
            ("NUVEC_RING_CROSS_MEMORY", "on"),
            ("NUVEC_RING_TUNING", "fast"),
        ] {
            let error = settings(&Options::default(), &[(name, value)]).unwrap_err();
            assert!(
                error.starts_with(name) && error.contains(&format!("{value:?}")),
                "{error}"
            );
            assert!(error.contains("must be auto"), "{error}");
        }
    }
}
