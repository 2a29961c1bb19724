//! nirun: run N processes of a program as ranks of one NI partition.
//!
//! Without `--run-dir` it starts a private `ni-device` for the run and removes it after.
//! Each rank gets `NI_SOCKET` (its NI), `NI_RANK` and `NI_SIZE`; its output is forwarded
//! line by line with a `[rank]` prefix. The first rank to fail decides the exit code (a
//! signal is 128 + its number) and the others are stopped.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

const USAGE: &str =
    "usage: nirun -n N [--run-dir DIR] [--device PATH] [--timeout SECS] PROGRAM [ARGS...]

  -n N            number of ranks (processes), one NI each
  --run-dir DIR   use the ni-device already serving DIR (ranks attach to ni0..ni<N-1>);
                  default: start a private ni-device for this run
  --device PATH   ni-device binary (default: $NI_DEVICE, else next to nirun, else PATH)
  --timeout SECS  stop every rank and fail after SECS seconds (default: none)

Exit code: 0 when every rank succeeds; otherwise the first failing rank's code
(128 + signal for a rank killed by a signal); 2 for usage errors; 124 on timeout.";

struct Args {
    n: u32,
    run_dir: Option<PathBuf>,
    device: Option<PathBuf>,
    timeout: Option<Duration>,
    program: Vec<String>,
}

fn parse() -> Result<Args, String> {
    let mut a = std::env::args().skip(1);
    let mut args = Args {
        n: 0,
        run_dir: None,
        device: None,
        timeout: None,
        program: vec![],
    };
    while let Some(x) = a.next() {
        match x.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "-n" | "--np" => {
                let v = a.next().ok_or("-n needs a number")?;
                args.n = v.parse().map_err(|_| format!("-n {v}: not a number"))?;
            }
            "--run-dir" => {
                args.run_dir = Some(a.next().ok_or("--run-dir needs a directory")?.into())
            }
            "--device" => args.device = Some(a.next().ok_or("--device needs a path")?.into()),
            "--timeout" => {
                let v = a.next().ok_or("--timeout needs seconds")?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--timeout {v}: not a number"))?;
                args.timeout = Some(Duration::from_secs_f64(s));
            }
            _ => {
                args.program.push(x);
                args.program.extend(a.by_ref());
            }
        }
    }
    if args.n == 0 {
        return Err("-n N (at least 1) is required".into());
    }
    if args.program.is_empty() {
        return Err("no program given".into());
    }
    Ok(args)
}

fn find_device(explicit: Option<PathBuf>) -> PathBuf {
    if let Some(p) = explicit.or_else(|| std::env::var_os("NI_DEVICE").map(PathBuf::from)) {
        return p;
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        let p = dir.join("ni-device");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("ni-device")
}

struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill on a pid we spawned.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_daemon(n: u32, device: PathBuf) -> Result<Daemon, String> {
    let dir = std::env::temp_dir().join(format!("nirun-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let log = std::fs::File::create(dir.join("ni-device.log")).map_err(|e| e.to_string())?;
    let child = Command::new(&device)
        .args(["--nodes", &n.to_string(), "--run-dir"])
        .arg(dir.join("run"))
        .stderr(log)
        .spawn()
        .map_err(|e| {
            format!(
                "starting {}: {e} (set --device or NI_DEVICE)",
                device.display()
            )
        })?;
    let mut d = Daemon { child, dir };
    let ready = d.dir.join("run").join("control.sock");
    let t = Instant::now();
    while !ready.exists() {
        if let Ok(Some(st)) = d.child.try_wait() {
            let log = std::fs::read_to_string(d.dir.join("ni-device.log")).unwrap_or_default();
            return Err(format!(
                "ni-device exited ({st}) before it was ready:\n{log}"
            ));
        }
        if t.elapsed() > Duration::from_secs(10) {
            return Err("ni-device did not come up within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(d)
}

fn forward(
    rank: u32,
    stream: impl std::io::Read + Send + 'static,
    err: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).split(b'\n') {
            let Ok(line) = line else { break };
            let mut out = format!("[{rank}] ").into_bytes();
            out.extend_from_slice(&line);
            out.push(b'\n');
            if err {
                let _ = std::io::stderr().lock().write_all(&out);
            } else {
                let _ = std::io::stdout().lock().write_all(&out);
            }
        }
    })
}

fn code_of(st: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => (128 + s) as u8,
        _ => 1,
    }
}

/// Sleep until a rank exits, a signal comes, or `left` (at most a second) passes. Ranks that
/// share their cpus with this process get them undisturbed: a loop that looked every 2 ms
/// took one of their turns 500 times a second (8 B ping-pong with every rank on one cpu).
fn until_one_exits(ranks: &[(u32, Child)], left: Option<Duration>) {
    let wait = left.map_or(Duration::from_secs(1), |l| l.min(Duration::from_secs(1)));
    let mut fds = Vec::with_capacity(ranks.len());
    for (_, c) in ranks {
        // SAFETY: pidfd_open on a child we spawned and have not reaped; it returns a new
        // descriptor or -1 (kernels before 5.3: then the 2 ms naps below).
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, c.id() as libc::pid_t, 0) };
        if fd < 0 {
            break;
        }
        // SAFETY: a descriptor just opened, owned here alone.
        fds.push(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) });
    }
    if fds.len() < ranks.len() {
        std::thread::sleep(wait.min(Duration::from_millis(2)));
        return;
    }
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `polls` holds `polls.len()` valid pollfds. A signal ends the poll early
    // (EINTR), which is what the caller's look at STOP wants.
    unsafe {
        libc::poll(
            polls.as_mut_ptr(),
            polls.len() as libc::nfds_t,
            wait.as_millis().max(1) as i32,
        )
    };
}

