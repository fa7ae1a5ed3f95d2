//! Continuous batching: sequences decoded together, joining and leaving at any step, draw
//! the tokens each would draw alone (`TokenGenerator`, checked against mlx-lm in
//! golden_models.rs), and a prompt sharing a prefix with a finished one reuses its cache.

use nuvec_lm::{
    load, BatchGenerator, GenerateOptions, LogitsProcessors, Model, SamplerOptions, TokenGenerator,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

fn model(name: &str) -> Model {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    load(dir).unwrap().0
}

/// Five prompts of different lengths over the fixtures' small vocabulary.
fn prompts() -> Vec<Vec<u32>> {
    (0..5u32)
        .map(|i| {
            (0..(3 + 4 * i))
                .map(|j| (7 * i + 3 * j + 1) % 200)
                .collect()
        })
        .collect()
}

fn options(i: usize) -> GenerateOptions {
    let sampled = SamplerOptions {
        temp: 0.8,
        top_p: 0.9,
        ..SamplerOptions::default()
    };
    GenerateOptions {
        max_tokens: 6 + i,
        sampler: if i.is_multiple_of(2) {
            sampled
        } else {
            SamplerOptions::default()
        },
        logits_processors: if i == 3 {
            LogitsProcessors {
                repetition_penalty: Some(1.3),
                logit_bias: BTreeMap::from([(5, 2.0)]),
                ..LogitsProcessors::none()
            }
        } else {
            LogitsProcessors::none()
        },
        seed: Some(100 + i as u64),
        prefill_step_size: 4,
    }
}

/// Tests run on threads of one process: a seeded `TokenGenerator` draws from the global
/// random state, so one draws at a time.
static GLOBAL_RANDOM_STATE: Mutex<()> = Mutex::new(());

fn alone(model: &Model, prompt: &[u32], options: GenerateOptions) -> Vec<u32> {
    let _only_me = GLOBAL_RANDOM_STATE
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    TokenGenerator::new(model, prompt, options)
        .unwrap()
        .map(|step| step.unwrap().0)
        .collect()
}

/// Runs the prompts through one batch, sequence `i` joining at step `i` and leaving after
/// its `max_tokens`.
fn batched(model: &Model) -> Vec<Vec<u32>> {
    let prompts = prompts();
    let mut batch = BatchGenerator::new(model);
    let mut out = vec![Vec::new(); prompts.len()];
    let mut step = 0;
    loop {
        if let Some(prompt) = prompts.get(step) {
            batch.insert(step as u64, prompt, options(step)).unwrap();
        }
        for drawn in batch.step().unwrap() {
            let i = drawn.id as usize;
            assert_eq!(drawn.logprobs.shape(), [model.vocab_size() as i32]);
            out[i].push(drawn.token);
            if out[i].len() == options(i).max_tokens {
                assert!(batch.remove(drawn.id));
            }
        }
        step += 1;
        if batch.is_empty() && step >= prompts.len() {
            return out;
        }
    }
}

fn check_batch_matches_alone(name: &str) {
    let model = model(name);
    let expected: Vec<Vec<u32>> = (prompts().iter().enumerate())
        .map(|(i, p)| alone(&model, p, options(i)))
        .collect();
    assert_eq!(batched(&model), expected, "{name}");
}

#[test]
fn sequences_joining_and_leaving_a_batch_draw_what_they_draw_alone_f32() {
    check_batch_matches_alone("qwen3-f32");
}

#[test]
fn sequences_joining_and_leaving_a_batch_draw_what_they_draw_alone_q4() {
    check_batch_matches_alone("qwen2-q4");
}

#[test]
fn sequences_joining_and_leaving_a_batch_draw_what_they_draw_alone_bf16() {
    check_batch_matches_alone("llama-bf16");
}

#[test]
fn a_prompt_sharing_a_finished_prefix_reuses_its_cache_and_draws_the_same() {
    let model = model("qwen3-f32");
    let first: Vec<u32> = (1..40).collect();
    let mut second = first[..30].to_vec();
    second.extend([90, 91, 92]);
    let mut batch = BatchGenerator::new(&model);
    assert_eq!(batch.insert(1, &first, options(1)).unwrap(), 0);
    let _ = batch.step().unwrap();
    assert!(batch.remove(1));
    assert_eq!(batch.insert(2, &second, options(1)).unwrap(), 30);
    let mut tokens = Vec::new();
    for _ in 0..options(1).max_tokens {
        tokens.push(batch.step().unwrap()[0].token);
    }
    assert_eq!(tokens, alone(&model, &second, options(1)));
    // The same prompt again: everything but its last token comes from the cache.
    assert!(batch.remove(2));
    let cached = batch.insert(3, &second, options(1)).unwrap();
    assert_eq!(cached, second.len() - 1);
    assert!(batch.remove(3));
    // The first prompt's kept cache was not written over by the prompts that reused it.
    assert!(batch.insert(4, &first, options(1)).unwrap() >= 30);
    let again: Vec<u32> = (0..options(1).max_tokens)
        .map(|_| batch.step().unwrap()[0].token)
        .collect();
    assert_eq!(again, alone(&model, &first, options(1)));
}

#[test]
fn a_bad_sequence_is_refused_and_leaves_the_batch_running() {
    let model = model("qwen3-f32");
    let mut batch = BatchGenerator::new(&model);
    batch.insert(1, &[1, 2, 3], options(1)).unwrap();
    let past = model.vocab_size() as u32;
    let error = batch.insert(2, &[1, past], options(1)).unwrap_err();
    assert!(
        error.to_string().contains("past the model's vocabulary"),
        "{error}"
    );
    assert!(batch.insert(3, &[], options(1)).is_err());
    let error = batch.insert(1, &[4], options(1)).unwrap_err();
    assert!(
        error.to_string().contains("already in the batch"),
        "{error}"
    );
    assert_eq!(batch.len(), 1);
    assert_eq!(batch.step().unwrap().len(), 1);
}
