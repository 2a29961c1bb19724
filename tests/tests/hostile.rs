//! Hostile clients (issue 18; design.md §6, tier 5 "adversarial").
//!
//! Every test starts one daemon with two partitions: "honest" (NIs 0 and 1), whose two ranks
//! (`ni-test-honest`, separate processes) ping-pong payloads of mixed sizes — through the
//! partition window and through the fabric — checked byte by byte for the whole test, and
//! "evil" (NIs 2 and 3), where the attacker sits on NI 2 (or, for the control-socket attack,
//! on the control socket). Each test then asserts:
//!
//! - the daemon is alive at the end;
//! - the honest ranks saw no error and made progress throughout: no gap of `MAX_GAP` or more
//!   between completed round trips (measured by the ranks; the worst is reported);
//! - the daemon's own memory (`RssAnon`), open descriptors and threads, before the attack and after it
//!   (attacker gone), grew by less than `RSS_GROWTH_KIB`, `FD_GROWTH` and `THREAD_GROWTH`, and
//!   their peak during the attack by less than the `PEAK_*` bounds.
//!
//! A check that fails does not stop the test: the rest is measured, and the test fails at its
//! end listing every failed check under "DAEMON MISBEHAVED". Each test prints a `REPORT` line
//! with what it measured (run with `--nocapture` to see them). Unix sockets only.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ni::Ni;
use ni_abi::fastpath::{ctrl, op, Request, ANY_RANK};
use ni_abi::lanai::{self, drd, isr};
use ni_abi::{cm5, pci};
use ni_tests::hostile::*;
use ni_tests::{target_dir, Daemon};
use serde_json::Value;

const CONFIG: &str = "[[partition]]\nname = \"honest\"\nnodes = [0, 1]\n\
                      [[partition]]\nname = \"evil\"\nnodes = [2, 3]\n";
/// The attacker's NI, and the other NI of its partition.
const ATTACKER: u32 = 2;
const BYSTANDER: u32 = 3;

/// The longest an honest round trip may wait for the previous one.
const MAX_GAP: Duration = Duration::from_millis(500);
/// Fewest round trips the honest pair must complete in a test.
const MIN_ROUNDS: u64 = 20;
/// Growth of the daemon from before the attack to after it (attacker gone).
const RSS_GROWTH_KIB: u64 = 64 << 10;
const FD_GROWTH: u64 = 64;
const THREAD_GROWTH: u64 = 40;
/// Growth at the peak, during the attack. A client may hold `MAX_FILES` (64) descriptors of
/// the daemon while attached, hence the larger descriptor bound.
const PEAK_RSS_GROWTH_KIB: u64 = 128 << 10;
const PEAK_FD_GROWTH: u64 = 64 + 64;
const PEAK_THREAD_GROWTH: u64 = 40;

// ---------------------------------------------------------------------------------------------
// The scene: daemon, honest ranks, resource watch.
// ---------------------------------------------------------------------------------------------

/// A rank process with its stdout read line by line and its stderr collected.
struct RankProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl RankProc {
    fn start(d: &Daemon, node: u32) -> RankProc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ni-test-honest"))
            .env("NI_SOCKET", d.sock(node))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let e = stderr.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            e.lock().unwrap().push_str(&s);
        });
        RankProc {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The first line starting with `prefix` within `limit`.
    fn expect(&mut self, prefix: &str, limit: Duration) -> Option<String> {
        let t = Instant::now();
        while t.elapsed() < limit {
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return Some(l);
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => {
                    // Exited: wait for the stderr reader to finish.
                    std::thread::sleep(Duration::from_millis(100));
                    return None;
                }
            }
        }
        None
    }

    fn output(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.seen.join("\n"),
            self.stderr.lock().unwrap()
        )
    }
}

