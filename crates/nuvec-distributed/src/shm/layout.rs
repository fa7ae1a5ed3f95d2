//! The layout of a channel's file: control words on cache lines of their own (the token, the
//! sender's and the receiver's counters, the mailbox's counters and its posts' headers), then
//! [`SLOTS`] slots of [`SLOT_BYTES`], then the mailbox's [`POSTS`] buffers of [`POST_BYTES`],
//! page-aligned.

/// Bytes per slot.
pub(crate) const SLOT_BYTES: usize = 128 << 10;
/// Slots per channel: the most payload a sender can leave for a receiver not yet reading.
pub(crate) const SLOTS: usize = 8;
/// Where the control words end and the slots start (a page, so slots stay page-aligned).
pub(crate) const SLOTS_AT: usize = 4096;
/// Where the token (written by its creator, checked by the opener) lies.
pub(crate) const TOKEN_AT: usize = 0;
/// Bytes of the token.
pub(crate) const TOKEN_BYTES: usize = 16;
/// Where the sender's and the receiver's counters lie, on cache lines of their own.
pub(crate) const HEAD_AT: usize = 128;
pub(crate) const TAIL_AT: usize = 256;

/// The mailbox (`mailbox.rs`): posts a sender may leave unread before it waits.
pub(crate) const POSTS: usize = 2;
/// Bytes of payload per post.
pub(crate) const POST_BYTES: usize = 128 << 10;
/// The words the mailbox's sender writes (how many it posted; whether it sleeps waiting for
/// a free buffer; whether its rank gave the group up), and those its receiver writes (how many it took; whether it sleeps
/// waiting for a post), each side on cache lines of its own.
pub(crate) const POSTED_AT: usize = 384;
pub(crate) const SENDER_SLEEPS_AT: usize = 388;
pub(crate) const SENDER_GAVE_UP_AT: usize = 392;
pub(crate) const TAKEN_AT: usize = 512;
pub(crate) const RECEIVER_SLEEPS_AT: usize = 516;
/// Where each post's header lies (post `i` at `POST_HEADERS_AT + i * POST_HEADER_STRIDE`).
pub(crate) const POST_HEADERS_AT: usize = 640;
pub(crate) const POST_HEADER_STRIDE: usize = 128;
/// Where the mailbox's buffers start, after the slots.
pub(crate) const POSTS_AT: usize = SLOTS_AT + SLOTS * SLOT_BYTES;
/// The size of a channel's file and mapping.
pub(crate) const CHANNEL_BYTES: usize = POSTS_AT + POSTS * POST_BYTES;

const _: () = assert!(POST_HEADERS_AT + POSTS * POST_HEADER_STRIDE <= SLOTS_AT);
