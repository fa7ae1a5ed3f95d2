//! The HTTP side (axum on tokio): routes, the API key, turning a request into a [`Job`] for
//! the engine, and its events into an answer, whole or streamed as server-sent events.

use crate::engine::{Event, Health, Job};
use crate::error::ApiError;
use crate::request::{Endpoint, Input, Request};
use crate::response::{Header, Logprobs, Usage};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nuvec_lm::{GenerateOptions, Tokenizer};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct AppState {
    /// The name `/v1/models` lists and requests may give.
    pub(crate) model_id: String,
    /// Other names a request may give for it (the folder's last component).
    pub(crate) aliases: Vec<String>,
    pub(crate) created: u64,
    pub(crate) jobs: std::sync::mpsc::Sender<Job>,
    pub(crate) tokenizer: Arc<Tokenizer>,
    /// The model's context, in tokens, if its config gives one.
    pub(crate) context: Option<usize>,
    pub(crate) vocabulary: usize,
    /// SHA-256 of the API key, when one is required.
    pub(crate) api_key: Option<[u8; 32]>,
    pub(crate) health: Health,
    pub(crate) ranks: usize,
    pub(crate) max_body: usize,
}

/// The server's routes.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .route("/health", get(health))
        .merge(api)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(state.max_body))
        .with_state(state)
}

/// SHA-256 of a key (compared in constant time, whatever its length).
pub(crate) fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

async fn authorize(
    State(state): State<Arc<AppState>>,
    request: HttpRequest,
    next: Next,
) -> Response {
    let Some(expected) = state.api_key else {
        return next.run(request).await;
    };
    let given = (request.headers().get(header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|key| digest(key.trim()));
    match given {
        Some(given) if bool::from(given.ct_eq(&expected)) => next.run(request).await,
        Some(_) => ApiError::invalid(None, "the API key is not valid")
            .with_status(StatusCode::UNAUTHORIZED)
            .with_code("invalid_api_key")
            .into_response(),
        None => ApiError::invalid(
            None,
            "an API key is required: send it as 'Authorization: Bearer <key>'",
        )
        .with_status(StatusCode::UNAUTHORIZED)
        .with_code("invalid_api_key")
        .into_response(),
    }
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    let (active, waiting) = state.health.load();
    match state.health.failure() {
        None => Json(json!({
            "status": "ok",
            "model": state.model_id,
            "ranks": state.ranks,
            "active_requests": active,
            "waiting_requests": waiting,
        }))
        .into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "reason": reason, "ranks": state.ranks})),
        )
            .into_response(),
    }
}

async fn models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.model_id,
            "object": "model",
            "created": state.created,
            "owned_by": "nuvec",
        }],
    }))
}

async fn not_found(request: HttpRequest) -> ApiError {
    ApiError::invalid(
        None,
        format!("there is no {} {}", request.method(), request.uri().path()),
    )
    .with_status(StatusCode::NOT_FOUND)
    .with_code("not_found")
}

async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(state, Endpoint::Completions, body).await
}

async fn chat(State(state): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    answer(state, Endpoint::Chat, body).await
}

/// A random identifier for an answer.
fn answer_id(endpoint: Endpoint) -> String {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).ok();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    match endpoint {
        Endpoint::Chat => format!("chatcmpl-{hex}"),
        Endpoint::Completions => format!("cmpl-{hex}"),
    }
}

