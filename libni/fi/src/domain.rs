//! The domain: this process's attachment to its NI (one per process, shared by every
//! `fi_domain` it opens), and memory registration.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ni::Ni;

use crate::engine::RmaLocal;
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

/// A registration. For RMA (`FI_REMOTE_READ`/`FI_REMOTE_WRITE`, or `FI_READ`/`FI_WRITE` for
/// a local buffer used in place) the memory becomes an NI region ([`ni::Ni::register`]) whose
/// key is the registration's (`FI_MR_PROV_KEY`). Memory for messages only needs nothing
/// (every payload is staged in memory the NI already has): it just gets a key.
#[repr(C)]
pub struct MrFid {
    fid: fid_mr,
    region: Option<Arc<ni::Region>>,
}

impl MrFid {
    /// The local side of an RMA operation on `[buf, buf + len)` whose `desc` is `desc`: in
    /// place when `desc` is a registration holding the whole range.
    ///
    /// # Safety
    /// `desc` is null or a `desc` this provider handed out (`fi_mr_desc`) that is still open.
    pub unsafe fn local(desc: *mut c_void, buf: usize, len: usize) -> RmaLocal {
        if desc.is_null() || len == 0 {
            return RmaLocal::Buffer;
        }
        // SAFETY: caller contract: our `desc` is the MrFid itself.
        let m = unsafe { &*(desc as *const MrFid) };
        if m.fid.fid.fclass != FI_CLASS_MR {
            return RmaLocal::Buffer;
        }
        match &m.region {
            Some(r) => {
                let start = r.iova() as usize;
                if buf >= start && buf + len <= start + r.len() {
                    RmaLocal::Registered {
                        region: r.clone(),
                        offset: buf - start,
                    }
                } else {
                    RmaLocal::Buffer
                }
            }
            None => RmaLocal::Buffer,
        }
    }
}

static MR_FI_OPS: fi_ops = crate::stub::fid_ops!(mr_close);

/// Access that needs the memory registered with the NI.
const NI_ACCESS: u64 = FI_REMOTE_READ | FI_REMOTE_WRITE | FI_READ | FI_WRITE;

#[allow(clippy::too_many_arguments)]
fn new_mr(
    d: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    context: *mut c_void,
    out: *mut *mut fid_mr,
) -> c_int {
    if out.is_null() {
        return -FI_EINVAL;
    }
    if offset != 0 {
        // fi_mr(3): "reserved for future use and must be 0".
        warn(
            FI_LOG_MR,
            &format!("ni: fi_mr_reg: offset {offset:#x} (must be 0)"),
        );
        return -FI_EINVAL;
    }
    static KEY: AtomicU64 = AtomicU64::new(1 << 32);
    let region = if access & NI_ACCESS != 0 && len > 0 {
        if buf.is_null() && len == usize::MAX {
            // MPICH asks this of every provider for its dynamic windows (and falls back to
            // active messages when refused): the whole address space is not memory one NI
            // region can name.
            info_log(
                FI_LOG_MR,
                "ni: fi_mr_reg of the whole address space (NULL, SIZE_MAX) is not offered",
            );
            return -FI_ENOSYS;
        }
        if buf.is_null() {
            warn(
                FI_LOG_MR,
                &format!("ni: fi_mr_reg: a null buffer of {len} bytes"),
            );
            return -FI_EINVAL;
        }
        // SAFETY: `d` is the domain the application registers with.
        let dom = unsafe { container::<DomainFid>(d) };
        // SAFETY: fi_mr(3): the registered buffer stays the application's, mapped, until the
        // registration is closed; the region (the MR's) lives no longer than that (an
        // operation in flight keeps it, and so the NI's mapping, alive to its end).
        let (rr, rw) = (access & FI_REMOTE_READ != 0, access & FI_REMOTE_WRITE != 0);
        match unsafe { dom.att.ni.register(buf as *mut u8, len, rr, rw) } {
            Ok(r) => Some(Arc::new(r)),
            Err(e) => {
                warn(
                    FI_LOG_MR,
                    &format!("ni: fi_mr_reg of {len} bytes at {buf:?}: {e}"),
                );
                return match e {
                    ni::Error::BadArgument(_) => -FI_EINVAL,
                    _ => -FI_ENOMEM,
                };
            }
        }
    } else {
        None
    };
    // The NI's key for a region (below 2^32); for message-only memory, one of our own above.
    let key = region
        .as_ref()
        .map_or_else(|| KEY.fetch_add(1, Ordering::Relaxed), |r| r.key() as u64);
    let m = Box::new(MrFid {
        fid: fid_mr {
            fid: fid {
                fclass: FI_CLASS_MR,
                context,
                ops: &MR_FI_OPS as *const _ as *mut _,
            },
            mem_desc: std::ptr::null_mut(),
            key,
        },
        region,
    });
    let p = Box::into_raw(m);
    // SAFETY: `p` was just boxed; the desc is the registration itself (`MrFid::local`).
    unsafe {
        (*p).fid.mem_desc = p as *mut c_void;
        *out = p as *mut fid_mr;
    }
    0
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_reg(
    f: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    _key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| new_mr(f, buf, len, access, offset, context, out))
}

/// One iovec (`mr_iov_limit` is 1).
///
/// # Safety
/// `iov` holds `count` entries.
unsafe fn one_iov(iov: *const iovec, count: usize) -> Result<(*const c_void, usize), c_int> {
    match count {
        0 => Ok((std::ptr::null(), 0)),
        // SAFETY: caller contract.
        1 if !iov.is_null() => Ok(unsafe { ((*iov).iov_base as *const c_void, (*iov).iov_len) }),
        n => {
            warn(
                FI_LOG_MR,
                &format!("ni: fi_mr_regv: {n} iovecs (mr_iov_limit 1)"),
            );
            Err(-FI_EINVAL)
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_regv(
    f: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    offset: u64,
    _key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the application's array of `count` iovecs.
        match unsafe { one_iov(iov, count) } {
            Ok((buf, len)) => new_mr(f, buf, len, access, offset, context, out),
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn mr_regattr(
    f: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    out: *mut *mut fid_mr,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's attribute block.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return -FI_EINVAL;
        };
        if a.iface != 0 {
            warn(
                FI_LOG_MR,
                &format!(
                    "ni: fi_mr_regattr: device memory (iface {}) is not offered",
                    a.iface
                ),
            );
            return -FI_ENOSYS;
        }
        // SAFETY: the attribute's array of `iov_count` iovecs.
        match unsafe { one_iov(a.mr_iov, a.iov_count) } {
            Ok((buf, len)) => new_mr(f, buf, len, a.access, a.offset, a.context, out),
            Err(e) => e,
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
