//! The transforms over trees: each flattens its tree arguments to leaves, runs the array
//! transform, and rebuilds trees from the results.

use super::{too_few, tree_flatten, tree_unflatten, Tree};
use crate::{Array, Result};
use std::collections::HashMap;

/// [`super::super::value_and_grad`] for a function of a tree: its value and the gradient as a tree
/// of the same structure (a model's parameters differentiated as one value).
///
/// ```
/// use nuvec_core::{array, ops, transforms::tree, Array};
/// use std::collections::BTreeMap;
/// let params = BTreeMap::from([("w".to_string(), array![2.0]), ("b".to_string(), array![1.0])]);
/// let loss = |p: &BTreeMap<String, Array>| ops::sum(&(&p["w"] * 3.0 + &p["b"]), None, false);
/// let (value, grads) = tree::value_and_grad(loss)(&params)?;
/// assert_eq!(value.item::<f32>()?, 7.0);
/// assert_eq!(grads["w"].item::<f32>()?, 3.0);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn value_and_grad<T: Tree>(f: impl Fn(&T) -> Array) -> impl Fn(&T) -> Result<(Array, T)> {
    move |tree: &T| {
        let leaves = tree_flatten(tree);
        let argnums: Vec<usize> = (0..leaves.len()).collect();
        let (value, grads) = super::super::value_and_grad(
            |traced: &[Array]| match tree_unflatten(tree, traced.to_vec()) {
                Ok(rebuilt) => f(&rebuilt),
                Err(error) => Array::failed(error),
            },
            &argnums,
        )(&leaves)?;
        Ok((value, tree_unflatten(tree, grads)?))
    }
}

/// [`super::super::grad`] for a function of a tree: the gradient as a tree of the same structure.
pub fn grad<T: Tree>(f: impl Fn(&T) -> Array) -> impl Fn(&T) -> Result<T> {
    let both = value_and_grad(f);
    move |tree: &T| both(tree).map(|(_, grads)| grads)
}

/// [`super::super::jvp`] for a function from a tree to a tree: its outputs and their tangents.
pub fn jvp<T: Tree, U: Tree>(f: impl Fn(&T) -> U, primals: &T, tangents: &T) -> Result<(U, U)> {
    let (leaves, tangent_leaves) = (tree_flatten(primals), tree_flatten(tangents));
    let ((outputs, output_tangents), template) = through_leaves(&f, primals, |flat| {
        super::super::jvp(flat, &leaves, &tangent_leaves)
    })?;
    Ok((
        tree_unflatten(&template, outputs)?,
        tree_unflatten(&template, output_tangents)?,
    ))
}

/// Runs an array transform on `f`'s leaves: `run` gets a flat function and returns flat
/// results; `f`'s output structure is noted while it runs.
fn through_leaves<T: Tree, U: Tree, R>(
    f: &impl Fn(&T) -> U,
    template: &T,
    run: impl FnOnce(&dyn Fn(&[Array]) -> Vec<Array>) -> Result<R>,
) -> Result<(R, U)> {
    let output: std::cell::RefCell<Option<U>> = std::cell::RefCell::new(None);
    let flat = |leaves: &[Array]| match tree_unflatten(template, leaves.to_vec()) {
        Ok(tree) => {
            let out = f(&tree);
            let flat = tree_flatten(&out);
            *output.borrow_mut() = Some(out);
            flat
        }
        Err(error) => vec![Array::failed(error)],
    };
    let result = run(&flat)?;
    let output = output.into_inner().ok_or_else(too_few)?;
    Ok((result, output))
}

/// [`super::super::vjp`] for a function from a tree to a tree: its outputs, and the cotangents of
/// its inputs (a tree like `primals`) for `cotangents` (a tree like the outputs).
pub fn vjp<T: Tree, U: Tree>(f: impl Fn(&T) -> U, primals: &T, cotangents: &U) -> Result<(U, T)> {
    let leaves = tree_flatten(primals);
    let cotangent_leaves = tree_flatten(cotangents);
    let ((outputs, vjps), template) = through_leaves(&f, primals, |flat| {
        super::super::vjp(flat, &leaves, &cotangent_leaves)
    })?;
    Ok((
        tree_unflatten(&template, outputs)?,
        tree_unflatten(primals, vjps)?,
    ))
}

