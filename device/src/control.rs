//! The control socket: `ni-ctl`'s way in. Owner-only, one JSON request per line.
//!
//! This is the only way to the administrator's functions (partitions, ports, map-outs,
//! resets, diagnostics): the socket is mode 0600 in the daemon's run directory and every
//! connection's peer credentials are checked; no fast-path request reaches any of it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ni_abi::control::{
    Envelope, HostInfo, HostsInfo, NodeCounters, NodeInfo, Request, Response, Status, MAX_REQUEST,
    PROTOCOL_VERSION,
};

use crate::daemon::{socket_path, Daemon};
use crate::fabric::port::Mode;
use crate::server::lock;

/// Bounds on what a diagnostic may ask for, so one request cannot tie the daemon up.
const DIAG_MAX_SIZE: u64 = 64 << 20;
const DIAG_MAX_COUNT: u32 = 100_000;
const DIAG_MAX_SECS: f64 = 60.0;

/// Control requests refused since start (malformed, unknown, wrong version, wrong user).
pub static CONTROL_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Control connections served at once (one thread each). Past it a connection is told so
/// and closed: `ni-ctl` users are few, a flood is not.
pub const MAX_CONNECTIONS: u64 = 32;
/// Control connections open now.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

pub fn serve(daemon: Arc<Daemon>, listener: UnixListener, resumed: Vec<UnixStream>) {
    let mut backoff = Duration::from_millis(10);
    let mut last_warned: Option<std::time::Instant> = None;
    for stream in resumed {
        CONNECTIONS.fetch_add(1, Ordering::AcqRel);
        spawn_session(&daemon, stream);
    }
    loop {
        // A planned restart: stop accepting (connections wait in the backlog for the new
        // process) until it is over.
        match wait_for(listener.as_raw_fd(), None) {
            Wait::Frozen => {
                crate::handover::freeze().park(crate::handover::Who::ControlListener);
                continue;
            }
            Wait::Ready | Wait::TimedOut => {}
        }
        let stream = match listener.accept() {
            Ok((s, _)) => {
                backoff = Duration::from_millis(10);
                s
            }
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or memory: the pending connection stays
                // queued and accept fails again at once, so wait instead of spinning, and
                // say so once a minute, not once per try.
                CONTROL_ERRORS.fetch_add(1, Ordering::Relaxed);
                if last_warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!("control accept: {e}; backing off");
                    last_warned = Some(std::time::Instant::now());
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        if CONNECTIONS.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            CONNECTIONS.fetch_sub(1, Ordering::AcqRel);
            let mut s = stream;
            let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = reply(
                &mut s,
                error(format!(
                    "busy: {MAX_CONNECTIONS} control connections are open; try again"
                )),
            );
            continue;
        }
        spawn_session(&daemon, stream);
    }
}

/// Control connections open now (for a handover, which brings each to rest).
pub fn open_connections() -> u64 {
    CONNECTIONS.load(Ordering::Acquire)
}

fn spawn_session(daemon: &Arc<Daemon>, stream: UnixStream) {
    let d = daemon.clone();
    let spawned = std::thread::Builder::new()
        .name("control-conn".into())
        .spawn(move || {
            if let Err(e) = session(&d, stream) {
                tracing::debug!("control session ended: {e}");
            }
            CONNECTIONS.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        CONNECTIONS.fetch_sub(1, Ordering::AcqRel);
        CONTROL_ERRORS.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("control connection dropped: no thread for it: {e}");
    }
}

enum Wait {
    Ready,
    Frozen,
    TimedOut,
}

/// Wait until `fd` is readable, a planned restart freezes the daemon, or `timeout`.
fn wait_for(fd: i32, timeout: Option<Duration>) -> Wait {
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    loop {
        let mut pfd = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            crate::handover::freeze().pollfd(),
        ];
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(pfd.as_mut_ptr(), 2, ms) };
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return if pfd[1].revents != 0 {
            Wait::Frozen
        } else if r == 0 {
            Wait::TimedOut
        } else {
            Wait::Ready
        };
    }
}

fn peer_uid(s: &UnixStream) -> Option<u32> {
    peer_cred(s.as_raw_fd()).map(|c| c.uid)
}

fn reply(w: &mut impl Write, r: Response) -> std::io::Result<()> {
    let env = Envelope {
        version: PROTOCOL_VERSION,
        body: r,
    };
    let mut line = serde_json::to_string(&env).expect("responses serialize");
    line.push('\n');
    w.write_all(line.as_bytes())
}

fn error(msg: impl Into<String>) -> Response {
    CONTROL_ERRORS.fetch_add(1, Ordering::Relaxed);
    Response::Error { error: msg.into() }
}

/// A control connection idle this long is closed.
const IDLE: Duration = Duration::from_secs(60);

