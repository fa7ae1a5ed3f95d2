//! `custom_function` (a function with its own vjp, jvp or vmap rules) and `checkpoint` (a
//! function whose intermediate values are recomputed for the backward pass instead of kept).
//!
//! Both wrap the function's outputs in a `Custom` node whose inputs are the function's inputs
//! followed by its outputs. Evaluation passes the outputs through; the transforms see the
//! node's rules, never the function's own graph.

use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::Buffer;
use std::sync::Arc;

/// A function of arrays to arrays, shareable across threads.
type Function = Arc<dyn Fn(&[Array]) -> Vec<Array> + Send + Sync>;
/// `vjp(inputs, outputs, cotangents) -> input cotangents`.
type VjpRule = Arc<dyn Fn(&[Array], &[Array], &[Array]) -> Vec<Array> + Send + Sync>;
/// `jvp(inputs, tangents) -> output tangents` (a tangent for every input).
type JvpRule = Arc<dyn Fn(&[Array], &[Array]) -> Vec<Array> + Send + Sync>;
/// `vmap(inputs, axes) -> (outputs, output axes)`.
type VmapRule =
    Arc<dyn Fn(&[Array], &[Option<usize>]) -> (Vec<Array>, Vec<Option<usize>>) + Send + Sync>;

struct Custom {
    f: Function,
    inputs: usize,
    vjp: Option<VjpRule>,
    jvp: Option<JvpRule>,
    vmap: Option<VmapRule>,
}

impl std::fmt::Debug for Custom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custom")
            .field("inputs", &self.inputs)
            .field("vjp", &self.vjp.is_some())
            .field("jvp", &self.jvp.is_some())
            .field("vmap", &self.vmap.is_some())
            .finish()
    }
}

impl Primitive for Custom {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let _ = (gpu, outputs);
        Ok(inputs[self.inputs..]
            .iter()
            .map(|i| i.data.clone())
            .collect())
    }

    fn name(&self) -> &str {
        "custom_function"
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        Ok(inputs[self.inputs..]
            .iter()
            .map(|i| i.buffer().clone())
            .collect())
    }

    fn differentiates_input(&self, input: usize) -> bool {
        input < self.inputs
    }

    fn vjp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let primals = &inputs[..self.inputs];
        let grads = match &self.vjp {
            Some(rule) => rule(primals, outputs, cotangents),
            // Recompute the function from its inputs: nothing of the forward pass is kept.
            None => super::vjp(|x| (self.f)(x), primals, cotangents)?.1,
        };
        if grads.len() != self.inputs {
            return Err(crate::Error::Transform {
                transform: "vjp",
                reason: format!(
                    "the custom vjp returned {} cotangents for {} inputs",
                    grads.len(),
                    self.inputs
                ),
            });
        }
        Ok(argnums
            .iter()
            .map(|&i| match grads.get(i) {
                Some(g) if i < self.inputs => g.clone(),
                // The outputs' own graph gets nothing: the rule above is the whole gradient.
                _ => crate::ops::zeros_like(&inputs[i]),
            })
            .collect())
    }

    fn jvp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let primals = &inputs[..self.inputs];
        if let Some(rule) = &self.jvp {
            // The user's rule takes a tangent for every input (zeros where none was given).
            let full = crate::primitives::full_tangents(inputs, tangents, argnums);
            return Ok(rule(primals, &full[..self.inputs]));
        }
        // Only the inputs with tangents vary: zeros given to the others could meet an
        // infinite factor (0 · inf) and spoil the sum.
        let varying: Vec<usize> = argnums
            .iter()
            .copied()
            .filter(|&i| i < self.inputs)
            .collect();
        let given: Vec<Array> = argnums
            .iter()
            .zip(tangents)
            .filter(|(&i, _)| i < self.inputs)
            .map(|(_, t)| t.clone())
            .collect();
        let values: Vec<Array> = varying.iter().map(|&i| primals[i].clone()).collect();
        let function = |x: &[Array]| {
            let mut all = primals.to_vec();
            for (&i, value) in varying.iter().zip(x) {
                all[i] = value.clone();
            }
            (self.f)(&all)
        };
        Ok(super::jvp(function, &values, &given)?.1)
    }

    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok(match &self.vmap {
            Some(rule) => rule(&inputs[..self.inputs], &axes[..self.inputs]),
            // The outputs were batched along with the function's own graph.
            None => (inputs[self.inputs..].to_vec(), axes[self.inputs..].to_vec()),
        })
    }
}

