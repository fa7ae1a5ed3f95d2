//! Quantized layers: `QuantizedLinear` and `QuantizedEmbedding` compute with MLX's
//! quantization of their float layers, start frozen, and `quantize` swaps the layers of a
//! model (by predicate), naming a layer that cannot be quantized.

use nuvec::{ops, random, Array, DType};
use nuvec_nn::{
    quantize, Activation, Embedding, Layer, Linear, Module, QuantizedEmbedding, QuantizedLinear,
    Sequential,
};

#[track_caller]
fn assert_close(a: &Array, b: &Array) {
    assert_eq!(a.shape(), b.shape());
    let error = ops::max(&ops::abs(&(a - b)), None, false)
        .item::<f32>()
        .unwrap();
    assert!(error < 1e-5, "largest difference {error}");
}

#[test]
fn quantized_layers_compute_with_the_dequantized_weights_and_start_frozen() {
    random::seed(0);
    let linear = Linear::new(64, 8);
    let q = QuantizedLinear::from_linear(&linear, 32, 4).unwrap();
    assert_eq!((q.input_dims(), q.output_dims()), (64, 8));
    let (wq, scales, biases) = ops::quantize(&linear.weight, 32, 4);
    let dense = Linear::from_weights(
        ops::dequantize(&wq, &scales, &biases, 32, 4),
        linear.bias.clone(),
    );
    let x = random::normal(&[3, 64], DType::F32, None);
    assert_close(&q.forward(&x), &dense.forward(&x));
    assert!(q.trainable_parameters().is_empty(), "frozen, as MLX's");
    let names: Vec<String> = q.parameters().into_keys().collect();
    assert_eq!(names, ["bias", "biases", "scales", "weight"]);

    let table = Embedding::new(10, 64);
    let qt = QuantizedEmbedding::from_embedding(&table, 64, 8).unwrap();
    let (wq, scales, biases) = ops::quantize(&table.weight, 64, 8);
    let rows = ops::dequantize(&wq, &scales, &biases, 64, 8);
    let indices = Array::from_vec(vec![3i32, 0, 9, 3], &[2, 2]);
    assert_close(&qt.forward(&indices), &ops::take(&rows, &indices, Some(0)));
    let h = random::normal(&[2, 64], DType::F32, None);
    assert_close(
        &qt.as_linear(&h),
        &ops::matmul(&h, &ops::transpose(&rows, None)),
    );
}

#[test]
fn quantize_swaps_the_picked_layers_of_a_model_and_names_one_that_cannot_be() {
    random::seed(1);
    let model = Sequential::new(vec![
        Layer::Embedding(Embedding::new(16, 64)),
        Layer::Linear(Linear::new(64, 64)),
        Layer::Activation(Activation::Relu),
        Layer::Sequential(Sequential::new(vec![Layer::Linear(Linear::new(64, 4))])),
    ]);
    let all = quantize(&model, 64, 4, None).unwrap();
    assert!(matches!(all.layers[0], Layer::QuantizedEmbedding(_)));
    assert!(matches!(all.layers[1], Layer::QuantizedLinear(_)));
    let Layer::Sequential(inner) = &all.layers[3] else {
        panic!("nested model")
    };
    assert!(matches!(inner.layers[0], Layer::QuantizedLinear(_)));
    let tokens = Array::from_vec(vec![1i32, 5], &[2]);
    assert_eq!(all.forward(&tokens).shape(), [2, 4]);

    let only_linear =
        |path: &str, layer: &Layer| path == "layers.1" && matches!(layer, Layer::Linear(_));
    let some = quantize(&model, 64, 4, Some(&only_linear)).unwrap();
    assert!(matches!(some.layers[0], Layer::Embedding(_)));
    assert!(matches!(some.layers[1], Layer::QuantizedLinear(_)));

    let odd = Sequential::new(vec![Layer::Linear(Linear::new(48, 4))]);
    let error = quantize(&odd, 32, 4, None).unwrap_err().to_string();
    assert!(
        error.contains("layers.0") && error.contains("48") && error.contains("32"),
        "{error}"
    );
}
