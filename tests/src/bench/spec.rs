//! What each mode measures: the points, for the Rust transports (ni, sockets) and for the MPI
//! programs, with the same metric names so the report can put them side by side.

use serde_json::{json, Value};

use super::driver::{cmd, sizes, Ctl};

pub const MODES: &[&str] = &[
    "latency",
    "bw",
    "msgrate",
    "mq",
    "am",
    "put",
    "get",
    "barrier",
    "bcast",
    "allreduce",
    "reduce",
    "allgather",
    "scan",
];

/// Messages in flight in the streaming patterns (OSU's window).
pub const WINDOW: u64 = 64;

pub fn is_collective(mode: &str) -> bool {
    matches!(
        mode,
        "barrier" | "bcast" | "allreduce" | "reduce" | "allgather" | "scan"
    )
}

/// Modes that use more than two ranks.
pub fn uses_ranks(mode: &str) -> bool {
    mode == "msgrate" || is_collective(mode)
}

#[derive(Clone, Debug)]
pub struct Sizes {
    pub max: u64,
    pub quick: bool,
    /// Point-to-point sizes given on the command line (latency, bw, put, get, msgrate).
    pub custom: Option<Vec<u64>>,
    /// Collectives: largest buffer in bytes.
    pub coll_max: u64,
}

impl Sizes {
    pub fn latency(&self) -> Vec<u64> {
        if let Some(c) = &self.custom {
            return c.clone();
        }
        if self.quick {
            vec![0, 8, 4096]
        } else {
            sizes(true, 1, self.max)
        }
    }
    pub fn bw(&self) -> Vec<u64> {
        if let Some(c) = &self.custom {
            return c.clone();
        }
        if self.quick {
            vec![8, 65536]
        } else {
            sizes(false, 1, self.max)
        }
    }
    pub fn rma(&self) -> Vec<u64> {
        if let Some(c) = &self.custom {
            return c.clone();
        }
        if self.quick {
            vec![8, 65536]
        } else {
            sizes(false, 1, self.max)
        }
    }
    pub fn rate(&self) -> Vec<u64> {
        if let Some(c) = &self.custom {
            return c.clone();
        }
        if self.quick {
            vec![8]
        } else {
            vec![1, 8, 64, 1024]
        }
    }
    /// Collective element counts (8-byte elements) or bcast bytes: 1, 4, 16, ...
    pub fn coll(&self, elem: u64) -> Vec<u64> {
        if self.quick {
            return vec![1, 1024];
        }
        let mut v = Vec::new();
        let mut n = 1;
        while n * elem <= self.coll_max {
            v.push(n);
            n *= 4;
        }
        if v.last().map(|&l| l * elem) != Some(self.coll_max) && self.coll_max >= elem {
            v.push(self.coll_max / elem);
        }
        v
    }
}

/// One point for a Rust transport.
#[derive(Clone, Debug)]
pub struct Spec {
    pub metric: String,
    pub dtype: String,
    pub ctl: Ctl,
    /// Operations per iteration.
    pub ops: f64,
    /// Bytes per operation.
    pub bytes: u64,
    /// Record each iteration's time (ping-pong patterns).
    pub per_iter: bool,
}

impl Spec {
    fn new(metric: &str, c: u64, size: u64, window: u64, ops: f64, per_iter: bool) -> Spec {
        Spec {
            metric: metric.into(),
            dtype: String::new(),
            ctl: Ctl {
                cmd: c,
                n: 0,
                size,
                window,
            },
            ops,
            bytes: size,
            per_iter,
        }
    }

    pub fn to_json(&self) -> Value {
        json!([
            self.metric,
            self.dtype,
            self.ctl.cmd,
            self.ctl.size,
            self.ctl.window,
            self.ops,
            self.bytes,
            self.per_iter
        ])
    }

