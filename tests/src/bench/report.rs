//! The OSU-style tables on stdout, the JSON document, and the issue-7 targets.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::driver::Point;
use super::stats::{summarize, to_json, Unit};

/// One measured point of one transport.
#[derive(Clone, Debug)]
pub struct Rec {
    pub mode: String,
    pub transport: String,
    pub placement: String,
    pub point: Point,
    /// Fraction of all cpus other processes used during the run that measured it.
    pub foreign: f64,
    /// The rounds whose launches measured it and how many of `point.batches` each gave, in
    /// the batches' order: `(round, batches)` (one entry per launch once pooled).
    pub rounds: Vec<(u32, usize)>,
}

/// Rounds each transport must have for [`ratio`] to compare their best ones.
pub const BEST_OF_ROUNDS: usize = 3;

/// Other processes' share of the cpus above which a point is marked `*`.
pub const FOREIGN_MARK: f64 = 0.2;

impl Rec {
    pub fn unit(&self) -> Unit {
        Unit::of_metric(&self.point.metric)
    }

    /// Median in display units.
    pub fn value(&self) -> Option<f64> {
        let s = summarize(&self.point.batches)?;
        Some(self.unit().convert(s.median, self.point.bytes))
    }

    pub fn disturbed(&self, threshold: f64) -> bool {
        summarize(&self.point.batches).is_some_and(|s| s.spread > threshold)
    }

    /// Each round's median in seconds per operation (lower is better, whatever the unit),
    /// in round order.
    pub fn by_round(&self) -> Vec<(u32, f64)> {
        let mut at = 0;
        let mut out = Vec::new();
        for &(round, n) in &self.rounds {
            let Some(b) = self.point.batches.get(at..at + n) else {
                break;
            };
            at += n;
            if let Some(s) = summarize(b) {
                out.push((round, s.median));
            }
        }
        out
    }

    /// The median of its best round, in display units, if it has [`BEST_OF_ROUNDS`] rounds:
    /// the round at the lower quartile of its rounds (nearest rank) — the best of 3 or 4, the
    /// second best of 5-8, the third of 9-12. One launch in four may land in a state of the
    /// machine the others never see: an Intel host's two vCPUs gave some launches 2-3× their
    /// transport's usual speed, every size of the launch at once (Open MPI's 64 B ping-pong
    /// 0.20 µs in one of eight rounds, 0.56-0.77 in the rest; its 2 KiB allreduce 0.96 µs
    /// against 2.5-3.5): 3 of Open MPI's 480 launches in two runs of the issue-15 command
    /// (none of ni's 320), and the side that drew one won its point whatever its speed.
    pub fn best_round(&self) -> Option<f64> {
        let rounds = self.by_round();
        if rounds.len() < BEST_OF_ROUNDS {
            return None;
        }
        let mut v: Vec<f64> = rounds.iter().map(|&(_, v)| v).collect();
        v.sort_by(f64::total_cmp);
        let at = v.len().div_ceil(4) - 1;
        Some(self.unit().convert(v[at], self.point.bytes))
    }

    /// A point as `to_json` wrote it.
    pub fn from_json(v: &Value) -> Option<Rec> {
        Some(Rec {
            mode: v["mode"].as_str()?.to_string(),
            transport: v["transport"].as_str()?.to_string(),
            placement: v["placement"].as_str()?.to_string(),
            point: Point::from_json(v)?,
            foreign: v["foreign_cpu"].as_f64().unwrap_or(0.0),
            rounds: v["rounds"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| Some((r[0].as_u64()? as u32, r[1].as_u64()? as usize)))
                .collect(),
        })
    }

    pub fn to_json(&self, threshold: f64) -> Value {
        let mut v = self.point.to_json();
        v["mode"] = json!(self.mode);
        v["transport"] = json!(self.transport);
        v["placement"] = json!(self.placement);
        v["foreign_cpu"] = json!(self.foreign);
        v["rounds"] = json!(self.rounds);
        v["stats"] = summarize(&self.point.batches)
            .map(|s| to_json(&s, self.unit(), self.point.bytes, threshold))
            .unwrap_or(Value::Null);
        v
    }
}

