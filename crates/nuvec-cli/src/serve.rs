//! `nuvec serve`: an OpenAI-compatible server for a model folder (as mlx_lm.server), on one
//! process or, under `nuvec launch -n N`, on a group with the model split over its ranks.

use crate::group;
use crate::lm::{load_for, Splitting};
use clap::Args;
use nuvec_serve::ServeOptions;

/// `nuvec serve`'s options.
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The model folder (config.json, model*.safetensors, tokenizer.json, …).
    #[arg(long)]
    model: std::path::PathBuf,
    /// Address to listen on (loopback by default: give 0.0.0.0 to serve other hosts).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require 'Authorization: Bearer <key>' on the API's routes (also NUVEC_API_KEY).
    #[arg(long, env = "NUVEC_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The most requests decoded together in one batch; more wait their turn.
    #[arg(long, default_value_t = 32)]
    max_batch: usize,
    /// Caches of finished requests kept for later prompts sharing their prefix (0: none).
    #[arg(long, default_value_t = nuvec_lm::batch::DEFAULT_PROMPT_CACHE_ENTRIES)]
    prompt_cache_size: usize,
    /// The largest request body in bytes (larger ones are answered 413).
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,
    #[command(flatten)]
    splitting: Splitting,
}

/// Runs `nuvec serve` until interrupted; the exit status.
pub(crate) fn run(args: ServeArgs) -> Result<i32, String> {
    if args.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        return Err("--api-key (or NUVEC_API_KEY) is empty".into());
    }
    let group = group::join()?;
    let (model, tokenizer) = load_for(&args.model, &group, &args.splitting)?;
    let model_id = args.model.display().to_string();
    let aliases = (args.model.file_name())
        .map(|name| vec![name.to_string_lossy().into_owned()])
        .unwrap_or_default();
    let options = ServeOptions {
        model_id,
        aliases,
        host: args.host,
        port: args.port,
        api_key: args.api_key,
        max_batch: args.max_batch,
        prompt_cache: args.prompt_cache_size,
        max_body_bytes: args.max_body_bytes,
    };
    nuvec_serve::serve(model, tokenizer, group, options)?;
    Ok(0)
}
