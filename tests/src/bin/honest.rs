//! An honest rank for the adversarial tests (`tests/tests/hostile.rs`, issue 18): two of these,
//! on the two NIs of one partition, ping-pong payloads of mixed sizes (through the partition
//! window up to 4 KiB, through the fabric above) and check every byte, until rank 0 reads
//! `stop` on its stdin (or its stdin closes).
//!
//! Rank 0 prints `ready` after its first round trip and `progress rounds=N` about once a
//! second; both print `ok honest rounds=N worst_gap_us=G` at the end, G being the longest
//! time between two completed round trips (rank 0) or two arrivals (rank 1). Any error, a
//! wrong byte, or an operation that does not complete within `STALL` panics (exit 101).

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ni::Ni;
use ni_tests::check::pattern;

/// Sizes cycled through: empty, eager in the window, the eager limit and one past it
/// (rendezvous: the fabric copies the payload), and two larger fabric transfers.
const SIZES: [usize; 7] = [0, 8, 1000, 4096, 4097, 65536, 262144];
const MAX: usize = 262144;
const STOP: u64 = 1 << 62;
const ECHO: u64 = 1 << 61;
/// Longer than any test's bound on a gap: past it the rank gives up and says where.
const STALL: Duration = Duration::from_secs(3);

fn main() {
    let ni = Ni::attach().unwrap_or_else(|e| panic!("attach: {e}"));
    let pats: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(k, &n)| pattern(n, k as u64 + 1))
        .collect();
    // Each round's payload is its size's pattern with the round number in front.
    let payload = |round: u64| {
        let mut v = pats[round as usize % SIZES.len()].clone();
        if v.len() >= 8 {
            v[..8].copy_from_slice(&round.to_le_bytes());
        }
        v
    };
    let sbuf = ni.alloc(MAX).unwrap();
    let rbuf = ni.alloc(MAX).unwrap();
    let mut worst = Duration::ZERO;
    let mut last: Option<Instant> = None;
    let mut rounds = 0u64;
    if ni.rank() == 0 {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            for l in std::io::stdin().lock().lines() {
                match l {
                    Ok(l) if l.trim() != "stop" => continue,
                    _ => break,
                }
            }
            s.store(true, Ordering::Relaxed);
        });
        let mut said = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let round = rounds;
            let want = payload(round);
            let n = want.len();
            let r = ni
                .irecv(Some(1), &rbuf, 0..MAX, round | ECHO, u64::MAX)
                .unwrap_or_else(|e| panic!("round {round} ({n} B): posting the receive: {e}"));
            sbuf.write_at(0, &want);
            let s = ni
                .isend(1, &sbuf, 0..n, round)
                .unwrap_or_else(|e| panic!("round {round} ({n} B): posting the send: {e}"));
            ni.wait_timeout(s, Some(STALL))
                .unwrap_or_else(|e| panic!("round {round} ({n} B): send: {e}"));
            let d = ni
                .wait_timeout(r, Some(STALL))
                .unwrap_or_else(|e| panic!("round {round} ({n} B): receive of the echo: {e}"));
            assert_eq!(d.len as usize, n, "round {round}: echo length");
            let mut got = vec![0u8; n];
            rbuf.read_at(0, &mut got);
            assert!(got == want, "round {round}: the echo of {n} bytes differs");
            let now = Instant::now();
            match last {
                Some(l) => worst = worst.max(now - l),
                None => println!("ready"),
            }
            last = Some(now);
            rounds += 1;
            if said.elapsed() > Duration::from_secs(1) {
                println!(
                    "progress rounds={rounds} worst_gap_us={}",
                    worst.as_micros()
                );
                said = Instant::now();
            }
        }
        let s = ni.isend(1, &sbuf, 0..0, STOP).unwrap();
        ni.wait_timeout(s, Some(STALL))
            .unwrap_or_else(|e| panic!("stop message: {e}"));
    } else {
        loop {
            let r = ni.irecv(Some(0), &rbuf, 0..MAX, 0, 0).unwrap();
            let d = ni
                .wait_timeout(r, Some(Duration::from_secs(10)))
                .unwrap_or_else(|e| panic!("after round {rounds}: receive: {e}"));
            if d.tag == STOP {
                break;
            }
            let round = d.tag;
            let want = payload(round);
            let n = want.len();
            assert_eq!(round, rounds, "rounds arrive in order");
            assert_eq!(d.len as usize, n, "round {round}: length");
            let mut got = vec![0u8; n];
            rbuf.read_at(0, &mut got);
            assert!(got == want, "round {round}: {n} bytes arrived corrupted");
            let now = Instant::now();
            if let Some(l) = last {
                worst = worst.max(now - l);
            }
            last = Some(now);
            sbuf.write_at(0, &got);
            let s = ni.isend(0, &sbuf, 0..n, round | ECHO).unwrap();
            ni.wait_timeout(s, Some(STALL))
                .unwrap_or_else(|e| panic!("round {round} ({n} B): echo send: {e}"));
            rounds += 1;
        }
    }
    println!(
        "ok honest rounds={rounds} worst_gap_us={}",
        worst.as_micros()
    );
}
