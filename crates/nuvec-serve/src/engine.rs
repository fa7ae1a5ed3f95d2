//! The engine: one thread that owns the model and decodes every request in one continuous
//! batch. Requests arrive as [`Job`]s; each round it drops the sequences that finished or
//! whose client left, admits waiting ones (up to the batch limit), and steps the batch once,
//! sending each request its token as an [`Event`]. On a group, rank 0's engine hands each
//! round's [`Plan`] to the other ranks ([`follow`]) before running it.

use crate::error::ApiError;
use crate::plan::{self, Join, Plan};
use crate::text::Text;
use nuvec_core::distributed::Group;
use nuvec_lm::{
    BatchGenerator, BatchToken, GenerateOptions, Model, StreamingDetokenizer, Tokenizer,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// How long an idle group waits before rank 0 checks on the others (an empty plan): less
/// than any sensible timeout, so idle ranks never time out, and a lost rank is seen soon.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// A request for the engine.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) prompt: Vec<u32>,
    /// With a seed always (chosen by the server when the request has none).
    pub(crate) options: GenerateOptions,
    pub(crate) stops: Vec<String>,
    /// Alternatives listed per token, when log-probabilities are asked for.
    pub(crate) logprobs: Option<usize>,
    pub(crate) events: UnboundedSender<Event>,
}

/// A chosen token's log-probability and the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TokenLogprob {
    pub(crate) token: u32,
    /// The text the token added (its pieces make up the answer's text).
    pub(crate) text: String,
    pub(crate) logprob: f32,
    pub(crate) top: Vec<(u32, f32)>,
}

/// What the engine tells a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// The prompt is in the cache (`cached` of its tokens came from a kept cache).
    Started { prompt_tokens: usize, cached: usize },
    /// A token was generated; `text` is what it released (possibly empty).
    Token {
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// The end: the text not yet released, and why.
    Done {
        text: String,
        finish: &'static str,
        completion_tokens: usize,
    },
    /// The request failed.
    Failed(ApiError),
}

/// What `/health` reports: whether the server can generate (`None` when it can, else why
/// not), and the requests being generated and waiting.
#[derive(Debug, Clone, Default)]
pub(crate) struct Health(Arc<HealthState>);

#[derive(Debug, Default)]
struct HealthState {
    failure: Mutex<Option<String>>,
    /// The server was told to stop: requests in flight end, no new one starts.
    stopping: std::sync::atomic::AtomicBool,
    active: AtomicUsize,
    waiting: AtomicUsize,
}

impl Health {
    pub(crate) fn failure(&self) -> Option<String> {
        self.0
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn fail(&self, reason: String) {
        *self.0.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
    }

    /// Ends the requests in flight (`503`, the server is stopping) and refuses new ones, so
    /// that a stopping server's connections close.
    pub(crate) fn stop(&self) {
        self.0.stopping.store(true, Ordering::Relaxed);
    }

    /// Why requests cannot be served now, if they cannot: the group failed, or the server
    /// is stopping.
    pub(crate) fn refusal(&self) -> Option<String> {
        self.failure().or_else(|| {
            (self.0.stopping.load(Ordering::Relaxed))
                .then(|| "the server is shutting down".to_string())
        })
    }

    /// Requests being generated, and waiting for room in the batch.
    pub(crate) fn load(&self) -> (usize, usize) {
        (
            self.0.active.load(Ordering::Relaxed),
            self.0.waiting.load(Ordering::Relaxed),
        )
    }

    fn set_load(&self, active: usize, waiting: usize) {
        self.0.active.store(active, Ordering::Relaxed);
        self.0.waiting.store(waiting, Ordering::Relaxed);
    }
}

/// A request being generated.
#[derive(Debug)]
struct Active {
    id: u64,
    job: Job,
    detokenizer: StreamingDetokenizer,
    text: Text,
    generated: usize,
}

/// The engine's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_batch: usize,
    pub(crate) prompt_cache: usize,
}

