//! Planned restart and upgrade without letting go of anyone (`ni-ctl daemon restart`,
//! SIGHUP): the daemon brings every thread to rest, writes what it holds into an image, and
//! executes the new binary in its own process, which takes the image back.
//!
//! The way nginx upgrades its binary: descriptors cross `execve` by inheritance (their
//! close-on-exec flag cleared), state crosses in a memfd whose number is the new process's
//! `--handover-fd`. The process keeps its pid, so the run directory's lock, the pid file, a
//! supervisor's or `nirun`'s view of the daemon, and every client's socket stay as they are.
//! What crosses, and who owns each piece while it does, is in `device/abi/handover.md`.
//!
//! Steps, each bounded:
//! 1. Preflight: the new binary must run and speak this image format (`--handover-format`);
//!    otherwise the restart is refused and nothing stops.
//! 2. Freeze: every NI's session thread finishes the vfio-user message it is in and parks
//!    between messages (its client's next messages wait in the socket); every idle NI's
//!    accept thread parks; the poller finishes its pass and parks. Clients' fast-path
//!    requests wait in their rings, and members of a partition window keep exchanging
//!    through it: the daemon is not on that path. Not at rest within [`FREEZE_WAIT`]: the
//!    restart is refused with the names of what did not stop, and everything thaws.
//! 3. Capture: each NI's models by value, its client's memory (SRAM, DMA maps) and
//!    eventfds by descriptor; the fabric's state; the windows' files; the sockets.
//! 4. `execve`. If it fails, everything thaws and the restart is refused; after it, the
//!    new process adopts the image (`Daemon::start_or_resume`) and resumes the same sessions.
//!
//! The heartbeat keeps beating until the exec, and the new process starts it before
//! anything else, so no client takes the pause for a dead daemon.

pub mod serde_with;

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::daemon::Daemon;
use crate::fabric::handover::FabricImage;
use crate::ni::NiImage;
use crate::server::lock;

/// The image's layout. A binary that speaks another refuses to be restarted into.
pub const FORMAT: u32 = 1;

/// How long the threads have to come to rest.
pub const FREEZE_WAIT: Duration = Duration::from_secs(2);
/// How long the threads of sessions that were let go (they did not come to rest) have to
/// end and rest.
const LET_GO_WAIT: Duration = Duration::from_secs(1);

/// Shut down the sockets of the client sessions that did not come to rest — one stuck in a
/// message it never finishes, or in a reply it never reads — so that one client cannot hold
/// everyone's restart up. Returns whether there were any.
fn let_go_of_unrested(daemon: &Daemon) -> bool {
    let parked: Vec<u32> = freeze()
        .lock()
        .parked
        .iter()
        .filter_map(|w| match w {
            Who::Listener(n) | Who::Session(n, _) => Some(*n),
            _ => None,
        })
        .collect();
    let mut any = false;
    for i in daemon.local.clone().filter(|i| !parked.contains(i)) {
        let shut = {
            let a = daemon.slots[i as usize]
                .attachment
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // SAFETY: shutdown of the session's socket, which stays open while `stream_fd`
            // names it (cleared under this lock before it is closed).
            a.stream_fd
                .map(|fd| unsafe { libc::shutdown(fd, libc::SHUT_RDWR) })
                .is_some()
        };
        if shut {
            tracing::warn!(ni = i, "its client's session did not come to rest: let go");
            lock(&daemon.slots[i as usize].ni)
                .counters
                .malformed_sessions += 1;
            any = true;
        }
    }
    any
}

/// Why a planned restart did not happen (the daemon carries on as it was).
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("a daemon that is one host of a fabric spanning hosts cannot hand over yet: stop and start it (the other hosts see it rejoin)")]
    Spanning,
    #[error("a restart is already under way")]
    Busy,
    #[error("the new binary {0}: {1}")]
    Binary(PathBuf, String),
    #[error("not at rest after {FREEZE_WAIT:?}: {0}")]
    NotAtRest(String),
    #[error("capturing the state: {0}")]
    Capture(String),
    #[error("executing {0}: {1}")]
    Exec(PathBuf, std::io::Error),
}

