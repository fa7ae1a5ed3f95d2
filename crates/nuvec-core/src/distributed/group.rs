//! [`Group`]: a small value naming a registered communicator.

use super::trace::{self, Record, Trace};
use super::worker::Worker;
use super::Communicator;
use crate::node_hash::NodeMap;
use crate::{Error, Result};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A group of processes that run collectives together. Cheap to copy; the connections belong
/// to the communicator it names. `Group::single()` is this process alone, where every
/// collective is the identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Group {
    id: u64,
    rank: usize,
    size: usize,
}

/// A registered group: its connections, and the worker that runs its collectives (started
/// on first use).
struct Entry {
    communicator: Arc<dyn Communicator>,
    worker: Option<Arc<Worker>>,
    trace: Arc<Trace>,
}

/// Every registered group, by id (looked up on every collective: hashed by a multiply).
fn registry() -> &'static Mutex<NodeMap<u64, Entry>> {
    static REGISTRY: OnceLock<Mutex<NodeMap<u64, Entry>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(NodeMap::default()))
}

static DEFAULT: Mutex<Option<Group>> = Mutex::new(None);

impl Group {
    /// The group of this process alone (rank 0 of 1).
    pub const fn single() -> Group {
        Group {
            id: 0,
            rank: 0,
            size: 1,
        }
    }

    /// Registers a backend's communicator and returns the group naming it.
    pub fn register(communicator: Arc<dyn Communicator>) -> Group {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let group = Group {
            id,
            rank: communicator.rank(),
            size: communicator.size(),
        };
        let trace = Arc::new(Trace::from_env());
        communicator.attach_trace(trace.clone());
        let entry = Entry {
            communicator,
            worker: None,
            trace,
        };
        crate::array::lock(registry()).insert(id, entry);
        group
    }

    /// This process's rank in the group.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of processes in the group.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The communicator behind the group (`None` for [`Group::single`] or a closed group).
    pub fn communicator(&self) -> Option<Arc<dyn Communicator>> {
        crate::array::lock(registry())
            .get(&self.id)
            .map(|entry| entry.communicator.clone())
    }

    /// The group's worker if it has been started.
    pub(crate) fn started_worker(&self) -> Option<Arc<Worker>> {
        crate::array::lock(registry())
            .get(&self.id)
            .and_then(|entry| entry.worker.clone())
    }

    /// The thread that runs this group's collectives, started on first use; `None` for a
    /// closed group (its collectives then fail where they are evaluated).
    pub(crate) fn worker(&self) -> Option<Arc<Worker>> {
        let mut registry = crate::array::lock(registry());
        let entry = registry.get_mut(&self.id)?;
        if entry.worker.is_none() {
            entry.worker = Worker::start(self.id).map(Arc::new);
        }
        entry.worker.clone()
    }

    /// The last communication records of this group on this rank, oldest first (see
    /// [`Record`]; `NUVEC_DISTRIBUTED_TRACE_SIZE` of them, 256 by default); empty for
    /// [`Group::single`] or a closed group. Within the group's first 10 ms a read waits out
    /// the rest of them, the time the clock of the records' times needs to know its rate.
    ///
    /// ```
    /// use nuvec_core::distributed::Group;
    /// assert!(Group::single().trace().is_empty());
    /// ```
    pub fn trace(&self) -> Vec<Record> {
        let trace = crate::array::lock(registry())
            .get(&self.id)
            .map(|entry| entry.trace.clone());
        trace.map_or_else(Vec::new, |trace| trace.records())
    }

    /// Writes this rank's records ([`Group::trace`]) to `NUVEC_DISTRIBUTED_TRACE/rank-N.json`
    /// when that variable names a folder (what a failure does by itself, and `SIGUSR1` asks
    /// of a job that looks stuck).
    pub fn write_trace(&self) {
        trace::dump_if_asked(self.rank, self.size, &self.trace());
    }

