//! The direct path (partition window): what goes through it, that it keeps the fabric's
//! semantics, honours the administrator's links, and survives a peer that writes garbage.

use std::time::Duration;

use ni::{Error, Ni};
use ni_abi::fastpath::Status;
use ni_tests::{AppMemory, Daemon};

/// The pass with `NI_TEST_DIRECT=off` has no window: these tests are about it.
fn window_off() -> bool {
    let off = std::env::var("NI_TEST_DIRECT").as_deref() == Ok("off");
    if off {
        eprintln!("NI_TEST_DIRECT=off: this test is about the window; skipped in that pass");
    }
    off
}

fn status(e: &Error) -> Option<Status> {
    match e {
        Error::Failed { status, .. } => Some(*status),
        _ => None,
    }
}

/// Every size, from exported memory (`Ni::alloc`) and from the application's own
/// (`Ni::register`), with one tag: the receiver sees them in the order sent, whichever way
/// each payload travelled — in the ring (eager, `BIG`), read by the receiver out of the
/// sender's region (`GET`), or copied by the fabric (`RTS`).
#[test]
fn small_messages_take_the_window_large_ones_the_fabric_in_one_order() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    assert!(a.direct() && b.direct(), "partition of 2 gets a window");
    const BIG: usize = 1 << 20;
    let exported = a.alloc(BIG).unwrap();
    let own = AppMemory::register(&a, BIG, 0);
    let rbuf = b.alloc(BIG).unwrap();
    // Sizes straddling the inline bytes, `EAGER_MAX` (a `BIG` or a `GET` beyond it) and
    // `big_max` (a `RTS` or a `GET` beyond it).
    let big_max = ni_abi::window::big_max(2) as usize;
    let sizes = [
        0usize,
        1,
        32,
        33,
        4096,
        4097,
        8,
        BIG,
        64,
        100_000,
        big_max,
        big_max + 1,
        7,
    ];
    let n = 2 * sizes.len();
    let t = std::thread::spawn(move || {
        let mut got = vec![];
        for _ in 0..n {
            let dn = b.recv(Some(0), &rbuf, 0..BIG, 5, u64::MAX).unwrap();
            let mut v = vec![0u8; dn.len as usize];
            rbuf.read_at(0, &mut v);
            got.push(v);
        }
        (b, rbuf, got)
    });
    let mut sent = vec![];
    for (from, sbuf) in [&exported, &own].into_iter().enumerate() {
        for (i, &n) in sizes.iter().enumerate() {
            let v: Vec<u8> = (0..n).map(|k| (k * 7 + i + from) as u8).collect();
            sbuf.write_at(0, &v);
            // Blocking sends: the ones in the ring complete at once (buffered), the others
            // once the receiver took them.
            a.send(1, sbuf, 0..n, 5).unwrap();
            sent.push(v);
        }
    }
    let (_b, _rbuf, got) = t.join().unwrap();
    assert!(got == sent, "messages out of order or garbled");
    drop(own);
    let count = |f: &dyn Fn(usize) -> bool| sizes.iter().filter(|&&n| f(n)).count() as u64;
    // From exported memory every message went through the window: in the ring up to
    // `EAGER_MAX`, read by the receiver past it. From the application's, up to `EAGER_MAX`
    // in the ring, up to `big_max` too where it found the ring empty, else through the
    // fabric. `sends` and `recvs` count every message once.
    let total: u64 = 2 * sizes.iter().map(|&n| n as u64).sum::<u64>();
    let window = d.counter(0, "window_sends");
    let eager = count(&|n| n <= 4096);
    assert!(
        (sizes.len() as u64 + eager..=sizes.len() as u64 + count(&|n| n <= big_max))
            .contains(&window),
        "{window} through the window"
    );
    assert_eq!(d.counter(1, "window_reads"), count(&|n| n > 4096));
    assert_eq!(d.counter(0, "sends"), n as u64);
    assert_eq!(d.counter(0, "send_bytes"), total);
    assert_eq!(d.counter(1, "recvs"), n as u64);
    assert_eq!(d.counter(1, "recv_bytes"), total);
    assert_eq!(d.counter(1, "window_ring_errors"), 0);
}

#[test]
fn a_port_taken_down_refuses_window_sends_until_it_is_up() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let buf = a.alloc(64).unwrap();
    let rbuf = b.alloc(64).unwrap();
    a.send(1, &buf, 0..8, 1).unwrap();
    b.recv(Some(0), &rbuf, 0..64, 1, u64::MAX).unwrap();
    let r = d.control(r#"{"version":1,"request":"port_set","node":1,"state":"down"}"#);
    assert_eq!(r["result"], "port", "{r}");
    let e = a.send(1, &buf, 0..8, 1).unwrap_err();
    assert_eq!(status(&e), Some(Status::LinkDown), "{e}");
    assert_eq!(d.counter(0, "err_link_down"), 1);
    d.control(r#"{"version":1,"request":"port_set","node":1,"state":"up"}"#);
    a.send(1, &buf, 0..8, 2).unwrap();
    let dn = b.recv(Some(0), &rbuf, 0..64, 2, u64::MAX).unwrap();
    assert_eq!(dn.len, 8);
}

#[test]
fn a_peer_writing_garbage_into_the_window_is_refused_and_counted() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let rbuf = b.alloc(8192).unwrap();
    const SLOT: usize = ni_abi::window::SLOT as usize;
    // Lies a receiver must not follow (`ni_abi::window::Header`: kind @4, len @6): unknown
    // kind; an eager length far past the ring; a ready-to-send that claims ring payload; an
    // active message past the handlers' limit.
    // A small eager message but for the byte after the kind, which no sender sets: the
    // receive's fast path (payload in the header slot) must refuse it as the decoder does.
    // First, so that no receive a lie left posted comes before its own.
    let mut pad = [0u8; SLOT];
    pad[4] = ni_abi::window::kind::EAGER;
    pad[5] = 1;
    pad[6..8].copy_from_slice(&8u16.to_le_bytes());
    let mut lies = vec![pad, [0xA5u8; SLOT]];
    let mut long = [0u8; SLOT];
    long[4] = ni_abi::window::kind::EAGER;
    long[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
    lies.push(long);
    let mut odd = [0u8; SLOT];
    odd[4] = ni_abi::window::kind::RTS;
    odd[6..8].copy_from_slice(&16u16.to_le_bytes());
    lies.push(odd);
    // An active message longer than any handler may be given.
    let mut am = [0u8; SLOT];
    am[4] = ni_abi::window::kind::AM;
    am[6..8].copy_from_slice(&(ni_abi::fastpath::AM_MAX_PAYLOAD as u16 + 1).to_le_bytes());
    lies.push(am);
    // A collective's vector longer than any partition's rings take (`ring_coll_max`).
    let mut coll = [0u8; SLOT];
    coll[4] = ni_abi::window::kind::COLL;
    coll[6..8].copy_from_slice(&(ni_abi::window::RING_COLL_MAX as u16 + 1).to_le_bytes());
    lies.push(coll);
    // BIGs (`kind::BIG`: length in `full` @16) no sender writes: one that fits an eager
    // message, one past `BIG_MAX`, one with a `len` besides.
    for (full, len) in [(100u64, 0u16), (ni_abi::window::BIG_MAX + 1, 0), (8192, 8)] {
        let mut big = [0u8; SLOT];
        big[4] = ni_abi::window::kind::BIG;
        big[6..8].copy_from_slice(&len.to_le_bytes());
        big[16..24].copy_from_slice(&full.to_le_bytes());
        lies.push(big);
    }
    for (i, lie) in lies.iter_mut().enumerate() {
        // Each tagged for the receive below: a lie taken as a message would end it.
        lie[8..16].copy_from_slice(&(100 + i as u64).to_le_bytes());
        assert!(a.window_inject(1, lie));
        // Nothing arrives: the receive times out, the receiver lives on. (A timed-out
        // receive stays posted, as on the fabric: its own tag keeps it off the next message.)
        let o = b
            .irecv(Some(0), &rbuf, 0..8192, 100 + i as u64, u64::MAX)
            .unwrap();
        let e = b
            .wait_timeout(o, Some(Duration::from_millis(200)))
            .unwrap_err();
        assert!(matches!(e, Error::Timeout(_)), "{e}");
        assert_eq!(d.counter(1, "window_ring_errors"), i as u64 + 1);
    }
    // An honest message after the garbage still arrives.
    let sbuf = a.alloc(64).unwrap();
    sbuf.write_at(0, b"honest");
    a.send(1, &sbuf, 0..6, 3).unwrap();
    let dn = b.recv(Some(0), &rbuf, 0..8192, 3, u64::MAX).unwrap();
    let mut v = [0u8; 6];
    rbuf.read_at(0, &mut v);
    assert_eq!((&v, dn.len), (b"honest", 6));
}

/// A `BIG` goes into the ring only when the ring is empty (`Window::drained`): a stream's
/// later messages of the same size are rendezvous (one copy by the fabric, none into the
/// backlog), and the receiver still takes every message whole and in the order sent. The
/// sender's memory is the application's (`Ni::register`): from an `alloc` region the
/// receiver would read every one itself (`kind::GET`), and no `BIG` is written.
#[test]
fn big_messages_that_find_the_ring_busy_go_as_rendezvous_in_order() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let len = ni_abi::window::big_max(2) as usize;
    const N: usize = 40;
    let sbuf = AppMemory::register(&a, N * len, 0);
    let rbuf = b.alloc(len).unwrap();
    let msg = |i: usize| -> Vec<u8> { (0..len).map(|k| (k * 31 + i * 7) as u8).collect() };
    let mut ops = vec![];
    for i in 0..N {
        sbuf.write_at(i * len, &msg(i));
        ops.push(a.isend(1, &sbuf, i * len..(i + 1) * len, 6).unwrap());
    }
    let t = std::thread::spawn(move || {
        for o in ops {
            a.wait(o).unwrap();
        }
        (a, sbuf)
    });
    for i in 0..N {
        let dn = b.recv(Some(0), &rbuf, 0..len, 6, u64::MAX).unwrap();
        let mut got = vec![0u8; len];
        rbuf.read_at(0, &mut got);
        assert_eq!((dn.len as usize, got == msg(i)), (len, true), "message {i}");
    }
    let (_a, sbuf) = t.join().unwrap();
    drop(sbuf);
    // The first went into the ring, found empty; the others found it busy.
    let in_ring = d.counter(0, "window_sends");
    assert!(
        in_ring > 0 && in_ring < N as u64,
        "{in_ring} of {N} through the ring"
    );
    assert_eq!(d.counter(0, "sends"), N as u64);
    assert_eq!(d.counter(1, "window_reads"), 0);
    assert_eq!(d.counter(1, "window_ring_errors"), 0);
}

