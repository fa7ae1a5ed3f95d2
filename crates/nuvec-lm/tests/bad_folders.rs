//! A folder that cannot be loaded gives an error naming the file and what is wrong, never a
//! panic: missing files, an unknown architecture, a missing or misshapen tensor, a
//! truncated weights file, bad generation settings.

use nuvec_lm::{load, GenerateOptions, SamplerOptions, TokenGenerator};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama-f32")
}

/// A copy of the fixture model in a fresh temporary folder.
fn copy(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nuvec-lm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir
}

fn error_of(dir: &Path) -> String {
    match load(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => {
            let text = e.to_string();
            assert_eq!(format!("{e:?}"), text, "Debug prints the readable message");
            text
        }
    }
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let file = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(file, config.to_string()).unwrap();
}

#[test]
fn a_missing_folder_or_config_is_named() {
    let error = error_of(Path::new("/no/such/model"));
    assert!(
        error.contains("/no/such/model") && error.contains("not a folder"),
        "{error}"
    );
    let dir = copy("no-config");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let error = error_of(&dir);
    assert!(
        error.contains("config.json") && error.contains("missing"),
        "{error}"
    );
}

#[test]
fn missing_weights_or_tokenizer_are_named() {
    let dir = copy("no-weights");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let error = error_of(&dir);
    assert!(error.contains("no weights"), "{error}");
    let dir = copy("no-tokenizer");
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let error = error_of(&dir);
    assert!(
        error.contains("tokenizer.json") && error.contains("missing"),
        "{error}"
    );
}

#[test]
fn an_unknown_model_type_lists_the_supported_ones() {
    let dir = copy("unknown-type");
    edit_config(&dir, |c| c["model_type"] = "gpt_neox".into());
    let error = error_of(&dir);
    assert!(error.contains("\"gpt_neox\" is not supported"), "{error}");
    for name in ["llama", "mistral", "qwen2", "qwen3", "qwen3_moe"] {
        assert!(error.contains(name), "{error}");
    }
}

#[test]
fn a_config_field_missing_is_named() {
    let dir = copy("no-hidden-size");
    edit_config(&dir, |c| {
        c.as_object_mut().unwrap().remove("hidden_size");
    });
    let error = error_of(&dir);
    assert!(error.contains("hidden_size"), "{error}");
}

#[test]
fn a_tensor_of_the_wrong_shape_or_missing_is_named() {
    let dir = copy("wrong-shape");
    edit_config(&dir, |c| c["intermediate_size"] = 96.into());
    let error = error_of(&dir);
    assert!(
        error.contains("model.layers.0.mlp.gate_proj.weight")
            && error.contains("expected [96, 64]"),
        "{error}"
    );
    let dir = copy("missing-tensor");
    edit_config(&dir, |c| c["num_hidden_layers"] = 3.into());
    let error = error_of(&dir);
    assert!(
        error.contains("model.layers.2.") && error.contains("missing"),
        "{error}"
    );
}

#[test]
fn a_truncated_weights_file_is_refused() {
    let dir = copy("truncated");
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let error = error_of(&dir);
    assert!(
        error.contains("model.safetensors") && error.contains("truncated"),
        "{error}"
    );
}

#[test]
fn bad_generation_settings_are_errors() {
    let (model, _) = load(fixture()).unwrap();
    let start = |prompt: &[u32], options: GenerateOptions| {
        TokenGenerator::new(&model, prompt, options)
            .err()
            .map(|e| e.to_string())
    };
    let error = start(&[], GenerateOptions::default()).unwrap();
    assert!(error.contains("no tokens"), "{error}");
    let error = start(&[100_000], GenerateOptions::default()).unwrap();
    assert!(
        error.contains("100000") && error.contains("vocabulary of 512"),
        "{error}"
    );
    let sampler = SamplerOptions {
        temp: 1.0,
        top_k: 512,
        ..SamplerOptions::default()
    };
    let error = start(
        &[1],
        GenerateOptions {
            sampler,
            ..GenerateOptions::default()
        },
    )
    .unwrap();
    assert!(error.contains("top_k"), "{error}");
    let sampler = SamplerOptions {
        temp: -1.0,
        ..SamplerOptions::default()
    };
    let error = start(
        &[1],
        GenerateOptions {
            sampler,
            ..GenerateOptions::default()
        },
    )
    .unwrap();
    assert!(error.contains("temp"), "{error}");
}
