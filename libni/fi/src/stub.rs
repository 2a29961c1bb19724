//! What the provider does not offer answers `-FI_ENOSYS` (or `-FI_EOPNOTSUPP` for
//! connection management, meaningless on an RDM endpoint): libfabric's inline wrappers call
//! most table entries without checking them, so no entry of ours is ever null.

use std::ffi::{c_char, c_int, c_void};

use crate::ffi::errno::*;
use crate::ffi::*;

pub unsafe extern "C" fn bind(_f: *mut fid, _b: *mut fid, _flags: u64) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn control(_f: *mut fid, _c: c_int, _a: *mut c_void) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn ops_open(
    _f: *mut fid,
    _n: *const c_char,
    _flags: u64,
    _ops: *mut *mut c_void,
    _ctx: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn tostr(_f: *const fid, _b: *mut c_char, _l: usize) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn ops_set(
    _f: *mut fid,
    _n: *const c_char,
    _flags: u64,
    _ops: *mut c_void,
    _ctx: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}

/// `fi_ops` of an object with only a close of its own.
macro_rules! fid_ops {
    ($close:expr) => {
        crate::stub::fid_ops!($close, crate::stub::bind, crate::stub::control)
    };
    ($close:expr, $bind:expr, $control:expr) => {
        crate::ffi::fi_ops {
            size: std::mem::size_of::<crate::ffi::fi_ops>(),
            close: Some($close),
            bind: Some($bind),
            control: Some($control),
            ops_open: Some(crate::stub::ops_open),
            tostr: Some(crate::stub::tostr),
            ops_set: Some(crate::stub::ops_set),
        }
    };
}
pub(crate) use fid_ops;

pub unsafe extern "C" fn passive_ep(
    _f: *mut fid_fabric,
    _i: *mut fi_info,
    _p: *mut *mut c_void,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn wait_open(
    _f: *mut fid_fabric,
    _a: *mut c_void,
    _w: *mut *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn domain_ep(
    _d: *mut fid_domain,
    _i: *mut fi_info,
    _e: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn poll_open(
    _d: *mut fid_domain,
    _a: *mut c_void,
    _o: *mut *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn stx_ctx(
    _d: *mut fid_domain,
    _a: *mut fi_tx_attr,
    _o: *mut *mut c_void,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn srx_ctx(
    _d: *mut fid_domain,
    _a: *mut fi_rx_attr,
    _o: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn query_atomic(
    _d: *mut fid_domain,
    _t: c_int,
    _o: c_int,
    _a: *mut c_void,
    _f: u64,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn query_collective(
    _d: *mut fid_domain,
    _c: c_int,
    _a: *mut c_void,
    _f: u64,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn tx_ctx(
    _e: *mut fid_ep,
    _i: c_int,
    _a: *mut fi_tx_attr,
    _o: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn rx_ctx(
    _e: *mut fid_ep,
    _i: c_int,
    _a: *mut fi_rx_attr,
    _o: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn setname(_f: *mut fid, _a: *mut c_void, _l: usize) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn getpeer(_e: *mut fid_ep, _a: *mut c_void, _l: *mut usize) -> c_int {
    -FI_EOPNOTSUPP
}
pub unsafe extern "C" fn connect(
    _e: *mut fid_ep,
    _a: *const c_void,
    _p: *const c_void,
    _l: usize,
) -> c_int {
    -FI_EOPNOTSUPP
}
pub unsafe extern "C" fn listen(_p: *mut c_void) -> c_int {
    -FI_EOPNOTSUPP
}
pub unsafe extern "C" fn accept(_e: *mut fid_ep, _p: *const c_void, _l: usize) -> c_int {
    -FI_EOPNOTSUPP
}
pub unsafe extern "C" fn reject(
    _p: *mut c_void,
    _h: *mut fid,
    _d: *const c_void,
    _l: usize,
) -> c_int {
    -FI_EOPNOTSUPP
}
pub unsafe extern "C" fn shutdown(_e: *mut fid_ep, _f: u64) -> c_int {
    -FI_EOPNOTSUPP
}
pub unsafe extern "C" fn join(
    _e: *mut fid_ep,
    _a: *const c_void,
    _f: u64,
    _m: *mut *mut c_void,
    _c: *mut c_void,
) -> c_int {
    -FI_EOPNOTSUPP
}
pub unsafe extern "C" fn insertsvc(
    _a: *mut fid_av,
    _n: *const c_char,
    _s: *const c_char,
    _o: *mut fi_addr_t,
    _f: u64,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn insertsym(
    _a: *mut fid_av,
    _n: *const c_char,
    _nc: usize,
    _s: *const c_char,
    _sc: usize,
    _o: *mut fi_addr_t,
    _f: u64,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
pub unsafe extern "C" fn av_set(
    _a: *mut fid_av,
    _t: *mut c_void,
    _s: *mut *mut c_void,
    _c: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
