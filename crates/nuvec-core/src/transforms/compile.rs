//! `compile`: trace a function once per input signature into a program, simplify it, and
//! replay the program on later calls.
//!
//! Simplification: constants are evaluated once (equal scalars merged), common
//! subexpressions are merged (never effects: collectives and random draws stay distinct), and
//! chains of element-wise float ops are fused into one primitive (`fuse.rs`). Global random
//! keys drawn while tracing become fresh draws on every call, so a compiled function draws
//! new numbers each time, exactly as the uncompiled one would.

use super::fuse::fuse;
use super::trace::{tape_from, tracers, Traced as Mark};
use crate::primitive::Primitive;
use crate::{Array, DType, Error, Result};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

fn compile_error(reason: impl Into<String>) -> Error {
    Error::Transform {
        transform: "compile",
        reason: reason.into(),
    }
}

/// Where a step's operand comes from.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// Input `i` of the compiled function.
    Input(usize),
    /// Output `j` of step `s`.
    Step(usize, usize),
    /// A value that does not depend on the inputs, evaluated once.
    Constant(Array),
    /// The `k`-th global random key drawn by the function: drawn afresh on every call.
    Key(usize),
}

impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        match (self, other) {
            (Source::Input(a), Source::Input(b)) | (Source::Key(a), Source::Key(b)) => a == b,
            (Source::Step(a, i), Source::Step(b, j)) => a == b && i == j,
            (Source::Constant(a), Source::Constant(b)) => a.node_key() == b.node_key(),
            _ => false,
        }
    }
}

/// A step's outputs: shape and dtype of each.
type Specs = Vec<(Vec<i32>, DType)>;

/// One operation of a program.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) primitive: Arc<dyn Primitive>,
    pub(crate) inputs: Vec<Source>,
    pub(crate) outputs: Specs,
}

/// A traced and simplified function.
#[derive(Debug)]
pub(crate) struct Program {
    pub(crate) steps: Vec<Step>,
    pub(crate) outputs: Vec<Source>,
    keys: usize,
}

/// A program just traced, with the keys its tracing drew (the call that traced replays with
/// those, so that tracing does not draw twice).
type Traced = (Program, Vec<Array>);

/// Traces `f` on `inputs` into a program.
fn trace(f: &dyn Fn(&[Array]) -> Vec<Array>, inputs: &[Array]) -> Result<Traced> {
    if let Some(error) = inputs.iter().find_map(Array::known_error) {
        return Err(error);
    }
    let traced = tracers(inputs, Mark::Placeholder("compile"));
    crate::random::start_recording();
    let outputs = f(&traced);
    let keys = crate::random::finish_recording();
    if let Some(error) = outputs.iter().find_map(Array::known_error) {
        return Err(error);
    }
    let tracer_keys: HashSet<usize> = traced.iter().map(Array::node_key).collect();
    // What depends on a drawn key is replayed with a fresh key on each call.
    let key_nodes: HashSet<usize> = keys.iter().map(Array::node_key).collect();
    let order = tape_from(&outputs, &tracer_keys, &key_nodes, "compile")?;
    let key_index: HashMap<usize, usize> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.node_key(), i))
        .collect();
    let mut sources: HashMap<usize, Source> = traced
        .iter()
        .enumerate()
        .map(|(i, t)| (t.node_key(), Source::Input(i)))
        .collect();
    let source_of = |array: &Array, sources: &HashMap<usize, Source>| {
        let key = array.node_key();
        sources
            .get(&key)
            .cloned()
            .unwrap_or_else(|| match key_index.get(&key) {
                Some(&k) => Source::Key(k),
                None => Source::Constant(array.clone()),
            })
    };
    let mut steps = Vec::with_capacity(order.len());
    for array in &order {
        if sources.contains_key(&array.node_key()) {
            continue;
        }
        let Some((primitive, inputs, siblings)) = array.pending_parts() else {
            continue;
        };
        let siblings: Vec<Array> = siblings
            .into_iter()
            .map(|s| {
                s.ok_or_else(|| {
                    compile_error(format!(
                        "an output of {} was dropped while tracing",
                        primitive.name()
                    ))
                })
            })
            .collect::<Result<_>>()?;
        let index = steps.len();
        let step = Step {
            primitive,
            inputs: inputs.iter().map(|i| source_of(i, &sources)).collect(),
            outputs: siblings
                .iter()
                .map(|s| (s.shape().to_vec(), s.dtype()))
                .collect(),
        };
        for (j, sibling) in siblings.iter().enumerate() {
            sources.insert(sibling.node_key(), Source::Step(index, j));
        }
        steps.push(step);
    }
    let outputs = outputs.iter().map(|o| source_of(o, &sources)).collect();
    let mut program = Program {
        steps,
        outputs,
        keys: keys.len(),
    };
    merge_constants(&mut program)?;
    merge_common(&mut program);
    fuse(&mut program);
    Ok((program, keys))
}

