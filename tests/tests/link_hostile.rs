//! Issue 17: a peer daemon is another administrator's process on another machine, so the link
//! between daemons takes nothing on trust (device/abi/links.md, "Frames"). A hostile peer
//! connects to host a's link port — with garbage, with an oversized frame, with another
//! fabric's HELLO, claiming a host that is connected, and finally as the fabric's idle host c
//! with frames that do not add up — while honest ranks on hosts a and b exchange checked
//! messages. Everything hostile is refused and counted; the honest traffic never notices.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ni_device::link::wire::{door, Msg, HEADER, MAX_FRAME};
use ni_tests::{assert_ok, binary, finish, Daemon};

/// Three distinct free ports: all held until all are chosen, so none is another given out
/// again.
fn free_ports() -> (u16, u16, u16) {
    let held: Vec<_> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let port = |i: usize| held[i].local_addr().unwrap().port();
    (port(0), port(1), port(2))
}

/// The digest daemons compare in HELLO: FNV-1a of the description's text.
fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn hosts(d: &Daemon) -> serde_json::Value {
    d.control(r#"{"version":1,"request":"hosts"}"#)
}

fn counter(h: &serde_json::Value, name: &str) -> u64 {
    h["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0] == name)
        .unwrap_or_else(|| panic!("no counter {name}: {h}"))[1]
        .as_u64()
        .unwrap()
}

fn up(h: &serde_json::Value, name: &str) -> bool {
    h["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["name"] == name && x["state"] == "up")
}

/// Whether the daemon closes `s` within 3 s (end of stream or reset).
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
    false
}

fn send(s: &mut TcpStream, m: &Msg) {
    let mut b = Vec::new();
    m.encode(&mut b);
    s.write_all(&b).unwrap();
}

/// What the daemon sent and the test has not looked at yet: frames that arrive together with
/// an answer belong to the next one.
static PENDING: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// Frames from `s` until one that `want` accepts (others skipped), 10 s at most. It sends a
/// heartbeat every 100 ms meanwhile, whatever arrives: a peer silent for `DEAD` is dead to
/// the daemon.
fn answer(s: &mut TcpStream, want: impl Fn(&Msg) -> bool) -> Msg {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = PENDING.lock().unwrap();
    let t = Instant::now();
    let mut beat = Instant::now();
    loop {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no answer within 10 s"
        );
        while let Ok(Some(n)) = Msg::frame_len(&buf) {
            if buf.len() < n {
                break;
            }
            let m = Msg::decode(&buf[..n]).expect("the daemon's frames decode");
            buf.drain(..n);
            if want(&m) {
                return m;
            }
        }
        if beat.elapsed() >= Duration::from_millis(100) {
            send(s, &Msg::Heartbeat);
            beat = Instant::now();
        }
        let mut chunk = [0u8; 65536];
        match s.read(&mut chunk) {
            Ok(0) => panic!("the daemon closed an honest-looking connection"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading from the daemon: {e}"),
        }
    }
}

#[test]
fn a_hostile_peer_daemon_is_refused_and_counted_while_honest_traffic_carries_on() {
    let (pa, pb, pc) = free_ports();
    let desc = format!(
        "[[host]]\nname = \"a\"\nlink = \"127.0.0.1:{pa}\"\nnis = 2\n\n\
         [[host]]\nname = \"b\"\nlink = \"127.0.0.1:{pb}\"\nnis = 1\n\n\
         [[host]]\nname = \"c\"\nlink = \"127.0.0.1:{pc}\"\nnis = 1\n\n\
         [[partition]]\nname = \"pair\"\nnodes = [0, 2]\n\n\
         [[partition]]\nname = \"ca\"\nnodes = [1, 3]\n"
    );
    let a = Daemon::start_fabric(&desc, "a");
    let b = Daemon::start_fabric(&desc, "b");
    let t = Instant::now();
    while !up(&hosts(&a), "b") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "a and b never linked: {}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Honest ranks: NI 0 on host a, NI 2 on host b, 0 B..64 MiB checked both ways.
    let rank = binary("ni-test-rank");
    let r0 = a.rank(&rank, 0, "integrity");
    let r1 = b.rank(&rank, 2, "integrity");

    let link_a = format!("127.0.0.1:{pa}");
    // 1. Garbage.
    let mut s = TcpStream::connect(&link_a).unwrap();
    // A header of an unknown kind, then noise.
    let mut junk = vec![100, 0, 0, 0, 0xEE, 0, 0, 0];
    junk.extend((0..65536u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    let _ = s.write_all(&junk);
    assert!(closed_by_peer(&mut s), "garbage was not refused");
    // 2. A frame longer than any frame.
    let mut s = TcpStream::connect(&link_a).unwrap();
    let mut h = vec![0u8; HEADER];
    h[..4].copy_from_slice(&((MAX_FRAME * 4) as u32).to_le_bytes());
    h[4] = 4;
    s.write_all(&h).unwrap();
    assert!(closed_by_peer(&mut s), "an oversized frame was not refused");
    // 3. Another fabric's HELLO.
    let mut s = TcpStream::connect(&link_a).unwrap();
    send(
        &mut s,
        &Msg::Hello {
            host: 2,
            digest: digest(&desc) ^ 1,
            epoch: 0,
        },
    );
    assert!(
        closed_by_peer(&mut s),
        "another fabric's HELLO was not refused"
    );
    // 4. Claiming host b, which is connected: refused, and b stays connected.
    let mut s = TcpStream::connect(&link_a).unwrap();
    send(
        &mut s,
        &Msg::Hello {
            host: 1,
            digest: digest(&desc),
            epoch: 0,
        },
    );
    assert!(closed_by_peer(&mut s), "a second host b was accepted");
    assert!(
        up(&hosts(&a), "b"),
        "the real host b lost its link to a pretender"
    );

    // 5. As host c, with this fabric's HELLO: frames that do not add up.
    let mut s = TcpStream::connect(&link_a).unwrap();
    send(
        &mut s,
        &Msg::Hello {
            host: 2,
            digest: digest(&desc),
            epoch: 0,
        },
    );
    let bad_before = counter(&hosts(&a), "remote_bad_frames");
    // Claiming to send from a's own NI.
    send(
        &mut s,
        &Msg::Send {
            id: 1,
            src: 0,
            dst: 0,
            src_rank: 0,
            tag: 0,
            len: 4,
            eager: true,
            payload: vec![1; 4],
        },
    );
    let done = |id: u64| move |m: &Msg| matches!(m, Msg::Done { id: i, .. } if *i == id);
    assert!(matches!(answer(&mut s, done(1)), Msg::Done { status, .. } if status != 0));
    // An eager payload that is not the length it says.
    send(
        &mut s,
        &Msg::Send {
            id: 2,
            src: 3,
            dst: 0,
            src_rank: 0,
            tag: 0,
            len: 400,
            eager: true,
            payload: vec![1; 4],
        },
    );
    assert!(matches!(answer(&mut s, done(2)), Msg::Done { status, .. } if status != 0));
    // Into another partition: c's NI 3 is in partition ca, a's NI 0 in pair.
    send(
        &mut s,
        &Msg::Send {
            id: 3,
            src: 3,
            dst: 0,
            src_rank: 0,
            tag: 7,
            len: 4,
            eager: true,
            payload: vec![1; 4],
        },
    );
    assert!(matches!(answer(&mut s, done(3)), Msg::Done { status, .. }
        if status == ni::Status::OutOfPartition as u16));
    // To an NI a does not host, and past the fabric's NIs.
    send(
        &mut s,
        &Msg::Send {
            id: 4,
            src: 3,
            dst: 2,
            src_rank: 0,
            tag: 0,
            len: 0,
            eager: true,
            payload: vec![],
        },
    );
    assert!(matches!(answer(&mut s, done(4)), Msg::Done { status, .. } if status != 0));
    send(
        &mut s,
        &Msg::Send {
            id: 5,
            src: 3,
            dst: 9999,
            src_rank: 0,
            tag: 0,
            len: 0,
            eager: true,
            payload: vec![],
        },
    );
    assert!(matches!(answer(&mut s, done(5)), Msg::Done { status, .. } if status != 0));
    // A put and a get into another partition's memory.
    send(
        &mut s,
        &Msg::Put {
            id: 6,
            src: 3,
            dst: 0,
            key: 1,
            offset: 0,
            payload: vec![9; 64],
        },
    );
    assert!(
        matches!(answer(&mut s, |m| matches!(m, Msg::Reply { id: 6, .. })),
        Msg::Reply { status, .. } if status == ni::Status::OutOfPartition as u16)
    );
    send(
        &mut s,
        &Msg::Get {
            id: 7,
            src: 3,
            dst: 0,
            key: 1,
            offset: 0,
            len: 64,
        },
    );
    assert!(
        matches!(answer(&mut s, |m| matches!(m, Msg::Reply { id: 7, .. })),
        Msg::Reply { status, payload, .. } if status != 0 && payload.is_empty())
    );
    // Pulls of messages that do not exist, a READY for a's NI, a JOIN for a's member: no
    // answer, counted (the PULL is not: a message may have gone meanwhile).
    send(
        &mut s,
        &Msg::Pull {
            id: 424242,
            offset: 0,
            len: 1 << 16,
        },
    );
    send(
        &mut s,
        &Msg::Ready {
            node: 0,
            ready: false,
            flags: 0,
        },
    );
    send(
        &mut s,
        &Msg::Join {
            pid: 0,
            kind: 1,
            seq: 0,
            rank: 0,
            flags: 0,
            req: vec![0; 64],
            words: vec![],
            payload: vec![],
        },
    );
    // A heartbeat round trip shows the daemon took all of that and still speaks to us.
    send(
        &mut s,
        &Msg::Send {
            id: 8,
            src: 3,
            dst: 0,
            src_rank: 0,
            tag: 0,
            len: 0,
            eager: true,
            payload: vec![],
        },
    );
    answer(&mut s, done(8));
    // An id used before: refused without an answer (the id names the sender's own
    // operation); the next one is answered (NI 1 of partition ca has no client).
    let peer_down = ni::Status::PeerDown as u16;
    for id in [10, 10, 11] {
        let m = Msg::Send {
            id,
            src: 3,
            dst: 1,
            src_rank: 0,
            tag: 0,
            len: 4,
            eager: true,
            payload: vec![5; 4],
        };
        send(&mut s, &m);
    }
    assert!(matches!(answer(&mut s, done(10)), Msg::Done { status, .. } if status == peer_down));
    assert!(matches!(answer(&mut s, done(11)), Msg::Done { status, .. } if status == peer_down));
    // A CHANGE from a host that is not the partition manager, and a JOIN whose request its
    // own host would have refused (no such combiner), for c's member of partition ca.
    send(
        &mut s,
        &Msg::Change {
            seq: 1,
            payload: br#"{"request":"map_out_clear"}"#.to_vec(),
        },
    );
    let m = Msg::Join {
        pid: 1,
        kind: 0,
        seq: 0,
        rank: 1,
        flags: 0,
        req: vec![0xFF; 64],
        words: vec![],
        payload: vec![],
    };
    send(&mut s, &m);
    let m = Msg::Send {
        id: 12,
        src: 3,
        dst: 1,
        src_rank: 0,
        tag: 0,
        len: 0,
        eager: true,
        payload: vec![],
    };
    send(&mut s, &m);
    answer(&mut s, done(12));
    // Register-level doors (links.md "What crosses"): each answered as an unreachable
    // peer would be, or dropped, and counted.
    let door_frame = |id: u64, door: u8, dst: u32, words: Vec<u64>, payload: Vec<u8>| Msg::Door {
        id,
        door,
        src: 3,
        dst,
        more: false,
        words,
        payload,
    };
    let door_answer = |s: &mut TcpStream, id: u64| match answer(
        s,
        |m| matches!(m, Msg::DoorAnswer { id: i, .. } if *i == id),
    ) {
        Msg::DoorAnswer { words, .. } => words,
        _ => unreachable!(),
    };
    let t3e_get = |e: u64| {
        let mut w = vec![ni_abi::t3e::op::GET, 0, 0, 0];
        w.extend([e; 8]);
        w
    };
    let no_such_pe = ni_abi::t3e::Error::NoSuchPe as u64;
    // A T3E GET into another partition, one with the wrong number of fields, and an honest
    // one to an NI with no client (PeerDown: the door works, the target is not there).
    send(&mut s, &door_frame(20, door::T3E, 0, t3e_get(0), vec![]));
    assert_eq!(door_answer(&mut s, 20)[..2], [3, no_such_pe]);
    send(&mut s, &door_frame(21, door::T3E, 1, vec![1, 2, 3], vec![]));
    assert_eq!(door_answer(&mut s, 21)[..2], [3, no_such_pe]);
    send(&mut s, &door_frame(22, door::T3E, 1, t3e_get(0), vec![]));
    assert_eq!(
        door_answer(&mut s, 22)[..2],
        [3, ni_abi::t3e::Error::PeerDown as u64]
    );
    // An MLINK READ longer than MAX_LEN: REFUSED.
    let len = ni_abi::mlink::MAX_LEN as u64 + 1;
    let read = vec![ni_abi::mlink::command::READ as u64, 0, len, 0, 0];
    send(&mut s, &door_frame(23, door::MLINK, 1, read, vec![]));
    assert_eq!(
        door_answer(&mut s, 23)[0],
        ni_abi::mlink::status::REFUSED as u64
    );
    // A Lanai packet of 32 MiB (longer than the packet interface moves), and one whose
    // pieces overflow the length it announced: dropped (answered: flags bit 2).
    send(
        &mut s,
        &door_frame(24, door::LANAI, 1, vec![32 << 20, 4], vec![1; 16]),
    );
    assert_eq!(door_answer(&mut s, 24), [1]);
    send(
        &mut s,
        &door_frame(25, door::LANAI, 1, vec![10, 4], vec![1; 20]),
    );
    assert_eq!(door_answer(&mut s, 25), [1]);
    // An empty packet that says more pieces follow would hold a part for nothing: refused.
    let mut empty = door_frame(29, door::LANAI, 1, vec![0, 4], vec![]);
    if let Msg::Door { more, .. } = &mut empty {
        *more = true;
    }
    send(&mut s, &empty);
    assert_eq!(door_answer(&mut s, 29), [1]);
    // A CM-5 message from an interface that does not exist: dropped.
    send(
        &mut s,
        &door_frame(26, door::CM5, 1, vec![7, 0], vec![0; 8]),
    );
    assert_eq!(door_answer(&mut s, 26), [0]);
    // A door we do not have, and an answer to nothing of a's: counted, not answered.
    send(&mut s, &door_frame(27, 99, 1, vec![], vec![]));
    send(
        &mut s,
        &Msg::DoorAnswer {
            id: 777_777,
            door: door::T3E,
            words: vec![0],
            payload: vec![],
        },
    );
    send(&mut s, &door_frame(28, door::T3E, 1, t3e_get(0), vec![]));
    door_answer(&mut s, 28);
    let h = hosts(&a);
    let bad = counter(&h, "remote_bad_frames") - bad_before;
    assert!(
        bad >= 21,
        "{bad} bad frames counted, expected at least 21: {h}"
    );
    assert!(counter(&h, "link_protocol_errors") >= 4, "{h}");
    drop(s);

    // The honest ranks never noticed.
    let o0 = finish(r0, Duration::from_secs(120));
    let o1 = finish(r1, Duration::from_secs(120));
    assert_ok(&o0, "integrity", &a);
    assert_ok(&o1, "integrity", &b);
    assert!(
        up(&hosts(&a), "b") && up(&hosts(&b), "a"),
        "a and b lost each other"
    );
    assert!(!a.log().contains("panic"), "{}", a.log());
}
