//! A group's communication worker: one thread per group that runs its collectives in the
//! order they were handed over, so that the evaluating thread keeps computing meanwhile.
//!
//! # Design
//! [`crate::eval`] hands every communicating node to its group's worker and goes on with the
//! nodes that do not need its result; a node that does waits for it first. Collectives reach
//! the worker in evaluation order, which is the same on every rank, and the worker runs them
//! one at a time, so every rank still sees them in program order. The worker starts with the
//! first node handed to it, and stops when its group is closed: `close` waits for the work
//! already handed over and for the thread to end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Work handed to a worker.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The sending end of a group's worker thread.
#[derive(Debug)]
pub(crate) struct Worker {
    /// `None` once stopped.
    sender: Mutex<Option<Sender<Job>>>,
    /// Jobs handed over and not finished yet.
    pending: Arc<AtomicUsize>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Worker {
    /// Starts the worker of group `id`; `None` if the OS refuses a thread (collectives then
    /// run on the evaluating thread, as they would without a worker).
    pub(crate) fn start(id: u64) -> Option<Worker> {
        let (sender, receiver) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(format!("nuvec-group-{id}"))
            .spawn(move || serve(receiver))
            .ok()?;
        Some(Worker {
            sender: Mutex::new(Some(sender)),
            pending: Arc::new(AtomicUsize::new(0)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Lets the worker finish what it was handed, then waits for its thread to end (unless
    /// called from that thread). Later jobs are given back to their callers.
    pub(crate) fn stop(&self) {
        drop(crate::array::lock(&self.sender).take());
        let thread = crate::array::lock(&self.thread).take();
        if let Some(thread) = thread {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
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
        match &*crate::array::lock(&self.sender) {
            Some(sender) => sender.send(counted).map_err(|returned| returned.0),
            None => Err(counted),
        }
    }
}

fn serve(jobs: Receiver<Job>) {
    for job in jobs {
        job();
    }
}