fn session(daemon: &Daemon, stream: UnixStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IDLE))?;
    // A client that never reads its answers must not hold a connection slot for ever.
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut out = stream.try_clone()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match peer_uid(&stream) {
        Some(uid) if uid == me || uid == 0 => {}
        other => {
            tracing::warn!("control connection from uid {other:?} refused");
            return reply(
                &mut out,
                error(format!(
                    "permission denied: the control socket serves uid {me} only"
                )),
            );
        }
    }
    let fd = stream.as_raw_fd();
    let mut reader = BufReader::new(stream);
    loop {
        // Between requests, with nothing buffered: where a planned restart finds this
        // connection and hands it over (the new process answers its next request).
        if reader.buffer().is_empty() {
            match wait_for(fd, Some(IDLE)) {
                Wait::Frozen => {
                    crate::handover::freeze().park(crate::handover::Who::Control(fd));
                    continue;
                }
                Wait::TimedOut => return Ok(()),
                Wait::Ready => {}
            }
        }
        let mut line = Vec::new();
        let n = (&mut reader)
            .take(MAX_REQUEST as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_REQUEST {
            reply(
                &mut out,
                error(format!("request longer than {MAX_REQUEST} bytes")),
            )?;
            return Ok(());
        }
        let response = match parse(&line) {
            // Answered by the new process on this connection; back here only if refused.
            Ok(Request::DaemonRestart { binary }) => error(
                crate::handover::restart(
                    daemon,
                    binary.map(std::path::PathBuf::from),
                    Some(out.as_raw_fd()),
                )
                .to_string(),
            ),
            Ok(req) => handle(daemon, req),
            Err(e) => error(e),
        };
        reply(&mut out, response)?;
    }
}

fn parse(line: &[u8]) -> Result<Request, String> {
    let v: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("malformed request: {e}"))?;
    match v.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == PROTOCOL_VERSION as u64 => {}
        Some(v) => {
            return Err(format!(
                "protocol version {v} not supported (this daemon speaks {PROTOCOL_VERSION})"
            ))
        }
        None => return Err("request has no protocol version".into()),
    }
    serde_json::from_value::<Envelope<Request>>(v)
        .map(|e| e.body)
        .map_err(|e| format!("unknown or malformed request: {e}"))
}

/// How long a question to another daemon may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Answer other daemons' questions about this one's NIs (`ni-ctl` on their host showing the
/// whole fabric), for the daemon's life.
pub fn serve_peers(daemon: Arc<Daemon>) {
    use crate::fabric::remote::Incoming;
    let (Some(span), Some(link)) = (daemon.span.as_ref(), daemon.link.as_ref()) else {
        return;
    };
    loop {
        let (host, id, q) = match span.queries.next_incoming() {
            Incoming::Question(h, id, q) => (h, id, q),
            Incoming::Change(h, seq, payload) => {
                if h == span.manager {
                    follow_change(&daemon, seq, &payload);
                } else {
                    tracing::warn!(host = %span.names[h as usize], "a change from a host that is not the partition manager: ignored");
                }
                continue;
            }
            Incoming::HostUp(h) => {
                if span.me == span.manager {
                    // Everything so far, under the log's lock so no new change passes it; it
                    // skips what it has applied.
                    let log = lock_changes(span);
                    for (i, payload) in log.log.iter().enumerate() {
                        let m = crate::link::Msg::Change {
                            seq: i as u64 + 1,
                            payload: payload.clone(),
                        };
                        link.send(h, &m);
                    }
                }
                continue;
            }
        };
        let answer = match serde_json::from_slice::<Request>(&q) {
            Ok(req @ (Request::Nodes | Request::Counters { .. })) => handle_local(&daemon, req),
            Ok(_) => error("other daemons may ask for nodes and counters only"),
            Err(_) => match serde_json::from_slice::<PeerChange>(&q) {
                Ok(PeerChange { change }) if span.me == span.manager && is_change(&change) => {
                    make_change(&daemon, change)
                }
                Ok(_) => error("this host is not the partition manager"),
                Err(e) => error(format!("not a control request: {e}")),
            },
        };
        let mut payload = serde_json::to_vec(&answer).unwrap_or_default();
        if payload.len() > crate::link::wire::CHUNK {
            payload = serde_json::to_vec(&error("answer too long: ask for fewer NIs"))
                .unwrap_or_default();
        }
        link.send(host, &crate::link::Msg::Answer { id, payload });
    }
}

/// A change to the fabric asked of the partition manager by another host.
#[derive(serde::Serialize, serde::Deserialize)]
struct PeerChange {
    change: Request,
}

/// Changes every daemon of a fabric must make alike: the partition manager's.
fn is_change(req: &Request) -> bool {
    matches!(
        req,
        Request::PartitionCreate { .. }
            | Request::PartitionDelete { .. }
            | Request::PartitionRemoteBoot { .. }
            | Request::MapOutNode { .. }
            | Request::MapOutLink { .. }
            | Request::MapOutClear
            | Request::DatelineSet { .. }
    )
}

