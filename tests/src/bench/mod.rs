//! `ni-bench`: OSU-style benchmarks of ni beside the baselines a user would pick instead
//! (TCP loopback, Unix stream sockets, Open MPI over shared memory), measured in the same run.
//!
//! The runner (no subcommand) launches, for every placement, mode and rank count:
//! `nirun -n P ni-bench worker` (ni in host mode, a private daemon per run), two socket
//! processes `ni-bench sock-serve` / `sock-drive`, and `mpirun -np P` of the programs in
//! `tests/bench/mpi/`. Workers print one `NIB {json}` line per point; the runner prints the
//! tables, writes `results.json`, `table.txt` and one SVG plot per placement.

mod copy;
mod driver;
mod ni_worker;
mod parity;
mod pin;
mod plot;
mod report;
mod sock;
mod spec;
mod stats;
mod waits;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use driver::{cmd, measure, serve, Ctl, Link, Plan, Point, R};
use pin::Placement;
use report::Rec;
use spec::{Sizes, Spec};

const USAGE: &str = "usage: ni-bench [MODE...] [OPTIONS]

MODE: latency bw msgrate mq am put get barrier bcast allreduce reduce allgather scan, or all
      (default)

  --quick             a few sizes, 3 short batches, split placement, P=2 (smoke test)
  --ranks LIST        rank counts for msgrate and the collectives (default 2,4,8)
  --placements LIST   split,same,dev-alone (default split,same): split = rank r on cpu
                      r mod ncpu, device unpinned; same = every rank and the device on
                      cpu 0; dev-alone = the device on cpu 0, every rank on the last cpu
  --baselines LIST    tcp,unix,mpi,mpi-ni or none (default all; mpi only where mpirun and
                      mpicc exist). mpi: Open MPI over its shared memory (ob1 + vader);
                      mpi-ni: the same programs with Open MPI's cm PML over the ni
                      libfabric provider (libni-fi.so beside ni-bench in libfabric/), on a
                      private ni-device
  --no-ni             baselines only
  --out DIR           results directory (default target/bench)
  --mpi-dir DIR       where the MPI programs are built (default OUT/mpi)
  --batches N         batches per point (default 11; quick 3)
  --rounds N          launches per point and transport, ni's and its baselines' taking
                      turns, the batches shared out among them and pooled (default 4;
                      quick 1): what the machine does meanwhile falls on both sides; with
                      3 or more, ni×X compares each transport's best round ('b'; of
                      5-8 rounds the second best, of 9-12 the third)
  --target-ms X       time per batch (default 20; quick 2)
  --warm-ms X         warm-up per point (default 10; quick 1)
  --cap-ms X          at most this long per point, fewer batches past it (default 4000)
  --noise X           spread (IQR / median of batch means) flagged as disturbed (default 0.25)
  --max-size BYTES    largest point-to-point message (default 4194304)
  --coll-max BYTES    largest collective buffer (default 67108864)
  --sizes LIST        point-to-point message sizes instead of the defaults (e.g. 8,65536)
  --timeout SECS      limit for one launched run (default 1800)
  --no-plot           skip the SVG plots

ni-bench report RESULTS.json [--noise X]   print the tables and targets of a saved run again
                                           (and rewrite its plots beside it)

Environment: NIRUN (the nirun binary; default: next to ni-bench), NIB_MPI_SRC (the MPI
sources; default: the tests/bench/mpi of this source tree).";

pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("worker") => worker(),
        Some("sock-serve") => sock_serve(&args[1..]),
        Some("sock-drive") => sock_drive(&args[1..]),
        Some("report") => report_cmd(&args[1..]),
        Some("-h") | Some("--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => match parse(&args) {
            Ok(o) => run(o),
            Err(e) => {
                eprintln!("ni-bench: {e}\n{USAGE}");
                return ExitCode::from(2);
            }
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ni-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------- workers

fn specs_from_env() -> R<(Vec<Spec>, u32)> {
    let v: Value =
        serde_json::from_str(&std::env::var("NIB_SPECS").map_err(|_| "NIB_SPECS unset")?)
            .map_err(|e| e.to_string())?;
    let specs = v["specs"]
        .as_array()
        .ok_or("NIB_SPECS: no specs")?
        .iter()
        .map(|s| Spec::from_json(s).ok_or("NIB_SPECS: bad spec"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((specs, v["ranks"].as_u64().unwrap_or(2) as u32))
}

fn buffer_bytes(specs: &[Spec]) -> usize {
    specs.iter().map(|s| s.bytes).max().unwrap_or(0).max(4096) as usize
}

/// Rank 0 measures every spec and prints its line; the others serve. Any error ends it.
fn drive(link: &mut dyn Link, specs: &[Spec], ranks: u32) -> R<()> {
    if link.rank() != 0 {
        return serve(link);
    }
    let plan = Plan::from_env();
    let mut result = Ok(());
    for s in specs {
        match measure(link, s.ctl, s.ops, &plan, s.per_iter) {
            Ok(mut p) => {
                p.metric = s.metric.clone();
                p.dtype = s.dtype.clone();
                p.bytes = s.bytes;
                p.ranks = ranks;
                println!("{}", p.line());
            }
            Err(e) => {
                let p = Point {
                    metric: s.metric.clone(),
                    dtype: s.dtype.clone(),
                    size: s.ctl.size,
                    bytes: s.bytes,
                    ranks,
                    error: Some(e.clone()),
                    ..Default::default()
                };
                println!("{}", p.line());
                result = Err(e);
                break;
            }
        }
    }
    if result.is_ok() {
        link.ctl_send(Ctl {
            cmd: cmd::QUIT,
            ..Default::default()
        })?;
    }
    result
}

/// One ni rank under nirun.
fn worker() -> R<()> {
    let (specs, ranks) = specs_from_env()?;
    let rank: u32 = std::env::var("NI_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    pin::pin_rank(rank)?;
    // The collectives' receive buffer; an allgather's holds every rank's vector.
    let coll = specs
        .iter()
        .filter(|s| s.ctl.cmd >= cmd::BARRIER)
        .map(|s| {
            let ranks = if s.ctl.cmd == cmd::ALLGATHER {
                ranks
            } else {
                1
            };
            s.bytes as usize * ranks as usize
        })
        .max();
    let mut link = ni_worker::NiLink::new(buffer_bytes(&specs), coll)?;
    let ranks = link.size();
    drive(&mut link, &specs, ranks)
}

fn sock_serve(args: &[String]) -> R<()> {
    let kind = args
        .first()
        .and_then(|k| sock::Kind::parse(k))
        .ok_or("sock-serve tcp|unix MAX DIR")?;
    let max: usize = args.get(1).and_then(|m| m.parse().ok()).unwrap_or(1 << 22);
    let dir = PathBuf::from(args.get(2).cloned().unwrap_or_else(|| "/tmp".into()));
    pin::pin_rank(1)?;
    sock::server(kind, max, &dir)
}

fn sock_drive(args: &[String]) -> R<()> {
    let kind = args
        .first()
        .and_then(|k| sock::Kind::parse(k))
        .ok_or("sock-drive tcp|unix ADDR")?;
    let addr = args.get(1).ok_or("sock-drive: no address")?;
    let (specs, ranks) = specs_from_env()?;
    pin::pin_rank(0)?;
    sock::client(kind, addr, buffer_bytes(&specs), |l| {
        drive(l, &specs, ranks)
    })
}

/// The instruction counts `tests/bench/instr.sh` left in `dir` (run.sh runs it first).
fn read_instr(dir: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("instr.json")).ok()?).ok()
}

/// Re-render a saved run: tables and targets on stdout, plots beside the JSON.
fn report_cmd(args: &[String]) -> R<()> {
    let path = PathBuf::from(args.first().ok_or("report RESULTS.json")?);
    let noise = match args.get(1).map(String::as_str) {
        Some("--noise") => args
            .get(2)
            .and_then(|v| v.parse().ok())
            .ok_or("--noise needs a number")?,
        _ => 0.25,
    };
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let recs: Vec<Rec> = doc["points"]
        .as_array()
        .ok_or("no points")?
        .iter()
        .filter_map(Rec::from_json)
        .collect();
    let mut placements: Vec<(String, String)> = Vec::new();
    for pl in doc["config"]["placements_order"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .chain(recs.iter().map(|r| r.placement.as_str()))
    {
        if !placements.iter().any(|(n, _)| n == pl) {
            let d = doc["config"]["placements"][pl]
                .as_str()
                .unwrap_or(pl)
                .to_string();
            placements.push((pl.to_string(), d));
        }
    }
    let mut text = report::tables(&recs, noise, &placements);
    text += &report::targets(&recs).0;
    let dir = path.parent().unwrap_or(Path::new("."));
    let copy = copy::from_json(&doc["copy"]);
    text += &parity::targets(&recs, read_instr(dir).as_ref(), &copy, noise).0;
    print!("{text}");
    for (pl, d) in &placements {
        let p = dir.join(format!("plot-{pl}.svg"));
        if plot::plot(&recs, pl, d, &p)? {
            eprintln!("[ni-bench] wrote {}", p.display());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- the runner

struct Opts {
    modes: Vec<String>,
    quick: bool,
    ranks: Vec<u32>,
    placements: Vec<Placement>,
    baselines: Vec<String>,
    ni: bool,
    out: PathBuf,
    mpi_dir: Option<PathBuf>,
    plan: Plan,
    /// Launches per point and transport, taking turns (`--rounds`).
    rounds: usize,
    noise: f64,
    sizes: Sizes,
    timeout: Duration,
    plot: bool,
}

fn list<T>(v: &str, f: impl Fn(&str) -> Option<T>) -> R<Vec<T>> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| f(s).ok_or_else(|| format!("bad list item {s:?}")))
        .collect()
}

fn parse(args: &[String]) -> R<Opts> {
    let mut modes = Vec::new();
    let mut quick = false;
    let mut ranks = None;
    let mut placements = None;
    let mut baselines = vec![
        "tcp".to_string(),
        "unix".into(),
        "mpi".into(),
        "mpi-ni".into(),
    ];
    let mut ni = true;
    let mut out = PathBuf::from("target/bench");
    let mut mpi_dir = None;
    let (mut batches, mut target, mut warm, mut cap) = (None, None, None, None);
    let mut rounds = None;
    let mut noise = 0.25;
    let mut max = 4u64 << 20;
    let mut coll_max = 64u64 << 20;
    let mut custom = None;
    let mut timeout = Duration::from_secs(1800);
    let mut plot = true;
    let mut it = args.iter();
    let num = |v: Option<&String>, what: &str| -> R<f64> {
        v.and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| format!("{what} needs a number"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--ranks" => {
                ranks = Some(list(it.next().ok_or("--ranks LIST")?, |s| {
                    s.parse().ok().filter(|&p: &u32| (2..=64).contains(&p))
                })?)
            }
            "--placements" => {
                placements = Some(list(
                    it.next().ok_or("--placements LIST")?,
                    Placement::parse,
                )?)
            }
            "--baselines" => {
                let v = it.next().ok_or("--baselines LIST")?;
                baselines = list(if v == "none" { "" } else { v }, |s| {
                    ["tcp", "unix", "mpi", "mpi-ni"]
                        .contains(&s)
                        .then(|| s.to_string())
                })?
            }
            "--no-ni" => ni = false,
            "--out" => out = it.next().ok_or("--out DIR")?.into(),
            "--mpi-dir" => mpi_dir = Some(it.next().ok_or("--mpi-dir DIR")?.into()),
            "--batches" => batches = Some(num(it.next(), a)? as usize),
            "--rounds" => rounds = Some(num(it.next(), a)? as usize),
            "--target-ms" => target = Some(num(it.next(), a)?),
            "--warm-ms" => warm = Some(num(it.next(), a)?),
            "--cap-ms" => cap = Some(num(it.next(), a)?),
            "--noise" => noise = num(it.next(), a)?,
            "--max-size" => max = num(it.next(), a)? as u64,
            "--coll-max" => coll_max = num(it.next(), a)? as u64,
            "--sizes" => custom = Some(list(it.next().ok_or("--sizes LIST")?, |s| s.parse().ok())?),
            "--timeout" => timeout = Duration::from_secs_f64(num(it.next(), a)?),
            "--no-plot" => plot = false,
            "all" => modes.extend(spec::MODES.iter().map(|m| m.to_string())),
            m if spec::MODES.contains(&m) => modes.push(m.to_string()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if modes.is_empty() {
        modes.extend(spec::MODES.iter().map(|m| m.to_string()));
    }
    modes.dedup();
    let ms = |v: Option<f64>, full: f64, q: f64| {
        Duration::from_secs_f64(v.unwrap_or(if quick { q } else { full }) / 1e3)
    };
    Ok(Opts {
        modes,
        quick,
        ranks: ranks.unwrap_or(if quick { vec![2] } else { vec![2, 4, 8] }),
        placements: placements.unwrap_or(if quick {
            vec![Placement::Split]
        } else {
            vec![Placement::Split, Placement::Same]
        }),
        baselines,
        ni,
        out,
        mpi_dir,
        plan: Plan {
            warm: ms(warm, 10.0, 1.0),
            target: ms(target, 20.0, 2.0),
            batches: batches.unwrap_or(if quick { 3 } else { 11 }).max(1),
            cap: ms(cap, 4000.0, 500.0),
        },
        rounds: rounds.unwrap_or(if quick { 1 } else { 4 }).max(1),
        noise,
        sizes: Sizes {
            max,
            quick,
            custom,
            coll_max,
        },
        timeout,
        plot,
    })
}

fn exe_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_default()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// CPU time from /proc/stat in seconds: (steal, busy, total), all CPUs together.
fn cpu_times() -> (f64, f64, f64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<f64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let total: f64 = v.iter().take(8).sum();
    (get(7) / hz, (total - get(3) - get(4)) / hz, total / hz)
}

/// CPU seconds used by this process's waited-for children (and theirs).
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        let t = |x: libc::timeval| x.tv_sec as f64 + x.tv_usec as f64 * 1e-6;
        t(u.ru_utime) + t(u.ru_stime)
    }
}

/// What one launched run left: its points, and how it went.
struct Launch {
    points: Vec<Point>,
    ok: bool,
    info: Value,
    /// Fraction of all cpus other processes used during the run.
    foreign: f64,
}

/// Run `c`, parse `NIB` lines from its stdout, keep the tail of its stderr, kill it at `limit`.
/// `also` (a process started for the run, e.g. the socket server) is reaped before the CPU
/// accounting, so its time counts as ours. Records the CPU time other processes took meanwhile
/// (`foreign_cpu`: the fraction of all CPUs), which is what disturbs a shared machine.
fn launch(
    mut c: Command,
    what: &str,
    limit: Duration,
    also: Option<std::process::Child>,
) -> Launch {
    let t = Instant::now();
    let (s0, b0, t0) = cpu_times();
    let mine0 = children_cpu();
    let line = format!("{c:?}");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            if let Some(mut a) = also {
                pin::kill_group(a.id(), libc::SIGKILL);
                let _ = a.wait();
            }
            return Launch {
                points: vec![],
                ok: false,
                info: json!({"what": what, "command": line, "error": e.to_string()}),
                foreign: 0.0,
            };
        }
    };
    pin::track_group(child.id());
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut pts = Vec::new();
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(j) = l.find("NIB {").map(|i| &l[i + 4..]) {
                if let Some(p) = serde_json::from_str(j)
                    .ok()
                    .as_ref()
                    .and_then(Point::from_json)
                {
                    pts.push(p);
                }
            }
        }
        pts
    });
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if t.elapsed() > limit => {
                timed_out = true;
                pin::kill_group(child.id(), libc::SIGKILL);
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    // Whatever the launch left behind in its group (ranks of a launcher that failed, spinning
    // in their start-up) would take the cpus of the points after it: 0.27 µs active messages
    // measured 945 µs behind a failed Open MPI launch.
    pin::kill_group(child.id(), libc::SIGKILL);
    if let Some(mut a) = also {
        let t = Instant::now();
        loop {
            match a.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if t.elapsed() > Duration::from_secs(5) => {
                    pin::kill_group(a.id(), libc::SIGKILL);
                    let _ = a.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        pin::untrack_group(a.id());
    }
    let points = reader.join().unwrap_or_default();
    let stderr = errs.join().unwrap_or_default();
    let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    let (s1, b1, t1) = cpu_times();
    let mine = children_cpu() - mine0;
    let (steal, foreign) = if t1 > t0 {
        (
            (s1 - s0) / (t1 - t0),
            ((b1 - b0 - mine) / (t1 - t0)).clamp(0.0, 1.0),
        )
    } else {
        (0.0, 0.0)
    };
    let ok = status.is_some_and(|s| s.success()) && !timed_out;
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "[ni-bench] {what}: {} points in {secs:.1} s, other processes took {:.0}% of the cpus{}{}",
        points.len(),
        foreign * 100.0,
        if ok { "" } else { " — FAILED" },
        if timed_out { " (timed out)" } else { "" }
    );
    if !ok {
        for l in &tail {
            eprintln!("[ni-bench]   | {l}");
        }
    }
    Launch {
        points,
        ok,
        foreign,
        info: json!({
            "what": what,
            "command": line,
            "seconds": secs,
            "steal_fraction": steal,
            "foreign_cpu": foreign,
            "own_cpu_seconds": mine,
            "ok": ok,
            "timed_out": timed_out,
            "status": status.map(|s| s.to_string()),
            "stderr_tail": if ok { Value::Null } else { json!(tail.join("\n")) },
        }),
    }
}

fn specs_env(specs: &[Spec], ranks: u32) -> String {
    json!({"ranks": ranks, "specs": specs.iter().map(Spec::to_json).collect::<Vec<_>>()})
        .to_string()
}

fn run_ni(o: &Opts, specs: &[Spec], ranks: u32, pl: Placement, what: &str) -> Launch {
    let nirun = std::env::var_os("NIRUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| exe_dir().join("nirun"));
    let me = std::env::current_exe().unwrap_or_else(|_| "ni-bench".into());
    let mut c = Command::new(nirun);
    c.args(["-n", &ranks.to_string(), "--timeout"])
        .arg(format!("{}", o.timeout.as_secs()))
        .arg(me)
        .arg("worker")
        .env("NIB_SPECS", specs_env(specs, ranks))
        .env("NIB_PIN", pl.name())
        .envs(o.plan.env());
    pin::pin_command(&mut c, pl.helper_cpus());
    launch(c, what, o.timeout + Duration::from_secs(30), None)
}

/// Cross-host runs (tests/bench/multihost.sh, `NIB_HOSTS=NS_A,NS_B`): the network namespaces
/// of hosts a and b. Rank 0 runs on a, rank 1 on b; the script's launchers place the rest.
fn hosts() -> Option<(String, String)> {
    let v = std::env::var("NIB_HOSTS").ok()?;
    let (a, b) = v.split_once(',')?;
    Some((a.to_string(), b.to_string()))
}

/// `prog` to run in network namespace `ns` (none: here).
fn in_ns(ns: Option<&str>, prog: &Path) -> Command {
    match ns {
        Some(n) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", n]).arg(prog);
            c
        }
        None => Command::new(prog),
    }
}

fn run_sock(o: &Opts, kind: sock::Kind, specs: &[Spec], pl: Placement, what: &str) -> Launch {
    let me = std::env::current_exe().unwrap_or_else(|_| "ni-bench".into());
    let max = buffer_bytes(specs);
    let hosts = hosts();
    let mut srv = in_ns(hosts.as_ref().map(|h| h.1.as_str()), &me);
    srv.args(["sock-serve", kind.name(), &max.to_string()])
        .arg(std::env::temp_dir())
        .env("NIB_PIN", pl.name())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    pin::pin_command(&mut srv, None);
    let fail = |e: String| Launch {
        points: vec![],
        ok: false,
        info: json!({"what": what, "error": e}),
        foreign: 0.0,
    };
    let mut server = match srv.spawn() {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    pin::track_group(server.id());
    let mut so = BufReader::new(server.stdout.take().unwrap());
    let addr = match sock::read_addr(&mut so) {
        Ok(a) => a,
        Err(e) => {
            pin::kill_group(server.id(), libc::SIGKILL);
            let _ = server.wait();
            return fail(e);
        }
    };
    let mut c = in_ns(hosts.as_ref().map(|h| h.0.as_str()), &me);
    c.args(["sock-drive", kind.name(), &addr])
        .env("NIB_SPECS", specs_env(specs, 2))
        .env("NIB_PIN", pl.name())
        .envs(o.plan.env());
    pin::pin_command(&mut c, None);
    launch(c, what, o.timeout, Some(server))
}

/// Build the MPI programs into `dir` when they are missing or older than their sources.
fn build_mpi(dir: &Path) -> R<()> {
    let src = std::env::var_os("NIB_MPI_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/mpi"));
    let mpicc = which("mpicc").ok_or("mpicc not found (apt-get install libopenmpi-dev)")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let header = mtime(&src.join("nib.h"));
    for p in ["pt2pt", "rma", "coll"] {
        let c = src.join(format!("{p}.c"));
        let bin = dir.join(p);
        let newest = mtime(&c).max(header);
        if mtime(&bin).is_some() && mtime(&bin) >= newest {
            continue;
        }
        let st = Command::new(&mpicc)
            .args(["-O2", "-Wall", "-o"])
            .arg(&bin)
            .arg(&c)
            .status()
            .map_err(|e| format!("mpicc: {e}"))?;
        if !st.success() {
            return Err(format!("mpicc {} failed", c.display()));
        }
    }
    Ok(())
}

/// The ni libfabric provider's directory (`FI_PROVIDER_PATH`), as the build leaves it
/// beside ni-bench, and the ni-device to run it on.
fn provider_dir() -> R<(PathBuf, PathBuf)> {
    let dir = exe_dir().join("libfabric");
    let dev = exe_dir().join("ni-device");
    if !dir.join("libni-fi.so").exists() {
        return Err(format!(
            "{} missing (cargo build --release -p ni-fi)",
            dir.join("libni-fi.so").display()
        ));
    }
    if !dev.exists() {
        return Err(format!("{} missing", dev.display()));
    }
    Ok((dir, dev))
}

/// Open MPI over its shared memory (`ni` false: ob1 + vader) or over ni (`ni` true: cm +
/// mtl ofi + the ni provider, each rank on its own NI of a private daemon).
fn run_mpi(
    o: &Opts,
    dir: &Path,
    r: &spec::MpiRun,
    ranks: u32,
    pl: Placement,
    what: &str,
    ni: bool,
) -> Launch {
    let hosts = hosts();
    // Across hosts mpirun runs on host a and starts its orted on host b through the script's
    // rsh agent (NIB_RSH: "ssh" into a namespace), as it would on two machines; ranks
    // alternate hosts (--map-by node).
    let mut c = in_ns(hosts.as_ref().map(|h| h.0.as_str()), Path::new("mpirun"));
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ]);
    let mut daemon = None;
    if hosts.is_some() {
        let addrs = std::env::var("NIB_HOST_ADDRS").unwrap_or_default();
        let slots: Vec<String> = addrs.split(',').map(|a| format!("{a}:{ranks}")).collect();
        c.args(["--host", &slots.join(","), "--map-by", "node"])
            .args(["--mca", "plm_rsh_agent"])
            .arg(std::env::var_os("NIB_RSH").unwrap_or_default());
        // The ranks on host b get their environment from its orted: pass it on.
        for (k, _) in o.plan.env() {
            c.args(["-x", &k]);
        }
        c.args(["-x", "NIB_PIN"]);
        // Over ni, NIB_MPI_WRAPPER (the script's) puts each rank on its NI of its host's
        // daemon; without ni, Open MPI's TCP carries it between the hosts.
        if ni {
            c.args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
                .args(["--mca", "mtl_ofi_provider_include", "ni"])
                .args(["-x", "FI_PROVIDER_PATH", "-x", "NIB_MPI_NI"])
                .env("NIB_MPI_NI", "1")
                .env(
                    "FI_PROVIDER_PATH",
                    provider_dir().map(|p| p.0).unwrap_or_default(),
                );
        } else {
            c.args(["--mca", "pml", "ob1", "--mca", "btl", "self,tcp"]);
        }
    } else if ni {
        let fail = |e: String| Launch {
            points: vec![],
            ok: false,
            info: json!({"what": what, "error": e}),
            foreign: 0.0,
        };
        let (prov, dev) = match provider_dir() {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let run_dir = std::env::temp_dir().join(format!("ni-bench-mpi-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run_dir);
        let mut d = Command::new(dev);
        d.args(["-n", &ranks.to_string(), "--run-dir"])
            .arg(&run_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        pin::pin_command(&mut d, pl.helper_cpus());
        match d.spawn() {
            Ok(ch) => {
                pin::track_group(ch.id());
                daemon = Some(ch);
            }
            Err(e) => return fail(format!("ni-device: {e}")),
        }
        let t = Instant::now();
        while !run_dir.join("control.sock").exists() {
            if t.elapsed() > Duration::from_secs(10) {
                if let Some(mut ch) = daemon {
                    pin::kill_group(ch.id(), libc::SIGKILL);
                    let _ = ch.wait();
                }
                return fail("ni-device did not come up in 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        c.args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
            .args(["--mca", "mtl_ofi_provider_include", "ni"])
            .args(["-x", "FI_PROVIDER_PATH", "-x", "NI_RUN_DIR"])
            .env("FI_PROVIDER_PATH", prov)
            .env("NI_RUN_DIR", &run_dir);
    } else {
        c.args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader"]);
    }
    if pl != Placement::Split {
        // Every rank on one core: Open MPI cannot know (we pin), so ask it to yield as it
        // would if it saw the oversubscription.
        c.args(["--mca", "mpi_yield_when_idle", "1"]);
    }
    c.args(["-np", &ranks.to_string()]);
    if let Some(w) = std::env::var_os("NIB_MPI_WRAPPER").filter(|_| hosts.is_some()) {
        c.arg(w);
    }
    c.arg(dir.join(r.program))
        .args(&r.args)
        .env("NIB_PIN", pl.name())
        .envs(o.plan.env());
    pin::pin_command(&mut c, pl.helper_cpus());
    let l = launch(c, what, o.timeout, None);
    if let Some(mut d) = daemon {
        pin::kill_group(d.id(), libc::SIGTERM);
        let _ = d.wait();
    }
    l
}

fn sh(cmdline: &str) -> String {
    Command::new("sh")
        .args(["-c", cmdline])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn machine() -> Value {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .unwrap_or("")
        .trim_matches('"')
        .to_string();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    json!({
        "cpus": pin::ncpus(),
        "cpu_model": cpu,
        "kernel": read("/proc/sys/kernel/osrelease"),
        "os": os,
        "clocksource": read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "kernel_hz": sh("zcat /proc/config.gz 2>/dev/null | sed -n 's/^CONFIG_HZ=//p'"),
        "loadavg": read("/proc/loadavg"),
        "mpirun": sh("mpirun --version 2>/dev/null | head -1"),
        "git": sh(&format!(
            "cd '{}' && echo $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | head -1 | sed 's/.*/(uncommitted changes)/')",
            env!("CARGO_MANIFEST_DIR")
        )),
    })
}

fn ranks_for(o: &Opts, mode: &str) -> Vec<u32> {
    if !spec::uses_ranks(mode) {
        return vec![2];
    }
    let mut v: Vec<u32> = o
        .ranks
        .iter()
        .copied()
        .filter(|&p| mode != "msgrate" || p % 2 == 0)
        .collect();
    v.dedup();
    v
}

fn run(mut o: Opts) -> R<()> {
    let started = Instant::now();
    // Each launch runs its share of the batches and of the time cap.
    let asked = o.plan.clone();
    o.plan.batches = asked.batches.div_ceil(o.rounds);
    o.plan.cap = asked.cap / o.rounds as u32;
    pin::stop_runs_on_signal();
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let mut notes: Vec<String> = Vec::new();
    let mpi_dir = o.mpi_dir.clone().unwrap_or_else(|| o.out.join("mpi"));
    let mpi = o.baselines.iter().any(|b| b == "mpi")
        && match which("mpirun")
            .ok_or_else(|| "mpirun not found".to_string())
            .and_then(|_| build_mpi(&mpi_dir))
        {
            Ok(()) => true,
            Err(e) => {
                notes.push(format!("Open MPI baseline skipped: {e}"));
                false
            }
        };
    let mpi_ni = mpi
        && o.baselines.iter().any(|b| b == "mpi-ni")
        && match provider_dir() {
            Ok(_) => true,
            Err(e) => {
                notes.push(format!("Open MPI over ni skipped: {e}"));
                false
            }
        };
    let maxp = o.ranks.iter().copied().max().unwrap_or(2);
    let placements: Vec<(String, String)> = o
        .placements
        .iter()
        .map(|pl| (pl.name().to_string(), pl.describe(maxp)))
        .collect();
    eprintln!("[ni-bench] machine: {}", machine());
    let mut recs: Vec<Rec> = Vec::new();
    let mut runs = Vec::new();
    let mut failed = 0;
    let mut keep =
        |mode: &str, t: &str, pl: Placement, l: Launch, round: u32, recs: &mut Vec<Rec>| {
            if !l.ok {
                failed += 1;
            }
            runs.push(l.info);
            for p in l.points {
                recs.push(Rec {
                    mode: mode.into(),
                    transport: t.into(),
                    placement: pl.name().into(),
                    rounds: vec![(round, p.batches.len())],
                    point: p,
                    foreign: l.foreign,
                });
            }
        };
    for &pl in &o.placements {
        eprintln!("[ni-bench] placement {}", pl.describe(maxp));
        for mode in &o.modes {
            for p in ranks_for(&o, mode) {
                let specs = spec::specs(mode, p, &o.sizes);
                for round in 1..=o.rounds {
                    let nth = if o.rounds > 1 {
                        format!(" (round {round}/{})", o.rounds)
                    } else {
                        String::new()
                    };
                    if o.ni && !specs.is_empty() {
                        let what = format!("{mode} ni P={p} {}{nth}", pl.name());
                        let l = run_ni(&o, &specs, p, pl, &what);
                        keep(mode, "ni", pl, l, round as u32, &mut recs);
                    }
                    if spec::socket_mode(mode, p) {
                        for kind in [sock::Kind::Tcp, sock::Kind::Unix] {
                            // Unix sockets do not cross hosts.
                            let here = hosts().is_none() || kind == sock::Kind::Tcp;
                            if here && o.baselines.iter().any(|b| b == kind.name()) {
                                let what =
                                    format!("{mode} {} P={p} {}{nth}", kind.name(), pl.name());
                                let l = run_sock(&o, kind, &specs, pl, &what);
                                keep(mode, kind.name(), pl, l, round as u32, &mut recs);
                            }
                        }
                    }
                    if mpi {
                        for r in spec::mpi_runs(mode, p, &o.sizes) {
                            let what = format!("{mode} mpi {} P={p} {}{nth}", r.args[1], pl.name());
                            let l = run_mpi(&o, &mpi_dir, &r, p, pl, &what, false);
                            let t = if hosts().is_some() { "mpi-tcp" } else { "mpi" };
                            keep(mode, t, pl, l, round as u32, &mut recs);
                        }
                    }
                    if mpi_ni {
                        for r in spec::mpi_runs(mode, p, &o.sizes) {
                            let what =
                                format!("{mode} mpi-ni {} P={p} {}{nth}", r.args[1], pl.name());
                            let l = run_mpi(&o, &mpi_dir, &r, p, pl, &what, true);
                            keep(mode, "mpi-ni", pl, l, round as u32, &mut recs);
                        }
                    }
                }
            }
        }
    }
    let recs = report::pool(recs);
    if o.modes.iter().any(|m| spec::is_collective(m))
        && !recs
            .iter()
            .any(|r| r.transport == "ni" && spec::is_collective(&r.mode))
    {
        notes.push("ni collectives: not measured (see the runs for errors)".into());
    }

    let mut text = report::tables(&recs, o.noise, &placements);
    let (ttext, tjson) = report::targets(&recs);
    text += &ttext;
    // The machine's own copy of every byte count ni timed (judging cliffs).
    let copy = copy::measure(
        &recs
            .iter()
            .filter(|r| r.transport == "ni" && r.unit() == stats::Unit::Micros)
            .map(|r| r.point.bytes)
            .collect::<Vec<_>>(),
    );
    let (ptext, pjson) = parity::targets(&recs, read_instr(&o.out).as_ref(), &copy, o.noise);
    text += &ptext;
    for n in &notes {
        text += &format!("# note: {n}\n");
    }
    if failed > 0 {
        text += &format!("# {failed} launched run(s) failed: see \"runs\" in results.json\n");
    }
    print!("{text}");
    let doc = json!({
        "tool": "ni-bench",
        "format": 1,
        "finished_unix": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "seconds": started.elapsed().as_secs_f64(),
        "machine": machine(),
        "config": {
            "modes": o.modes,
            "quick": o.quick,
            "ranks": o.ranks,
            "placements": placements.iter().cloned().collect::<BTreeMap<_, _>>(),
            "placements_order": placements.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            "baselines": o.baselines,
            "batches": asked.batches,
            "rounds": o.rounds,
            "batches_per_launch": o.plan.batches,
            "target_ms": o.plan.target.as_secs_f64() * 1e3,
            "warm_ms": o.plan.warm.as_secs_f64() * 1e3,
            "cap_ms": asked.cap.as_secs_f64() * 1e3,
            "noise_threshold": o.noise,
            "window": spec::WINDOW,
            "statistic": "value = median of batch means (every round's batches pooled); spread = IQR/median of batch means; min/max = worst/best batch; ni×X = ratio of each transport's best round (a launch; its value the median of its batches; the round at the lower quartile of its rounds, nearest rank: the best of 3-4, the second best of 5-8, the third of 9-12) with 3 rounds or more, else of the values",
        },
        "notes": notes,
        "runs": runs,
        "points": recs.iter().map(|r| r.to_json(o.noise)).collect::<Vec<_>>(),
        "targets": tjson,
        "targets_shm": pjson,
        "copy": copy::to_json(&copy),
    });
    let jpath = o.out.join("results.json");
    std::fs::write(&jpath, serde_json::to_string_pretty(&doc).unwrap())
        .map_err(|e| format!("{}: {e}", jpath.display()))?;
    std::fs::write(o.out.join("table.txt"), &text).map_err(|e| e.to_string())?;
    eprintln!("[ni-bench] wrote {}", jpath.display());
    if o.plot {
        for pl in &o.placements {
            let path = o.out.join(format!("plot-{}.svg", pl.name()));
            match plot::plot(&recs, pl.name(), &pl.describe(2), &path) {
                Ok(true) => eprintln!("[ni-bench] wrote {}", path.display()),
                Ok(false) => {}
                Err(e) => eprintln!("[ni-bench] plot {}: {e}", path.display()),
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} launched run(s) failed"));
    }
    Ok(())
}
