//! The part of libfabric's ABI (1.17, `<rdma/*.h>`) that ni's provider (`libni/fi`) fills in
//! or reads, and that the daemon's libfabric link (`device/src/link/ofi.rs`) calls through.
//!
//! Written by hand from the installed `libfabric-dev` headers, field for field with the C
//! names, and checked against them: `libni/fi/tests/layout.rs` compiles a C program over the real
//! headers that prints every struct's size and every field's offset listed in [`LAYOUT`],
//! and compares. A header that changes a layout fails that test, not a user's run.
#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_void};

pub type fi_addr_t = u64;
pub type ssize_t = isize;

pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

// Capabilities and operation flags (fabric.h).
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_ATOMIC: u64 = 1 << 4;
pub const FI_MULTICAST: u64 = 1 << 5;
pub const FI_COLLECTIVE: u64 = 1 << 6;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
pub const FI_MULTI_RECV: u64 = 1 << 16;
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
pub const FI_MORE: u64 = 1 << 18;
pub const FI_PEEK: u64 = 1 << 19;
pub const FI_TRIGGER: u64 = 1 << 20;
pub const FI_FENCE: u64 = 1 << 21;
pub const FI_COMPLETION: u64 = 1 << 24;
/// `FI_COMPLETION` by its AV name (asynchronous inserts reported through an EQ).
pub const FI_EVENT: u64 = FI_COMPLETION;
pub const FI_INJECT: u64 = 1 << 25;
pub const FI_INJECT_COMPLETE: u64 = 1 << 26;
pub const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
pub const FI_MATCH_COMPLETE: u64 = 1 << 31;
pub const FI_HMEM: u64 = 1 << 47;
pub const FI_VARIABLE_MSG: u64 = 1 << 48;
pub const FI_LOCAL_COMM: u64 = 1 << 51;
pub const FI_REMOTE_COMM: u64 = 1 << 52;
pub const FI_SHARED_AV: u64 = 1 << 53;
pub const FI_PROV_ATTR_ONLY: u64 = 1 << 54;
pub const FI_NUMERICHOST: u64 = 1 << 55;
pub const FI_RMA_EVENT: u64 = 1 << 56;
pub const FI_SOURCE: u64 = 1 << 57;
pub const FI_NAMED_RX_CTX: u64 = 1 << 58;
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
pub const FI_CLAIM: u64 = 1 << 59;
pub const FI_DISCARD: u64 = 1 << 58;
/// `fi_bind` flag.
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;

// Mode bits.
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_MSG_PREFIX: u64 = 1 << 58;
pub const FI_RX_CQ_DATA: u64 = 1 << 56;
pub const FI_LOCAL_MR: u64 = 1 << 55;
pub const FI_CONTEXT2: u64 = 1 << 52;

// Address formats, AV types, MR modes, progress, threading, resource management.
pub const FI_FORMAT_UNSPEC: u32 = 0;
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;
pub const FI_AV_UNSPEC: c_int = 0;
pub const FI_AV_MAP: c_int = 1;
pub const FI_AV_TABLE: c_int = 2;
pub const FI_MR_UNSPEC: c_int = 0;
pub const FI_MR_BASIC: c_int = 1;
pub const FI_MR_SCALABLE: c_int = 2;
pub const FI_MR_LOCAL: c_int = 1 << 2;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
pub const FI_MR_ENDPOINT: c_int = 1 << 9;
pub const FI_PROGRESS_UNSPEC: c_int = 0;
pub const FI_PROGRESS_AUTO: c_int = 1;
pub const FI_PROGRESS_MANUAL: c_int = 2;
pub const FI_THREAD_UNSPEC: c_int = 0;
pub const FI_THREAD_SAFE: c_int = 1;
pub const FI_THREAD_FID: c_int = 2;
pub const FI_THREAD_DOMAIN: c_int = 3;
pub const FI_THREAD_COMPLETION: c_int = 4;
pub const FI_THREAD_ENDPOINT: c_int = 5;
pub const FI_RM_UNSPEC: c_int = 0;
pub const FI_RM_DISABLED: c_int = 1;
pub const FI_RM_ENABLED: c_int = 2;
pub const FI_EP_UNSPEC: c_int = 0;
pub const FI_EP_MSG: c_int = 1;
pub const FI_EP_DGRAM: c_int = 2;
pub const FI_EP_RDM: c_int = 3;
pub const FI_PROTO_UNSPEC: u32 = 0;

