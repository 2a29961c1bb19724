//! The C ABI: `extern "C"` functions over the Rust API, with opaque handles.
//!
//! `include/ni.h` is the contract C users read; this file implements it. The two must agree:
//! the unit tests below parse the header and check every `#define NI_...` value and every
//! declared function against this file.
//!
//! Rules every function here follows:
//! - it returns an `int`: `NI_OK` (0) or a negative `NI_E*` code (see [`code_of`]), and on
//!   failure records the full message for `ni_last_error()` (thread-local);
//! - every pointer argument is checked for NULL before anything is done (`NI_EINVAL`), except
//!   the optional out-parameters the header marks "may be NULL";
//! - no panic crosses the boundary: each body runs under `catch_unwind` (`NI_EINTERNAL`).
//!
//! Handles are boxes: `ni_t` owns an attached [`Ni`], `ni_region_t` a [`Region`], `ni_op_t` a
//! pending [`Op`], `ni_mq_t` a [`MessageQueue`].

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use ni_abi::fastpath::{coll, combine, dtype, participation, AM_MAX_PAYLOAD, MQ_MESSAGE};

use crate::{
    Combiner, Error, MessageQueue, MqAddr, MqOutcome, Ni, Op, Pattern, ReduceOp, Region, Result,
    Status,
};

// ---- Error codes (mirrored in include/ni.h; the tests check they agree) ----
//
// -1..-99: the NI's completion statuses, NI_E<status> = -(status as u16), with the device's
// own descriptions; -100 and below: library errors (libni::Error other than Failed).

pub const NI_OK: c_int = 0;
pub const NI_EPEERDOWN: c_int = -1;
pub const NI_EOUTOFPARTITION: c_int = -2;
pub const NI_ENOTREGISTERED: c_int = -3;
pub const NI_EBADKEY: c_int = -4;
pub const NI_EOUTOFBOUNDS: c_int = -5;
pub const NI_EQUEUEFULL: c_int = -6;
pub const NI_EBADLENGTH: c_int = -7;
pub const NI_ETRUNCATED: c_int = -8;
pub const NI_EPERM: c_int = -9;
pub const NI_EBADOPCODE: c_int = -10;
pub const NI_EBADDESCRIPTOR: c_int = -11;
pub const NI_ENOHANDLERRING: c_int = -12;
pub const NI_ECANCELLED: c_int = -13;
pub const NI_ECOLLISION: c_int = -14;
pub const NI_EABSTAINING: c_int = -15;
pub const NI_EABSTAINCHANGED: c_int = -16;
pub const NI_ECOLLTIMEOUT: c_int = -17;
pub const NI_ELINKDOWN: c_int = -18;
pub const NI_EOTHERHOST: c_int = -19;
pub const NI_EWOULDBLOCK: c_int = -100;
pub const NI_ERESET: c_int = -101;
pub const NI_ETIMEDOUT: c_int = -102;
pub const NI_EINVAL: c_int = -103;
pub const NI_EDEVICE: c_int = -104;
pub const NI_ENOSOCKET: c_int = -105;
pub const NI_EATTACH: c_int = -106;
pub const NI_ENOMEM: c_int = -107;
/// A panic inside libni was caught at the boundary: a bug.
pub const NI_EINTERNAL: c_int = -108;
/// The daemon died (socket closed, or no heartbeat for 800 ms in a guest).
pub const NI_EDAEMON: c_int = -109;
/// The NI (a guest's PCI function) is being hot-unplugged: libni let go of it.
pub const NI_EUNPLUGGED: c_int = -110;

/// `source` of a receive: any rank.
pub const NI_ANY_SOURCE: i64 = -1;

/// `ni_strerror` of the library errors (the statuses use [`Status::describe`]).
fn library_text(code: c_int) -> Option<&'static CStr> {
    Some(match code {
        NI_OK => c"success",
        NI_EWOULDBLOCK => c"would block: the submission ring is full; call ni_progress() and retry",
        NI_ERESET => c"the NI was reset (by the administrator or a device reset): attach again",
        NI_ETIMEDOUT => c"timed out",
        NI_EINVAL => c"invalid argument (a NULL pointer, a range outside a region, a bad size)",
        NI_EDEVICE => c"NI device error (the connection to the NI failed)",
        NI_ENOSOCKET => c"no NI to attach to: NI_SOCKET is not set (run under nirun)",
        NI_EATTACH => c"cannot attach to the NI",
        NI_ENOMEM => c"cannot allocate or map registered memory",
        NI_EINTERNAL => c"internal error in libni (a bug): see ni_last_error()",
        NI_EDAEMON => c"the NI's daemon is gone: restart ni-device, then attach again",
        NI_EUNPLUGGED => c"the NI was unplugged (its VMM took the PCI function back): attach again once it is back",
        _ => return None,
    })
}

/// The code of a completion status (`Status::Ok` is `NI_OK`).
pub fn status_code(s: Status) -> c_int {
    match s {
        Status::Ok => NI_OK,
        Status::PeerDown => NI_EPEERDOWN,
        Status::OutOfPartition => NI_EOUTOFPARTITION,
        Status::NotRegistered => NI_ENOTREGISTERED,
        Status::BadKey => NI_EBADKEY,
        Status::OutOfBounds => NI_EOUTOFBOUNDS,
        Status::QueueFull => NI_EQUEUEFULL,
        Status::BadLength => NI_EBADLENGTH,
        Status::Truncated => NI_ETRUNCATED,
        Status::Permission => NI_EPERM,
        Status::BadOpcode => NI_EBADOPCODE,
        Status::BadDescriptor => NI_EBADDESCRIPTOR,
        Status::NoHandlerRing => NI_ENOHANDLERRING,
        Status::Cancelled => NI_ECANCELLED,
        Status::Collision => NI_ECOLLISION,
        Status::Abstaining => NI_EABSTAINING,
        Status::AbstainChanged => NI_EABSTAINCHANGED,
        Status::Timeout => NI_ECOLLTIMEOUT,
        Status::LinkDown => NI_ELINKDOWN,
        Status::OtherHost => NI_EOTHERHOST,
    }
}

/// The code of an error.
pub fn code_of(e: &Error) -> c_int {
    match e {
        Error::NoSocket => NI_ENOSOCKET,
        Error::Attach { .. } | Error::Busy(_) => NI_EATTACH,
        Error::Device(_) => NI_EDEVICE,
        // A failure always carries a status other than Ok; be safe if it ever does not.
        Error::Failed { status, .. } => match status_code(*status) {
            NI_OK => NI_EDEVICE,
            c => c,
        },
        Error::WouldBlock => NI_EWOULDBLOCK,
        Error::BadArgument(_) => NI_EINVAL,
        Error::Memory(_) => NI_ENOMEM,
        Error::Reset => NI_ERESET,
        Error::Timeout(_) => NI_ETIMEDOUT,
        Error::DaemonGone(_) => NI_EDAEMON,
        Error::Unplugged(_) => NI_EUNPLUGGED,
    }
}

// ---- Handles and structs ----

/// An attached NI (`ni_t *`).
#[allow(non_camel_case_types)]
pub struct ni_t {
    ni: Ni,
}

/// Registered memory (`ni_region_t *`).
#[allow(non_camel_case_types)]
pub struct ni_region_t {
    region: Region,
}

/// A pending non-blocking operation (`ni_op_t *`).
#[allow(non_camel_case_types)]
pub struct ni_op_t {
    op: Op,
    /// The destination or source rank asked for (`u32::MAX` for any), for error statuses.
    peer: u32,
}

/// A T3E message queue (`ni_mq_t *`).
#[allow(non_camel_case_types)]
pub struct ni_mq_t {
    mq: MessageQueue,
}

/// How an operation ended (`ni_status_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct ni_status_t {
    /// `NI_OK` or the `NI_E*` code the operation failed with.
    pub error: c_int,
    /// The peer: destination of a send/put/get, source of a received message.
    pub rank: u32,
    /// Bytes moved (a receive: the message's length).
    pub len: u64,
    /// A receive: the message's tag.
    pub tag: u64,
    /// Message-queue send: Tail after the store. Ping: 1 if the peer is up.
    pub aux: u64,
}

/// Where a peer's message queue is (`ni_mq_addr_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct ni_mq_addr_t {
    pub key: u32,
    pub offset: u64,
}

/// `void (*)(void *ctx, uint32_t src, const void *data, size_t len)`; NULL is `None`.
#[allow(non_camel_case_types)]
pub type ni_am_handler_t =
    Option<unsafe extern "C" fn(ctx: *mut c_void, src: u32, data: *const c_void, len: usize)>;

// The header promises a `ni_t` may be used from several threads at once.
const _: () = {
    const fn thread_safe<T: Send + Sync>() {}
    thread_safe::<Ni>();
    thread_safe::<Region>();
};

// ---- Error reporting ----

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(c"no error".to_owned());
}

fn set_last_error(msg: String) {
    let msg = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = msg);
}

/// Run `body` for the C function `func`: the boundary every exported function goes through.
fn call(func: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => NI_OK,
        Ok(Err(e)) => {
            set_last_error(format!("{func}: {e}"));
            code_of(&e)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(format!("{func}: internal error in libni (a bug): {what}"));
            NI_EINTERNAL
        }
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadArgument(msg.into())
}

fn null(what: &str) -> Error {
    bad(format!("{what} is NULL"))
}

/// Fail with `NI_EINVAL` if `p` is NULL.
fn nonnull<T>(p: *const T, what: &str) -> Result<()> {
    if p.is_null() {
        Err(null(what))
    } else {
        Ok(())
    }
}

/// The handle `p` points to.
///
/// # Safety
/// `p` is NULL or a live handle of this library (not yet freed), not mutably aliased.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    nonnull(p, what)?;
    // SAFETY: non-NULL, and the caller guarantees it is a live handle.
    Ok(unsafe { &*p })
}

/// The handle `p` points to, for mutation.
///
/// # Safety
/// `p` is NULL or a live handle of this library that nothing else uses meanwhile.
unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    nonnull(p, what)?;
    // SAFETY: non-NULL, and the caller guarantees it is live and not aliased.
    Ok(unsafe { &mut *p })
}

/// Store `v` in the out-parameter `p` unless it is NULL.
///
/// # Safety
/// `p` is NULL or valid for writing a `T`.
unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-NULL and, by the caller's guarantee, writable.
        unsafe { p.write(v) }
    }
}

fn range(offset: usize, len: usize) -> Result<std::ops::Range<usize>> {
    let end = offset
        .checked_add(len)
        .ok_or_else(|| bad(format!("offset {offset} + length {len} overflows")))?;
    Ok(offset..end)
}

