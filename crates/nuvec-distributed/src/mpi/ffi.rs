//! Open MPI loaded at run time: the few functions and predefined handles nuvec uses, declared
//! by hand (no `mpi.h`, no libclang at build time). With `ffi/calls.rs` (the collective and
//! point-to-point calls), the one place in this backend with `unsafe` code.
//!
//! # Handles
//! Open MPI's handles (`MPI_Comm`, `MPI_Datatype`, `MPI_Op`, `MPI_Errhandler`) are pointers to
//! library structures, and its predefined handles (`MPI_COMM_WORLD`, `MPI_FLOAT`, `MPI_SUM`, …)
//! are the addresses of exported globals (`ompi_mpi_comm_world`, …). `MPI_Status` is three
//! public `int`s followed by an `int` and a `size_t` of Open MPI's own (24 bytes on 64-bit
//! targets). The test `mpi_abi` compiles a C program against the installed `mpi.h` and checks
//! every value here.
#![allow(unsafe_code)]

mod calls;
pub(crate) use calls::BcastBuffer;

use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};

/// An Open MPI handle: the address of a library structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Handle(pub(crate) *mut c_void);

// SAFETY: a handle is an opaque address that MPI lets any thread pass back to it; nuvec makes
// every MPI call under one lock (`MPI_THREAD_SERIALIZED`).
unsafe impl Send for Handle {}
// SAFETY: as above; a handle is never dereferenced on the Rust side.
unsafe impl Sync for Handle {}

/// `MPI_Status` as Open MPI lays it out.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub(crate) struct Status {
    pub(crate) source: c_int,
    pub(crate) tag: c_int,
    pub(crate) error: c_int,
    cancelled: c_int,
    ucount: usize,
}

/// `MPI_SUCCESS`.
pub(crate) const SUCCESS: c_int = 0;
/// `MPI_THREAD_SERIALIZED`: any thread may call MPI, one at a time.
pub(crate) const THREAD_SERIALIZED: c_int = 2;
/// `MPI_MAX_ERROR_STRING` (Open MPI's `OPAL_MAX_ERROR_STRING`).
pub(crate) const MAX_ERROR_STRING: usize = 256;
/// `MPI_MAX_LIBRARY_VERSION_STRING`.
pub(crate) const MAX_LIBRARY_VERSION_STRING: usize = 256;
/// `MPI_IN_PLACE`.
pub(crate) const IN_PLACE: *mut c_void = std::ptr::without_provenance_mut(1);

/// `MPI_User_function`: `inout[i] = in[i] op inout[i]` for `*len` elements.
pub(crate) type UserFunction =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);

type InitThread = unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, *mut c_int) -> c_int;
type Flag = unsafe extern "C" fn(*mut c_int) -> c_int;
type Finalize = unsafe extern "C" fn() -> c_int;
type CommInt = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
type CommSplit = unsafe extern "C" fn(Handle, c_int, c_int, *mut Handle) -> c_int;
type CommFree = unsafe extern "C" fn(*mut Handle) -> c_int;
type CommSetErrhandler = unsafe extern "C" fn(Handle, Handle) -> c_int;
type Allreduce =
    unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, Handle) -> c_int;
type Allgather =
    unsafe extern "C" fn(*const c_void, c_int, Handle, *mut c_void, c_int, Handle, Handle) -> c_int;
type Bcast = unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle) -> c_int;
type Alltoall = Allgather;
type Alltoallv = unsafe extern "C" fn(
    *const c_void,
    *const c_int,
    *const c_int,
    Handle,
    *mut c_void,
    *const c_int,
    *const c_int,
    Handle,
    Handle,
) -> c_int;
type Barrier = unsafe extern "C" fn(Handle) -> c_int;
type ReduceScatterBlock =
    unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, Handle) -> c_int;
type SendFn = unsafe extern "C" fn(*const c_void, c_int, Handle, c_int, c_int, Handle) -> c_int;
type Recv =
    unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, c_int, Handle, *mut Status) -> c_int;
type GetCount = unsafe extern "C" fn(*const Status, Handle, *mut c_int) -> c_int;
type OpCreate = unsafe extern "C" fn(UserFunction, c_int, *mut Handle) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int, *mut c_char, *mut c_int) -> c_int;
type LibraryVersion = unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int;

