//! The measuring loop every Rust transport shares (the MPI programs in `tests/bench/mpi/` do
//! the same in C): rank 0 drives, the other ranks obey control messages.
//!
//! For each point: warm up with 1, 2, 4, ... iterations until a round takes `warm`; size a
//! batch to take about `target`; run `batches` batches (fewer when a point would take longer
//! than `cap`), each announced by a control message, timed at rank 0 from after the control
//! message to the end of its part. A batch's value is seconds per operation.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub type R<T> = Result<T, String>;

/// What the peers are told: run `n` iterations of pattern `cmd` with `size` and `window`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ctl {
    pub cmd: u64,
    pub n: u64,
    pub size: u64,
    pub window: u64,
}

impl Ctl {
    pub const WORDS: usize = 4;
    pub const BYTES: usize = 8 * Self::WORDS;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        for (i, w) in [self.cmd, self.n, self.size, self.window]
            .iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Ctl {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        Ctl {
            cmd: w(0),
            n: w(1),
            size: w(2),
            window: w(3),
        }
    }
}

/// Patterns. `QUIT` ends the peers' loop.
pub mod cmd {
    pub const QUIT: u64 = 0;
    /// Rank 0 sends `size` bytes to rank 1, which sends them back (OSU latency).
    pub const PINGPONG: u64 = 1;
    /// Rank 0 sends `window` messages of `size`, rank 1 answers with one 0-byte ack (OSU bw).
    pub const STREAM: u64 = 2;
    /// Ranks `r < P/2` stream windows to `r + P/2` (OSU mbw_mr), between two barriers.
    pub const MSGRATE: u64 = 3;
    /// 64-byte T3E message-queue messages, rank 0 to rank 1 and back.
    pub const MQ_PINGPONG: u64 = 4;
    /// `window` T3E messages in flight from rank 0 to rank 1, which answers when it has them.
    pub const MQ_STREAM: u64 = 5;
    /// Rank 0 puts `size` bytes into rank 1's region and waits for each (latency).
    pub const PUT: u64 = 6;
    /// Rank 0 keeps `window` puts in flight (bandwidth).
    pub const PUT_STREAM: u64 = 7;
    pub const GET: u64 = 8;
    pub const GET_STREAM: u64 = 9;
    /// Collectives over every rank; `size` is the element count. Each batch ends with a
    /// barrier, so rank 0's time covers the slowest rank.
    pub const BARRIER: u64 = 10;
    pub const BCAST: u64 = 11;
    pub const ALLREDUCE_I64: u64 = 12;
    pub const ALLREDUCE_F64: u64 = 13;
    /// A 64-byte active message from rank 0 to rank 1, whose handler's count rank 1 waits
    /// for before sending one back (MLINK ROP).
    pub const AM_PINGPONG: u64 = 14;
    /// Collectives like `BCAST`: a sum of f64 to rank 0, an inclusive f64 sum scan, and an
    /// allgather of `size` u64 per rank.
    pub const REDUCE_F64: u64 = 15;
    pub const SCAN_F64: u64 = 16;
    pub const ALLGATHER: u64 = 17;
}

/// One side of a benchmark: control messages plus the patterns.
pub trait Link {
    fn rank(&self) -> u32;
    /// Rank 0: tell every peer.
    fn ctl_send(&mut self, c: Ctl) -> R<()>;
    /// Peers: the next order from rank 0.
    fn ctl_recv(&mut self) -> R<Ctl>;
    /// Run `c.n` iterations of the pattern in this rank's role. When `iters` is given
    /// (rank 0, ping-pong patterns), push each iteration's duration in seconds into it.
    fn run(&mut self, c: &Ctl, iters: Option<&mut Vec<f64>>) -> R<()>;
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub warm: Duration,
    pub target: Duration,
    pub batches: usize,
    /// At most this long per point (fewer batches past it, never fewer than 3).
    pub cap: Duration,
}

impl Plan {
    pub fn from_env() -> Plan {
        let ms = |k: &str, d: f64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .map(|v| Duration::from_secs_f64(v / 1e3))
                .unwrap_or(Duration::from_secs_f64(d / 1e3))
        };
        Plan {
            warm: ms("NIB_WARM_MS", 10.0),
            target: ms("NIB_TARGET_MS", 20.0),
            batches: std::env::var("NIB_BATCHES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(11),
            cap: ms("NIB_CAP_MS", 4000.0),
        }
    }

