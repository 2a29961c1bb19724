//! Address vectors (`fi_av_open`): an endpoint's name is its NI's place in the partition.
//!
//! The 16-byte name (`fi_getname`) is `magic "NIFI" | partition | rank | node`, little-endian.
//! With `FI_AV_MAP` the `fi_addr_t` of a name is its rank; with `FI_AV_TABLE` it is the
//! index of its insertion. A name from another partition (or not ours at all) is refused
//! with `FI_ADDR_NOTAVAIL` and a warning: the NI could not reach it.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use crate::ffi::errno::*;
use crate::ffi::*;
use crate::{container, guard, warn};

pub const NAME_LEN: usize = 16;
const MAGIC: u32 = 0x4946_494E; // "NIFI"

/// An endpoint's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Name {
    pub partition: u32,
    pub rank: u32,
    pub node: u32,
}

impl Name {
    pub fn encode(&self) -> [u8; NAME_LEN] {
        let mut b = [0u8; NAME_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.partition.to_le_bytes());
        b[8..12].copy_from_slice(&self.rank.to_le_bytes());
        b[12..16].copy_from_slice(&self.node.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Name> {
        let w = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        (b.len() >= NAME_LEN && w(0) == MAGIC).then(|| Name {
            partition: w(4),
            rank: w(8),
            node: w(12),
        })
    }

    pub fn to_str(&self) -> String {
        format!(
            "ni://partition{}/rank{}/node{}",
            self.partition, self.rank, self.node
        )
    }
}

pub struct Av {
    table: bool,
    /// This endpoint's partition and its size: names outside are refused.
    partition: u32,
    size: u32,
    /// FI_AV_TABLE: index → name (None once removed). FI_AV_MAP: the names inserted.
    names: ni::NiLock<Vec<Option<Name>>>,
}

impl Av {
    /// The rank an `fi_addr_t` names, if it names one.
    pub fn rank_of(&self, a: fi_addr_t) -> Option<u32> {
        if self.table {
            let names = self.names.lock();
            names.get(a as usize).copied().flatten().map(|n| n.rank)
        } else {
            (a < self.size as u64).then_some(a as u32)
        }
    }

    /// The `fi_addr_t` of `rank` (`fi_cq_readfrom`): `FI_ADDR_NOTAVAIL` if never inserted.
    pub fn fi_addr_of(&self, rank: u32) -> fi_addr_t {
        if self.table {
            let names = self.names.lock();
            names
                .iter()
                .position(|n| n.is_some_and(|n| n.rank == rank))
                .map_or(FI_ADDR_NOTAVAIL, |i| i as u64)
        } else {
            rank as u64
        }
    }

    fn insert(&self, n: Name) -> Result<fi_addr_t, String> {
        if n.partition != self.partition || n.rank >= self.size {
            return Err(format!(
                "{} is not in this endpoint's partition {} (ranks 0..{})",
                n.to_str(),
                self.partition,
                self.size
            ));
        }
        let mut names = self.names.lock();
        names.push(Some(n));
        Ok(if self.table {
            (names.len() - 1) as u64
        } else {
            n.rank as u64
        })
    }

    fn lookup(&self, a: fi_addr_t) -> Option<Name> {
        let names = self.names.lock();
        if self.table {
            names.get(a as usize).copied().flatten()
        } else {
            names.iter().flatten().find(|n| n.rank as u64 == a).copied()
        }
    }

    fn remove(&self, a: fi_addr_t) -> bool {
        let mut names = self.names.lock();
        if self.table {
            match names.get_mut(a as usize) {
                Some(n @ Some(_)) => {
                    *n = None;
                    true
                }
                _ => false,
            }
        } else {
            let before = names.len();
            names.retain(|n| n.is_none_or(|n| n.rank as u64 != a));
            names.len() != before
        }
    }
}

#[repr(C)]
pub struct AvFid {
    pub fid: fid_av,
    pub av: Arc<Av>,
}

static AV_FI_OPS: fi_ops = crate::stub::fid_ops!(av_close);

static AV_OPS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(crate::stub::insertsvc),
    insertsym: Some(crate::stub::insertsym),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: Some(crate::stub::av_set),
};

/// `fi_av_open` on a domain whose NI is in `partition` of `size` ranks.
///
/// # Safety
/// `attr` is the application's attribute block or null; `out` is writable.
pub unsafe fn open(
    attr: *mut fi_av_attr,
    partition: u32,
    size: u32,
    out: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller passes a valid attribute block or null.
    let a = unsafe { attr.as_ref() };
    let table = match a.map_or(FI_AV_UNSPEC, |a| a.type_) {
        FI_AV_TABLE => true,
        FI_AV_MAP | FI_AV_UNSPEC => false,
        t => {
            warn(FI_LOG_AV, &format!("ni: fi_av_open: unknown type {t}"));
            return -FI_EINVAL;
        }
    };
    if let Some(a) = a {
        if !a.name.is_null() || a.flags & (FI_SHARED_AV | FI_EVENT) != 0 {
            warn(
                FI_LOG_AV,
                "ni: fi_av_open: named, shared or event AVs are not offered",
            );
            return -FI_ENOSYS;
        }
        if a.rx_ctx_bits != 0 {
            warn(
                FI_LOG_AV,
                "ni: fi_av_open: no scalable endpoints (rx_ctx_bits must be 0)",
            );
            return -FI_EINVAL;
        }
    }
    let av = Box::new(AvFid {
        fid: fid_av {
            fid: fid {
                fclass: FI_CLASS_AV,
                context,
                ops: &AV_FI_OPS as *const _ as *mut _,
            },
            ops: &AV_OPS as *const _ as *mut _,
        },
        av: Arc::new(Av {
            table,
            partition,
            size,
            names: ni::NiLock::new(Vec::new()),
        }),
    });
    // SAFETY: `out` is writable (caller contract).
    unsafe { *out = Box::into_raw(av) as *mut fid_av };
    0
}

unsafe extern "C" fn av_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is the fid of an AvFid we boxed in `open`; closed once.
        drop(unsafe { Box::from_raw(f as *mut AvFid) });
        0
    })
}

