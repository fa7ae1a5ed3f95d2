//! nuvec's distributed backends and the functions that form groups.
//!
//! [`init`] reads MLX's launch environment (`MLX_HOSTFILE` and `MLX_RANK` for the ring,
//! `MLX_IBV_DEVICES` for JACCL with the `jaccl` feature) and connects; [`init_with`] forms a group from addresses given in code. The collectives
//! themselves (`all_sum`, `all_gather`, …) are lazy ops of `nuvec_core::distributed`; the
//! facade `nuvec::distributed` merges both.
#![warn(missing_docs)]
#![doc(test(attr(deny(warnings))))]
// Unsafe code only in `platform.rs`, the one place that calls the operating system directly,
// `shm/channel.rs`, which reads and writes the shared mapping, `mpi/ffi.rs`, the one place
// that calls Open MPI, and JACCL's `fabric/ffi.rs`, `fabric/verbs.rs` and `devices.rs`,
// which call ibverbs.
#![deny(unsafe_code)]

mod auth;
mod backend;
#[cfg(test)]
mod c_probe;
mod hostfile;
pub mod jaccl;
mod kernels;
pub mod mpi;
pub mod nccl;
mod options;
mod platform;
pub mod ring;
mod schedule;
mod shm;
mod split;
mod sync;
mod tcp;
#[cfg(test)]
mod test_random;
mod whereabouts;

pub use backend::{init, init_backend, init_with, is_available, Backend};
pub use hostfile::{parse_hostfile, read_hostfile, Address};
pub use options::{CrossMemory, Options, Polling, SharedMemory, StreamingStores, Tuning};
