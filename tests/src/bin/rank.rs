//! One rank of a multi-process test scenario: `ni-test-rank SCENARIO`, with `NI_SOCKET` set.
//! Prints `ok SCENARIO` and exits 0 when every check passed; panics (exit 101) otherwise.

use ni_tests::check::{expect_status, integrity_sizes, pattern, status_of};
use std::time::{Duration, Instant};

use ni::{opcode, Error, MqAddr, MqOutcome, Ni, Request, Status};

/// A two-rank barrier over send/recv (tag space above user tags).
fn barrier(ni: &Ni, scratch: &ni::Region) {
    let tag = 0xBA55_0000_0000_0000;
    if ni.rank() == 0 {
        for r in 1..ni.size() {
            ni.recv(Some(r), scratch, 0..0, tag, u64::MAX).unwrap();
        }
        for r in 1..ni.size() {
            ni.send(r, scratch, 0..0, tag + 1).unwrap();
        }
    } else {
        ni.send(0, scratch, 0..0, tag).unwrap();
        ni.recv(Some(0), scratch, 0..0, tag + 1, u64::MAX).unwrap();
    }
}

fn integrity(ni: &Ni) {
    let sizes = integrity_sizes();
    let buf = ni.alloc(64 << 20).unwrap();
    for (i, &n) in sizes.iter().enumerate() {
        let want = pattern(n, i as u64 + 1);
        if ni.rank() == 0 {
            buf.write_at(0, &want);
            ni.send(1, &buf, 0..n, i as u64).unwrap();
            buf.write_at(0, &vec![0u8; n.min(4096)]);
            let d = ni
                .recv(Some(1), &buf, 0..64 << 20, i as u64 + 100, u64::MAX)
                .unwrap();
            assert_eq!(d.len as usize, n);
            let mut got = vec![0u8; n];
            buf.read_at(0, &mut got);
            assert!(got == want, "echo of {n} bytes differs");
        } else if ni.rank() == 1 {
            let d = ni
                .recv(Some(0), &buf, 0..64 << 20, i as u64, u64::MAX)
                .unwrap();
            assert_eq!((d.len as usize, d.rank, d.tag), (n, 0, i as u64));
            let mut got = vec![0u8; n];
            buf.read_at(0, &mut got);
            assert!(got == want, "{n} bytes arrived corrupted");
            ni.send(0, &buf, 0..n, i as u64 + 100).unwrap();
        }
    }
    // A message longer than the receive buffer: truncated, the prefix delivered.
    if ni.rank() == 0 {
        buf.write_at(0, &pattern(100, 9));
        ni.send(1, &buf, 0..100, 77).unwrap();
    } else if ni.rank() == 1 {
        let r = ni.recv(Some(0), &buf, 1000..1010, 77, u64::MAX);
        expect_status(r, Status::Truncated);
        let mut got = [0u8; 10];
        buf.read_at(1000, &mut got);
        assert_eq!(&got[..], &pattern(100, 9)[..10]);
    }
    // Operations that end inside the call that starts them (`Op::ready`): an eager send into
    // the window, a receive of a message that already waited. `test` gives the result once.
    if ni.rank() == 0 {
        buf.write_at(0, &pattern(8, 10));
        let o = ni.isend(1, &buf, 0..8, 555).unwrap();
        assert_eq!(
            o.ready(),
            ni.direct(),
            "an eager send in the window is done at once"
        );
        // Through the fabric a send ends when it is received: 556 first, then 555.
        ni.send(1, &buf, 0..0, 556).unwrap();
        let mut done = None;
        while done.is_none() {
            done = ni.test(&o).unwrap();
        }
        assert_eq!(done.unwrap().tag, 555);
        assert!(ni.test(&o).unwrap().is_none(), "test gives a result once");
    } else if ni.rank() == 1 {
        // 555 was sent first: once 556 is here, 555 waits unexpected.
        ni.recv(Some(0), &buf, 0..0, 556, u64::MAX).unwrap();
        let o = ni.irecv(Some(0), &buf, 0..64, 555, u64::MAX).unwrap();
        assert_eq!(
            o.ready(),
            ni.direct(),
            "a waiting message is received at once"
        );
        let d = ni.wait(o).unwrap();
        assert_eq!((d.len, d.tag, d.rank), (8, 555, 0));
        let mut got = [0u8; 8];
        buf.read_at(0, &mut got);
        assert_eq!(&got[..], &pattern(8, 10)[..]);
    }
}

