//! The libfabric provider `ni` (libni/fi) as applications see it: through libfabric.
//!
//! - `libni/fi/tests/c/fi_conformance.c`, one case per pair of processes on a fresh daemon,
//!   checks what fi_getinfo(3), fi_tagged(3), fi_msg(3), fi_cq(3), fi_av(3) and
//!   fi_endpoint(3) promise (the comment of each case there says what it proves); here each
//!   case must pass on both sides, and a healthy case must print no provider warning;
//! - libfabric's own tools: `fi_info -p ni` lists the provider, or says why there is no NI;
//!   `fi_pingpong` runs over it with its data checks, untagged and tagged;
//! - a hostile peer: a raw libni client sends a provider endpoint headers that lie, which it
//!   drops with a warning while an honest peer's messages keep arriving intact.
//!
//! Needs gcc, libfabric-dev and libfabric-bin (tests/run.sh installs them).

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ni::Ni;
use ni_tests::{finish, target_dir, Daemon};

const SOURCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../libni/fi/tests/c/fi_conformance.c"
);
const TMP: &str = env!("CARGO_TARGET_TMPDIR");
/// How long one process of a case may run.
const LIMIT: Duration = Duration::from_secs(60);
/// The provider's header word, its messages' libni tag (`ni_fi::engine::Header`, copied:
/// this crate does not depend on the provider): bit 63 set, kind in bits 62..61, flags
/// tagged (60), CQ data (59), wide data (58), `F_CTS` (57), sequence in bits 56..32, 32-bit
/// CQ data below.
const EAGER_TAG: u64 = 1 << 63;
const W_TAGGED: u64 = 1 << 60;
const W_DATA: u64 = 1 << 59;
const W_DATA_WIDE: u64 = 1 << 58;
const W_CTS: u64 = 1 << 57;

/// `fi_conformance`, compiled once per run of this test binary.
fn conformance() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = Path::new(TMP).join("fi_provider");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("fi_conformance");
        let out = Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-g", "-o"])
            .arg(&exe)
            .arg(SOURCE)
            .arg("-lfabric")
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run gcc ({e}): install gcc and libfabric-dev (tests/run.sh does)")
            });
        assert!(
            out.status.success(),
            "compiling {SOURCE} failed (are gcc and libfabric-dev installed? tests/run.sh \
             installs them):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    })
}

/// This build's `libni_fi.so`, brought up to date first (a stale copy in target/ would be
/// tested otherwise; cargo returns at once when it is current).
fn provider_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let so = target_dir().join("libni_fi.so");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-q", "-p", "ni-fi"]);
        if target_dir().ends_with("release") {
            c.arg("--release");
        }
        let st = c.status().expect("running cargo build -p ni-fi");
        assert!(st.success(), "cargo build -p ni-fi failed");
        assert!(
            so.exists(),
            "{} missing after cargo build -p ni-fi",
            so.display()
        );
        so
    })
}

/// A directory for `FI_PROVIDER_PATH` under `root`: `libni-fi.so`, the only name libfabric
/// loads, linked to this build's `libni_fi.so`.
fn provider_dir(root: &Path) -> PathBuf {
    let dir = root.join("libfabric");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(provider_lib(), dir.join("libni-fi.so")).unwrap();
    dir
}

/// The daemon's temporary root (its run directory's parent), removed with it.
fn root_of(d: &Daemon) -> PathBuf {
    d.dir.parent().unwrap().to_path_buf()
}

/// `cmd` with the environment of a provider process on NI `ni` of `d`.
fn on_ni(mut cmd: Command, d: &Daemon, prov: &Path, ni: u32) -> Command {
    cmd.env("NI_SOCKET", d.sock(ni))
        .env("FI_PROVIDER_PATH", prov)
        .env_remove("FI_PROVIDER");
    cmd
}

