//! RMA (`fi_read`/`fi_write`, fi_rma(3)) over MLINK READ and WRITE.
//!
//! The target's memory is a region its application registered with `fi_mr_reg`
//! ([`ni::Ni::register`]); the key is the NI's (`FI_MR_PROV_KEY`) and the address an offset
//! from the region's start (no `FI_MR_VIRT_ADDR`). The target's NI checks the key, its access
//! and the bounds; nothing runs in the target's process. The local buffer is used in place
//! when its `desc` is a registration that holds it, and staged otherwise.

use std::ffi::c_void;

use crate::domain::MrFid;
use crate::engine::RmaLocal;
use crate::ep::EpFid;
use crate::ffi::errno::*;
use crate::ffi::*;
use crate::{container, guard_ssize, warn};

pub static RMA_OPS: fi_ops_rma = fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(read),
    readv: Some(readv),
    readmsg: Some(readmsg),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    writedata: Some(writedata),
    injectdata: Some(injectdata),
};

/// Flags an RMA request may carry (fi_rma(3)); `FI_REMOTE_CQ_DATA` is not among them (no
/// completion at the target).
const RMA_FLAGS: u64 = FI_COMPLETION
    | FI_INJECT
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_FENCE;

/// One RMA request, as every entry point ends up describing it.
struct Req {
    write: bool,
    buf: usize,
    len: usize,
    desc: *mut c_void,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
    flags: Option<u64>,
    inject: bool,
}

/// # Safety
/// `e` is one of our endpoints; `r.buf` holds `r.len` bytes of the application's; `r.desc`
/// is null or a `desc` this provider handed out.
unsafe fn rma(e: *mut fid_ep, r: Req) -> isize {
    guard_ssize(|| {
        // SAFETY: caller contract.
        let ep = unsafe { container::<EpFid>(e as *mut fid) };
        let what = if r.write { "fi_write" } else { "fi_read" };
        let res = (|| {
            if r.len > 0 && r.buf == 0 {
                return Err((FI_EINVAL, format!("a null buffer of {} bytes", r.len)));
            }
            let mut eng = ep.engine.lock();
            let rank = eng
                .av
                .as_ref()
                .and_then(|a| a.rank_of(r.peer))
                .ok_or_else(|| {
                    (
                        FI_EINVAL,
                        format!("peer {:#x} is not in the endpoint's AV", r.peer),
                    )
                })?;
            let flags = r.flags.unwrap_or(eng.tx_op_flags);
            if flags & !RMA_FLAGS != 0 {
                return Err((
                    FI_EBADFLAGS,
                    format!(
                        "flags {:#x} (FI_REMOTE_CQ_DATA and the like are not offered for RMA)",
                        flags & !RMA_FLAGS
                    ),
                ));
            }
            let inject = r.inject || flags & FI_INJECT != 0;
            if inject && r.len > crate::engine::EAGER_MAX {
                return Err((
                    FI_EMSGSIZE,
                    format!(
                        "inject of {} bytes (inject_size {})",
                        r.len,
                        crate::engine::EAGER_MAX
                    ),
                ));
            }
            // An inject's buffer is the application's again on return: always staged.
            let local = if inject {
                RmaLocal::Buffer
            } else {
                // SAFETY: caller contract on `desc`.
                unsafe { MrFid::local(r.desc, r.buf, r.len) }
            };
            eng.rma(
                r.write,
                rank,
                r.buf,
                r.len,
                local,
                r.addr,
                r.key,
                r.context as usize,
                flags,
                inject,
            )
        })();
        match res {
            Ok(()) => 0,
            Err((code, why)) => {
                if code != FI_EAGAIN {
                    warn(FI_LOG_EP_DATA, &format!("ni: {what}: {why}"));
                }
                -(code as isize)
            }
        }
    })
}

/// The one buffer of an RMA iovec array (the provider's `rma_iov_limit` and RMA `iov_limit`
/// are 1).
///
/// # Safety
/// `iov` holds `count` entries; `desc` is null or holds `count`.
unsafe fn one(
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
) -> Result<(usize, usize, *mut c_void), String> {
    match count {
        0 => Ok((0, 0, std::ptr::null_mut())),
        1 if !iov.is_null() => {
            // SAFETY: caller contract.
            let v = unsafe { &*iov };
            // SAFETY: as above.
            let d = if desc.is_null() {
                std::ptr::null_mut()
            } else {
                unsafe { *desc }
            };
            Ok((v.iov_base as usize, v.iov_len, d))
        }
        1 => Err("a null iovec array".into()),
        n => Err(format!("{n} iovecs (RMA takes one: iov_limit 1 for RMA)")),
    }
}