/// Every rank but 0 sends `K` messages to rank 0, which receives from any source and checks
/// that each sender's messages arrive in order and intact.
fn many_to_one(ni: &Ni) {
    const K: u64 = 200;
    let buf = ni.alloc(1 << 16).unwrap();
    if ni.rank() == 0 {
        let mut next = vec![0u64; ni.size() as usize];
        for _ in 0..K * (ni.size() as u64 - 1) {
            let d = ni.recv(None, &buf, 0..1 << 16, 0, 0).unwrap();
            let src = d.rank as usize;
            let mut got = vec![0u8; d.len as usize];
            buf.read_at(0, &mut got);
            let seq = u64::from_le_bytes(got[..8].try_into().unwrap());
            assert_eq!(seq, next[src], "rank {src}'s messages out of order");
            assert_eq!(d.tag, seq);
            assert!(got[8..] == pattern(got.len() - 8, seq * 1000 + src as u64)[..]);
            next[src] += 1;
        }
        assert!(next[1..].iter().all(|&n| n == K));
    } else {
        let mut ops = Vec::new();
        let regions: Vec<ni::Region> = (0..4).map(|_| ni.alloc(1 << 16).unwrap()).collect();
        for seq in 0..K {
            let len = 8 + (seq as usize * 37 % 3000);
            let mut m = seq.to_le_bytes().to_vec();
            m.extend(pattern(len - 8, seq * 1000 + ni.rank() as u64));
            let r = &regions[seq as usize % 4];
            if ops.len() == 4 {
                ni.wait(ops.remove(0)).unwrap();
            }
            r.write_at(0, &m);
            ops.push(ni.isend(0, r, 0..len, seq).unwrap());
        }
        for o in ops {
            ni.wait(o).unwrap();
        }
    }
}

