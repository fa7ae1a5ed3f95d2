//! Evaluation: order the pending part of a graph, run each primitive once, detach.
//!
//! The order is a depth-first post-order from the outputs, so each branch is finished (and
//! its intermediates freed) before the next starts. An op's inputs are taken out of the op
//! when it runs, so a buffer that nothing else holds can be reused for the result (donation),
//! and evaluated nodes no longer keep their inputs alive.
//!
//! A node that communicates (a collective, send, recv) is handed to its group's worker
//! thread (`distributed/worker.rs`) and the walk goes on; the first node that reads its
//! result waits for it. So the evaluating thread computes, say, the rest of a backward pass
//! while an earlier gradient is being all-reduced. When the very next node needs the result
//! (or there is none) and the worker is idle, the node runs on the evaluating thread instead:
//! there is nothing to overlap, and the hand-off would only add latency.

use crate::array::{lock, Array, Node, Op, State};
use crate::node_hash::{NodeMap, NodeSet};
use crate::primitive::{Input, OutputSpec};
use crate::transforms::trace::{differentiating, placeholder_eval_error, Traced};
use crate::{Device, Error, Result};
use nuvec_cpu::Buffer;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// [`eval`] run on a thread of the kernels' pool, this thread waiting for it: for loops that
/// evaluate many small graphs one after the other, such as decoding a token at a time, where
/// handing each parallel kernel from this thread to the pool and back costs up to a fifth of
/// the time. The same results as [`eval`]; on a pool thread, or with a pool of one thread, it
/// is [`eval`].
///
/// ```
/// use nuvec_core::{array, eval_on_pool};
/// let a = array![1.0, 2.0];
/// let b = &a * 3.0;
/// eval_on_pool(&[b.clone()])?;
/// assert_eq!(b.to_vec::<f32>()?, [3.0, 6.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn eval_on_pool(outputs: &[Array]) -> Result<()> {
    nuvec_cpu::parallel::on_pool(|| eval(outputs))
}

/// Computes every array in `outputs` and what they depend on; returns the first error.
///
/// ```
/// use nuvec_core::{array, eval};
/// let a = array![1.0, 2.0];
/// let (b, c) = (&a + 1.0, &a * 3.0);
/// eval(&[b.clone(), c.clone()])?;
/// assert!(b.is_evaluated() && c.is_evaluated());
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn eval(outputs: &[Array]) -> Result<()> {
    for array in outputs {
        if let Traced::Placeholder(transform) = array.node.traced {
            return Err(placeholder_eval_error(transform));
        }
    }
    // Inside a function being differentiated, nodes that depend on its inputs keep their ops.
    let keep = differentiating();
    // Nodes running on a group's worker, with the signal that they are done.
    let mut in_flight: NodeMap<*const Node, Receiver<()>> = NodeMap::default();
    let mut tape = order(outputs).into_iter().peekable();
    while let Some(array) = tape.next() {
        if !in_flight.is_empty() {
            await_inputs(&array, &mut in_flight);
        }
        let Some(group) = communication_group(&array) else {
            run(&array, keep);
            continue;
        };
        let started = group.started_worker();
        // Nothing to compute meanwhile, and nothing of the group's queued before it: running
        // it here saves two thread hand-offs on the latency path.
        let idle = started.as_ref().is_none_or(|worker| worker.is_idle());
        if idle && !independent_work_follows(&array, tape.peek()) {
            run(&array, keep);
            continue;
        }
        let Some(worker) = started.or_else(|| group.worker()) else {
            // A closed group: the node reports it.
            run(&array, keep);
            continue;
        };
        let (done, finished) = channel();
        let node = Arc::as_ptr(&array.node);
        let job = Box::new(move || {
            run(&array, keep);
            let _ = done.send(());
        });
        match worker.submit(job) {
            Ok(()) => {
                in_flight.insert(node, finished);
            }
            // The worker was stopped: run the node here; it reports its own error.
            Err(job) => job(),
        }
    }
    for finished in in_flight.into_values() {
        let _ = finished.recv();
    }
    for array in outputs {
        if let State::Failed(error) = &*lock(&array.node.state) {
            return Err(error.clone());
        }
    }
    Ok(())
}

/// Starts computing `outputs` on the CPU stream's worker and returns at once; a later
/// [`eval`] or read waits for it (or computes what the worker has not reached yet).
pub fn async_eval(outputs: &[Array]) {
    let work = outputs.to_vec();
    let sent = worker()
        .lock()
        .map(|sender| sender.send(work.clone()).is_ok())
        .unwrap_or(false);
    if !sent {
        // The worker is gone (it only stops when the process exits): evaluate here instead.
        let _ = eval(&work);
    }
}

