//! What the provider offers (`fi_getinfo`), checked against an application's hints, and
//! where this process's NI is.

use std::ffi::{c_int, CStr, CString};
use std::path::PathBuf;

use crate::engine::{EAGER_MAX, MAX_MSG, TX_SLOTS};
use crate::ffi::*;

/// Capabilities: tagged and untagged two-sided messages, directed receives, multi-receive
/// buffers, source addresses in completions, local and remote peers alike.
pub const CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_SEND
    | FI_RECV
    | FI_DIRECTED_RECV
    | FI_MULTI_RECV
    | FI_SOURCE
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM;
/// RMA (`rma.rs`): reads and writes of registered memory, MLINK READ/WRITE underneath. Only
/// offered to applications that let the provider pick keys (`FI_MR_PROV_KEY`).
pub const RMA_CAPS: u64 = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/// Operation flags an endpoint may take as defaults.
pub const OP_FLAGS: u64 = FI_COMPLETION
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_MULTI_RECV;
pub const FABRIC_NAME: &CStr = c"ni";
/// `ep_attr->protocol`: provider-specific (high bit), 1 = this engine.
pub const PROTOCOL: u32 = (1 << 31) | 1;
pub const IOV_LIMIT: usize = 16;
pub const RX_SIZE: usize = 4096;
pub const CQ_DATA_SIZE: usize = 8;

/// Where this process's NI is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Socket(PathBuf),
    Pci(String),
}

impl Location {
    /// The domain's name: the socket's file name (`ni3`) or the PCI address.
    pub fn domain_name(&self) -> String {
        match self {
            Location::Socket(p) => p
                .file_stem()
                .map_or_else(|| "ni".into(), |s| s.to_string_lossy().into_owned()),
            Location::Pci(a) => a.clone(),
        }
    }
}

/// The launcher's local rank: which of the daemon's NIs is this process's.
fn local_rank() -> Option<(String, u32)> {
    for v in [
        "NI_FI_NI",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "PMI_LOCAL_RANK",
        "SLURM_LOCALID",
    ] {
        if let Ok(s) = std::env::var(v) {
            if let Ok(k) = s.trim().parse() {
                return Some((v.to_string(), k));
            }
        }
    }
    None
}

/// Find this process's NI, or say why there is none.
pub fn locate() -> Result<Location, String> {
    if let Some(p) = std::env::var_os("NI_SOCKET") {
        let p = PathBuf::from(p);
        return if p.exists() {
            Ok(Location::Socket(p))
        } else {
            Err(format!(
                "NI_SOCKET={} does not exist: is ni-device running?",
                p.display()
            ))
        };
    }
    if let Some(dir) = std::env::var_os("NI_RUN_DIR") {
        let dir = PathBuf::from(dir);
        let (var, k) = local_rank().unwrap_or(("(no local rank: NI 0)".into(), 0));
        let p = dir.join(format!("ni{k}.sock"));
        return if p.exists() {
            Ok(Location::Socket(p))
        } else if !dir.is_dir() {
            Err(format!(
                "NI_RUN_DIR={} is not a directory: is ni-device running with --run-dir there?",
                dir.display()
            ))
        } else {
            Err(format!(
                "{} does not exist ({var} = {k}): the daemon in NI_RUN_DIR has fewer NIs than this job has local ranks",
                p.display()
            ))
        };
    }
    match ni::Ni::find_pci() {
        Some(a) => Ok(Location::Pci(a)),
        None => Err(
            "no NI: set NI_SOCKET (one NI's socket) or NI_RUN_DIR (ni-device's run directory) \
             on a host; in a guest, attach an NI (no NI PCI function found)"
                .into(),
        ),
    }
}

