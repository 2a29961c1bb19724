//! Event queues (`fi_eq_open`). An RDM endpoint with synchronous address vectors has no
//! connection or AV events, so the only events are the ones the application writes itself
//! (`fi_eq_write`); reads of an empty queue are `-FI_EAGAIN`.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::ffi::errno::*;
use crate::ffi::*;
use crate::stub::fid_ops;
use crate::{container, guard, guard_ssize};

/// Bytes an application event may carry (past that, `fi_eq_write` refuses it).
const MAX_EVENT: usize = 4096;

#[repr(C)]
pub struct EqFid {
    fid: fid_eq,
    events: Mutex<VecDeque<(u32, Vec<u8>)>>,
}

static EQ_FI_OPS: fi_ops = fid_ops!(eq_close);

static EQ_OPS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

pub unsafe extern "C" fn open(
    _f: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    out: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the application's attribute block (or null).
        if let Some(a) = unsafe { attr.as_ref() } {
            if !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD) {
                crate::warn(
                    FI_LOG_CORE,
                    &format!("ni: fi_eq_open: wait object {} not offered", a.wait_obj),
                );
                return -FI_ENOSYS;
            }
        }
        let e = Box::new(EqFid {
            fid: fid_eq {
                fid: fid {
                    fclass: FI_CLASS_EQ,
                    context,
                    ops: &EQ_FI_OPS as *const _ as *mut _,
                },
                ops: &EQ_OPS as *const _ as *mut _,
            },
            events: Mutex::new(VecDeque::new()),
        });
        // SAFETY: `out` is writable.
        unsafe { *out = Box::into_raw(e) as *mut fid_eq };
        0
    })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: an EqFid we boxed; closed once.
        drop(unsafe { Box::from_raw(f as *mut EqFid) });
        0
    })
}

/// FI_PEEK in an EQ read: leave the event queued.
const FI_PEEK_EQ: u64 = FI_PEEK;

unsafe extern "C" fn eq_read(
    e: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    guard_ssize(|| {
        // SAFETY: one of our EQs; `event` writable; `buf` holds `len` bytes.
        unsafe {
            let q = container::<EqFid>(e as *mut fid);
            let mut ev = q.events.lock().unwrap();
            let Some((kind, data)) = ev.front() else {
                return -(FI_EAGAIN as isize);
            };
            if len < data.len() {
                return -(FI_ETOOSMALL as isize);
            }
            if !event.is_null() {
                *event = *kind;
            }
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, data.len());
            let n = data.len() as isize;
            if flags & FI_PEEK_EQ == 0 {
                ev.pop_front();
            }
            n
        }
    })
}

unsafe extern "C" fn eq_readerr(_e: *mut fid_eq, _buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
    -(FI_EAGAIN as isize)
}

unsafe extern "C" fn eq_write(
    e: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    guard_ssize(|| {
        if len > MAX_EVENT || (buf.is_null() && len > 0) {
            return -(FI_EINVAL as isize);
        }
        // SAFETY: one of our EQs; `buf` holds `len` bytes.
        unsafe {
            let q = container::<EqFid>(e as *mut fid);
            let data = if len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(buf as *const u8, len).to_vec()
            };
            q.events.lock().unwrap().push_back((event, data));
        }
        len as isize
    })
}

unsafe extern "C" fn eq_sread(
    e: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    let t = Instant::now();
    loop {
        // SAFETY: as `eq_read`.
        let r = unsafe { eq_read(e, event, buf, len, flags) };
        if r != -(FI_EAGAIN as isize)
            || timeout >= 0 && t.elapsed() >= Duration::from_millis(timeout as u64)
        {
            return r;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

unsafe extern "C" fn eq_strerror(
    _e: *mut fid_eq,
    _p: c_int,
    _d: *const c_void,
    _buf: *mut c_char,
    _len: usize,
) -> *const c_char {
    c"ni: no provider-specific EQ errors".as_ptr()
}
