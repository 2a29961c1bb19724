//! The daemon around the NIs: run directory, lock, sockets, signals.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ni_abi::window::Kind;
use serde::Deserialize;

use crate::fabric::partition::Partitions;
use crate::fabric::topology::{Dims, Torus};
use crate::fabric::{Doorbell, Fabric};
use crate::ni::Ni;
use crate::server::{self, Attachment, Slot};

pub const MAX_NODES: u32 = 4096;

/// What a config file may set; command-line flags override it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub nodes: Option<u32>,
    pub run_dir: Option<PathBuf>,
    /// `[[partition]]` tables with `name` and `nodes`; default: one partition of all NIs.
    #[serde(default)]
    pub partition: Vec<PartitionConfig>,
    /// How long a collective may wait for its last member before it fails everywhere.
    pub collective_timeout_secs: Option<f64>,
    /// The SSD-T90 torus, `XxYxZ` (e.g. "2x4x2"): NI i is logical PE i on the i-th node
    /// (X fastest); nodes past the NIs are spares that `ni-ctl map-out node` moves logical
    /// PEs to. Default: the smallest torus that holds the NIs.
    pub torus: Option<String>,
    /// The partitions' window for the direct path: `true`/`"isolated"` (default),
    /// `"shared"`, `false`/`"off"` (as `ni-device --direct`).
    pub direct: Option<DirectConfig>,
}

/// `direct` in the config file: a boolean or a `--direct` word.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum DirectConfig {
    On(bool),
    Word(String),
}

impl DirectConfig {
    pub fn kind(&self) -> Result<Option<Kind>, String> {
        match self {
            DirectConfig::On(true) => Ok(Some(Kind::Isolated)),
            DirectConfig::On(false) => Ok(None),
            DirectConfig::Word(w) => parse_direct(w),
        }
    }
}

/// `--direct`: the window kind partitions get, or none.
pub fn parse_direct(s: &str) -> Result<Option<Kind>, String> {
    match s {
        "isolated" | "on" => Ok(Some(Kind::Isolated)),
        "shared" => Ok(Some(Kind::Shared)),
        "off" => Ok(None),
        _ => Err(format!("{s:?}: expected isolated, shared or off")),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionConfig {
    pub name: String,
    pub nodes: Vec<u32>,
}

/// A fabric that spans hosts (`ni-device --fabric FILE --host NAME`): every daemon of it
/// runs with the same file (device/abi/links.md). NIs are numbered across hosts in the
/// file's order: the first host's are 0.., the next host's follow.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricDescription {
    #[serde(rename = "host")]
    pub hosts: Vec<HostConfig>,
    /// `[[partition]]` tables as in the config file, in fabric-wide NI numbers; default: one
    /// partition of every NI.
    #[serde(default)]
    pub partition: Vec<PartitionConfig>,
    /// The torus of the whole fabric, `XxYxZ` (default: the smallest holding every NI).
    pub torus: Option<String>,
    pub collective_timeout_secs: Option<f64>,
    /// The host whose daemon is the partition manager (default: the first).
    pub manager: Option<String>,
    /// What carries frames between daemons: `tcp` (default: io_uring, nothing to install)
    /// or `libfabric:PROVIDER` (reliable datagrams of `tcp`, `verbs`, `efa`, `cxi`, ...).
    pub transport: Option<String>,
}

/// What carries frames between daemons (`transport` in the fabric description).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Libfabric(String),
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Tcp => f.write_str("tcp"),
            Transport::Libfabric(p) => write!(f, "libfabric:{p}"),
        }
    }
}

