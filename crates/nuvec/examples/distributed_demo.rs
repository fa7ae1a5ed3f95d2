//! The main job: one program, several processes. `cargo xtask demo` starts 4 ranks of it on
//! loopback with the environment `mlx.launch` writes (`MLX_RANK`, `MLX_HOSTFILE`).
//!
//! Each rank draws its own data, and the ranks combine it with every collective; each result
//! is checked against what the rank can compute on its own, then each rank times `all_sum`.
//! Alone (`cargo run --example distributed_demo`, or `nuvec launch -n 1`) it is a group of one:
//! the collectives are the identity, and send/recv, which needs a peer, is skipped.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use nuvec::random;
use std::time::Instant;

fn check(what: &str, ok: bool) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Eval {
            op: "demo".into(),
            reason: format!("{what} gave a wrong result"),
        })
    }
}

/// Rank `rank`'s data: MLX's normal numbers after seed(rank).
fn data_of(rank: usize, shape: &[i32]) -> Array {
    random::seed(rank as u64);
    random::normal(shape, DType::F32, None)
}

fn main() -> Result<()> {
    let group: Group = distributed::init(false)?;
    let (rank, size) = (group.rank(), group.size());
    let mine = data_of(rank, &[4, 256]);

    // all_sum: every rank gets the same total, equal to the sum of every rank's draw.
    let total = distributed::all_sum(&mine, None);
    let expected = (0..size)
        .map(|r| data_of(r, &[4, 256]))
        .reduce(|a, b| a + b)
        .unwrap_or_else(|| mine.clone());
    let error = ops::abs(&(&total - &expected))
        .max(None, false)
        .item::<f32>()?;
    check("all_sum", error < 1e-5)?;

    // all_gather: every rank's rows in rank order.
    let gathered = distributed::all_gather(&mine, None);
    let own_rows = ops::slice(&gathered, &[4 * rank as i32], &[4 * rank as i32 + 4], &[1]);
    check(
        "all_gather",
        ops::all(&ops::equal(&own_rows, &mine), None, false).item::<bool>()?,
    )?;

    // sum_scatter: this rank's rows of the total.
    let scattered = distributed::sum_scatter(&ops::ones(&[2 * size as i32, 3], DType::I32), None);
    check(
        "sum_scatter",
        scattered.to_vec::<i32>()? == vec![size as i32; 6],
    )?;

    // send/recv around the ring: pass the rank number to the right neighbour.
    let checked = if size > 1 {
        let right = (rank + 1) % size;
        let left = (rank + size - 1) % size;
        let token = Array::from_slice(&[rank as i32], &[1]);
        let received = if rank % 2 == 0 {
            distributed::send(&token, right, None).eval()?;
            distributed::recv(&[1], DType::I32, left, None)
        } else {
            let received = distributed::recv(&[1], DType::I32, left, None);
            received.eval()?;
            distributed::send(&token, right, None).eval()?;
            received
        };
        check("send/recv", received.item::<i32>()? == left as i32)?;
        "all_sum, all_gather, sum_scatter and send/recv agree"
    } else {
        "alone: all_sum, all_gather and sum_scatter agree (send/recv needs a peer: skipped)"
    };

    // A timed all_sum of 16 MB of float32.
    let big = ops::ones(&[4 << 20], DType::F32);
    big.eval()?;
    let start = Instant::now();
    let summed = distributed::all_sum(&big, None);
    summed.eval()?;
    let elapsed = start.elapsed();
    check(
        "large all_sum",
        summed.max(None, false).item::<f32>()? == size as f32,
    )?;

    println!(
        "rank {rank}/{size}: {checked} with local references; all_sum of 16 MB took {:.1} ms",
        elapsed.as_secs_f64() * 1e3
    );
    Ok(())
}
