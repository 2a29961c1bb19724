//! One rank of an administration test (tests/tests/admin.rs): `ni-test-admin SCENARIO
//! [ARGS]`, with `NI_SOCKET` set. The test drives the daemon with `ni-ctl` between the
//! scenario's steps: a rank prints a line when it reached a step and, where the scenario
//! says so, waits for a line on stdin before it goes on. Prints `ok SCENARIO` and exits 0
//! when every check passed; panics (exit 101) otherwise.

use ni_tests::check::{expect_status, pattern, status_of};
use std::io::BufRead;
use std::time::{Duration, Instant};

use ni::{opcode, Error, Ni, Request, Status};

/// Say where we are (the test reads stdout line by line).
fn say(s: &str) {
    println!("{s}");
}

/// Wait for the test's go-ahead: one line on stdin.
fn step() -> String {
    let mut l = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut l)
        .expect("reading stdin");
    l.trim().to_string()
}

/// The message sizes of a stream phase: small, odd, page-sized, large.
const SIZES: [usize; 8] = [1, 63, 64, 4096, 4097, 65536, 1 << 20, 3 << 20];

/// `stream PHASES`: rank 0 sends every size to rank 1, which checks every byte and echoes
/// it; rank 0 checks the echo. After each phase but the last, rank 0 prints `phase N ok`
/// and waits for a line on stdin (the test changes the fabric meanwhile).
fn stream(ni: &Ni, phases: u32) {
    let buf = ni.alloc(4 << 20).unwrap();
    for p in 0..phases {
        for (i, &n) in SIZES.iter().enumerate() {
            let seed = (p as u64) << 32 | i as u64;
            let want = pattern(n, seed);
            let tag = seed;
            if ni.rank() == 0 {
                buf.write_at(0, &want);
                ni.send(1, &buf, 0..n, tag).unwrap();
                buf.write_at(0, &vec![0u8; n]);
                let d = ni
                    .recv(Some(1), &buf, 0..4 << 20, tag | 1 << 31, u64::MAX)
                    .unwrap();
                assert_eq!(d.len as usize, n);
                let mut got = vec![0u8; n];
                buf.read_at(0, &mut got);
                assert!(got == want, "phase {p}: echo of {n} bytes differs");
            } else {
                let d = ni.recv(Some(0), &buf, 0..4 << 20, tag, u64::MAX).unwrap();
                assert_eq!(d.len as usize, n);
                let mut got = vec![0u8; n];
                buf.read_at(0, &mut got);
                assert!(got == want, "phase {p}: {n} bytes arrived corrupted");
                ni.send(0, &buf, 0..n, tag | 1 << 31).unwrap();
            }
        }
        if p + 1 < phases && ni.rank() == 0 {
            say(&format!("phase {p} ok"));
            step();
        }
    }
}

/// `oneway K`: rank 0 sends K messages of 1000 bytes to rank 1, nothing comes back but a
/// zero-byte acknowledgement at the end.
fn oneway(ni: &Ni, k: u64) {
    let buf = ni.alloc(4096).unwrap();
    if ni.rank() == 0 {
        for i in 0..k {
            buf.write_at(0, &pattern(1000, i));
            ni.send(1, &buf, 0..1000, i).unwrap();
        }
        ni.recv(Some(1), &buf, 0..0, u64::MAX, u64::MAX).unwrap();
    } else {
        for i in 0..k {
            let d = ni.recv(Some(0), &buf, 0..4096, i, u64::MAX).unwrap();
            assert_eq!(d.len, 1000);
            let mut got = vec![0u8; 1000];
            buf.read_at(0, &mut got);
            assert!(got == pattern(1000, i));
        }
        // The acknowledgement is the one message rank 1 sends; it is received.
        ni.send(0, &buf, 0..0, u64::MAX).unwrap();
    }
}

