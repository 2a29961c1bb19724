//! The libfabric backend of [`Link`]: one reliable-datagram endpoint (`FI_EP_RDM`, `FI_MSG`)
//! of the provider the fabric description names — verbs, EFA or CXI where a cluster has
//! them, `tcp` anywhere — so a real interconnect carries the emulated one.
//!
//! libfabric is loaded (`dlopen("libfabric.so.1")`) only when a description asks for it,
//! so the daemon needs nothing installed otherwise; its struct layouts are `ni-fi-sys`'s,
//! which the provider's layout test checks against the headers.
//!
//! RDM has no connections, so the link keeps the TCP backend's states by itself:
//! - every host's `link` address is resolved at start and inserted in the address vector;
//!   each frame is one message, and its source is the provider's (`FI_SOURCE`), never what
//!   the frame says;
//! - a host is up from its `HELLO` (right digest, its index matching its address) and
//!   answered with ours; a `HELLO` with a new `epoch` from a host that is up is a restart:
//!   down, then up;
//! - a host silent for [`DEAD`] is down, as is one a send to fails; hosts not up get a
//!   `HELLO` every [`RETRY`], and up ones a heartbeat when nothing else went for
//!   [`HEARTBEAT`];
//! - `msg_order` asks for send-after-send ordering, so one sender's frames keep their order.
//!
//! Senders call `fi_send` themselves (the domain is `FI_THREAD_SAFE`); the link's thread
//! drives progress by reading the completion queue, posts the receive buffers again, and
//! frees what was sent. A frame is copied once, into the buffer the provider sends from.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::net::SocketAddr;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ni_fi_sys::*;

use super::tcp::{DEAD, HEARTBEAT, MAX_HOSTS, RETRY};
use super::wire::{self, Msg};
use super::{Event, HostId, Link, LinkStats};

/// Receive buffers kept posted, each one frame long.
const RECVS: usize = 64;
/// Sends in flight to one host at most; past it that host's frames wait in the link's
/// queue (a host that stops taking them holds up only its own).
const INFLIGHT_MAX: usize = 256;
/// How long the thread waits for a completion before it looks at the clock.
const TICK_MS: c_int = 10;

#[derive(Debug, thiserror::Error)]
pub enum OfiError {
    #[error("libfabric is not installed here ({0}): install libfabric1, or use the tcp link")]
    Missing(String),
    #[error("{call}: {msg} ({code})")]
    Call {
        call: &'static str,
        code: c_int,
        msg: String,
    },
    #[error("{0}")]
    Config(String),
}

type GetInfo = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const fi_info,
    *mut *mut fi_info,
) -> c_int;
type FreeInfo = unsafe extern "C" fn(*mut fi_info);
type DupInfo = unsafe extern "C" fn(*const fi_info) -> *mut fi_info;
type Fabric = unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut c_void) -> c_int;
type StrError = unsafe extern "C" fn(c_int) -> *const c_char;

/// The entry points libfabric exports (the rest are inline calls through ops tables).
struct Api {
    getinfo: GetInfo,
    freeinfo: FreeInfo,
    dupinfo: DupInfo,
    fabric: Fabric,
    strerror: StrError,
}