fn source_rank(src: i64) -> Result<Option<u32>> {
    match src {
        NI_ANY_SOURCE => Ok(None),
        0..=0xFFFF_FFFE => Ok(Some(src as u32)),
        _ => Err(bad(format!(
            "source {src} is neither a rank nor NI_ANY_SOURCE (-1)"
        ))),
    }
}

fn new_op(op: Op, peer: u32) -> *mut ni_op_t {
    Box::into_raw(Box::new(ni_op_t { op, peer }))
}

fn status_ok(d: &crate::Done) -> ni_status_t {
    ni_status_t {
        error: NI_OK,
        rank: d.rank,
        len: d.len,
        tag: d.tag,
        aux: d.aux,
    }
}

/// A waited operation's status, and the call's result (peer: the rank asked for).
fn outcome(r: Result<crate::Done>, peer: u32) -> (ni_status_t, Result<()>) {
    match r {
        Ok(d) => (status_ok(&d), Ok(())),
        Err(e) => (status_err(&e, peer), Err(e)),
    }
}

/// The status of a failed operation: the error and the peer; for a truncated receive also
/// the message's full length and its tag.
fn status_err(e: &Error, peer: u32) -> ni_status_t {
    match e {
        Error::Failed {
            status: Status::Truncated,
            rank,
            len,
            tag,
            ..
        } => ni_status_t {
            error: NI_ETRUNCATED,
            rank: *rank,
            len: *len,
            tag: *tag,
            aux: 0,
        },
        Error::Failed { rank, .. } => ni_status_t {
            error: code_of(e),
            rank: *rank,
            ..Default::default()
        },
        _ => ni_status_t {
            error: code_of(e),
            rank: peer,
            ..Default::default()
        },
    }
}

fn duration(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

// ---- Attach, identity ----

/// Attach to the NI named by `NI_SOCKET`.
///
/// # Safety
/// `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn ni_attach(out: *mut *mut ni_t) -> c_int {
    call("ni_attach", || {
        nonnull(out, "out")?;
        // SAFETY: out is non-NULL and writable (the caller's contract).
        unsafe { out.write(std::ptr::null_mut()) };
        let ni = Ni::attach()?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(ni_t { ni }))) };
        Ok(())
    })
}

/// Attach to the NI whose vfio-user socket is `path`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn ni_attach_path(path: *const c_char, out: *mut *mut ni_t) -> c_int {
    call("ni_attach_path", || {
        nonnull(path, "path")?;
        nonnull(out, "out")?;
        // SAFETY: out is non-NULL and writable (the caller's contract).
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: path is non-NULL and NUL-terminated (the caller's contract).
        let path = unsafe { CStr::from_ptr(path) };
        let ni = Ni::attach_path(Path::new(OsStr::from_bytes(path.to_bytes())))?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(ni_t { ni }))) };
        Ok(())
    })
}

/// Detach and free `ni`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t` no other thread uses; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn ni_detach(ni: *mut ni_t) -> c_int {
    call("ni_detach", || {
        nonnull(ni, "ni")?;
        // SAFETY: a live handle from ni_attach*, which Box::into_raw made; freed once.
        drop(unsafe { Box::from_raw(ni) });
        Ok(())
    })
}

/// This process's rank in its partition.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `rank` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_rank(ni: *const ni_t, rank: *mut u32) -> c_int {
    call("ni_rank", || {
        nonnull(rank, "rank")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        // SAFETY: non-NULL and writable.
        unsafe { rank.write(ni.ni.rank()) };
        Ok(())
    })
}

/// The number of NIs in the partition.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_size(ni: *const ni_t, size: *mut u32) -> c_int {
    call("ni_size", || {
        nonnull(size, "size")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        // SAFETY: non-NULL and writable.
        unsafe { size.write(ni.ni.size()) };
        Ok(())
    })
}

/// The NI's physical number in the daemon.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `node` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_node(ni: *const ni_t, node: *mut u32) -> c_int {
    call("ni_node", || {
        nonnull(node, "node")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        // SAFETY: non-NULL and writable.
        unsafe { node.write(ni.ni.node()) };
        Ok(())
    })
}

// ---- Regions ----

/// Allocate and register at least `len` bytes.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_alloc(ni: *mut ni_t, len: usize, out: *mut *mut ni_region_t) -> c_int {
    call("ni_alloc", || {
        nonnull(out, "out")?;
        // SAFETY: non-NULL and writable.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let region = ni.ni.alloc(len)?;
        // SAFETY: non-NULL and writable.
        unsafe { out.write(Box::into_raw(Box::new(ni_region_t { region }))) };
        Ok(())
    })
}

/// `ni_register` flags (ni.h): the fast path's region access bits.
pub const NI_REMOTE_READ: u32 = ni_abi::fastpath::access::REMOTE_READ;
pub const NI_REMOTE_WRITE: u32 = ni_abi::fastpath::access::REMOTE_WRITE;

/// Register `len` bytes of the caller's own memory at `ptr` ([`Ni::register`]).
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `out` is NULL or writable; `[ptr, ptr + len)` is memory of
/// this process that stays mapped until the region is freed.
#[no_mangle]
pub unsafe extern "C" fn ni_register(
    ni: *mut ni_t,
    ptr: *mut c_void,
    len: usize,
    flags: u32,
    out: *mut *mut ni_region_t,
) -> c_int {
    call("ni_register", || {
        nonnull(out, "out")?;
        // SAFETY: non-NULL and writable.
        unsafe { out.write(std::ptr::null_mut()) };
        nonnull(ptr, "ptr")?;
        if flags & !(NI_REMOTE_READ | NI_REMOTE_WRITE) != 0 {
            return Err(Error::BadArgument(format!("unknown flags {flags:#x}")));
        }
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        // SAFETY: the caller's contract on the memory.
        let region = unsafe {
            ni.ni.register(
                ptr as *mut u8,
                len,
                flags & NI_REMOTE_READ != 0,
                flags & NI_REMOTE_WRITE != 0,
            )
        }?;
        // SAFETY: non-NULL and writable.
        unsafe { out.write(Box::into_raw(Box::new(ni_region_t { region }))) };
        Ok(())
    })
}

/// Deregister and free a region.
///
/// # Safety
/// `region` is NULL or a live region no operation still uses; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn ni_region_free(region: *mut ni_region_t) -> c_int {
    call("ni_region_free", || {
        nonnull(region, "region")?;
        // SAFETY: a live handle from ni_alloc (Box::into_raw); freed once.
        drop(unsafe { Box::from_raw(region) });
        Ok(())
    })
}

/// The region's memory in this process.
///
/// # Safety
/// `region` is NULL or a live region; `ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_region_ptr(region: *const ni_region_t, ptr: *mut *mut c_void) -> c_int {
    call("ni_region_ptr", || {
        nonnull(ptr, "ptr")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let r = unsafe { handle(region, "region")? };
        // SAFETY: non-NULL and writable.
        unsafe { ptr.write(r.region.as_ptr() as *mut c_void) };
        Ok(())
    })
}

/// The region's length (a whole number of pages, at least what was asked for).
///
/// # Safety
/// `region` is NULL or a live region; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_region_len(region: *const ni_region_t, len: *mut usize) -> c_int {
    call("ni_region_len", || {
        nonnull(len, "len")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let r = unsafe { handle(region, "region")? };
        // SAFETY: non-NULL and writable.
        unsafe { len.write(r.region.len()) };
        Ok(())
    })
}

/// The key peers name the region by.
///
/// # Safety
/// `region` is NULL or a live region; `key` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_region_key(region: *const ni_region_t, key: *mut u32) -> c_int {
    call("ni_region_key", || {
        nonnull(key, "key")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let r = unsafe { handle(region, "region")? };
        // SAFETY: non-NULL and writable.
        unsafe { key.write(r.region.key()) };
        Ok(())
    })
}

// ---- Two-sided ----

/// Send `len` bytes at `offset` in `region` to `dest` with `tag`; blocks until received.
///
/// # Safety
/// `ni` and `region` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn ni_send(
    ni: *mut ni_t,
    dest: u32,
    region: *const ni_region_t,
    offset: usize,
    len: usize,
    tag: u64,
) -> c_int {
    call("ni_send", || {
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, r) = unsafe { (handle(ni, "ni")?, handle(region, "region")?) };
        ni.ni.send(dest, &r.region, range(offset, len)?, tag)
    })
}

/// Start a send; finish it with `ni_test`/`ni_wait`.
///
/// # Safety
/// `ni` and `region` are NULL or live handles; `op` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_isend(
    ni: *mut ni_t,
    dest: u32,
    region: *const ni_region_t,
    offset: usize,
    len: usize,
    tag: u64,
    op: *mut *mut ni_op_t,
) -> c_int {
    call("ni_isend", || {
        nonnull(op, "op")?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(std::ptr::null_mut()) };
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, r) = unsafe { (handle(ni, "ni")?, handle(region, "region")?) };
        let o = ni.ni.isend(dest, &r.region, range(offset, len)?, tag)?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(new_op(o, dest)) };
        Ok(())
    })
}

/// Receive into `len` bytes at `offset` in `region`; blocks until a message arrives.
///
/// # Safety
/// `ni` and `region` are NULL or live handles; the out-parameters are NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_recv(
    ni: *mut ni_t,
    source: i64,
    region: *const ni_region_t,
    offset: usize,
    len: usize,
    tag: u64,
    mask: u64,
    source_out: *mut u32,
    tag_out: *mut u64,
    len_out: *mut u64,
) -> c_int {
    call("ni_recv", || {
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, r) = unsafe { (handle(ni, "ni")?, handle(region, "region")?) };
        let src = source_rank(source)?;
        let result = ni.ni.recv(src, &r.region, range(offset, len)?, tag, mask);
        let (s, t, l) = match &result {
            Ok(d) => (d.rank, d.tag, d.len),
            Err(e) => {
                let st = status_err(e, src.unwrap_or(u32::MAX));
                (st.rank, st.tag, st.len)
            }
        };
        // SAFETY: each is NULL (skipped) or writable (the caller's contract).
        unsafe {
            put(source_out, s);
            put(tag_out, t);
            put(len_out, l);
        }
        result.map(|_| ())
    })
}

/// Start a receive; finish it with `ni_test`/`ni_wait`.
///
/// # Safety
/// `ni` and `region` are NULL or live handles; `op` is NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_irecv(
    ni: *mut ni_t,
    source: i64,
    region: *const ni_region_t,
    offset: usize,
    len: usize,
    tag: u64,
    mask: u64,
    op: *mut *mut ni_op_t,
) -> c_int {
    call("ni_irecv", || {
        nonnull(op, "op")?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(std::ptr::null_mut()) };
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, r) = unsafe { (handle(ni, "ni")?, handle(region, "region")?) };
        let src = source_rank(source)?;
        let o = ni
            .ni
            .irecv(src, &r.region, range(offset, len)?, tag, mask)?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(new_op(o, src.unwrap_or(u32::MAX))) };
        Ok(())
    })
}

