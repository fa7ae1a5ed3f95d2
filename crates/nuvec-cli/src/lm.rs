//! `nuvec generate` and `nuvec chat`: mlx_lm.generate and mlx_lm.chat over nuvec-lm, with
//! their options, output and defaults.

use crate::group;
use clap::Args;
use nuvec_core::distributed::Group;
use nuvec_lm::{
    load, load_parallel, stream_generate, GenerateOptions, GenerationResponse, KvCache, Message,
    Parallel, Prompt, SamplerOptions, TokenGenerator,
};
use std::io::{BufRead, Write};

/// How tokens are drawn (mlx_lm.generate's sampling options).
#[derive(Args, Debug, Clone)]
pub(crate) struct Sampling {
    /// Sampling temperature (0 takes the most likely token).
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    /// Sampling top-p.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Sampling min-p.
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Sampling top-k (0: off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Tokens min-p always keeps.
    #[arg(long, default_value_t = 1)]
    min_tokens_to_keep: usize,
    /// Seed of the random state, for a run that repeats.
    #[arg(long)]
    seed: Option<u64>,
    /// Prompt tokens per forward pass while filling the cache.
    #[arg(long, default_value_t = 2048)]
    prefill_step_size: usize,
}

impl Sampling {
    fn options(&self, max_tokens: usize) -> GenerateOptions {
        GenerateOptions {
            max_tokens,
            sampler: SamplerOptions {
                temp: self.temp,
                top_p: self.top_p,
                min_p: self.min_p,
                min_tokens_to_keep: self.min_tokens_to_keep,
                top_k: self.top_k,
            },
            seed: self.seed,
            prefill_step_size: self.prefill_step_size,
            ..GenerateOptions::default()
        }
    }
}

/// How a launched group splits the model.
#[derive(Args, Debug, Clone)]
pub(crate) struct Splitting {
    /// Split the model into stages of layers over the ranks (pipeline parallel) instead of
    /// splitting every layer (tensor parallel).
    #[arg(long)]
    pipeline: bool,
    /// Layers per pipeline rank, rank 0 first (rank 0 runs the last layers), e.g. 10,14;
    /// an even split when absent.
    #[arg(long, value_delimiter = ',', requires = "pipeline")]
    pipeline_split: Option<Vec<usize>>,
}

/// `nuvec generate`'s options (mlx_lm.generate's).
#[derive(Args, Debug)]
pub(crate) struct GenerateArgs {
    /// The model folder (config.json, model*.safetensors, tokenizer.json, …).
    #[arg(long)]
    model: std::path::PathBuf,
    /// The prompt ('-' reads it from standard input; \n and \t are unescaped).
    #[arg(long, short = 'p', default_value = "hello", allow_hyphen_values = true)]
    prompt: String,
    /// A system message before the prompt (with the chat template).
    #[arg(long)]
    system_prompt: Option<String>,
    /// Feed the prompt as it is, without the chat template.
    #[arg(long)]
    ignore_chat_template: bool,
    /// The most tokens to generate.
    #[arg(long, short = 'm', default_value_t = 100)]
    max_tokens: usize,
    /// Print the completion between separators with speeds and memory (true), or only the
    /// completion (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_parser = parse_bool)]
    verbose: bool,
    /// Where the model runs: `cpu`, `gpu` or `gpu:N` (a build with the `cuda` feature); the
    /// default is MLX's choice, the GPU when one is usable.
    #[arg(long)]
    device: Option<String>,
    #[command(flatten)]
    sampling: Sampling,
    #[command(flatten)]
    splitting: Splitting,
}

/// Makes `device` (`cpu`, `gpu`, `gpu:N`) the default device, or says why it cannot be.
fn use_device(device: Option<&str>) -> Result<(), String> {
    let Some(text) = device else {
        return Ok(());
    };
    let device: nuvec_core::Device = text.parse().map_err(|e| format!("--device: {e}"))?;
    nuvec_core::set_default_device(device).map_err(|e| format!("--device {text}: {e}"))
}

/// Python's `str2bool` as mlx-lm's options read it.
fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" | "t" => Ok(true),
        "false" | "0" | "no" | "n" | "f" => Ok(false),
        _ => Err(format!("expected true or false, got {value:?}")),
    }
}

