//! Random programs from a seed: one to three inputs of random shapes (rank 0 to 3, sometimes
//! empty) and dtypes, one to six ops chosen to fit their arguments' shapes most of the time
//! (broadcasting, reductions, scans, sorts, indexing, layout, matrix products, casts), and zero
//! to three transforms nested in random order. Values come from a small palette, with zeros,
//! ties, infinities and NaN, where gradients have their edge cases. A few programs are invalid
//! on purpose (mismatched shapes, bad axes, bad argnums or in_axes): MLX's refusals are
//! behaviours too.
//!
//! One file on purpose (it is longer than 600 lines): every op generator shares the builder's
//! bookkeeping of shapes and dtypes; splitting it by op family is the next step.

use serde_json::{json, Value};

/// SplitMix64: a seed gives the same program on every machine.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// An index into `weights`, each chosen in proportion to its weight.
    pub(crate) fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut at = self.below(total as usize) as u32;
        for (i, &w) in weights.iter().enumerate() {
            if at < w {
                return i;
            }
            at -= w;
        }
        weights.len() - 1
    }
}

/// What the generator knows of a value: its shape and its dtype as far as it can tell.
#[derive(Clone, Debug)]
struct Known {
    shape: Vec<usize>,
    dtype: &'static str,
}

const FLOATS: [&str; 3] = ["float32", "float16", "bfloat16"];

fn is_float(dtype: &str) -> bool {
    FLOATS.contains(&dtype)
}

/// MLX's promotion, for the types the generator uses.
fn promote(a: &'static str, b: &'static str) -> &'static str {
    let rank = |d: &str| match d {
        "bool" => 0,
        "uint8" => 1,
        "int32" => 2,
        "bfloat16" => 3,
        "float16" => 3,
        _ => 4,
    };
    if a == b {
        a
    } else if (a == "float16" && b == "bfloat16") || (a == "bfloat16" && b == "float16") {
        "float32"
    } else if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let x = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let y = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (x, y) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

const UNARY: [&str; 33] = [
    "abs",
    "negative",
    "sign",
    "square",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "exp",
    "expm1",
    "log",
    "log1p",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "erf",
    "erfinv",
    "floor",
    "ceil",
    "stop_gradient",
    "isnan",
    "logical_not",
    "tan",
    "log2",
    "log10",
    "sinh",
    "cosh",
    "arcsin",
    "arccos",
    "arctan",
    "arcsinh",
    "arccosh",
    "arctanh",
];
const BINARY: [&str; 13] = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "power",
    "maximum",
    "minimum",
    "logaddexp",
    "greater",
    "less",
    "equal",
    "remainder",
    "floor_divide",
];
const REDUCTIONS: [&str; 9] = [
    "sum",
    "prod",
    "max",
    "min",
    "mean",
    "logsumexp",
    "var",
    "all",
    "any",
];

struct Builder<'r> {
    rng: &'r mut Rng,
    values: Vec<Known>,
    ops: Vec<Value>,
}