// ---- Finishing operations ----

/// Whether `*op` has finished. When it has, `*done` is 1, `*op` is freed and set to NULL, and
/// the return value and `status` say how it ended.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `op` is NULL or points to NULL or a live op of `ni`;
/// `done` is NULL or writable; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_test(
    ni: *mut ni_t,
    op: *mut *mut ni_op_t,
    done: *mut c_int,
    status: *mut ni_status_t,
) -> c_int {
    call("ni_test", || {
        nonnull(op, "op")?;
        nonnull(done, "done")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        // SAFETY: op is non-NULL and readable; *op is NULL or a live op.
        let o = unsafe { handle(*op, "*op")? };
        // SAFETY: done is non-NULL and writable.
        unsafe { done.write(0) };
        match ni.ni.test(&o.op) {
            Ok(None) => Ok(()),
            Ok(Some(d)) => {
                // SAFETY: *op came from Box::into_raw in ni_isend/ni_irecv; freed once, and
                // the caller's pointer is cleared; status and done are NULL or writable.
                unsafe {
                    drop(Box::from_raw(*op));
                    op.write(std::ptr::null_mut());
                    done.write(1);
                    put(status, status_ok(&d));
                }
                Ok(())
            }
            // The completion was consumed: the op is over.
            Err(e @ Error::Failed { .. }) => {
                let st = status_err(&e, o.peer);
                // SAFETY: as above.
                unsafe {
                    drop(Box::from_raw(*op));
                    op.write(std::ptr::null_mut());
                    done.write(1);
                    put(status, st);
                }
                Err(e)
            }
            // Progress failed (a reset): the op is still the caller's.
            Err(e) => Err(e),
        }
    })
}

/// Wait for `*op`, with an optional timeout; always frees it and sets `*op` to NULL.
///
/// # Safety
/// As for `ni_test`.
unsafe fn wait_common(
    ni: *mut ni_t,
    op: *mut *mut ni_op_t,
    timeout: Option<Duration>,
    status: *mut ni_status_t,
) -> Result<()> {
    nonnull(op, "op")?;
    // SAFETY: NULL or a live handle (the caller's contract).
    let ni = unsafe { handle(ni, "ni")? };
    // SAFETY: op is non-NULL and readable (the caller's contract).
    let raw = unsafe { *op };
    nonnull(raw, "*op")?;
    // SAFETY: *op came from Box::into_raw in ni_isend/ni_irecv and is taken over once; the
    // caller's pointer is cleared at once.
    let o = unsafe {
        op.write(std::ptr::null_mut());
        Box::from_raw(raw)
    };
    let (st, result) = outcome(ni.ni.wait_timeout(o.op, timeout), o.peer);
    // SAFETY: NULL or writable (the caller's contract).
    unsafe { put(status, st) };
    result
}

/// Wait for `*op` to finish; frees it and sets `*op` to NULL.
///
/// # Safety
/// As for `ni_test`.
#[no_mangle]
pub unsafe extern "C" fn ni_wait(
    ni: *mut ni_t,
    op: *mut *mut ni_op_t,
    status: *mut ni_status_t,
) -> c_int {
    // SAFETY: the caller's contract is wait_common's.
    call("ni_wait", || unsafe { wait_common(ni, op, None, status) })
}

/// Wait until every op of `ops[0..n]` finishes (MPI_Waitall): frees each and sets it to NULL
/// (NULL entries are skipped, their status zeroed), fills `statuses[i]` (may be NULL) for
/// each, and returns NI_OK or the error of the first op, in array order, that failed. An op
/// named twice is refused (NI_EINVAL, nothing freed).
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `ops` is NULL or points to `n` entries, each NULL or a live
/// op of `ni`; `statuses` is NULL or writable for `n` entries.
#[no_mangle]
pub unsafe extern "C" fn ni_wait_all(
    ni: *mut ni_t,
    ops: *mut *mut ni_op_t,
    n: usize,
    statuses: *mut ni_status_t,
) -> c_int {
    call("ni_wait_all", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        if n == 0 {
            return Ok(());
        }
        nonnull(ops, "ops")?;
        // SAFETY: `ops` points to n entries (the caller's contract), used only here.
        let ops = unsafe { std::slice::from_raw_parts_mut(ops, n) };
        // One op twice would be freed twice: refused before anything is taken.
        let mut seen: Vec<*mut ni_op_t> = ops.iter().copied().filter(|p| !p.is_null()).collect();
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("ops holds one op more than once"));
        }
        // The ops taken over, and where each was (with its peer, for error statuses).
        let mut taken = Vec::with_capacity(n);
        let mut at = Vec::with_capacity(n);
        for (i, p) in ops.iter_mut().enumerate() {
            if !p.is_null() {
                // SAFETY: a live op from Box::into_raw in ni_isend/ni_irecv, taken over once;
                // the caller's pointer is cleared at once.
                let o = unsafe { Box::from_raw(std::mem::replace(p, std::ptr::null_mut())) };
                at.push((i, o.peer));
                taken.push(o.op);
            }
        }
        let mut results = Vec::with_capacity(taken.len());
        ni.ni.wait_all(&mut taken, &mut results);
        let mut statuses = if statuses.is_null() {
            None
        } else {
            // SAFETY: writable for n entries (the caller's contract).
            let st = unsafe { std::slice::from_raw_parts_mut(statuses, n) };
            st.fill(ni_status_t::default());
            Some(st)
        };
        let mut first = Ok(());
        for (r, (i, peer)) in results.into_iter().zip(at) {
            let (st, result) = outcome(r, peer);
            if first.is_ok() {
                first = result;
            }
            if let Some(out) = &mut statuses {
                out[i] = st;
            }
        }
        first
    })
}

/// Wait at most `timeout_ns` for `*op`; frees it and sets `*op` to NULL whatever happens.
///
/// # Safety
/// As for `ni_test`.
#[no_mangle]
pub unsafe extern "C" fn ni_wait_timeout(
    ni: *mut ni_t,
    op: *mut *mut ni_op_t,
    timeout_ns: u64,
    status: *mut ni_status_t,
) -> c_int {
    call("ni_wait_timeout", || {
        // SAFETY: the caller's contract is wait_common's.
        unsafe { wait_common(ni, op, Some(duration(timeout_ns)), status) }
    })
}

/// Free an op handle without finishing it (for ops left over after `ni_detach`).
///
/// # Safety
/// `op` is NULL or a live op; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn ni_op_free(op: *mut ni_op_t) -> c_int {
    call("ni_op_free", || {
        nonnull(op, "op")?;
        // SAFETY: a live handle from Box::into_raw; freed once.
        drop(unsafe { Box::from_raw(op) });
        Ok(())
    })
}

/// Give up on `*op` without waiting: its completion is discarded; frees it and sets `*op` to
/// NULL.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `op` is NULL or points to NULL or a live op of `ni`.
#[no_mangle]
pub unsafe extern "C" fn ni_forget(ni: *mut ni_t, op: *mut *mut ni_op_t) -> c_int {
    call("ni_forget", || {
        nonnull(op, "op")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        // SAFETY: op is non-NULL and readable (the caller's contract).
        let raw = unsafe { *op };
        nonnull(raw, "*op")?;
        // SAFETY: *op came from Box::into_raw and is taken over once; the caller's pointer
        // is cleared at once.
        let o = unsafe {
            op.write(std::ptr::null_mut());
            Box::from_raw(raw)
        };
        ni.ni.forget(o.op);
        Ok(())
    })
}

/// Take completions and run active-message handlers.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_progress(ni: *mut ni_t, count: *mut usize) -> c_int {
    call("ni_progress", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let n = ni.ni.progress()?;
        // SAFETY: NULL or writable.
        unsafe { put(count, n) };
        Ok(())
    })
}

// ---- One-sided, ping ----

/// Write `len` bytes at `offset` in `region` into `dest`'s region `key` at `remote_offset`.
///
/// # Safety
/// `ni` and `region` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn ni_put(
    ni: *mut ni_t,
    dest: u32,
    region: *const ni_region_t,
    offset: usize,
    len: usize,
    key: u32,
    remote_offset: u64,
) -> c_int {
    call("ni_put", || {
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, r) = unsafe { (handle(ni, "ni")?, handle(region, "region")?) };
        ni.ni
            .put(dest, &r.region, range(offset, len)?, key, remote_offset)
    })
}

/// Read `len` bytes of `dest`'s region `key` at `remote_offset` into `region` at `offset`.
///
/// # Safety
/// `ni` and `region` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn ni_get(
    ni: *mut ni_t,
    dest: u32,
    region: *mut ni_region_t,
    offset: usize,
    len: usize,
    key: u32,
    remote_offset: u64,
) -> c_int {
    call("ni_get", || {
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, r) = unsafe { (handle(ni, "ni")?, handle(region, "region")?) };
        ni.ni
            .get(dest, &r.region, range(offset, len)?, key, remote_offset)
    })
}

/// Is `dest`'s NI up?
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_ping(ni: *mut ni_t, dest: u32) -> c_int {
    call("ni_ping", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        ni.ni.ping(dest)
    })
}

/// MLINK RESET of a remote NI: reserved for the administrator, always `NI_EPERM`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_reset_remote(ni: *mut ni_t, dest: u32) -> c_int {
    call("ni_reset_remote", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        ni.ni.reset_remote(dest)
    })
}

// ---- Active messages ----

/// A C handler and its context, run from within `progress`.
struct CHandler {
    f: unsafe extern "C" fn(*mut c_void, u32, *const c_void, usize),
    ctx: *mut c_void,
}

// SAFETY: the header requires the handler and its context to be usable from whichever thread
// makes progress on the ni_t; libni only passes the pointer back to the handler.
unsafe impl Send for CHandler {}

impl CHandler {
    fn run(&self, src: u32, payload: &[u8]) {
        // SAFETY: f is the caller's non-NULL handler; data and len describe a live slice for
        // the duration of the call, as the header promises.
        unsafe {
            (self.f)(
                self.ctx,
                src,
                payload.as_ptr() as *const c_void,
                payload.len(),
            )
        }
    }
}

/// Run `f(ctx, src, data, len)` for every active message sent to `handler`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `f` and `ctx` follow the header's contract.
#[no_mangle]
pub unsafe extern "C" fn ni_am_register(
    ni: *mut ni_t,
    handler: u64,
    f: ni_am_handler_t,
    ctx: *mut c_void,
) -> c_int {
    call("ni_am_register", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let f = f.ok_or_else(|| null("handler function"))?;
        let h = CHandler { f, ctx };
        ni.ni
            .am_register(handler, move |src, payload| h.run(src, payload));
        Ok(())
    })
}