pub const FI_ORDER_SAS: u64 = 1 << 8;
pub const FI_ORDER_STRICT: u64 = 0x1FF;

// Classes (fabric.h `enum { FI_CLASS_... }`).
pub const FI_CLASS_UNSPEC: usize = 0;
pub const FI_CLASS_FABRIC: usize = 1;
pub const FI_CLASS_DOMAIN: usize = 2;
pub const FI_CLASS_EP: usize = 3;
pub const FI_CLASS_SEP: usize = 4;
pub const FI_CLASS_RX_CTX: usize = 5;
pub const FI_CLASS_SRX_CTX: usize = 6;
pub const FI_CLASS_TX_CTX: usize = 7;
pub const FI_CLASS_STX_CTX: usize = 8;
pub const FI_CLASS_PEP: usize = 9;
pub const FI_CLASS_INTERFACE: usize = 10;
pub const FI_CLASS_AV: usize = 11;
pub const FI_CLASS_MR: usize = 12;
pub const FI_CLASS_EQ: usize = 13;
pub const FI_CLASS_CQ: usize = 14;
pub const FI_CLASS_CNTR: usize = 15;

// fi_control commands.
pub const FI_GETFIDFLAG: c_int = 0;
pub const FI_SETFIDFLAG: c_int = 1;
pub const FI_GETOPSFLAG: c_int = 2;
pub const FI_SETOPSFLAG: c_int = 3;
pub const FI_ALIAS: c_int = 4;
pub const FI_GETWAIT: c_int = 5;
pub const FI_ENABLE: c_int = 6;

// Endpoint options.
pub const FI_OPT_ENDPOINT: c_int = 0;
pub const FI_OPT_MIN_MULTI_RECV: c_int = 0;
pub const FI_OPT_CM_DATA_SIZE: c_int = 1;

// CQ formats and wait objects (fi_eq.h).
pub const FI_CQ_FORMAT_UNSPEC: c_int = 0;
pub const FI_CQ_FORMAT_CONTEXT: c_int = 1;
pub const FI_CQ_FORMAT_MSG: c_int = 2;
pub const FI_CQ_FORMAT_DATA: c_int = 3;
pub const FI_CQ_FORMAT_TAGGED: c_int = 4;
pub const FI_WAIT_NONE: c_int = 0;
pub const FI_WAIT_UNSPEC: c_int = 1;
pub const FI_WAIT_SET: c_int = 2;
pub const FI_WAIT_FD: c_int = 3;
pub const FI_WAIT_MUTEX_COND: c_int = 4;
pub const FI_WAIT_YIELD: c_int = 5;

// Logging (providers/fi_log.h).
pub const FI_LOG_WARN: c_int = 0;
pub const FI_LOG_TRACE: c_int = 1;
pub const FI_LOG_INFO: c_int = 2;
pub const FI_LOG_DEBUG: c_int = 3;
pub const FI_LOG_CORE: c_int = 0;
pub const FI_LOG_FABRIC: c_int = 1;
pub const FI_LOG_DOMAIN: c_int = 2;
pub const FI_LOG_EP_CTRL: c_int = 3;
pub const FI_LOG_EP_DATA: c_int = 4;
pub const FI_LOG_AV: c_int = 5;
pub const FI_LOG_CQ: c_int = 6;
pub const FI_LOG_MR: c_int = 8;