    /// As environment variables for workers (Rust and MPI alike).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "NIB_WARM_MS".into(),
                format!("{}", self.warm.as_secs_f64() * 1e3),
            ),
            (
                "NIB_TARGET_MS".into(),
                format!("{}", self.target.as_secs_f64() * 1e3),
            ),
            ("NIB_BATCHES".into(), self.batches.to_string()),
            (
                "NIB_CAP_MS".into(),
                format!("{}", self.cap.as_secs_f64() * 1e3),
            ),
        ]
    }
}

/// What one point produced, as printed by a worker (`NIB {json}`) and read by the runner.
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub metric: String,
    pub dtype: String,
    pub size: u64,
    /// Bytes moved per operation (for bandwidth).
    pub bytes: u64,
    pub ranks: u32,
    pub iters: u64,
    /// Seconds per operation, one per batch.
    pub batches: Vec<f64>,
    /// Slowest single iteration and iterations over 1 ms (ping-pong patterns only).
    pub max_iter: Option<f64>,
    pub stalls_1ms: Option<u64>,
    pub error: Option<String>,
}

impl Point {
    pub fn to_json(&self) -> Value {
        json!({
            "metric": self.metric,
            "dtype": self.dtype,
            "size": self.size,
            "bytes": self.bytes,
            "ranks": self.ranks,
            "iters": self.iters,
            "batches": self.batches,
            "max_iter_s": self.max_iter,
            "stalls_1ms": self.stalls_1ms,
            "error": self.error,
        })
    }

    pub fn from_json(v: &Value) -> Option<Point> {
        Some(Point {
            metric: v["metric"].as_str()?.to_string(),
            dtype: v["dtype"].as_str().unwrap_or("").to_string(),
            size: v["size"].as_u64()?,
            bytes: v["bytes"].as_u64().unwrap_or(0),
            ranks: v["ranks"].as_u64().unwrap_or(2) as u32,
            iters: v["iters"].as_u64().unwrap_or(0),
            batches: v["batches"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default(),
            max_iter: v["max_iter_s"].as_f64(),
            stalls_1ms: v["stalls_1ms"].as_u64(),
            error: v["error"].as_str().map(str::to_string),
        })
    }

    /// The line a worker prints.
    pub fn line(&self) -> String {
        format!("NIB {}", self.to_json())
    }
}

/// Per-iteration times of a ping-pong (for the stall count and the worst iteration), at one
/// TSC read an iteration, converted to seconds once the loop ends by the loop's own clock
/// time. Open MPI's programs time whole batches only: two clock reads an iteration (37 ns on
/// this machine's vDSO) would be a cost in ni's and the sockets' figures that Open MPI's do
/// not carry; a TSC read costs 7 ns.
pub struct Laps<'a> {
    /// Where the times go; `None`: no lap is timed (no cost at all).
    out: Option<&'a mut Vec<f64>>,
    start: Instant,
    t0: u64,
    last: u64,
    ticks: Vec<u64>,
}