/// `linkdown`: the test takes rank 1's port down and brings it up again.
/// 1. Both exchange one message; rank 1 posts a receive from rank 0; both print `ready`
///    and wait for stdin.
/// 2. (port down) Rank 0: send, put, get, ping, active message to rank 1 all fail with
///    LinkDown. Rank 1: its posted receive failed with LinkDown; so does its own send.
///    Both print `refused` and wait.
/// 3. (port up) Traffic resumes both ways, every byte checked.
fn linkdown(ni: &Ni) {
    let buf = ni.alloc(1 << 20).unwrap();
    let win = ni.alloc(1 << 16).unwrap();
    let peer = 1 - ni.rank();
    if ni.rank() == 0 {
        buf.write_at(0, &pattern(5000, 1));
        ni.send(1, &buf, 0..5000, 1).unwrap();
    } else {
        ni.recv(Some(0), &buf, 0..1 << 20, 1, u64::MAX).unwrap();
    }
    let pending =
        (ni.rank() == 1).then(|| ni.irecv(Some(0), &buf, 0..1 << 20, 2, u64::MAX).unwrap());
    say("ready");
    step();
    if ni.rank() == 0 {
        expect_status(ni.send(1, &buf, 0..100, 2), Status::LinkDown);
        expect_status(ni.put(1, &buf, 0..100, win.key(), 0), Status::LinkDown);
        expect_status(ni.get(1, &buf, 0..100, win.key(), 0), Status::LinkDown);
        expect_status(ni.ping(1), Status::LinkDown);
        expect_status(ni.am_send(1, 3, b"hello"), Status::LinkDown);
        // Its own port is up: a message to itself still goes.
        let r = ni.irecv(Some(0), &buf, 4096..8192, 9, u64::MAX).unwrap();
        ni.send(0, &buf, 0..10, 9).unwrap();
        ni.wait(r).unwrap();
    } else {
        expect_status(ni.wait(pending.unwrap()), Status::LinkDown);
        expect_status(ni.send(0, &buf, 0..100, 3), Status::LinkDown);
        expect_status(ni.ping(0), Status::LinkDown);
        expect_status(ni.recv(None, &buf, 0..100, 3, u64::MAX), Status::LinkDown);
    }
    say("refused");
    step();
    // Back up: the peer answers again, and traffic resumes, every byte checked, both ways.
    ni.ping(peer).unwrap();
    for i in 0..4u64 {
        let n = 1000 << i;
        let want = pattern(n, 100 + i);
        if ni.rank() == 0 {
            buf.write_at(0, &want);
            ni.send(peer, &buf, 0..n, 10 + i).unwrap();
            let d = ni
                .recv(Some(peer), &buf, 0..1 << 20, 20 + i, u64::MAX)
                .unwrap();
            assert_eq!(d.len as usize, n);
        } else {
            let d = ni
                .recv(Some(peer), &buf, 0..1 << 20, 10 + i, u64::MAX)
                .unwrap();
            assert_eq!(d.len as usize, n);
            let mut got = vec![0u8; n];
            buf.read_at(0, &mut got);
            assert!(got == want, "{n} bytes after the link came back");
            ni.send(peer, &buf, 0..n, 20 + i).unwrap();
        }
    }
}

