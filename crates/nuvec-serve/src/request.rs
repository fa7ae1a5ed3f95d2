//! A completion request read from its JSON body: the fields mlx_lm.server accepts, each
//! checked for its type and range, so a wrong one is a `400` naming it.

use crate::error::ApiError;
use nuvec_lm::{LogitsProcessors, Message, SamplerOptions};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Tokens generated when a request names no limit (mlx_lm.server's default).
pub const DEFAULT_MAX_TOKENS: usize = 512;

/// The most `top_logprobs` a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/completions`: a prompt continued.
    Completions,
    /// `/v1/chat/completions`: messages answered.
    Chat,
}

/// What to continue.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A completion's prompt text.
    Text(String),
    /// A completion's prompt as token ids.
    Tokens(Vec<u32>),
    /// A chat's messages.
    Messages(Vec<Message>),
}

/// A checked request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The model named, if any.
    pub model: Option<String>,
    /// The prompt or messages.
    pub input: Input,
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// How tokens are drawn.
    pub sampler: SamplerOptions,
    /// Changes to the logits.
    pub processors: LogitsProcessors,
    /// Texts that end the generation (not included in it).
    pub stop: Vec<String>,
    /// The seed, if given.
    pub seed: Option<u64>,
    /// Log-probabilities of the chosen tokens, with this many alternatives each.
    pub logprobs: Option<usize>,
    /// Streamed as server-sent events.
    pub stream: bool,
    /// A last streamed event carries the usage counts.
    pub include_usage: bool,
    /// How a chat is written for a tokenizer without a chat template (mlx_lm.server's
    /// `role_mapping`: a prefix per role, `stop` after each message, `system_prompt`).
    pub role_mapping: Option<BTreeMap<String, String>>,
}

/// The field `name` of `body`, if present and not null.
fn field<'a>(body: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

fn wrong(name: &str, expected: &str, got: &Value) -> ApiError {
    let got = match got {
        Value::Null => "null".to_string(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    };
    ApiError::invalid(
        Some(name),
        format!("'{name}' must be {expected}, got {got}"),
    )
}

fn number(body: &Map<String, Value>, name: &str) -> Result<Option<f64>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(v) => (v.as_f64())
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| wrong(name, "a number", v)),
    }
}

fn count(body: &Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong(name, "a non-negative integer", v)),
    }
}

fn flag(body: &Map<String, Value>, name: &str) -> Result<Option<bool>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| wrong(name, "a boolean", v)),
    }
}

fn in_range(name: &str, value: f64, low: f64, high: f64) -> Result<f64, ApiError> {
    if (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::invalid(
            Some(name),
            format!("'{name}' must be between {low} and {high}, got {value}"),
        ))
    }
}

/// A message's text: a string, or OpenAI's list of parts of which the text ones count.
fn content(index: usize, v: Option<&Value>) -> Result<String, ApiError> {
    let name = format!("messages[{index}].content");
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(s))) => text.push_str(s),
                    _ => {
                        return Err(ApiError::invalid(
                            Some(&name),
                            format!("'{name}' parts must be {{\"type\": \"text\", \"text\": ...}}: this server takes text only"),
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(wrong(&name, "a string or a list of text parts", other)),
    }
}

fn messages(v: &Value) -> Result<Vec<Message>, ApiError> {
    let list = v
        .as_array()
        .ok_or_else(|| wrong("messages", "an array of messages", v))?;
    if list.is_empty() {
        return Err(ApiError::invalid(
            Some("messages"),
            "'messages' must hold at least one message",
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, message) in list.iter().enumerate() {
        let Some(message) = message.as_object() else {
            return Err(wrong(&format!("messages[{i}]"), "an object", message));
        };
        let role = match message.get("role") {
            Some(Value::String(role)) => role.clone(),
            Some(other) => return Err(wrong(&format!("messages[{i}].role"), "a string", other)),
            None => {
                return Err(ApiError::invalid(
                    Some(&format!("messages[{i}].role")),
                    format!("'messages[{i}]' has no 'role'"),
                ))
            }
        };
        out.push(Message::new(role, content(i, message.get("content"))?));
    }
    Ok(out)
}

fn prompt(v: &Value) -> Result<Input, ApiError> {
    match v {
        Value::String(s) => Ok(Input::Text(s.clone())),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_u64) => {
            let ids: Option<Vec<u32>> = (items.iter())
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect();
            ids.map(Input::Tokens).ok_or_else(|| {
                ApiError::invalid(Some("prompt"), "'prompt' token ids must fit in 32 bits")
            })
        }
        Value::Array(items) if items.len() == 1 && items[0].is_string() => Ok(Input::Text(
            items[0].as_str().unwrap_or_default().to_string(),
        )),
        other => Err(wrong(
            "prompt",
            "a string, a list of one string, or a non-empty list of token ids",
            other,
        )),
    }
}

fn stop(body: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let stops = match field(body, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            let texts: Option<Vec<String>> = items
                .iter()
                .map(|s| s.as_str().map(str::to_string))
                .collect();
            texts.ok_or_else(|| {
                ApiError::invalid(Some("stop"), "'stop' must be a string or a list of strings")
            })?
        }
        Some(other) => return Err(wrong("stop", "a string or a list of strings", other)),
    };
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid(Some("stop"), "a 'stop' text is empty"));
    }
    Ok(stops)
}

