//! `nuvec generate` and `nuvec chat` as the ranks of a group (started by `nuvec launch` or
//! `mlx.launch`): every rank holds its share of the model and computes the same tokens; rank
//! 0 reads the input, hands it to the others, and alone writes the output.

use nuvec_core::distributed::{all_sum, Group};
use nuvec_core::Array;
use std::io::Write;

/// The group of this process's launch, or this process alone when it was not launched as
/// a rank. Half of the ring's environment (a rank without a hostfile, or the reverse) is an
/// error naming what is missing, not a run alone.
pub(crate) fn join() -> Result<Group, String> {
    let ring = ["MLX_RANK", "MLX_HOSTFILE"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    nuvec_distributed::init(ring).map_err(|e| e.to_string())
}

/// Where this rank writes what a single process would print: standard output on rank 0,
/// nowhere on the others.
pub(crate) fn output(group: &Group) -> Box<dyn Write> {
    if group.rank() == 0 {
        Box::new(std::io::stdout())
    } else {
        Box::new(std::io::sink())
    }
}

/// Rank 0's `text` (`None`: the end of its input) on every rank of `group`; `read` runs on
/// rank 0 only.
pub(crate) fn from_rank_0(
    group: &Group,
    read: impl FnOnce() -> Result<Option<String>, String>,
) -> Result<Option<String>, String> {
    if group.size() == 1 {
        return read();
    }
    let text = if group.rank() == 0 { read()? } else { None };
    let leader = group.rank() == 0;
    // The length first (-1 for the end of input), then the bytes, summed with zeros.
    let length = match (&text, leader) {
        (Some(text), true) => text.len() as i32,
        (None, true) => -1,
        (_, false) => 0,
    };
    let shared = all_sum(&Array::from_vec(vec![length], &[1]), Some(group));
    let length = shared.to_vec::<i32>().map_err(|e| e.to_string())?[0];
    if length < 0 {
        return Ok(None);
    }
    let bytes: Vec<i32> = match &text {
        Some(text) if leader => text.bytes().map(i32::from).collect(),
        _ => vec![0; length as usize],
    };
    let shared = all_sum(&Array::from_vec(bytes, &[length]), Some(group));
    let bytes: Vec<u8> = shared
        .to_vec::<i32>()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|b| b as u8)
        .collect();
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| format!("the input rank 0 shared is not UTF-8: {e}"))
}