impl Api {
    fn load() -> Result<Api, OfiError> {
        let name = c"libfabric.so.1";
        // SAFETY: dlopen with a valid C string; the handle is never closed (the link lives
        // as long as the daemon).
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a C string or null.
            let e = unsafe { libc::dlerror() };
            let why = if e.is_null() {
                "dlopen failed".to_string()
            } else {
                // SAFETY: non-null C string from dlerror.
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            return Err(OfiError::Missing(why));
        }
        let sym = |n: &CStr| {
            // SAFETY: a valid handle and C string.
            let p = unsafe { libc::dlsym(h, n.as_ptr()) };
            if p.is_null() {
                Err(OfiError::Missing(format!("no {n:?} in libfabric.so.1")))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is the libfabric function of that name, whose C signature the
        // type spells (fabric.h, fi_errno.h).
        unsafe {
            Ok(Api {
                getinfo: std::mem::transmute::<*mut c_void, GetInfo>(sym(c"fi_getinfo")?),
                freeinfo: std::mem::transmute::<*mut c_void, FreeInfo>(sym(c"fi_freeinfo")?),
                dupinfo: std::mem::transmute::<*mut c_void, DupInfo>(sym(c"fi_dupinfo")?),
                fabric: std::mem::transmute::<*mut c_void, Fabric>(sym(c"fi_fabric")?),
                strerror: std::mem::transmute::<*mut c_void, StrError>(sym(c"fi_strerror")?),
            })
        }
    }

    fn check(&self, call: &'static str, rc: isize) -> Result<isize, OfiError> {
        if rc >= 0 {
            return Ok(rc);
        }
        let code = (-rc) as c_int;
        // SAFETY: fi_strerror returns a static C string for any code.
        let msg = unsafe { CStr::from_ptr((self.strerror)(code)) }
            .to_string_lossy()
            .into_owned();
        Err(OfiError::Call { call, code, msg })
    }
}

/// `struct fi_cq_msg_entry` (fi_eq.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct CqEntry {
    op_context: *mut c_void,
    flags: u64,
    len: usize,
}

/// Where the link listens and whom it reaches.
pub struct Config {
    pub me: HostId,
    /// Every host's link address, `me`'s included.
    pub addrs: Vec<SocketAddr>,
    pub digest: u64,
    /// The libfabric provider (`tcp`, `verbs`, `efa`, `cxi`, ...).
    pub provider: String,
    pub notify: Box<dyn Fn() + Send + Sync>,
}

/// One frame on its way: its context first (`FI_CONTEXT`), then its bytes.
#[repr(C)]
struct Sending {
    ctx: fi_context,
    host: HostId,
    bytes: Vec<u8>,
}

/// One posted receive buffer.
#[repr(C)]
struct Recv {
    ctx: fi_context,
    buf: Vec<u8>,
}

// SAFETY: a receive buffer is touched by the link's thread only (the provider writes it
// between post and completion, which the thread waits for before reading it).
unsafe impl Send for Recv {}

/// The libfabric objects, shared by the senders and the thread.
struct Endpoint {
    api: Api,
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    av: *mut fid_av,
    cq: *mut fid_cq,
    ep: *mut fid_ep,
    /// Every host's address in the AV, ours included.
    addr: Vec<fi_addr_t>,
}

// SAFETY: the objects are opened FI_THREAD_SAFE: libfabric serializes calls on them.
unsafe impl Send for Endpoint {}
// SAFETY: as above.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    fn open(cfg: &Config) -> Result<Endpoint, OfiError> {
        let api = Api::load()?;
        let prov = CString::new(cfg.provider.clone())
            .map_err(|_| OfiError::Config("a provider name with a NUL".into()))?;
        // SAFETY: fi_dupinfo(NULL) allocates an empty fi_info with its attribute structs;
        // fields are set in place, the provider name with a malloc'd copy that fi_freeinfo
        // frees.
        let hints = unsafe {
            let h = (api.dupinfo)(null());
            if h.is_null() {
                return Err(OfiError::Config("fi_dupinfo: out of memory".into()));
            }
            (*h).caps = FI_MSG | FI_SOURCE;
            (*h).mode = FI_CONTEXT;
            (*(*h).ep_attr).type_ = FI_EP_RDM;
            (*(*h).domain_attr).threading = FI_THREAD_SAFE;
            (*(*h).domain_attr).mr_mode = 0;
            (*(*h).tx_attr).msg_order = FI_ORDER_SAS;
            (*(*h).rx_attr).msg_order = FI_ORDER_SAS;
            (*(*h).fabric_attr).prov_name = libc::strdup(prov.as_ptr());
            h
        };
        let mut e = Endpoint {
            api,
            fabric: null_mut(),
            domain: null_mut(),
            av: null_mut(),
            cq: null_mut(),
            ep: null_mut(),
            addr: Vec::new(),
        };
        let me = cfg.addrs[cfg.me as usize];
        let r = e
            .resolve(hints, &me, FI_SOURCE, &cfg.provider)
            .and_then(|info| {
                let r = e.build(info, hints, cfg);
                // SAFETY: ours to free; the objects copied what they needed.
                unsafe { (e.api.freeinfo)(info) };
                r
            });
        // SAFETY: ours to free.
        unsafe { (e.api.freeinfo)(hints) };
        r.map(|()| e)
    }

    /// `fi_getinfo` for address `a` (`FI_SOURCE`: ours, to listen at).
    fn resolve(
        &self,
        hints: *mut fi_info,
        a: &SocketAddr,
        flags: u64,
        provider: &str,
    ) -> Result<*mut fi_info, OfiError> {
        let node = CString::new(a.ip().to_string()).expect("an address has no NUL");
        let service = CString::new(a.port().to_string()).expect("a port has no NUL");
        let mut info = null_mut();
        // SAFETY: valid C strings and hints; `info` receives a list the caller frees.
        let rc = unsafe {
            (self.api.getinfo)(
                fi_version(1, 9),
                node.as_ptr(),
                service.as_ptr(),
                flags,
                hints,
                &mut info,
            )
        };
        self.api.check("fi_getinfo", rc as isize).map_err(|e| {
            OfiError::Config(format!(
                "{e}: provider {provider:?} offers no reliable-datagram endpoint at {a}"
            ))
        })?;
        Ok(info)
    }

    fn build(
        &mut self,
        info: *mut fi_info,
        hints: *mut fi_info,
        cfg: &Config,
    ) -> Result<(), OfiError> {
        // SAFETY: `info` is a valid fi_info from fi_getinfo; every call goes through the ops
        // table of the object libfabric just returned, with out-pointers to our fields; each
        // return code is checked before the object is used.
        unsafe {
            let rc = (self.api.fabric)((*info).fabric_attr, &mut self.fabric, null_mut());
            self.api.check("fi_fabric", rc as isize)?;
            let f = self.fabric;
            let rc =
                ((*(*f).ops).domain.expect("fi_domain"))(f, info, &mut self.domain, null_mut());
            self.api.check("fi_domain", rc as isize)?;
            let d = self.domain;
            let mut av_attr = fi_av_attr {
                type_: FI_AV_TABLE,
                rx_ctx_bits: 0,
                count: cfg.addrs.len(),
                ep_per_node: 0,
                name: null(),
                map_addr: null_mut(),
                flags: 0,
            };
            let rc = ((*(*d).ops).av_open.expect("fi_av_open"))(
                d,
                &mut av_attr,
                &mut self.av,
                null_mut(),
            );
            self.api.check("fi_av_open", rc as isize)?;
            let mut cq_attr = fi_cq_attr {
                // Every send and receive can complete at once, and then some.
                size: RECVS + cfg.addrs.len() * INFLIGHT_MAX + 64,
                flags: 0,
                format: FI_CQ_FORMAT_MSG,
                wait_obj: FI_WAIT_UNSPEC,
                signaling_vector: 0,
                wait_cond: 0,
                wait_set: null_mut(),
            };
            let rc = ((*(*d).ops).cq_open.expect("fi_cq_open"))(
                d,
                &mut cq_attr,
                &mut self.cq,
                null_mut(),
            );
            self.api.check("fi_cq_open", rc as isize)?;
            let rc =
                ((*(*d).ops).endpoint.expect("fi_endpoint"))(d, info, &mut self.ep, null_mut());
            self.api.check("fi_endpoint", rc as isize)?;
            let ep = self.ep;
            let bind = (*(*ep).fid.ops).bind.expect("fi_ep_bind");
            let rc = bind(&mut (*ep).fid, &mut (*self.av).fid, 0);
            self.api.check("fi_ep_bind (av)", rc as isize)?;
            let rc = bind(&mut (*ep).fid, &mut (*self.cq).fid, FI_TRANSMIT | FI_RECV);
            self.api.check("fi_ep_bind (cq)", rc as isize)?;
            let control = (*(*ep).fid.ops).control.expect("fi_control");
            let rc = control(&mut (*ep).fid, FI_ENABLE, null_mut());
            self.api.check("fi_enable", rc as isize)?;
            for (h, a) in cfg.addrs.iter().enumerate() {
                let (peer, addr) = if h == cfg.me as usize {
                    // Our own name, as the provider gives it.
                    let mut name = vec![0u8; 256];
                    let mut len = name.len();
                    let getname = (*(*ep).cm).getname.expect("fi_getname");
                    let rc = getname(&mut (*ep).fid, name.as_mut_ptr().cast(), &mut len);
                    self.api.check("fi_getname", rc as isize)?;
                    name.truncate(len);
                    (null_mut(), name)
                } else {
                    let p = self.resolve(hints, a, 0, &cfg.provider)?;
                    let bytes =
                        std::slice::from_raw_parts((*p).dest_addr.cast::<u8>(), (*p).dest_addrlen)
                            .to_vec();
                    (p, bytes)
                };
                if !peer.is_null() {
                    (self.api.freeinfo)(peer);
                }
                let mut fa: fi_addr_t = FI_ADDR_NOTAVAIL;
                let insert = (*(*self.av).ops).insert.expect("fi_av_insert");
                let rc = insert(self.av, addr.as_ptr().cast(), 1, &mut fa, 0, null_mut());
                if rc != 1 {
                    return Err(OfiError::Config(format!(
                        "fi_av_insert of host {h}'s address {a} failed ({rc})"
                    )));
                }
                self.addr.push(fa);
            }
        }
        Ok(())
    }

    fn post_recv(&self, r: &mut Recv) -> isize {
        // SAFETY: the buffer and its context live in the thread's Vec, which never grows or
        // drops them before the daemon exits.
        unsafe {
            let recv = (*(*self.ep).msg).recv.expect("fi_recv");
            recv(
                self.ep,
                r.buf.as_mut_ptr().cast(),
                r.buf.len(),
                null_mut(),
                FI_ADDR_UNSPEC,
                (r as *mut Recv).cast(),
            )
        }
    }

    /// Hand `s` to the provider: 0, or a negative libfabric error (`-FI_EAGAIN`: later).
    fn post_send(&self, s: *mut Sending) -> isize {
        // SAFETY: `s` is a leaked Box the thread takes back at its completion; its bytes do
        // not move meanwhile.
        unsafe {
            let send = (*(*self.ep).msg).send.expect("fi_send");
            send(
                self.ep,
                (*s).bytes.as_ptr().cast(),
                (*s).bytes.len(),
                null_mut(),
                self.addr[(*s).host as usize],
                s.cast(),
            )
        }
    }
}

