//! `ni-ctl`: the administrator's tool for `ni-device`, over its control socket
//! (`<run-dir>/control.sock`, the protocol in `ni_abi::control`).

mod admin;
mod client;
mod render;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use ni_abi::control::{NodeCounters, Request, Response, RouteInfo, TopologyInfo};
use serde_json::{json, Map, Value};

use client::{Client, Unreachable};
use render::Table;

const EXIT_STATUS: &str = "\
Exit status:
  0  success
  1  ni-device answered with an error (e.g. no such NI) or a reply ni-ctl cannot use
  2  usage error: bad command line
  3  ni-device is not reachable: not running, another run directory, or no permission
  4  a diagnostic (diag) found a fault: peer or link down, bytes that differ, refusals";

/// Administer the emulated network interfaces served by ni-device: state, counters,
/// partitions, ports, routes and map-outs in the interconnect torus, diagnostics.
#[derive(Parser, Debug)]
#[command(name = "ni-ctl", version, after_help = EXIT_STATUS)]
struct Cli {
    /// ni-device's run directory [default: $NI_RUN_DIR, else ni-device's own default:
    /// $XDG_RUNTIME_DIR/ni, or /tmp/ni-$UID].
    #[arg(long, global = true, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// Print JSON instead of tables (the daemon's answer; counters as name/value objects).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Daemon version, run directory, uptime, NI and error totals.
    Status,
    /// Every NI: attach state and client, partition and rank (virtual PE number), logical
    /// and physical PE numbers, link, DMA mappings, socket.
    Nodes,
    /// Per-NI event and error counters.
    Counters(CountersArgs),
    /// Routes through the interconnect torus.
    #[command(subcommand)]
    Route(RouteCommand),
    /// The interconnect torus: dimensions, datelines, logical-to-physical PE table.
    Topology,
    /// The daemons of a fabric that spans hosts: their NIs, their links, the link counters.
    Hosts,
    /// Partitions: which NIs may reach each other, numbered 0..size-1 in the order given.
    #[command(subcommand)]
    Partition(admin::PartitionCommand),
    /// Each NI's port (Lanai X model): mode and link state.
    #[command(subcommand)]
    Port(admin::PortCommand),
    /// Take a bad node or link out of the torus; routes detour, traffic keeps flowing.
    #[command(subcommand, name = "map-out")]
    MapOut(admin::MapOutCommand),
    /// Diagnostics: ping, loopback, an xnet-style traffic test. Exit status 4 on a fault.
    #[command(subcommand)]
    Diag(admin::DiagCommand),
    /// One SSD-T90 router's registers (R_SW, R_ORIENT, R_LUT_OVERRIDE, R_SGET_RTRN, R_ERR0,
    /// R_ERR1) and its R_NET_LUT, marking entries PEs wrote by SPUT. NODE is an NI number or
    /// a physical PE number (ZZYYXX).
    Router {
        #[arg(value_name = "NODE")]
        node: String,
    },
    /// Datelines of the torus (which links move requests from VC0 to VC2).
    #[command(subcommand)]
    Dateline(admin::DatelineCommand),
    /// MLINK fault injection.
    #[command(subcommand)]
    Mlink(admin::MlinkCommand),
    /// The daemon process itself.
    #[command(subcommand)]
    Daemon(DaemonCommand),
}

