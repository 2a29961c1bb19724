//! The machine's own copy, measured beside the runs: how long one warm `memcpy` of each size
//! the run measured takes here, on one cpu. A step between sizes where ni's time grows no
//! faster than this copy's is one of the machine's cache boundaries, not a cliff of ni's
//! ([`super::parity`]): a 32 KiB copy no longer fits this machine's 48 KiB L1 beside its
//! source and takes 7× a 16 KiB one's time, whatever copies it (glibc, an AVX2 loop and
//! `rep movsb` alike), and ni's put of 16 → 32 KiB runs at that copy's speed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::pin;

/// Each size is copied in batches of about this long, the best batch kept.
const BATCH: Duration = Duration::from_millis(2);
/// Batches per size.
const BATCHES: usize = 7;
/// Sizes past this are not measured (two buffers of it are allocated).
const MAX_BYTES: u64 = 256 << 20;

/// Seconds one copy of each of `sizes` bytes takes, from one buffer to another both warm (as
/// a put or a message of that size repeated), on a thread pinned to the first cpu this
/// process may use: the best of [`BATCHES`] batches.
pub fn measure(sizes: &[u64]) -> Vec<(u64, f64)> {
    let mut sizes: Vec<u64> = sizes
        .iter()
        .copied()
        .filter(|&s| s > 0 && s <= MAX_BYTES)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let Some(&max) = sizes.last() else {
        return Vec::new();
    };
    let cpu = pin::current_cpus().first().copied();
    std::thread::spawn(move || {
        if let Some(c) = cpu {
            // Unpinned it still measures, only noisier.
            let _ = pin::pin_self(&[c]);
        }
        let src = vec![1u8; max as usize];
        let mut dst = vec![2u8; max as usize];
        sizes
            .iter()
            .map(|&n| {
                let n = n as usize;
                let (s, d) = (&src[..n], &mut dst[..n]);
                // Warm, and as many copies as make a batch.
                let mut iters = 1u32;
                loop {
                    let t = Instant::now();
                    for _ in 0..iters {
                        black_box(&mut *d).copy_from_slice(black_box(s));
                    }
                    if t.elapsed() >= BATCH || iters >= 1 << 24 {
                        break;
                    }
                    iters *= 2;
                }
                let best = (0..BATCHES)
                    .map(|_| {
                        let t = Instant::now();
                        for _ in 0..iters {
                            black_box(&mut *d).copy_from_slice(black_box(s));
                        }
                        t.elapsed().as_secs_f64() / iters as f64
                    })
                    .fold(f64::INFINITY, f64::min);
                (n as u64, best)
            })
            .collect()
    })
    .join()
    .unwrap_or_default()
}

/// As `results.json` keeps it: `[{"bytes", "us"}]`.
pub fn to_json(copy: &[(u64, f64)]) -> Value {
    json!(copy
        .iter()
        .map(|&(b, s)| json!({"bytes": b, "us": s * 1e6}))
        .collect::<Vec<_>>())
}

/// [`to_json`] read back (a run saved before the bench measured it has none: no step is
/// then the machine's).
pub fn from_json(v: &Value) -> Vec<(u64, f64)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["bytes"].as_u64()?, e["us"].as_f64()? * 1e-6)))
        .collect()
}

/// The copy's time at exactly `bytes`, if measured.
pub fn at(copy: &[(u64, f64)], bytes: u64) -> Option<f64> {
    copy.iter().find(|c| c.0 == bytes).map(|c| c.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_copies_take_longer_and_read_back() {
        let c = measure(&[1 << 20, 64, 0, 64]);
        assert_eq!(c.iter().map(|x| x.0).collect::<Vec<_>>(), [64, 1 << 20]);
        // 16384 times the bytes: even from L1 against DRAM, far more than 4 times the time.
        assert!(c[1].1 > 4.0 * c[0].1, "{c:?}");
        assert_eq!(from_json(&to_json(&c)).len(), 2);
        assert_eq!(at(&c, 64), Some(c[0].1));
        assert_eq!(at(&c, 65), None);
    }
}