unsafe extern "C" fn av_insert(
    a: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let _ = context;
        if flags & !FI_MORE != 0 {
            warn(
                FI_LOG_AV,
                &format!("ni: fi_av_insert: flags {flags:#x} not offered"),
            );
            return -FI_EBADFLAGS;
        }
        if addr.is_null() && count > 0 {
            return -FI_EINVAL;
        }
        // SAFETY: `a` is one of our AVs.
        let av = unsafe { &container::<AvFid>(a as *mut fid).av };
        let mut ok = 0;
        for i in 0..count {
            // SAFETY: the caller passes `count` names of NAME_LEN bytes (our getname size).
            let b = unsafe {
                std::slice::from_raw_parts((addr as *const u8).add(i * NAME_LEN), NAME_LEN)
            };
            let r = match Name::decode(b) {
                Some(n) => av.insert(n),
                None => Err(format!("address {i} is not an ni endpoint name")),
            };
            let out = match r {
                Ok(x) => {
                    ok += 1;
                    x
                }
                Err(why) => {
                    warn(FI_LOG_AV, &format!("ni: fi_av_insert: {why}"));
                    FI_ADDR_NOTAVAIL
                }
            };
            if !fi_addr.is_null() {
                // SAFETY: the caller's output array holds `count` addresses.
                unsafe { *fi_addr.add(i) = out };
            }
        }
        ok
    })
}

unsafe extern "C" fn av_remove(
    a: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    _flags: u64,
) -> c_int {
    guard(|| {
        // SAFETY: `a` is one of our AVs; `fi_addr` holds `count` addresses.
        let av = unsafe { &container::<AvFid>(a as *mut fid).av };
        let mut missing = false;
        for i in 0..count {
            // SAFETY: as above.
            let x = unsafe { *fi_addr.add(i) };
            missing |= !av.remove(x);
        }
        if missing {
            -FI_ENOENT
        } else {
            0
        }
    })
}

unsafe extern "C" fn av_lookup(
    a: *mut fid_av,
    x: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: `a` is one of our AVs; `addrlen` is writable; `addr` holds *addrlen bytes.
        unsafe {
            let av = &container::<AvFid>(a as *mut fid).av;
            let Some(n) = av.lookup(x) else {
                return -FI_ENOENT;
            };
            let room = *addrlen;
            *addrlen = NAME_LEN;
            let b = n.encode();
            std::ptr::copy_nonoverlapping(b.as_ptr(), addr as *mut u8, room.min(NAME_LEN));
            if room < NAME_LEN {
                return -FI_ETOOSMALL;
            }
        }
        0
    })
}

unsafe extern "C" fn av_straddr(
    _a: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    // SAFETY: `addr` holds a name of NAME_LEN bytes; `buf` holds *len bytes.
    unsafe {
        let b = std::slice::from_raw_parts(addr as *const u8, NAME_LEN);
        let s = Name::decode(b).map_or_else(|| "ni://(not an ni name)".to_string(), |n| n.to_str());
        crate::write_cstr(&s, buf, len)
    }
}
