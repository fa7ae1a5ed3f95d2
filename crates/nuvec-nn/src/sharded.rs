//! Tensor-parallel linear layers, as `mlx.nn`'s: [`AllToShardedLinear`] keeps each rank's
//! slice of the output features, [`ShardedToAllLinear`] each rank's slice of the input
//! features and sums the partial products with one `all_sum`. A pair splits an MLP (or
//! attention's projections by heads) with one collective per pair. Both hold full-precision
//! or quantized weights; [`shard_linear`] and [`shard_inplace`] shard fused weights (QKV)
//! segment by segment.
//!
//! The specification's example, as written there:
//!
//! ```
//! use nuvec::distributed::Group;
//! use nuvec::{array, random};
//! use nuvec_nn::Linear;
//! use nuvec_nn::sharded::{AllToShardedLinear, ShardedToAllLinear};
//!
//! # fn main() -> nuvec::Result<()> {
//! random::seed(0);
//! let group = Group::single();
//! let up = AllToShardedLinear::from_linear(&Linear::new(4, 16), &group)?;
//! let down = ShardedToAllLinear::from_linear(&Linear::new(16, 4), &group)?;
//! let y = down.forward(&up.forward(&array![[1.0, 2.0, 3.0, 4.0]]));
//! assert_eq!(y.shape(), [1, 4]);
//! # Ok(())
//! # }
//! ```

use crate::layers::Linear;
use crate::quantized::QuantizedLinear;
use nuvec_core::distributed::{all_sum, sum_gradients, Group};
use nuvec_core::transforms::{ModuleState, Tree};
use nuvec_core::{ops, Array, Error, Result};
use nuvec_macros::Tree;
use std::panic::Location;

#[track_caller]
fn shard_error(layer: &str, reason: String) -> Error {
    Error::invalid(layer, reason, Location::caller())
}

/// A projection's weights: full precision, or MLX's affine quantization (packed along the
/// input features).
#[derive(Clone, Debug)]
pub enum Projection {
    /// `weight` `[out, in]`.
    Full {
        /// The weight.
        weight: Array,
    },
    /// Packed `weight` `[out, in·bits/32]`, `scales` and `biases` `[out, in/group_size]`.
    Quantized {
        /// The packed weight.
        weight: Array,
        /// Per-group scales.
        scales: Array,
        /// Per-group biases.
        biases: Array,
        /// Values per group.
        group_size: usize,
        /// Bits per value.
        bits: u32,
    },
}

impl Projection {
    /// `x · Wᵀ`.
    fn apply(&self, x: &Array) -> Array {
        match self {
            Projection::Full { weight } => ops::matmul(x, &ops::transpose(weight, None)),
            Projection::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
            } => ops::quantized_matmul(x, weight, scales, biases, true, *group_size, *bits),
        }
    }

    fn arrays(&self) -> Vec<(&'static str, &Array)> {
        match self {
            Projection::Full { weight } => vec![("weight", weight)],
            Projection::Quantized {
                weight,
                scales,
                biases,
                ..
            } => vec![("weight", weight), ("scales", scales), ("biases", biases)],
        }
    }

    /// The same projection with every array passed through `f` (name, array).
    fn map(&self, mut f: impl FnMut(&str, &Array) -> Result<Array>) -> Result<Projection> {
        Ok(match self {
            Projection::Full { weight } => Projection::Full {
                weight: f("weight", weight)?,
            },
            Projection::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
            } => Projection::Quantized {
                weight: f("weight", weight)?,
                scales: f("scales", scales)?,
                biases: f("biases", biases)?,
                group_size: *group_size,
                bits: *bits,
            },
        })
    }

    fn of_linear(linear: &Linear) -> Projection {
        Projection::Full {
            weight: linear.weight.clone(),
        }
    }

    fn of_quantized(layer: &QuantizedLinear) -> Projection {
        Projection::Quantized {
            weight: layer.weight.clone(),
            scales: layer.scales.clone(),
            biases: layer.biases.clone(),
            group_size: layer.group_size,
            bits: layer.bits,
        }
    }
}

impl Tree for Projection {
    fn flatten_into(&self, leaves: &mut Vec<Array>) {
        leaves.extend(self.arrays().into_iter().map(|(_, a)| a.clone()));
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        self.map(|_, _| {
            leaves.next().ok_or_else(|| Error::Transform {
                transform: "tree",
                reason: "fewer leaves than the tree has".into(),
            })
        })
    }

    fn structure(&self, key: &mut String) {
        match self {
            Projection::Full { .. } => key.push_str("full"),
            Projection::Quantized {
                group_size, bits, ..
            } => key.push_str(&format!("q{group_size}x{bits}")),
        }
    }

    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
        for (name, array) in self.arrays() {
            let path = nuvec_core::transforms::tree::join_path(prefix, name);
            leaves.push((path, array.clone()));
        }
    }
}

