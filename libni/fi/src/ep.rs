//! The endpoint: `FI_EP_RDM`, one per NI; its calls translate into the engine's.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::av::{AvFid, Name, NAME_LEN};
use crate::cq::CqFid;
use crate::domain::{Attached, DomainFid};
use crate::engine::{Engine, Iov};
use crate::ffi::errno::*;
use crate::ffi::*;
use crate::info::{self, IOV_LIMIT};
use crate::{container, guard, guard_ssize, warn};

#[repr(C)]
pub struct EpFid {
    pub fid: fid_ep,
    pub engine: Arc<ni::NiLock<Engine>>,
    att: Arc<Attached>,
    /// `FI_DIRECTED_RECV` asked for: receives honour their source address.
    directed: bool,
    name: Name,
    /// CQs bound to it (told the AV for `fi_cq_readfrom`).
    cqs: Mutex<Vec<Arc<crate::cq::Cq>>>,
}

static EP_FI_OPS: fi_ops = crate::stub::fid_ops!(ep_close, ep_bind, ep_control);

static EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(crate::stub::tx_ctx),
    rx_ctx: Some(crate::stub::rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
};

static CM_OPS: fi_ops_cm = fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(crate::stub::setname),
    getname: Some(getname),
    getpeer: Some(crate::stub::getpeer),
    connect: Some(crate::stub::connect),
    listen: Some(crate::stub::listen),
    accept: Some(crate::stub::accept),
    reject: Some(crate::stub::reject),
    shutdown: Some(crate::stub::shutdown),
    join: Some(crate::stub::join),
};

static MSG_OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

static TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(t_recv),
    recvv: Some(t_recvv),
    recvmsg: Some(t_recvmsg),
    send: Some(t_send),
    sendv: Some(t_sendv),
    sendmsg: Some(t_sendmsg),
    inject: Some(t_inject),
    senddata: Some(t_senddata),
    injectdata: Some(t_injectdata),
};

pub unsafe extern "C" fn open(
    d: *mut fid_domain,
    info: *mut fi_info,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `d` is one of our domains; `info` the application's (or null).
        let (dom, info) = unsafe { (container::<DomainFid>(d as *mut fid), info.as_ref()) };
        let s = match info::ep_settings(info) {
            Ok(s) => s,
            Err((code, why)) => {
                warn(FI_LOG_EP_CTRL, &format!("ni: fi_endpoint: {why}"));
                return code;
            }
        };
        if dom.att.ep_open.swap(true, Ordering::AcqRel) {
            warn(
                FI_LOG_EP_CTRL,
                &format!(
                    "ni: fi_endpoint: {} already has its endpoint open (one per NI)",
                    dom.att.loc.domain_name()
                ),
            );
            return -FI_EBUSY;
        }
        let ni = dom.att.ni.clone();
        let name = Name {
            partition: ni.partition(),
            rank: ni.rank(),
            node: ni.node(),
        };
        let mut engine = Engine::new(ni);
        engine.tx_op_flags = s.tx_op_flags;
        engine.rx_op_flags = s.rx_op_flags;
        let e = Box::new(EpFid {
            fid: fid_ep {
                fid: fid {
                    fclass: FI_CLASS_EP,
                    context,
                    ops: &EP_FI_OPS as *const _ as *mut _,
                },
                ops: &EP_OPS as *const _ as *mut _,
                cm: &CM_OPS as *const _ as *mut _,
                msg: &MSG_OPS as *const _ as *mut _,
                rma: &crate::rma::RMA_OPS as *const _ as *mut _,
                tagged: &TAGGED_OPS as *const _ as *mut _,
                atomic: std::ptr::null_mut(),
                collective: std::ptr::null_mut(),
            },
            engine: Arc::new(ni::NiLock::new(engine)),
            att: dom.att.clone(),
            directed: s.caps & FI_DIRECTED_RECV != 0,
            name,
            cqs: Mutex::new(Vec::new()),
        });
        // SAFETY: `out` is writable.
        unsafe { *out = Box::into_raw(e) as *mut fid_ep };
        0
    })
}

pub unsafe extern "C" fn open2(
    d: *mut fid_domain,
    info: *mut fi_info,
    out: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        warn(
            FI_LOG_EP_CTRL,
            &format!("ni: fi_endpoint2: flags {flags:#x} not offered"),
        );
        return -FI_EBADFLAGS;
    }
    // SAFETY: same contract as `open`.
    unsafe { open(d, info, out, context) }
}

