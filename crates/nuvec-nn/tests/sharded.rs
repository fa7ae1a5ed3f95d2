//! Tensor-parallel layers equal the dense ones, forward and backward, on 1, 2 and 4 ranks,
//! in full precision and quantized; uneven splits are errors naming the layer and sizes;
//! fused (QKV) weights shard segment by segment.

use nuvec::distributed::Group;
use nuvec::{ops, random, Array, DType};
use nuvec_nn::sharded::{
    shard_inplace, shard_linear, AllToShardedLinear, ShardedLinear, ShardedToAllLinear, Sharding,
};
use nuvec_nn::{activations, value_and_grad, Linear, QuantizedLinear};
use nuvec_test_support::ranks::run_ranks;
use nuvec_test_support::test_name;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

#[track_caller]
fn assert_close(a: &Array, b: &Array, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    let error = ops::max(&ops::abs(&(a - b)), None, false)
        .item::<f32>()
        .unwrap();
    assert!(error < 1e-5, "{what}: largest difference {error}");
}

/// This rank's slice `[rank·n/size, (rank+1)·n/size)` of `a` along `axis`.
fn slice_of(a: &Array, axis: usize, group: &Group) -> Array {
    let n = a.shape()[axis] / group.size() as i32;
    let mut start = vec![0; a.ndim()];
    let mut stop = a.shape().to_vec();
    start[axis] = n * group.rank() as i32;
    stop[axis] = start[axis] + n;
    ops::slice(a, &start, &stop, &vec![1; a.ndim()])
}

#[derive(nuvec_nn::Tree, Clone)]
struct Pair {
    up: AllToShardedLinear,
    down: ShardedToAllLinear,
}

