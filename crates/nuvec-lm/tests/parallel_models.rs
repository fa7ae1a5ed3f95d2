//! nuvec-lm split over ranks. Tensor parallel, on 1, 2 and 4 ranks: each rank's share of a
//! model (read from the files part by part) gives the logits of the whole model in one
//! process, and the same greedy completion; shapes that do not split are errors naming the
//! tensor or layer; with the vocabulary split too, the same. Pipeline parallel, on 2 ranks:
//! the same for stages of layers.
//!
//! The 2-rank case runs every golden fixture (mlx-lm's tiny models) that splits in two; the
//! 4-rank case, and mixture-of-experts 4-bit, run models with more heads made here (the
//! fixtures have two key/value heads, and experts too narrow for two 4-bit halves).

use nuvec_core::distributed::Group;
use nuvec_core::{ops, random, Array, DType};
use nuvec_lm::{
    load, load_parallel, sharded_load, GenerateOptions, Model, Parallel, TokenGenerator,
};
use nuvec_nn::save_safetensors;
use nuvec_test_support::ranks::{launch_ranks, run_ranks, Launch};
use nuvec_test_support::test_name;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(240);

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn logits(model: &Model, tokens: &[i32]) -> Array {
    let input = Array::from_vec(tokens.to_vec(), &[1, tokens.len() as i32]);
    let out = model.forward(&input, &mut model.make_cache()).unwrap();
    out.astype(DType::F32)
}

fn greedy(model: &Model, prompt: &[u32], tokens: usize) -> Vec<u32> {
    let options = GenerateOptions {
        max_tokens: tokens,
        ..GenerateOptions::default()
    };
    TokenGenerator::new(model, prompt, options)
        .unwrap()
        .map(|step| step.unwrap().0)
        .collect()
}

/// The sharded model's logits and greedy completion against the whole model's, with the
/// embeddings and output projection whole (mlx-lm's layout) and split by vocabulary.
fn sharded_equals_whole(dir: &Path, group: Group, tolerance: f32) {
    for vocabulary in [false, true] {
        let parallel = Parallel {
            tensor: Some(group),
            vocabulary,
            ..Parallel::default()
        };
        split_equals_whole(dir, &parallel, group, tolerance);
    }
}