/// What goes before each frame on the wire: the session and the frame's number in it.
const PREFIX: usize = 16;
/// Frames (and bytes) of one host that arrived ahead of an earlier one, kept at most.
const REORDER_MAX: usize = 1024;
const REORDER_BYTES_MAX: usize = 16 << 20;

/// One host's sending side: the session its frames carry, the next frame's number, and the
/// frames waiting for the provider (it said `EAGAIN`, or too many are in flight).
#[derive(Default)]
struct Tx {
    sid: u64,
    seq: u64,
    waiting: VecDeque<Vec<u8>>,
}

struct Shared {
    ep: Endpoint,
    up: Vec<AtomicBool>,
    tx: Mutex<Vec<Tx>>,
    /// Bytes handed over and not yet completed, per host.
    queued: Vec<AtomicU64>,
    /// Sends handed over and not completed, per host.
    inflight: Vec<AtomicU64>,
    events: Mutex<Vec<Event>>,
    stats: Mutex<LinkStats>,
    frames_sent: AtomicU64,
    notify: Box<dyn Fn() + Send + Sync>,
    /// Hosts whose sends failed: the thread declares them down.
    failed: Mutex<Vec<HostId>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn prefixed(sid: u64, seq: u64, msg: &Msg) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&sid.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    msg.encode(&mut b);
    b
}

