//! A chain of element-wise float ops fused by `compile` into one primitive: one pass over
//! memory, intermediate values kept in small per-thread blocks instead of whole arrays.
//!
//! The results are bit for bit those of the unfused ops: each step applies the same scalar
//! function as the `Unary` or `Binary` kernel it replaces.

use super::binary::Binary;
use super::unary::Unary;
use crate::ops::broadcast_strides;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::unary::{erf_f32, exp_f32, UnaryOp};
use nuvec_cpu::{parallel, with_float_dtype, Buffer, DType, Float};
use std::sync::Arc;

/// Elements computed together: small enough that every register of a chain stays in cache.
const BLOCK: usize = 1024;

/// Outputs of at least this many bytes, far beyond the caches, are written with stores that
/// bypass them ([`nuvec_cpu::copy_streaming`]).
const STREAM_BYTES: usize = 16 << 20;

/// One step of a fused chain. Operands are registers: the inputs first, then each step's
/// result in order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
}

/// The chain `steps` over `inputs` inputs; the last step's result is the output. Every
/// step's result has the output's shape; inputs broadcast to it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fused {
    pub(crate) steps: Vec<Step>,
    pub(crate) inputs: usize,
}

/// `out = op(x)` with the scalar functions of `nuvec_cpu::unary::unary_float`, the op
/// dispatched once per block so that each loop vectorizes.
#[inline(always)]
fn unary<T: Float>(op: UnaryOp, x: &[T], out: &mut [T]) {
    let pairs = x.iter().zip(out.iter_mut());
    if T::DTYPE == DType::F64 {
        pairs.for_each(|(x, o)| *o = T::from_f64(op.apply_f64(x.to_f64())));
    } else if T::DTYPE == DType::F32 && op == UnaryOp::Exp {
        pairs.for_each(|(x, o)| *o = T::from_f32(exp_f32(x.to_f32())));
    } else if T::DTYPE == DType::F32 && op == UnaryOp::Erf {
        pairs.for_each(|(x, o)| *o = T::from_f32(erf_f32(x.to_f32())));
    } else {
        pairs.for_each(|(x, o)| *o = T::from_f32(op.apply_f32(x.to_f32())));
    }
}

#[inline(always)]
fn binary<T: Float>(op: BinaryOp, a: &[T], b: &[T], out: &mut [T]) {
    // Separate loops for the common ops keep them free of the op `match`, so they vectorize.
    let pairs = a.iter().zip(b).zip(out.iter_mut());
    match op {
        BinaryOp::Add => pairs.for_each(|((x, y), o)| *o = x.add(*y)),
        BinaryOp::Subtract => pairs.for_each(|((x, y), o)| *o = x.sub(*y)),
        BinaryOp::Multiply => pairs.for_each(|((x, y), o)| *o = x.mul(*y)),
        BinaryOp::Divide => pairs.for_each(|((x, y), o)| *o = x.div(*y)),
        _ => pairs.for_each(|((x, y), o)| *o = op.apply(*x, *y)),
    }
}

/// Fills `block` with elements `start..start + block.len()` of `input` broadcast to `shape`.
fn load<T: Float>(
    input: &Input,
    strides: &[isize],
    shape: &[usize],
    start: usize,
    block: &mut [T],
) {
    let data = input.slice::<T>();
    for (k, value) in block.iter_mut().enumerate() {
        let mut flat = start + k;
        let mut offset = 0isize;
        for (&dim, &stride) in shape.iter().zip(strides).rev() {
            offset += (flat % dim) as isize * stride;
            flat /= dim;
        }
        *value = data[offset as usize];
    }
}

/// How a block reads an input.
enum Feed {
    /// The input has the output's shape: read in place.
    Direct,
    /// One element: its register is filled once per chunk.
    Scalar,
    /// Broadcast by these strides: gathered into its register for each block.
    Strided(Vec<isize>),
}

fn run<T: Float>(fused: &Fused, inputs: &[Input], spec: &OutputSpec, out: &mut [T]) {
    let shape = &spec.shape;
    let feeds: Vec<Feed> = inputs
        .iter()
        .map(|i| {
            if i.shape == *shape {
                Feed::Direct
            } else if i.size() == 1 {
                Feed::Scalar
            } else {
                Feed::Strided(broadcast_strides(&i.shape, shape))
            }
        })
        .collect();
    let stream = size_of_val(out) >= STREAM_BYTES;
    parallel::for_each_chunk(out, |start, part| {
        nuvec_cpu::with_wide_vectors(
            #[inline(always)]
            || chunk(fused, inputs, &feeds, shape, stream, start, part),
        )
    });
}

