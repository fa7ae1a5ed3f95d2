//! Tracing shared by the transforms: fresh identity nodes mark the inputs, and a walk from the
//! outputs finds the nodes that depend on them.

use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Error, Result};
use nuvec_cpu::Buffer;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The identity: marks where a transform's inputs enter the traced graph.
#[derive(Debug, Clone)]
pub(crate) struct Tracer;

impl Primitive for Tracer {
    fn name(&self) -> &str {
        "tracer"
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        Ok(vec![inputs[0].buffer().clone()])
    }

    fn vjp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![cotangents[0].clone()])
    }

    fn jvp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![tangents[0].clone()])
    }

    crate::primitives::batching::vmap_elementwise!();
}

/// Nodes between the tracers and `outputs` that depend on a tracer, each after its inputs.
pub(crate) fn tape(
    outputs: &[Array],
    tracers: &HashSet<usize>,
    transform: &'static str,
) -> Result<Vec<Array>> {
    tape_from(outputs, tracers, &HashSet::new(), transform)
}

/// [`tape`] where the nodes in `leaves` (evaluated arrays, such as random keys) also count
/// as sources: what depends on them is taped too.
pub(crate) fn tape_from(
    outputs: &[Array],
    tracers: &HashSet<usize>,
    leaves: &HashSet<usize>,
    transform: &'static str,
) -> Result<Vec<Array>> {
    let mut depends: HashMap<usize, bool> = HashMap::new();
    let mut order = Vec::new();
    let mut stack: Vec<(Array, bool)> = outputs.iter().map(|a| (a.clone(), false)).collect();
    while let Some((array, expanded)) = stack.pop() {
        let key = array.node_key();
        if expanded {
            let inputs = array
                .pending_parts()
                .map(|(_, inputs, _)| inputs)
                .unwrap_or_default();
            let on_path = tracers.contains(&key)
                || inputs
                    .iter()
                    .any(|i| depends.get(&i.node_key()) == Some(&true));
            depends.insert(key, on_path);
            if on_path && !tracers.contains(&key) {
                order.push(array);
            }
            continue;
        }
        if depends.contains_key(&key) {
            continue;
        }
        if leaves.contains(&key) {
            depends.insert(key, true);
            continue;
        }
        depends.insert(key, false);
        if tracers.contains(&key) {
            if array.pending_parts().is_none() {
                return Err(Error::Transform {
                    transform,
                    reason: "an array was evaluated inside the function being transformed; evaluate after the transform".into(),
                });
            }
            depends.insert(key, true);
            continue;
        }
        let Some((_, inputs, _)) = array.pending_parts() else {
            continue;
        };
        stack.push((array, true));
        for input in inputs {
            if !depends.contains_key(&input.node_key()) {
                stack.push((input, false));
            }
        }
    }
    Ok(order)
}

/// A fresh tracer for each primal.
pub(crate) fn tracers(primals: &[Array]) -> Vec<Array> {
    primals
        .iter()
        .map(|p| {
            Array::from_primitive(
                Arc::new(Tracer),
                vec![p.clone()],
                p.shape().to_vec(),
                p.dtype(),
            )
        })
        .collect()
}
