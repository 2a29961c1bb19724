//! Administration of a running daemon with `ni-ctl` while client processes use it (issue 5):
//! live partitions and isolation, partition changes under running clients, counters equal
//! to the traffic, ports taken down and brought back, map-outs of a link and of a node with
//! every byte of the traffic checked, and a control socket that neither clients nor other
//! users can reach.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use ni_tests::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);
/// The message sizes of one `stream` phase (ni-test-admin's SIZES).
const STREAM_SIZES: [u64; 8] = [1, 63, 64, 4096, 4097, 65536, 1 << 20, 3 << 20];

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

fn ctl(d: &Daemon, args: &[&str]) -> Output {
    Command::new(ni_ctl())
        .arg("--run-dir")
        .arg(&d.dir)
        .args(args)
        .output()
        .expect("ni-ctl runs")
}

/// ni-ctl that must succeed; its stdout.
fn ok(d: &Daemon, args: &[&str]) -> String {
    let out = ctl(d, args);
    assert!(
        out.status.success(),
        "ni-ctl {args:?} failed ({}):\n{}{}\ndaemon log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(d: &Daemon, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let s = ok(d, &a);
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("ni-ctl {a:?}: {e}:\n{s}"))
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited")
}

fn counters(d: &Daemon, ni: u32) -> Value {
    json(d, &["counters", &ni.to_string()])["counters"][0].clone()
}

fn c(d: &Daemon, ni: u32, name: &str) -> u64 {
    counters(d, ni)["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn gauge(d: &Daemon, ni: u32, name: &str) -> i64 {
    counters(d, ni)["gauges"][name]
        .as_i64()
        .unwrap_or_else(|| panic!("no gauge {name}"))
}

/// A rank process of `ni-test-admin`, with its stdout read line by line in the background.
struct Rank {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    what: String,
}

impl Rank {
    fn start(d: &Daemon, node: u32, args: &[&str]) -> Rank {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ni-test-admin"))
            .args(args)
            .env("NI_SOCKET", d.sock(node))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Rank {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            seen: Vec::new(),
            what: format!("{args:?} on NI {node}"),
        }
    }

    /// Wait for a line starting with `prefix`; the line.
    fn expect(&mut self, prefix: &str, d: &Daemon) -> String {
        let t = Instant::now();
        loop {
            let left = LIMIT.saturating_sub(t.elapsed());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(_) if t.elapsed() < LIMIT && self.child.try_wait().unwrap().is_none() => {}
                Err(_) => {
                    // The rank is gone (or too slow): what it printed last may still be on
                    // its way.
                    while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                        self.seen.push(l.clone());
                        if l.starts_with(prefix) {
                            return l;
                        }
                    }
                    let _ = self.child.kill();
                    let out = self.child.wait_with_output_ref();
                    panic!(
                        "{}: never printed {prefix:?}\nstdout:\n{}\nstderr:\n{out}\ndaemon log:\n{}",
                        self.what,
                        self.seen.join("\n"),
                        d.log()
                    );
                }
            }
        }
    }

    /// Let the rank go on past a step.
    fn go(&mut self) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(b"go\n").unwrap();
        s.flush().unwrap();
    }

    /// The rank finishes with `ok SCENARIO` and exit status 0.
    fn finish(mut self, scenario: &str, d: &Daemon) {
        self.expect(&format!("ok {scenario}"), d);
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(
                    st.success(),
                    "{}: {st}\n{}",
                    self.what,
                    self.child.wait_with_output_ref()
                );
                return;
            }
            assert!(t.elapsed() < LIMIT, "{} did not exit", self.what);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        // A test that failed halfway leaves no rank behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait StderrOf {
    fn wait_with_output_ref(&mut self) -> String;
}

impl StderrOf for Child {
    fn wait_with_output_ref(&mut self) -> String {
        let _ = self.wait();
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    }
}