/// How long closing an endpoint waits for sends the application counts as done.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is an EpFid we boxed; closed once.
        let e = unsafe { Box::from_raw(f as *mut EpFid) };
        let left = e.engine.lock().flush(FLUSH_LIMIT);
        if left > 0 {
            warn(
                FI_LOG_EP_CTRL,
                &format!(
                    "ni: endpoint closed with {left} sent message(s) the NI had not taken after {FLUSH_LIMIT:?} (a peer or the daemon gone?): they are lost"
                ),
            );
        }
        // The CQs and counters it is bound to hold its engine until now: unlocked, as a read
        // of them takes their bindings before the engine.
        let cntrs: Vec<Arc<crate::cntr::Cntr>> = {
            let g = e.engine.lock();
            let b = &g.cntrs;
            [
                &b.send,
                &b.recv,
                &b.read,
                &b.write,
                &b.remote_read,
                &b.remote_write,
            ]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
        };
        for c in &cntrs {
            c.bound.unbind(&e.engine);
        }
        for c in e.cqs.lock().unwrap().iter() {
            c.bound.unbind(&e.engine);
        }
        e.att.ep_open.store(false, Ordering::Release);
        // What peers did wrong and how messages went, for FI_LOG_LEVEL=info.
        let c = e.engine.lock().counters;
        crate::info_log(FI_LOG_EP_CTRL, &format!("ni: endpoint closed: {c:?}"));
        0
    })
}

unsafe extern "C" fn ep_bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    guard(|| {
        // SAFETY: `f` is one of our endpoints; `b` one of our objects (its fid first).
        let (e, class) = unsafe { (container::<EpFid>(f), (*b).fclass) };
        let mut eng = e.engine.lock();
        match class {
            FI_CLASS_CQ => {
                // SAFETY: a CQ fid of ours.
                let c = unsafe { container::<CqFid>(b) };
                if flags & (FI_TRANSMIT | FI_RECV) == 0 {
                    warn(
                        FI_LOG_EP_CTRL,
                        "ni: fi_ep_bind: a CQ needs FI_TRANSMIT and/or FI_RECV",
                    );
                    return -FI_EBADFLAGS;
                }
                let selective = flags & FI_SELECTIVE_COMPLETION != 0;
                if flags & FI_TRANSMIT != 0 {
                    eng.tx_cq = Some(c.cq.clone());
                    eng.tx_selective = selective;
                }
                if flags & FI_RECV != 0 {
                    eng.rx_cq = Some(c.cq.clone());
                    eng.rx_selective = selective;
                }
                *c.cq.av.lock().unwrap() = eng.av.clone();
                // Unlocked first: a read of the CQ locks its bindings, then each engine.
                let ni = eng.ni.clone();
                drop(eng);
                c.cq.bound.bind(&e.engine, &ni);
                e.cqs.lock().unwrap().push(c.cq.clone());
                0
            }
            FI_CLASS_AV => {
                // SAFETY: an AV fid of ours.
                let a = unsafe { container::<AvFid>(b) };
                eng.av = Some(a.av.clone());
                for c in e.cqs.lock().unwrap().iter() {
                    *c.av.lock().unwrap() = Some(a.av.clone());
                }
                0
            }
            FI_CLASS_CNTR => {
                // SAFETY: a counter fid of ours.
                let c = unsafe { container::<crate::cntr::CntrFid>(b) };
                const KINDS: u64 =
                    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
                if flags & KINDS == 0 || flags & !KINDS != 0 {
                    warn(
                        FI_LOG_EP_CTRL,
                        &format!("ni: fi_ep_bind: a counter binds for FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ or FI_REMOTE_WRITE, not flags {flags:#x}"),
                    );
                    return -FI_EBADFLAGS;
                }
                eng.cntrs.bind(&c.cntr, flags);
                let ni = eng.ni.clone();
                drop(eng);
                c.cntr.bound.bind(&e.engine, &ni);
                0
            }
            // No events reach an EQ from an RDM endpoint with synchronous AVs: bound, idle.
            FI_CLASS_EQ => 0,
            c => {
                warn(
                    FI_LOG_EP_CTRL,
                    &format!("ni: fi_ep_bind: cannot bind class {c} (CQ, counter, AV and EQ only)"),
                );
                -FI_ENOSYS
            }
        }
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: `f` is one of our endpoints.
        let e = unsafe { container::<EpFid>(f) };
        let mut eng = e.engine.lock();
        match command {
            FI_ENABLE => {
                if eng.av.is_none() {
                    warn(FI_LOG_EP_CTRL, "ni: fi_enable: bind an AV first");
                    return -FI_ENOAV;
                }
                if eng.tx_cq.is_none() || eng.rx_cq.is_none() {
                    warn(
                        FI_LOG_EP_CTRL,
                        "ni: fi_enable: bind CQs for FI_TRANSMIT and FI_RECV first",
                    );
                    return -FI_ENOCQ;
                }
                match eng.enable() {
                    Ok(()) => 0,
                    Err((code, why)) => {
                        warn(FI_LOG_EP_CTRL, &format!("ni: fi_enable: {why}"));
                        -code
                    }
                }
            }
            FI_GETOPSFLAG | FI_SETOPSFLAG if !arg.is_null() => {
                // SAFETY: the caller passes a u64 of flags naming FI_TRANSMIT or FI_RECV.
                let flags = unsafe { &mut *(arg as *mut u64) };
                let tx = *flags & FI_TRANSMIT != 0;
                if command == FI_GETOPSFLAG {
                    *flags = if tx { eng.tx_op_flags } else { eng.rx_op_flags };
                } else if tx {
                    eng.tx_op_flags = *flags & !FI_TRANSMIT;
                } else {
                    eng.rx_op_flags = *flags & !FI_RECV;
                }
                0
            }
            _ => -FI_ENOSYS,
        }
    })
}

