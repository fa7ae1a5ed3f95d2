//! A tour of nuvec's lazy arrays in one process: `cargo run --release --example lazy_arrays`.
//!
//! Builds a small least-squares problem from MLX's random numbers, solves it with a few
//! hundred steps of gradient descent written with plain ops, and prints what it found.

use nuvec::prelude::*;
use nuvec::random;

fn main() -> Result<()> {
    random::seed(0);
    let n_samples = 256;
    let true_weights = array![[2.0], [-3.0], [0.5]];
    let features = random::normal(&[n_samples, 3], DType::F32, None);
    let noise = random::normal_with(&[n_samples, 1], DType::F32, 0.0, 0.01, None);
    let targets = ops::matmul(&features, &true_weights) + &noise;
    println!("features: {:?} {}", features.shape(), features.dtype());

    // Gradient descent on the mean squared error; the gradient is written out by hand.
    let mut weights = ops::zeros(&[3, 1], DType::F32);
    let learning_rate = 0.1;
    for step in 0..200 {
        let residual = ops::matmul(&features, &weights) - &targets;
        let gradient = ops::matmul(&features.t(), &residual) * (2.0 / n_samples as f64);
        weights = &weights - &(gradient * learning_rate);
        weights.eval()?;
        if step % 50 == 0 {
            let loss = ops::square(&residual).mean(None, false).item::<f32>()?;
            println!("step {step:3}: loss {loss:.6}");
        }
    }
    println!("learned weights: {}", weights.reshape(&[3]));
    let error = ops::abs(&(&weights - &true_weights))
        .max(None, false)
        .item::<f32>()?;
    println!("largest error against the true weights: {error:.4}");
    if error > 0.01 {
        return Err(Error::Eval {
            op: "demo".into(),
            reason: format!("did not converge (error {error})"),
        });
    }
    Ok(())
}
