//! Vectorisation. The function is traced once on one slice of the batch (tracers of the
//! unbatched shapes), then each taped op is replaced by its primitive's batching rule applied
//! to the whole batch: no op runs once per slice.

use super::trace::{tape, tracers, Traced};
use crate::{Array, Error, Result};
use std::collections::{HashMap, HashSet};

fn transform_error(reason: impl Into<String>) -> Error {
    Error::Transform {
        transform: "vmap",
        reason: reason.into(),
    }
}

/// `axes` for `count` values: one axis for all, or one per value.
fn per_value(axes: &[Option<i32>], count: usize, what: &str) -> Result<Vec<Option<i32>>> {
    match axes.len() {
        1 => Ok(vec![axes[0]; count]),
        n if n == count => Ok(axes.to_vec()),
        n => Err(transform_error(format!(
            "{what} has {n} entries but there are {count} {}",
            if what == "in_axes" {
                "inputs"
            } else {
                "outputs"
            }
        ))),
    }
}

/// `axis` as an index into `ndim` axes (negative counts from the end).
fn resolve(axis: i32, ndim: usize, what: impl Fn() -> String) -> Result<usize> {
    let resolved = if axis < 0 { axis + ndim as i32 } else { axis };
    if resolved < 0 || resolved as usize >= ndim {
        return Err(transform_error(format!(
            "{} is out of range for {ndim} dimensions",
            what()
        )));
    }
    Ok(resolved as usize)
}

/// Vectorises `f` over axis `in_axes[i]` of input `i` (`None`: not batched, the same for
/// every slice), putting the batch axis of output `j` at `out_axes[j]` (`None`: the output
/// must not vary over the batch). A single entry applies to every input (or output), as
/// MLX's `in_axes=0`.
///
/// ```
/// use nuvec_core::{array, ops, transforms::vmap};
/// let row_sums = vmap(|x| vec![ops::sum(&x[0], None, false)], &[Some(0)], &[Some(0)]);
/// let sums = row_sums(&[array![[1.0, 2.0], [3.0, 4.0]]])?;
/// assert_eq!(sums[0].to_vec::<f32>()?, [3.0, 7.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn vmap(
    f: impl Fn(&[Array]) -> Vec<Array>,
    in_axes: &[Option<i32>],
    out_axes: &[Option<i32>],
) -> impl Fn(&[Array]) -> Result<Vec<Array>> {
    let (in_axes, out_axes) = (in_axes.to_vec(), out_axes.to_vec());
    move |inputs: &[Array]| vectorise(&f, inputs, &in_axes, &out_axes)
}