/// The model and tokenizer of `dir`: this rank's share of the model when `group` has
/// several ranks (tensor parallel, or pipeline stages), as mlx-lm's `sharded_load`.
pub(crate) fn load_for(
    dir: &std::path::Path,
    group: &Group,
    splitting: &Splitting,
) -> Result<(nuvec_lm::Model, nuvec_lm::Tokenizer), String> {
    if group.size() == 1 {
        return load(dir).map_err(|e| e.to_string());
    }
    let parallel = if splitting.pipeline {
        Parallel {
            pipeline: Some(*group),
            split: splitting.pipeline_split.clone(),
            ..Parallel::default()
        }
    } else {
        // The vocabulary too, when it divides: fewer bytes per token on each rank.
        let config = std::fs::read_to_string(dir.join("config.json")).unwrap_or_default();
        let vocabulary = serde_json::from_str::<serde_json::Value>(&config)
            .ok()
            .and_then(|c| c["vocab_size"].as_u64())
            .is_some_and(|v| v % group.size() as u64 == 0);
        Parallel {
            tensor: Some(*group),
            vocabulary,
            ..Parallel::default()
        }
    };
    load_parallel(dir, &parallel).map_err(|e| e.to_string())
}

/// Runs `nuvec generate`; the exit status. Started as the ranks of a group, the model is
/// split over them and rank 0 alone prints.
pub(crate) fn generate(args: GenerateArgs) -> Result<i32, String> {
    use_device(args.device.as_deref())?;
    let group = group::join()?;
    let mut prompt = args.prompt.replace("\\n", "\n").replace("\\t", "\t");
    if prompt == "-" {
        let read = || {
            let mut text = String::new();
            std::io::stdin()
                .lock()
                .read_to_string_lossy(&mut text)
                .map_err(|e| format!("cannot read the prompt from standard input: {e}"))?;
            Ok(Some(text))
        };
        prompt = group::from_rank_0(&group, read)?.unwrap_or_default();
    }
    let (model, tokenizer) = load_for(&args.model, &group, &args.splitting)?;
    let use_template = !args.ignore_chat_template && tokenizer.has_chat_template();
    let tokens = if use_template {
        let mut messages = Vec::new();
        if let Some(system) = &args.system_prompt {
            messages.push(Message::new("system", system));
        }
        messages.push(Message::new("user", prompt));
        let text = tokenizer
            .apply_chat_template(&messages, true)
            .map_err(|e| e.to_string())?;
        tokenizer.encode(&text, false).map_err(|e| e.to_string())?
    } else {
        tokenizer.encode(&prompt, true).map_err(|e| e.to_string())?
    };
    let stream = stream_generate(
        &model,
        &tokenizer,
        Prompt::Tokens(tokens),
        args.sampling.options(args.max_tokens),
    )
    .map_err(|e| e.to_string())?;
    let mut out = group::output(&group);
    let mut text = String::new();
    let mut last: Option<GenerationResponse> = None;
    if args.verbose {
        writeln!(out, "==========").ok();
    }
    for response in stream {
        let response = response.map_err(|e| e.to_string())?;
        if args.verbose {
            write!(out, "{}", response.text).ok();
            out.flush().ok();
        }
        text.push_str(&response.text);
        last = Some(response);
    }
    if !args.verbose {
        writeln!(out, "{text}").ok();
        return Ok(0);
    }
    writeln!(out).ok();
    writeln!(out, "==========").ok();
    let Some(last) = last.filter(|_| !text.is_empty()) else {
        writeln!(out, "No text generated for this prompt").ok();
        return Ok(0);
    };
    writeln!(
        out,
        "Prompt: {} tokens, {:.3} tokens-per-sec",
        last.prompt_tokens, last.prompt_tps
    )
    .ok();
    writeln!(
        out,
        "Generation: {} tokens, {:.3} tokens-per-sec",
        last.generation_tokens, last.generation_tps
    )
    .ok();
    writeln!(out, "Peak memory: {:.3} GB", last.peak_memory).ok();
    Ok(0)
}

