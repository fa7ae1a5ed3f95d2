//! Random programs from a seed: one to three inputs of random shapes (rank 0 to 3, sometimes
//! empty) and dtypes, one to six ops chosen to fit their arguments' shapes most of the time
//! (broadcasting, reductions, scans, sorts, indexing, layout, matrix products, casts), and zero
//! to three transforms nested in random order. Values come from a small palette, with zeros,
//! ties, infinities and NaN, where gradients have their edge cases. A few programs are invalid
//! on purpose (mismatched shapes, bad axes, bad argnums or in_axes): MLX's refusals are
//! behaviours too.
//!
//! This file holds the seed's random numbers, the builder's bookkeeping of shapes and dtypes,
//! the inputs and the transforms; the op generators are split by family:
//! - `elementwise.rs`: unary and binary ops, scalars, `where`, `clip`, casts;
//! - `reductions.rs`: reductions, arg-reductions, scans, softmax and sorts;
//! - `layout.rs`: reshapes, transposes, slices, concatenation, indexing, matrix products.
//!
//! The split moves code only: a seed gives the same program as before it.

mod elementwise;
mod layout;
mod reductions;

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
