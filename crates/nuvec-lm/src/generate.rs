//! Generating text, as mlx-lm's `generate_step`, `stream_generate` and `generate`: the
//! prompt is run through the model in chunks (filling the cache), then one token at a time
//! is drawn, streamed through the detokenizer, until an end token or the token limit.

use crate::cache::KvCache;
use crate::sample::{LogitsProcessors, SamplerOptions};
use crate::{memory, Error, Model, Result, Tokenizer};
use nuvec_core::{ops, random, Array, DType};
use std::time::Instant;

/// Settings of a generation.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// How tokens are drawn.
    pub sampler: SamplerOptions,
    /// Changes to the logits before drawing.
    pub logits_processors: LogitsProcessors,
    /// Seeds nuvec's global random state first (`mx.random.seed`), so a run repeats.
    pub seed: Option<u64>,
    /// Prompt tokens per forward pass while filling the cache.
    pub prefill_step_size: usize,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            max_tokens: 256,
            sampler: SamplerOptions::default(),
            logits_processors: LogitsProcessors::none(),
            seed: None,
            prefill_step_size: 2048,
        }
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end token.
    Stop,
    /// `max_tokens` were generated.
    Length,
}

impl FinishReason {
    /// OpenAI's and mlx-lm's name: `"stop"` or `"length"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One step of [`stream_generate`], as mlx-lm's `GenerationResponse`.
#[derive(Debug, Clone)]
pub struct GenerationResponse {
    /// Text released by this token (may be empty while a character is incomplete).
    pub text: String,
    /// The token drawn.
    pub token: u32,
    /// Log-probabilities over the vocabulary at this step `[V]`.
    pub logprobs: Array,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens per second.
    pub prompt_tps: f64,
    /// Tokens generated so far.
    pub generation_tokens: usize,
    /// Generated tokens per second.
    pub generation_tps: f64,
    /// Peak memory of the process so far, in GB (10⁹ bytes).
    pub peak_memory: f64,
    /// Set on the last response.
    pub finish_reason: Option<FinishReason>,
}

/// A prompt: text (encoded as mlx-lm does, BOS added unless present) or token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Text to encode.
    Text(String),
    /// Ids as they are.
    Tokens(Vec<u32>),
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Prompt {
        Prompt::Text(text.to_string())
    }
}

impl From<String> for Prompt {
    fn from(text: String) -> Prompt {
        Prompt::Text(text)
    }
}

impl From<Vec<u32>> for Prompt {
    fn from(tokens: Vec<u32>) -> Prompt {
        Prompt::Tokens(tokens)
    }
}

/// Tokens one at a time with their log-probabilities, from a prompt (mlx-lm's
/// `generate_step`); each `next` runs one forward pass.
#[derive(Debug)]
pub struct TokenGenerator<'m> {
    model: &'m Model,
    cache: Vec<KvCache>,
    options: GenerateOptions,
    /// Every token fed so far (for the logits processors).
    history: Vec<u32>,
    pending: Vec<u32>,
    generated: usize,
    failed: bool,
}