/// Which way a linear layer is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharding {
    /// Each rank keeps a slice of the output features (rows of the weight).
    AllToSharded,
    /// Each rank keeps a slice of the input features (columns of the weight).
    ShardedToAll,
}

/// Rank `rank`'s slice of `array` along `axis` into `size` parts, each of `segments`
/// equal segments split separately (fused weights such as QKV).
#[track_caller]
/// Rank `rank`'s part of `array` along `axis`; an error names the caller's line (`caller`:
/// the closures that call this cannot carry `#[track_caller]`).
fn shard(
    layer: &str,
    name: &str,
    array: &Array,
    axis: i32,
    (segments, rank, size, caller): (usize, usize, usize, &'static Location<'static>),
) -> Result<Array> {
    let ndim = array.ndim() as i32;
    let axis_index = if axis < 0 { ndim + axis } else { axis };
    if !(0..ndim).contains(&axis_index) {
        return Err(Error::invalid(
            layer,
            format!(
                "{name} of shape {:?} has no axis {axis} to split",
                array.shape()
            ),
            caller,
        ));
    }
    let axis_index = axis_index as usize;
    let length = array.shape()[axis_index] as usize;
    if !length.is_multiple_of(segments * size) {
        return Err(Error::invalid(
            layer,
            format!(
                "{name} has {length} along axis {axis}, which does not split into {segments} segment(s) over {size} ranks"
            ),
            caller,
        ));
    }
    let segment = length / segments;
    let part = segment / size;
    let pieces: Vec<Array> = (0..segments)
        .map(|s| {
            let start = (s * segment + rank * part) as i32;
            let mut starts = vec![0; ndim as usize];
            let mut stops = array.shape().to_vec();
            starts[axis_index] = start;
            stops[axis_index] = start + part as i32;
            ops::slice(array, &starts, &stops, &vec![1; ndim as usize])
        })
        .collect();
    Ok(if pieces.len() == 1 {
        pieces[0].clone()
    } else {
        ops::concatenate(&pieces, axis)
    })
}

/// Keeps rank `r`'s slice `r·out/n .. (r+1)·out/n` of the output features. Its input is
/// the full activation (its gradient all-summed through `sum_gradients`); its output is
/// this rank's slice of the features.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct AllToShardedLinear {
    /// This rank's rows of the projection (named `weight`, `scales`, `biases` as MLX's).
    #[tree(flatten)]
    pub projection: Projection,
    /// This rank's slice of the bias.
    pub bias: Option<Array>,
    /// The group the features are split over.
    #[tree(skip)]
    pub group: Group,
    /// Training mode and frozen parameters.
    #[tree(state)]
    pub state: ModuleState,
}

impl AllToShardedLinear {
    /// This rank's slice of `linear`; the output features must divide by the group size.
    #[track_caller]
    pub fn from_linear(linear: &Linear, group: &Group) -> Result<AllToShardedLinear> {
        Self::split(
            &Projection::of_linear(linear),
            linear.bias.as_ref(),
            1,
            group,
        )
    }

    /// This rank's slice of a quantized layer.
    #[track_caller]
    pub fn from_quantized(layer: &QuantizedLinear, group: &Group) -> Result<AllToShardedLinear> {
        Self::split(
            &Projection::of_quantized(layer),
            layer.bias.as_ref(),
            1,
            group,
        )
    }

    #[track_caller]
    fn split(
        projection: &Projection,
        bias: Option<&Array>,
        segments: usize,
        group: &Group,
    ) -> Result<AllToShardedLinear> {
        let layer = "AllToShardedLinear";
        let at = (segments, group.rank(), group.size(), Location::caller());
        Ok(AllToShardedLinear {
            projection: projection.map(|name, a| shard(layer, name, a, 0, at))?,
            bias: bias.map(|b| shard(layer, "bias", b, -1, at)).transpose()?,
            group: *group,
            state: ModuleState::default(),
        })
    }

    /// This rank's slice of `x · Wᵀ + b`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let x = sum_gradients(x, Some(&self.group));
        let y = self.projection.apply(&x);
        match &self.bias {
            Some(bias) => y + bias,
            None => y,
        }
    }
}

/// Keeps rank `r`'s slice of the input features (columns of the weight). Its input is this
/// rank's slice of the features; the partial products are summed with one `all_sum`, then the
/// full bias is added once.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct ShardedToAllLinear {
    /// This rank's columns of the projection (named `weight`, `scales`, `biases`).
    #[tree(flatten)]
    pub projection: Projection,
    /// The whole bias, added after the sum.
    pub bias: Option<Array>,
    /// The group the features are split over.
    #[tree(skip)]
    pub group: Group,
    /// Training mode and frozen parameters.
    #[tree(state)]
    pub state: ModuleState,
}

