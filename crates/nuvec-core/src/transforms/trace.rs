//! Tracing shared by the transforms: fresh identity nodes mark the inputs, and a walk from the
//! outputs finds the nodes that depend on them.

use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Error, Result};
use nuvec_cpu::Buffer;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Whether a node depends on a transform's inputs, and on which kind of transform's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Traced {
    /// On no transform's input.
    #[default]
    No,
    /// On the input of a function being differentiated (`vjp`, `jvp`, `grad`): evaluating it
    /// computes its value and keeps its graph for the transform, as MLX does.
    Differentiated,
    /// On a placeholder input (`vmap`, `compile`): its value is not the function's, so
    /// evaluating it is an error, as in MLX.
    Placeholder(&'static str),
}

impl Traced {
    /// The mark of a node built from nodes marked `self` and `other`.
    pub(crate) fn join(self, other: Traced) -> Traced {
        match (self, other) {
            (Traced::Placeholder(name), _) | (_, Traced::Placeholder(name)) => {
                Traced::Placeholder(name)
            }
            (Traced::Differentiated, _) | (_, Traced::Differentiated) => Traced::Differentiated,
            (Traced::No, Traced::No) => Traced::No,
        }
    }
}

thread_local! {
    /// How many functions being differentiated are running on this thread.
    static DIFFERENTIATING: Cell<usize> = const { Cell::new(0) };
}

/// Whether a function being differentiated runs on this thread: then evaluating a node that
/// depends on its inputs keeps the node's op.
pub(crate) fn differentiating() -> bool {
    DIFFERENTIATING.with(Cell::get) > 0
}

/// Runs `f` as a function being differentiated (see [`differentiating`]).
pub(crate) fn while_differentiating<T>(f: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DIFFERENTIATING.with(|depth| depth.set(depth.get().saturating_sub(1)));
        }
    }
    DIFFERENTIATING.with(|depth| depth.set(depth.get() + 1));
    let _leave = Leave;
    f()
}

/// The error of evaluating a node marked [`Traced::Placeholder`]: MLX's refusal.
pub(crate) fn placeholder_eval_error(transform: &'static str) -> Error {
    Error::Transform {
        transform: "eval",
        reason: format!(
            "attempting to eval an array during function transformations like compile or \
             vmap is not allowed (here: {transform}); return the array from the function and \
             evaluate it after the transform"
        ),
    }
}
/// The identity: marks where a transform's inputs enter the traced graph.
#[derive(Debug, Clone)]
pub(crate) struct Tracer;

impl Primitive for Tracer {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let _ = (gpu, outputs);
        Ok(vec![inputs[0].data.clone()])
    }

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
    let mut stack: Vec<(Array, bool)> = outputs.iter().rev().map(|a| (a.clone(), false)).collect();
    while let Some((array, expanded)) = stack.pop() {
        let key = array.node_key();
        if expanded {
            let inputs = array
                .traced_parts()
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
            if array.traced_parts().is_none() {
                return Err(Error::Transform {
                    transform,
                    reason: "an array was evaluated inside the function being transformed; evaluate after the transform".into(),
                });
            }
            depends.insert(key, true);
            continue;
        }
        let Some((_, inputs, _)) = array.traced_parts() else {
            continue;
        };
        stack.push((array, true));
        // The first input is explored first, as MLX's recursive walk does: the tape's order
        // is the order in which vjp sums a node's cotangents, which rounding can tell apart.
        for input in inputs.into_iter().rev() {
            if !depends.contains_key(&input.node_key()) {
                stack.push((input, false));
            }
        }
    }
    Ok(order)
}

/// A fresh tracer for each primal, marked `mark` (what evaluating what depends on it does).
pub(crate) fn tracers(primals: &[Array], mark: Traced) -> Vec<Array> {
    primals
        .iter()
        .map(|p| {
            let mut traced = Array::from_primitive_marked(
                Arc::new(Tracer),
                vec![p.clone()],
                vec![(p.shape().to_vec(), p.dtype())],
                mark,
            );
            traced.pop().unwrap_or_else(|| p.clone())
        })
        .collect()
}
