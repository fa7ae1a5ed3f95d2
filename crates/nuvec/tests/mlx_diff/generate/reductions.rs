//! Generators of reductions (over all axes or a subset, `keepdims` or not), arg-reductions,
//! scans, softmax and sorts, the ops whose gradients have ties and zeros at their edges.

use serde_json::{json, Value};

use super::{is_float, Builder, Known};

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

impl Builder<'_> {
    /// Axes to reduce: all (`null`), or a non-empty subset.
    pub(super) fn axes(&mut self, rank: usize) -> (Value, Vec<usize>) {
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

    pub(super) fn reduce(&mut self) {
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

    pub(super) fn arg_reduce(&mut self) {
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

    pub(super) fn scan(&mut self) {
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

    pub(super) fn softmax_or_sort(&mut self) {
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
}