impl ShardedToAllLinear {
    /// This rank's columns of `linear`; the input features must divide by the group size.
    #[track_caller]
    pub fn from_linear(linear: &Linear, group: &Group) -> Result<ShardedToAllLinear> {
        Self::split(
            &Projection::of_linear(linear),
            linear.bias.as_ref(),
            1,
            group,
        )
    }

    /// This rank's columns of a quantized layer: each rank's input features must be whole
    /// quantization groups.
    #[track_caller]
    pub fn from_quantized(layer: &QuantizedLinear, group: &Group) -> Result<ShardedToAllLinear> {
        Self::split(
            &Projection::of_quantized(layer),
            layer.bias.as_ref(),
            1,
            group,
        )
    }

    #[track_caller]
    fn split(
        projection: &Projection,
        bias: Option<&Array>,
        segments: usize,
        group: &Group,
    ) -> Result<ShardedToAllLinear> {
        let layer = "ShardedToAllLinear";
        let at = (segments, group.rank(), group.size(), Location::caller());
        if let Projection::Quantized {
            weight,
            group_size,
            bits,
            ..
        } = projection
        {
            let inputs = weight.shape().last().map_or(0, |&w| w as usize) * 32 / *bits as usize;
            let parts = segments * group.size();
            if !inputs.is_multiple_of(parts) || !(inputs / parts).is_multiple_of(*group_size) {
                return Err(shard_error(
                    layer,
                    format!(
                        "{inputs} quantized input features in {parts} parts are not whole groups of {group_size}"
                    ),
                ));
            }
        }
        Ok(ShardedToAllLinear {
            projection: projection.map(|name, a| shard(layer, name, a, -1, at))?,
            bias: bias.cloned(),
            group: *group,
            state: ModuleState::default(),
        })
    }

    /// `Σ_ranks x_r · W_rᵀ + b`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let partial = self.projection.apply(x);
        let y = all_sum(&partial, Some(&self.group));
        match &self.bias {
            Some(bias) => y + bias,
            None => y,
        }
    }
}

/// A linear layer split by [`shard_linear`].
#[derive(Clone, Debug)]
pub enum ShardedLinear {
    /// Output features split.
    AllToSharded(AllToShardedLinear),
    /// Input features split.
    ShardedToAll(ShardedToAllLinear),
}

impl ShardedLinear {
    /// The layer applied to `x`.
    pub fn forward(&self, x: &Array) -> Array {
        match self {
            ShardedLinear::AllToSharded(l) => l.forward(x),
            ShardedLinear::ShardedToAll(l) => l.forward(x),
        }
    }
}

/// The layer for this rank of `linear` (full precision) split as `sharding`, its weight (and
/// bias) cut into `segments` equal parts first, each split over the ranks: MLX's
/// `shard_linear(module, sharding, segments)` for fused projections such as QKV.
#[track_caller]
pub fn shard_linear(
    linear: &Linear,
    sharding: Sharding,
    segments: usize,
    group: &Group,
) -> Result<ShardedLinear> {
    shard_projection(
        &Projection::of_linear(linear),
        linear.bias.as_ref(),
        sharding,
        segments,
        group,
    )
}

/// [`shard_linear`] for a quantized layer.
#[track_caller]
pub fn shard_quantized_linear(
    layer: &QuantizedLinear,
    sharding: Sharding,
    segments: usize,
    group: &Group,
) -> Result<ShardedLinear> {
    shard_projection(
        &Projection::of_quantized(layer),
        layer.bias.as_ref(),
        sharding,
        segments,
        group,
    )
}

#[track_caller]
fn shard_projection(
    projection: &Projection,
    bias: Option<&Array>,
    sharding: Sharding,
    segments: usize,
    group: &Group,
) -> Result<ShardedLinear> {
    let segments = segments.max(1);
    Ok(match sharding {
        Sharding::AllToSharded => ShardedLinear::AllToSharded(AllToShardedLinear::split(
            projection, bias, segments, group,
        )?),
        Sharding::ShardedToAll => ShardedLinear::ShardedToAll(ShardedToAllLinear::split(
            projection, bias, segments, group,
        )?),
    })
}

/// Cuts `linear`'s arrays in place to this rank's part, as MLX's `shard_inplace`: the
/// layer then computes only its part, and the caller does the communication.
#[track_caller]
pub fn shard_inplace(
    linear: &mut Linear,
    sharding: Sharding,
    segments: usize,
    group: &Group,
) -> Result<()> {
    let at = (
        segments.max(1),
        group.rank(),
        group.size(),
        Location::caller(),
    );
    let layer = "shard_inplace";
    match sharding {
        Sharding::AllToSharded => {
            linear.weight = shard(layer, "weight", &linear.weight, 0, at)?;
            if let Some(bias) = &linear.bias {
                linear.bias = Some(shard(layer, "bias", bias, -1, at)?);
            }
        }
        Sharding::ShardedToAll => {
            linear.weight = shard(layer, "weight", &linear.weight, -1, at)?;
        }
    }
    Ok(())
}
