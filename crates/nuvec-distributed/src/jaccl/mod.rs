//! JACCL, MLX's RDMA backend: a mesh (every pair of ranks cabled, up to 8) or a ring (every
//! rank cabled to its neighbours, up to 4 cables each way) over ibverbs, with a TCP side channel
//! through a coordinator for setting up.
//!
//! - [`Config`] reads MLX's launch environment and device file and chooses the topology as MLX
//!   does; `init_with` forms a group from a configuration and [`Options`](crate::Options).
//! - The verbs layer sits behind a small trait with two fabrics: the system's ibverbs library
//!   loaded at run time, and an emulated fabric of Unix datagram sockets for machines without
//!   RDMA hardware (`NUVEC_JACCL_FABRIC=emulated`), which keeps the rules of unreliable
//!   connected queue pairs: MTU-sized packets, lost packets losing their message, messages
//!   without a posted receive dropped.
//! - Every message carries a sequence number and every wait ends within the group's timeout, so
//!   a lost frame, a dead peer or a stalled one fails the operation with an error naming the
//!   peer; MLX's JACCL spins forever instead.

//!
//! Everything but [`Config`] needs the crate's `jaccl` feature (nuvec's `jaccl` feature turns
//! it on); without it, `init_backend(true, Backend::Jaccl)` says how to enable it.

#[cfg(feature = "jaccl")]
mod channel;
mod config;
#[cfg(feature = "jaccl")]
mod devices;
#[cfg(feature = "jaccl")]
mod exchange;
#[cfg(feature = "jaccl")]
mod fabric;
#[cfg(feature = "jaccl")]
mod form;
#[cfg(feature = "jaccl")]
mod group;
#[cfg(feature = "jaccl")]
mod mesh;
#[cfg(feature = "jaccl")]
mod options;
#[cfg(feature = "jaccl")]
mod ring;
#[cfg(feature = "jaccl")]
mod scratch;
#[cfg(feature = "jaccl")]
mod side;
#[cfg(feature = "jaccl")]
mod split;
#[cfg(feature = "jaccl")]
mod watch;

pub use config::{Config, Topology, MESH_MAX_RANKS, RING_MAX_WIRES};
#[cfg(feature = "jaccl")]
pub use devices::{devices, Device, PortState};
#[cfg(feature = "jaccl")]
pub use fabric::FABRIC_VARIABLE;
#[cfg(feature = "jaccl")]
pub use group::{init_with, JacclCommunicator};
#[cfg(feature = "jaccl")]
pub use options::{AllGather, Fabric, Options};

/// An error of operation `op` on rank `rank`.
#[cfg(feature = "jaccl")]
pub(crate) fn jaccl_error(op: &str, rank: usize, reason: String) -> nuvec_core::Error {
    nuvec_core::Error::Distributed {
        op: op.into(),
        rank: Some(rank),
        reason,
    }
}

/// Whether JACCL can run here: this build has the `jaccl` feature, and the emulated fabric is
/// selected (`NUVEC_JACCL_FABRIC=emulated`) or the system's ibverbs library loads.
pub fn available() -> bool {
    #[cfg(feature = "jaccl")]
    {
        std::env::var(FABRIC_VARIABLE).as_deref() == Ok("emulated")
            || fabric::verbs::library_loads()
    }
    #[cfg(not(feature = "jaccl"))]
    {
        false
    }
}
