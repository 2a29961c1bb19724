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
        Self::start_args(nodes, &[])
    }

    /// With more ni-device flags (e.g. `--torus 2x2x2`).
    fn start_args(nodes: u32, extra: &[&str]) -> Daemon {
        let tmp = TempDir::new("dev");
        let dir = tmp.0.join("run");
        let log = tmp.0.join("ni-device.log");
        let mut child = Command::new(ni_device())
            .args(["--nodes", &nodes.to_string(), "--run-dir"])
            .arg(&dir)
            .args(extra)
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
        &["partition", "create", "p"],
        &["partition", "create", "p", "--nodes", "1-"],
        &["partition", "create", "p", "--nodes", ""],
        &["port", "set", "0"],
        &["port", "set", "0", "--mode", "gmii"],
        &["port", "set", "0", "--state", "sideways"],
        &["map-out", "link", "0"],
        &["diag", "ping", "0"],
        &["diag", "loopback", "0", "--size", "0"],
        &["diag", "traffic", "--secs", "0"],
        &["diag", "traffic", "--max-size", "1X"],
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
        "4  a diagnostic (diag) found a fault",
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
        // NI STATE CLIENT PARTITION VPE LPE PHYSICAL LINK ATTACHES DMA-REGIONS DMA-BYTES
        // SOCKET
        assert_eq!(row.len(), 12, "{row:?}");
        assert_eq!(row[0], n["node"].to_string());
        assert_eq!(row[1], n["state"].as_str().unwrap());
        assert_eq!(row[2], "-");
        assert_eq!(row[3], n["partition"].as_str().unwrap());
        assert_eq!(row[4], n["rank"].to_string());
        assert_eq!(row[5], n["logical"].to_string());
        assert_eq!(row[6], n["physical"].as_str().unwrap());
        assert_eq!(
            row[7],
            format!(
                "{}({})",
                n["link"].as_str().unwrap(),
                n["clsm"].as_str().unwrap()
            )
        );
        assert_eq!(row[8], n["attaches"].to_string());
        assert_eq!(row[9], n["dma_regions"].to_string());
        assert_eq!(row[10], n["dma_bytes"].to_string());
        assert_eq!(row[11], n["socket"].as_str().unwrap());
        // The default partition numbers NIs in order; NI i is logical PE i.
        assert_eq!(n["partition"], "default");
        assert_eq!(n["rank"], n["node"]);
        assert_eq!(n["logical"], n["node"]);
        assert_eq!(n["link"], "up");
        assert_eq!(n["clsm"], "IN_SYNC_GO");
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
    assert_eq!(
        rows.len(),
        per_ni[0]["counters"].as_object().unwrap().len()
            + per_ni[0]["gauges"].as_object().unwrap().len()
    );
    for row in &rows {
        for (k, ni) in per_ni.iter().enumerate() {
            let v = if ni["counters"].get(&row[0]).is_some() {
                &ni["counters"][&row[0]]
            } else {
                &ni["gauges"][&row[0]]
            };
            assert_eq!(row[1 + k], v.to_string(), "counter {} of NI {k}", row[0]);
        }
    }
    // The CM-5's signed message count, and the Lanai port counters.
    assert_eq!(per_ni[1]["gauges"]["dr_message_count"], 0);
    for name in [
        "p0_packets_sent",
        "p0_link_downed",
        "p0_buffer_drop",
        "err_link_down",
    ] {
        assert_eq!(per_ni[1]["counters"][name], 0, "{name}");
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
            // Counters are `_total`; gauges (dr_message_count) are not.
            assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
            assert!(kind == "counter" || kind == "gauge", "{line}");
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
        assert!(name.starts_with("ni_"), "{name}");
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
        for (name, v) in ni["gauges"].as_object().unwrap() {
            let got = samples[&(format!("ni_{name}"), node.clone())];
            assert_eq!(got, v.as_i64().unwrap() as f64, "{name} of NI {node}");
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
            // COUNTER value rate: no rate before the second sample (nor ever for a gauge).
            assert_eq!(r.len(), 3, "{r:?}");
            if r[0] != "dr_message_count" {
                assert_eq!(r[2] == "-", i == 0, "{r:?}");
            }
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

#[test]
fn partitions_are_made_live_and_json_matches_the_tables() {
    let d = Daemon::start(6);
    d.ok(&["partition", "delete", "default"]);
    let v = d.json(&["partition", "create", "x", "--nodes", "0-2,4"]);
    // Relative numbering, contiguous, in the order given; the runs are the translation.
    let members: Vec<u64> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(r, m)| {
            assert_eq!(m["rank"], r);
            m["node"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(members, [0, 1, 2, 4]);
    assert_eq!(v["size"], 4);
    assert_eq!(
        v["runs"],
        serde_json::json!([{"ranks": [0, 2], "nodes": [0, 2]}, {"ranks": [3, 3], "nodes": [4, 4]}])
    );
    d.ok(&["partition", "create", "y", "--nodes", "5,3"]);

    let show = d.ok(&["partition", "show", "x"]);
    assert!(
        show.starts_with(&format!(
            "partition x (id {}): 4 NIs, ranks 0-3\ntranslation, rank -> NI:\n  ranks 0-2 -> NIs 0-2\n  rank 3 -> NI 4\n",
            v["id"]
        )),
        "{show}"
    );
    let rows = table_rows(show.split("\n\n").nth(1).unwrap());
    let json = d.json(&["partition", "show", "x"]);
    for (row, m) in rows.iter().zip(json["members"].as_array().unwrap()) {
        // RANK NI PHYSICAL STATE LINK
        assert_eq!(row[0], m["rank"].to_string());
        assert_eq!(row[1], m["node"].to_string());
        assert_eq!(row[2], m["physical"].as_str().unwrap());
        assert_eq!(row[3], m["state"].as_str().unwrap());
        assert_eq!(row[4], m["link"].as_str().unwrap());
    }

    let list = d.json(&["partition", "list"]);
    let rows = table_rows(&d.ok(&["partition", "list"]));
    let parts = list["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    for (p, row) in parts.iter().zip(&rows) {
        // NAME ID SIZE READY NIS
        assert_eq!(row[0], p["name"].as_str().unwrap());
        assert_eq!(row[1], p["id"].to_string());
        assert_eq!(row[2], p["size"].to_string());
        assert_eq!(row[3], "0");
    }
    assert_eq!(rows[0][4], "0-2,4");
    assert_eq!(rows[1][4], "5,3");

    // nodes: the partition and the virtual PE number (rank) of each NI.
    let nodes = d.json(&["nodes"]);
    let n = nodes["nodes"].as_array().unwrap();
    assert_eq!(
        (n[4]["partition"].as_str(), n[4]["rank"].as_u64()),
        (Some("x"), Some(3))
    );
    assert_eq!(
        (n[3]["partition"].as_str(), n[3]["rank"].as_u64()),
        (Some("y"), Some(1))
    );
    let rows = table_rows(&d.ok(&["nodes"]));
    assert_eq!(rows[4][3..5], ["x", "3"]);

    // What cannot be done says why, and changes nothing.
    for (args, says) in [
        (
            &["partition", "create", "z", "--nodes", "3"][..],
            "NI 3 is already in partition \"y\"",
        ),
        (&["partition", "create", "x", "--nodes", "9"], "no NI 9"),
        (
            &["partition", "create", "x", "--nodes", "5"],
            "partition \"x\" already exists",
        ),
        (
            &["partition", "create", "w", "--nodes", "1"],
            "NI 1 is already in partition \"x\"",
        ),
        (
            &["partition", "create", "a b", "--nodes", "1"],
            "partition name",
        ),
        (
            &["partition", "create", "z", "--nodes", "1,1"],
            "listed twice",
        ),
        (&["partition", "delete", "nope"], "no partition \"nope\""),
        (&["partition", "show", "nope"], "no partition \"nope\""),
    ] {
        let out = d.ctl(args);
        assert_eq!(code(&out), 1, "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(d.json(&["partition", "list"]), list);

    // Deleting and recreating: a new id, the NIs free for other partitions.
    assert_eq!(d.json(&["partition", "delete", "y"])["deleted"], "y");
    let z = d.json(&["partition", "create", "y", "--nodes", "3"]);
    assert!(z["id"].as_u64() > v["id"].as_u64());
}

#[test]
fn ports_set_mode_and_state_and_json_matches_the_table() {
    let d = Daemon::start(3);
    let v = d.json(&["port", "list"]);
    let rows = table_rows(&d.ok(&["port", "list"]));
    let ports = v["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 3);
    for (p, row) in ports.iter().zip(&rows) {
        // NI PORT MODE MODE-REG LINK CLSM LINK-READY DOWNED PKTS-OUT BYTES-OUT PKTS-IN
        // BYTES-IN REFUSED
        assert_eq!(row[0], p["node"].to_string());
        assert_eq!(row[1], "0");
        assert_eq!(row[2], p["mode"].as_str().unwrap());
        assert_eq!(
            row[3],
            format!("{:#06b}", p["mode_register"].as_u64().unwrap())
        );
        assert_eq!(row[4], p["state"].as_str().unwrap());
        assert_eq!(
            row[5],
            format!("{}({})", p["clsm"].as_str().unwrap(), p["clsm_code"])
        );
        assert_eq!(row[6], if p["link_ready"] == true { "1" } else { "0" });
        assert_eq!(row[7], p["counters"]["p0_link_downed"].to_string());
        assert_eq!(row[12], p["counters"]["p0_link_refused"].to_string());
        assert_eq!(p["mode"], "myrinet");
        assert_eq!(p["clsm"], "IN_SYNC_GO");
    }

    // Each mode's link state machine names its states in its own terms.
    for (mode, reg, up, down) in [
        ("ethernet", 4, ("LINK_OK", 7), ("AN_ENABLE", 0)),
        ("infiniband", 2, ("LinkUp", 5), ("Disabled", 3)),
        ("myrinet", 1, ("IN_SYNC_GO", 10), ("WE_LOST_SYNC", 0)),
    ] {
        let p = d.json(&["port", "set", "1", "--mode", mode]);
        assert_eq!(p["mode"], mode);
        assert_eq!(p["mode_register"], reg);
        assert_eq!(
            (
                p["clsm"].as_str().unwrap(),
                p["clsm_code"].as_u64().unwrap()
            ),
            (up.0, up.1)
        );
        let p = d.json(&["port", "set", "1", "--state", "down"]);
        assert_eq!(
            (
                p["clsm"].as_str().unwrap(),
                p["clsm_code"].as_u64().unwrap()
            ),
            (down.0, down.1)
        );
        assert_eq!(p["link_ready"], false);
        let p = d.json(&["port", "set", "1", "--state", "up"]);
        assert_eq!(p["link_ready"], true);
    }
    // A mode change retrains a link that is up (down once more), and every down counts:
    // three retrains, three times taken down.
    assert_eq!(
        d.json(&["port", "list", "1"])["ports"][0]["counters"]["p0_link_downed"],
        6
    );
    let table = d.ok(&["port", "set", "2", "--state", "down"]);
    assert_eq!(table_rows(&table)[0][4], "down");
    assert_eq!(d.json(&["nodes"])["nodes"][2]["link"], "down");
    let out = d.ctl(&["port", "set", "7", "--state", "up"]);
    assert_eq!(code(&out), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no NI 7"));
}

#[test]
fn map_outs_reroute_and_show_in_routes_and_topology() {
    // 4 NIs on a 2x2x2 torus: logical PEs on plane Z=0, spares on Z=1.
    let d = Daemon::start_args(4, &["--torus", "2x2x2"]);
    let topo = d.json(&["topology"]);
    assert_eq!(topo["spares"].as_array().unwrap().len(), 4);
    let hops = |a: &str, b: &str| {
        d.json(&["route", "show", a, b])["hops"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(hops("0", "1"), 1);

    // In a ring of two, two links join 000000 and 000001: with one gone the other serves.
    let m = d.json(&["map-out", "link", "0", "1"]);
    assert_eq!(m["action"], "link");
    assert_eq!(m["mapped_out"], "000000-000001 (X)");
    assert_eq!(hops("0", "1"), 1);
    let text = d.ok(&["map-out", "link", "1", "0"]);
    assert!(
        text.starts_with("mapped out link 000001-000000 (X)\n"),
        "{text}"
    );
    assert!(
        text.contains("every pair of NIs still has a route"),
        "{text}"
    );
    // Both gone: out of the plane and back with an initial or a final hop, as the SSD-T90
    // detours (here: +Z, -X, then the final -Z hop).
    let r = d.json(&["route", "show", "0", "1"]);
    let h = r["hops"].as_array().unwrap();
    assert_eq!(h.len(), 3);
    assert!(h.iter().any(|h| h["kind"] != "travel"), "{r}");
    assert!(h
        .iter()
        .all(|h| h["direction"] != "+X" || h["from"] != "000000"));
    assert!(d.ok(&["route", "show", "0", "1"]).contains("(detour)"));

    // A node: NI 2's logical PE moves to the first spare.
    let m = d.json(&["map-out", "node", "2"]);
    assert_eq!(m["mapped_out"], "000100");
    assert_eq!(
        m["remap"],
        serde_json::json!({"lpe": 2, "from": "000100", "to": "010000"})
    );
    let r = d.json(&["route", "show", "0", "2"]);
    assert_eq!(r["destination"], "010000");
    let t = d.ok(&["topology"]);
    assert!(
        t.contains("mapped out: nodes [000100], links [000000-000001 (X), 000001-000000 (X)]"),
        "{t}"
    );
    assert_eq!(d.json(&["nodes"])["nodes"][2]["physical"], "010000");
    // A spare (a router with no NI) by its physical number, to a chosen replacement: no
    // LUT change.
    let m = d.json(&["map-out", "node", "010101"]);
    assert!(m["remap"].is_null());
    let m = d.json(&["map-out", "node", "3", "--to", "010001"]);
    assert_eq!(m["remap"]["to"], "010001");

    for (args, says) in [
        (&["map-out", "node", "000100"][..], "already mapped out"),
        (&["map-out", "node", "9"], "no NI 9"),
        (
            &["map-out", "node", "zz"],
            "neither an NI number nor a physical PE number",
        ),
        (
            &["map-out", "node", "0", "--to", "010001"],
            "already holds logical PE",
        ),
        (&["map-out", "link", "0", "3"], "not neighbours"),
        (&["map-out", "node", "030000"], "outside the 2x2x2 torus"),
    ] {
        let out = d.ctl(args);
        assert_eq!(code(&out), 1, "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }

    let m = d.json(&["map-out", "clear"]);
    assert_eq!(m["action"], "clear");
    let topo = d.json(&["topology"]);
    assert!(topo["mapped_out_nodes"].as_array().unwrap().is_empty());
    assert!(topo["mapped_out_links"].as_array().unwrap().is_empty());
    assert_eq!(topo["lut"][2]["physical"], "000100");
    assert_eq!(hops("0", "1"), 1);
}

#[test]
fn diagnostics_report_and_exit_4_on_a_fault() {
    let d = Daemon::start(3);
    // Ping: nobody attached, so the peer is down as its partition sees it.
    let out = d.ctl(&["diag", "ping", "0", "1", "--json"]);
    assert_eq!(code(&out), 4);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["up"], false);
    assert_eq!(v["status"], "peer_down");
    assert_eq!(v["partition"], "default");
    assert_eq!(v["rank"], 1);
    let out = d.ctl(&["diag", "ping", "0", "1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "NI 0 -> NI 1: DOWN (peer_down): {}\n",
            v["detail"].as_str().unwrap()
        )
    );

    // Loopback needs no client: every byte back intact.
    let v = d.json(&["diag", "loopback", "0", "--size", "1M", "--count", "9"]);
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["messages"].as_u64(),
            v["mismatches"].as_u64()
        ),
        (Some(true), Some(9), Some(0))
    );
    assert!(v["bytes"].as_u64().unwrap() > 1 << 20);
    let text = d.ok(&["diag", "loopback", "0"]);
    assert!(
        text.starts_with("NI 0 loopback: 16 messages, ") && text.ends_with("every byte intact\n"),
        "{text}"
    );
    // It went through the port: counted there.
    let p = d.json(&["port", "list", "0"]);
    assert_eq!(p["ports"][0]["counters"]["p0_packets_sent"], 9 + 16);
    assert_eq!(p["ports"][0]["counters"]["p0_packets_rcvd"], 9 + 16);

    // Traffic across the partition: every pair, every byte.
    let v = d.json(&["diag", "traffic", "--secs", "0.2", "--max-size", "256K"]);
    assert_eq!(v["ok"], true);
    let p = &v["partitions"][0];
    assert_eq!(p["name"], "default");
    assert_eq!(p["members"], 3);
    assert!(p["messages"].as_u64().unwrap() >= 6, "{v}");
    assert_eq!(p["mismatches"], 0);
    assert!(p["mb_per_sec"].as_f64().unwrap() > 0.0);
    let text = d.ok(&["diag", "traffic", "--secs", "0.1"]);
    let rows = table_rows(&text);
    // PARTITION NIS MESSAGES BYTES SECS MB/S MSG/S HOPS MISMATCHES REFUSED
    assert_eq!(rows[0][0], "default");
    assert_eq!(rows[0][1], "3");
    assert_eq!(rows[0][8..10], ["0", "0"]);
    assert!(text.ends_with("every byte checked: no errors\n"), "{text}");

    // A port down: loopback and traffic fail, clearly, with exit status 4.
    d.ok(&["port", "set", "1", "--state", "down"]);
    let out = d.ctl(&["diag", "loopback", "1", "--json"]);
    assert_eq!(code(&out), 4);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().starts_with("link_down"), "{v}");
    let out = d.ctl(&["diag", "traffic", "--secs", "0.1", "--json"]);
    assert_eq!(code(&out), 4);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let refused = v["partitions"][0]["refused"]["link_down"].as_u64().unwrap();
    assert!(refused > 0);
    // Traffic not touching NI 1 still got through.
    assert!(v["partitions"][0]["messages"].as_u64().unwrap() > 0);
    assert_eq!(v["partitions"][0]["mismatches"], 0);
    let out = d.ctl(&["diag", "traffic", "--secs", "0.1"]);
    assert_eq!(code(&out), 4);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("default: refused: link_down "), "{text}");
    assert!(text.ends_with("FAULTS FOUND\n"), "{text}");

    // Partitions bound what a ping can name.
    d.ok(&["partition", "delete", "default"]);
    d.ok(&["partition", "create", "a", "--nodes", "0"]);
    let v: Value =
        serde_json::from_slice(&d.ctl(&["diag", "ping", "0", "2", "--json"]).stdout).unwrap();
    assert_eq!(v["status"], "out_of_partition");
    let out = d.ctl(&["diag", "traffic", "--partition", "nope"]);
    assert_eq!(code(&out), 1);
    // A partition of one: traffic is loopback through its port.
    let v = d.json(&["diag", "traffic", "--partition", "a", "--secs", "0.05"]);
    assert_eq!(v["partitions"][0]["members"], 1);
    assert_eq!(v["ok"], true);
}