/// Computes `part`, the output's elements from `start` on, one block at a time; `stream`
/// writes it with stores that bypass the cache.
#[inline(always)]
fn chunk<T: Float>(
    fused: &Fused,
    inputs: &[Input],
    feeds: &[Feed],
    shape: &[usize],
    stream: bool,
    start: usize,
    part: &mut [T],
) {
    let last = fused.steps.len().saturating_sub(1);
    let registers = fused.inputs + fused.steps.len();
    let width = BLOCK.min(part.len());
    let mut regs: Vec<Vec<T>> = vec![vec![T::zero(); width]; registers];
    for (i, input) in inputs.iter().enumerate() {
        if let Feed::Scalar = feeds[i] {
            regs[i].fill(input.slice::<T>()[0]);
        }
    }
    for offset in (0..part.len()).step_by(BLOCK) {
        let n = BLOCK.min(part.len() - offset);
        let from = start + offset;
        for (i, input) in inputs.iter().enumerate() {
            if let Feed::Strided(strides) = &feeds[i] {
                load(input, strides, shape, from, &mut regs[i][..n]);
            }
        }
        for (k, step) in fused.steps.iter().enumerate() {
            let (done, rest) = regs.split_at_mut(fused.inputs + k);
            let operand = |r: usize| -> &[T] {
                match feeds.get(r) {
                    Some(Feed::Direct) => &inputs[r].slice::<T>()[from..from + n],
                    _ => &done[r][..n],
                }
            };
            // The last step writes straight into the output.
            let target = if k == last && !stream {
                &mut part[offset..offset + n]
            } else {
                &mut rest[0][..n]
            };
            match *step {
                Step::Unary(op, a) => unary(op, operand(a), target),
                Step::Binary(op, a, b) => binary(op, operand(a), operand(b), target),
            }
        }
        if stream {
            let result = &regs[registers - 1][..n];
            nuvec_cpu::copy_streaming(result, &mut part[offset..offset + n]);
        }
    }
}

impl Fused {
    /// The chain as ordinary ops on `inputs`, of `shape` and `dtype`: what the transforms
    /// differentiate.
    fn expand(&self, inputs: &[Array], shape: &[i32], dtype: DType) -> Array {
        // Every step has the output's shape, so an input that broadcasts is stretched first
        // (a unary step of it would otherwise claim a shape its operand lacks).
        let mut regs: Vec<Array> = inputs
            .iter()
            .map(|x| {
                if x.shape() == shape {
                    x.clone()
                } else {
                    crate::ops::broadcast_to(x, shape)
                }
            })
            .collect();
        for step in &self.steps {
            let (primitive, operands): (Arc<dyn Primitive>, Vec<Array>) = match *step {
                Step::Unary(op, a) => (Arc::new(Unary(op)), vec![regs[a].clone()]),
                Step::Binary(op, a, b) => {
                    (Arc::new(Binary(op)), vec![regs[a].clone(), regs[b].clone()])
                }
            };
            regs.push(Array::from_primitive(
                primitive,
                operands,
                shape.to_vec(),
                dtype,
            ));
        }
        regs.pop().unwrap_or_else(|| Array::scalar(0.0f32))
    }
}

impl Primitive for Fused {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::cuda;
        use nuvec_cuda::kernels::fused;
        let spec = &outputs[0];
        let steps: Vec<fused::Step> = self
            .steps
            .iter()
            .map(|step| match *step {
                Step::Unary(op, x) => fused::Step::Unary(op, x),
                Step::Binary(op, a, b) => fused::Step::Binary(op, a, b),
            })
            .collect();
        let source = fused::chain(&steps, inputs.len(), spec.dtype)
            .ok_or_else(|| crate::gpu::no_kernel("compiled (fused) chain", gpu))?;
        let n = spec.size();
        let mut made = Vec::new();
        let name = "compiled (fused) chain";
        let operands = crate::gpu::flat_operands(gpu, name, inputs, &spec.shape, &mut made)?;
        let out = nuvec_cuda::ops::fused(gpu, &source, &operands, n as u64, spec.dtype)
            .map_err(|e| cuda("compiled (fused) chain", e))?;
        Ok(vec![crate::gpu::GpuBuffer::new(gpu, out)])
    }

    fn name(&self) -> &str {
        "fused"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        with_float_dtype!(
            spec.dtype,
            T,
            super::output::<T>(spec, |out| run::<T>(self, inputs, spec, out)),
            Err(crate::Error::eval(
                "fused",
                format!("fused chains are float, got {}", spec.dtype)
            ))
        )
    }

    fn vjp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let (shape, dtype) = (outputs[0].shape().to_vec(), outputs[0].dtype());
        let (_, vjps) =
            crate::transforms::vjp(|x| vec![self.expand(x, &shape, dtype)], inputs, cotangents)?;
        Ok(argnums.iter().map(|&i| vjps[i].clone()).collect())
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let (shape, dtype) = (outputs[0].shape().to_vec(), outputs[0].dtype());
        // Only the inputs with tangents vary: a zero tangent given to a constant would meet
        // the other factor of a product (0 · NaN) and spoil the sum, where MLX leaves it out.
        let varying: Vec<Array> = argnums.iter().map(|&i| inputs[i].clone()).collect();
        let chain = |x: &[Array]| {
            let mut all = inputs.to_vec();
            for (&i, value) in argnums.iter().zip(x) {
                all[i] = value.clone();
            }
            vec![self.expand(&all, &shape, dtype)]
        };
        let (_, out) = crate::transforms::jvp(chain, &varying, tangents)?;
        Ok(out)
    }

    super::batching::vmap_elementwise!();

    fn is_elementwise(&self) -> bool {
        true
    }

    super::same_as!();
}