fn lock_changes(
    span: &crate::daemon::SpanView,
) -> std::sync::MutexGuard<'_, crate::daemon::ChangeLog> {
    span.changes.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the partition manager keeps its changes across restarts: the description's digest,
/// then one change per line.
fn changes_path(daemon: &Daemon) -> std::path::PathBuf {
    daemon.run_dir.join("fabric-changes.jsonl")
}

/// The partition manager makes `req` here, and if it is made, logs it and sends it to
/// every other host (one that is down gets it when it rejoins).
fn make_change(daemon: &Daemon, req: Request) -> Response {
    let (Some(span), Some(link)) = (daemon.span.as_ref(), daemon.link.as_ref()) else {
        return handle_local(daemon, req);
    };
    let mut log = lock_changes(span);
    let payload = match serde_json::to_vec(&req) {
        Ok(p) if p.len() <= crate::link::wire::CHUNK => p,
        _ => return error("change too large"),
    };
    let resp = handle_local(daemon, req);
    if matches!(resp, Response::Error { .. }) {
        return resp;
    }
    let path = changes_path(daemon);
    let persisted = (|| -> std::io::Result<()> {
        let fresh = log.log.is_empty() || !path.exists();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        if fresh {
            f.set_len(0)?;
            writeln!(f, "{:#x}", span.digest)?;
            for e in &log.log {
                f.write_all(e)?;
                f.write_all(b"\n")?;
            }
        }
        f.write_all(&payload)?;
        f.write_all(b"\n")
    })();
    if let Err(e) = persisted {
        tracing::warn!(
            "partition manager: cannot keep the change in {}: {e}",
            path.display()
        );
    }
    log.log.push(payload.clone());
    let seq = log.log.len() as u64;
    log.applied = seq;
    for h in 0..span.names.len() as u32 {
        if h != span.me {
            link.send(
                h,
                &crate::link::Msg::Change {
                    seq,
                    payload: payload.clone(),
                },
            );
        }
    }
    tracing::info!(seq, "partition manager: change made and sent to every host");
    resp
}

/// Apply the partition manager's change `seq` here, once and in order.
fn follow_change(daemon: &Daemon, seq: u64, payload: &[u8]) {
    let Some(span) = daemon.span.as_ref() else {
        return;
    };
    let mut log = lock_changes(span);
    if seq <= log.applied {
        return;
    }
    if seq > log.applied + 1 {
        // Changes come in order on one connection, and all again after a reconnection.
        tracing::info!(
            seq,
            applied = log.applied,
            "partition manager's change out of order: waiting for the rest"
        );
        return;
    }
    log.applied = seq;
    match serde_json::from_slice::<Request>(payload) {
        Ok(req) if is_change(&req) => {
            if let Response::Error { error } = handle_local(daemon, req) {
                tracing::error!(seq, "the partition manager's change failed here: {error}: this host's partitions or torus differ from the others'");
            } else {
                tracing::info!(seq, "partition manager's change applied");
            }
        }
        _ => tracing::warn!(
            seq,
            "the partition manager sent something that is not a change: ignored"
        ),
    }
}

/// The partition manager, restarted: make its logged changes again (kept with the digest
/// of the description they were made on; another description starts afresh).
pub fn replay_changes(daemon: &Daemon) -> anyhow::Result<()> {
    let Some(span) = daemon.span.as_ref() else {
        return Ok(());
    };
    let path = changes_path(daemon);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let mut lines = text.lines();
    if lines.next() != Some(format!("{:#x}", span.digest).as_str()) {
        tracing::info!(
            "{}: made on another fabric description: starting afresh",
            path.display()
        );
        let _ = std::fs::remove_file(&path);
        return Ok(());
    }
    let mut log = lock_changes(span);
    for (i, l) in lines.enumerate() {
        let req: Request = serde_json::from_str(l)
            .map_err(|e| anyhow::anyhow!("{} line {}: {e}", path.display(), i + 2))?;
        if let Response::Error { error } = handle_local(daemon, req) {
            anyhow::bail!(
                "{} line {}: replaying the change failed: {error}",
                path.display(),
                i + 2
            );
        }
        log.log.push(l.as_bytes().to_vec());
    }
    log.applied = log.log.len() as u64;
    if !log.log.is_empty() {
        tracing::info!(
            changes = log.log.len(),
            "partition manager: earlier changes made again"
        );
    }
    Ok(())
}

/// Ask host `h` the control request `req` about its NIs.
fn ask(daemon: &Daemon, h: u32, req: &Request) -> Result<Response, String> {
    let q = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    ask_raw(daemon, h, q)
}