/// `Ni::wait_all` over a window of 64 receives and a send: results in the window's order,
/// whatever order they finished in; a truncated receive's failure in its place, the others
/// unharmed; a large message (not finished by the pass that ends the small ones) among
/// them; the active message that came first handled by the time it returns.
fn wait_all(ni: &Ni) {
    const W: usize = 64;
    const TRUNCATED: usize = 17;
    const LARGE: usize = 30;
    const LARGE_LEN: usize = 300_000;
    let len_of = |k: usize| 8 + k % 32;
    let scratch = ni.alloc(4096).unwrap();
    let buf = ni.alloc(W * 64 + LARGE_LEN).unwrap();
    if ni.rank() == 0 {
        barrier(ni, &scratch);
        ni.am_send(1, 5, b"first").unwrap();
        for k in 0..W - 1 {
            buf.write_at(0, &pattern(len_of(k), k as u64));
            ni.send(1, &buf, 0..len_of(k), 9).unwrap();
            if k == W / 2 {
                buf.write_at(0, &pattern(LARGE_LEN, 777));
                ni.send(1, &buf, 0..LARGE_LEN, 10).unwrap();
            }
        }
        let d = ni.recv(Some(1), &buf, 0..64, 11, u64::MAX).unwrap();
        assert_eq!(d.len, 3);
        barrier(ni, &scratch);
    } else if ni.rank() == 1 {
        let handled = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let h = handled.clone();
        ni.am_register(5, move |src, payload| {
            assert_eq!((src, payload), (0, &b"first"[..]));
            h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        barrier(ni, &scratch);
        let mut ops = Vec::new();
        for i in 0..W {
            let op = if i == LARGE {
                ni.irecv(Some(0), &buf, W * 64..W * 64 + LARGE_LEN, 10, u64::MAX)
            } else {
                let cap = if i == TRUNCATED { 4 } else { 48 };
                ni.irecv(Some(0), &buf, i * 64..i * 64 + cap, 9, u64::MAX)
            };
            ops.push(op.unwrap());
        }
        scratch.write_at(0, b"end");
        ops.push(ni.isend(0, &scratch, 0..3, 11).unwrap());
        let mut out = Vec::new();
        ni.wait_all(&mut ops, &mut out);
        assert!(ops.is_empty(), "wait_all leaves no op behind");
        assert_eq!(out.len(), W + 1);
        let mut k = 0;
        for (i, r) in out.iter().enumerate().take(W) {
            if i == LARGE {
                let d = r.as_ref().expect("the large receive");
                assert_eq!((d.len, d.tag), (LARGE_LEN as u64, 10));
                let mut got = vec![0u8; LARGE_LEN];
                buf.read_at(W * 64, &mut got);
                assert!(got == pattern(LARGE_LEN, 777), "large payload");
                continue;
            }
            if i == TRUNCATED {
                match r {
                    Err(Error::Failed {
                        status, len, tag, ..
                    }) => {
                        assert_eq!(
                            (*status, *len, *tag),
                            (Status::Truncated, len_of(k) as u64, 9)
                        )
                    }
                    other => panic!("receive {i}: {other:?}, expected truncated"),
                }
            } else {
                let d = r.as_ref().unwrap_or_else(|e| panic!("receive {i}: {e}"));
                assert_eq!(
                    (d.rank, d.len, d.tag),
                    (0, len_of(k) as u64, 9),
                    "receive {i}"
                );
                let mut got = vec![0u8; len_of(k)];
                buf.read_at(i * 64, &mut got);
                assert!(got == pattern(len_of(k), k as u64), "receive {i}'s payload");
            }
            k += 1;
        }
        assert_eq!(out[W].as_ref().map(|d| (d.rank, d.len)).unwrap(), (0, 3));
        assert_eq!(
            handled.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "the active message that came before the window ran by the end of wait_all"
        );
        // Nothing left over: an empty list returns at once.
        ni.wait_all(&mut ops, &mut out);
        assert_eq!(out.len(), W + 1);
        barrier(ni, &scratch);
    }
}

/// T3E message queue: fill to Limit, rejection, Threshold interrupt, reset by swap.
fn mq(ni: &Ni) {
    let ctl = ni.alloc(4096).unwrap();
    if ni.rank() == 1 {
        // Limit 5: slots 1..4 hold messages (slot 0 is the MQCW). Threshold 4.
        let mut q = ni.mq_create(5, 4).unwrap();
        ni.ir_write(true, u64::MAX).unwrap();
        let a = q.addr();
        ctl.write_at(0, &a.key.to_le_bytes());
        ni.send(0, &ctl, 0..4, 1).unwrap();
        assert!(
            ni.wait_mq_interrupt(Duration::from_secs(10)),
            "no threshold interrupt"
        );
        let (ir, addr) = ni.ir_status().unwrap();
        assert_ne!(ir & (1 << 32), 0, "MSG_ADDR_VALID");
        assert_eq!(
            addr,
            q.region().iova(),
            "MSG_ADDR latches the MQCW's address"
        );
        ni.recv(Some(0), &ctl, 0..0, 2, u64::MAX).unwrap(); // sender saw the rejection
        let w = q.mqcw();
        assert!(ni_abi::fastpath::mqcw::sig(w), "Sig set at Threshold");
        assert_eq!(ni_abi::fastpath::mqcw::tail(w), 5);
        let msgs = q.take();
        assert_eq!(msgs.len(), 4);
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m[..], pattern(64, i as u64)[..], "slot {} content", i + 1);
        }
        // Software reset: swap in a fresh MQCW; the old one says how far it was filled.
        let old = q.swap(ni_abi::fastpath::mqcw::make(false, 1, 5, 0));
        assert_eq!(ni_abi::fastpath::mqcw::tail(old), 5);
        q.set_head(1);
        ni.ir_write(true, 1 << 32).unwrap();
        assert_eq!(
            ni.ir_status().unwrap().0 & (1 << 32),
            0,
            "VALID cleared by writing 1"
        );
        ni.send(0, &ctl, 0..0, 3).unwrap();
        ni.recv(Some(0), &ctl, 0..0, 4, u64::MAX).unwrap();
        let msgs = q.take();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0][..], pattern(64, 99)[..]);
    } else if ni.rank() == 0 {
        ni.recv(Some(1), &ctl, 0..4, 1, u64::MAX).unwrap();
        let mut k = [0u8; 4];
        ctl.read_at(0, &mut k);
        let addr = MqAddr {
            key: u32::from_le_bytes(k),
            offset: 0,
        };
        for i in 0..4u64 {
            let m: [u8; 64] = pattern(64, i).try_into().unwrap();
            assert_eq!(
                ni.mq_send(1, addr, &m).unwrap(),
                MqOutcome::Accepted { tail: i + 2 }
            );
        }
        let m = [0xEE; 64];
        assert_eq!(
            ni.mq_send(1, addr, &m).unwrap(),
            MqOutcome::Rejected,
            "Tail = Limit"
        );
        // A queue key without message-queue access, and an offset past the region.
        expect_status(
            ni.mq_send(
                1,
                MqAddr {
                    key: 999,
                    offset: 0,
                },
                &m,
            ),
            Status::BadKey,
        );
        expect_status(
            ni.mq_send(
                1,
                MqAddr {
                    key: addr.key,
                    offset: 1 << 20,
                },
                &m,
            ),
            Status::OutOfBounds,
        );
        ni.send(1, &ctl, 0..0, 2).unwrap();
        ni.recv(Some(1), &ctl, 0..0, 3, u64::MAX).unwrap();
        let m: [u8; 64] = pattern(64, 99).try_into().unwrap();
        assert_eq!(
            ni.mq_send(1, addr, &m).unwrap(),
            MqOutcome::Accepted { tail: 2 }
        );
        ni.send(1, &ctl, 0..0, 4).unwrap();
    }
}

