//! The one place with platform code in this crate: signals to processes and process groups.

/// A signal the launcher sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    Term,
    Kill,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        }
    }
}

/// Sends `signal` to every process of the group `pgid` (a rank started as a group leader).
/// Returns false when no such group is left.
pub(crate) fn signal_group(pgid: u32, signal: Signal) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false; // Never signal every process or init's group.
    }
    // SAFETY: kill(2) with a negative pid signals that process group; it reads no memory of
    // ours and fails harmlessly (ESRCH) when the group is gone.
    unsafe { libc::kill(-pgid, signal.number()) == 0 }
}

/// Sends `signal` to one process.
pub(crate) fn signal_process(pid: u32, signal: Signal) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 1 {
        return false;
    }
    // SAFETY: kill(2) on a positive pid signals that process only; no memory is shared.
    unsafe { libc::kill(pid, signal.number()) == 0 }
}

/// Whether the launcher runs as root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid(2) only returns this process's effective user id.
    unsafe { libc::geteuid() == 0 }
}

/// The name of signal `number` ("SIGSEGV"), or `signal N` for one without a common name.
pub(crate) fn signal_name(number: i32) -> String {
    let names = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == number)
        .map_or_else(|| format!("signal {number}"), |(_, name)| name.to_string())
}