/// One record per point: the rounds' launches of a transport measured the same points, and
/// their batches pool into one sample (so its median and spread take every round in; its
/// other-processes share is the largest any round saw).
pub fn pool(recs: Vec<Rec>) -> Vec<Rec> {
    let mut out: Vec<Rec> = Vec::with_capacity(recs.len());
    for mut r in recs {
        if r.rounds.is_empty() {
            r.rounds.push((1, r.point.batches.len()));
        }
        let same = |o: &&mut Rec| {
            o.mode == r.mode
                && o.transport == r.transport
                && o.placement == r.placement
                && o.point.metric == r.point.metric
                && o.point.dtype == r.point.dtype
                && o.point.size == r.point.size
                && o.point.ranks == r.point.ranks
        };
        let Some(o) = out.iter_mut().find(same) else {
            out.push(r);
            continue;
        };
        o.rounds.extend(r.rounds);
        let (a, b) = (&mut o.point, r.point);
        a.batches.extend(b.batches);
        a.iters += b.iters;
        a.max_iter = match (a.max_iter, b.max_iter) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        a.stalls_1ms = match (a.stalls_1ms, b.stalls_1ms) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        if a.error.is_none() {
            a.error = b.error;
        }
        o.foreign = o.foreign.max(r.foreign);
    }
    out
}

/// How many times better ni is than `other` at the point both measured (> 1: ni wins): where
/// both have [`BEST_OF_ROUNDS`] rounds or more, the ratio of their best rounds' medians, else
/// of their pooled medians. This machine's figures jump between clusters from one launch to
/// the next and stay put within one (the 8 B half round trip 0.17-0.25 µs or 0.46-0.70, for
/// Open MPI as for ni), so a pooled median lands in whichever cluster holds most of a
/// transport's batches: one that happened to be launched more often in the slow cluster loses
/// by 2× whatever its speed (eight rounds each: ni slow in four launches, Open MPI in one,
/// pooled ×0.61, best rounds ×0.97; the same build again, slow in none: ×1.00 and ×0.99).
/// Each best round is what its transport does undisturbed.
pub fn ratio(ni: &Rec, other: &Rec) -> Option<Ratio> {
    let (a, b, best) = match (ni.best_round(), other.best_round()) {
        (Some(a), Some(b)) => (a, b, true),
        _ => (ni.value()?, other.value()?, false),
    };
    Some(Ratio {
        x: ni.unit().advantage(a, b),
        ni: a,
        other: b,
        best,
    })
}

/// What [`ratio`] compared: ni×X (`x`), the two values (display units), and whether they
/// are best rounds' medians (else pooled ones).
#[derive(Clone, Copy, Debug)]
pub struct Ratio {
    pub x: f64,
    pub ni: f64,
    pub other: f64,
    pub best: bool,
}

/// The width of the `ni×T` column: 9, or its title and a space.
fn ratio_width(t: &str) -> usize {
    9.max(t.chars().count() + 4)
}

pub const TRANSPORTS: &[&str] = &["ni", "tcp", "unix", "mpi", "mpi-tcp", "mpi-ni"];