/// Run `handler` at `dest` on `len` bytes at `data` (up to `NI_AM_MAX_PAYLOAD`).
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `data` is NULL (only with `len` 0) or readable for `len`.
#[no_mangle]
pub unsafe extern "C" fn ni_am_send(
    ni: *mut ni_t,
    dest: u32,
    handler: u64,
    data: *const c_void,
    len: usize,
) -> c_int {
    call("ni_am_send", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        if len == 0 {
            return ni.ni.am_send(dest, handler, &[]);
        }
        nonnull(data, "data")?;
        if len as u64 > AM_MAX_PAYLOAD {
            return Err(bad(format!(
                "active-message payload of {len} bytes exceeds {AM_MAX_PAYLOAD}"
            )));
        }
        // SAFETY: non-NULL and readable for len bytes (the caller's contract); len is at
        // most AM_MAX_PAYLOAD.
        let payload = unsafe { std::slice::from_raw_parts(data as *const u8, len) };
        ni.ni.am_send(dest, handler, payload)
    })
}

// ---- Message queues ----

/// A message queue of `limit` slots, Tail 1, Threshold `threshold`, in a fresh region.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_create(
    ni: *mut ni_t,
    limit: u64,
    threshold: u64,
    out: *mut *mut ni_mq_t,
) -> c_int {
    call("ni_mq_create", || {
        nonnull(out, "out")?;
        // SAFETY: non-NULL and writable.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let mut mq = ni.ni.mq_create(limit, threshold)?;
        mq.set_head(1);
        // SAFETY: non-NULL and writable.
        unsafe { out.write(Box::into_raw(Box::new(ni_mq_t { mq }))) };
        Ok(())
    })
}

/// Free a message queue (and deregister its region).
///
/// # Safety
/// `mq` is NULL or a live queue; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_free(mq: *mut ni_mq_t) -> c_int {
    call("ni_mq_free", || {
        nonnull(mq, "mq")?;
        // SAFETY: a live handle from ni_mq_create (Box::into_raw); freed once.
        drop(unsafe { Box::from_raw(mq) });
        Ok(())
    })
}

/// Where peers send to.
///
/// # Safety
/// `mq` is NULL or a live queue; `addr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_addr(mq: *const ni_mq_t, addr: *mut ni_mq_addr_t) -> c_int {
    call("ni_mq_addr", || {
        nonnull(addr, "addr")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let q = unsafe { handle(mq, "mq")? };
        let a = q.mq.addr();
        // SAFETY: non-NULL and writable.
        unsafe {
            addr.write(ni_mq_addr_t {
                key: a.key,
                offset: a.offset,
            })
        };
        Ok(())
    })
}

/// The MQCW's address as the NI names it (what `MSG_ADDR` reports after a threshold hit).
///
/// # Safety
/// `mq` is NULL or a live queue; `iova` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_iova(mq: *const ni_mq_t, iova: *mut u64) -> c_int {
    call("ni_mq_iova", || {
        nonnull(iova, "iova")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let q = unsafe { handle(mq, "mq")? };
        let a = q.mq.region().iova() + q.mq.addr().offset;
        // SAFETY: non-NULL and writable.
        unsafe { iova.write(a) };
        Ok(())
    })
}

/// The queue's control word.
///
/// # Safety
/// `mq` is NULL or a live queue; `word` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_mqcw(mq: *const ni_mq_t, word: *mut u64) -> c_int {
    call("ni_mq_mqcw", || {
        nonnull(word, "word")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let q = unsafe { handle(mq, "mq")? };
        // SAFETY: non-NULL and writable.
        unsafe { word.write(q.mq.mqcw()) };
        Ok(())
    })
}

/// Atomically swap in `new_word`; the old word goes to `*old` (may be NULL).
///
/// # Safety
/// `mq` is NULL or a live queue; `old` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_swap(mq: *mut ni_mq_t, new_word: u64, old: *mut u64) -> c_int {
    call("ni_mq_swap", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let q = unsafe { handle(mq, "mq")? };
        let w = q.mq.swap(new_word);
        // SAFETY: NULL or writable.
        unsafe { put(old, w) };
        Ok(())
    })
}

/// Copy up to `max` stored messages (64 bytes each) into `out`, oldest first, advancing the
/// software head pointer past them; `*count` says how many.
///
/// # Safety
/// `mq` is NULL or a live queue nothing else uses meanwhile; `out` is NULL (only with
/// `max` 0) or writable for `max * 64` bytes; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_take(
    mq: *mut ni_mq_t,
    out: *mut c_void,
    max: usize,
    count: *mut usize,
) -> c_int {
    call("ni_mq_take", || {
        nonnull(count, "count")?;
        if max > 0 {
            nonnull(out, "out")?;
        }
        // The caller's buffer is max * 64 bytes: a max that overflows that is a lie.
        max.checked_mul(MQ_MESSAGE as usize)
            .ok_or_else(|| bad(format!("{max} messages overflow size_t")))?;
        // SAFETY: NULL or a live handle nothing else uses (the caller's contract).
        let q = unsafe { handle_mut(mq, "mq")? };
        // No more than the queue holds: the slice below stays within what any buffer can be.
        let max = max.min(q.mq.region().len() / MQ_MESSAGE as usize);
        let n = if max > 0 {
            // SAFETY: out is non-NULL (max > 0) and writable for max * 64 bytes; a
            // message is a byte array (alignment 1).
            let msgs = unsafe { std::slice::from_raw_parts_mut(out as *mut [u8; 64], max) };
            q.mq.take_into(msgs)
        } else {
            0
        };
        // SAFETY: non-NULL and writable.
        unsafe { count.write(n) };
        Ok(())
    })
}

/// Set the software head pointer (after a swap that restarts the queue at `slot`).
///
/// # Safety
/// `mq` is NULL or a live queue nothing else uses meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_set_head(mq: *mut ni_mq_t, slot: u64) -> c_int {
    call("ni_mq_set_head", || {
        // SAFETY: NULL or a live handle nothing else uses (the caller's contract).
        let q = unsafe { handle_mut(mq, "mq")? };
        q.mq.set_head(slot);
        Ok(())
    })
}

/// T3E SEND of one 64-byte message into `dest`'s queue at `addr`. `*accepted` is 1 if it was
/// stored (`*tail`, may be NULL, is then the queue's new Tail) or 0 if the queue was full.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `msg` is NULL or readable for 64 bytes; `accepted` is NULL
/// or writable; `tail` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_mq_send(
    ni: *mut ni_t,
    dest: u32,
    addr: ni_mq_addr_t,
    msg: *const c_void,
    accepted: *mut c_int,
    tail: *mut u64,
) -> c_int {
    call("ni_mq_send", || {
        nonnull(msg, "msg")?;
        nonnull(accepted, "accepted")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let mut m = [0u8; MQ_MESSAGE as usize];
        // SAFETY: msg is non-NULL and readable for 64 bytes (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(msg as *const u8, m.as_mut_ptr(), m.len()) };
        let to = MqAddr {
            key: addr.key,
            offset: addr.offset,
        };
        let (ok, t) = match ni.ni.mq_send(dest, to, &m)? {
            MqOutcome::Accepted { tail } => (1, tail),
            MqOutcome::Rejected => (0, 0),
        };
        // SAFETY: accepted is non-NULL and writable; tail is NULL or writable.
        unsafe {
            accepted.write(ok);
            put(tail, t);
        }
        Ok(())
    })
}

/// T3E IR_STATUS and MSG_ADDR.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `status` and `msg_addr` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_ir_status(
    ni: *mut ni_t,
    status: *mut u64,
    msg_addr: *mut u64,
) -> c_int {
    call("ni_ir_status", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let (s, a) = ni.ni.ir_status()?;
        // SAFETY: each is NULL or writable.
        unsafe {
            put(status, s);
            put(msg_addr, a);
        }
        Ok(())
    })
}

/// Write IR_STATUS: enable (non-zero) or disable the threshold interrupt and clear the
/// `NI_IR_MSG_ADDR_VALID`/`NI_IR_MSG_MULTIPLE` bits set in `clear`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_ir_write(ni: *mut ni_t, enable: c_int, clear: u64) -> c_int {
    call("ni_ir_write", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        ni.ni.ir_write(enable != 0, clear)
    })
}

/// Wait up to `timeout_ns` for the message-queue interrupt; `*fired` says whether it came.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `fired` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_wait_mq_interrupt(
    ni: *mut ni_t,
    timeout_ns: u64,
    fired: *mut c_int,
) -> c_int {
    call("ni_wait_mq_interrupt", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let f = ni.ni.wait_mq_interrupt(duration(timeout_ns));
        // SAFETY: NULL or writable.
        unsafe { put(fired, f as c_int) };
        Ok(())
    })
}

// ---- Collectives ----

/// `NI_I32` .. `NI_F64` (`ni_dtype_t`): `ni_abi::fastpath::dtype`.
pub const NI_I32: c_int = dtype::I32 as c_int;
pub const NI_U32: c_int = dtype::U32 as c_int;
pub const NI_I64: c_int = dtype::I64 as c_int;
pub const NI_U64: c_int = dtype::U64 as c_int;
pub const NI_F32: c_int = dtype::F32 as c_int;
pub const NI_F64: c_int = dtype::F64 as c_int;

/// `NI_SUM` .. `NI_XOR` (`ni_redop_t`): [`ReduceOp`].
pub const NI_SUM: c_int = ReduceOp::Sum as c_int;
pub const NI_PROD: c_int = ReduceOp::Prod as c_int;
pub const NI_MIN: c_int = ReduceOp::Min as c_int;
pub const NI_MAX: c_int = ReduceOp::Max as c_int;
pub const NI_AND: c_int = ReduceOp::And as c_int;
pub const NI_OR: c_int = ReduceOp::Or as c_int;
pub const NI_XOR: c_int = ReduceOp::Xor as c_int;

/// `ni_pattern_t`: [`Pattern`].
pub const NI_PATTERN_SCAN_BACKWARD: c_int = Pattern::ScanBackward as c_int;
pub const NI_PATTERN_SCAN_FORWARD: c_int = Pattern::ScanForward as c_int;
pub const NI_PATTERN_REDUCE: c_int = Pattern::Reduce as c_int;

/// `ni_combiner_t`: [`Combiner`].
pub const NI_COMBINER_OR: c_int = Combiner::Or as c_int;
pub const NI_COMBINER_ADD: c_int = Combiner::Add as c_int;
pub const NI_COMBINER_XOR: c_int = Combiner::Xor as c_int;
pub const NI_COMBINER_UADD: c_int = Combiner::Uadd as c_int;
pub const NI_COMBINER_MAX: c_int = Combiner::Max as c_int;

