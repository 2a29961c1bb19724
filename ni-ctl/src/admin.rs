//! The administrator's commands that change the fabric or test it: partitions, ports,
//! map-outs, diagnostics.

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use clap::Subcommand;
use ni_abi::control::{
    LoopbackInfo, MapOutInfo, PartitionInfo, PingInfo, PortInfo, Request, Response, TrafficInfo,
};
use serde_json::{json, Value};

use crate::client::Client;
use crate::render::Table;
use crate::{emit, emit_json, unexpected};

/// A diagnostic found a fault (exit status 4). The report has been printed already.
#[derive(Debug)]
pub struct Fault(pub String);

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Fault {}

#[derive(Subcommand, Debug)]
pub enum PartitionCommand {
    /// Create a partition. Its NIs get ranks 0..size-1 in the order given (CM-5 relative
    /// numbering); they must be in no partition (delete theirs first). Attached clients
    /// see the change (libni: "the NI was reset") and attach again.
    Create {
        /// 1 to 64 letters, digits, '-', '_' or '.'.
        name: String,
        /// NIs, in rank order: a list of numbers and ranges, e.g. 0-3,6 (ranks 0-3 are
        /// NIs 0-3, rank 4 is NI 6).
        #[arg(long, value_name = "LIST", value_parser = node_list)]
        nodes: NodeList,
    },
    /// Delete a partition. What its NIs had in flight fails ("cancelled"); their clients
    /// see the change and they are in no partition until one is created.
    Delete { name: String },
    /// Every partition: size, NIs, how many are ready.
    List,
    /// One partition: the rank -> NI translation, each member's numbers and state.
    Show { name: String },
    /// Allow (on) or forbid (off, the default) MLINK remote boot in a partition: a member
    /// that holds itself in reset (its MLINK BOOT register) takes WRITEs anywhere in its
    /// SRAM and is released by a RESET (METRO §11.3).
    #[command(name = "remote-boot")]
    RemoteBoot {
        name: String,
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum DatelineCommand {
    /// Make the link between POSITION and POSITION+1 (wrapping) of every ring in AXIS a
    /// dateline: requests that cross it move from VC0 to VC2 (SSD-T90 "R Option").
    Set {
        #[arg(value_parser = ["X", "Y", "Z"])]
        axis: String,
        position: u32,
    },
    /// Remove every dateline of AXIS.
    Clear {
        #[arg(value_parser = ["X", "Y", "Z"])]
        axis: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum MlinkCommand {
    /// Make the next COUNT MLINK operations launched from NI carry a bad header checksum
    /// (the target answers NACK and does nothing) or a bad data checksum (NACK after a
    /// WRITE's data is stored; READ and ROP data refused).
    Fault {
        #[arg(value_name = "NI")]
        node: u32,
        #[arg(value_parser = ["header", "data"])]
        kind: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
}

pub fn dateline(c: &mut Client, json: bool, cmd: &DatelineCommand) -> Result<()> {
    let (axis, position) = match cmd {
        DatelineCommand::Set { axis, position } => (axis.clone(), Some(*position)),
        DatelineCommand::Clear { axis } => (axis.clone(), None),
    };
    let t = match c.call(Request::DatelineSet { axis, position })? {
        Response::Topology(t) => t,
        r => return Err(unexpected("dateline", &r)),
    };
    if json {
        return emit_json(&json!({ "datelines": t.datelines }));
    }
    let list: Vec<String> = t
        .datelines
        .iter()
        .map(|d| format!("{} {}-{}", d.axis, d.between[0], d.between[1]))
        .collect();
    emit(&format!(
        "datelines: {}\n",
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    ))
}

pub fn mlink(c: &mut Client, json: bool, cmd: &MlinkCommand) -> Result<()> {
    let MlinkCommand::Fault { node, kind, count } = cmd;
    match c.call(Request::MlinkFault {
        node: *node,
        kind: kind.clone(),
        count: Some(*count),
    })? {
        Response::Done => {}
        r => return Err(unexpected("mlink fault", &r)),
    }
    if json {
        return emit_json(&json!({ "node": node, "kind": kind, "count": count }));
    }
    emit(&format!(
        "NI {node}: the next {count} MLINK operation(s) carry a bad {kind} checksum\n"
    ))
}

pub fn router(c: &mut Client, json: bool, node: &str) -> Result<()> {
    let r = match c.call(Request::RouterShow {
        node: node.to_string(),
    })? {
        Response::Router(r) => r,
        r => return Err(unexpected("router", &r)),
    };
    if json {
        return emit_json(&r);
    }
    let mut out = format!(
        "router {}{}\n  R_SW           {:#018x}\n  R_ORIENT       {:#x}\n  R_LUT_OVERRIDE {:#x} (mode {})\n  R_SGET_RTRN    {:#014x}\n  R_ERR0         {:#018x}\n  R_ERR1         {:#018x}\n\n",
        r.physical,
        r.ni.map_or(" (spare node)".to_string(), |n| format!(" (NI {n})")),
        r.r_sw,
        r.r_orient,
        r.r_lut_override,
        (r.r_lut_override >> ni_abi::t3e::router::OVERRIDE_MODE_SHIFT) & 3,
        r.r_sget_rtrn,
        r.r_err0,
        r.r_err1,
    );
    let mut t = Table::new([("LPE", true), ("TAG", false), ("SOURCE", false)]);
    for e in &r.lut {
        t.row(vec![
            e.index.to_string(),
            format!("{:#012x}", e.tag),
            if e.written { "SPUT" } else { "computed" }.to_string(),
        ]);
    }
    out.push_str(&t.render());
    emit(&out)
}

#[derive(Subcommand, Debug)]
pub enum PortCommand {
    /// Each NI's port 0: mode, link state, link state machine (CLSM) state, traffic.
    List {
        /// NIs to show [default: all].
        #[arg(value_name = "NI")]
        nodes: Vec<u32>,
    },
    /// Set a port's mode and/or link state. Taking a link down (or changing the mode of a
    /// link that is up: it retrains) fails what was in flight through it with "link down";
    /// while it is down every operation to or from the NI fails the same way.
    #[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["mode", "state"])))]
    Set {
        #[arg(value_name = "NI")]
        node: u32,
        #[arg(long, value_parser = ["myrinet", "ethernet", "infiniband"])]
        mode: Option<String>,
        #[arg(long, value_parser = ["up", "down"])]
        state: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum MapOutCommand {
    /// Map out a bad node, as the SSD-T90 does: the logical PE it held moves to a spare
    /// node (or --to), routes stop passing through it. NODE is an NI number (the node that
    /// NI is on) or a physical PE number, six hex digits ZZYYXX.
    Node {
        /// An NI number or a physical PE number (ZZYYXX).
        node: String,
        /// The physical node (ZZYYXX) to move its logical PE to [default: the first spare].
        #[arg(long, value_name = "ZZYYXX")]
        to: Option<String>,
    },
    /// Map out the link between two neighbouring nodes (NI numbers or ZZYYXX): routes that
    /// used it detour (the other way round a ring, an initial hop, a final -Z hop).
    Link {
        /// One end: an NI number or a physical PE number (ZZYYXX).
        a: String,
        /// The other end, a neighbour of A.
        b: String,
    },
    /// Undo every map-out: the torus and its LUT as ni-device started with them.
    Clear,
}

#[derive(Subcommand, Debug)]
pub enum DiagCommand {
    /// MLINK NOOP from the administrator's side: is NI B up as NI A's partition sees it
    /// (same partition, client ready, both ports up, a route)?
    Ping {
        /// The NI whose partition's view is asked.
        a: u32,
        /// The NI pinged.
        b: u32,
    },
    /// NI sends to itself through its port and the fabric, and every byte is checked. Runs
    /// in ni-device with memory of its own: needs no client, touches none.
    Loopback {
        #[arg(value_name = "NI")]
        node: u32,
        /// Largest message, bytes (K, M suffixes: binary).
        #[arg(long, value_parser = size, default_value = "64K")]
        size: u64,
        #[arg(long, default_value_t = 16)]
        count: u32,
    },
    /// xnet-style load test: within each partition every NI sends to every other, round
    /// after round, messages of many sizes through ports, routes and the fabric's copy
    /// engine; every byte is checked. Runs in ni-device with memory of its own, beside
    /// whatever clients are doing (it needs none and touches none of theirs); reports
    /// throughput and errors.
    Traffic {
        /// One partition [default: each in turn].
        #[arg(long)]
        partition: Option<String>,
        /// Seconds per partition.
        #[arg(long, default_value_t = 1.0, value_parser = crate::positive_secs)]
        secs: f64,
        /// Largest message, bytes (K, M suffixes: binary).
        #[arg(long, value_parser = size, default_value = "1M")]
        max_size: u64,
    },
}

/// NIs in the order given.
#[derive(Clone, Debug)]
pub struct NodeList(pub Vec<u32>);

/// `0-3,6` -> [0, 1, 2, 3, 6]; a descending range counts down (`3-1` is 3, 2, 1).
pub fn node_list(s: &str) -> Result<NodeList, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("{t:?} in {s:?} is not an NI number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a.abs_diff(b) >= 4096 {
                    return Err(format!("range {part:?} is longer than any machine"));
                }
                if a <= b {
                    out.extend(a..=b);
                } else {
                    out.extend((b..=a).rev());
                }
            }
            None => out.push(num(part)?),
        }
    }
    if out.is_empty() {
        return Err("no NIs given".into());
    }
    Ok(NodeList(out))
}

/// `65536`, `64K`, `1M`, `1MiB`, `2G` (binary multiples).
pub fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: u64 = n.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use K, M or G)")),
    };
    match n.checked_mul(mult) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(format!("{s:?} is not a size of at least one byte")),
    }
}

