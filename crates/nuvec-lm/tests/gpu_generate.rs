//! Generation on GPU 0 against the CPU: the same model folders (float, 4-bit, and a
//! mixture of experts), greedy decoding, the same text; and sampling with top-p, top-k and
//! min-p (sorts and scans on the GPU) from a seed. The `cuda` feature is on for the tests;
//! without a GPU this is a visible skip, and `NUVEC_REQUIRE_GPU=1` makes a missing GPU a
//! failure.

use nuvec_core::{with_default_device, Device};
use nuvec_lm::{generate, load, GenerateOptions, SamplerOptions};
use std::path::PathBuf;

fn complete(device: Device, model: &str, sampler: SamplerOptions) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(model);
    with_default_device(device, || {
        let (model, tokenizer) = load(&dir).unwrap();
        let options = GenerateOptions {
            max_tokens: 12,
            sampler,
            seed: Some(7),
            ..GenerateOptions::default()
        };
        generate(&model, &tokenizer, "hello there", options)
            .unwrap_or_else(|e| panic!("generating on {device}: {e}"))
    })
}

fn gpu_or_skip(test: &str) -> Option<Device> {
    if let Some(reason) = Device::Gpu(0).unavailable_reason() {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_GPU").is_none(),
            "NUVEC_REQUIRE_GPU is set but {reason}"
        );
        nuvec_test_support::skip(&format!("{test}: no GPU here ({reason})"));
        return None;
    }
    Some(Device::Gpu(0))
}

#[test]
fn greedy_generation_on_the_gpu_writes_what_the_cpu_writes() {
    let Some(gpu) = gpu_or_skip("greedy_generation_on_the_gpu_writes_what_the_cpu_writes") else {
        return;
    };
    let models = [
        "qwen3-f32",
        "llama-f32",
        "qwen3-q4",
        "llama-q4-bf16",
        "qwen3_moe-q4",
    ];
    for model in models {
        let greedy = SamplerOptions::default();
        assert_eq!(
            complete(gpu, model, greedy),
            complete(Device::Cpu, model, greedy),
            "{model}"
        );
    }
}

#[test]
fn sampling_on_the_gpu_runs_its_sorts_and_scans_there() {
    let Some(gpu) = gpu_or_skip("sampling_on_the_gpu_runs_its_sorts_and_scans_there") else {
        return;
    };
    let sampler = SamplerOptions {
        temp: 0.8,
        top_p: 0.9,
        top_k: 20,
        min_p: 0.05,
        ..SamplerOptions::default()
    };
    // The GPU draws the CPU's random bits; its probabilities may differ in the last bits, so
    // the texts are compared only for being whole, and the GPU's for repeating from the seed.
    let first = complete(gpu, "qwen3-q4", sampler);
    let again = complete(gpu, "qwen3-q4", sampler);
    assert!(!first.is_empty(), "the GPU wrote nothing");
    assert_eq!(
        first, again,
        "the same seed writes the same text on the GPU"
    );
    assert!(!complete(Device::Cpu, "qwen3-q4", sampler).is_empty());
}