trait ReadLossy {
    fn read_to_string_lossy(&mut self, into: &mut String) -> std::io::Result<()>;
}

impl<R: std::io::Read> ReadLossy for R {
    fn read_to_string_lossy(&mut self, into: &mut String) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        self.read_to_end(&mut bytes)?;
        into.push_str(&String::from_utf8_lossy(&bytes));
        Ok(())
    }
}

/// `nuvec chat`'s options (mlx_lm.chat's).
#[derive(Args, Debug)]
pub(crate) struct ChatArgs {
    /// The model folder.
    #[arg(long)]
    model: std::path::PathBuf,
    /// A system message that opens the conversation.
    #[arg(long)]
    system_prompt: Option<String>,
    /// The most tokens per reply.
    #[arg(long, short = 'm', default_value_t = 256)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: Sampling,
    #[command(flatten)]
    splitting: Splitting,
}

/// Runs `nuvec chat`: a conversation on standard input ('q' quits, 'r' starts over). The
/// cache of the conversation so far is kept between turns, so each turn only runs its
/// new tokens.
pub(crate) fn chat(args: ChatArgs) -> Result<i32, String> {
    let group = group::join()?;
    let (model, tokenizer) = load_for(&args.model, &group, &args.splitting)?;
    if !tokenizer.has_chat_template() {
        return Err(format!("{} has no chat template", args.model.display()));
    }
    let opening: Vec<Message> = args
        .system_prompt
        .iter()
        .map(|s| Message::new("system", s))
        .collect();
    let mut messages = opening.clone();
    let mut cache: Vec<KvCache> = model.make_cache();
    let mut cached: Vec<u32> = Vec::new();
    let mut out = group::output(&group);
    writeln!(
        out,
        "[INFO] Starting chat session with {}.",
        args.model.display()
    )
    .ok();
    writeln!(
        out,
        "[INFO] Press 'q' to exit, 'r' to reset the conversation."
    )
    .ok();
    let stdin = std::io::stdin();
    loop {
        write!(out, ">> ").ok();
        out.flush().ok();
        let read = || {
            let mut line = String::new();
            match stdin.lock().read_line(&mut line) {
                Ok(0) => Ok(None),
                Ok(_) => Ok(Some(line)),
                Err(e) => Err(e.to_string()),
            }
        };
        let Some(line) = group::from_rank_0(&group, read)? else {
            return Ok(0);
        };
        let query = line.trim_end_matches(['\n', '\r']);
        match query {
            "q" => return Ok(0),
            "r" => {
                messages = opening.clone();
                cache = model.make_cache();
                cached.clear();
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", query));
        let text = tokenizer
            .apply_chat_template(&messages, true)
            .map_err(|e| e.to_string())?;
        let tokens = tokenizer.encode(&text, false).map_err(|e| e.to_string())?;
        // Reuse the cached prefix; at least one token must be fed.
        let shared = cached
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len().saturating_sub(1));
        for layer in &mut cache {
            layer.truncate(shared);
        }
        let options = args.sampling.options(args.max_tokens);
        let mut generator = TokenGenerator::with_cache(
            &model,
            &tokens[shared..],
            options,
            std::mem::take(&mut cache),
        )
        .map_err(|e| e.to_string())?;
        let mut detokenizer = tokenizer.detokenizer();
        let mut generated = Vec::new();
        for step in generator.by_ref() {
            let (token, _) = step.map_err(|e| e.to_string())?;
            generated.push(token);
            if tokenizer.eos_token_ids().contains(&token) {
                break;
            }
            detokenizer.add_token(token);
            write!(out, "{}", detokenizer.last_segment()).ok();
            out.flush().ok();
        }
        detokenizer.finalize();
        writeln!(out, "{}", detokenizer.last_segment()).ok();
        messages.push(Message::new("assistant", detokenizer.text()));
        cache = generator.into_cache();
        cached = tokens;
        cached.extend(generated.iter().take(generated.len().saturating_sub(1)));
    }
}