/// `0-3,6` from [0, 1, 2, 3, 6].
fn compact(nodes: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        let mut j = i;
        while j + 1 < nodes.len() && nodes[j].checked_add(1) == Some(nodes[j + 1]) {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", nodes[i], nodes[j])
        } else {
            nodes[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

fn pairs_json(pairs: &[(String, u64)]) -> Value {
    Value::Object(pairs.iter().map(|(n, v)| (n.clone(), json!(v))).collect())
}

pub fn partition(c: &mut Client, json: bool, cmd: &PartitionCommand) -> Result<()> {
    match cmd {
        PartitionCommand::Create { name, nodes } => {
            let p = match c.call(Request::PartitionCreate {
                name: name.clone(),
                nodes: nodes.0.clone(),
            })? {
                Response::Partition(p) => p,
                r => return Err(unexpected("partition create", &r)),
            };
            if json {
                return emit_json(&p);
            }
            emit(&format!(
                "partition {} created: {} NI{}\n\n{}",
                p.name,
                p.size,
                if p.size == 1 { "" } else { "s" },
                show_text(&p)
            ))
        }
        PartitionCommand::Delete { name } => {
            match c.call(Request::PartitionDelete { name: name.clone() })? {
                Response::Done => {}
                r => return Err(unexpected("partition delete", &r)),
            }
            if json {
                return emit_json(&json!({ "deleted": name }));
            }
            emit(&format!("partition {name} deleted\n"))
        }
        PartitionCommand::List => {
            let list = match c.call(Request::Partitions)? {
                Response::Partitions { partitions } => partitions,
                r => return Err(unexpected("partition list", &r)),
            };
            if json {
                return emit_json(&json!({ "partitions": list }));
            }
            let mut t = Table::new([
                ("NAME", false),
                ("ID", true),
                ("SIZE", true),
                ("READY", true),
                ("NIS", false),
            ]);
            for p in &list {
                let nodes: Vec<u32> = p.members.iter().map(|m| m.node).collect();
                let ready = p.members.iter().filter(|m| m.state == "ready").count();
                t.row(vec![
                    p.name.clone(),
                    p.id.to_string(),
                    p.size.to_string(),
                    ready.to_string(),
                    compact(&nodes),
                ]);
            }
            emit(&t.render())
        }
        PartitionCommand::RemoteBoot { name, state } => {
            let p = match c.call(Request::PartitionRemoteBoot {
                name: name.clone(),
                enabled: state == "on",
            })? {
                Response::Partition(p) => p,
                r => return Err(unexpected("partition remote-boot", &r)),
            };
            if json {
                return emit_json(&p);
            }
            emit(&format!(
                "partition {}: MLINK remote boot {}\n",
                p.name,
                if p.remote_boot { "on" } else { "off" }
            ))
        }
        PartitionCommand::Show { name } => {
            let p = match c.call(Request::PartitionShow { name: name.clone() })? {
                Response::Partition(p) => p,
                r => return Err(unexpected("partition show", &r)),
            };
            if json {
                return emit_json(&p);
            }
            emit(&show_text(&p))
        }
    }
}

/// A partition as `partition show` prints it: the translation in runs (as a chunk table
/// would express it), then one row per rank.
fn show_text(p: &PartitionInfo) -> String {
    let mut out = format!(
        "partition {} (id {}): {} NI{}, ranks 0-{}\ntranslation, rank -> NI:\n",
        p.name,
        p.id,
        p.size,
        if p.size == 1 { "" } else { "s" },
        p.size.saturating_sub(1)
    );
    if p.remote_boot {
        out.push_str("MLINK remote boot: on\n");
    }
    for r in &p.runs {
        if r.ranks[0] == r.ranks[1] {
            out.push_str(&format!("  rank {} -> NI {}\n", r.ranks[0], r.nodes[0]));
        } else {
            out.push_str(&format!(
                "  ranks {}-{} -> NIs {}-{}\n",
                r.ranks[0], r.ranks[1], r.nodes[0], r.nodes[1]
            ));
        }
    }
    let mut t = Table::new([
        ("RANK", true),
        ("NI", true),
        ("PHYSICAL", false),
        ("STATE", false),
        ("LINK", false),
    ]);
    for m in &p.members {
        t.row(vec![
            m.rank.to_string(),
            m.node.to_string(),
            m.physical.clone(),
            m.state.clone(),
            m.link.clone(),
        ]);
    }
    out.push('\n');
    out.push_str(&t.render());
    out
}

fn port_json(p: &PortInfo) -> Value {
    let mut v = serde_json::to_value(p).expect("ports serialize");
    v["counters"] = pairs_json(&p.counters);
    v
}

fn counter(p: &PortInfo, name: &str) -> String {
    p.counters
        .iter()
        .find(|(n, _)| n == name)
        .map_or("-".into(), |(_, v)| v.to_string())
}

fn ports_table(ports: &[PortInfo]) -> String {
    let mut t = Table::new([
        ("NI", true),
        ("PORT", true),
        ("MODE", false),
        ("MODE-REG", false),
        ("LINK", false),
        ("CLSM", false),
        ("LINK-READY", false),
        ("DOWNED", true),
        ("PKTS-OUT", true),
        ("BYTES-OUT", true),
        ("PKTS-IN", true),
        ("BYTES-IN", true),
        ("REFUSED", true),
    ]);
    for p in ports {
        t.row(vec![
            p.node.to_string(),
            p.port.to_string(),
            p.mode.clone(),
            format!("{:#06b}", p.mode_register),
            p.state.clone(),
            format!("{}({})", p.clsm, p.clsm_code),
            if p.link_ready { "1" } else { "0" }.into(),
            counter(p, "p0_link_downed"),
            counter(p, "p0_packets_sent"),
            counter(p, "p0_bytes_sent"),
            counter(p, "p0_packets_rcvd"),
            counter(p, "p0_bytes_rcvd"),
            counter(p, "p0_link_refused"),
        ]);
    }
    t.render()
}

pub fn port(c: &mut Client, json: bool, cmd: &PortCommand) -> Result<()> {
    let ports = match cmd {
        PortCommand::List { nodes } => match c.call(Request::Ports {
            nodes: nodes.clone(),
        })? {
            Response::Ports { ports } => ports,
            r => return Err(unexpected("port list", &r)),
        },
        PortCommand::Set { node, mode, state } => {
            match c.call(Request::PortSet {
                node: *node,
                mode: mode.clone(),
                state: state.clone(),
            })? {
                Response::Port(p) => vec![p],
                r => return Err(unexpected("port set", &r)),
            }
        }
    };
    if json {
        let v: Vec<Value> = ports.iter().map(port_json).collect();
        return match cmd {
            PortCommand::Set { .. } => emit_json(&v[0]),
            PortCommand::List { .. } => emit_json(&json!({ "ports": v })),
        };
    }
    emit(&ports_table(&ports))
}

pub fn map_out(c: &mut Client, json: bool, cmd: &MapOutCommand) -> Result<()> {
    let req = match cmd {
        MapOutCommand::Node { node, to } => Request::MapOutNode {
            node: node.clone(),
            replacement: to.clone(),
        },
        MapOutCommand::Link { a, b } => Request::MapOutLink {
            a: a.clone(),
            b: b.clone(),
        },
        MapOutCommand::Clear => Request::MapOutClear,
    };
    let m: MapOutInfo = match c.call(req)? {
        Response::MapOut(m) => m,
        r => return Err(unexpected("map-out", &r)),
    };
    if json {
        return emit_json(&m);
    }
    let mut out = match (&m.action[..], &m.mapped_out) {
        ("clear", _) => "every map-out undone: the torus and its LUT as ni-device started\n".into(),
        (what, Some(x)) => format!("mapped out {what} {x}\n"),
        (what, None) => format!("mapped out a {what}\n"),
    };
    if let Some(r) = &m.remap {
        out.push_str(&format!(
            "logical PE {} (NI {}) moved from physical node {} to {}\n",
            r.lpe, r.lpe, r.from, r.to
        ));
    }
    if m.failed > 0 {
        out.push_str(&format!(
            "{} operation{} waiting in the fabric failed: no route left (link down)\n",
            m.failed,
            if m.failed == 1 { "" } else { "s" }
        ));
    }
    match &m.unreachable {
        Some(u) if u.is_empty() => out.push_str("every pair of NIs still has a route\n"),
        Some(u) => {
            let list: Vec<String> = u.iter().map(|[a, b]| format!("{a}->{b}")).collect();
            out.push_str(&format!(
                "{} NI pair{} without a route (their traffic fails with link down): {}\n",
                u.len(),
                if u.len() == 1 { "" } else { "s" },
                list.join(" ")
            ));
        }
        None => {}
    }
    emit(&out)
}

pub fn diag(c: &mut Client, json: bool, cmd: &DiagCommand) -> Result<()> {
    match cmd {
        DiagCommand::Ping { a, b } => {
            let p: PingInfo = match c.call(Request::DiagPing { from: *a, to: *b })? {
                Response::Ping(p) => p,
                r => return Err(unexpected("diag ping", &r)),
            };
            if json {
                emit_json(&p)?;
            } else if p.up {
                emit(&format!("NI {} -> NI {}: up: {}\n", p.from, p.to, p.detail))?;
            } else {
                emit(&format!(
                    "NI {} -> NI {}: DOWN ({}): {}\n",
                    p.from, p.to, p.status, p.detail
                ))?;
            }
            if p.up {
                Ok(())
            } else {
                Err(Fault(format!("NI {} is not reachable from NI {}", p.to, p.from)).into())
            }
        }
        DiagCommand::Loopback { node, size, count } => {
            let l: LoopbackInfo = match c.call_long(
                Request::DiagLoopback {
                    node: *node,
                    size: Some(*size),
                    count: Some(*count),
                },
                Duration::from_secs(60),
            )? {
                Response::Loopback(l) => l,
                r => return Err(unexpected("diag loopback", &r)),
            };
            if json {
                emit_json(&l)?;
            } else {
                let verdict = if l.ok {
                    "every byte intact".to_string()
                } else if let Some(e) = &l.error {
                    format!("FAILED: {e}")
                } else {
                    format!("FAILED: {} message(s) came back different", l.mismatches)
                };
                emit(&format!(
                    "NI {} loopback: {} messages, {} bytes in {:.3} s: {verdict}\n",
                    l.node, l.messages, l.bytes, l.secs
                ))?;
            }
            if l.ok {
                Ok(())
            } else {
                Err(Fault(format!("NI {} failed its loopback", l.node)).into())
            }
        }
        DiagCommand::Traffic {
            partition,
            secs,
            max_size,
        } => {
            let parts = match partition {
                Some(_) => 1.0,
                None => match c.call(Request::Partitions)? {
                    Response::Partitions { partitions } => partitions.len().max(1) as f64,
                    r => return Err(unexpected("partition list", &r)),
                },
            };
            let t: TrafficInfo = match c.call_long(
                Request::DiagTraffic {
                    partition: partition.clone(),
                    secs: Some(*secs),
                    max_size: Some(*max_size),
                },
                Duration::from_secs_f64(secs * parts * 2.0),
            )? {
                Response::Traffic(t) => t,
                r => return Err(unexpected("diag traffic", &r)),
            };
            if json {
                let mut v = serde_json::to_value(&t)?;
                for (i, p) in t.partitions.iter().enumerate() {
                    v["partitions"][i]["refused"] = pairs_json(&p.refused);
                }
                emit_json(&v)?;
            } else {
                emit(&traffic_text(&t))?;
            }
            if t.ok {
                Ok(())
            } else {
                Err(Fault("the traffic test found faults".into()).into())
            }
        }
    }
}

fn traffic_text(t: &TrafficInfo) -> String {
    let mut table = Table::new([
        ("PARTITION", false),
        ("NIS", true),
        ("MESSAGES", true),
        ("BYTES", true),
        ("SECS", true),
        ("MB/S", true),
        ("MSG/S", true),
        ("HOPS", true),
        ("MISMATCHES", true),
        ("REFUSED", true),
    ]);
    for p in &t.partitions {
        let refused: u64 = p.refused.iter().map(|(_, n)| n).sum();
        table.row(vec![
            p.name.clone(),
            p.members.to_string(),
            p.messages.to_string(),
            p.bytes.to_string(),
            format!("{:.3}", p.secs),
            format!("{:.1}", p.mb_per_sec),
            format!("{:.0}", p.messages_per_sec),
            p.hops.to_string(),
            p.mismatches.to_string(),
            refused.to_string(),
        ]);
    }
    let mut out = table.render();
    for p in &t.partitions {
        if !p.refused.is_empty() {
            let by: Vec<String> = p.refused.iter().map(|(s, n)| format!("{s} {n}")).collect();
            out.push_str(&format!("{}: refused: {}\n", p.name, by.join(", ")));
        }
        for f in &p.failures {
            out.push_str(&format!("{}: {f}\n", p.name));
        }
    }
    out.push_str(if t.ok {
        "every byte checked: no errors\n"
    } else {
        "FAULTS FOUND\n"
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_keep_the_order_given() {
        assert_eq!(node_list("0-3,6").unwrap().0, [0, 1, 2, 3, 6]);
        assert_eq!(node_list("2, 0").unwrap().0, [2, 0]);
        assert_eq!(node_list("3-1").unwrap().0, [3, 2, 1]);
        assert!(node_list("").is_err());
        assert!(node_list("a").is_err());
        assert!(node_list("1-").is_err());
        assert!(node_list("0-99999").is_err());
        assert_eq!(compact(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(compact(&[2, 0]), "2,0");
        assert_eq!(compact(&[5]), "5");
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(size("64K"), Ok(65536));
        assert_eq!(size("1M"), Ok(1 << 20));
        assert_eq!(size("1MiB"), Ok(1 << 20));
        assert_eq!(size("100"), Ok(100));
        assert!(size("0").is_err());
        assert!(size("1X").is_err());
        assert!(size("K").is_err());
    }
}
