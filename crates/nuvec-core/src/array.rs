//! [`Array`]: a cheap handle to a node of the lazy graph.
//!
//! A node holds its shape and dtype from the moment it is built, and a state that moves
//! `Pending` (a primitive and its inputs) → `Ready` (a buffer) or `Failed` (a sticky error).
//! Outputs of one primitive call share one [`Op`], so it runs once for all of them.

use crate::primitive::Primitive;
use crate::transforms::trace::Traced;
use crate::{DType, Error, Result};
use nuvec_cpu::{Buffer, Element};
use std::panic::Location;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// A lazy n-dimensional array. Cloning shares the node; nothing computes until a value is
/// read or [`Array::eval`] is called.
///
/// ```
/// use nuvec_core::array;
/// let a = array![1.0, 2.0, 3.0];
/// let b = &a * 2.0;
/// assert_eq!(b.shape(), [3]);
/// assert_eq!(b.to_vec::<f32>()?, [2.0, 4.0, 6.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "arrays are lazy: an unused array computes nothing"]
pub struct Array {
    pub(crate) node: Arc<Node>,
}

pub(crate) struct Node {
    pub(crate) shape: Vec<i32>,
    pub(crate) dtype: DType,
    pub(crate) state: Mutex<State>,
    /// Whether the node depends on a transform's input (`transforms::trace`), and of which
    /// kind of transform: set when the node is built.
    pub(crate) traced: Traced,
    /// The op that computed the node, kept when it was evaluated inside a function being
    /// differentiated, so that the transform still sees the graph (MLX keeps it too).
    pub(crate) history: OnceLock<Arc<Op>>,
    /// A host array's copy on a GPU, made when an op there first read it.
    #[cfg(feature = "cuda")]
    pub(crate) uploaded: OnceLock<Arc<crate::gpu::GpuBuffer>>,
}

pub(crate) enum State {
    Pending {
        op: Arc<Op>,
    },
    Ready(Arc<Buffer>),
    /// Evaluated on a GPU: the data stays there until read.
    #[cfg(feature = "cuda")]
    OnGpu(Arc<crate::gpu::GpuBuffer>),
    Failed(Error),
}

/// One call of a primitive: its inputs and (weakly) its outputs.
pub(crate) struct Op {
    pub(crate) primitive: Arc<dyn Primitive>,
    pub(crate) inputs: Mutex<Vec<Array>>,
    pub(crate) outputs: OnceLock<Vec<Weak<Node>>>,
    /// The outputs' shapes and dtypes when there are several, so that a transform can stand
    /// in zeros of the right shape for one nobody holds any more.
    pub(crate) specs: Vec<(Vec<i32>, DType)>,
    /// The device the primitive runs on.
    pub(crate) device: crate::Device,
    /// Held while the primitive runs, so concurrent evaluations run it once.
    pub(crate) running: Mutex<()>,
}

impl Op {
    /// A call of `primitive` on `inputs`, on the device it runs on; its outputs are set once
    /// their nodes exist.
    fn new(
        primitive: Arc<dyn Primitive>,
        inputs: Vec<Array>,
        specs: Vec<(Vec<i32>, DType)>,
    ) -> Arc<Op> {
        let device = if primitive.host_only() {
            crate::Device::Cpu
        } else {
            crate::default_device()
        };
        Arc::new(Op {
            primitive,
            inputs: Mutex::new(inputs),
            outputs: OnceLock::new(),
            specs,
            device,
            running: Mutex::new(()),
        })
    }
}

/// `mark` joined with the marks of `inputs`: what a node built from them is marked.
fn joined_mark(mark: Traced, inputs: &[Array]) -> Traced {
    inputs
        .iter()
        .fold(mark, |traced, input| traced.join(input.node.traced))
}

impl Drop for Op {
    /// Frees a long unevaluated chain iteratively: the default recursive drop would overflow
    /// the stack after some ten thousand ops.
    fn drop(&mut self) {
        let mut pending: Vec<Array> =
            std::mem::take(self.inputs.get_mut().unwrap_or_else(|p| p.into_inner()));
        while let Some(array) = pending.pop() {
            let Ok(node) = Arc::try_unwrap(array.node) else {
                continue;
            };
            let state = node.state.into_inner().unwrap_or_else(|p| p.into_inner());
            if let State::Pending { op, .. } = state {
                if let Ok(mut op) = Arc::try_unwrap(op) {
                    pending.append(op.inputs.get_mut().unwrap_or_else(|p| p.into_inner()));
                }
            }
        }
    }
}

