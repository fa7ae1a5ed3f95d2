//! The real fabric: queue pairs of the system's ibverbs library (`ffi.rs`), set up as MLX's
//! JACCL sets them up: per connection its own protection domain, one completion queue for
//! sends and receives, an unreliable connected queue pair taken through INIT, RTR and RTS with
//! the peer's LID, queue pair number, packet sequence number and IPv4-mapped GID, and
//! registered send and receive slots. Unverified on hardware in this version (no RDMA device
//! where it was written); [`docs/jaccl.md`](https://github.com/nuvec/nuvec/blob/main/docs/jaccl.md) says what has been run where.
#![allow(unsafe_code)]

use super::ffi::*;
use super::{Completion, Fabric, QueuePair};
use nuvec_core::{Error, Result};
use std::ffi::c_void;
use std::sync::Arc;

/// The first packet sequence number, as MLX uses.
const FIRST_PSN: u32 = 7;
/// Marks a send's work request id.
const SEND_BIT: u64 = 1 << 32;
/// Bytes of an address: LID, queue pair number, first PSN, GID.
const ADDRESS_BYTES: usize = 26;

fn verbs_error(rank: usize, device: &str, reason: String) -> Error {
    Error::Distributed {
        op: "jaccl".into(),
        rank: Some(rank),
        reason: format!("ibverbs device {device}: {reason}"),
    }
}

/// Whether the verbs library loads on this machine.
pub(crate) fn library_loads() -> bool {
    Verbs::load().is_ok()
}

/// The fabric over the system's ibverbs.
#[derive(Debug)]
pub(crate) struct VerbsFabric {
    rank: usize,
    verbs: Arc<Verbs>,
}

impl VerbsFabric {
    /// The fabric of rank `rank` (named in its errors).
    pub(crate) fn load(rank: usize) -> Result<VerbsFabric> {
        let verbs = Verbs::load().map_err(|reason| Error::Distributed {
            op: "jaccl".into(),
            rank: Some(rank),
            reason: format!("{reason}; on a machine without RDMA hardware, set NUVEC_JACCL_FABRIC=emulated to run JACCL's algorithms over the emulated fabric"),
        })?;
        Ok(VerbsFabric {
            rank,
            verbs: Arc::new(verbs),
        })
    }

    /// Opens `name`'s context, or says which devices exist.
    fn open_context(&self, name: &str) -> Result<*mut c_void> {
        let (devices, list) = self.verbs.device_list();
        let found = devices.iter().find(|(n, _)| n == name).map(|&(_, d)| d);
        // SAFETY: the device is opened before the list is freed, as verbs.h allows.
        let context = found.map(|device| unsafe { (self.verbs.open_device)(device) });
        if !list.is_null() {
            // SAFETY: `list` came from ibv_get_device_list and is freed once.
            unsafe { (self.verbs.free_device_list)(list) };
        }
        match context {
            Some(context) if !context.is_null() => Ok(context),
            Some(_) => Err(verbs_error(
                self.rank,
                name,
                "ibv_open_device failed".into(),
            )),
            None => {
                let names: Vec<&str> = devices.iter().map(|(n, _)| n.as_str()).collect();
                Err(verbs_error(self.rank, name, format!("no such device on this machine (it has: {names:?}); check the device file, or enable RDMA with `rdma_ctl enable` in recoveryOS on a Mac")))
            }
        }
    }
}

/// The index of the first IPv4-mapped GID of port 1 (`::ffff:a.b.c.d`).
pub(crate) fn ipv4_gid(
    verbs: &Verbs,
    context: *mut c_void,
    table: usize,
) -> Option<(usize, [u8; 16])> {
    (0..table).find_map(|i| {
        let gid = verbs.gid(context, i)?;
        (gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff)
            .then_some((i, gid))
    })
}

impl Fabric for VerbsFabric {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn open(&self, device: &str, slots: usize, slot_bytes: usize) -> Result<Box<dyn QueuePair>> {
        let context = self.open_context(device)?;
        let mut qp = VerbsQueuePair {
            rank: self.rank,
            verbs: self.verbs.clone(),
            device: device.to_string(),
            context,
            pd: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            send_mr: std::ptr::null_mut(),
            recv_mr: std::ptr::null_mut(),
            send: vec![0; slots * slot_bytes].into_boxed_slice(),
            recv: vec![0; slots * slot_bytes].into_boxed_slice(),
            slot_bytes,
            lid: 0,
            gid: [0; 16],
            gid_index: 0,
        };
        qp.set_up(slots)?;
        Ok(Box::new(qp))
    }
}

/// One queue pair and the objects it owns (released in `Drop`).
#[derive(Debug)]
struct VerbsQueuePair {
    rank: usize,
    verbs: Arc<Verbs>,
    device: String,
    context: *mut c_void,
    pd: *mut c_void,
    cq: *mut c_void,
    qp: *mut c_void,
    send_mr: *mut c_void,
    recv_mr: *mut c_void,
    send: Box<[u8]>,
    recv: Box<[u8]>,
    slot_bytes: usize,
    lid: u16,
    gid: [u8; 16],
    gid_index: usize,
}

