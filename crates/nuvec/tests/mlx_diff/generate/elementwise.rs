//! Element-wise op generators: unary and binary ops, scalar operands, `where`, `clip` and
//! casts. The output's shape is the arguments' broadcast, its dtype MLX's promotion.

use serde_json::{json, Value};

use super::{broadcast, is_float, promote, Builder, Known, Rng};

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

impl Builder<'_> {
    pub(super) fn unary(&mut self) {
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

    pub(super) fn binary(&mut self) {
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

    pub(super) fn scalar(&mut self) {
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

    pub(super) fn where_(&mut self) {
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

    pub(super) fn clip(&mut self) {
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

    pub(super) fn astype(&mut self) {
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
}