/// Runs rank 0's engine until `jobs` closes (the server stopped); then tells the group.
pub(crate) fn run(
    model: &Model,
    tokenizer: &Tokenizer,
    group: Option<Group>,
    jobs: Receiver<Job>,
    health: Health,
    limits: Limits,
) {
    let mut engine = Engine {
        batch: BatchGenerator::with_prompt_cache(model, limits.prompt_cache),
        tokenizer,
        group,
        active: Vec::new(),
        waiting: VecDeque::new(),
        finished: Vec::new(),
        next_id: 0,
        limits,
        health,
    };
    loop {
        if engine.active.is_empty() && engine.waiting.is_empty() {
            match jobs.recv_timeout(HEARTBEAT) {
                Ok(job) => engine.waiting.push_back(job),
                Err(RecvTimeoutError::Timeout) => {
                    engine.round(Plan::default());
                    engine.health.set_load(0, 0);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        while let Ok(job) = jobs.try_recv() {
            engine.waiting.push_back(job);
        }
        let plan = engine.plan();
        engine.round(plan);
        (engine.health).set_load(engine.active.len(), engine.waiting.len());
    }
    engine.round(Plan {
        shutdown: true,
        ..Plan::default()
    });
}

struct Engine<'m> {
    batch: BatchGenerator<'m>,
    tokenizer: &'m Tokenizer,
    group: Option<Group>,
    active: Vec<Active>,
    waiting: VecDeque<Job>,
    /// Sequences to take out of the batch in the next round.
    finished: Vec<u64>,
    next_id: u64,
    limits: Limits,
    health: Health,
}

impl Engine<'_> {
    /// The next round: who leaves (finished, or the client is gone), who joins.
    fn plan(&mut self) -> Plan {
        let mut remove = std::mem::take(&mut self.finished);
        if let Some(reason) = self.health.refusal() {
            for active in self.active.drain(..) {
                remove.push(active.id);
                let event = Event::Failed(ApiError::unavailable(reason.clone()));
                active.job.events.send(event).ok();
            }
            for job in self.waiting.drain(..) {
                job.events
                    .send(Event::Failed(ApiError::unavailable(reason.clone())))
                    .ok();
            }
            return Plan {
                remove,
                ..Plan::default()
            };
        }
        self.active.retain(|a| {
            let gone = a.job.events.is_closed();
            if gone {
                remove.push(a.id);
            }
            !gone
        });
        self.waiting.retain(|job| !job.events.is_closed());
        let room = self.limits.max_batch.saturating_sub(self.active.len());
        let mut join = Vec::new();
        for mut job in self.waiting.drain(..room.min(self.waiting.len())) {
            let id = self.next_id;
            self.next_id += 1;
            // The prompt goes to the batch; the request keeps the rest.
            join.push(Join {
                id,
                prompt: std::mem::take(&mut job.prompt),
                options: job.options.clone(),
            });
            self.active.push(Active {
                id,
                text: Text::new(job.stops.clone()),
                job,
                detokenizer: self.tokenizer.detokenizer(),
                generated: 0,
            });
        }
        let step = !self.active.is_empty();
        Plan {
            shutdown: false,
            remove,
            join,
            step,
        }
    }

    /// Shares `plan` with the group, then runs it.
    fn round(&mut self, plan: Plan) {
        if self.health.failure().is_some() {
            return;
        }
        if let Some(group) = self.group {
            if let Err(reason) = plan::share(&group, Some(&plan)) {
                return self.fail(reason);
            }
        }
        if plan.shutdown {
            return;
        }
        for id in &plan.remove {
            self.batch.remove(*id);
        }
        for join in plan.join {
            let inserted = self.batch.insert(join.id, &join.prompt, join.options);
            let Some(at) = self.active.iter().position(|a| a.id == join.id) else {
                continue;
            };
            match inserted {
                Ok(cached) => {
                    let event = Event::Started {
                        prompt_tokens: join.prompt.len(),
                        cached,
                    };
                    self.active[at].job.events.send(event).ok();
                }
                Err(e) if self.group.is_some() => {
                    return self.fail(format!("the group failed reading a prompt: {e}"))
                }
                Err(e) => {
                    let active = self.active.remove(at);
                    let error = ApiError::internal(format!("reading the prompt failed: {e}"));
                    active.job.events.send(Event::Failed(error)).ok();
                }
            }
        }
        if !plan.step || self.batch.is_empty() {
            return;
        }
        match self.batch.step() {
            Ok(tokens) => {
                for drawn in tokens {
                    self.deliver(drawn);
                }
            }
            Err(e) if self.group.is_some() => self.fail(format!("the group failed a step: {e}")),
            Err(e) => {
                // Alone, a failed step fails its requests; the next ones start afresh.
                for active in self.active.drain(..) {
                    self.batch.remove(active.id);
                    let error = ApiError::internal(format!("generation failed: {e}"));
                    active.job.events.send(Event::Failed(error)).ok();
                }
                self.finished.clear();
            }
        }
    }

    /// Hands a drawn token to its request; ends it at an end token, a stop text or its
    /// token limit.
    fn deliver(&mut self, drawn: BatchToken) {
        let Some(at) = self.active.iter().position(|a| a.id == drawn.id) else {
            return;
        };
        let eos = self.tokenizer.eos_token_ids().contains(&drawn.token);
        let a = &mut self.active[at];
        a.generated += 1;
        let mut piece = String::new();
        let finish = if eos {
            Some("stop")
        } else {
            a.detokenizer.add_token(drawn.token);
            let at_limit = a.generated >= a.job.options.max_tokens;
            if at_limit {
                a.detokenizer.finalize();
            }
            piece = a.detokenizer.last_segment();
            let stopped = a.text.push(&piece);
            match (stopped, at_limit) {
                (true, _) => Some("stop"),
                (false, true) => Some("length"),
                (false, false) => None,
            }
        };
        if !eos {
            let logprob = (a.job.logprobs).map(|top| token_logprob(&drawn, piece, top));
            let text = a.text.release(finish.is_some());
            a.job.events.send(Event::Token { text, logprob }).ok();
        }
        if let Some(finish) = finish {
            let a = self.active.remove(at);
            let mut text = a.text;
            let done = Event::Done {
                text: text.release(true),
                finish,
                completion_tokens: a.generated,
            };
            a.job.events.send(done).ok();
            self.finished.push(a.id);
        }
    }

    /// The group can no longer generate: every request is told why, and so is `/health`.
    fn fail(&mut self, reason: String) {
        self.health.fail(reason.clone());
        for active in self.active.drain(..) {
            let event = Event::Failed(ApiError::unavailable(reason.clone()));
            active.job.events.send(event).ok();
        }
        for job in self.waiting.drain(..) {
            let event = Event::Failed(ApiError::unavailable(reason.clone()));
            job.events.send(event).ok();
        }
    }
}

/// The drawn token's log-probability and the `top` most likely tokens'.
fn token_logprob(drawn: &BatchToken, text: String, top: usize) -> TokenLogprob {
    let values = drawn
        .logprobs
        .astype(nuvec_core::DType::F32)
        .to_vec::<f32>();
    let values = values.unwrap_or_default();
    let logprob = values
        .get(drawn.token as usize)
        .copied()
        .unwrap_or(f32::NAN);
    let mut order: Vec<u32> = (0..values.len() as u32).collect();
    let top = top.min(values.len());
    if top > 0 {
        order.select_nth_unstable_by(top - 1, |&a, &b| {
            values[b as usize].total_cmp(&values[a as usize])
        });
        order.truncate(top);
        order.sort_by(|&a, &b| values[b as usize].total_cmp(&values[a as usize]));
    }
    TokenLogprob {
        token: drawn.token,
        text,
        logprob,
        top: (order.iter().take(top))
            .map(|&t| (t, values[t as usize]))
            .collect(),
    }
}

/// A rank other than 0 of a serving group: runs rank 0's plans until the end.
pub(crate) fn follow(model: &Model, group: Group, limits: Limits) -> Result<(), String> {
    let mut batch = BatchGenerator::with_prompt_cache(model, limits.prompt_cache);
    loop {
        let plan = plan::share(&group, None)?;
        if plan.shutdown {
            return Ok(());
        }
        for id in &plan.remove {
            batch.remove(*id);
        }
        for join in plan.join {
            batch
                .insert(join.id, &join.prompt, join.options)
                .map_err(|e| format!("reading a prompt failed: {e}"))?;
        }
        if plan.step && !batch.is_empty() {
            batch.step().map_err(|e| format!("a step failed: {e}"))?;
        }
    }
}
