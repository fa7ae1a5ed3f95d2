//! `GatherMatmul`: products of matrices of `x` with matrices picked by index from a stack
//! (a mixture-of-experts layer), float or quantized (read in its packed form). Its vjp, jvp
//! and vmap are those of its definition in `ops::gather_matmul` (take, dequantize, matmul),
//! differentiated or vectorised by the transforms.
//!
//! Consecutive products with the same stack matrix (indices sorted by expert, as mlx-lm
//! sorts them for long inputs) run as one product over all their rows, so each expert's
//! weights are read once per run rather than once per token.

use super::batching;
use crate::ops::gather_matmul::{gather_mm_dense, gather_qmm_dense, Gathered};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Error, Result};
use nuvec_cpu::matmul::{matmul, MatmulDims};
use nuvec_cpu::quantized::{quantized_matmul_t, QuantizedDims};
use nuvec_cpu::{with_float_dtype, Buffer, Float};
use std::sync::Arc;

#[cfg(feature = "cuda")]
mod gpu;

/// Inputs: `x: [count_x, M, K]`, the stack, and int32 indices `lhs`, `rhs: [T]`; output
/// `[T, M, N]` with `y[t] = x[lhs[t]] · W[rhs[t]]`. The stack is `[count_w, K, N]` floats
/// (`Dense`), or words `[count_w, N, K·bits/32]` with scales and biases
/// `[count_w, N, K/group_size]` multiplied transposed (`Quantized`). Floats share one dtype.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GatherMatmul {
    Dense,
    Quantized { group_size: usize, bits: u32 },
}

impl GatherMatmul {
    /// Inputs before the two index arrays.
    fn operands(&self) -> usize {
        match self {
            GatherMatmul::Dense => 2,
            GatherMatmul::Quantized { .. } => 4,
        }
    }

    /// The definition over all inputs (operands, then `lhs` and `rhs`).
    fn definition(&self, inputs: &[Array]) -> Array {
        let count = self.operands();
        let gathered = Gathered {
            lhs: inputs[count].clone(),
            rhs: inputs[count + 1].clone(),
            shape: inputs[count].shape().to_vec(),
        };
        match *self {
            GatherMatmul::Dense => gather_mm_dense([&inputs[0], &inputs[1]], &gathered),
            GatherMatmul::Quantized { group_size, bits } => {
                let operands = [&inputs[0], &inputs[1], &inputs[2], &inputs[3]];
                gather_qmm_dense(operands, &gathered, true, (group_size, bits))
            }
        }
    }

    /// The inputs that have derivatives: the floats (not the words, not the indices).
    fn differentiable(&self) -> Vec<usize> {
        match self {
            GatherMatmul::Dense => vec![0, 1],
            GatherMatmul::Quantized { .. } => vec![0, 2, 3],
        }
    }

    /// The definition as a function of the differentiable inputs, the others held.
    fn of_floats(&self, inputs: &[Array]) -> impl Fn(&[Array]) -> Vec<Array> {
        let (this, held, floats) = (self.clone(), inputs.to_vec(), self.differentiable());
        move |values: &[Array]| {
            let mut all = held.clone();
            for (&i, value) in floats.iter().zip(values) {
                all[i] = value.clone();
            }
            vec![this.definition(&all)]
        }
    }

    /// Where input `index` is among [`differentiable`](Self::differentiable), or why it has
    /// no derivative.
    fn position(&self, index: usize) -> Result<usize> {
        self.differentiable()
            .iter()
            .position(|&i| i == index)
            .ok_or_else(|| Error::Transform {
                transform: "gather_mm",
                reason: "the indices and packed integers of a gathered product have no derivative"
                    .into(),
            })
    }

    fn op_name(&self) -> &'static str {
        match self {
            GatherMatmul::Dense => "gather_mm",
            GatherMatmul::Quantized { .. } => "gather_qmm",
        }
    }
}

/// Index `t` of an int32 index array, checked against the stack's size.
fn checked(op: &str, indices: &[i32], t: usize, count: usize, name: &str) -> Result<usize> {
    let index = indices[t];
    usize::try_from(index)
        .ok()
        .filter(|&i| i < count)
        .ok_or_else(|| {
            Error::eval(
                op,
                format!("{name}[{t}] = {index} is out of range for a stack of {count} matrices"),
            )
        })
}

/// Fills `out` (`[T, M, N]`) run by run: `product(e, rows, y)` multiplies the rows of `x`
/// (`[run·M, K]`) by stack matrix `e` into `y` (`[run·M, N]`).
fn by_runs<T: Float>(
    op: &str,
    inputs: &[Input],
    (m, n, k): (usize, usize, usize),
    out: &mut [T],
    product: impl Fn(usize, &[T], &mut [T]),
) -> Result<()> {
    let count = inputs.len() - 2;
    let (lhs, rhs) = (
        inputs[count].slice::<i32>(),
        inputs[count + 1].slice::<i32>(),
    );
    let x = inputs[0].slice::<T>();
    let (count_x, count_w) = (inputs[0].shape[0], inputs[1].shape[0]);
    let total = rhs.len();
    let mut rows = Vec::new();
    let mut start = 0;
    while start < total {
        let e = checked(op, rhs, start, count_w, "rhs_indices")?;
        let mut end = start + 1;
        while end < total && rhs[end] == rhs[start] {
            end += 1;
        }
        rows.clear();
        for t in start..end {
            let i = checked(op, lhs, t, count_x, "lhs_indices")?;
            rows.extend_from_slice(&x[i * m * k..(i + 1) * m * k]);
        }
        product(e, &rows, &mut out[start * m * n..end * m * n]);
        start = end;
    }
    Ok(())
}

