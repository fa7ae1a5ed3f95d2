//! `verbs_abi`: the hand-written declarations of `ffi.rs` checked against the installed
//! `infiniband/verbs.h`, by compiling a small C program with `cc` and comparing what it prints.
//! Without the header the test says it skipped, unless `NUVEC_REQUIRE_VERBS` is set (CI sets
//! it and installs `libibverbs-dev`), when it fails.

use super::ffi::*;
use std::mem::{offset_of, size_of};

/// Every value to compare: its name, the C expression, and ours.
fn values() -> Vec<(&'static str, &'static str, i64)> {
    let v = |x: usize| x as i64;
    vec![
        (
            "poll_cq",
            "offsetof(struct ibv_context, ops.poll_cq)",
            v(CONTEXT_POLL_CQ),
        ),
        (
            "post_send",
            "offsetof(struct ibv_context, ops.post_send)",
            v(CONTEXT_POST_SEND),
        ),
        (
            "post_recv",
            "offsetof(struct ibv_context, ops.post_recv)",
            v(CONTEXT_POST_RECV),
        ),
        ("qp_context", "offsetof(struct ibv_qp, context)", 0),
        ("cq_context", "offsetof(struct ibv_cq, context)", 0),
        ("qp_num", "offsetof(struct ibv_qp, qp_num)", v(QP_NUM)),
        ("mr_lkey", "offsetof(struct ibv_mr, lkey)", v(MR_LKEY)),
        ("sge", "sizeof(struct ibv_sge)", v(size_of::<Sge>())),
        (
            "sge_lkey",
            "offsetof(struct ibv_sge, lkey)",
            v(offset_of!(Sge, lkey)),
        ),
        (
            "send_wr",
            "sizeof(struct ibv_send_wr)",
            v(size_of::<SendWr>()),
        ),
        (
            "send_wr_sg_list",
            "offsetof(struct ibv_send_wr, sg_list)",
            v(offset_of!(SendWr, sg_list)),
        ),
        (
            "send_wr_num_sge",
            "offsetof(struct ibv_send_wr, num_sge)",
            v(offset_of!(SendWr, num_sge)),
        ),
        (
            "send_wr_opcode",
            "offsetof(struct ibv_send_wr, opcode)",
            v(offset_of!(SendWr, opcode)),
        ),
        (
            "send_wr_flags",
            "offsetof(struct ibv_send_wr, send_flags)",
            v(offset_of!(SendWr, send_flags)),
        ),
        (
            "recv_wr",
            "sizeof(struct ibv_recv_wr)",
            v(size_of::<RecvWr>()),
        ),
        (
            "recv_wr_num_sge",
            "offsetof(struct ibv_recv_wr, num_sge)",
            v(offset_of!(RecvWr, num_sge)),
        ),
        ("wc", "sizeof(struct ibv_wc)", v(size_of::<Wc>())),
        (
            "wc_status",
            "offsetof(struct ibv_wc, status)",
            v(offset_of!(Wc, status)),
        ),
        (
            "wc_opcode",
            "offsetof(struct ibv_wc, opcode)",
            v(offset_of!(Wc, opcode)),
        ),
        (
            "wc_vendor_err",
            "offsetof(struct ibv_wc, vendor_err)",
            v(offset_of!(Wc, vendor_err)),
        ),
        (
            "wc_byte_len",
            "offsetof(struct ibv_wc, byte_len)",
            v(offset_of!(Wc, byte_len)),
        ),
        (
            "init_attr",
            "sizeof(struct ibv_qp_init_attr)",
            v(size_of::<QpInitAttr>()),
        ),
        (
            "init_cap",
            "offsetof(struct ibv_qp_init_attr, cap)",
            v(offset_of!(QpInitAttr, cap)),
        ),
        (
            "init_qp_type",
            "offsetof(struct ibv_qp_init_attr, qp_type)",
            v(offset_of!(QpInitAttr, qp_type)),
        ),
        ("qp_cap", "sizeof(struct ibv_qp_cap)", v(size_of::<QpCap>())),
        ("qp_attr", "sizeof(struct ibv_qp_attr)", v(QP_ATTR_BYTES)),
        (
            "qp_attr_state",
            "offsetof(struct ibv_qp_attr, qp_state)",
            v(QP_ATTR_STATE),
        ),
        (
            "qp_attr_mtu",
            "offsetof(struct ibv_qp_attr, path_mtu)",
            v(QP_ATTR_PATH_MTU),
        ),
        (
            "qp_attr_rq_psn",
            "offsetof(struct ibv_qp_attr, rq_psn)",
            v(QP_ATTR_RQ_PSN),
        ),
        (
            "qp_attr_sq_psn",
            "offsetof(struct ibv_qp_attr, sq_psn)",
            v(QP_ATTR_SQ_PSN),
        ),
        (
            "qp_attr_dest",
            "offsetof(struct ibv_qp_attr, dest_qp_num)",
            v(QP_ATTR_DEST_QP_NUM),
        ),
        (
            "qp_attr_access",
            "offsetof(struct ibv_qp_attr, qp_access_flags)",
            v(QP_ATTR_ACCESS),
        ),
        (
            "qp_attr_ah",
            "offsetof(struct ibv_qp_attr, ah_attr)",
            v(QP_ATTR_AH),
        ),
        (
            "qp_attr_pkey",
            "offsetof(struct ibv_qp_attr, pkey_index)",
            v(QP_ATTR_PKEY_INDEX),
        ),
        (
            "qp_attr_port",
            "offsetof(struct ibv_qp_attr, port_num)",
            v(QP_ATTR_PORT),
        ),
        (
            "ah_dgid",
            "offsetof(struct ibv_ah_attr, grh.dgid)",
            v(AH_DGID),
        ),
        (
            "ah_sgid_index",
            "offsetof(struct ibv_ah_attr, grh.sgid_index)",
            v(AH_SGID_INDEX),
        ),
        (
            "ah_hop_limit",
            "offsetof(struct ibv_ah_attr, grh.hop_limit)",
            v(AH_HOP_LIMIT),
        ),
        ("ah_dlid", "offsetof(struct ibv_ah_attr, dlid)", v(AH_DLID)),
        (
            "ah_is_global",
            "offsetof(struct ibv_ah_attr, is_global)",
            v(AH_IS_GLOBAL),
        ),
        (
            "ah_port",
            "offsetof(struct ibv_ah_attr, port_num)",
            v(AH_PORT),
        ),
        (
            "port_attr",
            "sizeof(struct ibv_port_attr)",
            v(PORT_ATTR_BYTES),
        ),
        (
            "port_state",
            "offsetof(struct ibv_port_attr, state)",
            v(PORT_ATTR_STATE),
        ),
        (
            "port_gid_tbl_len",
            "offsetof(struct ibv_port_attr, gid_tbl_len)",
            v(PORT_ATTR_GID_TBL_LEN),
        ),
        (
            "port_lid",
            "offsetof(struct ibv_port_attr, lid)",
            v(PORT_ATTR_LID),
        ),
        ("qpt_uc", "IBV_QPT_UC", i64::from(QPT_UC)),
        ("qps_init", "IBV_QPS_INIT", i64::from(QPS_INIT)),
        ("qps_rtr", "IBV_QPS_RTR", i64::from(QPS_RTR)),
        ("qps_rts", "IBV_QPS_RTS", i64::from(QPS_RTS)),
        ("mtu_1024", "IBV_MTU_1024", i64::from(MTU_1024)),
        ("wr_send", "IBV_WR_SEND", i64::from(WR_SEND)),
        (
            "send_signaled",
            "IBV_SEND_SIGNALED",
            i64::from(SEND_SIGNALED),
        ),
        ("wc_recv", "IBV_WC_RECV", i64::from(WC_RECV)),
        (
            "access_local_write",
            "IBV_ACCESS_LOCAL_WRITE",
            i64::from(ACCESS_LOCAL_WRITE),
        ),
        ("port_active", "IBV_PORT_ACTIVE", i64::from(PORT_ACTIVE)),
        ("mask_state", "IBV_QP_STATE", i64::from(QP_STATE)),
        (
            "mask_access",
            "IBV_QP_ACCESS_FLAGS",
            i64::from(QP_ACCESS_FLAGS),
        ),
        ("mask_pkey", "IBV_QP_PKEY_INDEX", i64::from(QP_PKEY_INDEX)),
        ("mask_port", "IBV_QP_PORT", i64::from(QP_PORT)),
        ("mask_av", "IBV_QP_AV", i64::from(QP_AV)),
        ("mask_mtu", "IBV_QP_PATH_MTU", i64::from(QP_PATH_MTU)),
        ("mask_rq_psn", "IBV_QP_RQ_PSN", i64::from(QP_RQ_PSN)),
        ("mask_sq_psn", "IBV_QP_SQ_PSN", i64::from(QP_SQ_PSN)),
        ("mask_dest_qpn", "IBV_QP_DEST_QPN", i64::from(QP_DEST_QPN)),
    ]
}

