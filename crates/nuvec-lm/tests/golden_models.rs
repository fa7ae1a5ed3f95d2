//! Every fixture model (made by mlx-lm 0.32.2 with `scripts/golden/make_lm_fixtures.py`)
//! against what mlx-lm computed: logits of a prompt, greedy and seeded sampled completions,
//! logits processors, prompt encoding and the chat template.

use nuvec_core::{Array, DType};
use nuvec_lm::{
    load, GenerateOptions, LogitsProcessors, Message, Model, SamplerOptions, TokenGenerator,
    Tokenizer,
};
use serde_json::Value;
use std::path::PathBuf;

const MODELS: &[&str] = &[
    "llama-f32",
    "llama-bf16",
    "llama-q4",
    "llama-q4-bf16",
    "mistral-f32",
    "qwen2-f32",
    "qwen2-q4",
    "qwen3-f32",
    "qwen3-q4",
    "qwen3_moe-f32",
    "qwen3_moe-q4",
];

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture_dir(name).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| match x {
            Value::String(s) if s == "inf" => f32::INFINITY,
            Value::String(s) if s == "-inf" => f32::NEG_INFINITY,
            Value::String(_) => f32::NAN,
            other => other.as_f64().unwrap() as f32,
        })
        .collect()
}

/// How far from mlx-lm's logits a model of this precision may be: float32 differs only by
/// summation order; bfloat16 rounds every product (and MLX's CPU sums in bfloat16); 4-bit
/// weights are exact but their products accumulate in another order. MLX's CPU also sums a
/// bfloat16 product with 4-bit weights in bfloat16 (about 1.5% of the largest output off
/// the f32 sum of the same products, at depth 128), where nuvec sums in f32.
fn tolerance(name: &str) -> f32 {
    if name.ends_with("q4-bf16") {
        0.35
    } else if name.ends_with("bf16") {
        0.25
    } else if name.ends_with("q4") {
        2e-3
    } else {
        2e-4
    }
}

/// A top-two gap under which the two precisions may pick different tokens.
fn near_tie(name: &str) -> f32 {
    if name.ends_with("bf16") {
        0.5
    } else {
        0.01
    }
}

fn run(model: &Model, prompt: &[u32], options: GenerateOptions) -> Vec<u32> {
    TokenGenerator::new(model, prompt, options)
        .unwrap()
        .map(|step| step.unwrap().0)
        .collect()
}

/// The tokens up to and including the first step whose top-two gap (as mlx-lm saw it) was
/// a near-tie, after which the two runs may part ways legitimately.
fn comparable(tokens: &[u32], gaps: &[f32], tie: f32) -> usize {
    gaps.iter()
        .position(|&g| g < tie)
        .map_or(tokens.len(), |i| i + 1)
        .min(tokens.len())
}

fn until_eos(tokens: Vec<u32>, tokenizer: &Tokenizer) -> Vec<u32> {
    let mut out = Vec::new();
    for t in tokens {
        out.push(t);
        if tokenizer.eos_token_ids().contains(&t) {
            break;
        }
    }
    out
}

