//! Active-message handlers run with the NI unlocked, so a handler may call back into the same
//! `Ni`: here every request is answered with `am_send` from within its handler. The same two
//! ranks also check the smaller API guarantees that need a live NI: a truncated receive
//! reports the sender's full length and tag, `Ni::forget` drops an operation, and
//! `MessageQueue::take` stops at the queue region's end whatever Tail is swapped in.
//!
//! The test runs this test binary again, as two ranks under `nirun -n 2` (which starts a
//! private `ni-device`), selecting `rank_body` with `NI_AM_REENTRANT_RANK=1`; run without that
//! variable, `rank_body` does nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ni::{Error, Ni, Status};
use ni_abi::fastpath::mqcw;

const NIRUN: &str = env!("CARGO_BIN_EXE_nirun");
const LIBNI: &str = env!("CARGO_MANIFEST_DIR");
const CHILD: &str = "NI_AM_REENTRANT_RANK";

const PING: u64 = 1;
const PONG: u64 = 2;
const ROUNDS: usize = 20;

/// What the PONG handler saw: (source, payload) in arrival order.
type Arrivals = Arc<Mutex<Vec<(u32, Vec<u8>)>>>;

/// `cargo build -p ni-device` into the target directory and profile nirun came from, so the
/// daemon speaks this libni's protocol.
fn device() -> PathBuf {
    let bin_dir = Path::new(NIRUN).parent().unwrap();
    let profile = match bin_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) => p.to_string(),
        None => panic!("cannot tell the profile of {}", bin_dir.display()),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(Path::new(LIBNI).join(".."))
        .args([
            "build",
            "-p",
            "ni-device",
            "--profile",
            &profile,
            "--target-dir",
        ])
        .arg(bin_dir.parent().unwrap());
    let out = cmd.output().expect("running cargo build");
    assert!(
        out.status.success(),
        "cargo build -p ni-device failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = bin_dir.join("ni-device");
    assert!(d.exists(), "{} is missing", d.display());
    d
}

#[test]
fn am_handler_replies_with_am_send_from_within_the_handler() {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(NIRUN);
    cmd.args(["-n", "2", "--timeout", "120", "--device"])
        .arg(device())
        .arg(exe)
        .args(["--exact", "rank_body", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1");
    let out = cmd.output().expect("running nirun");
    let text = format!(
        "{cmd:?} exited {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for r in 0..2 {
        for e in [
            format!("[{r}] {ROUNDS} replies sent from handlers, {ROUNDS} received"),
            format!("[{r}] message queue take stops at the region's end"),
            format!("[{r}] rank PASS"),
        ] {
            assert!(stdout.lines().any(|l| l == e), "no line {e:?}:\n{text}");
        }
    }
    for e in [
        "[1] truncated receive: 100 bytes, tag 9, from rank 0",
        "[0] forgotten receive ok",
    ] {
        assert!(stdout.lines().any(|l| l == e), "no line {e:?}:\n{text}");
    }
}

/// One rank's part (only under nirun, see the module comment).
#[test]
fn rank_body() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // End the harness's "test rank_body ... " line: what follows are whole lines.
    println!();
    let ni = Arc::new(Ni::attach().expect("attach"));
    let (me, n) = (ni.rank(), ni.size());
    assert_eq!(n, 2, "run with nirun -n 2");
    let peer = 1 - me;

    // PING: answer at once, from within the handler, with an active message of our own; a
    // nested progress() from a handler must neither deadlock nor recurse.
    let replied = Arc::new(Mutex::new(0usize));
    {
        let weak: Weak<Ni> = Arc::downgrade(&ni);
        let replied = replied.clone();
        let depth = Arc::new(Mutex::new(0u32));
        ni.am_register(PING, move |src, payload| {
            let ni = weak.upgrade().expect("the Ni is alive");
            {
                let mut d = depth.lock().unwrap();
                assert_eq!(*d, 0, "handlers nested");
                *d += 1;
            }
            let mut reply = b"pong:".to_vec();
            reply.extend_from_slice(payload);
            ni.am_send(src, PONG, &reply)
                .expect("am_send from a handler");
            ni.progress().expect("progress from a handler");
            *replied.lock().unwrap() += 1;
            *depth.lock().unwrap() -= 1;
        });
    }
    let pongs: Arrivals = Arc::default();
    {
        let pongs = pongs.clone();
        ni.am_register(PONG, move |src, payload| {
            pongs.lock().unwrap().push((src, payload.to_vec()))
        });
    }
    ni.barrier().unwrap();
    for i in 0..ROUNDS {
        ni.am_send(peer, PING, format!("{me}:{i}").as_bytes())
            .unwrap();
    }
    let t = Instant::now();
    while pongs.lock().unwrap().len() < ROUNDS || *replied.lock().unwrap() < ROUNDS {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} pongs, {} replies after 30 s",
            pongs.lock().unwrap().len(),
            replied.lock().unwrap()
        );
        ni.progress().unwrap();
        std::thread::sleep(Duration::from_micros(100));
    }
    {
        let got = pongs.lock().unwrap();
        for (i, (src, p)) in got.iter().enumerate() {
            assert_eq!(*src, peer);
            assert_eq!(p, format!("pong:{me}:{i}").as_bytes(), "in order");
        }
    }
    println!(
        "{} replies sent from handlers, {} received",
        replied.lock().unwrap(),
        pongs.lock().unwrap().len()
    );
    ni.barrier().unwrap();

    // A truncated receive reports the sender's full length and tag.
    let buf = ni.alloc(4096).unwrap();
    if me == 0 {
        ni.send(peer, &buf, 0..100, 9).unwrap();
    } else {
        match ni.recv(Some(peer), &buf, 0..10, 9, u64::MAX) {
            Err(Error::Failed {
                status: Status::Truncated,
                rank,
                len,
                tag,
                ..
            }) => {
                assert_eq!((rank, len, tag), (peer, 100, 9));
                println!("truncated receive: {len} bytes, tag {tag}, from rank {rank}");
            }
            other => panic!("a truncated receive gave {other:?}"),
        }
    }
    ni.barrier().unwrap();

    // A forgotten receive: its buffer still fills, its completion goes nowhere, and the next
    // receive works.
    if me == 0 {
        let o = ni.irecv(Some(peer), &buf, 0..16, 77, u64::MAX).unwrap();
        ni.forget(o);
        ni.barrier().unwrap();
        let d = ni.recv(Some(peer), &buf, 16..32, 78, u64::MAX).unwrap();
        assert_eq!((d.len, d.tag), (16, 78));
        let mut b = [0u8; 16];
        buf.read_at(0, &mut b);
        assert_eq!(
            b, [0x77; 16],
            "the forgotten receive still filled its buffer"
        );
        println!("forgotten receive ok");
    } else {
        buf.write_at(0, &[0x77; 16]);
        ni.barrier().unwrap();
        ni.send(peer, &buf, 0..16, 77).unwrap();
        ni.send(peer, &buf, 0..16, 78).unwrap();
    }
    ni.barrier().unwrap();

    // MessageQueue::take with a Tail swapped in beyond the region stops at its end.
    let mut q = ni.mq_create(4, 4).unwrap();
    let slots = (q.region().len() / 64) as u64;
    q.swap(mqcw::make(false, 2 * slots + 5, 4, 4));
    assert_eq!(
        q.take().len() as u64,
        slots - 1,
        "slots 1 .. the region's end"
    );
    assert!(q.take().is_empty());
    println!("message queue take stops at the region's end");

    ni.barrier().unwrap();
    println!("rank PASS");
}
