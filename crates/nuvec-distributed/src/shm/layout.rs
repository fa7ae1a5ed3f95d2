//! The layout of a channel's file: control words on cache lines of their own (the token, the
//! sender's and the receiver's counters, the mailboxes' counters and their posts' headers),
//! then [`SLOTS`] slots of [`SLOT_BYTES`], then each mailbox's [`POSTS`] buffers of
//! [`POST_BYTES`], page-aligned.

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

/// The collectives' mailbox (`mailbox.rs`): posts a sender may leave unread before it waits,
/// and bytes of payload per post.
pub(crate) const POSTS: usize = 2;
pub(crate) const POST_BYTES: usize = 128 << 10;
/// The messages' mailbox: many small posts, so a rank can send a few dozen small messages
/// before the receiver takes the first, as a socket's buffers allowed before the mailboxes.
pub(crate) const MESSAGE_POSTS: usize = 32;
pub(crate) const MESSAGE_POST_BYTES: usize = 16 << 10;
/// Where the mailboxes' buffers start, after the slots.
pub(crate) const POSTS_AT: usize = SLOTS_AT + SLOTS * SLOT_BYTES;
/// Where a sender that gave the group up says so (on the first mailbox's sender line).
pub(crate) const SENDER_GAVE_UP_AT: usize = 392;

/// Where one mailbox's words, headers and buffers lie, and how many posts of how many bytes
/// it holds. The words its sender writes (how many it posted; whether it sleeps waiting for a
/// free buffer) and those its receiver writes (how many it took; whether it sleeps waiting
/// for a post) are on cache lines of their own.
pub(crate) struct MailboxLayout {
    pub(crate) posted_at: usize,
    pub(crate) sender_sleeps_at: usize,
    pub(crate) taken_at: usize,
    pub(crate) receiver_sleeps_at: usize,
    /// The receiver's answer to a post it was asked to answer (`Channel::answer`).
    pub(crate) answer_at: usize,
    /// A receiver's request that the sender write part of a payload itself, and where
    /// (`Channel::ask_to_write`): the stamp, then a posted location's 20 bytes.
    pub(crate) split_at: usize,
    /// The sender's word that it wrote that part (`Channel::wrote`).
    pub(crate) written_at: usize,
    /// The receiver's word, while it waits for a post (`Channel::next_post`): that post's
    /// number plus one. A sender that sees it knows the receiver takes its next post at once.
    pub(crate) waits_for_at: usize,
    /// Post `i`'s header at `headers_at + i * POST_HEADER_STRIDE`.
    pub(crate) headers_at: usize,
    /// Post `i`'s buffer at `buffers_at + i * post_bytes`.
    pub(crate) buffers_at: usize,
    pub(crate) posts: usize,
    pub(crate) post_bytes: usize,
}

pub(crate) const POST_HEADER_STRIDE: usize = 64;
/// Where, in a post's header line, the sender stamps the post's number plus one once the
/// post is complete. The receiver waits on this word, so the header arrives with it: one
/// cache line crossing between the cores, not one for a counter and then one for the header.
pub(crate) const STAMP_AT: usize = 60;
/// A post's payload of at most [`INLINE_BYTES`] lies in its header line, after the header's
/// record (header, offset, length), and crosses with it: a barrier's or a scalar's sum.
pub(crate) const INLINE_AT: usize = crate::tcp::frame::HEADER_BYTES + 16;
pub(crate) const INLINE_BYTES: usize = STAMP_AT - INLINE_AT;

/// The collectives' mailbox and the point-to-point messages' one: a message not yet received
/// never stands in a collective's way.
pub(crate) const MAILBOXES: [MailboxLayout; 2] = [
    mailbox(384, 640, (POSTS_AT, POSTS, POST_BYTES)),
    mailbox(
        1024,
        1536,
        (
            POSTS_AT + POSTS * POST_BYTES,
            MESSAGE_POSTS,
            MESSAGE_POST_BYTES,
        ),
    ),
];

const fn mailbox(
    at: usize,
    headers_at: usize,
    (buffers_at, posts, post_bytes): (usize, usize, usize),
) -> MailboxLayout {
    MailboxLayout {
        posted_at: at,
        sender_sleeps_at: at + 4,
        taken_at: at + 128,
        receiver_sleeps_at: at + 132,
        answer_at: at + 136,
        split_at: at + 140,
        written_at: at + 12,
        waits_for_at: at + 164,
        headers_at,
        buffers_at,
        posts,
        post_bytes,
    }
}

/// The size of a channel's file and mapping.
pub(crate) const CHANNEL_BYTES: usize =
    POSTS_AT + POSTS * POST_BYTES + MESSAGE_POSTS * MESSAGE_POST_BYTES;

const _: () = {
    // A post's record, its inline payload and its stamp share its header line.
    assert!(INLINE_AT + INLINE_BYTES == STAMP_AT && STAMP_AT + 4 <= POST_HEADER_STRIDE);
    // The split request's stamp and location stay on the receiver's line, the written word
    // on the sender's, clear of the word that says the sender gave up.
    assert!(MAILBOXES[0].split_at + 4 + 20 <= MAILBOXES[0].headers_at);
    assert!(MAILBOXES[1].split_at + 4 + 20 <= MAILBOXES[1].taken_at + 128);
    // The word saying which post the receiver waits for is on its line, after the request.
    assert!(MAILBOXES[0].waits_for_at == MAILBOXES[0].split_at + 4 + 20);
    assert!(MAILBOXES[0].waits_for_at + 4 <= MAILBOXES[0].headers_at);
    assert!(MAILBOXES[1].waits_for_at + 4 <= MAILBOXES[1].taken_at + 128);
    assert!(MAILBOXES[0].written_at != SENDER_GAVE_UP_AT);
    assert!(MAILBOXES[0].headers_at + POSTS * POST_HEADER_STRIDE <= MAILBOXES[1].posted_at);
    assert!(MAILBOXES[1].headers_at >= MAILBOXES[1].taken_at + 128);
    assert!(MAILBOXES[1].headers_at + MESSAGE_POSTS * POST_HEADER_STRIDE <= SLOTS_AT);
    assert!(MAILBOXES[1].buffers_at + MESSAGE_POSTS * MESSAGE_POST_BYTES == CHANNEL_BYTES);
};
