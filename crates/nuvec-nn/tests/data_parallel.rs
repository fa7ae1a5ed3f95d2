//! Data-parallel training: each rank trains on its shard of the batch and averages its
//! gradients with `average_gradients`; the ranks agree bit for bit and match one process
//! training on the whole batch.

use nuvec::distributed::{self, Group};
use nuvec::{ops, random, Array, DType};
use nuvec_nn::optim::{Optimizer, Sgd};
use nuvec_nn::{
    average_gradients, losses, value_and_grad, Activation, Layer, Linear, Module, Parameters,
    Sequential,
};
use nuvec_test_support::ranks::run_ranks;
use nuvec_test_support::test_name;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);
const BATCH: i32 = 32;

fn model() -> Sequential {
    random::seed(42);
    Sequential::new(vec![
        Layer::Linear(Linear::new(4, 16)),
        Layer::Activation(Activation::Tanh),
        Layer::Linear(Linear::new(16, 1)),
    ])
}

fn data() -> (Array, Array) {
    random::seed(7);
    let x = random::normal(&[BATCH, 4], DType::F32, None);
    let y = ops::sum(&(&x * ops::sin(&x)), -1, true);
    (x, y)
}

/// Trains for `steps` on rows `rows` of the batch, averaging gradients over `group`.
fn train(group: &Group, rows: (i32, i32), steps: usize, bucket: usize) -> Sequential {
    let mut model = model();
    let (x, y) = data();
    let slice = |a: &Array| ops::slice(a, &[rows.0, 0], &[rows.1, a.shape()[1]], &[1, 1]);
    let (x, y) = (slice(&x), slice(&y));
    let mut optimizer = Sgd::new(0.05).momentum(0.9);
    for _ in 0..steps {
        let loss = |m: &Sequential| losses::mse_loss(&m.forward(&x), &y, losses::Reduction::Mean);
        let (_, grads) = value_and_grad(loss)(&model).unwrap();
        let grads = average_gradients(&grads, Some(group), bucket);
        optimizer.update(&mut model, &grads).unwrap();
    }
    model
}

fn flat(params: &Parameters) -> Array {
    let parts: Vec<Array> = params.values().map(|p| ops::reshape(p, &[-1])).collect();
    ops::concatenate(&parts, 0)
}

fn matches_single_process(group: Group) {
    let (rank, size) = (group.rank() as i32, group.size() as i32);
    let per = BATCH / size;
    // Small buckets and one bucket for everything take both paths of average_gradients.
    for bucket in [64, nuvec_nn::DEFAULT_ALL_REDUCE_SIZE, 0] {
        let trained = train(&group, (rank * per, (rank + 1) * per), 5, bucket);
        let ours = flat(&trained.parameters());
        // Bit for bit on every rank.
        let everyone = distributed::all_gather(&ops::expand_dims(&ours, &[0]), Some(&group));
        let mine = ours.to_vec::<f32>().unwrap();
        for r in 0..size {
            let theirs = ops::slice(&everyone, &[r, 0], &[r + 1, ours.size() as i32], &[1, 1]);
            let theirs = theirs.reshape(&[-1]).to_vec::<f32>().unwrap();
            assert!(
                theirs
                    .iter()
                    .zip(&mine)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "rank {r} has other parameters (bucket {bucket})"
            );
        }
        // The same as one process on the whole batch, to rounding.
        let single = flat(&train(&Group::single(), (0, BATCH), 5, bucket).parameters());
        let error = ops::max(&ops::abs(&(&ours - &single)), None, false)
            .item::<f32>()
            .unwrap();
        assert!(error < 1e-5, "largest difference {error} (bucket {bucket})");
    }
}

#[test]
fn data_parallel_training_on_2_ranks_equals_single_process_training() {
    run_ranks(test_name!(), 2, TIMEOUT, matches_single_process);
}

#[test]
fn data_parallel_training_on_4_ranks_equals_single_process_training() {
    run_ranks(test_name!(), 4, TIMEOUT, matches_single_process);
}

#[test]
fn averaging_on_a_group_of_one_returns_the_gradients() {
    let grads = Parameters::from([("w".to_string(), ops::ones(&[3], DType::F32))]);
    let averaged = average_gradients(&grads, Some(&Group::single()), 1);
    assert!(averaged["w"].same_node(&grads["w"]));
}
