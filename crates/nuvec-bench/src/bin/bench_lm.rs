//! Times a model folder as `mlx_lm.benchmark` does: a prompt of random token ids
//! (`-p`, 512), then a completion (`-g`, 128) with no end tokens: a warm-up run (as
//! mlx_lm.benchmark's, which also brings the mapped weights into memory), then `-n` trials,
//! printing each trial's prompt and generation tokens per second, the peak memory and the
//! load time.
//!
//! ```sh
//! cargo run --release -p nuvec-bench --bin bench_lm -- --model DIR -p 512 -g 128 -n 3
//! ```
//!
//! Started as the ranks of a group (`nuvec launch -n 2 -- bench_lm ...`), `--tensor` splits
//! the model tensor-parallel (`--vocabulary`: the embeddings and output projection too) and
//! `--pipeline` into stages; rank 0 prints the trials and
//! every rank its peak memory (`rank=R peak_gb=G`).

use nuvec_core::{random, DType};
use nuvec_lm::{load_model, load_parallel, GenerateOptions, Parallel, TokenGenerator};
use std::time::Instant;

fn value(args: &[String], names: &[&str], default: usize) -> Result<usize, String> {
    match args.iter().position(|a| names.contains(&a.as_str())) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{} needs a number", names[0])),
        None => Ok(default),
    }
}

fn main() {
    if let Err(error) = run() {
        eprintln!("bench_lm: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: bench_lm --model DIR [-p PROMPT_TOKENS] [-g GENERATION_TOKENS] [-n TRIALS]";
    let model_dir = args
        .iter()
        .position(|a| a == "--model")
        .and_then(|i| args.get(i + 1))
        .ok_or(usage)?;
    let prompt_tokens = value(&args, &["-p", "--prompt-tokens"], 512)?;
    let generation_tokens = value(&args, &["-g", "--generation-tokens"], 128)?;
    let trials = value(&args, &["-n", "--num-trials"], 3)?;
    let group = nuvec_distributed::init(false).map_err(|e| e.to_string())?;
    let flag = |name: &str| args.iter().any(|a| a == name);
    let parallel = Parallel {
        tensor: flag("--tensor").then_some(group),
        pipeline: flag("--pipeline").then_some(group),
        split: None,
        vocabulary: flag("--vocabulary"),
    };
    let start = Instant::now();
    let model = if group.size() > 1 {
        load_parallel(model_dir, &parallel)
            .map_err(|e| e.to_string())?
            .0
    } else {
        load_model(model_dir).map_err(|e| e.to_string())?
    };
    let load_seconds = start.elapsed().as_secs_f64();
    let leader = group.rank() == 0;
    random::seed(0);
    let vocabulary = model.vocab_size() as i64;
    let prompt = random::randint(0, vocabulary, &[prompt_tokens as i32], DType::U32, None)
        .to_vec::<u32>()
        .map_err(|e| e.to_string())?;
    if leader {
        println!("load_s={load_seconds:.3}");
    }
    // Trial -1 is the warm-up.
    for trial in -1..trials as i64 {
        let options = GenerateOptions {
            max_tokens: generation_tokens,
            ..GenerateOptions::default()
        };
        let tic = Instant::now();
        let mut generator =
            TokenGenerator::new(&model, &prompt, options).map_err(|e| e.to_string())?;
        let _first = generator
            .next()
            .ok_or("no token")?
            .map_err(|e| e.to_string())?;
        let prompt_seconds = tic.elapsed().as_secs_f64();
        let tic = Instant::now();
        let mut count = 1;
        for step in generator {
            let _logprobs = step.map_err(|e| e.to_string())?;
            count += 1;
        }
        let generation_seconds = tic.elapsed().as_secs_f64();
        if trial < 0 || !leader {
            continue;
        }
        println!(
            "trial={trial} prompt_tps={:.3} generation_tps={:.3} peak_gb={:.3}",
            prompt_tokens as f64 / prompt_seconds,
            (count - 1) as f64 / generation_seconds.max(1e-9),
            nuvec_lm::memory::peak_bytes() as f64 / 1e9
        );
    }
    println!(
        "rank={} peak_gb={:.3}",
        group.rank(),
        nuvec_lm::memory::peak_bytes() as f64 / 1e9
    );
    Ok(())
}
