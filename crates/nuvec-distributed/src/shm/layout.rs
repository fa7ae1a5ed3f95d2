//! The layout of a channel's file: control words on cache lines of their own (the token, the
//! sender's and the receiver's counters), then [`SLOTS`] slots of [`SLOT_BYTES`], page-aligned.

/// Bytes per slot.
pub(crate) const SLOT_BYTES: usize = 128 << 10;
/// Slots per channel: the most payload a sender can leave for a receiver not yet reading.
pub(crate) const SLOTS: usize = 8;
/// Where the control words end and the slots start (a page, so slots stay page-aligned).
pub(crate) const SLOTS_AT: usize = 4096;
/// The size of a channel's file and mapping.
pub(crate) const CHANNEL_BYTES: usize = SLOTS_AT + SLOTS * SLOT_BYTES;
/// Where the channel's token (written by its creator, checked by the opener) lies.
pub(crate) const TOKEN_AT: usize = 0;
/// Bytes of the token.
pub(crate) const TOKEN_BYTES: usize = 16;
/// Where the sender's and the receiver's counters lie, on cache lines of their own.
pub(crate) const HEAD_AT: usize = 128;
pub(crate) const TAIL_AT: usize = 256;
