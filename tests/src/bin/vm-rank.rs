//! One rank of a VM test scenario: `ni-vm-rank SCENARIO [ARGS]`. Runs inside QEMU guests
//! (libni over VFIO: `NI_SOCKET` unset) and in host processes (`NI_SOCKET` set), so guests
//! and host processes can share a partition. Prints `ok SCENARIO` and exits 0 when every
//! check passed; panics (exit 101) otherwise.
//!
//! Every scenario starts with [`hello`]: in a guest the process's own attach resets its NI
//! (vfio-pci resets the function when the device is opened), which fails whatever peers had
//! already posted towards it, and `Ni::attach` only waits for the peers' NIs to have a client
//! (the QEMU process, connected since boot). So ranks first exchange a message with every
//! peer, re-posting on `peer down`, until each has seen every other one's process.
//!
//! Scenarios:
//! - `pingpong` — rank 0 sends every size from 0 B to 1 MiB, rank 1 checks and echoes it,
//!   rank 0 checks the echo; prints `stats ...` (its receives and bytes) for the counters check
//! - `mq` — T3E message queue: fill to Limit, rejection, Threshold MSI-X, reset by swap
//! - `lat N [MODES]` — N timed 8-byte round trips over the NI (rank 0 prints `lat ni(MODE)
//!   ...`) for each wait mode in the comma-separated MODES (`wait`: libni's own policy,
//!   default; `spin`; `sleepUS`), then, after the first, N over TCP between the guests (rank 1
//!   connects to rank 0 at `NI_TCP_ADDR`, default 169.254.77.1:7777; it prints `lat tcp ...`)
//! - `poweroff` — rank 1 echoes until its guest is powered off; rank 0 must see `peer down`
//!   within 10 s, then waits for a replacement (`NI_VM_REPLACEMENT=1`) on the freed NI and
//!   ping-pongs with it
//! - `unplug` — rank 1 (a guest) echoes until the host unplugs its NI (QMP `device_del`):
//!   that must fail with `Unplugged`, then it waits for the NI to be plugged back, attaches
//!   again and ping-pongs with rank 0, which runs `poweroff`'s survivor
//! - `collectives` — `Ni::barrier` and `Ni::allreduce` (f64 sum of 100003 elements, i64
//!   min, u64 xor, checked) across every rank
//! - `daemon-dies` — block in a receive until the daemon is killed: it must fail with
//!   `DaemonGone`; with `NI_VM_REATTACH` set, then wait for the NI to be re-plugged onto a
//!   restarted daemon, attach again and send a checked message to itself through it
//! - `attach` — attach alone and print rank, size and node
//! - `scribble` — rank 0 (a guest) maps its BAR3 and BAR4 writable through sysfs and writes
//!   its own zone full of garbage, then another rank's zone (which its VMM mapped read-only);
//!   ranks 1 and 2 exchange checked messages until `NI_VM_STOP_FILE` appears ([`scribble`])
//!
//! After a scenario each rank prints `stats ...`, stays attached for `NI_VM_LINGER_MS` (if
//! set) so the host can inspect the NI in use, then prints `ok SCENARIO`.

use ni_tests::check::{pattern, status_of};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use ni::{MqAddr, MqOutcome, Ni, Region, Status};

const HELLO_TAG: u64 = 0xB0B0_0000_0000_0000;

/// What this process moved, to compare with the daemon's counters.
#[derive(Default)]
struct Tally {
    recvs: u64,
    recv_bytes: u64,
    send_bytes: u64,
}

/// Exchange one message with every peer, re-posting whatever fails with `peer down` (the
/// peer's process has not attached yet, or attaching reset its NI), until each side has
/// seen every other one's process. `round` separates successive handshakes.
fn hello(ni: &Ni, scratch: &Region, round: u64, timeout: Duration, tally: &mut Tally) {
    let n = ni.size() as usize;
    let me = ni.rank() as usize;
    let tag = HELLO_TAG + round;
    let t = Instant::now();
    let mut recvs: Vec<Option<ni::Op>> = (0..n).map(|_| None).collect();
    let mut sends: Vec<Option<ni::Op>> = (0..n).map(|_| None).collect();
    let mut got = vec![false; n];
    let mut sent = vec![false; n];
    got[me] = true;
    sent[me] = true;
    let mut retries = 0u32;
    while got.iter().chain(sent.iter()).any(|d| !d) {
        assert!(
            t.elapsed() < timeout,
            "handshake: no answer within {timeout:?} from ranks {:?}",
            (0..n).filter(|&p| !got[p] || !sent[p]).collect::<Vec<_>>()
        );
        for p in 0..n {
            if !got[p] && recvs[p].is_none() {
                recvs[p] = Some(
                    ni.irecv(Some(p as u32), scratch, 0..0, tag, u64::MAX)
                        .unwrap(),
                );
            }
            if !sent[p] && sends[p].is_none() {
                sends[p] = Some(ni.isend(p as u32, scratch, 0..0, tag).unwrap());
            }
        }
        for p in 0..n {
            for (slot, flag, is_recv) in [
                (&mut recvs[p], &mut got[p], true),
                (&mut sends[p], &mut sent[p], false),
            ] {
                let Some(op) = slot.as_ref() else { continue };
                match ni.test(op) {
                    Ok(None) => {}
                    Ok(Some(_)) => {
                        *slot = None;
                        *flag = true;
                        if is_recv {
                            tally.recvs += 1;
                        }
                    }
                    Err(e) if status_of(&e) == Some(Status::PeerDown) => {
                        *slot = None;
                        retries += 1;
                    }
                    Err(e) => panic!("handshake with rank {p}: {e}"),
                }
            }
        }
        // Peers that are not up yet refuse at once: do not spin on them.
        std::thread::sleep(Duration::from_millis(if retries > 0 { 10 } else { 1 }));
    }
    println!(
        "hello: rank {me} of {n} (NI {}) sees every peer after {:?} ({retries} re-posts)",
        ni.node(),
        t.elapsed()
    );
}