    /// Runs `run` on the group's communicator as the operation `op` on an array of `dtype`
    /// and `shape` (with `peer`, called at `location`), recorded in the group's trace; on a
    /// failure the trace is written out where `NUVEC_DISTRIBUTED_TRACE` asks.
    pub(crate) fn communicate(
        &self,
        op: &'static str,
        (dtype, shape, peer): (crate::DType, &[usize], Option<usize>),
        location: &'static std::panic::Location<'static>,
        run: impl FnOnce(&dyn Communicator) -> Result<()>,
    ) -> Result<()> {
        let found = crate::array::lock(registry())
            .get(&self.id)
            .map(|entry| (entry.communicator.clone(), entry.trace.clone()));
        let Some((communicator, trace)) = found else {
            return Err(self.closed(op));
        };
        let sequence = trace.begin(op, (dtype, shape), peer, location);
        let outcome = run(&*communicator);
        trace.end(sequence, &outcome);
        if outcome.is_err() {
            trace::dump_if_asked(self.rank, self.size, &trace.records());
        }
        outcome
    }

    /// The communicator, or an error saying the group was closed.
    pub(crate) fn require(&self, op: &str) -> Result<Arc<dyn Communicator>> {
        self.communicator().ok_or_else(|| self.closed(op))
    }

    /// The error of `op` on this group once closed.
    fn closed(&self, op: &str) -> Error {
        Error::Distributed {
            op: op.to_string(),
            rank: None,
            reason: format!(
                "group {} (rank {} of {}) was closed",
                self.id, self.rank, self.size
            ),
        }
    }

    /// Splits the group: ranks that pass the same `color` (0 or more) form a new group,
    /// ordered by `key`, then by rank (a negative key keeps the current order). Every rank
    /// must call it. The ring, JACCL (where MLX's refuse) and MPI split. A ring or JACCL
    /// sub-group has connections (queue pairs) of its own: it runs at the same time as its
    /// parent and its siblings.
    pub fn split(&self, color: i32, key: i32) -> Result<Group> {
        if self.size == 1 {
            return Ok(*self);
        }
        let child = self.require("split")?.split(color, key)?;
        Ok(Group::register(child))
    }

    /// Checks every connection of the group without running a collective.
    pub fn health(&self) -> Result<()> {
        if self.size == 1 {
            return Ok(());
        }
        self.require("health")?.health()
    }

    /// The bytes each of this rank's links has carried since the group formed (JACCL counts
    /// them per cable); empty for a group of one, a closed group or a backend that does not
    /// count.
    pub fn traffic(&self) -> Vec<super::LinkTraffic> {
        self.communicator()
            .map(|communicator| communicator.traffic())
            .unwrap_or_default()
    }

    /// Releases the group's connections; later operations on it fail saying it was closed.
    pub fn close(&self) {
        // Dropping the entry lets the worker stop once the work handed to it is done.
        let removed = crate::array::lock(registry()).remove(&self.id);
        if let Some(entry) = removed {
            entry.communicator.close();
            if let Some(worker) = entry.worker {
                worker.stop();
            }
        }
        let mut default = crate::array::lock(&DEFAULT);
        if *default == Some(*self) {
            *default = None;
        }
    }

    /// Whether the group's connections were released by [`Group::close`].
    pub fn is_closed(&self) -> bool {
        self.size > 1 && self.communicator().is_none()
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

/// The group collectives use when given `None` (set by `init`; [`Group::single`] until then).
pub fn default_group() -> Group {
    crate::array::lock(&DEFAULT).unwrap_or_else(Group::single)
}

/// Makes `group` the default group.
pub fn set_default_group(group: Group) {
    *crate::array::lock(&DEFAULT) = Some(group);
}

/// The default group if it has been set by `init` and is still open.
pub fn initialized_default() -> Option<Group> {
    *crate::array::lock(&DEFAULT)
}
