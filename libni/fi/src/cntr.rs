//! Completion counters (`fi_cntr_open`, fi_cntr(3)): how many operations of the kinds an
//! endpoint bound them for (`FI_SEND`, `FI_RECV`, `FI_READ`, `FI_WRITE`, `FI_REMOTE_READ`,
//! `FI_REMOTE_WRITE`) completed, and how many failed.
//!
//! A counter counts every operation of its kinds, reported to a CQ or not
//! (`FI_SELECTIVE_COMPLETION` and `FI_INJECT` only spare the CQ entry). Reading or waiting on
//! one progresses the endpoints bound to it, as a CQ read does (`FI_PROGRESS_MANUAL`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cq::Bound;
use crate::ffi::errno::*;
use crate::ffi::*;
use crate::{container, guard};

#[derive(Default)]
pub struct Cntr {
    value: AtomicU64,
    errors: AtomicU64,
    /// Opened with `FI_WAIT_NONE`: fi_cntr(3) makes `fi_cntr_wait` invalid then.
    no_wait: bool,
    pub bound: Bound,
}

impl Cntr {
    /// One operation completed.
    pub fn hit(&self) {
        self.value.fetch_add(1, Ordering::Release);
    }

    /// One operation failed.
    pub fn miss(&self) {
        self.errors.fetch_add(1, Ordering::Release);
    }

    pub fn read(&self) -> u64 {
        self.bound.progress();
        let v = self.value.load(Ordering::Acquire);
        self.bound.note(false);
        v
    }

    pub fn readerr(&self) -> u64 {
        self.bound.progress();
        self.errors.load(Ordering::Acquire)
    }

    /// `fi_cntr_wait`: until the value reaches `threshold` (0), an error is counted
    /// (`-FI_EAVAIL`) or `timeout` ms pass (`-FI_ETIMEDOUT`; negative: no limit).
    pub fn wait(&self, threshold: u64, timeout: c_int) -> c_int {
        if self.no_wait {
            crate::warn(
                FI_LOG_CQ,
                "ni: fi_cntr_wait on a counter opened with FI_WAIT_NONE (fi_cntr(3): invalid)",
            );
            return -FI_EINVAL;
        }
        let t = Instant::now();
        let errors = self.errors.load(Ordering::Acquire);
        loop {
            self.bound.progress();
            if self.value.load(Ordering::Acquire) >= threshold {
                self.bound.note(false);
                return 0;
            }
            if self.errors.load(Ordering::Acquire) != errors {
                return -FI_EAVAIL;
            }
            if timeout >= 0 && t.elapsed() >= Duration::from_millis(timeout as u64) {
                return -FI_ETIMEDOUT;
            }
            self.bound.note(true);
        }
    }
}

/// The counters an endpoint's operations count into, by kind.
#[derive(Default)]
pub struct Bindings {
    pub send: Option<Arc<Cntr>>,
    pub recv: Option<Arc<Cntr>>,
    pub read: Option<Arc<Cntr>>,
    pub write: Option<Arc<Cntr>>,
    pub remote_read: Option<Arc<Cntr>>,
    pub remote_write: Option<Arc<Cntr>>,
}

impl Bindings {
    pub fn bind(&mut self, c: &Arc<Cntr>, flags: u64) {
        for (bit, slot) in [
            (FI_SEND, &mut self.send),
            (FI_RECV, &mut self.recv),
            (FI_READ, &mut self.read),
            (FI_WRITE, &mut self.write),
            (FI_REMOTE_READ, &mut self.remote_read),
            (FI_REMOTE_WRITE, &mut self.remote_write),
        ] {
            if flags & bit != 0 {
                *slot = Some(c.clone());
            }
        }
    }
}

/// Count one completion (`ok`) or failure into `c`, if bound.
pub fn count(c: &Option<Arc<Cntr>>, ok: bool) {
    if let Some(c) = c {
        if ok {
            c.hit()
        } else {
            c.miss()
        }
    }
}

#[repr(C)]
pub struct CntrFid {
    pub fid: fid_cntr,
    pub cntr: Arc<Cntr>,
}