/// Who parked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Who {
    Poller,
    /// An NI's accept thread, no client attached.
    Listener(u32),
    /// An NI's session thread, between messages on this socket.
    Session(u32, RawFd),
    /// The control socket's accept thread.
    ControlListener,
    /// A control connection's thread, between requests.
    Control(RawFd),
}

#[derive(Default)]
struct FreezeState {
    on: bool,
    parked: Vec<Who>,
}

/// The process-wide freeze: threads that can park look at [`Freeze::fd`] in the polls they
/// block in and call [`Freeze::park`] when it is readable.
pub struct Freeze {
    /// `state.on`, for the poller's loop to read without the lock.
    flag: std::sync::atomic::AtomicBool,
    state: Mutex<FreezeState>,
    cv: Condvar,
    /// An eventfd that is readable while frozen.
    fd: File,
}

pub fn freeze() -> &'static Freeze {
    static F: OnceLock<Freeze> = OnceLock::new();
    F.get_or_init(|| {
        // SAFETY: eventfd with flags only; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(
            fd >= 0,
            "creating the handover eventfd: {}",
            std::io::Error::last_os_error()
        );
        Freeze {
            flag: Default::default(),
            state: Mutex::new(FreezeState::default()),
            cv: Condvar::new(),
            // SAFETY: a descriptor just created and owned by nothing else.
            fd: unsafe { File::from_raw_fd(fd) },
        }
    })
}