fn ask_raw(daemon: &Daemon, h: u32, q: Vec<u8>) -> Result<Response, String> {
    let (Some(span), Some(link)) = (daemon.span.as_ref(), daemon.link.as_ref()) else {
        return Err("the fabric is this daemon".into());
    };
    let a = span
        .queries
        .ask(link.as_ref(), h, q, PEER_TIMEOUT)
        .map_err(|e| format!("host {}: {e}", span.names[h as usize]))?;
    match serde_json::from_slice::<Response>(&a) {
        Ok(Response::Error { error }) => Err(format!("host {}: {error}", span.names[h as usize])),
        Ok(r) => Ok(r),
        Err(e) => Err(format!(
            "host {}: unreadable answer: {e}",
            span.names[h as usize]
        )),
    }
}

fn hosts(daemon: &Daemon) -> Response {
    let Some(span) = daemon.span.as_ref() else {
        let n = daemon.slots.len() as u32;
        return Response::Hosts(HostsInfo {
            me: None,
            transport: None,
            hosts: vec![HostInfo {
                name: "-".into(),
                link: "-".into(),
                first: 0,
                end: n,
                state: "self".into(),
                manager: true,
                changes: None,
            }],
            counters: Vec::new(),
        });
    };
    let stats = daemon.link.as_ref().map(|l| l.stats()).unwrap_or_default();
    let remote = daemon
        .fabric
        .lock()
        .remote
        .as_ref()
        .map(|r| r.counters.clone())
        .unwrap_or_default();
    let mut counters = vec![
        ("link_frames_sent".to_string(), stats.frames_sent),
        ("link_bytes_sent".to_string(), stats.bytes_sent),
        ("link_frames_rcvd".to_string(), stats.frames_rcvd),
        ("link_bytes_rcvd".to_string(), stats.bytes_rcvd),
        ("link_protocol_errors".to_string(), stats.protocol_errors),
        ("link_timeouts".to_string(), stats.timeouts),
        ("link_connects".to_string(), stats.connects),
    ];
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(&remote) {
        for (k, v) in m {
            counters.push((format!("remote_{k}"), v.as_u64().unwrap_or(0)));
        }
    }
    Response::Hosts(HostsInfo {
        me: Some(span.names[span.me as usize].clone()),
        transport: Some(span.transport.clone()),
        hosts: (0..span.names.len())
            .map(|h| HostInfo {
                name: span.names[h].clone(),
                link: span.links[h].clone(),
                first: span.bases[h],
                end: span.bases[h + 1],
                state: if h as u32 == span.me {
                    "self"
                } else if stats.up.get(h).copied().unwrap_or(false) {
                    "up"
                } else {
                    "down"
                }
                .into(),
                manager: h as u32 == span.manager,
                changes: (h as u32 == span.me).then(|| lock_changes(span).applied),
            })
            .collect(),
        counters,
    })
}

/// Nodes and counters over the whole fabric: this daemon's NIs here, the others' from
/// their daemons (a host that cannot answer shows as such, the rest still shows).
fn fabric_wide(daemon: &Daemon, req: Request) -> Response {
    let Some(span) = daemon.span.as_ref() else {
        return handle_local(daemon, req);
    };
    let here = handle_local(daemon, req.clone());
    match req {
        Request::Nodes => {
            let Response::Nodes { mut nodes } = here else {
                return here;
            };
            for h in 0..span.names.len() as u32 {
                if h == span.me {
                    continue;
                }
                let theirs = match ask(daemon, h, &Request::Nodes) {
                    Ok(Response::Nodes { nodes }) => nodes,
                    other => {
                        let why = match other {
                            Err(e) => e,
                            Ok(r) => format!("unexpected answer {r:?}"),
                        };
                        tracing::debug!("nodes of host {}: {why}", span.names[h as usize]);
                        let st = daemon.fabric.lock();
                        (span.bases[h as usize]..span.bases[h as usize + 1])
                            .map(|n| {
                                let mut row = unreachable_node(span, h, n);
                                // What every daemon of the fabric knows alike.
                                if let Some((p, r)) = st.partitions.of(n) {
                                    row.partition = Some(p.name.clone());
                                    row.rank = Some(r);
                                }
                                row.physical = st.physical_of(n);
                                row
                            })
                            .collect()
                    }
                };
                nodes.extend(theirs);
            }
            nodes.sort_by_key(|n| n.node);
            Response::Nodes { nodes }
        }
        Request::Counters {
            nodes: asked,
            reset,
        } => {
            let all: Vec<u32> = if asked.is_empty() {
                (0..daemon.slots.len() as u32).collect()
            } else {
                asked
            };
            if let Some(&bad) = all.iter().find(|&&n| n as usize >= daemon.slots.len()) {
                return error(format!(
                    "no NI {bad}: the fabric has NIs 0 to {}",
                    daemon.slots.len() - 1
                ));
            }
            let mut out = Vec::new();
            for h in 0..span.names.len() as u32 {
                let mine: Vec<u32> = all
                    .iter()
                    .copied()
                    .filter(|&n| span.host_of(n) == Some(h))
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let req = Request::Counters { nodes: mine, reset };
                let r = if h == span.me {
                    Ok(handle_local(daemon, req))
                } else {
                    ask(daemon, h, &req)
                };
                match r {
                    Ok(Response::Counters { counters }) => out.extend(counters),
                    Ok(Response::Error { error: e }) | Err(e) => return error(e),
                    Ok(r) => return error(format!("unexpected answer {r:?}")),
                }
            }
            out.sort_by_key(|c| c.node);
            Response::Counters { counters: out }
        }
        _ => here,
    }
}