/// The model split as `parallel` says against the whole model.
fn split_equals_whole(dir: &Path, parallel: &Parallel, group: Group, tolerance: f32) {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let (whole, _) = load(dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (part, _) = load_parallel(dir, parallel).unwrap_or_else(|e| panic!("{name}: {e}"));
    let prompt: Vec<i32> = (0..12).map(|i| (i * 41 + 7) % 500).collect();
    let (want, got) = (logits(&whole, &prompt), logits(&part, &prompt));
    let worst = ops::max(
        &(ops::abs(&(&got - &want)) / (ops::abs(&want) + 1.0)),
        None,
        false,
    )
    .item::<f32>()
    .unwrap();
    assert!(
        worst <= tolerance,
        "{name} on rank {} of {}: logits differ by {worst}",
        group.rank(),
        group.size()
    );
    let prompt: Vec<u32> = prompt.iter().map(|&t| t as u32).collect();
    assert_eq!(
        greedy(&part, &prompt, 12),
        greedy(&whole, &prompt, 12),
        "{name} on rank {} of {}: greedy completions differ",
        group.rank(),
        group.size()
    );
}

fn load_error(dir: &Path, group: Group) -> String {
    match sharded_load(dir, None, Some(&group)) {
        Ok(_) => panic!("{} split over {} ranks", dir.display(), group.size()),
        Err(error) => error.to_string(),
    }
}

/// The fixtures that split over 2 ranks, with their tolerances (as the golden tests').
const SPLIT_IN_TWO: &[(&str, f32)] = &[
    ("llama-f32", 1e-4),
    ("llama-bf16", 0.1),
    ("llama-q4", 1e-3),
    ("mistral-f32", 1e-4),
    ("qwen2-f32", 1e-4),
    ("qwen2-q4", 1e-3),
    ("qwen3-f32", 1e-4),
    ("qwen3-q4", 1e-3),
    ("qwen3_moe-f32", 1e-4),
];

/// A seed of its own for a tensor named by its layer and projection.
fn seed_of(layer: &str, proj: &str) -> u64 {
    layer.len() as u64 * 131 + proj.bytes().map(u64::from).sum::<u64>()
}

fn normal(shape: &[i32], seed: u64, scale: f32) -> Array {
    random::normal(shape, DType::F32, Some(&random::key(seed))) * scale
}

/// A random model with 8 query and 4 key/value heads, written to a folder of its own (with
/// a fixture's tokenizer and config): `llama`, `qwen2` (biased query, key and value
/// projections), `qwen3` (query and key norms) or `qwen3_moe`, in float32 or with every
/// projection quantized to 4 bits in groups of 64.
fn random_model(architecture: &str, quantized: bool) -> PathBuf {
    let source = format!("{architecture}-f32");
    let moe = architecture == "qwen3_moe";
    let qk_norm = architecture.starts_with("qwen3");
    let qkv_bias = architecture == "qwen2";
    let tied = architecture != "llama";
    let dir = std::env::temp_dir().join(format!(
        "nuvec-lm-tp-{}-{architecture}-{}",
        std::process::id(),
        if quantized { "q4" } else { "f32" }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = fixture_dir(&source);
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture.join(file), dir.join(file)).unwrap();
    }
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap())
            .unwrap();
    let (d, heads, kv, hd, hidden, moe_hidden, vocab) = (256, 8, 4, 32, 512, 256, 512);
    for (key, value) in [
        ("hidden_size", d),
        ("num_attention_heads", heads),
        ("num_key_value_heads", kv),
        ("head_dim", hd),
        ("intermediate_size", hidden),
        ("moe_intermediate_size", moe_hidden),
        ("vocab_size", vocab),
    ] {
        config[key] = json!(value);
    }
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut tensors: BTreeMap<String, Array> = BTreeMap::new();
    let mut seed = 1000;
    let mut add = |tensors: &mut BTreeMap<String, Array>, name: String, shape: &[i32]| {
        seed += 1;
        let scale = 1.0 / (*shape.last().unwrap() as f32).sqrt();
        let w = normal(shape, seed, scale);
        let projection = name.ends_with("_proj") || name.contains("switch_mlp");
        if quantized && projection {
            let (wq, scales, biases) = ops::quantize(&w, 64, 4);
            tensors.insert(format!("{name}.weight"), wq);
            tensors.insert(format!("{name}.scales"), scales);
            tensors.insert(format!("{name}.biases"), biases);
        } else {
            tensors.insert(format!("{name}.weight"), w);
        }
    };
    add(&mut tensors, "model.embed_tokens".into(), &[vocab, d]);
    if !tied {
        add(&mut tensors, "lm_head".into(), &[vocab, d]);
    }
    for i in 0..2 {
        let p = format!("model.layers.{i}");
        for (proj, shape) in [
            ("q_proj", [heads * hd, d]),
            ("k_proj", [kv * hd, d]),
            ("v_proj", [kv * hd, d]),
            ("o_proj", [d, heads * hd]),
        ] {
            add(&mut tensors, format!("{p}.self_attn.{proj}"), &shape);
            if qkv_bias && proj != "o_proj" {
                let name = format!("{p}.self_attn.{proj}.bias");
                tensors.insert(name, normal(&[shape[0]], seed_of(&p, proj), 0.1));
            }
        }
        if qk_norm {
            for norm in ["q_norm", "k_norm"] {
                let name = format!("{p}.self_attn.{norm}.weight");
                tensors.insert(name, ops::ones(&[hd], DType::F32));
            }
        }
        if moe {
            for (proj, shape) in [
                ("gate_proj", [4, moe_hidden, d]),
                ("up_proj", [4, moe_hidden, d]),
                ("down_proj", [4, d, moe_hidden]),
            ] {
                add(&mut tensors, format!("{p}.mlp.switch_mlp.{proj}"), &shape);
            }
            add(&mut tensors, format!("{p}.mlp.gate"), &[4, d]);
        } else {
            for (proj, shape) in [
                ("gate_proj", [hidden, d]),
                ("up_proj", [hidden, d]),
                ("down_proj", [d, hidden]),
            ] {
                add(&mut tensors, format!("{p}.mlp.{proj}"), &shape);
            }
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            let name = format!("{p}.{norm}.weight");
            tensors.insert(name, ops::ones(&[d], DType::F32));
        }
    }
    tensors.insert("model.norm.weight".into(), ops::ones(&[d], DType::F32));
    save_safetensors(dir.join("model.safetensors"), &tensors, &HashMap::new()).unwrap();
    dir
}