fn put_get(ni: &Ni) {
    // Same allocation order on both ranks: the same keys name the same regions.
    let scratch = ni.alloc(4096).unwrap();
    let win = ni.alloc(1 << 20).unwrap();
    let local = ni.alloc(1 << 20).unwrap();
    win.write_at(0, &pattern(1 << 20, ni.rank() as u64));
    barrier(ni, &scratch);
    if ni.rank() == 0 {
        ni.get(1, &local, 0..65536, win.key(), 4096).unwrap();
        let mut got = vec![0u8; 65536];
        local.read_at(0, &mut got);
        assert!(got[..] == pattern(1 << 20, 1)[4096..4096 + 65536]);
        local.write_at(0, &pattern(5000, 42));
        ni.put(1, &local, 0..5000, win.key(), (1 << 20) - 5000)
            .unwrap();
        // Bounds and keys are the target's to check.
        expect_status(
            ni.get(1, &local, 0..4096, win.key(), (1 << 20) - 4095),
            Status::OutOfBounds,
        );
        expect_status(
            ni.put(1, &local, 0..1, win.key(), u64::MAX),
            Status::OutOfBounds,
        );
        expect_status(ni.get(1, &local, 0..16, 4242, 0), Status::BadKey);
        expect_status(
            ni.put(7, &local, 0..16, win.key(), 0),
            Status::OutOfPartition,
        );
    }
    barrier(ni, &scratch);
    if ni.rank() == 1 {
        let mut got = vec![0u8; 5000];
        win.read_at((1 << 20) - 5000, &mut got);
        assert!(got == pattern(5000, 42), "put did not land");
    }
    // A region that goes is gone for its peers too, whichever path they took to it (with a
    // window, rank 0 mapped it: fastpath.md, "One-sided operations in the window").
    let gone = ni.alloc(4096).unwrap();
    let key = gone.key();
    barrier(ni, &scratch);
    if ni.rank() == 0 {
        ni.put(1, &local, 0..64, key, 0).unwrap();
    }
    barrier(ni, &scratch);
    if ni.rank() == 1 {
        let mut got = vec![0u8; 64];
        gone.read_at(0, &mut got);
        assert!(got == pattern(5000, 42)[..64], "put into the second region");
        drop(gone);
        // Requests are taken in order: once this completes, the deregistration is done.
        ni.ping(0).unwrap();
    }
    barrier(ni, &scratch);
    if ni.rank() == 0 {
        expect_status(ni.put(1, &local, 0..64, key, 0), Status::BadKey);
    }
    barrier(ni, &scratch);
}