/// A C `ni_dtype_t`: the NI's dtype and the element size.
fn elem_type(d: c_int) -> Result<(u32, usize)> {
    u32::try_from(d)
        .ok()
        .and_then(|u| Some((u, dtype::size(u)? as usize)))
        .ok_or_else(|| bad(format!("dtype {d} is not one of NI_I32 .. NI_F64")))
}

/// A C `ni_redop_t`.
fn reduce_op(o: c_int) -> Result<ReduceOp> {
    Ok(match o {
        NI_SUM => ReduceOp::Sum,
        NI_PROD => ReduceOp::Prod,
        NI_MIN => ReduceOp::Min,
        NI_MAX => ReduceOp::Max,
        NI_AND => ReduceOp::And,
        NI_OR => ReduceOp::Or,
        NI_XOR => ReduceOp::Xor,
        _ => return Err(bad(format!("op {o} is not one of NI_SUM .. NI_XOR"))),
    })
}

/// The NI address of `count` elements of `size` bytes at byte `offset` of `region`.
fn elems(region: &Region, offset: usize, count: usize, size: usize, what: &str) -> Result<u64> {
    let bytes = count
        .checked_mul(size)
        .and_then(|b| b.checked_add(offset))
        .ok_or_else(|| {
            bad(format!(
                "{what}: {count} elements at byte {offset} overflow"
            ))
        })?;
    if bytes > region.len() {
        return Err(bad(format!(
            "{what}: {count} elements of {size} bytes at byte {offset} do not fit the \
             {}-byte region",
            region.len()
        )));
    }
    Ok(region.iova() + offset as u64)
}

/// A vector collective's arguments, checked: a [`crate::coll_request`]'s.
struct Coll {
    kind: u8,
    dtype: u32,
    op: ReduceOp,
    root: u32,
    send: u64,
    recv: u64,
    count: usize,
}

impl Coll {
    fn request(&self) -> ni_abi::fastpath::Request {
        crate::coll_request(
            self.kind, self.dtype, self.op, self.root, self.send, self.recv, self.count,
        )
    }

    /// Start and, for a blocking call (`op` NULL), wait; else hand the op out through `op`.
    ///
    /// # Safety
    /// `op` is NULL or writable.
    unsafe fn run(&self, ni: &Ni, op: *mut *mut ni_op_t) -> Result<()> {
        if op.is_null() {
            // Blocking: as the Rust API's typed calls run it (a vector past a window slot in
            // pieces or through exported memory, not as one operation of the device's).
            return ni.collective_blocking(self.request());
        }
        let o = ni.start(self.request())?;
        let peer = if matches!(self.kind, coll::BCAST | coll::REDUCE) {
            self.root
        } else {
            u32::MAX
        };
        // SAFETY: non-NULL and writable (the caller's contract).
        unsafe { op.write(new_op(o, peer)) };
        Ok(())
    }
}

/// The ranges of a collective from `send` (may be `recv`) into `recv`.
#[allow(clippy::too_many_arguments)]
fn send_recv(
    kind: u8,
    dtype: c_int,
    op: ReduceOp,
    send: &Region,
    send_offset: usize,
    recv: &Region,
    recv_offset: usize,
    count: usize,
    recv_count: usize,
) -> Result<Coll> {
    let (d, size) = elem_type(dtype)?;
    Ok(Coll {
        kind,
        dtype: d,
        op,
        root: 0,
        send: elems(send, send_offset, count, size, "send")?,
        recv: elems(recv, recv_offset, recv_count, size, "recv")?,
        count,
    })
}

/// Barrier over the partition.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_barrier(ni: *mut ni_t) -> c_int {
    call("ni_barrier", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        ni.ni.barrier()
    })
}

/// Start a barrier; finish it with `ni_test`/`ni_wait`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `op` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_ibarrier(ni: *mut ni_t, op: *mut *mut ni_op_t) -> c_int {
    call("ni_ibarrier", || {
        nonnull(op, "op")?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(std::ptr::null_mut()) };
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let o = ni.ni.ibarrier()?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(new_op(o, u32::MAX)) };
        Ok(())
    })
}

/// The broadcast of `ni_broadcast`/`ni_ibroadcast`.
///
/// # Safety
/// `ni` and `region` are NULL or live handles; `op` is NULL or writable.
unsafe fn broadcast(
    ni: *mut ni_t,
    root: u32,
    dtype: c_int,
    region: *const ni_region_t,
    offset: usize,
    count: usize,
    op: *mut *mut ni_op_t,
) -> Result<()> {
    // SAFETY: NULL or live handles (the caller's contract).
    let (ni, r) = unsafe { (handle(ni, "ni")?, handle(region, "region")?) };
    let (d, size) = elem_type(dtype)?;
    let a = elems(&r.region, offset, count, size, "region")?;
    let c = Coll {
        kind: coll::BCAST,
        dtype: d,
        op: ReduceOp::Sum,
        root,
        send: a,
        recv: a,
        count,
    };
    // SAFETY: op is NULL or writable (the caller's contract).
    unsafe { c.run(&ni.ni, op) }
}

/// Every member's `count` elements at byte `offset` of `region` get `root`'s.
///
/// # Safety
/// `ni` and `region` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn ni_broadcast(
    ni: *mut ni_t,
    root: u32,
    dtype: c_int,
    region: *mut ni_region_t,
    offset: usize,
    count: usize,
) -> c_int {
    call("ni_broadcast", || {
        // SAFETY: the caller's contract is broadcast's; a NULL op means blocking.
        unsafe { broadcast(ni, root, dtype, region, offset, count, std::ptr::null_mut()) }
    })
}

/// Start a broadcast; finish it with `ni_test`/`ni_wait`.
///
/// # Safety
/// `ni` and `region` are NULL or live handles; `op` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_ibroadcast(
    ni: *mut ni_t,
    root: u32,
    dtype: c_int,
    region: *mut ni_region_t,
    offset: usize,
    count: usize,
    op: *mut *mut ni_op_t,
) -> c_int {
    call("ni_ibroadcast", || {
        nonnull(op, "op")?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(std::ptr::null_mut()) };
        // SAFETY: the caller's contract is broadcast's; op is non-NULL.
        unsafe { broadcast(ni, root, dtype, region, offset, count, op) }
    })
}

/// Reduce every member's `send` into `root`'s `recv` (NULL allowed on other members).
///
/// # Safety
/// `ni`, `send` and `recv` are NULL or live handles.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_reduce(
    ni: *mut ni_t,
    root: u32,
    dtype: c_int,
    redop: c_int,
    send: *const ni_region_t,
    send_offset: usize,
    recv: *mut ni_region_t,
    recv_offset: usize,
    count: usize,
) -> c_int {
    call("ni_reduce", || {
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, s) = unsafe { (handle(ni, "ni")?, handle(send, "send")?) };
        let (d, size) = elem_type(dtype)?;
        let op = reduce_op(redop)?;
        let recv = if recv.is_null() && ni.ni.rank() != root {
            // Only the root's result buffer is used.
            0
        } else {
            // SAFETY: NULL or a live handle (the caller's contract).
            let r = unsafe { handle(recv, "recv (at the root)")? };
            elems(&r.region, recv_offset, count, size, "recv")?
        };
        let c = Coll {
            kind: coll::REDUCE,
            dtype: d,
            op,
            root,
            send: elems(&s.region, send_offset, count, size, "send")?,
            recv,
            count,
        };
        // SAFETY: a NULL op means blocking.
        unsafe { c.run(&ni.ni, std::ptr::null_mut()) }
    })
}

/// The allreduce of `ni_allreduce`/`ni_iallreduce`.
///
/// # Safety
/// `ni`, `send` and `recv` are NULL or live handles; `op` is NULL or writable.
#[allow(clippy::too_many_arguments)]
unsafe fn allreduce(
    ni: *mut ni_t,
    dtype: c_int,
    redop: c_int,
    send: *const ni_region_t,
    send_offset: usize,
    recv: *const ni_region_t,
    recv_offset: usize,
    count: usize,
    op: *mut *mut ni_op_t,
) -> Result<()> {
    // SAFETY: NULL or live handles (the caller's contract).
    let (ni, s, r) = unsafe {
        (
            handle(ni, "ni")?,
            handle(send, "send")?,
            handle(recv, "recv")?,
        )
    };
    let c = send_recv(
        coll::ALLREDUCE,
        dtype,
        reduce_op(redop)?,
        &s.region,
        send_offset,
        &r.region,
        recv_offset,
        count,
        count,
    )?;
    // SAFETY: op is NULL or writable (the caller's contract).
    unsafe { c.run(&ni.ni, op) }
}

/// Every member's `recv` gets the reduction of all members' `send`.
///
/// # Safety
/// `ni`, `send` and `recv` are NULL or live handles.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_allreduce(
    ni: *mut ni_t,
    dtype: c_int,
    redop: c_int,
    send: *const ni_region_t,
    send_offset: usize,
    recv: *mut ni_region_t,
    recv_offset: usize,
    count: usize,
) -> c_int {
    call("ni_allreduce", || {
        // SAFETY: the caller's contract is allreduce's; a NULL op means blocking.
        unsafe {
            allreduce(
                ni,
                dtype,
                redop,
                send,
                send_offset,
                recv,
                recv_offset,
                count,
                std::ptr::null_mut(),
            )
        }
    })
}

/// Start an allreduce; finish it with `ni_test`/`ni_wait`.
///
/// # Safety
/// `ni`, `send` and `recv` are NULL or live handles; `op` is NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_iallreduce(
    ni: *mut ni_t,
    dtype: c_int,
    redop: c_int,
    send: *const ni_region_t,
    send_offset: usize,
    recv: *mut ni_region_t,
    recv_offset: usize,
    count: usize,
    op: *mut *mut ni_op_t,
) -> c_int {
    call("ni_iallreduce", || {
        nonnull(op, "op")?;
        // SAFETY: non-NULL and writable.
        unsafe { op.write(std::ptr::null_mut()) };
        // SAFETY: the caller's contract is allreduce's; op is non-NULL.
        unsafe {
            allreduce(
                ni,
                dtype,
                redop,
                send,
                send_offset,
                recv,
                recv_offset,
                count,
                op,
            )
        }
    })
}

