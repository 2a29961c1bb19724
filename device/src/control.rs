//! The control socket: `ni-ctl`'s way in. Owner-only, one JSON request per line.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ni_abi::control::{
    Envelope, NodeCounters, NodeInfo, Request, Response, Status, MAX_REQUEST, PROTOCOL_VERSION,
};

use crate::daemon::{socket_path, Daemon};
use crate::server::lock;

/// Control requests refused since start (malformed, unknown, wrong version, wrong user).
pub static CONTROL_ERRORS: AtomicU64 = AtomicU64::new(0);

pub fn serve(daemon: Arc<Daemon>, listener: UnixListener) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let d = daemon.clone();
                let _ = std::thread::Builder::new()
                    .name("control-conn".into())
                    .spawn(move || {
                        if let Err(e) = session(&d, stream) {
                            tracing::debug!("control session ended: {e}");
                        }
                    });
            }
            Err(e) => tracing::warn!("control accept: {e}"),
        }
    }
}

fn peer_uid(s: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`, which is that size.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
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

fn session(daemon: &Daemon, stream: UnixStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
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
    let mut reader = BufReader::new(stream);
    loop {
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
    match req {
        Request::Status => {
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
            })
        }
        Request::Nodes => Response::Nodes {
            nodes: daemon
                .slots
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let a = s.attachment.lock().map(|a| a.clone()).unwrap_or_default();
                    let ni = lock(&s.ni);
                    let (dma_regions, dma_bytes) = {
                        let d = crate::ni::read_dma(&ni.dma);
                        (d.len() as u32, d.mapped_bytes())
                    };
                    NodeInfo {
                        node: i as u32,
                        socket: socket_path(&daemon.run_dir, i as u32).display().to_string(),
                        state: if a.attached { "attached" } else { "free" }.into(),
                        client_pid: a.client_pid,
                        attaches: ni.counters.attaches,
                        dma_regions,
                        dma_bytes,
                    }
                })
                .collect(),
        },
        Request::Counters { nodes, reset } => match node_range(daemon, &nodes) {
            Ok(nodes) => Response::Counters {
                counters: nodes
                    .into_iter()
                    .map(|i| {
                        // The fabric's lock is taken and dropped before the NI's (lock order).
                        let fabric = daemon.fabric.counters(i).unwrap_or_default();
                        if reset {
                            daemon.fabric.reset_counters(i);
                        }
                        let mut ni = lock(&daemon.slots[i as usize].ni);
                        let mut counters = ni.counters.list();
                        counters.extend(fabric.list());
                        if reset {
                            ni.counters = Default::default();
                        }
                        NodeCounters { node: i, counters }
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
            Ok(_) => match torus(daemon).and_then(|t| t.route_info(from, to)) {
                Ok(r) => Response::Route(r),
                Err(e) => error(e.to_string()),
            },
            Err(e) => error(e),
        },
        Request::Topology => match torus(daemon) {
            Ok(t) => Response::Topology(t.topology_info()),
            Err(e) => error(e.to_string()),
        },
    }
}

/// The interconnect torus the daemon's NIs sit on. Built on demand from the NI count: it is
/// a few hundred bytes, and nothing reconfigures it yet.
fn torus(
    daemon: &Daemon,
) -> Result<crate::fabric::topology::Torus, crate::fabric::topology::TopologyError> {
    crate::fabric::topology::Torus::for_nodes(daemon.slots.len() as u32)
}