    pub fn from_json(v: &Value) -> Option<Spec> {
        Some(Spec {
            metric: v[0].as_str()?.into(),
            dtype: v[1].as_str()?.into(),
            ctl: Ctl {
                cmd: v[2].as_u64()?,
                n: 0,
                size: v[3].as_u64()?,
                window: v[4].as_u64()?,
            },
            ops: v[5].as_f64()?,
            bytes: v[6].as_u64()?,
            per_iter: v[7].as_bool()?,
        })
    }
}

/// Which transports run a mode at `ranks`, besides ni: the socket baselines are two-process.
pub fn socket_mode(mode: &str, ranks: u32) -> bool {
    ranks == 2
        && matches!(
            mode,
            "latency" | "bw" | "msgrate" | "mq" | "am" | "put" | "get"
        )
}

/// The Rust transports' points of `mode` with `ranks` ranks.
pub fn specs(mode: &str, ranks: u32, s: &Sizes) -> Vec<Spec> {
    let w = WINDOW;
    let pairs = (ranks / 2).max(1) as f64;
    let mut v = Vec::new();
    match mode {
        "latency" => {
            for z in s.latency() {
                v.push(Spec::new("latency", cmd::PINGPONG, z, 1, 2.0, true));
            }
        }
        "bw" => {
            for z in s.bw() {
                v.push(Spec::new("bw", cmd::STREAM, z, w, w as f64, false));
            }
        }
        "msgrate" => {
            for z in s.rate() {
                v.push(Spec::new(
                    "msgrate",
                    cmd::MSGRATE,
                    z,
                    w,
                    w as f64 * pairs,
                    false,
                ));
            }
        }
        "mq" => {
            v.push(Spec::new("mq-latency", cmd::MQ_PINGPONG, 64, 1, 2.0, true));
            v.push(Spec::new("mq-rate", cmd::MQ_STREAM, 64, w, w as f64, false));
        }
        "am" => v.push(Spec::new("am-latency", cmd::AM_PINGPONG, 64, 1, 2.0, true)),
        "put" | "get" => {
            let (one, many) = if mode == "put" {
                (cmd::PUT, cmd::PUT_STREAM)
            } else {
                (cmd::GET, cmd::GET_STREAM)
            };
            for z in s.rma() {
                v.push(Spec::new(&format!("{mode}-latency"), one, z, 1, 1.0, true));
            }
            for z in s.rma() {
                v.push(Spec::new(
                    &format!("{mode}-bw"),
                    many,
                    z,
                    w,
                    w as f64,
                    false,
                ));
            }
        }
        "barrier" => v.push(Spec::new("barrier", cmd::BARRIER, 0, 1, 1.0, false)),
        "bcast" => {
            for n in s.coll(8) {
                let mut x = Spec::new("bcast", cmd::BCAST, n, 1, 1.0, false);
                x.bytes = n * 8;
                v.push(x);
            }
        }
        "allreduce" => {
            for (dtype, c) in [("i64", cmd::ALLREDUCE_I64), ("f64", cmd::ALLREDUCE_F64)] {
                for n in s.coll(8) {
                    let mut x = Spec::new("allreduce", c, n, 1, 1.0, false);
                    x.dtype = dtype.into();
                    x.bytes = n * 8;
                    v.push(x);
                }
            }
        }
        // f64 sums, in rank order as the allreduce (reduce to rank 0; inclusive scan).
        "reduce" | "scan" => {
            let c = if mode == "reduce" {
                cmd::REDUCE_F64
            } else {
                cmd::SCAN_F64
            };
            for n in s.coll(8) {
                let mut x = Spec::new(mode, c, n, 1, 1.0, false);
                x.dtype = "f64".into();
                x.bytes = n * 8;
                v.push(x);
            }
        }
        // u64 per rank; the receive buffer holds every rank's, so the largest vector is the
        // collective buffer's size over the ranks.
        "allgather" => {
            for n in s.coll(8 * ranks.max(1) as u64) {
                let mut x = Spec::new("allgather", cmd::ALLGATHER, n, 1, 1.0, false);
                x.bytes = n * 8;
                v.push(x);
            }
        }
        _ => {}
    }
    v
}