/// A message past what the ring carries, sent from an `alloc` region (exported), is read by
/// the receiver itself out of the sender's region (`kind::GET`, fastpath.md "Tagged
/// messages"): one copy, no device thread; the send ends only once the receiver read it
/// (MLINK's rule for a READ: the data is the sender's until taken), a short receive gets
/// `Truncated` and the send still ends well.
#[test]
fn large_messages_are_read_by_the_receiver_and_the_send_ends_when_it_did() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    const LEN: usize = 256 << 10;
    let sbuf = a.alloc(LEN).unwrap();
    let rbuf = b.alloc(LEN).unwrap();
    let msg: Vec<u8> = (0..LEN).map(|k| (k * 13 + 5) as u8).collect();
    sbuf.write_at(0, &msg);
    let o = a.isend(1, &sbuf, 0..LEN, 9).unwrap();
    // Nobody received it yet: however often the sender polls, its send is not done.
    for _ in 0..50 {
        a.progress().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        a.test(&o).unwrap().is_none(),
        "the send ended before a receive took it"
    );
    let dn = b.recv(Some(0), &rbuf, 0..LEN, 9, u64::MAX).unwrap();
    let mut got = vec![0u8; LEN];
    rbuf.read_at(0, &mut got);
    assert!(dn.len as usize == LEN && got == msg, "payload read whole");
    let sent = a.wait(o).unwrap();
    assert_eq!((sent.len as usize, sent.tag), (LEN, 9));
    // A receive shorter than the message: its first bytes, `Truncated`; the send is done.
    let o = a.isend(1, &sbuf, 0..100_000, 10).unwrap();
    let e = b.recv(Some(0), &rbuf, 0..50_000, 10, u64::MAX).unwrap_err();
    assert_eq!(status(&e), Some(Status::Truncated), "{e}");
    rbuf.read_at(0, &mut got[..50_000]);
    assert_eq!(got[..50_000], msg[..50_000]);
    a.wait(o).unwrap();
    assert_eq!(d.counter(1, "window_reads"), 2);
    assert_eq!(d.counter(1, "window_read_bytes"), LEN as u64 + 50_000);
    assert_eq!(d.counter(0, "sends"), 2);
    assert_eq!(d.counter(0, "send_bytes"), LEN as u64 + 100_000);
    assert_eq!(d.counter(1, "recvs"), 2);
    for n in 0..2 {
        assert_eq!(d.counter(n, "window_ring_errors"), 0);
    }
}

/// A receive whose message is already next in its ring ends inside `irecv` (`Op::ready`),
/// its result held by the `Op` itself: the bytes are there, and one too long for its
/// buffer fails `Truncated` with its first bytes delivered and the failure counted by the
/// daemon (`err_truncated`), as one taken by a wait does.
#[test]
fn a_receive_that_finds_its_message_in_the_ring_ends_in_the_call_even_truncated() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let sbuf = a.alloc(64).unwrap();
    let rbuf = b.alloc(64).unwrap();
    sbuf.write_at(0, b"0123456789abcdef");
    a.send(1, &sbuf, 0..16, 1).unwrap();
    a.send(1, &sbuf, 0..16, 2).unwrap();
    let o = b.irecv(Some(0), &rbuf, 0..16, 1, u64::MAX).unwrap();
    assert!(o.ready(), "taken from the ring by irecv");
    let got = b.wait(o).unwrap();
    assert_eq!((got.len, got.tag, got.rank), (16, 1, 0));
    let mut m = [0u8; 16];
    rbuf.read_at(0, &mut m);
    assert_eq!(&m, b"0123456789abcdef");
    rbuf.write_at(0, &[0u8; 16]);
    let o = b.irecv(Some(0), &rbuf, 0..4, 2, u64::MAX).unwrap();
    assert!(o.ready(), "taken from the ring by irecv");
    let e = b.wait(o).unwrap_err();
    assert_eq!(status(&e), Some(Status::Truncated), "{e}");
    rbuf.read_at(0, &mut m);
    assert_eq!(&m[..4], b"0123", "the first bytes delivered");
    assert_eq!(&m[4..], &[0u8; 12], "nothing past the buffer");
    assert_eq!(d.counter(1, "recvs"), 2);
    assert_eq!(d.counter(1, "err_truncated"), 1);
}

/// `Ni::drain_taking` (the libfabric provider's eager path): messages of its tags (equal on
/// its mask's bits) come out of the rings with their own tags, in sending order, after those
/// a pass without it had already taken (and left waiting for a receive), and other tags'
/// messages still go to their receives.
#[test]
fn messages_taken_from_the_rings_keep_their_order_behind_those_already_taken() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    // Taken: every tag whose low byte is 0x77; the rest of each tag is the message's own.
    const T: u64 = 0x77;
    const MASK: u64 = 0xff;
    let tag_of = |k: usize| T | (k as u64) << 40;
    let sbuf = a.alloc(64 << 10).unwrap();
    let send = |k: usize, len: usize, tag: u64| {
        let bytes: Vec<u8> = (0..len).map(|j| (k * 31 + j) as u8).collect();
        sbuf.write_at(0, &bytes);
        a.send(1, &sbuf, 0..len, tag).unwrap();
        bytes
    };
    let mut sent = vec![];
    // Five taken by a plain progress pass: no receive wants them, they wait in libni.
    for k in 0..5 {
        sent.push(send(k, 8 + k * 100, tag_of(k)));
    }
    let other = send(99, 300, T + 1);
    b.progress().unwrap();
    // Five more stay in the ring (one the full eager size).
    for k in 5..10 {
        let len = if k == 7 { 4096 } else { 8 + k * 100 };
        sent.push(send(k, len, tag_of(k)));
    }
    let recvs = d.counter(1, "recvs");
    let (mut out, mut taken) = (vec![], ni::Taken::default());
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while taken.len() < sent.len() {
        b.drain_taking(&mut out, T, MASK, &mut taken).unwrap();
        assert!(std::time::Instant::now() < until, "{} taken", taken.len());
    }
    assert!(out.is_empty(), "nothing else finished");
    for (k, want) in sent.iter().enumerate() {
        let (src, tag, got) = taken.get(k);
        assert_eq!(src, 0);
        assert_eq!(tag, tag_of(k), "message {k}'s own tag");
        assert!(
            got == &want[..],
            "message {k} ({} bytes) in its place",
            want.len()
        );
    }
    assert_eq!(
        d.counter(1, "recvs"),
        recvs + 10,
        "each counted as received"
    );
    // The other tag's message was left for its receive.
    let rbuf = b.alloc(4096).unwrap();
    let dn = b.recv(Some(0), &rbuf, 0..4096, T + 1, u64::MAX).unwrap();
    let mut got = vec![0u8; dn.len as usize];
    rbuf.read_at(0, &mut got);
    assert!(got == other);
    taken.clear();
    b.drain_taking(&mut out, T, MASK, &mut taken).unwrap();
    assert!(taken.is_empty(), "each taken once");
}

/// `Ni::send_now` (the provider's inject): a message from plain bytes goes into the ring at
/// once, counted as any send, or nothing happens — too large, a member outside the
/// partition, the ring full, or (order) while a send waits for room — and the caller sends
/// it as usual. The receiver gets every message in the order sent, whichever way it went.
#[test]
fn send_now_goes_into_the_ring_at_once_or_does_nothing() {
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let msg = |k: usize| -> Vec<u8> { (0..8 + k % 40).map(|j| (k * 13 + j) as u8).collect() };
    if std::env::var("NI_TEST_DIRECT").as_deref() == Ok("off") {
        assert!(
            !a.send_now(1, &msg(0), 5).unwrap(),
            "no window: nothing sent"
        );
        return;
    }
    let sends = d.counter(0, "sends");
    let too_big = vec![0u8; ni_abi::window::EAGER_MAX as usize + 1];
    assert!(!a.send_now(1, &too_big, 5).unwrap());
    assert!(
        !a.send_now(7, &msg(0), 5).unwrap(),
        "rank 7 is outside the partition"
    );
    // Until the ring toward rank 1 is full (it takes nothing meanwhile).
    let mut sent = vec![];
    while a.send_now(1, &msg(sent.len()), 5).unwrap() {
        sent.push(msg(sent.len()));
        assert!(sent.len() < 100_000, "the ring never filled");
    }
    assert!(sent.len() > 1, "{} went in at once", sent.len());
    // One through the usual path waits for room; none may pass it.
    let sbuf = a.alloc(4096).unwrap();
    let waiting = msg(sent.len());
    sbuf.write_at(0, &waiting);
    let op = a.isend(1, &sbuf, 0..waiting.len(), 5).unwrap();
    sent.push(waiting);
    assert!(
        !a.send_now(1, &msg(sent.len()), 5).unwrap(),
        "behind a waiting send"
    );
    let n = sent.len();
    let t = std::thread::spawn(move || {
        let rbuf = b.alloc(4096).unwrap();
        let mut got = vec![];
        for _ in 0..n {
            let dn = b.recv(Some(0), &rbuf, 0..4096, 5, u64::MAX).unwrap();
            let mut v = vec![0u8; dn.len as usize];
            rbuf.read_at(0, &mut v);
            got.push(v);
        }
        (b, got)
    });
    a.wait(op).unwrap();
    let (b, got) = t.join().unwrap();
    assert_eq!(got.len(), sent.len());
    for (k, (g, s)) in got.iter().zip(&sent).enumerate() {
        assert!(g == s, "message {k} in its place");
    }
    // Room again: straight in, and received.
    assert!(a.send_now(1, &msg(1), 6).unwrap());
    let rbuf = b.alloc(4096).unwrap();
    let dn = b.recv(Some(0), &rbuf, 0..4096, 6, u64::MAX).unwrap();
    assert_eq!(dn.len as usize, msg(1).len());
    assert_eq!(
        d.counter(0, "sends"),
        sends + sent.len() as u64 + 1,
        "each counted as a send"
    );
}

