//! Streaming detokenizers, as mlx-lm's: text comes out as tokens arrive, never splitting a
//! UTF-8 character across two pieces.
//!
//! For byte-level BPE vocabularies (GPT-2, Llama 3, Qwen) the token strings are mapped back
//! to bytes and text is released once it decodes whole; a leading space of the very first
//! piece is dropped and a lone space waits for the next token, as mlx-lm's
//! `BPEStreamingDetokenizer` does. SentencePiece vocabularies (a decoder that replaces `▁`
//! with a space, falls back to `<0xNN>` byte tokens and fuses, with or without stripping the
//! first space) join the tokens' bytes and release text once it decodes whole, as mlx-lm's
//! `SPMStreamingDetokenizer`. Other vocabularies decode the pending tokens with the tokenizer
//! and release text at line ends (mlx-lm's `NaiveStreamingDetokenizer`).

use std::collections::HashMap;

/// GPT-2's printable stand-ins for bytes: the character a byte-level vocabulary writes for
/// each byte value, inverted.
fn byte_decoder() -> HashMap<char, u8> {
    let mut map = HashMap::with_capacity(256);
    let printable = |b: u32| {
        (u32::from('!')..=u32::from('~')).contains(&b)
            || (u32::from('¡')..=u32::from('¬')).contains(&b)
            || (u32::from('®')..=u32::from('ÿ')).contains(&b)
    };
    let mut shifted = 0;
    for b in 0..256u32 {
        let c = if printable(b) {
            char::from_u32(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted)
        };
        if let Some(c) = c {
            map.insert(c, b as u8);
        }
    }
    map
}

/// What a detokenizer needs of a vocabulary.
#[derive(Debug, Clone)]
pub(crate) enum Vocabulary {
    /// Byte-level BPE: each id's token string.
    ByteLevel(Vec<String>),
    /// SentencePiece: each id's bytes (a `<0xNN>` token is that byte), and whether a space
    /// that begins the text is dropped.
    Spm {
        tokens: Vec<Vec<u8>>,
        trim_space: bool,
    },
    /// Anything else: decoded with the tokenizer.
    Other(Box<tokenizers::Tokenizer>),
}

/// Turns a stream of token ids into text pieces.
#[derive(Debug, Clone)]
pub struct StreamingDetokenizer {
    vocabulary: std::sync::Arc<Vocabulary>,
    bytes: std::sync::Arc<HashMap<char, u8>>,
    tokens: Vec<u32>,
    text: String,
    offset: usize,
    unflushed: String,
    spm_bytes: Vec<u8>,
    pending: Vec<u32>,
}