/// Evaluates every constant once and merges equal scalars.
fn merge_constants(program: &mut Program) -> Result<()> {
    let constants: Vec<Array> = program
        .steps
        .iter()
        .flat_map(|s| s.inputs.iter())
        .chain(&program.outputs)
        .filter_map(|s| match s {
            Source::Constant(a) => Some(a.clone()),
            _ => None,
        })
        .collect();
    crate::eval(&constants)?;
    let mut scalars: HashMap<(DType, Vec<i32>, Vec<u8>), Array> = HashMap::new();
    let mut canonical = |array: &Array| -> Array {
        if array.size() != 1 {
            return array.clone();
        }
        let bits = crate::with_dtype!(array.dtype(), T, {
            array
                .to_vec::<T>()
                .map(|v| format!("{:?}", v).into_bytes())
                .unwrap_or_default()
        });
        scalars
            .entry((array.dtype(), array.shape().to_vec(), bits))
            .or_insert_with(|| array.clone())
            .clone()
    };
    for source in program
        .steps
        .iter_mut()
        .flat_map(|s| s.inputs.iter_mut())
        .chain(program.outputs.iter_mut())
    {
        if let Source::Constant(array) = source {
            *array = canonical(array);
        }
    }
    Ok(())
}

/// Merges steps that compute the same thing from the same operands (never effects).
fn merge_common(program: &mut Program) {
    let mut replaced: HashMap<usize, usize> = HashMap::new();
    let mut kept: Vec<usize> = Vec::new();
    for index in 0..program.steps.len() {
        for source in &mut program.steps[index].inputs {
            if let Source::Step(s, _) = source {
                if let Some(&earlier) = replaced.get(s) {
                    *s = earlier;
                }
            }
        }
        let step = &program.steps[index];
        let twin = (!step.primitive.is_effect()).then(|| {
            kept.iter().copied().find(|&k| {
                let other = &program.steps[k];
                other.inputs == step.inputs
                    && other.outputs == step.outputs
                    && !other.primitive.is_effect()
                    && other.primitive.is_equivalent(step.primitive.as_ref())
            })
        });
        match twin.flatten() {
            Some(earlier) => {
                replaced.insert(index, earlier);
            }
            None => kept.push(index),
        }
    }
    for source in &mut program.outputs {
        if let Source::Step(s, _) = source {
            if let Some(&earlier) = replaced.get(s) {
                *s = earlier;
            }
        }
    }
    remove_unused(program);
}

/// Drops steps nothing reads and renumbers the rest (effects are kept).
pub(crate) fn remove_unused(program: &mut Program) {
    let mut used = vec![false; program.steps.len()];
    let mark = |source: &Source, used: &mut Vec<bool>| {
        if let Source::Step(s, _) = source {
            used[*s] = true;
        }
    };
    for source in &program.outputs {
        mark(source, &mut used);
    }
    for index in (0..program.steps.len()).rev() {
        if used[index] || program.steps[index].primitive.is_effect() {
            used[index] = true;
            for source in program.steps[index].inputs.clone() {
                mark(&source, &mut used);
            }
        }
    }
    let mut renumber = vec![usize::MAX; program.steps.len()];
    let mut next = 0;
    for (index, &keep) in used.iter().enumerate() {
        if keep {
            renumber[index] = next;
            next += 1;
        }
    }
    let steps = std::mem::take(&mut program.steps);
    program.steps = steps
        .into_iter()
        .enumerate()
        .filter(|(i, _)| used[*i])
        .map(|(_, mut step)| {
            for source in &mut step.inputs {
                if let Source::Step(s, _) = source {
                    *s = renumber[*s];
                }
            }
            step
        })
        .collect();
    for source in &mut program.outputs {
        if let Source::Step(s, _) = source {
            *s = renumber[*s];
        }
    }
}