/// `send` and `am_send` put a message straight into the ring when it can go there now,
/// building no operation; whatever cannot goes the usual way, which says why (a member
/// outside the partition, a region that is not the sender's) or waits for room. Sends and
/// active messages share the ring toward a member: past its room (the receiver takes
/// nothing for a while), every one still arrives, each kind in the order sent.
#[test]
fn sends_and_active_messages_that_cannot_go_into_the_ring_now_take_the_usual_way() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let sbuf = a.alloc(64).unwrap();
    let e = a.send(7, &sbuf, 0..8, 1).unwrap_err();
    assert_eq!(status(&e), Some(Status::OutOfPartition), "{e}");
    let e = a.am_send(7, 3, b"outside").unwrap_err();
    assert_eq!(status(&e), Some(Status::OutOfPartition), "{e}");
    let not_mine = b.alloc(64).unwrap();
    let e = a.send(1, &not_mine, 0..8, 1).unwrap_err();
    assert_eq!(status(&e), Some(Status::NotRegistered), "{e}");
    let e = a.send(1, &sbuf, 0..sbuf.len() + 1, 1).unwrap_err();
    assert!(matches!(e, Error::BadArgument(_)), "{e}");

    // 64-byte messages take two slots: 3 * 4096 of them (a third active messages) need
    // half again the 8192 slots of a 2-member ring.
    const N: usize = 3 * 4096;
    let slots = ni_abi::window::ring_slots(2) as usize;
    assert!(2 * N > slots + slots / 2, "the messages fit in the ring");
    let msg = |k: usize| -> [u8; 64] { std::array::from_fn(|j| (k * 7 + j) as u8) };
    let t = std::thread::spawn(move || {
        let ams = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = ams.clone();
        b.am_register(3, move |src, payload| {
            assert_eq!(src, 0);
            seen.lock().unwrap().push(payload.to_vec());
        });
        // The sender fills the ring meanwhile.
        std::thread::sleep(Duration::from_millis(300));
        let rbuf = b.alloc(64).unwrap();
        let mut got = vec![];
        for _ in 0..N - N / 3 {
            let dn = b.recv(Some(0), &rbuf, 0..64, 1, u64::MAX).unwrap();
            assert_eq!(dn.len, 64);
            let mut v = vec![0u8; 64];
            rbuf.read_at(0, &mut v);
            got.push(v);
        }
        while ams.lock().unwrap().len() < N / 3 {
            b.progress().unwrap();
        }
        let ams = ams.lock().unwrap().clone();
        (b, got, ams)
    });
    for k in 0..N {
        if k % 3 == 0 {
            a.am_send(1, 3, &msg(k)).unwrap();
        } else {
            sbuf.write_at(0, &msg(k));
            a.send(1, &sbuf, 0..64, 1).unwrap();
        }
    }
    let (_b, got, ams) = t.join().unwrap();
    let sent = |first: bool| (0..N).filter(move |k| (k % 3 == 0) == first).map(msg);
    assert_eq!(ams.len(), N / 3);
    assert!(
        sent(true).zip(&ams).all(|(s, g)| s[..] == g[..]),
        "AMs in order"
    );
    assert_eq!(got.len(), N - N / 3);
    assert!(
        sent(false).zip(&got).all(|(s, g)| s[..] == g[..]),
        "sends in order"
    );
    assert_eq!(
        d.counter(0, "sends"),
        (N - N / 3) as u64,
        "each send counted once"
    );
    assert_eq!(
        d.counter(0, "window_ams"),
        (N / 3) as u64,
        "each AM counted once"
    );
}

/// `Ni::recv_in_place`: a message waiting to be read in its sender's region is copied by the
/// caller straight into memory libni does not know (a plain vector here; the provider's
/// MPI receive buffers), and the send ends as for any receive. Only that: with nothing
/// here yet, for an eager message, and for one from registered memory (the fabric's) it
/// takes nothing and a receive gets the message as always. A short `cap`: its first bytes,
/// the whole length reported, the send done.
#[test]
fn a_message_to_be_read_is_taken_in_place_into_memory_libni_does_not_know() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    const LEN: usize = 256 << 10;
    let sbuf = a.alloc(LEN).unwrap();
    let msg: Vec<u8> = (0..LEN).map(|k| (k * 7 + 1) as u8).collect();
    sbuf.write_at(0, &msg);
    let mut mine = vec![0u8; LEN];
    let copy_into = |to: &mut [u8]| {
        let to = to.as_mut_ptr();
        // SAFETY: `to` holds LEN bytes, `from` is readable for `n` ≤ cap ≤ LEN.
        move |from: *const u8, n: usize| unsafe {
            std::ptr::copy_nonoverlapping(from, to, n);
            n
        }
    };
    assert!(
        b.recv_in_place(0, 9, LEN, copy_into(&mut mine)).is_none(),
        "nothing sent yet"
    );
    // An eager message under the tag it asks for: not its to take.
    let small = a.alloc(4096).unwrap();
    small.write_at(0, b"eager");
    a.send(1, &small, 0..5, 8).unwrap();
    b.progress().unwrap();
    assert!(b.recv_in_place(0, 8, LEN, copy_into(&mut mine)).is_none());
    let rbuf = b.alloc(LEN).unwrap();
    let dn = b.recv(Some(0), &rbuf, 0..LEN, 8, u64::MAX).unwrap();
    assert_eq!(dn.len, 5, "the eager message waited for its receive");

    // The `GET` reaches the receiver's ring at once; a progress pass takes it from there.
    let take = |tag: u64, cap: usize, to: &mut [u8]| {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            b.progress().unwrap();
            if let Some(got) = b.recv_in_place(0, tag, cap, copy_into(to)) {
                return got;
            }
            assert!(std::time::Instant::now() < until, "never here to be read");
        }
    };
    let o = a.isend(1, &sbuf, 0..LEN, 9).unwrap();
    let (dn, n) = take(9, LEN, &mut mine);
    assert_eq!((dn.len as usize, dn.tag, dn.rank, n), (LEN, 9, 0, LEN));
    assert!(mine == msg, "payload whole, in memory libni does not know");
    let sent = a.wait(o).unwrap();
    assert_eq!(sent.len as usize, LEN);
    assert!(
        b.recv_in_place(0, 9, LEN, copy_into(&mut mine)).is_none(),
        "taken once"
    );

    // A shorter cap: the first bytes; the send is done all the same.
    mine.fill(0);
    let o = a.isend(1, &sbuf, 0..100_000, 10).unwrap();
    let (dn, n) = take(10, 50_000, &mut mine);
    assert_eq!((dn.len, n), (100_000, 50_000));
    assert!(mine[..50_000] == msg[..50_000] && mine[50_000..].iter().all(|&x| x == 0));
    a.wait(o).unwrap();

    // From registered memory the fabric carries it: nothing to read in place.
    let sreg = AppMemory::register(&a, LEN, 0);
    sreg.write_at(0, &msg);
    let o = a.isend(1, &sreg, 0..LEN, 11).unwrap();
    for _ in 0..20 {
        b.progress().unwrap();
        assert!(b.recv_in_place(0, 11, LEN, copy_into(&mut mine)).is_none());
    }
    let dn = b.recv(Some(0), &rbuf, 0..LEN, 11, u64::MAX).unwrap();
    let mut got = vec![0u8; LEN];
    rbuf.read_at(0, &mut got);
    assert!(dn.len as usize == LEN && got == msg);
    a.wait(o).unwrap();
    drop(sreg);

    assert_eq!(d.counter(1, "window_reads"), 2);
    assert_eq!(d.counter(1, "window_read_bytes"), LEN as u64 + 50_000);
    assert_eq!(d.counter(1, "recvs"), 4);
    assert_eq!(d.counter(0, "sends"), 4);
    for n in 0..2 {
        assert_eq!(d.counter(n, "window_ring_errors"), 0);
    }
}

/// A `GET` names the sender's region by key, and keys are the sender's client's own: a
/// sender that left before its message was received takes its region with it, and the key
/// may name a region of the next client on that NI. The receive fails with `peer down`; it
/// never reads the newcomer's memory.
#[test]
fn a_get_whose_sender_left_fails_and_never_reads_its_successor() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    const LEN: usize = 64 << 10;
    let sbuf = a.alloc(LEN).unwrap();
    sbuf.write_at(0, &[0xAA; LEN]);
    let key = sbuf.key();
    let _pending = a.isend(1, &sbuf, 0..LEN, 1).unwrap();
    // The receiver takes the `GET` from its ring (written by `isend`: the ring was empty)
    // before any receive wants it.
    for _ in 0..10 {
        b.progress().unwrap();
    }
    drop(sbuf);
    drop(a);
    // A new client on the sender's NI, its first region under the same key.
    let a2 = Ni::attach_path(&d.sock(0)).unwrap();
    a2.wait_for_partition(Duration::from_secs(10)).unwrap();
    let other = a2.alloc(LEN).unwrap();
    assert_eq!(other.key(), key, "the newcomer's region takes the same key");
    other.write_at(0, &[0x55; LEN]);
    let rbuf = b.alloc(LEN).unwrap();
    let e = b.recv(Some(0), &rbuf, 0..LEN, 1, u64::MAX).unwrap_err();
    assert_eq!(status(&e), Some(Status::PeerDown), "{e}");
    let mut got = vec![0u8; LEN];
    rbuf.read_at(0, &mut got);
    assert!(got.iter().all(|&x| x == 0), "read the newcomer's memory");
    assert_eq!(d.counter(1, "window_reads"), 0);
}

/// The same for a `RTS` (memory the application registered): its payload waited in the
/// departed client's fabric SEND, whose `id` the next client on that NI starts again from 0.
/// The old receive fails with `peer down`; the newcomer's message goes to its own receive.
#[test]
fn an_rts_whose_sender_left_fails_and_never_takes_its_successors_message() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    const LEN: usize = 64 << 10;
    let sreg = AppMemory::register(&a, LEN, 0xAA);
    let _pending = a.isend(1, &sreg, 0..LEN, 1).unwrap();
    for _ in 0..10 {
        b.progress().unwrap();
    }
    drop(sreg);
    drop(a);
    let a2 = Ni::attach_path(&d.sock(0)).unwrap();
    a2.wait_for_partition(Duration::from_secs(10)).unwrap();
    let sreg2 = AppMemory::register(&a2, LEN, 0x55);
    let o = a2.isend(1, &sreg2, 0..LEN, 2).unwrap();
    let rbuf = b.alloc(LEN).unwrap();
    let e = b.recv(Some(0), &rbuf, 0..LEN, 1, u64::MAX).unwrap_err();
    assert_eq!(status(&e), Some(Status::PeerDown), "{e}");
    let dn = b
        .wait_timeout(
            b.irecv(Some(0), &rbuf, 0..LEN, 2, u64::MAX).unwrap(),
            Some(Duration::from_secs(10)),
        )
        .unwrap();
    let mut got = vec![0u8; LEN];
    rbuf.read_at(0, &mut got);
    assert!(dn.len as usize == LEN && got.iter().all(|&x| x == 0x55));
    a2.wait(o).unwrap();
    drop(sreg2);
}

