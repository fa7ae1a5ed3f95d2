//! JACCL, MLX's RDMA backend (mesh and ring over ibverbs): so far its configuration. The
//! transport (verbs, an emulated fabric) and the collectives are not built yet;
//! `init_backend(_, Backend::Jaccl)` says so.

mod config;

pub use config::{Config, Topology, MESH_MAX_RANKS, RING_MAX_WIRES};