unsafe extern "C" fn ep_cancel(f: *mut fid, context: *mut c_void) -> isize {
    guard_ssize(|| {
        // SAFETY: `f` is one of our endpoints.
        let e = unsafe { container::<EpFid>(f) };
        let mut eng = e.engine.lock();
        eng.progress();
        if eng.cancel(context as usize) {
            0
        } else {
            -(FI_ENOENT as isize)
        }
    })
}

unsafe extern "C" fn ep_getopt(
    f: *mut fid,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut usize,
) -> c_int {
    guard(|| {
        if level != FI_OPT_ENDPOINT || name != FI_OPT_MIN_MULTI_RECV {
            return -FI_ENOPROTOOPT;
        }
        // SAFETY: `f` is ours; `val` holds a size_t and `len` is writable.
        unsafe {
            let e = container::<EpFid>(f);
            if *len < std::mem::size_of::<usize>() {
                return -FI_ETOOSMALL;
            }
            *(val as *mut usize) = e.engine.lock().min_multi_recv;
            *len = std::mem::size_of::<usize>();
        }
        0
    })
}

unsafe extern "C" fn ep_setopt(
    f: *mut fid,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        if level != FI_OPT_ENDPOINT || name != FI_OPT_MIN_MULTI_RECV {
            return -FI_ENOPROTOOPT;
        }
        if len != std::mem::size_of::<usize>() || val.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: `f` is ours; `val` holds a size_t.
        unsafe {
            container::<EpFid>(f).engine.lock().min_multi_recv = *(val as *const usize);
        }
        0
    })
}

unsafe extern "C" fn rx_size_left(e: *mut fid_ep) -> isize {
    // SAFETY: `e` is one of our endpoints.
    guard_ssize(|| unsafe { container::<EpFid>(e as *mut fid).engine.lock().rx_left() as isize })
}

unsafe extern "C" fn tx_size_left(e: *mut fid_ep) -> isize {
    // SAFETY: `e` is one of our endpoints.
    guard_ssize(|| unsafe { container::<EpFid>(e as *mut fid).engine.lock().tx_left() as isize })
}

unsafe extern "C" fn getname(f: *mut fid, addr: *mut c_void, len: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: `f` is ours; `len` writable; `addr` holds *len bytes.
        unsafe {
            let e = container::<EpFid>(f);
            let room = *len;
            *len = NAME_LEN;
            if room < NAME_LEN || addr.is_null() {
                return -FI_ETOOSMALL;
            }
            std::ptr::copy_nonoverlapping(e.name.encode().as_ptr(), addr as *mut u8, NAME_LEN);
        }
        0
    })
}

// ---- data transfer ----

