//! The issue-15 targets ("small messages at the speed of shared memory"): ni against Open MPI
//! over its shared memory (`mpi`) at every point both measured, one verdict line per target.
//!
//! The issue's own table names nine points; it asks for ni×mpi ≥ 1 there and at every other
//! point, on both placements at P = 2, 4 and 8; for no cliff between sizes; for P = 32 and 64
//! measured; and for the instructions per message of ni and Open MPI in the report. A line
//! says MET, MISSED, or n/a when the run did not measure what the target needs (a run of some
//! modes judges what it measured and says what it did not).

use std::fmt::Write as _;
use std::ops::RangeInclusive;

use serde_json::Value;

use super::copy;
use super::report::{fmt_val, ratio, Ratio, Rec, Verdicts};
use super::stats::Unit;

/// A step between two sizes is a cliff when ni's time grows more than `CLIFF` times as much
/// as the size does (a step of less than 2× counts as 2×) and, where Open MPI measured both
/// sizes, more than `CLIFF` times as much as Open MPI's time over the same step (a cache
/// boundary of the machine slows both), and — where that copy is a real share of ni's time
/// ([`COPY_SHARE`]) — more than `CLIFF` times as much as the machine's own copy of the points'
/// bytes ([`super::copy`]; where Open MPI's cost per message hides the boundary, the copy
/// shows it).
const CLIFF: f64 = 1.5;
/// The machine's copy explains a step only where it is at least this share of ni's time at
/// the larger size (ni's time a few passes over the bytes at most): a step as steep as the
/// copy's but made of something else is a cliff still.
const COPY_SHARE: f64 = 0.125;

/// The points of the table: name, metric, sizes (bytes; elements for collectives), P.
const NAMED: &[(&str, &str, RangeInclusive<u64>, u32)] = &[
    ("8 B half round trip", "latency", 8..=8, 2),
    ("8 B message rate, P = 2", "msgrate", 8..=8, 2),
    ("8 B message rate, P = 8", "msgrate", 8..=8, 8),
    ("64 B T3E message-queue latency", "mq-latency", 64..=64, 2),
    ("64 B T3E message-queue rate", "mq-rate", 64..=64, 2),
    ("8 B put latency", "put-latency", 8..=8, 2),
    ("allreduce 1 element, P = 2", "allreduce", 1..=1, 2),
    ("allreduce 256 elements, P = 2", "allreduce", 256..=256, 2),
    (
        "allreduce 64 Ki-128 Ki elements, P = 2",
        "allreduce",
        65536..=131072,
        2,
    ),
];

/// Placements and rank counts "every point" must cover.
const PLACEMENTS: &[&str] = &["split", "same"];
const RANKS: &[u32] = &[2, 4, 8];

/// One point both measured: ni's record, Open MPI's, and ni×mpi (> 1: ni wins) with what it
/// compared (`report::ratio`).
struct Pair<'a> {
    ni: &'a Rec,
    mpi: &'a Rec,
    r: Ratio,
}

impl Pair<'_> {
    fn label(&self) -> String {
        let p = &self.ni.point;
        let dtype = if p.dtype.is_empty() {
            String::new()
        } else {
            format!(" {}", p.dtype)
        };
        format!(
            "{}{dtype} {} P={} {}",
            p.metric, p.size, p.ranks, self.ni.placement
        )
    }
}

fn same_point(a: &Rec, b: &Rec) -> bool {
    a.mode == b.mode
        && a.placement == b.placement
        && a.point.metric == b.point.metric
        && a.point.dtype == b.point.dtype
        && a.point.size == b.point.size
        && a.point.ranks == b.point.ranks
}

fn pairs(recs: &[Rec]) -> Vec<Pair<'_>> {
    let ok = |r: &&Rec| r.point.error.is_none() && r.value().is_some();
    recs.iter()
        .filter(|r| r.transport == "ni")
        .filter(ok)
        .filter_map(|ni| {
            let mpi = recs
                .iter()
                .filter(|r| r.transport == "mpi")
                .filter(ok)
                .find(|r| same_point(ni, r))?;
            Some(Pair {
                ni,
                mpi,
                r: ratio(ni, mpi)?,
            })
        })
        .collect()
}