/// A row for an NI whose daemon could not be asked.
fn unreachable_node(span: &crate::daemon::SpanView, h: u32, n: u32) -> NodeInfo {
    NodeInfo {
        node: n,
        socket: "-".into(),
        state: "host down".into(),
        client_pid: None,
        attaches: 0,
        dma_regions: 0,
        dma_bytes: 0,
        client_kind: None,
        client_name: None,
        ready: false,
        partition: None,
        rank: None,
        logical: n,
        physical: String::new(),
        link: "-".into(),
        clsm: String::new(),
        host: Some(span.names[h as usize].clone()),
    }
}

fn node_range(daemon: &Daemon, nodes: &[u32]) -> Result<Vec<u32>, String> {
    let n = daemon.slots.len() as u32;
    if nodes.is_empty() {
        return Ok((0..n).collect());
    }
    for &i in nodes {
        if i >= n {
            return Err(format!("no NI {i}: this daemon has NIs 0 to {}", n - 1));
        }
    }
    Ok(nodes.to_vec())
}

fn handle(daemon: &Daemon, req: Request) -> Response {
    if let Some(span) = daemon.span.as_ref().filter(|_| is_change(&req)) {
        // Every daemon must hold the same partitions and torus: one daemon, the partition
        // manager, makes each change and sends it to the others.
        if span.me == span.manager {
            return make_change(daemon, req);
        }
        let m = span.manager;
        let q = match serde_json::to_vec(&PeerChange { change: req }) {
            Ok(q) => q,
            Err(e) => return error(e.to_string()),
        };
        return match ask_raw(daemon, m, q) {
            Ok(r) => r,
            Err(e) => error(format!(
                "the partition manager ({e}) cannot be reached: partitions and the torus stay as they are, and changes are refused until it is back"
            )),
        };
    }
    if let Some(span) = daemon.span.as_ref() {
        // What acts on one NI acts where it is: its stand-in here is not it.
        let named = match &req {
            Request::ResetNode { node }
            | Request::PortSet { node, .. }
            | Request::MlinkFault { node, .. }
            | Request::DiagLoopback { node, .. } => vec![*node],
            Request::DiagPing { from, .. } => vec![*from],
            Request::Ports { nodes } => nodes.clone(),
            _ => Vec::new(),
        };
        if let Some(&n) = named.iter().find(|n| !daemon.local.contains(n)) {
            if let Some(h) = span.host_of(n) {
                return error(format!(
                    "NI {n} is on host {}: run ni-ctl there (this is host {})",
                    span.names[h as usize], span.names[span.me as usize]
                ));
            }
        }
        if let Request::Ports { nodes } = &req {
            if nodes.is_empty() {
                return handle_local(
                    daemon,
                    Request::Ports {
                        nodes: daemon.local.clone().collect(),
                    },
                );
            }
        }
    }
    match req {
        Request::Hosts => hosts(daemon),
        Request::Nodes | Request::Counters { .. } => fabric_wide(daemon, req),
        other => handle_local(daemon, other),
    }
}