// SAFETY: verbs objects may be used from any thread; this queue pair is used by one thread at
// a time (every method takes `&mut self` or only reads), and its memory is owned here.
unsafe impl Send for VerbsQueuePair {}

impl VerbsQueuePair {
    fn error(&self, reason: String) -> Error {
        verbs_error(self.rank, &self.device, reason)
    }

    fn set_up(&mut self, slots: usize) -> Result<()> {
        let (state, table, lid) = self.verbs.port(self.context).map_err(|e| self.error(e))?;
        if state != PORT_ACTIVE {
            return Err(self.error(format!(
                "port 1 is not active (state {state}): is the cable plugged in and the peer on?"
            )));
        }
        let (index, gid) = ipv4_gid(&self.verbs, self.context, table).ok_or_else(|| {
            self.error("no IPv4-mapped GID on port 1: give its network interface an IPv4 address (a link-local 169.254.x.x one is enough)".into())
        })?;
        (self.lid, self.gid, self.gid_index) = (lid, gid, index);
        // SAFETY: the context is open; each object is created once and checked for null.
        unsafe {
            self.pd = (self.verbs.alloc_pd)(self.context);
            if self.pd.is_null() {
                return Err(self.error("ibv_alloc_pd failed".into()));
            }
            self.cq = (self.verbs.create_cq)(
                self.context,
                (2 * slots + 4) as i32,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            );
            if self.cq.is_null() {
                return Err(self.error("ibv_create_cq failed".into()));
            }
            let mut init = QpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: std::ptr::null_mut(),
                cap: QpCap {
                    max_send_wr: slots as u32,
                    max_recv_wr: slots as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: QPT_UC,
                sq_sig_all: 0,
            };
            self.qp = (self.verbs.create_qp)(self.pd, &mut init);
            if self.qp.is_null() {
                return Err(self.error("ibv_create_qp (unreliable connected) failed".into()));
            }
            self.send_mr = (self.verbs.reg_mr)(
                self.pd,
                self.send.as_mut_ptr().cast(),
                self.send.len(),
                ACCESS_LOCAL_WRITE,
            );
            self.recv_mr = (self.verbs.reg_mr)(
                self.pd,
                self.recv.as_mut_ptr().cast(),
                self.recv.len(),
                ACCESS_LOCAL_WRITE,
            );
            if self.send_mr.is_null() || self.recv_mr.is_null() {
                return Err(self.error(
                    "ibv_reg_mr failed (is the locked-memory limit, ulimit -l, large enough?)"
                        .into(),
                ));
            }
        }
        let mut attr = [0u8; QP_ATTR_BYTES];
        put_u32(&mut attr, QP_ATTR_STATE, QPS_INIT);
        attr[QP_ATTR_PKEY_INDEX..QP_ATTR_PKEY_INDEX + 2].copy_from_slice(&0u16.to_ne_bytes());
        attr[QP_ATTR_PORT] = 1;
        put_u32(&mut attr, QP_ATTR_ACCESS, (ACCESS_LOCAL_WRITE | 2) as u32);
        self.modify(
            &mut attr,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
            "INIT",
        )
    }

    fn modify(&self, attr: &mut [u8; QP_ATTR_BYTES], mask: i32, state: &str) -> Result<()> {
        // SAFETY: `attr` is a zero-initialised `struct ibv_qp_attr` with the masked fields set
        // at their checked offsets; the queue pair is live.
        let status = unsafe { (self.verbs.modify_qp)(self.qp, attr.as_mut_ptr(), mask) };
        if status != 0 {
            return Err(self.error(format!(
                "moving the queue pair to {state} failed ({status})"
            )));
        }
        Ok(())
    }

    fn lkey(mr: *mut c_void) -> u32 {
        // SAFETY: `mr` is a live `ibv_mr` registered in `set_up`.
        unsafe { Verbs::field_u32(mr, MR_LKEY) }
    }
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_ne_bytes());
}

impl QueuePair for VerbsQueuePair {
    fn address(&self) -> Vec<u8> {
        // SAFETY: the queue pair is live.
        let qp_num = unsafe { Verbs::field_u32(self.qp, QP_NUM) };
        let mut address = Vec::with_capacity(ADDRESS_BYTES);
        address.extend_from_slice(&self.lid.to_le_bytes());
        address.extend_from_slice(&qp_num.to_le_bytes());
        address.extend_from_slice(&FIRST_PSN.to_le_bytes());
        address.extend_from_slice(&self.gid);
        address
    }