fn worker() -> &'static Mutex<Sender<Vec<Array>>> {
    static WORKER: OnceLock<Mutex<Sender<Vec<Array>>>> = OnceLock::new();
    WORKER.get_or_init(|| {
        let (sender, receiver) = channel::<Vec<Array>>();
        std::thread::Builder::new()
            .name("nuvec-cpu-stream".into())
            .spawn(move || {
                for work in receiver {
                    // Errors stay in the failed nodes, where the reader finds them.
                    let _ = eval(&work);
                }
            })
            .map(|_| ())
            .unwrap_or(());
        Mutex::new(sender)
    })
}

/// The group that `array`'s pending node communicates on, if any.
fn communication_group(array: &Array) -> Option<crate::distributed::Group> {
    match &*lock(&array.node.state) {
        State::Pending { op, .. } => op.primitive.communication_group(),
        _ => None,
    }
}

/// Whether `next`, the node evaluated after `array`, exists and does not read `array`: work
/// the evaluating thread could do while `array` communicates.
fn independent_work_follows(array: &Array, next: Option<&Array>) -> bool {
    let Some(next) = next else {
        return false;
    };
    let node = Arc::as_ptr(&array.node);
    match &*lock(&next.node.state) {
        State::Pending { op, .. } => !lock(&op.inputs)
            .iter()
            .any(|input| Arc::as_ptr(&input.node) == node),
        _ => true,
    }
}

/// Waits for those of `array`'s inputs that are still running on a group's worker.
fn await_inputs(array: &Array, in_flight: &mut NodeMap<*const Node, Receiver<()>>) {
    let inputs: Vec<*const Node> = match &*lock(&array.node.state) {
        State::Pending { op, .. } => lock(&op.inputs)
            .iter()
            .map(|input| Arc::as_ptr(&input.node))
            .collect(),
        _ => return,
    };
    for input in inputs {
        if let Some(finished) = in_flight.remove(&input) {
            // A worker that died mid-job drops its sender: the node then reads as failed
            // or pending, which the consumer reports.
            let _ = finished.recv();
        }
    }
}

/// The pending nodes reachable from `outputs`, each after its inputs.
fn order(outputs: &[Array]) -> Vec<Array> {
    if let Some(tape) = one_step(outputs) {
        return tape;
    }
    let mut seen: NodeSet<*const Node> = NodeSet::default();
    let mut tape = Vec::new();
    // (array, inputs pushed?) pairs: an explicit stack, so deep graphs cannot overflow.
    let mut stack: Vec<(Array, bool)> = outputs.iter().rev().map(|a| (a.clone(), false)).collect();
    while let Some((array, expanded)) = stack.pop() {
        if expanded {
            tape.push(array);
            continue;
        }
        if !seen.insert(Arc::as_ptr(&array.node)) {
            continue;
        }
        let inputs = match &*lock(&array.node.state) {
            State::Pending { op, .. } => lock(&op.inputs).clone(),
            _ => continue,
        };
        stack.push((array, true));
        for input in inputs.into_iter().rev() {
            if !seen.contains(&Arc::as_ptr(&input.node)) {
                stack.push((input, false));
            }
        }
    }
    tape
}

/// The order when `outputs` is one array whose inputs are all evaluated (a collective or a
/// decoding step on arrays already computed): itself alone, or nothing once it ran, found
/// without the walk's set and stack.
fn one_step(outputs: &[Array]) -> Option<Vec<Array>> {
    let [array] = outputs else {
        return None;
    };
    let op = match &*lock(&array.node.state) {
        State::Pending { op, .. } => op.clone(),
        _ => return Some(Vec::new()),
    };
    let inputs_ready = lock(&op.inputs)
        .iter()
        .all(|input| !matches!(&*lock(&input.node.state), State::Pending { .. }));
    inputs_ready.then(|| vec![array.clone()])
}