impl StreamingDetokenizer {
    pub(crate) fn new(vocabulary: std::sync::Arc<Vocabulary>) -> StreamingDetokenizer {
        StreamingDetokenizer {
            vocabulary,
            bytes: std::sync::Arc::new(byte_decoder()),
            tokens: Vec::new(),
            text: String::new(),
            offset: 0,
            unflushed: String::new(),
            spm_bytes: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Forgets every token.
    pub fn reset(&mut self) {
        self.tokens.clear();
        self.text.clear();
        self.offset = 0;
        self.unflushed.clear();
        self.spm_bytes.clear();
        self.pending.clear();
    }

    /// The ids added so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    fn decode_bytes(&self, pieces: &str) -> String {
        let mut raw = Vec::with_capacity(pieces.len());
        for c in pieces.chars() {
            match self.bytes.get(&c) {
                // mlx-lm treats byte 0 as unmapped and keeps the character's own UTF-8.
                Some(&b) if b != 0 => raw.push(b),
                _ => raw.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        String::from_utf8_lossy(&raw).into_owned()
    }

    fn trim_first_space<'a>(&self, piece: &'a str) -> &'a str {
        match piece.strip_prefix(' ') {
            Some(rest) if self.text.is_empty() => rest,
            _ => piece,
        }
    }

    /// Adds one token.
    pub fn add_token(&mut self, token: u32) {
        self.tokens.push(token);
        match &*self.vocabulary {
            Vocabulary::ByteLevel(strings) => {
                let piece = strings.get(token as usize).map_or("!", String::as_str);
                self.unflushed.push_str(piece);
                let text = self.decode_bytes(&self.unflushed);
                let lone_space = piece.chars().count() == 1
                    && piece.chars().next().and_then(|c| self.bytes.get(&c)) == Some(&32);
                if !text.ends_with('\u{fffd}') && !lone_space {
                    let trimmed = self.trim_first_space(&text).to_string();
                    self.text.push_str(&trimmed);
                    self.unflushed.clear();
                }
            }
            Vocabulary::Spm { tokens, trim_space } => {
                let bytes = tokens.get(token as usize).map_or(&[][..], Vec::as_slice);
                self.spm_bytes.extend_from_slice(bytes);
                self.flush_spm(*trim_space, false);
            }
            Vocabulary::Other(tokenizer) => {
                self.pending.push(token);
                let decoded = tokenizer.decode(&self.pending, false).unwrap_or_default();
                if decoded.ends_with('\n') {
                    self.text.push_str(&decoded);
                    self.pending.clear();
                }
            }
        }
    }

    /// Releases whatever is held back (call after the last token).
    pub fn finalize(&mut self) {
        match &*self.vocabulary {
            Vocabulary::ByteLevel(_) => {
                let unflushed = std::mem::take(&mut self.unflushed);
                let text = self.decode_bytes(&unflushed);
                let trimmed = self.trim_first_space(&text).to_string();
                self.text.push_str(&trimmed);
            }
            Vocabulary::Spm { trim_space, .. } => {
                self.flush_spm(*trim_space, true);
                self.spm_bytes.clear();
            }
            Vocabulary::Other(tokenizer) => {
                let decoded = tokenizer.decode(&self.pending, false).unwrap_or_default();
                self.text.push_str(&decoded);
                self.pending.clear();
            }
        }
    }

    /// Releases the pending SentencePiece bytes (`▁` read as a space) unless they end inside
    /// a character and `force` is not set; while nothing has been released, a leading space
    /// is dropped when `trim_space`.
    fn flush_spm(&mut self, trim_space: bool, force: bool) {
        const SEPARATOR: &[u8] = "\u{2581}".as_bytes();
        let mut joined = Vec::with_capacity(self.spm_bytes.len());
        let mut rest = &self.spm_bytes[..];
        while !rest.is_empty() {
            if rest.starts_with(SEPARATOR) {
                joined.push(b' ');
                rest = &rest[SEPARATOR.len()..];
            } else {
                joined.push(rest[0]);
                rest = &rest[1..];
            }
        }
        let text = String::from_utf8_lossy(&joined);
        if !force && text.ends_with('\u{fffd}') {
            return;
        }
        let text = match text.strip_prefix(' ') {
            Some(rest) if trim_space && self.text.is_empty() => rest,
            _ => &text,
        };
        self.text.push_str(text);
        self.spm_bytes.clear();
    }

    /// All text released so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text released since the last call.
    pub fn last_segment(&mut self) -> String {
        let segment = self.text[self.offset..].to_string();
        self.offset = self.text.len();
        segment
    }
}

/// Which of mlx-lm's streaming detokenizers a `tokenizer.json` decoder calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecoderKind {
    /// `ByteLevel`: the BPE detokenizer.
    ByteLevel,
    /// SentencePiece's decoder sequence, exactly as mlx-lm matches it; `trim_space` when it
    /// ends by stripping one leading space.
    Spm { trim_space: bool },
    /// Anything else: decode with the tokenizer.
    Other,
}

/// The detokenizer for `decoder` (the `decoder` of `tokenizer.json`), chosen as mlx-lm
/// chooses: the SentencePiece sequences must match exactly, key for key.
pub(crate) fn decoder_kind(decoder: &serde_json::Value) -> DecoderKind {
    let mut steps = vec![
        serde_json::json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        serde_json::json!({"type": "ByteFallback"}),
        serde_json::json!({"type": "Fuse"}),
    ];
    let no_strip = serde_json::json!({"type": "Sequence", "decoders": steps.clone()});
    steps.push(serde_json::json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    let strip = serde_json::json!({"type": "Sequence", "decoders": steps});
    if *decoder == strip {
        DecoderKind::Spm { trim_space: true }
    } else if *decoder == no_strip {
        DecoderKind::Spm { trim_space: false }
    } else if decoder.get("type").and_then(serde_json::Value::as_str) == Some("ByteLevel") {
        DecoderKind::ByteLevel
    } else {
        DecoderKind::Other
    }
}

/// A SentencePiece token's bytes as mlx-lm reads them: a token that starts with `<0x` is the
/// byte its next two hex digits name, any other its UTF-8.
pub(crate) fn spm_bytes(token: &str) -> Vec<u8> {
    match token
        .strip_prefix("<0x")
        .and_then(|rest| rest.get(..2))
        .and_then(|hex| u8::from_str_radix(hex, 16).ok())
    {
        Some(byte) => vec![byte],
        None => token.as_bytes().to_vec(),
    }
}