fn describe(metric: &str) -> &'static str {
    match metric {
        "latency" => "ping-pong, half round trip",
        "bw" => "streaming, 64 messages in flight, one ack per window",
        "msgrate" => "P/2 pairs streaming windows of 64, aggregate",
        "mq-latency" => {
            "64-byte T3E message-queue ping-pong, half round trip (sockets, MPI: 64-byte ping-pong)"
        }
        "mq-rate" => "64-byte T3E messages, 64 in flight (sockets, MPI: 64-byte stream)",
        "am-latency" => {
            "64-byte active message to a handler that answers with one, half round trip (sockets, MPI: 64-byte ping-pong)"
        }
        "put-latency" => {
            "one put, wait for completion (sockets: send + 0-byte ack; MPI: Put + Win_flush)"
        }
        "put-bw" => "64 puts in flight (sockets: stream; MPI: 64 Puts + Win_flush)",
        "get-latency" => {
            "one get, wait for completion (sockets: request + reply; MPI: Get + Win_flush)"
        }
        "get-bw" => {
            "64 gets in flight (sockets: 64 requests, 64 replies; MPI: 64 Gets + Win_flush)"
        }
        "barrier" => "barrier",
        "bcast" => "broadcast from rank 0",
        "allreduce" => "allreduce, sum",
        "reduce" => "reduce to rank 0, f64 sum",
        "scan" => "inclusive scan, f64 sum",
        "allgather" => "allgather, elements per rank",
        _ => "",
    }
}

pub(super) fn fmt_val(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn fmt_size(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

type Key = (String, String, usize, String); // metric, dtype, placement order, placement

/// Every table, as text: by mode, then metric, then placement in the order given.
pub fn tables(recs: &[Rec], threshold: f64, placements: &[(String, String)]) -> String {
    let mut groups: BTreeMap<(usize, Key), Vec<&Rec>> = BTreeMap::new();
    let place = |p: &str| placements.iter().position(|(n, _)| n == p).unwrap_or(99);
    let order = |m: &str| {
        super::spec::MODES
            .iter()
            .position(|x| m.starts_with(x))
            .unwrap_or(99)
    };
    for r in recs {
        let k = (
            r.point.metric.clone(),
            r.point.dtype.clone(),
            place(&r.placement),
            r.placement.clone(),
        );
        groups.entry((order(&r.mode), k)).or_default().push(r);
    }
    let mut out = String::new();
    for ((_, (metric, dtype, _, placement)), rs) in groups {
        let unit = rs[0].unit();
        let present: Vec<&str> = TRANSPORTS
            .iter()
            .copied()
            .filter(|t| rs.iter().any(|r| r.transport == *t))
            .collect();
        let multi_p = rs.iter().any(|r| r.point.ranks != rs[0].point.ranks);
        let elems = matches!(
            metric.as_str(),
            "allreduce" | "bcast" | "reduce" | "scan" | "allgather"
        );
        let _ = writeln!(
            out,
            "\n# {metric}{} — {} ({}, {}); median of batch means; '!' = disturbed (IQR/median > {:.0}%), '*' = other processes used > {:.0}% of the cpus",
            if dtype.is_empty() { String::new() } else { format!(" {dtype}") },
            describe(&metric),
            unit.label(),
            if unit.higher_is_better() { "higher is better" } else { "lower is better" },
            threshold * 100.0,
            FOREIGN_MARK * 100.0
        );
        let _ = writeln!(
            out,
            "# placement {}",
            placements
                .iter()
                .find(|(n, _)| *n == placement)
                .map(|(_, d)| d.clone())
                .unwrap_or(placement.clone())
        );
        let mut hdr = String::from("#");
        if multi_p {
            hdr += &format!("{:>3}", "P");
        }
        hdr += &format!("{:>9}", if elems { "elems" } else { "size" });
        for t in &present {
            hdr += &format!("{:>12}", t);
        }
        for t in present.iter().filter(|t| **t != "ni") {
            if present.contains(&"ni") {
                let h = format!("ni×{t}");
                hdr += &format!("{h:>w$}", w = ratio_width(t));
            }
        }
        let _ = writeln!(out, "{hdr}");
        let mut rows: BTreeMap<(u32, u64), BTreeMap<&str, &Rec>> = BTreeMap::new();
        for r in &rs {
            rows.entry((r.point.ranks, r.point.size))
                .or_default()
                .insert(r.transport.as_str(), r);
        }
        for ((p, size), by) in rows {
            let mut line = String::from(" ");
            if multi_p {
                line += &format!("{p:>3}");
            }
            line += &format!("{:>9}", fmt_size(size));
            for t in &present {
                let cell = match by.get(t) {
                    Some(r) => match (r.point.error.as_ref(), r.value()) {
                        (Some(_), _) => "error".to_string(),
                        (None, Some(v)) => format!(
                            "{}{}{}",
                            fmt_val(v),
                            if r.foreign > FOREIGN_MARK { "*" } else { "" },
                            if r.disturbed(threshold) { "!" } else { " " }
                        ),
                        (None, None) => "-".into(),
                    },
                    None => "".into(),
                };
                line += &format!("{cell:>12}");
            }
            if let Some(ni) = by.get("ni").filter(|r| r.value().is_some()) {
                for t in present.iter().filter(|t| **t != "ni") {
                    let cell = by
                        .get(t)
                        .and_then(|r| ratio(ni, r))
                        .map(|r| format!("{:.2}{}", r.x, if r.best { "b" } else { "" }))
                        .unwrap_or_default();
                    line += &format!("{cell:>w$}", w = ratio_width(t));
                }
            }
            let _ = writeln!(out, "{line}");
        }
    }
    let _ = writeln!(
        out,
        "\n# ni×X: how many times better ni is than X at that point (> 1: ni wins; < 1: X wins); \
         'b' = of the best rounds: the ratio of each transport's best round's median (--rounds \
         {BEST_OF_ROUNDS} or more; of 5-8 rounds the second best, of 9-12 the third: a \
         quarter of the launches set aside as luck), else of the medians shown"
    );
    out
}

fn find<'a>(recs: &'a [Rec], t: &str, metric: &str, placement: &str, size: u64) -> Option<&'a Rec> {
    recs.iter().find(|r| {
        r.transport == t
            && r.point.metric == metric
            && r.placement == placement
            && r.point.size == size
            && r.point.ranks == 2
            && r.point.error.is_none()
    })
}