/// Error numbers (fi_errno.h): the system's errno where one exists, ours from 256.
pub mod errno {
    use std::ffi::c_int;
    pub const FI_EPERM: c_int = libc::EPERM;
    pub const FI_ENOENT: c_int = libc::ENOENT;
    pub const FI_EIO: c_int = libc::EIO;
    pub const FI_E2BIG: c_int = libc::E2BIG;
    pub const FI_EAGAIN: c_int = libc::EAGAIN;
    pub const FI_ENOMEM: c_int = libc::ENOMEM;
    pub const FI_EACCES: c_int = libc::EACCES;
    pub const FI_EFAULT: c_int = libc::EFAULT;
    pub const FI_EBUSY: c_int = libc::EBUSY;
    pub const FI_ENODEV: c_int = libc::ENODEV;
    pub const FI_EINVAL: c_int = libc::EINVAL;
    pub const FI_ENOSPC: c_int = libc::ENOSPC;
    pub const FI_ENOSYS: c_int = libc::ENOSYS;
    pub const FI_ENOMSG: c_int = libc::ENOMSG;
    pub const FI_ENODATA: c_int = libc::ENODATA;
    pub const FI_EOVERFLOW: c_int = libc::EOVERFLOW;
    pub const FI_EMSGSIZE: c_int = libc::EMSGSIZE;
    pub const FI_ENOPROTOOPT: c_int = libc::ENOPROTOOPT;
    pub const FI_EOPNOTSUPP: c_int = libc::EOPNOTSUPP;
    pub const FI_EADDRNOTAVAIL: c_int = libc::EADDRNOTAVAIL;
    pub const FI_ENETDOWN: c_int = libc::ENETDOWN;
    pub const FI_ETIMEDOUT: c_int = libc::ETIMEDOUT;
    pub const FI_ECONNREFUSED: c_int = libc::ECONNREFUSED;
    pub const FI_EHOSTDOWN: c_int = libc::EHOSTDOWN;
    pub const FI_EHOSTUNREACH: c_int = libc::EHOSTUNREACH;
    pub const FI_ECANCELED: c_int = libc::ECANCELED;
    pub const FI_EOTHER: c_int = 256;
    pub const FI_ETOOSMALL: c_int = 257;
    pub const FI_EOPBADSTATE: c_int = 258;
    pub const FI_EAVAIL: c_int = 259;
    pub const FI_EBADFLAGS: c_int = 260;
    pub const FI_ENOEQ: c_int = 261;
    pub const FI_EDOMAIN: c_int = 262;
    pub const FI_ENOCQ: c_int = 263;
    pub const FI_ETRUNC: c_int = 265;
    pub const FI_ENOKEY: c_int = 266;
    pub const FI_ENOAV: c_int = 267;
}

#[repr(C)]
pub struct fi_context {
    pub internal: [*mut c_void; 4],
}