/// A function with custom transform rules: build with [`custom_function`], add rules with
/// `with_vjp`, `with_jvp` and `with_vmap`, call with [`CustomFunction::call`].
#[derive(Clone)]
pub struct CustomFunction {
    f: Function,
    vjp: Option<VjpRule>,
    jvp: Option<JvpRule>,
    vmap: Option<VmapRule>,
}

impl std::fmt::Debug for CustomFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomFunction")
            .field("vjp", &self.vjp.is_some())
            .field("jvp", &self.jvp.is_some())
            .field("vmap", &self.vmap.is_some())
            .finish()
    }
}

/// Wraps `f` so that its transform rules can be replaced (MLX's `mx.custom_function`).
/// Without a rule, a transform uses `f`'s own graph (recomputed from the inputs for vjp).
///
/// ```
/// use nuvec_core::{array, ops, transforms::{custom_function, grad}, Array};
/// // exp whose gradient is clipped to 1 (a straight-through style rule).
/// let clipped = custom_function(|x| vec![ops::exp(&x[0])])
///     .with_vjp(|_inputs, _outputs, cotangents| vec![ops::minimum(&cotangents[0], 1.0)]);
/// let g = grad(|x: &[Array]| ops::sum(&(clipped.call(x)[0].clone() * 5.0), None, false))(&[array![0.0, 1.0]])?;
/// assert_eq!(g[0].to_vec::<f32>()?, [1.0, 1.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn custom_function(
    f: impl Fn(&[Array]) -> Vec<Array> + Send + Sync + 'static,
) -> CustomFunction {
    CustomFunction {
        f: Arc::new(f),
        vjp: None,
        jvp: None,
        vmap: None,
    }
}

impl CustomFunction {
    /// The vjp rule: `(inputs, outputs, cotangents) -> one cotangent per input`.
    pub fn with_vjp(
        mut self,
        rule: impl Fn(&[Array], &[Array], &[Array]) -> Vec<Array> + Send + Sync + 'static,
    ) -> Self {
        self.vjp = Some(Arc::new(rule));
        self
    }

    /// The jvp rule: `(inputs, tangents) -> one tangent per output` (a tangent for every
    /// input, zeros for those not differentiated).
    pub fn with_jvp(
        mut self,
        rule: impl Fn(&[Array], &[Array]) -> Vec<Array> + Send + Sync + 'static,
    ) -> Self {
        self.jvp = Some(Arc::new(rule));
        self
    }

    /// The batching rule: `(inputs, batch axes) -> (outputs, their batch axes)`.
    pub fn with_vmap(
        mut self,
        rule: impl Fn(&[Array], &[Option<usize>]) -> (Vec<Array>, Vec<Option<usize>>)
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.vmap = Some(Arc::new(rule));
        self
    }

    /// Calls the function: its outputs, behind a node carrying the custom rules.
    pub fn call(&self, inputs: &[Array]) -> Vec<Array> {
        let outputs = (self.f)(inputs);
        if outputs.is_empty() {
            return outputs;
        }
        let specs = outputs
            .iter()
            .map(|o| (o.shape().to_vec(), o.dtype()))
            .collect();
        let node_inputs = inputs.iter().chain(&outputs).cloned().collect();
        Array::from_primitive_multi(
            Arc::new(Custom {
                f: self.f.clone(),
                inputs: inputs.len(),
                vjp: self.vjp.clone(),
                jvp: self.jvp.clone(),
                vmap: self.vmap.clone(),
            }),
            node_inputs,
            specs,
        )
    }
}

/// `f` with its intermediate values recomputed during the backward pass instead of kept
/// from the forward pass (MLX's `mx.checkpoint`): less memory for one more forward
/// computation. The values and gradients are those of `f`.
///
/// ```
/// use nuvec_core::{array, ops, transforms::{checkpoint, grad}, Array};
/// let block = checkpoint(|x| vec![ops::sin(&ops::exp(&x[0]))]);
/// let g = grad(|x: &[Array]| ops::sum(&block(x)[0], None, false))(&[array![0.5]])?;
/// let expected = 0.5f32.exp().cos() * 0.5f32.exp();
/// assert!((g[0].item::<f32>()? - expected).abs() < 1e-6);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn checkpoint(
    f: impl Fn(&[Array]) -> Vec<Array> + Send + Sync + 'static,
) -> impl Fn(&[Array]) -> Vec<Array> {
    let wrapped = custom_function(f);
    move |inputs: &[Array]| wrapped.call(inputs)
}
