//! The ring backend's collective algorithms: the ring's two phases chunk by chunk
//! (`ring_phases.rs`, `reduce_scatter.rs`), the outbox that paces their sends (`outbox.rs`),
//! large all-reduces split over lanes (`lanes.rs`), and the latency paths for small
//! collectives, through rank 0 (`star.rs`) or by recursive doubling (`doubling.rs`).
//! `../README.md` has the glossary of the words for pieces of a buffer.

pub(crate) mod doubling;
pub(crate) mod lanes;
pub(crate) mod outbox;
mod reduce_scatter;
mod ring_phases;
pub(crate) mod star;
