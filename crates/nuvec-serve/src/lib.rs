//! nuvec-serve: an OpenAI-compatible HTTP server for nuvec-lm models, as `mlx_lm.server`:
//! `/v1/chat/completions`, `/v1/completions`, `/v1/models` and `/health`, whole or streamed
//! answers, on one process or on every rank of a group.
//!
//! Concurrent requests are decoded together: one engine thread owns the model and steps a
//! continuous batch ([`nuvec_lm::BatchGenerator`]), one token for every request per forward
//! pass; a prompt sharing a prefix with an earlier one starts from its cache. On a group,
//! rank 0 serves HTTP and hands each step's plan to the other ranks, which hold their shares
//! of the model; a lost rank makes the server answer `503` with the reason, and `/health`
//! says so.
//!
//! `nuvec serve --model DIR` is the command; [`serve`] is the same from Rust.

#![warn(missing_docs)]

mod engine;
mod error;
mod http;
mod plan;
mod request;
mod response;
mod text;

pub use error::ApiError;
pub use request::{Endpoint, Input, Request, DEFAULT_MAX_TOKENS, MAX_TOP_LOGPROBS};

use engine::{Health, Limits};
use nuvec_core::distributed::Group;
use nuvec_lm::{Model, Tokenizer};
use std::sync::Arc;

/// Names this server's build in every answer (`system_fingerprint`).
const FINGERPRINT: &str = concat!("nuvec-", env!("CARGO_PKG_VERSION"));

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The name `/v1/models` lists (the model folder as given, as mlx_lm.server).
    pub model_id: String,
    /// Other names requests may use for the model.
    pub aliases: Vec<String>,
    /// Address to listen on (loopback unless told otherwise).
    pub host: String,
    /// Port (0: any free one; the address is printed).
    pub port: u16,
    /// A key requests must carry as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// The most requests decoded together; more wait their turn.
    pub max_batch: usize,
    /// Caches of finished requests kept for prompts that share their prefix.
    pub prompt_cache: usize,
    /// The largest request body, in bytes (`413` past it).
    pub max_body_bytes: usize,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            model_id: "default_model".into(),
            aliases: Vec::new(),
            host: "127.0.0.1".into(),
            port: 8080,
            api_key: None,
            max_batch: 32,
            prompt_cache: nuvec_lm::batch::DEFAULT_PROMPT_CACHE_ENTRIES,
            max_body_bytes: 4 << 20,
        }
    }
}

/// The model's context in tokens, from its config (`max_position_embeddings`).
fn context(model: &Model) -> Option<usize> {
    (model.config().get("max_position_embeddings"))
        .and_then(serde_json::Value::as_u64)
        .map(|n| n as usize)
}

/// Serves `model` until interrupted (Ctrl-C or SIGTERM). On a group of several ranks, rank 0
/// serves HTTP and the others run its plans; every rank calls this with its share of the
/// model.
pub fn serve(
    model: Model,
    tokenizer: Tokenizer,
    group: Group,
    options: ServeOptions,
) -> Result<(), String> {
    let limits = Limits {
        max_batch: options.max_batch.max(1),
        prompt_cache: options.prompt_cache,
    };
    if group.rank() != 0 {
        return engine::follow(&model, group, limits);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the server's runtime: {e}"))?;
    let address = format!("{}:{}", options.host, options.port);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(&address))
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the address listened on: {e}"))?;
    let health = Health::default();
    let (jobs, receiver) = std::sync::mpsc::channel();
    let tokenizer = Arc::new(tokenizer);
    let state = Arc::new(http::AppState {
        model_id: options.model_id.clone(),
        aliases: options.aliases.clone(),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        jobs,
        tokenizer: tokenizer.clone(),
        context: context(&model),
        vocabulary: model.vocab_size(),
        api_key: options.api_key.as_deref().map(http::digest),
        health: health.clone(),
        ranks: group.size(),
        max_body: options.max_body_bytes,
    });
    let app = http::router(state);
    let distributed = (group.size() > 1).then_some(group);
    std::thread::scope(|scope| {
        let engine_health = health.clone();
        let engine = scope.spawn(|| {
            engine::run(
                &model,
                &tokenizer,
                distributed,
                receiver,
                engine_health,
                limits,
            )
        });
        eprintln!(
            "nuvec serve: listening on http://{bound} (model {}, {} rank{})",
            options.model_id,
            group.size(),
            if group.size() == 1 { "" } else { "s" }
        );
        let stopping = health.clone();
        let served = runtime.block_on(async move {
            let signal = async move {
                stopped().await;
                // Requests in flight end with 503, so their connections close.
                stopping.stop();
            };
            axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .await
        });
        // The router, and with it the engine's queue, is gone: the engine ends its group.
        engine.join().ok();
        served.map_err(|e| format!("the server failed: {e}"))
    })
}

/// Resolves at Ctrl-C or SIGTERM.
async fn stopped() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut terminate) = signal(SignalKind::terminate()) else {
            return interrupt.await.unwrap_or(());
        };
        tokio::select! {
            _ = interrupt => {},
            _ = terminate.recv() => {},
        }
    }
    #[cfg(not(unix))]
    interrupt.await.ok();
}
