//! The shared-memory transport between ranks on one machine: a one-way channel of slots
//! (`channel.rs`) with a mailbox for small collectives (`mailbox.rs`), how its sender copies
//! into a slot (`slot_copies.rs`), and how two ranks find out they share a machine and open
//! one (`offers.rs`). `README.md` maps the files.

mod channel;
mod layout;
mod mailbox;
pub(crate) mod offers;
mod replies;
mod slot_copies;

pub(crate) use channel::Channel;
pub(crate) use layout::{MESSAGE_POST_BYTES, POST_BYTES, SLOTS, SLOT_BYTES};
pub(crate) use mailbox::Mailbox;
pub(crate) use replies::{Answer, Reply};
pub(crate) use slot_copies::Policy;
