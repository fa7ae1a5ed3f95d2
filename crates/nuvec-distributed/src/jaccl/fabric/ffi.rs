//! The ibverbs functions JACCL uses, declared by hand and loaded at run time from the system's
//! library (`libibverbs.so.1` on Linux, Apple's `librdma.dylib` on macOS 26.2 and later), so
//! that building nuvec needs no RDMA headers.
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are inline functions in `verbs.h` that
//! call through the context's operations table; their offsets, every struct's size and
//! field offsets, and every constant here are checked against the installed
//! `infiniband/verbs.h` by the test `verbs_abi` (Debian's `libibverbs-dev`, which CI installs).
//! `verbs.rs`, which calls these functions, is the backend's other file with `unsafe`.
//! The large `ibv_qp_attr` and `ibv_port_attr` are kept as byte buffers written and read at
//! those checked offsets.
#![allow(unsafe_code)]

use libloading::Library;
use std::ffi::{c_char, c_int, c_void};

/// `IBV_QPT_UC`: an unreliable connected queue pair, as MLX uses.
pub(crate) const QPT_UC: c_int = 3;
/// Queue pair states `IBV_QPS_INIT`, `IBV_QPS_RTR`, `IBV_QPS_RTS`.
pub(crate) const QPS_INIT: u32 = 1;
pub(crate) const QPS_RTR: u32 = 2;
pub(crate) const QPS_RTS: u32 = 3;
/// `IBV_MTU_1024`, the path MTU MLX sets.
pub(crate) const MTU_1024: u32 = 3;
/// `IBV_WR_SEND`.
pub(crate) const WR_SEND: u32 = 2;
/// `IBV_SEND_SIGNALED`.
pub(crate) const SEND_SIGNALED: u32 = 2;
/// `IBV_WC_RECV` (completion opcodes of receives have this bit).
pub(crate) const WC_RECV: u32 = 128;
/// `IBV_ACCESS_LOCAL_WRITE`.
pub(crate) const ACCESS_LOCAL_WRITE: c_int = 1;
/// `IBV_PORT_ACTIVE`.
pub(crate) const PORT_ACTIVE: u32 = 4;
/// `ibv_modify_qp` attribute masks.
pub(crate) const QP_STATE: c_int = 1;
pub(crate) const QP_ACCESS_FLAGS: c_int = 8;
pub(crate) const QP_PKEY_INDEX: c_int = 16;
pub(crate) const QP_PORT: c_int = 32;
pub(crate) const QP_AV: c_int = 128;
pub(crate) const QP_PATH_MTU: c_int = 256;
pub(crate) const QP_RQ_PSN: c_int = 4096;
pub(crate) const QP_SQ_PSN: c_int = 65536;
pub(crate) const QP_DEST_QPN: c_int = 1 << 20;

/// Offsets in `struct ibv_context` of `ops.poll_cq`, `ops.post_send`, `ops.post_recv`.
pub(crate) const CONTEXT_POLL_CQ: usize = 96;
pub(crate) const CONTEXT_POST_SEND: usize = 208;
pub(crate) const CONTEXT_POST_RECV: usize = 216;
/// Offset of `qp_num` in `struct ibv_qp`, and of `lkey` in `struct ibv_mr`.
pub(crate) const QP_NUM: usize = 52;
pub(crate) const MR_LKEY: usize = 36;

/// `struct ibv_qp_attr` and the offsets nuvec writes.
pub(crate) const QP_ATTR_BYTES: usize = 144;
pub(crate) const QP_ATTR_STATE: usize = 0;
pub(crate) const QP_ATTR_PATH_MTU: usize = 8;
pub(crate) const QP_ATTR_RQ_PSN: usize = 20;
pub(crate) const QP_ATTR_SQ_PSN: usize = 24;
pub(crate) const QP_ATTR_DEST_QP_NUM: usize = 28;
pub(crate) const QP_ATTR_ACCESS: usize = 32;
pub(crate) const QP_ATTR_AH: usize = 56;
pub(crate) const QP_ATTR_PKEY_INDEX: usize = 120;
pub(crate) const QP_ATTR_PORT: usize = 129;
/// Offsets in `struct ibv_ah_attr` (inside the queue pair attributes at [`QP_ATTR_AH`]).
pub(crate) const AH_DGID: usize = 0;
pub(crate) const AH_SGID_INDEX: usize = 20;
pub(crate) const AH_HOP_LIMIT: usize = 21;
pub(crate) const AH_DLID: usize = 24;
pub(crate) const AH_IS_GLOBAL: usize = 29;
pub(crate) const AH_PORT: usize = 30;