/// Why hints ask for something the provider does not offer.
pub fn check_hints(version: u32, h: &fi_info) -> Result<(), String> {
    let missing = h.caps & !(CAPS | RMA_CAPS);
    if missing != 0 {
        return Err(format!(
            "capabilities {missing:#x} are not offered (offered: {:#x})",
            CAPS | RMA_CAPS
        ));
    }
    // SAFETY: the hints' attribute pointers are the application's, valid or null.
    let (htx, hrx, hd) = unsafe {
        (
            h.tx_attr.as_ref(),
            h.rx_attr.as_ref(),
            h.domain_attr.as_ref(),
        )
    };
    let rma = (h.caps | htx.map_or(0, |t| t.caps) | hrx.map_or(0, |r| r.caps)) & RMA_CAPS != 0;
    if rma && version >= fi_version(1, 5) && hd.is_none_or(|d| d.mr_mode & FI_MR_PROV_KEY == 0) {
        return Err("FI_RMA without FI_MR_PROV_KEY in mr_mode (ni's NI picks the keys)".into());
    }
    if h.addr_format != FI_FORMAT_UNSPEC {
        return Err(format!(
            "address format {} (ni names are FI_FORMAT_UNSPEC)",
            h.addr_format
        ));
    }
    // SAFETY (each `as_ref` below): the hints' attribute pointers are the application's,
    // valid or null, for the duration of fi_getinfo.
    if let Some(ep) = unsafe { h.ep_attr.as_ref() } {
        if !matches!(ep.type_, FI_EP_UNSPEC | FI_EP_RDM) {
            return Err(format!("endpoint type {} (ni offers FI_EP_RDM)", ep.type_));
        }
        if ep.max_msg_size > MAX_MSG {
            return Err(format!("max_msg_size {} > {MAX_MSG}", ep.max_msg_size));
        }
        if ep.tx_ctx_cnt > 1 || ep.rx_ctx_cnt > 1 {
            return Err("scalable endpoints (more than one context) are not offered".into());
        }
        if ep.protocol != FI_PROTO_UNSPEC && ep.protocol != PROTOCOL {
            return Err(format!("protocol {:#x}", ep.protocol));
        }
    }
    // SAFETY: as above.
    if let Some(tx) = unsafe { h.tx_attr.as_ref() } {
        if tx.inject_size > EAGER_MAX {
            return Err(format!("inject_size {} > {EAGER_MAX}", tx.inject_size));
        }
        if tx.op_flags & !OP_FLAGS != 0 {
            return Err(format!("transmit op_flags {:#x}", tx.op_flags & !OP_FLAGS));
        }
        if tx.caps & !(CAPS | RMA_CAPS) != 0 {
            return Err(format!(
                "transmit capabilities {:#x}",
                tx.caps & !(CAPS | RMA_CAPS)
            ));
        }
    }
    // SAFETY: as above.
    if let Some(rx) = unsafe { h.rx_attr.as_ref() } {
        if rx.op_flags & !OP_FLAGS != 0 {
            return Err(format!("receive op_flags {:#x}", rx.op_flags & !OP_FLAGS));
        }
        if rx.caps & !(CAPS | RMA_CAPS) != 0 {
            return Err(format!(
                "receive capabilities {:#x}",
                rx.caps & !(CAPS | RMA_CAPS)
            ));
        }
        if rx.total_buffered_recv > 0 {
            return Err("FI_BUFFERED_RECV is not offered".into());
        }
    }
    // SAFETY: as above.
    if let Some(d) = unsafe { h.domain_attr.as_ref() } {
        if d.data_progress == FI_PROGRESS_AUTO || d.control_progress == FI_PROGRESS_AUTO {
            return Err(
                "FI_PROGRESS_AUTO (ni progresses in the application's calls: FI_PROGRESS_MANUAL)"
                    .into(),
            );
        }
        if d.cq_data_size > CQ_DATA_SIZE {
            return Err(format!("cq_data_size {} > {CQ_DATA_SIZE}", d.cq_data_size));
        }
        if !matches!(d.av_type, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE) {
            return Err(format!("AV type {}", d.av_type));
        }
        if version >= fi_version(1, 5) && d.mr_mode & (FI_MR_BASIC | FI_MR_SCALABLE) != 0 {
            return Err("FI_MR_BASIC/FI_MR_SCALABLE with API 1.5 or later".into());
        }
    }
    // SAFETY: as above.
    if let Some(f) = unsafe { h.fabric_attr.as_ref() } {
        if !f.name.is_null() {
            // SAFETY: a NUL-ended name of the application's.
            let n = unsafe { CStr::from_ptr(f.name) };
            if n != FABRIC_NAME {
                return Err(format!("fabric {n:?} (ni's fabric is \"ni\")"));
            }
        }
    }
    Ok(())
}