/// The C program that prints every value of [`values`].
fn c_program() -> String {
    let mut program = String::from(
        "#include <infiniband/verbs.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
    for (name, expression, _) in values() {
        program.push_str(&format!(
            "    printf(\"{name} %lld\\n\", (long long)({expression}));\n"
        ));
    }
    program.push_str("    return 0;\n}\n");
    program
}

#[test]
fn verbs_abi_declarations_match_the_installed_verbs_h() {
    let Some(c) = crate::c_probe::c_values(
        "verbs_abi",
        "cc",
        &c_program(),
        "NUVEC_REQUIRE_VERBS",
        "install libibverbs-dev",
    ) else {
        return;
    };
    for (name, expression, ours) in values() {
        assert_eq!(
            c.get(name),
            Some(&ours),
            "{name} ({expression}): verbs.h says {:?}",
            c.get(name)
        );
    }
}

#[test]
fn the_verbs_library_loads_where_it_is_installed() {
    match Verbs::load() {
        Ok(verbs) => {
            let (devices, list) = verbs.device_list();
            assert!(devices.iter().all(|(name, _)| !name.is_empty()));
            if !list.is_null() {
                #[allow(unsafe_code)]
                // SAFETY: `list` came from ibv_get_device_list and is freed once.
                unsafe {
                    (verbs.free_device_list)(list)
                };
            }
        }
        Err(reason) => assert!(
            std::env::var_os("NUVEC_REQUIRE_VERBS").is_none(),
            "NUVEC_REQUIRE_VERBS is set but {reason}"
        ),
    }
}