impl Shared {
    /// Number `msg` in `h`'s session and send it: now if nothing of `h`'s waits and the
    /// provider takes it, else behind what waits.
    fn send_msg(&self, h: HostId, msg: &Msg) -> bool {
        let b = {
            let mut tx = lock(&self.tx);
            let t = &mut tx[h as usize];
            if t.sid == 0 {
                // Down since the caller looked: no session to number it in.
                return false;
            }
            let b = prefixed(t.sid, t.seq, msg);
            t.seq += 1;
            let full = self.inflight[h as usize].load(Ordering::Relaxed) as usize >= INFLIGHT_MAX;
            if full || !t.waiting.is_empty() {
                t.waiting.push_back(b);
                return true;
            }
            b
        };
        if let Err(Some(b)) = self.post(h, b) {
            lock(&self.tx)[h as usize].waiting.push_back(b);
        }
        true
    }

    /// A session's opening (`HELLO`, frame 0 of session `sid`), outside the numbering.
    fn send_hello(&self, h: HostId, sid: u64, hello: &Msg) {
        let _ = self.post(h, prefixed(sid, 0, hello));
    }

    /// Hand `bytes` to the provider. `Err(Some)`: not now (`EAGAIN`), they come back;
    /// `Err(None)`: the send failed, and the host is marked for the thread to take down.
    fn post(&self, h: HostId, bytes: Vec<u8>) -> Result<(), Option<Vec<u8>>> {
        let len = bytes.len() as u64;
        let s = Box::into_raw(Box::new(Sending {
            ctx: fi_context {
                internal: [null_mut(); 4],
            },
            host: h,
            bytes,
        }));
        self.queued[h as usize].fetch_add(len, Ordering::Relaxed);
        self.inflight[h as usize].fetch_add(1, Ordering::Relaxed);
        let rc = self.ep.post_send(s);
        if rc == 0 {
            return Ok(());
        }
        self.queued[h as usize].fetch_sub(len, Ordering::Relaxed);
        self.inflight[h as usize].fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the provider did not take it: still ours.
        let s = unsafe { Box::from_raw(s) };
        if rc == -(errno::FI_EAGAIN as isize) {
            return Err(Some(s.bytes));
        }
        lock(&self.failed).push(h);
        Err(None)
    }

    /// Hand over what waits for `h`, in order, while the provider takes it.
    fn drain(&self, h: HostId) {
        loop {
            if self.inflight[h as usize].load(Ordering::Relaxed) as usize >= INFLIGHT_MAX {
                return;
            }
            let Some(b) = lock(&self.tx)[h as usize].waiting.pop_front() else {
                return;
            };
            if let Err(Some(b)) = self.post(h, b) {
                lock(&self.tx)[h as usize].waiting.push_front(b);
                return;
            }
        }
    }

    /// Start session `sid` with `h`: frames from 1 on, nothing of an older one waits.
    fn open_session(&self, h: HostId, sid: u64) {
        let mut tx = lock(&self.tx);
        tx[h as usize] = Tx {
            sid,
            seq: 1,
            waiting: VecDeque::new(),
        };
    }
}

/// The libfabric link of one daemon; its thread runs for the daemon's life.
pub struct OfiLink {
    shared: Arc<Shared>,
}