#[repr(C)]
pub struct fi_tx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_rx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[repr(C)]
pub struct fi_ep_attr {
    pub type_: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

#[repr(C)]
pub struct fi_domain_attr {
    pub domain: *mut fid_domain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
    // libfabric 1.20 and 2.x appended these (fabric(7), "ABI 1.7" to "ABI 1.9"). A 1.17
    // core copies only the fields before them; a 2.x core's `fi_dupinfo` copies its whole
    // struct out of ours, so they must be here (zero: no limit offered) or it reads past
    // our template.
    pub max_ep_auth_key: usize,
    pub max_group_id: u32,
    pub max_cntr_value: u64,
    pub max_err_cntr_value: u64,
}

/// The size of `fi_domain_attr` up to libfabric 1.19 (the installed 1.17 headers' size):
/// what the layout test compares with `sizeof(struct fi_domain_attr)` there.
pub const DOMAIN_ATTR_1_17_SIZE: usize = std::mem::offset_of!(fi_domain_attr, max_ep_auth_key);

#[repr(C)]
pub struct fi_fabric_attr {
    pub fabric: *mut fid_fabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_info {
    pub next: *mut fi_info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut fid,
    pub tx_attr: *mut fi_tx_attr,
    pub rx_attr: *mut fi_rx_attr,
    pub ep_attr: *mut fi_ep_attr,
    pub domain_attr: *mut fi_domain_attr,
    pub fabric_attr: *mut fi_fabric_attr,
    pub nic: *mut c_void,
}

#[repr(C)]
pub struct fi_ops {
    pub size: usize,
    pub close: Option<unsafe extern "C" fn(*mut fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(*mut fid, *mut fid, u64) -> c_int>,
    pub control: Option<unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int>,
    pub ops_open: Option<
        unsafe extern "C" fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub tostr: Option<unsafe extern "C" fn(*const fid, *mut c_char, usize) -> c_int>,
    pub ops_set: Option<
        unsafe extern "C" fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int,
    >,
}

#[repr(C)]
pub struct fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *mut fi_ops,
}

#[repr(C)]
pub struct fi_provider {
    pub version: u32,
    pub fi_version: u32,
    pub context: fi_context,
    pub name: *const c_char,
    pub getinfo: Option<
        unsafe extern "C" fn(
            u32,
            *const c_char,
            *const c_char,
            u64,
            *const fi_info,
            *mut *mut fi_info,
        ) -> c_int,
    >,
    pub fabric: Option<
        unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut c_void) -> c_int,
    >,
    pub cleanup: Option<unsafe extern "C" fn()>,
}

#[repr(C)]
pub struct fi_ops_fabric {
    pub size: usize,
    pub domain: Option<
        unsafe extern "C" fn(
            *mut fid_fabric,
            *mut fi_info,
            *mut *mut fid_domain,
            *mut c_void,
        ) -> c_int,
    >,
    pub passive_ep: Option<
        unsafe extern "C" fn(*mut fid_fabric, *mut fi_info, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub eq_open: Option<
        unsafe extern "C" fn(
            *mut fid_fabric,
            *mut fi_eq_attr,
            *mut *mut fid_eq,
            *mut c_void,
        ) -> c_int,
    >,
    pub wait_open:
        Option<unsafe extern "C" fn(*mut fid_fabric, *mut c_void, *mut *mut c_void) -> c_int>,
    pub trywait: Option<unsafe extern "C" fn(*mut fid_fabric, *mut *mut fid, c_int) -> c_int>,
    pub domain2: Option<
        unsafe extern "C" fn(
            *mut fid_fabric,
            *mut fi_info,
            *mut *mut fid_domain,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
}

#[repr(C)]
pub struct fid_fabric {
    pub fid: fid,
    pub ops: *mut fi_ops_fabric,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_av_attr {
    pub type_: c_int,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_ops_av {
    pub size: usize,
    pub insert: Option<
        unsafe extern "C" fn(
            *mut fid_av,
            *const c_void,
            usize,
            *mut fi_addr_t,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub insertsvc: Option<
        unsafe extern "C" fn(
            *mut fid_av,
            *const c_char,
            *const c_char,
            *mut fi_addr_t,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub insertsym: Option<
        unsafe extern "C" fn(
            *mut fid_av,
            *const c_char,
            usize,
            *const c_char,
            usize,
            *mut fi_addr_t,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub remove: Option<unsafe extern "C" fn(*mut fid_av, *mut fi_addr_t, usize, u64) -> c_int>,
    pub lookup:
        Option<unsafe extern "C" fn(*mut fid_av, fi_addr_t, *mut c_void, *mut usize) -> c_int>,
    pub straddr: Option<
        unsafe extern "C" fn(*mut fid_av, *const c_void, *mut c_char, *mut usize) -> *const c_char,
    >,
    pub av_set: Option<
        unsafe extern "C" fn(*mut fid_av, *mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
    >,
}

#[repr(C)]
pub struct fid_av {
    pub fid: fid,
    pub ops: *mut fi_ops_av,
}

#[repr(C)]
pub struct fid_mr {
    pub fid: fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct iovec {
    pub iov_base: *mut c_void,
    pub iov_len: usize,
}

#[repr(C)]
pub struct fi_mr_attr {
    pub mr_iov: *const iovec,
    pub iov_count: usize,
    pub access: u64,
    pub offset: u64,
    pub requested_key: u64,
    pub context: *mut c_void,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
    pub iface: c_int,
    pub device: u64,
}

#[repr(C)]
pub struct fi_ops_domain {
    pub size: usize,
    pub av_open: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_av_attr,
            *mut *mut fid_av,
            *mut c_void,
        ) -> c_int,
    >,
    pub cq_open: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_cq_attr,
            *mut *mut fid_cq,
            *mut c_void,
        ) -> c_int,
    >,
    pub endpoint: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int,
    >,
    pub scalable_ep: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int,
    >,
    pub cntr_open: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_cntr_attr,
            *mut *mut fid_cntr,
            *mut c_void,
        ) -> c_int,
    >,
    pub poll_open:
        Option<unsafe extern "C" fn(*mut fid_domain, *mut c_void, *mut *mut c_void) -> c_int>,
    pub stx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_tx_attr,
            *mut *mut c_void,
            *mut c_void,
        ) -> c_int,
    >,
    pub srx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_rx_attr,
            *mut *mut fid_ep,
            *mut c_void,
        ) -> c_int,
    >,
    pub query_atomic:
        Option<unsafe extern "C" fn(*mut fid_domain, c_int, c_int, *mut c_void, u64) -> c_int>,
    pub query_collective:
        Option<unsafe extern "C" fn(*mut fid_domain, c_int, *mut c_void, u64) -> c_int>,
    pub endpoint2: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_info,
            *mut *mut fid_ep,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
}

#[repr(C)]
pub struct fi_ops_mr {
    pub size: usize,
    pub reg: Option<
        unsafe extern "C" fn(
            *mut fid,
            *const c_void,
            usize,
            u64,
            u64,
            u64,
            u64,
            *mut *mut fid_mr,
            *mut c_void,
        ) -> c_int,
    >,
    pub regv: Option<
        unsafe extern "C" fn(
            *mut fid,
            *const iovec,
            usize,
            u64,
            u64,
            u64,
            u64,
            *mut *mut fid_mr,
            *mut c_void,
        ) -> c_int,
    >,
    pub regattr:
        Option<unsafe extern "C" fn(*mut fid, *const fi_mr_attr, u64, *mut *mut fid_mr) -> c_int>,
}

#[repr(C)]
pub struct fid_domain {
    pub fid: fid,
    pub ops: *mut fi_ops_domain,
    pub mr: *mut fi_ops_mr,
}

#[repr(C)]
pub struct fi_msg {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_msg_tagged {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_ops_ep {
    pub size: usize,
    pub cancel: Option<unsafe extern "C" fn(*mut fid, *mut c_void) -> ssize_t>,
    pub getopt:
        Option<unsafe extern "C" fn(*mut fid, c_int, c_int, *mut c_void, *mut usize) -> c_int>,
    pub setopt: Option<unsafe extern "C" fn(*mut fid, c_int, c_int, *const c_void, usize) -> c_int>,
    pub tx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            c_int,
            *mut fi_tx_attr,
            *mut *mut fid_ep,
            *mut c_void,
        ) -> c_int,
    >,
    pub rx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            c_int,
            *mut fi_rx_attr,
            *mut *mut fid_ep,
            *mut c_void,
        ) -> c_int,
    >,
    pub rx_size_left: Option<unsafe extern "C" fn(*mut fid_ep) -> ssize_t>,
    pub tx_size_left: Option<unsafe extern "C" fn(*mut fid_ep) -> ssize_t>,
}

#[repr(C)]
pub struct fi_ops_cm {
    pub size: usize,
    pub setname: Option<unsafe extern "C" fn(*mut fid, *mut c_void, usize) -> c_int>,
    pub getname: Option<unsafe extern "C" fn(*mut fid, *mut c_void, *mut usize) -> c_int>,
    pub getpeer: Option<unsafe extern "C" fn(*mut fid_ep, *mut c_void, *mut usize) -> c_int>,
    pub connect:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, *const c_void, usize) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    pub accept: Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, usize) -> c_int>,
    pub reject: Option<unsafe extern "C" fn(*mut c_void, *mut fid, *const c_void, usize) -> c_int>,
    pub shutdown: Option<unsafe extern "C" fn(*mut fid_ep, u64) -> c_int>,
    pub join: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            u64,
            *mut *mut c_void,
            *mut c_void,
        ) -> c_int,
    >,
}

#[repr(C)]
pub struct fi_ops_msg {
    pub size: usize,
    pub recv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *mut c_void,
            usize,
            *mut c_void,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            usize,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg, u64) -> ssize_t>,
    pub send: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            usize,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg, u64) -> ssize_t>,
    pub inject:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, fi_addr_t) -> ssize_t>,
    pub senddata: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            u64,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub injectdata:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t) -> ssize_t>,
}