/// Application memory (`Ni::register`) is not exported — its pages may hold anything else —
/// so a large message from it is a `RTS` whose payload the fabric copies, as before.
#[test]
fn large_messages_from_registered_memory_go_through_the_fabric() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    const LEN: usize = 200_000;
    let sreg = AppMemory::register(&a, LEN, 0);
    let msg: Vec<u8> = (0..LEN).map(|k| (k * 3 + 1) as u8).collect();
    sreg.write_at(0, &msg);
    let rbuf = b.alloc(LEN).unwrap();
    let t = std::thread::spawn(move || {
        b.recv(Some(0), &rbuf, 0..LEN, 4, u64::MAX).unwrap();
        let mut got = vec![0u8; LEN];
        rbuf.read_at(0, &mut got);
        (b, got)
    });
    a.send(1, &sreg, 0..LEN, 4).unwrap();
    let (_b, got) = t.join().unwrap();
    assert!(got == msg, "payload whole");
    assert_eq!(d.counter(1, "window_reads"), 0);
    assert_eq!(d.counter(0, "sends"), 1);
    assert_eq!(d.counter(1, "recv_bytes"), LEN as u64);
    drop(sreg);
}

/// What a peer can write as a `GET` and a `FIN` that no honest member writes: a `GET` whose
/// payload-area bytes are not a `GetFrom` (skipped, counted); one naming a key the daemon
/// will not map, or bytes past its region (the receiver answers "use the fabric" and waits
/// for the fabric's SEND of that id, which delivers the message, checked, when an honest
/// sender posts it); a `FIN` answering nothing (counted by the sender, dropped). Neither
/// side reads or writes outside what it may, and an honest large message still arrives.
#[test]
fn lying_gets_and_fins_are_refused_and_counted() {
    use ni_abi::fastpath::{op, Request};
    use ni_abi::window::{fin, kind, GetFrom, Header, GET_LEN};
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    const LEN: usize = 100_000;
    let sbuf = a.alloc(LEN).unwrap();
    let rbuf = b.alloc(LEN).unwrap();
    let msg: Vec<u8> = (0..LEN).map(|k| (k * 5 + 3) as u8).collect();
    sbuf.write_at(0, &msg);
    let get = |tag: u64, id: u64| {
        Header {
            kind: kind::GET,
            len: GET_LEN as u32,
            tag,
            id,
            full: LEN as u64,
        }
        .encode(&[])
    };
    let wait_for = |node: u32, name: &str, want: u64| {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while d.counter(node, name) != want {
            assert!(
                std::time::Instant::now() < until,
                "{name} of NI {node} stays {}",
                d.counter(node, name)
            );
            a.progress().unwrap();
            b.progress().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // Reserved bytes set: no honest sender's.
    let mut bad = GetFrom {
        key: sbuf.key(),
        offset: 0,
    }
    .encode();
    bad[20] = 1;
    assert!(a.window_inject_with(1, &get(100, 1000), &bad));
    let o = b.irecv(Some(0), &rbuf, 0..LEN, 100, u64::MAX).unwrap();
    let e = b
        .wait_timeout(o, Some(Duration::from_millis(200)))
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert_eq!(d.counter(1, "window_ring_errors"), 1);
    // Bytes past the region's end: counted; the receiver asks for the fabric instead, and
    // the sender finds its `FIN` answers no `GET` of its own.
    let past = GetFrom {
        key: sbuf.key(),
        offset: (LEN as u64).next_multiple_of(4096),
    };
    assert!(a.window_inject_with(1, &get(101, 1001), &past.encode()));
    // Not read in place either: left for the receive, which refuses it.
    b.progress().unwrap();
    assert!(b
        .recv_in_place(0, 101, LEN, |_, _| panic!("read past a region"))
        .is_none());
    let o = b.irecv(Some(0), &rbuf, 0..LEN, 101, u64::MAX).unwrap();
    let e = b
        .wait_timeout(o, Some(Duration::from_millis(200)))
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert_eq!(d.counter(1, "window_ring_errors"), 2);
    wait_for(0, "window_ring_errors", 1);
    // A key the daemon does not map (this process has no region 9999): refused, so the
    // fabric carries it — the receive ends once the fabric SEND of that id comes.
    assert!(a.window_inject_with(
        1,
        &get(102, 1002),
        &GetFrom {
            key: 9999,
            offset: 0
        }
        .encode()
    ));
    let o = b.irecv(Some(0), &rbuf, 0..LEN, 102, u64::MAX).unwrap();
    wait_for(0, "window_ring_errors", 2);
    assert!(d.counter(1, "exports_refused") >= 1);
    let s = a
        .submit(Request {
            opcode: op::SEND,
            rank: 1,
            addr: sbuf.iova(),
            len: LEN as u64,
            tag: 1002,
            ..Default::default()
        })
        .unwrap();
    a.wait(s).unwrap();
    let dn = b.wait(o).unwrap();
    let mut got = vec![0u8; LEN];
    rbuf.read_at(0, &mut got);
    assert!(
        (dn.len as usize, dn.tag, got == msg) == (LEN, 102, true),
        "{dn:?}"
    );
    // A `FIN` for nothing.
    let fin_raw = Header {
        kind: kind::FIN,
        len: 0,
        tag: 77,
        id: fin::READ,
        full: 0,
    }
    .encode(&[]);
    assert!(b.window_inject(0, &fin_raw));
    wait_for(0, "window_ring_errors", 3);
    // The honest path still works, read by the receiver.
    sbuf.write_at(0, &msg[1..]);
    let t = std::thread::spawn(move || {
        b.recv(Some(0), &rbuf, 0..LEN, 103, u64::MAX).unwrap();
        let mut got = vec![0u8; LEN - 1];
        rbuf.read_at(0, &mut got);
        (b, got)
    });
    a.send(1, &sbuf, 0..LEN - 1, 103).unwrap();
    let (_b, got) = t.join().unwrap();
    assert!(got[..] == msg[1..], "honest message after the lies");
    assert_eq!(d.counter(1, "window_reads"), 1);
    assert_eq!(d.counter(1, "window_ring_errors"), 2);
}

/// A `BIG` that decodes (at most `BIG_MAX`) but is longer than an eighth of this
/// partition's payload area (`big_max(8)`: 8 KiB) is no honest sender's: the receiver
/// refuses it and counts it, and takes the honest `BIG`s (one of exactly `big_max(8)`)
/// that follow.
#[test]
fn a_big_message_longer_than_the_rings_take_is_refused_and_counted() {
    if window_off() {
        return;
    }
    use ni_abi::window::{big_max, kind, SLOT};
    let d = Daemon::start(8);
    let nis: Vec<Ni> = (0..8)
        .map(|r| Ni::attach_path(&d.sock(r)).unwrap())
        .collect();
    for n in &nis {
        n.wait_for_partition(Duration::from_secs(10)).unwrap();
    }
    let (a, b) = (&nis[0], &nis[1]);
    let max = big_max(8) as usize;
    assert!(max < ni_abi::window::BIG_MAX as usize);
    let rbuf = b.alloc(2 * max).unwrap();
    let mut lie = [0u8; SLOT as usize];
    lie[4] = kind::BIG;
    lie[8..16].copy_from_slice(&7u64.to_le_bytes());
    lie[16..24].copy_from_slice(&(max as u64 + 32).to_le_bytes());
    assert!(a.window_inject(1, &lie));
    let o = b.irecv(Some(0), &rbuf, 0..2 * max, 7, u64::MAX).unwrap();
    let e = b
        .wait_timeout(o, Some(Duration::from_millis(200)))
        .unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert_eq!(d.counter(1, "window_ring_errors"), 1);
    // The application's memory: from an `alloc` region the receiver would read the
    // message itself (`kind::GET`), and the send would wait for the receive.
    let sbuf = AppMemory::register(a, max, 0);
    for n in [4097, max] {
        let v: Vec<u8> = (0..n).map(|k| (k * 13 + n) as u8).collect();
        sbuf.write_at(0, &v);
        a.send(1, &sbuf, 0..n, 8).unwrap();
        let dn = b.recv(Some(0), &rbuf, 0..2 * max, 8, u64::MAX).unwrap();
        let mut got = vec![0u8; n];
        rbuf.read_at(0, &mut got);
        assert_eq!((dn.len as usize, got == v), (n, true), "BIG of {n}");
    }
    assert_eq!(
        d.counter(0, "window_sends"),
        2,
        "both went through the window"
    );
    assert_eq!(d.counter(1, "window_ring_errors"), 1);
    drop(sbuf);
}

#[test]
fn a_partition_created_with_a_member_attached_stays_on_the_fabric() {
    if window_off() {
        return;
    }
    let d = Daemon::start_with(3, Some("[[partition]]\nname = \"p\"\nnodes = [0, 1]\n"));
    // NI 2 is in no partition; a client attaches to it (and fails: no partition)...
    let lone = std::thread::spawn({
        let s = d.sock(2);
        move || Ni::attach_path(&s).map(|_| ())
    });
    let _ = lone.join();
    // A partition of NIs 0 and 1 from the config has a window.
    let (a, b) = d.attach_pair();
    assert!(a.direct() && b.direct());
    drop((a, b));
    // While a client holds NI 0, a new partition over it gets none: that client's session
    // was set up with the old window, and all members must share one.
    let holder = Ni::attach_path(&d.sock(0)).unwrap();
    let r = d.control(r#"{"version":1,"request":"partition_delete","name":"p"}"#);
    assert_eq!(r["result"], "done", "{r}");
    let r = d.control(r#"{"version":1,"request":"partition_create","name":"q","nodes":[0,2]}"#);
    assert_eq!(r["result"], "partition", "{r}");
    drop(holder);
    let c = Ni::attach_path(&d.sock(2)).unwrap();
    assert!(!c.direct());
}

/// A peer's exported region (fastpath.md, "One-sided operations in the window"): a member of
/// the partition gets a mapping of exactly the region the owner registered with
/// `access::EXPORT` — and nothing else it names: a region registered without it, a key that
/// does not exist, a rank outside the partition, a region that is gone.
#[test]
fn a_member_maps_only_what_a_peer_exported_and_only_while_it_exists() {
    use ni_abi::window::peer_region;
    use ni_tests::hostile::{FastPath, Map};
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    // NI 1 is a raw vfio-user client; NI 0 runs libni.
    let mut raw = FastPath::attach(&d.sock(1)).unwrap();
    raw.setup_cq(0x4000_0000, 64).unwrap();
    let a = Ni::attach_path(&d.sock(0)).unwrap();
    a.wait_for_partition(Duration::from_secs(10)).unwrap();
    assert!(a.direct());
    let exported = a.alloc(8192).unwrap();
    let mut own = vec![0u8; 3 * 4096];
    // SAFETY: `own` outlives the region (dropped below first) and is this test's memory.
    let registered = unsafe { a.register(own.as_mut_ptr(), own.len(), true, true) }.unwrap();
    let info = |raw: &mut FastPath, rank, key| raw.raw.region_info(peer_region(rank, key).unwrap());

    let (size, offset, fd) = info(&mut raw, 0, exported.key()).expect("the exported region");
    assert_eq!(size, 8192);
    let m = Map::new(&fd.expect("a descriptor"), offset, 8192).unwrap();
    m.write(100, b"written by the peer");
    let mut got = [0u8; 19];
    exported.read_at(100, &mut got);
    assert_eq!(
        &got, b"written by the peer",
        "the mapping is the owner's region"
    );
    // Its memory file is sealed: the peer cannot shrink it under the owner.
    assert!(fd_len_fixed(
        &info(&mut raw, 0, exported.key()).unwrap().2.unwrap()
    ));

    for (rank, key, what) in [
        (0, registered.key(), "a region registered without EXPORT"),
        (0, 4242, "a key nobody registered"),
        (5, exported.key(), "a rank outside the partition"),
    ] {
        assert!(info(&mut raw, rank, key).is_err(), "{what} was handed out");
    }
    let key = exported.key();
    drop(exported);
    // The deregistration is taken in order before this completes.
    a.ping(1).unwrap();
    assert!(
        info(&mut raw, 0, key).is_err(),
        "a region that is gone was handed out"
    );
    assert_eq!(d.counter(1, "exports"), 2);
    assert_eq!(d.counter(1, "exports_refused"), 4);
    drop(registered);
}

fn fd_len_fixed(f: &std::fs::File) -> bool {
    let len = f.metadata().unwrap().len();
    f.set_len(len / 2).is_err() && f.metadata().unwrap().len() == len
}

/// A partition change voids the window its members mapped: sends, put/get and active
/// messages that would have gone member to member fail with `Reset`, as they do on the
/// fabric's path (the control page's `EPOCH` moved), instead of using what is left mapped.
#[test]
fn after_a_partition_change_nothing_starts_in_the_old_window() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    assert!(a.direct());
    let buf = a.alloc(4096).unwrap();
    let target = b.alloc(4096).unwrap();
    // The window path is in use: a put mapped the peer's region.
    a.put(1, &buf, 0..8, target.key(), 0).unwrap();
    assert_eq!(d.counter(0, "window_puts"), 1);
    let r = d.control(r#"{"version":1,"request":"partition_delete","name":"default"}"#);
    assert_eq!(r["result"], "done", "{r}");
    let reset = |r: ni::Result<()>, what: &str| match r {
        Err(Error::Reset) => {}
        other => panic!("{what} after the partition went: {other:?}"),
    };
    reset(a.put(1, &buf, 0..8, target.key(), 0), "put");
    reset(a.get(1, &buf, 0..8, target.key(), 0), "get");
    reset(a.send(1, &buf, 0..8, 1), "send");
    reset(a.am_send(1, 7, b"x"), "active message");
}

/// One 64-byte SEND of `sender`'s `seq`-th message: who, which, and bytes derived from both,
/// so a message torn by two writers in one slot does not check.
fn mq_message(sender: u8, seq: u64) -> [u8; 64] {
    let mut m = [0u8; 64];
    m[0] = sender;
    m[1..9].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in m.iter_mut().enumerate().skip(9) {
        *b = (sender as u64 * 37 + seq * 11 + i as u64) as u8;
    }
    m
}

/// HMM-148-0 pp. 9-15 (the arrival algorithm) with several writers at once: two members
/// store into a peer's exported queue themselves (fastpath.md, "Message queues in the
/// window") while a third member's SENDs go through the fabric, whose device stores them
/// under the same arrival lock. Every message lands whole, in its own slot, each sender's in
/// its order; Tail counts them all; the daemon counts them at both ends.
#[test]
fn senders_on_both_paths_fill_one_queue_without_losing_or_tearing_a_message() {
    use ni_abi::fastpath::{ctrl, mqcw, op, Completion, Request, ENTRY_SIZE};
    use ni_tests::hostile::{sealed_memfd, FastPath, Map};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    if window_off() {
        return;
    }
    const M: u64 = 16000;
    let d = Daemon::start(4);
    // NI 3: a raw client whose SENDs take the fabric's path.
    let mut raw = FastPath::attach(&d.sock(3)).unwrap();
    raw.setup_cq(0x4000_0000, 4096).unwrap();
    let nis: Vec<Ni> = (0..3)
        .map(|i| Ni::attach_path(&d.sock(i)).unwrap())
        .collect();
    for ni in &nis {
        ni.wait_for_partition(Duration::from_secs(10)).unwrap();
        assert!(ni.direct());
    }
    let mut q = nis[0].mq_create(3 * M + 1, 0).unwrap();
    let addr = q.addr();
    let buf_iova = 0x5000_0000u64;
    let buf_len = (M * 64).div_ceil(4096) * 4096;
    let buf = sealed_memfd(buf_len);
    let r = raw
        .raw
        .dma_map(Some(buf.as_raw_fd()), 0, buf_iova, buf_len)
        .unwrap();
    assert!(!r.is_error(), "DMA_MAP of the message buffer");
    let bufmap = Map::new(&buf, 0, buf_len as usize).unwrap();
    for i in 0..M {
        bufmap.write((i * 64) as usize, &mq_message(3, i));
    }

    let start = std::sync::Barrier::new(3);
    std::thread::scope(|s| {
        for (k, ni) in nis.iter().enumerate().skip(1) {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for i in 0..M {
                    match ni.mq_send(0, addr, &mq_message(k as u8, i)).unwrap() {
                        ni::MqOutcome::Accepted { .. } => {}
                        o => panic!("sender {k}, message {i}: {o:?}"),
                    }
                }
            });
        }
        let (mut posted, mut answered, mut consumed) = (0, 0, 0u32);
        let t = std::time::Instant::now();
        start.wait();
        while answered < M {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the fabric's SENDs stalled"
            );
            let n = (raw.sq_free() as u64).min(M - posted);
            for i in posted..posted + n {
                raw.put(&Request {
                    opcode: op::MQ_SEND,
                    rank: 0,
                    addr: buf_iova + i * 64,
                    len: 64,
                    key: addr.key,
                    tag: addr.offset,
                    user: i + 1,
                    ..Default::default()
                });
            }
            posted += n;
            raw.publish().unwrap();
            // Take completions as they come, or the device stops taking requests.
            let (_, cq, _, entries) = raw.cq.as_ref().unwrap();
            let got = raw.cq_written(consumed);
            for k in 0..got {
                let mut e = [0u8; 64];
                let at = (consumed.wrapping_add(k) % entries) as u64 * ENTRY_SIZE;
                cq.read(at as usize, &mut e);
                let c = Completion::decode(&e);
                if c.opcode == op::MQ_SEND {
                    assert_eq!(c.status, 0, "the fabric's SEND {} failed: {c:?}", c.user);
                    answered += 1;
                }
            }
            consumed = consumed.wrapping_add(got);
            raw.ctl(ctrl::CQ_HEAD).store(consumed, Ordering::Release);
            if n == 0 && got == 0 {
                std::thread::yield_now();
            }
        }
    });

    assert_eq!(mqcw::tail(q.mqcw()), 3 * M + 1, "Tail counts every message");
    let msgs = q.take();
    assert_eq!(msgs.len() as u64, 3 * M);
    let mut next = [0u64; 4];
    for (slot, m) in msgs.iter().enumerate() {
        let sender = m[0];
        assert!(
            (1..=3).contains(&sender),
            "slot {}: sender {sender}",
            slot + 1
        );
        let seq = u64::from_le_bytes(m[1..9].try_into().unwrap());
        assert_eq!(
            *m,
            mq_message(sender, seq),
            "slot {}: a torn or foreign message",
            slot + 1
        );
        assert_eq!(seq, next[sender as usize], "sender {sender} out of order");
        next[sender as usize] += 1;
    }
    assert_eq!(d.counter(0, "mq_stored"), 3 * M);
    assert_eq!(d.counter(0, "mq_rejected"), 0);
    for n in 1..4 {
        assert_eq!(d.counter(n, "mq_sends"), M, "NI {n}");
        assert_eq!(d.counter(n, "mq_lock_timeouts"), 0, "NI {n}");
    }
    let direct = d.counter(1, "window_mq_sends") + d.counter(2, "window_mq_sends");
    assert!(direct > 0, "no SEND went member to member");
    assert_eq!(d.counter(3, "window_mq_sends"), 0);
    eprintln!(
        "{direct} of {} member SENDs stored member to member; the device waited for the \
         lock {} times",
        2 * M,
        d.counter(3, "mq_lock_waits")
    );
}

/// A member that holds a queue's arrival lock and never lets go (it may: it can map the
/// exported region) holds up the SENDs into that queue, and nothing else: the device leaves
/// such a SEND at the head of its sender's ring and goes on serving everyone, fails it with
/// `timeout` after the daemon's lock timeout, and frees a lock whose holder is gone.
#[test]
fn a_queue_lock_held_forever_holds_up_only_sends_to_that_queue() {
    use ni_abi::fastpath::mqcw;
    use ni_abi::window::{mq_lock, peer_region};
    use ni_tests::hostile::{FastPath, Map};
    use std::sync::atomic::{AtomicBool, Ordering};
    if window_off() {
        return;
    }
    let d = Daemon::start(3);
    // NI 2: the hostile member, a raw client.
    let mut raw = FastPath::attach(&d.sock(2)).unwrap();
    raw.setup_cq(0x4000_0000, 64).unwrap();
    let r0 = Ni::attach_path(&d.sock(0)).unwrap();
    let r1 = Ni::attach_path(&d.sock(1)).unwrap();
    for ni in [&r0, &r1] {
        ni.wait_for_partition(Duration::from_secs(10)).unwrap();
    }
    let q = r0.mq_create(8, 0).unwrap();
    let mut other = r0.mq_create(64, 0).unwrap();
    let (size, offset, fd) = raw
        .raw
        .region_info(peer_region(0, q.addr().key).unwrap())
        .expect("a member maps a peer's exported region");
    let m = Map::new(&fd.unwrap(), offset, size as usize).unwrap();
    let lock = |v: u64| m.write(mq_lock::OFFSET as usize, &v.to_le_bytes());
    // A value that names no member: nobody can tell its holder is gone.
    lock(0xDEAD_BEEF_0000_0000);

    let returned = AtomicBool::new(false);
    let (held, others_done) = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let t0 = std::time::Instant::now();
            let r = r1.mq_send(0, q.addr(), &mq_message(1, 0));
            returned.store(true, Ordering::SeqCst);
            (r, t0.elapsed())
        });
        // Once the device holds that SEND, everyone else goes on: NOOPs through the
        // poller, SENDs into the other queue on both of its paths.
        let t = (t, std::time::Instant::now());
        while d.counter(1, "mq_lock_waits") == 0 {
            assert!(
                t.1.elapsed() < Duration::from_secs(10),
                "the SEND never waited"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 0..50 {
            r0.ping(1).unwrap();
            assert!(matches!(
                r0.mq_send(0, other.addr(), &mq_message(0, i)).unwrap(),
                ni::MqOutcome::Accepted { .. }
            ));
        }
        let others_done = !returned.load(Ordering::SeqCst);
        (t.0.join().unwrap(), others_done)
    });
    assert!(
        others_done,
        "the others waited for the SEND into the locked queue"
    );
    let (r, waited) = held;
    assert_eq!(
        r.as_ref().err().and_then(status),
        Some(Status::Timeout),
        "{r:?}"
    );
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert_eq!(other.take().len(), 50);
    assert_eq!(
        mqcw::tail(q.mqcw()),
        1,
        "nothing stored under someone else's lock"
    );
    assert_eq!(d.counter(1, "mq_lock_timeouts"), 1);
    assert_eq!(d.counter(1, "err_timeout"), 1);

    // A lock naming a member whose client is not up (NI 2 never came up in the window):
    // the device frees it and stores.
    lock(mq_lock::member(2, 0));
    assert_eq!(
        r1.mq_send(0, q.addr(), &mq_message(1, 1)).unwrap(),
        ni::MqOutcome::Accepted { tail: 2 }
    );
    assert_eq!(d.counter(0, "mq_lock_breaks"), 1);
    // Free again: member to member.
    let before = d.counter(1, "window_mq_sends");
    assert_eq!(
        r1.mq_send(0, q.addr(), &mq_message(1, 2)).unwrap(),
        ni::MqOutcome::Accepted { tail: 3 }
    );
    assert_eq!(d.counter(1, "window_mq_sends"), before + 1);
    let mut q = q;
    let got = q.take();
    assert_eq!(got, vec![mq_message(1, 1), mq_message(1, 2)]);
}