fn vectorise(
    f: &impl Fn(&[Array]) -> Vec<Array>,
    inputs: &[Array],
    in_axes: &[Option<i32>],
    out_axes: &[Option<i32>],
) -> Result<Vec<Array>> {
    let in_axes = per_value(in_axes, inputs.len(), "in_axes")?;
    let mut axes = Vec::with_capacity(inputs.len());
    let mut size: Option<(usize, i32)> = None;
    for (index, (input, axis)) in inputs.iter().zip(&in_axes).enumerate() {
        if let Some(error) = input.known_error() {
            return Err(error);
        }
        let Some(axis) = axis else {
            axes.push(None);
            continue;
        };
        let axis = resolve(*axis, input.ndim(), || {
            format!(
                "in_axes[{index}] = {axis} (input {index} has shape {:?})",
                input.shape()
            )
        })?;
        let length = input.shape()[axis];
        match size {
            Some((first, expected)) if expected != length => {
                return Err(transform_error(format!(
                    "inputs {first} and {index} have different batch sizes ({expected} and {length}) along their in_axes"
                )))
            }
            None => size = Some((index, length)),
            _ => {}
        }
        axes.push(Some(axis));
    }
    let Some((_, size)) = size else {
        return Err(transform_error(
            "at least one input must be batched (every in_axes entry is None)",
        ));
    };
    // One slice of each batched input, as a placeholder the function is traced on.
    let slices: Vec<Array> = inputs
        .iter()
        .zip(&axes)
        .filter_map(|(input, axis)| {
            axis.map(|axis| {
                let mut shape = input.shape().to_vec();
                shape.remove(axis);
                crate::ops::zeros(&shape, input.dtype())
            })
        })
        .collect();
    let traced = tracers(&slices, Traced::Placeholder("vmap"));
    let mut traced_iter = traced.iter();
    let arguments: Vec<Array> = inputs
        .iter()
        .zip(&axes)
        .map(|(input, axis)| match axis {
            Some(_) => traced_iter.next().cloned().unwrap_or_else(|| input.clone()),
            None => input.clone(),
        })
        .collect();
    let outputs = f(&arguments);
    if let Some(error) = outputs.iter().find_map(Array::known_error) {
        return Err(error);
    }
    let out_axes = per_value(out_axes, outputs.len(), "out_axes")?;
    let tracer_keys: HashSet<usize> = traced.iter().map(Array::node_key).collect();
    let order = tape(&outputs, &tracer_keys, "vmap")?;
    let mut batched: HashMap<usize, (Array, Option<usize>)> = HashMap::new();
    let mut originals = inputs.iter().zip(&axes).filter(|(_, a)| a.is_some());
    for tracer in &traced {
        if let Some((input, &axis)) = originals.next() {
            batched.insert(tracer.node_key(), (input.clone(), axis));
        }
    }
    for array in &order {
        if batched.contains_key(&array.node_key()) {
            continue; // A sibling's rule gave it.
        }
        let Some((primitive, node_inputs, siblings)) = array.pending_parts() else {
            continue;
        };
        let siblings: Vec<Array> = siblings
            .into_iter()
            .map(|s| s.unwrap_or_else(|| array.clone()))
            .collect();
        let (values, value_axes): (Vec<Array>, Vec<Option<usize>>) = node_inputs
            .iter()
            .map(|i| {
                batched
                    .get(&i.node_key())
                    .cloned()
                    .unwrap_or_else(|| (i.clone(), None))
            })
            .unzip();
        if value_axes.iter().all(Option::is_none) {
            // Nothing batched reaches this op: it is the same for every slice.
            for sibling in siblings {
                batched.insert(sibling.node_key(), (sibling, None));
            }
            continue;
        }
        let (results, result_axes) = primitive.vmap(&values, &siblings, &value_axes)?;
        if results.len() != siblings.len() || result_axes.len() != siblings.len() {
            return Err(transform_error(format!(
                "the batching rule of {} gave {} results for {} outputs",
                primitive.name(),
                results.len(),
                siblings.len()
            )));
        }
        for ((sibling, result), axis) in siblings.iter().zip(results).zip(result_axes) {
            batched.insert(sibling.node_key(), (result, axis));
        }
    }
    outputs
        .iter()
        .zip(&out_axes)
        .enumerate()
        .map(|(index, (output, wanted))| {
            let (value, axis) = batched
                .get(&output.node_key())
                .cloned()
                .unwrap_or_else(|| (output.clone(), None));
            place(value, axis, *wanted, size, index)
        })
        .collect()
}

/// Moves an output's batch axis to where `out_axes` wants it, broadcasting an output that
/// does not vary over the batch.
fn place(
    value: Array,
    axis: Option<usize>,
    wanted: Option<i32>,
    size: i32,
    index: usize,
) -> Result<Array> {
    let Some(wanted) = wanted else {
        return match axis {
            None => Ok(value),
            Some(_) => Err(transform_error(format!(
                "output {index} varies over the batch but out_axes[{index}] is None"
            ))),
        };
    };
    let batched_ndim = value.ndim() + usize::from(axis.is_none());
    let target = resolve(wanted, batched_ndim, || {
        format!("out_axes[{index}] = {wanted} (output {index} has {batched_ndim} dimensions with the batch)")
    })?;
    Ok(match axis {
        Some(axis) if axis == target => value,
        Some(axis) => crate::ops::moveaxis(&value, axis as i32, target as i32),
        None => {
            let expanded = crate::ops::expand_dims(&value, &[target as i32]);
            let mut shape = expanded.shape().to_vec();
            shape[target] = size;
            crate::ops::broadcast_to(&expanded, &shape)
        }
    })
}