#[derive(Subcommand, Debug)]
enum DaemonCommand {
    /// Planned restart or upgrade: the daemon hands every client (QEMU guests and processes,
    /// their sessions, memory, DMA maps, interrupts), every NI's state and the fabric's to
    /// BINARY, which it executes in its own process (same pid); clients carry on without an
    /// error. A daemon that is one host of a fabric spanning hosts refuses.
    /// Refused, with the daemon carrying on, when BINARY cannot take it (another handover
    /// format, or it cannot parse the state); a client that does not come to rest within 2 s
    /// is let go (its connection ends) and the others carried over. The same as SIGHUP
    /// without --binary.
    Restart {
        /// The new binary [default: the path the daemon was started from, which an upgrade
        /// replaced].
        #[arg(long, value_name = "BINARY")]
        binary: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct CountersArgs {
    /// NIs to show [default: all].
    #[arg(value_name = "NI")]
    nodes: Vec<u32>,
    /// Zero the counters after reading them; the values shown are those before the reset.
    #[arg(long, conflicts_with = "watch")]
    reset: bool,
    /// Redraw every SECS seconds, with per-second rates, until interrupted. On a terminal,
    /// counters that are zero on every NI shown are left out so the screen fits.
    #[arg(long, value_name = "SECS", value_parser = positive_secs)]
    watch: Option<f64>,
    /// With --watch: stop after N samples.
    #[arg(long, value_name = "N", requires = "watch")]
    count: Option<u64>,
    /// Prometheus text exposition format: ni_<counter>_total{node="<NI>"} <value>.
    #[arg(long, conflicts_with = "watch")]
    prometheus: bool,
}

#[derive(Subcommand, Debug)]
enum RouteCommand {
    /// The direction-order route from NI A to NI B, hop by hop: physical nodes (ZZYYXX),
    /// direction, router ports, virtual channel.
    Show {
        /// Source NI (logical PE number).
        a: u32,
        /// Destination NI (logical PE number).
        b: u32,
    },
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

/// ni-device's rule, so both find the same directory without being told.
fn default_run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("NI_RUN_DIR").filter(|d| !d.is_empty()) {
        return d.into();
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("ni"),
        None => PathBuf::from(format!("/tmp/ni-{}", nix::unistd::getuid())),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Counters(a) = &cli.command {
        if a.prometheus && cli.json {
            Cli::command()
                .error(
                    ErrorKind::ArgumentConflict,
                    "--prometheus and --json are two different output formats: pick one",
                )
                .exit();
        }
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`ni-ctl counters --watch 1 | head`): nothing left to do.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ni-ctl: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(exit_code(&e))
        }
    }
}

fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<Unreachable>()) {
        3
    } else if e.chain().any(|c| c.is::<admin::Fault>()) {
        4
    } else {
        // A DaemonError, or a reply ni-ctl cannot use: either way the daemon did not do it.
        1
    }
}

/// Our stdout's reader went away. (A broken pipe to the daemon is "not reachable".)
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    !e.chain().any(|c| c.is::<Unreachable>())
        && e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        })
}