/// A block of target verdicts: a `# targets (…)` heading, then a `[MET]`, `[MISSED]` or
/// `[n/a]` line per target, and the same as JSON.
pub(super) struct Verdicts {
    pub text: String,
    pub json: Vec<Value>,
}

impl Verdicts {
    pub fn new(heading: &str) -> Verdicts {
        Verdicts {
            text: format!("\n# targets ({heading})\n"),
            json: Vec::new(),
        }
    }

    pub fn add(&mut self, name: &str, ok: Option<bool>, detail: String) {
        let verdict = match ok {
            Some(true) => "MET",
            Some(false) => "MISSED",
            None => "n/a",
        };
        let _ = writeln!(self.text, "  [{verdict:>6}] {name}: {detail}");
        self.json
            .push(json!({"target": name, "met": ok, "detail": detail}));
    }
}

/// The issue-7 targets, judged on the `split` placement (where the baselines get two cores).
pub fn targets(recs: &[Rec]) -> (String, Value) {
    let mut v = Verdicts::new("issue 7");
    let mut add = |name: &str, ok: Option<bool>, detail: String| v.add(name, ok, detail);
    let lat = |t: &str| find(recs, t, "latency", "split", 8).and_then(Rec::value);
    match lat("ni") {
        Some(ni) => add(
            "8 B half round trip < 0.93 us (libfabric shm)",
            Some(ni < 0.93),
            format!("ni {ni:.3} us = {:.2}x the target", ni / 0.93),
        ),
        None => add(
            "8 B half round trip < 0.93 us (libfabric shm)",
            None,
            "not measured".into(),
        ),
    }
    match (lat("ni"), lat("tcp")) {
        (Some(ni), Some(tcp)) => add(
            "8 B half round trip >= 5x below TCP",
            Some(tcp / ni >= 5.0),
            format!("tcp {tcp:.3} us / ni {ni:.3} us = {:.2}x", tcp / ni),
        ),
        _ => add(
            "8 B half round trip >= 5x below TCP",
            None,
            "not measured".into(),
        ),
    }
    let bw = |t: &str| find(recs, t, "bw", "split", 1 << 20).and_then(Rec::value);
    match (bw("ni"), bw("mpi")) {
        (Some(ni), Some(m)) => add(
            "1 MiB streaming >= Open MPI",
            Some(ni >= m),
            format!("ni {ni:.0} MB/s vs mpi {m:.0} MB/s = {:.2}x", ni / m),
        ),
        (Some(ni), None) => add(
            "1 MiB streaming >= Open MPI",
            None,
            format!("ni {ni:.0} MB/s; Open MPI not measured"),
        ),
        _ => add("1 MiB streaming >= Open MPI", None, "not measured".into()),
    }
    // The tick cliff, judged on small messages (<= 4 KiB, where a single iteration should
    // take microseconds): any timed iteration of 4 ms or more, or a batch mean above 1 ms,
    // anywhere (every placement, every P). Points whose run had other processes using more
    // than FOREIGN_MARK of the cpus are counted apart: they show the machine, not ni.
    let small = |r: &&Rec| r.transport == "ni" && r.point.error.is_none() && r.point.bytes <= 4096;
    let mut worst: Option<(f64, String)> = None;
    let (mut stalls, mut iters, mut stalls_busy, mut iters_busy) = (0u64, 0u64, 0u64, 0u64);
    for r in recs.iter().filter(small) {
        let busy = r.foreign > FOREIGN_MARK;
        if let (Some(m), false) = (r.point.max_iter, busy) {
            if worst.as_ref().is_none_or(|(w, _)| m > *w) {
                worst = Some((
                    m,
                    format!("{} {} B, {}", r.point.metric, r.point.size, r.placement),
                ));
            }
        }
        if let Some(s) = r.point.stalls_1ms {
            let n = r.point.iters * r.point.batches.len() as u64;
            if busy {
                stalls_busy += s;
                iters_busy += n;
            } else {
                stalls += s;
                iters += n;
            }
        }
    }
    let small_bad: Vec<String> = recs
        .iter()
        .filter(small)
        .filter(|r| r.unit() == Unit::Micros && r.value().is_some_and(|v| v > 1000.0))
        .map(|r| {
            format!(
                "{} {} B P={} {}",
                r.point.metric, r.point.size, r.point.ranks, r.placement
            )
        })
        .collect();
    let detail = |w: Option<&(f64, String)>| {
        format!(
            "small messages (<= 4 KiB): slowest single ni iteration {}; {stalls} of {iters} timed iterations over 1 ms (plus {stalls_busy} of {iters_busy} in runs where other processes took > {:.0}% of the cpus); batch means over 1 ms: {}",
            w.map(|(w, at)| format!("{:.0} us ({at})", w * 1e6))
                .unwrap_or_else(|| "- (every run was busy)".into()),
            FOREIGN_MARK * 100.0,
            if small_bad.is_empty() { "none".to_string() } else { small_bad.join(", ") }
        )
    };
    if iters + iters_busy == 0 && small_bad.is_empty() {
        add(
            "never the 4 ms scheduler-tick cliff",
            None,
            "not measured".into(),
        );
    } else {
        let ok = worst.as_ref().is_none_or(|(w, _)| *w < 4e-3) && small_bad.is_empty();
        add(
            "never the 4 ms scheduler-tick cliff",
            Some(ok),
            detail(worst.as_ref()),
        );
    }
    (v.text, Value::Array(v.json))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: &str, metric: &str, size: u64, secs: f64) -> Rec {
        Rec {
            mode: metric.into(),
            transport: t.into(),
            placement: "split".into(),
            point: Point {
                metric: metric.into(),
                size,
                bytes: size,
                ranks: 2,
                iters: 10,
                batches: vec![secs; 3],
                max_iter: Some(secs * 2.0),
                stalls_1ms: Some(0),
                ..Default::default()
            },
            foreign: 0.0,
            rounds: Vec::new(),
        }
    }

    #[test]
    fn rounds_pool_into_one_point_per_transport() {
        let mut later = rec("ni", "latency", 8, 0.7e-6);
        later.point.stalls_1ms = Some(2);
        later.foreign = 0.3;
        let recs = pool(vec![
            rec("ni", "latency", 8, 0.5e-6),
            rec("mpi", "latency", 8, 0.6e-6),
            rec("ni", "latency", 64, 0.9e-6),
            later,
            rec("mpi", "latency", 8, 0.6e-6),
        ]);
        assert_eq!(recs.len(), 3);
        let ni = find(&recs, "ni", "latency", "split", 8).unwrap();
        assert_eq!(ni.point.batches.len(), 6);
        assert_eq!(ni.point.iters, 20);
        assert_eq!(ni.point.stalls_1ms, Some(2));
        assert_eq!(ni.point.max_iter, Some(1.4e-6));
        assert_eq!(ni.foreign, 0.3);
        assert_eq!(
            find(&recs, "ni", "latency", "split", 64)
                .unwrap()
                .point
                .batches
                .len(),
            3
        );
        assert_eq!(
            find(&recs, "mpi", "latency", "split", 8)
                .unwrap()
                .point
                .batches
                .len(),
            6
        );
    }

    /// The records of launches `(transport, round, seconds)` of one 8-byte point of
    /// `metric`, three batches each, pooled.
    fn launches(metric: &str, runs: &[(&str, u32, f64)]) -> Vec<Rec> {
        pool(
            runs.iter()
                .map(|&(t, round, secs)| Rec {
                    rounds: vec![(round, 3)],
                    ..rec(t, metric, 8, secs)
                })
                .collect(),
        )
    }

    /// Launches where ni landed in the machine's slow cluster and Open MPI in its fast one
    /// make the pooled medians say 0.4; each one's best round says level.
    #[test]
    fn ratios_compare_the_best_rounds() {
        let (fast, slow) = (0.2e-6, 0.5e-6);
        let recs = launches(
            "latency",
            &[
                ("ni", 1, slow),
                ("mpi", 1, fast),
                ("ni", 2, fast),
                ("mpi", 2, slow),
                ("ni", 3, slow),
                ("mpi", 3, fast),
            ],
        );
        let ni = find(&recs, "ni", "latency", "split", 8).unwrap();
        let mpi = find(&recs, "mpi", "latency", "split", 8).unwrap();
        assert_eq!(ni.rounds, vec![(1, 3), (2, 3), (3, 3)]);
        let by: Vec<f64> = ni.by_round().iter().map(|r| r.1).collect();
        assert_eq!(by, vec![slow, fast, slow]);
        assert!((ni.best_round().unwrap() - 0.2).abs() < 1e-9);
        let pooled = ni
            .unit()
            .advantage(ni.value().unwrap(), mpi.value().unwrap());
        assert!((pooled - 0.4).abs() < 1e-9, "{pooled}");
        let r = ratio(ni, mpi).unwrap();
        assert!(r.best);
        assert!((r.x - 1.0).abs() < 1e-9);
        assert!(
            (r.ni - 0.2).abs() < 1e-9 && (r.other - 0.2).abs() < 1e-9,
            "{r:?}"
        );
        let t = tables(&recs, 0.25, &[]);
        assert!(t.contains("1.00b"), "{t}");
        // Saved and read back, the rounds are still there.
        let back: Vec<Rec> = recs
            .iter()
            .map(|r| Rec::from_json(&r.to_json(0.25)).unwrap())
            .collect();
        assert_eq!(back[0].rounds, vec![(1, 3), (2, 3), (3, 3)]);
        assert!((ratio(&back[0], &back[1]).unwrap().x - 1.0).abs() < 1e-9);
    }

    /// Of eight rounds, one launch 3× faster than the other seven is set aside: the
    /// second best decides, on either side.
    #[test]
    fn one_lucky_launch_in_eight_does_not_decide_the_ratio() {
        let mut runs = Vec::new();
        for round in 1..=8 {
            runs.push(("ni", round, 0.40e-6 + round as f64 * 0.01e-6));
            let mpi = if round == 5 { 0.20e-6 } else { 0.60e-6 };
            runs.push(("mpi", round, mpi));
        }
        let recs = launches("latency", &runs);
        let ni = find(&recs, "ni", "latency", "split", 8).unwrap();
        let mpi = find(&recs, "mpi", "latency", "split", 8).unwrap();
        assert!((mpi.best_round().unwrap() - 0.6).abs() < 1e-9);
        assert!((ni.best_round().unwrap() - 0.42).abs() < 1e-9);
        let r = ratio(ni, mpi).unwrap();
        assert!(r.best && (r.x - 0.6 / 0.42).abs() < 1e-9, "{r:?}");
        // Two lucky launches of eight are not luck: they decide.
        let mut twice = runs.clone();
        twice[2 * 6 + 1].2 = 0.20e-6;
        let recs = launches("latency", &twice);
        let mpi = find(&recs, "mpi", "latency", "split", 8).unwrap();
        assert!((mpi.best_round().unwrap() - 0.2).abs() < 1e-9);
        // Four rounds (the default): the best.
        let recs = launches("latency", &runs[..8]);
        let mpi = find(&recs, "mpi", "latency", "split", 8).unwrap();
        assert_eq!(mpi.by_round().len(), 4);
        assert!((mpi.best_round().unwrap() - 0.6).abs() < 1e-9);
        let ni = find(&recs, "ni", "latency", "split", 8).unwrap();
        assert!((ni.best_round().unwrap() - 0.41).abs() < 1e-9);
    }

    /// For a rate the best round is the fastest too: ratios stay "> 1: ni wins".
    #[test]
    fn the_best_round_of_a_rate_is_its_highest() {
        let recs = launches(
            "msgrate",
            &[
                ("ni", 1, 1e-7),
                ("mpi", 1, 2e-7),
                ("ni", 2, 3e-7),
                ("mpi", 2, 2e-7),
                ("ni", 3, 3e-7),
                ("mpi", 3, 2e-7),
            ],
        );
        let ni = find(&recs, "ni", "msgrate", "split", 8).unwrap();
        let mpi = find(&recs, "mpi", "msgrate", "split", 8).unwrap();
        // ni's best: 10 Mmsg/s against Open MPI's 5.
        assert!((ratio(ni, mpi).unwrap().x - 2.0).abs() < 1e-9);
    }

    /// Fewer than three rounds (--rounds 2, or a launch failed): the ratio of the pooled
    /// medians, unmarked.
    #[test]
    fn too_few_rounds_fall_back_to_the_pooled_ratio() {
        let (fast, slow) = (0.2e-6, 0.5e-6);
        let recs = launches(
            "latency",
            &[
                ("ni", 1, slow),
                ("mpi", 1, fast),
                ("ni", 2, slow),
                ("mpi", 2, fast),
                ("ni", 3, fast),
            ],
        );
        let ni = find(&recs, "ni", "latency", "split", 8).unwrap();
        let mpi = find(&recs, "mpi", "latency", "split", 8).unwrap();
        let r = ratio(ni, mpi).unwrap();
        assert!(!r.best);
        assert!((r.x - 0.4).abs() < 1e-9);
        assert!(!tables(&recs, 0.25, &[]).contains("0.40b"));
    }

    #[test]
    fn table_and_targets() {
        let recs = vec![
            rec("ni", "latency", 8, 0.5e-6),
            rec("tcp", "latency", 8, 10e-6),
            rec("ni", "bw", 1 << 20, 50e-6),
            rec("mpi", "bw", 1 << 20, 25e-6),
        ];
        let t = tables(&recs, 0.25, &[]);
        assert!(t.contains("ni×tcp"), "{t}");
        assert!(t.contains("20.00"), "{t}");
        let (txt, j) = targets(&recs);
        assert_eq!(j[0]["met"], true, "{txt}");
        assert_eq!(j[1]["met"], true, "{txt}");
        assert_eq!(j[2]["met"], false, "{txt}");
        assert_eq!(j[3]["met"], true, "{txt}");
    }
}