/// # Safety
/// As `rma`, for the message's pieces.
unsafe fn msg(e: *mut fid_ep, m: *const fi_msg_rma, flags: u64, write: bool) -> isize {
    // SAFETY: the application's message (or null).
    let Some(m) = (unsafe { m.as_ref() }) else {
        warn(FI_LOG_EP_DATA, "ni: fi_readmsg/fi_writemsg: a null message");
        return -(FI_EINVAL as isize);
    };
    // SAFETY: the message's arrays hold their counts.
    let local = unsafe { one(m.msg_iov, m.desc, m.iov_count) };
    let remote = if m.rma_iov_count == 1 && !m.rma_iov.is_null() {
        // SAFETY: one entry, non-null.
        Ok(unsafe { &*m.rma_iov })
    } else {
        Err(format!(
            "{} remote iovecs (rma_iov_limit 1)",
            m.rma_iov_count
        ))
    };
    match (local, remote) {
        (Ok((buf, len, desc)), Ok(rv)) => {
            if rv.len != len {
                warn(
                    FI_LOG_EP_DATA,
                    &format!(
                        "ni: fi_{}msg: {len} local bytes for a remote iovec of {}",
                        if write { "write" } else { "read" },
                        rv.len
                    ),
                );
                return -(FI_EINVAL as isize);
            }
            // SAFETY: caller contract.
            unsafe {
                rma(
                    e,
                    Req {
                        write,
                        buf,
                        len,
                        desc,
                        peer: m.addr,
                        addr: rv.addr,
                        key: rv.key,
                        context: m.context,
                        flags: Some(flags),
                        inject: false,
                    },
                )
            }
        }
        (Err(why), _) | (_, Err(why)) => {
            warn(FI_LOG_EP_DATA, &format!("ni: RMA message: {why}"));
            -(FI_EINVAL as isize)
        }
    }
}

/// A read or write of one buffer, as fi_read(3)/fi_write(3) take it.
///
/// # Safety
/// As `rma`.
#[allow(clippy::too_many_arguments)]
unsafe fn one_buffer(
    e: *mut fid_ep,
    write: bool,
    buf: usize,
    len: usize,
    desc: *mut c_void,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let r = Req {
        write,
        buf,
        len,
        desc,
        peer,
        addr,
        key,
        context,
        flags: None,
        inject: false,
    };
    // SAFETY: caller contract.
    unsafe { rma(e, r) }
}

/// fi_readv(3)/fi_writev(3): one iovec.
///
/// # Safety
/// As `rma`; `iov` and `desc` hold `count` entries.
#[allow(clippy::too_many_arguments)]
unsafe fn vector(
    e: *mut fid_ep,
    write: bool,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the application's arrays hold `count` entries.
    match unsafe { one(iov, desc, count) } {
        // SAFETY: caller contract.
        Ok((buf, len, d)) => unsafe { one_buffer(e, write, buf, len, d, peer, addr, key, context) },
        Err(why) => {
            let what = if write { "fi_writev" } else { "fi_readv" };
            warn(FI_LOG_EP_DATA, &format!("ni: {what}: {why}"));
            -(FI_EINVAL as isize)
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn read(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the application's arguments, as fi_read(3) has them.
    unsafe { one_buffer(e, false, buf as usize, len, desc, src, addr, key, context) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readv(
    e: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the application's arguments, as fi_readv(3) has them.
    unsafe { vector(e, false, iov, desc, count, src, addr, key, context) }
}

unsafe extern "C" fn readmsg(e: *mut fid_ep, m: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the application's message.
    unsafe { msg(e, m, flags, false) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn write(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the application's arguments, as fi_write(3) has them.
    unsafe { one_buffer(e, true, buf as usize, len, desc, dest, addr, key, context) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writev(
    e: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the application's arguments, as fi_writev(3) has them.
    unsafe { vector(e, true, iov, desc, count, dest, addr, key, context) }
}

unsafe extern "C" fn writemsg(e: *mut fid_ep, m: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the application's message.
    unsafe { msg(e, m, flags, true) }
}

unsafe extern "C" fn inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: the application's arguments, as fi_inject_write(3) has them.
    unsafe {
        rma(
            e,
            Req {
                write: true,
                buf: buf as usize,
                len,
                desc: std::ptr::null_mut(),
                peer: dest,
                addr,
                key,
                context: std::ptr::null_mut(),
                flags: None,
                inject: true,
            },
        )
    }
}

// A write with remote CQ data completes at the target too; the target's NI has nowhere to
// put that completion (no FI_RMA_EVENT), so these are refused.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writedata(
    _e: *mut fid_ep,
    _buf: *const c_void,
    _len: usize,
    _desc: *mut c_void,
    _data: u64,
    _dest: fi_addr_t,
    _addr: u64,
    _key: u64,
    _context: *mut c_void,
) -> isize {
    warn(
        FI_LOG_EP_DATA,
        "ni: fi_writedata: remote CQ data on RMA is not offered (no completion at the target)",
    );
    -(FI_ENOSYS as isize)
}

unsafe extern "C" fn injectdata(
    _e: *mut fid_ep,
    _buf: *const c_void,
    _len: usize,
    _data: u64,
    _dest: fi_addr_t,
    _addr: u64,
    _key: u64,
) -> isize {
    warn(
        FI_LOG_EP_DATA,
        "ni: fi_inject_writedata: remote CQ data on RMA is not offered (no completion at the target)",
    );
    -(FI_ENOSYS as isize)
}