/// The provider's `fi_info` for the NI at `loc`, shaped by the hints (their AV type,
/// threading and default op flags), copied into libfabric's memory.
pub fn build(version: u32, hints: Option<&fi_info>, loc: &Location) -> *mut fi_info {
    // SAFETY (each `as_ref`): the hints' attribute pointers are valid or null.
    let hd = hints.and_then(|h| unsafe { h.domain_attr.as_ref() });
    let htx = hints.and_then(|h| unsafe { h.tx_attr.as_ref() });
    let hrx = hints.and_then(|h| unsafe { h.rx_attr.as_ref() });
    let threading = hd.map_or(FI_THREAD_SAFE, |d| d.threading);
    let av_type = hd.map_or(FI_AV_UNSPEC, |d| d.av_type);
    // RMA when asked for; when nothing in particular is, if the application lets the
    // provider pick keys; and with no hints at all (fi_getinfo(3): the application then takes
    // the mr_mode returned, FI_MR_PROV_KEY; MPICH asks that way first and then asks for what
    // it was offered). check_hints refused RMA without FI_MR_PROV_KEY already.
    let asked = hints.map_or(0, |h| h.caps) | htx.map_or(0, |t| t.caps) | hrx.map_or(0, |r| r.caps);
    let prov_key = hd.is_some_and(|d| d.mr_mode & FI_MR_PROV_KEY != 0);
    let rma = version >= fi_version(1, 5)
        && (asked & RMA_CAPS != 0
            || hints.is_none()
            || (hints.is_some_and(|h| h.caps == 0) && prov_key));
    let caps = if rma { CAPS | RMA_CAPS } else { CAPS };
    let mut tx = fi_tx_attr {
        caps,
        mode: 0,
        op_flags: htx.map_or(0, |t| t.op_flags),
        msg_order: FI_ORDER_SAS,
        comp_order: 0,
        inject_size: EAGER_MAX,
        size: TX_SLOTS,
        iov_limit: IOV_LIMIT,
        rma_iov_limit: if rma { 1 } else { 0 },
        tclass: 0,
    };
    let mut rx = fi_rx_attr {
        caps,
        mode: 0,
        op_flags: hrx.map_or(0, |r| r.op_flags),
        msg_order: FI_ORDER_SAS,
        comp_order: 0,
        total_buffered_recv: 0,
        size: RX_SIZE,
        iov_limit: IOV_LIMIT,
    };
    let mut ep = fi_ep_attr {
        type_: FI_EP_RDM,
        protocol: PROTOCOL,
        protocol_version: 1,
        max_msg_size: MAX_MSG,
        msg_prefix_size: 0,
        max_order_raw_size: 0,
        max_order_war_size: 0,
        max_order_waw_size: 0,
        mem_tag_format: u64::MAX,
        tx_ctx_cnt: 1,
        rx_ctx_cnt: 1,
        auth_key_size: 0,
        auth_key: std::ptr::null_mut(),
    };
    let dname = CString::new(loc.domain_name()).unwrap_or_default();
    let mut dom = fi_domain_attr {
        domain: std::ptr::null_mut(),
        name: dname.as_ptr() as *mut _,
        threading: if threading == FI_THREAD_UNSPEC {
            FI_THREAD_SAFE
        } else {
            threading
        },
        control_progress: FI_PROGRESS_MANUAL,
        data_progress: FI_PROGRESS_MANUAL,
        resource_mgmt: FI_RM_ENABLED,
        av_type,
        mr_mode: if version < fi_version(1, 5) {
            FI_MR_SCALABLE
        } else if rma {
            FI_MR_PROV_KEY
        } else {
            0
        },
        mr_key_size: 8,
        cq_data_size: CQ_DATA_SIZE,
        cq_cnt: 16,
        ep_cnt: 1,
        tx_ctx_cnt: 1,
        rx_ctx_cnt: 1,
        max_ep_tx_ctx: 1,
        max_ep_rx_ctx: 1,
        max_ep_stx_ctx: 0,
        max_ep_srx_ctx: 0,
        cntr_cnt: 0,
        mr_iov_limit: 1,
        caps: FI_LOCAL_COMM | FI_REMOTE_COMM,
        mode: 0,
        auth_key: std::ptr::null_mut(),
        auth_key_size: 0,
        max_err_data: 0,
        mr_cnt: 1 << 16,
        tclass: 0,
        max_ep_auth_key: 0,
        max_group_id: 0,
        max_cntr_value: 0,
        max_err_cntr_value: 0,
    };
    let mut fab = fi_fabric_attr {
        fabric: std::ptr::null_mut(),
        name: FABRIC_NAME.as_ptr() as *mut _,
        // The core names the provider (a name here would read "ni;ni").
        prov_name: std::ptr::null_mut(),
        prov_version: crate::PROVIDER_VERSION,
        api_version: version,
    };
    let tmpl = fi_info {
        next: std::ptr::null_mut(),
        caps,
        mode: 0,
        addr_format: FI_FORMAT_UNSPEC,
        src_addrlen: 0,
        dest_addrlen: 0,
        src_addr: std::ptr::null_mut(),
        dest_addr: std::ptr::null_mut(),
        handle: std::ptr::null_mut(),
        tx_attr: &mut tx,
        rx_attr: &mut rx,
        ep_attr: &mut ep,
        domain_attr: &mut dom,
        fabric_attr: &mut fab,
        nic: std::ptr::null_mut(),
    };
    crate::dupinfo(&tmpl)
}

/// The endpoint settings an `fi_info` passed to `fi_endpoint` carries.
pub struct EpSettings {
    pub caps: u64,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
}

pub fn ep_settings(info: Option<&fi_info>) -> Result<EpSettings, (c_int, String)> {
    let Some(i) = info else {
        return Ok(EpSettings {
            caps: CAPS,
            tx_op_flags: 0,
            rx_op_flags: 0,
        });
    };
    check_hints(crate::api_version(), i).map_err(|e| (-ffi_errno::FI_EINVAL, e))?;
    // SAFETY: the info's attribute pointers are valid or null.
    let (tx, rx) = unsafe { (i.tx_attr.as_ref(), i.rx_attr.as_ref()) };
    Ok(EpSettings {
        caps: if i.caps == 0 { CAPS } else { i.caps },
        tx_op_flags: tx.map_or(0, |t| t.op_flags),
        rx_op_flags: rx.map_or(0, |r| r.op_flags),
    })
}

use crate::ffi::errno as ffi_errno;