/// The globals behind `MPI_COMM_WORLD`, `MPI_ERRORS_RETURN` and `MPI_BYTE`.
pub(crate) const WORLD_SYMBOL: &str = "ompi_mpi_comm_world";
pub(crate) const ERRORS_RETURN_SYMBOL: &str = "ompi_mpi_errors_return";
pub(crate) const BYTE_SYMBOL: &str = "ompi_mpi_byte";

/// Predefined datatypes, in the order of [`DATATYPE_SYMBOLS`].
pub(crate) const DATATYPE_SYMBOLS: [&str; 11] = [
    "ompi_mpi_c_bool",
    "ompi_mpi_uint8_t",
    "ompi_mpi_uint16_t",
    "ompi_mpi_uint32_t",
    "ompi_mpi_uint64_t",
    "ompi_mpi_int8_t",
    "ompi_mpi_int16_t",
    "ompi_mpi_int32_t",
    "ompi_mpi_int64_t",
    "ompi_mpi_float",
    "ompi_mpi_double",
];

/// Predefined reduction operations, in the order of [`OP_SYMBOLS`].
pub(crate) const OP_SYMBOLS: [&str; 5] = [
    "ompi_mpi_op_sum",
    "ompi_mpi_op_max",
    "ompi_mpi_op_min",
    "ompi_mpi_op_lor",
    "ompi_mpi_op_land",
];

/// The loaded library: its functions and predefined handles.
pub(crate) struct Mpi {
    init_thread: InitThread,
    initialized: Flag,
    finalized: Flag,
    finalize: Finalize,
    comm_rank: CommInt,
    comm_size: CommInt,
    comm_split: CommSplit,
    comm_free: CommFree,
    comm_set_errhandler: CommSetErrhandler,
    allreduce: Allreduce,
    allgather: Allgather,
    bcast: Bcast,
    alltoall: Alltoall,
    alltoallv: Alltoallv,
    barrier: Barrier,
    reduce_scatter_block: ReduceScatterBlock,
    send: SendFn,
    recv: Recv,
    get_count: GetCount,
    op_create: OpCreate,
    error_string: ErrorString,
    library_version: LibraryVersion,
    /// `MPI_COMM_WORLD`.
    pub(crate) world: Handle,
    /// `MPI_ERRORS_RETURN`.
    pub(crate) errors_return: Handle,
    /// `MPI_BYTE`.
    pub(crate) byte: Handle,
    /// See [`DATATYPE_SYMBOLS`].
    pub(crate) datatypes: [Handle; 11],
    /// See [`OP_SYMBOLS`].
    pub(crate) ops: [Handle; 5],
    /// Keeps the functions above mapped.
    _library: Library,
}

/// The names tried in order when no variable names the library.
#[cfg(target_os = "macos")]
const DEFAULT_NAMES: &[&str] = &["libmpi.dylib", "libmpi.40.dylib"];
#[cfg(not(target_os = "macos"))]
const DEFAULT_NAMES: &[&str] = &["libmpi.so", "libmpi.so.40"];

/// Opens `name` with its symbols global: Open MPI's plugins resolve symbols of `libmpi`.
fn open(name: &str) -> Result<Library, String> {
    #[cfg(unix)]
    {
        use libloading::os::unix::{Library as UnixLibrary, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: loading Open MPI runs its constructors, which only set up the library.
        unsafe { UnixLibrary::open(Some(name), RTLD_NOW | RTLD_GLOBAL) }
            .map(Library::from)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(unix))]
    {
        // SAFETY: as above.
        unsafe { Library::new(name) }.map_err(|e| e.to_string())
    }
}

/// Looks up a function `T` named `name`.
fn function<T: Copy>(library: &Library, name: &str) -> Result<T, String> {
    // SAFETY: each caller names an MPI function whose C signature is the type `T` declared
    // above (checked against `mpi.h` by the `mpi_abi` test).
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|symbol| *symbol)
        .map_err(|e| format!("{name}: {e}"))
}

/// The address of the global `name` (a predefined handle).
fn global(library: &Library, name: &str) -> Result<Handle, String> {
    // SAFETY: the symbol is a data object; only its address is taken, never its contents.
    unsafe { library.get::<*mut c_void>(name.as_bytes()) }
        .map(|symbol| Handle(*symbol))
        .map_err(|e| format!("{name}: {e}"))
}

