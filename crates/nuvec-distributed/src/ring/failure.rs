//! The failure authority of a group: the one place that decides the group has failed. It runs
//! every operation in turn, keeps the first failure (after which the group refuses further
//! work, naming it), asks the transport for a root cause another rank sent word of, tells every
//! peer why the group failed (an abort notice, then the end of this rank's writes), and
//! answers `health()`.
//!
//! Transports only detect: a closed connection, an abort notice, a timeout, a frame of another
//! call each become an error naming the rank. What follows from that error is decided here.

use super::transport::Transport;
use crate::sync::lock;
use nuvec_core::{Error, Result};
use std::sync::{Mutex, MutexGuard};

/// A group's state `S` (what its operations keep between calls), guarded so that operations
/// run one at a time, in order, together with whether the group failed or was closed.
#[derive(Debug)]
pub(crate) struct Authority<S> {
    state: Mutex<Guarded<S>>,
}

#[derive(Debug)]
struct Guarded<S> {
    /// The first failure; the group refuses further work with it.
    failure: Option<Error>,
    closed: bool,
    inner: S,
}

/// The state of a group during one of its operations.
pub(crate) struct Turn<'a, S> {
    guard: MutexGuard<'a, Guarded<S>>,
}

impl<S> Turn<'_, S> {
    /// The group's state.
    pub(crate) fn state(&mut self) -> &mut S {
        &mut self.guard.inner
    }

    /// `result`, its error kept as the group's failure: a read that failed, or a message
    /// that was refused without being drained, leaves a stream at an unknown place, and the
    /// group refuses further work.
    pub(crate) fn breaks<T>(&mut self, result: Result<T>) -> Result<T> {
        result.inspect_err(|error| {
            self.guard.failure.get_or_insert_with(|| error.clone());
        })
    }
}

fn refused(op: &str, reason: String) -> Error {
    Error::Distributed {
        op: op.into(),
        rank: None,
        reason,
    }
}

impl<S> Authority<S> {
    /// The authority over a group whose state starts as `inner`.
    pub(crate) fn new(inner: S) -> Authority<S> {
        Authority {
            state: Mutex::new(Guarded {
                failure: None,
                closed: false,
                inner,
            }),
        }
    }

    /// Runs `body` as the group's next operation `op` unless the group failed or closed. When
    /// `sticky`, a failure of `body` becomes the group's failure and every peer is told;
    /// otherwise (a `recv` that refused a message it drained) only `body`'s own
    /// [`Turn::breaks`] make it so.
    pub(crate) fn run<T, X: Transport + ?Sized>(
        &self,
        transport: &X,
        op: &str,
        sticky: bool,
        body: impl FnOnce(&mut Turn<'_, S>) -> Result<T>,
    ) -> Result<T> {
        let mut turn = Turn {
            guard: lock(&self.state),
        };
        if turn.guard.closed {
            return Err(refused(op, "the group was closed".into()));
        }
        if let Some(failure) = &turn.guard.failure {
            return Err(refused(
                op,
                format!("the group failed earlier and refuses further work: {failure}"),
            ));
        }
        let result = body(&mut turn).map_err(|error| transport.root_cause(op, error));
        transport.end();
        let Err(error) = result else {
            return result;
        };
        // Hand what was queued (our header, say) on, so peers learn what this rank called
        // even if the process exits right after the error.
        transport.flush_all(op);
        if !sticky {
            return Err(error);
        }
        // Tell every peer at once why, instead of letting them wait out their timeouts for
        // data that will never come. The rank at fault is told too: a stalled rank that wakes
        // up learns that the group gave up on it. Then hear where the others are.
        transport.abort_all(&error);
        let error = transport.whereabouts(op, error);
        turn.guard.failure = Some(error.clone());
        Err(error)
    }

    /// Whether the group can still work: its failure or closing, else what the transport
    /// sees of its peers. Waits for an operation in progress rather than interleaving.
    pub(crate) fn health<X: Transport + ?Sized>(&self, transport: &X) -> Result<()> {
        let state = lock(&self.state);
        if state.closed {
            return Err(refused("health", "the group was closed".into()));
        }
        if let Some(failure) = &state.failure {
            return Err(failure.clone());
        }
        transport.check_peers()
    }

    /// Closes the group: every later operation is refused.
    pub(crate) fn close<X: Transport + ?Sized>(&self, transport: &X) {
        let mut state = lock(&self.state);
        state.closed = true;
        transport.close();
    }
}