#[repr(C)]
pub struct fi_rma_iov {
    pub addr: u64,
    pub len: usize,
    pub key: u64,
}

#[repr(C)]
pub struct fi_msg_rma {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_iov,
    pub rma_iov_count: usize,
    pub context: *mut c_void,
    pub data: u64,
}

type RmaFn = unsafe extern "C" fn(
    *mut fid_ep,
    *mut c_void,
    usize,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> ssize_t;
type RmaVFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const iovec,
    *mut *mut c_void,
    usize,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> ssize_t;
type RmaWriteFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    usize,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> ssize_t;
type RmaInjectFn =
    unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, fi_addr_t, u64, u64) -> ssize_t;
type RmaWriteDataFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    usize,
    *mut c_void,
    u64,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> ssize_t;
type RmaInjectDataFn =
    unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t, u64, u64) -> ssize_t;

#[repr(C)]
pub struct fi_ops_rma {
    pub size: usize,
    pub read: Option<RmaFn>,
    pub readv: Option<RmaVFn>,
    pub readmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_rma, u64) -> ssize_t>,
    pub write: Option<RmaWriteFn>,
    pub writev: Option<RmaVFn>,
    pub writemsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_rma, u64) -> ssize_t>,
    pub inject: Option<RmaInjectFn>,
    pub writedata: Option<RmaWriteDataFn>,
    pub injectdata: Option<RmaInjectDataFn>,
}