    fn connect(&mut self, remote: &[u8]) -> Result<()> {
        if remote.len() != ADDRESS_BYTES {
            return Err(self.error(format!(
                "the peer's address has {} bytes, expected {ADDRESS_BYTES}",
                remote.len()
            )));
        }
        let lid = u16::from_le_bytes([remote[0], remote[1]]);
        let qp_num = u32::from_le_bytes(remote[2..6].try_into().unwrap_or_default());
        let psn = u32::from_le_bytes(remote[6..10].try_into().unwrap_or_default());
        let gid = &remote[10..26];
        let mut attr = [0u8; QP_ATTR_BYTES];
        put_u32(&mut attr, QP_ATTR_STATE, QPS_RTR);
        put_u32(&mut attr, QP_ATTR_PATH_MTU, MTU_1024);
        put_u32(&mut attr, QP_ATTR_DEST_QP_NUM, qp_num);
        put_u32(&mut attr, QP_ATTR_RQ_PSN, psn);
        let ah = QP_ATTR_AH;
        attr[ah + AH_DLID..ah + AH_DLID + 2].copy_from_slice(&lid.to_ne_bytes());
        attr[ah + AH_PORT] = 1;
        if gid.iter().any(|&b| b != 0) {
            attr[ah + AH_IS_GLOBAL] = 1;
            attr[ah + AH_DGID..ah + AH_DGID + 16].copy_from_slice(gid);
            attr[ah + AH_SGID_INDEX] = self.gid_index as u8;
            attr[ah + AH_HOP_LIMIT] = 1;
        }
        self.modify(
            &mut attr,
            QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN,
            "RTR",
        )?;
        let mut attr = [0u8; QP_ATTR_BYTES];
        put_u32(&mut attr, QP_ATTR_STATE, QPS_RTS);
        put_u32(&mut attr, QP_ATTR_SQ_PSN, FIRST_PSN);
        self.modify(&mut attr, QP_STATE | QP_SQ_PSN, "RTS")
    }

    fn send_slot(&mut self, slot: usize) -> &mut [u8] {
        &mut self.send[slot * self.slot_bytes..(slot + 1) * self.slot_bytes]
    }

    fn recv_slot(&self, slot: usize) -> &[u8] {
        &self.recv[slot * self.slot_bytes..(slot + 1) * self.slot_bytes]
    }

    fn post_send(&mut self, slot: usize, len: usize) -> Result<()> {
        let mut sge = Sge {
            addr: self.send[slot * self.slot_bytes..].as_ptr() as u64,
            length: len as u32,
            lkey: Self::lkey(self.send_mr),
        };
        let mut wr = SendWr {
            wr_id: SEND_BIT | slot as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: WR_SEND,
            send_flags: SEND_SIGNALED,
            imm_data: 0,
            rest: [0; 11],
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the queue pair is live; its context's post_send takes this work request,
        // whose scatter entry lies in the registered send region, which outlives the send.
        let status = unsafe {
            let post: PostSend = Verbs::operation(Verbs::context_of(self.qp), CONTEXT_POST_SEND);
            post(self.qp, &mut wr, &mut bad)
        };
        if status != 0 {
            return Err(self.error(format!("posting a send failed ({status})")));
        }
        Ok(())
    }

    fn post_recv(&mut self, slot: usize) -> Result<()> {
        let mut sge = Sge {
            addr: self.recv[slot * self.slot_bytes..].as_ptr() as u64,
            length: self.slot_bytes as u32,
            lkey: Self::lkey(self.recv_mr),
        };
        let mut wr = RecvWr {
            wr_id: slot as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: as for post_send, over the registered receive region.
        let status = unsafe {
            let post: PostRecv = Verbs::operation(Verbs::context_of(self.qp), CONTEXT_POST_RECV);
            post(self.qp, &mut wr, &mut bad)
        };
        if status != 0 {
            return Err(self.error(format!("posting a receive failed ({status})")));
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        let mut completions = [Wc::default(); 16];
        // SAFETY: the completion queue is live; poll_cq writes at most 16 entries.
        let n = unsafe {
            let poll: PollCq = Verbs::operation(Verbs::context_of(self.cq), CONTEXT_POLL_CQ);
            poll(self.cq, completions.len() as i32, completions.as_mut_ptr())
        };
        if n < 0 {
            return Err(self.error(format!("polling the completion queue failed ({n})")));
        }
        for wc in &completions[..n as usize] {
            if wc.status != 0 {
                return Err(self.error(format!(
                    "a work request failed with status {} (vendor error {}): the link or the peer is gone",
                    wc.status, wc.vendor_err
                )));
            }
            let slot = (wc.wr_id & 0xffff_ffff) as usize;
            out.push(if wc.opcode & WC_RECV != 0 {
                Completion::Received {
                    slot,
                    len: wc.byte_len as usize,
                }
            } else {
                Completion::Sent { slot }
            });
        }
        Ok(())
    }

    fn wake_fd(&self) -> Option<(i32, bool)> {
        None
    }
}

impl Drop for VerbsQueuePair {
    fn drop(&mut self) {
        // SAFETY: each object was created by this queue pair, is released once, queue pair
        // first and context last, as verbs.h requires.
        unsafe {
            if !self.qp.is_null() {
                (self.verbs.destroy_qp)(self.qp);
            }
            for mr in [self.send_mr, self.recv_mr] {
                if !mr.is_null() {
                    (self.verbs.dereg_mr)(mr);
                }
            }
            if !self.cq.is_null() {
                (self.verbs.destroy_cq)(self.cq);
            }
            if !self.pd.is_null() {
                (self.verbs.dealloc_pd)(self.pd);
            }
            if !self.context.is_null() {
                (self.verbs.close_device)(self.context);
            }
        }
    }
}