fn seconds_now() -> u64 {
    (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The prompt's token ids.
fn tokens(state: &AppState, request: &Request) -> Result<Vec<u32>, ApiError> {
    let tokenizer = &state.tokenizer;
    let failed =
        |e: nuvec_lm::Error| ApiError::invalid(None, format!("the prompt cannot be read: {e}"));
    let tokens = match &request.input {
        Input::Text(text) => tokenizer.encode_prompt(text).map_err(failed)?,
        Input::Tokens(ids) => {
            if let Some(&bad) = ids.iter().find(|&&t| t as usize >= state.vocabulary) {
                return Err(ApiError::invalid(
                    Some("prompt"),
                    format!(
                        "token {bad} is past the model's vocabulary of {}",
                        state.vocabulary
                    ),
                ));
            }
            ids.clone()
        }
        Input::Messages(messages) if tokenizer.has_chat_template() => {
            let text = (tokenizer.apply_chat_template(messages, true))
                .map_err(|e| ApiError::invalid(Some("messages"), e.to_string()))?;
            tokenizer.encode(&text, false).map_err(failed)?
        }
        Input::Messages(messages) => {
            let text = plain_chat(messages, request.role_mapping.as_ref());
            tokenizer.encode_prompt(&text).map_err(failed)?
        }
    };
    if tokens.is_empty() {
        return Err(ApiError::invalid(
            Some("prompt"),
            "the prompt has no tokens",
        ));
    }
    Ok(tokens)
}

/// A chat written for a tokenizer without a chat template, as mlx_lm.server's `convert_chat`:
/// each message after its role's prefix and followed by the `stop` text, then the assistant's
/// prefix, trailing whitespace trimmed. Its default mapping is mlx_lm.server's.
fn plain_chat(
    messages: &[nuvec_lm::Message],
    mapping: Option<&std::collections::BTreeMap<String, String>>,
) -> String {
    let default = |role: &str| match role {
        "system" => "ASSISTANT's RULE: ",
        "user" => "USER: ",
        "assistant" => "ASSISTANT: ",
        "stop" => "\n",
        _ => "",
    };
    let get = |role: &str| match mapping {
        Some(map) => map.get(role).map_or("", String::as_str),
        None => default(role),
    };
    let mut prompt = String::new();
    for message in messages {
        prompt.push_str(get(&message.role));
        prompt.push_str(&message.content);
        prompt.push_str(get("stop"));
    }
    prompt.push_str(get("assistant"));
    prompt.trim_end().to_string()
}

/// A checked request made into a job for the engine, and the receiving end of its events.
fn job(state: &AppState, request: &Request) -> Result<(Job, UnboundedReceiver<Event>), ApiError> {
    if let Some(name) = &request.model {
        let known =
            *name == state.model_id || state.aliases.contains(name) || name == "default_model";
        if !known {
            return Err(ApiError::invalid(
                Some("model"),
                format!(
                    "the model '{name}' does not exist: this server has '{}'",
                    state.model_id
                ),
            )
            .with_status(StatusCode::NOT_FOUND)
            .with_code("model_not_found"));
        }
    }
    let prompt = tokens(state, request)?;
    let mut max_tokens = request.max_tokens;
    if let Some(context) = state.context {
        if prompt.len() >= context {
            return Err(ApiError::invalid(
                Some("messages"),
                format!(
                    "the prompt is {} tokens, and the model's context is {context}",
                    prompt.len()
                ),
            )
            .with_code("context_length_exceeded"));
        }
        max_tokens = max_tokens.min(context - prompt.len());
    }
    let options = GenerateOptions {
        max_tokens,
        sampler: request.sampler,
        logits_processors: request.processors.clone(),
        seed: Some(request.seed.unwrap_or_else(|| {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).ok();
            u64::from_le_bytes(bytes)
        })),
        ..GenerateOptions::default()
    };
    let invalid = |e: nuvec_lm::Error| ApiError::invalid(None, e.to_string());
    options.sampler.check(state.vocabulary).map_err(invalid)?;
    options
        .logits_processors
        .check(state.vocabulary)
        .map_err(invalid)?;
    let (events, receiver) = unbounded_channel();
    let job = Job {
        prompt,
        options,
        stops: request.stop.clone(),
        logprobs: request.logprobs,
        events,
    };
    Ok((job, receiver))
}

async fn answer(
    state: Arc<AppState>,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError::invalid(
                None,
                format!(
                    "the body is over this server's limit of {} bytes",
                    state.max_body
                ),
            )
            .with_status(StatusCode::PAYLOAD_TOO_LARGE)
            .with_code("body_too_large")
            .into_response()
        }
        Err(rejection) => {
            return ApiError::invalid(None, format!("the body cannot be read: {rejection}"))
                .into_response()
        }
    };
    let request = match Request::parse(endpoint, &body) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    if let Some(reason) = state.health.refusal() {
        return ApiError::unavailable(reason).into_response();
    }
    let (job, mut events) = match job(&state, &request) {
        Ok(job) => job,
        Err(error) => return error.into_response(),
    };
    if state.jobs.send(job).is_err() {
        return ApiError::unavailable("the server is shutting down").into_response();
    }
    // The prompt is read (or the request failed) before the answer's status is chosen.
    let usage = match events.recv().await {
        Some(Event::Started {
            prompt_tokens,
            cached,
        }) => Usage {
            prompt_tokens,
            completion_tokens: 0,
            cached_tokens: cached,
        },
        Some(Event::Failed(error)) => return error.into_response(),
        _ => return ApiError::unavailable("the engine stopped").into_response(),
    };
    let header = Header {
        endpoint,
        id: answer_id(endpoint),
        created: seconds_now(),
        model: state.model_id.clone(),
    };
    if request.stream {
        return stream(state, header, request, usage, events).into_response();
    }
    let mut text = String::new();
    let mut logprobs = request.logprobs.map(|_| Logprobs::default());
    loop {
        match events.recv().await {
            Some(Event::Token {
                text: piece,
                logprob,
            }) => {
                text.push_str(&piece);
                if let (Some(all), Some(logprob)) = (&mut logprobs, logprob) {
                    all.push(&state.tokenizer, &logprob);
                }
            }
            Some(Event::Done {
                text: rest,
                finish,
                completion_tokens,
            }) => {
                text.push_str(&rest);
                let usage = Usage {
                    completion_tokens,
                    ..usage
                };
                return Json(header.complete(&text, finish, logprobs.as_ref(), usage))
                    .into_response();
            }
            Some(Event::Failed(error)) => return error.into_response(),
            Some(Event::Started { .. }) => {}
            None => return ApiError::unavailable("the engine stopped").into_response(),
        }
    }
}