/// Runs the op behind `array` unless it already ran. With `keep`, a node that depends on the
/// inputs of a function being differentiated keeps its op (see `Node::history`).
fn run(array: &Array, keep: bool) {
    let op = match &*lock(&array.node.state) {
        State::Pending { op, .. } => op.clone(),
        _ => return,
    };
    let _running = lock(&op.running);
    if !matches!(&*lock(&array.node.state), State::Pending { .. }) {
        return; // Another thread ran it while we waited.
    }
    let keep = keep && array.node.traced == Traced::Differentiated;
    let inputs = if keep {
        lock(&op.inputs).clone()
    } else {
        std::mem::take(&mut *lock(&op.inputs))
    };
    let result = execute(&op, inputs);
    let outputs = op.outputs.get().map(Vec::as_slice).unwrap_or_default();
    let settle = |states: &mut dyn Iterator<Item = State>| {
        for (weak, state) in outputs.iter().zip(states) {
            if let Some(node) = weak.upgrade() {
                if keep {
                    let _ = node.history.set(op.clone());
                }
                *lock(&node.state) = state;
            }
        }
    };
    match result {
        Ok(Made::Buffers(buffers)) => settle(&mut buffers.into_iter().map(State::Ready)),
        #[cfg(feature = "cuda")]
        Ok(Made::States(states)) => settle(&mut states.into_iter()),
        Err(error) => {
            for weak in outputs {
                if let Some(node) = weak.upgrade() {
                    *lock(&node.state) = State::Failed(error.clone());
                }
            }
        }
    }
}

/// Turns evaluated input arrays into buffers, moving a buffer out of an input node that
/// nothing else refers to so that it can be donated.
fn collect_inputs(inputs: Vec<Array>) -> Result<Vec<Input>> {
    let mut collected = Vec::with_capacity(inputs.len());
    for input in inputs {
        let shape = input.dims();
        let dtype = input.dtype();
        let sole_owner = Arc::strong_count(&input.node) == 1;
        let mut state = lock(&input.node.state);
        let buffer = match &mut *state {
            State::Ready(buffer) if sole_owner => {
                let buffer = buffer.clone();
                *state = State::Failed(Error::eval("eval", "buffer donated to a consumer"));
                buffer
            }
            State::Ready(buffer) => buffer.clone(),
            #[cfg(feature = "cuda")]
            State::OnGpu(data) => data.to_host()?,
            State::Failed(error) => return Err(error.clone()),
            State::Pending { op, .. } => {
                return Err(Error::eval(
                    op.primitive.name(),
                    "input not evaluated before its consumer",
                ))
            }
        };
        drop(state);
        collected.push(Input::new(shape, dtype, buffer));
    }
    Ok(collected)
}

/// What running an op made: its outputs' buffers on the host, or their states (on a GPU).
enum Made {
    /// Kept as the kernel returned them: small collectives run one op per call, and a
    /// vector of states made from them would be one more allocation each time.
    Buffers(Vec<Arc<Buffer>>),
    #[cfg(feature = "cuda")]
    States(Vec<State>),
}

/// Runs `op` on its device over `inputs`, giving what it made of its outputs.
fn execute(op: &Op, inputs: Vec<Array>) -> Result<Made> {
    match op.device {
        Device::Cpu => {
            let mut inputs = collect_inputs(inputs)?;
            let specs = specs_of(op);
            let name = op.primitive.name();
            let buffers = guarded(name, specs.len(), || {
                op.primitive.eval_cpu(&mut inputs, &specs)
            })?;
            Ok(Made::Buffers(buffers))
        }
        #[cfg(feature = "cuda")]
        Device::Gpu(index) => {
            crate::gpu::execute(op, index, inputs, &specs_of(op)).map(Made::States)
        }
        #[cfg(not(feature = "cuda"))]
        device @ Device::Gpu(_) => Err(Error::eval(
            op.primitive.name(),
            device.unavailable_reason().unwrap_or_default(),
        )),
    }
}

/// The shapes and dtypes of `op`'s outputs (an empty stand-in for one nobody holds).
fn specs_of(op: &Op) -> Vec<OutputSpec> {
    op.outputs
        .get()
        .map(|outputs| {
            outputs
                .iter()
                .map(|weak| match weak.upgrade() {
                    Some(node) => OutputSpec {
                        shape: node.shape.iter().map(|&d| d as usize).collect(),
                        dtype: node.dtype,
                    },
                    None => OutputSpec {
                        shape: vec![0],
                        dtype: crate::DType::U8,
                    },
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs a primitive's kernel `f`, turning a panic into an error and checking that it made
/// `expected` outputs.
pub(crate) fn guarded<T>(
    name: &str,
    expected: usize,
    f: impl FnOnce() -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(buffers)) if buffers.len() == expected => Ok(buffers),
        Ok(Ok(buffers)) => Err(Error::eval(
            name,
            format!("produced {} outputs, expected {expected}", buffers.len()),
        )),
        Ok(Err(error)) => Err(error),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::eval(name, format!("kernel panicked: {message}")))
        }
    }
}
