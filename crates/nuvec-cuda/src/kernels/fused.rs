//! `compile`'s fused element-wise chains as one kernel: each thread loads its elements
//! ([`PER_THREAD`] of them, in packs) of every input into registers, applies the chain's
//! steps in order (each rounded to the dtype as the unfused op would store it, so the results
//! are bit for bit the unfused kernels'), and stores the last.

#[cfg(doc)]
use super::elementwise::PER_THREAD;
use super::elementwise::{
    binary_expression, binary_helpers, contiguous, rounded, unary_expression, Operand,
};
use super::types::{compute, is_float, load, storage, store, tag, PRELUDE};
use super::{binary_output, Source};
use nuvec_cpu::binary::BinaryOp;
use nuvec_cpu::unary::UnaryOp;
use nuvec_cpu::DType;
use std::hash::{Hash, Hasher};

/// One step of a chain; operands are registers (the inputs first, then each step's result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `op(register)`.
    Unary(UnaryOp, usize),
    /// `op(register, register)`.
    Binary(BinaryOp, usize, usize),
}

/// The kernel of `steps` over `inputs` inputs of `dtype` (a float type), or `None` when a step
/// has no kernel for it or does not keep the dtype (a comparison). Input `k` is read at
/// `i * stride_k`: 1 for an input of the output's size, 0 for a scalar.
pub fn chain(steps: &[Step], inputs: usize, dtype: DType) -> Option<Source> {
    if !is_float(dtype) || steps.is_empty() {
        return None;
    }
    let (ts, tc) = (storage(dtype), compute(dtype));
    let mut body = String::new();
    for k in 0..inputs {
        body += &format!("        {tc} r{k} = {};\n", load(dtype, &format!("l{k}")));
    }
    for (j, step) in steps.iter().enumerate() {
        let r = inputs + j;
        let expression = match *step {
            Step::Unary(op, x) if x < r => {
                format!(
                    "{{ {tc} v = r{x}; r{r} = {}; }}",
                    rounded(dtype, &unary_expression(op, dtype)?)
                )
            }
            Step::Binary(op, a, b) if a < r && b < r && binary_output(op, dtype) == dtype => {
                format!(
                    "{{ {tc} a = r{a}; {tc} b = r{b}; r{r} = {}; }}",
                    rounded(dtype, &binary_expression(op, dtype)?)
                )
            }
            _ => return None,
        };
        body += &format!("        {tc} r{r};\n        {expression}\n");
    }
    let last = inputs + steps.len() - 1;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (steps, inputs, tag(dtype)).hash(&mut hasher);
    let name = format!("fused_{}_{:016x}", tag(dtype), hasher.finish());
    let params: String = (0..inputs)
        .map(|k| format!("const {ts}* __restrict__ x{k}, nv_u64 s{k}, "))
        .collect();
    let (pointers, strides): (Vec<String>, Vec<String>) = (0..inputs)
        .map(|k| (format!("x{k}"), format!("s{k}")))
        .unzip();
    let operands: Vec<Operand<'_>> = pointers
        .iter()
        .zip(&strides)
        .map(|(pointer, stride)| Operand {
            pointer,
            ty: ts,
            stride: Some(stride),
        })
        .collect();
    let output = Operand {
        pointer: "y",
        ty: ts,
        stride: None,
    };
    let text = format!(
        r#"{PRELUDE}{helpers}
extern "C" __global__ void {name}({params}{ts}* __restrict__ y, nv_u64 n) {{
{loops}}}
"#,
        helpers = binary_helpers(dtype),
        loops = contiguous(
            &operands,
            &output,
            &format!("{body}        out = {};", store(dtype, &format!("r{last}")))
        ),
    );
    Some(Source { name, text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_reads_scalars_by_a_zero_stride_and_rounds_each_step() {
        let steps = [
            Step::Binary(BinaryOp::Multiply, 0, 1),
            Step::Unary(UnaryOp::Tanh, 2),
        ];
        let source = chain(&steps, 2, DType::BF16).unwrap();
        assert!(source.text.contains("if (s1 == 0)"), "{}", source.text);
        assert!(source.text.contains("nv_f32_to_bf16"), "{}", source.text);
        assert_eq!(source, chain(&steps, 2, DType::BF16).unwrap());
        assert_ne!(source.name, chain(&steps, 2, DType::F32).unwrap().name);
    }

    #[test]
    fn a_chain_with_a_comparison_or_a_forward_reference_has_no_kernel() {
        let compare = [Step::Binary(BinaryOp::Less, 0, 1)];
        assert!(chain(&compare, 2, DType::F32).is_none());
        assert!(chain(&[Step::Unary(UnaryOp::Exp, 1)], 1, DType::F32).is_none());
        assert!(chain(&[Step::Unary(UnaryOp::Exp, 0)], 1, DType::I32).is_none());
    }
}
