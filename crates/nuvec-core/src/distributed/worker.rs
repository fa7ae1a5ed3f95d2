//! A group's communication worker: one thread per group that runs its collectives in the
//! order they were handed over, so that the evaluating thread keeps computing meanwhile.
//!
//! # Design
//! [`crate::eval`] hands every communicating node to its group's worker and goes on with the
//! nodes that do not need its result; a node that does waits for it first. Collectives reach
//! the worker in evaluation order, which is the same on every rank, and the worker runs them
//! one at a time, so every rank still sees them in program order. The worker stops when its
//! group is closed (after the work already handed over) or at process exit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Work handed to a worker.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The sending end of a group's worker thread.
#[derive(Debug)]
pub(crate) struct Worker {
    sender: Mutex<Sender<Job>>,
    /// Jobs handed over and not finished yet.
    pending: Arc<AtomicUsize>,
}

impl Worker {
    /// Starts the worker of group `id`; `None` if the OS refuses a thread (collectives then
    /// run on the evaluating thread, as they would without a worker).
    pub(crate) fn start(id: u64) -> Option<Worker> {
        let (sender, receiver) = channel::<Job>();
        std::thread::Builder::new()
            .name(format!("nuvec-group-{id}"))
            .spawn(move || serve(receiver))
            .ok()?;
        Some(Worker {
            sender: Mutex::new(sender),
            pending: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Whether every job handed over has finished.
    pub(crate) fn is_idle(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }

    /// Queues `job` behind the work already handed over; gives it back if the worker is gone.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        let pending = self.pending.clone();
        pending.fetch_add(1, Ordering::AcqRel);
        let counted: Job = Box::new(move || {
            job();
            pending.fetch_sub(1, Ordering::AcqRel);
        });
        // A job given back still counts itself down when the caller runs it.
        crate::array::lock(&self.sender)
            .send(counted)
            .map_err(|returned| returned.0)
    }
}

fn serve(jobs: Receiver<Job>) {
    for job in jobs {
        job();
    }
}
