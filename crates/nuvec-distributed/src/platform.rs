//! The one place with platform-specific code in this crate: socket options, waiting on
//! several descriptors at once (poll(2)), shared mappings, and sleeping on a shared word
//! (futex(2) on Linux).

use std::net::TcpStream;
use std::time::Duration;

/// Idle time before the first keepalive probe, the interval between probes, and how many
/// unanswered probes end the connection: a peer whose machine sleeps or loses its cable is
/// reported within about 5 + 2 × 5 = 15 s even while the group is idle.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_PROBES: u32 = 5;

/// Sends what the socket takes without blocking (a per-call flag: the descriptor, shared with
/// the reader and the writer thread, stays blocking); `WouldBlock` when it takes nothing.
pub(crate) fn send_now(
    stream: &TcpStream,
    parts: &[std::io::IoSlice<'_>],
) -> std::io::Result<usize> {
    #[cfg(target_os = "linux")]
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    #[cfg(not(target_os = "linux"))]
    let flags = libc::MSG_DONTWAIT;
    socket2::SockRef::from(stream).send_vectored_with_flags(parts, flags)
}

/// Copies the bytes waiting on `stream` into `buf` without consuming them and without
/// waiting (0 bytes: none yet, or the peer closed).
pub(crate) fn peek_now(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    recv_with(stream, buf, libc::MSG_PEEK | libc::MSG_DONTWAIT)
}

/// recv(2) into `buf` with `flags`.
#[allow(unsafe_code)]
fn recv_with(stream: &TcpStream, buf: &mut [u8], flags: libc::c_int) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: recv(2) writes at most `buf.len()` bytes into `buf`, which is valid and
    // exclusively borrowed for the call; the descriptor is open while `stream` lives.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// poll(2) on `polled` for at most `timeout` (at least 1 ms); how many are ready. An
/// interruption counts as a wake-up of all of them.
#[allow(unsafe_code)]
fn poll_for(polled: &mut [libc::pollfd], timeout: Duration) -> std::io::Result<usize> {
    let millis = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: `polled` is a valid array of `polled.len()` pollfd records, exclusively
    // borrowed for the call; poll(2) only writes their `revents`.
    let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, millis) };
    if n >= 0 {
        return Ok(n as usize);
    }
    let error = std::io::Error::last_os_error();
    match error.kind() {
        std::io::ErrorKind::Interrupted => Ok(polled.len()),
        _ => Err(error),
    }
}

/// Waits until `stream` can take more bytes (or has failed, which the next send reports);
/// false when `timeout` passed first.
pub(crate) fn wait_writable(stream: &TcpStream, timeout: Duration) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut polled = [libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    }];
    Ok(poll_for(&mut polled, timeout)? > 0)
}

/// Waits until one of `fds` is readable (or, where its flag is set, writable), or `timeout`
/// passes. Errors other than an interruption are returned; an interruption counts as a wake-up.
#[cfg(feature = "jaccl")]
pub(crate) fn wait_fds(fds: &[(i32, bool)], timeout: Duration) -> std::io::Result<()> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, writable)| libc::pollfd {
            fd,
            events: libc::POLLIN | if writable { libc::POLLOUT } else { 0 },
            revents: 0,
        })
        .collect();
    poll_for(&mut polled, timeout).map(|_| ())
}

/// A Unix datagram socket bound to `name` (unique to this process), for the emulated RDMA
/// fabric; returns it, the address a peer connects to, and the file to remove when done. On
/// Linux the name is abstract: nothing on disk, gone when the socket closes, even if the
/// process is killed. Elsewhere it is a file in the temporary directory.
#[cfg(feature = "jaccl")]
pub(crate) fn bind_datagram(
    name: &str,
) -> std::io::Result<(
    std::os::unix::net::UnixDatagram,
    Vec<u8>,
    Option<std::path::PathBuf>,
)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let socket = std::os::unix::net::UnixDatagram::bind_addr(&address)?;
        Ok((socket, name.as_bytes().to_vec(), None))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        let socket = std::os::unix::net::UnixDatagram::bind(&path)?;
        Ok((
            socket,
            path.as_os_str().as_encoded_bytes().to_vec(),
            Some(path),
        ))
    }
}