#[repr(C)]
pub struct fi_ops_tagged {
    pub size: usize,
    pub recv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *mut c_void,
            usize,
            *mut c_void,
            fi_addr_t,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            usize,
            fi_addr_t,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_tagged, u64) -> ssize_t>,
    pub send: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            fi_addr_t,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            usize,
            fi_addr_t,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_tagged, u64) -> ssize_t>,
    pub inject:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, fi_addr_t, u64) -> ssize_t>,
    pub senddata: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            u64,
            fi_addr_t,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub injectdata: Option<
        unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t, u64) -> ssize_t,
    >,
}

#[repr(C)]
pub struct fid_ep {
    pub fid: fid,
    pub ops: *mut fi_ops_ep,
    pub cm: *mut fi_ops_cm,
    pub msg: *mut fi_ops_msg,
    pub rma: *mut fi_ops_rma,
    pub tagged: *mut fi_ops_tagged,
    pub atomic: *mut c_void,
    pub collective: *mut c_void,
}

#[repr(C)]
pub struct fi_cq_attr {
    pub size: usize,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_cntr_attr {
    pub events: c_int,
    pub wait_obj: c_int,
    pub wait_set: *mut c_void,
    pub flags: u64,
}

pub const FI_CNTR_EVENTS_COMP: c_int = 0;

#[repr(C)]
pub struct fi_ops_cntr {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut fid_cntr) -> u64>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_cntr) -> u64>,
    pub add: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
    pub set: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
    pub wait: Option<unsafe extern "C" fn(*mut fid_cntr, u64, c_int) -> c_int>,
    pub adderr: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
    pub seterr: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
}

#[repr(C)]
pub struct fid_cntr {
    pub fid: fid,
    pub ops: *mut fi_ops_cntr,
}

#[repr(C)]
pub struct fi_cq_tagged_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

#[repr(C)]
pub struct fi_cq_err_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
pub struct fi_ops_cq {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize) -> ssize_t>,
    pub readfrom:
        Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize, *mut fi_addr_t) -> ssize_t>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_cq, *mut fi_cq_err_entry, u64) -> ssize_t>,
    pub sread: Option<
        unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize, *const c_void, c_int) -> ssize_t,
    >,
    pub sreadfrom: Option<
        unsafe extern "C" fn(
            *mut fid_cq,
            *mut c_void,
            usize,
            *mut fi_addr_t,
            *const c_void,
            c_int,
        ) -> ssize_t,
    >,
    pub signal: Option<unsafe extern "C" fn(*mut fid_cq) -> c_int>,
    pub strerror: Option<
        unsafe extern "C" fn(
            *mut fid_cq,
            c_int,
            *const c_void,
            *mut c_char,
            usize,
        ) -> *const c_char,
    >,
}

#[repr(C)]
pub struct fid_cq {
    pub fid: fid,
    pub ops: *mut fi_ops_cq,
}

