//! A model folder's tokenizer: `tokenizer.json` through Hugging Face's `tokenizers`, the
//! special tokens and chat template of `tokenizer_config.json` (or `chat_template.jinja`),
//! and the ids that end generation.

use crate::detokenizer::{DecoderKind, StreamingDetokenizer, Vocabulary};
use crate::{Error, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message from `role`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A special token as `tokenizer_config.json` writes it: a string, or `{"content": …}`.
fn special(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::load(path, format!("not valid JSON: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::load(path, e.to_string())),
    }
}

/// Integer ids from a config value that is one id or a list of them.
fn ids(value: Option<&Value>) -> Vec<u32> {
    match value {
        Some(Value::Number(n)) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_u64)
            .map(|n| n as u32)
            .collect(),
        _ => Vec::new(),
    }
}

/// A model's tokenizer.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    config: Value,
    bos_token: Option<String>,
    eos_token: Option<String>,
    eos_token_ids: BTreeSet<u32>,
    chat_template: Option<String>,
    vocabulary: Arc<Vocabulary>,
}

impl Tokenizer {
    /// Reads the tokenizer of a model folder; `model_config` is its `config.json`, whose
    /// `eos_token_id` (overridden by `generation_config.json`'s) joins the tokenizer's EOS
    /// among the ids that stop generation.
    pub fn from_dir(dir: &Path, model_config: &Value) -> Result<Tokenizer> {
        let file = dir.join("tokenizer.json");
        if !file.exists() {
            return Err(Error::load(
                &file,
                "missing (nuvec-lm reads tokenizer.json)",
            ));
        }
        let text = std::fs::read_to_string(&file).map_err(|e| Error::load(&file, e.to_string()))?;
        let inner: tokenizers::Tokenizer = text
            .parse()
            .map_err(|e| Error::load(&file, format!("not a readable tokenizer: {e}")))?;
        let config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
        let template_file = dir.join("chat_template.jinja");
        let chat_template = if template_file.exists() {
            Some(
                std::fs::read_to_string(&template_file)
                    .map_err(|e| Error::load(&template_file, e.to_string()))?,
            )
        } else {
            match config.get("chat_template") {
                Some(Value::String(t)) => Some(t.clone()),
                // A list of named templates: the one named "default".
                Some(Value::Array(named)) => named
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                _ => None,
            }
        };
        let generation = read_json(&dir.join("generation_config.json"))?;
        let from_generation = ids(generation.as_ref().and_then(|g| g.get("eos_token_id")));
        let mut eos_token_ids: BTreeSet<u32> = if from_generation.is_empty() {
            ids(model_config.get("eos_token_id")).into_iter().collect()
        } else {
            from_generation.into_iter().collect()
        };
        let eos_token = special(&config, "eos_token");
        if let Some(id) = eos_token.as_deref().and_then(|t| inner.token_to_id(t)) {
            eos_token_ids.insert(id);
        }
        let decoder = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|j| j.get("decoder").cloned())
            .unwrap_or(Value::Null);
        let size = inner.get_vocab_size(true) as u32;
        let vocabulary = match crate::detokenizer::decoder_kind(&decoder) {
            DecoderKind::ByteLevel => Vocabulary::ByteLevel(
                (0..size)
                    .map(|id| inner.id_to_token(id).unwrap_or_default())
                    .collect(),
            ),
            DecoderKind::Spm { trim_space } => Vocabulary::Spm {
                tokens: (0..size)
                    .map(|id| {
                        crate::detokenizer::spm_bytes(&inner.id_to_token(id).unwrap_or_default())
                    })
                    .collect(),
                trim_space,
            },
            DecoderKind::Other => Vocabulary::Other(Box::new(inner.clone())),
        };
        Ok(Tokenizer {
            bos_token: special(&config, "bos_token"),
            eos_token,
            inner,
            config,
            eos_token_ids,
            chat_template,
            vocabulary: Arc::new(vocabulary),
        })
    }

    /// Token ids of `text`; with `add_special_tokens`, the tokenizer's own additions (a BOS
    /// for Llama's, none for Qwen's).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.inner
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer(format!("cannot encode the text: {e}")))
    }

    /// Ids as mlx-lm encodes a text prompt: special tokens added unless the text already
    /// starts with the BOS token.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let starts_with_bos = self
            .bos_token
            .as_deref()
            .is_some_and(|b| text.starts_with(b));
        self.encode(text, !starts_with_bos)
    }

    /// The text of `ids`, special tokens included unless `skip_special_tokens`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| Error::Tokenizer(format!("cannot decode {} ids: {e}", ids.len())))
    }

    /// The ids that end generation.
    pub fn eos_token_ids(&self) -> &BTreeSet<u32> {
        &self.eos_token_ids
    }

    /// The BOS token's text, if the tokenizer has one.
    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    /// The id of a token string, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Size of the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Whether the folder has a chat template.
    pub fn has_chat_template(&self) -> bool {
        self.chat_template.is_some()
    }

    /// A detokenizer for streaming this tokenizer's output.
    pub fn detokenizer(&self) -> StreamingDetokenizer {
        StreamingDetokenizer::new(self.vocabulary.clone())
    }

    /// Renders `messages` with the chat template as `transformers`' `apply_chat_template(…,
    /// tokenize=False)` does (blocks trimmed, Python's string methods, and `transformers`'
    /// `raise_exception`, `strftime_now` and `tojson`).
    pub fn apply_chat_template(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self
            .chat_template
            .as_deref()
            .ok_or_else(|| Error::Template("the tokenizer has no chat template".into()))?;
        let mut context: Vec<(&str, minijinja::Value)> = Vec::new();
        for key in ["bos_token", "eos_token", "unk_token", "pad_token"] {
            if let Some(token) = special(&self.config, key) {
                context.push((key, minijinja::Value::from(token)));
            }
        }
        context.push(("messages", minijinja::Value::from_serialize(messages)));
        context.push((
            "add_generation_prompt",
            minijinja::Value::from(add_generation_prompt),
        ));
        crate::chat_template::render(template, context)
    }

    /// The EOS token's text, if any.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }
}
