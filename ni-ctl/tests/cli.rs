//! ni-ctl against a real ni-device: tables and --json agree, exit codes are what --help says,
//! routes are as long as the torus distance, Prometheus output parses.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn ni_ctl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ni-ctl"))
}

/// `cargo test -p ni-ctl` builds ni-ctl only; the daemon comes from the same target directory.
fn ni_device() -> PathBuf {
    let p = ni_ctl()
        .parent()
        .expect("the ni-ctl binary has a directory")
        .join("ni-device");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build -p ni-device` first (`cargo test -p ni-ctl` does not build the daemon)",
        p.display()
    );
    p
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("ni-ctl-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Daemon {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    _tmp: TempDir,
}

impl Daemon {
    fn start(nodes: u32) -> Daemon {
        let tmp = TempDir::new("dev");
        let dir = tmp.0.join("run");
        let log = tmp.0.join("ni-device.log");
        let mut child = Command::new(ni_device())
            .args(["--nodes", &nodes.to_string(), "--run-dir"])
            .arg(&dir)
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .expect("ni-device starts");
        let t = Instant::now();
        while !dir.join("control.sock").exists() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "ni-device exited ({status}) before serving:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "ni-device never served"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Daemon {
            child,
            dir,
            log,
            _tmp: tmp,
        }
    }

    fn ctl(&self, args: &[&str]) -> Output {
        ctl_in(&self.dir, args)
    }

    /// Run ni-ctl and insist it succeeded; stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "ni-ctl {args:?} failed ({}):\n{}\ndaemon log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let s = self.ok(&a);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("ni-ctl {a:?}: {e}:\n{s}"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ctl_in(run_dir: &Path, args: &[&str]) -> Output {
    Command::new(ni_ctl())
        .arg("--run-dir")
        .arg(run_dir)
        .args(args)
        .env_remove("NI_RUN_DIR")
        .output()
        .expect("ni-ctl runs")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("ni-ctl exited, not killed")
}

/// Whitespace-separated cells of each table line after the header.
fn table_rows(s: &str) -> Vec<Vec<String>> {
    s.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// A client connects to NI `i` and hangs up: its `attaches` and `resets` counters move.
fn poke(d: &Daemon, i: u32) {
    let mut s = UnixStream::connect(d.dir.join(format!("ni{i}.sock"))).unwrap();
    let _ = s.write_all(&[0u8; 16]);
    drop(s);
}

fn counter(d: &Daemon, ni: u32, name: &str) -> u64 {
    let v = d.json(&["counters", &ni.to_string()]);
    v["counters"][0]["counters"][name].as_u64().unwrap()
}

fn wait_counter(d: &Daemon, ni: u32, name: &str, at_least: u64) {
    let t = Instant::now();
    while counter(d, ni, name) < at_least {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{name} never reached {at_least}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn no_daemon_exits_3_and_says_what_to_do() {
    let tmp = TempDir::new("none");
    for args in [
        &["status"][..],
        &["counters", "--json"],
        &["route", "show", "0", "1"],
    ] {
        let out = ctl_in(&tmp.0, args);
        assert_eq!(code(&out), 3, "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let sock = tmp.0.join("control.sock");
        assert!(
            err.contains(&format!("cannot reach ni-device at {}", sock.display())),
            "{err}"
        );
        assert!(err.contains("is it running?"), "{err}");
        assert!(out.stdout.is_empty());
    }
    // A socket left behind by a dead daemon: connection refused, still "not reachable".
    let l = std::os::unix::net::UnixListener::bind(tmp.0.join("control.sock")).unwrap();
    drop(l);
    assert_eq!(code(&ctl_in(&tmp.0, &["status"])), 3);
}

#[test]
fn usage_errors_exit_2() {
    let tmp = TempDir::new("usage");
    for args in [
        &[][..],
        &["bogus"],
        &["route", "show", "1"],
        &["route", "show", "a", "b"],
        &["counters", "--watch", "0"],
        &["counters", "--watch", "-1"],
        &["counters", "--count", "2"],
        &["counters", "--watch", "1", "--reset"],
        &["counters", "--watch", "1", "--prometheus"],
        &["counters", "--prometheus", "--json"],
        &["counters", "x"],
    ] {
        let out = ctl_in(&tmp.0, args);
        assert_eq!(
            code(&out),
            2,
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let help = ctl_in(&tmp.0, &["--help"]);
    assert_eq!(code(&help), 0);
    let help = String::from_utf8(help.stdout).unwrap();
    for line in [
        "0  success",
        "1  ni-device answered",
        "2  usage",
        "3  ni-device is not reachable",
    ] {
        assert!(help.contains(line), "--help lacks {line:?}:\n{help}");
    }
}

#[test]
fn status_json_matches_table() {
    let d = Daemon::start(3);
    let v = d.json(&["status"]);
    let table = d.ok(&["status"]);
    assert_eq!(v["nodes"], 3);
    assert_eq!(v["attached"], 0);
    let pid = d.child.id();
    assert_eq!(v["pid"], pid);
    assert!(table.contains(&format!("(pid {pid})")), "{table}");
    assert!(table.contains("NIs        3 (0 attached)"), "{table}");
    assert!(
        table.contains(&format!("errors     {}", v["errors"])),
        "{table}"
    );
    assert!(table.contains(v["run_dir"].as_str().unwrap()), "{table}");
    assert!(
        table.contains(v["daemon_version"].as_str().unwrap()),
        "{table}"
    );
}

#[test]
fn nodes_json_matches_table() {
    let d = Daemon::start(3);
    poke(&d, 2);
    wait_counter(&d, 2, "attaches", 1);
    let v = d.json(&["nodes"]);
    let rows = table_rows(&d.ok(&["nodes"]));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    assert_eq!(rows.len(), 3);
    for (n, row) in nodes.iter().zip(&rows) {
        // NI STATE CLIENT-PID ATTACHES DMA-REGIONS DMA-BYTES SOCKET
        assert_eq!(row[0], n["node"].to_string());
        assert_eq!(row[1], n["state"].as_str().unwrap());
        assert_eq!(row[3], n["attaches"].to_string());
        assert_eq!(row[4], n["dma_regions"].to_string());
        assert_eq!(row[5], n["dma_bytes"].to_string());
        assert_eq!(row[6], n["socket"].as_str().unwrap());
    }
    assert_eq!(nodes[2]["attaches"], 1);
}

#[test]
fn counters_json_matches_table_and_reset_zeroes() {
    let d = Daemon::start(3);
    poke(&d, 1);
    wait_counter(&d, 1, "attaches", 1);
    let v = d.json(&["counters"]);
    let table = d.ok(&["counters"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["COUNTER", "NI", "0", "NI", "1", "NI", "2"]
    );
    let per_ni = v["counters"].as_array().unwrap();
    assert_eq!(per_ni.len(), 3);
    let rows = table_rows(&table);
    assert_eq!(rows.len(), per_ni[0]["counters"].as_object().unwrap().len());
    for row in &rows {
        for (k, ni) in per_ni.iter().enumerate() {
            assert_eq!(
                row[1 + k],
                ni["counters"][&row[0]].to_string(),
                "counter {} of NI {k}",
                row[0]
            );
        }
    }
    assert_eq!(per_ni[1]["counters"]["attaches"], 1);

    // Selected NIs only, in the order asked.
    let v = d.json(&["counters", "2", "1"]);
    let nodes: Vec<u64> = v["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_u64().unwrap())
        .collect();
    assert_eq!(nodes, [2, 1]);

    // --reset shows the values before the reset, and they are zero afterwards.
    let before = d.json(&["counters", "1", "--reset"]);
    assert_eq!(before["counters"][0]["counters"]["attaches"], 1);
    assert_eq!(counter(&d, 1, "attaches"), 0);
}

#[test]
fn counters_for_a_missing_ni_exits_1() {
    let d = Daemon::start(2);
    for args in [
        &["counters", "99"][..],
        &["counters", "1", "2", "--json"],
        &["route", "show", "0", "5"],
    ] {
        let out = d.ctl(args);
        assert_eq!(code(&out), 1, "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no NI"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn prometheus_output_parses() {
    let d = Daemon::start(2);
    poke(&d, 0);
    wait_counter(&d, 0, "attaches", 1);
    let text = d.ok(&["counters", "--prometheus"]);
    let json = d.json(&["counters"]);
    let mut samples = BTreeMap::new();
    let mut typed = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(kind, "counter");
            typed.push(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        // name{labels} value
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value in {line:?}"));
        let (name, labels) = series.split_once('{').unwrap_or_else(|| panic!("{line:?}"));
        let labels = labels
            .strip_suffix('}')
            .unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            name.starts_with("ni_") && name.ends_with("_total"),
            "{name}"
        );
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{name}"
        );
        assert_eq!(
            typed.last().map(String::as_str),
            Some(name),
            "{line:?} outside its family"
        );
        let node = labels
            .strip_prefix("node=\"")
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_else(|| panic!("labels {labels:?}"));
        samples.insert((name.to_string(), node.to_string()), value);
    }
    let mut expected = 0;
    for ni in json["counters"].as_array().unwrap() {
        let node = ni["node"].to_string();
        for (name, v) in ni["counters"].as_object().unwrap() {
            let got = samples[&(format!("ni_{name}_total"), node.clone())];
            assert_eq!(got, v.as_u64().unwrap() as f64, "{name} of NI {node}");
            expected += 1;
        }
    }
    assert_eq!(samples.len(), expected);
    assert_eq!(samples[&("ni_attaches_total".into(), "0".into())], 1.0);
}

/// Torus distance from physical numbers `ZZYYXX`, computed independently of the daemon.
fn distance(dims: [u64; 3], a: &str, b: &str) -> u64 {
    let c = |s: &str, i: usize| u64::from_str_radix(&s[i..i + 2], 16).unwrap();
    // X is the last pair, Z the first.
    [(4, dims[0]), (2, dims[1]), (0, dims[2])]
        .iter()
        .map(|&(i, k)| {
            let d = (c(b, i) + k - c(a, i)) % k;
            d.min(k - d)
        })
        .sum()
}

#[test]
fn route_length_is_the_torus_distance() {
    // 12 NIs: a 2x3x2 torus, so the Y ring has a wraparound shortcut.
    let d = Daemon::start(12);
    let topo = d.json(&["topology"]);
    let dims = [
        topo["x"].as_u64().unwrap(),
        topo["y"].as_u64().unwrap(),
        topo["z"].as_u64().unwrap(),
    ];
    assert_eq!(
        dims.iter().product::<u64>(),
        topo["physical_nodes"].as_u64().unwrap()
    );
    assert!(dims.iter().product::<u64>() >= 12);
    let lut: Vec<String> = topo["lut"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, e)| {
            assert_eq!(e["lpe"], i);
            e["physical"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(lut.len(), 12);
    let mut wrapped = false;
    for a in 0..12u32 {
        for b in 0..12u32 {
            let r = d.json(&["route", "show", &a.to_string(), &b.to_string()]);
            let (src, dst) = (&lut[a as usize], &lut[b as usize]);
            assert_eq!(r["source"], src.as_str());
            assert_eq!(r["destination"], dst.as_str());
            let hops = r["hops"].as_array().unwrap();
            let want = distance(dims, src, dst);
            assert_eq!(hops.len() as u64, want, "{a} -> {b}: {r}");
            assert_eq!(r["distance"], want);
            // The hops chain from the source to the destination.
            let mut at = src.clone();
            for h in hops {
                assert_eq!(h["from"], at.as_str());
                assert_eq!(distance(dims, &at, h["to"].as_str().unwrap()), 1);
                at = h["to"].as_str().unwrap().to_string();
                assert!([0, 1, 2, 3].contains(&h["vc"].as_u64().unwrap()));
                wrapped |= h["dateline"].as_bool().unwrap();
            }
            assert_eq!(&at, dst);
        }
    }
    assert!(wrapped, "no route crossed a wraparound dateline link");

    // The table says the same.
    let r = d.json(&["route", "show", "0", "11"]);
    let table = d.ok(&["route", "show", "0", "11"]);
    let n = r["hops"].as_array().unwrap().len();
    assert!(
        table.starts_with(&format!(
            "NI 0 ({}) -> NI 11 ({}): {n} hops, shortest {n}; routing tag {:#x}",
            r["source"].as_str().unwrap(),
            r["destination"].as_str().unwrap(),
            r["tag"].as_u64().unwrap()
        )),
        "{table}"
    );
    let rows: Vec<Vec<String>> = table_rows(table.split("\n\n").nth(1).unwrap());
    assert_eq!(rows.len(), n);
    for (row, h) in rows.iter().zip(r["hops"].as_array().unwrap()) {
        assert_eq!(row[1], h["from"].as_str().unwrap());
        assert_eq!(row[2], h["to"].as_str().unwrap());
        assert_eq!(row[3], h["direction"].as_str().unwrap());
        assert_eq!(row[4], h["out_port"].as_str().unwrap());
        assert_eq!(row[5], h["in_port"].as_str().unwrap());
        assert_eq!(row[6], format!("VC{}", h["vc"]));
    }
    // A route to itself is empty.
    let r = d.json(&["route", "show", "3", "3"]);
    assert!(r["hops"].as_array().unwrap().is_empty());
}

#[test]
fn topology_json_matches_table() {
    let d = Daemon::start(16);
    let v = d.json(&["topology"]);
    let table = d.ok(&["topology"]);
    // The seed's 16-PE machine.
    assert_eq!(
        (v["x"].as_u64(), v["y"].as_u64(), v["z"].as_u64()),
        (Some(2), Some(4), Some(2))
    );
    assert!(
        table.starts_with("torus 2x4x2: 16 physical nodes, 16 logical PEs, 0 spare\n"),
        "{table}"
    );
    let lut_part = table.split("\n\n").nth(1).unwrap();
    let rows = table_rows(lut_part);
    let lut = v["lut"].as_array().unwrap();
    assert_eq!(rows.len(), lut.len());
    for (row, e) in rows.iter().zip(lut) {
        assert_eq!(row[0], e["lpe"].to_string());
        assert_eq!(row[1], e["physical"].as_str().unwrap());
        let p = e["physical"].as_str().unwrap();
        let xyz: Vec<String> = [4, 2, 0]
            .iter()
            .map(|&i| u32::from_str_radix(&p[i..i + 2], 16).unwrap().to_string())
            .collect();
        assert_eq!(row[2..5], xyz[..]);
    }
    for dl in v["datelines"].as_array().unwrap() {
        let s = format!(
            "{} {}-{}",
            dl["axis"].as_str().unwrap(),
            dl["between"][0],
            dl["between"][1]
        );
        assert!(table.contains(&s), "{s} not in\n{table}");
    }
}

#[test]
fn watch_redraws_with_rates() {
    let d = Daemon::start(2);
    let out = d.ok(&["counters", "1", "--watch", "0.1", "--count", "3"]);
    let frames: Vec<&str> = out.split("ni-ctl counters: every 0.1s").skip(1).collect();
    assert_eq!(frames.len(), 3, "{out}");
    for (i, f) in frames.iter().enumerate() {
        assert!(f.starts_with(&format!(", sample {}", i + 1)), "{f}");
        let rows = table_rows(f.trim_start_matches(|c| c != '\n').trim_start());
        assert!(!rows.is_empty());
        for r in rows {
            // COUNTER value rate: no rate before the second sample.
            assert_eq!(r.len(), 3, "{r:?}");
            assert_eq!(r[2] == "-", i == 0, "{r:?}");
        }
    }

    // JSON: one object per sample, rates from the second on.
    poke(&d, 1);
    let out = d.ok(&["counters", "1", "--watch", "0.1", "--count", "2", "--json"]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0]["counters"][0]["rates"]["attaches"].is_null());
    assert!(lines[1]["interval_secs"].as_f64().unwrap() > 0.05);
    assert!(
        lines[1]["counters"][0]["rates"]["attaches"]
            .as_f64()
            .unwrap()
            >= 0.0
    );
}

#[test]
fn run_dir_comes_from_ni_run_dir_and_the_flag_wins() {
    let d = Daemon::start(1);
    let env_only = Command::new(ni_ctl())
        .args(["status", "--json"])
        .env("NI_RUN_DIR", &d.dir)
        .output()
        .unwrap();
    assert_eq!(
        code(&env_only),
        0,
        "{}",
        String::from_utf8_lossy(&env_only.stderr)
    );
    let flag_wins = Command::new(ni_ctl())
        .arg("--run-dir")
        .arg(&d.dir)
        .arg("status")
        .env("NI_RUN_DIR", "/nonexistent/ni")
        .output()
        .unwrap();
    assert_eq!(code(&flag_wins), 0);
    let env_wrong = Command::new(ni_ctl())
        .arg("status")
        .env("NI_RUN_DIR", "/nonexistent/ni")
        .output()
        .unwrap();
    assert_eq!(code(&env_wrong), 3);
    assert!(String::from_utf8_lossy(&env_wrong.stderr).contains("/nonexistent/ni/control.sock"));
}