/// The pieces of an iovec array.
///
/// # Safety
/// `iov` holds `count` entries.
unsafe fn iovs(iov: *const iovec, count: usize) -> Result<Iov, (c_int, String)> {
    if count > IOV_LIMIT {
        return Err((FI_EINVAL, format!("{count} iovecs (iov_limit {IOV_LIMIT})")));
    }
    if count > 0 && iov.is_null() {
        return Err((FI_EINVAL, "a null iovec array".into()));
    }
    let mut v = smallvec::SmallVec::new();
    for i in 0..count {
        // SAFETY: caller contract.
        let e = unsafe { &*iov.add(i) };
        if e.iov_len > 0 {
            if e.iov_base.is_null() {
                return Err((
                    FI_EINVAL,
                    format!("iovec {i}: null base for {} bytes", e.iov_len),
                ));
            }
            v.push((e.iov_base as usize, e.iov_len));
        }
    }
    Ok(Iov(v))
}

fn result(r: Result<(), (c_int, String)>, what: &str) -> isize {
    match r {
        Ok(()) => 0,
        Err((code, why)) => {
            if code != FI_EAGAIN {
                warn(FI_LOG_EP_DATA, &format!("ni: {what}: {why}"));
            }
            -(code as isize)
        }
    }
}

/// A send of any kind.
///
/// # Safety
/// `e` is one of our endpoints; `iov`'s pieces are readable.
#[allow(clippy::too_many_arguments)]
unsafe fn send(
    e: *mut fid_ep,
    iov: Result<Iov, (c_int, String)>,
    dest: fi_addr_t,
    tagged: bool,
    tag: u64,
    data: Option<u64>,
    context: *mut c_void,
    flags: Option<u64>,
    inject: bool,
) -> isize {
    guard_ssize(|| {
        // SAFETY: caller contract.
        let ep = unsafe { container::<EpFid>(e as *mut fid) };
        let what = if tagged { "fi_tsend" } else { "fi_send" };
        let r = iov.and_then(|iov| {
            let mut eng = ep.engine.lock();
            let rank = eng
                .av
                .as_ref()
                .and_then(|a| a.rank_of(dest))
                .ok_or_else(|| {
                    (
                        FI_EINVAL,
                        format!("destination {dest:#x} is not in the endpoint's AV"),
                    )
                })?;
            let flags = flags.unwrap_or(eng.tx_op_flags);
            if inject && iov.len() > crate::engine::EAGER_MAX {
                return Err((
                    FI_EMSGSIZE,
                    format!(
                        "inject of {} bytes (inject_size {})",
                        iov.len(),
                        crate::engine::EAGER_MAX
                    ),
                ));
            }
            eng.send(
                rank,
                &iov,
                tagged,
                tag,
                data,
                context as usize,
                flags,
                inject,
            )
        });
        result(r, what)
    })
}

/// A receive of any kind.
///
/// # Safety
/// `e` is one of our endpoints; `iov`'s pieces are writable until the completion.
#[allow(clippy::too_many_arguments)]
unsafe fn recv(
    e: *mut fid_ep,
    iov: Result<Iov, (c_int, String)>,
    src: fi_addr_t,
    tagged: bool,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    flags: Option<u64>,
) -> isize {
    guard_ssize(|| {
        // SAFETY: caller contract.
        let ep = unsafe { container::<EpFid>(e as *mut fid) };
        let what = if tagged { "fi_trecv" } else { "fi_recv" };
        let r = iov.and_then(|iov| {
            let mut eng = ep.engine.lock();
            let flags = flags.unwrap_or(eng.rx_op_flags);
            let src = if !ep.directed
                || src == FI_ADDR_UNSPEC
                || flags & FI_CLAIM != 0 && flags & FI_PEEK == 0
            {
                None
            } else {
                Some(
                    eng.av
                        .as_ref()
                        .and_then(|a| a.rank_of(src))
                        .ok_or_else(|| {
                            (
                                FI_EINVAL,
                                format!("source {src:#x} is not in the endpoint's AV"),
                            )
                        })?,
                )
            };
            eng.recv(src, iov, tagged, tag, ignore, context as usize, flags)
        });
        result(r, what)
    })
}

fn one(buf: *const c_void, len: usize) -> Result<Iov, (c_int, String)> {
    if buf.is_null() && len > 0 {
        return Err((FI_EINVAL, format!("a null buffer of {len} bytes")));
    }
    Ok(Iov::one(buf as *mut u8, len))
}

