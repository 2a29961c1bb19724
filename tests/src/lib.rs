//! Helpers shared by the cross-crate integration tests: find the workspace's binaries, start
//! a real `ni-device`, run rank processes against it, read counters.

pub mod hostile;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>`, where cargo put this test and the workspace's binaries.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    if dir.ends_with("deps") {
        dir.parent().unwrap().to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// A workspace binary, built on demand when `cargo test -p ni-tests` ran alone.
pub fn binary(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-p", "ni-device", "-p", "libni", "--bins"]);
        if target_dir().ends_with("release") {
            c.arg("--release");
        }
        let st = c.status().expect("running cargo build");
        assert!(st.success(), "cargo build of the workspace binaries failed");
    }
    assert!(p.exists(), "{} missing after building", p.display());
    p
}

pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    root: PathBuf,
    /// The command line, so `restart` can start the same daemon again.
    args: Vec<std::ffi::OsString>,
    /// Extra environment (e.g. `NI_LOG`), kept for `restart` too.
    env: Vec<(String, String)>,
}

impl Daemon {
    pub fn start(nodes: u32) -> Daemon {
        Self::start_with(nodes, None)
    }

    /// Start with an optional TOML config file body (partitions).
    pub fn start_with(nodes: u32, config: Option<&str>) -> Daemon {
        Self::start_with_env(nodes, config, &[])
    }

    /// Start with an optional config and extra environment for the daemon.
    pub fn start_with_env(nodes: u32, config: Option<&str>, env: &[(&str, &str)]) -> Daemon {
        let root =
            std::env::temp_dir().join(format!("ni-tests-{}-{}", std::process::id(), rand_u64()));
        std::fs::create_dir_all(&root).unwrap();
        let dir = root.join("run");
        let mut c = Command::new(binary("ni-device"));
        c.args(["--nodes", &nodes.to_string(), "--run-dir"])
            .arg(&dir);
        if let Some(body) = config {
            let p = root.join("ni.toml");
            std::fs::write(&p, body).unwrap();
            c.arg("--config").arg(p);
        }
        // `NI_TEST_DIRECT=off|shared`: the same tests over the fabric path only, or over the
        // window kind guests use (tests/run.sh runs the point-to-point and collective suites
        // every way).
        if let Ok(v) = std::env::var("NI_TEST_DIRECT") {
            if !config.is_some_and(|b| b.contains("direct")) {
                c.args(["--direct", &v]);
            }
        }
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        let env: Vec<_> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let child = Self::spawn(&root, &dir, &args, &env);
        Daemon {
            child,
            dir,
            root,
            args,
            env,
        }
    }

    /// One host of a fabric that spans hosts: `ni-device --fabric DESCRIPTION --host HOST`
    /// (every host of a fabric must get the same description, byte for byte).
    pub fn start_fabric(description: &str, host: &str) -> Daemon {
        let root =
            std::env::temp_dir().join(format!("ni-tests-{}-{}", std::process::id(), rand_u64()));
        std::fs::create_dir_all(&root).unwrap();
        let dir = root.join("run");
        let p = root.join("fabric.toml");
        std::fs::write(&p, description).unwrap();
        let mut c = Command::new(binary("ni-device"));
        c.arg("--fabric")
            .arg(&p)
            .args(["--host", host, "--run-dir"])
            .arg(&dir);
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        let child = Self::spawn(&root, &dir, &args, &[]);
        Daemon {
            child,
            dir,
            root,
            args,
            env: Vec::new(),
        }
    }

    fn spawn(
        root: &Path,
        dir: &Path,
        args: &[std::ffi::OsString],
        env: &[(String, String)],
    ) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("daemon.log"))
            .unwrap();
        let _ = std::fs::remove_file(dir.join("control.sock"));
        let child = Command::new(binary("ni-device"))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stderr(log)
            .spawn()
            .expect("ni-device starts");
        let t = Instant::now();
        while !dir.join("control.sock").exists() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "daemon did not come up"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child
    }

    /// Kill the daemon at once (SIGKILL: no clean-up, as a crash).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start the same daemon again on the same run directory.
    pub fn restart(&mut self) {
        self.kill();
        self.child = Self::spawn(&self.root, &self.dir, &self.args, &self.env);
    }

    pub fn sock(&self, i: u32) -> PathBuf {
        self.dir.join(format!("ni{i}.sock"))
    }

    /// NIs 0 and 1 attached in this process, both seeing their partition.
    pub fn attach_pair(&self) -> (ni::Ni, ni::Ni) {
        let a = ni::Ni::attach_path(&self.sock(0)).unwrap();
        let b = ni::Ni::attach_path(&self.sock(1)).unwrap();
        for n in [&a, &b] {
            n.wait_for_partition(Duration::from_secs(10)).unwrap();
        }
        (a, b)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("daemon.log")).unwrap_or_default()
    }

    /// Start `ni-test-rank SCENARIO` on NI `node`.
    pub fn rank(&self, rank_bin: &Path, node: u32, scenario: &str) -> Child {
        Command::new(rank_bin)
            .arg(scenario)
            .env("NI_SOCKET", self.sock(node))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub fn control(&self, line: &str) -> serde_json::Value {
        let mut s = UnixStream::connect(self.dir.join("control.sock")).unwrap();
        s.write_all(line.as_bytes()).unwrap();
        s.write_all(b"\n").unwrap();
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out).unwrap();
        serde_json::from_str(&out).unwrap()
    }

    pub fn counter(&self, node: u32, name: &str) -> u64 {
        let v = self.control(&format!(
            r#"{{"version":1,"request":"counters","nodes":[{node}]}}"#
        ));
        v["counters"][0]["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p[0] == name)
            .unwrap_or_else(|| panic!("no counter {name}"))[1]
            .as_u64()
            .unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("NI_TEST_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    let _ = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    u64::from_le_bytes(b)
}

/// Wait for a child with a deadline; kill it past the deadline.
pub fn finish(mut c: Child, limit: Duration) -> Output {
    let t = Instant::now();
    loop {
        if c.try_wait().unwrap().is_some() {
            return c.wait_with_output().unwrap();
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            panic!(
                "rank timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Assert a rank process succeeded and printed `ok SCENARIO`.
pub fn assert_ok(out: &Output, scenario: &str, daemon: &Daemon) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("ok {scenario}")),
        "{scenario} failed ({})\nstdout:\n{stdout}\nstderr:\n{}\ndaemon log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
}

/// Checks shared by the rank programs (`ni-test-rank`, `ni-test-coll`, `ni-vm-rank`, ...).
pub mod check {
    use ni::{Error, Status};

    /// The message sizes of the `integrity` scenario: 0 B to 64 MiB, around the window
    /// ring's slot boundaries too (`ni_abi::window`: the header slot's inline bytes, the
    /// payload area's 32-byte pieces, the largest eager message).
    pub fn integrity_sizes() -> Vec<usize> {
        use ni_abi::window::{EAGER_MAX, INLINE, SLOT};
        let (inline, slot, eager) = (INLINE as usize, SLOT as usize, EAGER_MAX as usize);
        vec![
            0,
            1,
            inline,
            inline + 1,
            slot,
            slot + 1,
            63,
            64,
            65,
            1000,
            eager - 1,
            eager,
            eager + 1,
            1 << 20,
            64 << 20,
        ]
    }

    /// Deterministic bytes for `(len, seed)`: senders and receivers make the same ones.
    pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// The device's status behind an error, if it came from the device.
    pub fn status_of(e: &Error) -> Option<Status> {
        match e {
            Error::Failed { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Panic unless `r` failed with `want`.
    /// One round's ping-pongs of the restart soaks (`rank.rs`, `vm-rank.rs`) between ranks 0
    /// and 1: 8 B, 4000 B, 64 KiB and 1 MiB (`buf` holds 1 MiB), each payload checked.
    /// Returns what this rank received (messages, bytes) and sent (bytes).
    pub fn soak_pingpong(ni: &ni::Ni, buf: &ni::Region, round: u64) -> (u64, u64, u64) {
        let peer = 1 - ni.rank();
        let (mut recvs, mut recv_bytes, mut send_bytes) = (0, 0, 0);
        for (k, &n) in [8usize, 4000, 65536, 1 << 20].iter().enumerate() {
            let tag = round * 8 + k as u64;
            let want = pattern(n, tag);
            if ni.rank() == 0 {
                buf.write_at(0, &want);
                ni.send(peer, buf, 0..n, tag).unwrap();
            }
            let d = ni.recv(Some(peer), buf, 0..1 << 20, tag, u64::MAX).unwrap();
            assert_eq!(d.len as usize, n, "round {round}: length");
            if ni.rank() == 1 {
                ni.send(peer, buf, 0..n, tag).unwrap();
            }
            recvs += 1;
            recv_bytes += d.len;
            send_bytes += n as u64;
            let mut got = vec![0u8; n];
            buf.read_at(0, &mut got);
            assert!(got == want, "round {round}: {n} bytes corrupted");
        }
        (recvs, recv_bytes, send_bytes)
    }

    /// One round's allreduce of the restart soaks (`rank.rs`, `vm-rank.rs`): each of two
    /// ranks adds `round + rank` (in `buf` at 0, the sum at 8), which must be `2 round + 1`.
    pub fn soak_allreduce(ni: &ni::Ni, buf: &ni::Region, round: u64) {
        buf.write_at(0, &(round as f64 + ni.rank() as f64).to_le_bytes());
        ni.allreduce::<f64>(ni::ReduceOp::Sum, buf, 0, buf, 8, 1)
            .unwrap();
        let mut b = [0u8; 8];
        buf.read_at(8, &mut b);
        assert_eq!(
            f64::from_le_bytes(b),
            2.0 * round as f64 + 1.0,
            "round {round}: allreduce"
        );
    }

    pub fn expect_status<T: std::fmt::Debug>(r: Result<T, Error>, want: Status) {
        match r {
            Err(e) if status_of(&e) == Some(want) => {}
            other => panic!("expected {want:?}, got {other:?}"),
        }
    }
}

/// Memory the program allocated itself — a heap vector, as MPI programs and C callers hand
/// libni — registered with [`ni::Ni::register`] (registered, not exported: its pages may hold
/// anything else). Derefs to the region; the region goes before the vector.
pub struct AppMemory {
    region: ni::Region,
    _heap: Vec<u8>,
}

impl AppMemory {
    /// `len` bytes of `fill`, registered with `ni` for peers to read and this process's own
    /// operations.
    pub fn register(ni: &ni::Ni, len: usize, fill: u8) -> AppMemory {
        let mut heap = vec![fill; len];
        // SAFETY: the vector's buffer lives as long as the region: moving the vector moves
        // no bytes, and the field after `region` is dropped after it.
        let region = unsafe { ni.register(heap.as_mut_ptr(), len, true, false) }
            .expect("registering heap memory");
        AppMemory {
            region,
            _heap: heap,
        }
    }
}

impl std::ops::Deref for AppMemory {
    type Target = ni::Region;
    fn deref(&self) -> &ni::Region {
        &self.region
    }
}
