//! The daemon around the NIs: run directory, lock, sockets, signals.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

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

impl ConfigFile {
    pub fn load(path: &Path) -> Result<ConfigFile> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

pub struct Daemon {
    pub run_dir: PathBuf,
    pub slots: Vec<Arc<Slot>>,
    pub fabric: Arc<Fabric>,
    pub started: Instant,
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
        let lock = take_lock(&run_dir)?;
        let mut slots = Vec::new();
        let mut listeners = Vec::new();
        for i in 0..nodes {
            let ni = Ni::new(i, doorbell.clone()).with_context(|| format!("creating NI {i}"))?;
            slots.push(Arc::new(Slot {
                ni: Mutex::new(ni),
                attachment: Mutex::new(Attachment::default()),
                window: Mutex::new(None),
            }));
            // The NI sockets are for the same user's QEMU and processes.
            listeners.push(bind_fresh(&socket_path(&run_dir, i), 0o600)?);
        }
        let control = bind_fresh(&control_path(&run_dir), 0o600)?;
        let fabric = Arc::new(Fabric::new(
            doorbell,
            slots.clone(),
            partitions,
            collective_timeout,
            torus,
        ));
        fabric.set_direct(direct);
        let daemon = Arc::new(Daemon {
            run_dir,
            slots,
            fabric: fabric.clone(),
            started: Instant::now(),
            _lock: lock,
        });
        std::thread::Builder::new()
            .name("fabric".into())
            .spawn(move || fabric.run())?;
        for (i, l) in listeners.into_iter().enumerate() {
            let slot = daemon.slots[i].clone();
            std::thread::Builder::new()
                .name(format!("ni{i}"))
                .spawn(move || server::serve(slot, l))?;
        }
        let slots = daemon.slots.clone();
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || heartbeat(&slots))?;
        let d = daemon.clone();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || crate::control::serve(d, control))?;
        tracing::info!(
            nodes,
            run_dir = %daemon.run_dir.display(),
            "ni-device serving"
        );
        Ok(daemon)
    }

    /// Remove what the daemon created in the run directory.
    pub fn cleanup(&self) {
        for i in 0..self.slots.len() as u32 {
            let _ = fs::remove_file(socket_path(&self.run_dir, i));
        }
        let _ = fs::remove_file(control_path(&self.run_dir));
        let _ = fs::remove_file(pid_path(&self.run_dir));
    }
}