impl Builder<'_> {
    /// A value index, recent ones more often.
    fn value(&mut self) -> usize {
        let n = self.values.len();
        if self.rng.chance(0.6) {
            n - 1 - self.rng.below(n.min(2))
        } else {
            self.rng.below(n)
        }
    }

    fn push(&mut self, op: Value, known: Known) -> usize {
        self.ops.push(op);
        self.values.push(known);
        self.values.len() - 1
    }

    /// An axis of a rank-`rank` array, negative half the time.
    fn axis(&mut self, rank: usize) -> i64 {
        let axis = self.rng.below(rank.max(1)) as i64;
        if self.rng.chance(0.5) {
            axis - rank as i64
        } else {
            axis
        }
    }

    /// An axis that may be out of range (rarely): an invalid program on purpose.
    fn maybe_bad_axis(&mut self, rank: usize) -> i64 {
        if self.rng.chance(0.03) {
            rank as i64 + self.rng.below(2) as i64
        } else {
            self.axis(rank)
        }
    }

    fn unary(&mut self) {
        let a = self.value();
        let name = *self.rng.pick(&UNARY);
        let known = &self.values[a];
        let dtype = match name {
            "isnan" | "logical_not" => "bool",
            "abs" | "negative" | "sign" | "square" | "floor" | "ceil" | "stop_gradient" => {
                known.dtype
            }
            _ if is_float(known.dtype) => known.dtype,
            _ => "float32",
        };
        let known = Known {
            shape: known.shape.clone(),
            dtype,
        };
        self.push(json!({"op": name, "args": [a]}), known);
    }

    fn binary(&mut self) {
        let a = self.value();
        let candidates: Vec<usize> = (0..self.values.len())
            .filter(|&b| broadcast(&self.values[a].shape, &self.values[b].shape).is_some())
            .collect();
        let b = if candidates.is_empty() || self.rng.chance(0.03) {
            self.value()
        } else {
            *self.rng.pick(&candidates)
        };
        let (x, y) = (self.values[a].clone(), self.values[b].clone());
        let name = *self.rng.pick(&BINARY);
        let shape = broadcast(&x.shape, &y.shape).unwrap_or_else(|| x.shape.clone());
        let promoted = promote(x.dtype, y.dtype);
        let dtype = match name {
            "greater" | "less" | "equal" => "bool",
            "divide" | "logaddexp" if !is_float(promoted) => "float32",
            _ => promoted,
        };
        self.push(json!({"op": name, "args": [a, b]}), Known { shape, dtype });
    }

    fn scalar(&mut self) {
        let a = self.value();
        let name = if self.rng.chance(0.5) {
            "add_scalar"
        } else {
            "mul_scalar"
        };
        let value = if self.rng.chance(0.3) {
            json!(*self.rng.pick(&[-1i64, 2, 3]))
        } else {
            json!(*self.rng.pick(&[-2.0, -0.5, 0.5, 1.5, 2.0, 3.0]))
        };
        let known = self.values[a].clone();
        let dtype = if value.is_f64() && !is_float(known.dtype) {
            "float32"
        } else {
            known.dtype
        };
        self.push(
            json!({"op": name, "args": [a], "value": value}),
            Known {
                shape: known.shape,
                dtype,
            },
        );
    }

    fn where_(&mut self) {
        let bools: Vec<usize> = (0..self.values.len())
            .filter(|&i| self.values[i].dtype == "bool")
            .collect();
        let c = if bools.is_empty() || self.rng.chance(0.2) {
            self.value()
        } else {
            *self.rng.pick(&bools)
        };
        let (a, b) = (self.value(), self.value());
        let shape = broadcast(&self.values[c].shape, &self.values[a].shape)
            .and_then(|s| broadcast(&s, &self.values[b].shape))
            .unwrap_or_else(|| self.values[a].shape.clone());
        let dtype = promote(self.values[a].dtype, self.values[b].dtype);
        self.push(
            json!({"op": "where", "args": [c, a, b]}),
            Known { shape, dtype },
        );
    }

    /// Axes to reduce: all (`null`), or a non-empty subset.
    fn axes(&mut self, rank: usize) -> (Value, Vec<usize>) {
        if rank == 0 || self.rng.chance(0.3) {
            return (Value::Null, (0..rank).collect());
        }
        let mut chosen: Vec<usize> = (0..rank).filter(|_| self.rng.chance(0.5)).collect();
        if chosen.is_empty() {
            chosen.push(self.rng.below(rank));
        }
        let written: Vec<i64> = chosen
            .iter()
            .map(|&a| {
                if self.rng.chance(0.3) {
                    a as i64 - rank as i64
                } else {
                    a as i64
                }
            })
            .collect();
        (json!(written), chosen)
    }

    fn reduce(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let rank = known.shape.len();
        let name = *self.rng.pick(&REDUCTIONS);
        let keepdims = self.rng.chance(0.3);
        let (written, chosen) = self.axes(rank);
        let written = if self.rng.chance(0.03) {
            json!([rank + 1])
        } else {
            written
        };
        let shape: Vec<usize> = known
            .shape
            .iter()
            .enumerate()
            .filter_map(|(i, &d)| match (chosen.contains(&i), keepdims) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        let dtype = match name {
            "all" | "any" => "bool",
            "mean" | "logsumexp" | "var" if !is_float(known.dtype) => "float32",
            "sum" | "prod" if known.dtype == "bool" || known.dtype == "uint8" => "int32",
            _ => known.dtype,
        };
        self.push(
            json!({"op": name, "args": [a], "axes": written, "keepdims": keepdims}),
            Known { shape, dtype },
        );
    }

    fn arg_reduce(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let rank = known.shape.len();
        let name = if self.rng.chance(0.5) {
            "argmax"
        } else {
            "argmin"
        };
        let keepdims = self.rng.chance(0.3);
        let (axis, shape) = if rank == 0 || self.rng.chance(0.2) {
            (Value::Null, if keepdims { vec![1; rank] } else { vec![] })
        } else {
            let axis = self.maybe_bad_axis(rank);
            let at = axis.rem_euclid(rank as i64) as usize;
            let mut shape = known.shape.clone();
            if keepdims {
                shape[at.min(rank - 1)] = 1;
            } else if at < rank {
                shape.remove(at);
            }
            (json!(axis), shape)
        };
        self.push(
            json!({"op": name, "args": [a], "axis": axis, "keepdims": keepdims}),
            Known {
                shape,
                dtype: "uint32",
            },
        );
    }

    fn scan(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let rank = known.shape.len();
        let name = *self.rng.pick(&["cumsum", "cumprod", "cummax"]);
        let (axis, shape) = if rank == 0 || self.rng.chance(0.1) {
            (Value::Null, vec![known.shape.iter().product()])
        } else {
            (json!(self.maybe_bad_axis(rank)), known.shape.clone())
        };
        let dtype = if name != "cummax" && (known.dtype == "bool" || known.dtype == "uint8") {
            "int32"
        } else {
            known.dtype
        };
        let (reverse, inclusive) = (self.rng.chance(0.3), !self.rng.chance(0.3));
        self.push(
            json!({"op": name, "args": [a], "axis": axis, "reverse": reverse, "inclusive": inclusive}),
            Known { shape, dtype },
        );
    }

    fn softmax_or_sort(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let rank = known.shape.len();
        match self.rng.below(3) {
            0 => {
                let axes = if rank == 0 || self.rng.chance(0.3) {
                    Value::Null
                } else {
                    json!([self.axis(rank)])
                };
                let dtype = if is_float(known.dtype) {
                    known.dtype
                } else {
                    "float32"
                };
                self.push(
                    json!({"op": "softmax", "args": [a], "axes": axes}),
                    Known {
                        shape: known.shape,
                        dtype,
                    },
                );
            }
            pick => {
                let name = if pick == 1 { "sort" } else { "argsort" };
                let (axis, shape) = if rank == 0 || self.rng.chance(0.15) {
                    (Value::Null, vec![known.shape.iter().product()])
                } else {
                    (json!(self.maybe_bad_axis(rank)), known.shape.clone())
                };
                let dtype = if name == "sort" {
                    known.dtype
                } else {
                    "uint32"
                };
                self.push(
                    json!({"op": name, "args": [a], "axis": axis}),
                    Known { shape, dtype },
                );
            }
        }
    }

    fn clip(&mut self) {
        let a = self.value();
        let known = self.values[a].clone();
        let bound = |rng: &mut Rng| json!(*rng.pick(&[-1.0, -0.5, 0.0, 0.5, 1.0, 2.0]));
        let (lo, hi) = match self.rng.below(3) {
            0 => (bound(self.rng), Value::Null),
            1 => (Value::Null, bound(self.rng)),
            _ => (bound(self.rng), bound(self.rng)),
        };
        let dtype = if is_float(known.dtype) {
            known.dtype
        } else {
            "float32"
        };
        self.push(
            json!({"op": "clip", "args": [a], "lo": lo, "hi": hi}),
            Known {
                shape: known.shape,
                dtype,
            },
        );
    }

    fn layout(&mut self) {
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

    fn concatenate(&mut self, a: usize) {
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

    fn index(&mut self) {
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

    fn astype(&mut self) {
        let a = self.value();
        let dtype = *self
            .rng
            .pick(&["float32", "float16", "bfloat16", "int32", "bool", "uint8"]);
        let shape = self.values[a].shape.clone();
        self.push(
            json!({"op": "astype", "args": [a], "dtype": dtype}),
            Known { shape, dtype },
        );
    }

    fn matmul(&mut self) {
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

    fn op(&mut self) {
        match self
            .rng
            .weighted(&[20, 20, 6, 4, 14, 4, 6, 6, 4, 10, 8, 4, 4])
        {
            0 => self.unary(),
            1 => self.binary(),
            2 => self.scalar(),
            3 => self.where_(),
            4 => self.reduce(),
            5 => self.arg_reduce(),
            6 => self.scan(),
            7 => self.softmax_or_sort(),
            8 => self.clip(),
            9 => self.layout(),
            10 => self.index(),
            11 => self.astype(),
            _ => self.matmul(),
        }
    }
}

fn dtype(rng: &mut Rng) -> &'static str {
    let dtypes = ["float32", "float16", "bfloat16", "int32", "bool", "uint8"];
    dtypes[rng.weighted(&[60, 8, 8, 14, 5, 5])]
}

fn shape(rng: &mut Rng, like: Option<&[usize]>) -> Vec<usize> {
    if let Some(like) = like {
        match rng.weighted(&[50, 20, 15, 15]) {
            0 => return like.to_vec(),
            1 => return like[rng.below(like.len() + 1)..].to_vec(),
            2 => {
                return like
                    .iter()
                    .map(|&d| if rng.chance(0.5) { 1 } else { d })
                    .collect()
            }
            _ => {}
        }
    }
    let rank = rng.weighted(&[10, 30, 40, 20]);
    (0..rank)
        .map(|_| {
            if rng.chance(0.03) {
                0
            } else {
                1 + rng.below(4)
            }
        })
        .collect()
}

fn data(rng: &mut Rng, dtype: &str, size: usize, special: bool) -> Vec<Value> {
    (0..size)
        .map(|_| match dtype {
            "bool" => json!(rng.chance(0.5)),
            "uint8" => json!(rng.below(6)),
            "int32" => json!(rng.below(7) as i64 - 3),
            _ => {
                if special && rng.chance(0.1) {
                    json!(*rng.pick(&["nan", "inf", "-inf"]))
                } else {
                    json!(*rng.pick(&[-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0]))
                }
            }
        })
        .collect()
}

fn transform(rng: &mut Rng, inputs: usize) -> Value {
    match rng.weighted(&[25, 15, 15, 25, 10, 10]) {
        0 => {
            let mut argnums: Vec<usize> = (0..inputs).filter(|_| rng.chance(0.5)).collect();
            if argnums.is_empty() {
                argnums.push(rng.below(inputs));
            }
            if rng.chance(0.04) {
                match rng.below(3) {
                    0 => argnums.clear(),
                    1 => argnums.push(argnums[0]),
                    _ => argnums.push(inputs),
                }
            }
            json!({"kind": "grad", "argnums": argnums})
        }
        1 => json!({"kind": "vjp"}),
        2 => json!({"kind": "jvp"}),
        3 => {
            let mut in_axes: Vec<Value> = (0..inputs)
                .map(|_| {
                    if rng.chance(0.75) {
                        json!(0)
                    } else {
                        Value::Null
                    }
                })
                .collect();
            if rng.chance(0.03) {
                in_axes.push(json!(0));
            }
            json!({"kind": "vmap", "in_axes": in_axes})
        }
        4 => json!({"kind": "compile"}),
        _ => json!({"kind": "checkpoint"}),
    }
}

/// The program of `seed`.
pub(crate) fn program(seed: u64) -> Value {
    let mut rng = Rng::new(seed);
    let count = 1 + rng.weighted(&[40, 40, 20]);
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    let mut dtypes = Vec::new();
    for i in 0..count {
        let like = (i > 0).then(|| shapes[0].clone());
        shapes.push(shape(&mut rng, like.as_deref()));
        dtypes.push(dtype(&mut rng));
    }
    let mut builder = Builder {
        rng: &mut rng,
        values: shapes
            .iter()
            .zip(&dtypes)
            .map(|(s, d)| Known {
                shape: s.clone(),
                dtype: d,
            })
            .collect(),
        ops: Vec::new(),
    };
    let ops = 1 + builder.rng.below(6);
    for _ in 0..ops {
        builder.op();
    }
    let (values, ops) = (builder.values.len(), builder.ops);
    let mut outputs = vec![values - 1];
    if rng.chance(0.3) {
        let other = rng.below(values);
        if other != values - 1 {
            outputs.push(other);
        }
    }
    let transforms: Vec<Value> = (0..rng.weighted(&[25, 40, 25, 10]))
        .map(|_| transform(&mut rng, count))
        .collect();
    // Each vmap adds a batch axis in front of the inputs it maps, outermost first.
    for t in &transforms {
        if t["kind"] == "vmap" {
            let batch = 2 + rng.below(2);
            for (shape, axis) in shapes
                .iter_mut()
                .zip(t["in_axes"].as_array().into_iter().flatten())
            {
                if !axis.is_null() {
                    shape.insert(0, batch);
                }
            }
        }
    }
    let special = rng.chance(0.2);
    let inputs: Vec<Value> = shapes
        .iter()
        .zip(&dtypes)
        .map(|(shape, dtype)| {
            let size = shape.iter().product();
            json!({"dtype": dtype, "shape": shape, "data": data(&mut rng, dtype, size, special)})
        })
        .collect();
    json!({"inputs": inputs, "ops": ops, "outputs": outputs, "transforms": transforms})
}
