//! The provider itself (`fi_prov_ini`), `fi_getinfo`, and the fabric object.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::ffi::errno::*;
use crate::ffi::*;
use crate::{guard, info, info_log, warn};

static PROVIDER: AtomicPtr<fi_provider> = AtomicPtr::new(std::ptr::null_mut());

/// Our registered `struct fi_provider` (null before `fi_prov_ini`).
pub fn provider() -> *const fi_provider {
    PROVIDER.load(Ordering::Acquire)
}

/// The entry point libfabric looks up after `dlopen("libni-fi.so")`.
///
/// The struct is allocated, not static: the core writes its own context into it.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    let p = provider();
    if !p.is_null() {
        return p as *mut _;
    }
    let p = Box::into_raw(Box::new(fi_provider {
        version: crate::PROVIDER_VERSION,
        fi_version: crate::api_version(),
        context: fi_context {
            internal: [std::ptr::null_mut(); 4],
        },
        name: c"ni".as_ptr(),
        getinfo: Some(getinfo),
        fabric: Some(fabric_open),
        cleanup: Some(cleanup),
    }));
    match PROVIDER.compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => p,
        Err(existing) => {
            // SAFETY: `p` was boxed just above and never shared.
            drop(unsafe { Box::from_raw(p) });
            existing
        }
    }
}

unsafe extern "C" fn cleanup() {}

unsafe extern "C" fn getinfo(
    version: u32,
    _node: *const c_char,
    _service: *const c_char,
    _flags: u64,
    hints: *const fi_info,
    out: *mut *mut fi_info,
) -> c_int {
    guard(|| {
        // SAFETY: libfabric passes the application's hints (or null) and a writable `out`.
        let hints = unsafe { hints.as_ref() };
        if let Some(h) = hints {
            if let Err(why) = info::check_hints(version, h) {
                info_log(FI_LOG_FABRIC, &format!("ni: not offered: {why}"));
                return -FI_ENODATA;
            }
        }
        let loc = match info::locate() {
            Ok(l) => l,
            Err(why) => {
                warn(FI_LOG_FABRIC, &format!("ni: {why}"));
                return -FI_ENODATA;
            }
        };
        let i = info::build(version, hints, &loc);
        if i.is_null() {
            warn(
                FI_LOG_FABRIC,
                "ni: fi_dupinfo is not available in this process",
            );
            return -FI_ENOMEM;
        }
        // SAFETY: `out` is writable.
        unsafe { *out = i };
        0
    })
}

#[repr(C)]
pub struct FabricFid {
    pub fid: fid_fabric,
}

static FABRIC_FI_OPS: fi_ops = crate::stub::fid_ops!(fabric_close);

static FABRIC_OPS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(crate::domain::open),
    passive_ep: Some(crate::stub::passive_ep),
    eq_open: Some(crate::eq::open),
    wait_open: Some(crate::stub::wait_open),
    trywait: Some(trywait),
    domain2: Some(crate::domain::open2),
};

unsafe extern "C" fn fabric_open(
    attr: *mut fi_fabric_attr,
    out: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: the core checked `attr` and its name are non-null.
        let name = unsafe { attr.as_ref() }
            .filter(|a| !a.name.is_null())
            // SAFETY: a NUL-ended string of the application's.
            .map(|a| unsafe { CStr::from_ptr(a.name) });
        if name.is_some_and(|n| n != info::FABRIC_NAME) {
            warn(
                FI_LOG_FABRIC,
                &format!(
                    "ni: fi_fabric: no fabric {:?} (ni's is \"ni\")",
                    name.unwrap()
                ),
            );
            return -FI_ENODEV;
        }
        let f = Box::new(FabricFid {
            fid: fid_fabric {
                fid: fid {
                    fclass: FI_CLASS_FABRIC,
                    context,
                    ops: &FABRIC_FI_OPS as *const _ as *mut _,
                },
                ops: &FABRIC_OPS as *const _ as *mut _,
                api_version: crate::api_version(),
            },
        });
        // SAFETY: `out` is writable.
        unsafe { *out = Box::into_raw(f) as *mut fid_fabric };
        0
    })
}

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is a FabricFid we boxed; closed once.
        drop(unsafe { Box::from_raw(f as *mut FabricFid) });
        0
    })
}

unsafe extern "C" fn trywait(_f: *mut fid_fabric, _fids: *mut *mut fid, _count: c_int) -> c_int {
    // No wait objects: the application polls.
    -FI_ENOSYS
}