impl Transport {
    pub fn parse(s: Option<&str>) -> Result<Transport> {
        match s {
            None | Some("tcp") => Ok(Transport::Tcp),
            Some(t) => match t.strip_prefix("libfabric") {
                Some("") => Ok(Transport::Libfabric("tcp".into())),
                Some(p) if p.len() > 1 && p.starts_with(':') => {
                    Ok(Transport::Libfabric(p[1..].to_string()))
                }
                _ => {
                    bail!("transport {t:?}: \"tcp\" or \"libfabric:PROVIDER\" (e.g. libfabric:tcp)")
                }
            },
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub name: String,
    /// Where its daemon listens for the others: `ADDRESS:PORT`.
    pub link: String,
    /// How many NIs it hosts.
    pub nis: u32,
}

/// What the control socket shows of the fabric's hosts, and the partition manager's log.
pub struct SpanView {
    pub me: u32,
    pub manager: u32,
    pub names: Vec<String>,
    pub links: Vec<String>,
    pub bases: Vec<u32>,
    pub digest: u64,
    /// `tcp` or `libfabric:PROVIDER`.
    pub transport: String,
    pub queries: Arc<crate::fabric::remote::Queries>,
    /// The fabric-wide changes (control requests, JSON) in the order the manager made them:
    /// on the manager the whole log, elsewhere how many of them were applied here.
    pub changes: Mutex<ChangeLog>,
}

#[derive(Default)]
pub struct ChangeLog {
    pub log: Vec<Vec<u8>>,
    pub applied: u64,
}

impl SpanView {
    /// The host of NI `n`.
    pub fn host_of(&self, n: u32) -> Option<u32> {
        (0..self.names.len())
            .find(|&h| (self.bases[h]..self.bases[h + 1]).contains(&n))
            .map(|h| h as u32)
    }
}

/// This daemon's place in a fabric that spans hosts.
pub struct Span {
    pub me: u32,
    pub manager: u32,
    pub names: Vec<String>,
    pub addrs: Vec<std::net::SocketAddr>,
    /// The first NI of each host, and one past the last host's.
    pub bases: Vec<u32>,
    /// Of the description's text: daemons with different ones refuse each other.
    pub digest: u64,
    pub transport: Transport,
}

impl Span {
    /// Read `path` and find `host` in it.
    pub fn load(path: &Path, host: &str) -> Result<(Span, FabricDescription)> {
        use std::net::ToSocketAddrs;
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let d: FabricDescription =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if d.hosts.is_empty() || d.hosts.len() > crate::link::tcp::MAX_HOSTS {
            bail!(
                "{}: {} hosts; a fabric has 1 to {}",
                path.display(),
                d.hosts.len(),
                crate::link::tcp::MAX_HOSTS
            );
        }
        let me = d
            .hosts
            .iter()
            .position(|h| h.name == host)
            .with_context(|| {
                let names: Vec<&str> = d.hosts.iter().map(|h| h.name.as_str()).collect();
                format!("{}: no host {host:?} (it names {names:?})", path.display())
            })? as u32;
        let mut bases = vec![0u32];
        let mut addrs = Vec::new();
        for h in &d.hosts {
            if h.nis == 0 {
                bail!("{}: host {:?} hosts no NI", path.display(), h.name);
            }
            if d.hosts.iter().filter(|o| o.name == h.name).count() > 1 {
                bail!("{}: host {:?} is named twice", path.display(), h.name);
            }
            let next = bases.last().unwrap().saturating_add(h.nis);
            if next > MAX_NODES {
                bail!("{}: more than {MAX_NODES} NIs in all", path.display());
            }
            bases.push(next);
            let a = h
                .link
                .to_socket_addrs()
                .with_context(|| format!("host {:?}: link address {:?}", h.name, h.link))?
                .next()
                .with_context(|| format!("host {:?}: {:?} resolves to nothing", h.name, h.link))?;
            addrs.push(a);
        }
        let manager =
            match &d.manager {
                None => 0,
                Some(m) => d.hosts.iter().position(|h| &h.name == m).with_context(|| {
                    format!("{}: manager {m:?} is not a [[host]]", path.display())
                })? as u32,
            };
        let transport = Transport::parse(d.transport.as_deref())
            .with_context(|| format!("{}: transport", path.display()))?;
        // FNV-1a: any change to the file, even a comment, makes daemons refuse each other,
        // which is the point: they must agree on numbering, partitions and torus.
        let digest = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        Ok((
            Span {
                me,
                manager,
                names: d.hosts.iter().map(|h| h.name.clone()).collect(),
                addrs,
                bases,
                digest,
                transport,
            },
            d,
        ))
    }

    pub fn total(&self) -> u32 {
        *self.bases.last().expect("bases")
    }

    /// This daemon's NIs.
    pub fn local(&self) -> std::ops::Range<u32> {
        self.bases[self.me as usize]..self.bases[self.me as usize + 1]
    }

    /// The host of each NI of the fabric.
    pub fn host_of(&self) -> Vec<u32> {
        (0..self.names.len() as u32)
            .flat_map(|h| (self.bases[h as usize]..self.bases[h as usize + 1]).map(move |_| h))
            .collect()
    }
}

impl ConfigFile {
    pub fn load(path: &Path) -> Result<ConfigFile> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

pub struct Daemon {
    pub run_dir: PathBuf,
    /// Every NI of the fabric; those of other hosts (see `local`) are stand-ins no one
    /// attaches to.
    pub slots: Vec<Arc<Slot>>,
    /// The NIs this daemon serves.
    pub local: std::ops::Range<u32>,
    /// The link to the other daemons when the fabric spans hosts.
    pub link: Option<Arc<dyn crate::link::Link>>,
    /// This daemon's place among them.
    pub span: Option<SpanView>,
    pub fabric: Arc<Fabric>,
    pub started: Instant,
    /// Planned restarts this daemon went through (`crate::handover`).
    pub restarts: u64,
    /// How long the last one held clients up (freeze to serving), if there was one.
    pub last_pause: Option<std::time::Duration>,
    /// The sockets, for a handover: the serving threads own them for the daemon's life.
    listener_fds: Vec<(u32, std::os::fd::RawFd)>,
    control_fd: std::os::fd::RawFd,
    _lock: File,
}

pub fn socket_path(run_dir: &Path, node: u32) -> PathBuf {
    run_dir.join(format!("ni{node}.sock"))
}

pub fn control_path(run_dir: &Path) -> PathBuf {
    run_dir.join("control.sock")
}

pub fn pid_path(run_dir: &Path) -> PathBuf {
    run_dir.join("ni-device.pid")
}

/// Take the run directory's lock, so two daemons never share it. The lock is an flock on
/// the pid file: it dies with the process, so a crashed daemon leaves nothing that blocks
/// the next one, only stale sockets, which the holder of the lock removes.
fn take_lock(run_dir: &Path) -> Result<File> {
    let path = pid_path(run_dir);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let mut pid = String::new();
        let _ = f.read_to_string(&mut pid);
        bail!(
            "another ni-device (pid {}) is serving {}",
            pid.trim(),
            run_dir.display()
        );
    }
    f.set_len(0)?;
    f.rewind()?;
    writeln!(f, "{}", std::process::id())?;
    Ok(f)
}

/// The name a socket served at `path` was bound under (`bind_fresh`), which the kernel keeps
/// reporting (`/proc/net/unix`) after the rename.
pub fn bound_name(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    PathBuf::from(tmp)
}

fn bind_fresh(path: &Path, mode: u32) -> Result<UnixListener> {
    if path.exists() {
        tracing::warn!("removing stale socket {}", path.display());
        fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    // Bound and listening under a temporary name, then renamed into place: a client that
    // waits for the path to appear must never find it between bind() and listen(), where
    // a connect is refused.
    let tmp = bound_name(path);
    let _ = fs::remove_file(&tmp);
    let l = UnixListener::bind(&tmp).with_context(|| format!("binding {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(l)
}

/// For as long as the daemon lives: bump every NI's `HEARTBEAT` word (fastpath.md, "A daemon
/// that dies"), and interrupt an eventfd write stuck for a second (irq.rs). Its own thread,
/// so a busy or sleeping poller never makes the heartbeat stand still.
fn heartbeat(slots: &[Arc<Slot>]) {
    use ni_abi::fastpath::ctrl::{HEARTBEAT, HEARTBEAT_PERIOD_MS};
    loop {
        for slot in slots {
            let (sram, outbox) = {
                let ni = server::lock(&slot.ni);
                (ni.sram.clone(), ni.irqs.outbox().clone())
            };
            sram.atomic_u32(HEARTBEAT)
                .fetch_add(1, std::sync::atomic::Ordering::Release);
            // The watchdog of interrupt delivery rides along (irq.rs).
            if outbox.kick_if_stuck() {
                tracing::debug!("a session's eventfd write was stuck: interrupted");
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(HEARTBEAT_PERIOD_MS));
    }
}

/// Raise the soft descriptor limit to the hard one: every client's DMA maps, eventfds and
/// sockets are descriptors of this process (each client's share is capped, `dma::MAX_FILES`).
fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                tracing::debug!(
                    "cannot raise RLIMIT_NOFILE: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

impl Daemon {
    /// Set up the run directory and start serving every NI and the control socket.
    /// `torus`: the torus dimensions `XxYxZ` (default: the smallest holding `nodes`).
    pub fn start(
        run_dir: &Path,
        nodes: u32,
        partitions: &[PartitionConfig],
        collective_timeout: std::time::Duration,
        torus: Option<&str>,
        direct: Option<Kind>,
    ) -> Result<Arc<Daemon>> {
        Self::start_or_resume(
            run_dir,
            nodes,
            partitions,
            collective_timeout,
            torus,
            direct,
            None,
            None,
        )
    }

    pub fn lock_fd(&self) -> std::os::fd::RawFd {
        self._lock.as_raw_fd()
    }

    pub fn control_fd(&self) -> std::os::fd::RawFd {
        self.control_fd
    }

    pub fn listener_fds(&self) -> Vec<(u32, std::os::fd::RawFd)> {
        self.listener_fds.clone()
    }

    /// As [`Daemon::start`]; with `span`, as one host of a fabric that spans hosts (`nodes`
    /// is then the whole fabric's); with `handover`, take over what an earlier process of this
    /// daemon handed over (`crate::handover`) instead of starting empty: its sockets, its
    /// clients' sessions, memory and eventfds, its NIs' and fabric's state.
    #[allow(clippy::too_many_arguments)]
    pub fn start_or_resume(
        run_dir: &Path,
        nodes: u32,
        partitions: &[PartitionConfig],
        collective_timeout: std::time::Duration,
        torus: Option<&str>,
        direct: Option<Kind>,
        span: Option<Span>,
        handover: Option<crate::handover::Image>,
    ) -> Result<Arc<Daemon>> {
        let mut fds = crate::handover::Fds::new();
        if let Some(img) = &handover {
            // Every descriptor the image names is owned from here: what nothing claims
            // (a session that is not resumed) is closed, not leaked.
            fds = crate::handover::Fds::of(img);
            if span.is_some() {
                bail!("a handover into a daemon of a fabric that spans hosts is not supported");
            }
            if img.nis.len() != nodes as usize {
                bail!(
                    "the handover carries {} NIs, this daemon was started with {nodes}",
                    img.nis.len()
                );
            }
        }
        let local = span.as_ref().map_or(0..nodes, |s| s.local());
        if nodes == 0 || nodes > MAX_NODES {
            bail!("--nodes must be between 1 and {MAX_NODES}, not {nodes}");
        }
        let torus = match torus {
            None => Torus::for_nodes(nodes)?,
            Some(s) => {
                let dims: Dims = s.parse()?;
                Torus::with_dims(dims, nodes).with_context(|| {
                    format!("torus {dims} for {nodes} NIs (one node per NI, spares beyond)")
                })?
            }
        };
        let partitions = if partitions.is_empty() {
            Partitions::all(nodes)
        } else {
            let mut p = Partitions::empty(nodes);
            for c in partitions {
                p.create(&c.name, c.nodes.clone())
                    .with_context(|| format!("partition {:?} in the config file", c.name))?;
            }
            p
        };
        raise_fd_limit();
        crate::irq::install_kick_handler();
        let doorbell = Arc::new(Doorbell::default());
        fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
        let run_dir = run_dir.canonicalize()?;
        let inherited = |fds: &mut crate::handover::Fds, fd, what: &str| {
            fds.file(fd)
                .with_context(|| format!("the handed-over {what}"))
        };
        let lock = match &handover {
            // The lock is the open file description's, which the exec kept.
            Some(img) => inherited(&mut fds, img.lock_fd, "run directory lock")?,
            None => take_lock(&run_dir)?,
        };
        let mut handed: HashMap<u32, crate::ni::NiImage> = HashMap::new();
        let mut bound_windows: HashMap<u32, crate::fabric::window::WindowImage> = HashMap::new();
        let mut sockets: HashMap<u32, std::os::fd::RawFd> = HashMap::new();
        let mut sessions: HashMap<u32, crate::handover::SessionImage> = HashMap::new();
        let mut control_fd = None;
        let mut controls = Vec::new();
        let mut fabric_img = None;
        let (mut restarts, mut uptime, mut froze_at) = (0, Duration::ZERO, 0);
        let mut reply_to = None;
        if let Some(img) = handover {
            handed = img.nis.into_iter().map(|n| (n.index, n)).collect();
            sockets = img.listeners.into_iter().collect();
            sessions = img.sessions.into_iter().map(|s| (s.ni, s)).collect();
            control_fd = Some(img.control_fd);
            controls = img.controls;
            fabric_img = Some(img.fabric);
            restarts = img.restarts + 1;
            uptime = Duration::from_nanos(img.uptime_ns);
            froze_at = img.froze_at_ns;
            reply_to = img.reply_to;
            tracing::info!(
                from = %img.from_version,
                sessions = sessions.len(),
                "taking over from the previous process of this daemon"
            );
        }
        let mut slots = Vec::new();
        let mut listeners = Vec::new();
        for i in 0..nodes {
            let mut ni =
                Ni::new(i, doorbell.clone()).with_context(|| format!("creating NI {i}"))?;
            if let Some(mut img) = handed.remove(&i) {
                if let Some(w) = img.window.take() {
                    bound_windows.insert(i, w);
                }
                // One NI that cannot be taken back costs its own client the session (it
                // sees the connection close, as after a crash), not the others theirs.
                if let Err(e) = ni.restore(img, |fd| fds.file(fd)) {
                    tracing::error!(ni = i, "not carried over, its client is let go: {e}");
                    sessions.remove(&i);
                    ni =
                        Ni::new(i, doorbell.clone()).with_context(|| format!("creating NI {i}"))?;
                }
            }
            slots.push(Arc::new(Slot {
                ni: Mutex::new(ni),
                attachment: Mutex::new(Attachment::default()),
                window: Mutex::new(None),
            }));
            // The NI sockets are for the same user's QEMU and processes.
            if local.contains(&i) {
                let l = match sockets.get(&i) {
                    Some(&fd) => UnixListener::from(std::os::fd::OwnedFd::from(inherited(
                        &mut fds,
                        fd,
                        "NI socket",
                    )?)),
                    None => bind_fresh(&socket_path(&run_dir, i), 0o600)?,
                };
                listeners.push((i, l));
            }
        }
        let control = match control_fd {
            Some(fd) => UnixListener::from(std::os::fd::OwnedFd::from(inherited(
                &mut fds,
                fd,
                "control socket",
            )?)),
            None => bind_fresh(&control_path(&run_dir), 0o600)?,
        };
        let fabric = Arc::new(Fabric::new(
            doorbell.clone(),
            slots.clone(),
            partitions,
            collective_timeout,
            torus,
        ));
        let mut link: Option<Arc<dyn crate::link::Link>> = None;
        let mut view = None;
        if let Some(span) = &span {
            let bell = doorbell.clone();
            let what = || {
                format!(
                    "starting the link of host {:?}",
                    span.names[span.me as usize]
                )
            };
            let l: Arc<dyn crate::link::Link> = match &span.transport {
                Transport::Tcp => Arc::new(
                    crate::link::tcp::TcpLink::start(crate::link::tcp::Config {
                        me: span.me,
                        addrs: span.addrs.clone(),
                        digest: span.digest,
                        notify: Box::new(move || bell.ring()),
                    })
                    .with_context(what)?,
                ),
                Transport::Libfabric(provider) => Arc::new(
                    crate::link::ofi::OfiLink::start(crate::link::ofi::Config {
                        me: span.me,
                        addrs: span.addrs.clone(),
                        digest: span.digest,
                        provider: provider.clone(),
                        notify: Box::new(move || bell.ring()),
                    })
                    .with_context(what)?,
                ),
            };
            let mut remote = crate::fabric::remote::Remote::new(
                l.clone(),
                span.me,
                span.host_of(),
                span.names.clone(),
            );
            remote.manager = span.manager;
            view = Some(SpanView {
                me: span.me,
                manager: span.manager,
                names: span.names.clone(),
                links: span.addrs.iter().map(|a| a.to_string()).collect(),
                bases: span.bases.clone(),
                digest: span.digest,
                transport: span.transport.to_string(),
                queries: remote.queries.clone(),
                changes: Mutex::new(ChangeLog::default()),
            });
            fabric.lock().remote = Some(remote);
            link = Some(l);
        }
        // Attached before the windows are synced: a partition that has no window because a
        // member was attached when it was made must not get one now.
        for (&i, s) in &sessions {
            *slots[i as usize]
                .attachment
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Attachment {
                attached: true,
                client_pid: s.client_pid,
                stream_fd: None,
            };
        }
        if let Some(img) = fabric_img {
            // The image was checked by this binary before the exec; should the fabric still
            // not come back, every NI is presented as reset (clients see EPOCH move and
            // attach again) rather than anyone's session ending.
            if let Err(e) = fabric.lock().restore(img, |fd| fds.file(fd)) {
                tracing::error!("the fabric's state was not carried over, every NI is reset: {e}");
                for slot in &slots {
                    server::lock(&slot.ni).attached();
                }
            }
        }
        // After the remote part: partitions that span hosts get no window.
        fabric.set_direct(direct);
        let mut resumed = HashMap::new();
        for (i, s) in sessions {
            let stream = match inherited(&mut fds, s.fd, "client session") {
                Ok(f) => UnixStream::from(std::os::fd::OwnedFd::from(f)),
                Err(e) => {
                    tracing::error!(ni = i, "session not carried over: {e:#}");
                    *slots[i as usize]
                        .attachment
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Attachment::default();
                    server::lock(&slots[i as usize].ni).detach();
                    continue;
                }
            };
            let slot = &slots[i as usize];
            let mut window = slot
                .window
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            // The session keeps the window it was handed, even one its partition no longer
            // has: its client mapped that one.
            let bound = bound_windows.remove(&i);
            if window.as_ref().map(|w| w.serial) != bound.as_ref().map(|b| b.serial) {
                window = bound.and_then(|b| {
                    let files = b
                        .fds
                        .iter()
                        .map(|&fd| fds.file(fd))
                        .collect::<std::io::Result<Vec<_>>>();
                    match files.map_err(|e| e.to_string()).and_then(|f| {
                        crate::fabric::window::Window::adopt(&b, f).map_err(|e| e.to_string())
                    }) {
                        Ok(w) => Some(Arc::new(w)),
                        Err(e) => {
                            tracing::error!(
                                ni = i,
                                "its session's window was not carried over: {e}"
                            );
                            None
                        }
                    }
                });
            }
            server::lock(&slot.ni).window = window;
            resumed.insert(i, stream);
        }
        let reply_to = reply_to.and_then(|fd| inherited(&mut fds, fd, "control connection").ok());
        let controls: Vec<UnixStream> = controls
            .into_iter()
            .filter_map(|fd| inherited(&mut fds, fd, "control connection").ok())
            .map(|f| UnixStream::from(std::os::fd::OwnedFd::from(f)))
            .collect();
        // Every inherited descriptor is duplicated where it is used; the originals go.
        drop(fds);
        let listener_fds = listeners.iter().map(|(i, l)| (*i, l.as_raw_fd())).collect();
        let daemon = Arc::new(Daemon {
            run_dir,
            local: local.clone(),
            link,
            span: view,
            slots,
            fabric: fabric.clone(),
            started: Instant::now()
                .checked_sub(uptime)
                .unwrap_or_else(Instant::now),
            restarts,
            last_pause: (restarts > 0).then(|| {
                Duration::from_nanos(crate::handover::monotonic_ns().saturating_sub(froze_at))
            }),
            listener_fds,
            control_fd: control.as_raw_fd(),
            _lock: lock,
        });
        std::thread::Builder::new()
            .name("fabric".into())
            .spawn(move || fabric.run())?;
        // The heartbeat first: clients watch it, and a handover has already paused them.
        let slots = daemon.slots.clone();
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || heartbeat(&slots))?;
        for (i, l) in listeners {
            let slot = daemon.slots[i as usize].clone();
            let stream = resumed.remove(&i);
            let fabric = daemon.fabric.clone();
            std::thread::Builder::new()
                .name(format!("ni{i}"))
                .spawn(move || server::serve(slot, l, stream, fabric))?;
        }
        if daemon.span.as_ref().is_some_and(|s| s.me == s.manager) {
            // The partition manager's changes of an earlier life, before anyone can ask.
            crate::control::replay_changes(&daemon)?;
        }
        let d = daemon.clone();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || crate::control::serve(d, control, controls))?;
        if daemon.span.is_some() {
            let d = daemon.clone();
            std::thread::Builder::new()
                .name("peer-queries".into())
                .spawn(move || crate::control::serve_peers(d))?;
        }
        if let Some(mut c) = reply_to {
            crate::control::answer_restart(&daemon, &mut c);
        }
        if let Some(p) = daemon.last_pause {
            tracing::info!(
                restarts = daemon.restarts,
                paused_ms = p.as_secs_f64() * 1e3,
                "planned restart done: every client carried over"
            );
        }
        match &span {
            None => tracing::info!(
                nodes,
                run_dir = %daemon.run_dir.display(),
                "ni-device serving"
            ),
            Some(s) => tracing::info!(
                host = %s.names[s.me as usize],
                nis = ?daemon.local,
                of = nodes,
                hosts = s.names.len(),
                run_dir = %daemon.run_dir.display(),
                "ni-device serving its part of a fabric that spans hosts"
            ),
        }
        Ok(daemon)
    }

    /// Remove what the daemon created in the run directory.
    pub fn cleanup(&self) {
        for i in self.local.clone() {
            let _ = fs::remove_file(socket_path(&self.run_dir, i));
        }
        let _ = fs::remove_file(control_path(&self.run_dir));
        let _ = fs::remove_file(pid_path(&self.run_dir));
    }
}
