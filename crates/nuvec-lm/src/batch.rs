//! Continuous batching, as mlx-lm's `BatchGenerator`: sequences join and leave a batch at
//! any step, and every step draws one token for each of them from one forward pass
//! ([`Model::forward_rows`]). A sequence's prompt is run through the model when it joins,
//! after the longest prefix it shares with a sequence that left (whose cache is kept, a few
//! at a time, as mlx-lm's prompt cache).
//!
//! Each sequence draws from a random state of its own ([`KeyStream`]) seeded from its
//! options, so a seeded sequence draws the tokens `generate` draws with that seed, whatever
//! else is in the batch.

use crate::cache::KvCache;
use crate::generate::{check_generation, prefill, GenerateOptions};
use crate::{Error, Model, Result};
use nuvec_core::random::KeyStream;
use nuvec_core::{ops, Array, DType};
use std::collections::VecDeque;

/// Sequences whose caches are kept for later prompts by default.
pub const DEFAULT_PROMPT_CACHE_ENTRIES: usize = 8;

/// A sequence in the batch.
#[derive(Debug)]
struct Sequence {
    id: u64,
    cache: Vec<KvCache>,
    /// Every token fed to the model, in order (the prompt cache's key).
    fed: Vec<u32>,
    /// The token to feed next.
    pending: u32,
    options: GenerateOptions,
    keys: Option<KeyStream>,
}

/// The token a step drew for one sequence.
#[derive(Debug, Clone)]
pub struct BatchToken {
    /// The sequence's id, as given to [`BatchGenerator::insert`].
    pub id: u64,
    /// The token drawn.
    pub token: u32,
    /// Log-probabilities over the vocabulary at this step `[V]` (evaluated).
    pub logprobs: Array,
}

/// A cache kept after its sequence left, under the tokens it holds.
#[derive(Debug)]
struct Kept {
    tokens: Vec<u32>,
    cache: Vec<KvCache>,
}

/// Sequences decoded together, one token each per [`step`](BatchGenerator::step).
#[derive(Debug)]
pub struct BatchGenerator<'m> {
    model: &'m Model,
    sequences: Vec<Sequence>,
    kept: VecDeque<Kept>,
    keep: usize,
}