impl OfiLink {
    pub fn start(cfg: Config) -> Result<OfiLink, OfiError> {
        let hosts = cfg.addrs.len();
        if hosts == 0 || hosts > MAX_HOSTS || cfg.me as usize >= hosts {
            return Err(OfiError::Config(format!(
                "{hosts} hosts (1 to {MAX_HOSTS}), this one {}",
                cfg.me
            )));
        }
        let ep = Endpoint::open(&cfg)?;
        let shared = Arc::new(Shared {
            ep,
            up: (0..hosts).map(|_| AtomicBool::new(false)).collect(),
            tx: Mutex::new((0..hosts).map(|_| Tx::default()).collect()),
            queued: (0..hosts).map(|_| AtomicU64::new(0)).collect(),
            inflight: (0..hosts).map(|_| AtomicU64::new(0)).collect(),
            events: Mutex::new(Vec::new()),
            stats: Mutex::new(LinkStats {
                up: vec![false; hosts],
                ..Default::default()
            }),
            frames_sent: AtomicU64::new(0),
            notify: cfg.notify,
            failed: Mutex::new(Vec::new()),
        });
        let mut recvs: Vec<Recv> = (0..RECVS)
            .map(|_| Recv {
                ctx: fi_context {
                    internal: [null_mut(); 4],
                },
                buf: vec![0; PREFIX + wire::MAX_FRAME],
            })
            .collect();
        for r in recvs.iter_mut() {
            let rc = shared.ep.post_recv(r);
            shared.ep.api.check("fi_recv", rc)?;
        }
        let mut b = [0u8; 8];
        // SAFETY: getrandom into a live 8-byte buffer.
        unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
        let mut th = Thread {
            shared: shared.clone(),
            me: cfg.me,
            digest: cfg.digest,
            next_sid: u64::from_ne_bytes(b) | 1,
            peers: (0..hosts).map(|_| Peer::default()).collect(),
            recvs,
            unposted: Vec::new(),
        };
        std::thread::Builder::new()
            .name("link-ofi".into())
            .spawn(move || th.run())
            .map_err(|e| OfiError::Config(format!("starting the link thread: {e}")))?;
        Ok(OfiLink { shared })
    }
}

impl Link for OfiLink {
    fn send(&self, host: HostId, msg: &Msg) -> bool {
        let Some(up) = self.shared.up.get(host as usize) else {
            return false;
        };
        if !up.load(Ordering::Acquire) {
            return false;
        }
        if !self.shared.send_msg(host, msg) {
            return false;
        }
        self.shared.frames_sent.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn poll(&self, out: &mut Vec<Event>) {
        out.append(&mut lock(&self.shared.events));
    }

    fn queued(&self, host: HostId) -> usize {
        let waiting: usize = lock(&self.shared.tx)
            .get(host as usize)
            .map_or(0, |t| t.waiting.iter().map(Vec::len).sum());
        waiting
            + self
                .shared
                .queued
                .get(host as usize)
                .map_or(0, |q| q.load(Ordering::Relaxed) as usize)
    }

    fn stats(&self) -> LinkStats {
        let mut s = lock(&self.shared.stats).clone();
        s.frames_sent = self.shared.frames_sent.load(Ordering::Relaxed);
        s
    }
}

/// One host's receiving side, and its session's state.
#[derive(Default)]
struct Peer {
    /// The session frames are taken from (0: none), and the next frame's number.
    sid: u64,
    next: u64,
    /// Frames of the session that arrived ahead of `next`, by number: the provider may
    /// complete a long frame after a short one sent later.
    ahead: std::collections::BTreeMap<u64, Vec<u8>>,
    /// The dialing side: the session it offers while down, since when.
    dialing: u64,
    dial_since: Option<Instant>,
    last_rx: Option<Instant>,
    last_tx: Option<Instant>,
    last_hello: Option<Instant>,
}

struct Thread {
    shared: Arc<Shared>,
    me: HostId,
    digest: u64,
    /// Sessions this daemon offers are numbered from a random start, so a restarted
    /// daemon's are new to its peers.
    next_sid: u64,
    peers: Vec<Peer>,
    /// Owned here, posted to the provider (the Vec never grows, so each `Recv` stays where
    /// the provider was told it is); those the provider would not take back, by index.
    recvs: Vec<Recv>,
    unposted: Vec<usize>,
}

impl Thread {
    fn run(&mut self) {
        let mut entries = [CqEntry {
            op_context: null_mut(),
            flags: 0,
            len: 0,
        }; 64];
        let mut from = [FI_ADDR_NOTAVAIL; 64];
        let cq = self.shared.ep.cq;
        // SAFETY: the CQ lives as long as the daemon; its ops table is the provider's.
        let ops = unsafe { &*(*cq).ops };
        let sreadfrom = ops.sreadfrom;
        let readfrom = ops.readfrom.expect("fi_cq_readfrom");
        let mut events = Vec::new();
        loop {
            // SAFETY: buffers of 64 entries and addresses; the CQ is valid.
            let n = unsafe {
                match sreadfrom {
                    Some(f) => f(
                        cq,
                        entries.as_mut_ptr().cast(),
                        64,
                        from.as_mut_ptr(),
                        null(),
                        TICK_MS,
                    ),
                    None => readfrom(cq, entries.as_mut_ptr().cast(), 64, from.as_mut_ptr()),
                }
            };
            if n > 0 {
                for i in 0..n as usize {
                    self.completion(entries[i], from[i], &mut events);
                }
            } else if n == -(errno::FI_EAVAIL as isize) {
                self.error(&mut events);
            } else if sreadfrom.is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.tick(&mut events);
            if !events.is_empty() {
                lock(&self.shared.events).append(&mut events);
                (self.shared.notify)();
            }
        }
    }