impl Program {
    /// Every step's output shapes for `inputs` of new shapes (shapeless mode); `None` when a
    /// step's parameters depend on the exact shapes it was traced with.
    fn reshaped(&self, inputs: &[Array]) -> Option<Vec<Specs>> {
        let mut shapes: Vec<Vec<Vec<i32>>> = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            let operands: Vec<Vec<i32>> = step
                .inputs
                .iter()
                .map(|source| match source {
                    Source::Input(i) => inputs[*i].shape().to_vec(),
                    Source::Step(s, j) => shapes[*s][*j].clone(),
                    Source::Constant(a) => a.shape().to_vec(),
                    Source::Key(_) => vec![2],
                })
                .collect();
            let operands: Vec<&[i32]> = operands.iter().map(Vec::as_slice).collect();
            let traced: Vec<Vec<i32>> = step.outputs.iter().map(|(s, _)| s.clone()).collect();
            shapes.push(step.primitive.output_shapes(&operands, &traced)?);
        }
        Some(
            self.steps
                .iter()
                .zip(shapes)
                .map(|(step, shapes)| {
                    shapes
                        .into_iter()
                        .zip(&step.outputs)
                        .map(|(shape, (_, dtype))| (shape, *dtype))
                        .collect()
                })
                .collect(),
        )
    }

    /// Builds the program's graph on `inputs` (lazy, as the function itself would), with
    /// `specs` as the steps' outputs when given (shapeless mode), else the traced ones.
    fn replay(
        &self,
        inputs: &[Array],
        specs: Option<Vec<Specs>>,
        drawn: Option<Vec<Array>>,
    ) -> Vec<Array> {
        let keys: Vec<Array> = drawn.unwrap_or_else(|| {
            (0..self.keys)
                .map(|_| crate::random::next_global_key())
                .collect()
        });
        let mut values: Vec<Vec<Array>> = Vec::with_capacity(self.steps.len());
        let resolve = |source: &Source, values: &Vec<Vec<Array>>| match source {
            Source::Input(i) => inputs[*i].clone(),
            Source::Step(s, j) => values[*s][*j].clone(),
            Source::Constant(a) => a.clone(),
            Source::Key(k) => keys[*k].clone(),
        };
        for (index, step) in self.steps.iter().enumerate() {
            let operands: Vec<Array> = step.inputs.iter().map(|s| resolve(s, &values)).collect();
            let outputs = match &specs {
                Some(specs) => specs[index].clone(),
                None => step.outputs.clone(),
            };
            values.push(Array::from_primitive_multi(
                step.primitive.clone(),
                operands,
                outputs,
            ));
        }
        self.outputs.iter().map(|s| resolve(s, &values)).collect()
    }

    /// Number of steps (for tests and diagnostics).
    pub(crate) fn len(&self) -> usize {
        self.steps.len()
    }
}

/// What a call's inputs look like: each input's shape (or only its rank, shapeless) and dtype.
type Signature = Vec<(Vec<i32>, DType)>;

fn signature(inputs: &[Array], shapeless: bool) -> Signature {
    inputs
        .iter()
        .map(|a| {
            let shape = if shapeless {
                vec![a.ndim() as i32]
            } else {
                a.shape().to_vec()
            };
            (shape, a.dtype())
        })
        .collect()
}

/// A compiled function: call it like the original (see [`compile`]).
pub struct Compiled<F> {
    f: F,
    shapeless: bool,
    cache: Mutex<HashMap<Signature, Arc<Program>>>,
}

impl<F> std::fmt::Debug for Compiled<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("shapeless", &self.shapeless)
            .field("traces", &crate::array::lock(&self.cache).len())
            .finish()
    }
}

impl<F: Fn(&[Array]) -> Vec<Array>> Compiled<F> {
    /// Runs the function: the cached program for these inputs' signature, traced on the first
    /// call with that signature. The outputs are lazy, as the function's own would be.
    pub fn call(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        let (program, drawn) = self.program(signature(inputs, self.shapeless), inputs)?;
        if !self.shapeless {
            return Ok(program.replay(inputs, None, drawn));
        }
        if let Some(specs) = program.reshaped(inputs) {
            return Ok(program.replay(inputs, Some(specs), drawn));
        }
        // Some op depends on the exact shapes: a program per shape, as without shapeless.
        let (program, drawn) = match drawn {
            // Traced for these very inputs just now: also the program of their exact shapes.
            Some(drawn) => {
                crate::array::lock(&self.cache).insert(signature(inputs, false), program.clone());
                (program, Some(drawn))
            }
            None => self.program(signature(inputs, false), inputs)?,
        };
        Ok(program.replay(inputs, None, drawn))
    }