/// `repartition`: both ranks block in a receive nobody will match; the test deletes the
/// partition. Each must come back within seconds with `Error::Reset` (the control page's
/// new EPOCH) or the receive's `Cancelled`, and from then on every request says Reset.
fn repartition(ni: &Ni) {
    let buf = ni.alloc(4096).unwrap();
    let peer = 1 - ni.rank();
    let r = ni.irecv(Some(peer), &buf, 0..4096, 77, u64::MAX).unwrap();
    say("waiting");
    let t = Instant::now();
    match ni.wait(r) {
        Err(Error::Reset) => {}
        Err(e) if status_of(&e) == Some(Status::Cancelled) => {}
        other => panic!("expected Reset or Cancelled, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(30));
    assert!(matches!(ni.send(peer, &buf, 0..10, 1), Err(Error::Reset)));
    say("reset seen");
}

/// `isolated`: partition of two; rank 0 reaches rank 1 and nothing else.
fn isolated(ni: &Ni) {
    let buf = ni.alloc(1 << 16).unwrap();
    let win = ni.alloc(1 << 16).unwrap();
    assert_eq!(ni.size(), 2);
    if ni.rank() == 0 {
        buf.write_at(0, &pattern(3000, 5));
        ni.send(1, &buf, 0..3000, 1).unwrap();
        for r in 2..8 {
            expect_status(ni.send(r, &buf, 0..10, 1), Status::OutOfPartition);
            expect_status(ni.ping(r), Status::OutOfPartition);
            expect_status(ni.put(r, &buf, 0..10, win.key(), 0), Status::OutOfPartition);
        }
        expect_status(ni.ping(u32::MAX - 1), Status::OutOfPartition);
    } else {
        let d = ni.recv(Some(0), &buf, 0..1 << 16, 1, u64::MAX).unwrap();
        assert_eq!(d.len, 3000);
        let mut got = vec![0u8; 3000];
        buf.read_at(0, &mut got);
        assert!(got == pattern(3000, 5));
    }
    ni.barrier().unwrap();
}

/// `no-admin`: nothing a client can submit reaches the administrator. MLINK RESET is
/// refused; every opcode the NI does not know is refused as such; the NI keeps working.
fn no_admin(ni: &Ni) {
    let buf = ni.alloc(4096).unwrap();
    let try_req = |r: Request| ni.wait(ni.submit(r).unwrap());
    for rank in [0, 1, 7, u32::MAX] {
        expect_status(
            try_req(Request {
                opcode: opcode::RESET,
                rank,
                ..Default::default()
            }),
            Status::Permission,
        );
    }
    expect_status(ni.reset_remote(0), Status::Permission);
    let known = [
        opcode::CQ_SETUP,
        opcode::REG_MR,
        opcode::DEREG_MR,
        opcode::AM_SETUP,
        opcode::SEND,
        opcode::RECV,
        opcode::PUT,
        opcode::GET,
        opcode::ROP,
        opcode::NOOP,
        opcode::RESET,
        opcode::MQ_SEND,
        opcode::MQ_SIGNAL,
        opcode::COMBINE,
        opcode::COLLECTIVE,
        opcode::SYNC_GLOBAL,
        opcode::COM_FLUSH,
        opcode::ASYNC_GLOBAL,
        opcode::COM_CONTROL,
        opcode::WAKE,
    ];
    for code in 0..=255u8 {
        if known.contains(&code) || code == opcode::AM_ARRIVED || code == opcode::GLOBAL_REC {
            continue;
        }
        // Garbage in every field: it must be refused for what it is.
        let r = try_req(Request {
            opcode: code,
            flags: 0xFF,
            rank: 0,
            addr: buf.iova(),
            len: 64,
            tag: u64::MAX,
            mask: u64::MAX,
            key: u32::MAX,
            access: u32::MAX,
            ..Default::default()
        });
        match r {
            Err(e) if status_of(&e) == Some(Status::BadOpcode) => {}
            other => panic!("opcode {code:#x}: expected BadOpcode, got {other:?}"),
        }
    }
    // Still this NI, still its partition, still working.
    buf.write_at(0, b"after");
    let r = ni
        .irecv(Some(ni.rank()), &buf, 100..200, 9, u64::MAX)
        .unwrap();
    ni.send(ni.rank(), &buf, 0..5, 9).unwrap();
    assert_eq!(ni.wait(r).unwrap().len, 5);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().expect("usage: ni-test-admin SCENARIO [N]");
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let ni = if scenario == "no-admin" {
        let path = std::env::var("NI_SOCKET").expect("NI_SOCKET");
        Ni::attach_path(std::path::Path::new(&path))
    } else {
        Ni::attach()
    }
    .unwrap_or_else(|e| panic!("attach: {e}"));
    say(&format!(
        "rank {} of {} on NI {}",
        ni.rank(),
        ni.size(),
        ni.node()
    ));
    match scenario.as_str() {
        "stream" => stream(&ni, n as u32),
        "oneway" => oneway(&ni, n),
        "linkdown" => linkdown(&ni),
        "repartition" => repartition(&ni),
        "isolated" => isolated(&ni),
        "no-admin" => no_admin(&ni),
        other => panic!("unknown scenario {other}"),
    }
    say(&format!("ok {scenario}"));
}
