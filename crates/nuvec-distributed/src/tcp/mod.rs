//! The TCP transport: forming a group's connections (listening, connecting, the handshake),
//! one connection to a peer with its reads and writes, the frames every message and chunk
//! travels in, and the watch that notices a peer calling something else. Nothing here knows
//! the collective algorithms; `README.md` maps the files.

mod accept;
mod connection;
#[cfg(test)]
pub(crate) mod connection_tests;
mod form;
mod formed;
pub(crate) mod frame;
pub(crate) mod handshake;
pub(crate) mod pairs;
mod progress;
pub(crate) mod watch;
pub(crate) mod wire;

pub(crate) use connection::{Connection, SEND_PIECE};
pub(crate) use form::{form_mesh, form_star, free_port};
pub(crate) use pairs::connections_between;
