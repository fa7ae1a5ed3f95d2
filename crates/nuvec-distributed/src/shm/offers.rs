//! Offering a shared-memory channel to another rank, and accepting one: how two ranks find
//! out that they are on one machine. The offering rank creates a channel file only its user
//! can open, with a random name and a random token inside, and sends an offer (the name and
//! the token) on its connection to the other rank, already authenticated when the group has a
//! key. A rank that can open the file, finds it private to the same user and holding the
//! token, is on the same machine (and sees the same files): it maps the file, removes it, and
//! answers [`YES`]; otherwise [`NO`]. A rank killed during the exchange may leave its offers
//! behind in `/dev/shm` (named `nuvec-ring-*`).

use super::channel::Channel;
use super::layout::TOKEN_BYTES;

/// An offer: magic, token, name length, name (empty: no channel offered).
pub(crate) const OFFER_BYTES: usize = 128;
pub(crate) const OFFER_MAGIC: &[u8; 8] = b"nuvecSHM";
const NAME_AT: usize = 8 + TOKEN_BYTES + 1;
const MAX_NAME: usize = OFFER_BYTES - NAME_AT;
/// The answers to an offer.
pub(crate) const YES: &[u8; 8] = b"nuvecYES";
pub(crate) const NO: &[u8; 8] = b"nuvec-NO";
/// Every channel file's name starts with this.
const NAME_PREFIX: &str = "nuvec-ring-";

/// Whether `name` could be a channel file's name: the prefix, then letters, digits and
/// dashes (no path: an offer cannot point this rank at another file).
fn plausible_name(name: &str) -> bool {
    name.starts_with(NAME_PREFIX)
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// An offer of no channel: the magic and an empty name.
pub(crate) fn empty_offer() -> [u8; OFFER_BYTES] {
    let mut offer = [0u8; OFFER_BYTES];
    offer[..8].copy_from_slice(OFFER_MAGIC);
    offer
}

/// A new channel to rank `dst` and the offer that announces it, or an empty offer when none
/// can be made (no shared-memory directory, say: the payloads then go on TCP).
pub(crate) fn offer_to(rank: usize, dst: usize) -> (Option<Channel>, [u8; OFFER_BYTES]) {
    let mut offer = empty_offer();
    let mut random = [0u8; TOKEN_BYTES + 8];
    if getrandom::fill(&mut random).is_err() {
        return (None, offer);
    }
    let (token, tag) = random.split_at(TOKEN_BYTES);
    let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("{NAME_PREFIX}{}-{rank}-{dst}-{tag}", std::process::id());
    if name.len() > MAX_NAME {
        return (None, offer);
    }
    let token: [u8; TOKEN_BYTES] = token.try_into().expect("the token's length");
    let path = crate::platform::shared_memory_dir().join(&name);
    let Ok(channel) = Channel::create(path, &token, dst) else {
        return (None, offer);
    };
    offer[8..8 + TOKEN_BYTES].copy_from_slice(&token);
    offer[NAME_AT - 1] = name.len() as u8;
    offer[NAME_AT..NAME_AT + name.len()].copy_from_slice(name.as_bytes());
    (Some(channel), offer)
}

/// The channel that rank `src`'s `offer` announces, if this rank can open it.
pub(crate) fn accept(src: usize, offer: &[u8; OFFER_BYTES]) -> Option<Channel> {
    let length = offer[NAME_AT - 1] as usize;
    let name = std::str::from_utf8(offer.get(NAME_AT..NAME_AT + length)?).ok()?;
    if !plausible_name(name) {
        return None;
    }
    let token: [u8; TOKEN_BYTES] = offer[8..8 + TOKEN_BYTES].try_into().ok()?;
    let path = crate::platform::shared_memory_dir().join(name);
    Channel::open(&path, &token, src).ok()
}

/// What a peer that offers no channel and declines every offer writes after the
/// connections form, and how many bytes it reads back (on a group of two): for tests that
/// play a rank by hand.
#[cfg(test)]
pub(crate) fn declining_exchange() -> (Vec<u8>, usize) {
    let mut bytes = empty_offer().to_vec();
    bytes.extend_from_slice(NO);
    // Then: this rank does not have every channel, nor more ranks than cores
    // (`ring/channels.rs`).
    bytes.extend_from_slice(&[0, 0]);
    (bytes, OFFER_BYTES + NO.len() + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_cannot_name_paths_or_foreign_files() {
        assert!(plausible_name("nuvec-ring-12-0-1-00ff"));
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "nuvec-ring-../../x",
            "nuvec-ring-a/b",
            "other-name",
            "nuvec-ring-a.b",
        ] {
            assert!(!plausible_name(bad), "{bad}");
        }
        let mut offer = empty_offer();
        let name = b"/etc/passwd";
        offer[NAME_AT - 1] = name.len() as u8;
        offer[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
        assert!(accept(1, &offer).is_none());
        // A length past the record is refused, not read beyond it.
        offer[NAME_AT - 1] = 255;
        assert!(accept(1, &offer).is_none());
    }

    #[test]
    fn an_offer_opens_on_this_machine_once_and_only_with_its_token() {
        let (channel, offer) = offer_to(0, 1);
        assert!(channel.is_some(), "no shared-memory directory here?");
        let mut forged = offer;
        forged[8] ^= 1;
        assert!(accept(0, &forged).is_none(), "a wrong token was accepted");
        assert!(accept(0, &offer).is_some());
        // Accepting removes the file: the offer cannot be taken twice.
        assert!(accept(0, &offer).is_none());
    }
}