/// MET when every ratio is at least 1, MISSED when one is below, n/a when there are none.
fn judge<'a>(ratios: impl IntoIterator<Item = &'a f64>) -> Option<bool> {
    let mut any = None;
    for r in ratios {
        any = Some(any.unwrap_or(true) && *r >= 1.0);
    }
    any
}

/// The issue-15 verdicts for `recs` (pooled), `instr` the run's `instr.json` if it made one;
/// `noise` marks disturbed points as the tables do.
pub fn targets(
    recs: &[Rec],
    instr: Option<&Value>,
    copy: &[(u64, f64)],
    noise: f64,
) -> (String, Value) {
    let mut v = Verdicts::new("issue 15: ni×mpi, ni against Open MPI's shared memory");
    let all = pairs(recs);
    // 'b': of the best rounds; '!': disturbed, as in the tables.
    let mark = |p: &Pair| {
        let d = if p.ni.disturbed(noise) || p.mpi.disturbed(noise) {
            "!"
        } else {
            ""
        };
        format!("{}{d}", if p.r.best { "b" } else { "" })
    };
    let fmt = |u: Unit, x: f64| format!("{} {}", fmt_val(x), u.label());

    for (name, metric, sizes, ranks) in NAMED {
        let at: Vec<&Pair> = all
            .iter()
            .filter(|p| {
                p.ni.point.metric == *metric
                    && sizes.contains(&p.ni.point.size)
                    && p.ni.point.ranks == *ranks
            })
            .collect();
        let detail = if at.is_empty() {
            "not measured".to_string()
        } else {
            at.iter()
                .map(|p| {
                    let u = p.ni.unit();
                    let what = if sizes.start() == sizes.end() && p.ni.point.dtype.is_empty() {
                        p.ni.placement.clone()
                    } else {
                        format!(
                            "{} {} {}",
                            p.ni.placement, p.ni.point.dtype, p.ni.point.size
                        )
                    };
                    format!(
                        "{what} ×{:.2}{} (ni {} / mpi {})",
                        p.r.x,
                        mark(p),
                        fmt(u, p.r.ni),
                        fmt(u, p.r.other)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        v.add(name, judge(at.iter().map(|p| &p.r.x)), detail);
    }

    // Every point, and whether the run covered both placements at P = 2, 4, 8.
    let name = "every point at ni×mpi >= 1 (placements split and same, P = 2, 4, 8)";
    if all.is_empty() {
        v.add(
            name,
            None,
            "no point measured by both ni and Open MPI".into(),
        );
    } else {
        let mut below: Vec<&Pair> = all.iter().filter(|p| p.r.x < 1.0).collect();
        below.sort_by(|a, b| a.r.x.total_cmp(&b.r.x));
        let mut missing: Vec<String> = PLACEMENTS
            .iter()
            .filter(|pl| !all.iter().any(|p| p.ni.placement == **pl))
            .map(|pl| format!("placement {pl}"))
            .collect();
        missing.extend(
            RANKS
                .iter()
                .filter(|r| !all.iter().any(|p| p.ni.point.ranks == **r))
                .map(|r| format!("P = {r}")),
        );
        let mut detail = format!("{} of {} points >= 1", all.len() - below.len(), all.len());
        if !below.is_empty() {
            let shown: Vec<String> = below
                .iter()
                .take(8)
                .map(|p| format!("{} ×{:.2}{}", p.label(), p.r.x, mark(p)))
                .collect();
            let _ = write!(
                detail,
                "; below ({} disturbed '!'): {}{}",
                below.iter().filter(|p| mark(p).ends_with('!')).count(),
                shown.join(", "),
                if below.len() > shown.len() {
                    format!(", and {} more", below.len() - shown.len())
                } else {
                    String::new()
                }
            );
        }
        if !missing.is_empty() {
            let _ = write!(detail, "; not measured: {}", missing.join(", "));
        }
        let ok = if !below.is_empty() {
            Some(false)
        } else if missing.is_empty() {
            Some(true)
        } else {
            None
        };
        v.add(name, ok, detail);
    }

    let (steps, found, machine) = cliffs(recs, copy, noise);
    let name = "no cliff between sizes (latency and collectives)";
    let machine = if machine.is_empty() {
        String::new()
    } else {
        format!(
            "; {} where the machine's own copy grows as much (a cache boundary): {}",
            machine.len(),
            machine.join(", ")
        )
    };
    if steps == 0 {
        v.add(name, None, "no series of two sizes or more measured".into());
    } else if found.is_empty() {
        v.add(
            name,
            Some(true),
            format!("none in {steps} steps between neighbouring sizes{machine}"),
        );
    } else {
        v.add(
            name,
            Some(false),
            format!(
                "{} of {steps} steps (ni's time grows > {CLIFF}× the size's, and > {CLIFF}× Open MPI's and the machine's copy's over the step): {}{machine}",
                found.len(),
                found.join(", ")
            ),
        );
    }

    let big: Vec<&Pair> = all.iter().filter(|p| p.ni.point.ranks >= 32).collect();
    let name = "P = 32 and 64 measured, ni×mpi >= 1";
    let has = |r: u32| big.iter().any(|p| p.ni.point.ranks == r);
    let detail = big
        .iter()
        .map(|p| format!("{} ×{:.2}{}", p.label(), p.r.x, mark(p)))
        .collect::<Vec<_>>()
        .join(", ");
    match judge(big.iter().map(|p| &p.r.x)) {
        None => v.add(name, None, "not measured (--ranks 32,64)".into()),
        Some(true) if !(has(32) && has(64)) => v.add(
            name,
            None,
            format!(
                "{detail}; P = {} not measured",
                if has(32) { 64 } else { 32 }
            ),
        ),
        ok => v.add(name, ok, detail),
    }

    let name = "instructions per 8 B round trip, ni's beside Open MPI's (callgrind)";
    let count = |s: &str| instr.and_then(|i| i["per_round_trip"][s].as_u64());
    match (count("ni"), count("mpi")) {
        (Some(ni), Some(mpi)) if instr.is_some_and(|i| i["pattern"] == "pingpong") => v.add(
            name,
            Some(true),
            format!(
                "ni {ni}, Open MPI {mpi} (ni×mpi {:.2}){} at rank 0 (instr.txt)",
                mpi as f64 / ni.max(1) as f64,
                count("mpi-ni")
                    .map(|m| format!(", Open MPI over ni {m}"))
                    .unwrap_or_default()
            ),
        ),
        _ => v.add(
            name,
            None,
            "not counted (tests/bench/instr.sh; a full run.sh or run.sh --instr)".into(),
        ),
    }
    (v.text, Value::Array(v.json))
}

/// Steps between neighbouring sizes of ni's time series (every metric in µs, per metric,
/// type, placement and P) judged, the cliffs among them, and the steps that would be cliffs
/// but for the machine's own copy (`copy`: seconds per byte count), described ('!': either
/// of ni's two points disturbed).
fn cliffs(recs: &[Rec], copy: &[(u64, f64)], noise: f64) -> (usize, Vec<String>, Vec<String>) {
    let timed = |r: &&Rec| {
        r.unit() == Unit::Micros
            && r.point.error.is_none()
            && r.value().is_some_and(|v| v > 0.0)
            && r.point.size > 0
    };
    let series_of = |r: &Rec| {
        (
            r.point.metric.clone(),
            r.point.dtype.clone(),
            r.placement.clone(),
            r.point.ranks,
        )
    };
    let mut keys: Vec<_> = recs
        .iter()
        .filter(|r| r.transport == "ni")
        .filter(timed)
        .map(series_of)
        .collect();
    keys.sort();
    keys.dedup();
    let (mut steps, mut found, mut machine) = (0, Vec::new(), Vec::new());
    for key in keys {
        let series = |t: &str| {
            let mut s: Vec<(u64, f64, bool, u64)> = recs
                .iter()
                .filter(|r| r.transport == t)
                .filter(timed)
                .filter(|r| series_of(r) == key)
                .map(|r| {
                    // A launch measures every size in one of the machine's states: its best
                    // rounds' are neighbours from one state where pooled medians may not be.
                    let v = r.best_round().or_else(|| r.value()).unwrap_or(f64::NAN);
                    (r.point.size, v, r.disturbed(noise), r.point.bytes)
                })
                .collect();
            s.sort_by_key(|x| x.0);
            s
        };
        let (ni, mpi) = (series("ni"), series("mpi"));
        for w in ni.windows(2) {
            let ((s1, t1, d1, b1), (s2, t2, d2, b2)) = (w[0], w[1]);
            steps += 1;
            let grew = t2 / t1;
            let by_size = (s2 as f64 / s1 as f64).max(2.0);
            let theirs = match (
                mpi.iter().find(|x| x.0 == s1),
                mpi.iter().find(|x| x.0 == s2),
            ) {
                (Some(a), Some(b)) => Some(b.1 / a.1),
                _ => None,
            };
            if grew > CLIFF * by_size && theirs.is_none_or(|m| grew > CLIFF * m) {
                let copies = copy::at(copy, b1).zip(copy::at(copy, b2));
                let copied = copies.map(|(a, b)| b / a);
                let (metric, dtype, placement, ranks) = &key;
                let beside: Vec<String> = theirs
                    .map(|m| format!("Open MPI ×{m:.1}"))
                    .into_iter()
                    .chain(copied.map(|c| format!("memcpy ×{c:.1}")))
                    .collect();
                let step = format!(
                    "{metric}{}{} P={ranks} {placement} {s1} -> {s2}: ×{grew:.1}{}{}",
                    if dtype.is_empty() { "" } else { " " },
                    dtype,
                    if d1 || d2 { "!" } else { "" },
                    if beside.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", beside.join(", "))
                    }
                );
                // ni's times in µs (`Unit::Micros`), the copy's in seconds.
                let share = |b: f64| b * 1e6 >= COPY_SHARE * t2;
                if copies.is_some_and(|(a, b)| grew <= CLIFF * b / a && share(b)) {
                    machine.push(step);
                } else {
                    found.push(step);
                }
            }
        }
    }
    (steps, found, machine)
}

#[cfg(test)]
mod tests {
    use super::super::driver::Point;
    use super::*;
    use serde_json::json;

    fn rec(t: &str, metric: &str, placement: &str, ranks: u32, size: u64, secs: f64) -> Rec {
        Rec {
            mode: metric.split('-').next().unwrap().into(),
            transport: t.into(),
            placement: placement.into(),
            point: Point {
                metric: metric.into(),
                size,
                bytes: size,
                ranks,
                iters: 10,
                batches: vec![secs; 3],
                ..Default::default()
            },
            foreign: 0.0,
            rounds: Vec::new(),
        }
    }

    fn line<'a>(j: &'a Value, prefix: &str) -> &'a Value {
        j.as_array()
            .unwrap()
            .iter()
            .find(|t| t["target"].as_str().unwrap().starts_with(prefix))
            .unwrap()
    }

    #[test]
    fn named_points_judge_every_placement_measured() {
        let recs = vec![
            rec("ni", "latency", "split", 2, 8, 0.2e-6),
            rec("mpi", "latency", "split", 2, 8, 0.3e-6),
            rec("ni", "latency", "same", 2, 8, 3.0e-6),
            rec("mpi", "latency", "same", 2, 8, 2.5e-6),
            // Higher is better for a rate: ni's 10 against 8 Mmsg/s wins.
            rec("ni", "msgrate", "split", 2, 8, 1e-7),
            rec("mpi", "msgrate", "split", 2, 8, 1.25e-7),
        ];
        let (txt, j) = targets(&recs, None, &[], 0.25);
        let lat = line(&j, "8 B half round trip");
        assert_eq!(lat["met"], false, "{txt}");
        let d = lat["detail"].as_str().unwrap();
        assert!(d.contains("split ×1.50") && d.contains("same ×0.83"), "{d}");
        assert_eq!(line(&j, "8 B message rate, P = 2")["met"], true, "{txt}");
        assert_eq!(
            line(&j, "8 B message rate, P = 8")["met"],
            Value::Null,
            "{txt}"
        );
        // One point below 1: every-point is missed, and names it.
        let every = line(&j, "every point");
        assert_eq!(every["met"], false, "{txt}");
        let d = every["detail"].as_str().unwrap();
        assert!(d.starts_with("2 of 3 points >= 1"), "{d}");
        assert!(d.contains("latency 8 P=2 same ×0.83"), "{d}");
        assert!(d.contains("not measured: P = 4, P = 8"), "{d}");
    }

    /// A run of three rounds or more judges each point by its transports' best rounds
    /// (`report::ratio`), marked 'b': here ni landed in the machine's slow cluster in two
    /// launches of three and Open MPI in one, which the pooled medians (0.5 against 0.2 µs)
    /// would call ×0.4.
    #[test]
    fn named_points_judge_the_best_rounds() {
        let round = |t: &str, k: u32, secs: f64| Rec {
            rounds: vec![(k, 3)],
            ..rec(t, "latency", "split", 2, 8, secs)
        };
        let recs = super::super::report::pool(vec![
            round("ni", 1, 0.2e-6),
            round("mpi", 1, 0.2e-6),
            round("ni", 2, 0.5e-6),
            round("mpi", 2, 0.2e-6),
            round("ni", 3, 0.5e-6),
            round("mpi", 3, 0.5e-6),
        ]);
        let (txt, j) = targets(&recs, None, &[], 0.25);
        let lat = line(&j, "8 B half round trip");
        assert_eq!(lat["met"], true, "{txt}");
        let d = lat["detail"].as_str().unwrap();
        assert!(
            d.contains("split ×1.00b! (ni 0.200 us / mpi 0.200 us)"),
            "{d}"
        );
    }

    #[test]
    fn every_point_met_needs_both_placements_and_p_2_4_8() {
        let mut recs = Vec::new();
        for pl in ["split", "same"] {
            for p in [2, 4, 8] {
                recs.push(rec("ni", "msgrate", pl, p, 8, 1e-7));
                recs.push(rec("mpi", "msgrate", pl, p, 8, 2e-7));
            }
        }
        let (txt, j) = targets(&recs[..6], None, &[], 0.25);
        assert_eq!(line(&j, "every point")["met"], Value::Null, "{txt}");
        let (txt, j) = targets(&recs, None, &[], 0.25);
        assert_eq!(line(&j, "every point")["met"], true, "{txt}");
    }

    #[test]
    fn a_cliff_is_a_step_faster_than_the_size_and_than_open_mpi() {
        let mut recs = vec![
            // 64 -> 256 elements: ×7 for ×4 the size, Open MPI ×1.2: a cliff.
            rec("ni", "allreduce", "split", 2, 64, 0.5e-6),
            rec("ni", "allreduce", "split", 2, 256, 3.5e-6),
            rec("mpi", "allreduce", "split", 2, 64, 1.0e-6),
            rec("mpi", "allreduce", "split", 2, 256, 1.2e-6),
            // 256 K -> 1 M: ×14 for ×4, but Open MPI ×12 over the same step: the machine.
            rec("ni", "bcast", "split", 4, 262144, 100e-6),
            rec("ni", "bcast", "split", 4, 1048576, 1400e-6),
            rec("mpi", "bcast", "split", 4, 262144, 200e-6),
            rec("mpi", "bcast", "split", 4, 1048576, 2400e-6),
            // Linear growth is no cliff; rates are not judged.
            rec("ni", "latency", "split", 2, 1024, 1e-6),
            rec("ni", "latency", "split", 2, 4096, 4e-6),
            rec("ni", "msgrate", "split", 2, 8, 1e-7),
            rec("ni", "msgrate", "split", 2, 1024, 1e-5),
        ];
        let (txt, j) = targets(&recs, None, &[], 0.25);
        let c = line(&j, "no cliff");
        assert_eq!(c["met"], false, "{txt}");
        let d = c["detail"].as_str().unwrap();
        assert!(d.starts_with("1 of 3 steps"), "{d}");
        assert!(
            d.contains("allreduce P=2 split 64 -> 256: ×7.0 (Open MPI ×1.2)"),
            "{d}"
        );
        // Without Open MPI's series the bcast step is judged against the size alone.
        recs.retain(|r| !(r.transport == "mpi" && r.point.metric == "bcast"));
        let (txt, j) = targets(&recs, None, &[], 0.25);
        let d = line(&j, "no cliff")["detail"].as_str().unwrap().to_string();
        assert!(
            d.starts_with("2 of 3 steps") && d.contains("bcast P=4"),
            "{txt}"
        );
    }

    #[test]
    fn a_step_the_machines_own_copy_makes_as_steep_is_no_cliff() {
        let recs = vec![
            // 16 -> 32 KiB put: ×5.6, Open MPI ×1.3 (its cost per put hides the cache).
            rec("ni", "put-latency", "same", 2, 16384, 0.18e-6),
            rec("ni", "put-latency", "same", 2, 32768, 1.01e-6),
            rec("mpi", "put-latency", "same", 2, 16384, 2.79e-6),
            rec("mpi", "put-latency", "same", 2, 32768, 3.68e-6),
            // 1 -> 2 KiB allreduce: ×7, where the copy grows ×2.
            rec("ni", "allreduce", "split", 2, 1024, 0.5e-6),
            rec("ni", "allreduce", "split", 2, 2048, 3.5e-6),
        ];
        // The copy measured at 16 and 32 KiB only: the allreduce's step is judged without it.
        let copy = [(16384, 0.16e-6), (32768, 1.10e-6)];
        let (txt, j) = targets(&recs, None, &copy, 0.25);
        let c = line(&j, "no cliff");
        assert_eq!(c["met"], false, "{txt}");
        let d = c["detail"].as_str().unwrap();
        assert!(d.starts_with("1 of 2 steps"), "{d}");
        assert!(
            d.contains("allreduce P=2 split 1024 -> 2048: ×7.0; "),
            "{d}"
        );
        assert!(
            d.ends_with("; 1 where the machine's own copy grows as much (a cache boundary): put-latency P=2 same 16384 -> 32768: ×5.6 (Open MPI ×1.3, memcpy ×6.9)"),
            "{d}"
        );
        // A copy that grows as the allreduce's size does excuses nothing.
        let copy = [
            (1024, 50e-9),
            (2048, 100e-9),
            (16384, 0.16e-6),
            (32768, 1.10e-6),
        ];
        let (txt, j) = targets(&recs[..4], None, &copy, 0.25);
        assert_eq!(line(&j, "no cliff")["met"], true, "{txt}");
        let (txt, j) = targets(&recs, None, &copy, 0.25);
        let d = line(&j, "no cliff")["detail"].as_str().unwrap().to_string();
        assert!(d.contains("1024 -> 2048: ×7.0 (memcpy ×2.0)"), "{txt}");
        // Without the copy (a run saved before it was measured) the put's step is a cliff.
        let (txt, j) = targets(&recs[..4], None, &[], 0.25);
        assert_eq!(line(&j, "no cliff")["met"], false, "{txt}");
        // A step as steep as the copy's where the copy is a sliver of ni's time is a cliff.
        let slow = [
            rec("ni", "allreduce", "split", 2, 16384, 5e-6),
            rec("ni", "allreduce", "split", 2, 32768, 35e-6),
        ];
        let copy = [(16384, 0.16e-6), (32768, 1.10e-6)];
        let (txt, j) = targets(&slow, None, &copy, 0.25);
        let d = line(&j, "no cliff")["detail"].as_str().unwrap().to_string();
        assert!(
            d.starts_with("1 of 1 steps") && d.contains("memcpy ×6.9"),
            "{txt}"
        );
    }

    #[test]
    fn large_partitions_and_instructions() {
        let recs = vec![
            rec("ni", "allreduce", "split", 32, 1, 60e-6),
            rec("mpi", "allreduce", "split", 32, 1, 150e-6),
        ];
        let instr = json!({"pattern": "pingpong", "per_round_trip": {"ni": 1236, "mpi": 1317}});
        let (txt, j) = targets(&recs, Some(&instr), &[], 0.25);
        let big = line(&j, "P = 32 and 64");
        assert_eq!(big["met"], Value::Null, "{txt}");
        assert!(
            big["detail"]
                .as_str()
                .unwrap()
                .contains("P = 64 not measured"),
            "{txt}"
        );
        let i = line(&j, "instructions");
        assert_eq!(i["met"], true, "{txt}");
        assert!(
            i["detail"]
                .as_str()
                .unwrap()
                .contains("ni 1236, Open MPI 1317 (ni×mpi 1.07)"),
            "{txt}"
        );
        // A count of another pattern (e.g. NIB_INSTR_PATTERN=am) is not the 8 B round trip.
        let am = json!({"pattern": "am", "per_round_trip": {"ni": 1542, "mpi": 1231}});
        let (_, j) = targets(&recs, Some(&am), &[], 0.25);
        assert_eq!(line(&j, "instructions")["met"], Value::Null);
        let (_, j) = targets(&recs, None, &[], 0.25);
        assert_eq!(line(&j, "every point")["met"], Value::Null);
    }
}