/// Prefix reduction, inclusive (non-zero `inclusive`) or exclusive.
///
/// # Safety
/// `ni`, `send` and `recv` are NULL or live handles.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_scan(
    ni: *mut ni_t,
    dtype: c_int,
    redop: c_int,
    inclusive: c_int,
    send: *const ni_region_t,
    send_offset: usize,
    recv: *mut ni_region_t,
    recv_offset: usize,
    count: usize,
) -> c_int {
    call("ni_scan", || {
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, s, r) = unsafe {
            (
                handle(ni, "ni")?,
                handle(send, "send")?,
                handle(recv, "recv")?,
            )
        };
        let kind = if inclusive != 0 {
            coll::SCAN
        } else {
            coll::EXSCAN
        };
        let c = send_recv(
            kind,
            dtype,
            reduce_op(redop)?,
            &s.region,
            send_offset,
            &r.region,
            recv_offset,
            count,
            count,
        )?;
        // SAFETY: a NULL op means blocking.
        unsafe { c.run(&ni.ni, std::ptr::null_mut()) }
    })
}

/// Every member's `recv` gets all members' `count` elements, in rank order.
///
/// # Safety
/// `ni`, `send` and `recv` are NULL or live handles.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_allgather(
    ni: *mut ni_t,
    dtype: c_int,
    send: *const ni_region_t,
    send_offset: usize,
    recv: *mut ni_region_t,
    recv_offset: usize,
    count: usize,
) -> c_int {
    call("ni_allgather", || {
        // SAFETY: NULL or live handles (the caller's contract).
        let (ni, s, r) = unsafe {
            (
                handle(ni, "ni")?,
                handle(send, "send")?,
                handle(recv, "recv")?,
            )
        };
        let all = count
            .checked_mul(ni.ni.size() as usize)
            .ok_or_else(|| bad(format!("{count} elements per member overflow")))?;
        let c = send_recv(
            coll::ALLGATHER,
            dtype,
            ReduceOp::Sum,
            &s.region,
            send_offset,
            &r.region,
            recv_offset,
            count,
            all,
        )?;
        // SAFETY: a NULL op means blocking.
        unsafe { c.run(&ni.ni, std::ptr::null_mut()) }
    })
}

// ---- CM-5 control network ----

/// `NI_PART_*` (`ni_set_participation`): `ni_abi::fastpath::participation`.
pub const NI_PART_COM_REC_ABSTAIN: u32 = participation::COM_REC_ABSTAIN;
pub const NI_PART_REDUCE_REC_ABSTAIN: u32 = participation::REDUCE_REC_ABSTAIN;
pub const NI_PART_BC_REC_ABSTAIN: u32 = participation::BC_REC_ABSTAIN;
pub const NI_PART_SYNC_GLOBAL_ABSTAIN: u32 = participation::SYNC_GLOBAL_ABSTAIN;
pub const NI_PART_GLOBAL_REC_IE: u32 = participation::GLOBAL_REC_IE;
pub const NI_PART_RESET: u32 = participation::RESET;
pub const NI_PART_ALL: u32 = participation::ALL;

/// The largest combine, in 32-bit words.
pub const NI_COMBINE_MAX_WORDS: usize = combine::MAX_WORDS as usize;

fn pattern(p: c_int) -> Result<Pattern> {
    Ok(match p {
        NI_PATTERN_SCAN_BACKWARD => Pattern::ScanBackward,
        NI_PATTERN_SCAN_FORWARD => Pattern::ScanForward,
        NI_PATTERN_REDUCE => Pattern::Reduce,
        _ => {
            return Err(bad(format!(
                "pattern {p} is not NI_PATTERN_SCAN_BACKWARD, _SCAN_FORWARD or _REDUCE"
            )))
        }
    })
}

fn combiner(c: c_int) -> Result<Combiner> {
    Ok(match c {
        NI_COMBINER_OR => Combiner::Or,
        NI_COMBINER_ADD => Combiner::Add,
        NI_COMBINER_XOR => Combiner::Xor,
        NI_COMBINER_UADD => Combiner::Uadd,
        NI_COMBINER_MAX => Combiner::Max,
        _ => return Err(bad(format!("combiner {c} is not one of NI_COMBINER_*"))),
    })
}

fn combine_len(len: usize) -> Result<()> {
    if (1..=NI_COMBINE_MAX_WORDS).contains(&len) {
        Ok(())
    } else {
        Err(bad(format!(
            "a combine takes 1 to {NI_COMBINE_MAX_WORDS} words, not {len}"
        )))
    }
}

/// Store a combine's result: `out` (when there is one), `overflow`, `has_result`.
///
/// # Safety
/// `out` is NULL or writable for `r.words`' length; the flags are NULL or writable.
unsafe fn combine_out(
    r: &crate::CombineResult,
    out: *mut u32,
    overflow: *mut c_int,
    has_result: *mut c_int,
) {
    if let (Some(w), false) = (&r.words, out.is_null()) {
        // SAFETY: out is non-NULL and writable for the combine's length (the caller's
        // contract), which is w.len().
        unsafe { std::ptr::copy_nonoverlapping(w.as_ptr(), out, w.len()) };
    }
    // SAFETY: NULL or writable (the caller's contract).
    unsafe {
        put(overflow, r.overflow as c_int);
        put(has_result, r.words.is_some() as c_int);
    }
}

/// CM-5 combine of `len` (1..5) words at `input`; the result goes to `out`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `input` is NULL or readable for `len` words; `out` is NULL
/// or writable for `len` words (it may be `input`); `overflow` and `has_result` are NULL or
/// writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ni_combine(
    ni: *mut ni_t,
    pattern: c_int,
    combiner: c_int,
    input: *const u32,
    out: *mut u32,
    len: usize,
    scan_start: c_int,
    overflow: *mut c_int,
    has_result: *mut c_int,
) -> c_int {
    call("ni_combine", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        nonnull(input, "in")?;
        combine_len(len)?;
        let (p, c) = (self::pattern(pattern)?, self::combiner(combiner)?);
        let mut words = [0u32; NI_COMBINE_MAX_WORDS];
        // SAFETY: input is non-NULL and readable for len <= 5 words (the caller's contract);
        // copied out before out (which may alias it) is written.
        unsafe { std::ptr::copy_nonoverlapping(input, words.as_mut_ptr(), len) };
        let r = ni.ni.combine(p, c, &words[..len], scan_start != 0)?;
        // SAFETY: out and the flags are NULL or writable (the caller's contract).
        unsafe { combine_out(&r, out, overflow, has_result) };
        Ok(())
    })
}

/// An abstainer takes the next reduction result of `len` words without contributing.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `out` is NULL or writable for `len` words; `overflow` and
/// `has_result` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_combine_receive(
    ni: *mut ni_t,
    out: *mut u32,
    len: usize,
    overflow: *mut c_int,
    has_result: *mut c_int,
) -> c_int {
    call("ni_combine_receive", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        combine_len(len)?;
        let r = ni.ni.combine_receive(len)?;
        // SAFETY: out and the flags are NULL or writable (the caller's contract).
        unsafe { combine_out(&r, out, overflow, has_result) };
        Ok(())
    })
}

/// CM-5 network-done.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_network_done(ni: *mut ni_t) -> c_int {
    call("ni_network_done", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        ni.ni.network_done()
    })
}

/// CM-5 synchronous global: a barrier whose `*result` is the OR of every member's `bit`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `result` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_sync_global(ni: *mut ni_t, bit: c_int, result: *mut c_int) -> c_int {
    call("ni_sync_global", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let or = ni.ni.sync_global(bit != 0)?;
        // SAFETY: NULL or writable.
        unsafe { put(result, or as c_int) };
        Ok(())
    })
}

/// CM-5 asynchronous global: set this member's bit.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_set_async_global(ni: *mut ni_t, bit: c_int) -> c_int {
    call("ni_set_async_global", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        ni.ni.set_async_global(bit != 0)
    })
}

/// The asynchronous global OR, as the NI last published it.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_global_rec(ni: *mut ni_t, value: *mut c_int) -> c_int {
    call("ni_global_rec", || {
        nonnull(value, "value")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        // SAFETY: non-NULL and writable.
        unsafe { value.write(ni.ni.global_rec() as c_int) };
        Ok(())
    })
}

/// How often the asynchronous global OR rose while `NI_PART_GLOBAL_REC_IE` was set.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ni_global_rises(ni: *mut ni_t, count: *mut u64) -> c_int {
    call("ni_global_rises", || {
        nonnull(count, "count")?;
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        let n = ni.ni.global_rises()?;
        // SAFETY: non-NULL and writable.
        unsafe { count.write(n) };
        Ok(())
    })
}

/// Set the control-network participation (abstain) flags, `NI_PART_*`.
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_set_participation(ni: *mut ni_t, flags: u32) -> c_int {
    call("ni_set_participation", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        if flags & !NI_PART_ALL != 0 {
            return Err(bad(format!(
                "participation flags 0x{flags:x} outside NI_PART_ALL (0x{NI_PART_ALL:x})"
            )));
        }
        ni.ni.set_participation(flags)
    })
}

/// Combine flush: clears a collision (every member calls it).
///
/// # Safety
/// `ni` is NULL or a live `ni_t`.
#[no_mangle]
pub unsafe extern "C" fn ni_combine_flush(ni: *mut ni_t) -> c_int {
    call("ni_combine_flush", || {
        // SAFETY: NULL or a live handle (the caller's contract).
        let ni = unsafe { handle(ni, "ni")? };
        ni.ni.combine_flush()
    })
}

// ---- Messages ----

/// A static description of `code`.
#[no_mangle]
pub extern "C" fn ni_strerror(code: c_int) -> *const c_char {
    static STATUS_TEXT: OnceLock<Vec<(c_int, CString)>> = OnceLock::new();
    const UNKNOWN: &CStr = c"unknown libni error code";
    if let Some(t) = library_text(code) {
        return t.as_ptr();
    }
    if !(-99..0).contains(&code) {
        return UNKNOWN.as_ptr();
    }
    let texts = STATUS_TEXT.get_or_init(|| {
        (1..100u16)
            .filter_map(Status::from_u16)
            .map(|s| {
                let text = CString::new(s.describe()).unwrap_or_default();
                (status_code(s), text)
            })
            .collect()
    });
    texts
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(UNKNOWN.as_ptr(), |(_, t)| t.as_ptr())
}

