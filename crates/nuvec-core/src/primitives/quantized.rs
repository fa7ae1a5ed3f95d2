//! MLX's affine quantization: `Quantize` (float rows to packed integers, scales and biases
//! per group), `Dequantize` (back to floats), with MLX's rounding and bit packing, and
//! `QuantizedMatmul` (products with the packed matrix).
//!
//! A group of `group_size` consecutive values along the last axis shares a scale `s` and a
//! bias `b`; each value is stored as `q = clip(rint((w - b) / s), 0, 2ᵇⁱᵗˢ - 1)` and read back
//! as `s·q + b`. The values' bits are laid end to end, least significant first, in 32-bit
//! words, so 3-, 5- and 6-bit values may straddle two words, exactly as MLX packs them.

use super::batching;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{ops, Array, DType, Error, Result};
use nuvec_cpu::quantized::affine::{quantize_rows, unpack};
use nuvec_cpu::{with_float_dtype, Buffer, Float};
use std::sync::Arc;

/// Float rows `[..., n]` to packed words `[..., n·bits/32]`, scales and biases
/// `[..., n/group_size]` (of the input's dtype).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Quantize {
    pub(crate) group_size: usize,
    pub(crate) bits: u32,
}

impl Primitive for Quantize {
    fn name(&self) -> &str {
        "quantize"
    }

    /// One GPU thread per group, with the CPU's arithmetic: the same words, scales and biases.
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        _outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{cuda, GpuBuffer};
        let w = &inputs[0];
        let groups = (w.size() / self.group_size) as u64;
        let (words, scales, biases) = nuvec_cuda::quantized::quantize(
            gpu,
            (w.buffer(), w.dtype),
            (groups, self.group_size as u64),
            self.bits,
        )
        .map_err(|e| cuda("quantize", e))?;
        Ok([words, scales, biases]
            .into_iter()
            .map(|b| GpuBuffer::new(gpu, b))
            .collect())
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let w = &inputs[0];
        let n = *w.shape.last().unwrap_or(&0);
        // Sized from the input, not the output specs: an output nobody holds any more has an
        // empty stand-in spec, and all three are written together.
        let (word_count, groups) = (
            w.size() * self.bits as usize / 32,
            w.size() / self.group_size,
        );
        let mut words = Buffer::for_output(word_count * 4);
        let mut scales = Buffer::for_output(groups * w.dtype.size());
        let mut biases = Buffer::for_output(groups * w.dtype.size());
        with_float_dtype!(
            w.dtype,
            T,
            quantize_rows::<T>(
                w.slice::<T>(),
                (n, self.group_size, self.bits),
                (
                    &mut words.as_mut_slice::<u32>()[..word_count],
                    &mut scales.as_mut_slice::<T>()[..groups],
                    &mut biases.as_mut_slice::<T>()[..groups],
                ),
            ),
            return Err(Error::eval(
                "quantize",
                format!("needs floats, got {}", w.dtype)
            ))
        );
        Ok(vec![Arc::new(words), Arc::new(scales), Arc::new(biases)])
    }

    fn vjp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        _cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Err(Error::Transform {
            transform: "vjp",
            reason: "quantize is not differentiable (its outputs are integers and rounded \
                     parameters, as in MLX)"
                .into(),
        })
    }

    fn jvp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        _tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Err(Error::Transform {
            transform: "jvp",
            reason: "quantize is not differentiable (as in MLX)".into(),
        })
    }

    /// Rows are independent: the batch axis goes first and stays there.
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let w = batching::to_front(&inputs[0], axes[0]);
        let (wq, scales, biases) = quantize_array(&w, self.group_size, self.bits);
        Ok((vec![wq, scales, biases], vec![Some(0); 3]))
    }

    super::same_as!();
}

/// Packed words, scales and biases back to floats of the scales' dtype; with `transposed`,
/// the last two axes swapped (what `quantized_matmul` multiplies by), written directly
/// instead of through a second, strided copy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dequantize {
    pub(crate) group_size: usize,
    pub(crate) bits: u32,
    pub(crate) transposed: bool,
}

fn dequantize_rows<T: Float>(
    d: &Dequantize,
    n: usize,
    (words, scales, biases): (&[u32], &[T], &[T]),
    out: &mut [T],
) {
    let (group, bits) = (d.group_size, d.bits);
    let words_per_row = n * bits as usize / 32;
    nuvec_cpu::parallel::for_each_row(out, n, |row, values| {
        let row_words = &words[row * words_per_row..(row + 1) * words_per_row];
        for (g, chunk) in values.chunks_mut(group).enumerate() {
            let (scale, bias) = (
                scales[row * (n / group) + g].to_f32(),
                biases[row * (n / group) + g].to_f32(),
            );
            for (k, value) in chunk.iter_mut().enumerate() {
                let q = unpack(row_words, g * group + k, bits) as f32;
                *value = T::from_f32(scale * q + bias);
            }
        }
    });
}

