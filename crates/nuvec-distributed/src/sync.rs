//! Locking that survives a panic elsewhere: every backend's shared state is left usable by a
//! thread that panicked while holding it (a lane's thread, a writer thread), so the group can
//! still report its failure instead of poisoning every later call.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking over a poisoned one.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
