//! Forward mode. The inputs are replaced by tracers, the function builds a lazy graph, and a
//! walk from the tracers to the outputs applies each primitive's `jvp` rule to the tangents.
//! The tangents are lazy graphs too, so forward and reverse mode nest.

use super::trace::{tape, tracers, while_differentiating, Traced};
use crate::{Array, Error, Result};
use std::collections::{HashMap, HashSet};

fn transform_error(reason: impl Into<String>) -> Error {
    Error::Transform {
        transform: "jvp",
        reason: reason.into(),
    }
}

/// The outputs of `f` at `primals`, and the Jacobian-vector products of `tangents` (one per
/// primal, of its shape): how each output moves when the inputs move along the tangents.
///
/// ```
/// use nuvec_core::{array, ops, transforms::jvp};
/// let (outputs, tangents) = jvp(|x| vec![ops::square(&x[0])], &[array![3.0]], &[array![1.0]])?;
/// assert_eq!(outputs[0].item::<f32>()?, 9.0);
/// assert_eq!(tangents[0].item::<f32>()?, 6.0);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn jvp(
    f: impl FnOnce(&[Array]) -> Vec<Array>,
    primals: &[Array],
    tangents: &[Array],
) -> Result<(Vec<Array>, Vec<Array>)> {
    if primals.len() != tangents.len() {
        return Err(transform_error(format!(
            "{} primals but {} tangents were given",
            primals.len(),
            tangents.len()
        )));
    }
    for (index, (primal, tangent)) in primals.iter().zip(tangents).enumerate() {
        if primal.shape() != tangent.shape() {
            return Err(transform_error(format!(
                "tangent {index} has shape {:?} but primal {index} has shape {:?}",
                tangent.shape(),
                primal.shape()
            )));
        }
    }
    let tracers = tracers(primals, Traced::Differentiated);
    let outputs = while_differentiating(|| f(&tracers));
    if let Some(error) = outputs.iter().find_map(Array::known_error) {
        return Err(error);
    }
    let tracer_keys: HashSet<usize> = tracers.iter().map(Array::node_key).collect();
    let order = tape(&outputs, &tracer_keys, "jvp")?;
    let mut tangent_of: HashMap<usize, Array> = tracers
        .iter()
        .zip(tangents)
        .map(|(t, tangent)| {
            // Integers and booleans carry no derivative: their tangents count as zeros.
            let tangent = if t.dtype().is_float() {
                tangent.astype(t.dtype())
            } else {
                crate::ops::zeros_like(t)
            };
            (t.node_key(), tangent)
        })
        .collect();
    for array in &order {
        if tangent_of.contains_key(&array.node_key()) {
            continue; // A sibling computed it.
        }
        let Some((primitive, inputs, siblings)) = array.traced_parts() else {
            continue;
        };
        let siblings: Vec<Array> = siblings
            .into_iter()
            .map(|s| s.unwrap_or_else(|| array.clone()))
            .collect();
        let argnums: Vec<usize> = (0..inputs.len())
            .filter(|&i| tangent_of.contains_key(&inputs[i].node_key()))
            .filter(|&i| primitive.differentiates_input(i))
            .collect();
        if argnums.is_empty() {
            continue; // Behind a stop_gradient: no tangent (zeros at the outputs).
        }
        // Integers and booleans carry no derivative: their tangents are zeros.
        if !siblings.iter().any(|s| s.dtype().is_float()) {
            for sibling in &siblings {
                tangent_of.insert(sibling.node_key(), crate::ops::zeros_like(sibling));
            }
            continue;
        }
        let input_tangents: Vec<Array> = argnums
            .iter()
            .map(|&i| tangent_of[&inputs[i].node_key()].clone())
            .collect();
        let output_tangents = primitive.jvp(&inputs, &siblings, &input_tangents, &argnums)?;
        if output_tangents.len() != siblings.len() {
            return Err(transform_error(format!(
                "the jvp rule of {} gave {} tangents for {} outputs",
                primitive.name(),
                output_tangents.len(),
                siblings.len()
            )));
        }
        for (sibling, tangent) in siblings.iter().zip(output_tangents) {
            tangent_of.insert(sibling.node_key(), tangent);
        }
    }
    let output_tangents = outputs
        .iter()
        .map(|o| {
            tangent_of
                .get(&o.node_key())
                .cloned()
                .unwrap_or_else(|| crate::ops::zeros_like(o))
        })
        .collect();
    Ok((outputs, output_tangents))
}
