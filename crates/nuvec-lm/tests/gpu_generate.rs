//! Generation on GPU 0 against the CPU: the same model folders, greedy decoding, the same
//! text (the `cuda` feature is on for the tests; without a GPU this is a visible skip, and
//! `NUVEC_REQUIRE_GPU=1` makes a missing GPU a failure).

use nuvec_core::{with_default_device, Device};
use nuvec_lm::{generate, load, GenerateOptions};
use std::path::PathBuf;

fn complete(device: Device, model: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(model);
    with_default_device(device, || {
        let (model, tokenizer) = load(&dir).unwrap();
        let options = GenerateOptions {
            max_tokens: 12,
            ..GenerateOptions::default()
        };
        generate(&model, &tokenizer, "hello there", options)
            .unwrap_or_else(|e| panic!("generating on {device}: {e}"))
    })
}

#[test]
fn greedy_generation_on_the_gpu_writes_what_the_cpu_writes() {
    if let Some(reason) = Device::Gpu(0).unavailable_reason() {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_GPU").is_none(),
            "NUVEC_REQUIRE_GPU is set but {reason}"
        );
        nuvec_test_support::skip(&format!(
            "greedy_generation_on_the_gpu_writes_what_the_cpu_writes: no GPU here ({reason})"
        ));
        return;
    }
    for model in ["qwen3-f32", "llama-f32"] {
        assert_eq!(
            complete(Device::Gpu(0), model),
            complete(Device::Cpu, model),
            "{model}"
        );
    }
}
