//! Reverse mode. The inputs are replaced by fresh identity nodes (tracers); the function
//! builds a lazy graph from them; a walk from the outputs back to the tracers applies each
//! primitive's `vjp` rule and accumulates cotangents. The results are lazy graphs too, so
//! `grad(grad(f))` works.

use super::trace::{tape, tracers, while_differentiating, Traced};
use crate::{Array, Error, Result};
use std::collections::{HashMap, HashSet};

fn transform_error(reason: impl Into<String>) -> Error {
    Error::Transform {
        transform: "vjp",
        reason: reason.into(),
    }
}

/// The outputs of `f` at `primals`, and the vector-Jacobian products of `cotangents` (one per
/// output, of its shape) with respect to each primal.
///
/// ```
/// use nuvec_core::{array, ops, transforms::vjp};
/// let (outputs, vjps) = vjp(|x| vec![ops::square(&x[0])], &[array![3.0]], &[array![1.0]])?;
/// assert_eq!(outputs[0].item::<f32>()?, 9.0);
/// assert_eq!(vjps[0].item::<f32>()?, 6.0);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn vjp(
    f: impl FnOnce(&[Array]) -> Vec<Array>,
    primals: &[Array],
    cotangents: &[Array],
) -> Result<(Vec<Array>, Vec<Array>)> {
    let tracers = tracers(primals, Traced::Differentiated);
    let outputs = while_differentiating(|| f(&tracers));
    if outputs.len() != cotangents.len() {
        return Err(transform_error(format!(
            "the function returned {} outputs but {} cotangents were given",
            outputs.len(),
            cotangents.len()
        )));
    }
    for (index, (output, cotangent)) in outputs.iter().zip(cotangents).enumerate() {
        if let Some(error) = output.known_error() {
            return Err(error);
        }
        if output.shape() != cotangent.shape() {
            return Err(transform_error(format!(
                "cotangent {index} has shape {:?} but output {index} has shape {:?}",
                cotangent.shape(),
                output.shape()
            )));
        }
    }
    let tracer_keys: HashSet<usize> = tracers.iter().map(Array::node_key).collect();
    let order = tape(&outputs, &tracer_keys, "vjp")?;
    let mut cotangent_of: HashMap<usize, Array> = HashMap::new();
    let accumulate = |key: usize, value: Array, map: &mut HashMap<usize, Array>| {
        let summed = match map.remove(&key) {
            Some(previous) => crate::ops::add(&previous, &value),
            None => value,
        };
        map.insert(key, summed);
    };
    for (output, cotangent) in outputs.iter().zip(cotangents) {
        accumulate(
            output.node_key(),
            cotangent.astype(output.dtype()),
            &mut cotangent_of,
        );
    }
    let on_path: HashSet<usize> = order
        .iter()
        .map(Array::node_key)
        .chain(tracer_keys.iter().copied())
        .collect();
    for array in order.iter().rev() {
        let Some((primitive, inputs, siblings)) = array.traced_parts() else {
            continue;
        };
        let siblings: Vec<Array> = siblings
            .into_iter()
            .map(|s| s.unwrap_or_else(|| array.clone()))
            .collect();
        if !siblings
            .iter()
            .any(|s| cotangent_of.contains_key(&s.node_key()))
        {
            continue;
        }
        // Integers and booleans carry no derivative: nothing flows back through them.
        if !siblings.iter().any(|s| s.dtype().is_float()) {
            for sibling in &siblings {
                cotangent_of.remove(&sibling.node_key());
            }
            continue;
        }
        let sibling_cotangents: Vec<Array> = siblings
            .iter()
            .map(|s| {
                cotangent_of
                    .remove(&s.node_key())
                    .unwrap_or_else(|| crate::ops::zeros_like(s))
            })
            .collect();
        let argnums: Vec<usize> = (0..inputs.len())
            .filter(|&i| on_path.contains(&inputs[i].node_key()))
            .filter(|&i| primitive.differentiates_input(i))
            .collect();
        if argnums.is_empty() {
            continue; // A stop_gradient: nothing flows back.
        }
        let input_vjps = primitive.vjp(&inputs, &siblings, &sibling_cotangents, &argnums)?;
        for (&argnum, value) in argnums.iter().zip(input_vjps) {
            accumulate(inputs[argnum].node_key(), value, &mut cotangent_of);
        }
    }
    // Integers and booleans carry no derivative: their cotangents are zeros of their dtype
    // (MLX computes one in integers, truncating; docs/mlx-differences.md).
    let vjps = tracers
        .iter()
        .map(|t| match cotangent_of.remove(&t.node_key()) {
            Some(cotangent) if t.dtype().is_float() => cotangent,
            _ => crate::ops::zeros_like(t),
        })
        .collect();
    Ok((outputs, vjps))
}

/// Refuses what MLX refuses: no argument, one twice, or one the function is not called with.
fn check_argnums(argnums: &[usize], inputs: usize) -> Result<()> {
    let refuse = |reason: String| {
        Err(Error::Transform {
            transform: "grad",
            reason,
        })
    };
    if argnums.is_empty() {
        return refuse(
            "the gradient with respect to no argument was requested (argnums is empty)".into(),
        );
    }
    for (i, &a) in argnums.iter().enumerate() {
        if argnums[..i].contains(&a) {
            return refuse(format!("argument index {a} appears twice in argnums"));
        }
        if a >= inputs {
            return refuse(format!(
                "argnums has {a} but the function was called with {inputs} inputs"
            ));
        }
    }
    Ok(())
}

/// `f`'s value and its gradient with respect to the inputs in `argnums`; `f` must return a
/// scalar (one element). `argnums` must be non-empty, without repeats, and name inputs the
/// function is called with, as in MLX.
pub fn value_and_grad(
    f: impl Fn(&[Array]) -> Array,
    argnums: &[usize],
) -> impl Fn(&[Array]) -> Result<(Array, Vec<Array>)> {
    let argnums = argnums.to_vec();
    move |inputs: &[Array]| {
        check_argnums(&argnums, inputs.len())?;
        let (outputs, vjps) = vjp(
            |traced| {
                // Only the differentiated arguments are traced; the others pass through.
                let mut full = inputs.to_vec();
                for (slot, &argnum) in argnums.iter().enumerate() {
                    full[argnum] = traced[slot].clone();
                }
                vec![f(&full)]
            },
            &argnums
                .iter()
                .map(|&a| inputs[a].clone())
                .collect::<Vec<_>>(),
            &[Array::scalar(1.0f32)],
        )
        .map_err(|error| match error {
            Error::Transform { reason, .. } if reason.contains("cotangent 0 has shape") => {
                Error::Transform {
                    transform: "grad",
                    reason: "the function must return a scalar (an array of shape [])".into(),
                }
            }
            other => other,
        })?;
        let value = outputs
            .into_iter()
            .next()
            .ok_or_else(|| transform_error("no output"))?;
        Ok((value, vjps))
    }
}

/// The gradient of the scalar function `f` with respect to every input.
///
/// ```
/// use nuvec_core::{array, ops, transforms::grad};
/// let df = grad(|x: &[nuvec_core::Array]| ops::sum(&ops::square(&x[0]), None, false));
/// assert_eq!(df(&[array![1.0, -2.0]])?[0].to_vec::<f32>()?, [2.0, -4.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn grad(f: impl Fn(&[Array]) -> Array) -> impl Fn(&[Array]) -> Result<Vec<Array>> {
    move |inputs: &[Array]| {
        let argnums: Vec<usize> = (0..inputs.len()).collect();
        value_and_grad(&f, &argnums)(inputs).map(|(_, grads)| grads)
    }
}
