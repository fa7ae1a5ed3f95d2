//! Times continuous batching's decoding step: `-b` sequences (each a prompt of `-p` random
//! token ids) stepped together `-g` times, for each batch size of `-b 1,8,32`; prints the
//! milliseconds per step and the generated tokens per second over the batch.
//!
//! ```sh
//! cargo run --release -p nuvec-bench --bin bench_batch -- --model DIR -b 1,8,32 -p 32 -g 16
//! ```

use nuvec_lm::{load_model, BatchGenerator, GenerateOptions};
use std::time::Instant;

fn value<'a>(args: &'a [String], name: &str, default: &'a str) -> &'a str {
    (args.iter().position(|a| a == name))
        .and_then(|i| args.get(i + 1))
        .map_or(default, String::as_str)
}

fn main() {
    if let Err(error) = run() {
        eprintln!("bench_batch: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = value(&args, "--model", "");
    if dir.is_empty() {
        return Err("usage: bench_batch --model DIR [-b 1,8,32] [-p 32] [-g 16]".into());
    }
    let number = |name: &str, default: &str| -> Result<usize, String> {
        value(&args, name, default)
            .parse()
            .map_err(|_| format!("{name} needs a number"))
    };
    let (prompt, steps) = (number("-p", "32")?, number("-g", "16")?);
    let model = load_model(dir).map_err(|e| e.to_string())?;
    let vocabulary = model.vocab_size() as u32;
    for batch in value(&args, "-b", "1,8,32").split(',') {
        let batch: usize = batch.parse().map_err(|_| "-b takes numbers".to_string())?;
        let mut generator = BatchGenerator::with_prompt_cache(&model, 0);
        for id in 0..batch as u64 {
            let tokens: Vec<u32> = (0..prompt as u64)
                .map(|i| ((id * 7919 + i * 104_729) % vocabulary as u64) as u32)
                .collect();
            let options = GenerateOptions {
                seed: Some(id),
                ..GenerateOptions::default()
            };
            generator
                .insert(id, &tokens, options)
                .map_err(|e| e.to_string())?;
        }
        generator.step().map_err(|e| e.to_string())?;
        let start = Instant::now();
        for _ in 0..steps {
            generator.step().map_err(|e| e.to_string())?;
        }
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "batch={batch} step_ms={:.1} tokens_per_s={:.1}",
            1e3 * seconds / steps as f64,
            (batch * steps) as f64 / seconds
        );
    }
    Ok(())
}