    /// The cached program for `key`, or one traced now (with the keys tracing drew).
    fn program(
        &self,
        key: Signature,
        inputs: &[Array],
    ) -> Result<(Arc<Program>, Option<Vec<Array>>)> {
        if let Some(program) = crate::array::lock(&self.cache).get(&key).cloned() {
            return Ok((program, None));
        }
        let (program, drawn) = trace(&self.f, inputs)?;
        let program = Arc::new(program);
        crate::array::lock(&self.cache).insert(key, program.clone());
        Ok((program, Some(drawn)))
    }

    /// How many programs have been traced (one per signature).
    pub fn traces(&self) -> usize {
        crate::array::lock(&self.cache).len()
    }

    /// The number of operations in the program for these inputs (tracing it if needed):
    /// shows what simplification and fusion left.
    pub fn program_len(&self, inputs: &[Array]) -> Result<usize> {
        Ok(trace(&self.f, inputs)?.0.len())
    }
}

/// Compiles `f`: traced once per input signature (shapes, dtypes), simplified and fused,
/// then replayed. Random draws and collectives inside `f` happen on every call.
///
/// ```
/// use nuvec_core::{array, ops, transforms::compile};
/// let gelu = compile(|x| {
///     let x = &x[0];
///     vec![x * 0.5 * (ops::erf(&(x / std::f64::consts::SQRT_2)) + 1.0)]
/// });
/// let y = gelu.call(&[array![-1.0, 0.0, 2.0]])?;
/// assert!((y[0].to_vec::<f32>()?[2] - 1.9544997).abs() < 1e-6);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn compile<F: Fn(&[Array]) -> Vec<Array>>(f: F) -> Compiled<F> {
    Compiled {
        f,
        shapeless: false,
        cache: Mutex::new(HashMap::new()),
    }
}

/// [`compile`] that traces again only when the inputs' ranks or dtypes change. A program whose
/// steps can say their output shapes for new input shapes (element-wise ops, reductions,
/// scans, sorts, matrix products, collectives) replays for any shapes; one with ops whose
/// parameters depend on the exact shapes (reshape, slices, padding…) is traced once per
/// shape, as [`compile`].
pub fn compile_shapeless<F: Fn(&[Array]) -> Vec<Array>>(f: F) -> Compiled<F> {
    Compiled {
        f,
        shapeless: true,
        cache: Mutex::new(HashMap::new()),
    }
}

/// Compiles a step that updates state (a model's parameters, an optimizer's moments): `f`
/// takes the state and the inputs and returns the new state and the outputs. The returned
/// closure replaces `state` with the new state (lazy arrays) and returns the outputs.
///
/// ```
/// use nuvec_core::{array, transforms::compile_step, Array};
/// // One step of gradient descent on w·x with a fixed gradient x.
/// let step = compile_step(|state: &[Array], inputs: &[Array]| {
///     let w = &state[0] - &(&inputs[0] * 0.5);
///     (vec![w.clone()], vec![w])
/// });
/// let mut state = vec![array![1.0, 1.0]];
/// step(&mut state, &[array![2.0, 4.0]])?;
/// step(&mut state, &[array![2.0, 4.0]])?;
/// assert_eq!(state[0].to_vec::<f32>()?, [-1.0, -3.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn compile_step<F>(f: F) -> impl Fn(&mut Vec<Array>, &[Array]) -> Result<Vec<Array>>
where
    F: Fn(&[Array], &[Array]) -> (Vec<Array>, Vec<Array>),
{
    // How many of the compiled function's inputs are state: set before each call (the
    // count is part of the signature, so a program always sees the count it was traced with).
    let state_len = Arc::new(Mutex::new(0usize));
    let inner_len = state_len.clone();
    let compiled = compile(move |all: &[Array]| {
        let count = *crate::array::lock(&inner_len);
        let (state, inputs) = all.split_at(count.min(all.len()));
        let (new_state, outputs) = f(state, inputs);
        new_state.into_iter().chain(outputs).collect()
    });
    move |state: &mut Vec<Array>, inputs: &[Array]| {
        let count = state.len();
        let mut all = state.clone();
        all.extend_from_slice(inputs);
        *crate::array::lock(&state_len) = count;
        let mut outputs = compiled.call(&all)?;
        if outputs.len() < count {
            return Err(compile_error(format!(
                "the step returned {} values but the state has {count}",
                outputs.len()
            )));
        }
        let rest = outputs.split_off(count);
        *state = outputs;
        Ok(rest)
    }
}
