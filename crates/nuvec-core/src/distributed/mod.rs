//! The front of `nuvec::distributed`: groups, the [`Communicator`] contract that backends
//! implement, and the collectives as lazy, effectful primitives.
//!
//! Backends (the TCP ring, later JACCL and MPI) live in `nuvec-distributed`, which registers
//! a communicator and gets back a [`Group`]; everything here is backend-agnostic.

mod all_to_all;
mod broadcast;
mod collectives;
mod communicator;
mod group;
mod point_to_point;
mod shared;
mod trace;
mod trace_clock;
pub(crate) mod worker;

pub use all_to_all::{
    all_to_all, all_to_all_by_gathering, all_to_all_counts, all_to_all_v,
    all_to_all_v_by_gathering, check_all_to_all_counts,
};
pub use broadcast::{barrier, broadcast};
pub use collectives::{all_gather, all_max, all_min, all_sum, sum_gradients, sum_scatter};
#[cfg(feature = "cuda")]
pub use communicator::DeviceCollectives;
pub use communicator::{Communicator, LinkTraffic, ReduceOp};
pub use group::{default_group, initialized_default, set_default_group, Group};
pub use point_to_point::{recv, recv_like, send};
pub use trace::{records_json, Record, State, Trace};