#[repr(C)]
pub struct fi_eq_attr {
    pub size: usize,
    pub flags: u64,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_eq_err_entry {
    pub fid: *mut fid,
    pub context: *mut c_void,
    pub data: u64,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
pub struct fi_ops_eq {
    pub size: usize,
    pub read:
        Option<unsafe extern "C" fn(*mut fid_eq, *mut u32, *mut c_void, usize, u64) -> ssize_t>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_eq, *mut fi_eq_err_entry, u64) -> ssize_t>,
    pub write: Option<unsafe extern "C" fn(*mut fid_eq, u32, *const c_void, usize, u64) -> ssize_t>,
    pub sread: Option<
        unsafe extern "C" fn(*mut fid_eq, *mut u32, *mut c_void, usize, c_int, u64) -> ssize_t,
    >,
    pub strerror: Option<
        unsafe extern "C" fn(
            *mut fid_eq,
            c_int,
            *const c_void,
            *mut c_char,
            usize,
        ) -> *const c_char,
    >,
}

#[repr(C)]
pub struct fid_eq {
    pub fid: fid,
    pub ops: *mut fi_ops_eq,
}

/// One struct's layout as the tests compare it with the headers: C name, header, size, and
/// each field's name and offset.
pub struct Layout {
    pub name: &'static str,
    pub size: usize,
    pub fields: Vec<(&'static str, usize)>,
}

macro_rules! layouts {
    ($($s:ident { $($f:ident $(as $c:literal)?),* $(,)? })*) => {
        /// Every struct and field above that must match the headers.
        pub fn layout() -> Vec<Layout> {
            vec![$(Layout {
                name: stringify!($s),
                size: match stringify!($s) {
                    // the installed headers are 1.17's: compare the part they know
                    "fi_domain_attr" => DOMAIN_ATTR_1_17_SIZE,
                    _ => std::mem::size_of::<$s>(),
                },
                fields: vec![$((layouts!(@name $f $($c)?), std::mem::offset_of!($s, $f))),*],
            }),*]
        }
    };
    (@name $f:ident) => { stringify!($f) };
    (@name $f:ident $c:literal) => { $c };
}

layouts! {
    fi_context { internal }
    fi_tx_attr { caps, mode, op_flags, msg_order, comp_order, inject_size, size, iov_limit, rma_iov_limit, tclass }
    fi_rx_attr { caps, mode, op_flags, msg_order, comp_order, total_buffered_recv, size, iov_limit }
    fi_ep_attr { type_ as "type", protocol, protocol_version, max_msg_size, msg_prefix_size,
        max_order_raw_size, max_order_war_size, max_order_waw_size, mem_tag_format, tx_ctx_cnt,
        rx_ctx_cnt, auth_key_size, auth_key }
    fi_domain_attr { domain, name, threading, control_progress, data_progress, resource_mgmt,
        av_type, mr_mode, mr_key_size, cq_data_size, cq_cnt, ep_cnt, tx_ctx_cnt, rx_ctx_cnt,
        max_ep_tx_ctx, max_ep_rx_ctx, max_ep_stx_ctx, max_ep_srx_ctx, cntr_cnt, mr_iov_limit,
        caps, mode, auth_key, auth_key_size, max_err_data, mr_cnt, tclass }
    fi_fabric_attr { fabric, name, prov_name, prov_version, api_version }
    fi_info { next, caps, mode, addr_format, src_addrlen, dest_addrlen, src_addr, dest_addr,
        handle, tx_attr, rx_attr, ep_attr, domain_attr, fabric_attr, nic }
    fi_ops { size, close, bind, control, ops_open, tostr, ops_set }
    fid { fclass, context, ops }
    fi_provider { version, fi_version, context, name, getinfo, fabric, cleanup }
    fi_ops_fabric { size, domain, passive_ep, eq_open, wait_open, trywait, domain2 }
    fid_fabric { fid, ops, api_version }
    fi_av_attr { type_ as "type", rx_ctx_bits, count, ep_per_node, name, map_addr, flags }
    fi_ops_av { size, insert, insertsvc, insertsym, remove, lookup, straddr, av_set }
    fid_av { fid, ops }
    fid_mr { fid, mem_desc, key }
    iovec { iov_base, iov_len }
    fi_mr_attr { mr_iov, iov_count, access, offset, requested_key, context, auth_key_size,
        auth_key, iface, device }
    fi_ops_domain { size, av_open, cq_open, endpoint, scalable_ep, cntr_open, poll_open,
        stx_ctx, srx_ctx, query_atomic, query_collective, endpoint2 }
    fi_ops_mr { size, reg, regv, regattr }
    fid_domain { fid, ops, mr }
    fi_msg { msg_iov, desc, iov_count, addr, context, data }
    fi_msg_tagged { msg_iov, desc, iov_count, addr, tag, ignore, context, data }
    fi_ops_ep { size, cancel, getopt, setopt, tx_ctx, rx_ctx, rx_size_left, tx_size_left }
    fi_ops_cm { size, setname, getname, getpeer, connect, listen, accept, reject, shutdown, join }
    fi_ops_msg { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
    fi_ops_tagged { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
    fid_ep { fid, ops, cm, msg, rma, tagged, atomic, collective }
    fi_cq_attr { size, flags, format, wait_obj, signaling_vector, wait_cond, wait_set }
    fi_cq_tagged_entry { op_context, flags, len, buf, data, tag }
    fi_cq_err_entry { op_context, flags, len, buf, data, tag, olen, err, prov_errno, err_data,
        err_data_size }
    fi_ops_cq { size, read, readfrom, readerr, sread, sreadfrom, signal, strerror }
    fid_cq { fid, ops }
    fi_cntr_attr { events, wait_obj, wait_set, flags }
    fi_ops_cntr { size, read, readerr, add, set, wait, adderr, seterr }
    fid_cntr { fid, ops }
    fi_rma_iov { addr, len, key }
    fi_msg_rma { msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, context, data }
    fi_ops_rma { size, read, readv, readmsg, write, writev, writemsg, inject, writedata, injectdata }
    fi_eq_attr { size, flags, wait_obj, signaling_vector, wait_set }
    fi_eq_err_entry { fid, context, data, err, prov_errno, err_data, err_data_size }
    fi_ops_eq { size, read, readerr, write, sread, strerror }
    fid_eq { fid, ops }
}

/// The constants the tests check against the headers' values: (C expression, our value).
pub fn constants() -> Vec<(&'static str, i128)> {
    use errno::*;
    macro_rules! c {
        ($($n:ident),* $(,)?) => { vec![$((stringify!($n), $n as i128)),*] };
    }
    c![
        FI_MSG,
        FI_RMA,
        FI_TAGGED,
        FI_ATOMIC,
        FI_READ,
        FI_WRITE,
        FI_RECV,
        FI_SEND,
        FI_REMOTE_READ,
        FI_REMOTE_WRITE,
        FI_MULTI_RECV,
        FI_REMOTE_CQ_DATA,
        FI_MORE,
        FI_PEEK,
        FI_COMPLETION,
        FI_EVENT,
        FI_INJECT,
        FI_INJECT_COMPLETE,
        FI_TRANSMIT_COMPLETE,
        FI_DELIVERY_COMPLETE,
        FI_MATCH_COMPLETE,
        FI_LOCAL_COMM,
        FI_REMOTE_COMM,
        FI_SOURCE,
        FI_DIRECTED_RECV,
        FI_CLAIM,
        FI_DISCARD,
        FI_SELECTIVE_COMPLETION,
        FI_CONTEXT,
        FI_CONTEXT2,
        FI_MSG_PREFIX,
        FI_RX_CQ_DATA,
        FI_LOCAL_MR,
        FI_AV_MAP,
        FI_AV_TABLE,
        FI_MR_LOCAL,
        FI_MR_VIRT_ADDR,
        FI_MR_ALLOCATED,
        FI_MR_PROV_KEY,
        FI_MR_ENDPOINT,
        FI_PROGRESS_AUTO,
        FI_PROGRESS_MANUAL,
        FI_THREAD_SAFE,
        FI_THREAD_DOMAIN,
        FI_THREAD_COMPLETION,
        FI_RM_ENABLED,
        FI_EP_RDM,
        FI_EP_MSG,
        FI_EP_DGRAM,
        FI_ORDER_SAS,
        FI_ORDER_STRICT,
        FI_CLASS_FABRIC,
        FI_CLASS_DOMAIN,
        FI_CLASS_EP,
        FI_CLASS_AV,
        FI_CLASS_MR,
        FI_CLASS_EQ,
        FI_CLASS_CQ,
        FI_CLASS_CNTR,
        FI_CNTR_EVENTS_COMP,
        FI_GETWAIT,
        FI_ENABLE,
        FI_OPT_ENDPOINT,
        FI_OPT_MIN_MULTI_RECV,
        FI_CQ_FORMAT_CONTEXT,
        FI_CQ_FORMAT_MSG,
        FI_CQ_FORMAT_DATA,
        FI_CQ_FORMAT_TAGGED,
        FI_WAIT_NONE,
        FI_WAIT_UNSPEC,
        FI_WAIT_FD,
        FI_WAIT_YIELD,
        FI_LOG_WARN,
        FI_LOG_INFO,
        FI_LOG_DEBUG,
        FI_LOG_FABRIC,
        FI_LOG_DOMAIN,
        FI_LOG_EP_CTRL,
        FI_LOG_EP_DATA,
        FI_LOG_AV,
        FI_LOG_CQ,
        FI_LOG_MR,
        FI_ADDR_UNSPEC,
        FI_EAGAIN,
        FI_ENOMEM,
        FI_EBUSY,
        FI_ENODEV,
        FI_EINVAL,
        FI_ENOSYS,
        FI_ENOMSG,
        FI_ENODATA,
        FI_EMSGSIZE,
        FI_EOPNOTSUPP,
        FI_EADDRNOTAVAIL,
        FI_ENETDOWN,
        FI_EHOSTDOWN,
        FI_ECANCELED,
        FI_EOTHER,
        FI_ETOOSMALL,
        FI_EAVAIL,
        FI_EBADFLAGS,
        FI_ENOCQ,
        FI_ETRUNC,
        FI_ENOKEY,
        FI_ENOAV,
    ]
}