/// Connects a socket from [`bind_datagram`] to a peer's address.
#[cfg(feature = "jaccl")]
pub(crate) fn connect_datagram(
    socket: &std::os::unix::net::UnixDatagram,
    address: &[u8],
) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        socket.connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(
            address,
        )?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        socket.connect(std::path::Path::new(&*String::from_utf8_lossy(address)))
    }
}

/// Reads what is waiting on `stream` into `buf` without waiting (a per-call flag, so the
/// descriptor stays blocking for other users); `WouldBlock` when nothing is there yet, 0 when
/// the peer closed.
pub(crate) fn recv_now(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    recv_with(stream, buf, libc::MSG_DONTWAIT)
}

/// Turns on TCP keepalive with nuvec's timing.
pub(crate) fn enable_keepalive(stream: &TcpStream) -> std::io::Result<()> {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive)
}

/// Where same-host channels' files go: memory-backed `/dev/shm` where there is one (Linux),
/// else the temporary directory (macOS; a mapped file's pages stay in memory while in use).
pub(crate) fn shared_memory_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Opening flags for channel files: never through a symbolic link, not inherited by children.
pub(crate) const CHANNEL_OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Whether `metadata` is of a regular file owned by this process's user and closed to others.
pub(crate) fn private_file_of_ours(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let user = unsafe { libc::geteuid() };
    metadata.is_file() && metadata.uid() == user && metadata.mode() & 0o077 == 0
}

/// Sizes `file` to `len` bytes with its storage allocated now, so that a full file system
/// (a small `/dev/shm` in a container, say) fails here with an error instead of killing the
/// process with SIGBUS when a mapped page is first written. Elsewhere than on Linux the file
/// is only sized.
pub(crate) fn size_and_reserve(file: &std::fs::File, len: usize) -> std::io::Result<()> {
    file.set_len(len as u64)?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fallocate(3) on an open descriptor of ours, within a length that fits
        // an off_t; it touches no memory of this process.
        #[allow(unsafe_code)]
        let code = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if code != 0 {
            return Err(std::io::Error::from_raw_os_error(code));
        }
    }
    Ok(())
}

/// Maps the first `len` bytes of `file` readable, writable and shared with every process
/// that maps it.
#[allow(unsafe_code)]
pub(crate) fn map_shared(file: &std::fs::File, len: usize) -> std::io::Result<*mut u8> {
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh mapping chosen by the kernel (null hint) of an open descriptor; it
    // touches no memory of ours, and the caller unmaps it with `unmap(ptr, len)`.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(ptr.cast())
    }
}

/// Unmaps what [`map_shared`] mapped.
///
/// # Safety
/// `ptr` and `len` come from one successful `map_shared` call, and nothing uses the mapping
/// afterwards.
#[allow(unsafe_code)]
pub(crate) unsafe fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: the caller's contract: a live mapping of `len` bytes at `ptr`, unused from now.
    unsafe {
        libc::munmap(ptr.cast(), len);
    }
}

/// Sleeps until another process calls [`wake_word`] on `word` or at most `timeout`, unless
/// `word` no longer holds `seen` (then returns at once). `word` may lie in memory shared
/// between processes (a channel's mapping). On Linux a futex; elsewhere a short nap (the
/// caller checks `word` again either way).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn wait_on_word(word: &std::sync::atomic::AtomicU32, seen: u32, timeout: Duration) {
    let spec = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT (shared, not private: the word may be mapped by other processes)
    // only reads the 4-aligned word, live for the call, and `spec`, a valid timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &spec as *const libc::timespec,
        );
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn wait_on_word(word: &std::sync::atomic::AtomicU32, seen: u32, timeout: Duration) {
    if word.load(std::sync::atomic::Ordering::Acquire) == seen {
        std::thread::sleep(timeout.min(Duration::from_micros(50)));
    }
}