/// A request about this daemon's own NIs (`Nodes` and `Counters` list only them when the
/// fabric spans hosts).
fn handle_local(daemon: &Daemon, req: Request) -> Response {
    match req {
        Request::Hosts => hosts(daemon),
        Request::Status => status(daemon),
        Request::DaemonRestart { .. } => error("a restart is asked for on a connection of its own"),
        Request::Nodes => nodes(daemon),
        Request::Counters { nodes, reset } => match node_range(daemon, &nodes).and_then(|n| {
            let local = &daemon.local;
            if nodes.is_empty() {
                return Ok(local.clone().collect());
            }
            match n.iter().find(|i| !local.contains(i)) {
                Some(i) => Err(format!("NI {i} is on another host")),
                None => Ok(n),
            }
        }) {
            Ok(nodes) => Response::Counters {
                counters: nodes
                    .into_iter()
                    .map(|i| {
                        // The fabric's lock is taken and dropped before the NI's (lock order).
                        let fabric = daemon.fabric.counters(i).unwrap_or_default();
                        let gauges = daemon.fabric.gauges(i);
                        if reset {
                            daemon.fabric.reset_counters(i);
                        }
                        let mut ni = lock(&daemon.slots[i as usize].ni);
                        let mut counters = ni.counters.list();
                        counters.extend(fabric.list());
                        if reset {
                            ni.counters = Default::default();
                        }
                        NodeCounters {
                            node: i,
                            counters,
                            gauges,
                        }
                    })
                    .collect(),
            },
            Err(e) => error(e),
        },
        Request::ResetNode { node } => match node_range(daemon, &[node]) {
            Ok(_) => {
                let mut ni = lock(&daemon.slots[node as usize].ni);
                ni.function_reset();
                tracing::info!(ni = node, "reset by the administrator");
                Response::Done
            }
            Err(e) => error(e),
        },
        Request::Route { from, to } => match node_range(daemon, &[from, to]) {
            Ok(_) => match daemon.fabric.lock().torus.route_info(from, to) {
                Ok(r) => Response::Route(r),
                Err(e) => error(format!("no route from NI {from} to NI {to}: {e}")),
            },
            Err(e) => error(e),
        },
        Request::Topology => Response::Topology(daemon.fabric.lock().torus.topology_info()),
        Request::PartitionCreate { name, nodes } => {
            if let Err(e) = node_range(daemon, &nodes) {
                return error(e);
            }
            let mut st = daemon.fabric.lock();
            match st.create_partition(&name, nodes) {
                Ok(()) => {
                    let p = st.partitions.get(&name).expect("just created").clone();
                    Response::Partition(st.partition_info(&p))
                }
                Err(e) => error(e.to_string()),
            }
        }
        Request::PartitionDelete { name } => {
            let mut st = daemon.fabric.lock();
            match st.delete_partition(&name) {
                Ok(_) => Response::Done,
                Err(e) => error(e.to_string()),
            }
        }
        Request::Partitions => {
            let st = daemon.fabric.lock();
            Response::Partitions {
                partitions: st.partitions.list().map(|p| st.partition_info(p)).collect(),
            }
        }
        Request::PartitionShow { name } => {
            let st = daemon.fabric.lock();
            match st.partitions.get(&name) {
                Some(p) => Response::Partition(st.partition_info(p)),
                None => error(format!("no partition {name:?}")),
            }
        }
        Request::Ports { nodes } => match node_range(daemon, &nodes) {
            Ok(nodes) => {
                let st = daemon.fabric.lock();
                Response::Ports {
                    ports: nodes.iter().map(|&i| st.port_info(i as usize)).collect(),
                }
            }
            Err(e) => error(e),
        },
        Request::PortSet { node, mode, state } => {
            if let Err(e) = node_range(daemon, &[node]) {
                return error(e);
            }
            let mode = match mode.as_deref().map(|m| (m, Mode::parse(m))) {
                None => None,
                Some((_, Some(m))) => Some(m),
                Some((m, None)) => {
                    return error(format!(
                        "unknown port mode {m:?}: use myrinet, ethernet or infiniband"
                    ))
                }
            };
            let up = match state.as_deref() {
                None => None,
                Some("up") => Some(true),
                Some("down") => Some(false),
                Some(s) => return error(format!("unknown link state {s:?}: use up or down")),
            };
            if mode.is_none() && up.is_none() {
                return error("port set needs a mode, a state or both");
            }
            let mut st = daemon.fabric.lock();
            st.set_port(node as usize, mode, up);
            Response::Port(st.port_info(node as usize))
        }
        Request::RouterShow { node } => {
            let st = daemon.fabric.lock();
            match st.parse_node(&node) {
                Ok(p) => Response::Router(st.router_info(p)),
                Err(e) => error(e),
            }
        }
        Request::DatelineSet { axis, position } => {
            let mut st = daemon.fabric.lock();
            match st.set_dateline(&axis, position) {
                Ok(()) => Response::Topology(st.torus.topology_info()),
                Err(e) => error(e),
            }
        }
        Request::MlinkFault { node, kind, count } => {
            if let Err(e) = node_range(daemon, &[node]) {
                return error(e);
            }
            let count = count.unwrap_or(1);
            let mut ni = lock(&daemon.slots[node as usize].ni);
            match kind.as_str() {
                "header" => ni.mlink.header_faults = count,
                "data" => ni.mlink.data_faults = count,
                k => return error(format!("unknown MLINK fault {k:?}: use header or data")),
            }
            tracing::info!(ni = node, kind, count, "MLINK checksum faults armed");
            Response::Done
        }
        Request::PartitionRemoteBoot { name, enabled } => {
            let mut st = daemon.fabric.lock();
            match st.partitions.set_remote_boot(&name, enabled) {
                Ok(()) => {
                    let p = st.partitions.get(&name).expect("exists").clone();
                    Response::Partition(st.partition_info(&p))
                }
                Err(e) => error(e.to_string()),
            }
        }
        Request::MapOutNode { node, replacement } => {
            let mut st = daemon.fabric.lock();
            let bad = match st.parse_node(&node) {
                Ok(p) => p,
                Err(e) => return error(e),
            };
            let to = match replacement.as_deref().map(|r| st.parse_node(r)).transpose() {
                Ok(t) => t,
                Err(e) => return error(e),
            };
            match st.map_out_node(bad, to) {
                Ok(info) => Response::MapOut(info),
                Err(e @ crate::fabric::topology::TopologyError::NoSpareNode { .. }) => error(
                    format!(
                        "cannot map out node {bad}: {e} (start ni-device with a larger torus: --torus XxYxZ, or torus = \"XxYxZ\" in its config)"
                    ),
                ),
                Err(e) => error(format!("cannot map out node {bad}: {e}")),
            }
        }
        Request::MapOutLink { a, b } => {
            let mut st = daemon.fabric.lock();
            let (pa, pb) = match (st.parse_node(&a), st.parse_node(&b)) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(e), _) | (_, Err(e)) => return error(e),
            };
            match st.map_out_link(pa, pb) {
                Ok(info) => Response::MapOut(info),
                Err(e) => error(format!("cannot map out the link {pa}-{pb}: {e}")),
            }
        }
        Request::MapOutClear => Response::MapOut(daemon.fabric.lock().map_out_clear()),
        Request::DiagPing { from, to } => match node_range(daemon, &[from, to]) {
            Ok(_) => Response::Ping(daemon.fabric.lock().admin_ping(from as usize, to as usize)),
            Err(e) => error(e),
        },
        Request::DiagLoopback { node, size, count } => {
            if let Err(e) = node_range(daemon, &[node]) {
                return error(e);
            }
            let size = size.unwrap_or(65536);
            let count = count.unwrap_or(16);
            if size == 0 || size > DIAG_MAX_SIZE || count == 0 || count > DIAG_MAX_COUNT {
                return error(format!(
                    "loopback size must be 1 to {DIAG_MAX_SIZE} bytes and count 1 to {DIAG_MAX_COUNT}"
                ));
            }
            match daemon.fabric.diag_loopback(node as usize, size, count) {
                Ok(info) => Response::Loopback(info),
                Err(e) => error(e),
            }
        }
        Request::DiagTraffic {
            partition,
            secs,
            max_size,
        } => {
            let secs = secs.unwrap_or(1.0);
            let max = max_size.unwrap_or(1 << 20);
            if !(secs.is_finite() && secs > 0.0 && secs <= DIAG_MAX_SECS)
                || max == 0
                || max > DIAG_MAX_SIZE
            {
                return error(format!(
                    "traffic needs 0 < secs <= {DIAG_MAX_SECS} and a largest message of 1 to {DIAG_MAX_SIZE} bytes"
                ));
            }
            match daemon.fabric.diag_traffic(partition.as_deref(), secs, max) {
                Ok(info) => Response::Traffic(info),
                Err(e) => error(e),
            }
        }
    }
}