/// The length of the `i`th active message: 0-3999 bytes, longer and shorter by turns, so that
/// a payload buffer kept from a longer message is reused for a shorter one (no byte of the
/// earlier message may reach the handler).
fn am_len(i: usize) -> usize {
    i * 1237 % 4000
}

fn active_messages(ni: &Ni) {
    const N: usize = 100;
    let scratch = ni.alloc(4096).unwrap();
    if ni.rank() == 0 {
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = got.clone();
        ni.am_register(7, move |src, payload| {
            g.lock().unwrap().push((src, payload.to_vec()))
        });
        barrier(ni, &scratch);
        let t = Instant::now();
        while got.lock().unwrap().len() < N {
            ni.progress().unwrap();
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "active messages missing"
            );
        }
        for (i, (src, p)) in got.lock().unwrap().iter().enumerate() {
            assert_eq!(*src, 1);
            assert!(p[..] == pattern(am_len(i), i as u64)[..], "AM {i}");
        }
        barrier(ni, &scratch);
    } else if ni.rank() == 1 {
        barrier(ni, &scratch);
        for i in 0..N {
            ni.am_send(0, 7, &pattern(am_len(i), i as u64)).unwrap();
        }
        assert!(matches!(
            ni.am_send(0, 7, &[0; 5000]),
            Err(Error::BadArgument(_))
        ));
        barrier(ni, &scratch);
    }
}