fn logit_bias(body: &Map<String, Value>) -> Result<BTreeMap<u32, f32>, ApiError> {
    let Some(v) = field(body, "logit_bias") else {
        return Ok(BTreeMap::new());
    };
    let map = v
        .as_object()
        .ok_or_else(|| wrong("logit_bias", "an object of token ids to numbers", v))?;
    let mut bias = BTreeMap::new();
    for (id, value) in map {
        let id: u32 = id.parse().map_err(|_| {
            ApiError::invalid(
                Some("logit_bias"),
                format!("'logit_bias' keys must be token ids, got {id:?}"),
            )
        })?;
        let value = (value.as_f64())
            .filter(|x| x.is_finite())
            .ok_or_else(|| wrong("logit_bias", "an object of token ids to numbers", value))?;
        bias.insert(id, value as f32);
    }
    Ok(bias)
}

impl Request {
    /// Reads a request to `endpoint` from its body's bytes.
    pub fn parse(endpoint: Endpoint, bytes: &[u8]) -> Result<Request, ApiError> {
        let body: Value = serde_json::from_slice(bytes)
            .map_err(|e| ApiError::invalid(None, format!("the body is not valid JSON: {e}")))?;
        let Value::Object(body) = body else {
            return Err(ApiError::invalid(None, "the body must be a JSON object"));
        };
        let model = match field(&body, "model") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => return Err(wrong("model", "a string", other)),
        };
        let input = match endpoint {
            Endpoint::Chat => match field(&body, "messages") {
                Some(v) => Input::Messages(messages(v)?),
                None => {
                    return Err(ApiError::invalid(
                        Some("messages"),
                        "'messages' is required",
                    ))
                }
            },
            Endpoint::Completions => match field(&body, "prompt") {
                Some(v) => prompt(v)?,
                None => return Err(ApiError::invalid(Some("prompt"), "'prompt' is required")),
            },
        };
        // Fields mlx_lm.server or OpenAI know that change the answer and are not served
        // here: refused rather than ignored.
        for name in ["presence_penalty", "frequency_penalty", "xtc_probability"] {
            if number(&body, name)?.is_some_and(|x| x != 0.0) {
                return Err(ApiError::invalid(
                    Some(name),
                    format!("'{name}' is not supported by this server (leave it out or 0)"),
                ));
            }
        }
        for name in [
            "tools",
            "chat_template_kwargs",
            "response_format",
            "adapters",
            "draft_model",
        ] {
            let given = match field(&body, name) {
                None => false,
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::Object(o)) => {
                    let plain_text = name == "response_format"
                        && o.get("type").and_then(Value::as_str) == Some("text");
                    !o.is_empty() && !plain_text
                }
                Some(Value::String(s)) => !(name == "draft_model" && s == "default_model"),
                Some(_) => true,
            };
            if given {
                return Err(ApiError::invalid(
                    Some(name),
                    format!("'{name}' is not supported by this server"),
                ));
            }
        }
        if let Some(n) = count(&body, "n")? {
            if n != 1 {
                return Err(ApiError::invalid(
                    Some("n"),
                    format!("'n' must be 1 (one choice per request), got {n}"),
                ));
            }
        }
        let max_tokens = match count(&body, "max_completion_tokens")? {
            Some(n) => Some(n),
            None => count(&body, "max_tokens")?,
        };
        let max_tokens = match max_tokens {
            Some(0) => {
                return Err(ApiError::invalid(
                    Some("max_tokens"),
                    "'max_tokens' must be at least 1",
                ))
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => DEFAULT_MAX_TOKENS,
        };
        let temp = number(&body, "temperature")?.unwrap_or(0.0);
        let temp = in_range("temperature", temp, 0.0, f32::MAX as f64)?;
        let top_p = number(&body, "top_p")?.unwrap_or(1.0);
        let top_p = in_range("top_p", top_p, 0.0, 1.0)?;
        let min_p = number(&body, "min_p")?.unwrap_or(0.0);
        let min_p = in_range("min_p", min_p, 0.0, 1.0)?;
        let top_k = count(&body, "top_k")?.unwrap_or(0);
        let sampler = SamplerOptions {
            temp: temp as f32,
            top_p: top_p as f32,
            min_p: min_p as f32,
            top_k: usize::try_from(top_k).unwrap_or(usize::MAX),
            ..SamplerOptions::default()
        };
        let repetition_penalty = number(&body, "repetition_penalty")?
            .map(|p| in_range("repetition_penalty", p, 0.0, f32::MAX as f64))
            .transpose()?;
        let mut processors = LogitsProcessors {
            logit_bias: logit_bias(&body)?,
            repetition_penalty: repetition_penalty.map(|p| p as f32),
            ..LogitsProcessors::none()
        };
        if let Some(size) = count(&body, "repetition_context_size")? {
            processors.repetition_context_size = usize::try_from(size).unwrap_or(usize::MAX);
        }
        let logprobs = match endpoint {
            // Completions: `logprobs` is how many alternatives to list.
            Endpoint::Completions => count(&body, "logprobs")?.map(|n| n as usize),
            // Chat: `logprobs` switches them on, `top_logprobs` counts alternatives.
            Endpoint::Chat => match flag(&body, "logprobs")? {
                Some(true) => Some(count(&body, "top_logprobs")?.unwrap_or(0) as usize),
                _ => {
                    if count(&body, "top_logprobs")?.is_some_and(|n| n > 0) {
                        return Err(ApiError::invalid(
                            Some("top_logprobs"),
                            "'top_logprobs' needs 'logprobs': true",
                        ));
                    }
                    None
                }
            },
        };
        if let Some(n) = logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return Err(ApiError::invalid(
                Some("logprobs"),
                format!("at most {MAX_TOP_LOGPROBS} alternatives per token, asked for {n}"),
            ));
        }
        let stream = flag(&body, "stream")?.unwrap_or(false);
        let include_usage = match field(&body, "stream_options") {
            None => false,
            Some(Value::Object(options)) => flag(options, "include_usage")?.unwrap_or(false),
            Some(other) => return Err(wrong("stream_options", "an object", other)),
        };
        let role_mapping = match field(&body, "role_mapping") {
            None => None,
            Some(Value::Object(map)) => Some(
                (map.iter())
                    .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect::<Option<BTreeMap<_, _>>>()
                    .ok_or_else(|| {
                        ApiError::invalid(
                            Some("role_mapping"),
                            "'role_mapping' values must be strings",
                        )
                    })?,
            ),
            Some(other) => return Err(wrong("role_mapping", "an object of strings", other)),
        };
        Ok(Request {
            endpoint,
            role_mapping,
            model,
            input,
            max_tokens,
            sampler,
            processors,
            stop: stop(&body)?,
            seed: count(&body, "seed")?,
            logprobs,
            stream,
            include_usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Endpoint, Input, Request};

    fn chat(body: &str) -> Result<Request, String> {
        Request::parse(Endpoint::Chat, body.as_bytes()).map_err(|e| e.message)
    }

    #[test]
    fn a_chat_request_reads_every_field_mlx_lm_server_takes() {
        let r = chat(
            r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 4,
                "min_p": 0.1, "stop": ["a", "b"], "seed": 3, "logprobs": true,
                "top_logprobs": 2, "repetition_penalty": 1.1, "logit_bias": {"5": -1.5},
                "stream": true, "stream_options": {"include_usage": true}}"#,
        )
        .unwrap();
        assert_eq!(r.max_tokens, 7);
        assert_eq!((r.sampler.temp, r.sampler.top_k), (0.5, 4));
        assert_eq!(r.stop, ["a", "b"]);
        assert_eq!((r.seed, r.logprobs), (Some(3), Some(2)));
        assert_eq!(r.processors.logit_bias.get(&5), Some(&-1.5));
        assert!(r.stream && r.include_usage);
        assert!(matches!(r.input, Input::Messages(ref m) if m.len() == 1));
        // What clients send by default is accepted.
        let defaults = r#"{"messages": [{"role": "user"}], "presence_penalty": 0,
            "frequency_penalty": 0.0, "response_format": {"type": "text"}, "tools": []}"#;
        assert!(chat(defaults).is_ok());
    }

    #[test]
    fn a_wrong_field_is_named_with_what_it_must_be() {
        let cases = [
            ("{", "not valid JSON"),
            ("[1]", "must be a JSON object"),
            (r#"{"messages": "hi"}"#, "'messages' must be an array"),
            (r#"{"messages": []}"#, "at least one message"),
            (r#"{"messages": [{"content": "x"}]}"#, "has no 'role'"),
            (r#"{}"#, "'messages' is required"),
            (
                r#"{"messages": [{"role": "user"}], "max_tokens": "9"}"#,
                "'max_tokens' must be a non-negative integer, got a string",
            ),
            (
                r#"{"messages": [{"role": "user"}], "max_tokens": 0}"#,
                "at least 1",
            ),
            (
                r#"{"messages": [{"role": "user"}], "temperature": -1}"#,
                "'temperature' must be between",
            ),
            (
                r#"{"messages": [{"role": "user"}], "top_p": 2}"#,
                "'top_p' must be between 0 and 1",
            ),
            (
                r#"{"messages": [{"role": "user"}], "stop": 3}"#,
                "'stop' must be a string or a list",
            ),
            (
                r#"{"messages": [{"role": "user"}], "logit_bias": {"x": 1}}"#,
                "must be token ids",
            ),
            (
                r#"{"messages": [{"role": "user"}], "n": 2}"#,
                "'n' must be 1",
            ),
            (
                r#"{"messages": [{"role": "user"}], "logprobs": true, "top_logprobs": 50}"#,
                "at most 20",
            ),
            (
                r#"{"messages": [{"role": "user"}], "stream": "yes"}"#,
                "'stream' must be a boolean",
            ),
            (
                r#"{"messages": [{"role": "user"}], "presence_penalty": 0.5}"#,
                "'presence_penalty' is not supported",
            ),
            (
                r#"{"messages": [{"role": "user"}], "tools": [{"type": "function"}]}"#,
                "'tools' is not supported",
            ),
            (
                r#"{"messages": [{"role": "user"}], "response_format": {"type": "json_object"}}"#,
                "'response_format' is not supported",
            ),
        ];
        for (body, expected) in cases {
            let error = chat(body).unwrap_err();
            assert!(error.contains(expected), "{body}: {error}");
        }
    }

    #[test]
    fn a_completion_prompt_is_text_or_token_ids() {
        let text = Request::parse(Endpoint::Completions, br#"{"prompt": "x"}"#).unwrap();
        assert_eq!(text.input, Input::Text("x".into()));
        assert_eq!(text.max_tokens, super::DEFAULT_MAX_TOKENS);
        let ids = Request::parse(Endpoint::Completions, br#"{"prompt": [1, 2]}"#).unwrap();
        assert_eq!(ids.input, Input::Tokens(vec![1, 2]));
        let bad = Request::parse(Endpoint::Completions, br#"{"prompt": [1, "a"]}"#).unwrap_err();
        assert_eq!(bad.param.as_deref(), Some("prompt"));
    }
}