    /// Which of our receive buffers a completion's context is, if it is one (told by
    /// address, not by flags: freeing a buffer of ours as a send would corrupt the heap).
    fn recv_index(&self, ctx: *mut c_void) -> Option<usize> {
        let base = self.recvs.as_ptr() as usize;
        let size = std::mem::size_of::<Recv>();
        let off = (ctx as usize).checked_sub(base)?;
        (off % size == 0 && off / size < self.recvs.len()).then_some(off / size)
    }

    /// Post receive buffer `i` again; one the provider refuses is tried again each tick.
    fn repost(&mut self, i: usize) {
        if self.shared.ep.post_recv(&mut self.recvs[i]) != 0 {
            self.unposted.push(i);
        }
    }

    fn completion(&mut self, e: CqEntry, src: fi_addr_t, events: &mut Vec<Event>) {
        if let Some(i) = self.recv_index(e.op_context) {
            let r = &self.recvs[i];
            let frame = r.buf[..e.len.min(r.buf.len())].to_vec();
            self.repost(i);
            self.arrived(frame, src, events);
        } else {
            // SAFETY: the context of a send is the Box `post` leaked.
            let s = unsafe { Box::from_raw(e.op_context.cast::<Sending>()) };
            self.sent(&s);
        }
    }

    fn sent(&mut self, s: &Sending) {
        let h = s.host as usize;
        self.shared.queued[h].fetch_sub(s.bytes.len() as u64, Ordering::Relaxed);
        self.shared.inflight[h].fetch_sub(1, Ordering::Relaxed);
        lock(&self.shared.stats).bytes_sent += s.bytes.len() as u64;
    }

    fn error(&mut self, events: &mut Vec<Event>) {
        // SAFETY: fi_cq_err_entry is plain data; zeroed is a valid start.
        let mut err: fi_cq_err_entry = unsafe { std::mem::zeroed() };
        let cq = self.shared.ep.cq;
        // SAFETY: a valid CQ and entry.
        let n = unsafe { ((*(*cq).ops).readerr.expect("fi_cq_readerr"))(cq, &mut err, 0) };
        if n != 1 || err.op_context.is_null() {
            return;
        }
        if let Some(i) = self.recv_index(err.op_context) {
            // A truncated or failed receive: count it and post the buffer again. The frame
            // is lost: its session's gap ends it within the dead time.
            lock(&self.shared.stats).protocol_errors += 1;
            self.repost(i);
            return;
        }
        // SAFETY: the context of a send is the Box `post` leaked.
        let s = unsafe { Box::from_raw(err.op_context.cast::<Sending>()) };
        self.sent(&s);
        // Only a frame of the session that runs now ends it (one of an older is no news).
        let sid = u64::from_le_bytes(s.bytes[..8].try_into().expect("a prefix"));
        let current = lock(&self.shared.tx)[s.host as usize].sid == sid;
        if current && self.shared.up[s.host as usize].load(Ordering::Acquire) {
            let why = format!("a send failed (libfabric error {})", err.err);
            self.down(s.host, &why, events);
        }
    }

    /// The side that offers sessions: the later host of each pair, as with TCP.
    fn dials(&self, h: HostId) -> bool {
        self.me > h
    }

    fn protocol_error(&mut self, h: Option<HostId>, why: &str, events: &mut Vec<Event>) {
        lock(&self.shared.stats).protocol_errors += 1;
        if let Some(h) = h {
            if self.shared.up[h as usize].load(Ordering::Acquire) {
                self.down(h, why, events);
            }
        }
    }

