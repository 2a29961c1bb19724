//! `libni-fi.so`: the libfabric provider **ni**, so MPI programs (Open MPI's `mtl ofi`,
//! MPICH's `ch4:ofi`) and every other libfabric application run over an NI unmodified.
//!
//! libfabric loads it at run time from a directory named by `FI_PROVIDER_PATH` (the file
//! must be called `libni-fi.so`; the workspace's build leaves `libni_fi.so`, see the README)
//! and calls [`fi_prov_ini`]. The provider offers one endpoint type, `FI_EP_RDM`, with
//! `FI_TAGGED` and `FI_MSG` (`engine.rs` says how they travel over libni), on one domain per
//! process: the NI found as libni finds it —
//!
//! - `NI_SOCKET`: that NI's vfio-user socket;
//! - else `NI_RUN_DIR`: the daemon's run directory, NI `niK.sock` where K is the launcher's
//!   local rank (`OMPI_COMM_WORLD_LOCAL_RANK`, `MPI_LOCALRANKID`, `SLURM_LOCALID`, or
//!   `NI_FI_NI` to name it), so `mpirun -n N` on a host spreads its ranks over N NIs;
//! - else, in a guest: the NI's PCI function, through VFIO.
//!
//! What goes wrong is said on `FI_LOG_LEVEL=warn` lines (`libfabric:…:ni:…`) and in the
//! error numbers `fi_strerror` reads out.

pub mod av;
pub mod cntr;
pub mod cq;
mod domain;
pub mod engine;
mod ep;
mod eq;
mod fabric;
pub use ni_fi_sys as ffi;
pub mod info;
mod ring;
mod rma;
mod stub;

use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

pub use av::Av;
use ffi::errno::FI_EOTHER;
use ffi::*;

pub use fabric::fi_prov_ini;

/// The provider's version (`prov_version`): 0.1.
pub const PROVIDER_VERSION: u32 = fi_version(0, 1);
/// The libfabric API the provider is written against (the installed headers' version).
pub const API_VERSION: u32 = fi_version(1, 17);
/// The newest libfabric API the provider has been checked against: 2.x kept 1.17's structs,
/// flags and calls, appending fields only where the provider zeroes or ignores them
/// (`fi_domain_attr`'s four, `fi_cq_err_entry::src_addr`, which the application's inline
/// `fi_cq_readerr` fills, `fi_mr_attr`'s tail, three `fi_ops_av` entries that `size` leaves
/// out). MPICH 5 asks for 2.5 and its libfabric skips a provider older than what is asked.
pub const API_VERSION_MAX: u32 = fi_version(2, 5);

/// The API the provider speaks to the libfabric that loaded it: that core's own version,
/// within [`API_VERSION`]..=[`API_VERSION_MAX`].
pub fn api_version() -> u32 {
    core().map_or(API_VERSION, |c| {
        c.version.clamp(API_VERSION, API_VERSION_MAX)
    })
}

/// libfabric's own functions, looked up in the process that loaded us (libfabric is there:
/// it is what called `fi_prov_ini`). Looked up, not linked, so a missing symbol is a warning
/// here instead of a `dlopen` that fails without a word.
struct Core {
    /// `fi_version()`: the core's own API version.
    version: u32,
    dupinfo: unsafe extern "C" fn(*const fi_info) -> *mut fi_info,
    log_enabled: unsafe extern "C" fn(*const fi_provider, c_int, c_int) -> c_int,
    log: unsafe extern "C" fn(
        *const fi_provider,
        c_int,
        c_int,
        *const c_char,
        c_int,
        *const c_char,
        ...
    ),
}

/// The libfabric that loaded us. Not always in the global namespace: Python loads an
/// extension (mpi4py's `MPI.so`, linked to MPICH's `libmpi` and its libfabric) with
/// `RTLD_LOCAL`, where `dlsym(RTLD_DEFAULT, …)` finds no libfabric at all. So the loaded
/// objects are searched for a `libfabric.so*` (a process has one), falling back on the global
/// namespace for a libfabric linked statically into the program.
fn core_handle() -> *mut libc::c_void {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid info whose name is NUL-ended or null; `out` is
        // the `Option<CString>` below.
        unsafe {
            let name = (*info).dlpi_name;
            if name.is_null() {
                return 0;
            }
            let n = std::ffi::CStr::from_ptr(name);
            let file = n
                .to_bytes()
                .rsplit(|b| *b == b'/')
                .next()
                .unwrap_or_default();
            if file.starts_with(b"libfabric.so") {
                *(out as *mut Option<CString>) = Some(n.to_owned());
                return 1;
            }
        }
        0
    }
    let mut found: Option<CString> = None;
    // SAFETY: `visit` only reads the infos it is given and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut _ as *mut libc::c_void) };
    if let Some(path) = found {
        // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded (it stays
        // loaded: it is what called us).
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !h.is_null() {
            return h;
        }
    }
    libc::RTLD_DEFAULT
}