/// HMM-148-0 p. 8 "ERS Codes" with a queue whose arrival lock is held (fastpath.md, "Message
/// queues in the window"): an E-register SEND into it stays in flight — its block EMPTY,
/// nothing stored — until the lock is free, then lands as any SEND; held past the daemon's
/// lock timeout it ends FULL_F with `QueueLocked` in CMD_ERROR. Both ends are raw clients
/// written from the seeds: the receiver exports the region holding its queue, the sender
/// drives its E registers.
#[test]
fn an_e_register_send_stays_in_flight_while_the_queue_lock_is_held() {
    use ni_abi::fastpath::{access, mqcw, op, Request};
    use ni_abi::pci::BAR0_REGION;
    use ni_abi::t3e::{self, ers, gva, seg};
    use ni_abi::window::mq_lock;
    use ni_tests::hostile::{sealed_memfd, FastPath, Map};
    use std::os::fd::AsRawFd;
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let t3e_write = |fp: &mut FastPath, off: u64, v: u64| {
        fp.raw
            .region_write(BAR0_REGION, t3e::PAGE + off, &v.to_le_bytes())
            .unwrap()
    };
    let t3e_read = |fp: &mut FastPath, off: u64| {
        let b = fp.raw.region_read(BAR0_REGION, t3e::PAGE + off, 8).unwrap();
        u64::from_le_bytes(b[..8].try_into().unwrap())
    };
    let ers_of = |fp: &mut FastPath, e: u32| {
        (t3e_read(fp, t3e::ERS + 8 * (e / 32) as u64) >> (2 * (e % 32))) & 0b11
    };

    // The receiver, NI 1: 64 KiB of its memory, exported, and segment 1 over it.
    let mut b = FastPath::attach(&d.sock(1)).unwrap();
    b.setup_cq(0x4000_0000, 64).unwrap();
    const IOVA: u64 = 0x5000_0000;
    const LEN: u64 = 0x1_0000;
    const Q: u64 = 0x1000;
    let mem = sealed_memfd(LEN);
    assert!(!b
        .raw
        .dma_map(Some(mem.as_raw_fd()), 0, IOVA, LEN)
        .unwrap()
        .is_error());
    let m = Map::new(&mem, 0, LEN as usize).unwrap();
    b.put(&Request {
        opcode: op::REG_MR,
        addr: IOVA,
        len: LEN,
        key: 7,
        access: access::ALL | access::EXPORT,
        ..Default::default()
    });
    b.publish().unwrap();
    let t = std::time::Instant::now();
    while b.cq_written(0) < 2 {
        assert!(t.elapsed() < Duration::from_secs(10), "REG_MR unanswered");
        std::thread::sleep(Duration::from_millis(1));
    }
    t3e_write(&mut b, t3e::SEGMENT + t3e::SEGMENT_STRIDE, IOVA);
    t3e_write(
        &mut b,
        t3e::SEGMENT + t3e::SEGMENT_STRIDE + 8,
        LEN | seg::REMOTE_READ | seg::REMOTE_WRITE | seg::MESSAGE_QUEUE,
    );
    m.write(Q as usize, &mqcw::make(false, 1, 8, 0).to_le_bytes());
    let lock = |v: u64| m.write((Q + mq_lock::OFFSET) as usize, &v.to_le_bytes());
    let word = |off: u64| {
        let mut w = [0u8; 8];
        m.read(off as usize, &mut w);
        u64::from_le_bytes(w)
    };
    lock(0xDEAD_BEEF_0000_0000);

    // The sender, NI 0: E[16..24] SENT to PE 1's MQCW at segment 1, offset Q.
    let mut a = FastPath::attach(&d.sock(0)).unwrap();
    a.setup_cq(0x4000_0000, 64).unwrap();
    let words: [u64; 8] = std::array::from_fn(|i| 0x0101_0101_0101_0101 * (i as u64 + 1));
    let send = |a: &mut FastPath| {
        for (i, w) in words.iter().enumerate() {
            t3e_write(a, t3e::E_REGS + 8 * (16 + i as u64), *w);
        }
        t3e_write(a, t3e::CMD_INDEX, 1 << 52);
        t3e_write(a, t3e::CMD_BASE, gva::make(1, Q));
        t3e_write(
            a,
            t3e::CMD_ISSUE,
            t3e::op::SEND | (16 << t3e::ISSUE_EREG_SHIFT),
        );
    };
    send(&mut a);
    let t = std::time::Instant::now();
    while d.counter(0, "mq_lock_waits") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the SEND never waited"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        ers_of(&mut a, 16),
        ers::EMPTY,
        "in flight while the lock is held"
    );
    assert_eq!(
        mqcw::tail(word(Q)),
        1,
        "nothing stored under someone else's lock"
    );
    lock(mq_lock::FREE);
    let t = std::time::Instant::now();
    while ers_of(&mut a, 16) == ers::EMPTY {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the SEND never landed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(ers_of(&mut a, 16), ers::FULL, "SEND-accepted");
    assert_eq!(mqcw::tail(word(Q)), 2);
    let slot: Vec<u64> = (0..8).map(|i| word(Q + 64 + 8 * i)).collect();
    assert_eq!(slot, words, "slot 1 = MQCW + 64·Tail, bit for bit");

    // Held for good: FULL_F and QueueLocked once the daemon gives up.
    lock(0xDEAD_BEEF_0000_0000);
    let t = std::time::Instant::now();
    send(&mut a);
    while ers_of(&mut a, 16) == ers::EMPTY {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the SEND never ended"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(ers_of(&mut a, 16), ers::FULL_F);
    let err = t3e_read(&mut a, t3e::CMD_ERROR);
    assert_eq!(
        t3e::Error::from_u16(err as u16),
        Some(t3e::Error::QueueLocked),
        "CMD_ERROR {err:#x}"
    );
    assert_eq!(mqcw::tail(word(Q)), 2);
    assert_eq!(d.counter(0, "mq_lock_timeouts"), 1);
    assert_eq!(d.counter(1, "mq_stored"), 1);
}

/// Large allreduce through exported scratch (fastpath.md, "Large allreduce in the window")
/// when a member comes back as a new client between operations: the survivor is one
/// operation further in its scratch halves than the newcomer, and the result must still be
/// every member's data, reduced in rank order.
#[test]
fn a_large_allreduce_after_a_member_came_back_as_a_new_client() {
    use ni::ReduceOp;
    if window_off() {
        return;
    }
    // Past the window's two slots (`PIECES_MAX`).
    const N: usize = 2000;
    let d = Daemon::start(2);
    let value = |rank: usize, round: usize, i: usize| (rank * 1_000_000 + round * 1000 + i) as i64;
    let run = |ni: &Ni, round: usize| {
        let me = ni.rank() as usize;
        let send = ni.alloc(N * 8).unwrap();
        let recv = ni.alloc(N * 8).unwrap();
        let mine: Vec<u8> = (0..N)
            .flat_map(|i| value(me, round, i).to_le_bytes())
            .collect();
        send.write_at(0, &mine);
        ni.allreduce::<i64>(ReduceOp::Sum, &send, 0, &recv, 0, N)
            .unwrap();
        let mut got = vec![0u8; N * 8];
        recv.read_at(0, &mut got);
        for i in 0..N {
            let g = i64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(
                g,
                value(0, round, i) + value(1, round, i),
                "round {round} element {i}"
            );
        }
    };
    let a = Ni::attach_path(&d.sock(0)).unwrap();
    {
        let b = Ni::attach_path(&d.sock(1)).unwrap();
        for ni in [&a, &b] {
            ni.wait_for_partition(Duration::from_secs(10)).unwrap();
        }
        // One operation: the survivor's next uses its other half.
        std::thread::scope(|s| {
            s.spawn(|| run(&b, 0));
            run(&a, 0);
        });
    }
    let b = Ni::attach_path(&d.sock(1)).unwrap();
    b.wait_for_partition(Duration::from_secs(10)).unwrap();
    for round in 1..4 {
        std::thread::scope(|s| {
            s.spawn(|| run(&b, round));
            run(&a, round);
        });
    }
    assert_eq!(d.counter(0, "window_large_allreduces"), 4);
}

/// A sender whose messages wait for room in a full ring and that went to sleep on its
/// interrupt is woken by the receiver when it takes them (`fastpath.md`, "Waiting and
/// waking": `SLEEPING` bit 1), not by its wait's 20 ms timeout: the receiver, which sends
/// nothing itself, posts the `WAKE`.
#[test]
fn a_sender_asleep_waiting_for_room_is_woken_by_the_receiver() {
    if window_off() {
        return;
    }
    const LEN: usize = 4096;
    // The ring (two members) holds 64 of these: half again as many wait for room.
    let fit = ni_abi::window::ring_slots(2) / ni_abi::window::slots_for(LEN as u64);
    let n = fit as usize * 3 / 2;
    let d = Daemon::start(2);
    let a = Ni::attach_path(&d.sock(0)).unwrap();
    let b = Ni::attach_path(&d.sock(1)).unwrap();
    for ni in [&a, &b] {
        ni.wait_for_partition(Duration::from_secs(10)).unwrap();
    }
    let wakes_before = d.counter(1, "wakes");
    std::thread::scope(|s| {
        s.spawn(|| {
            let buf = a.alloc(n * LEN).unwrap();
            for i in 0..n {
                buf.write_at(i * LEN, &[i as u8; LEN]);
            }
            let ops: Vec<_> = (0..n)
                .map(|i| a.isend(1, &buf, i * LEN..(i + 1) * LEN, i as u64).unwrap())
                .collect();
            assert!(!ops.last().unwrap().ready(), "the last send waits for room");
            for o in ops {
                a.wait(o).unwrap();
            }
        });
        // Long enough for the sender to yield, then block on its interrupt.
        std::thread::sleep(Duration::from_millis(300));
        let buf = b.alloc(LEN).unwrap();
        for i in 0..n {
            let got = b.recv(Some(0), &buf, 0..LEN, i as u64, u64::MAX).unwrap();
            assert_eq!(got.len as usize, LEN);
            let mut data = vec![0u8; LEN];
            buf.read_at(0, &mut data);
            assert!(data.iter().all(|&x| x == i as u8), "message {i}");
        }
    });
    assert!(
        d.counter(1, "wakes") > wakes_before,
        "the receiver woke the sender waiting for room"
    );
    assert_eq!(d.counter(0, "window_sends"), n as u64);
}

/// A receive that takes its message straight from the window ring, in the call that posts
/// it, takes the active messages before it too (same ring, in order): their handlers run
/// in that call, not at some later wait (`Ni::am_register`: handlers run from the calls
/// that take messages).
#[test]
fn a_receive_taking_its_message_from_the_ring_runs_the_handlers_before_it() {
    if window_off() {
        return;
    }
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let ran = Arc::new(AtomicU32::new(0));
    let r = ran.clone();
    b.am_register(5, move |src, payload| {
        assert_eq!((src, payload), (0, &b"before"[..]));
        r.fetch_add(1, Ordering::SeqCst);
    });
    let sbuf = a.alloc(64).unwrap();
    sbuf.write_at(0, b"after");
    // Before the sends: registering memory makes progress, which would take them.
    let rbuf = b.alloc(64).unwrap();
    a.am_send(1, 5, b"before").unwrap();
    a.send(1, &sbuf, 0..5, 9).unwrap();
    // Both are in the ring once the sends returned (eager: they complete there).
    let o = b.irecv(Some(0), &rbuf, 0..64, 9, u64::MAX).unwrap();
    assert!(
        o.ready(),
        "the message was in the ring: taken by the receive itself"
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the handler ran inside irecv"
    );
    let got = b.wait(o).unwrap();
    assert_eq!(got.len, 5);
    let mut m = [0u8; 5];
    rbuf.read_at(0, &mut m);
    assert_eq!(&m, b"after");
}

/// A wait on the only posted receive takes its message straight from the ring when it is
/// the next one there, and only then: an active message, a message with another tag or one
/// longer than its buffer ahead of it, or a second receive posted, and the wait leaves the
/// ring to the progress pass, which gives each message where it belongs (the handler runs,
/// the other tags wait unexpected for their receives, in order; the truncated one fails
/// with its length). Checked over the window and the shared window alike.
#[test]
fn a_wait_takes_its_message_from_the_ring_only_when_it_is_next() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let ran = Arc::new(AtomicU32::new(0));
    let r = ran.clone();
    b.am_register(3, move |src, payload| {
        assert_eq!((src, payload), (0, &b"am"[..]));
        r.fetch_add(1, Ordering::SeqCst);
    });
    let sbuf = a.alloc(256).unwrap();
    let rbuf = b.alloc(64).unwrap();
    // Sends on the fabric's path end when their receive took them: all wait at the end.
    let sent = std::cell::RefCell::new(vec![]);
    let send = |tag: u64, text: &[u8]| {
        let at = sent.borrow().len() % 8 * 32;
        sbuf.write_at(at, text);
        let o = a.isend(1, &sbuf, at..at + text.len(), tag).unwrap();
        sent.borrow_mut().push(o);
    };
    let read = |len: usize| {
        let mut m = vec![0u8; len];
        rbuf.read_at(0, &mut m);
        m
    };
    for round in 0..4 {
        // Posted before anything is sent: the wait, not irecv, meets the messages.
        let want = b.irecv(Some(0), &rbuf, 0..16, 7, u64::MAX).unwrap();
        assert!(!want.ready());
        match round {
            0 => send(7, b"first"),
            1 => {
                a.am_send(1, 3, b"am").unwrap();
                send(7, b"after the am");
            }
            2 => {
                send(8, b"other tag");
                send(8, b"other again");
                send(7, b"mine");
            }
            _ => {
                send(7, b"longer than sixteen bytes");
            }
        }
        match (round, b.wait(want)) {
            (0, Ok(got)) => assert_eq!((got.len, read(5)), (5, b"first".to_vec())),
            (1, Ok(got)) => {
                assert_eq!((got.len, read(12)), (12, b"after the am".to_vec()));
                assert_eq!(ran.load(Ordering::SeqCst), 1, "the handler ran in the wait");
            }
            (2, Ok(got)) => {
                assert_eq!((got.len, read(4)), (4, b"mine".to_vec()));
                for text in [&b"other tag"[..], b"other again"] {
                    let got = b.recv(Some(0), &rbuf, 0..16, 8, u64::MAX).unwrap();
                    assert_eq!(
                        (got.len as usize, read(text.len())),
                        (text.len(), text.to_vec())
                    );
                }
            }
            (3, Err(e)) => {
                assert_eq!(status(&e), Some(Status::Truncated), "{e}");
                assert_eq!(read(16), b"longer than sixt".to_vec());
            }
            (round, got) => panic!("round {round}: {got:?}"),
        }
    }
    // Two receives posted: each gets its own message, in the order of the sends.
    let first = b.irecv(Some(0), &rbuf, 0..8, 5, u64::MAX).unwrap();
    let rbuf2 = b.alloc(64).unwrap();
    let second = b.irecv(Some(0), &rbuf2, 0..8, 6, u64::MAX).unwrap();
    send(6, b"six");
    send(5, b"five");
    assert_eq!(b.wait(second).unwrap().len, 3);
    assert_eq!(b.wait(first).unwrap().len, 4);
    let mut six = [0u8; 3];
    rbuf2.read_at(0, &mut six);
    assert_eq!((&six, read(4)), (b"six", b"five".to_vec()));
    for o in sent.take() {
        // The truncated one ends as its receive did.
        let _ = a.wait(o);
    }
}