/// A pending node's primitive, its op's inputs, and every output of the op (`None` for an
/// output nobody holds any more).
pub(crate) type PendingParts = (Arc<dyn Primitive>, Vec<Array>, Vec<Option<Array>>);

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a kernel is caught and turned into a failed node, so a poisoned lock only
    // means another thread panicked elsewhere while holding it; the state itself is consistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Array {
    fn from_state(shape: Vec<i32>, dtype: DType, state: State) -> Array {
        Array::from_marked_state(shape, dtype, state, Traced::No)
    }

    fn from_marked_state(shape: Vec<i32>, dtype: DType, state: State, traced: Traced) -> Array {
        Array {
            node: Arc::new(Node {
                shape,
                dtype,
                state: Mutex::new(state),
                traced,
                history: OnceLock::new(),
                #[cfg(feature = "cuda")]
                uploaded: OnceLock::new(),
            }),
        }
    }

    /// An evaluated array over `buffer`.
    pub(crate) fn ready(shape: Vec<i32>, dtype: DType, buffer: Arc<Buffer>) -> Array {
        Array::from_state(shape, dtype, State::Ready(buffer))
    }

    /// A failed array carrying `error`: how ops outside this crate report bad input.
    pub fn failed(error: Error) -> Array {
        Array::from_state(Vec::new(), DType::F32, State::Failed(error))
    }

    /// A failed array for op `op` with `reason`, located at the caller.
    #[track_caller]
    pub fn invalid(op: &str, reason: impl Into<String>) -> Array {
        Array::failed(Error::invalid(op, reason, Location::caller()))
    }

    /// The outputs of one call of `primitive` on `inputs` (which then runs once for all of
    /// them). Inputs that already failed make every output fail with the first input's error.
    pub fn from_primitive_multi(
        primitive: Arc<dyn Primitive>,
        inputs: Vec<Array>,
        outputs: Vec<(Vec<i32>, DType)>,
    ) -> Vec<Array> {
        Array::from_primitive_marked(primitive, inputs, outputs, Traced::No)
    }

    /// [`Array::from_primitive_multi`] whose outputs are marked `mark` as well as with their
    /// inputs' marks (a transform's tracers are marked with the transform's kind).
    pub(crate) fn from_primitive_marked(
        primitive: Arc<dyn Primitive>,
        inputs: Vec<Array>,
        outputs: Vec<(Vec<i32>, DType)>,
        mark: Traced,
    ) -> Vec<Array> {
        if let Some(error) = inputs.iter().find_map(Array::known_error) {
            return outputs
                .iter()
                .map(|_| Array::failed(error.clone()))
                .collect();
        }
        let traced = joined_mark(mark, &inputs);
        let specs = if outputs.len() > 1 {
            outputs.clone()
        } else {
            Vec::new()
        };
        let op = Op::new(primitive, inputs, specs);
        let arrays: Vec<Array> = outputs
            .into_iter()
            .map(|(shape, dtype)| {
                Array::from_marked_state(shape, dtype, State::Pending { op: op.clone() }, traced)
            })
            .collect();
        let _ = op
            .outputs
            .set(arrays.iter().map(|a| Arc::downgrade(&a.node)).collect());
        arrays
    }

    /// [`Array::build`] for a primitive with one output.
    pub(crate) fn build1(
        primitive: Arc<dyn Primitive>,
        inputs: Vec<Array>,
        shape: Vec<i32>,
        dtype: DType,
    ) -> Array {
        Array::from_primitive(primitive, inputs, shape, dtype)
    }

    /// A lazy array computed by `primitive` from `inputs`, of `shape` and `dtype`: how crates
    /// built on the core (collectives, layers) add their own operations. Failed inputs make
    /// the result fail with their error.
    pub fn from_primitive(
        primitive: Arc<dyn Primitive>,
        inputs: Vec<Array>,
        shape: Vec<i32>,
        dtype: DType,
    ) -> Array {
        // The one-output case of `from_primitive_marked`, without its vectors of outputs:
        // small collectives and decoding steps build one such node per call.
        if let Some(error) = inputs.iter().find_map(Array::known_error) {
            return Array::failed(error);
        }
        let traced = joined_mark(Traced::No, &inputs);
        let op = Op::new(primitive, inputs, Vec::new());
        let array =
            Array::from_marked_state(shape, dtype, State::Pending { op: op.clone() }, traced);
        let _ = op.outputs.set(vec![Arc::downgrade(&array.node)]);
        array
    }

    /// For an unevaluated array: its primitive, its op's inputs and all the op's outputs
    /// (siblings included, in order). `None` once evaluated or failed.
    pub(crate) fn pending_parts(&self) -> Option<PendingParts> {
        let op = match &*lock(&self.node.state) {
            State::Pending { op } => op.clone(),
            _ => return None,
        };
        Some(Array::parts_of(&op))
    }

    /// [`Array::pending_parts`], or for an array evaluated inside a function being
    /// differentiated, the parts of the op that computed it: what a transform walks.
    pub(crate) fn traced_parts(&self) -> Option<PendingParts> {
        match self.pending_parts() {
            Some(parts) => Some(parts),
            None => self.node.history.get().map(|op| Array::parts_of(op)),
        }
    }

    fn parts_of(op: &Arc<Op>) -> PendingParts {
        let inputs = lock(&op.inputs).clone();
        let outputs = op
            .outputs
            .get()
            .map(|all| {
                all.iter()
                    .enumerate()
                    .map(|(i, weak)| match weak.upgrade() {
                        Some(node) => Some(Array { node }),
                        // Dropped: zeros of its shape stand in (it has no cotangent).
                        None => op
                            .specs
                            .get(i)
                            .map(|(shape, dtype)| crate::ops::zeros(shape, *dtype)),
                    })
                    .collect()
            })
            .unwrap_or_default();
        (op.primitive.clone(), inputs, outputs)
    }

    /// A key identifying the node (for maps keyed by graph node).
    pub(crate) fn node_key(&self) -> usize {
        Arc::as_ptr(&self.node) as usize
    }

    /// The error of an array known to have failed, without evaluating anything.
    pub(crate) fn known_error(&self) -> Option<Error> {
        match &*lock(&self.node.state) {
            State::Failed(error) => Some(error.clone()),
            _ => None,
        }
    }

    /// An array holding a copy of `data` with `shape`; a size mismatch gives a failed array.
    ///
    /// ```
    /// use nuvec_core::Array;
    /// let a = Array::from_slice(&[1i32, 2, 3, 4], &[2, 2]);
    /// assert_eq!(a.shape(), [2, 2]);
    /// assert!(Array::from_slice(&[1i32, 2, 3], &[2, 2]).check().is_err());
    /// ```
    #[track_caller]
    pub fn from_slice<T: Element>(data: &[T], shape: &[i32]) -> Array {
        match checked_size(shape) {
            Some(size) if size == data.len() => {
                Array::ready(shape.to_vec(), T::DTYPE, Arc::new(Buffer::from_slice(data)))
            }
            Some(size) => Array::invalid(
                "array",
                format!(
                    "{} values given for shape {shape:?}, which holds {size}",
                    data.len()
                ),
            ),
            None => Array::invalid(
                "array",
                format!("invalid shape {shape:?}: dims must be >= 0"),
            ),
        }
    }

    /// An array taking `data` with `shape` (moved into nuvec's aligned memory).
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[i32]) -> Array {
        Array::from_slice(&data, shape)
    }

    /// A 0-d array holding `value`.
    pub fn scalar<T: Element>(value: T) -> Array {
        Array::ready(Vec::new(), T::DTYPE, Arc::new(Buffer::from_slice(&[value])))
    }

    /// An array over a caller's container, read in place without a copy (the container is
    /// dropped when nuvec no longer needs it): MLX's `array(ptr, shape, dtype, deleter)`.
    ///
    /// ```
    /// use nuvec_core::Array;
    /// let weights: Vec<f32> = vec![0.5; 6];
    /// let a = Array::from_owner(weights, &[2, 3]);
    /// assert_eq!(a.sum(None, false).item::<f32>()?, 3.0);
    /// # Ok::<(), nuvec_core::Error>(())
    /// ```
    #[track_caller]
    pub fn from_owner<T: Element, O: AsRef<[T]> + Send + 'static>(
        owner: O,
        shape: &[i32],
    ) -> Array {
        let len = owner.as_ref().len();
        if T::DTYPE == DType::Bool {
            // bool memory must hold only 0 and 1; copying validates it.
            let values: Vec<T> = owner.as_ref().to_vec();
            return Array::from_vec(values, shape);
        }
        match checked_size(shape) {
            Some(size) if size == len => Array::ready(
                shape.to_vec(),
                T::DTYPE,
                Arc::new(Buffer::from_owner(owner)),
            ),
            _ => Array::invalid("array", format!("{len} values given for shape {shape:?}")),
        }
    }

    /// The dims, as MLX's `i32`s.
    pub fn shape(&self) -> &[i32] {
        &self.node.shape
    }

    /// The length of axis `axis` (negative counts from the end); `None` when out of range.
    pub fn dim(&self, axis: i32) -> Option<i32> {
        let ndim = self.ndim() as i32;
        let axis = if axis < 0 { axis + ndim } else { axis };
        (0..ndim)
            .contains(&axis)
            .then(|| self.node.shape[axis as usize])
    }

    /// Number of dims.
    pub fn ndim(&self) -> usize {
        self.node.shape.len()
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.node.shape.iter().map(|&d| d as usize).product()
    }

    /// Bytes of the elements.
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype().size()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.node.dtype
    }

    /// The dims as `usize`.
    pub(crate) fn dims(&self) -> Vec<usize> {
        self.node.shape.iter().map(|&d| d as usize).collect()
    }

    /// Whether both handles name the same node.
    pub fn same_node(&self, other: &Array) -> bool {
        Arc::ptr_eq(&self.node, &other.node)
    }

    /// Whether the array has been computed (or failed).
    pub fn is_evaluated(&self) -> bool {
        !matches!(&*lock(&self.node.state), State::Pending { .. })
    }

    /// Computes the array (and everything it depends on).
    pub fn eval(&self) -> Result<()> {
        crate::eval::eval(std::slice::from_ref(self))
    }

    /// Returns the error this array would give when evaluated, computing it if needed.
    pub fn check(&self) -> Result<()> {
        self.eval()
    }

    /// The error of an array known to have failed, without evaluating anything: an op refused
    /// when it was built (shapes, axes, dtypes: what MLX raises at once), or one that already
    /// failed while computing. `None` for a pending or computed array; [`Array::check`]
    /// evaluates to find errors that only computing shows.
    ///
    /// ```
    /// use nuvec_core::{array, ops};
    /// let bad = ops::matmul(&array![[1.0, 2.0]], &array![[1.0, 2.0]]);
    /// assert!(bad.build_error().unwrap().to_string().starts_with("[matmul]"));
    /// assert!(ops::exp(&array![1.0]).build_error().is_none());
    /// ```
    pub fn build_error(&self) -> Option<Error> {
        self.known_error()
    }

    /// Where the array is computed (pending) or where its data lives (evaluated); a failed
    /// array reports the CPU.
    ///
    /// ```
    /// use nuvec_core::{array, with_default_device, Device};
    /// let a = with_default_device(Device::Cpu, || &array![1.0f32, 2.0] * 2.0);
    /// assert_eq!(a.device(), Device::Cpu);
    /// ```
    pub fn device(&self) -> crate::Device {
        match &*lock(&self.node.state) {
            State::Pending { op } => op.device,
            #[cfg(feature = "cuda")]
            State::OnGpu(data) => data.device(),
            State::Ready(_) | State::Failed(_) => crate::Device::Cpu,
        }
    }

    /// The evaluated buffer.
    pub(crate) fn buffer(&self) -> Result<Arc<Buffer>> {
        self.eval()?;
        match &*lock(&self.node.state) {
            State::Ready(buffer) => Ok(buffer.clone()),
            #[cfg(feature = "cuda")]
            State::OnGpu(data) => data.to_host(),
            State::Failed(error) => Err(error.clone()),
            State::Pending { op, .. } => Err(Error::eval(
                op.primitive.name(),
                "still pending after evaluation",
            )),
        }
    }

    /// The single element, as `T` (which must be the array's dtype).
    ///
    /// ```
    /// use nuvec_core::array;
    /// assert_eq!(array![1, 2, 3].sum(None, false).item::<i32>()?, 6);
    /// # Ok::<(), nuvec_core::Error>(())
    /// ```
    pub fn item<T: Element>(&self) -> Result<T> {
        self.check_read::<T>("item")?;
        if self.size() != 1 {
            return Err(Error::invalid(
                "item",
                format!(
                    "item() needs an array of one element, got shape {:?}",
                    self.shape()
                ),
                Location::caller(),
            ));
        }
        Ok(self.buffer()?.as_slice::<T>()[0])
    }

    /// The elements in row-major order, as `T` (which must be the array's dtype).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_read::<T>("to_vec")?;
        let buffer = self.buffer()?;
        Ok(buffer.as_slice::<T>()[..self.size()].to_vec())
    }

    fn check_read<T: Element>(&self, op: &'static str) -> Result<()> {
        if let Some(error) = self.known_error() {
            return Err(error);
        }
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                actual: self.dtype(),
                requested: T::DTYPE,
            });
        }
        Ok(())
    }
}

/// The number of elements of `shape`, or `None` when a dim is negative or the product overflows.
pub(crate) fn checked_size(shape: &[i32]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*lock(&self.node.state) {
            State::Pending { op, .. } => format!("pending {}", op.primitive.name()),
            State::Ready(_) => "ready".to_string(),
            #[cfg(feature = "cuda")]
            State::OnGpu(data) => format!("ready on {}", data.device()),
            State::Failed(error) => format!("failed: {error}"),
        };
        f.debug_struct("Array")
            .field("shape", &self.shape())
            .field("dtype", &self.dtype())
            .field("state", &state)
            .finish()
    }
}

macro_rules! from_scalar {
    ($($t:ty),*) => {$(
        impl From<$t> for Array {
            fn from(value: $t) -> Array {
                Array::scalar(value)
            }
        }
    )*};
}
from_scalar!(
    bool,
    u8,
    u16,
    u32,
    u64,
    i8,
    i16,
    i32,
    i64,
    f32,
    f64,
    nuvec_cpu::f16,
    nuvec_cpu::bf16
);

impl From<&Array> for Array {
    fn from(value: &Array) -> Array {
        value.clone()
    }
}