    fn arrived(&mut self, frame: Vec<u8>, src: fi_addr_t, events: &mut Vec<Event>) {
        {
            let mut st = lock(&self.shared.stats);
            st.frames_rcvd += 1;
            st.bytes_rcvd += frame.len() as u64;
        }
        let ep = &self.shared.ep;
        let host = ep
            .addr
            .iter()
            .position(|&a| a == src && src != FI_ADDR_NOTAVAIL);
        let Some(h) = host.filter(|&h| h != self.me as usize) else {
            // Not a host of the description: nothing it says is taken.
            return self.protocol_error(None, "a frame from no host", events);
        };
        let h = h as HostId;
        if frame.len() < PREFIX {
            return self.protocol_error(Some(h), "a frame shorter than its prefix", events);
        }
        let sid = u64::from_le_bytes(frame[..8].try_into().expect("8 bytes"));
        let seq = u64::from_le_bytes(frame[8..16].try_into().expect("8 bytes"));
        if seq == 0 {
            return self.hello(h, sid, &frame[PREFIX..], events);
        }
        let p = &mut self.peers[h as usize];
        let ours = sid == p.sid && self.shared.up[h as usize].load(Ordering::Acquire);
        // The dialing side may see the listener's first frames before its answer.
        let early = p.dialing != 0 && sid == p.dialing && p.sid != sid;
        if !(ours || early) || seq < p.next && ours {
            return; // an ended session's, or a duplicate
        }
        let bytes: usize = p.ahead.values().map(Vec::len).sum::<usize>() + frame.len();
        if p.ahead.len() >= REORDER_MAX || bytes > REORDER_BYTES_MAX {
            return self.protocol_error(Some(h), "too many frames ahead of a missing one", events);
        }
        p.ahead.insert(seq, frame);
        if ours {
            self.deliver(h, events);
        }
    }

    /// Take the session's frames that are next, in order.
    fn deliver(&mut self, h: HostId, events: &mut Vec<Event>) {
        loop {
            let p = &mut self.peers[h as usize];
            let Some(frame) = p.ahead.remove(&p.next) else {
                return;
            };
            if frame[..8] != p.sid.to_le_bytes() {
                // Of another session (numbered alike): not this one's frame.
                continue;
            }
            p.next += 1;
            // Silence is measured on frames taken in order: a gap that never fills is as
            // dead as a host that sends nothing.
            p.last_rx = Some(Instant::now());
            let body = &frame[PREFIX..];
            let msg = match Msg::frame_len(body) {
                Ok(Some(n)) if n == body.len() => Msg::decode(body),
                _ => Err(wire::WireError::TooLong(body.len())),
            };
            match msg {
                Ok(Msg::Heartbeat) => {}
                Ok(Msg::Hello { .. }) | Err(_) => {
                    return self.protocol_error(Some(h), "a malformed frame", events);
                }
                Ok(m) => events.push(Event::Frame(h, m)),
            }
        }
    }

    /// Frame 0 of session `sid` from `h`: its `HELLO`.
    fn hello(&mut self, h: HostId, sid: u64, body: &[u8], events: &mut Vec<Event>) {
        let ok = match Msg::frame_len(body) {
            Ok(Some(n)) if n == body.len() => Msg::decode(body).ok(),
            _ => None,
        };
        let Some(Msg::Hello {
            host,
            digest,
            epoch,
        }) = ok
        else {
            return self.protocol_error(Some(h), "a malformed HELLO", events);
        };
        if host != h || digest != self.digest || epoch != sid {
            return self.protocol_error(None, "a HELLO of another host or fabric", events);
        }
        let up = self.shared.up[h as usize].load(Ordering::Acquire);
        let p = &mut self.peers[h as usize];
        if self.me > h {
            // We dial: this is the answer to the session we offer, or stale.
            if up || sid != p.dialing {
                return;
            }
        } else {
            // They dial: a session they offer. The one we run is answered again (our
            // answer may be behind); a new one replaces it.
            if up && sid == p.sid {
                p.last_rx = Some(Instant::now());
                return self.answer(h, sid);
            }
            if up {
                self.down(h, "it offered a new session (its daemon restarted)", events);
            }
            self.answer(h, sid);
        }
        let p = &mut self.peers[h as usize];
        p.sid = sid;
        p.next = 1;
        p.ahead.retain(|_, f| f[..8] == sid.to_le_bytes());
        p.last_rx = Some(Instant::now());
        self.shared.open_session(h, sid);
        self.shared.up[h as usize].store(true, Ordering::Release);
        {
            let mut st = lock(&self.shared.stats);
            st.up[h as usize] = true;
            st.connects += 1;
        }
        tracing::info!(host = h, "libfabric link up");
        events.push(Event::Up(h));
        self.deliver(h, events);
    }

    fn answer(&mut self, h: HostId, sid: u64) {
        let hello = Msg::Hello {
            host: self.me,
            digest: self.digest,
            epoch: sid,
        };
        self.peers[h as usize].last_tx = Some(Instant::now());
        self.shared.send_hello(h, sid, &hello);
    }