/// One process of a conformance case, its output going to files (no pipe can fill while
/// its peer waits for it).
struct Role {
    rank: u32,
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// What a role did.
struct Ran {
    rank: u32,
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Role {
    /// `fi_conformance RANK PEER RDV CASE` on NI `rank`, with `FI_LOG_LEVEL=warn`.
    fn start(d: &Daemon, prov: &Path, rdv: &Path, case: &str, rank: u32, peer: u32) -> Role {
        Role::start_logging(d, prov, rdv, case, rank, peer, "warn")
    }

    fn start_logging(
        d: &Daemon,
        prov: &Path,
        rdv: &Path,
        case: &str,
        rank: u32,
        peer: u32,
        level: &str,
    ) -> Role {
        let stdout = rdv.with_file_name(format!("{case}.{rank}.stdout"));
        let stderr = rdv.with_file_name(format!("{case}.{rank}.stderr"));
        let mut cmd = on_ni(Command::new(conformance()), d, prov, rank);
        cmd.args([rank.to_string(), peer.to_string()])
            .arg(rdv)
            .arg(case)
            .env("FI_LOG_LEVEL", level)
            .stdout(File::create(&stdout).unwrap())
            .stderr(File::create(&stderr).unwrap());
        let child = cmd.spawn().expect("starting fi_conformance");
        Role {
            rank,
            child,
            stdout,
            stderr,
        }
    }

    fn finish(self) -> Ran {
        let status = finish(self.child, LIMIT).status;
        Ran {
            rank: self.rank,
            ok: status.success(),
            stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        }
    }
}

/// Everything the roles and the daemon said, for a failure message.
fn report(ran: &[Ran], d: &Daemon) -> String {
    let mut s = String::new();
    for r in ran {
        s += &format!(
            "--- rank {} ({}) stdout:\n{}--- stderr:\n{}",
            r.rank,
            if r.ok { "exit 0" } else { "FAILED" },
            r.stdout,
            r.stderr
        );
    }
    s + "--- daemon log:\n" + &d.log()
}

/// The provider's own warnings (libfabric names the provider `:ni:` and the level `<warn>`).
fn provider_warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(":ni:") && !l.contains("<info>"))
        .collect()
}

/// Assert every role passed `case`.
fn assert_passed(case: &str, ran: &[Ran], d: &Daemon) {
    let pass = format!("PASS {case}");
    for r in ran {
        assert!(
            r.ok && r.stdout.lines().any(|l| l == pass),
            "{case} failed on rank {}:\n{}",
            r.rank,
            report(ran, d)
        );
    }
}

/// Which provider warnings a case prints.
enum Warnings {
    /// None: a healthy run says nothing.
    Quiet,
    /// Each of these, in one role's stderr or the other's: the case provokes them.
    Expected(&'static [&'static str]),
}

/// Run `case` of fi_conformance on NIs 0 and 1 of a fresh daemon, both logging at `level`;
/// both must pass.
fn run_pair(case: &str, level: &str) -> (Daemon, Vec<Ran>) {
    let d = Daemon::start(2);
    let root = root_of(&d);
    let prov = provider_dir(&root);
    let rdv = root.join(format!("rdv-{case}"));
    std::fs::create_dir_all(&rdv).unwrap();
    let roles = [
        Role::start_logging(&d, &prov, &rdv, case, 0, 1, level),
        Role::start_logging(&d, &prov, &rdv, case, 1, 0, level),
    ];
    let ran: Vec<Ran> = roles.into_iter().map(Role::finish).collect();
    assert_passed(case, &ran, &d);
    (d, ran)
}

/// Run `case` of fi_conformance on NIs 0 and 1 of a fresh daemon; both must pass, printing
/// exactly the `warnings` asked for.
fn run_case(case: &str, warnings: Warnings) {
    let (d, ran) = run_pair(case, "warn");
    match warnings {
        Warnings::Quiet => {
            for r in &ran {
                let w = provider_warnings(&r.stderr);
                assert!(
                    w.is_empty(),
                    "{case}: rank {} printed provider warnings in a healthy run:\n{}",
                    r.rank,
                    w.join("\n")
                );
            }
        }
        Warnings::Expected(list) => {
            for want in list {
                assert!(
                    ran.iter().any(|r| r.stderr.contains(want)),
                    "{case}: no warning containing {want:?}:\n{}",
                    report(&ran, &d)
                );
            }
        }
    }
}

/// fi_getinfo(3): one fi_info with the contract's attributes (name, domain = the NI's
/// socket stem, FI_EP_RDM, caps, mode 0, inject_size 4080, max_msg_size 1 GiB, cq_data_size
/// 8, manual progress, mr_mode 0), threading and AV type as hinted.
#[test]
fn getinfo_returns_the_contract_attributes() {
    run_case("getinfo", Warnings::Quiet);
}

