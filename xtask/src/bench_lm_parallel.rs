//! `cargo xtask bench-lm --parallel`: nuvec-lm split over ranks against one rank and against
//! mlx-lm's own split (`sharded_load` in `mlx_lm.benchmark`), on the bfloat16 model of
//! Qwen2.5-0.5B's shape, each rank pinned to its own core (`taskset -c RANK`), every side
//! started by `nuvec launch` (which writes mlx.launch's environment). Reports tokens per
//! second (nuvec-lm's the median of three trials) and each rank's peak resident memory
//! against its share of the weights.

use crate::bench_lm::field;
use crate::{stdout_of, workspace_root};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// nuvec-lm's trials per run (after a warm-up), of which the medians are reported; mlx-lm's
/// side runs one (each takes minutes).
const TRIALS: usize = 3;

/// Cores the ranks are pinned to, in turn.
const CORES: usize = 2;

/// One run's figures: rank 0's speeds and every rank's peak memory.
#[derive(Debug, Default)]
struct Run {
    prompt_tps: f64,
    generation_tps: f64,
    peaks_gb: Vec<f64>,
}

/// `command` (run by every rank, pinned to core `MLX_RANK`) on `ranks` ranks.
fn launched(nuvec: &Path, ranks: usize, command: &str, what: &str) -> Result<String, String> {
    let pinned = format!("exec taskset -c $((MLX_RANK % {CORES})) {command}");
    let mut launch = Command::new(nuvec);
    launch.args([
        "launch",
        "-n",
        &ranks.to_string(),
        "--no-prefix",
        "--",
        "sh",
        "-c",
        &pinned,
    ]);
    let out = stdout_of(&mut launch, what, &format!("{what} failed"))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The median of `values` (0 when empty).
fn median(values: &[f64]) -> f64 {
    crate::stats::median(values).unwrap_or(0.0)
}

/// Rank 0's trials (their medians) and every rank's peak memory.
fn ours(text: &str) -> Run {
    let (mut prompt, mut generation) = (Vec::new(), Vec::new());
    let mut run = Run::default();
    for line in text.lines() {
        if let (Some(p), Some(g)) = (field(line, "prompt_tps"), field(line, "generation_tps")) {
            prompt.push(p);
            generation.push(g);
        } else if let (Some(_), Some(peak)) = (field(line, "rank"), field(line, "peak_gb")) {
            run.peaks_gb.push(peak);
        }
    }
    (run.prompt_tps, run.generation_tps) = (median(&prompt), median(&generation));
    run
}

fn theirs(text: &str) -> Run {
    let mut run = Run::default();
    for line in text.lines() {
        if line.starts_with("Trial") {
            run.prompt_tps = field(line, "prompt_tps").unwrap_or(0.0);
            run.generation_tps = field(line, "generation_tps").unwrap_or(0.0);
        }
        if let Some(peak) = field(line, "peak_rss_gb") {
            run.peaks_gb.push(peak);
        }
    }
    run
}

/// The bytes of each tensor of the model's safetensors files, by name.
fn tensor_bytes(model: &Path) -> Result<Vec<(String, u64)>, String> {
    let mut sizes = Vec::new();
    let entries = std::fs::read_dir(model).map_err(|e| e.to_string())?;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("safetensors") {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
        let length = u64::from_le_bytes(bytes[..8].try_into().map_err(|_| "short file")?);
        let header: Value = serde_json::from_slice(&bytes[8..8 + length as usize])
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for (name, info) in header.as_object().into_iter().flatten() {
            if let Some([start, end]) = info["data_offsets"]
                .as_array()
                .map(|o| [o[0].as_u64().unwrap_or(0), o[1].as_u64().unwrap_or(0)])
            {
                sizes.push((name.clone(), end - start));
            }
        }
    }
    Ok(sizes)
}

/// The weights one rank holds, in GB: the replicated tensors (norms, and the embeddings
/// unless `vocabulary`) and its share of the rest (a `ranks`-th of every layer's, or of the
/// layers, for a pipeline).
fn share_gb(sizes: &[(String, u64)], ranks: usize, vocabulary: bool) -> f64 {
    let split = |n: &str| {
        (n.starts_with("model.layers.") && !n.contains("layernorm"))
            || (vocabulary && (n.starts_with("model.embed_tokens") || n.starts_with("lm_head")))
    };
    let shared: u64 = sizes.iter().filter(|(n, _)| split(n)).map(|(_, b)| b).sum();
    let total: u64 = sizes.iter().map(|(_, b)| b).sum();
    ((total - shared) as f64 + shared as f64 / ranks as f64) / 1e9
}

pub(crate) fn run_parallel(models: &Path, prompt: usize, generate: usize) -> Result<(), String> {
    let root = workspace_root();
    let python = crate::bench_mlx::mlx_python(&root)?;
    let model = models.join("qwen2.5-0.5b-shape-bf16");
    let bench = root.join("target/release/bench_lm");
    let nuvec = root.join("target/release/nuvec");
    let m = model.to_string_lossy();
    let ours_command = |flags: &str| {
        format!(
            "{} --model {m} -p {prompt} -g {generate} -n {TRIALS} {flags}",
            bench.display()
        )
    };
    let sizes = tensor_bytes(&model)?;
    println!(
        "| run | side | ranks × cores | prompt tok/s | generation tok/s | peak GB per rank | its weights GB | peak / weights |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let report = |label: &str, side: &str, ranks: usize, run: &Run| {
        let weights = share_gb(&sizes, ranks, label.contains("vocabulary"));
        let worst = run.peaks_gb.iter().copied().fold(0.0, f64::max);
        let peaks: Vec<String> = run.peaks_gb.iter().map(|p| format!("{p:.3}")).collect();
        println!(
            "| {label} | {side} | {ranks} × {} | {:.1} | {:.2} | {} | {weights:.3} | {:.2} |",
            ranks.min(CORES),
            run.prompt_tps,
            run.generation_tps,
            peaks.join(", "),
            worst / weights
        );
    };
    let one = ours(&launched(
        &nuvec,
        1,
        &ours_command(""),
        "bench_lm on 1 rank",
    )?);
    report("alone", "nuvec-lm", 1, &one);
    let whole_vocabulary = ours(&launched(
        &nuvec,
        2,
        &ours_command("--tensor"),
        "bench_lm --tensor",
    )?);
    report(
        "tensor parallel (mlx-lm's layout)",
        "nuvec-lm",
        2,
        &whole_vocabulary,
    );
    let tensor = ours(&launched(
        &nuvec,
        2,
        &ours_command("--tensor --vocabulary"),
        "bench_lm --tensor --vocabulary",
    )?);
    report(
        "tensor parallel, vocabulary split too",
        "nuvec-lm",
        2,
        &tensor,
    );
    let pipeline = ours(&launched(
        &nuvec,
        2,
        &ours_command("--pipeline"),
        "bench_lm --pipeline",
    )?);
    report("pipeline", "nuvec-lm", 2, &pipeline);
    // 14 query heads and 2 key/value heads do not split four ways: 4 stages instead.
    let four = ours(&launched(
        &nuvec,
        4,
        &ours_command("--pipeline"),
        "bench_lm on 4 stages",
    )?);
    report("pipeline, 4 ranks on 2 cores", "nuvec-lm", 4, &four);
    let script = |flags: &str| {
        format!(
            "{} -c \"import resource, runpy, sys; sys.argv = ['mlx_lm.benchmark', '--model', '{m}', '-p', '{prompt}', '-g', '{generate}', '-n', '1'{flags}]; runpy.run_module('mlx_lm.benchmark', run_name='__main__'); print('peak_rss_gb=%.3f' % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9))\"",
            python.display()
        )
    };
    let their_tensor = theirs(&launched(
        &nuvec,
        2,
        &script(""),
        "mlx_lm.benchmark on 2 ranks",
    )?);
    report("tensor parallel", "mlx-lm", 2, &their_tensor);
    let their_pipeline = theirs(&launched(
        &nuvec,
        2,
        &script(", '--pipeline'"),
        "mlx_lm.benchmark --pipeline",
    )?);
    report("pipeline", "mlx-lm", 2, &their_pipeline);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    println!();
    println!(
        "tensor parallel on 2 ranks, mlx-lm's layout: generation {:.2}× one rank, {:.2}× mlx-lm's",
        ratio(whole_vocabulary.generation_tps, one.generation_tps),
        ratio(whole_vocabulary.generation_tps, their_tensor.generation_tps),
    );
    println!(
        "tensor parallel on 2 ranks, vocabulary split too: generation {:.2}× one rank, {:.2}× mlx-lm's; prompt {:.2}× one rank, {:.2}× mlx-lm's",
        ratio(tensor.generation_tps, one.generation_tps),
        ratio(tensor.generation_tps, their_tensor.generation_tps),
        ratio(tensor.prompt_tps, one.prompt_tps),
        ratio(tensor.prompt_tps, their_tensor.prompt_tps)
    );
    println!(
        "pipeline on 2 ranks: prompt {:.2}× one rank, {:.2}× mlx-lm's; generation {:.2}× mlx-lm's",
        ratio(pipeline.prompt_tps, one.prompt_tps),
        ratio(pipeline.prompt_tps, their_pipeline.prompt_tps),
        ratio(pipeline.generation_tps, their_pipeline.generation_tps)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ranks_share_keeps_the_unlayered_tensors_whole() {
        let sizes = vec![
            ("model.embed_tokens.weight".to_string(), 100),
            ("model.layers.0.mlp.up_proj.weight".to_string(), 40),
            ("model.layers.0.input_layernorm.weight".to_string(), 2),
            ("model.norm.weight".to_string(), 2),
        ];
        assert_eq!(share_gb(&sizes, 2, false) * 1e9, 124.0);
        assert_eq!(share_gb(&sizes, 1, false) * 1e9, 144.0);
        assert_eq!(share_gb(&sizes, 2, true) * 1e9, 74.0);
    }
}
