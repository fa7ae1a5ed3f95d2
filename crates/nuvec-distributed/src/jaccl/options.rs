//! [`Options`]: how a JACCL group forms and how long it waits.

use nuvec_core::Result;
use std::sync::Arc;
use std::time::Duration;

/// A caller's all-gather for the side channel: given this rank's bytes (the same length on
/// every rank), returns every rank's bytes concatenated in rank order.
pub type AllGather = Arc<dyn Fn(&[u8]) -> Result<Vec<u8>> + Send + Sync>;

/// Settings for [`super::init_with`]. `Debug` shows whether a key is set, never the key.
///
/// ```
/// use nuvec_distributed::jaccl::Options;
/// use std::time::Duration;
/// let options = Options::default()
///     .timeout(Duration::from_secs(5))
///     .key("a secret of at least sixteen bytes");
/// assert_eq!(options.group_timeout(), Duration::from_secs(5));
/// assert!(!format!("{options:?}").contains("sixteen"));
/// ```
#[derive(Clone, Default)]
pub struct Options {
    pub(crate) base: crate::Options,
    pub(crate) side_channel: Option<AllGather>,
    pub(crate) fabric: Option<Fabric>,
}

/// Which fabric a group runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fabric {
    /// The system's ibverbs library (RDMA hardware).
    Verbs,
    /// The emulated fabric: queue pairs between processes on this machine.
    Emulated,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("timeout", &self.base.timeout)
            .field("key", &self.base.has_key())
            .field("side_channel", &self.side_channel.is_some())
            .field("fabric", &self.fabric)
            .finish()
    }
}

impl Options {
    /// Options from the environment, as the ring reads them: `NUVEC_DISTRIBUTED_TIMEOUT`
    /// and `NUVEC_DISTRIBUTED_KEY`.
    pub fn from_env() -> std::result::Result<Options, String> {
        Ok(Options {
            base: crate::Options::from_env()?,
            side_channel: None,
            fabric: None,
        })
    }

    /// How long to wait for a peer (to join, or to make progress in an operation) before
    /// failing with an error naming it.
    pub fn timeout(mut self, timeout: Duration) -> Options {
        self.base = self.base.timeout(timeout);
        self
    }

    /// Authenticates the side channel's connections with this pre-shared secret (the same on
    /// every rank, at least 16 bytes), as the ring's connections are.
    pub fn key(mut self, secret: impl AsRef<[u8]>) -> Options {
        self.base = self.base.key(secret);
        self
    }

    /// Replaces the coordinator with the caller's own all-gather (MLX's
    /// `all_gather_factory`); `health()` then checks only this rank's state.
    pub fn side_channel(
        mut self,
        all_gather: impl Fn(&[u8]) -> Result<Vec<u8>> + Send + Sync + 'static,
    ) -> Options {
        self.side_channel = Some(Arc::new(all_gather));
        self
    }

    /// Runs on `fabric` whatever `NUVEC_JACCL_FABRIC` says (which decides otherwise, the
    /// system's verbs by default).
    pub fn fabric(mut self, fabric: Fabric) -> Options {
        self.fabric = Some(fabric);
        self
    }

    /// The timeout set.
    pub fn group_timeout(&self) -> Duration {
        self.base.timeout
    }
}
