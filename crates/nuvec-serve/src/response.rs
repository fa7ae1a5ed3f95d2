//! Answers in OpenAI's shapes: whole completions (`text_completion`, `chat.completion`),
//! streamed chunks (`…chunk`), usage counts and log-probabilities.

use crate::engine::TokenLogprob;
use crate::request::Endpoint;
use nuvec_lm::Tokenizer;
use serde_json::{json, Map, Value};

/// What every answer to one request shares.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub(crate) endpoint: Endpoint,
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
}

/// Token counts of a request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: usize,
    pub(crate) completion_tokens: usize,
    pub(crate) cached_tokens: usize,
}

impl Usage {
    pub(crate) fn json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        })
    }
}

/// A token's id, text and log-probability.
type Scored = (u32, String, f32);

/// Log-probabilities of the tokens of one answer (or chunk), in the endpoint's shape: each
/// chosen token with its alternatives.
#[derive(Debug, Clone, Default)]
pub(crate) struct Logprobs {
    entries: Vec<(Scored, Vec<Scored>)>,
}

impl Logprobs {
    pub(crate) fn push(&mut self, tokenizer: &Tokenizer, logprob: &TokenLogprob) {
        let text = |t: u32| tokenizer.decode(&[t], false).unwrap_or_default();
        let top = (logprob.top.iter())
            .map(|&(t, lp)| (t, text(t), lp))
            .collect();
        let chosen = (logprob.token, logprob.text.clone(), logprob.logprob);
        self.entries.push((chosen, top));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Chat's `{"content": [{id, token, logprob, bytes, top_logprobs}]}` (the ids as
    /// mlx_lm.server adds them), or completions'
    /// `{tokens, token_logprobs, top_logprobs, text_offset}` (offsets from `offset`).
    pub(crate) fn json(&self, endpoint: Endpoint, offset: usize) -> Value {
        let number = |x: f32| {
            if x.is_finite() {
                json!(x)
            } else {
                json!(-9999.0)
            }
        };
        match endpoint {
            Endpoint::Chat => {
                let content: Vec<Value> = (self.entries.iter())
                    .map(|((id, token, lp), top)| {
                        let top: Vec<Value> = (top.iter())
                            .map(|(id, t, lp)| json!({"id": id, "token": t, "logprob": number(*lp), "bytes": t.as_bytes()}))
                            .collect();
                        json!({"id": id, "token": token, "logprob": number(*lp), "bytes": token.as_bytes(), "top_logprobs": top})
                    })
                    .collect();
                json!({ "content": content })
            }
            Endpoint::Completions => {
                let mut at = offset;
                let mut offsets = Vec::new();
                for ((_, token, _), _) in &self.entries {
                    offsets.push(at);
                    at += token.len();
                }
                let top: Vec<Value> = (self.entries.iter())
                    .map(|(_, top)| {
                        let map: Map<String, Value> = (top.iter())
                            .map(|(_, t, lp)| (t.clone(), number(*lp)))
                            .collect();
                        Value::Object(map)
                    })
                    .collect();
                json!({
                    "tokens": self.entries.iter().map(|e| e.0 .1.clone()).collect::<Vec<_>>(),
                    "token_logprobs": self.entries.iter().map(|e| number(e.0 .2)).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": offsets,
                })
            }
        }
    }
}

impl Header {
    /// A whole answer.
    pub(crate) fn complete(
        &self,
        text: &str,
        finish: &str,
        logprobs: Option<&Logprobs>,
        usage: Usage,
    ) -> Value {
        let logprobs = logprobs.map(|l| l.json(self.endpoint, 0));
        let choice = match self.endpoint {
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
            Endpoint::Completions => json!({
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
        };
        json!({
            "id": self.id,
            "object": match self.endpoint {
                Endpoint::Chat => "chat.completion",
                Endpoint::Completions => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": crate::FINGERPRINT,
            "choices": [choice],
            "usage": usage.json(),
        })
    }

    /// A streamed chunk: text (and, for chat's first chunk, the role), log-probabilities
    /// (from `offset` for completions), or the finish reason.
    pub(crate) fn chunk(
        &self,
        text: &str,
        first: bool,
        logprobs: Option<(&Logprobs, usize)>,
        finish: Option<&str>,
    ) -> Value {
        let logprobs = logprobs.map(|(l, offset)| l.json(self.endpoint, offset));
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let delta = match (first, finish.is_some() && text.is_empty()) {
                    (true, _) => json!({"role": "assistant", "content": text}),
                    (false, true) => json!({}),
                    (false, false) => json!({"content": text}),
                };
                json!({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            Endpoint::Completions => {
                json!({"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish})
            }
        };
        self.chunk_with(vec![choice], None)
    }

    /// The last chunk of a stream asked for its usage: no choices, the counts.
    pub(crate) fn usage_chunk(&self, usage: Usage) -> Value {
        self.chunk_with(Vec::new(), Some(usage.json()))
    }

    fn chunk_with(&self, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": match self.endpoint {
                Endpoint::Chat => "chat.completion.chunk",
                Endpoint::Completions => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": crate::FINGERPRINT,
            "choices": choices,
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        chunk
    }
}