/// Wakes every process sleeping in [`wait_on_word`] on `word`.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn wake_word(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: FUTEX_WAKE on the 4-aligned word, live for the call; it touches no memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn wake_word(_word: &std::sync::atomic::AtomicU32) {}

/// Copies `into.len()` bytes at `address` in process `pid` into `into` in one copy (Linux's
/// cross-memory attach, `process_vm_readv`). The kernel allows it only where this process
/// may trace `pid` (same user; no Yama restriction, or none that applies); nuvec does not
/// loosen that. Elsewhere: `Unsupported`.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn read_process(pid: u32, address: u64, into: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < into.len() {
        let rest = &mut into[done..];
        let local = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (address + done as u64) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, writable memory of ours live for the call; the
        // kernel checks `remote` against the other process's mappings (a bad address is
        // EFAULT, not undefined behaviour here) and copies at most `rest.len()` bytes.
        let copied =
            unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        match copied {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => {
                let error = std::io::Error::last_os_error();
                if error.kind() != std::io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    Ok(())
}

/// Copies `from` to `address` in process `pid` in one copy (`process_vm_writev`), under the
/// same rule as [`read_process`].
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn write_process(pid: u32, address: u64, from: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < from.len() {
        let rest = &from[done..];
        let local = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (address + done as u64) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, memory of ours live for the call, which the kernel
        // only reads; it checks `remote` against the other process's writable mappings.
        let copied =
            unsafe { libc::process_vm_writev(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        match copied {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            _ => {
                let error = std::io::Error::last_os_error();
                if error.kind() != std::io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    Ok(())
}

/// Copies memory into another process: not available outside Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn write_process(_pid: u32, _address: u64, _from: &[u8]) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Copies memory of another process: not available outside Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn read_process(_pid: u32, _address: u64, _into: &mut [u8]) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Starts (once) a thread that writes the default group's flight-recorder records
/// (`Group::write_trace`) each time the process gets `SIGUSR1`. Unix only.
#[cfg(unix)]
pub(crate) fn write_trace_on_signal() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let mut signals = match signal_hook::iterator::Signals::new([libc::SIGUSR1]) {
            Ok(signals) => signals,
            Err(error) => {
                eprintln!("nuvec: cannot watch for SIGUSR1 to write the trace: {error}");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("nuvec-trace-signal".into())
            .spawn(move || {
                for _ in signals.forever() {
                    if let Some(group) = nuvec_core::distributed::initialized_default() {
                        group.write_trace();
                    }
                }
            });
        if let Err(error) = spawned {
            eprintln!("nuvec: cannot start the thread that writes the trace on SIGUSR1: {error}");
        }
    });
}

/// No signals to watch outside Unix.
#[cfg(not(unix))]
pub(crate) fn write_trace_on_signal() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    #[cfg(target_os = "linux")]
    fn another_process_memory_is_read_and_written_in_one_copy_and_a_bad_address_is_an_error() {
        let source: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut into = vec![0u8; source.len()];
        read_process(std::process::id(), source.as_ptr() as u64, &mut into).unwrap();
        assert_eq!(into, source);
        let mut small = [0u8; 16];
        assert!(read_process(std::process::id(), 8, &mut small).is_err());
        let mut target = vec![0u8; source.len()];
        write_process(std::process::id(), target.as_mut_ptr() as u64, &source).unwrap();
        assert_eq!(target, source);
        assert!(write_process(std::process::id(), 8, &small).is_err());
    }

    #[test]
    fn connections_probe_idle_peers_with_keepalive() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        enable_keepalive(&client).unwrap();
        let socket = socket2::SockRef::from(&client);
        assert!(socket.keepalive().unwrap());
        #[cfg(target_os = "linux")]
        {
            assert_eq!(socket.keepalive_time().unwrap(), KEEPALIVE_IDLE);
            assert_eq!(socket.keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
            assert_eq!(socket.keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        }
    }
}