impl<'m> BatchGenerator<'m> {
    /// An empty batch keeping up to [`DEFAULT_PROMPT_CACHE_ENTRIES`] caches of sequences
    /// that left.
    pub fn new(model: &'m Model) -> BatchGenerator<'m> {
        BatchGenerator::with_prompt_cache(model, DEFAULT_PROMPT_CACHE_ENTRIES)
    }

    /// An empty batch keeping up to `entries` caches (0 keeps none).
    pub fn with_prompt_cache(model: &'m Model, entries: usize) -> BatchGenerator<'m> {
        BatchGenerator {
            model,
            sequences: Vec::new(),
            kept: VecDeque::new(),
            keep: entries,
        }
    }

    /// Sequences in the batch.
    pub fn len(&self) -> usize {
        self.sequences.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty()
    }

    /// Adds a sequence: checks `options`, runs all but the last prompt token through the
    /// model (after the longest prefix a kept cache holds), and returns how many prompt
    /// tokens came from a kept cache. Its tokens come from the next [`step`]s.
    /// `options.max_tokens` is the caller's to enforce (by [`remove`]).
    ///
    /// [`step`]: BatchGenerator::step
    /// [`remove`]: BatchGenerator::remove
    pub fn insert(&mut self, id: u64, prompt: &[u32], options: GenerateOptions) -> Result<usize> {
        if self.sequences.iter().any(|s| s.id == id) {
            return Err(Error::Generate(format!(
                "sequence {id} is already in the batch"
            )));
        }
        check_generation(self.model, prompt, &options)?;
        let Some((&last, head)) = prompt.split_last() else {
            return Err(Error::Generate("the prompt has no tokens".into()));
        };
        let (mut cache, reused) = self.reuse(head);
        prefill(
            self.model,
            &mut cache,
            &head[reused..],
            options.prefill_step_size,
        )?;
        self.sequences.push(Sequence {
            id,
            cache,
            fed: head.to_vec(),
            pending: last,
            keys: options.seed.map(KeyStream::new),
            options,
        });
        Ok(reused)
    }

    /// A cache holding the longest prefix of `head` a kept cache has, and that prefix's
    /// length.
    fn reuse(&mut self, head: &[u32]) -> (Vec<KvCache>, usize) {
        let shared = |kept: &Kept| {
            kept.tokens
                .iter()
                .zip(head)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let best = (self.kept.iter().enumerate())
            .map(|(i, k)| (shared(k), i))
            .max()
            .filter(|&(length, _)| length > 0);
        match best {
            Some((length, i)) => {
                // Most recently used last: the oldest is dropped first.
                let Some(kept) = self.kept.remove(i) else {
                    return (self.model.make_cache(), 0);
                };
                let mut cache = kept.cache.clone();
                for layer in &mut cache {
                    layer.truncate(length);
                }
                self.kept.push_back(kept);
                (cache, length)
            }
            None => (self.model.make_cache(), 0),
        }
    }

    /// Takes a sequence out of the batch (finished, or its client gone), keeping its cache
    /// for later prompts that share its prefix. Returns whether it was in the batch.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(at) = self.sequences.iter().position(|s| s.id == id) else {
            return false;
        };
        let sequence = self.sequences.remove(at);
        if self.keep > 0 && !sequence.fed.is_empty() {
            // A kept cache that is a prefix of this one holds nothing more.
            let fed = &sequence.fed;
            self.kept.retain(|k| !fed.starts_with(&k.tokens));
            if self.kept.len() == self.keep {
                self.kept.pop_front();
            }
            self.kept.push_back(Kept {
                tokens: sequence.fed,
                cache: sequence.cache,
            });
        }
        true
    }

    /// Drops every kept cache.
    pub fn clear_prompt_cache(&mut self) {
        self.kept.clear();
    }

    /// One forward pass over every sequence, drawing one token each (in the order they
    /// joined). Empty when the batch is.
    pub fn step(&mut self) -> Result<Vec<BatchToken>> {
        if self.sequences.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.sequences.len();
        let values: Vec<i32> = self.sequences.iter().map(|s| s.pending as i32).collect();
        let tokens = Array::from_vec(values, &[rows as i32, 1]);
        let logits = {
            let mut caches: Vec<&mut [KvCache]> = (self.sequences.iter_mut())
                .map(|s| s.cache.as_mut_slice())
                .collect();
            self.model.forward_rows(&tokens, &mut caches)?
        };
        let vocabulary = logits.shape()[2];
        let mut drawn = Vec::with_capacity(rows);
        let mut logprobs = Vec::with_capacity(rows);
        for (i, sequence) in self.sequences.iter_mut().enumerate() {
            sequence.fed.push(sequence.pending);
            let row = i as i32;
            let mut logits = ops::reshape(
                &ops::slice(&logits, &[row, 0, 0], &[row + 1, 1, vocabulary], &[1, 1, 1]),
                &[1, vocabulary],
            );
            let processors = &sequence.options.logits_processors;
            if processors.is_active() {
                logits = processors.apply(&sequence.fed, &logits);
            }
            let row_logprobs = &logits - ops::logsumexp(&logits, None, true);
            let key = sequence.keys.as_mut().map(KeyStream::next_key);
            let token = (sequence.options.sampler).sample_with_key(&row_logprobs, key.as_ref());
            drawn.push(ops::reshape(&token, &[1]).astype(DType::U32));
            logprobs.push(ops::reshape(&row_logprobs, &[vocabulary]));
        }
        let drawn = ops::concatenate(&drawn, 0);
        let mut outputs = vec![drawn.clone()];
        outputs.extend(logprobs.iter().cloned());
        outputs.extend(
            (self.sequences.iter())
                .flat_map(|s| s.cache.iter())
                .flat_map(KvCache::state),
        );
        nuvec_core::eval_on_pool(&outputs)?;
        let drawn = drawn.to_vec::<u32>()?;
        let mut out = Vec::with_capacity(rows);
        for ((sequence, token), logprobs) in self.sequences.iter_mut().zip(drawn).zip(logprobs) {
            sequence.pending = token;
            out.push(BatchToken {
                id: sequence.id,
                token,
                logprobs,
            });
        }
        Ok(out)
    }
}