fn sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 63, 64, 65, 4095, 4096, 4097];
    let mut s = 16 << 10;
    while s <= 1 << 20 {
        v.push(s - 1);
        v.push(s);
        s *= 4;
    }
    v
}

/// Rank 0 sends, rank 1 checks and echoes, rank 0 checks the echo: 0 B to 1 MiB.
fn pingpong(ni: &Ni, tally: &mut Tally) {
    const MAX: usize = 1 << 20;
    let buf = ni.alloc(MAX).unwrap();
    let t = Instant::now();
    for (i, &n) in sizes().iter().enumerate() {
        let want = pattern(n, i as u64 + 1);
        let tag = i as u64;
        if ni.rank() == 0 {
            buf.write_at(0, &want);
            ni.send(1, &buf, 0..n, tag).unwrap();
            tally.send_bytes += n as u64;
            buf.write_at(0, &vec![0u8; n.min(4096)]);
            let d = ni
                .recv(Some(1), &buf, 0..MAX, tag + 1000, u64::MAX)
                .unwrap();
            tally.recvs += 1;
            tally.recv_bytes += d.len;
            assert_eq!(d.len as usize, n, "echo length");
            let mut got = vec![0u8; n];
            buf.read_at(0, &mut got);
            assert!(got == want, "echo of {n} bytes differs");
        } else if ni.rank() == 1 {
            let d = ni.recv(Some(0), &buf, 0..MAX, tag, u64::MAX).unwrap();
            tally.recvs += 1;
            tally.recv_bytes += d.len;
            assert_eq!((d.len as usize, d.rank, d.tag), (n, 0, tag));
            let mut got = vec![0u8; n];
            buf.read_at(0, &mut got);
            assert!(got == want, "{n} bytes arrived corrupted");
            ni.send(0, &buf, 0..n, tag + 1000).unwrap();
            tally.send_bytes += n as u64;
        }
    }
    println!(
        "pingpong: {} sizes 0..=1 MiB checked both ways in {:?}",
        sizes().len(),
        t.elapsed()
    );
}

/// T3E message queue at rank 1, fed by rank 0.
fn mq(ni: &Ni, tally: &mut Tally) {
    let ctl = ni.alloc(4096).unwrap();
    let recv = |tally: &mut Tally, src: u32, len: usize, tag: u64| {
        let d = ni.recv(Some(src), &ctl, 0..len, tag, u64::MAX).unwrap();
        tally.recvs += 1;
        tally.recv_bytes += d.len;
    };
    if ni.rank() == 1 {
        // Limit 5: slots 1..4 hold messages (slot 0 is the MQCW). Threshold 4.
        let mut q = ni.mq_create(5, 4).unwrap();
        ni.ir_write(true, u64::MAX).unwrap();
        ctl.write_at(0, &q.addr().key.to_le_bytes());
        ni.send(0, &ctl, 0..4, 1).unwrap();
        tally.send_bytes += 4;
        assert!(
            ni.wait_mq_interrupt(Duration::from_secs(30)),
            "no Threshold interrupt (MSI-X vector MQ through VFIO)"
        );
        let (st, addr) = ni.ir_status().unwrap();
        assert_ne!(st & (1 << 32), 0, "MSG_ADDR_VALID set");
        assert_eq!(
            addr,
            q.region().iova(),
            "MSG_ADDR latches the MQCW's address"
        );
        recv(tally, 0, 0, 2); // the sender saw its fifth message rejected
        let w = q.mqcw();
        assert!(ni_abi::fastpath::mqcw::sig(w), "Sig set at Threshold");
        assert_eq!(ni_abi::fastpath::mqcw::tail(w), 5);
        let msgs = q.take();
        assert_eq!(msgs.len(), 4);
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m[..], pattern(64, i as u64)[..], "slot {} content", i + 1);
        }
        let old = q.swap(ni_abi::fastpath::mqcw::make(false, 1, 5, 0));
        assert_eq!(ni_abi::fastpath::mqcw::tail(old), 5);
        q.set_head(1);
        ni.ir_write(true, 1 << 32).unwrap();
        ni.send(0, &ctl, 0..0, 3).unwrap();
        recv(tally, 0, 0, 4);
        let msgs = q.take();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0][..], pattern(64, 99)[..]);
        println!("mq: 4 stored, 1 rejected at Limit, Threshold MSI-X, reset by swap, 1 more");
    } else if ni.rank() == 0 {
        recv(tally, 1, 4, 1);
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
        assert_eq!(
            ni.mq_send(1, addr, &[0xEE; 64]).unwrap(),
            MqOutcome::Rejected,
            "Tail = Limit"
        );
        ni.send(1, &ctl, 0..0, 2).unwrap();
        recv(tally, 1, 0, 3);
        let m: [u8; 64] = pattern(64, 99).try_into().unwrap();
        assert_eq!(
            ni.mq_send(1, addr, &m).unwrap(),
            MqOutcome::Accepted { tail: 2 }
        );
        ni.send(1, &ctl, 0..0, 4).unwrap();
    }
}

