//! Data-parallel training of an MLP: every rank trains on its share of each batch of a
//! dataset generated here, and averages its gradients with the others' before each step.
//!
//! ```text
//! cargo build -p nuvec-cli -p nuvec-nn --example data_parallel
//! target/debug/nuvec launch -n 4 -- target/debug/examples/data_parallel
//! ```
//!
//! Each epoch prints the mean loss over all ranks. At the end every rank checks that all
//! ranks hold the same parameters bit for bit, and that they match one process training on
//! the whole batches; it exits with an error otherwise.

use nuvec::distributed::{self, Group};
use nuvec::{ops, random, Array, DType, Result};
use nuvec_nn::optim::{Adam, Optimizer};
use nuvec_nn::{
    average_gradients, losses, value_and_grad, Activation, Layer, Linear, Module, Sequential,
    DEFAULT_ALL_REDUCE_SIZE,
};

const SAMPLES: i32 = 512;
const BATCH: i32 = 64;
const EPOCHS: usize = 5;

fn model() -> Sequential {
    random::seed(1);
    Sequential::new(vec![
        Layer::Linear(Linear::new(8, 64)),
        Layer::Activation(Activation::Gelu),
        Layer::Linear(Linear::new(64, 64)),
        Layer::Activation(Activation::Gelu),
        Layer::Linear(Linear::new(64, 1)),
    ])
}

/// A regression problem: y = Σ sin(x) · w for a fixed w, plus noise.
fn dataset() -> (Array, Array) {
    random::seed(2);
    let x = random::normal(&[SAMPLES, 8], DType::F32, None);
    let w = random::normal(&[8, 1], DType::F32, None);
    let noise = random::normal(&[SAMPLES, 1], DType::F32, None) * 0.01;
    (x.clone(), ops::matmul(&ops::sin(&x), &w) + noise)
}

fn rows(a: &Array, start: i32, stop: i32) -> Array {
    ops::slice(a, &[start, 0], &[stop, a.shape()[1]], &[1, 1])
}

/// Trains over `group`, each rank on its share of every batch; returns the model and the
/// mean loss of each epoch over every rank.
fn train(group: &Group) -> Result<(Sequential, Vec<f32>)> {
    let (x, y) = dataset();
    let mut model = model();
    let mut optimizer = Adam::new(1e-2);
    let (rank, size) = (group.rank() as i32, group.size() as i32);
    let share = BATCH / size;
    let mut epochs = Vec::new();
    for _ in 0..EPOCHS {
        let mut total = Array::scalar(0.0f32);
        for batch in 0..SAMPLES / BATCH {
            let start = batch * BATCH + rank * share;
            let (xb, yb) = (
                rows(&x, start, start + share),
                rows(&y, start, start + share),
            );
            let loss =
                |m: &Sequential| losses::mse_loss(&m.forward(&xb), &yb, losses::Reduction::Mean);
            let (value, grads) = value_and_grad(loss)(&model)?;
            let grads = average_gradients(&grads, Some(group), DEFAULT_ALL_REDUCE_SIZE);
            optimizer.update(&mut model, &grads)?;
            total = total + value;
        }
        let mean = distributed::all_sum(&total, Some(group)) / (size * (SAMPLES / BATCH)) as f64;
        epochs.push(mean.item::<f32>()?);
    }
    Ok((model, epochs))
}

fn flat(model: &Sequential) -> Array {
    let parts: Vec<Array> = model
        .parameters()
        .values()
        .map(|p| ops::reshape(p, &[-1]))
        .collect();
    ops::concatenate(&parts, 0)
}

fn main() -> Result<()> {
    let group = distributed::init(false)?;
    let (rank, size) = (group.rank(), group.size());
    let (model, epochs) = train(&group)?;
    for (epoch, loss) in epochs.iter().enumerate() {
        if rank == 0 {
            println!("epoch {epoch}: loss {loss:.6}");
        }
    }
    let ours = flat(&model);
    let everyone = distributed::all_gather(&ops::expand_dims(&ours, &[0]), Some(&group));
    let mine = ours.to_vec::<f32>()?;
    for r in 0..size as i32 {
        let theirs = rows(&everyone, r, r + 1).reshape(&[-1]).to_vec::<f32>()?;
        if theirs
            .iter()
            .zip(&mine)
            .any(|(a, b)| a.to_bits() != b.to_bits())
        {
            eprintln!("rank {rank}: rank {r} holds other parameters");
            std::process::exit(1);
        }
    }
    let (single, _) = train(&Group::single())?;
    let difference = ops::max(&ops::abs(&(&ours - &flat(&single))), None, false).item::<f32>()?;
    println!(
        "rank {rank} of {size}: parameters agree on every rank; largest difference from single-process training {difference:.2e}"
    );
    if difference > 1e-4 || epochs.last() >= epochs.first() {
        eprintln!("rank {rank}: training diverged from the single-process run or did not learn");
        std::process::exit(1);
    }
    Ok(())
}