/// The signal that asked nirun to stop (0: none yet).
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(sig, Ordering::SeqCst);
}

fn main() -> ExitCode {
    // SIGINT/SIGTERM stop every rank and the private daemon instead of orphaning them.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nirun: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (_daemon, run_dir) = match &args.run_dir {
        Some(d) => (None, d.clone()),
        None => match start_daemon(args.n, find_device(args.device.clone())) {
            Ok(d) => {
                let r = d.dir.join("run");
                (Some(d), r)
            }
            Err(e) => {
                eprintln!("nirun: {e}");
                return ExitCode::from(1);
            }
        },
    };
    let mut ranks: Vec<(u32, Child)> = Vec::new();
    let mut pipes = Vec::new();
    for r in 0..args.n {
        let sock = run_dir.join(format!("ni{r}.sock"));
        let spawned = Command::new(&args.program[0])
            .args(&args.program[1..])
            .env("NI_SOCKET", &sock)
            .env("NI_RANK", r.to_string())
            .env("NI_SIZE", args.n.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(mut c) => {
                pipes.push(forward(r, c.stdout.take().unwrap(), false));
                pipes.push(forward(r, c.stderr.take().unwrap(), true));
                ranks.push((r, c));
            }
            Err(e) => {
                eprintln!("nirun: starting {}: {e}", args.program[0]);
                for (_, c) in &mut ranks {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return ExitCode::from(127);
            }
        }
    }
    let t = Instant::now();
    let mut result: Option<u8> = None;
    while !ranks.is_empty() {
        let mut i = 0;
        while i < ranks.len() {
            match ranks[i].1.try_wait() {
                Ok(Some(st)) => {
                    let (r, _) = ranks.remove(i);
                    let code = code_of(st);
                    if code != 0 && result.is_none() {
                        eprintln!("nirun: rank {r} failed ({st}); stopping the others");
                        result = Some(code);
                        for (_, c) in &ranks {
                            // SAFETY: kill on pids we spawned.
                            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                        }
                    }
                }
                _ => i += 1,
            }
        }
        let sig = STOP.load(Ordering::SeqCst);
        if sig != 0 && result.is_none() {
            eprintln!("nirun: signal {sig}: stopping every rank");
            result = Some((128 + sig) as u8);
            for (_, c) in &ranks {
                // SAFETY: kill on pids we spawned.
                unsafe { libc::kill(c.id() as i32, sig) };
            }
        }
        if let Some(limit) = args.timeout {
            if t.elapsed() > limit && result.is_none() {
                eprintln!("nirun: timed out after {limit:?}; stopping every rank");
                result = Some(124);
                for (_, c) in &mut ranks {
                    let _ = c.kill();
                }
            }
        }
        if result.is_some() && t.elapsed() > Duration::from_secs(3600) {
            break;
        }
        if !ranks.is_empty() {
            let left = args.timeout.map(|limit| limit.saturating_sub(t.elapsed()));
            until_one_exits(&ranks, left);
        }
    }
    for p in pipes {
        let _ = p.join();
    }
    ExitCode::from(result.unwrap_or(0))
}