fn core() -> Option<&'static Core> {
    static CORE: OnceLock<Option<Core>> = OnceLock::new();
    CORE.get_or_init(|| {
        let lib = core_handle();
        // `version` empty: the symbol's default version.
        let sym = |name: &std::ffi::CStr, version: &std::ffi::CStr| {
            let mut p = std::ptr::null_mut();
            if !version.is_empty() {
                // SAFETY: a plain symbol lookup in a loaded object (or the global namespace);
                // NUL-ended names.
                p = unsafe { libc::dlvsym(lib, name.as_ptr(), version.as_ptr()) };
            }
            if p.is_null() {
                // SAFETY: as above.
                p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            }
            (!p.is_null()).then_some(p)
        };
        // The core's default `fi_dupinfo`, which copies structs of the core's own size (a
        // 2.x core's default is FABRIC_1.9; its FABRIC_1.3 copy allocates 1.3's smaller
        // `fi_domain_attr`, which the core then reads past). 1.17's default is FABRIC_1.3.
        let dupinfo = sym(c"fi_dupinfo", c"")?;
        let version = sym(c"fi_version", c"FABRIC_1.0")?;
        let log_enabled = sym(c"fi_log_enabled", c"FABRIC_1.0")?;
        let log = sym(c"fi_log", c"FABRIC_1.0")?;
        // SAFETY: these are libfabric's exported functions with the signatures of
        // fabric.h and providers/fi_log.h.
        unsafe {
            Some(Core {
                version: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn() -> u32>(
                    version,
                )(),
                dupinfo: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(*const fi_info) -> *mut fi_info,
                >(dupinfo),
                log_enabled: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(*const fi_provider, c_int, c_int) -> c_int,
                >(log_enabled),
                log: std::mem::transmute::<
                    *mut libc::c_void,
                    unsafe extern "C" fn(
                        *const fi_provider,
                        c_int,
                        c_int,
                        *const c_char,
                        c_int,
                        *const c_char,
                        ...
                    ),
                >(log),
            })
        }
    })
    .as_ref()
}

/// `fi_dupinfo`: a deep copy of `tmpl` in libfabric's (malloc) memory, which `fi_freeinfo`
/// frees — the only way an `fi_info` may leave the provider.
pub(crate) fn dupinfo(tmpl: &fi_info) -> *mut fi_info {
    match core() {
        // SAFETY: `tmpl` and everything it points to is valid for the call.
        Some(c) => unsafe { (c.dupinfo)(tmpl) },
        None => std::ptr::null_mut(),
    }
}

fn log(level: c_int, subsys: c_int, msg: &str) {
    let prov = fabric::provider();
    let Some(c) = core() else {
        return;
    };
    if prov.is_null() {
        return;
    }
    // SAFETY: `prov` is our registered provider; fi_log_enabled only reads it.
    if unsafe { (c.log_enabled)(prov, level, subsys) } == 0 {
        return;
    }
    let msg = CString::new(msg.replace('\0', " ") + "\n").unwrap_or_default();
    // SAFETY: "%s" with one NUL-ended string argument; func is a NUL-ended literal.
    unsafe {
        (c.log)(
            prov,
            level,
            subsys,
            c"ni".as_ptr(),
            0,
            c"%s".as_ptr(),
            msg.as_ptr(),
        )
    };
}

/// A `FI_LOG_LEVEL=warn` line.
pub fn warn(subsys: c_int, msg: &str) {
    log(FI_LOG_WARN, subsys, msg);
}

/// A `FI_LOG_LEVEL=info` line.
pub fn info_log(subsys: c_int, msg: &str) {
    log(FI_LOG_INFO, subsys, msg);
}

/// Run an entry point; a panic becomes `-FI_EOTHER` and a warning, never an unwind into C.
pub(crate) fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        warn(
            FI_LOG_CORE,
            &format!("ni: internal error: {}", panic_text(&p)),
        );
        -FI_EOTHER
    })
}

pub(crate) fn guard_ssize(f: impl FnOnce() -> isize) -> isize {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        warn(
            FI_LOG_CORE,
            &format!("ni: internal error: {}", panic_text(&p)),
        );
        -(FI_EOTHER as isize)
    })
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// The object whose `fid` (its first field) `f` is.
///
/// # Safety
/// `f` must be the fid of a live `T` this provider created, `T` `#[repr(C)]` with the fid
/// first.
pub(crate) unsafe fn container<'a, T>(f: *mut fid) -> &'a T {
    // SAFETY: the caller guarantees `f` points at the start of a live `T`.
    unsafe { &*(f as *const T) }
}

/// Write `s` NUL-ended into `buf` of `*len` bytes (as much as fits); `*len` becomes the size
/// needed. Returns `buf`.
///
/// # Safety
/// `buf` holds `*len` bytes; `len` is writable.
pub(crate) unsafe fn write_cstr(s: &str, buf: *mut c_char, len: *mut usize) -> *const c_char {
    // SAFETY: caller contract.
    unsafe {
        let room = *len;
        *len = s.len() + 1;
        if room > 0 && !buf.is_null() {
            let n = s.len().min(room - 1);
            std::ptr::copy_nonoverlapping(s.as_ptr() as *const c_char, buf, n);
            *buf.add(n) = 0;
        }
    }
    buf
}