/// Rank 1 leaves at once; rank 0 sees its NI go down through ping.
fn ping_down(ni: &Ni) {
    if ni.rank() == 1 {
        return;
    }
    expect_status(ni.ping(ni.size()), Status::OutOfPartition);
    let t = Instant::now();
    loop {
        match ni.ping(1) {
            Ok(()) => {}
            Err(e) if status_of(&e) == Some(Status::PeerDown) => break,
            Err(e) => panic!("ping: {e}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "peer never seen down"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    expect_status(ni.reset_remote(0), Status::Permission);
}

/// Rank 1 attaches, says so, and waits to be killed; rank 0 has a 64 MiB send and a receive
/// pending towards it and must see both fail once it dies.
fn killed(ni: &Ni) {
    let scratch = ni.alloc(64 << 20).unwrap();
    if ni.rank() == 1 {
        ni.send(0, &scratch, 0..0, 1).unwrap();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    ni.recv(Some(1), &scratch, 0..0, 1, u64::MAX).unwrap();
    let s = ni.isend(1, &scratch, 0..64 << 20, 5).unwrap();
    let r = ni.irecv(Some(1), &scratch, 0..4096, 6, u64::MAX).unwrap();
    println!("pending");
    let t = Instant::now();
    expect_status(ni.wait(s), Status::PeerDown);
    expect_status(ni.wait(r), Status::PeerDown);
    println!("failed after {:?}", t.elapsed());
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One checked message each way between ranks 0 and 1 (rank 0 first), tags from `tag`.
fn exchange(ni: &Ni, buf: &ni::Region, tag: u64) {
    let peer = 1 - ni.rank();
    let n = 100_000;
    for (i, sender) in [(0u64, 0u32), (1, 1)] {
        let want = pattern(n, tag + i);
        if ni.rank() == sender {
            buf.write_at(0, &want);
            ni.send(peer, buf, 0..n, tag + i).unwrap();
        } else {
            let d = ni.recv(Some(peer), buf, 0..n, tag + i, u64::MAX).unwrap();
            assert_eq!((d.len as usize, d.rank), (n, peer));
            let mut got = vec![0u8; n];
            buf.read_at(0, &mut got);
            assert!(got == want, "message {tag}+{i} arrived corrupted");
        }
    }
}

/// Issue 17, faults: ranks 0 and 1 on two hosts exchange checked messages, then rank 0
/// leaves a 64 MiB send pending and both wait on a receive from the other, printing
/// `waiting`. The test cuts the link or kills a daemon: what was pending fails (link down
/// or peer down) and the rank prints `failed AT` (Unix time). Then it goes on as
/// `cross-rejoin`. A rank whose own daemon died just reports it.
fn cross_fault(ni: &Ni) {
    let buf = ni.alloc(64 << 20).unwrap();
    exchange(ni, &buf, 1);
    let peer = 1 - ni.rank();
    let big = (ni.rank() == 0).then(|| ni.isend(peer, &buf, 0..64 << 20, 55).unwrap());
    println!("waiting");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    let gone = |r: Result<ni::Done, Error>| match r {
        Err(e) if matches!(status_of(&e), Some(Status::LinkDown | Status::PeerDown)) => {
            println!("failed {:.3} {e}", unix_now());
            true
        }
        Err(e @ Error::DaemonGone(_)) => {
            println!("own daemon gone: {e}");
            false
        }
        other => panic!("expected link down or peer down, got {other:?}"),
    };
    if !gone(ni.recv(Some(peer), &buf, 0..16, 999, u64::MAX)) {
        std::process::exit(0);
    }
    if let Some(s) = big {
        gone(ni.wait(s));
    }
    cross_rejoin(ni);
}

/// Wait (up to 30 s) until the other rank is reachable again, then exchange checked
/// messages with it.
fn cross_rejoin(ni: &Ni) {
    let peer = 1 - ni.rank();
    let t = Instant::now();
    loop {
        match ni.ping(peer) {
            Ok(()) => break,
            Err(e) if matches!(status_of(&e), Some(Status::LinkDown | Status::PeerDown)) => {}
            Err(e) => panic!("ping: {e}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "peer never came back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("rejoined after {:?}", t.elapsed());
    let buf = ni.alloc(1 << 20).unwrap();
    exchange(ni, &buf, 100);
    // The partition's collectives start again too (rounds that failed are gone).
    ni.barrier().unwrap();
}

/// Rank 0 waits in a barrier that rank 1, on another host, never joins; rank 1's daemon is
/// killed under it (tests/multihost/run.sh): the barrier fails with `link down` or `peer
/// down` (printed with the time), and rank 0 then waits for the restarted host's new rank.
fn cross_coll_fault(ni: &Ni) {
    let buf = ni.alloc(1 << 20).unwrap();
    exchange(ni, &buf, 1);
    println!("waiting");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    if ni.rank() == 0 {
        match ni.barrier() {
            Err(e) if matches!(status_of(&e), Some(Status::LinkDown | Status::PeerDown)) => {
                println!("failed {:.3} {e}", unix_now());
            }
            other => panic!("expected link down or peer down, got {other:?}"),
        }
        std::io::stdout().flush().unwrap();
        cross_rejoin(ni);
    } else {
        match ni.recv(Some(0), &buf, 0..16, 999, u64::MAX) {
            Err(e @ Error::DaemonGone(_)) => println!("own daemon gone: {e}"),
            other => panic!("expected its daemon to go, got {other:?}"),
        }
    }
}

/// Malformed requests: each fails with its own status and the NI keeps working.
fn bad_requests(ni: &Ni) {
    let buf = ni.alloc(4096).unwrap();
    let try_req = |r: Request| ni.wait(ni.submit(r).unwrap());
    let base = Request {
        rank: 0,
        ..Default::default()
    };
    // A buffer the client never mapped for DMA.
    expect_status(
        try_req(Request {
            opcode: opcode::SEND,
            addr: 0x1000,
            len: 64,
            ..base
        }),
        Status::NotRegistered,
    );
    expect_status(
        try_req(Request {
            opcode: opcode::RECV,
            addr: 0x1000,
            len: 64,
            ..base
        }),
        Status::NotRegistered,
    );
    // A length that runs off the end of the address space, and one beyond the maximum.
    expect_status(
        try_req(Request {
            opcode: opcode::SEND,
            addr: u64::MAX - 10,
            len: 100,
            ..base
        }),
        Status::BadLength,
    );
    expect_status(
        try_req(Request {
            opcode: opcode::PUT,
            addr: buf.iova(),
            len: u64::MAX,
            ..base
        }),
        Status::BadLength,
    );
    // Straddling the end of a registered region.
    expect_status(
        try_req(Request {
            opcode: opcode::SEND,
            addr: buf.iova() + 4000,
            len: 200,
            ..base
        }),
        Status::NotRegistered,
    );
    expect_status(
        try_req(Request {
            opcode: opcode::SEND,
            rank: 4096,
            addr: buf.iova(),
            len: 1,
            ..base
        }),
        Status::OutOfPartition,
    );
    expect_status(
        try_req(Request {
            opcode: 0x77,
            ..base
        }),
        Status::BadOpcode,
    );
    expect_status(
        try_req(Request {
            opcode: opcode::RESET,
            ..base
        }),
        Status::Permission,
    );
    expect_status(
        try_req(Request {
            opcode: opcode::MQ_SEND,
            addr: buf.iova(),
            len: 10,
            ..base
        }),
        Status::BadLength,
    );
    expect_status(
        try_req(Request {
            opcode: opcode::CQ_SETUP,
            addr: buf.iova() + 1,
            len: 3,
            ..base
        }),
        Status::BadDescriptor,
    );
    expect_status(
        try_req(Request {
            opcode: opcode::REG_MR,
            addr: buf.iova(),
            len: 64,
            key: buf.key(),
            access: 1,
            ..base
        }),
        Status::BadDescriptor,
    );
    // Still working: a message to itself.
    buf.write_at(0, b"still here");
    let r = ni
        .irecv(Some(ni.rank()), &buf, 100..200, 9, u64::MAX)
        .unwrap();
    ni.send(ni.rank(), &buf, 0..10, 9).unwrap();
    assert_eq!(ni.wait(r).unwrap().len, 10);
    let mut got = [0u8; 10];
    buf.read_at(100, &mut got);
    assert_eq!(&got, b"still here");
}

/// Issue 18: a daemon that dies under a blocked receive. Prints `waiting`, expects the
/// receive to fail with `DaemonGone` (the test kills the daemon and times the failure), then
/// attaches again to the daemon the test restarts on the same run directory and exchanges
/// a checked message with its peer.
fn daemon_dies(ni: Ni) {
    let buf = ni.alloc(4096).unwrap();
    let peer = 1 - ni.rank();
    println!("waiting");
    let r = ni.recv(Some(peer), &buf, 0..64, 99, u64::MAX);
    match r {
        Err(Error::DaemonGone(why)) => println!("gone: {why}"),
        other => panic!("a receive under a dead daemon ended with {other:?}"),
    }
    // Every later call says the same, at once.
    assert!(matches!(ni.progress(), Err(Error::DaemonGone(_))));
    drop(buf);
    drop(ni);
    let path = std::env::var("NI_SOCKET").expect("NI_SOCKET");
    let t = Instant::now();
    let ni = loop {
        match Ni::attach_path(std::path::Path::new(&path)) {
            Ok(ni) => break ni,
            Err(e) if t.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("no daemon to attach to again: {e}"),
        }
    };
    ni.wait_for_partition(Duration::from_secs(30)).unwrap();
    let buf = ni.alloc(4096).unwrap();
    let want = pattern(1000, 7);
    if ni.rank() == 0 {
        buf.write_at(0, &want);
        ni.send(1, &buf, 0..1000, 5).unwrap();
    } else {
        let d = ni.recv(Some(0), &buf, 0..4096, 5, u64::MAX).unwrap();
        assert_eq!(d.len, 1000);
        let mut got = vec![0u8; 1000];
        buf.read_at(0, &mut got);
        assert!(got == want, "message after the restart corrupted");
    }
}

fn main() {
    let scenario = std::env::args()
        .nth(1)
        .expect("usage: ni-test-rank SCENARIO");
    // "attach" runs alone: it must not wait for the rest of its partition.
    let ni = if scenario == "attach" {
        let path = std::env::var("NI_SOCKET").expect("NI_SOCKET");
        Ni::attach_path(std::path::Path::new(&path))
    } else {
        Ni::attach()
    }
    .unwrap_or_else(|e| panic!("attach: {e}"));
    match scenario.as_str() {
        "integrity" => integrity(&ni),
        "many-to-one" => many_to_one(&ni),
        "wait-all" => wait_all(&ni),
        "mq" => mq(&ni),
        "put-get" => put_get(&ni),
        "am" => active_messages(&ni),
        "ping-down" => ping_down(&ni),
        "killed" => killed(&ni),
        "bad" => bad_requests(&ni),
        "attach" => println!("rank {} of {} on NI {}", ni.rank(), ni.size(), ni.node()),
        "daemon-dies" => daemon_dies(ni),
        "cm5-doors" => cm5_doors(&ni),
        "cross-fault" => cross_fault(&ni),
        "cross-rejoin" => cross_rejoin(&ni),
        "cross-coll-fault" => cross_coll_fault(&ni),
        "restart-soak" => restart_soak(&ni),
        other => panic!("unknown scenario {other}"),
    }
    println!("ok {scenario}");
}

/// Issue 11, "one control network": this rank (libni) and a peer driving the CM-5 registers
/// (tests/tests/cm5_doors.rs) take part in the same rounds. Rank 1 here; the register
/// member contributes 37 to an ADD reduction, 0 to a sync global, and raises the async
/// global after the sync global.
fn cm5_doors(ni: &Ni) {
    use ni::{Combiner, Pattern};
    ni.set_participation(0).unwrap();
    let r = ni
        .combine(Pattern::Reduce, Combiner::Add, &[5], false)
        .unwrap();
    assert_eq!(r.words, Some(vec![42]), "5 + the register member's 37");
    let r = ni
        .combine(Pattern::ScanForward, Combiner::Add, &[5], false)
        .unwrap();
    assert_eq!(
        r.words,
        Some(vec![37]),
        "exclusive forward scan: rank 0's 37"
    );
    assert!(
        ni.sync_global(true).unwrap(),
        "OR of 1 and the register member's 0"
    );
    let t = Instant::now();
    while !ni.global_rec() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the async global never rose"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    ni.network_done().unwrap();
    println!("ok cm5-doors");
}

/// Issue 16, "daemon restart and upgrade under running clients": a checked exchange that
/// must see no error while the daemon is restarted under it (tests/tests/restart.rs). Runs
/// until the file `NI_SOAK_STOP` exists (rank 0 looks; the verdict travels as a message),
/// every round: a ping-pong of small (window or fabric path), 64 KiB and 1 MiB (fabric
/// path, rendezvous) checked payloads, a put and a get on the peer's region, an allreduce
/// and a barrier. Prints the rounds done.
fn restart_soak(ni: &Ni) {
    let stop = std::env::var("NI_SOAK_STOP").expect("NI_SOAK_STOP");
    let buf = ni.alloc(2 << 20).unwrap();
    let win = ni.alloc(1 << 20).unwrap();
    let local = ni.alloc(1 << 20).unwrap();
    let sums = ni.alloc(4096).unwrap();
    let peer = 1 - ni.rank();
    let mut round = 0u64;
    loop {
        ni_tests::check::soak_pingpong(ni, &buf, round);
        // One-sided: each writes a pattern into the peer's region, then reads it back.
        let want = pattern(8192, round + 1000 + ni.rank() as u64);
        local.write_at(0, &want);
        let at = 8192 * ni.rank() as u64;
        ni.put(peer, &local, 0..8192, win.key(), at).unwrap();
        local.write_at(0, &[0u8; 8192]);
        ni.get(peer, &local, 0..8192, win.key(), at).unwrap();
        let mut got = vec![0u8; 8192];
        local.read_at(0, &mut got);
        assert!(
            got == want,
            "round {round}: put/get through the peer's region"
        );
        ni_tests::check::soak_allreduce(ni, &sums, round);
        // Rank 0 decides whether to go on; the verdict is a message, so both stop together.
        let verdict = ni.alloc(64).unwrap();
        if ni.rank() == 0 {
            let go = !std::path::Path::new(&stop).exists();
            verdict.write_at(0, &[go as u8]);
            ni.send(peer, &verdict, 0..1, u64::MAX - 1).unwrap();
        } else {
            ni.recv(Some(peer), &verdict, 0..1, u64::MAX - 1, u64::MAX)
                .unwrap();
        }
        let mut go = [0u8];
        verdict.read_at(0, &mut go);
        ni.barrier().unwrap();
        round += 1;
        if go[0] == 0 {
            break;
        }
    }
    println!("rounds {round}");
}