/// Waits on the one posted receive while a third member keeps coming and going: each time
/// `GEN` moves, the wait's next look runs a progress pass (`w_sync`) before its own take from
/// the ring, and that pass may give the receive its message, or queue a later one as
/// unexpected (`fastpath.md`, "Waiting and waking"). Messages come two at a time, so one is
/// often behind the other; every one reaches its receive, in order, whole. (The exact
/// interleaving the wait's second look at its receive guards — a pass inside the wait that
/// takes the message, and another message landing just after — is too narrow to aim at.)
#[test]
fn waits_take_every_message_in_order_while_a_member_comes_and_goes() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    const N: u64 = 50_000;
    const ROUND: u64 = 1000;
    const LEN: usize = 24;
    let d = Daemon::start(3);
    let a = Ni::attach_path(&d.sock(0)).unwrap();
    let b = Ni::attach_path(&d.sock(1)).unwrap();
    let t = std::time::Instant::now();
    while a.peers_up() < 2 || b.peers_up() < 2 {
        assert!(t.elapsed() < Duration::from_secs(10), "NIs 0 and 1 up");
        std::thread::sleep(Duration::from_millis(1));
    }
    let done = AtomicBool::new(false);
    let comings = AtomicU32::new(0);
    let message = |i: u64| -> Vec<u8> { (0..LEN as u64).map(|k| (i * 31 + k) as u8).collect() };
    // Rounds of messages until N went and the third member came and went a few times. A
    // failure on either side ends the rounds (each side still meets the other at the
    // round's end, so nothing hangs), then the test.
    let (go_on, round) = (AtomicBool::new(true), std::sync::Barrier::new(2));
    let failures = std::sync::Mutex::new(Vec::<String>::new());
    let fail = |e: String| failures.lock().unwrap().push(e);
    let wait = |ni: &Ni, o: ni::Op, what: String| {
        ni.wait_timeout(o, Some(Duration::from_secs(30)))
            .map_err(|e| format!("{what}: {e}"))
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                match Ni::attach_path(&d.sock(2)) {
                    Ok(c) => {
                        comings.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(1));
                        drop(c);
                    }
                    Err(e) => {
                        fail(format!("member 2 attaches: {e}"));
                        return;
                    }
                }
            }
        });
        s.spawn(|| {
            let buf = b.alloc(2 * LEN).unwrap();
            let mut i = 0;
            loop {
                for _ in 0..ROUND / 2 {
                    let (mut ops, mut err) = (vec![], None);
                    for k in 0..2 {
                        let at = k * LEN;
                        buf.write_at(at, &message(i));
                        match b.isend(0, &buf, at..at + LEN, 9) {
                            Ok(o) => ops.push((i, o)),
                            Err(e) => err = Some(format!("send {i}: {e}")),
                        }
                        i += 1;
                    }
                    for (j, o) in ops {
                        if let Err(e) = wait(&b, o, format!("send {j}")) {
                            err.get_or_insert(e);
                        }
                    }
                    if let Some(e) = err {
                        fail(e);
                        break;
                    }
                }
                round.wait();
                if !go_on.load(Ordering::Relaxed) {
                    break;
                }
            }
        });
        let rbuf = a.alloc(64).unwrap();
        let take = |i: u64| -> Result<(), String> {
            let o = a
                .irecv(Some(1), &rbuf, 0..64, 9, u64::MAX)
                .map_err(|e| format!("receive {i}: {e}"))?;
            let got = wait(&a, o, format!("message {i}"))?;
            let mut m = vec![0u8; LEN];
            rbuf.read_at(0, &mut m);
            if (got.len as usize, &m) != (LEN, &message(i)) {
                return Err(format!("message {i}: {} bytes, {m:?}", got.len));
            }
            Ok(())
        };
        let mut i = 0;
        loop {
            for _ in 0..ROUND {
                if let Err(e) = take(i) {
                    fail(e);
                    break;
                }
                i += 1;
            }
            if t.elapsed() > Duration::from_secs(120) {
                fail("member 2 did not come and go three times in 120 s".into());
            }
            let more = i < N || comings.load(Ordering::Relaxed) < 3;
            go_on.store(
                failures.lock().unwrap().is_empty() && more,
                Ordering::Relaxed,
            );
            round.wait();
            if !go_on.load(Ordering::Relaxed) {
                break;
            }
        }
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(failures.into_inner().unwrap(), Vec::<String>::new());
}