impl<'m> TokenGenerator<'m> {
    /// Starts generating from `prompt` with a fresh cache.
    pub fn new(
        model: &'m Model,
        prompt: &[u32],
        options: GenerateOptions,
    ) -> Result<TokenGenerator<'m>> {
        TokenGenerator::with_cache(model, prompt, options, model.make_cache())
    }

    /// Starts from `prompt` after what `cache` already holds.
    pub fn with_cache(
        model: &'m Model,
        prompt: &[u32],
        options: GenerateOptions,
        cache: Vec<KvCache>,
    ) -> Result<TokenGenerator<'m>> {
        check_generation(model, prompt, &options)?;
        if let Some(seed) = options.seed {
            random::seed(seed);
        }
        let mut generator = TokenGenerator {
            model,
            cache,
            options,
            history: Vec::new(),
            pending: Vec::new(),
            generated: 0,
            failed: false,
        };
        generator.prefill(prompt)?;
        Ok(generator)
    }

    /// Runs all but the last prompt token through the model, a chunk at a time.
    fn prefill(&mut self, prompt: &[u32]) -> Result<()> {
        let (head, last) = prompt.split_at(prompt.len() - 1);
        prefill(
            self.model,
            &mut self.cache,
            head,
            self.options.prefill_step_size,
        )?;
        self.history.extend_from_slice(head);
        self.pending = last.to_vec();
        Ok(())
    }

    /// The cache (for reuse by a later prompt sharing this one's prefix).
    pub fn into_cache(self) -> Vec<KvCache> {
        self.cache
    }

    fn step(&mut self) -> Result<(u32, Array)> {
        let input = std::mem::take(&mut self.pending);
        let logits = self.model.forward(&token_row(&input), &mut self.cache)?;
        let length = logits.shape()[1];
        let vocabulary = logits.shape()[2];
        let mut logits = ops::reshape(
            &ops::slice(
                &logits,
                &[0, length - 1, 0],
                &[1, length, vocabulary],
                &[1, 1, 1],
            ),
            &[1, vocabulary],
        );
        self.history.extend_from_slice(&input);
        if self.options.logits_processors.is_active() {
            logits = self.options.logits_processors.apply(&self.history, &logits);
        }
        let logprobs = &logits - ops::logsumexp(&logits, None, true);
        let token = self.options.sampler.sample(&logprobs);
        let logprobs = ops::reshape(&logprobs, &[vocabulary]);
        let mut outputs = vec![token.clone(), logprobs.clone()];
        outputs.extend(self.cache.iter().flat_map(KvCache::state));
        nuvec_core::eval_on_pool(&outputs)?;
        let token = ops::reshape(&token, &[-1])
            .astype(DType::U32)
            .to_vec::<u32>()?[0];
        self.pending = vec![token];
        Ok((token, logprobs))
    }
}

/// The fewest prompt tokens per chunk when a pipeline's chunks are made smaller.
const MIN_PIPELINED_CHUNK: usize = 32;

/// Why `prompt` and `options` cannot be generated from with `model`, if they cannot: an
/// empty prompt, a token past the vocabulary, or options the vocabulary refuses.
pub(crate) fn check_generation(
    model: &Model,
    prompt: &[u32],
    options: &GenerateOptions,
) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::Generate("the prompt has no tokens".into()));
    }
    let vocabulary = model.vocab_size();
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= vocabulary) {
        return Err(Error::Generate(format!(
            "prompt token {bad} is past the model's vocabulary of {vocabulary}"
        )));
    }
    options.sampler.check(vocabulary)?;
    options.logits_processors.check(vocabulary)?;
    if options.prefill_step_size == 0 {
        return Err(Error::Generate(
            "prefill_step_size must be at least 1".into(),
        ));
    }
    Ok(())
}

/// Runs `tokens` through the model into `cache`, `step` tokens per forward pass (fewer in a
/// pipeline); only the cache is evaluated, the chunks' logits never are.
pub(crate) fn prefill(
    model: &Model,
    cache: &mut [KvCache],
    tokens: &[u32],
    step: usize,
) -> Result<()> {
    // In a pipeline, a stage starts the next chunk once it has sent this one on: enough
    // chunks (four per stage) keep every stage busy.
    let stages = model.stage().map_or(1, |stage| stage.stages());
    let step = match stages {
        1 => step,
        _ => step.min(tokens.len().div_ceil(4 * stages).max(MIN_PIPELINED_CHUNK)),
    };
    for chunk in tokens.chunks(step) {
        let _logits = model.forward(&token_row(chunk), cache)?;
        let state: Vec<Array> = cache.iter().flat_map(KvCache::state).collect();
        nuvec_core::eval_on_pool(&state)?;
    }
    Ok(())
}

/// Tokens `[1, L]` (int32).
fn token_row(tokens: &[u32]) -> Array {
    let values: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    Array::from_vec(values, &[1, tokens.len() as i32])
}