/// Whitespace-separated cells of each table line after the header.
fn table_rows(s: &str) -> Vec<Vec<String>> {
    s.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// A daemon without partition windows: these tests watch the fabric's own model (its
/// ports, routes, packet counters and pending operations), which the direct path bypasses
/// for small messages; `tests/direct.rs` covers what the administrator sees of that path.
fn fabric_daemon(nodes: u32) -> Daemon {
    Daemon::start_with(nodes, Some("direct = false\n"))
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn partitions_made_live_isolate_and_number_relatively() {
    let d = fabric_daemon(4);
    ok(&d, &["partition", "delete", "default"]);
    let a = json(&d, &["partition", "create", "a", "--nodes", "2,0"]);
    assert_eq!(a["size"], 2);
    assert_eq!(a["members"][0]["node"], 2);
    assert_eq!(a["members"][1]["node"], 0);
    ok(&d, &["partition", "create", "b", "--nodes", "1,3"]);

    // A taken NI, an unknown NI, a bad list, a missing partition: each says what is wrong.
    let taken = ctl(&d, &["partition", "create", "c", "--nodes", "3"]);
    assert_eq!(code(&taken), 1);
    assert!(String::from_utf8_lossy(&taken.stderr).contains("NI 3 is already in partition \"b\""));
    let none = ctl(&d, &["partition", "create", "c", "--nodes", "4"]);
    assert_eq!(code(&none), 1);
    assert!(String::from_utf8_lossy(&none.stderr).contains("no NI 4"));
    assert_eq!(
        code(&ctl(&d, &["partition", "create", "c", "--nodes", "x-"])),
        2
    );
    assert_eq!(code(&ctl(&d, &["partition", "show", "zz"])), 1);

    // a = {NI 2 as rank 0, NI 0 as rank 1}; b = {NI 1, NI 3}. Both run at once, each
    // reaching its own peer and nothing else.
    let ranks: Vec<(Rank, u32)> = [(2, 0), (0, 1), (1, 0), (3, 1)]
        .into_iter()
        .map(|(ni, rank)| (Rank::start(&d, ni, &["isolated"]), rank))
        .collect();
    for (r, rank) in ranks {
        let mut r = r;
        let line = r.expect("rank ", &d);
        assert!(line.starts_with(&format!("rank {rank} of 2")), "{line}");
        r.finish("isolated", &d);
    }
    // Data went only where it was allowed: NI 2 -> NI 0 and NI 1 -> NI 3.
    assert_eq!(c(&d, 0, "p0_packets_rcvd"), 1);
    assert_eq!(c(&d, 3, "p0_packets_rcvd"), 1);
    assert_eq!(c(&d, 1, "p0_packets_rcvd"), 0);
    assert_eq!(c(&d, 2, "p0_packets_rcvd"), 0);
    assert_eq!(c(&d, 2, "err_out_of_partition"), 6 * 3 + 1);
    assert_eq!(c(&d, 1, "err_out_of_partition"), 6 * 3 + 1);

    // list, show and nodes: --json and the tables agree.
    let list = json(&d, &["partition", "list"]);
    let rows = table_rows(&ok(&d, &["partition", "list"]));
    let parts = list["partitions"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (p, row) in parts.iter().zip(&rows) {
        // NAME ID SIZE READY NIS
        assert_eq!(row[0], p["name"].as_str().unwrap());
        assert_eq!(row[1], p["id"].to_string());
        assert_eq!(row[2], p["size"].to_string());
    }
    assert_eq!(rows[0][4], "2,0");
    assert_eq!(rows[1][4], "1,3");
    let show = ok(&d, &["partition", "show", "a"]);
    assert!(
        show.contains("rank 0 -> NI 2\n  rank 1 -> NI 0\n"),
        "{show}"
    );
    let nodes = json(&d, &["nodes"]);
    let rows = table_rows(&ok(&d, &["nodes"]));
    for (n, row) in nodes["nodes"].as_array().unwrap().iter().zip(&rows) {
        // NI STATE CLIENT PARTITION VPE LPE PHYSICAL LINK ...
        assert_eq!(row[0], n["node"].to_string());
        assert_eq!(row[3], n["partition"].as_str().unwrap());
        assert_eq!(row[4], n["rank"].to_string());
        assert_eq!(row[5], n["logical"].to_string());
        assert_eq!(row[6], n["physical"].as_str().unwrap());
    }
    assert_eq!(nodes["nodes"][0]["partition"], "a");
    assert_eq!(nodes["nodes"][0]["rank"], 1);
    assert_eq!(nodes["nodes"][3]["partition"], "b");
}

#[test]
fn a_partition_change_fails_what_is_in_flight_and_clients_see_reset() {
    let d = fabric_daemon(2);
    let mut r0 = Rank::start(&d, 0, &["repartition"]);
    let mut r1 = Rank::start(&d, 1, &["repartition"]);
    r0.expect("waiting", &d);
    r1.expect("waiting", &d);
    // Both receives are in the fabric.
    // attach's three requests, then REG_MR and the receive.
    wait_until("both receives taken", || {
        c(&d, 0, "requests") >= 5 && c(&d, 1, "requests") >= 5
    });
    std::thread::sleep(Duration::from_millis(100));

    // `nodes` names the clients while they are attached.
    let nodes = json(&d, &["nodes"]);
    for (i, r) in [(0usize, &r0), (1, &r1)] {
        let n = &nodes["nodes"][i];
        assert_eq!(n["state"], "attached");
        assert_eq!(n["ready"], true);
        assert_eq!(n["client_pid"], r.child.id());
        assert_eq!(n["client_kind"], "process");
        assert_eq!(n["client_name"], "ni-test-admin");
    }
    let rows = table_rows(&ok(&d, &["nodes"]));
    assert_eq!(rows[0][1], "ready");
    assert_eq!(rows[0][2], format!("{}/ni-test-admin", r0.child.id()));

    ok(&d, &["partition", "delete", "default"]);
    r0.expect("reset seen", &d);
    r1.expect("reset seen", &d);
    r0.finish("repartition", &d);
    r1.finish("repartition", &d);
    // The receives were cancelled, not left to hang or matched with something else.
    assert_eq!(c(&d, 0, "err_cancelled"), 1);
    assert_eq!(c(&d, 1, "err_cancelled"), 1);
    let nodes = json(&d, &["nodes"]);
    assert!(nodes["nodes"][0]["partition"].is_null());

    // In no partition, a client cannot attach.
    let mut lone = Rank::start(&d, 0, &["stream", "1"]);
    let st = lone.child.wait().unwrap();
    assert!(!st.success());
    let err = lone.child.wait_with_output_ref();
    assert!(err.contains("in no partition"), "{err}");

    // A new partition, numbered as given: NI 1 is rank 0 now.
    wait_until("NI 0 free", || {
        json(&d, &["nodes"])["nodes"][0]["state"] == "free"
    });
    ok(&d, &["partition", "create", "again", "--nodes", "1,0"]);
    let mut a = Rank::start(&d, 1, &["stream", "1"]);
    let mut b = Rank::start(&d, 0, &["stream", "1"]);
    assert!(a.expect("rank", &d).starts_with("rank 0 of 2 on NI 1"));
    assert!(b.expect("rank", &d).starts_with("rank 1 of 2 on NI 0"));
    a.finish("stream", &d);
    b.finish("stream", &d);
}

#[test]
fn counters_equal_the_traffic_generated() {
    let d = fabric_daemon(2);
    let a = Rank::start(&d, 0, &["stream", "1"]);
    let b = Rank::start(&d, 1, &["stream", "1"]);
    a.finish("stream", &d);
    b.finish("stream", &d);
    let bytes: u64 = STREAM_SIZES.iter().sum();
    let n = STREAM_SIZES.len() as u64;
    for ni in 0..2 {
        for (name, want) in [
            ("sends", n),
            ("recvs", n),
            ("send_bytes", bytes),
            ("recv_bytes", bytes),
            ("p0_packets_sent", n),
            ("p0_bytes_sent", bytes),
            ("p0_packets_rcvd", n),
            ("p0_bytes_rcvd", bytes),
            // Two NIs on a 2x1x1 torus: one hop each way.
            ("route_hops", n),
            ("err_link_down", 0),
            ("p0_buffer_drop", 0),
        ] {
            assert_eq!(c(&d, ni, name), want, "NI {ni} {name}");
        }
        assert_eq!(gauge(&d, ni, "dr_message_count"), 0);
    }

    // CM-5 dr_message_count: +1 per send, -1 per arrival; the partition's sum is what is
    // still in the network, 0 at rest.
    let a = Rank::start(&d, 0, &["oneway", "50"]);
    let b = Rank::start(&d, 1, &["oneway", "50"]);
    a.finish("oneway", &d);
    b.finish("oneway", &d);
    assert_eq!(gauge(&d, 0, "dr_message_count"), 49);
    assert_eq!(gauge(&d, 1, "dr_message_count"), -49);
    assert_eq!(c(&d, 0, "p0_packets_sent"), n + 50);
    assert_eq!(c(&d, 1, "p0_packets_rcvd"), n + 50);
    assert_eq!(c(&d, 1, "p0_bytes_rcvd"), bytes + 50 * 1000);

    // The port view shows the same numbers; Prometheus has the gauge.
    let ports = json(&d, &["port", "list"]);
    assert_eq!(
        ports["ports"][1]["counters"]["p0_bytes_rcvd"],
        bytes + 50 * 1000
    );
    let prom = ok(&d, &["counters", "--prometheus"]);
    assert!(
        prom.contains("# TYPE ni_dr_message_count gauge\n"),
        "{prom}"
    );
    assert!(
        prom.contains("ni_dr_message_count{node=\"0\"} 49\n"),
        "{prom}"
    );
    assert!(
        prom.contains("ni_dr_message_count{node=\"1\"} -49\n"),
        "{prom}"
    );
    // The table has the gauge too, signed.
    let table = ok(&d, &["counters"]);
    let row = table_rows(&table)
        .into_iter()
        .find(|r| r[0] == "dr_message_count")
        .unwrap();
    assert_eq!(row[1..], ["49", "-49"]);
}

#[test]
fn a_port_down_fails_senders_clearly_and_traffic_resumes_when_it_is_up() {
    let d = fabric_daemon(2);
    let mut r0 = Rank::start(&d, 0, &["linkdown"]);
    let mut r1 = Rank::start(&d, 1, &["linkdown"]);
    r0.expect("ready", &d);
    r1.expect("ready", &d);
    // attach (3), two REG_MR, a receive, the receive left posted.
    wait_until("rank 1's receive taken", || c(&d, 1, "requests") >= 7);
    std::thread::sleep(Duration::from_millis(50));

    let p = json(&d, &["port", "set", "1", "--state", "down"]);
    assert_eq!(p["state"], "down");
    assert_eq!(p["clsm"], "WE_LOST_SYNC");
    assert_eq!(p["link_ready"], false);
    assert_eq!(p["counters"]["p0_link_downed"], 1);
    let n = json(&d, &["nodes"]);
    assert_eq!(n["nodes"][1]["link"], "down");
    let ping = ctl(&d, &["diag", "ping", "0", "1"]);
    assert_eq!(code(&ping), 4);
    assert!(String::from_utf8_lossy(&ping.stdout).contains("link_down"));

    r0.go();
    r1.go();
    r0.expect("refused", &d);
    r1.expect("refused", &d);
    // Rank 0: send, put, get, ping, active message. Rank 1: its posted receive (failed when
    // the link went down), a send, a ping, a receive from anyone.
    assert_eq!(c(&d, 0, "err_link_down"), 5);
    assert_eq!(c(&d, 1, "err_link_down"), 4);
    assert!(c(&d, 1, "p0_link_refused") >= 8);
    let table = table_rows(&ok(&d, &["port", "list", "1"]));
    // NI PORT MODE MODE-REG LINK CLSM LINK-READY DOWNED ... REFUSED
    assert_eq!(table[0][4], "down");
    assert_eq!(table[0][6], "0");
    assert_eq!(table[0][12], c(&d, 1, "p0_link_refused").to_string());

    // Up again, in another mode: the CLSM speaks InfiniBand now.
    let p = json(
        &d,
        &["port", "set", "1", "--state", "up", "--mode", "infiniband"],
    );
    assert_eq!(
        (p["clsm"].as_str(), p["mode_register"].as_u64()),
        (Some("LinkUp"), Some(2))
    );
    ok(&d, &["diag", "ping", "0", "1"]);
    r0.go();
    r1.go();
    r0.finish("linkdown", &d);
    r1.finish("linkdown", &d);
    assert_eq!(c(&d, 1, "p0_link_downed"), 1);
}

#[test]
fn mapping_out_a_link_and_a_node_keeps_every_byte_flowing() {
    // 4 NIs on a 4x2x1 torus: X ring of four, a spare Y plane (000100-000103).
    let d = Daemon::start_with(4, Some("torus = \"4x2x1\"\ndirect = false\n"));
    ok(&d, &["partition", "delete", "default"]);
    ok(&d, &["partition", "create", "p", "--nodes", "0,1"]);
    let hops = |d: &Daemon| -> usize {
        json(d, &["route", "show", "0", "1"])["hops"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(hops(&d), 1);
    let n = STREAM_SIZES.len() as u64;
    let mut a = Rank::start(&d, 0, &["stream", "3"]);
    let b = Rank::start(&d, 1, &["stream", "3"]);

    a.expect("phase 0 ok", &d);
    assert_eq!(c(&d, 0, "route_hops"), n);
    // The link 000000-000001 goes: 0 <-> 1 detours the other way round the X ring.
    let m = json(&d, &["map-out", "link", "0", "1"]);
    assert_eq!(m["mapped_out"], "000000-000001 (X)");
    assert_eq!(m["unreachable"].as_array().unwrap().len(), 0);
    let r = json(&d, &["route", "show", "0", "1"]);
    assert_eq!(r["hops"].as_array().unwrap().len(), 3);
    assert!(ok(&d, &["route", "show", "0", "1"]).contains("(detour)"));
    a.go();

    a.expect("phase 1 ok", &d);
    assert_eq!(c(&d, 0, "route_hops"), n + 3 * n);
    assert_eq!(c(&d, 1, "route_hops"), n + 3 * n);
    // The node NI 1 sits on goes: its logical PE moves to the first spare, 000100.
    let m = json(&d, &["map-out", "node", "1"]);
    assert_eq!(m["mapped_out"], "000001");
    assert_eq!(m["remap"]["lpe"], 1);
    assert_eq!(m["remap"]["to"], "000100");
    let r = json(&d, &["route", "show", "0", "1"]);
    assert_eq!(r["destination"], "000100");
    assert_eq!(r["hops"].as_array().unwrap().len(), 1);
    let topo = json(&d, &["topology"]);
    assert_eq!(topo["lut"][1]["physical"], "000100");
    assert_eq!(topo["mapped_out_nodes"][0], "000001");
    assert_eq!(json(&d, &["nodes"])["nodes"][1]["physical"], "000100");
    a.go();

    a.finish("stream", &d);
    b.finish("stream", &d);
    assert_eq!(c(&d, 0, "route_hops"), n + 3 * n + n);

    // Map-outs while traffic runs, not between phases: every byte still arrives intact.
    ok(&d, &["map-out", "clear"]);
    assert_eq!(hops(&d), 1);
    let a = Rank::start(&d, 0, &["stream", "1"]);
    let b = Rank::start(&d, 1, &["stream", "1"]);
    for _ in 0..5 {
        ok(&d, &["map-out", "link", "0", "1"]);
        ok(&d, &["map-out", "node", "1"]);
        std::thread::sleep(Duration::from_millis(20));
        ok(&d, &["map-out", "clear"]);
    }
    a.finish("stream", &d);
    b.finish("stream", &d);

    // A map-out that would leave a logical PE nowhere to go says so.
    let full = fabric_daemon(4);
    let out = ctl(&full, &["map-out", "node", "2"]);
    assert_eq!(code(&out), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no spare physical node"));
}

/// A raw vfio-user client on NI `i` (no fast path), with memory space enabled.
fn raw_client(d: &Daemon, i: u32) -> vfio_user::Client {
    let mut c = vfio_user::Client::new(&d.sock(i)).expect("vfio-user client connects");
    let mut b = [0u8; 2];
    c.region_read(ni_abi::pci::CONFIG_REGION, 4, &mut b)
        .unwrap();
    let cmd = u16::from_le_bytes(b) | 0x6;
    c.region_write(ni_abi::pci::CONFIG_REGION, 4, &cmd.to_le_bytes())
        .unwrap();
    c
}

#[test]
fn clients_cannot_reach_the_administrator() {
    let d = fabric_daemon(3);
    // Partitions as (name, id, NIs): what a client must not be able to change.
    let partitions = |d: &Daemon| -> Vec<(String, u64, Vec<u64>)> {
        json(d, &["partition", "list"])["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["id"].as_u64().unwrap(),
                    p["members"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|m| m["node"].as_u64().unwrap())
                        .collect(),
                )
            })
            .collect()
    };
    let before = partitions(&d);

    // Every request a client can submit: RESET refused, unknown opcodes refused as such.
    let r = Rank::start(&d, 0, &["no-admin"]);
    r.finish("no-admin", &d);
    assert_eq!(c(&d, 0, "err_permission"), 5);
    assert_eq!(c(&d, 0, "err_bad_opcode"), 256 - 22);

    // Registers: the supervisor window's partition registers and the Lanai's port MODE and
    // STATE are the client's to write, but move nothing in the fabric.
    let mut raw = raw_client(&d, 1);
    let sup = ni_abi::cm5::SUPERVISOR;
    for off in [
        ni_abi::cm5::NI_PARTITION_SIZE,
        ni_abi::cm5::NI_PARTITION_BASE,
        ni_abi::cm5::NI_PHYSICAL_SELF,
        ni_abi::cm5::NI_CHUNK_SIZE,
    ] {
        raw.region_write(
            ni_abi::pci::BAR2_REGION,
            sup + off as u64,
            &0u32.to_le_bytes(),
        )
        .unwrap();
    }
    for (reg, v) in [(0x10u16, 0x8u16), (0x11, 0x20)] {
        // PORT_ADDR (PORT_READ = 0) then PORT_DATA, both big-endian 16-bit.
        let specials = ni_abi::lanai::SPECIALS;
        raw.region_write(
            ni_abi::pci::BAR0_REGION,
            specials + ni_abi::lanai::PORT_ADDR as u64,
            &reg.to_be_bytes(),
        )
        .unwrap();
        raw.region_write(
            ni_abi::pci::BAR0_REGION,
            specials + ni_abi::lanai::PORT_DATA as u64,
            &v.to_be_bytes(),
        )
        .unwrap();
    }
    // A control request written into an NI's socket is garbage to the NI, nothing more.
    let mut s = UnixStream::connect(d.sock(2)).unwrap();
    let _ = s.write_all(b"{\"version\":1,\"request\":\"partition_delete\",\"name\":\"default\"}\n");
    drop(s);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(partitions(&d), before);
    let nodes = json(&d, &["nodes"]);
    for i in 0..3 {
        assert_eq!(nodes["nodes"][i]["partition"], "default");
        assert_eq!(nodes["nodes"][i]["rank"], i);
    }
    let port = json(&d, &["port", "list", "1"]);
    assert_eq!(port["ports"][0]["mode"], "myrinet");
    assert_eq!(port["ports"][0]["state"], "up");
    drop(raw);
}

#[test]
fn other_users_are_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a process as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = fabric_daemon(1);
    // Let uid 65534 reach the directory and run the binaries.
    let mut p: &Path = &d.dir;
    while let Some(parent) = p.parent() {
        if parent == std::env::temp_dir() {
            break;
        }
        p = parent;
    }
    for dir in [p, d.dir.as_path()] {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    }
    // The binaries may sit in a clone other users cannot enter (a `mktemp -d` checkout):
    // run copies from the run directory, which uid 65534 can reach now.
    let runnable = |from: PathBuf| {
        let to = d.dir.join(from.file_name().unwrap());
        std::fs::copy(&from, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        to
    };
    let ctl = runnable(ni_ctl());
    let admin = runnable(PathBuf::from(env!("CARGO_BIN_EXE_ni-test-admin")));
    let as_nobody = |args: &[&str]| {
        Command::new(&ctl)
            .arg("--run-dir")
            .arg(&d.dir)
            .args(args)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    };
    // The socket is the owner's (mode 0600): another user cannot even connect.
    let out = as_nobody(&["status"]);
    assert_eq!(code(&out), 3, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ermission denied"));
    // Even with the mode opened up, the daemon checks the peer's credentials.
    let sock = d.dir.join("control.sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    for args in [
        &["status"][..],
        &["partition", "delete", "default"],
        &["port", "set", "0", "--state", "down"],
    ] {
        let out = as_nobody(args);
        assert_eq!(code(&out), 1, "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("permission denied"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        json(&d, &["partition", "list"])["partitions"][0]["name"],
        "default"
    );
    assert_eq!(json(&d, &["port", "list"])["ports"][0]["state"], "up");
    // The NI sockets are the owner's too: another user's process cannot attach.
    let out = Command::new(&admin)
        .arg("no-admin")
        .env("NI_SOCKET", d.sock(0))
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ermission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