static CNTR_FI_OPS: fi_ops = crate::stub::fid_ops!(cntr_close, crate::stub::bind, cntr_control);

static CNTR_OPS: fi_ops_cntr = fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

/// `fi_cntr_open`.
///
/// # Safety
/// `attr` is the application's attribute block or null; `out` is writable.
pub unsafe extern "C" fn open(
    _domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    out: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the caller passes a valid attribute block or null.
        let a = unsafe { attr.as_ref() };
        if let Some(a) = a {
            if a.events != FI_CNTR_EVENTS_COMP {
                crate::warn(
                    FI_LOG_CQ,
                    &format!(
                        "ni: fi_cntr_open: events {} (FI_CNTR_EVENTS_COMP only)",
                        a.events
                    ),
                );
                return -FI_ENOSYS;
            }
            // As for CQs: no file descriptor to hand out; waits poll.
            if !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD) {
                crate::warn(
                    FI_LOG_CQ,
                    &format!(
                        "ni: fi_cntr_open: wait object {} not offered (FI_WAIT_NONE, FI_WAIT_UNSPEC or FI_WAIT_YIELD)",
                        a.wait_obj
                    ),
                );
                return -FI_ENOSYS;
            }
            if a.flags != 0 {
                crate::warn(
                    FI_LOG_CQ,
                    &format!("ni: fi_cntr_open: flags {:#x} (none defined)", a.flags),
                );
                return -FI_EINVAL;
            }
        }
        let c = Box::new(CntrFid {
            fid: fid_cntr {
                fid: fid {
                    fclass: FI_CLASS_CNTR,
                    context,
                    ops: &CNTR_FI_OPS as *const _ as *mut _,
                },
                ops: &CNTR_OPS as *const _ as *mut _,
            },
            cntr: Arc::new(Cntr {
                no_wait: a.is_some_and(|a| a.wait_obj == FI_WAIT_NONE),
                ..Default::default()
            }),
        });
        // SAFETY: `out` is writable (caller contract).
        unsafe { *out = Box::into_raw(c) as *mut fid_cntr };
        0
    })
}

unsafe extern "C" fn cntr_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is the fid of a CntrFid we boxed in `open`; libfabric closes it once.
        drop(unsafe { Box::from_raw(f as *mut CntrFid) });
        0
    })
}

unsafe extern "C" fn cntr_control(_f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    if command == FI_GETWAIT {
        -FI_ENODATA
    } else {
        -FI_ENOSYS
    }
}

/// # Safety
/// `c` is one of our counters.
unsafe fn get<'a>(c: *mut fid_cntr) -> &'a Cntr {
    // SAFETY: caller contract: the fid is a live CntrFid's.
    unsafe { &container::<CntrFid>(c as *mut fid).cntr }
}

// fi_cntr_read/readerr return the value itself: nothing to report a failure in, so a panic
// (there is none to expect) reads as 0.
unsafe extern "C" fn cntr_read(c: *mut fid_cntr) -> u64 {
    // SAFETY: libfabric passes one of our counters.
    std::panic::catch_unwind(|| unsafe { get(c) }.read()).unwrap_or(0)
}

unsafe extern "C" fn cntr_readerr(c: *mut fid_cntr) -> u64 {
    // SAFETY: as above.
    std::panic::catch_unwind(|| unsafe { get(c) }.readerr()).unwrap_or(0)
}

unsafe extern "C" fn cntr_add(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: as above.
    unsafe { get(c) }.value.fetch_add(v, Ordering::AcqRel);
    0
}

unsafe extern "C" fn cntr_set(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: as above.
    unsafe { get(c) }.value.store(v, Ordering::Release);
    0
}

unsafe extern "C" fn cntr_adderr(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: as above.
    unsafe { get(c) }.errors.fetch_add(v, Ordering::AcqRel);
    0
}

unsafe extern "C" fn cntr_seterr(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: as above.
    unsafe { get(c) }.errors.store(v, Ordering::Release);
    0
}

unsafe extern "C" fn cntr_wait(c: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    // SAFETY: as above.
    guard(|| unsafe { get(c) }.wait(threshold, timeout))
}
