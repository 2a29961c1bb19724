//! Mutational fuzzing of everything a client or a peer writes (issue 18): the vfio-user
//! message path (the pure decoder, and whole sessions against a real NI), the fast-path
//! request path (requests executed by the real fabric), the partition window's ring header
//! decoder, and the control protocol (requests handled by a real daemon).
//!
//! Stable Rust has no libFuzzer, so this is our own: a corpus of valid inputs per target,
//! mutated (bit flips, interesting integers in aligned fields, inserts, deletes, splices) by
//! a seeded xorshift, each run checked for panics, hangs and broken invariants. Each target
//! runs `NI_FUZZ_SECS` seconds (default 2: CI); by hand, e.g.
//! `NI_FUZZ_SECS=600 NI_FUZZ_SEED=7 cargo test --release -p ni-device --test fuzz -- --nocapture`.
//! Every target prints its executions; a failure prints the seed and the input.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ni_abi::fastpath::{self, ctrl, op, Request};
use ni_abi::vfio_user::{self as vu, command, Header, HEADER};
use ni_device::daemon::Daemon;
use ni_device::fabric::Doorbell;
use ni_device::ni::Ni;
use ni_device::server::{lock, Attachment, Session, Slot};

struct Rng(u64);

impl Rng {
    fn new(salt: u64) -> Rng {
        let seed = std::env::var("NI_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x9E37_79B9_7F4A_7C15u64);
        Rng((seed ^ salt.wrapping_mul(0x2545_F491_4F6C_DD1D)) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: [u64; 12] = [
    0,
    1,
    7,
    8,
    16,
    4095,
    4096,
    1 << 20,
    (1 << 20) + 1,
    0x7FFF_FFFF,
    0xFFFF_FFFF,
    u64::MAX,
];

/// One mutation of `input`, drawing on `corpus` for splices.
fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            2 if b.len() >= 4 => {
                let i = rng.below(b.len() / 4) * 4;
                let v = INTERESTING[rng.below(INTERESTING.len())] as u32;
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            3 if b.len() >= 8 => {
                let i = rng.below(b.len() / 8) * 8;
                let v = INTERESTING[rng.below(INTERESTING.len())];
                b[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            4 => {
                let i = rng.below(b.len() + 1);
                let n = 1 + rng.below(16);
                let ins: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(i..i, ins);
            }
            5 if !b.is_empty() => {
                let i = rng.below(b.len());
                let n = 1 + rng.below((b.len() - i).min(32));
                b.drain(i..i + n);
            }
            _ => {
                let other = &corpus[rng.below(corpus.len())];
                let cut = rng.below(b.len() + 1);
                let from = rng.below(other.len() + 1);
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
        }
    }
    b
}

fn budget() -> Duration {
    let secs = std::env::var("NI_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// Run `exec` on mutated inputs for the time budget; report executions.
fn fuzz(name: &str, salt: u64, corpus: Vec<Vec<u8>>, mut exec: impl FnMut(&[u8])) {
    let mut rng = Rng::new(salt);
    let t = Instant::now();
    let mut execs = 0u64;
    for c in &corpus {
        exec(c);
        execs += 1;
    }
    while t.elapsed() < budget() {
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, base, &corpus);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exec(&input)));
        if r.is_err() {
            panic!("{name}: input {input:02x?} (NI_FUZZ_SEED, salt {salt}) panicked");
        }
        execs += 1;
    }
    eprintln!(
        "fuzz {name}: {execs} executions in {:.1} s, 0 failures",
        t.elapsed().as_secs_f64()
    );
}

fn message(command: u16, body: &[u8]) -> Vec<u8> {
    let mut m = Header {
        id: 1,
        command,
        size: (HEADER + body.len()) as u32,
        flags: 0,
        error: 0,
    }
    .encode()
    .to_vec();
    m.extend_from_slice(body);
    m
}

fn le(parts: &[u64], widths: &[usize]) -> Vec<u8> {
    let mut b = Vec::new();
    for (v, w) in parts.iter().zip(widths) {
        b.extend_from_slice(&v.to_le_bytes()[..*w]);
    }
    b
}

/// Valid vfio-user messages of every command the NI serves.
fn vfio_user_corpus() -> Vec<Vec<u8>> {
    let mut version = le(&[0, 1], &[2, 2]);
    version.extend_from_slice(br#"{"capabilities":{"max_msg_fds":16}}"#);
    version.push(0);
    vec![
        message(command::VERSION, &version),
        message(command::DEVICE_GET_INFO, &le(&[16, 0, 0, 0], &[4, 4, 4, 4])),
        message(
            command::DEVICE_GET_REGION_INFO,
            &le(&[288, 0, 0, 0, 0, 0], &[4, 4, 4, 4, 8, 8]),
        ),
        message(
            command::DEVICE_GET_IRQ_INFO,
            &le(&[16, 0, 2, 0], &[4, 4, 4, 4]),
        ),
        message(
            command::DEVICE_SET_IRQS,
            &le(&[20, 0x24, 2, 0, 0], &[4, 4, 4, 4, 4]),
        ),
        message(command::REGION_READ, &le(&[0x4, 7, 4], &[8, 4, 4])),
        message(
            command::REGION_READ,
            &le(&[0xFFFC00 + 0x90, 0, 4], &[8, 4, 4]),
        ),
        {
            let mut w = le(&[0x4, 7, 2], &[8, 4, 4]);
            w.extend_from_slice(&[6, 0]);
            message(command::REGION_WRITE, &w)
        },
        {
            let mut w = le(&[0x80000 + 0x10, 2, 4], &[8, 4, 4]);
            w.extend_from_slice(&[1, 2, 3, 4]);
            message(command::REGION_WRITE, &w)
        },
        message(
            command::DMA_MAP,
            &le(&[32, 3, 0, 0x10000, 0x1000], &[4, 4, 8, 8, 8]),
        ),
        message(
            command::DMA_UNMAP,
            &le(&[24, 0, 0x10000, 0x1000], &[4, 4, 8, 8]),
        ),
        message(command::DEVICE_RESET, &[]),
    ]
}

#[test]
fn vfio_user_decoder() {
    fuzz("vfio-user decoder", 1, vfio_user_corpus(), |m| {
        if m.len() < HEADER {
            return;
        }
        let h = Header::decode(m[..HEADER].try_into().unwrap());
        if h.check().is_err() {
            return;
        }
        assert!(h.body_len() <= vu::max_body(h.command) as usize);
        let body = &m[HEADER..m.len().min(HEADER + h.body_len())];
        if let Ok(vu::Request::RegionWrite { data, .. }) = vu::decode(h.command, body) {
            assert!(data.len() <= vu::MAX_DATA_XFER as usize);
        }
    });
}

/// Whole sessions against a real NI: a stream of (mutated) messages, then the client hangs
/// up; the session must end, without a panic, and the NI must serve the next client.
#[test]
fn vfio_user_sessions() {
    let slot = Arc::new(Slot {
        ni: Mutex::new(Ni::new(0, Arc::new(Doorbell::default())).unwrap()),
        attachment: Mutex::new(Attachment::default()),
        window: Mutex::new(None),
    });
    let corpus = vfio_user_corpus();
    // Sessions are streams of several messages: the corpus entries are concatenations.
    let mut streams = Vec::new();
    for i in 0..corpus.len() {
        let mut s = corpus[0].clone();
        s.extend_from_slice(&corpus[i]);
        s.extend_from_slice(&corpus[(i + 3) % corpus.len()]);
        streams.push(s);
    }
    fuzz("vfio-user sessions", 2, streams, |input| {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        let sram_fd = lock(&slot.ni).sram.fd();
        let s2 = slot.clone();
        let session = std::thread::spawn(move || {
            lock(&s2.ni).reserve_next_sram().unwrap();
            let r = Session::new(&s2, sram_fd, None, None).run(&mut server);
            lock(&s2.ni).detach();
            r.is_ok()
        });
        // Replies are drained so the session never waits on a full socket.
        let mut reader = client.try_clone().unwrap();
        let drain = std::thread::spawn(move || {
            let mut sink = [0u8; 4096];
            while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
        });
        let _ = client.write_all(input);
        let _ = client.shutdown(std::net::Shutdown::Write);
        let t = Instant::now();
        while !session.is_finished() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "session hangs after the client hung up"
            );
            std::thread::sleep(Duration::from_micros(50));
        }
        session.join().expect("the session thread panicked");
        drop(client);
        drain.join().unwrap();
    });
}

/// A real daemon with NI 0 attached (a raw vfio-user connection) and 1 MiB of client memory
/// mapped at IOVA 0x100000; mutated fast-path requests go into NI 0's submission ring and the
/// fabric executes them. Every request must get a completion or be refused, the daemon must
/// keep polling.
#[test]
fn fastpath_requests() {
    let dir = std::env::temp_dir().join(format!("ni-fuzz-{}", std::process::id()));
    let d = Daemon::start(&dir, 2, &[], Duration::from_millis(200), None, None).unwrap();
    let mut conns = Vec::new();
    for i in 0..2 {
        conns.push(UnixStream::connect(ni_device::daemon::socket_path(&d.run_dir, i)).unwrap());
    }
    let mem = ni_device::dma::sealed_memfd(c"fuzz", 1 << 20).unwrap();
    let wait_live = |i: usize| {
        let t = Instant::now();
        loop {
            let sram = lock(&d.slots[i].ni).sram.clone();
            if sram.load_u32(ctrl::MAGIC) == ctrl::MAGIC_VALUE {
                return sram;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "NI {i} never came up"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let mut srams = Vec::new();
    for i in 0..2 {
        let sram = wait_live(i);
        let ni = lock(&d.slots[i].ni);
        ni_device::ni::write_dma(&ni.dma)
            .map(
                true,
                true,
                0,
                0x100000,
                1 << 20,
                Some(mem.try_clone().unwrap()),
            )
            .unwrap();
        srams.push(sram);
    }
    let req = |opcode, addr, len, tag, key, rank| Request {
        opcode,
        rank,
        addr,
        len,
        tag,
        key,
        mask: u64::MAX,
        access: 3,
        ..Default::default()
    };
    let corpus: Vec<Vec<u8>> = [
        req(op::CQ_SETUP, 0x100000, 64, 0, 0, 0),
        req(op::AM_SETUP, 0x140000, 4, 0, 0, 0),
        req(op::REG_MR, 0x180000, 0x10000, 0, 1, 0),
        req(op::SEND, 0x190000, 100, 5, 0, 1),
        req(op::RECV, 0x1A0000, 4096, 5, 0, fastpath::ANY_RANK),
        req(op::PUT, 0x190000, 64, 0, 1, 1),
        req(op::GET, 0x190000, 64, 0, 1, 1),
        req(op::ROP, 0x190000, 64, 0, 0, 1),
        req(op::NOOP, 0, 0, 0, 0, 1),
        req(op::MQ_SEND, 0x190000, 64, 0, 1, 1),
        req(op::MQ_SIGNAL, 0, 0, 0, 1, 1),
        req(op::COMBINE, 0x190000, 8, 0, 0, 0),
        req(op::COLLECTIVE, 0x190000, 8, 0, 0, 0),
        req(op::SYNC_GLOBAL, 0, 0, 0, 0, 0),
        req(op::DEREG_MR, 0, 0, 0, 1, 0),
        req(op::WAKE, 0, 0, 0, 0, 1),
    ]
    .iter()
    .map(|r| r.encode().to_vec())
    .collect();
    let mut tails = [0u32; 2];
    let mut rng = Rng::new(3);
    fuzz("fast-path requests", 3, corpus, |input| {
        let mut raw = [0u8; 64];
        let n = input.len().min(64);
        raw[..n].copy_from_slice(&input[..n]);
        let i = rng.below(2);
        let sram = &srams[i];
        // The submission ring is the client's: it may also lie about its tail.
        let at = fastpath::SQ_OFFSET + (tails[i] % fastpath::SQ_ENTRIES) as u64 * 64;
        sram.write(at, &raw).unwrap();
        tails[i] = tails[i].wrapping_add(if rng.below(64) == 0 { 2000 } else { 1 });
        // Completions consumed now and then, as a client would (or would not).
        if rng.below(4) == 0 {
            sram.store_u32(ctrl::CQ_HEAD, sram.load_u32(ctrl::CQ_HEAD).wrapping_add(16));
        }
        sram.store_u32(ctrl::SQ_TAIL, tails[i]);
        d.fabric.doorbell.ring();
        let _ = d.fabric.lock().poll_once();
    });
    // Nothing panicked under the fabric's lock (the poller thread shares it).
    assert!(!d.fabric.state.is_poisoned());
    drop(conns);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The partition window's ring header, as a peer may write it: decode only what an honest
/// sender writes (`Header::decode`), and never a length past what the ring can hold — for a
/// `BIG`, once the receiver bounded it by its partition's `big_max`, as libni does.
#[test]
fn window_ring_headers() {
    use ni_abi::window::{
        big_max, fin, kind, ring_coll_max, ring_slots, GetFrom, Header as WHeader, BIG_MAX,
        EAGER_MAX, GET_LEN, RING_COLL_MAX, SLOT,
    };
    let corpus: Vec<Vec<u8>> = [
        WHeader {
            kind: kind::EAGER,
            len: 0,
            tag: 1,
            id: 0,
            full: 0,
        },
        WHeader {
            kind: kind::EAGER,
            len: 4096,
            tag: 2,
            id: 0,
            full: 4096,
        },
        WHeader {
            kind: kind::RTS,
            len: 0,
            tag: 3,
            id: 9,
            full: 1 << 30,
        },
        WHeader {
            kind: kind::BIG,
            len: 12000,
            tag: 4,
            id: 0,
            full: 12000,
        },
        WHeader {
            kind: kind::GET,
            len: GET_LEN as u32,
            tag: 5,
            id: 7,
            full: 1 << 20,
        },
        WHeader {
            kind: kind::FIN,
            len: 0,
            tag: 7,
            id: fin::FABRIC,
            full: 0,
        },
    ]
    .iter()
    .map(|h| h.encode(&[0x11; 48]).to_vec())
    .chain(std::iter::once(
        GetFrom {
            key: 3,
            offset: 4096,
        }
        .encode()
        .to_vec(),
    ))
    .collect();
    fuzz("window ring headers", 4, corpus, |input| {
        let mut b = [0u8; SLOT as usize];
        let n = input.len().min(b.len());
        b[..n].copy_from_slice(&input[..n]);
        if let Some(h) = WHeader::decode(&b) {
            assert!(
                h.len as u64
                    <= match h.kind {
                        kind::BIG => BIG_MAX,
                        kind::COLL => RING_COLL_MAX,
                        _ => EAGER_MAX,
                    }
            );
            assert!(h.full <= fastpath::MAX_TRANSFER);
            for size in [2, 3, 4, 8, 16, 32, 64] {
                // What the receiver takes from a ring of `size` members (`Window::next`).
                let taken = match h.kind {
                    kind::BIG => h.full <= big_max(size),
                    kind::COLL => h.full <= ring_coll_max(size),
                    _ => true,
                };
                if taken {
                    assert!(h.slots() < ring_slots(size), "{h:?} in a ring of {size}");
                }
            }
            match h.kind {
                kind::GET => assert_eq!(h.len as u64, GET_LEN),
                kind::FIN => assert!(h.len == 0 && h.id <= fin::FABRIC),
                _ => {}
            }
        }
        // A GET's payload as a peer may write it: only what `encode` writes decodes.
        let mut g = [0u8; GET_LEN as usize];
        let n = input.len().min(g.len());
        g[..n].copy_from_slice(&input[..n]);
        if let Some(from) = GetFrom::decode(&g) {
            assert_eq!(from.encode(), g);
        }
    });
}

/// The control protocol, handled by a real daemon: JSON lines (valid requests of every kind,
/// mutated) over the control socket; every line gets one answer, the socket keeps serving.
#[test]
fn control_protocol() {
    let dir = std::env::temp_dir().join(format!("ni-fuzz-ctl-{}", std::process::id()));
    let d = Daemon::start(
        &dir,
        4,
        &[],
        Duration::from_millis(200),
        None,
        Some(ni_abi::window::Kind::Isolated),
    )
    .unwrap();
    let path = d.run_dir.join("control.sock");
    let corpus: Vec<Vec<u8>> = [
        r#"{"version":1,"request":"status"}"#,
        r#"{"version":1,"request":"nodes"}"#,
        r#"{"version":1,"request":"counters","nodes":[0,1],"reset":false}"#,
        r#"{"version":1,"request":"partitions"}"#,
        r#"{"version":1,"request":"partition_create","name":"p","nodes":[2,3]}"#,
        r#"{"version":1,"request":"partition_delete","name":"p"}"#,
        r#"{"version":1,"request":"partition_show","name":"default"}"#,
        r#"{"version":1,"request":"ports","nodes":[]}"#,
        r#"{"version":1,"request":"port_set","node":1,"state":"down","mode":"ethernet"}"#,
        r#"{"version":1,"request":"route","from":0,"to":3}"#,
        r#"{"version":1,"request":"topology"}"#,
        r#"{"version":1,"request":"map_out_node","node":"2"}"#,
        r#"{"version":1,"request":"map_out_link","a":"0","b":"1"}"#,
        r#"{"version":1,"request":"map_out_clear"}"#,
        r#"{"version":1,"request":"reset_node","node":2}"#,
        r#"{"version":1,"request":"diag_ping","from":0,"to":1}"#,
        // The load-generating diagnostics are left out: their size and time limits
        // (`control.rs`) make one request legitimately take up to a minute.
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let mut conn = std::io::BufReader::new(UnixStream::connect(&path).unwrap());
    fuzz("control protocol", 5, corpus, |input| {
        let mut line: Vec<u8> = input.iter().copied().filter(|&c| c != b'\n').collect();
        line.push(b'\n');
        conn.get_mut().write_all(&line).unwrap();
        let mut answer = String::new();
        std::io::BufRead::read_line(&mut conn, &mut answer).unwrap();
        assert!(
            answer.ends_with('\n'),
            "no answer to {:?}",
            String::from_utf8_lossy(&line)
        );
        let v: serde_json::Value = serde_json::from_str(&answer).expect("answers are JSON");
        assert!(v.is_object());
    });
    let _ = std::fs::remove_dir_all(&dir);
}
