//! A tensor-parallel MLP: the first layer keeps each rank's slice of the hidden features,
//! the second each rank's slice of its inputs and sums the partial products with one
//! `all_sum`. The output equals the unsharded MLP's, in full precision and quantized.
//!
//! ```text
//! cargo build -p nuvec-cli -p nuvec-nn --example tensor_parallel
//! target/debug/nuvec launch -n 4 -- target/debug/examples/tensor_parallel
//! ```

use nuvec::{distributed, ops, random, DType, Result};
use nuvec_nn::sharded::{AllToShardedLinear, ShardedToAllLinear};
use nuvec_nn::{activations, Linear, QuantizedLinear};

fn main() -> Result<()> {
    let group = distributed::init(false)?;
    let (rank, size) = (group.rank(), group.size());
    random::seed(0);
    let up = Linear::new(256, 1024);
    let down = Linear::new(1024, 256);
    let x = random::normal(&[8, 256], DType::F32, None);
    let dense = down.forward(&activations::silu(&up.forward(&x)));

    let up_shard = AllToShardedLinear::from_linear(&up, &group)?;
    let down_shard = ShardedToAllLinear::from_linear(&down, &group)?;
    let sharded = down_shard.forward(&activations::silu(&up_shard.forward(&x)));
    let difference = ops::max(&ops::abs(&(&sharded - &dense)), None, false).item::<f32>()?;

    let (qup, qdown) = (
        QuantizedLinear::from_linear(&up, 64, 4)?,
        QuantizedLinear::from_linear(&down, 64, 4)?,
    );
    let dense_q = qdown.forward(&activations::silu(&qup.forward(&x)));
    let sharded_q = ShardedToAllLinear::from_quantized(&qdown, &group)?.forward(
        &activations::silu(&AllToShardedLinear::from_quantized(&qup, &group)?.forward(&x)),
    );
    let difference_q = ops::max(&ops::abs(&(&sharded_q - &dense_q)), None, false).item::<f32>()?;
    println!(
        "rank {rank} of {size}: {} of 1024 hidden features here; largest difference from the unsharded MLP {difference:.2e} (4-bit: {difference_q:.2e})",
        1024 / size
    );
    if difference > 1e-4 || difference_q > 1e-4 {
        eprintln!("rank {rank}: the sharded MLP differs from the unsharded one");
        std::process::exit(1);
    }
    Ok(())
}