    fn down(&mut self, h: HostId, why: &str, events: &mut Vec<Event>) {
        self.shared.up[h as usize].store(false, Ordering::Release);
        self.shared.open_session(h, 0);
        lock(&self.shared.stats).up[h as usize] = false;
        let p = &mut self.peers[h as usize];
        p.sid = 0;
        p.dialing = 0;
        p.ahead.clear();
        tracing::info!(host = h, "libfabric link down: {why}");
        events.push(Event::Down(h, why.to_string()));
    }

    fn tick(&mut self, events: &mut Vec<Event>) {
        let now = Instant::now();
        for i in std::mem::take(&mut self.unposted) {
            self.repost(i);
        }
        let failed = std::mem::take(&mut *lock(&self.shared.failed));
        for h in failed {
            if self.shared.up[h as usize].load(Ordering::Acquire) {
                self.down(h, "a send failed", events);
            }
        }
        for h in 0..self.peers.len() as HostId {
            if h == self.me {
                continue;
            }
            self.shared.drain(h);
            let up = self.shared.up[h as usize].load(Ordering::Acquire);
            let p = &self.peers[h as usize];
            if up {
                if p.last_rx.is_some_and(|t| now.duration_since(t) > DEAD) {
                    lock(&self.shared.stats).timeouts += 1;
                    self.down(h, "silent past the dead time", events);
                    continue;
                }
                if p.last_tx.is_none_or(|t| now.duration_since(t) >= HEARTBEAT) {
                    self.peers[h as usize].last_tx = Some(now);
                    let _ = self.shared.send_msg(h, &Msg::Heartbeat);
                }
            } else if self.dials(h) && p.last_hello.is_none_or(|t| now.duration_since(t) >= RETRY) {
                // The same session is offered again (its answer may have been lost, or be
                // slow) until the dead time passes; then a new one, so that an answer to an
                // old one is stale.
                let p = &mut self.peers[h as usize];
                let fresh =
                    p.dialing == 0 || p.dial_since.is_none_or(|t| now.duration_since(t) > DEAD);
                if fresh {
                    p.dialing = self.next_sid;
                    p.dial_since = Some(now);
                    p.ahead.clear();
                    self.next_sid = self.next_sid.wrapping_add(2);
                }
                let sid = p.dialing;
                p.last_hello = Some(now);
                let hello = Msg::Hello {
                    host: self.me,
                    digest: self.digest,
                    epoch: sid,
                };
                self.shared.send_hello(h, sid, &hello);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// `n` distinct free ports: each held until all are chosen, so that no two are the same
    /// port given out again (a link bound to its peer's port took the peer's frames for a
    /// restart: "it offered a new session").
    fn free_ports(n: usize) -> Vec<u16> {
        let held: Vec<_> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        held.iter()
            .map(|l| l.local_addr().expect("a bound port").port())
            .collect()
    }

    fn link(me: HostId, addrs: &[SocketAddr], digest: u64) -> (OfiLink, mpsc::Receiver<()>) {
        let (t, r) = mpsc::channel();
        let l = OfiLink::start(Config {
            me,
            addrs: addrs.to_vec(),
            digest,
            provider: "tcp".into(),
            notify: Box::new(move || {
                let _ = t.send(());
            }),
        })
        .expect("libfabric's tcp provider (libfabric1 is installed by tests/setup)");
        (l, r)
    }

    fn addrs() -> Vec<SocketAddr> {
        free_ports(2)
            .into_iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect()
    }

    #[test]
    fn frames_cross_over_libfabric_in_order_and_idle_links_stay_up() {
        let addrs = addrs();
        let (a, ra) = link(0, &addrs, 9);
        let (b, rb) = link(1, &addrs, 9);
        crate::link::conformance::frames_cross_in_order(&a, &ra, &b, &rb, 300);
        assert!(a.stats().frames_rcvd >= 300);
        // Everything sent completes. The idle link's heartbeats go on meanwhile (one every
        // HEARTBEAT), and one just posted is queued until the link's thread reaps its
        // completion (within a tick): the queue must empty between two of them, not at
        // one chosen instant.
        let until = Instant::now() + HEARTBEAT * 10;
        while b.queued(0) != 0 {
            assert!(
                Instant::now() < until,
                "sends never completed: {} bytes still queued",
                b.queued(0)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_peer_with_another_fabric_is_refused_over_libfabric() {
        let addrs = addrs();
        let (a, ra) = link(0, &addrs, 1);
        let (b, _rb) = link(1, &addrs, 2);
        std::thread::sleep(Duration::from_millis(600));
        let mut v = Vec::new();
        a.poll(&mut v);
        assert!(v.is_empty(), "no Up for a stranger: {v:?}");
        assert!(!b.send(0, &Msg::Heartbeat), "nothing goes to a host not up");
        assert!(a.stats().protocol_errors >= 1);
        drop(ra);
    }
}
