//! SentencePiece tokenizers stream as mlx-lm's `SPMStreamingDetokenizer` streams them: the
//! fixtures (`scripts/golden/make_detokenizer_fixtures.py`) hold, for token sequences with byte
//! fallbacks, split characters, leading spaces and special tokens, the segment mlx-lm 0.32.2
//! released after each token and after `finalize()`.

use nuvec_lm::Tokenizer;
use serde_json::Value;
use std::path::PathBuf;

fn check(folder: &str, trim_space: bool) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(folder);
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("detokenizer.json")).expect("the fixture"),
    )
    .expect("the fixture is JSON");
    assert_eq!(expected["detokenizer"], "SPMStreamingDetokenizer");
    assert_eq!(expected["trim_space"], trim_space);
    let tokenizer = Tokenizer::from_dir(&dir, &Value::Null).expect("the tokenizer loads");
    let cases = expected["cases"].as_array().expect("cases");
    assert!(cases.len() >= 6);
    for case in cases {
        let tokens: Vec<u32> = case["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        let mut detokenizer = tokenizer.detokenizer();
        let mut segments = Vec::new();
        for &token in &tokens {
            detokenizer.add_token(token);
            segments.push(detokenizer.last_segment());
        }
        detokenizer.finalize();
        segments.push(detokenizer.last_segment());
        let want: Vec<&str> = case["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(segments, want, "{folder}: tokens {tokens:?}");
        assert_eq!(detokenizer.text(), case["text"].as_str().unwrap());
    }
}

#[test]
fn sentencepiece_text_streams_as_mlx_lm_streams_it_with_the_first_space_trimmed() {
    check("spm", true);
}

#[test]
fn sentencepiece_text_streams_as_mlx_lm_streams_it_without_a_strip_step() {
    check("spm-no-strip", false);
}
