//! Layout primitives: strided views materialised (broadcast, transpose, slice), reshape
//! (which shares its input's buffer), concatenation and padding.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::Result;
use nuvec_cpu::strided::{contiguous_strides, gather};
use nuvec_cpu::{with_dtype, Buffer, Element};
use std::sync::Arc;

/// Reads the input through element `strides` from element `offset` into a contiguous result:
/// the one primitive behind `broadcast_to`, `transpose` and `slice`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AsStrided {
    pub(crate) op: &'static str,
    pub(crate) strides: Vec<isize>,
    pub(crate) offset: isize,
}

impl Primitive for AsStrided {
    fn name(&self) -> &str {
        self.op
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let input = &inputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| gather(
                input.slice::<T>(),
                self.offset,
                &spec.shape,
                &self.strides,
                out
            ))
        )
    }

    same_as!();
}

/// Same elements, new shape: the output shares the input's buffer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reshape;

impl Primitive for Reshape {
    fn name(&self) -> &str {
        "reshape"
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        Ok(vec![inputs[0].buffer().clone()])
    }

    same_as!();
}

/// Joins inputs of one dtype along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Concatenate {
    pub(crate) axis: usize,
}

fn concat_into<T: Element>(inputs: &[Input], axis: usize, out: &mut [T]) {
    let outer: usize = inputs[0].shape[..axis].iter().product();
    let mut column = 0;
    let out_row: usize = inputs
        .iter()
        .map(|i| i.shape[axis..].iter().product::<usize>())
        .sum();
    for input in inputs {
        let row: usize = input.shape[axis..].iter().product();
        let data = input.slice::<T>();
        for o in 0..outer {
            out[o * out_row + column..o * out_row + column + row]
                .copy_from_slice(&data[o * row..(o + 1) * row]);
        }
        column += row;
    }
}

impl Primitive for Concatenate {
    fn name(&self) -> &str {
        "concatenate"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| concat_into(inputs, self.axis, out))
        )
    }

    same_as!();
}

/// Surrounds the input with `low`/`high` elements per axis, filled with `value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pad {
    pub(crate) low: Vec<usize>,
    pub(crate) value: f64,
}

fn pad_into<T: Element>(
    input: &Input,
    low: &[usize],
    value: T,
    out_shape: &[usize],
    out: &mut [T],
) {
    out.fill(value);
    if input.size() == 0 {
        return;
    }
    let out_strides = contiguous_strides(out_shape);
    let offset: isize = low
        .iter()
        .zip(&out_strides)
        .map(|(&l, &s)| l as isize * s)
        .sum();
    // Scatter rows of the input into the interior of the output.
    let n = input.shape.len();
    let inner = input.shape[n - 1];
    let rows = nuvec_cpu::strided::RowOffsets::new(
        &input.shape[..n - 1],
        &out_strides[..n - 1],
        offset,
        0,
    );
    let data = input.slice::<T>();
    for (row, start) in data.chunks(inner).zip(rows) {
        let start = start as usize;
        out[start..start + inner].copy_from_slice(row);
    }
}

impl Primitive for Pad {
    fn name(&self) -> &str {
        "pad"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let input = &inputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| pad_into(
                input,
                &self.low,
                T::from_f64(self.value),
                &spec.shape,
                out
            ))
        )
    }

    same_as!();
}