fn mlp_equals_dense(group: Group) {
    random::seed(0);
    let up = Linear::new(8, 16);
    let down = Linear::new(16, 8);
    let x = random::normal(&[3, 8], DType::F32, None);
    let dense = |u: &Linear, d: &Linear| d.forward(&activations::gelu(&u.forward(&x)));
    let pair = Pair {
        up: AllToShardedLinear::from_linear(&up, &group).unwrap(),
        down: ShardedToAllLinear::from_linear(&down, &group).unwrap(),
    };
    let sharded = |p: &Pair| p.down.forward(&activations::gelu(&p.up.forward(&x)));
    assert_close(&sharded(&pair), &dense(&up, &down), "forward");

    // Gradients: every rank's slice of the dense gradients.
    #[derive(nuvec_nn::Tree, Clone)]
    struct Dense {
        up: Linear,
        down: Linear,
    }
    let loss_dense = |m: &Dense| ops::sum(&ops::square(&dense(&m.up, &m.down)), None, false);
    let (_, dense_grads) = value_and_grad(loss_dense)(&Dense {
        up: up.clone(),
        down: down.clone(),
    })
    .unwrap();
    let loss_sharded = |p: &Pair| ops::sum(&ops::square(&sharded(p)), None, false);
    let (_, grads) = value_and_grad(loss_sharded)(&pair).unwrap();
    assert_close(
        &grads["up.weight"],
        &slice_of(&dense_grads["up.weight"], 0, &group),
        "up.weight",
    );
    assert_close(
        &grads["up.bias"],
        &slice_of(&dense_grads["up.bias"], 0, &group),
        "up.bias",
    );
    assert_close(
        &grads["down.weight"],
        &slice_of(&dense_grads["down.weight"], 1, &group),
        "down.weight",
    );
    assert_close(&grads["down.bias"], &dense_grads["down.bias"], "down.bias");

    // The input's gradient crosses the pair's one all_sum (sum_gradients) and is whole.
    let dx_dense = nuvec::transforms::grad(|v: &[Array]| {
        ops::sum(
            &ops::square(&down.forward(&activations::gelu(&up.forward(&v[0])))),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    let dx = nuvec::transforms::grad(|v: &[Array]| {
        ops::sum(
            &ops::square(
                &pair
                    .down
                    .forward(&activations::gelu(&pair.up.forward(&v[0]))),
            ),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    assert_close(&dx[0], &dx_dense[0], "input gradient");

    // Quantized: the sharded quantized pair equals the dense quantized pair.
    let (qup, qdown) = (
        QuantizedLinear::from_linear(&Linear::new(64, 128), 32, 4).unwrap(),
        QuantizedLinear::from_linear(&Linear::new(128, 64), 32, 4).unwrap(),
    );
    let xq = random::normal(&[2, 64], DType::F32, None);
    let dense_q = qdown.forward(&qup.forward(&xq));
    let sharded_q = ShardedToAllLinear::from_quantized(&qdown, &group)
        .unwrap()
        .forward(
            &AllToShardedLinear::from_quantized(&qup, &group)
                .unwrap()
                .forward(&xq),
        );
    assert_close(&sharded_q, &dense_q, "quantized forward");
    let (qup_s, qdown_s) = (
        AllToShardedLinear::from_quantized(&qup, &group).unwrap(),
        ShardedToAllLinear::from_quantized(&qdown, &group).unwrap(),
    );
    let dxq_dense = nuvec::transforms::grad(|v: &[Array]| {
        ops::sum(
            &ops::square(&qdown.forward(&qup.forward(&v[0]))),
            None,
            false,
        )
    })(std::slice::from_ref(&xq))
    .unwrap();
    let dxq = nuvec::transforms::grad(|v: &[Array]| {
        ops::sum(
            &ops::square(&qdown_s.forward(&qup_s.forward(&v[0]))),
            None,
            false,
        )
    })(std::slice::from_ref(&xq))
    .unwrap();
    assert_close(&dxq[0], &dxq_dense[0], "quantized input gradient");
    let names: Vec<String> =
        nuvec_nn::Module::parameters(&AllToShardedLinear::from_quantized(&qup, &group).unwrap())
            .into_keys()
            .collect();
    assert_eq!(names, ["bias", "biases", "scales", "weight"], "MLX's names");
}

#[test]
fn sharded_mlp_equals_the_dense_one_on_one_rank() {
    mlp_equals_dense(Group::single());
}

#[test]
fn sharded_mlp_equals_the_dense_one_on_2_ranks() {
    run_ranks(test_name!(), 2, TIMEOUT, mlp_equals_dense);
}

#[test]
fn sharded_mlp_equals_the_dense_one_on_4_ranks_and_uneven_splits_are_errors() {
    run_ranks(test_name!(), 4, TIMEOUT, |group| {
        mlp_equals_dense(group);
        let error = AllToShardedLinear::from_linear(&Linear::new(8, 6), &group)
            .unwrap_err()
            .to_string();
        // Each error names this file, the caller's, not a line inside nuvec-nn.
        let here = "tests/sharded.rs";
        assert!(
            error.contains("AllToShardedLinear")
                && error.contains('6')
                && error.contains("4 ranks")
                && error.contains(here),
            "{error}"
        );
        let error = ShardedToAllLinear::from_linear(&Linear::new(10, 4), &group)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("ShardedToAllLinear") && error.contains("10") && error.contains(here),
            "{error}"
        );
        let q = QuantizedLinear::from_linear(&Linear::new(64, 8), 32, 4).unwrap();
        let error = ShardedToAllLinear::from_quantized(&q, &group)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("groups of 32") && error.contains(here),
            "{error}"
        );
    });
}

#[test]
fn fused_weights_shard_segment_by_segment_on_2_ranks() {
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        // A fused QKV projection: rows [q; k; v], 4 each. Rank r keeps rows 2r..2r+2 of each.
        let weight = ops::reshape(&ops::arange(0.0, 96.0, 1.0, DType::F32), &[12, 8]);
        let qkv = Linear::from_weights(
            weight.clone(),
            Some(ops::arange(0.0, 12.0, 1.0, DType::F32)),
        );
        let ShardedLinear::AllToSharded(layer) =
            shard_linear(&qkv, Sharding::AllToSharded, 3, &group).unwrap()
        else {
            panic!("all-to-sharded expected");
        };
        let r = group.rank() as i32;
        let rows: Vec<i32> = [0, 4, 8]
            .iter()
            .flat_map(|s| [s + 2 * r, s + 2 * r + 1])
            .collect();
        let expected = ops::take(&weight, &Array::from_vec(rows.clone(), &[6]), Some(0));
        let nuvec_nn::sharded::Projection::Full { weight: got } = &layer.projection else {
            panic!("full precision expected");
        };
        assert_eq!(
            got.to_vec::<f32>().unwrap(),
            expected.to_vec::<f32>().unwrap()
        );
        let bias: Vec<f32> = rows.iter().map(|&i| i as f32).collect();
        assert_eq!(layer.bias.as_ref().unwrap().to_vec::<f32>().unwrap(), bias);
        let mut inplace = qkv.clone();
        shard_inplace(&mut inplace, Sharding::AllToSharded, 3, &group).unwrap();
        assert_eq!(
            inplace.weight.to_vec::<f32>().unwrap(),
            expected.to_vec::<f32>().unwrap()
        );
        let error = shard_linear(&qkv, Sharding::AllToSharded, 5, &group)
            .unwrap_err()
            .to_string();
        assert!(error.contains("5 segment"), "{error}");
    });
}