impl Freeze {
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The entry a thread that can park adds to the `poll` it blocks in.
    pub fn pollfd(&self) -> libc::pollfd {
        libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        }
    }

    pub fn on(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FreezeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Park until thawed (returns at once when not frozen).
    pub fn park(&self, who: Who) {
        let mut s = self.lock();
        if !s.on {
            return;
        }
        s.parked.push(who);
        self.cv.notify_all();
        while s.on {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn start(&self) -> Result<(), HandoverError> {
        let mut s = self.lock();
        if s.on {
            return Err(HandoverError::Busy);
        }
        s.on = true;
        self.flag.store(true, std::sync::atomic::Ordering::Release);
        s.parked.clear();
        let _ = (&self.fd).write(&1u64.to_ne_bytes());
        Ok(())
    }

    fn thaw(&self) {
        let mut s = self.lock();
        let mut b = [0u8; 8];
        let _ = (&self.fd).read(&mut b);
        s.on = false;
        self.flag.store(false, std::sync::atomic::Ordering::Release);
        s.parked.clear();
        self.cv.notify_all();
    }

    /// Wait until the poller, every NI of `local`, the control socket and its connections
    /// (all but `asking`, the one that asked for the restart) parked; what parked, or what
    /// did not.
    fn wait_parked(
        &self,
        local: std::ops::Range<u32>,
        asking: bool,
        wait: Duration,
    ) -> Result<Vec<Who>, String> {
        let deadline = Instant::now() + wait;
        let mut s = self.lock();
        loop {
            let controls = s
                .parked
                .iter()
                .filter(|w| matches!(w, Who::Control(_)))
                .count() as u64;
            let controls_open = crate::control::open_connections().saturating_sub(asking as u64);
            let control = s.parked.contains(&Who::ControlListener) && controls >= controls_open;
            let poller = s.parked.contains(&Who::Poller) && control;
            let missing: Vec<u32> = local
                .clone()
                .filter(|&i| {
                    !s.parked
                        .iter()
                        .any(|w| matches!(w, Who::Listener(n) | Who::Session(n, _) if *n == i))
                })
                .collect();
            if poller && missing.is_empty() {
                return Ok(s.parked.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mut what = Vec::new();
                if !s.parked.contains(&Who::Poller) {
                    what.push("the poller".to_string());
                }
                if !control {
                    what.push(format!(
                        "{} of {controls_open} control connection(s) (a request in progress)",
                        controls_open - controls.min(controls_open)
                    ));
                }
                if !missing.is_empty() {
                    what.push(format!(
                        "the session or accept thread of NI {missing:?} (a client that does not read its replies holds its session in a write)"
                    ));
                }
                return Err(what.join(", "));
            }
            s = self
                .cv
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A client session as the image carries it.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct SessionImage {
    pub ni: u32,
    pub fd: RawFd,
    pub client_pid: Option<i32>,
}

/// How the daemon was started, as it resolved its arguments and config file: the new
/// process takes these instead of reading a config file that may have changed since.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Startup {
    pub nodes: u32,
    pub run_dir: PathBuf,
    /// The torus's dimensions, `XxYxZ`.
    pub torus: String,
    /// The partitions' window kind (`isolated`, `shared`), or none.
    pub direct: Option<String>,
    pub collective_timeout_ms: u64,
}

/// Everything that crosses the exec.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Image {
    pub format: u32,
    pub startup: Startup,
    /// The version of the binary that wrote it (for the log).
    pub from_version: String,
    pub lock_fd: RawFd,
    pub control_fd: RawFd,
    pub listeners: Vec<(u32, RawFd)>,
    pub sessions: Vec<SessionImage>,
    /// Control connections between requests.
    pub controls: Vec<RawFd>,
    pub nis: Vec<NiImage>,
    pub fabric: FabricImage,
    /// How long ago the daemon first started, and how many handovers it went through.
    pub uptime_ns: u64,
    pub restarts: u64,
    /// The control connection that asked, answered by the new process.
    pub reply_to: Option<RawFd>,
    /// When the freeze began on the system's monotonic clock, which the exec does not
    /// reset: the new process reports the whole pause.
    pub froze_at_ns: u64,
}

/// What the process was started as: the restart runs the same arguments (minus an old
/// `--handover-fd`), and by default the binary at the same path, which an upgrade replaced.
struct Invocation {
    exe: PathBuf,
    args: Vec<OsString>,
}

static INVOCATION: OnceLock<Invocation> = OnceLock::new();

/// Remember how this process was started; `main` calls it first.
pub fn record_invocation() {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--handover-fd") {
        args.drain(i..(i + 2).min(args.len()));
    }
    args.retain(|a| !a.as_bytes().starts_with(b"--handover-fd="));
    let exe = std::env::current_exe()
        .ok()
        .map(|p| {
            // A binary replaced under a running process reads as "PATH (deleted)".
            let s = p.as_os_str().as_bytes();
            match s.strip_suffix(b" (deleted)") {
                Some(t) => PathBuf::from(std::ffi::OsStr::from_bytes(t)),
                None => p,
            }
        })
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    let _ = INVOCATION.set(Invocation { exe, args });
}

/// The binary a restart runs by default.
pub fn default_binary() -> PathBuf {
    INVOCATION
        .get()
        .map(|i| i.exe.clone())
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"))
}

/// How long a child of the new binary (`--handover-format`, `--handover-check-fd`) may take.
const CHILD_WAIT: Duration = Duration::from_secs(5);

/// Run the new binary (`exe`, opened once, so the file checked is the file executed) with
/// `args`, bounded by [`CHILD_WAIT`]; what it printed, or why it failed.
fn run_child(exe: &File, args: &[OsString]) -> Result<String, String> {
    use std::process::{Command, Stdio};
    // The parent's descriptor, by path: a child can open it whatever its own flags are.
    let path = format!("/proc/{}/fd/{}", std::process::id(), exe.as_raw_fd());
    let mut child = Command::new(&path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t.elapsed() < CHILD_WAIT => std::thread::sleep(Duration::from_millis(1)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not answer within {CHILD_WAIT:?}"));
            }
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() {
        return Err(format!(
            "{} ({}: {})",
            stdout,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(stdout)
}

fn preflight(binary: &Path, exe: &File) -> Result<(), HandoverError> {
    let bad = |why: String| HandoverError::Binary(binary.to_path_buf(), why);
    let said = run_child(exe, &["--handover-format".into()])
        .map_err(|e| bad(format!("cannot take a handover: {e}")))?;
    match said.parse::<u32>() {
        Ok(FORMAT) => Ok(()),
        Ok(f) => Err(bad(format!(
            "speaks handover format {f}, this daemon {FORMAT}: stop and start it instead"
        ))),
        Err(_) => Err(bad(format!("answered {said:?} to --handover-format"))),
    }
}

/// The new binary, with this daemon's arguments, reads the real image (`--handover-check-fd`)
/// before anything is executed: an argument it no longer takes, or state it cannot parse,
/// refuses the restart instead of ending every session after the exec.
fn check_image(binary: &Path, exe: &File, mem: &mut File) -> Result<(), HandoverError> {
    let mut args: Vec<OsString> = INVOCATION.get().map(|i| i.args.clone()).unwrap_or_default();
    args.push("--handover-check-fd".into());
    args.push(mem.as_raw_fd().to_string().into());
    set_cloexec(mem.as_raw_fd(), false)
        .map_err(|e| HandoverError::Capture(format!("the image's descriptor: {e}")))?;
    let r = run_child(exe, &args);
    // The child read through the same open file: back to the start for the exec.
    let _ = mem.rewind();
    r.map(|_| ()).map_err(|e| {
        HandoverError::Binary(binary.to_path_buf(), format!("cannot take this image: {e}"))
    })
}

fn set_cloexec(fd: RawFd, on: bool) -> std::io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD on a descriptor number; no memory is passed.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFD);
        if fl < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fl = if on {
            fl | libc::FD_CLOEXEC
        } else {
            fl & !libc::FD_CLOEXEC
        };
        if libc::fcntl(fd, libc::F_SETFD, fl) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The descriptors an image names (each once).
fn fds_of(img: &Image) -> Vec<RawFd> {
    let mut v = vec![img.lock_fd, img.control_fd];
    v.extend(img.reply_to);
    v.extend(img.listeners.iter().map(|l| l.1));
    v.extend(img.sessions.iter().map(|s| s.fd));
    v.extend(&img.controls);
    for n in &img.nis {
        v.push(n.sram);
        v.extend(n.spare_sram);
        v.extend(n.dma.iter().map(|m| m.fd));
        v.extend(n.irqs.msix.iter().flatten());
        v.extend(n.irqs.intx.iter().chain(&n.irqs.err).chain(&n.irqs.req));
        v.extend(n.window.iter().flat_map(|w| w.fds.iter()));
    }
    for (_, w) in &img.fabric.windows {
        v.extend(&w.fds);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Restart into `binary` (default: the one this process was started from), handing every
/// client over. Returns only when the restart did not happen; the daemon then carries on.
pub fn restart(daemon: &Daemon, binary: Option<PathBuf>, reply_to: Option<RawFd>) -> HandoverError {
    use std::sync::atomic::{AtomicBool, Ordering};
    static RESTARTING: AtomicBool = AtomicBool::new(false);
    if daemon.span.is_some() {
        return HandoverError::Spanning;
    }
    // One at a time, from the first step: a second one's children must never be spawned
    // while the first has cleared close-on-exec on clients' descriptors.
    if RESTARTING.swap(true, Ordering::AcqRel) {
        return HandoverError::Busy;
    }
    let e = restart_once(daemon, binary.unwrap_or_else(default_binary), reply_to);
    RESTARTING.store(false, Ordering::Release);
    tracing::warn!("planned restart refused, the daemon carries on: {e}");
    e
}

fn restart_once(daemon: &Daemon, binary: PathBuf, reply_to: Option<RawFd>) -> HandoverError {
    let exe = match File::open(&binary) {
        Ok(f) => f,
        Err(e) => return HandoverError::Binary(binary, e.to_string()),
    };
    if let Err(e) = preflight(&binary, &exe) {
        return e;
    }
    let f = freeze();
    if let Err(e) = f.start() {
        return e;
    }
    let Err(e) = hand_over(daemon, &binary, &exe, reply_to);
    f.thaw();
    daemon.fabric.doorbell.ring();
    e
}

/// With the freeze begun: bring everyone to rest, capture, have the new binary check the
/// image, execute it. Returns only why it did not happen.
fn hand_over(
    daemon: &Daemon,
    binary: &Path,
    exe: &File,
    reply_to: Option<RawFd>,
) -> Result<std::convert::Infallible, HandoverError> {
    let f = freeze();
    let began = monotonic_ns();
    tracing::info!(binary = %binary.display(), "planned restart: bringing the daemon to rest");
    daemon.fabric.doorbell.ring();
    let mut waited = f.wait_parked(daemon.local.clone(), reply_to.is_some(), FREEZE_WAIT);
    if waited.is_err() && let_go_of_unrested(daemon) {
        // Those sessions end (their clients see the connection close, as after a crash);
        // their threads detach the NIs and rest as accept threads.
        waited = f.wait_parked(daemon.local.clone(), reply_to.is_some(), LET_GO_WAIT);
    }
    let parked = waited.map_err(HandoverError::NotAtRest)?;
    let rest = monotonic_ns() - began;
    let (img, mut mem) =
        capture(daemon, &parked, reply_to, began).map_err(HandoverError::Capture)?;
    let captured = monotonic_ns() - began - rest;
    check_image(binary, exe, &mut mem)?;
    tracing::info!(
        at_rest_ms = rest as f64 / 1e6,
        captured_ms = captured as f64 / 1e6,
        checked_ms = (monotonic_ns() - began - rest - captured) as f64 / 1e6,
        image_bytes = mem.metadata().map(|m| m.len()).unwrap_or(0),
        "planned restart: state captured and checked by the new binary"
    );
    Err(exec(binary, exe, img, mem))
}

fn capture(
    daemon: &Daemon,
    parked: &[Who],
    reply_to: Option<RawFd>,
    began: u64,
) -> Result<(Image, File), String> {
    let sessions: BTreeMap<u32, RawFd> = parked
        .iter()
        .filter_map(|w| match w {
            Who::Session(n, fd) => Some((*n, *fd)),
            _ => None,
        })
        .collect();
    let state = daemon.fabric.lock();
    let fabric = state.image().map_err(|e| e.to_string())?;
    let (torus, direct, timeout) = state.startup();
    let startup = Startup {
        nodes: daemon.slots.len() as u32,
        run_dir: daemon.run_dir.clone(),
        torus,
        direct: direct.map(|k| match k {
            ni_abi::window::Kind::Isolated => "isolated".to_string(),
            ni_abi::window::Kind::Shared => "shared".to_string(),
        }),
        collective_timeout_ms: timeout.as_millis() as u64,
    };
    let mut nis = Vec::new();
    let mut sess = Vec::new();
    for (i, slot) in daemon.slots.iter().enumerate() {
        let ni = lock(&slot.ni);
        nis.push(ni.image().map_err(|e| format!("NI {i}: {e}"))?);
        if let Some(&fd) = sessions.get(&(i as u32)) {
            let a = slot.attachment.lock().unwrap_or_else(|e| e.into_inner());
            sess.push(SessionImage {
                ni: i as u32,
                fd,
                client_pid: a.client_pid,
            });
        }
    }
    drop(state);
    let img = Image {
        format: FORMAT,
        startup,
        from_version: env!("CARGO_PKG_VERSION").to_string(),
        lock_fd: daemon.lock_fd(),
        control_fd: daemon.control_fd(),
        listeners: daemon.listener_fds(),
        sessions: sess,
        controls: parked
            .iter()
            .filter_map(|w| match w {
                Who::Control(fd) => Some(*fd),
                _ => None,
            })
            .collect(),
        nis,
        fabric,
        uptime_ns: daemon.started.elapsed().as_nanos() as u64,
        restarts: daemon.restarts,
        reply_to,
        froze_at_ns: began,
    };
    let mem = nix::sys::memfd::memfd_create(
        c"ni-handover",
        nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC,
    )
    .map_err(|e| format!("memfd: {e}"))?;
    let mut mem = File::from(mem);
    let bytes = serde_json::to_vec(&img).map_err(|e| format!("writing the image: {e}"))?;
    mem.write_all(&bytes)
        .map_err(|e| format!("writing the image: {e}"))?;
    mem.rewind().map_err(|e| e.to_string())?;
    Ok((img, mem))
}

fn exec(binary: &Path, exe: &File, img: Image, mem: File) -> HandoverError {
    let mut fds = fds_of(&img);
    fds.push(mem.as_raw_fd());
    let exec_err = |e| HandoverError::Exec(binary.to_path_buf(), e);
    for &fd in &fds {
        if let Err(e) = set_cloexec(fd, false) {
            for &fd in &fds {
                let _ = set_cloexec(fd, true);
            }
            return exec_err(e);
        }
    }
    let mut argv = vec![CString::new(binary.as_os_str().as_bytes()).unwrap_or_default()];
    if let Some(inv) = INVOCATION.get() {
        argv.extend(
            inv.args
                .iter()
                .filter_map(|a| CString::new(a.as_bytes()).ok()),
        );
    }
    argv.push(c"--handover-fd".to_owned());
    argv.push(CString::new(mem.as_raw_fd().to_string()).unwrap_or_default());
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    tracing::info!(
        sessions = img.sessions.len(),
        descriptors = fds.len(),
        "planned restart: executing {}",
        binary.display()
    );
    // The file that was checked, not whatever the path names now. Only returns on failure.
    let e = nix::unistd::fexecve(exe.as_raw_fd(), &argv, &env).unwrap_err();
    for &fd in &fds {
        let _ = set_cloexec(fd, true);
    }
    exec_err(e.into())
}

/// The system's monotonic clock, which is the same clock on both sides of the exec.
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Whether this binary can take `img` back: every NI's and the fabric's state parse.
pub fn validate(img: &Image) -> anyhow::Result<()> {
    use anyhow::Context;
    if img.nis.len() != img.startup.nodes as usize {
        anyhow::bail!(
            "{} NIs for a daemon of {}",
            img.nis.len(),
            img.startup.nodes
        );
    }
    for n in &img.nis {
        crate::ni::Ni::check_image(n).with_context(|| format!("NI {}", n.index))?;
    }
    img.fabric.check().context("the fabric")?;
    Ok(())
}

/// Read the image the old process left at `fd`.
pub fn load(fd: RawFd) -> anyhow::Result<Image> {
    use anyhow::Context;
    // SAFETY: the descriptor was handed to us for exactly this (`--handover-fd`) and is
    // owned by nothing else in this process.
    let mut f = unsafe { File::from_raw_fd(fd) };
    let mut s = String::new();
    f.read_to_string(&mut s)
        .context("reading the handover image")?;
    let img: Image = serde_json::from_str(&s).context("parsing the handover image")?;
    if img.format != FORMAT {
        anyhow::bail!(
            "the handover image is format {}, this binary reads {FORMAT}",
            img.format
        );
    }
    Ok(img)
}

/// The descriptors an image names, each owned once; handed out as duplicates so that any
/// number of users (a DMA map per mapping of one file) can own theirs, and closed when the
/// restore is over.
pub struct Fds {
    held: BTreeMap<RawFd, File>,
}

impl Fds {
    pub fn new() -> Fds {
        Fds {
            held: BTreeMap::new(),
        }
    }

    /// Own every descriptor `img` names (those still open), so that what nothing claims is
    /// closed with the pool.
    pub fn of(img: &Image) -> Fds {
        let mut f = Fds::new();
        for fd in fds_of(img) {
            let _ = f.hold(fd);
        }
        f
    }

    /// A duplicate (close-on-exec) of inherited descriptor `fd`.
    pub fn file(&mut self, fd: RawFd) -> std::io::Result<File> {
        self.hold(fd)?.try_clone()
    }

    /// Inherited descriptor `fd`, owned by the pool from now on.
    fn hold(&mut self, fd: RawFd) -> std::io::Result<&File> {
        Ok(match self.held.entry(fd) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                // SAFETY: F_GETFD only checks that the number is open.
                if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                    return Err(std::io::Error::other(format!(
                        "descriptor {fd} was not handed over"
                    )));
                }
                // SAFETY: an inherited descriptor named by the image, owned by nothing else
                // in this process; `held` takes it once.
                e.insert(unsafe { File::from_raw_fd(fd) })
            }
        })
    }
}

impl Default for Fds {
    fn default() -> Self {
        Self::new()
    }
}