impl Mpi {
    /// Loads Open MPI: the library named by `NUVEC_MPI_LIBNAME` or `MLX_MPI_LIBNAME`, else the
    /// default names. Refuses a library that is not Open MPI (its handles differ).
    pub(crate) fn load() -> Result<Mpi, String> {
        let named = ["NUVEC_MPI_LIBNAME", "MLX_MPI_LIBNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()));
        let names: Vec<String> = match named {
            Some(name) => vec![name],
            None => DEFAULT_NAMES.iter().map(|s| s.to_string()).collect(),
        };
        let mut failures = Vec::new();
        let library = names
            .iter()
            .find_map(|name| {
                open(name)
                    .map_err(|e| failures.push(format!("{name}: {e}")))
                    .ok()
            })
            .ok_or_else(|| {
                format!(
                    "cannot load the MPI library ({}); install Open MPI or name the library with NUVEC_MPI_LIBNAME",
                    failures.join("; ")
                )
            })?;
        let l = &library;
        let mut datatypes = [Handle(std::ptr::null_mut()); 11];
        for (slot, name) in datatypes.iter_mut().zip(DATATYPE_SYMBOLS) {
            *slot = global(l, name)?;
        }
        let mut ops = [Handle(std::ptr::null_mut()); 5];
        for (slot, name) in ops.iter_mut().zip(OP_SYMBOLS) {
            *slot = global(l, name)?;
        }
        let mpi = Mpi {
            init_thread: function(l, "MPI_Init_thread")?,
            initialized: function(l, "MPI_Initialized")?,
            finalized: function(l, "MPI_Finalized")?,
            finalize: function(l, "MPI_Finalize")?,
            comm_rank: function(l, "MPI_Comm_rank")?,
            comm_size: function(l, "MPI_Comm_size")?,
            comm_split: function(l, "MPI_Comm_split")?,
            comm_free: function(l, "MPI_Comm_free")?,
            comm_set_errhandler: function(l, "MPI_Comm_set_errhandler")?,
            allreduce: function(l, "MPI_Allreduce")?,
            allgather: function(l, "MPI_Allgather")?,
            bcast: function(l, "MPI_Bcast")?,
            alltoall: function(l, "MPI_Alltoall")?,
            alltoallv: function(l, "MPI_Alltoallv")?,
            barrier: function(l, "MPI_Barrier")?,
            reduce_scatter_block: function(l, "MPI_Reduce_scatter_block")?,
            send: function(l, "MPI_Send")?,
            recv: function(l, "MPI_Recv")?,
            get_count: function(l, "MPI_Get_count")?,
            op_create: function(l, "MPI_Op_create")?,
            error_string: function(l, "MPI_Error_string")?,
            library_version: function(l, "MPI_Get_library_version")?,
            world: global(l, WORLD_SYMBOL)?,
            errors_return: global(l, ERRORS_RETURN_SYMBOL)?,
            byte: global(l, BYTE_SYMBOL)?,
            datatypes,
            ops,
            _library: library,
        };
        let version = mpi.library_version();
        if !version.contains("Open MPI") {
            return Err(format!(
                "the MPI library is not Open MPI ({}); nuvec's MPI backend needs Open MPI",
                version.lines().next().unwrap_or("no version")
            ));
        }
        Ok(mpi)
    }

    /// `MPI_Get_library_version`.
    pub(crate) fn library_version(&self) -> String {
        let mut buffer = vec![0 as c_char; MAX_LIBRARY_VERSION_STRING + 1];
        let mut length: c_int = 0;
        // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING characters as MPI requires;
        // this function may be called before MPI_Init.
        let code = unsafe { (self.library_version)(buffer.as_mut_ptr(), &mut length) };
        if code != SUCCESS {
            return String::new();
        }
        // SAFETY: MPI wrote a NUL-terminated string into the zeroed buffer.
        unsafe { CStr::from_ptr(buffer.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// `MPI_Error_string` for `code`.
    pub(crate) fn error_string(&self, code: c_int) -> String {
        let mut buffer = vec![0 as c_char; MAX_ERROR_STRING + 1];
        let mut length: c_int = 0;
        // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters as MPI requires.
        let status = unsafe { (self.error_string)(code, buffer.as_mut_ptr(), &mut length) };
        if status != SUCCESS {
            return format!("MPI error {code}");
        }
        // SAFETY: MPI wrote a NUL-terminated string into the zeroed buffer.
        let text = unsafe { CStr::from_ptr(buffer.as_ptr()) }.to_string_lossy();
        format!("{text} (MPI error {code})")
    }

    /// Whether `MPI_Init` has run, and whether `MPI_Finalize` has.
    pub(crate) fn state(&self) -> (bool, bool) {
        let (mut initialized, mut finalized) = (0, 0);
        // SAFETY: both may be called at any time, from any thread.
        unsafe {
            (self.initialized)(&mut initialized);
            (self.finalized)(&mut finalized);
        }
        (initialized != 0, finalized != 0)
    }

    /// `MPI_Init_thread(NULL, NULL, SERIALIZED)`; returns the thread level provided.
    pub(crate) fn init(&self) -> c_int {
        let mut provided: c_int = 0;
        // SAFETY: MPI accepts null argc/argv; called at most once per process (see `world`).
        let code = unsafe {
            (self.init_thread)(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                THREAD_SERIALIZED,
                &mut provided,
            )
        };
        if code == SUCCESS {
            provided
        } else {
            -1
        }
    }

    /// `MPI_Finalize`.
    pub(crate) fn finalize(&self) -> c_int {
        // SAFETY: called once, after MPI_Init, from the exit handler.
        unsafe { (self.finalize)() }
    }

    /// `MPI_Comm_rank` and `MPI_Comm_size`.
    pub(crate) fn rank_and_size(&self, comm: Handle) -> Result<(usize, usize), c_int> {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: `comm` is a live communicator; the outputs are valid ints.
        check(unsafe { (self.comm_rank)(comm, &mut rank) })?;
        // SAFETY: as above.
        check(unsafe { (self.comm_size)(comm, &mut size) })?;
        Ok((rank as usize, size as usize))
    }

    /// `MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN)`: failures become return codes.
    pub(crate) fn return_errors(&self, comm: Handle) -> Result<(), c_int> {
        // SAFETY: `comm` is a live communicator and the handler a predefined one.
        check(unsafe { (self.comm_set_errhandler)(comm, self.errors_return) })
    }

    /// `MPI_Comm_split`; `MPI_COMM_NULL` for a rank whose color is `MPI_UNDEFINED`.
    pub(crate) fn split(&self, comm: Handle, color: c_int, key: c_int) -> Result<Handle, c_int> {
        let mut new = Handle(std::ptr::null_mut());
        // SAFETY: `comm` is a live communicator; `new` receives the handle.
        check(unsafe { (self.comm_split)(comm, color, key, &mut new) })?;
        Ok(new)
    }

    /// `MPI_Comm_free`.
    pub(crate) fn free(&self, mut comm: Handle) {
        // SAFETY: `comm` came from MPI_Comm_split and is freed once (by `close`).
        unsafe { (self.comm_free)(&mut comm) };
    }

    /// `MPI_Op_create` of a commutative user operation.
    pub(crate) fn op_create(&self, function: UserFunction) -> Result<Handle, c_int> {
        let mut op = Handle(std::ptr::null_mut());
        // SAFETY: `function` has MPI_User_function's signature and lives for the program.
        check(unsafe { (self.op_create)(function, 1, &mut op) })?;
        Ok(op)
    }
}

fn check(code: c_int) -> Result<(), c_int> {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(code)
    }
}

/// The user operation for 16-bit floats (`BF16` picks the format, `OP` the reduction by its
/// index in `half::OPS`): hands MPI's buffers to [`super::half::reduce_half`].
pub(crate) unsafe extern "C" fn half_op<const BF16: bool, const OP: usize>(
    input: *mut c_void,
    inout: *mut c_void,
    len: *mut c_int,
    _datatype: *mut Handle,
) {
    // SAFETY: MPI calls a user function with a valid count.
    let bytes = unsafe { *len }.max(0) as usize * 2;
    // SAFETY: MPI passes `*len` elements of the datatype the op was used with (MPI_UINT16_T,
    // two bytes each) in two distinct buffers.
    let (src, dst) = unsafe {
        (
            std::slice::from_raw_parts(input.cast::<u8>(), bytes),
            std::slice::from_raw_parts_mut(inout.cast::<u8>(), bytes),
        )
    };
    super::half::reduce_half(BF16, OP, src, dst);
}

/// Runs `finalize` when the process exits, as MPI requires of every process that called
/// `MPI_Init` (Open MPI's `mpirun` reports a rank that exits without it as a failure).
pub(crate) fn at_exit(finalize: extern "C" fn()) {
    // SAFETY: `finalize` is a plain function that lives for the whole program.
    unsafe { libc::atexit(finalize) };
}