/// Every NI: attach state and client, partition, the SSD-T90 numbers, its link.
fn nodes(daemon: &Daemon) -> Response {
    // What the fabric knows, under its lock; then each NI's own state (lock order).
    let views: Vec<_> = {
        let st = daemon.fabric.lock();
        daemon
            .local
            .clone()
            .map(|i| i as usize)
            .map(|i| {
                let part = st.partitions.of(i as u32).map(|(p, r)| (p.name.clone(), r));
                let n = &st.nodes[i];
                (
                    part,
                    st.physical_of(i as u32),
                    n.ready,
                    n.port.up(),
                    n.port.clsm().1,
                )
            })
            .collect()
    };
    let attached: Vec<u32> = daemon
        .slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.attachment.lock().map(|a| a.attached).unwrap_or(false))
        .map(|(i, _)| i as u32)
        .collect();
    let pids = client_pids(daemon, &attached);
    Response::Nodes {
        nodes: daemon.slots[daemon.local.start as usize..daemon.local.end as usize]
            .iter()
            .zip(views)
            .enumerate()
            .map(|(i, (s, (part, physical, ready, up, clsm)))| {
                let i = i + daemon.local.start as usize;
                // The NI's lock first: the session thread frees the attachment under it,
                // with the detach, so the two are seen together.
                let ni = lock(&s.ni);
                let a = s.attachment.lock().map(|a| a.clone()).unwrap_or_default();
                let (dma_regions, dma_bytes) = {
                    let d = crate::ni::read_dma(&ni.dma);
                    (d.len() as u32, d.mapped_bytes())
                };
                let pid = a
                    .attached
                    .then(|| a.client_pid.or_else(|| pids.get(&(i as u32)).copied()))
                    .flatten();
                let (kind, name) = match pid.and_then(client_identity) {
                    Some((k, n)) => (Some(k.to_string()), Some(n)),
                    None => (None, None),
                };
                NodeInfo {
                    node: i as u32,
                    socket: socket_path(&daemon.run_dir, i as u32).display().to_string(),
                    state: if a.attached { "attached" } else { "free" }.into(),
                    client_pid: pid,
                    attaches: ni.counters.attaches,
                    dma_regions,
                    dma_bytes,
                    client_kind: kind,
                    client_name: name,
                    ready: ready && a.attached,
                    rank: part.as_ref().map(|(_, r)| *r),
                    partition: part.map(|(p, _)| p),
                    logical: i as u32,
                    physical,
                    link: if up { "up" } else { "down" }.into(),
                    clsm: clsm.into(),
                    host: daemon.span.as_ref().map(|s| s.names[s.me as usize].clone()),
                }
            })
            .collect(),
    }
}