/// [`dequantize_rows`] writing each matrix transposed: `out[k][n] = w[n][k]` for `rows`
/// rows of `n` values per matrix.
fn dequantize_transposed<T: Float>(
    d: &Dequantize,
    (rows, n): (usize, usize),
    (words, scales, biases): (&[u32], &[T], &[T]),
    out: &mut [T],
) {
    let (group, bits) = (d.group_size, d.bits);
    let words_per_row = n * bits as usize / 32;
    let groups = n / group;
    nuvec_cpu::parallel::for_each_row(out, rows, |out_row, values| {
        let (matrix, k) = (out_row / n, out_row % n);
        for (r, value) in values.iter_mut().enumerate() {
            let row = matrix * rows + r;
            let q = unpack(&words[row * words_per_row..], k, bits) as f32;
            let g = row * groups + k / group;
            *value = T::from_f32(scales[g].to_f32() * q + biases[g].to_f32());
        }
    });
}

impl Primitive for Dequantize {
    fn name(&self) -> &str {
        "dequantize"
    }

    /// One GPU thread per value; a transposed result is the rows' values copied across.
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{cuda, strided, GpuBuffer};
        let spec = &outputs[0];
        let ndim = spec.shape.len();
        // Values per packed row, and how many rows.
        let n = if self.transposed {
            spec.shape[ndim - 2]
        } else {
            spec.shape[ndim - 1]
        };
        let rows = spec.size().checked_div(n).unwrap_or(0);
        let shape = nuvec_cuda::quantized::Quantized {
            m: 0,
            n: rows as u64,
            k: n as u64,
            group_size: self.group_size as u64,
            bits: self.bits,
        };
        let packed = (inputs[0].buffer(), inputs[1].buffer(), inputs[2].buffer());
        let dense = nuvec_cuda::quantized::dequantize(gpu, packed, shape, spec.dtype)
            .map_err(|e| cuda("dequantize", e))?;
        if !self.transposed {
            return Ok(vec![GpuBuffer::new(gpu, dense)]);
        }
        // Each matrix's `[rows, n]` values as `[n, rows]`.
        let per_matrix = spec.shape[ndim - 1];
        let matrices = rows.checked_div(per_matrix).unwrap_or(0);
        let from = [(per_matrix * n) as i64, 1, n as i64];
        let shape = [matrices, n, per_matrix];
        let across = strided(gpu, "dequantize", (&dense, 0), spec.dtype, &shape, &from)?;
        Ok(vec![GpuBuffer::new(gpu, across)])
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let (words, scales, biases) = (&inputs[0], &inputs[1], &inputs[2]);
        with_float_dtype!(
            spec.dtype,
            T,
            super::output::<T>(spec, |out| {
                let parts = (
                    words.slice::<u32>(),
                    scales.slice::<T>(),
                    biases.slice::<T>(),
                );
                let ndim = spec.shape.len();
                if self.transposed {
                    let (n, rows) = (spec.shape[ndim - 2], spec.shape[ndim - 1]);
                    dequantize_transposed::<T>(self, (rows, n), parts, out)
                } else {
                    dequantize_rows::<T>(self, spec.shape[ndim - 1], parts, out)
                }
            }),
            Err(Error::eval(
                "dequantize",
                format!("needs float scales, got {}", spec.dtype)
            ))
        )
    }

    /// Linear in the scales and biases: `∂/∂s = Σ_group c·q`, `∂/∂b = Σ_group c`. The packed
    /// integers have no gradient.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let levels = self.levels(inputs);
        let cotangent = if self.transposed {
            ops::swapaxes(&cotangents[0], -1, -2)
        } else {
            cotangents[0].clone()
        };
        argnums
            .iter()
            .map(|&i| match i {
                1 => Ok(self.group_sum(&(&cotangent * &levels), &inputs[1])),
                2 => Ok(self.group_sum(&cotangent, &inputs[2])),
                _ => Err(Error::Transform {
                    transform: "vjp",
                    reason: "the packed integers of dequantize have no gradient".into(),
                }),
            })
            .collect()
    }

    fn jvp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let full = super::full_tangents(inputs, tangents, argnums);
        let levels = self.levels(inputs);
        let scale = self.expand(&full[1], levels.shape());
        let bias = self.expand(&full[2], levels.shape());
        let tangent = levels * scale + bias;
        Ok(vec![if self.transposed {
            ops::swapaxes(&tangent, -1, -2)
        } else {
            tangent
        }])
    }

    /// Rows are independent: every input's batch axis goes first (unbatched inputs are
    /// broadcast to the batch).
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        let size = batching::batch_size(inputs, axes);
        let moved: Vec<Array> = inputs
            .iter()
            .zip(axes)
            .map(|(x, &axis)| match axis {
                Some(_) => batching::to_front(x, axis),
                None => {
                    let mut shape = vec![size];
                    shape.extend_from_slice(x.shape());
                    ops::broadcast_to(x, &shape)
                }
            })
            .collect();
        let out = dequantize_array(
            &moved[0],
            &moved[1],
            &moved[2],
            (self.group_size, self.bits),
            self.transposed,
        );
        Ok((vec![out], vec![Some(0)]))
    }

    super::same_as!();
}