/// The full message of this thread's last failure (valid until its next failure).
#[no_mangle]
pub extern "C" fn ni_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"no error information (thread exiting)".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ni_abi::fastpath::mqcw;
    use std::collections::BTreeMap;

    /// Every code and its name in ni.h: what the header must define, exactly.
    const CODES: &[(c_int, &str)] = &[
        (NI_OK, "NI_OK"),
        (NI_EPEERDOWN, "NI_EPEERDOWN"),
        (NI_EOUTOFPARTITION, "NI_EOUTOFPARTITION"),
        (NI_ENOTREGISTERED, "NI_ENOTREGISTERED"),
        (NI_EBADKEY, "NI_EBADKEY"),
        (NI_EOUTOFBOUNDS, "NI_EOUTOFBOUNDS"),
        (NI_EQUEUEFULL, "NI_EQUEUEFULL"),
        (NI_EBADLENGTH, "NI_EBADLENGTH"),
        (NI_ETRUNCATED, "NI_ETRUNCATED"),
        (NI_EPERM, "NI_EPERM"),
        (NI_EBADOPCODE, "NI_EBADOPCODE"),
        (NI_EBADDESCRIPTOR, "NI_EBADDESCRIPTOR"),
        (NI_ENOHANDLERRING, "NI_ENOHANDLERRING"),
        (NI_ECANCELLED, "NI_ECANCELLED"),
        (NI_ECOLLISION, "NI_ECOLLISION"),
        (NI_EABSTAINING, "NI_EABSTAINING"),
        (NI_EABSTAINCHANGED, "NI_EABSTAINCHANGED"),
        (NI_ECOLLTIMEOUT, "NI_ECOLLTIMEOUT"),
        (NI_ELINKDOWN, "NI_ELINKDOWN"),
        (NI_EOTHERHOST, "NI_EOTHERHOST"),
        (NI_EWOULDBLOCK, "NI_EWOULDBLOCK"),
        (NI_ERESET, "NI_ERESET"),
        (NI_ETIMEDOUT, "NI_ETIMEDOUT"),
        (NI_EINVAL, "NI_EINVAL"),
        (NI_EDEVICE, "NI_EDEVICE"),
        (NI_ENOSOCKET, "NI_ENOSOCKET"),
        (NI_EATTACH, "NI_EATTACH"),
        (NI_ENOMEM, "NI_ENOMEM"),
        (NI_EINTERNAL, "NI_EINTERNAL"),
        (NI_EDAEMON, "NI_EDAEMON"),
        (NI_EUNPLUGGED, "NI_EUNPLUGGED"),
    ];

    const HEADER: &str = include_str!("../include/ni.h");
    const SOURCE: &str = include_str!("capi.rs");

    /// Every object-like `#define NI_... VALUE` in the header with an integer value.
    fn header_defines() -> BTreeMap<String, i128> {
        let mut out = BTreeMap::new();
        for line in HEADER.lines() {
            let Some(rest) = line.trim().strip_prefix("#define ") else {
                continue;
            };
            let mut parts = rest.splitn(2, char::is_whitespace);
            let name = parts.next().unwrap_or("");
            let value = parts.next().unwrap_or("");
            let value = value.split("/*").next().unwrap_or("").trim();
            if !name.starts_with("NI_") || name.contains('(') || value.is_empty() {
                continue;
            }
            let v = value
                .trim_start_matches('(')
                .trim_end_matches(')')
                .trim_end_matches(['u', 'U', 'l', 'L']);
            let v = v.strip_prefix("(uint64_t)").unwrap_or(v);
            let (neg, v) = match v.strip_prefix('-') {
                Some(v) => (true, v),
                None => (false, v),
            };
            let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(h) => i128::from_str_radix(h, 16),
                None => v.parse::<i128>(),
            };
            let Ok(n) = n else {
                panic!("ni.h: cannot parse the value of {name}: {value:?}")
            };
            out.insert(name.to_string(), if neg { -n } else { n });
        }
        out
    }

    #[test]
    fn header_error_codes_match() {
        let defs = header_defines();
        let in_header: BTreeMap<&str, i128> = defs
            .iter()
            .filter(|(k, _)| k.starts_with("NI_E") || *k == "NI_OK")
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        let in_rust: BTreeMap<&str, i128> = CODES.iter().map(|(c, n)| (*n, *c as i128)).collect();
        assert_eq!(
            in_header, in_rust,
            "the NI_E* codes in include/ni.h and capi.rs differ"
        );
        // Codes are distinct.
        let mut values: Vec<c_int> = CODES.iter().map(|(c, _)| *c).collect();
        values.sort();
        values.dedup();
        assert_eq!(values.len(), CODES.len(), "two codes share a value");
    }

    #[test]
    fn header_constants_match() {
        use ni_abi::fastpath::regs;
        let defs = header_defines();
        let expected: BTreeMap<&str, i128> = [
            ("NI_ANY_SOURCE", NI_ANY_SOURCE as i128),
            ("NI_MQ_MESSAGE", MQ_MESSAGE as i128),
            ("NI_AM_MAX_PAYLOAD", AM_MAX_PAYLOAD as i128),
            ("NI_MQCW_SIG", mqcw::SIG as i128),
            ("NI_MQCW_TAIL_SHIFT", mqcw::TAIL_SHIFT as i128),
            ("NI_MQCW_LIMIT_SHIFT", mqcw::LIMIT_SHIFT as i128),
            ("NI_MQCW_FIELD", mqcw::FIELD as i128),
            ("NI_MQ_MAX_LIMIT", mqcw::MAX_LIMIT as i128),
            ("NI_IR_ENABLE", regs::IR_ENABLE as i128),
            ("NI_IR_MSG_ADDR_VALID", regs::MSG_ADDR_VALID as i128),
            ("NI_IR_MSG_MULTIPLE", regs::MSG_MULTIPLE as i128),
            ("NI_PART_COM_REC_ABSTAIN", NI_PART_COM_REC_ABSTAIN as i128),
            (
                "NI_PART_REDUCE_REC_ABSTAIN",
                NI_PART_REDUCE_REC_ABSTAIN as i128,
            ),
            ("NI_PART_BC_REC_ABSTAIN", NI_PART_BC_REC_ABSTAIN as i128),
            (
                "NI_PART_SYNC_GLOBAL_ABSTAIN",
                NI_PART_SYNC_GLOBAL_ABSTAIN as i128,
            ),
            ("NI_PART_GLOBAL_REC_IE", NI_PART_GLOBAL_REC_IE as i128),
            ("NI_PART_RESET", NI_PART_RESET as i128),
            ("NI_PART_ALL", NI_PART_ALL as i128),
            ("NI_COMBINE_MAX_WORDS", NI_COMBINE_MAX_WORDS as i128),
            ("NI_REMOTE_READ", NI_REMOTE_READ as i128),
            ("NI_REMOTE_WRITE", NI_REMOTE_WRITE as i128),
        ]
        .into_iter()
        .collect();
        let others: BTreeMap<&str, i128> = defs
            .iter()
            .filter(|(k, _)| !(k.starts_with("NI_E") || *k == "NI_OK"))
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        assert_eq!(
            others, expected,
            "the constants in include/ni.h and ni-abi differ"
        );
    }

    /// Every enumerator of the header's `typedef enum { NAME = VALUE, ... }` blocks (each
    /// must give its value), and the enum's typedef name for each.
    fn header_enums() -> BTreeMap<String, (i128, String)> {
        let mut out = BTreeMap::new();
        let mut rest = HEADER;
        while let Some(i) = rest.find("typedef enum") {
            let body = &rest[i..];
            let open = body.find('{').expect("typedef enum without {");
            let close = body.find('}').expect("typedef enum without }");
            let type_name: String = body[close + 1..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let mut text = String::new();
            let mut t = &body[open + 1..close];
            while let Some(c) = t.find("/*") {
                text.push_str(&t[..c]);
                let e = t[c..].find("*/").expect("unterminated comment");
                t = &t[c + e + 2..];
            }
            text.push_str(t);
            for item in text.split(',').map(str::trim).filter(|x| !x.is_empty()) {
                let Some((name, value)) = item.split_once('=') else {
                    panic!("ni.h: enumerator {item:?} of {type_name} has no explicit value")
                };
                let v: i128 = value
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("ni.h: cannot parse {item:?}"));
                let old = out.insert(name.trim().to_string(), (v, type_name.clone()));
                assert!(old.is_none(), "ni.h: {name} defined twice");
            }
            rest = &body[close..];
        }
        out
    }

    #[test]
    fn header_enums_match() {
        use crate::Elem;
        let in_header = header_enums();
        let expected: BTreeMap<String, (i128, String)> = [
            ("NI_I32", NI_I32, "ni_dtype_t"),
            ("NI_U32", NI_U32, "ni_dtype_t"),
            ("NI_I64", NI_I64, "ni_dtype_t"),
            ("NI_U64", NI_U64, "ni_dtype_t"),
            ("NI_F32", NI_F32, "ni_dtype_t"),
            ("NI_F64", NI_F64, "ni_dtype_t"),
            ("NI_SUM", NI_SUM, "ni_redop_t"),
            ("NI_PROD", NI_PROD, "ni_redop_t"),
            ("NI_MIN", NI_MIN, "ni_redop_t"),
            ("NI_MAX", NI_MAX, "ni_redop_t"),
            ("NI_AND", NI_AND, "ni_redop_t"),
            ("NI_OR", NI_OR, "ni_redop_t"),
            ("NI_XOR", NI_XOR, "ni_redop_t"),
            (
                "NI_PATTERN_SCAN_BACKWARD",
                NI_PATTERN_SCAN_BACKWARD,
                "ni_pattern_t",
            ),
            (
                "NI_PATTERN_SCAN_FORWARD",
                NI_PATTERN_SCAN_FORWARD,
                "ni_pattern_t",
            ),
            ("NI_PATTERN_REDUCE", NI_PATTERN_REDUCE, "ni_pattern_t"),
            ("NI_COMBINER_OR", NI_COMBINER_OR, "ni_combiner_t"),
            ("NI_COMBINER_ADD", NI_COMBINER_ADD, "ni_combiner_t"),
            ("NI_COMBINER_XOR", NI_COMBINER_XOR, "ni_combiner_t"),
            ("NI_COMBINER_UADD", NI_COMBINER_UADD, "ni_combiner_t"),
            ("NI_COMBINER_MAX", NI_COMBINER_MAX, "ni_combiner_t"),
        ]
        .into_iter()
        .map(|(n, v, t)| (n.to_string(), (v as i128, t.to_string())))
        .collect();
        assert_eq!(
            in_header, expected,
            "the enums in include/ni.h and capi.rs differ"
        );
        // The C enumerators name exactly the Rust element types, and they convert back.
        let rust_dtypes = [
            (i32::DTYPE, 4),
            (u32::DTYPE, 4),
            (i64::DTYPE, 8),
            (u64::DTYPE, 8),
            (f32::DTYPE, 4),
            (f64::DTYPE, 8),
        ];
        for (c, (d, size)) in [NI_I32, NI_U32, NI_I64, NI_U64, NI_F32, NI_F64]
            .into_iter()
            .zip(rust_dtypes)
        {
            assert_eq!(elem_type(c).unwrap(), (d, size));
        }
        assert!(elem_type(NI_F64 + 1).is_err() && elem_type(-1).is_err());
        for o in NI_SUM..=NI_XOR {
            assert_eq!(reduce_op(o).unwrap() as c_int, o);
        }
        assert!(reduce_op(NI_XOR + 1).is_err() && reduce_op(-1).is_err());
        for p in NI_PATTERN_SCAN_BACKWARD..=NI_PATTERN_REDUCE {
            assert_eq!(pattern(p).unwrap() as c_int, p);
        }
        assert!(pattern(0).is_err() && pattern(4).is_err());
        for c in NI_COMBINER_OR..=NI_COMBINER_MAX {
            assert_eq!(combiner(c).unwrap() as c_int, c);
        }
        assert!(combiner(5).is_err() && combiner(-1).is_err());
        // Enumerators and #defines share C's namespace.
        let defs = header_defines();
        for name in in_header.keys() {
            assert!(
                !defs.contains_key(name),
                "{name} is both a #define and an enumerator"
            );
        }
    }

    /// Names `f` such that `text` has `pat` directly followed by `f(`.
    fn names_after(text: &str, pat: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, _) in text.match_indices(pat) {
            let rest = &text[i + pat.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if rest[name.len()..].starts_with('(') && name.starts_with("ni_") {
                out.push(name);
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn header_declares_every_exported_function() {
        let mut exported = names_after(SOURCE, "pub unsafe extern \"C\" fn ");
        exported.extend(names_after(SOURCE, "pub extern \"C\" fn "));
        exported.sort();
        // Declarations: `int ni_x(`, `const char *ni_x(`.
        let mut declared = names_after(HEADER, "int ");
        declared.extend(names_after(HEADER, "char *"));
        declared.sort();
        declared.dedup();
        assert_eq!(
            declared, exported,
            "ni.h and capi.rs declare different functions"
        );
        assert!(exported.len() > 30, "parsed only {exported:?}");
    }

    #[test]
    fn struct_layouts() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(size_of::<ni_status_t>(), 32);
        assert_eq!(offset_of!(ni_status_t, error), 0);
        assert_eq!(offset_of!(ni_status_t, rank), 4);
        assert_eq!(offset_of!(ni_status_t, len), 8);
        assert_eq!(offset_of!(ni_status_t, tag), 16);
        assert_eq!(offset_of!(ni_status_t, aux), 24);
        assert_eq!(size_of::<ni_mq_addr_t>(), 16);
        assert_eq!(align_of::<ni_mq_addr_t>(), 8);
        assert_eq!(offset_of!(ni_mq_addr_t, offset), 8);
    }

    fn text(p: *const c_char) -> String {
        assert!(!p.is_null());
        // SAFETY: the library returns NUL-terminated strings that outlive this call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn strerror_mirrors_statuses_and_errors() {
        for v in 1..=u16::MAX {
            let Some(s) = Status::from_u16(v) else { break };
            let code = status_code(s);
            assert_eq!(code, -(v as c_int), "{s:?}");
            assert!(
                code > -100,
                "{s:?}: statuses must stay above the library errors"
            );
            assert!(
                CODES.iter().any(|(c, _)| *c == code),
                "{s:?} has no NI_E* name"
            );
            assert_eq!(text(ni_strerror(code)), s.describe(), "{s:?}");
        }
        for (c, name) in CODES {
            assert_ne!(text(ni_strerror(*c)), "unknown libni error code", "{name}");
        }
        assert_eq!(text(ni_strerror(NI_OK)), "success");
        assert_eq!(text(ni_strerror(12345)), "unknown libni error code");
        let errors = [
            (Error::NoSocket, NI_ENOSOCKET),
            (
                Error::Attach {
                    path: "p".into(),
                    reason: "r".into(),
                },
                NI_EATTACH,
            ),
            (Error::Device("d".into()), NI_EDEVICE),
            (
                Error::Failed {
                    op: "send",
                    status: Status::PeerDown,
                    rank: 3,
                    len: 0,
                    tag: 0,
                },
                NI_EPEERDOWN,
            ),
            (Error::WouldBlock, NI_EWOULDBLOCK),
            (Error::BadArgument("b".into()), NI_EINVAL),
            (Error::Memory("m".into()), NI_ENOMEM),
            (Error::Reset, NI_ERESET),
            (Error::Timeout(Duration::from_secs(1)), NI_ETIMEDOUT),
            (Error::DaemonGone("x".into()), NI_EDAEMON),
            (Error::Unplugged("0000:01:00.0".into()), NI_EUNPLUGGED),
        ];
        for (e, c) in errors {
            assert_eq!(code_of(&e), c, "{e:?}");
            assert!(CODES.iter().any(|(x, _)| *x == c));
        }
    }

    #[test]
    fn null_arguments_are_rejected_with_a_message() {
        // SAFETY: NULL everywhere is exactly what these functions must survive.
        unsafe {
            assert_eq!(ni_attach(std::ptr::null_mut()), NI_EINVAL);
            assert!(text(ni_last_error()).contains("ni_attach: bad argument: out is NULL"));
            assert_eq!(ni_detach(std::ptr::null_mut()), NI_EINVAL);
            let mut r = 0u32;
            assert_eq!(ni_rank(std::ptr::null(), &mut r), NI_EINVAL);
            assert!(text(ni_last_error()).contains("ni is NULL"));
            let mut region = std::ptr::NonNull::<ni_region_t>::dangling().as_ptr();
            assert_eq!(ni_alloc(std::ptr::null_mut(), 64, &mut region), NI_EINVAL);
            assert!(region.is_null(), "the out-parameter is cleared on failure");
            assert_eq!(
                ni_send(std::ptr::null_mut(), 0, std::ptr::null(), 0, 0, 0),
                NI_EINVAL
            );
            let mut op: *mut ni_op_t = std::ptr::null_mut();
            let mut done = 0;
            assert_eq!(
                ni_test(
                    std::ptr::null_mut(),
                    &mut op,
                    &mut done,
                    std::ptr::null_mut()
                ),
                NI_EINVAL
            );
            assert_eq!(
                ni_wait(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                ),
                NI_EINVAL
            );
            assert_eq!(
                ni_am_register(std::ptr::null_mut(), 0, None, std::ptr::null_mut()),
                NI_EINVAL
            );
            assert_eq!(ni_mq_free(std::ptr::null_mut()), NI_EINVAL);
            assert_eq!(ni_region_free(std::ptr::null_mut()), NI_EINVAL);
            assert_eq!(ni_op_free(std::ptr::null_mut()), NI_EINVAL);
            assert_eq!(
                ni_forget(std::ptr::null_mut(), std::ptr::null_mut()),
                NI_EINVAL
            );
            // Collectives and the control network.
            let nil = std::ptr::null_mut::<ni_t>();
            let no_region = std::ptr::null_mut::<ni_region_t>();
            assert_eq!(ni_barrier(nil), NI_EINVAL);
            assert!(text(ni_last_error()).starts_with("ni_barrier: "));
            let mut op = std::ptr::NonNull::<ni_op_t>::dangling().as_ptr();
            assert_eq!(ni_ibarrier(nil, &mut op), NI_EINVAL);
            assert!(op.is_null(), "ni_ibarrier clears *op on failure");
            assert_eq!(ni_ibarrier(nil, std::ptr::null_mut()), NI_EINVAL);
            assert_eq!(ni_broadcast(nil, 0, NI_F64, no_region, 0, 1), NI_EINVAL);
            let mut op = std::ptr::NonNull::<ni_op_t>::dangling().as_ptr();
            assert_eq!(
                ni_ibroadcast(nil, 0, NI_F64, no_region, 0, 1, &mut op),
                NI_EINVAL
            );
            assert!(op.is_null());
            assert_eq!(
                ni_reduce(nil, 0, NI_I32, NI_SUM, no_region, 0, no_region, 0, 1),
                NI_EINVAL
            );
            assert_eq!(
                ni_allreduce(nil, NI_F64, NI_SUM, no_region, 0, no_region, 0, 1),
                NI_EINVAL
            );
            let mut op = std::ptr::NonNull::<ni_op_t>::dangling().as_ptr();
            assert_eq!(
                ni_iallreduce(nil, NI_F64, NI_SUM, no_region, 0, no_region, 0, 1, &mut op),
                NI_EINVAL
            );
            assert!(op.is_null());
            assert_eq!(
                ni_scan(nil, NI_I64, NI_SUM, 1, no_region, 0, no_region, 0, 1),
                NI_EINVAL
            );
            assert_eq!(
                ni_allgather(nil, NI_U32, no_region, 0, no_region, 0, 1),
                NI_EINVAL
            );
            let w = [1u32; 5];
            let mut out = [0u32; 5];
            let none = std::ptr::null_mut::<c_int>();
            assert_eq!(
                ni_combine(
                    nil,
                    NI_PATTERN_REDUCE,
                    NI_COMBINER_ADD,
                    w.as_ptr(),
                    out.as_mut_ptr(),
                    1,
                    0,
                    none,
                    none
                ),
                NI_EINVAL
            );
            assert_eq!(
                ni_combine_receive(nil, out.as_mut_ptr(), 1, none, none),
                NI_EINVAL
            );
            assert_eq!(ni_network_done(nil), NI_EINVAL);
            assert_eq!(ni_sync_global(nil, 1, none), NI_EINVAL);
            assert_eq!(ni_set_async_global(nil, 1), NI_EINVAL);
            let mut v = 0;
            assert_eq!(ni_global_rec(nil, &mut v), NI_EINVAL);
            let mut n = 0u64;
            assert_eq!(ni_global_rises(nil, &mut n), NI_EINVAL);
            assert_eq!(ni_set_participation(nil, 0), NI_EINVAL);
            assert_eq!(ni_combine_flush(nil), NI_EINVAL);
            assert!(text(ni_last_error()).starts_with("ni_combine_flush: "));
            let path = c"/nonexistent/ni0.sock";
            let mut ni: *mut ni_t = std::ptr::null_mut();
            let rc = ni_attach_path(path.as_ptr(), &mut ni);
            assert!(rc == NI_EDEVICE || rc == NI_EATTACH, "rc {rc}");
            assert!(ni.is_null());
            assert!(text(ni_last_error()).starts_with("ni_attach_path: "));
        }
    }

    #[test]
    fn last_error_is_per_thread() {
        // SAFETY: NULL is rejected before anything is dereferenced.
        assert_eq!(unsafe { ni_detach(std::ptr::null_mut()) }, NI_EINVAL);
        let other = std::thread::spawn(|| text(ni_last_error())).join().unwrap();
        assert_eq!(other, "no error");
        assert!(text(ni_last_error()).starts_with("ni_detach: "));
    }

    #[test]
    fn panics_do_not_cross_the_boundary() {
        let rc = call("ni_test_panic", || panic!("boom"));
        assert_eq!(rc, NI_EINTERNAL);
        assert!(text(ni_last_error()).contains("ni_test_panic: internal error"));
        assert!(text(ni_last_error()).contains("boom"));
    }
}
