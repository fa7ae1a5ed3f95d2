//! Compile's fusion pass: chains of element-wise float ops whose intermediate values nothing
//! else reads become one `Fused` step (see `primitives/fused.rs`).

use super::compile::{remove_unused, Program, Source, Step};
use crate::primitives::binary::Binary;
use crate::primitives::fused::{Fused, Step as FusedStep};
use crate::primitives::unary::Unary;
use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The fused form of a step, if it can join a chain.
fn fusible(step: &Step) -> Option<FusedStep> {
    let (_, dtype) = step.outputs.first()?;
    if step.outputs.len() != 1 || !dtype.is_float() {
        return None;
    }
    let any = step.primitive.as_ref() as &dyn Any;
    if let Some(unary) = any.downcast_ref::<Unary>() {
        return Some(FusedStep::Unary(unary.0, 0));
    }
    match any.downcast_ref::<Binary>() {
        Some(binary) if !binary.0.is_predicate() => Some(FusedStep::Binary(binary.0, 0, 1)),
        _ => None,
    }
}

/// How many times each step's output is read (by steps or as a program output).
fn readers(program: &Program) -> Vec<usize> {
    let mut count = vec![0; program.steps.len()];
    for source in program
        .steps
        .iter()
        .flat_map(|s| s.inputs.iter())
        .chain(&program.outputs)
    {
        if let Source::Step(s, _) = source {
            count[*s] += 1;
        }
    }
    count
}

/// Replaces every chain of two or more fusible steps by one `Fused` step.
pub(crate) fn fuse(program: &mut Program) {
    let readers = readers(program);
    let mut taken = vec![false; program.steps.len()];
    for root in (0..program.steps.len()).rev() {
        if taken[root] || fusible(&program.steps[root]).is_none() {
            continue;
        }
        let shape = program.steps[root].outputs[0].clone();
        // Grow the group from the root towards its producers while every reader of a new
        // member is already in the group.
        let mut members: BTreeSet<usize> = BTreeSet::from([root]);
        loop {
            let mut reads: HashMap<usize, usize> = HashMap::new();
            for &m in &members {
                for source in &program.steps[m].inputs {
                    if let Source::Step(p, 0) = source {
                        *reads.entry(*p).or_default() += 1;
                    }
                }
            }
            let joining: Vec<usize> = reads
                .iter()
                .filter(|&(&p, &n)| {
                    !members.contains(&p)
                        && !taken[p]
                        && readers[p] == n
                        && program.steps[p].outputs[0] == shape
                        && fusible(&program.steps[p]).is_some()
                })
                .map(|(&p, _)| p)
                .collect();
            if joining.is_empty() {
                break;
            }
            members.extend(joining);
        }
        if members.len() < 2 {
            continue;
        }
        for &m in &members {
            taken[m] = true;
        }
        program.steps[root] = fused_step(program, &members, root);
    }
    remove_unused(program);
}

/// The `Fused` step computing `members` (in program order), whose last is `root`.
fn fused_step(program: &Program, members: &BTreeSet<usize>, root: usize) -> Step {
    let mut externals: Vec<Source> = Vec::new();
    let mut register_of_member: HashMap<usize, usize> = HashMap::new();
    // First pass: the operands from outside the group, in order of first use.
    for &m in members {
        for source in &program.steps[m].inputs {
            let inside = matches!(source, Source::Step(p, _) if members.contains(p));
            if !inside && !externals.contains(source) {
                externals.push(source.clone());
            }
        }
    }
    let register = |source: &Source, register_of_member: &HashMap<usize, usize>| match source {
        Source::Step(p, _) if register_of_member.contains_key(p) => register_of_member[p],
        other => externals.iter().position(|e| e == other).unwrap_or(0),
    };
    let mut steps = Vec::with_capacity(members.len());
    for (k, &m) in members.iter().enumerate() {
        let operands = &program.steps[m].inputs;
        let step = match fusible(&program.steps[m]) {
            Some(FusedStep::Unary(op, _)) => {
                FusedStep::Unary(op, register(&operands[0], &register_of_member))
            }
            Some(FusedStep::Binary(op, _, _)) => FusedStep::Binary(
                op,
                register(&operands[0], &register_of_member),
                register(&operands[1], &register_of_member),
            ),
            None => unreachable!("only fusible steps join a group"),
        };
        steps.push(step);
        register_of_member.insert(m, externals.len() + k);
    }
    Step {
        primitive: Arc::new(Fused {
            steps,
            inputs: externals.len(),
        }),
        inputs: externals,
        outputs: program.steps[root].outputs.clone(),
    }
}