/// A receiver blocked on its interrupt is woken by a sender that skips its store-load fence
/// (both on the daemon's host, registered for membarriers: the receiver's `SLEEPING` word
/// carries `SLEEPING_MEMBARRIER` and its membarrier before blocking stands for the sender's
/// fence; `fastpath.md`, "Waiting and waking"): the sender reads `SLEEPING` and posts the
/// `WAKE`. A round may see none: a receiver blocks 20 ms at a time, and one preempted
/// between two of those sleeps (a loaded machine) is not asleep when the message comes and
/// finds it itself. So 4 rounds each way, and each way at least one `WAKE`; a sender that
/// misreads the word posts none at all.
#[test]
fn a_receiver_asleep_is_woken_by_a_sender_that_skipped_its_fence() {
    if window_off() {
        return;
    }
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let mut woken = [0u32; 2];
    for round in 0..8u64 {
        let (tx, rx, from, to) = if round % 2 == 0 {
            (&a, &b, 0, 1)
        } else {
            (&b, &a, 1, 0)
        };
        let wakes_before = d.counter(from, "wakes");
        std::thread::scope(|s| {
            s.spawn(|| {
                let buf = rx.alloc(8).unwrap();
                let got = rx.recv(Some(from), &buf, 0..8, round, u64::MAX).unwrap();
                assert_eq!(got.len, 8);
                let mut v = [0u8; 8];
                buf.read_at(0, &mut v);
                assert_eq!(u64::from_le_bytes(v), round);
            });
            // Long enough for the receiver to yield for its 1 ms, then block.
            std::thread::sleep(Duration::from_millis(100));
            let buf = tx.alloc(8).unwrap();
            buf.write_at(0, &round.to_le_bytes());
            tx.send(to, &buf, 0..8, round).unwrap();
        });
        if d.counter(from, "wakes") > wakes_before {
            woken[from as usize] += 1;
        }
    }
    assert!(
        woken.iter().all(|&n| n > 0),
        "rounds in which the sender woke the receiver asleep, from 0 and from 1: {woken:?}"
    );
}