/// `struct ibv_port_attr` (the compatibility prefix `ibv_query_port` fills) and its fields.
pub(crate) const PORT_ATTR_BYTES: usize = 52;
pub(crate) const PORT_ATTR_STATE: usize = 0;
pub(crate) const PORT_ATTR_GID_TBL_LEN: usize = 12;
pub(crate) const PORT_ATTR_LID: usize = 34;

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

/// `struct ibv_send_wr`: the fields a plain send uses, then the unions nuvec leaves zero.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendWr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut SendWr,
    pub(crate) sg_list: *mut Sge,
    pub(crate) num_sge: c_int,
    pub(crate) opcode: u32,
    pub(crate) send_flags: u32,
    pub(crate) imm_data: u32,
    pub(crate) rest: [u64; 11],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvWr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut RecvWr,
    pub(crate) sg_list: *mut Sge,
    pub(crate) num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wc {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    pub(crate) opcode: u32,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    pub(crate) imm_data: u32,
    pub(crate) qp_num: u32,
    pub(crate) src_qp: u32,
    pub(crate) wc_flags: u32,
    pub(crate) pkey_index: u16,
    pub(crate) slid: u16,
    pub(crate) sl: u8,
    pub(crate) dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpCap {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpInitAttr {
    pub(crate) qp_context: *mut c_void,
    pub(crate) send_cq: *mut c_void,
    pub(crate) recv_cq: *mut c_void,
    pub(crate) srq: *mut c_void,
    pub(crate) cap: QpCap,
    pub(crate) qp_type: c_int,
    pub(crate) sq_sig_all: c_int,
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type Destroy = unsafe extern "C" fn(*mut c_void) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CreateCq =
    unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut c_void, c_int) -> *mut c_void;
type CreateQp = unsafe extern "C" fn(*mut c_void, *mut QpInitAttr) -> *mut c_void;
type ModifyQp = unsafe extern "C" fn(*mut c_void, *mut u8, c_int) -> c_int;
type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void;
type QueryPort = unsafe extern "C" fn(*mut c_void, u8, *mut u8) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut c_void, u8, c_int, *mut [u8; 16]) -> c_int;
pub(crate) type PollCq = unsafe extern "C" fn(*mut c_void, c_int, *mut Wc) -> c_int;
pub(crate) type PostSend =
    unsafe extern "C" fn(*mut c_void, *mut SendWr, *mut *mut SendWr) -> c_int;
pub(crate) type PostRecv =
    unsafe extern "C" fn(*mut c_void, *mut RecvWr, *mut *mut RecvWr) -> c_int;

/// The loaded library and its functions.
#[derive(Debug)]
pub(crate) struct Verbs {
    _library: Library,
    pub(crate) get_device_list: GetDeviceList,
    pub(crate) free_device_list: FreeDeviceList,
    pub(crate) get_device_name: GetDeviceName,
    pub(crate) open_device: OpenDevice,
    pub(crate) close_device: Destroy,
    pub(crate) alloc_pd: AllocPd,
    pub(crate) dealloc_pd: Destroy,
    pub(crate) create_cq: CreateCq,
    pub(crate) destroy_cq: Destroy,
    pub(crate) create_qp: CreateQp,
    pub(crate) destroy_qp: Destroy,
    pub(crate) modify_qp: ModifyQp,
    pub(crate) reg_mr: RegMr,
    pub(crate) dereg_mr: Destroy,
    pub(crate) query_port: QueryPort,
    pub(crate) query_gid: QueryGid,
}

/// Where the library is looked for.
#[cfg(target_os = "macos")]
const LIBRARY_NAMES: [&str; 1] = ["librdma.dylib"];
#[cfg(not(target_os = "macos"))]
const LIBRARY_NAMES: [&str; 1] = ["libibverbs.so.1"];

impl Verbs {
    /// Loads the system's verbs library, or says why it cannot.
    pub(crate) fn load() -> Result<Verbs, String> {
        let mut last = String::new();
        for name in LIBRARY_NAMES {
            // SAFETY: loading the system's verbs library runs its initialisers, which only
            // set up its own state.
            match unsafe { Library::new(name) } {
                Ok(library) => return Verbs::resolve(library).map_err(|e| format!("{name}: {e}")),
                Err(e) => last = format!("{name}: {e}"),
            }
        }
        Err(format!("the ibverbs library does not load ({last})"))
    }

    fn resolve(library: Library) -> Result<Verbs, libloading::Error> {
        // SAFETY: each symbol is declared with the signature `verbs.h` gives it (checked by
        // the `verbs_abi` test); the pointers stay valid while `_library` is held.
        unsafe {
            Ok(Verbs {
                get_device_list: *library.get(b"ibv_get_device_list\0")?,
                free_device_list: *library.get(b"ibv_free_device_list\0")?,
                get_device_name: *library.get(b"ibv_get_device_name\0")?,
                open_device: *library.get(b"ibv_open_device\0")?,
                close_device: *library.get(b"ibv_close_device\0")?,
                alloc_pd: *library.get(b"ibv_alloc_pd\0")?,
                dealloc_pd: *library.get(b"ibv_dealloc_pd\0")?,
                create_cq: *library.get(b"ibv_create_cq\0")?,
                destroy_cq: *library.get(b"ibv_destroy_cq\0")?,
                create_qp: *library.get(b"ibv_create_qp\0")?,
                destroy_qp: *library.get(b"ibv_destroy_qp\0")?,
                modify_qp: *library.get(b"ibv_modify_qp\0")?,
                reg_mr: *library.get(b"ibv_reg_mr\0")?,
                dereg_mr: *library.get(b"ibv_dereg_mr\0")?,
                query_port: *library.get(b"ibv_query_port\0")?,
                query_gid: *library.get(b"ibv_query_gid\0")?,
                _library: library,
            })
        }
    }

    /// The device names and handles of this machine (the list must be freed with
    /// `free_device_list`).
    pub(crate) fn device_list(&self) -> (Vec<(String, *mut c_void)>, *mut *mut c_void) {
        let mut count: c_int = 0;
        // SAFETY: ibv_get_device_list writes the count and returns a null-terminated array
        // (or null on error) that stays valid until ibv_free_device_list.
        let list = unsafe { (self.get_device_list)(&mut count) };
        let mut devices = Vec::new();
        if list.is_null() {
            return (devices, list);
        }
        for i in 0..count.max(0) as usize {
            // SAFETY: `i` is below the count the library reported for this array.
            let device = unsafe { *list.add(i) };
            if device.is_null() {
                break;
            }
            // SAFETY: ibv_get_device_name returns a NUL-terminated string owned by the device.
            let name = unsafe { std::ffi::CStr::from_ptr((self.get_device_name)(device)) };
            devices.push((name.to_string_lossy().into_owned(), device));
        }
        (devices, list)
    }

    /// Port 1's state, GID table length and LID.
    pub(crate) fn port(&self, context: *mut c_void) -> Result<(u32, usize, u16), String> {
        // Zeroed, with room beyond `struct ibv_port_attr` for fields newer libraries add.
        let mut attr = [0u8; 4 * PORT_ATTR_BYTES];
        // SAFETY: `attr` is zeroed and larger than `struct ibv_port_attr`; the context is open.
        let status = unsafe { (self.query_port)(context, 1, attr.as_mut_ptr()) };
        if status != 0 {
            return Err(format!("ibv_query_port failed ({status})"));
        }
        let u32_at =
            |at: usize| u32::from_ne_bytes(attr[at..at + 4].try_into().unwrap_or_default());
        let lid = u16::from_ne_bytes(
            attr[PORT_ATTR_LID..PORT_ATTR_LID + 2]
                .try_into()
                .unwrap_or_default(),
        );
        Ok((
            u32_at(PORT_ATTR_STATE),
            u32_at(PORT_ATTR_GID_TBL_LEN) as usize,
            lid,
        ))
    }

    /// GID `index` of port 1.
    pub(crate) fn gid(&self, context: *mut c_void, index: usize) -> Option<[u8; 16]> {
        let mut gid = [0u8; 16];
        // SAFETY: `gid` is the 16-byte union ibv_query_gid writes; the context is open.
        let status = unsafe { (self.query_gid)(context, 1, index as c_int, &mut gid) };
        (status == 0).then_some(gid)
    }

    /// The operation at `offset` of a context's operations table.
    ///
    /// # Safety
    /// `context` must be an open `ibv_context`, and `offset` one of the `CONTEXT_*` offsets,
    /// whose slot holds a function of type `F`.
    pub(crate) unsafe fn operation<F: Copy>(context: *mut c_void, offset: usize) -> F {
        // SAFETY: the caller guarantees the context and the slot's type.
        unsafe { *(context.cast::<u8>().add(offset).cast::<F>()) }
    }

    /// The `u32` at `offset` of a library object (`qp_num`, `lkey`).
    ///
    /// # Safety
    /// `object` must point to a live object with a `u32` at `offset`.
    pub(crate) unsafe fn field_u32(object: *mut c_void, offset: usize) -> u32 {
        // SAFETY: as the caller guarantees.
        unsafe { *(object.cast::<u8>().add(offset).cast::<u32>()) }
    }

    /// The context (the first field) of a queue pair or completion queue.
    ///
    /// # Safety
    /// `object` must point to a live `ibv_qp` or `ibv_cq`.
    pub(crate) unsafe fn context_of(object: *mut c_void) -> *mut c_void {
        // SAFETY: as the caller guarantees; the context pointer is the first field of both.
        unsafe { *(object.cast::<*mut c_void>()) }
    }
}
