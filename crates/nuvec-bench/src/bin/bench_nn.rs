//! nuvec-nn benchmarks (`cargo xtask bench-nn` runs both forms):
//! - one training step (forward, backward, Adam update, evaluated) of a 4-layer MLP, hidden
//!   1024, batch 256; started alone it runs on one process, started by `nuvec launch -n 2`
//!   each rank takes 128 rows and the gradients are averaged (data parallelism);
//! - `quantized_matmul` (4 and 8 bits, groups of 64) against float32 `matmul` for
//!   `[256, 1024] · [1024, 1024]ᵀ` (one process only).
//!
//! Medians over about 2 s after warm-up; rank 0 prints them, and one JSON line per case.

use nuvec::distributed::{self, Group};
use nuvec::{ops, random, Array, DType, Result};
use nuvec_nn::optim::{Adam, Optimizer};
use nuvec_nn::{
    average_gradients, losses, value_and_grad, Activation, Layer, Linear, Module, Sequential,
    DEFAULT_ALL_REDUCE_SIZE,
};
use std::time::{Duration, Instant};

const HIDDEN: usize = 1024;
const BATCH: i32 = 256;

fn median(
    budget: Duration,
    group: &Group,
    mut run: impl FnMut() -> Result<()>,
) -> Result<Duration> {
    run()?;
    run()?;
    let mut times = Vec::new();
    let start = Instant::now();
    loop {
        let t = Instant::now();
        run()?;
        times.push(t.elapsed());
        // Every rank runs the same number of iterations: rank 0's clock decides.
        let more = times.len() < 5 || (start.elapsed() < budget && times.len() < 200);
        let decision = distributed::all_max(&Array::scalar(i32::from(more)), Some(group));
        if decision.item::<i32>()? == 0 {
            break;
        }
    }
    Ok(nuvec_bench::median_time(&mut times))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mlp() -> Sequential {
    random::seed(0);
    let mut layers = Vec::new();
    for i in 0..4 {
        layers.push(Layer::Linear(Linear::new(HIDDEN, HIDDEN)));
        if i < 3 {
            layers.push(Layer::Activation(Activation::Relu));
        }
    }
    Sequential::new(layers)
}

fn training_step(group: &Group) -> Result<Duration> {
    let (rank, size) = (group.rank() as i32, group.size() as i32);
    let rows = BATCH / size;
    random::seed(1);
    let x = random::normal(&[BATCH, HIDDEN as i32], DType::F32, None);
    let y = random::normal(&[BATCH, HIDDEN as i32], DType::F32, None);
    let slice = |a: &Array| {
        ops::slice(
            a,
            &[rank * rows, 0],
            &[(rank + 1) * rows, HIDDEN as i32],
            &[1, 1],
        )
    };
    let (x, y) = (slice(&x), slice(&y));
    nuvec::eval(&[x.clone(), y.clone()])?;
    let mut model = mlp();
    let mut optimizer = Adam::new(1e-3);
    median(Duration::from_secs(2), group, || {
        let loss = |m: &Sequential| losses::mse_loss(&m.forward(&x), &y, losses::Reduction::Mean);
        let (value, grads) = value_and_grad(loss)(&model)?;
        let grads = average_gradients(&grads, Some(group), DEFAULT_ALL_REDUCE_SIZE);
        optimizer.update(&mut model, &grads)?;
        let mut outputs: Vec<Array> = model.parameters().into_values().collect();
        outputs.push(value);
        nuvec::eval(&outputs)
    })
}

fn quantized_products(group: &Group) -> Result<()> {
    random::seed(2);
    let x = random::normal(&[BATCH, HIDDEN as i32], DType::F32, None);
    let w = random::normal(&[HIDDEN as i32, HIDDEN as i32], DType::F32, None);
    nuvec::eval(&[x.clone(), w.clone()])?;
    let wt = ops::transpose(&w, None);
    let dense = median(Duration::from_secs(2), group, || {
        ops::matmul(&x, &wt).eval()
    })?;
    println!("matmul f32 [256, 1024] x [1024, 1024]: {:.3} ms", ms(dense));
    for bits in [4, 8] {
        let (wq, scales, biases) = ops::quantize(&w, 64, bits);
        nuvec::eval(&[wq.clone(), scales.clone(), biases.clone()])?;
        let dequantized = median(Duration::from_secs(1), group, || {
            ops::dequantize(&wq, &scales, &biases, 64, bits).eval()
        })?;
        println!(
            "dequantize {bits}-bit [1024, 1024]: {:.3} ms",
            ms(dequantized)
        );
        let quantized = median(Duration::from_secs(2), group, || {
            ops::quantized_matmul(&x, &wq, &scales, &biases, true, 64, bits).eval()
        })?;
        println!(
            "quantized_matmul {bits}-bit, groups of 64: {:.3} ms ({:.2}x the f32 matmul's time; weights {:.1}x smaller)",
            ms(quantized),
            quantized.as_secs_f64() / dense.as_secs_f64(),
            32.0 / (bits as f64 + 32.0 / 64.0)
        );
        println!(
            "{{\"bench\":\"quantized_matmul\",\"bits\":{bits},\"ms\":{:.4},\"matmul_ms\":{:.4}}}",
            ms(quantized),
            ms(dense)
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let group = distributed::init(false)?;
    let step = training_step(&group)?;
    if group.rank() == 0 {
        println!(
            "training step, 4-layer MLP (hidden {HIDDEN}, batch {BATCH}) on {} process(es): {:.2} ms",
            group.size(),
            ms(step)
        );
        println!(
            "{{\"bench\":\"mlp_training_step\",\"ranks\":{},\"ms\":{:.4}}}",
            group.size(),
            ms(step)
        );
    }
    if group.size() == 1 {
        quantized_products(&group)?;
    }
    Ok(())
}