impl Drop for RankProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` out of a rank's `ok honest ...` line.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

struct Scene {
    d: Daemon,
    ranks: [RankProc; 2],
    before: Usage,
    sampler: Option<Sampler>,
    name: &'static str,
    t0: Instant,
    notes: Vec<String>,
    /// Checks that failed so far: the test goes on to measure the rest, and fails at the end.
    failures: Vec<String>,
}

impl Scene {
    /// Daemon with the two partitions, honest ranks exchanging, the daemon's usage noted.
    fn start(name: &'static str) -> Scene {
        Self::start_env(name, &[])
    }

    /// The same, with extra environment for the daemon.
    fn start_env(name: &'static str, env: &[(&str, &str)]) -> Scene {
        Self::start_config(name, CONFIG, env, |_| ()).0
    }

    /// The same with other partitions; the honest ranks are NIs 0 and 1 (ranks 0 and 1).
    /// `first` runs once the daemon is up, before the honest ranks start (which wait for
    /// every member of their partition).
    fn start_config<T>(
        name: &'static str,
        config: &str,
        env: &[(&str, &str)],
        first: impl FnOnce(&Daemon) -> T,
    ) -> (Scene, T) {
        let t0 = Instant::now();
        let d = Daemon::start_with_env(4, Some(config), env);
        let early = first(&d);
        let ranks = [RankProc::start(&d, 0), RankProc::start(&d, 1)];
        let mut sc = Scene {
            d,
            ranks,
            before: Usage::default(),
            sampler: None,
            name,
            t0,
            notes: Vec::new(),
            failures: Vec::new(),
        };
        if sc.ranks[0]
            .expect("ready", Duration::from_secs(30))
            .is_none()
        {
            sc.fail("the honest ranks never completed a round trip");
        }
        // Let both paths warm up (window rings, rendezvous buffers) before the baseline.
        std::thread::sleep(Duration::from_millis(300));
        sc.before = usage(sc.pid()).expect("daemon running");
        sc.sampler = Some(Sampler::start(sc.pid()));
        (sc, early)
    }

    fn pid(&self) -> u32 {
        self.d.child.id()
    }

    fn note(&mut self, s: impl Into<String>) {
        let s = s.into();
        eprintln!("[{}] {s}", self.name);
        self.notes.push(s);
    }

    /// Stop the test here: panic with every failure so far and everything that helps (the
    /// honest ranks' output, the daemon's log).
    fn fail(&mut self, what: &str) -> ! {
        self.failures.push(what.to_string());
        self.fail_now()
    }

    fn fail_now(&mut self) -> ! {
        let alive = self.d.child.try_wait().ok().flatten().is_none();
        let log = self.d.log();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "{} (after {:.1} s): DAEMON MISBEHAVED:\n  - {}\ndaemon alive: {alive}\nnotes: \
             {:?}\nhonest rank 0 {}\nhonest rank 1 {}\ndaemon log (last 60 lines):\n{}",
            self.name,
            self.t0.elapsed().as_secs_f64(),
            self.failures.join("\n  - "),
            self.notes,
            self.ranks[0].output(),
            self.ranks[1].output(),
            tail.join("\n")
        );
    }

    /// A check that, failing, fails the test at its end (the rest is still measured).
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let w = what();
            eprintln!("[{}] FAILED: {w}", self.name);
            self.failures.push(w);
        }
    }

    /// The daemon's usage now.
    fn usage_now(&mut self) -> Usage {
        match usage(self.pid()) {
            Some(u) => u,
            None => self.fail("the daemon is gone"),
        }
    }

    /// Check the daemon's growth since the baseline against the bounds.
    fn check_growth(&mut self, now: Usage, rss_kib: u64, fds: u64, threads: u64, when: &str) {
        let b = self.before;
        let grew = |a: u64, b: u64| a.saturating_sub(b);
        self.check(grew(now.rss_kib, b.rss_kib) < rss_kib, || {
            format!("{when}: RSS grew from {} to {} KiB", b.rss_kib, now.rss_kib)
        });
        self.check(grew(now.fds, b.fds) < fds, || {
            format!("{when}: descriptors grew from {} to {}", b.fds, now.fds)
        });
        self.check(grew(now.threads, b.threads) < threads, || {
            format!("{when}: threads grew from {} to {}", b.threads, now.threads)
        });
    }

    /// The end of every test: the daemon lives, the honest ranks finish cleanly with no long
    /// gap, the daemon's resources are bounded.
    fn finish(mut self) {
        // Honest traffic goes on a little after the attack.
        std::thread::sleep(Duration::from_millis(300));
        let peak = self.sampler.take().map(Sampler::stop).unwrap_or_default();
        let after = self.usage_now();
        if let Ok(Some(st)) = self.d.child.try_wait() {
            self.fail(&format!("the daemon exited: {st}"));
        }
        if let Some(mut s) = self.ranks[0].stdin.take() {
            let _ = s.write_all(b"stop\n");
        }
        let mut done = Vec::new();
        for i in 0..2 {
            match self.ranks[i].expect("ok honest", Duration::from_secs(12)) {
                Some(l) => done.push(l),
                None => self.fail(&format!(
                    "honest rank {i} did not finish cleanly (error, corruption or stall)"
                )),
            }
        }
        for i in 0..2 {
            let t = Instant::now();
            let st = loop {
                if let Some(st) = self.ranks[i].child.try_wait().unwrap() {
                    break st;
                }
                if t.elapsed() > Duration::from_secs(5) {
                    self.fail(&format!("honest rank {i} did not exit"));
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            self.check(st.success(), || format!("honest rank {i} exited with {st}"));
        }
        let rounds = field(&done[0], "rounds");
        let gap0 = Duration::from_micros(field(&done[0], "worst_gap_us"));
        let gap1 = Duration::from_micros(field(&done[1], "worst_gap_us"));
        self.check(rounds >= MIN_ROUNDS, || {
            format!("the honest ranks made only {rounds} round trips")
        });
        self.check(gap0 < MAX_GAP && gap1 < MAX_GAP, || {
            format!(
                "honest traffic stalled: worst gap between round trips {gap0:?} (rank 0), \
                 between arrivals {gap1:?} (rank 1); bound {MAX_GAP:?}"
            )
        });
        self.check_growth(
            after,
            RSS_GROWTH_KIB,
            FD_GROWTH,
            THREAD_GROWTH,
            "after the attack",
        );
        self.check_growth(
            peak,
            PEAK_RSS_GROWTH_KIB,
            PEAK_FD_GROWTH,
            PEAK_THREAD_GROWTH,
            "at the peak, during the attack",
        );
        println!(
            "REPORT {}: {:.1} s; honest {rounds} round trips, worst gap {:.1} ms (rank 1: {:.1} \
             ms); daemon before [{}], after [{}], peak [{}]; {}",
            self.name,
            self.t0.elapsed().as_secs_f64(),
            gap0.as_secs_f64() * 1e3,
            gap1.as_secs_f64() * 1e3,
            self.before,
            after,
            peak,
            self.notes.join("; ")
        );
        if !self.failures.is_empty() {
            self.fail_now();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------

/// One control-socket request with a deadline (a frozen daemon must fail the test, not hang it).
fn control(d: &Daemon, line: &str) -> Result<Value, String> {
    control_within(d, line, Duration::from_secs(5))
}

fn control_within(d: &Daemon, line: &str, limit: Duration) -> Result<Value, String> {
    let mut s = UnixStream::connect(d.dir.join("control.sock")).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    BufReader::new(s)
        .read_line(&mut out)
        .map_err(|e| format!("control socket: {e}"))?;
    serde_json::from_str(&out).map_err(|e| format!("{e}: {out:?}"))
}

fn counter(d: &Daemon, node: u32, name: &str) -> Result<u64, String> {
    let v = control(
        d,
        &format!(r#"{{"version":1,"request":"counters","nodes":[{node}]}}"#),
    )?;
    v["counters"][0]["counters"]
        .as_array()
        .and_then(|l| l.iter().find(|p| p[0] == name))
        .and_then(|p| p[1].as_u64())
        .ok_or_else(|| format!("no counter {name} in {v}"))
}

fn node_info(d: &Daemon, node: u32) -> Result<Value, String> {
    let v = control(d, r#"{"version":1,"request":"nodes"}"#)?;
    Ok(v["nodes"][node as usize].clone())
}

/// Wait until NI `node` has no client (its last one detached and it was reset).
fn wait_free(sc: &mut Scene, node: u32) -> Duration {
    let t = Instant::now();
    loop {
        match node_info(&sc.d, node) {
            Ok(n) if n["state"] == "free" => return t.elapsed(),
            Ok(_) => {}
            Err(e) => sc.fail(&format!("waiting for NI {node} to be free: {e}")),
        }
        if t.elapsed() > Duration::from_secs(5) {
            sc.fail(&format!(
                "NI {node} still attached 5 s after its client left"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Run `f` on its own thread; `None` if it has not finished within `limit` (it is then left
/// running: the daemon's end in `Daemon::drop` unblocks whatever it waits for).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// A libni client attaches to NI `node` (without waiting for its partition) and pings itself.
fn libni_attaches(sc: &mut Scene, node: u32) -> Duration {
    let path = sc.d.sock(node);
    let t = Instant::now();
    let r = within(Duration::from_secs(10), move || {
        let ni = Ni::attach_path(&path).map_err(|e| format!("attach: {e}"))?;
        ni.ping(ni.rank()).map_err(|e| format!("ping: {e}"))?;
        Ok::<(), String>(())
    });
    match r {
        Some(Ok(())) => t.elapsed(),
        Some(Err(e)) => sc.fail(&format!("a client could not use NI {node}: {e}")),
        None => sc.fail(&format!("attaching a client to NI {node} hung for 10 s")),
    }
}

/// A raw client connects to NI `node` and reads the vendor ID: the NI serves.
fn raw_serves(sc: &mut Scene, node: u32) -> Duration {
    let path = sc.d.sock(node);
    let t = Instant::now();
    let r = within(Duration::from_secs(10), move || {
        let mut c = Raw::connect(&path).map_err(|e| e.to_string())?;
        c.cfg_read16(0).map_err(|e| e.to_string())
    });
    match r {
        Some(Ok(v)) if v == pci::VENDOR_ID => t.elapsed(),
        other => sc.fail(&format!("NI {node} does not serve a new client: {other:?}")),
    }
}

fn ni_ctl() -> PathBuf {
    let p = target_dir().join("ni-ctl");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-p", "ni-ctl"]);
        if target_dir().ends_with("release") {
            c.arg("--release");
        }
        assert!(c.status().unwrap().success(), "building ni-ctl failed");
    }
    p
}

fn ni_ctl_status(d: &Daemon) -> std::process::Output {
    Command::new(ni_ctl())
        .arg("--run-dir")
        .arg(&d.dir)
        .arg("status")
        .output()
        .expect("ni-ctl runs")
}

fn eventfd(flags: libc::c_int) -> std::fs::File {
    // SAFETY: eventfd returns a new descriptor or -1, checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor owned from here on.
    unsafe { std::fs::File::from_raw_fd(fd) }
}

fn set_nonblocking(f: &impl AsRawFd, on: bool) {
    let fd = f.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor we hold; no memory is passed.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert!(fl >= 0);
        let fl = if on {
            fl | libc::O_NONBLOCK
        } else {
            fl & !libc::O_NONBLOCK
        };
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl), 0);
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 1: Lanai DRD chains that never end.
// ---------------------------------------------------------------------------------------------

/// SRAM addresses for descriptors, clear of the fast path's control page and submission ring.
const DRD_A: u32 = 0x10_0000;
const DRD_B: u32 = 0x10_0100;

/// Issue 18, item 1: a DRD chain linked to itself (one of 64-byte DRDs into client memory, one
/// of empty DRDs) must not hold the NI in the register write: the write returns at once, the
/// engine runs in the background and cuts the chain off after 65536 DRDs with DMA_ERROR_INT and
/// `dma_chain_aborts`. Then the pointer FIFO is flooded with thousands of such chains.
#[test]
fn lanai_drd_chain_linked_to_itself_is_cut_off() {
    let mut sc = Scene::start("lanai_drd_chain_linked_to_itself_is_cut_off");
    let mut a = Raw::connect(&sc.d.sock(ATTACKER)).unwrap();
    a.enable().unwrap();
    let iova = 0x4000_0000u64;
    let mem = sealed_memfd(0x10000);
    let r = a.dma_map(Some(mem.as_raw_fd()), 0, iova, 0x10000).unwrap();
    assert!(!r.is_error(), "a sealed memfd maps");
    a.region_write(
        pci::BAR0_REGION,
        DRD_A as u64,
        &drd(64, iova, 0x20_0000, drd::DMA_VALID | DRD_A),
    )
    .unwrap();
    a.region_write(
        pci::BAR0_REGION,
        DRD_B as u64,
        &drd(0, 0, 0, drd::DMA_VALID | DRD_B),
    )
    .unwrap();
    let aborts0 = counter(&sc.d, ATTACKER, "dma_chain_aborts").unwrap();
    let mut worst_write = Duration::ZERO;
    for (ch, at) in [(0, DRD_A), (1, DRD_B)] {
        let t = Instant::now();
        a.special_write(lanai::DMA_POINTER[ch], 4, at as u64)
            .unwrap();
        worst_write = worst_write.max(t.elapsed());
    }
    sc.check(worst_write < Duration::from_millis(100), || {
        format!(
            "a DMA pointer write starting a self-linked chain took {}",
            ms(worst_write)
        )
    });
    // Both chains are cut off in the background while the NI's registers and the control
    // socket keep answering.
    let t = Instant::now();
    let (mut worst_reg, mut worst_ctl) = (Duration::ZERO, Duration::ZERO);
    let (cut, isr_seen) = loop {
        let t1 = Instant::now();
        let v = a.special_read(lanai::ISR, 4).unwrap() as u32;
        worst_reg = worst_reg.max(t1.elapsed());
        let t2 = Instant::now();
        let n = counter(&sc.d, ATTACKER, "dma_chain_aborts").unwrap();
        worst_ctl = worst_ctl.max(t2.elapsed());
        if n >= aborts0 + 2 && v & isr::DMA_ERROR_INT != 0 {
            break (t.elapsed(), v);
        }
        if t.elapsed() > Duration::from_secs(10) {
            sc.fail(&format!(
                "the self-linked chains were not cut off within 10 s: dma_chain_aborts {} \
                 (was {aborts0}), ISR {v:#x}",
                n
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    sc.note(format!(
        "pointer write {}; both chains cut off after {} (ISR {isr_seen:#x}); worst register \
         read {}, worst control request {}",
        ms(worst_write),
        ms(cut),
        ms(worst_reg),
        ms(worst_ctl)
    ));
    sc.check(worst_ctl < Duration::from_millis(500), || {
        format!("a control request took {} during the chains", ms(worst_ctl))
    });
    // Flood the pointer FIFOs with self-linked chains: each is 65536 DRDs of work.
    let t = Instant::now();
    let mut writes = Vec::with_capacity(4000);
    for i in 0..4000 {
        let t1 = Instant::now();
        let (ch, at) = if i % 2 == 0 { (0, DRD_A) } else { (1, DRD_B) };
        a.special_write(lanai::DMA_POINTER[ch], 4, at as u64)
            .unwrap();
        writes.push(t1.elapsed());
    }
    let flood = t.elapsed();
    writes.sort_unstable();
    // A write that ran its chain inline would make every write slow (110 ms each in a debug
    // build): the 99th percentile says so. The worst one alone can be a thread descheduled
    // for a while on two busy vCPUs (149 ms seen once, while the other tests of this file
    // ran beside it); it bounds only a stall.
    let (p99_flood, worst_flood) = (writes[writes.len() * 99 / 100], writes[writes.len() - 1]);
    std::thread::sleep(Duration::from_millis(1500));
    let t1 = Instant::now();
    let more = counter(&sc.d, ATTACKER, "dma_chain_aborts").unwrap();
    let ctl = t1.elapsed();
    sc.note(format!(
        "4000 chains queued in {} (99th percentile write {}, worst {}); {} more cut off \
         1.5 s later; control request {}",
        ms(flood),
        ms(p99_flood),
        ms(worst_flood),
        more.saturating_sub(aborts0 + 2),
        ms(ctl)
    ));
    sc.check(p99_flood < Duration::from_millis(100), || {
        format!(
            "pointer writes took {} (99th percentile) under the flood",
            ms(p99_flood)
        )
    });
    sc.check(worst_flood < Duration::from_secs(1), || {
        format!("a pointer write took {} under the flood", ms(worst_flood))
    });
    sc.check(more > aborts0 + 2, || {
        "the queued chains make no progress".into()
    });
    drop(a);
    let freed = wait_free(&mut sc, ATTACKER);
    sc.note(format!("NI freed {} after the attacker left", ms(freed)));
    raw_serves(&mut sc, ATTACKER);
    sc.finish();
}

// Found by this test: the pointer write used to run a whole 8 MiB DRD inline (~110 ms in a
// debug build), and the poller ran engine steps under the fabric lock, starving the control
// socket. Now a register write moves at most 64 KiB, DRDs move in 1 MiB pieces across steps,
// and steps run outside the fabric lock (`lanai/dma.rs`, `Fabric::step_engines`).
/// Issue 18, item 1: a self-linked chain of 8 MiB DRDs (SRAM to client memory) must run in
/// the background in bounded steps: the register write returns at once, the control socket
/// answers and other clients attach while it runs, and the attacker's detach stops it.
#[test]
fn lanai_drd_self_chain_of_8_mib_drds_runs_in_the_background() {
    let mut sc = Scene::start("lanai_drd_self_chain_of_8_mib_drds_runs_in_the_background");
    let mut a = Raw::connect(&sc.d.sock(ATTACKER)).unwrap();
    a.enable().unwrap();
    let iova = 0x4000_0000u64;
    let size = 8u64 << 20;
    let mem = sealed_memfd(size);
    let r = a.dma_map(Some(mem.as_raw_fd()), 0, iova, size).unwrap();
    assert!(!r.is_error());
    a.region_write(
        pci::BAR0_REGION,
        DRD_A as u64,
        &drd(size as u32, iova, 0, drd::DMA_VALID | DRD_A),
    )
    .unwrap();
    let t = Instant::now();
    a.special_write(lanai::DMA_POINTER[0], 4, DRD_A as u64)
        .unwrap();
    let write = t.elapsed();
    let (mut worst_reg, mut worst_ctl) = (Duration::ZERO, Duration::ZERO);
    let t = Instant::now();
    let mut attach = None;
    let (mut ctl_ok, mut ctl_failed) = (0, 0);
    while t.elapsed() < Duration::from_secs(3) {
        let t1 = Instant::now();
        if let Err(e) = a.special_read(lanai::ISR, 4) {
            sc.fail(&format!(
                "the attacker's own register read during the chain: {e}"
            ));
        }
        worst_reg = worst_reg.max(t1.elapsed());
        let t2 = Instant::now();
        let line = format!(r#"{{"version":1,"request":"counters","nodes":[{ATTACKER}]}}"#);
        match control_within(&sc.d, &line, Duration::from_secs(2)) {
            Ok(_) => ctl_ok += 1,
            Err(_) => ctl_failed += 1,
        }
        worst_ctl = worst_ctl.max(t2.elapsed());
        if attach.is_none() && t.elapsed() > Duration::from_secs(1) {
            // Another client of the daemon attaches meanwhile.
            attach = Some(libni_attaches(&mut sc, BYSTANDER));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    sc.note(format!(
        "pointer write {}; worst register read {}; control requests: {ctl_ok} answered, \
         {ctl_failed} unanswered after 2 s, worst {}; a client attached to NI {BYSTANDER} in {} \
         meanwhile",
        ms(write),
        ms(worst_reg),
        ms(worst_ctl),
        ms(attach.unwrap_or_default())
    ));
    sc.check(write < Duration::from_millis(100), || {
        format!(
            "the pointer write starting a chain of 8 MiB DRDs took {}",
            ms(write)
        )
    });
    sc.check(
        ctl_failed == 0 && worst_ctl < Duration::from_millis(500),
        || {
            format!(
                "the control socket during the chain: {ctl_failed} of {} requests unanswered \
             after 2 s, worst {}",
                ctl_ok + ctl_failed,
                ms(worst_ctl)
            )
        },
    );
    sc.check(worst_reg < Duration::from_millis(500), || {
        format!(
            "the attacker's own register read took {} during the chain",
            ms(worst_reg)
        )
    });
    drop(a);
    let freed = wait_free(&mut sc, ATTACKER);
    sc.note(format!("NI freed {} after the attacker left", ms(freed)));
    // The next client gets fresh SRAM: the descriptor is gone.
    let mut c = Raw::connect(&sc.d.sock(ATTACKER)).unwrap();
    c.enable().unwrap();
    let b = c.region_read(pci::BAR0_REGION, DRD_A as u64, 24).unwrap();
    assert_eq!(b, vec![0u8; 24], "the next client sees fresh SRAM");
    drop(c);
    wait_free(&mut sc, ATTACKER);
    sc.finish();
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 2: full eventfd counters.
// ---------------------------------------------------------------------------------------------

struct MsixStats {
    loops: u64,
    worst_op: Duration,
    error: Option<String>,
    /// What the attacker was doing last.
    phase: &'static str,
}

/// The attacker: MSI-X on, all 16 vectors on eventfds whose counters are full, then every
/// way it has to raise an interrupt, for `secs`: fast-path completions with CQ_ARM set (sent
/// by the poller), SET_IRQS loopback triggers, the Lanai host interrupt, CM-5 Green.
fn msix_attack(path: PathBuf, efds: Vec<std::fs::File>, make_blocking: bool) -> MsixStats {
    let mut st = MsixStats {
        loops: 0,
        worst_op: Duration::ZERO,
        error: None,
        phase: "attaching",
    };
    let mut phase = "attaching";
    let r = (|| -> std::io::Result<()> {
        let mut fp = FastPath::attach(&path)?;
        phase = "registering 16 eventfds";
        fp.raw.enable_msix()?;
        let fds: Vec<i32> = efds.iter().map(|f| f.as_raw_fd()).collect();
        let r = fp.raw.set_irqs(
            pci::MSIX_IRQ_INDEX,
            irq::DATA_EVENTFD | irq::ACTION_TRIGGER,
            0,
            fds.len() as u32,
            &fds,
        )?;
        if r.is_error() {
            return Err(std::io::Error::other("SET_IRQS of 16 eventfds refused"));
        }
        for f in &efds {
            // The largest count an eventfd holds: any further signal would have to wait.
            (&*f).write_all(&(u64::MAX - 1).to_ne_bytes())?;
            if make_blocking {
                // The daemon made the (shared) file non-blocking when it took it; the client
                // makes it blocking again.
                set_nonblocking(f, false);
            }
        }
        phase = "setting up its completion ring (the NI comes up in its partition)";
        fp.setup_cq(0x5000_0000, 64)?;
        phase = "enabling the CM-5 Green and Lanai interrupts";
        fp.raw
            .cm5_write(true, cm5::NI_INTERRUPT_LEVEL, cm5::level::GREEN)?;
        fp.raw.cfg_write32(
            lanai::config40::OFFSET as u64,
            lanai::config40::PCI_INT_ENABLE_ON,
        )?;
        let mut consumed = 0u32;
        let t = Instant::now();
        phase = "raising interrupts";
        while t.elapsed() < Duration::from_secs(3) {
            let t1 = Instant::now();
            // A completion the client asked to be interrupted for.
            fp.ctl(ctrl::CQ_ARM).store(1, Ordering::SeqCst);
            fp.put(&Request {
                opcode: op::NOOP,
                rank: 0,
                ..Default::default()
            });
            fp.publish()?;
            // Loopback triggers of every vector.
            let r = fp.raw.set_irqs(
                pci::MSIX_IRQ_INDEX,
                irq::DATA_NONE | irq::ACTION_TRIGGER,
                0,
                16,
                &[],
            )?;
            if r.is_error() {
                return Err(std::io::Error::other("loopback SET_IRQS refused"));
            }
            // The Lanai host interrupt (REQ_ACK0 toggles) and a CM-5 Green cause.
            fp.raw.special_write(lanai::ISR, 4, isr::REQ_ACK0 as u64)?;
            fp.raw
                .cm5_write(true, cm5::NI_INTERRUPT_SET_GREEN, cm5::green::COM_REC_OK)?;
            fp.raw
                .cm5_write(true, cm5::NI_INTERRUPT_CLEAR_GREEN, cm5::green::ALL)?;
            st.worst_op = st.worst_op.max(t1.elapsed());
            // Consume completions so the next arm is answered again.
            consumed = consumed.wrapping_add(fp.cq_written(consumed));
            fp.ctl(ctrl::CQ_HEAD).store(consumed, Ordering::Release);
            st.loops += 1;
        }
        Ok(())
    })();
    if let Err(e) = r {
        st.error = Some(e.to_string());
    }
    st.phase = phase;
    st
}

fn msix_full_counter(name: &'static str, make_blocking: bool) {
    let mut sc = Scene::start(name);
    let efds: Vec<std::fs::File> = (0..16).map(|_| eventfd(0)).collect();
    let mine: Vec<std::fs::File> = efds.iter().map(|f| f.try_clone().unwrap()).collect();
    let path = sc.d.sock(ATTACKER);
    let msix0 = counter(&sc.d, ATTACKER, "msix_sent").unwrap_or(0);
    let st = within(Duration::from_secs(12), move || {
        msix_attack(path, efds, make_blocking)
    });
    let trouble = match &st {
        None => Some("its accesses hung for 12 s".to_string()),
        Some(MsixStats {
            error: Some(e),
            loops,
            phase,
            ..
        }) => Some(format!(
            "its session failed while {phase}, after {loops} loops: {e} (a timed-out read: \
             the daemon stopped answering its NI for 5 s)"
        )),
        _ => None,
    };
    if let Some(trouble) = trouble {
        // Did the daemon freeze? Ask it, then drain the counters (what a reader of the
        // eventfds would do) and ask again.
        let frozen = counter(&sc.d, BYSTANDER, "attaches").err();
        for f in &mine {
            set_nonblocking(f, true);
            let mut b = [0u8; 8];
            let _ = (&*f).read(&mut b);
        }
        let after = counter(&sc.d, BYSTANDER, "attaches").err();
        sc.fail(&format!(
            "the attacker with full eventfds{}: {trouble}; control socket before draining the \
             counters: {}; after: {}",
            if make_blocking {
                " (set back to blocking)"
            } else {
                ""
            },
            frozen.as_deref().unwrap_or("answers"),
            after.as_deref().unwrap_or("answers")
        ));
    }
    let st = st.unwrap();
    let sent = counter(&sc.d, ATTACKER, "msix_sent").unwrap_or(0) - msix0;
    sc.note(format!(
        "{} attack loops, worst loop {}, msix_sent +{sent}",
        st.loops,
        ms(st.worst_op)
    ));
    sc.check(st.worst_op < Duration::from_millis(500), || {
        format!(
            "an attacker's loop of register writes took {}",
            ms(st.worst_op)
        )
    });
    drop(mine);
    let freed = wait_free(&mut sc, ATTACKER);
    let att = libni_attaches(&mut sc, ATTACKER);
    sc.note(format!(
        "NI freed {} after the attacker left; a libni client attached to it in {}",
        ms(freed),
        ms(att)
    ));
    wait_free(&mut sc, ATTACKER);
    sc.finish();
}

/// Issue 18, item 2: eventfds filled to 2^64-2 by their owner: every interrupt the device
/// sends them must find the counter full and move on (the interrupt is already pending), never
/// wait with a lock held. The NI takes a new client afterwards.
#[test]
fn msix_eventfd_with_a_full_counter_does_not_freeze_the_daemon() {
    msix_full_counter(
        "msix_eventfd_with_a_full_counter_does_not_freeze_the_daemon",
        false,
    );
}

// Found by this test: the daemon froze (its NI, the control socket, the honest pair's fabric
// path) because `irq::signal` wrote, under the fabric's lock, to a descriptor whose O_NONBLOCK
// the client had cleared again. Now the NI's own session thread signals, with no lock held,
// only when poll says writable, and a watchdog interrupts a write stuck for a second.
/// Issue 18, item 2 (a variant of ours): the daemon makes a client's eventfd non-blocking when
/// it takes it, but the non-blocking flag belongs to the open file, which the client shares:
/// it clears the flag again after SET_IRQS and fills the counter. An interrupt must still not
/// block the daemon.
#[test]
fn msix_eventfd_set_back_to_blocking_does_not_freeze_the_daemon() {
    msix_full_counter(
        "msix_eventfd_set_back_to_blocking_does_not_freeze_the_daemon",
        true,
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 3: client memory that can vanish under the device.
// ---------------------------------------------------------------------------------------------

/// Issue 18, item 3: DMA_MAP of memory that can shrink (an unsealed memfd, one sealed only
/// against growing, one that cannot be sealed, a regular file) is refused with an error reply,
/// the log saying F_SEAL_SHRINK is needed; the attacker then truncates its memfd and keeps
/// poking at it (DMA into the refused range, unmaps), and punches holes into a sealed memfd the
/// device has mapped while DMA runs into it. The daemon lives.
#[test]
fn dma_map_of_shrinkable_memory_is_refused_and_shrinking_kills_nothing() {
    // The refusal's reason goes to the daemon's log (a vfio-user error reply carries an errno
    // only), at debug level.
    let mut sc = Scene::start_env(
        "dma_map_of_shrinkable_memory_is_refused_and_shrinking_kills_nothing",
        &[("NI_LOG", "info,ni_device::server=debug")],
    );
    let mut a = Raw::connect(&sc.d.sock(ATTACKER)).unwrap();
    a.enable().unwrap();
    let errors0 = counter(&sc.d, ATTACKER, "dma_map_errors").unwrap();
    let size = 1u64 << 20;
    let unsealed = memfd(size, 0);
    let grow_only = memfd(size, libc::F_SEAL_GROW);
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"no-sealing".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh descriptor owned from here on.
    let unsealable = unsafe { std::fs::File::from_raw_fd(fd) };
    unsealable.set_len(size).unwrap();
    let path = std::env::temp_dir().join(format!("ni-hostile-{}-file", std::process::id()));
    let regular = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    regular.set_len(size).unwrap();
    let _ = std::fs::remove_file(&path);
    let iova = 0x4000_0000u64;
    for (what, f) in [
        ("an unsealed memfd", &unsealed),
        ("a memfd sealed only against growing", &grow_only),
        ("a memfd that cannot be sealed", &unsealable),
        ("a regular file", &regular),
    ] {
        let r = a.dma_map(Some(f.as_raw_fd()), 0, iova, size).unwrap();
        sc.check(r.is_error(), || format!("DMA_MAP of {what} was accepted"));
    }
    let errors = counter(&sc.d, ATTACKER, "dma_map_errors").unwrap() - errors0;
    sc.check(errors == 4, || format!("dma_map_errors +{errors}, want +4"));
    let log = sc.d.log();
    let said = log.lines().filter(|l| l.contains("F_SEAL_SHRINK")).count();
    sc.check(said >= 4, || {
        format!("the daemon's log names F_SEAL_SHRINK {said} times for 4 refusals")
    });
    let regions = node_info(&sc.d, ATTACKER).unwrap()["dma_regions"].clone();
    sc.check(regions == 0, || {
        format!("dma_regions {regions} after refusals")
    });

    // The attacker shrinks what it offered and keeps poking at that range.
    unsealed.set_len(0).unwrap();
    let faults0 = counter(&sc.d, ATTACKER, "dma_faults").unwrap();
    a.region_write(
        pci::BAR0_REGION,
        DRD_A as u64,
        &drd(4096, iova, 0x20_0000, 0),
    )
    .unwrap();
    a.region_write(
        pci::BAR0_REGION,
        DRD_B as u64,
        &drd(drd::DMA_READ | 4096, iova + 8192, 0x20_0000, 0),
    )
    .unwrap();
    for i in 0..200 {
        let at = if i % 2 == 0 { DRD_A } else { DRD_B };
        a.special_write(lanai::DMA_POINTER[i % 4], 4, at as u64)
            .unwrap();
        if i % 50 == 0 {
            let _ = a.dma_unmap(iova, size).unwrap();
            let _ = a
                .dma_map(Some(unsealed.as_raw_fd()), 0, iova, 4096)
                .unwrap();
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let faults = counter(&sc.d, ATTACKER, "dma_faults").unwrap() - faults0;
    sc.check(faults >= 200, || {
        format!("200 DMAs into unmapped memory counted {faults} dma_faults")
    });

    // A sealed memfd is mapped; the attacker cannot shrink it, but punches holes into it
    // while the device writes into and reads from it.
    let sealed = sealed_memfd(size);
    let r = a.dma_map(Some(sealed.as_raw_fd()), 0, iova, size).unwrap();
    sc.check(!r.is_error(), || "DMA_MAP of a sealed memfd refused".into());
    sc.check(sealed.set_len(0).is_err(), || {
        "the kernel let a sealed memfd shrink".into()
    });
    a.region_write(pci::BAR0_REGION, 0x20_0000, b"through the hole")
        .unwrap();
    a.region_write(
        pci::BAR0_REGION,
        DRD_A as u64,
        &drd(16, iova + 4096, 0x20_0000, 0),
    )
    .unwrap();
    a.region_write(
        pci::BAR0_REGION,
        DRD_B as u64,
        &drd(drd::DMA_READ | 4096, iova, 0x30_0000, 0),
    )
    .unwrap();
    for i in 0..200 {
        // SAFETY: fallocate on a memfd we own; no memory is passed.
        let r = unsafe {
            libc::fallocate(
                sealed.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                size as libc::off_t,
            )
        };
        assert_eq!(r, 0, "punching a hole: {}", std::io::Error::last_os_error());
        let at = if i % 2 == 0 { DRD_A } else { DRD_B };
        a.special_write(lanai::DMA_POINTER[i % 4], 4, at as u64)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let still = counter(&sc.d, ATTACKER, "dma_faults").unwrap() - faults0 - faults;
    // One more write into the punched file, with nothing punching meanwhile.
    a.special_write(lanai::DMA_POINTER[0], 4, DRD_A as u64)
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut got = [0u8; 16];
    std::os::unix::fs::FileExt::read_exact_at(&sealed, &mut got, 4096).unwrap();
    sc.check(&got == b"through the hole", || {
        format!("the last DMA into the punched memfd left {got:?}")
    });
    sc.check(still == 0, || {
        format!("{still} dma_faults on a mapped memfd with holes punched")
    });
    sc.note(format!(
        "4 shrinkable maps refused; {faults} faults poking the truncated range; {still} faults \
         with holes punched under DMA"
    ));
    drop(a);
    wait_free(&mut sc, ATTACKER);
    raw_serves(&mut sc, ATTACKER);
    wait_free(&mut sc, ATTACKER);
    sc.finish();
}

// Found by this test: the map was accepted with MAP_NORESERVE, and the first DMA into it
// killed the daemon with SIGBUS. Now hugetlbfs files are mapped with a reservation, so the
// map is refused when the pool cannot back it.
/// Issue 18, item 3 (a variant of ours): a hugetlbfs memfd sealed against shrinking passes the
/// seal check, but with no huge pages to back it every access to it is a SIGBUS. The device
/// must refuse the map, or survive the access; a DMA into it must not kill the daemon.
#[test]
fn dma_map_of_a_hugetlb_memfd_without_huge_pages_kills_nothing() {
    let mut sc = Scene::start("dma_map_of_a_hugetlb_memfd_without_huge_pages_kills_nothing");
    let huge_free = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe {
        libc::memfd_create(
            c"ni-hostile-huge".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_HUGETLB,
        )
    };
    if fd < 0 {
        sc.note(format!(
            "no hugetlb memfd on this kernel ({}): nothing to test",
            std::io::Error::last_os_error()
        ));
        return sc.finish();
    }
    // SAFETY: fd is a fresh descriptor owned from here on.
    let huge = unsafe { std::fs::File::from_raw_fd(fd) };
    let size = 2u64 << 20;
    huge.set_len(size).unwrap();
    // SAFETY: F_ADD_SEALS on a memfd we own; no memory is passed.
    let sealed = unsafe {
        libc::fcntl(
            fd,
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
        )
    } == 0;
    let mut a = Raw::connect(&sc.d.sock(ATTACKER)).unwrap();
    a.enable().unwrap();
    let iova = 0x4000_0000u64;
    let r = a.dma_map(Some(fd), 0, iova, size).unwrap();
    let mapped = !r.is_error();
    sc.note(format!(
        "hugetlb memfd (sealed: {sealed}, free huge pages: {huge_free}) DMA_MAP {}",
        if mapped { "accepted" } else { "refused" }
    ));
    // The device touches it: SRAM to host and host to SRAM.
    a.region_write(pci::BAR0_REGION, DRD_A as u64, &drd(64, iova, 0x20_0000, 0))
        .unwrap();
    a.region_write(
        pci::BAR0_REGION,
        DRD_B as u64,
        &drd(drd::DMA_READ | 64, iova + 4096, 0x20_0000, 0),
    )
    .unwrap();
    let mut poked = Ok(());
    for (ch, at) in [(0, DRD_A), (1, DRD_B)] {
        if let Err(e) = a.special_write(lanai::DMA_POINTER[ch], 4, at as u64) {
            poked = Err(e);
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    if let Ok(Some(st)) = sc.d.child.try_wait() {
        sc.fail(&format!(
            "the daemon died ({st}) when the device touched a hugetlb memfd with no huge pages \
             behind it (DMA_MAP was {}; the attacker's pointer write: {poked:?})",
            if mapped { "accepted" } else { "refused" }
        ));
    }
    poked.unwrap();
    drop(a);
    wait_free(&mut sc, ATTACKER);
    sc.finish();
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 4: completions nobody consumes.
// ---------------------------------------------------------------------------------------------

/// Issue 18, item 4: a raw fast-path client sets up a 16-entry completion ring, never consumes
/// it, and posts requests as fast as it can for 3 s (NOOPs to itself and to its absent peer,
/// sends to the absent peer, receives that never match, bad keys), overrunning its submission
/// ring as well; then, consuming its completions, it posts receives that never match for 1.5 s.
/// The daemon's memory must stay bounded (it grew by ~127 MB/s before the fix) and the
/// held-back completions are counted.
#[test]
fn unconsumed_completion_ring_under_a_request_flood_stays_bounded() {
    let mut sc = Scene::start("unconsumed_completion_ring_under_a_request_flood_stays_bounded");
    let mut fp = FastPath::attach(&sc.d.sock(ATTACKER)).unwrap();
    fp.setup_cq(0x5000_0000, 16).unwrap();
    let buf = sealed_memfd(4096);
    let biova = 0x6000_0000u64;
    let r = fp
        .raw
        .dma_map(Some(buf.as_raw_fd()), 0, biova, 4096)
        .unwrap();
    assert!(!r.is_error());
    let kinds = [
        Request {
            opcode: op::NOOP,
            rank: 0,
            ..Default::default()
        },
        Request {
            opcode: op::NOOP,
            rank: 1,
            ..Default::default()
        },
        Request {
            opcode: op::SEND,
            rank: 1,
            addr: biova,
            len: 64,
            tag: 1,
            ..Default::default()
        },
        Request {
            opcode: op::RECV,
            rank: ANY_RANK,
            addr: biova,
            len: 64,
            tag: 7,
            mask: u64::MAX,
            ..Default::default()
        },
        Request {
            opcode: op::PUT,
            rank: 0,
            addr: biova,
            len: 64,
            key: 999,
            ..Default::default()
        },
    ];
    let (mut posted, mut overruns, mut k) = (0u64, 0u64, 0usize);
    let t = Instant::now();
    let mut last_overrun = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        let free = fp.sq_free();
        for _ in 0..free {
            fp.put(&kinds[k % kinds.len()]);
            k += 1;
        }
        posted += free as u64;
        if last_overrun.elapsed() > Duration::from_millis(100) {
            // Publish far more than the ring holds.
            for _ in 0..3000 {
                fp.put(&kinds[0]);
            }
            posted += 3000;
            overruns += 1;
            last_overrun = Instant::now();
        }
        fp.publish().unwrap();
        if free == 0 {
            std::thread::yield_now();
        }
    }
    let during = sc.usage_now();
    let taken = fp.ctl(ctrl::SQ_HEAD).load(Ordering::Acquire);
    let held = counter(&sc.d, ATTACKER, "cq_full_waits").unwrap();
    let sq_overruns = counter(&sc.d, ATTACKER, "sq_overruns").unwrap();
    let requests = counter(&sc.d, ATTACKER, "requests").unwrap();
    sc.note(format!(
        "phase 1: {posted} requests posted ({overruns} overruns), the device took {taken} \
         ({requests} counted), cq_full_waits {held}, sq_overruns {sq_overruns}; daemon [{during}]"
    ));
    sc.check_growth(
        during,
        RSS_GROWTH_KIB,
        PEAK_FD_GROWTH,
        THREAD_GROWTH,
        "at the end of the flood, the attacker still attached",
    );
    sc.check(held > 0, || "no completion was ever held back".into());
    sc.check(sq_overruns > 0, || "no overrun was counted".into());

    // Phase 2: completions consumed, receives that never match posted as fast as possible.
    let mut consumed = 0u32;
    let t = Instant::now();
    let mut recvs = 0u64;
    let recv = kinds[3];
    while t.elapsed() < Duration::from_millis(1500) {
        consumed = consumed.wrapping_add(fp.cq_written(consumed));
        fp.ctl(ctrl::CQ_HEAD).store(consumed, Ordering::Release);
        let free = fp.sq_free();
        for _ in 0..free {
            fp.put(&recv);
        }
        recvs += free as u64;
        fp.publish().unwrap();
        if free == 0 {
            std::thread::yield_now();
        }
    }
    let during = sc.usage_now();
    sc.note(format!(
        "phase 2: {recvs} receives posted; daemon [{during}]"
    ));
    sc.check_growth(
        during,
        RSS_GROWTH_KIB,
        PEAK_FD_GROWTH,
        THREAD_GROWTH,
        "after a flood of unmatched receives, the attacker still attached",
    );
    drop(fp);
    wait_free(&mut sc, ATTACKER);
    sc.finish();
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 8: DMA maps.
// ---------------------------------------------------------------------------------------------

/// Issue 18, item 8: thousands of DMA_MAPs, first each with a fresh memfd (its own descriptor),
/// then thousands of the same one: past the caps (64 distinct files, 4096 mappings per client)
/// they are refused and counted, and the daemon's descriptors stay bounded. Meanwhile another
/// client attaches to another NI; after the attacker's detach its NI comes back with fresh,
/// zeroed SRAM and no mappings.
#[test]
fn dma_map_flood_is_capped_and_detach_gives_fresh_sram() {
    let mut sc = Scene::start("dma_map_flood_is_capped_and_detach_gives_fresh_sram");
    let mut a = Raw::connect(&sc.d.sock(ATTACKER)).unwrap();
    a.enable().unwrap();
    a.region_write(pci::BAR0_REGION, DRD_A as u64, b"attacker's secret")
        .unwrap();
    let errors0 = counter(&sc.d, ATTACKER, "dma_map_errors").unwrap();
    let page = 4096u64;
    let base = 0x10_0000_0000u64;
    let t = Instant::now();
    let (mut ok_files, mut refused_files) = (0u64, 0u64);
    let mut first = None;
    for i in 0..2000u64 {
        let f = sealed_memfd(page);
        let r = a
            .dma_map(Some(f.as_raw_fd()), 0, base + i * page, page)
            .unwrap();
        if r.is_error() {
            refused_files += 1;
        } else {
            ok_files += 1;
            if first.is_none() {
                first = Some(f);
            }
        }
    }
    let files_took = t.elapsed();
    let mid = sc.usage_now();
    let first = first.expect("some map of a fresh memfd was accepted");
    let t = Instant::now();
    let (mut ok_same, mut refused_same) = (0u64, 0u64);
    for i in 0..5000u64 {
        let r = a
            .dma_map(Some(first.as_raw_fd()), 0, base + (4000 + i) * page, page)
            .unwrap();
        if r.is_error() {
            refused_same += 1;
        } else {
            ok_same += 1;
        }
    }
    let same_took = t.elapsed();
    let at_cap = sc.usage_now();
    let errors = counter(&sc.d, ATTACKER, "dma_map_errors").unwrap() - errors0;
    let regions = node_info(&sc.d, ATTACKER).unwrap()["dma_regions"]
        .as_u64()
        .unwrap_or(0);
    sc.note(format!(
        "2000 fresh memfds: {ok_files} mapped, {refused_files} refused in {}; 5000 maps of one: \
         {ok_same} mapped, {refused_same} refused in {}; dma_map_errors +{errors}; dma_regions \
         {regions}; daemon after the files [{mid}], at the cap [{at_cap}]",
        ms(files_took),
        ms(same_took)
    ));
    sc.check(ok_files == 64, || {
        format!("{ok_files} distinct files mapped; the cap is 64")
    });
    sc.check(ok_files + ok_same == 4096, || {
        format!("{} mappings accepted; the cap is 4096", ok_files + ok_same)
    });
    sc.check(errors == refused_files + refused_same, || {
        format!(
            "dma_map_errors +{errors} for {} refusals",
            refused_files + refused_same
        )
    });
    sc.check(regions == 4096, || format!("dma_regions {regions}"));
    sc.check_growth(
        at_cap,
        PEAK_RSS_GROWTH_KIB,
        PEAK_FD_GROWTH,
        THREAD_GROWTH,
        "at the caps, the attacker attached",
    );
    // Another client of the daemon attaches to another NI meanwhile.
    let att = libni_attaches(&mut sc, BYSTANDER);
    drop(a);
    let freed = wait_free(&mut sc, ATTACKER);
    let info = node_info(&sc.d, ATTACKER).unwrap();
    sc.check(info["dma_regions"] == 0, || format!("after detach: {info}"));
    let mut c = Raw::connect(&sc.d.sock(ATTACKER)).unwrap();
    c.enable().unwrap();
    let b = c.region_read(pci::BAR0_REGION, DRD_A as u64, 17).unwrap();
    sc.check(b == vec![0u8; 17], || {
        format!("the next client sees the previous one's SRAM: {b:?}")
    });
    drop(c);
    wait_free(&mut sc, ATTACKER);
    sc.note(format!(
        "a client attached to NI {BYSTANDER} in {}; NI {ATTACKER} freed {} after the detach, \
         fresh SRAM",
        ms(att),
        ms(freed)
    ));
    sc.finish();
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 9: the control socket.
// ---------------------------------------------------------------------------------------------

/// Issue 18, item 9: hundreds of connections to the control socket, held open: the daemon
/// serves 32 at once, tells the rest it is busy and closes them, its threads stay bounded, and
/// `ni-ctl status` works once they are gone. Then connections that send requests and never read
/// the answers, and one endless request line: `ni-ctl status` keeps working.
#[test]
fn control_socket_flood_is_capped_and_recovers() {
    let mut sc = Scene::start("control_socket_flood_is_capped_and_recovers");
    let st = ni_ctl_status(&sc.d);
    assert!(st.status.success(), "ni-ctl status before the flood");
    let path = sc.d.dir.join("control.sock");
    let t = Instant::now();
    let conns: Vec<UnixStream> = (0..300)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    let opened = t.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let (mut held, mut busy, mut other) = (Vec::new(), 0, Vec::new());
    for mut c in conns {
        c.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let mut s = String::new();
        match c.read_to_string(&mut s) {
            Ok(_) if s.contains("busy") => busy += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && s.is_empty() => held.push(c),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && s.contains("busy") => busy += 1,
            r => other.push(format!("{r:?} {s:?}")),
        }
    }
    let during = sc.usage_now();
    let busy_ctl = ni_ctl_status(&sc.d);
    let busy_said = String::from_utf8_lossy(&busy_ctl.stderr).to_string()
        + &String::from_utf8_lossy(&busy_ctl.stdout);
    sc.note(format!(
        "300 connections opened in {}: {} held, {busy} told busy, {} other; daemon [{during}]; \
         ni-ctl status meanwhile: {} {:?}",
        ms(opened),
        held.len(),
        other.len(),
        busy_ctl.status,
        busy_said.trim()
    ));
    sc.check(other.is_empty(), || {
        format!("connections neither held nor told busy: {other:?}")
    });
    sc.check(held.len() <= 32, || {
        format!("{} connections held at once; the cap is 32", held.len())
    });
    sc.check(busy >= 300 - 32, || format!("only {busy} told busy"));
    sc.check(
        !busy_ctl.status.success() && busy_said.contains("busy"),
        || format!("ni-ctl status with the slots taken: {busy_said}"),
    );
    sc.check_growth(
        during,
        PEAK_RSS_GROWTH_KIB,
        PEAK_FD_GROWTH,
        PEAK_THREAD_GROWTH,
        "with the control connections held",
    );
    drop(held);
    let t = Instant::now();
    loop {
        if ni_ctl_status(&sc.d).status.success() {
            break;
        }
        if t.elapsed() > Duration::from_secs(3) {
            sc.fail("ni-ctl status still fails 3 s after the flood's connections closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    sc.note(format!(
        "ni-ctl status works {} after they closed",
        ms(t.elapsed())
    ));

    // Connections that send requests and never read the answers.
    let line = format!("{}\n", r#"{"version":1,"request":"counters","nodes":[]}"#);
    let mut deaf = Vec::new();
    let mut sent = 0usize;
    for _ in 0..8 {
        let mut c = UnixStream::connect(&path).unwrap();
        c.set_nonblocking(true).unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(300) {
            match c.write(line.as_bytes()) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("writing requests: {e}"),
            }
        }
        deaf.push(c);
    }
    // And one request line that never ends.
    let mut endless = UnixStream::connect(&path).unwrap();
    endless
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    endless
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let chunk = vec![b'x'; 64 << 10];
    for _ in 0..8 {
        if endless.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut answer = String::new();
    let _ = BufReader::new(&endless).read_line(&mut answer);
    let t = Instant::now();
    let st = ni_ctl_status(&sc.d);
    let took = t.elapsed();
    let with_deaf = sc.usage_now();
    sc.note(format!(
        "8 connections that never read ({} KiB of requests), ni-ctl status {} in {}; endless \
         line answered {:?}; daemon [{with_deaf}]",
        sent >> 10,
        st.status,
        ms(took),
        answer.trim()
    ));
    sc.check(st.status.success(), || {
        format!(
            "ni-ctl status beside connections that never read: {}",
            String::from_utf8_lossy(&st.stderr)
        )
    });
    sc.check(took < Duration::from_secs(2), || {
        format!("ni-ctl status took {}", ms(took))
    });
    sc.check(answer.contains("longer than"), || {
        format!("the endless request line got {answer:?}")
    });
    std::thread::sleep(Duration::from_millis(500));
    drop(deaf);
    drop(endless);
    let t = Instant::now();
    while !ni_ctl_status(&sc.d).status.success() {
        if t.elapsed() > Duration::from_secs(3) {
            sc.fail("ni-ctl status fails after the deaf connections closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The sessions' threads are gone again.
    let t = Instant::now();
    while sc.usage_now().threads > sc.before.threads + 2 && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    sc.finish();
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 10: garbage and half messages on a vfio-user socket.
// ---------------------------------------------------------------------------------------------

/// Send `bytes` (with `fds` riding on them) on a fresh connection to `path`, wait `hold`,
/// close.
fn garbage(path: &std::path::Path, bytes: &[u8], fds: &[i32], hold: Duration) {
    let Ok(s) = UnixStream::connect(path) else {
        return;
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let iov = [std::io::IoSlice::new(bytes)];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(fds)];
    let _ = nix::sys::socket::sendmsg::<()>(
        s.as_raw_fd(),
        &iov,
        if fds.is_empty() { &[] } else { &cmsg },
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        None,
    );
    std::thread::sleep(hold);
}

/// Issue 18, item 10: messages whose headers claim 4 GiB bodies then close; a header claiming a
/// 64 MiB region write followed by 1 MiB and then nothing; headers shorter than themselves,
/// unterminated version strings, unknown commands carrying descriptors, random bytes. The
/// daemon must not allocate what the headers claim (its RSS stays bounded), must not leak the
/// descriptors, and must keep serving: the other NIs at once, the attacked NI after each
/// connection closes.
#[test]
fn garbage_and_half_vfio_user_messages_are_survived() {
    let mut sc = Scene::start("garbage_and_half_vfio_user_messages_are_survived");
    let path = sc.d.sock(ATTACKER);
    let mut worst_serve = Duration::ZERO;
    let junk: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let spare: Vec<std::fs::File> = (0..16).map(|_| eventfd(0)).collect();
    let spare_fds: Vec<i32> = spare.iter().map(|f| f.as_raw_fd()).collect();
    for round in 0..3 {
        let mut msgs: Vec<(&str, Vec<u8>, bool)> = Vec::new();
        // A region write claiming 4 GiB, then the end.
        let mut m = header(1, cmd::REGION_WRITE, u32::MAX, 0).to_vec();
        m.extend_from_slice(&0u64.to_le_bytes());
        m.extend_from_slice(&pci::BAR0_REGION.to_le_bytes());
        m.extend_from_slice(&(u32::MAX - 32).to_le_bytes());
        msgs.push(("4 GiB region write", m, false));
        // A version message claiming 4 GiB.
        let mut m = header(1, cmd::VERSION, u32::MAX, 0).to_vec();
        m.extend_from_slice(&[0, 0, 1, 0]);
        msgs.push(("4 GiB version", m, false));
        // A region read asking for 4 GiB.
        let mut m = header(1, cmd::REGION_READ, 32, 0).to_vec();
        m.extend_from_slice(&0u64.to_le_bytes());
        m.extend_from_slice(&pci::BAR0_REGION.to_le_bytes());
        m.extend_from_slice(&u32::MAX.to_le_bytes());
        msgs.push(("4 GiB region read", m, false));
        // Headers shorter than themselves; an unterminated version string.
        let mut m = header(1, cmd::VERSION, 8, 0).to_vec();
        m.extend_from_slice(&junk[..64]);
        msgs.push(("version of 8 bytes", m, false));
        let mut m = header(1, cmd::VERSION, 16 + 4 + 10, 0).to_vec();
        m.extend_from_slice(&[0, 0, 1, 0]);
        m.extend_from_slice(b"{\"capabil\x01");
        msgs.push(("unterminated version", m, false));
        let mut m = header(1, cmd::REGION_WRITE, 20, 0).to_vec();
        m.extend_from_slice(&junk[..4]);
        msgs.push(("region write shorter than its fields", m, false));
        // A DMA_MAP and SET_IRQS whose sizes lie, with 16 descriptors; an unknown command
        // with 16 descriptors.
        let mut m = header(1, cmd::DMA_MAP, 16 + 8, 0).to_vec();
        m.extend_from_slice(&junk[..8]);
        msgs.push(("short DMA_MAP with 16 fds", m, true));
        let mut m = header(1, cmd::SET_IRQS, 16 + 20, 0).to_vec();
        m.extend_from_slice(&20u32.to_le_bytes());
        m.extend_from_slice(&(irq::DATA_EVENTFD | irq::ACTION_TRIGGER).to_le_bytes());
        m.extend_from_slice(&pci::MSIX_IRQ_INDEX.to_le_bytes());
        m.extend_from_slice(&u32::MAX.to_le_bytes());
        m.extend_from_slice(&u32::MAX.to_le_bytes());
        msgs.push(("SET_IRQS of 2^32 vectors with 16 fds", m, true));
        msgs.push((
            "unknown command with 16 fds",
            header(1, 0x7777, 16, 0).to_vec(),
            true,
        ));
        msgs.push(("random bytes", junk.clone(), false));
        for (what, m, with_fds) in &msgs {
            let fds: &[i32] = if *with_fds { &spare_fds } else { &[] };
            garbage(&path, m, fds, Duration::ZERO);
            // The NI serves the next client.
            let t = Instant::now();
            raw_serves(&mut sc, ATTACKER);
            worst_serve = worst_serve.max(t.elapsed());
            if let Ok(Some(st)) = sc.d.child.try_wait() {
                sc.fail(&format!("the daemon died ({st}) after: {what}"));
            }
        }
        if round == 0 {
            let u = sc.usage_now();
            sc.note(format!(
                "{} kinds of garbage, 3 rounds; after the first: daemon [{u}]",
                msgs.len()
            ));
        }
    }
    // A region write claiming 64 MiB: 1 MiB of it, then nothing, for 1.5 s. Meanwhile the
    // other NI serves and the daemon has not taken the claimed size.
    let mut half = UnixStream::connect(&path).unwrap();
    half.set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let body = 64u32 << 20;
    let mut m = header(1, cmd::REGION_WRITE, 16 + 16 + body, 0).to_vec();
    m.extend_from_slice(&0u64.to_le_bytes());
    m.extend_from_slice(&pci::BAR4_REGION.to_le_bytes());
    m.extend_from_slice(&body.to_le_bytes());
    let _ = half.write_all(&m);
    let mut written = 0usize;
    let mb = vec![0x5Au8; 1 << 20];
    if half.write_all(&mb).is_ok() {
        written = mb.len();
    }
    let t = Instant::now();
    let other = raw_serves(&mut sc, BYSTANDER);
    let att = libni_attaches(&mut sc, BYSTANDER);
    while t.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = sc.usage_now();
    sc.note(format!(
        "64 MiB claimed, {} KiB sent and held: daemon [{held}]; NI {BYSTANDER} served a raw \
         client in {} and a libni client in {} meanwhile; worst time to serve again after \
         garbage {}",
        written >> 10,
        ms(other),
        ms(att),
        ms(worst_serve)
    ));
    sc.check_growth(
        held,
        RSS_GROWTH_KIB,
        PEAK_FD_GROWTH,
        THREAD_GROWTH,
        "with a 64 MiB message half sent",
    );
    drop(half);
    raw_serves(&mut sc, ATTACKER);
    wait_free(&mut sc, ATTACKER);
    drop(spare);
    sc.finish();
}

// ---------------------------------------------------------------------------------------------
// Issue 18, item 7: one big transfer stalls every other partition.
// ---------------------------------------------------------------------------------------------

/// Issue 18, item 7: the evil partition's two members move 256 MiB messages and puts back and
/// forth as fast as they can. Before, the poller copied each whole under the fabric lock
/// (~2 s per GiB), stalling the honest pair for as long; now copies over 1 MiB move in pieces
/// between the poller's passes (`fabric/transfer.rs`), so honest round trips keep coming.
#[test]
fn big_transfers_do_not_stall_other_partitions() {
    let mut sc = Scene::start("big_transfers_do_not_stall_other_partitions");
    const BIG: usize = 256 << 20;
    const ROUNDS: u64 = 4;
    let run = |node: u32, path: PathBuf| {
        move || -> Result<Duration, String> {
            let ni = Ni::attach_path(&path).map_err(|e| format!("attach: {e}"))?;
            ni.wait_for_partition(Duration::from_secs(20))
                .map_err(|e| format!("partition: {e}"))?;
            let buf = ni.alloc(BIG).map_err(|e| format!("alloc: {e}"))?;
            let peer = 1 - ni.rank();
            let t = Instant::now();
            for i in 0..ROUNDS {
                let want = (i as u8).wrapping_mul(37).wrapping_add(node as u8);
                if ni.rank() == 0 {
                    buf.write_at(BIG - 1, &[want]);
                    ni.send(peer, &buf, 0..BIG, i)
                        .map_err(|e| format!("send: {e}"))?;
                    ni.put(peer, &buf, 0..BIG, buf.key(), 0)
                        .map_err(|e| format!("put: {e}"))?;
                    ni.send(peer, &buf, 0..0, 1000 + i)
                        .map_err(|e| format!("send: {e}"))?;
                } else {
                    let d = ni
                        .recv(Some(peer), &buf, 0..BIG, i, u64::MAX)
                        .map_err(|e| format!("recv: {e}"))?;
                    if d.len as usize != BIG {
                        return Err(format!("received {} bytes", d.len));
                    }
                    ni.recv(Some(peer), &buf, 0..0, 1000 + i, u64::MAX)
                        .map_err(|e| format!("recv: {e}"))?;
                }
            }
            Ok(t.elapsed())
        }
    };
    let a = std::thread::spawn(run(ATTACKER, sc.d.sock(ATTACKER)));
    let b = std::thread::spawn(run(BYSTANDER, sc.d.sock(BYSTANDER)));
    for (who, h) in [("sender", a), ("receiver", b)] {
        match h.join() {
            Ok(Ok(took)) => sc.note(format!(
                "{who}: {ROUNDS} x (256 MiB send + 256 MiB put) in {}",
                ms(took)
            )),
            Ok(Err(e)) => sc.fail(&format!("the big transfers failed at the {who}: {e}")),
            Err(_) => sc.fail(&format!("the {who} panicked")),
        }
    }
    sc.finish();
}

// ---------------------------------------------------------------------------------------------
// A member of the honest partition scribbles on everything it can map (issue 18, item 6).
// ---------------------------------------------------------------------------------------------

/// The honest pair's partition has a third member, the attacker on NI 2.
const WINDOW_CONFIG: &str = "[[partition]]\nname = \"honest\"\nnodes = [0, 1, 2]\n\
                             [[partition]]\nname = \"evil\"\nnodes = [3]\n";

/// xorshift64: the attacker's garbage, different every word.
fn junk(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn mmap_shared(f: &std::fs::File, offset: u64, len: u64, prot: i32, flags: i32) -> *mut u8 {
    // SAFETY: a fresh mapping of a descriptor we hold; the caller checks MAP_FAILED.
    unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            prot,
            flags,
            f.as_raw_fd(),
            offset as libc::off_t,
        ) as *mut u8
    }
}

/// The attacker joins the honest pair's partition through a raw vfio-user client, sets up a
/// completion ring (so it is up in the window and its peers read its rings), then:
/// tries to map every region it is offered writable, to make read-only mappings writable,
/// and to write through the socket what it cannot map; writes into private copies of its
/// peers' pages; and for seconds fills its own zone — its rings, cursors, slots and counters —
/// with garbage. The honest ranks must see nothing of it but refused ring words
/// (`window_ring_errors`), and keep using the window (`window_sends`).
#[test]
fn a_member_scribbling_on_everything_it_can_map_cannot_touch_its_peers_traffic() {
    use ni_abi::window as w;
    if std::env::var("NI_TEST_DIRECT").is_ok_and(|v| v != "isolated" && v != "on") {
        eprintln!("NI_TEST_DIRECT set: this test is about the isolated window; skipped");
        return;
    }
    let name = "a_member_scribbling_on_everything_it_can_map_cannot_touch_its_peers_traffic";
    // The attacker is up (completion ring set up) before the honest ranks, which wait for
    // their whole partition.
    let (mut sc, mut fp) = Scene::start_config(name, WINDOW_CONFIG, &[], |d| {
        let mut fp = FastPath::attach(&d.sock(ATTACKER)).expect("attacker attaches");
        fp.setup_cq(0x4000_0000, 64)
            .expect("attacker's completion ring");
        fp
    });
    let errors_before = counter(&sc.d, 0, "window_ring_errors").unwrap()
        + counter(&sc.d, 1, "window_ring_errors").unwrap();
    let sends_before = counter(&sc.d, 0, "window_sends").unwrap();

    // Every region the device offers, mapped every way the kernel allows.
    let mut writable = Vec::new();
    let mut own_zone: Option<(*mut u8, u64)> = None;
    let mut peer_views = Vec::new();
    let mut regions = 0;
    for index in 0..64u32 {
        let Ok((size, offset, fd)) = fp.raw.region_info(index) else {
            break;
        };
        regions += 1;
        let Some(fd) = fd else { continue };
        let (map_at, len) = match index {
            pci::BAR0_REGION => continue, // this NI's own SRAM
            pci::BAR4_REGION => (offset + w::WINDOW_OFFSET, w::WINDOW_SIZE),
            _ => (offset, size),
        };
        let rw = mmap_shared(
            &fd,
            map_at,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
        );
        if rw as *mut libc::c_void != libc::MAP_FAILED {
            writable.push(index);
            if index == w::zone_region(2) {
                own_zone = Some((rw, len));
            }
            continue;
        }
        let ro = mmap_shared(&fd, map_at, len, libc::PROT_READ, libc::MAP_SHARED);
        sc.check(ro as *mut libc::c_void != libc::MAP_FAILED, || {
            format!("region {index}: not even a read-only mapping")
        });
        if ro as *mut libc::c_void != libc::MAP_FAILED {
            // SAFETY: mprotect of the mapping just made; it must be refused.
            let up = unsafe {
                libc::mprotect(
                    ro as *mut libc::c_void,
                    len as usize,
                    libc::PROT_WRITE | libc::PROT_READ,
                )
            };
            sc.check(up != 0, || {
                format!("region {index}: mprotect made a read-only mapping writable")
            });
            peer_views.push((index, ro, len));
        }
        // A private copy may be written; nothing of it may reach anyone else.
        let private = mmap_shared(
            &fd,
            map_at,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
        );
        if private as *mut libc::c_void != libc::MAP_FAILED {
            // SAFETY: the private mapping just made, `len` bytes.
            unsafe { std::ptr::write_bytes(private, 0xA5, len as usize) };
            // SAFETY: unmapping it.
            unsafe { libc::munmap(private as *mut libc::c_void, len as usize) };
        }
    }
    sc.check(writable == [w::zone_region(2)], || {
        format!(
            "the attacker could map regions {writable:?} writable; only its own zone (region {}) may be",
            w::zone_region(2)
        )
    });
    sc.note(format!(
        "{regions} regions offered; writable: {writable:?}; {} read-only views",
        peer_views.len()
    ));

    // What it cannot map it tries through the socket: the device page, every peer's zone,
    // and the same words through BAR4.
    let mut refused = 0u64;
    let mut tries = 0u64;
    let targets: Vec<(u32, u64)> = vec![
        (w::DEVICE_REGION, 0),
        (w::DEVICE_REGION, w::state_word(0)),
        (w::zone_region(0), w::ring_head(1, 0) - w::zone(0)),
        (w::zone_region(0), w::ring_data(0, 1, 3) - w::zone(0)),
        (w::zone_region(1), w::ring_head(0, 1) - w::zone(1)),
        (w::zone_region(1), w::ring_data(1, 0, 3) - w::zone(1)),
        (w::zone_region(1), w::sleeping(1) - w::zone(1)),
        (pci::BAR4_REGION, w::WINDOW_OFFSET + w::ring_data(1, 0, 3)),
        (pci::BAR4_REGION, w::WINDOW_OFFSET + w::ring_head(0, 1)),
        (pci::BAR4_REGION, w::WINDOW_OFFSET + w::state_word(1)),
        (pci::BAR4_REGION, w::WINDOW_OFFSET + w::hdr::GEN),
    ];
    for &(region, off) in &targets {
        tries += 1;
        if fp.raw.region_write(region, off, &[0x5A; 64]).is_err() {
            refused += 1;
        }
    }
    sc.check(refused == tries, || {
        format!(
            "{} of {tries} trapped writes to words the attacker does not own were taken",
            tries - refused
        )
    });

    // Its own zone it may fill with anything, for seconds, while its peers run. Every ring
    // slot gets the `SEQ` of the ring's first lap, so its peers take the garbage after it
    // as published messages (`ni_abi::window::SEQ`) and must refuse it.
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut passes = 0u64;
    let t = Instant::now();
    if let Some((p, len)) = own_zone {
        while t.elapsed() < Duration::from_secs(3) {
            for i in 0..(len / 8) as usize {
                let off = i as u64 * 8;
                let mut v = junk(&mut rng);
                let ring = w::ring_bytes(3);
                let at = off.wrapping_sub(w::zone::RINGS) % ring;
                if off >= w::zone::RINGS && at < w::payload_area(ring) && at.is_multiple_of(w::SLOT)
                {
                    v = (v & !0xFFFF_FFFF) | w::seq_for((at / w::SLOT) as u32) as u64;
                }
                // SAFETY: inside the attacker's own zone mapping, 8-aligned.
                unsafe { (p as *mut u64).add(i).write_volatile(v) };
            }
            passes += 1;
        }
    } else {
        sc.check(false, || "the attacker got no writable zone at all".into());
    }
    sc.note(format!("{passes} passes of garbage over the attacker's zone; {refused}/{tries} trapped writes refused"));

    let errors = counter(&sc.d, 0, "window_ring_errors").unwrap()
        + counter(&sc.d, 1, "window_ring_errors").unwrap();
    let sends = counter(&sc.d, 0, "window_sends").unwrap();
    let denied = counter(&sc.d, ATTACKER, "window_write_refused").unwrap();
    sc.check(errors > errors_before, || {
        "the honest ranks never refused the attacker's garbage (window_ring_errors did not move)"
            .into()
    });
    sc.check(sends > sends_before, || {
        "the honest pair stopped using the window".into()
    });
    sc.check(denied >= refused, || {
        format!("window_write_refused is {denied} after {refused} refused writes")
    });
    sc.note(format!(
        "window_ring_errors +{}, window_sends +{}, window_write_refused {denied}",
        errors - errors_before,
        sends - sends_before
    ));
    for (_, p, len) in peer_views {
        // SAFETY: unmapping the views made above.
        unsafe { libc::munmap(p as *mut libc::c_void, len as usize) };
    }
    if let Some((p, len)) = own_zone {
        // SAFETY: unmapping the zone mapped above.
        unsafe { libc::munmap(p as *mut libc::c_void, len as usize) };
    }
    drop(fp);
    sc.finish();
}