#[test]
fn prompt_logits_match_mlx_lm() {
    for name in MODELS {
        let e = expected(name);
        let (model, _) = load(fixture_dir(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        let prompt = ids(&e["prompt_tokens"]);
        let tokens: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
        let tokens = Array::from_vec(tokens, &[1, prompt.len() as i32]);
        let logits = model.forward(&tokens, &mut model.make_cache()).unwrap();
        let got = logits.astype(DType::F32).to_vec::<f32>().unwrap();
        let want = floats(&e["logits"]["data"]);
        assert_eq!(got.len(), want.len(), "{name}: logits size");
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
            .fold(0f32, f32::max);
        assert!(
            worst <= tolerance(name),
            "{name}: logits differ by up to {worst}"
        );
    }
}

#[test]
fn greedy_completions_match_mlx_lm_token_for_token() {
    for name in MODELS {
        let e = expected(name);
        let (model, tokenizer) = load(fixture_dir(name)).unwrap();
        let greedy = &e["greedy"];
        let want = ids(&greedy["tokens"]);
        let options = GenerateOptions {
            max_tokens: greedy["max_tokens"].as_u64().unwrap() as usize,
            ..GenerateOptions::default()
        };
        let got = until_eos(run(&model, &ids(&e["prompt_tokens"]), options), &tokenizer);
        let n = comparable(&want, &floats(&greedy["top_gaps"]), near_tie(name));
        assert!(
            n >= 4,
            "{name}: a near-tie after {n} tokens leaves too little to compare"
        );
        assert_eq!(
            &got[..n.min(got.len())],
            &want[..n],
            "{name}: greedy tokens"
        );
        if n == want.len() {
            assert_eq!(got, want, "{name}: greedy tokens (length)");
        }
    }
}

#[test]
fn seeded_sampling_matches_mlx_lm() {
    let (mut cases, mut identical) = (0, 0);
    for name in MODELS {
        let e = expected(name);
        let (model, tokenizer) = load(fixture_dir(name)).unwrap();
        for case in e["sampled"].as_array().unwrap() {
            let sampler = SamplerOptions {
                temp: case["temp"].as_f64().unwrap() as f32,
                top_p: case["top_p"].as_f64().unwrap() as f32,
                top_k: case["top_k"].as_u64().unwrap() as usize,
                min_p: case["min_p"].as_f64().unwrap() as f32,
                min_tokens_to_keep: case["min_tokens_to_keep"].as_u64().unwrap() as usize,
            };
            let options = GenerateOptions {
                max_tokens: 32,
                sampler,
                seed: Some(case["seed"].as_u64().unwrap()),
                ..GenerateOptions::default()
            };
            let want = ids(&case["tokens"]);
            let got = until_eos(run(&model, &ids(&e["prompt_tokens"]), options), &tokenizer);
            let agree = want.iter().zip(&got).take_while(|(a, b)| a == b).count();
            cases += 1;
            if got == want {
                identical += 1;
            } else {
                // Our float32 logits are MLX's up to the last bits (products summed in another
                // order). Where a filter's threshold or two noisy scores fall within those
                // bits, as top-p 0.9999 on a distribution with 5e-4 of mass in its tail does,
                // a step may keep or pick another token; bfloat16 rounds far more, so much
                // that at temperature 3 even the first draw may differ. The other runs must
                // still agree on the first token, and most runs must be identical.
                assert!(
                    agree >= 1 || name.ends_with("bf16"),
                    "{name}: no sampled token agrees with {case}"
                );
                eprintln!(
                    "{name}: seed {} agrees for {agree} tokens, then parts",
                    case["seed"]
                );
            }
        }
    }
    eprintln!("{identical} of {cases} seeded completions identical to mlx-lm's");
    assert!(
        identical * 10 >= cases * 8,
        "only {identical} of {cases} seeded completions identical"
    );
}

#[test]
fn logits_processors_match_mlx_lm() {
    for name in MODELS {
        let e = expected(name);
        let (model, tokenizer) = load(fixture_dir(name)).unwrap();
        for case in e["processed"].as_array().unwrap() {
            let mut processors = LogitsProcessors::none();
            if let Some(p) = case.get("repetition_penalty") {
                processors.repetition_penalty = Some(p.as_f64().unwrap() as f32);
                processors.repetition_context_size =
                    case["repetition_context_size"].as_u64().unwrap() as usize;
            }
            if let Some(bias) = case.get("logit_bias").and_then(Value::as_object) {
                for (id, value) in bias {
                    processors
                        .logit_bias
                        .insert(id.parse().unwrap(), value.as_f64().unwrap() as f32);
                }
            }
            let options = GenerateOptions {
                max_tokens: 32,
                logits_processors: processors,
                ..GenerateOptions::default()
            };
            let want = ids(&case["tokens"]);
            let got = until_eos(run(&model, &ids(&e["prompt_tokens"]), options), &tokenizer);
            let gaps = case.get("top_gaps").map(floats).unwrap_or_default();
            let n = if gaps.is_empty() {
                want.len()
            } else {
                comparable(&want, &gaps, near_tie(name))
            };
            assert_eq!(
                &got[..n.min(got.len())],
                &want[..n],
                "{name}: {}",
                case["name"]
            );
        }
    }
}

#[test]
fn prompts_and_chat_templates_encode_as_mlx_lm() {
    for name in MODELS {
        let e = expected(name);
        let (_, tokenizer) = load(fixture_dir(name)).unwrap();
        let prompt = e["prompt"].as_str().unwrap();
        assert_eq!(
            tokenizer.encode_prompt(prompt).unwrap(),
            ids(&e["prompt_tokens"]),
            "{name}"
        );
        let messages: Vec<Message> = e["chat_messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let text = tokenizer.apply_chat_template(&messages, true).unwrap();
        assert_eq!(
            text,
            e["chat_text"].as_str().unwrap(),
            "{name}: chat template"
        );
        assert_eq!(
            tokenizer.encode(&text, false).unwrap(),
            ids(&e["chat_tokens"]),
            "{name}"
        );
        let eos: Vec<u32> = tokenizer.eos_token_ids().iter().copied().collect();
        let mut want = ids(&e["tokenizer"]["eos_token_ids"]);
        want.sort();
        assert_eq!(eos, want, "{name}: end tokens");
    }
}

#[test]
fn streamed_text_matches_mlx_lm_detokenizer() {
    for name in MODELS {
        let e = expected(name);
        let (_, tokenizer) = load(fixture_dir(name)).unwrap();
        let greedy = &e["greedy"];
        let tokens = ids(&greedy["tokens"]);
        let mut detokenizer = tokenizer.detokenizer();
        let mut segments = Vec::new();
        for &t in &tokens {
            if tokenizer.eos_token_ids().contains(&t) {
                break;
            }
            detokenizer.add_token(t);
            segments.push(detokenizer.last_segment());
        }
        // The last response carries what finalizing releases.
        detokenizer.finalize();
        segments.push(detokenizer.last_segment());
        assert_eq!(
            segments.concat(),
            greedy["text"].as_str().unwrap(),
            "{name}: text"
        );
        if let Some(want) = greedy.get("segments").and_then(Value::as_array) {
            let want: Vec<&str> = want.iter().map(|s| s.as_str().unwrap()).collect();
            let got: Vec<&str> = segments.iter().map(String::as_str).collect();
            assert_eq!(got, want, "{name}: segments");
        }
    }
}