/// Who a client process is: (`guest`, QEMU's program name) for a QEMU, which serves a guest
/// (also when started through a dynamic loader, as qemu-patches does), else (`process`,
/// its command name).
fn client_identity(pid: i32) -> Option<(&'static str, String)> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let qemu = cmdline
        .split(|&b| b == 0)
        .take(4)
        .filter_map(|a| std::str::from_utf8(a).ok())
        .map(|a| a.rsplit('/').next().unwrap_or(a))
        .find(|a| a.starts_with("qemu-system"));
    if let Some(q) = qemu {
        return Some(("guest", q.to_string()));
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let comm = comm.trim();
    if comm.starts_with("qemu") {
        return Some(("guest", comm.to_string()));
    }
    (!comm.is_empty()).then(|| ("process", comm.to_string()))
}

/// The process id of each attached NI's client. The vfio-user crate accepts the connection
/// itself and does not hand out the stream, so find it: the accepted socket is the connected
/// Unix socket bound to the NI's path (`/proc/net/unix`, state 03, under the name it was
/// bound with, `daemon::bound_name`) that is one of this
/// process's descriptors (`/proc/self/fd`); `SO_PEERCRED` on it names the client.
fn client_pids(daemon: &Daemon, nodes: &[u32]) -> HashMap<u32, i32> {
    let mut out = HashMap::new();
    if nodes.is_empty() {
        return out;
    }
    let socket_inode = |fd: &str| -> Option<u64> {
        let l = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
        let l = l.to_str()?;
        l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
    };
    let mut fds: HashMap<u64, String> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        for e in dir.flatten() {
            let fd = e.file_name().to_string_lossy().into_owned();
            if let Some(ino) = socket_inode(&fd) {
                fds.insert(ino, fd);
            }
        }
    }
    let mut by_path: HashMap<String, u64> = HashMap::new();
    if let Ok(table) = std::fs::read_to_string("/proc/net/unix") {
        // Num RefCount Protocol Flags Type St Inode Path
        for line in table.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 || f[5] != "03" {
                continue;
            }
            let Ok(ino) = f[6].parse::<u64>() else {
                continue;
            };
            if fds.contains_key(&ino) {
                by_path.insert(f[7..].join(" "), ino);
            }
        }
    }
    for &n in nodes {
        let path = crate::daemon::bound_name(&socket_path(&daemon.run_dir, n))
            .display()
            .to_string();
        let Some(&ino) = by_path.get(&path) else {
            continue;
        };
        let fd = &fds[&ino];
        let Ok(raw) = fd.parse::<i32>() else { continue };
        let pid = peer_cred(raw).map(|c| c.pid);
        // The descriptor must still be that socket (not closed and reused meanwhile).
        if socket_inode(fd) == Some(ino) {
            if let Some(pid) = pid.filter(|&p| p > 0) {
                out.insert(n, pid);
            }
        }
    }
    out
}

fn peer_cred(fd: i32) -> Option<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`, which is that size; a
    // descriptor that is not a socket just fails.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred)
}

/// Answer the control connection that asked for a planned restart, from the new process.
pub fn answer_restart(daemon: &Daemon, stream: &mut std::fs::File) {
    if let Err(e) = reply(stream, status(daemon)) {
        tracing::debug!("answering the restart's requester: {e}");
    }
}

fn status(daemon: &Daemon) -> Response {
    let attached = daemon
        .slots
        .iter()
        .filter(|s| s.attachment.lock().map(|a| a.attached).unwrap_or(false))
        .count() as u32;
    let errors: u64 = daemon
        .slots
        .iter()
        .map(|s| {
            let c = &lock(&s.ni).counters;
            c.bad_accesses + c.dma_map_errors + c.dma_faults + c.irq_errors + c.bus_errors
        })
        .sum::<u64>()
        + CONTROL_ERRORS.load(Ordering::Relaxed);
    Response::Status(Status {
        daemon_version: env!("CARGO_PKG_VERSION").into(),
        run_dir: daemon.run_dir.display().to_string(),
        pid: std::process::id(),
        uptime_secs: daemon.started.elapsed().as_secs_f64(),
        nodes: daemon.slots.len() as u32,
        attached,
        errors,
        restarts: daemon.restarts,
        last_restart_pause_ms: daemon.last_pause.map(|p| p.as_secs_f64() * 1e3),
    })
}
