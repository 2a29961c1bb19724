//! The domain: this process's attachment to its NI (one per process, shared by every
//! `fi_domain` it opens), and memory registration.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ni::Ni;

use crate::ffi::errno::*;
use crate::ffi::*;
use crate::info::{self, Location};
use crate::{container, guard, info_log, warn};

/// One NI attachment.
pub struct Attached {
    pub ni: Arc<Ni>,
    pub loc: Location,
    /// The NI's one endpoint is open (its engine takes every completion of the NI).
    pub ep_open: AtomicBool,
}

static ATTACHED: Mutex<Weak<Attached>> = Mutex::new(Weak::new());

/// Attach to this process's NI (or share the attachment a live domain holds).
///
/// Unlike libni's `Ni::attach` this does not wait for the partition's other members: a
/// libfabric application exchanges endpoint names out of band before it sends (MPI's modex
/// fence, `fi_pingpong`'s socket), and it may open its domain before its peers start. A send
/// to a member that has not attached fails with `FI_EHOSTDOWN`.
fn attach() -> Result<Arc<Attached>, (c_int, String)> {
    let mut slot = ATTACHED.lock().unwrap();
    if let Some(a) = slot.upgrade() {
        return Ok(a);
    }
    let loc = info::locate().map_err(|e| (-FI_ENODEV, e))?;
    let ni = match &loc {
        Location::Socket(p) => Ni::attach_path(p),
        Location::Pci(a) => Ni::attach_pci(a),
    }
    .map_err(|e| match e {
        ni::Error::Busy(_) => (-FI_EBUSY, e.to_string()),
        e => (-FI_ENODEV, e.to_string()),
    })?;
    info_log(
        FI_LOG_DOMAIN,
        &format!(
            "ni: attached to {} (rank {} of {}, node {}, partition {}{})",
            loc.domain_name(),
            ni.rank(),
            ni.size(),
            ni.node(),
            ni.partition(),
            if ni.direct() {
                ", partition window"
            } else {
                ""
            }
        ),
    );
    let a = Arc::new(Attached {
        ni: Arc::new(ni),
        loc,
        ep_open: AtomicBool::new(false),
    });
    *slot = Arc::downgrade(&a);
    Ok(a)
}

#[repr(C)]
pub struct DomainFid {
    pub fid: fid_domain,
    pub att: Arc<Attached>,
}

static DOMAIN_FI_OPS: fi_ops = crate::stub::fid_ops!(domain_close);

static DOMAIN_OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(av_open),
    cq_open: Some(cq_open),
    endpoint: Some(crate::ep::open),
    scalable_ep: Some(crate::stub::domain_ep),
    cntr_open: Some(crate::cntr::open),
    poll_open: Some(crate::stub::poll_open),
    stx_ctx: Some(crate::stub::stx_ctx),
    srx_ctx: Some(crate::stub::srx_ctx),
    query_atomic: Some(crate::stub::query_atomic),
    query_collective: Some(crate::stub::query_collective),
    endpoint2: Some(crate::ep::open2),
};

static MR_OPS: fi_ops_mr = fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
};

pub unsafe extern "C" fn open(
    _fabric: *mut fid_fabric,
    info: *mut fi_info,
    out: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the application's info (or null).
        if let Some(i) = unsafe { info.as_ref() } {
            if let Err(why) = info::check_hints(crate::api_version(), i) {
                warn(FI_LOG_DOMAIN, &format!("ni: fi_domain: {why}"));
                return -FI_EINVAL;
            }
        }
        let att = match attach() {
            Ok(a) => a,
            Err((code, why)) => {
                warn(FI_LOG_DOMAIN, &format!("ni: fi_domain: {why}"));
                return code;
            }
        };
        let d = Box::new(DomainFid {
            fid: fid_domain {
                fid: fid {
                    fclass: FI_CLASS_DOMAIN,
                    context,
                    ops: &DOMAIN_FI_OPS as *const _ as *mut _,
                },
                ops: &DOMAIN_OPS as *const _ as *mut _,
                mr: &MR_OPS as *const _ as *mut _,
            },
            att,
        });
        // SAFETY: `out` is writable.
        unsafe { *out = Box::into_raw(d) as *mut fid_domain };
        0
    })
}

pub unsafe extern "C" fn open2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    out: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        warn(
            FI_LOG_DOMAIN,
            &format!("ni: fi_domain2: flags {flags:#x} not offered"),
        );
        return -FI_EBADFLAGS;
    }
    // SAFETY: same contract as `open`.
    unsafe { open(fabric, info, out, context) }
}

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is a DomainFid we boxed; closed once.
        drop(unsafe { Box::from_raw(f as *mut DomainFid) });
        0
    })
}

unsafe extern "C" fn av_open(
    d: *mut fid_domain,
    attr: *mut fi_av_attr,
    out: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `d` is one of our domains; the rest is the caller's contract.
        unsafe {
            let dom = container::<DomainFid>(d as *mut fid);
            let ni = &dom.att.ni;
            crate::av::open(attr, ni.partition(), ni.size(), out, context)
        }
    })
}

unsafe extern "C" fn cq_open(
    _d: *mut fid_domain,
    attr: *mut fi_cq_attr,
    out: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { crate::cq::open(attr, out, context) })
}

/// A registration: local memory needs none (every payload is staged in memory the NI
/// already has), so it only hands out a key. Remote access (RMA) is not offered yet.
#[repr(C)]
struct MrFid {
    fid: fid_mr,
}

static MR_FI_OPS: fi_ops = crate::stub::fid_ops!(mr_close);

fn new_mr(access: u64, context: *mut c_void, out: *mut *mut fid_mr) -> c_int {
    if access & (FI_REMOTE_READ | FI_REMOTE_WRITE) != 0 {
        warn(
            FI_LOG_MR,
            "ni: fi_mr_reg: remote access (FI_RMA) is not offered by this provider yet",
        );
        return -FI_ENOSYS;
    }
    static KEY: AtomicU64 = AtomicU64::new(1);
    let m = Box::new(MrFid {
        fid: fid_mr {
            fid: fid {
                fclass: FI_CLASS_MR,
                context,
                ops: &MR_FI_OPS as *const _ as *mut _,
            },
            mem_desc: std::ptr::null_mut(),
            key: KEY.fetch_add(1, Ordering::Relaxed),
        },
    });
    if out.is_null() {
        return -FI_EINVAL;
    }
    // SAFETY: `out` is writable and non-null.
    unsafe { *out = Box::into_raw(m) as *mut fid_mr };
    0
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_reg(
    _f: *mut fid,
    _buf: *const c_void,
    _len: usize,
    access: u64,
    _offset: u64,
    _key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| new_mr(access, context, out))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_regv(
    _f: *mut fid,
    _iov: *const iovec,
    _count: usize,
    access: u64,
    _offset: u64,
    _key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| new_mr(access, context, out))
}

unsafe extern "C" fn mr_regattr(
    _f: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    out: *mut *mut fid_mr,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's attribute block.
        match unsafe { attr.as_ref() } {
            Some(a) => new_mr(a.access, a.context, out),
            None => -FI_EINVAL,
        }
    })
}

unsafe extern "C" fn mr_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is an MrFid we boxed; closed once.
        drop(unsafe { Box::from_raw(f as *mut MrFid) });
        0
    })
}
