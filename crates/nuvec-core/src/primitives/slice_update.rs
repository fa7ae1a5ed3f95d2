//! Writing a strided slice: `out = src; out[slice] = update`, in place when `src`'s buffer
//! is donated.

use super::batching::Batched;
use super::layout::{AsStrided, View};
use super::same_as;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::{with_dtype, Buffer};
use std::sync::Arc;

/// `src` (input 0) with the elements at `offset + Σ i_k strides[k]` replaced by those of
/// `update` (input 1, of the slice's shape and `src`'s dtype); `first` and `steps` are the
/// slice's Python bounds, which the gradient of `update` reads back as a slice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SliceUpdate {
    pub(crate) first: Vec<i64>,
    pub(crate) steps: Vec<i64>,
    pub(crate) strides: Vec<isize>,
    pub(crate) offset: isize,
}

/// Writes `update` (contiguous, of `shape`) into `out` at the strided positions.
fn scatter_strided<T: Copy>(
    update: &[T],
    shape: &[usize],
    strides: &[isize],
    offset: isize,
    out: &mut [T],
) {
    let Some((&inner, outer)) = shape.split_last() else {
        out[offset as usize] = update[0];
        return;
    };
    if update.is_empty() {
        return;
    }
    let step = strides[outer.len()];
    let mut index = vec![0usize; outer.len()];
    for row in update.chunks_exact(inner) {
        let base = offset
            + index
                .iter()
                .zip(strides)
                .map(|(&i, &s)| i as isize * s)
                .sum::<isize>();
        if step == 1 {
            out[base as usize..base as usize + inner].copy_from_slice(row);
        } else {
            for (j, &value) in row.iter().enumerate() {
                out[(base + j as isize * step) as usize] = value;
            }
        }
        for axis in (0..outer.len()).rev() {
            index[axis] += 1;
            if index[axis] < outer[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

impl SliceUpdate {
    /// The slice of `a` this update writes, as a strided view of the update's shape.
    fn read(&self, a: &Array, shape: &[i32]) -> Array {
        let view = View::Slice {
            first: self.first.clone(),
            steps: self.steps.clone(),
        };
        let strided = AsStrided {
            view,
            strides: self.strides.clone(),
            offset: self.offset,
        };
        Array::from_primitive(
            Arc::new(strided),
            vec![a.clone()],
            shape.to_vec(),
            a.dtype(),
        )
    }
}

impl Primitive for SliceUpdate {
    /// The source is copied unless it was donated (a KV cache written once per token), then
    /// the update is written at the slice's strided positions.
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{contiguous, cuda, i64s, GpuBuffer};
        let spec = &outputs[0];
        let (src, update) = inputs.split_at_mut(1);
        let (src, update) = (&mut src[0], &update[0]);
        let strides: Vec<i64> = self.strides.iter().map(|&s| s as i64).collect();
        let dims =
            nuvec_cuda::ops::Dims::copy(&i64s(&update.shape), &contiguous(&update.shape), &strides)
                .map_err(|e| cuda("slice_update", e))?;
        let offset = usize::try_from(self.offset).map_err(|_| {
            crate::Error::eval("slice_update", format!("a negative offset {}", self.offset))
        })?;
        let write = |target: &mut nuvec_cuda::DeviceBuffer| {
            nuvec_cuda::ops::copy_into(
                gpu,
                (update.buffer(), 0),
                (target, offset),
                spec.dtype.size(),
                (update.size() as u64, &dims),
            )
            .map_err(|e| cuda("slice_update", e))
        };
        if let Some(donated) = Arc::get_mut(&mut src.data) {
            write(donated.buffer_mut())?;
            return Ok(vec![src.data.clone()]);
        }
        let mut copy = crate::gpu::strided(
            gpu,
            "slice_update",
            (src.buffer(), 0),
            spec.dtype,
            &[spec.size()],
            &[1],
        )?;
        write(&mut copy)?;
        Ok(vec![GpuBuffer::new(gpu, copy)])
    }

    fn name(&self) -> &str {
        "slice_update"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let bytes = spec.bytes();
        let (src, update) = inputs.split_at_mut(1);
        let mut out = match src[0].take_owned(bytes) {
            Some(owned) => owned,
            None => {
                let mut fresh = spec.alloc();
                fresh.as_mut_bytes()[..bytes].copy_from_slice(&src[0].buffer().as_bytes()[..bytes]);
                fresh
            }
        };
        let update = &update[0];
        with_dtype!(spec.dtype, T, {
            let out = &mut out.as_mut_slice::<T>()[..spec.size()];
            scatter_strided(
                update.slice::<T>(),
                &update.shape,
                &self.strides,
                self.offset,
                out,
            );
        });
        Ok(vec![Arc::new(out)])
    }

    /// `src`'s cotangent is the output's with the slice zeroed; `update`'s is the slice.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let c = &cotangents[0];
        Ok(argnums
            .iter()
            .map(|&i| {
                if i == 0 {
                    let zeros = crate::ops::zeros_like(&inputs[1]).astype(c.dtype());
                    Array::from_primitive(
                        Arc::new(self.clone()),
                        vec![c.clone(), zeros],
                        c.shape().to_vec(),
                        c.dtype(),
                    )
                } else {
                    self.read(c, inputs[1].shape())
                }
            })
            .collect())
    }

    super::jvp_linear!();

    /// Both inputs batch-first; the batch axis is one more axis of the slice, taken whole.
    /// Both inputs batch-first; the batch axis is one more axis of the slice, taken whole.
    fn vmap(&self, inputs: &[Array], outputs: &[Array], axes: &[Option<usize>]) -> Result<Batched> {
        let whole: usize = outputs[0].shape().iter().map(|&d| d as usize).product();
        let shifted = SliceUpdate {
            first: std::iter::once(0)
                .chain(self.first.iter().copied())
                .collect(),
            steps: std::iter::once(1)
                .chain(self.steps.iter().copied())
                .collect(),
            strides: std::iter::once(whole as isize)
                .chain(self.strides.iter().copied())
                .collect(),
            offset: self.offset,
        };
        super::indexed_vmap(shifted, inputs, outputs, axes)
    }

    same_as!();
}

#[cfg(test)]
mod tests {
    use crate::array::{lock, State};
    use crate::{ops, Array, DType};

    /// Where an evaluated array's elements lie.
    fn address(a: &Array) -> usize {
        a.eval().unwrap();
        match &*lock(&a.node.state) {
            State::Ready(buffer) => buffer.as_bytes().as_ptr() as usize,
            _ => unreachable!("evaluated above"),
        }
    }

    #[test]
    fn a_source_nothing_else_holds_is_updated_in_place() {
        let source = ops::zeros(&[4, 1024], DType::F32) + 1.0;
        let before = address(&source);
        let row = Array::from_vec(vec![7.0f32; 1024], &[1, 1024]);
        let updated = ops::slice_update(&source, &row, &[2, 0], &[3, 1024], &[1, 1]);
        drop(source);
        assert_eq!(address(&updated), before);
        let values = updated.to_vec::<f32>().unwrap();
        assert_eq!((values[2047], values[2048], values[3072]), (1.0, 7.0, 1.0));
    }

    #[test]
    fn a_source_still_held_is_copied_and_left_as_it_was() {
        let source = ops::zeros(&[4, 1024], DType::F32) + 1.0;
        let before = address(&source);
        let row = Array::from_vec(vec![7.0f32; 1024], &[1, 1024]);
        let updated = ops::slice_update(&source, &row, &[2, 0], &[3, 1024], &[1, 1]);
        assert_ne!(address(&updated), before);
        assert_eq!(source.to_vec::<f32>().unwrap()[2048], 1.0);
        assert_eq!(updated.to_vec::<f32>().unwrap()[2048], 7.0);
    }
}