/// Where a stream is.
struct Streaming {
    state: Arc<AppState>,
    header: Header,
    events: UnboundedReceiver<Event>,
    usage: Usage,
    include_usage: bool,
    logprobs: bool,
    /// Bytes of text sent (completions' logprob offsets).
    sent: usize,
    first: bool,
    /// Queued data lines, sent before the next event is awaited.
    queue: std::collections::VecDeque<String>,
    ended: bool,
}

fn stream(
    state: Arc<AppState>,
    header: Header,
    request: Request,
    usage: Usage,
    events: UnboundedReceiver<Event>,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut streaming = Streaming {
        state,
        events,
        usage,
        include_usage: request.include_usage,
        logprobs: request.logprobs.is_some(),
        sent: 0,
        first: true,
        queue: Default::default(),
        ended: false,
        header,
    };
    if streaming.header.endpoint == Endpoint::Chat {
        let chunk = streaming.header.chunk("", true, None, None);
        streaming.queue.push_back(chunk.to_string());
        streaming.first = false;
    }
    let events = futures_util::stream::unfold(streaming, |mut s| async move {
        loop {
            if let Some(data) = s.queue.pop_front() {
                return Some((Ok(SseEvent::default().data(data)), s));
            }
            if s.ended {
                return None;
            }
            s.next().await;
        }
    });
    Sse::new(events)
}

impl Streaming {
    /// Awaits the next event and queues what it sends.
    async fn next(&mut self) {
        match self.events.recv().await {
            Some(Event::Token { text, logprob }) => {
                let mut logprobs = Logprobs::default();
                if let Some(logprob) = logprob.filter(|_| self.logprobs) {
                    logprobs.push(&self.state.tokenizer, &logprob);
                }
                if text.is_empty() && logprobs.is_empty() {
                    return;
                }
                let logprobs = (!logprobs.is_empty()).then_some((&logprobs, self.sent));
                let chunk = self.header.chunk(&text, self.first, logprobs, None);
                self.first = false;
                self.sent += text.len();
                self.queue.push_back(chunk.to_string());
            }
            Some(Event::Done {
                text,
                finish,
                completion_tokens,
            }) => {
                let chunk = self.header.chunk(&text, self.first, None, Some(finish));
                self.queue.push_back(chunk.to_string());
                if self.include_usage {
                    let usage = Usage {
                        completion_tokens,
                        ..self.usage
                    };
                    self.queue
                        .push_back(self.header.usage_chunk(usage).to_string());
                }
                self.finish();
            }
            Some(Event::Failed(error)) => {
                self.queue.push_back(error.body().to_string());
                self.finish();
            }
            Some(Event::Started { .. }) => {}
            None => {
                let error = ApiError::unavailable("the engine stopped");
                self.queue.push_back(error.body().to_string());
                self.finish();
            }
        }
    }

    fn finish(&mut self) {
        self.queue.push_back("[DONE]".to_string());
        self.ended = true;
    }
}

#[cfg(test)]
mod tests {
    use super::plain_chat;
    use nuvec_lm::Message;
    use std::collections::BTreeMap;

    #[test]
    fn a_chat_without_a_template_is_written_as_mlx_lm_server_writes_it() {
        let messages = [
            Message::new("system", "be brief"),
            Message::new("user", "hi"),
            Message::new("assistant", "hello"),
            Message::new("user", "and?"),
        ];
        assert_eq!(
            plain_chat(&messages, None),
            "ASSISTANT's RULE: be brief\nUSER: hi\nASSISTANT: hello\nUSER: and?\nASSISTANT:"
        );
        let mapping = BTreeMap::from([
            ("user".to_string(), "<u>".to_string()),
            ("assistant".to_string(), "<a>".to_string()),
            ("stop".to_string(), "|".to_string()),
        ]);
        assert_eq!(
            plain_chat(&messages[1..], Some(&mapping)),
            "<u>hi|<a>hello|<u>and?|<a>"
        );
    }
}
