//! What every rank of a serving group does next, decided by rank 0 and handed to the others
//! before each step: sequences leaving the batch, sequences joining it (prompt and
//! options), whether to step, or the end. Every rank applies the same plan to the same
//! batch, so the model's collectives meet.

use nuvec_core::distributed::{broadcast, Group};
use nuvec_core::{Array, DType};
use nuvec_lm::{GenerateOptions, LogitsProcessors, SamplerOptions};
use serde_json::{json, Value};

/// A sequence joining the batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Join {
    pub(crate) id: u64,
    pub(crate) prompt: Vec<u32>,
    pub(crate) options: GenerateOptions,
}

/// One round of the engine.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Plan {
    pub(crate) shutdown: bool,
    pub(crate) remove: Vec<u64>,
    pub(crate) join: Vec<Join>,
    pub(crate) step: bool,
}

fn options_json(o: &GenerateOptions) -> Value {
    let bias: Vec<(u32, f32)> = o.logits_processors.logit_bias.clone().into_iter().collect();
    json!({
        "max_tokens": o.max_tokens,
        "temp": o.sampler.temp,
        "top_p": o.sampler.top_p,
        "min_p": o.sampler.min_p,
        "min_tokens_to_keep": o.sampler.min_tokens_to_keep,
        "top_k": o.sampler.top_k,
        "logit_bias": bias,
        "repetition_penalty": o.logits_processors.repetition_penalty,
        "repetition_context_size": o.logits_processors.repetition_context_size,
        "seed": o.seed,
        "prefill_step_size": o.prefill_step_size,
    })
}

fn options_from(v: &Value) -> Option<GenerateOptions> {
    let f = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x as f32);
    let n = |k: &str| v.get(k).and_then(Value::as_u64).map(|x| x as usize);
    let bias = (v.get("logit_bias")?.as_array()?.iter())
        .map(|pair| Some((pair.get(0)?.as_u64()? as u32, pair.get(1)?.as_f64()? as f32)))
        .collect::<Option<_>>()?;
    Some(GenerateOptions {
        max_tokens: n("max_tokens")?,
        sampler: SamplerOptions {
            temp: f("temp")?,
            top_p: f("top_p")?,
            min_p: f("min_p")?,
            min_tokens_to_keep: n("min_tokens_to_keep")?,
            top_k: n("top_k")?,
        },
        logits_processors: LogitsProcessors {
            logit_bias: bias,
            repetition_penalty: f("repetition_penalty"),
            repetition_context_size: n("repetition_context_size")?,
        },
        seed: v.get("seed").and_then(Value::as_u64),
        prefill_step_size: n("prefill_step_size")?,
    })
}

impl Plan {
    fn to_bytes(&self) -> Vec<u8> {
        let join: Vec<Value> = (self.join.iter())
            .map(|j| json!({"id": j.id, "prompt": j.prompt, "options": options_json(&j.options)}))
            .collect();
        let plan = json!({
            "shutdown": self.shutdown,
            "remove": self.remove,
            "join": join,
            "step": self.step,
        });
        plan.to_string().into_bytes()
    }

    fn from_bytes(bytes: &[u8]) -> Option<Plan> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        let join = (v.get("join")?.as_array()?.iter())
            .map(|j| {
                let prompt = (j.get("prompt")?.as_array()?.iter())
                    .map(|t| t.as_u64().map(|t| t as u32))
                    .collect::<Option<_>>()?;
                Some(Join {
                    id: j.get("id")?.as_u64()?,
                    prompt,
                    options: options_from(j.get("options")?)?,
                })
            })
            .collect::<Option<_>>()?;
        let remove = (v.get("remove")?.as_array()?.iter())
            .map(Value::as_u64)
            .collect::<Option<_>>()?;
        Some(Plan {
            shutdown: v.get("shutdown")?.as_bool()?,
            remove,
            join,
            step: v.get("step")?.as_bool()?,
        })
    }
}

/// Rank 0's plan on every rank of `group` (`plan` is read on rank 0 only): its length, then
/// its bytes, broadcast from rank 0.
pub(crate) fn share(group: &Group, plan: Option<&Plan>) -> Result<Plan, String> {
    let bytes = match plan {
        Some(plan) if group.rank() == 0 => plan.to_bytes(),
        _ => Vec::new(),
    };
    let failed = |e: nuvec_core::Error| format!("handing the next step to the group failed: {e}");
    let length = broadcast(
        &Array::from_vec(vec![bytes.len() as i32], &[1]),
        0,
        Some(group),
    );
    let length = length.to_vec::<i32>().map_err(failed)?[0].max(0) as usize;
    let body = match group.rank() {
        0 => Array::from_vec(bytes, &[length as i32]),
        _ => Array::from_vec(vec![0u8; length], &[length as i32]),
    };
    let body = broadcast(&body.astype(DType::U8), 0, Some(group));
    let bytes = body.to_vec::<u8>().map_err(failed)?;
    Plan::from_bytes(&bytes)
        .ok_or_else(|| "the plan rank 0 handed over is not readable".to_string())
}

#[cfg(test)]
mod tests {
    use super::{Join, Plan};
    use nuvec_lm::{GenerateOptions, LogitsProcessors, SamplerOptions};
    use std::collections::BTreeMap;

    #[test]
    fn a_plan_reads_back_as_written() {
        let options = GenerateOptions {
            max_tokens: 9,
            sampler: SamplerOptions {
                temp: 0.7,
                top_p: 0.93,
                min_p: 0.05,
                top_k: 11,
                ..SamplerOptions::default()
            },
            logits_processors: LogitsProcessors {
                logit_bias: BTreeMap::from([(3, -0.1), (70, 2.5)]),
                repetition_penalty: Some(1.17),
                repetition_context_size: 33,
            },
            seed: Some(u64::MAX - 5),
            prefill_step_size: 512,
        };
        let plan = Plan {
            shutdown: false,
            remove: vec![4, 9],
            join: vec![Join {
                id: 12,
                prompt: vec![1, 2, 70000],
                options,
            }],
            step: true,
        };
        assert_eq!(Plan::from_bytes(&plan.to_bytes()), Some(plan));
        assert_eq!(Plan::from_bytes(b"{}"), None);
    }
}