/// One MPI program invocation: `PROGRAM PATTERN METRIC ARG3 SIZES`.
#[derive(Clone, Debug)]
pub struct MpiRun {
    pub program: &'static str,
    pub args: Vec<String>,
}

fn mpi(program: &'static str, pattern: &str, metric: &str, arg3: &str, sizes: &[u64]) -> MpiRun {
    let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
    MpiRun {
        program,
        args: vec![pattern.into(), metric.into(), arg3.into(), list.join(",")],
    }
}

pub fn mpi_runs(mode: &str, ranks: u32, s: &Sizes) -> Vec<MpiRun> {
    let w = WINDOW.to_string();
    match mode {
        "latency" => vec![mpi("pt2pt", "pingpong", "latency", "1", &s.latency())],
        "bw" => vec![mpi("pt2pt", "stream", "bw", &w, &s.bw())],
        "msgrate" => vec![mpi("pt2pt", "msgrate", "msgrate", &w, &s.rate())],
        "mq" => vec![
            mpi("pt2pt", "pingpong", "mq-latency", "1", &[64]),
            mpi("pt2pt", "stream", "mq-rate", &w, &[64]),
        ],
        "am" => vec![mpi("pt2pt", "pingpong", "am-latency", "1", &[64])],
        "put" | "get" => vec![
            mpi("rma", mode, &format!("{mode}-latency"), "1", &s.rma()),
            mpi(
                "rma",
                &format!("{mode}-stream"),
                &format!("{mode}-bw"),
                &w,
                &s.rma(),
            ),
        ],
        "barrier" => vec![mpi("coll", "barrier", "barrier", "-", &[0])],
        "bcast" => vec![mpi("coll", "bcast", "bcast", "-", &s.coll(8))],
        "allreduce" => vec![
            mpi("coll", "allreduce", "allreduce", "i64", &s.coll(8)),
            mpi("coll", "allreduce", "allreduce", "f64", &s.coll(8)),
        ],
        "reduce" | "scan" => vec![mpi("coll", mode, mode, "f64", &s.coll(8))],
        "allgather" => vec![mpi(
            "coll",
            "allgather",
            "allgather",
            "-",
            &s.coll(8 * ranks.max(1) as u64),
        )],
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip_and_cover_modes() {
        let s = Sizes {
            max: 4 << 20,
            quick: false,
            custom: None,
            coll_max: 64 << 20,
        };
        let l = specs("latency", 2, &s);
        assert_eq!(l.len(), 24);
        assert_eq!(l[0].ctl.size, 0);
        assert_eq!(l.last().unwrap().ctl.size, 4 << 20);
        let back = Spec::from_json(&l[3].to_json()).unwrap();
        assert_eq!(back.ctl, l[3].ctl);
        assert_eq!(specs("msgrate", 8, &s)[0].ops, 4.0 * WINDOW as f64);
        assert_eq!(s.coll(8).last(), Some(&(8 << 20)));
        assert_eq!(s.coll(1).last(), Some(&(64 << 20)));
        assert_eq!(specs("allreduce", 4, &s).len(), 2 * s.coll(8).len());
        assert_eq!(specs("bcast", 4, &s)[1].bytes, 32);
        for m in MODES {
            assert!(!mpi_runs(m, 4, &s).is_empty(), "{m}");
        }
        // An allgather's receive buffer holds every rank's vector: the largest per rank is
        // the collective buffer over the ranks, on both sides.
        let g = specs("allgather", 4, &s);
        assert_eq!(g.last().unwrap().bytes * 4, s.coll_max);
        assert_eq!(
            mpi_runs("allgather", 4, &s)[0].args[3].split(',').count(),
            g.len()
        );
    }
}
