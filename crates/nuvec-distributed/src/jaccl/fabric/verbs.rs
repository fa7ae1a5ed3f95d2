//! The system's ibverbs library, loaded at run time.

use super::{Fabric, QueuePair};
use nuvec_core::{Error, Result};

/// Whether the verbs library loads on this machine.
pub(crate) fn library_loads() -> bool {
    false
}

/// The fabric over the system's ibverbs.
#[derive(Debug)]
pub(crate) struct VerbsFabric;

impl VerbsFabric {
    pub(crate) fn load() -> Result<VerbsFabric> {
        Err(Error::Distributed {
            op: "jaccl".into(),
            rank: None,
            reason: "ibverbs: not yet".into(),
        })
    }
}

impl Fabric for VerbsFabric {
    fn name(&self) -> &'static str {
        "verbs"
    }
    fn open(&self, _device: &str, _slots: usize, _slot_bytes: usize) -> Result<Box<dyn QueuePair>> {
        unreachable!()
    }
}