/// Median, 10th and 90th percentile of `v` (sorted in place).
fn quantiles(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize];
    (q(0.5), q(0.1), q(0.9))
}

fn summary(what: &str, mut v: Vec<f64>) {
    let (m, p10, p90) = quantiles(&mut v);
    println!(
        "lat {what} half_rtt_us median={m:.2} p10={p10:.2} p90={p90:.2} n={}",
        v.len()
    );
}

/// 8-byte round trips over the NI, then over TCP (virtio-net) between the same two ranks.
fn latency(ni: &Ni, iters: usize, mode: &str, round: usize) {
    const WARMUP: usize = 50;
    // How a rank waits: libni's own policy (spin, yield, then sleep on the MSI-X), a pure
    // spin on the completion ring, or polling with a sleep of N µs between looks (the guest
    // halts while it sleeps, so its vCPU thread leaves the host core to the others).
    let pause: Option<Option<Duration>> = match mode {
        "wait" => None,
        "spin" => Some(None),
        m => Some(Some(Duration::from_micros(
            m.strip_prefix("sleep")
                .and_then(|u| u.parse().ok())
                .unwrap_or_else(|| panic!("lat mode {m}: wait, spin or sleepUS")),
        ))),
    };
    let finish = |op: ni::Op| match pause {
        None => {
            ni.wait(op).unwrap();
        }
        Some(p) => loop {
            if ni.test(&op).unwrap().is_some() {
                break;
            }
            match p {
                Some(d) => std::thread::sleep(d),
                None => std::hint::spin_loop(),
            }
        },
    };
    let buf = ni.alloc(4096).unwrap();
    let mut half = Vec::with_capacity(iters);
    if ni.rank() == 0 {
        for i in 0..WARMUP + iters {
            let t = Instant::now();
            let r = ni.irecv(Some(1), &buf, 64..72, 2, u64::MAX).unwrap();
            finish(ni.isend(1, &buf, 0..8, 1).unwrap());
            finish(r);
            if i >= WARMUP {
                half.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        summary(&format!("ni({mode})"), half);
    } else if ni.rank() == 1 {
        // The next ping's receive is always posted before the pong goes out.
        let mut r = Some(ni.irecv(Some(0), &buf, 0..8, 1, u64::MAX).unwrap());
        for i in 0..WARMUP + iters {
            finish(r.take().unwrap());
            if i + 1 < WARMUP + iters {
                r = Some(ni.irecv(Some(0), &buf, 0..8, 1, u64::MAX).unwrap());
            }
            finish(ni.isend(0, &buf, 64..72, 2).unwrap());
        }
    }
    if round > 0 {
        return; // TCP once, after the first mode
    }
    let addr = std::env::var("NI_TCP_ADDR").unwrap_or_else(|_| "169.254.77.1:7777".into());
    if ni.rank() == 0 {
        let port = addr.rsplit(':').next().unwrap();
        let l = std::net::TcpListener::bind(format!("0.0.0.0:{port}")).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 8];
        for _ in 0..WARMUP + iters {
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
        }
    } else if ni.rank() == 1 {
        let t = Instant::now();
        let mut s = loop {
            match std::net::TcpStream::connect(&addr) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(t.elapsed() < Duration::from_secs(60), "connect {addr}: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        s.set_nodelay(true).unwrap();
        let mut b = [7u8; 8];
        let mut half = Vec::with_capacity(iters);
        for i in 0..WARMUP + iters {
            let t = Instant::now();
            s.write_all(&b).unwrap();
            s.read_exact(&mut b).unwrap();
            if i >= WARMUP {
                half.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        summary("tcp", half);
    }
}

/// Rank 1 echoes until its guest is killed; rank 0 must see `peer down` within 10 s, then
/// ping-pongs with the replacement guest on the same NI.
fn poweroff(ni: &Ni, scratch: &Region, tally: &mut Tally) {
    let buf = ni.alloc(64 << 10).unwrap();
    let replacement = std::env::var_os("NI_VM_REPLACEMENT").is_some();
    if ni.rank() == 1 && !replacement {
        println!("victim: ready");
        let mut i = 0u64;
        loop {
            let d = ni.recv(Some(0), &buf, 0..64 << 10, i, u64::MAX).unwrap();
            ni.send(0, &buf, 0..d.len as usize, i).unwrap();
            i += 1;
        }
    }
    if ni.rank() == 1 {
        println!("replacement: attached to NI {}", ni.node());
        echo_as_replacement(ni, &buf);
        return;
    }
    if ni.rank() != 0 {
        return;
    }
    println!("survivor: running");
    let mut last_ok = Instant::now();
    let mut rounds = 0u64;
    let err = loop {
        let want = pattern(4096, rounds);
        buf.write_at(0, &want);
        let r = ni
            .send(1, &buf, 0..4096, rounds)
            .and_then(|_| ni.recv(Some(1), &buf, 0..64 << 10, rounds, u64::MAX));
        match r {
            Ok(_) => {
                let mut got = vec![0u8; 4096];
                buf.read_at(0, &mut got);
                assert!(got == want, "echo {rounds} corrupted");
                rounds += 1;
                last_ok = Instant::now();
            }
            Err(e) => break e,
        }
        assert!(
            last_ok.elapsed() < Duration::from_secs(600),
            "nothing happened for 10 minutes"
        );
    };
    let after = last_ok.elapsed();
    assert_eq!(
        status_of(&err),
        Some(Status::PeerDown),
        "expected peer down, got {err}"
    );
    println!(
        "survivor: {rounds} round trips, then `{err}` {:.0} ms after the last one",
        after.as_secs_f64() * 1e3
    );
    assert!(
        after < Duration::from_secs(10),
        "the error took {after:?} (bound: 10 s)"
    );
    // The freed NI takes a new guest: meet it and talk to it.
    hello(ni, scratch, 1, Duration::from_secs(240), tally);
    for i in 0..20u64 {
        let n = 1 + (i as usize * 3001) % (64 << 10);
        let want = pattern(n, 1000 + i);
        buf.write_at(0, &want);
        ni.send(1, &buf, 0..n, 1000 + i).unwrap();
        let d = ni
            .recv(Some(1), &buf, 0..64 << 10, 1000 + i, u64::MAX)
            .unwrap();
        let mut got = vec![0u8; d.len as usize];
        buf.read_at(0, &mut got);
        assert!(got == want, "replacement echo {i} corrupted");
    }
    println!("survivor: 20 round trips with the replacement guest");
}

/// What a rank 1 that came back (a replacement guest, a re-plugged NI) does with the
/// survivor of `poweroff`: check and echo its 20 messages (tags 1000..1020).
fn echo_as_replacement(ni: &Ni, buf: &Region) {
    for i in 0..20u64 {
        let d = ni
            .recv(Some(0), buf, 0..64 << 10, 1000 + i, u64::MAX)
            .unwrap();
        let mut got = vec![0u8; d.len as usize];
        buf.read_at(0, &mut got);
        assert!(
            got == pattern(d.len as usize, 1000 + i),
            "round {i} corrupted"
        );
        ni.send(0, buf, 0..d.len as usize, 1000 + i).unwrap();
    }
    println!("replacement: 20 round trips done");
}

/// Rank 1 of `unplug` (a guest whose NI the host unplugs with QMP `device_del`, then plugs
/// back with `device_add`; rank 0 runs `poweroff`'s survivor): echo until the NI goes away,
/// which must fail with `Unplugged` (libni let go of the device when vfio-pci relayed the
/// unplug), never hang; then wait for the function to come back, attach again and meet the
/// survivor as a replacement would.
fn unplug_victim(ni: Ni, scratch: Region, tally: &mut Tally) {
    let buf = ni.alloc(64 << 10).unwrap();
    println!("victim: ready");
    let mut i = 0u64;
    let err = loop {
        let r = ni
            .recv(Some(0), &buf, 0..64 << 10, i, u64::MAX)
            .and_then(|d| ni.send(0, &buf, 0..d.len as usize, i));
        match r {
            Ok(()) => i += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, ni::Error::Unplugged(_)),
        "expected the NI to be unplugged, got {err}"
    );
    println!("victim: unplugged after {i} round trips: {err}");
    // Everything after that fails at once, the same way.
    let again = ni.send(0, &buf, 0..8, 0).unwrap_err();
    assert!(matches!(again, ni::Error::Unplugged(_)), "then: {again}");
    drop((buf, scratch, ni));
    let ni = attach_again("the unplugged NI");
    let scratch = ni.alloc(4096).unwrap();
    hello(&ni, &scratch, 1, Duration::from_secs(240), tally);
    echo_as_replacement(&ni, &ni.alloc(64 << 10).unwrap());
    println!("ok unplug");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().expect("usage: ni-vm-rank SCENARIO [ARGS]");
    let t = Instant::now();
    let ni = if scenario == "attach" {
        match std::env::var_os("NI_SOCKET") {
            Some(p) => Ni::attach_path(std::path::Path::new(&p)),
            None => Ni::attach_pci(&std::env::var("NI_PCI").unwrap_or_else(|_| ni_bdf())),
        }
    } else {
        Ni::attach()
    }
    .unwrap_or_else(|e| panic!("attach: {e}"));
    println!(
        "attached: rank {} of {} on NI {} in {:?} ({})",
        ni.rank(),
        ni.size(),
        ni.node(),
        t.elapsed(),
        if std::env::var_os("NI_SOCKET").is_some() {
            "vfio-user socket"
        } else {
            "VFIO"
        }
    );
    if scenario == "attach" {
        if let Some(ms) = std::env::var("NI_VM_LINGER_MS")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            std::thread::sleep(Duration::from_millis(ms));
        }
        println!("ok attach");
        return;
    }
    if scenario == "daemon-dies" {
        daemon_dies(ni);
        return;
    }
    let scratch = ni.alloc(4096).unwrap();
    let mut tally = Tally::default();
    // A replacement guest meets the survivor's second handshake.
    let round = std::env::var_os("NI_VM_REPLACEMENT").is_some() as u64;
    hello(&ni, &scratch, round, Duration::from_secs(240), &mut tally);
    if scenario == "unplug" && ni.rank() == 1 {
        unplug_victim(ni, scratch, &mut tally);
        return;
    }
    match scenario.as_str() {
        "pingpong" => pingpong(&ni, &mut tally),
        "mq" => mq(&ni, &mut tally),
        "lat" => {
            let n = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
            let modes = args.next().unwrap_or_else(|| "wait".into());
            for (k, mode) in modes.split(',').enumerate() {
                if k > 0 {
                    hello(
                        &ni,
                        &scratch,
                        10 + k as u64,
                        Duration::from_secs(60),
                        &mut tally,
                    );
                }
                latency(&ni, n, mode, k);
            }
        }
        "poweroff" | "unplug" => poweroff(&ni, &scratch, &mut tally),
        "collectives" => collectives(&ni),
        "onesided" => onesided(&ni),
        "scribble" => scribble(&ni, &mut tally),
        "soak" => soak(&ni, &mut tally),
        "wake" => {
            let n = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
            wake(&ni, n, "polled");
            hello(&ni, &scratch, 20, Duration::from_secs(60), &mut tally);
            wake(&ni, n, "blocked");
            if ni.rank() == 0 {
                local_wake(n);
            }
        }
        other => panic!("unknown scenario {other}"),
    }
    println!(
        "stats node={} recvs={} recv_bytes={} send_bytes={}",
        ni.node(),
        tally.recvs,
        tally.recv_bytes,
        tally.send_bytes
    );
    // Stay attached a while (NI_VM_LINGER_MS) so the host can look at the NI in use.
    if let Some(ms) = std::env::var("NI_VM_LINGER_MS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    println!("ok {scenario}");
}

/// One-sided transfers into memory the program allocated itself and registered with
/// `Ni::register`, around the partition (rank r puts into and gets from rank r + 1): in a
/// guest the IOMMU maps the heap pages where they are, on a host they move onto a memfd. The
/// registration keeps the bytes; a put lands exactly at its offset; a get into a registered
/// buffer (in place) and a put from one work too. Every rank registers the same way after
/// the same allocations, so the key is the same everywhere.
fn onesided(ni: &Ni) {
    const LEN: usize = 300_000;
    const N: usize = 100_000;
    let n = ni.size();
    let (me, next, prev) = (ni.rank(), (ni.rank() + 1) % n, (ni.rank() + n - 1) % n);
    let t = Instant::now();
    let src = ni.alloc(N).unwrap();
    src.write_at(0, &pattern(N, 7000 + me as u64));
    // The heap: a Vec's buffer, not page-aligned, kept until the region is dropped.
    let mut heap = vec![0xEEu8; LEN].into_boxed_slice();
    heap[..8].copy_from_slice(b"kept by ");
    // SAFETY: `heap` outlives `mine` (dropped first, below) and is only read back once the
    // barriers say no transfer touches it.
    let mine = unsafe { ni.register(heap.as_mut_ptr(), LEN, true, true) }.unwrap();
    assert_eq!(&heap[..8], b"kept by ", "registration changed the bytes");
    let key = mine.key();
    ni.barrier().unwrap();
    // A put from libni memory, at an odd offset.
    let off = 1001 + 7 * me as u64;
    ni.put(next, &src, 0..N, key, off).unwrap();
    ni.barrier().unwrap();
    let at = 1001 + 7 * prev as usize;
    assert!(
        heap[at..at + N] == pattern(N, 7000 + prev as u64)[..],
        "the put from rank {prev} is not where it was aimed"
    );
    assert!(
        heap[at - 1] == 0xEE && heap[at + N] == 0xEE,
        "bytes around the put changed"
    );
    // A get into this rank's own registered memory (in place), of what it put at the next.
    ni.get(next, &mine, 200_000..200_000 + N, key, off).unwrap();
    assert!(
        heap[200_000..200_000 + N] == pattern(N, 7000 + me as u64)[..],
        "the get into registered memory brought other bytes"
    );
    ni.barrier().unwrap();
    // A put from registered memory.
    ni.put(next, &mine, 200_000..200_000 + 1000, key, 0)
        .unwrap();
    ni.barrier().unwrap();
    assert!(
        heap[..1000] == pattern(N, 7000 + prev as u64)[..1000],
        "the put from registered memory"
    );
    ni.barrier().unwrap();
    drop(mine);
    drop(heap);
    println!(
        "onesided: put/get of {N} B into registered heap memory checked around {n} ranks in {:?} ({})",
        t.elapsed(),
        if std::env::var_os("NI_SOCKET").is_some() {
            "host: pages moved onto a memfd"
        } else {
            "guest: pages mapped in place by the IOMMU"
        }
    );
}

/// This machine's NI PCI function (vendor 0x1234, device 0x4e49), e.g. `0000:00:03.0`.
fn ni_bdf() -> String {
    std::fs::read_dir("/sys/bus/pci/devices")
        .ok()
        .and_then(|d| {
            d.filter_map(|e| e.ok())
                .find(|e| {
                    let r = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap_or_default();
                    r("vendor").trim() == "0x1234" && r("device").trim() == "0x4e49"
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
        })
        .expect("no NI PCI function in this machine")
}

/// Issue 18 item 6 in a guest (fastpath.md, "One writer per page"). Rank 0 runs in a guest
/// and attacks: past libni, it maps its NI's BAR3 (its own zone of the partition window)
/// and BAR4 (the whole window) writable through sysfs, fills its own zone with garbage for
/// a few seconds, writes BAR3's hole, then stores into rank 1's zone through BAR4 — which
/// the VMM mapped read-only, so the store must not land (under TCG, QEMU dies of it; the
/// test expects either that or a store that did not stick). Ranks 1 and 2 (host processes)
/// run checked traffic through the window the whole time, until the file `NI_VM_STOP_FILE`
/// appears (the harness creates it once the attacker is done), and must see no error.
fn scribble(ni: &Ni, tally: &mut Tally) {
    match ni.rank() {
        0 => scribble_attack(ni),
        1 | 2 => scribble_honest(ni, tally),
        r => panic!("scribble: rank {r} has no part"),
    }
}

fn scribble_attack(ni: &Ni) {
    use ni_abi::window as w;
    let dir = format!("/sys/bus/pci/devices/{}", ni_bdf());
    let map = |bar: u32, offset: u64, len: u64| -> *mut u8 {
        let path = format!("{dir}/resource{bar}");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: a fresh shared mapping of the BAR; checked below, never unmapped (the
        // process ends with the scenario).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                offset as libc::off_t,
            )
        };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap {path}: {} (boot the guest with iomem=relaxed)",
            std::io::Error::last_os_error()
        );
        p as *mut u8
    };
    let zone = map(3, 0, ni_abi::pci::BAR3_SIZE);
    let window = map(4, w::WINDOW_OFFSET, w::WINDOW_SIZE);
    let word = |p: *mut u8, off: u64| {
        // SAFETY: `off` is a 4-aligned offset inside the mapping `p` (all callers below).
        unsafe { (p.add(off as usize) as *mut u32).read_volatile() }
    };
    assert_eq!(
        word(window, w::hdr::MAGIC),
        w::hdr::MAGIC_VALUE,
        "BAR4 shows the window"
    );
    // Its own zone: both views are the same memory.
    let probe = w::zone::RINGS + 8;
    // SAFETY: inside the BAR3 mapping, 4-aligned.
    unsafe { (zone.add(probe as usize) as *mut u32).write_volatile(0x5EED) };
    assert_eq!(
        word(window, w::zone(ni.rank()) + probe),
        0x5EED,
        "BAR3 is this rank's zone"
    );
    println!("scribbling: own zone through BAR3, then rank 1's zone through BAR4");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let t = Instant::now();
    let mut passes = 0;
    while t.elapsed() < Duration::from_secs(5) {
        for i in 0..(w::ZONE_SIZE / 8) as usize {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Every ring slot gets the SEQ of the ring's first lap, so the peers take the
            // garbage after it as published messages (`ni_abi::window::SEQ`) and refuse it.
            let off = i as u64 * 8;
            let mut v = rng;
            let ring = w::ring_bytes(ni.size());
            let at = off.wrapping_sub(w::zone::RINGS) % ring;
            if off >= w::zone::RINGS && at < w::payload_area(ring) && at.is_multiple_of(w::SLOT) {
                v = (v & !0xFFFF_FFFF) | w::seq_for((at / w::SLOT) as u32) as u64;
            }
            // SAFETY: inside the BAR3 mapping (the zone), 8-aligned.
            unsafe { (zone as *mut u64).add(i).write_volatile(v) };
        }
        passes += 1;
    }
    // BAR3 past the zone is a hole: trapped, dropped, reads zero.
    // SAFETY: inside the 2 MiB BAR3 mapping, 4-aligned.
    unsafe { (zone.add(w::ZONE_SIZE as usize) as *mut u32).write_volatile(0xBAD) };
    assert_eq!(word(zone, w::ZONE_SIZE), 0, "BAR3's hole kept a write");
    println!("scribbled: {passes} passes over the own zone");
    let target = w::ring_head(2, 1);
    let before = word(window, target);
    use std::io::Write as _;
    std::io::stdout().flush().unwrap();
    // Time for the console to carry the line out before the store may end this machine.
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: inside the BAR4 window mapping, 4-aligned. The VMM mapped it read-only: this
    // store is the attack.
    unsafe { (window.add(target as usize) as *mut u32).write_volatile(before ^ 0xFFFF) };
    let after = word(window, target);
    assert_ne!(after, before ^ 0xFFFF, "a store into rank 1's zone took");
    println!("a store into rank 1's zone did not stick");
}

fn scribble_honest(ni: &Ni, tally: &mut Tally) {
    const TAG: u64 = 0x5C21 << 32;
    const STOP: u64 = 0x5709;
    let stop_file = std::env::var("NI_VM_STOP_FILE").expect("NI_VM_STOP_FILE");
    let me = ni.rank();
    let peer = 3 - me;
    let buf = ni.alloc(64 << 10).unwrap();
    let sizes = [0usize, 8, 60, 64, 200, 1000, 4096, 5000, 40000];
    let t = Instant::now();
    let mut rounds = 0u64;
    loop {
        let len = sizes[rounds as usize % sizes.len()];
        let data = pattern(len, rounds);
        if me == 1 {
            let done = std::path::Path::new(&stop_file).exists() && rounds >= 100;
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "the attacker never finished"
            );
            if done {
                ni.send(peer, &buf, 0..0, STOP).unwrap();
                break;
            }
            buf.write_at(0, &data);
            ni.send(peer, &buf, 0..len, TAG + rounds).unwrap();
            tally.send_bytes += len as u64;
            let st = ni
                .recv(Some(peer), &buf, 0..64 << 10, TAG + rounds, u64::MAX)
                .unwrap();
            assert_eq!(st.len, len as u64, "round {rounds}: echo length");
        } else {
            let st = ni.recv(Some(peer), &buf, 0..64 << 10, 0, 0).unwrap();
            if st.tag == STOP {
                break;
            }
            assert_eq!(st.tag, TAG + rounds, "round {rounds}: tag");
            assert_eq!(st.len, len as u64, "round {rounds}: length");
            let mut got = vec![0u8; len];
            buf.read_at(0, &mut got);
            assert!(got == data, "round {rounds}: payload differs");
            tally.recvs += 1;
            tally.recv_bytes += len as u64;
            ni.send(peer, &buf, 0..len, st.tag).unwrap();
            tally.send_bytes += len as u64;
            rounds += 1;
            continue;
        }
        let mut got = vec![0u8; len];
        buf.read_at(0, &mut got);
        assert!(got == data, "round {rounds}: echoed payload differs");
        tally.recvs += 1;
        tally.recv_bytes += len as u64;
        rounds += 1;
    }
    println!(
        "scribble: {rounds} checked round trips in {:?}",
        t.elapsed()
    );
}

/// Issue 18 in a guest: block in a receive nobody will match; the test kills the daemon when
/// it sees `waiting`. A guest has no socket to the daemon (QEMU has), so only the control
/// page's HEARTBEAT can tell: the receive must fail with `DaemonGone` within about a second.
fn daemon_dies(ni: Ni) {
    let buf = ni.alloc(4096).unwrap();
    println!("waiting");
    let t = Instant::now();
    match ni.recv(Some(ni.rank()), &buf, 0..64, 0xDEAD, u64::MAX) {
        Err(ni::Error::DaemonGone(why)) => {
            println!("gone after {} ms: {why}", t.elapsed().as_millis())
        }
        other => panic!("a receive under a dead daemon ended with {other:?}"),
    }
    if std::env::var_os("NI_VM_REATTACH").is_some() {
        // The host restarts the daemon and re-plugs the NI (QMP device_del + device_add):
        // let go, wait for the new function, and use it.
        drop((buf, ni));
        let ni = attach_again("the restarted daemon's NI");
        let buf = ni.alloc(4096).unwrap();
        let want = pattern(4096, 7);
        buf.write_at(0, &want);
        let me = ni.rank();
        let r = ni.irecv(Some(me), &buf, 2048..4096, 7, u64::MAX).unwrap();
        ni.send(me, &buf, 0..2048, 7).unwrap();
        let d = ni.wait(r).unwrap();
        let mut got = vec![0u8; 2048];
        buf.read_at(2048, &mut got);
        assert!(d.len == 2048 && got == want[..2048], "loopback corrupted");
        println!("loopback through the new daemon: 2048 bytes checked");
    }
    println!("ok daemon-dies");
}

/// Attach again once an NI is back (after an unplug, or a re-plug onto a restarted daemon),
/// trying every 200 ms for up to 240 s.
fn attach_again(what: &str) -> Ni {
    let t = Instant::now();
    let ni = loop {
        match Ni::attach() {
            Ok(ni) => break ni,
            Err(e) if t.elapsed() < Duration::from_secs(240) => {
                if std::env::var_os("NI_VM_VERBOSE").is_some() {
                    println!("not back yet: {e}");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{what} did not come back in 240 s: {e}"),
        }
    };
    println!(
        "attached again to NI {} as rank {} after {:.1} s",
        ni.node(),
        ni.rank(),
        t.elapsed().as_secs_f64()
    );
    ni
}

/// Barriers and allreduces done in the network, across every rank (guests and host
/// processes alike): f64 sums of a vector of odd length, i64 MIN, u64 XOR.
fn collectives(ni: &Ni) {
    use ni::ReduceOp;
    let n = ni.size() as u64;
    let me = ni.rank() as u64;
    let t = Instant::now();
    for _ in 0..20 {
        ni.barrier().unwrap();
    }
    println!("collectives: 20 barriers in {:?}", t.elapsed());

    const COUNT: usize = 100_003;
    let send = ni.alloc(COUNT * 8).unwrap();
    let recv = ni.alloc(COUNT * 8).unwrap();
    let put = |r: &Region, v: &dyn Fn(usize) -> [u8; 8]| {
        let mut b = Vec::with_capacity(COUNT * 8);
        for i in 0..COUNT {
            b.extend_from_slice(&v(i));
        }
        r.write_at(0, &b);
    };
    let get = |r: &Region, i: usize| {
        let mut b = [0u8; 8];
        r.read_at(i * 8, &mut b);
        b
    };
    // f64 sum: every term and the total are exact integers, so the check is exact.
    put(&send, &|i| {
        ((me * 1_000_000 + i as u64) as f64).to_le_bytes()
    });
    let t = Instant::now();
    ni.allreduce::<f64>(ReduceOp::Sum, &send, 0, &recv, 0, COUNT)
        .unwrap();
    let dt = t.elapsed();
    for i in [0, 1, COUNT / 2, COUNT - 1] {
        let want: f64 = (0..n).map(|r| (r * 1_000_000 + i as u64) as f64).sum();
        assert_eq!(
            f64::from_le_bytes(get(&recv, i)),
            want,
            "f64 sum, element {i}"
        );
    }
    // i64 min and u64 xor, in place.
    put(&recv, &|i| (i as i64 - me as i64 * 7).to_le_bytes());
    ni.allreduce::<i64>(ReduceOp::Min, &recv, 0, &recv, 0, COUNT)
        .unwrap();
    for i in [0, 5, COUNT - 1] {
        let want = i as i64 - (n as i64 - 1) * 7;
        assert_eq!(
            i64::from_le_bytes(get(&recv, i)),
            want,
            "i64 min, element {i}"
        );
    }
    put(&send, &|i| ((i as u64) << (me % 60)).to_le_bytes());
    ni.allreduce::<u64>(ReduceOp::Xor, &send, 0, &recv, 0, COUNT)
        .unwrap();
    for i in [1, 3, COUNT - 1] {
        let want = (0..n).fold(0u64, |a, r| a ^ ((i as u64) << (r % 60)));
        assert_eq!(
            u64::from_le_bytes(get(&recv, i)),
            want,
            "u64 xor, element {i}"
        );
    }
    ni.barrier().unwrap();
    println!(
        "collectives: allreduce f64 sum ({COUNT} elements, {dt:?}), i64 min, u64 xor checked over {n} ranks"
    );
}

/// Issue 16, a planned daemon restart under running guests: checked ping-pongs (8 B, 4000 B
/// through the window or the fabric, 64 KiB and 1 MiB through the fabric), an allreduce and
/// a barrier, round after round for `NI_VM_SOAK_SECS` (rank 0's clock; its verdict travels
/// as a message), while the host restarts the daemon (tests/vm/guests-planned-restart.sh).
/// Any error fails the rank. Prints `soaking` after the first round.
fn soak(ni: &Ni, tally: &mut Tally) {
    let secs: u64 = std::env::var("NI_VM_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let buf = ni.alloc(1 << 20).unwrap();
    let small = ni.alloc(4096).unwrap();
    let peer = 1 - ni.rank();
    let t = Instant::now();
    let mut round = 0u64;
    loop {
        let (r, rb, sb) = ni_tests::check::soak_pingpong(ni, &buf, round);
        tally.recvs += r;
        tally.recv_bytes += rb;
        tally.send_bytes += sb;
        ni_tests::check::soak_allreduce(ni, &small, round);
        let vtag = u64::MAX - 1;
        if ni.rank() == 0 {
            small.write_at(64, &[(t.elapsed() < Duration::from_secs(secs)) as u8]);
            ni.send(peer, &small, 64..65, vtag).unwrap();
            tally.send_bytes += 1;
        } else {
            ni.recv(Some(peer), &small, 64..65, vtag, u64::MAX).unwrap();
            tally.recvs += 1;
            tally.recv_bytes += 1;
        }
        ni.barrier().unwrap();
        round += 1;
        if round == 1 {
            println!("soaking");
        }
        let mut go = [0u8];
        small.read_at(64, &mut go);
        if go[0] == 0 {
            break;
        }
    }
    println!(
        "soak: {round} rounds checked in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// Issue 16, "blocking receives in guests": the cost of waking a receiver that sleeps on its
/// MSI-X. Rank 0 pauses 3 ms before each 8 B ping (long past libni's 1 ms of backoff, so a
/// blocking receiver is asleep on the interrupt), then spins for the pong; rank 1 either
/// spins on its receive (`polled`) or waits the way libni waits (`blocked`: spin, back off,
/// arm the completion interrupt and sleep; the ping's sender sees it asleep and asks the
/// device to WAKE it). Prints the full round trip, so the difference is the wake-up chain:
/// doorbell trap, the device, MSI-X through QEMU, the guest's vfio-pci handler, the eventfd.
fn wake(ni: &Ni, iters: usize, mode: &str) {
    const GAP: Duration = Duration::from_millis(3);
    let spin = |op: ni::Op| loop {
        if ni.test(&op).unwrap().is_some() {
            break;
        }
        std::hint::spin_loop();
    };
    let buf = ni.alloc(4096).unwrap();
    let mut rt = Vec::with_capacity(iters);
    let mut calls = Vec::with_capacity(iters);
    for i in 0..iters + 10 {
        if ni.rank() == 0 {
            std::thread::sleep(GAP);
            let t = Instant::now();
            let r = ni.irecv(Some(1), &buf, 64..72, 2, u64::MAX).unwrap();
            let s = Instant::now();
            let op = ni.isend(1, &buf, 0..8, 1).unwrap();
            let call = s.elapsed();
            spin(op);
            spin(r);
            if i >= 10 {
                rt.push(t.elapsed().as_secs_f64() * 1e6);
                calls.push(call.as_secs_f64() * 1e6);
            }
        } else if ni.rank() == 1 {
            let r = ni.irecv(Some(0), &buf, 0..8, 1, u64::MAX).unwrap();
            match mode {
                "polled" => spin(r),
                _ => {
                    ni.wait(r).unwrap();
                }
            }
            spin(ni.isend(0, &buf, 64..72, 2).unwrap());
        }
    }
    if ni.rank() == 0 {
        let (m, p10, p90) = quantiles(&mut rt);
        calls.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "wake {mode} rtt_us median={m:.1} p10={p10:.1} p90={p90:.1} n={} (the send call: median {:.1})",
            rt.len(),
            calls[calls.len() / 2]
        );
    }
}

/// The guest kernel's own part of a wake-up, no device involved: a thread asleep in `poll` on
/// an eventfd is woken by another thread of the same guest writing it, 3 ms later. The
/// floor under `wake blocked` (which adds the interrupt's way in: QEMU, the guest's IRQ
/// entry and vfio-pci's handler).
fn local_wake(iters: usize) {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd returns a new descriptor or -1 (checked).
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor, owned here.
    let ev = std::sync::Arc::new(unsafe { std::fs::File::from_raw_fd(fd) });
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    let waker = {
        let ev = ev.clone();
        std::thread::spawn(move || {
            for _ in 0..iters + 10 {
                std::thread::sleep(Duration::from_millis(3));
                tx.send(Instant::now()).unwrap();
                (&*ev).write_all(&1u64.to_ne_bytes()).unwrap();
            }
        })
    };
    let mut us = Vec::new();
    for i in 0..iters + 10 {
        let mut b = [0u8; 8];
        (&*ev).read_exact(&mut b).unwrap();
        let sent = rx.recv().unwrap();
        if i >= 10 {
            us.push(sent.elapsed().as_secs_f64() * 1e6);
        }
    }
    waker.join().unwrap();
    let (m, p10, p90) = quantiles(&mut us);
    println!(
        "wake local-eventfd us median={m:.1} p10={p10:.1} p90={p90:.1} n={}",
        us.len()
    );
}
