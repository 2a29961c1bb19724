//! Human tables and the Prometheus text exposition format.

use std::fmt::Write;

use ni_abi::control::NodeCounters;

/// A plain-text table: a header row, columns padded to their widest cell, numeric columns
/// right-aligned so digits line up.
pub struct Table {
    headers: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// `columns`: (header, right-aligned).
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = (S, bool)>) -> Table {
        let (headers, right) = columns.into_iter().map(|(h, r)| (h.into(), r)).unzip();
        Table {
            headers,
            right,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for cells in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (c, cell) in cells.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let pad = widths[c] - cell.chars().count();
                if self.right[c] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `3725.4` seconds as `1h 2m 5s`.
pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m {s}s"),
        _ => format!("{d}d {h}h {m}m {s}s"),
    }
}

/// A per-second rate, short enough for a table cell.
pub fn rate(r: Option<f64>) -> String {
    let Some(r) = r else {
        return "-".into();
    };
    if r == 0.0 {
        "0".into()
    } else if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// Metric names may only hold `[a-zA-Z0-9_:]`; a daemon counter name that strays is mapped
/// rather than emitted as something a scraper rejects.
fn metric_name(counter: &str) -> String {
    let body: String = counter
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("ni_{body}_total")
}

/// Prometheus text exposition format: one `ni_<counter>_total` family per counter and one
/// `ni_<gauge>` family per gauge, one sample per NI labelled `node`. Families are grouped,
/// as the format requires, in the daemon's order.
pub fn prometheus(counters: &[NodeCounters]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for nc in counters {
        for (name, _) in &nc.counters {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    let mut out = String::new();
    for name in names {
        let metric = metric_name(name);
        let _ = writeln!(out, "# HELP {metric} ni-device counter {name}, per NI.");
        let _ = writeln!(out, "# TYPE {metric} counter");
        for nc in counters {
            if let Some((_, v)) = nc.counters.iter().find(|(n, _)| n == name) {
                let _ = writeln!(out, "{metric}{{node=\"{}\"}} {v}", nc.node);
            }
        }
    }
    let mut gauges: Vec<&str> = Vec::new();
    for nc in counters {
        for (name, _) in &nc.gauges {
            if !gauges.contains(&name.as_str()) {
                gauges.push(name);
            }
        }
    }
    for name in gauges {
        let metric = metric_name(name);
        let metric = metric.strip_suffix("_total").unwrap_or(&metric);
        let _ = writeln!(out, "# HELP {metric} ni-device gauge {name}, per NI.");
        let _ = writeln!(out, "# TYPE {metric} gauge");
        for nc in counters {
            if let Some((_, v)) = nc.gauges.iter().find(|(n, _)| n == name) {
                let _ = writeln!(out, "{metric}{{node=\"{}\"}} {v}", nc.node);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_and_aligns() {
        let mut t = Table::new([("NAME", false), ("N", true)]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["long name".into(), "100".into()]);
        assert_eq!(
            t.render(),
            "NAME         N\na            1\nlong name  100\n"
        );
    }

    #[test]
    fn durations_and_rates() {
        assert_eq!(duration(5.9), "5s");
        assert_eq!(duration(3725.0), "1h 2m 5s");
        assert_eq!(duration(90061.0), "1d 1h 1m 1s");
        assert_eq!(rate(None), "-");
        assert_eq!(rate(Some(0.0)), "0");
        assert_eq!(rate(Some(2.25)), "2.2");
        assert_eq!(rate(Some(1234.5)), "1234");
    }

    #[test]
    fn prometheus_groups_families() {
        let c = vec![
            NodeCounters {
                node: 0,
                counters: vec![("attaches".into(), 1), ("dma-maps".into(), 2)],
                gauges: vec![("dr_message_count".into(), -2)],
            },
            NodeCounters {
                node: 3,
                counters: vec![("attaches".into(), 4), ("dma-maps".into(), 5)],
                gauges: vec![("dr_message_count".into(), 2)],
            },
        ];
        assert_eq!(
            prometheus(&c),
            "# HELP ni_attaches_total ni-device counter attaches, per NI.\n\
             # TYPE ni_attaches_total counter\n\
             ni_attaches_total{node=\"0\"} 1\n\
             ni_attaches_total{node=\"3\"} 4\n\
             # HELP ni_dma_maps_total ni-device counter dma-maps, per NI.\n\
             # TYPE ni_dma_maps_total counter\n\
             ni_dma_maps_total{node=\"0\"} 2\n\
             ni_dma_maps_total{node=\"3\"} 5\n\
             # HELP ni_dr_message_count ni-device gauge dr_message_count, per NI.\n\
             # TYPE ni_dr_message_count gauge\n\
             ni_dr_message_count{node=\"0\"} -2\n\
             ni_dr_message_count{node=\"3\"} 2\n"
        );
    }
}