/// [`super::super::vmap`] for a function from a tree to a tree: every leaf of the input is batched
/// along `in_axis` (`None`: not batched) and every leaf of the output along `out_axis`.
///
/// ```
/// use nuvec_core::{array, ops, transforms::tree, Array};
/// let norms = tree::vmap(|p: &(Array, Array)| ops::sum(&(&p.0 * &p.1), None, false), Some(0), Some(0));
/// let out = norms(&(array![[1.0, 2.0], [3.0, 4.0]], array![[1.0, 1.0], [2.0, 0.0]]))?;
/// assert_eq!(out.to_vec::<f32>()?, [3.0, 6.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn vmap<T: Tree, U: Tree>(
    f: impl Fn(&T) -> U,
    in_axis: Option<i32>,
    out_axis: Option<i32>,
) -> impl Fn(&T) -> Result<U> {
    move |inputs: &T| {
        let leaves = tree_flatten(inputs);
        let (outputs, template) = through_leaves(&f, inputs, |flat| {
            super::super::vmap(flat, &[in_axis], &[out_axis])(&leaves)
        })?;
        tree_unflatten(&template, outputs)
    }
}

/// [`super::super::compile`] for a function from a tree to a tree: traced once per input signature
/// (the tree's structure, and its leaves' shapes and dtypes), the trace cached and replayed.
/// Fields marked `#[tree(skip)]` are not part of the signature: a trace sees their values at
/// its first call.
///
/// ```
/// use nuvec_core::{array, ops, transforms::tree, Array};
/// use std::collections::BTreeMap;
/// let step = tree::compile(|p: &BTreeMap<String, Array>| (&p["w"] * 2.0, ops::exp(&p["b"])));
/// let params = BTreeMap::from([("w".to_string(), array![1.5]), ("b".to_string(), array![0.0])]);
/// let (w, b) = step(&params)?;
/// assert_eq!((w.item::<f32>()?, b.item::<f32>()?), (3.0, 1.0));
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn compile<T: Tree + 'static, U: Tree + 'static>(
    f: impl Fn(&T) -> U + 'static,
) -> impl Fn(&T) -> Result<U> {
    let f = std::rc::Rc::new(f);
    let traces: std::cell::RefCell<HashMap<String, Trace<U>>> = Default::default();
    move |inputs: &T| {
        let leaves = tree_flatten(inputs);
        let mut key = String::new();
        inputs.structure(&mut key);
        for leaf in &leaves {
            key.push_str(&format!("|{}{:?}", leaf.dtype(), leaf.shape()));
        }
        // The entry is taken out while it runs, so that `f` may call this function again.
        let existing = traces.borrow_mut().remove(&key);
        let trace = match existing {
            Some(trace) => trace,
            None => {
                let input_template = tree_unflatten(inputs, leaves.clone())?;
                let output: std::rc::Rc<std::cell::RefCell<Option<U>>> = Default::default();
                let (f, slot) = (f.clone(), output.clone());
                let flat: FlatFn = Box::new(move |traced: &[Array]| {
                    match tree_unflatten(&input_template, traced.to_vec()) {
                        Ok(tree) => {
                            let out = f(&tree);
                            let flat = tree_flatten(&out);
                            // Only the structure is kept, not the traced graph.
                            let mut placeholders = flat.iter().map(|_| Array::scalar(0.0f32));
                            *slot.borrow_mut() = out.rebuild(&mut placeholders).ok();
                            flat
                        }
                        Err(error) => vec![Array::failed(error)],
                    }
                });
                Trace {
                    compiled: super::super::compile(flat),
                    output,
                }
            }
        };
        let result = trace.compiled.call(&leaves).and_then(|outputs| {
            let template = trace.output.borrow();
            let template = template.as_ref().ok_or_else(too_few)?;
            tree_unflatten(template, outputs)
        });
        traces.borrow_mut().insert(key, trace);
        result
    }
}

/// A flattened function, as [`super::super::compile`] takes it.
type FlatFn = Box<dyn Fn(&[Array]) -> Vec<Array>>;

/// One signature's compiled function and the structure of its output, noted when traced.
struct Trace<U> {
    compiled: super::super::Compiled<FlatFn>,
    output: std::rc::Rc<std::cell::RefCell<Option<U>>>,
}