impl Dequantize {
    /// The integer levels `q` as floats of the scales' dtype, not transposed.
    pub(super) fn levels(&self, inputs: &[Array]) -> Array {
        let ones = ops::ones_like(&inputs[1]);
        let zeros = ops::zeros_like(&inputs[2]);
        dequantize_array(
            &inputs[0],
            &ones,
            &zeros,
            (self.group_size, self.bits),
            false,
        )
    }

    /// Per-group sums of `values` (the output's shape), shaped like `like` (the scales).
    pub(super) fn group_sum(&self, values: &Array, like: &Array) -> Array {
        let mut shape = like.shape().to_vec();
        shape.push(self.group_size as i32);
        ops::sum(&ops::reshape(values, &shape), -1, false)
    }

    /// `per_group` (shaped like the scales) repeated over each group, of `shape`.
    fn expand(&self, per_group: &Array, shape: &[i32]) -> Array {
        let expanded = ops::repeat(per_group, self.group_size as i32, Some(-1));
        ops::reshape(&expanded, shape)
    }
}

/// [`Quantize`] as an op; arguments are checked by `ops::quantize`.
pub(crate) fn quantize_array(w: &Array, group_size: usize, bits: u32) -> (Array, Array, Array) {
    let mut wq_shape = w.shape().to_vec();
    let mut s_shape = w.shape().to_vec();
    let n = *wq_shape.last().unwrap_or(&0) as usize;
    *wq_shape.last_mut().expect("checked rank") = (n * bits as usize / 32) as i32;
    *s_shape.last_mut().expect("checked rank") = (n / group_size) as i32;
    let mut outputs = Array::from_primitive_multi(
        Arc::new(Quantize { group_size, bits }),
        vec![w.clone()],
        vec![
            (wq_shape, DType::U32),
            (s_shape.clone(), w.dtype()),
            (s_shape, w.dtype()),
        ],
    );
    let biases = outputs.pop().expect("three outputs");
    let scales = outputs.pop().expect("three outputs");
    let wq = outputs.pop().expect("three outputs");
    (wq, scales, biases)
}

/// [`Dequantize`] as an op (the last two axes swapped with `transposed`); arguments are
/// checked by `ops::dequantize`.
pub(crate) fn dequantize_array(
    wq: &Array,
    scales: &Array,
    biases: &Array,
    (group_size, bits): (usize, u32),
    transposed: bool,
) -> Array {
    let mut shape = wq.shape().to_vec();
    let words = *shape.last().unwrap_or(&0) as usize;
    *shape.last_mut().expect("checked rank") = (words * 32 / bits as usize) as i32;
    if transposed {
        let ndim = shape.len();
        shape.swap(ndim - 1, ndim - 2);
    }
    Array::from_primitive(
        Arc::new(Dequantize {
            group_size,
            bits,
            transposed,
        }),
        vec![wq.clone(), scales.clone(), biases.clone()],
        shape,
        scales.dtype(),
    )
}

#[cfg(test)]
mod tests {
    use crate::{ops, Array};

    #[test]
    fn the_words_of_a_quantize_whose_scales_were_dropped_still_evaluate() {
        let values: Vec<f32> = (0..128).map(|i| i as f32 / 10.0).collect();
        let w = Array::from_slice(&values, &[2, 64]);
        let (words, _, _) = ops::quantize(&w, 32, 4);
        assert_eq!(words.shape(), &[2, 8]);
        let kept = words.to_vec::<u32>().expect("the words evaluate alone");
        let (all, scales, biases) = ops::quantize(&w, 32, 4);
        let back = ops::dequantize(&all, &scales, &biases, 32, 4);
        assert_eq!(kept, all.to_vec::<u32>().unwrap());
        let back = back.to_vec::<f32>().unwrap();
        assert!(back.iter().zip(&values).all(|(b, v)| (b - v).abs() < 0.2));
    }
}