/// Write to stdout, reporting a closed pipe as an error instead of panicking as `print!` does.
fn emit(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn emit_json(v: &impl serde::Serialize) -> Result<()> {
    let mut s = serde_json::to_string_pretty(v)?;
    s.push('\n');
    emit(&s)
}

fn unexpected(what: &str, r: &Response) -> anyhow::Error {
    anyhow!("ni-device answered the {what} request with an unexpected reply: {r:?}")
}

fn run(cli: &Cli) -> Result<()> {
    let run_dir = cli.run_dir.clone().unwrap_or_else(default_run_dir);
    let mut c = Client::connect(&run_dir)?;
    match &cli.command {
        Command::Status => status(&mut c, cli.json),
        Command::Nodes => nodes(&mut c, cli.json),
        Command::Counters(a) => match a.watch {
            Some(secs) => watch(&mut c, cli.json, a, secs),
            None => counters(&mut c, cli.json, a),
        },
        Command::Route(RouteCommand::Show { a, b }) => route(&mut c, cli.json, *a, *b),
        Command::Topology => topology(&mut c, cli.json),
        Command::Hosts => hosts(&mut c, cli.json),
        Command::Partition(p) => admin::partition(&mut c, cli.json, p),
        Command::Port(p) => admin::port(&mut c, cli.json, p),
        Command::MapOut(m) => admin::map_out(&mut c, cli.json, m),
        Command::Diag(d) => admin::diag(&mut c, cli.json, d),
        Command::Router { node } => admin::router(&mut c, cli.json, node),
        Command::Dateline(d) => admin::dateline(&mut c, cli.json, d),
        Command::Mlink(m) => admin::mlink(&mut c, cli.json, m),
        Command::Daemon(DaemonCommand::Restart { binary }) => restart(&mut c, cli.json, binary),
    }
}

fn restart(c: &mut Client, json: bool, binary: &Option<PathBuf>) -> Result<()> {
    let binary = binary
        .as_ref()
        .map(|b| {
            std::path::absolute(b)
                .map(|p| p.display().to_string())
                .with_context(|| format!("{}", b.display()))
        })
        .transpose()?;
    // The freeze (at most 2 s) and the new process's start.
    let s = match c.call_long(
        Request::DaemonRestart { binary },
        std::time::Duration::from_secs(10),
    )? {
        Response::Status(s) => s,
        Response::Error { error } => bail!("restart refused: {error}"),
        r => return Err(unexpected("daemon restart", &r)),
    };
    if json {
        return emit_json(&s);
    }
    emit(&format!(
        "restarted: ni-device {} (pid {}), {} client(s) carried over, paused {:.1} ms, restart {}\n",
        s.daemon_version,
        s.pid,
        s.attached,
        s.last_restart_pause_ms.unwrap_or(0.0),
        s.restarts
    ))
}

fn status(c: &mut Client, json: bool) -> Result<()> {
    let s = match c.call(Request::Status)? {
        Response::Status(s) => s,
        r => return Err(unexpected("status", &r)),
    };
    if json {
        return emit_json(&s);
    }
    emit(&format!(
        "ni-device  {} (pid {})\n\
         run dir    {}\n\
         uptime     {}\n\
         NIs        {} ({} attached)\n\
         errors     {}\n\
         restarts   {}{}\n",
        s.daemon_version,
        s.pid,
        s.run_dir,
        render::duration(s.uptime_secs),
        s.nodes,
        s.attached,
        s.errors,
        s.restarts,
        s.last_restart_pause_ms
            .map(|p| format!(" (last paused clients {p:.1} ms)"))
            .unwrap_or_default()
    ))
}

fn nodes(c: &mut Client, json: bool) -> Result<()> {
    let nodes = match c.call(Request::Nodes)? {
        Response::Nodes { nodes } => nodes,
        r => return Err(unexpected("nodes", &r)),
    };
    if json {
        return emit_json(&json!({ "nodes": nodes }));
    }
    // HOST only when the fabric spans hosts.
    let spans = nodes.iter().any(|n| n.host.is_some());
    let host_col = spans.then_some(("HOST", false));
    let mut t = Table::new([("NI", true)].into_iter().chain(host_col).chain([
        ("STATE", false),
        ("CLIENT", false),
        ("PARTITION", false),
        ("VPE", true),
        ("LPE", true),
        ("PHYSICAL", false),
        ("LINK", false),
        ("ATTACHES", true),
        ("DMA-REGIONS", true),
        ("DMA-BYTES", true),
        ("SOCKET", false),
    ]));
    for n in &nodes {
        let host = spans.then(|| n.host.clone().unwrap_or_else(|| "-".into()));
        t.row(
            [n.node.to_string()]
                .into_iter()
                .chain(host)
                .chain([
                    node_state(n),
                    client_cell(n),
                    n.partition.clone().unwrap_or_else(|| "-".into()),
                    n.rank.map_or("-".into(), |r| r.to_string()),
                    n.logical.to_string(),
                    n.physical.clone(),
                    format!("{}({})", n.link, n.clsm),
                    n.attaches.to_string(),
                    n.dma_regions.to_string(),
                    n.dma_bytes.to_string(),
                    n.socket.clone(),
                ])
                .collect(),
        );
    }
    emit(&t.render())
}

/// `free`, `attached`, or `ready` (attached with a completion ring: peers may address it).
fn node_state(n: &ni_abi::control::NodeInfo) -> String {
    if n.ready {
        "ready".into()
    } else {
        n.state.clone()
    }
}

/// `PID/NAME` as netstat prints a socket's process, `guest:PID/NAME` for a QEMU, `-` for
/// none, `?` when attached but the daemon could not tell who.
fn client_cell(n: &ni_abi::control::NodeInfo) -> String {
    match (n.client_pid, &n.client_name) {
        (Some(pid), Some(name)) => {
            let guest = n.client_kind.as_deref() == Some("guest");
            format!("{}{pid}/{name}", if guest { "guest:" } else { "" })
        }
        (Some(pid), None) => pid.to_string(),
        (None, _) if n.state == "attached" => "?".into(),
        (None, _) => "-".into(),
    }
}

fn fetch_counters(c: &mut Client, nodes: &[u32], reset: bool) -> Result<Vec<NodeCounters>> {
    match c.call(Request::Counters {
        nodes: nodes.to_vec(),
        reset,
    })? {
        Response::Counters { counters } => Ok(counters),
        r => Err(unexpected("counters", &r)),
    }
}

/// One NI's counters as a JSON object, with per-second rates when there are any.
fn counters_json(nc: &NodeCounters, rates: Option<&[Option<f64>]>) -> Value {
    let values: Map<String, Value> = nc
        .counters
        .iter()
        .map(|(n, v)| (n.clone(), json!(v)))
        .collect();
    let gauges: Map<String, Value> = nc
        .gauges
        .iter()
        .map(|(n, v)| (n.clone(), json!(v)))
        .collect();
    let mut o = json!({ "node": nc.node, "counters": values, "gauges": gauges });
    if let Some(rates) = rates {
        let r: Map<String, Value> = nc
            .counters
            .iter()
            .zip(rates)
            .map(|((n, _), r)| (n.clone(), json!(r)))
            .collect();
        o["rates"] = Value::Object(r);
    }
    o
}

/// Counters as rows, NIs as columns (there are many more counters than one screen's width
/// of NIs); with rates, each NI gets a value and a per-second column. `hide_zero` drops rows
/// that are zero on every NI shown; returns the table and how many rows it dropped.
fn counters_table(
    list: &[NodeCounters],
    rates: Option<&[Vec<Option<f64>>]>,
    hide_zero: bool,
) -> (String, usize) {
    let mut columns = vec![("COUNTER".to_string(), false)];
    for nc in list {
        columns.push((format!("NI {}", nc.node), true));
        if rates.is_some() {
            columns.push(("/s".to_string(), true));
        }
    }
    let mut t = Table::new(columns);
    let names: Vec<&String> = list
        .first()
        .map(|nc| nc.counters.iter().map(|(n, _)| n).collect())
        .unwrap_or_default();
    let mut hidden = 0;
    for name in names {
        let all_zero = list
            .iter()
            .all(|nc| nc.counters.iter().all(|(n, v)| n != name || *v == 0));
        if hide_zero && all_zero {
            hidden += 1;
            continue;
        }
        let mut row = vec![name.clone()];
        for (k, nc) in list.iter().enumerate() {
            // Every NI reports the same counters in the same order; look up by name anyway
            // so a daemon that ever differs shows a gap rather than a wrong number.
            let v = nc.counters.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
            row.push(v.map_or("-".into(), |v| v.to_string()));
            if let Some(rates) = rates {
                let r = nc
                    .counters
                    .iter()
                    .position(|(n, _)| n == name)
                    .and_then(|j| rates[k].get(j).copied().flatten());
                row.push(render::rate(r));
            }
        }
        t.row(row);
    }
    // Gauges (signed, they go up and down): after the counters, no rate.
    let gauges: Vec<&String> = list
        .first()
        .map(|nc| nc.gauges.iter().map(|(n, _)| n).collect())
        .unwrap_or_default();
    for name in gauges {
        let mut row = vec![name.clone()];
        for nc in list {
            let v = nc.gauges.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
            row.push(v.map_or("-".into(), |v| v.to_string()));
            if rates.is_some() {
                row.push("-".into());
            }
        }
        t.row(row);
    }
    (t.render(), hidden)
}

fn counters(c: &mut Client, json: bool, a: &CountersArgs) -> Result<()> {
    let list = fetch_counters(c, &a.nodes, a.reset)?;
    if a.prometheus {
        emit(&render::prometheus(&list))
    } else if json {
        let all: Vec<Value> = list.iter().map(|nc| counters_json(nc, None)).collect();
        emit_json(&json!({ "counters": all }))
    } else {
        emit(&counters_table(&list, None, false).0)
    }
}

/// Per-second rates of `now` against `before`, counter by counter; none where there is no
/// earlier sample or the counter went backwards (reset by someone else).
fn rates(
    now: &[NodeCounters],
    before: Option<&[NodeCounters]>,
    secs: f64,
) -> Vec<Vec<Option<f64>>> {
    now.iter()
        .map(|nc| {
            let prev = before.and_then(|b| b.iter().find(|p| p.node == nc.node));
            nc.counters
                .iter()
                .map(|(name, v)| {
                    let (_, p) = prev?.counters.iter().find(|(n, _)| n == name)?;
                    (v >= p && secs > 0.0).then(|| (v - p) as f64 / secs)
                })
                .collect()
        })
        .collect()
}

fn watch(c: &mut Client, json: bool, a: &CountersArgs, secs: f64) -> Result<()> {
    let tty = std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut before: Option<(Instant, Vec<NodeCounters>)> = None;
    let mut samples = 0u64;
    loop {
        let at = Instant::now();
        let list = fetch_counters(c, &a.nodes, false)?;
        let interval = before
            .as_ref()
            .map_or(0.0, |(t, _)| at.duration_since(*t).as_secs_f64());
        let r = rates(&list, before.as_ref().map(|(_, l)| l.as_slice()), interval);
        if json {
            // One object per line, so a consumer can act on each sample as it arrives.
            let all: Vec<Value> = list
                .iter()
                .zip(&r)
                .map(|(nc, r)| counters_json(nc, Some(r)))
                .collect();
            let line = json!({
                "elapsed_secs": at.duration_since(started).as_secs_f64(),
                "interval_secs": interval,
                "counters": all,
            });
            emit(&format!("{line}\n"))?;
        } else {
            // On a terminal the whole table must fit to redraw in place, and most of the
            // counters are error counters that stay zero: show only the live ones there.
            let (table, hidden) = counters_table(&list, Some(&r), tty);
            let header = format!(
                "ni-ctl counters: every {secs}s, sample {}{}{}\n\n",
                samples + 1,
                if hidden > 0 {
                    format!(", {hidden} all-zero counters hidden")
                } else {
                    String::new()
                },
                if tty { " (Ctrl-C to stop)" } else { "" }
            );
            let body = header + &table;
            if tty {
                // Home, then each line clearing its old tail, then clear below: the screen
                // is redrawn in place without the flicker of clearing it first.
                let mut s = String::from("\x1b[H");
                for l in body.lines() {
                    s.push_str(l);
                    s.push_str("\x1b[K\n");
                }
                s.push_str("\x1b[J");
                emit(&s)?;
            } else {
                let sep = if samples > 0 { "\n" } else { "" };
                emit(&format!("{sep}{body}"))?;
            }
        }
        samples += 1;
        if a.count.is_some_and(|n| samples >= n) {
            return Ok(());
        }
        before = Some((at, list));
        let next = at + Duration::from_secs_f64(secs);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

fn route(c: &mut Client, json: bool, from: u32, to: u32) -> Result<()> {
    let r: RouteInfo = match c.call(Request::Route { from, to })? {
        Response::Route(r) => r,
        r => return Err(unexpected("route", &r)),
    };
    if json {
        return emit_json(&r);
    }
    let n = r.hops.len();
    let mut out = format!(
        "NI {} ({}) -> NI {} ({}): {n} hop{}, shortest {}{}; routing tag {:#x}\n",
        r.from,
        r.source,
        r.to,
        r.destination,
        if n == 1 { "" } else { "s" },
        r.distance,
        if n as u32 > r.distance {
            " (detour)"
        } else {
            ""
        },
        r.tag
    );
    if n > 0 {
        let mut t = Table::new([
            ("HOP", true),
            ("FROM", false),
            ("TO", false),
            ("DIR", false),
            ("OUT", false),
            ("IN", false),
            ("VC", false),
            ("NOTES", false),
        ]);
        for (i, h) in r.hops.iter().enumerate() {
            let mut notes = Vec::new();
            if h.kind != "travel" {
                notes.push(format!("{} hop", h.kind));
            }
            if h.dateline {
                notes.push("dateline".to_string());
            }
            t.row(vec![
                (i + 1).to_string(),
                h.from.clone(),
                h.to.clone(),
                h.direction.clone(),
                h.out_port.clone(),
                h.in_port.clone(),
                format!("VC{}", h.vc),
                notes.join(", "),
            ]);
        }
        out.push('\n');
        out.push_str(&t.render());
    }
    emit(&out)
}

/// Decimal X, Y, Z of a `ZZYYXX` physical PE number.
fn coords(phys: &str) -> Option<[u32; 3]> {
    let field = |i: usize| u32::from_str_radix(phys.get(i..i + 2)?, 16).ok();
    Some([field(4)?, field(2)?, field(0)?])
}

fn hosts(c: &mut Client, json: bool) -> Result<()> {
    let h = match c.call(Request::Hosts)? {
        Response::Hosts(h) => h,
        r => return Err(unexpected("hosts", &r)),
    };
    if json {
        return emit_json(&h);
    }
    let mut out = match &h.me {
        None => "one host: the fabric is this daemon\n".to_string(),
        Some(me) => format!(
            "{} hosts; this is {me}; linked over {}\n",
            h.hosts.len(),
            h.transport.as_deref().unwrap_or("tcp")
        ),
    };
    let mut t = Table::new([
        ("HOST", false),
        ("STATE", false),
        ("ROLE", false),
        ("NIS", false),
        ("LINK", false),
        ("CHANGES", true),
    ]);
    for x in &h.hosts {
        t.row(vec![
            x.name.clone(),
            x.state.clone(),
            if x.manager { "partition manager" } else { "-" }.into(),
            format!("{}-{}", x.first, x.end.saturating_sub(1)),
            x.link.clone(),
            x.changes.map_or("-".into(), |c| c.to_string()),
        ]);
    }
    out.push_str(&t.render());
    if !h.counters.is_empty() {
        out.push('\n');
        let mut t = Table::new([("COUNTER", false), ("VALUE", true)]);
        for (k, v) in &h.counters {
            t.row(vec![k.clone(), v.to_string()]);
        }
        out.push_str(&t.render());
    }
    emit(&out)
}

fn topology(c: &mut Client, json: bool) -> Result<()> {
    let t: TopologyInfo = match c.call(Request::Topology)? {
        Response::Topology(t) => t,
        r => return Err(unexpected("topology", &r)),
    };
    if json {
        return emit_json(&t);
    }
    let mut out = format!(
        "torus {}x{}x{}: {} physical nodes, {} logical PEs, {} spare\n",
        t.x,
        t.y,
        t.z,
        t.physical_nodes,
        t.logical_pes,
        t.spares.len()
    );
    let datelines: Vec<String> = t
        .datelines
        .iter()
        .map(|d| format!("{} {}-{}", d.axis, d.between[0], d.between[1]))
        .collect();
    out.push_str(&format!(
        "datelines: {} (VC2/VC3 last {})\n",
        if datelines.is_empty() {
            "none".to_string()
        } else {
            datelines.join(", ")
        },
        t.vc_scope.replace('_', " ")
    ));
    if !t.spares.is_empty() {
        out.push_str(&format!("spares: {}\n", t.spares.join(" ")));
    }
    if !t.mapped_out_nodes.is_empty() || !t.mapped_out_links.is_empty() {
        out.push_str(&format!(
            "mapped out: nodes [{}], links [{}]\n",
            t.mapped_out_nodes.join(", "),
            t.mapped_out_links.join(", ")
        ));
    }
    let mut table = Table::new([
        ("LPE", true),
        ("PHYSICAL", false),
        ("X", true),
        ("Y", true),
        ("Z", true),
    ]);
    for e in &t.lut {
        let [x, y, z] = coords(&e.physical)
            .map_or(["?".to_string(), "?".into(), "?".into()], |c| {
                c.map(|v| v.to_string())
            });
        table.row(vec![e.lpe.to_string(), e.physical.clone(), x, y, z]);
    }
    out.push('\n');
    out.push_str(&table.render());
    if !t.written_lut.is_empty() {
        out.push_str(
            "\nR_NET_LUT entries written by SPUT (ni-ctl router NODE shows a whole LUT):\n",
        );
        for w in &t.written_lut {
            out.push_str(&format!(
                "  router {} entry {}: tag {:#012x}\n",
                w.router, w.index, w.tag
            ));
        }
    }
    emit(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn physical_numbers_decode_to_coordinates() {
        assert_eq!(coords("010300"), Some([0, 3, 1]));
        assert_eq!(coords("0F1F07"), Some([7, 31, 15]));
        assert_eq!(coords("0103"), None);
    }

    #[test]
    fn rates_need_two_samples_and_forward_counters() {
        let s = |v| {
            vec![NodeCounters {
                node: 0,
                counters: vec![("a".into(), v)],
                gauges: vec![],
            }]
        };
        assert_eq!(rates(&s(5), None, 1.0), [[None]]);
        assert!(s(1)[0].gauges.is_empty());
        assert_eq!(rates(&s(15), Some(&s(5)), 2.0), [[Some(5.0)]]);
        assert_eq!(rates(&s(1), Some(&s(5)), 2.0), [[None]]);
    }
}