/// fi_tagged(3) fi_tsend/fi_trecv and fi_tsendv/fi_trecvv, fi_cq(3) fi_cq_tagged_entry:
/// 0, 1, 4080, 4081, 64 KiB and 1 MiB + 3 bytes arrive byte for byte, expected and
/// unexpected, with exact context, flags, len, tag and buf on both sides.
#[test]
fn tagged_messages_of_every_size_arrive_intact() {
    run_case("tagged", Warnings::Quiet);
}

/// fi_domain(3) FI_THREAD_SAFE: four threads a side share the endpoint and its CQs, each
/// sending or receiving 600 messages of its own tag (eager and rendezvous), reading
/// completions that may be another thread's. All arrive intact and in order per tag, every
/// send completes: the provider's locks, biased to the first thread that takes them, hand
/// over to a mutex when the others come.
#[test]
fn threads_share_an_endpoint_and_its_cqs() {
    run_case("threads", Warnings::Quiet);
}

/// fi_endpoint(3) msg_order FI_ORDER_SAS: 1000 same-tag messages, eager and rendezvous
/// mixed, match the receives in sending order. Where the partition has a window, the
/// sender's eager messages went straight into its ring (`sent_now`, `Ni::send_now`) —
/// whatever went from a transmit slot when the ring was full or a send waited for room,
/// the order holds; without one, none did.
#[test]
fn same_tag_messages_match_in_sending_order() {
    let (d, ran) = run_pair("order", "info");
    for r in &ran {
        let w = provider_warnings(&r.stderr);
        assert!(w.is_empty(), "rank {}: {}", r.rank, w.join("\n"));
    }
    let (eager, now) = (
        counter(&ran, &d, 1, "eager_sent"),
        counter(&ran, &d, 1, "sent_now"),
    );
    assert!(
        eager > 0 && now <= eager,
        "eager_sent {eager}, sent_now {now}"
    );
    if std::env::var("NI_TEST_DIRECT").as_deref() == Ok("off") {
        assert_eq!(now, 0, "no window, nothing put into it");
    } else {
        assert!(now > 0, "no eager message went straight into the ring");
    }
}

