//! A mixture-of-experts layer routes a long prompt's (token, expert) pairs sorted by expert
//! and a short one's as they come: both give the same logits, checked by running a 40-token
//! prompt (80 pairs, sorted) at once and then a token at a time (2 pairs per step).

use nuvec_core::{ops, Array, DType};
use nuvec_lm::load;
use std::path::PathBuf;

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn a_prompt_at_once_and_a_token_at_a_time_give_the_same_logits() {
    for name in ["qwen3_moe-f32", "qwen3_moe-q4"] {
        let (model, _) = load(fixture_dir(name)).unwrap();
        let tokens: Vec<i32> = (0..40).map(|i| (i * 37 + 11) % 500).collect();
        let whole = Array::from_vec(tokens.clone(), &[1, 40]);
        let at_once = model.forward(&whole, &mut model.make_cache()).unwrap();
        let mut cache = model.make_cache();
        let mut steps = Vec::new();
        for &token in &tokens {
            let one = Array::from_vec(vec![token], &[1, 1]);
            steps.push(model.forward(&one, &mut cache).unwrap());
        }
        let stepped = ops::concatenate(&steps, 1);
        let (a, b) = (at_once.astype(DType::F32), stepped.astype(DType::F32));
        let worst = ops::max(&ops::abs(&(&a - &b)), None, false)
            .item::<f32>()
            .unwrap();
        let scale = ops::max(&ops::abs(&b), None, false).item::<f32>().unwrap();
        assert!(
            worst <= 1e-3 * scale.max(1.0),
            "{name}: logits differ by {worst}"
        );
    }
}
