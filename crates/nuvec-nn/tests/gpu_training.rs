//! A training step of a small network on GPU 0 against the same step on the CPU (the
//! `cuda` feature is on for the tests; without a GPU this is a visible skip, and
//! `NUVEC_REQUIRE_GPU=1` makes a missing GPU a failure).

use nuvec::{ops, random, with_default_device, Array, DType, Device};
use nuvec_nn::optim::{Adam, Optimizer};
use nuvec_nn::{losses, value_and_grad, Activation, Layer, Linear, Module, Sequential};

fn train(device: Device, steps: usize) -> Vec<f32> {
    with_default_device(device, || {
        random::seed(42);
        let mut model = Sequential::new(vec![
            Layer::Linear(Linear::new(8, 32)),
            Layer::Activation(Activation::Gelu),
            Layer::Linear(Linear::new(32, 1)),
        ]);
        random::seed(7);
        let x = random::normal(&[64, 8], DType::F32, None);
        let y = ops::sum(&(&x * ops::sin(&x)), -1, true);
        let mut optimizer = Adam::new(0.01);
        for _ in 0..steps {
            let loss =
                |m: &Sequential| losses::mse_loss(&m.forward(&x), &y, losses::Reduction::Mean);
            let (_, grads) = value_and_grad(loss)(&model).unwrap();
            optimizer.update(&mut model, &grads).unwrap();
        }
        let parts: Vec<Array> = model
            .parameters()
            .values()
            .map(|p| ops::reshape(p, &[-1]))
            .collect();
        let flat = ops::concatenate(&parts, 0);
        assert_eq!(flat.device(), device, "the step ran on {device}");
        flat.to_vec::<f32>().unwrap()
    })
}

#[test]
fn an_adam_training_step_on_the_gpu_matches_the_cpu() {
    if let Some(reason) = Device::Gpu(0).unavailable_reason() {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_GPU").is_none(),
            "NUVEC_REQUIRE_GPU is set but {reason}"
        );
        nuvec_test_support::skip(&format!(
            "an_adam_training_step_on_the_gpu_matches_the_cpu: no GPU here ({reason})"
        ));
        return;
    }
    let (gpu, cpu) = (train(Device::Gpu(0), 5), train(Device::Cpu, 5));
    for (i, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        assert!(
            (g - c).abs() <= 1e-4 * c.abs().max(1.0),
            "parameter {i}: {g} on the GPU, {c} on the CPU"
        );
    }
}
