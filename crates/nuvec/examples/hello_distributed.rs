//! The first example of the distributed specification, as a program (the README's "Your first
//! distributed program"). Run it alone, as a group of one, or as the ranks of a group:
//!
//! ```text
//! cargo build --release -p nuvec-cli -p nuvec --example hello_distributed
//! target/release/nuvec launch -n 4 -- target/release/examples/hello_distributed
//! ```
//!
//! `mlx.launch --backend ring -n 4 -- target/release/examples/hello_distributed` works too.

use nuvec::distributed;
use nuvec::prelude::*;

fn main() -> Result<()> {
    let group = distributed::init(false)?;
    let x = array![1.0, 2.0, 3.0];
    let total = distributed::all_sum(&x, None); // the element-wise sum over every rank
    let all = distributed::all_gather(&x, None); // every rank's x, in rank order
    assert_eq!(total.shape(), [3]);
    assert_eq!(all.shape(), [3 * group.size() as i32]);
    let n = group.size() as f32;
    assert_eq!(total.to_vec::<f32>()?, [n, 2.0 * n, 3.0 * n]);
    println!(
        "rank {} of {}: all_sum = {total}, all_gather has shape {:?}",
        group.rank(),
        group.size(),
        all.shape()
    );
    Ok(())
}