#[test]
fn one_rank_holds_the_whole_model() {
    sharded_equals_whole(&fixture_dir("qwen3-q4"), Group::single(), 0.0);
}

#[test]
fn every_fixture_that_splits_in_two_gives_the_whole_models_logits_on_2_ranks() {
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        for (name, tolerance) in SPLIT_IN_TWO {
            sharded_equals_whole(&fixture_dir(name), group, *tolerance);
        }
        let moe_q4 = random_model("qwen3_moe", true);
        sharded_equals_whole(&moe_q4, group, 1e-3);
        std::fs::remove_dir_all(&moe_q4).ok();
        // 4-bit groups of 32 (64) input features cannot be halved in these.
        let error = load_error(&fixture_dir("qwen3_moe-q4"), group);
        assert!(
            error.contains("switch_mlp.down_proj") && error.contains("2 equal parts"),
            "{error}"
        );
        let error = load_error(&fixture_dir("llama-q4-bf16"), group);
        assert!(
            error.contains("o_proj") && error.contains("2 equal parts"),
            "{error}"
        );
    });
}

/// Each rank's parameters against mlx-lm's `shard` of the same folder (fixtures/shards.json,
/// from scripts/golden/make_shard_fixtures.py): the same names, shapes, dtypes and sums.
fn same_slices_as_mlx_lm(group: Group) {
    let path = fixture_dir("shards.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(all["ranks"], json!(group.size()));
    for (name, ranks) in all["models"].as_object().unwrap() {
        let want = ranks[group.rank()].as_object().unwrap();
        let (model, _) = sharded_load(fixture_dir(name), None, Some(&group)).unwrap();
        let got = model.parameters();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        let want_names: Vec<&str> = want.keys().map(String::as_str).collect();
        assert_eq!(names, want_names, "{name}: parameter names");
        for (parameter, array) in &got {
            let expected = &want[parameter];
            let context = format!("{name} rank {}: {parameter}", group.rank());
            let shape: Vec<i32> = serde_json::from_value(expected["shape"].clone()).unwrap();
            assert_eq!(array.shape(), shape.as_slice(), "{context}");
            assert_eq!(array.dtype().name(), expected["dtype"], "{context}");
            let wide = array.astype(DType::F64);
            let sum = ops::sum(&wide, None, false).item::<f64>().unwrap();
            let abs_sum = ops::sum(&ops::abs(&wide), None, false)
                .item::<f64>()
                .unwrap();
            let (want_sum, want_abs) = (
                expected["sum"].as_f64().unwrap(),
                expected["abs_sum"].as_f64().unwrap(),
            );
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * want_abs.max(1.0);
            assert!(
                close(sum, want_sum) && close(abs_sum, want_abs),
                "{context}: sums {sum}, {abs_sum}; mlx-lm's {want_sum}, {want_abs}"
            );
        }
    }
}

#[test]
fn each_rank_holds_the_slices_mlx_lms_shard_gives_it() {
    run_ranks(test_name!(), 2, TIMEOUT, same_slices_as_mlx_lm);
}

#[test]
fn models_with_four_key_value_heads_split_over_4_ranks_and_two_heads_do_not() {
    run_ranks(test_name!(), 4, TIMEOUT, |group| {
        for (architecture, quantized, tolerance) in [
            ("llama", false, 1e-4),
            ("llama", true, 1e-3),
            ("qwen2", false, 1e-4),
            ("qwen2", true, 1e-3),
            ("qwen3", false, 1e-4),
            ("qwen3", true, 1e-3),
            ("qwen3_moe", false, 1e-4),
            ("qwen3_moe", true, 1e-3),
        ] {
            let dir = random_model(architecture, quantized);
            sharded_equals_whole(&dir, group, tolerance);
            std::fs::remove_dir_all(&dir).ok();
        }
        let error = load_error(&fixture_dir("qwen2-f32"), group);
        assert!(
            error.contains("self_attn")
                && error.contains("4 query heads and 2 key/value heads")
                && error.contains("4 ranks"),
            "{error}"
        );
    });
}

/// Rank 0 generates until its peer fails; rank 1 fails (by `fail`) after 4 tokens. Rank 0
/// must end with an error naming rank 1 within the group's timeout.
fn peer_failure_ends_generation(test_name: &str, fail: fn()) {
    let launch = Launch {
        expendable: vec![1],
        group_timeout: Some(Duration::from_secs(3)),
        ..Launch::default()
    };
    launch_ranks(test_name, 2, TIMEOUT, &launch, |group| {
        let group = group.expect("joining the group");
        let (model, _) = sharded_load(fixture_dir("qwen3-f32"), None, Some(&group)).unwrap();
        let options = GenerateOptions {
            max_tokens: 1_000_000,
            ..GenerateOptions::default()
        };
        let started = std::time::Instant::now();
        let mut steps = TokenGenerator::new(&model, &[5, 6, 7], options).unwrap();
        for generated in 0.. {
            let step = steps.next().expect("a step or an error");
            if group.rank() == 1 && generated == 4 {
                fail();
            }
            if let Err(error) = step {
                let text = error.to_string();
                assert!(text.contains("rank 1"), "the error names rank 1: {text}");
                let waited = started.elapsed();
                assert!(waited < Duration::from_secs(30), "ended after {waited:?}");
                eprintln!("rank 0 stopped after {generated} tokens: {text}");
                return;
            }
        }
    });
}

#[test]
fn a_rank_killed_during_generation_ends_the_others_with_an_error_naming_it() {
    peer_failure_ends_generation(test_name!(), || std::process::abort());
}

#[test]
fn a_rank_stalled_during_generation_ends_the_others_within_the_timeout() {
    peer_failure_ends_generation(test_name!(), || loop {
        std::thread::sleep(Duration::from_secs(60));
    });
}

#[test]
fn every_fixture_in_two_pipeline_stages_gives_the_whole_models_logits() {
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        let pipeline = Parallel {
            pipeline: Some(group),
            ..Parallel::default()
        };
        let mut names: Vec<(&str, f32)> = SPLIT_IN_TWO.to_vec();
        names.extend([("qwen3_moe-q4", 1e-3), ("llama-q4-bf16", 0.1)]);
        for (name, tolerance) in names {
            split_equals_whole(&fixture_dir(name), &pipeline, group, tolerance);
        }
        // Rank 0 runs the last layer, rank 1 the first; each reads only its own.
        let (model, _) = load_parallel(fixture_dir("qwen3-q4"), &pipeline).unwrap();
        let stage = model.stage().unwrap();
        assert_eq!(
            (stage.start, stage.end),
            (1 - group.rank(), 2 - group.rank())
        );
        let other = format!("model.layers.{}.", group.rank());
        let names: Vec<String> = model.parameters().into_iter().map(|(n, _)| n).collect();
        assert!(names.iter().all(|n| !n.starts_with(&other)), "{names:?}");
        assert!(
            names.iter().any(|n| n.starts_with("model.layers.")),
            "{names:?}"
        );
        // A split must give each rank a layer and cover the model.
        for split in [vec![2, 0], vec![1, 2], vec![1]] {
            let parallel = Parallel {
                split: Some(split.clone()),
                ..pipeline.clone()
            };
            let error = match load_parallel(fixture_dir("qwen3-f32"), &parallel) {
                Ok(_) => panic!("split {split:?} accepted"),
                Err(error) => error.to_string(),
            };
            assert!(error.contains("pipeline split"), "{split:?}: {error}");
        }
    });
}