impl Iterator for TokenGenerator<'_> {
    type Item = Result<(u32, Array)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.generated >= self.options.max_tokens {
            return None;
        }
        self.generated += 1;
        let step = self.step();
        self.failed = step.is_err();
        Some(step)
    }
}

/// Text as it is generated (mlx-lm's `stream_generate`): one response per token, the last
/// with its finish reason. End tokens stop generation and are not part of the text.
#[derive(Debug)]
pub struct TextStream<'m> {
    tokens: TokenGenerator<'m>,
    detokenizer: crate::StreamingDetokenizer,
    eos: std::collections::BTreeSet<u32>,
    prompt_tokens: usize,
    start: Instant,
    prompt_tps: f64,
    generation_start: Option<Instant>,
    count: usize,
    done: bool,
}

impl TextStream<'_> {
    fn response(
        &mut self,
        token: u32,
        logprobs: Array,
        finish: Option<FinishReason>,
    ) -> GenerationResponse {
        let elapsed = self
            .generation_start
            .map_or(0.0, |s| s.elapsed().as_secs_f64())
            .max(1e-9);
        GenerationResponse {
            text: self.detokenizer.last_segment(),
            token,
            logprobs,
            prompt_tokens: self.prompt_tokens,
            prompt_tps: self.prompt_tps,
            generation_tokens: self.count,
            generation_tps: self.count as f64 / elapsed,
            peak_memory: memory::peak_bytes() as f64 / 1e9,
            finish_reason: finish,
        }
    }
}

impl Iterator for TextStream<'_> {
    type Item = Result<GenerationResponse>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (token, logprobs) = match self.tokens.next() {
            Some(Ok(step)) => step,
            Some(Err(e)) => {
                self.done = true;
                return Some(Err(e));
            }
            None => {
                self.done = true;
                return None;
            }
        };
        if self.generation_start.is_none() {
            let prompt_time = self.start.elapsed().as_secs_f64().max(1e-9);
            self.prompt_tps = self.prompt_tokens as f64 / prompt_time;
            self.generation_start = Some(Instant::now());
        }
        self.count += 1;
        if self.eos.contains(&token) {
            self.done = true;
            self.detokenizer.finalize();
            return Some(Ok(self.response(token, logprobs, Some(FinishReason::Stop))));
        }
        self.detokenizer.add_token(token);
        if self.count == self.tokens.options.max_tokens {
            self.done = true;
            self.detokenizer.finalize();
            return Some(Ok(self.response(
                token,
                logprobs,
                Some(FinishReason::Length),
            )));
        }
        Some(Ok(self.response(token, logprobs, None)))
    }
}

/// Encodes `prompt` and streams the generated text.
pub fn stream_generate<'m>(
    model: &'m Model,
    tokenizer: &Tokenizer,
    prompt: impl Into<Prompt>,
    options: GenerateOptions,
) -> Result<TextStream<'m>> {
    let start = Instant::now();
    let tokens = match prompt.into() {
        Prompt::Text(text) => tokenizer.encode_prompt(&text)?,
        Prompt::Tokens(tokens) => tokens,
    };
    if options.max_tokens == 0 {
        return Err(Error::Generate("max_tokens must be at least 1".into()));
    }
    let prompt_tokens = tokens.len();
    let generator = TokenGenerator::new(model, &tokens, options)?;
    Ok(TextStream {
        tokens: generator,
        detokenizer: tokenizer.detokenizer(),
        eos: tokenizer.eos_token_ids().clone(),
        prompt_tokens,
        start,
        prompt_tps: 0.0,
        generation_start: None,
        count: 0,
        done: false,
    })
}

/// The whole generated text of `prompt`.
pub fn generate(
    model: &Model,
    tokenizer: &Tokenizer,
    prompt: impl Into<Prompt>,
    options: GenerateOptions,
) -> Result<String> {
    let mut text = String::new();
    for response in stream_generate(model, tokenizer, prompt, options)? {
        text.push_str(&response?.text);
    }
    Ok(text)
}
