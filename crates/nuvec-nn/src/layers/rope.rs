//! `Rope`: rotary position embeddings, as MLX's `nn.RoPE` (`mx.fast.rope`).

use nuvec_core::transforms::ModuleState;
use nuvec_core::{ops, Array, DType};
use nuvec_macros::Tree;

/// Rotates pairs of the first `dims` features of each position by angles that grow with the
/// position: `(offset + p) · scale · base^(-2i/dims)` for pair `i`. Pairs are `(i, i + dims/2)`
/// by default, `(2i, 2i + 1)` when `traditional`. Features past `dims` pass through. Positions
/// run along the second-to-last axis.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct Rope {
    /// Features rotated (even).
    #[tree(skip)]
    pub dims: usize,
    /// Adjacent pairs instead of halves.
    #[tree(skip)]
    pub traditional: bool,
    /// The base of the frequencies (MLX's default 10 000).
    #[tree(skip)]
    pub base: f32,
    /// Multiplies the positions (MLX's default 1).
    #[tree(skip)]
    pub scale: f32,
    /// Training mode (unused: the layer has no parameters).
    #[tree(state)]
    pub state: ModuleState,
}

impl Rope {
    /// MLX's defaults: halves, base 10 000, scale 1.
    pub fn new(dims: usize) -> Rope {
        Rope::with_options(dims, false, 10_000.0, 1.0)
    }

    /// MLX's `RoPE(dims, traditional, base, scale)`.
    pub fn with_options(dims: usize, traditional: bool, base: f32, scale: f32) -> Rope {
        Rope {
            dims,
            traditional,
            base,
            scale,
            state: ModuleState::default(),
        }
    }

    /// `x` rotated, its positions starting at 0.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        self.forward_at(x, 0)
    }

    /// `x` rotated, its positions starting at `offset` (the tokens already in a cache).
    #[track_caller]
    pub fn forward_at(&self, x: &Array, offset: usize) -> Array {
        let shape = x.shape().to_vec();
        let ndim = shape.len();
        if ndim < 2 || !self.dims.is_multiple_of(2) || self.dims as i32 > shape[ndim - 1] {
            return Array::invalid(
                "rope",
                format!(
                    "needs an even dims of at most the last axis and an input of rank 2 or more, got dims {} for shape {shape:?}",
                    self.dims
                ),
            );
        }
        let (length, features, half) = (shape[ndim - 2], shape[ndim - 1], self.dims as i32 / 2);
        let dtype = x.dtype();
        // Angles [length, half]: positions times frequencies, in float32.
        let positions = ops::arange(
            offset as f64,
            (offset + length as usize) as f64,
            1.0,
            DType::F32,
        ) * self.scale;
        let exponents = ops::arange(0.0, half as f64, 1.0, DType::F32) * (-2.0 / self.dims as f64);
        let frequencies = ops::power(self.base as f64, &exponents);
        let angles = ops::matmul(
            &ops::reshape(&positions, &[length, 1]),
            &ops::reshape(&frequencies, &[1, half]),
        );
        let (cos, sin) = (ops::cos(&angles), ops::sin(&angles));
        let xf = x.astype(DType::F32);
        let rotated_part = last_axis(&xf, 0, self.dims as i32);
        let (x1, x2) = if self.traditional {
            let pairs = ops::reshape(&rotated_part, &[&shape[..ndim - 1], &[half, 2]].concat());
            let parts = ops::split(&pairs, 2, -1);
            (
                ops::squeeze(&parts[0], Some(&[-1])),
                ops::squeeze(&parts[1], Some(&[-1])),
            )
        } else {
            let parts = ops::split(&rotated_part, 2, -1);
            (parts[0].clone(), parts[1].clone())
        };
        let y1 = &x1 * &cos - &x2 * &sin;
        let y2 = &x1 * &sin + &x2 * &cos;
        let rotated = if self.traditional {
            let stacked = ops::stack(&[y1, y2], -1);
            ops::reshape(
                &stacked,
                &[&shape[..ndim - 1], &[self.dims as i32]].concat(),
            )
        } else {
            ops::concatenate(&[y1, y2], -1)
        };
        let out = if (self.dims as i32) < features {
            let rest = last_axis(&xf, self.dims as i32, features);
            ops::concatenate(&[rotated, rest], -1)
        } else {
            rotated
        };
        out.astype(dtype)
    }
}

/// `x[..., start..stop]`.
fn last_axis(x: &Array, start: i32, stop: i32) -> Array {
    let shape = x.shape();
    let mut starts = vec![0; shape.len()];
    let mut stops = shape.to_vec();
    let last = shape.len() - 1;
    starts[last] = start;
    stops[last] = stop;
    ops::slice(x, &starts, &stops, &vec![1; shape.len()])
}