impl<'a> Laps<'a> {
    /// Laps for a loop of `n` iterations, their times to go to `out` (if any).
    pub fn start(out: Option<&'a mut Vec<f64>>, n: u64) -> Laps<'a> {
        let on = out.is_some();
        let t0 = if on { tsc() } else { 0 };
        Laps {
            out,
            start: Instant::now(),
            t0,
            last: t0,
            ticks: Vec::with_capacity(if on { n as usize } else { 0 }),
        }
    }

    #[inline]
    pub fn lap(&mut self) {
        if self.out.is_none() {
            return;
        }
        let now = tsc();
        // Saturating: a TSC that stepped back (a migrated vCPU) is a 0-tick lap, not 2^64.
        self.ticks.push(now.saturating_sub(self.last));
        self.last = now;
    }

    /// The iterations' times in seconds, appended to the output.
    pub fn finish(self) {
        let Some(out) = self.out else {
            return;
        };
        let secs = self.start.elapsed().as_secs_f64();
        let ticks = tsc().saturating_sub(self.t0).max(1);
        let per_tick = secs / ticks as f64;
        out.extend(self.ticks.iter().map(|&t| t as f64 * per_tick));
    }
}

/// A cheap monotonic tick: the TSC (constant and nonstop on the machines this runs on), else
/// nanoseconds since the first call.
#[inline]
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC has no preconditions.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Rank 0: measure one point of pattern `c` (its `n` is ignored). `ops` is operations per
/// iteration (2 for a round trip, `window` for a stream).
pub fn measure(link: &mut dyn Link, c: Ctl, ops: f64, plan: &Plan, per_iter: bool) -> R<Point> {
    let round = |link: &mut dyn Link, n: u64, iters: Option<&mut Vec<f64>>| -> R<f64> {
        link.ctl_send(Ctl { n, ..c })?;
        let t = Instant::now();
        link.run(&Ctl { n, ..c }, iters)?;
        Ok(t.elapsed().as_secs_f64())
    };
    // Warm-up and calibration.
    let mut n = 1u64;
    let mut el;
    loop {
        el = round(link, n, None)?;
        if el >= plan.warm.as_secs_f64() || n >= 1 << 24 {
            break;
        }
        // Grow fast while far off, then aim.
        let want = (n as f64 * plan.warm.as_secs_f64() / el.max(1e-9)).ceil() as u64;
        n = want.clamp(n + 1, n.saturating_mul(8));
    }
    let per = el / n as f64;
    let iters = ((plan.target.as_secs_f64() / per).round() as u64).clamp(1, 1 << 26);
    let batch_secs = per * iters as f64;
    let mut batches = plan.batches.max(1);
    if batch_secs * batches as f64 > plan.cap.as_secs_f64() {
        batches = ((plan.cap.as_secs_f64() / batch_secs) as usize).clamp(3.min(batches), batches);
    }
    let mut out = Vec::with_capacity(batches);
    let mut times = Vec::new();
    let mut max_iter: Option<f64> = None;
    let mut stalls = 0u64;
    for _ in 0..batches {
        times.clear();
        if per_iter {
            times.reserve(iters as usize);
        }
        let el = round(link, iters, per_iter.then_some(&mut times))?;
        out.push(el / (iters as f64 * ops));
        for &t in &times {
            max_iter = Some(max_iter.map_or(t, |m: f64| m.max(t)));
            if t > 1e-3 {
                stalls += 1;
            }
        }
    }
    Ok(Point {
        size: c.size,
        iters,
        batches: out,
        max_iter,
        stalls_1ms: per_iter.then_some(stalls),
        ..Default::default()
    })
}

/// Peers: obey rank 0 until it says `QUIT`.
pub fn serve(link: &mut dyn Link) -> R<()> {
    loop {
        let c = link.ctl_recv()?;
        if c.cmd == cmd::QUIT {
            return Ok(());
        }
        link.run(&c, None)?;
    }
}

/// Message sizes: 0 (if `zero`) then powers of two from `from` to `to`.
pub fn sizes(zero: bool, from: u64, to: u64) -> Vec<u64> {
    let mut v = Vec::new();
    if zero {
        v.push(0);
    }
    let mut s = from.max(1);
    while s <= to {
        v.push(s);
        s *= 2;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctl_round_trips() {
        let c = Ctl {
            cmd: cmd::STREAM,
            n: 7,
            size: 1 << 20,
            window: 64,
        };
        assert_eq!(Ctl::decode(&c.encode()), c);
    }

    #[test]
    fn size_lists() {
        assert_eq!(sizes(true, 1, 8), vec![0, 1, 2, 4, 8]);
        assert_eq!(sizes(false, 4, 16), vec![4, 8, 16]);
    }

    /// A loopback link: rank 0 only, patterns cost a little busy time.
    struct Fake(u64);
    impl Link for Fake {
        fn rank(&self) -> u32 {
            0
        }
        fn ctl_send(&mut self, _: Ctl) -> R<()> {
            Ok(())
        }
        fn ctl_recv(&mut self) -> R<Ctl> {
            Ok(Ctl::default())
        }
        fn run(&mut self, c: &Ctl, mut iters: Option<&mut Vec<f64>>) -> R<()> {
            for _ in 0..c.n {
                let t = Instant::now();
                while t.elapsed() < Duration::from_nanos(200) {}
                self.0 += 1;
                if let Some(v) = iters.as_deref_mut() {
                    v.push(t.elapsed().as_secs_f64());
                }
            }
            Ok(())
        }
    }

    #[test]
    fn measure_calibrates_and_batches() {
        let plan = Plan {
            warm: Duration::from_micros(200),
            target: Duration::from_micros(200),
            batches: 5,
            cap: Duration::from_secs(1),
        };
        let mut f = Fake(0);
        let p = measure(&mut f, Ctl::default(), 1.0, &plan, true).unwrap();
        assert_eq!(p.batches.len(), 5);
        assert!(p.iters >= 1);
        assert!(p.batches.iter().all(|&b| b >= 150e-9));
        assert!(p.max_iter.unwrap() >= 150e-9);
    }
}