/// Counter `name` of the endpoint of `side`, from the line it logs when it closes
/// (`FI_LOG_LEVEL=info`).
fn counter(ran: &[Ran], d: &Daemon, side: usize, name: &str) -> u64 {
    let closed = ran[side]
        .stderr
        .lines()
        .find(|l| l.contains("endpoint closed"))
        .unwrap_or_else(|| panic!("no counters at endpoint close:\n{}", report(ran, d)));
    let at = closed.find(&format!("{name}: ")).expect(name) + name.len() + 2;
    closed[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// fi_msg(3)/fi_tagged(3): accepting a send does not wait for its receiver. 100 rendezvous
/// sends are accepted before the receiver posts anything — more than the provider stages
/// ahead (`SEND_EAGER_MAX`), so the rest go on request (RTS with F_CTS) — and then all
/// arrive intact in reverse order, one dropped by FI_PEEK|FI_DISCARD, every send completing.
/// The sender's counters (FI_LOG_LEVEL=info at endpoint close) must show both kinds, and
/// payloads staged both in the send ring and (the ring full) in pooled regions.
#[test]
fn sends_are_accepted_before_their_receiver_posts() {
    let (d, ran) = run_pair("backlog", "info");
    let count_of = |side: usize, name: &str| counter(&ran, &d, side, name);
    let count = |name: &str| count_of(1, name);
    let closed = ran[1]
        .stderr
        .lines()
        .find(|l| l.contains("endpoint closed"))
        .unwrap_or_default();
    assert_eq!(count("rndv_sent"), 100, "{closed}");
    let on_request = count("rndv_on_request");
    assert!(
        (1..100).contains(&on_request),
        "expected some sends staged ahead and the rest on request: {closed}"
    );
    // The first sends hold the ring's first pieces until the very end (received last), so
    // the later, larger ones wrap round to them and go to pooled regions: both kinds.
    let ring = count("rndv_ring");
    assert!(
        (1..100).contains(&ring),
        "expected sends staged in the ring and, once it was full, in pooled regions: {closed}"
    );
    assert_eq!(count("bad_headers") + count("stray_cts"), 0, "{closed}");
    // The receiver took the payloads staged ahead straight from the sender's memory into
    // its buffer (libni's `recv_in_place`) where the partition has a window; the ones sent
    // on request, whose payload comes after the receive is posted, through staging.
    let in_place = count_of(0, "rndv_in_place");
    // Its headers (RTS) libni copied for it straight from the window's rings, none
    // through a receive slot, where there is a window.
    let taken = count_of(0, "taken");
    if std::env::var("NI_TEST_DIRECT").as_deref() == Ok("off") {
        assert_eq!(in_place, 0, "no window, nothing to read in place");
        assert_eq!(taken, 0, "no window, nothing taken from it");
    } else {
        assert!(taken > 0, "eager headers taken from the rings: {taken}");
        assert!(
            (1..=100 - on_request).contains(&in_place),
            "rndv_in_place {in_place}, {on_request} on request"
        );
    }
    assert!(
        provider_warnings(&ran[0].stderr).is_empty(),
        "{}",
        ran[0].stderr
    );
}

/// fi_tagged(3) fi_trecv ignore and src_addr: a receive takes only messages whose tag bits
/// outside its ignore mask are equal and, directed, only from its source.
#[test]
fn ignore_masks_and_directed_receives_match_only_their_messages() {
    run_case("ignore_mask", Warnings::Quiet);
}

/// FI_ADDR_UNSPEC receives (tagged and untagged) take the peer's messages, and fi_cq(3)
/// fi_cq_readfrom reports the peer's fi_addr.
#[test]
fn any_source_receives_report_the_sender() {
    run_case("any_source", Warnings::Quiet);
}

/// fi_tsenddata, fi_tsendmsg(FI_REMOTE_CQ_DATA) eager and rendezvous, fi_senddata and
/// fi_tinjectdata deliver FI_REMOTE_CQ_DATA and the data; a plain send does not.
#[test]
fn remote_cq_data_arrives_only_when_sent() {
    run_case("cq_data", Warnings::Quiet);
}

/// fi_tinject/fi_injectdata of 8 and 4080 bytes arrive intact though the buffer is reused at
/// once, never complete on the sender's CQ; 4081 bytes fail with -FI_EMSGSIZE (warned).
#[test]
fn inject_delivers_without_a_completion_up_to_inject_size() {
    run_case(
        "inject",
        Warnings::Expected(&["ni: fi_tsend: inject of 4081 bytes"]),
    );
}

/// fi_cq(3) fi_cq_readerr: 100 bytes into 10 and 1 MiB (rendezvous) into 1000 complete with
/// FI_ETRUNC, len 10/1000, olen 90/1047576 and the tag; the first bytes are right, nothing
/// past the buffer is written, the sends succeed and the next message is whole.
#[test]
fn truncated_receives_report_what_was_lost() {
    run_case("truncate", Warnings::Quiet);
}

/// fi_tagged(3) FI_PEEK, FI_CLAIM and FI_DISCARD, eager and rendezvous: FI_ENOMSG before
/// arrival; a peek leaves the message; a claimed message goes only to FI_CLAIM with the same
/// context; discarded messages are gone and the next one of their tag is received.
#[test]
fn peek_claim_and_discard_follow_fi_tagged() {
    run_case("peek_claim", Warnings::Quiet);
}

/// fi_endpoint(3) fi_cancel: a posted receive completes with FI_ECANCELED and its context;
/// an unknown or already cancelled context gives -FI_ENOENT; later messages skip it.
#[test]
fn cancel_completes_a_posted_receive_with_ecanceled() {
    run_case("cancel", Warnings::Quiet);
}

/// fi_ep_bind FI_SELECTIVE_COMPLETION with op_flags 0: only FI_COMPLETION operations report
/// success (eager and rendezvous, both sides); a truncation is reported regardless.
#[test]
fn selective_completion_reports_only_what_asked_for_it() {
    run_case("selective", Warnings::Quiet);
}

/// fi_cntr(3): counters bound for FI_SEND and FI_RECV count every operation (inject and
/// those without FI_COMPLETION included); a truncation counts as an error and ends a wait;
/// a wait with no change times out; add/set/adderr/seterr read back. (MPICH's ch4:ofi opens
/// a counter whatever it uses.)
#[test]
fn counters_count_every_operation_and_errors_end_a_wait() {
    run_case("counters", Warnings::Quiet);
}

/// fi_rma(3) over registered memory (MLINK READ/WRITE): reads staged and in place, inject,
/// registered and staged writes land exactly where addressed, registration keeps the
/// contents; a read-only key, out-of-bounds and unknown keys fail with error completions
/// (FI_EACCES, FI_EFAULT) and count as errors; a stack buffer cannot be registered.
#[test]
fn rma_reads_and_writes_registered_memory_and_the_target_checks_keys_and_bounds() {
    run_case(
        "rma",
        Warnings::Expected(&[
            "ni: fi_mr_reg of 64 bytes",
            "ni: fi_write of 8 bytes with rank 0: put to/from rank 0: remote key not registered",
            "ni: fi_write of 100 bytes with rank 0: put to/from rank 0: remote offset and length outside",
        ]),
    );
}

/// fi_close(3) of an endpoint right after 300 injects, without meeting the peer: every message
/// still arrives (the provider moves what the application counts as sent to the NI before the
/// endpoint goes; through the fabric path they can still be queued).
#[test]
fn closing_right_after_injects_loses_no_message() {
    run_case("close_flush", Warnings::Quiet);
}

/// fi_msg(3) FI_MULTI_RECV with FI_OPT_MIN_MULTI_RECV 200: one buffer takes four messages in
/// place and order, the last flagged FI_MULTI_RECV; the fifth goes to the next receive.
#[test]
fn a_multi_recv_buffer_takes_messages_until_the_minimum_is_left() {
    run_case("msg_multi_recv", Warnings::Quiet);
}

/// fi_av(3) FI_AV_TABLE: indices in insertion order, fi_av_lookup, fi_av_straddr
/// `ni://partitionP/rankR/nodeN`, fi_av_remove; a garbage name and another partition's get
/// FI_ADDR_NOTAVAIL, are not counted, and are warned about.
#[test]
fn av_table_addresses_and_bad_names() {
    run_case(
        "av_table",
        Warnings::Expected(&[
            "ni: fi_av_insert: address 0 is not an ni endpoint name",
            "is not in this endpoint's partition",
        ]),
    );
}

/// Refusals with the contract's error numbers and a warning, never a crash: -FI_ENODATA
/// for FI_RMA without FI_MR_PROV_KEY, FI_EP_MSG and FI_PROGRESS_AUTO hints,
/// -FI_ENOAV/-FI_ENOCQ from fi_enable, -FI_EBUSY for a second endpoint, -FI_EAGAIN from an
/// empty CQ, errors from fi_connect, fi_getpeer and a send outside the AV, -FI_ENOSYS for
/// FI_WAIT_FD, -FI_EINVAL for remote access to shared memory.
#[test]
fn refused_operations_return_their_error_numbers() {
    run_case(
        "errors",
        Warnings::Expected(&[
            "ni: fi_enable: bind an AV first",
            "ni: fi_enable: bind CQs for FI_TRANSMIT and FI_RECV first",
            "already has its endpoint open (one per NI)",
            "ni: fi_cq_open: wait object",
            "rw-s /dev/zero",
        ]),
    );
}

/// `fi_info -p ni` against a running daemon lists the provider on the NI's domain.
#[test]
fn fi_info_lists_the_provider() {
    let d = Daemon::start(2);
    let prov = provider_dir(&root_of(&d));
    let mut cmd = on_ni(Command::new("fi_info"), &d, &prov, 0);
    let out = cmd.args(["-p", "ni"]).output().unwrap_or_else(|e| {
        panic!("cannot run fi_info ({e}): install libfabric-bin (tests/run.sh does)")
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fi_info -p ni failed:\n{}",
        show(&out)
    );
    for want in [
        "provider: ni",
        "fabric: ni",
        "domain: ni0",
        "type: FI_EP_RDM",
    ] {
        assert!(
            stdout.lines().any(|l| l.trim() == want),
            "no line {want:?} from fi_info -p ni:\n{stdout}"
        );
    }
}

/// With `NI_SOCKET` naming no socket, `fi_info -p ni` finds nothing, and the provider's
/// warning says which socket is missing.
#[test]
fn fi_info_without_an_ni_says_why() {
    let root = Path::new(TMP)
        .join("fi_provider")
        .join(format!("no-ni-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let missing = root.join("missing.sock");
    let out = Command::new("fi_info")
        .args(["-p", "ni"])
        .env("NI_SOCKET", &missing)
        .env("FI_PROVIDER_PATH", provider_dir(&root))
        .env("FI_LOG_LEVEL", "warn")
        .env_remove("FI_PROVIDER")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run fi_info ({e}): install libfabric-bin (tests/run.sh does)")
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!("ni: NI_SOCKET={} does not exist", missing.display());
    assert!(
        !out.status.success() && stderr.contains(&want),
        "expected fi_info to fail with a warning containing {want:?}:\n{}",
        show(&out)
    );
    std::fs::remove_dir_all(&root).unwrap();
}

fn show(out: &Output) -> String {
    format!(
        "{}\n--- stdout:\n{}--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A TCP port nobody listens on now (the kernel's pick for port 0).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether some socket listens on TCP `port` (`/proc/net/tcp{,6}`, state 0A), without
/// connecting to it (a connection would be taken for the client's).
fn listening(port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[1].ends_with(&suffix) && w[3] == "0A"
            })
    })
}

/// libfabric's `fi_pingpong` over the provider (`-e rdm`, 200 iterations of every size,
/// `-c` data checks), untagged and tagged: server on NI 0, client on NI 1; both exit 0
/// and print their table.
#[test]
fn fi_pingpong_runs_over_the_provider() {
    let d = Daemon::start(2);
    let prov = provider_dir(&root_of(&d));
    for mode in ["msg", "tagged"] {
        let port = free_port().to_string();
        let args = ["-p", "ni", "-e", "rdm", "-I", "200", "-c", "-m", mode];
        let spawn = |ni: u32, extra: &[&str]| {
            on_ni(Command::new("fi_pingpong"), &d, &prov, ni)
                .args(args)
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot run fi_pingpong ({e}): install libfabric-bin (tests/run.sh does)"
                    )
                })
        };
        let mut server = spawn(0, &["-B", &port]);
        let t = Instant::now();
        while !listening(port.parse().unwrap()) {
            if server.try_wait().unwrap().is_some() || t.elapsed() > Duration::from_secs(10) {
                let _ = server.kill();
                panic!(
                    "fi_pingpong server (-m {mode}) is not listening on port {port}:\n{}",
                    show(&server.wait_with_output().unwrap())
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let client = spawn(1, &["-P", &port, "localhost"]);
        let outs = [finish(server, LIMIT), finish(client, LIMIT)];
        for (who, out) in ["server", "client"].iter().zip(&outs) {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("usec/xfer"),
                "fi_pingpong {who} (-m {mode}) failed:\n{}\n{}",
                show(out),
                d.log()
            );
            for size in ["64", "4k", "64k", "1m"] {
                assert!(
                    stdout
                        .lines()
                        .any(|l| l.split_whitespace().take(3).eq([size, "200", "=200"])),
                    "fi_pingpong {who} (-m {mode}): no row for {size} bytes, 200 sent and \
                     acknowledged:\n{stdout}"
                );
            }
        }
    }
}

/// A header word of `kind` with `flags`, sequence number `seq`.
fn word(kind: u64, flags: u64, seq: u64) -> u64 {
    EAGER_TAG | kind << 61 | flags | seq << 32
}

/// `fields` as the little-endian u64s that follow a header word, then `filler` bytes.
fn bytes(fields: &[u64], filler: usize) -> Vec<u8> {
    let mut b: Vec<u8> = fields.iter().flat_map(|f| f.to_le_bytes()).collect();
    b.resize(b.len() + filler, 0x33);
    b
}

/// The attacker's messages to rank 0 (libni tag, bytes), and how many of them the provider
/// must drop as lies (one `ni: dropped a message from rank 1` warning each).
fn lies() -> (Vec<(u64, Vec<u8>)>, usize) {
    let tagged = word(1, W_TAGGED, 0);
    let dropped = vec![
        (word(0, W_TAGGED, 0), bytes(&[0xBAD], 8)), // unknown kind
        (tagged, bytes(&[], 4)),                    // shorter than the tag it says it has
        (word(1, 0, 0), bytes(&[], 4081)),          // more than an eager payload
        (word(2, 0, 0), bytes(&[1 << 40, 1], 0)),   // rendezvous of 2^40 bytes
        (word(2, 0, 0), bytes(&[1 << 20, 1 << 40], 0)), // rendezvous id beyond 32 bits
        (word(2, 0, 0), bytes(&[1 << 20, 1], 8)),   // rendezvous with bytes after it
        (tagged | 7, bytes(&[0xBAD], 8)),           // data bits with no data
        (tagged | W_DATA_WIDE, bytes(&[0xBAD, 7], 8)), // wide data without data
        (word(1, W_CTS, 0), bytes(&[], 8)),         // F_CTS on an eager message
        (word(3, W_DATA | 5, 0), bytes(&[1], 0)),   // CTS with data
    ];
    let n = dropped.len();
    let mut all = dropped;
    // Well-formed but with a sequence number far ahead (warned, kept unexpected: the victim
    // receives only from its honest peer), and a message larger than a slot (the NI
    // truncates it into the slot: warned as a failed eager receive).
    all.push((
        word(1, W_TAGGED | W_DATA | 1, 0x1FF_FFF0),
        bytes(&[0xBAD], 16),
    ));
    all.push((tagged, bytes(&[0xBAD], 8184)));
    (all, n)
}

/// A hostile peer cannot disturb a provider endpoint: with NI 0 (the victim, case
/// `hostile_victim`) receiving a checked stream of 300 eager and rendezvous messages from NI
/// 2 (an honest provider process), a raw libni client on NI 1 sends NI 0's eager slots headers
/// that lie. Every honest message arrives intact and in order, one more arrives after the
/// attack, each lie is dropped with a warning, and the honest side warns about nothing.
#[test]
fn a_hostile_peer_cannot_disturb_a_provider_endpoint() {
    let d = Daemon::start(3);
    let root = root_of(&d);
    let prov = provider_dir(&root);
    let rdv = root.join("rdv-hostile");
    std::fs::create_dir_all(&rdv).unwrap();
    let mut victim = Role::start(&d, &prov, &rdv, "hostile_victim", 0, 2);
    let honest = Role::start(&d, &prov, &rdv, "hostile_victim", 2, 0);

    let attacker = Ni::attach_path(&d.sock(1)).expect("attaching the attacker to NI 1");
    // The victim writes its name once its endpoint is enabled (its slots are posted).
    let t = Instant::now();
    while !rdv.join("name0").exists() {
        let exited = victim.child.try_wait().unwrap().is_some();
        assert!(
            !exited && t.elapsed() < LIMIT,
            "the victim never enabled its endpoint:\n{}",
            report(&[victim.finish(), honest.finish()], &d)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (all, dropped) = lies();
    let buf = attacker.alloc(8192).unwrap();
    for (i, (w, m)) in all.iter().enumerate() {
        buf.write_at(0, m);
        let op = attacker.isend(0, &buf, 0..m.len(), *w).unwrap();
        // Taken into a slot (or refused by the NI): either way delivered to rank 0.
        if let Err(e @ ni::Error::Timeout(_)) =
            attacker.wait_timeout(op, Some(Duration::from_secs(10)))
        {
            panic!("lie {i} was never taken by rank 0: {e}");
        }
    }
    let tmp = rdv.join(".attack_done.tmp");
    std::fs::write(&tmp, b"").unwrap();
    std::fs::rename(&tmp, rdv.join("attack_done")).unwrap();

    let ran = [victim.finish(), honest.finish()];
    assert_passed("hostile_victim", &ran, &d);
    let victim_log = &ran[0].stderr;
    let drops = victim_log
        .lines()
        .filter(|l| l.contains("ni: dropped a message from rank 1: "))
        .count();
    assert_eq!(
        drops,
        dropped,
        "rank 0 should drop each lie with a warning:\n{}",
        report(&ran, &d)
    );
    assert!(
        victim_log.contains("ni: rank 1 sent sequence 33554416 where 0 was due"),
        "no warning about the sequence number:\n{}",
        report(&ran, &d)
    );
    let w = provider_warnings(&ran[1].stderr);
    assert!(w.is_empty(), "the honest rank warned:\n{}", w.join("\n"));
}
