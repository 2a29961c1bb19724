//! Statistics that survive a noisy shared machine: the median of batch means, the spread of
//! the batch means (inter-quartile range over the median), and a flag when that spread is
//! above a threshold (the run was disturbed: another process, steal time, a scheduler tick).

use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub min: f64,
    pub max: f64,
    /// (q3 - q1) / median.
    pub spread: f64,
}

/// Linear-interpolated quantile of sorted data.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

pub fn summarize(batches: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = batches.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let median = quantile(&v, 0.5);
    let q1 = quantile(&v, 0.25);
    let q3 = quantile(&v, 0.75);
    let spread = if median > 0.0 {
        (q3 - q1) / median
    } else {
        0.0
    };
    Some(Summary {
        median,
        q1,
        q3,
        min: v[0],
        max: v[v.len() - 1],
        spread,
    })
}

/// How a metric is shown: batch values are seconds per operation; `bytes` per operation
/// turns them into bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds per operation (lower is better).
    Micros,
    /// MB/s, 10^6 bytes per second (higher is better).
    MBps,
    /// Million operations per second (higher is better).
    Mops,
}

impl Unit {
    pub fn of_metric(metric: &str) -> Unit {
        if metric.ends_with("bw") || metric == "bandwidth" {
            Unit::MBps
        } else if metric.ends_with("rate") {
            Unit::Mops
        } else {
            Unit::Micros
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Unit::Micros => "us",
            Unit::MBps => "MB/s",
            Unit::Mops => "Mmsg/s",
        }
    }

    pub fn higher_is_better(self) -> bool {
        self != Unit::Micros
    }

    /// Convert seconds per operation into this unit.
    pub fn convert(self, secs: f64, bytes: u64) -> f64 {
        match self {
            Unit::Micros => secs * 1e6,
            Unit::MBps => {
                if secs > 0.0 {
                    bytes as f64 / secs / 1e6
                } else {
                    f64::NAN
                }
            }
            Unit::Mops => {
                if secs > 0.0 {
                    1.0 / secs / 1e6
                } else {
                    f64::NAN
                }
            }
        }
    }

    /// How many times better `a` is than `b` (both in this unit): > 1 when `a` wins.
    pub fn advantage(self, a: f64, b: f64) -> f64 {
        if self.higher_is_better() {
            a / b
        } else {
            b / a
        }
    }
}

/// The stats of one measured point in JSON, in display units (`lo`/`hi`: worst/best batch).
pub fn to_json(s: &Summary, unit: Unit, bytes: u64, threshold: f64) -> Value {
    let (lo, hi) = {
        let a = unit.convert(s.min, bytes);
        let b = unit.convert(s.max, bytes);
        (a.min(b), a.max(b))
    };
    json!({
        "value": unit.convert(s.median, bytes),
        "unit": unit.label(),
        "min": lo,
        "max": hi,
        "median_s": s.median,
        "q1_s": s.q1,
        "q3_s": s.q3,
        "min_s": s.min,
        "max_s": s.max,
        "spread": s.spread,
        "disturbed": s.spread > threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.median, 3.0);
        assert_eq!(s.q1, 2.0);
        assert_eq!(s.q3, 4.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 5.0);
        assert!((s.spread - 2.0 / 3.0).abs() < 1e-12);
        let e = summarize(&[2.0, 2.0]).unwrap();
        assert_eq!((e.median, e.spread), (2.0, 0.0));
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn units() {
        assert_eq!(Unit::of_metric("latency"), Unit::Micros);
        assert_eq!(Unit::of_metric("put-bw"), Unit::MBps);
        assert_eq!(Unit::of_metric("mq-rate"), Unit::Mops);
        assert!((Unit::MBps.convert(1e-3, 1_000_000) - 1000.0).abs() < 1e-9);
        assert_eq!(Unit::Micros.advantage(1.0, 5.0), 5.0);
        assert_eq!(Unit::MBps.advantage(10.0, 5.0), 2.0);
    }
}