impl Primitive for GatherMatmul {
    fn name(&self) -> &str {
        self.op_name()
    }

    /// Run by run, as on the CPU (`gather_matmul/gpu.rs`).
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        gpu::eval(self, gpu, inputs, outputs)
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let op = self.op_name();
        let (m, k) = (inputs[0].shape[1], inputs[0].shape[2]);
        let n = spec.shape[2];
        with_float_dtype!(
            spec.dtype,
            T,
            {
                let mut result = Ok(());
                let buffers = super::output::<T>(spec, |out| {
                    result = match *self {
                        GatherMatmul::Dense => {
                            let w = inputs[1].slice::<T>();
                            by_runs::<T>(op, inputs, (m, n, k), out, |e, rows, y| {
                                let dims = MatmulDims {
                                    m: rows.len() / k.max(1),
                                    n,
                                    k,
                                };
                                matmul(
                                    rows,
                                    &[0],
                                    &w[e * k * n..(e + 1) * k * n],
                                    &[0],
                                    dims,
                                    1.0,
                                    0.0,
                                    y,
                                );
                            })
                        }
                        GatherMatmul::Quantized { group_size, bits } => {
                            let (words, scales, biases) = (&inputs[1], &inputs[2], &inputs[3]);
                            let bytes = &words.buffer().as_slice::<u8>()[..words.size() * 4];
                            let (scales, biases) = (scales.slice::<T>(), biases.slice::<T>());
                            let (row_bytes, groups) = (k * bits as usize / 8, k / group_size);
                            by_runs::<T>(op, inputs, (m, n, k), out, |e, rows, y| {
                                let dims = QuantizedDims {
                                    m: rows.len() / k.max(1),
                                    n,
                                    k,
                                    group_size,
                                    bits,
                                };
                                let (w, g) = (e * n * row_bytes, e * n * groups);
                                quantized_matmul_t(
                                    rows,
                                    &bytes[w..w + n * row_bytes],
                                    &scales[g..g + n * groups],
                                    &biases[g..g + n * groups],
                                    dims,
                                    y,
                                );
                            })
                        }
                    };
                })?;
                result.map(|()| buffers)
            },
            Err(Error::eval(op, format!("needs floats, got {}", spec.dtype)))
        )
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let positions: Vec<usize> = argnums
            .iter()
            .map(|&i| self.position(i))
            .collect::<Result<_>>()?;
        let floats: Vec<Array> = self
            .differentiable()
            .iter()
            .map(|&i| inputs[i].clone())
            .collect();
        let (_, vjps) = crate::transforms::vjp(self.of_floats(inputs), &floats, cotangents)?;
        Ok(positions.iter().map(|&p| vjps[p].clone()).collect())
    }

    fn jvp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        for &i in argnums {
            self.position(i)?;
        }
        let full = super::full_tangents(inputs, tangents, argnums);
        let pick = |all: &[Array]| -> Vec<Array> {
            self.differentiable()
                .iter()
                .map(|&i| all[i].clone())
                .collect()
        };
        let (_, out) = crate::transforms::jvp(self.of_floats(inputs), &pick(inputs), &pick(&full))?;
        Ok(out)
    }

    /// Every input batch-first, the definition vectorised over all of them.
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<batching::Batched> {
        let size = batching::batch_size(inputs, axes);
        let batched: Vec<Array> = inputs
            .iter()
            .zip(axes)
            .map(|(input, &axis)| batching::batched_front(input, axis, size))
            .collect();
        let this = self.clone();
        let each = move |one: &[Array]| vec![this.definition(one)];
        let in_axes = vec![Some(0); batched.len()];
        let out = crate::transforms::vmap(each, &in_axes, &[Some(0)])(&batched)?;
        Ok((out, vec![Some(0)]))
    }

    super::same_as!();
}

/// [`GatherMatmul`] over checked stacks (`[count, rows, cols]`, floats of one dtype) and
/// resolved indices: `operands` is `[x, w]` (`w: [count, K, N]`) or `[x, words, scales,
/// biases]` with `quantized = Some((group_size, bits))`.
pub(crate) fn gather_matmul_array(
    operands: &[Array],
    gathered: &Gathered,
    quantized: Option<(usize, u32)>,
) -> Array {
    let (primitive, n) = match quantized {
        None => (GatherMatmul::Dense, operands[1].shape()[2]),
        Some((group_size, bits)) => (
            GatherMatmul::Quantized { group_size, bits },
            operands[1].shape()[1],
        ),
    };
    let shape = vec![gathered.lhs.shape()[0], operands[0].shape()[1], n];
    let mut inputs = operands.to_vec();
    inputs.extend([gathered.lhs.clone(), gathered.rhs.clone()]);
    Array::from_primitive(Arc::new(primitive), inputs, shape, operands[0].dtype())
}
