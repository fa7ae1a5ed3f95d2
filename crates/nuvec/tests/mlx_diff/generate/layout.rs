//! Generators of layout and indexing ops (reshape, transpose, slices, concatenation, take and
//! friends) and of matrix products, whose argument shapes the builder must make fit.

use serde_json::{json, Value};

use super::{is_float, promote, Builder, Known};

impl Builder<'_> {
    pub(super) fn layout(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let rank = known.shape.len();
        let size: usize = known.shape.iter().product();
        match self.rng.below(7) {
            0 if rank >= 2 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    let j = self.rng.below(i + 1);
                    perm.swap(i, j);
                }
                let shape = perm.iter().map(|&p| known.shape[p]).collect();
                self.push(
                    json!({"op": "transpose", "args": [a], "perm": perm}),
                    Known {
                        shape,
                        dtype: known.dtype,
                    },
                );
            }
            1 => {
                let shape: Vec<i64> = if rank >= 2 && self.rng.chance(0.5) {
                    vec![known.shape[0] as i64, -1]
                } else if self.rng.chance(0.05) {
                    vec![size as i64 + 1]
                } else {
                    vec![size as i64]
                };
                let out = if shape.len() == 2 {
                    vec![known.shape[0], size / known.shape[0].max(1)]
                } else {
                    vec![size]
                };
                self.push(
                    json!({"op": "reshape", "args": [a], "shape": shape}),
                    Known {
                        shape: out,
                        dtype: known.dtype,
                    },
                );
            }
            2 => {
                let at = self.rng.below(rank + 1);
                let mut shape = known.shape.clone();
                shape.insert(at, 1);
                self.push(
                    json!({"op": "expand_dims", "args": [a], "axes": [at]}),
                    Known {
                        shape,
                        dtype: known.dtype,
                    },
                );
            }
            3 => {
                let ones: Vec<usize> = (0..rank).filter(|&i| known.shape[i] == 1).collect();
                let (axes, shape) = if ones.is_empty() || self.rng.chance(0.3) {
                    let shape = known.shape.iter().copied().filter(|&d| d != 1).collect();
                    (Value::Null, shape)
                } else {
                    let at = *self.rng.pick(&ones);
                    let mut shape = known.shape.clone();
                    shape.remove(at);
                    (json!([at]), shape)
                };
                self.push(
                    json!({"op": "squeeze", "args": [a], "axes": axes}),
                    Known {
                        shape,
                        dtype: known.dtype,
                    },
                );
            }
            4 => {
                let mut shape: Vec<usize> = known
                    .shape
                    .iter()
                    .map(|&d| if d == 1 && self.rng.chance(0.5) { 3 } else { d })
                    .collect();
                if self.rng.chance(0.5) {
                    shape.insert(0, 2);
                }
                self.push(
                    json!({"op": "broadcast_to", "args": [a], "shape": shape}),
                    Known {
                        shape,
                        dtype: known.dtype,
                    },
                );
            }
            5 if rank >= 2 => {
                let (x, y) = (self.axis(rank), self.axis(rank));
                let mut shape = known.shape.clone();
                shape.swap(
                    x.rem_euclid(rank as i64) as usize,
                    y.rem_euclid(rank as i64) as usize,
                );
                self.push(
                    json!({"op": "swapaxes", "args": [a], "axis1": x, "axis2": y}),
                    Known {
                        shape,
                        dtype: known.dtype,
                    },
                );
            }
            _ => self.concatenate(a),
        }
    }

    pub(super) fn concatenate(&mut self, a: usize) {
        let known = self.values[a].clone();
        let rank = known.shape.len();
        if rank == 0 {
            return self.unary();
        }
        let axis = self.axis(rank);
        let at = axis.rem_euclid(rank as i64) as usize;
        let fits: Vec<usize> = (0..self.values.len())
            .filter(|&b| {
                let other = &self.values[b].shape;
                other.len() == rank && (0..rank).all(|i| i == at || other[i] == known.shape[i])
            })
            .collect();
        let b = *self.rng.pick(&fits);
        let mut shape = known.shape.clone();
        shape[at] += self.values[b].shape[at];
        let dtype = promote(known.dtype, self.values[b].dtype);
        self.push(
            json!({"op": "concatenate", "args": [a, b], "axis": axis}),
            Known { shape, dtype },
        );
    }

    pub(super) fn index(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let rank = known.shape.len();
        if rank == 0 || known.shape.contains(&0) {
            return self.unary();
        }
        if self.rng.chance(0.5) {
            let (mut start, mut stop, mut strides, mut shape) = (vec![], vec![], vec![], vec![]);
            for &d in &known.shape {
                let s = self.rng.below(d);
                let e = s + 1 + self.rng.below(d - s);
                let step = 1 + self.rng.below(2);
                start.push(s);
                stop.push(e);
                strides.push(step);
                shape.push((e - s).div_ceil(step));
            }
            self.push(
                json!({"op": "slice", "args": [a], "start": start, "stop": stop, "strides": strides}),
                Known { shape, dtype: known.dtype },
            );
        } else {
            let flat = self.rng.chance(0.2);
            let (axis, extent) = if flat {
                (Value::Null, known.shape.iter().product::<usize>())
            } else {
                let axis = self.axis(rank);
                (
                    json!(axis),
                    known.shape[axis.rem_euclid(rank as i64) as usize],
                )
            };
            let count = 1 + self.rng.below(4);
            let indices: Vec<i64> = (0..count)
                .map(|_| {
                    let i = self.rng.below(extent) as i64;
                    if self.rng.chance(0.2) {
                        i - extent as i64
                    } else {
                        i
                    }
                })
                .collect();
            let shape = if flat {
                vec![count]
            } else {
                let at = axis.as_i64().unwrap_or(0).rem_euclid(rank as i64) as usize;
                let mut shape = known.shape.clone();
                shape[at] = count;
                shape
            };
            self.push(
                json!({"op": "take", "args": [a], "axis": axis, "indices": indices}),
                Known {
                    shape,
                    dtype: known.dtype,
                },
            );
        }
    }

    pub(super) fn matmul(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let rank = known.shape.len();
        if rank == 0 {
            return self.unary();
        }
        let dtype = if is_float(known.dtype) {
            known.dtype
        } else {
            "float32"
        };
        if rank == 1 {
            self.push(
                json!({"op": "matmul", "args": [a, a]}),
                Known {
                    shape: vec![],
                    dtype,
                },
            );
            return;
        }
        let t = self.push(
            json!({"op": "swapaxes", "args": [a], "axis1": -1, "axis2": -2}),
            Known {
                shape: {
                    let mut s = known.shape.clone();
                    s.swap(rank - 1, rank - 2);
                    s
                },
                dtype: known.dtype,
            },
        );
        let mut shape = known.shape.clone();
        shape[rank - 1] = known.shape[rank - 2];
        self.push(
            json!({"op": "matmul", "args": [a, t]}),
            Known { shape, dtype },
        );
    }
}