unsafe extern "C" fn msg_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's buffer, writable until the completion.
    unsafe { recv(e, one(buf, len), src, false, 0, 0, ctx, None) }
}

unsafe extern "C" fn msg_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's iovecs.
    unsafe { recv(e, iovs(iov, count), src, false, 0, 0, ctx, None) }
}

unsafe extern "C" fn msg_recvmsg(e: *mut fid_ep, m: *const fi_msg, flags: u64) -> isize {
    // SAFETY: the application's message description.
    unsafe {
        let Some(m) = m.as_ref() else {
            return -(FI_EINVAL as isize);
        };
        recv(
            e,
            iovs(m.msg_iov, m.iov_count),
            m.addr,
            false,
            0,
            0,
            m.context,
            Some(flags),
        )
    }
}

unsafe extern "C" fn msg_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's buffer.
    unsafe { send(e, one(buf, len), dest, false, 0, None, ctx, None, false) }
}

unsafe extern "C" fn msg_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's iovecs.
    unsafe { send(e, iovs(iov, count), dest, false, 0, None, ctx, None, false) }
}

unsafe extern "C" fn msg_sendmsg(e: *mut fid_ep, m: *const fi_msg, flags: u64) -> isize {
    // SAFETY: the application's message description.
    unsafe {
        let Some(m) = m.as_ref() else {
            return -(FI_EINVAL as isize);
        };
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        send(
            e,
            iovs(m.msg_iov, m.iov_count),
            m.addr,
            false,
            0,
            data,
            m.context,
            Some(flags),
            false,
        )
    }
}

unsafe extern "C" fn msg_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
) -> isize {
    // SAFETY: the application's buffer (copied before we return).
    unsafe {
        send(
            e,
            one(buf, len),
            dest,
            false,
            0,
            None,
            std::ptr::null_mut(),
            Some(0),
            true,
        )
    }
}

unsafe extern "C" fn msg_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's buffer.
    unsafe {
        send(
            e,
            one(buf, len),
            dest,
            false,
            0,
            Some(data),
            ctx,
            None,
            false,
        )
    }
}

unsafe extern "C" fn msg_injectdata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    // SAFETY: the application's buffer (copied before we return).
    unsafe {
        send(
            e,
            one(buf, len),
            dest,
            false,
            0,
            Some(data),
            std::ptr::null_mut(),
            Some(0),
            true,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's buffer, writable until the completion.
    unsafe { recv(e, one(buf, len), src, true, tag, ignore, ctx, None) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's iovecs.
    unsafe { recv(e, iovs(iov, count), src, true, tag, ignore, ctx, None) }
}

unsafe extern "C" fn t_recvmsg(e: *mut fid_ep, m: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: the application's message description.
    unsafe {
        let Some(m) = m.as_ref() else {
            return -(FI_EINVAL as isize);
        };
        recv(
            e,
            iovs(m.msg_iov, m.iov_count),
            m.addr,
            true,
            m.tag,
            m.ignore,
            m.context,
            Some(flags),
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's buffer.
    unsafe { send(e, one(buf, len), dest, true, tag, None, ctx, None, false) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's iovecs.
    unsafe { send(e, iovs(iov, count), dest, true, tag, None, ctx, None, false) }
}

unsafe extern "C" fn t_sendmsg(e: *mut fid_ep, m: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: the application's message description.
    unsafe {
        let Some(m) = m.as_ref() else {
            return -(FI_EINVAL as isize);
        };
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        send(
            e,
            iovs(m.msg_iov, m.iov_count),
            m.addr,
            true,
            m.tag,
            data,
            m.context,
            Some(flags),
            false,
        )
    }
}

unsafe extern "C" fn t_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: the application's buffer (copied before we return).
    unsafe {
        send(
            e,
            one(buf, len),
            dest,
            true,
            tag,
            None,
            std::ptr::null_mut(),
            Some(0),
            true,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's buffer.
    unsafe {
        send(
            e,
            one(buf, len),
            dest,
            true,
            tag,
            Some(data),
            ctx,
            None,
            false,
        )
    }
}

unsafe extern "C" fn t_injectdata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: the application's buffer (copied before we return).
    unsafe {
        send(
            e,
            one(buf, len),
            dest,
            true,
            tag,
            Some(data),
            std::ptr::null_mut(),
            Some(0),
            true,
        )
    }
}