/// A handler that owns a region of its own `Ni`, replaced by another: the old one (and its
/// region, whose drop takes the NI's lock) goes after the registration let the lock go —
/// dropped under it, the region's drop would lock the NI again inside its own lock (a
/// deadlock with a mutex; two guards at once with the NI's lock biased to its thread, which
/// debug builds assert against). Also when it is replaced while it runs.
/// Active messages queued in a ring behind each other, with eager ones among them, all
/// arrive, in order, each once: a progress pass that took an active message whose next
/// slot starts a cache line leaves the rest to the next pass (the handler first,
/// `Inner::w_progress`), and no later call loses or reorders them — a pass, a receive, a
/// wait. MLINK ROP (MIT METRO §11.3): each queued for its target, one handler run a message.
#[test]
fn active_messages_queued_in_a_ring_all_run_in_order_with_the_messages_among_them() {
    use std::sync::{Arc, Mutex};
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let seen = Arc::new(Mutex::new(Vec::<u32>::new()));
    let s = seen.clone();
    b.am_register(4, move |src, payload| {
        assert_eq!(src, 0);
        s.lock()
            .unwrap()
            .push(u32::from_le_bytes(payload[..4].try_into().unwrap()));
    });
    let sbuf = a.alloc(64).unwrap();
    let rbuf = b.alloc(64).unwrap();
    const N: u32 = 45;
    let mut sends = vec![];
    for k in 0..N {
        // Payloads of 4 and 40 bytes: one slot each, inline or in the payload area.
        let mut m = vec![0u8; if k % 2 == 0 { 4 } else { 40 }];
        m[..4].copy_from_slice(&k.to_le_bytes());
        a.am_send(1, 4, &m).unwrap();
        if k % 10 == 9 {
            // Its own bytes: on the fabric's path the NI reads them when the receive comes.
            let at = k as usize / 10 * 4;
            sbuf.write_at(at, &k.to_le_bytes());
            sends.push(a.isend(1, &sbuf, at..at + 4, 100 + k as u64).unwrap());
        }
    }
    // The tagged messages, each behind ten active messages (on the fabric's path their
    // sends end once the receives took them).
    for k in (9..N).step_by(10) {
        b.recv(Some(0), &rbuf, 0..4, 100 + k as u64, u64::MAX)
            .unwrap();
        let mut got = [0u8; 4];
        rbuf.read_at(0, &mut got);
        assert_eq!(u32::from_le_bytes(got), k);
    }
    for o in sends {
        a.wait(o).unwrap();
    }
    let t = std::time::Instant::now();
    while seen.lock().unwrap().len() < N as usize {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "active messages left in the ring: {} of {N} ran",
            seen.lock().unwrap().len()
        );
        b.progress().unwrap();
    }
    assert_eq!(*seen.lock().unwrap(), (0..N).collect::<Vec<_>>());
    for _ in 0..10 {
        b.progress().unwrap();
    }
    assert_eq!(seen.lock().unwrap().len(), N as usize, "each ran once");
}

/// A handler that panics ends the dispatcher it ran in, not later ones: the panic reaches
/// the caller of `progress`, and the next message's handler (the same handler, put back
/// by the next registration) runs at the next `progress`, as do messages that were queued
/// behind the one that panicked.
#[test]
fn a_handler_that_panics_stops_no_later_dispatch() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let runs = Arc::new(AtomicU32::new(0));
    let count = runs.clone();
    b.am_register(9, move |_, data| {
        count.fetch_add(1, Ordering::SeqCst);
        assert!(data != b"boom", "the handler panics on purpose");
    });
    for m in [&b"boom"[..], b"one", b"two"] {
        a.am_send(1, 9, m).unwrap();
    }
    let t = std::time::Instant::now();
    let mut panicked = false;
    while runs.load(Ordering::SeqCst) < 1 {
        assert!(t.elapsed() < Duration::from_secs(10), "handler never ran");
        panicked |= catch_unwind(AssertUnwindSafe(|| b.progress().unwrap())).is_err();
    }
    assert!(
        panicked,
        "the handler's panic reaches the caller of progress"
    );
    // The handler was lost with its panic (it was taken out of its slot to run): a new
    // registration takes the messages queued behind.
    let count = runs.clone();
    b.am_register(9, move |_, _| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    while runs.load(Ordering::SeqCst) < 3 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "later messages never ran"
        );
        b.progress().unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[test]
fn a_handler_owning_a_region_can_be_replaced() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let kept = b.alloc(64).unwrap();
    b.am_register(7, move |_, data| kept.write_at(0, data));
    b.am_register(7, |_, _| {});
    // Replaced from inside itself: `run_handlers` drops the old one unlocked too.
    let b = Arc::new(b);
    let runs = Arc::new(AtomicU32::new(0));
    let (me, count, kept) = (Arc::downgrade(&b), runs.clone(), b.alloc(64).unwrap());
    b.am_register(8, move |_, data| {
        kept.write_at(0, data);
        count.fetch_add(1, Ordering::SeqCst);
        let count = count.clone();
        if let Some(ni) = me.upgrade() {
            ni.am_register(8, move |_, _| {
                count.fetch_add(10, Ordering::SeqCst);
            });
        }
    });
    for want in [1, 11] {
        a.am_send(1, 8, b"x").unwrap();
        let t = std::time::Instant::now();
        while runs.load(Ordering::SeqCst) < want {
            assert!(t.elapsed() < Duration::from_secs(10), "handler never ran");
            b.progress().unwrap();
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 11);
}

/// A root's broadcasts in the rings (`fastpath.md`, "Collectives in the rings") run
/// ahead of a member that has not called them yet, but only as far as that member keeps
/// (1 MiB of them) and its ring holds: then the root waits, as a blocking send waits for
/// room. When the member calls the broadcasts it gets every vector, in order.
#[test]
fn a_root_runs_ahead_of_a_member_only_as_far_as_it_keeps_and_its_ring_holds() {
    if window_off() {
        return;
    }
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const N: usize = 600;
    const COUNT: usize = 504; // 4032 bytes: the most a broadcast sends in a ring
    let d = Daemon::start(3);
    let nis: Vec<Arc<Ni>> = (0..3)
        .map(|r| Arc::new(Ni::attach_path(&d.sock(r)).unwrap()))
        .collect();
    for n in &nis {
        n.wait_for_partition(Duration::from_secs(10)).unwrap();
    }
    let value = |k: usize, i: usize| (k * 1_000_003 + i) as u64;
    let done = Arc::new(AtomicUsize::new(0));
    // The root, and member 2 (which takes each broadcast as it comes).
    let threads: Vec<_> = [0usize, 2]
        .into_iter()
        .map(|r| {
            let (ni, done) = (nis[r].clone(), done.clone());
            std::thread::spawn(move || {
                let buf = ni.alloc(COUNT * 8).unwrap();
                for k in 0..N {
                    if r == 0 {
                        let v: Vec<u8> =
                            (0..COUNT).flat_map(|i| value(k, i).to_le_bytes()).collect();
                        buf.write_at(0, &v);
                    }
                    ni.broadcast::<u64>(0, &buf, 0, COUNT).unwrap();
                    if r == 0 {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // Member 1 does not call the broadcasts yet, only progress passes (as any call of
    // libni runs them), which take the root's vectors out of its ring up to what it keeps.
    let b = &nis[1];
    let rbuf = b.alloc(COUNT * 8).unwrap();
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(700) {
        b.progress().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let ahead = done.load(Ordering::Relaxed);
    // What member 1 keeps (1 MiB, a vector counting 64 bytes more) and its ring holds,
    // and the one broadcast that waits for room.
    let kept = (1 << 20) / (COUNT * 8 + 64);
    let ring =
        (ni_abi::window::ring_slots(3) / ni_abi::window::slots_for(COUNT as u64 * 8)) as usize;
    assert!(
        ahead >= kept && ahead <= kept + ring + 1,
        "the root ran {ahead} broadcasts ahead (kept {kept}, ring {ring})"
    );
    for k in 0..N {
        rbuf.write_at(0, &[0u8; COUNT * 8]);
        b.broadcast::<u64>(0, &rbuf, 0, COUNT).unwrap();
        let mut got = vec![0u8; COUNT * 8];
        rbuf.read_at(0, &mut got);
        let want: Vec<u8> = (0..COUNT).flat_map(|i| value(k, i).to_le_bytes()).collect();
        assert!(got == want, "broadcast {k}");
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(done.load(Ordering::Relaxed), N);
}
