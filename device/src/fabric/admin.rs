//! What the administrator does to the fabric through the control socket (and nothing else
//! can: no fast-path request reaches any of this): partitions created and deleted live,
//! ports taken down and brought up, nodes and links mapped out of the torus, diagnostics.
//!
//! Changing something in use never corrupts what is in flight: every operation the change
//! affects fails with a status that names the cause, before the change takes effect —
//! `cancelled` for a partition change (and the client's control page gets a new EPOCH, so
//! libni answers `Error::Reset` and the program attaches again), `link down` for a port
//! taken down or a route that no longer exists.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ni_abi::control::{
    LoopbackInfo, MapOutInfo, MemberInfo, PartitionInfo, PingInfo, PortInfo, RemapInfo, RunInfo,
    TrafficInfo, TrafficPartition,
};
use ni_abi::fastpath::{op, Request, Status};

use super::node::{PendingAm, PendingSend, PostedRecv};
use super::partition::{Partition, PartitionError, Partitions};
use super::port::Mode;
use super::topology::{PhysPe, TopologyError};
use super::{Fabric, State};
use crate::dma::DmaSpace;

/// Above this many NIs a map-out does not list the pairs left without a route (that walks
/// every pair's route).
const UNREACHABLE_CHECK_MAX: u32 = 256;
/// Failures a traffic test lists in words.
const FAILURES_LISTED: usize = 10;

/// `PeerDown` -> `peer_down`: the status as the control protocol spells it.
pub fn status_name(s: Status) -> String {
    let mut out = String::new();
    for (i, c) in format!("{s:?}").chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `up`/`down`, as the protocol spells a link.
fn link_word(up: bool) -> String {
    if up { "up" } else { "down" }.into()
}

impl State {
    // ---- partitions ------------------------------------------------------------------

    /// Create partition `name` of `nodes` (rank i = `nodes[i]`), live.
    pub fn create_partition(&mut self, name: &str, nodes: Vec<u32>) -> Result<(), PartitionError> {
        let mut next = self.partitions.clone();
        next.create(name, nodes.clone())?;
        // A partition of this name deleted earlier left nothing behind (delete removes its
        // control-network state), but be sure: the new one starts its sequences afresh.
        self.colls.remove(name);
        self.change_partitions(&nodes, next);
        tracing::info!(partition = name, ?nodes, "partition created");
        Ok(())
    }

    /// Delete partition `name`, live.
    pub fn delete_partition(&mut self, name: &str) -> Result<Partition, PartitionError> {
        let mut next = self.partitions.clone();
        let p = next.delete(name)?;
        self.change_partitions(&p.nodes, next);
        self.colls.remove(name);
        tracing::info!(partition = name, nodes = ?p.nodes, "partition deleted");
        Ok(p)
    }

    /// Move the `affected` NIs to the partitions of `next` without corrupting anything they
    /// have in flight: their clients' view is voided first (new EPOCH, unconsumed requests
    /// dropped), then what they had waiting in the fabric fails with `cancelled` while their
    /// ranks still mean what they meant, then the new identity is published.
    fn change_partitions(&mut self, affected: &[u32], next: Partitions) {
        for &x in affected {
            self.bump_epoch(x as usize);
        }
        let mut partitions_done = BTreeSet::new();
        for &x in affected {
            if let Some((p, _)) = self.partitions.of(x) {
                if partitions_done.insert(p.name.clone()) {
                    self.reset_partition_colls(x as usize, Status::Cancelled);
                }
            }
            self.cancel_involving(x as usize, Status::Cancelled);
        }
        self.partitions = next;
        self.sync_windows();
        for &x in affected {
            if self.other_host(x as usize).is_some() {
                // Its own host makes the same change and announces it (READY).
                continue;
            }
            let n = &mut self.nodes[x as usize];
            // Its client must attach again (its ranks are void): until its driver sets up a
            // completion ring anew, peers of the new partition see it down.
            n.ready = false;
            n.seen.clear();
            self.write_identity(x as usize);
        }
        self.publish_peers_up();
    }

    /// Fail every point-to-point operation waiting in the fabric that involves NI `x`, as
    /// sender, receiver or named source, with `status`. `x` keeps its client and rings.
    pub(super) fn cancel_involving(&mut self, x: usize, status: Status) {
        self.cancel_transfers(x, status);
        // What x has in flight with other hosts.
        self.remote_cancel_origin(x, status);
        let x_rank = self.rank_of_node(x);
        // Receives x posted.
        let recvs: Vec<PostedRecv> = self.nodes[x].recvs.drain(..).collect();
        self.nodes[x].outstanding -= recvs.len();
        for rv in recvs {
            self.fail(x, &recv_request(&rv), status);
        }
        // Messages waiting at x (x's own to itself included): their senders hear.
        let waiting: Vec<PendingSend> = self.nodes[x].unexpected.drain(..).collect();
        for s in waiting {
            self.forget_send(&s, status);
            self.fail(s.src, &send_request(&s, x_rank), status);
        }
        let ams: Vec<PendingAm> = self.nodes[x].am_waiting.drain(..).collect();
        for m in ams {
            self.nodes[m.src].outstanding -= 1;
            if let Some(k) = m.remote {
                self.remote_answer(k, status, 0);
            }
            self.fail(m.src, &rop_request(&m, x_rank), status);
        }
        for j in 0..self.nodes.len() {
            if j == x {
                continue;
            }
            let j_rank = self.rank_of_node(j);
            let n = &mut self.nodes[j];
            let (mine, rest): (Vec<PendingSend>, Vec<PendingSend>) =
                n.unexpected.drain(..).partition(|s| s.src == x);
            n.unexpected = rest.into();
            let (my_ams, rest): (Vec<PendingAm>, Vec<PendingAm>) =
                n.am_waiting.drain(..).partition(|m| m.src == x);
            n.am_waiting = rest.into();
            let (dead, live): (Vec<PostedRecv>, Vec<PostedRecv>) =
                n.recvs.drain(..).partition(|r| r.from == Some(x));
            n.recvs = live.into();
            n.outstanding -= dead.len();
            for s in mine {
                self.forget_send(&s, status);
                self.fail(x, &send_request(&s, j_rank), status);
            }
            for m in my_ams {
                self.nodes[x].outstanding -= 1;
                if let Some(k) = m.remote {
                    self.remote_answer(k, status, 0);
                }
                self.fail(x, &rop_request(&m, j_rank), status);
            }
            for rv in dead {
                self.fail(j, &recv_request(&rv), status);
            }
        }
    }

    fn rank_of_node(&self, x: usize) -> u32 {
        self.partitions.rank_size(x as u32).0
    }

    pub fn partition_info(&self, p: &Partition) -> PartitionInfo {
        let members: Vec<MemberInfo> = p
            .nodes
            .iter()
            .enumerate()
            .map(|(r, &n)| MemberInfo {
                rank: r as u32,
                node: n,
                physical: self.physical_of(n),
                state: self.node_state(n as usize).into(),
                link: link_word(self.nodes[n as usize].port.up()),
            })
            .collect();
        let mut runs: Vec<RunInfo> = Vec::new();
        for (r, &n) in p.nodes.iter().enumerate() {
            let r = r as u32;
            match runs.last_mut() {
                Some(run) if run.ranks[1] + 1 == r && run.nodes[1].checked_add(1) == Some(n) => {
                    run.ranks[1] = r;
                    run.nodes[1] = n;
                }
                _ => runs.push(RunInfo {
                    ranks: [r, r],
                    nodes: [n, n],
                }),
            }
        }
        PartitionInfo {
            name: p.name.clone(),
            id: p.id,
            size: p.nodes.len() as u32,
            members,
            runs,
            remote_boot: p.remote_boot,
        }
    }

    /// `free`, `attached` or `ready`, as far as the fabric knows.
    pub fn node_state(&self, x: usize) -> &'static str {
        let n = &self.nodes[x];
        if n.ready {
            "ready"
        } else if n.live {
            "attached"
        } else {
            "free"
        }
    }

    /// The physical PE number of NI `x` (logical PE `x`), per the LUT.
    pub fn physical_of(&self, x: u32) -> String {
        self.torus
            .physical(x)
            .map(|p| p.to_string())
            .unwrap_or_else(|_| "-".into())
    }

    // ---- ports -----------------------------------------------------------------------

    /// Set NI `x`'s port mode and/or link state. A link that goes down — taken down, or
    /// retraining for a new mode — fails what was in flight through it with `link down`;
    /// collectives of its partition fail the same way (they need every member's port).
    pub fn set_port(&mut self, x: usize, mode: Option<Mode>, up: Option<bool>) {
        let port = self.nodes[x].port.clone();
        let was_up = port.up();
        let retrain = mode.is_some_and(|m| m != port.mode());
        let up_after = up.unwrap_or(was_up);
        if was_up && (!up_after || retrain) {
            port.set_up(false);
            self.nodes[x].counters.p0_link_downed += 1;
            if self.partitions.of(x as u32).is_some() {
                self.reset_partition_colls(x, Status::LinkDown);
            }
            self.cancel_involving(x, Status::LinkDown);
            tracing::info!(ni = x, "port 0 link down");
        }
        if let Some(m) = mode {
            port.set_mode(m);
        }
        port.set_up(up_after);
        if up_after && !was_up {
            tracing::info!(ni = x, "port 0 link up");
        }
        // Lanai packets waiting for carrier (or for this port) may move, or drop, now.
        for f in &self.lanai_pending {
            f.store(true, std::sync::atomic::Ordering::Release);
        }
        self.publish_reach();
    }

    pub fn port_info(&self, x: usize) -> PortInfo {
        let n = &self.nodes[x];
        let (code, name) = n.port.clsm();
        let counters = n
            .counters
            .list()
            .into_iter()
            .filter(|(k, _)| k.starts_with("p0_"))
            .collect();
        PortInfo {
            node: x as u32,
            port: 0,
            mode: n.port.mode().name().into(),
            mode_register: n.port.mode().register(),
            state: link_word(n.port.up()),
            clsm: name.into(),
            clsm_code: code,
            link_ready: n.port.link_ready(),
            counters,
        }
    }

    // ---- the torus ---------------------------------------------------------------------

    /// A node named by an NI number (the node holding that logical PE) or a six-hex-digit
    /// physical PE number.
    pub fn parse_node(&self, s: &str) -> Result<PhysPe, String> {
        let s = s.trim();
        if s.len() == 6 && s.chars().all(|c| c.is_ascii_hexdigit()) {
            return s.parse::<PhysPe>().map_err(|e| e.to_string());
        }
        let lpe: u32 = s.parse().map_err(|_| {
            format!(
                "{s:?} is neither an NI number nor a physical PE number (six hex digits ZZYYXX)"
            )
        })?;
        if lpe as usize >= self.nodes.len() {
            return Err(format!(
                "no NI {lpe}: this daemon has NIs 0 to {}",
                self.nodes.len() - 1
            ));
        }
        self.torus.physical(lpe).map_err(|e| e.to_string())
    }

    pub fn map_out_node(
        &mut self,
        bad: PhysPe,
        replacement: Option<PhysPe>,
    ) -> Result<MapOutInfo, TopologyError> {
        let remap = self.torus.map_out_node(bad, replacement)?;
        if let Some(r) = remap {
            tracing::info!(lpe = r.lpe, from = %r.from, to = %r.to, "node mapped out, logical PE moved");
        } else {
            tracing::info!(node = %bad, "node mapped out");
        }
        let failed = self.torus_changed();
        Ok(MapOutInfo {
            action: "node".into(),
            mapped_out: Some(bad.to_string()),
            remap: remap.map(|r| RemapInfo {
                lpe: r.lpe,
                from: r.from.to_string(),
                to: r.to.to_string(),
            }),
            failed,
            unreachable: self.unreachable(),
        })
    }

    pub fn map_out_link(&mut self, a: PhysPe, b: PhysPe) -> Result<MapOutInfo, TopologyError> {
        let (_, dir) = self.torus.link_between(a, b)?;
        let link = self.torus.map_out_link(a, dir)?;
        tracing::info!(%link, "link mapped out");
        let failed = self.torus_changed();
        Ok(MapOutInfo {
            action: "link".into(),
            mapped_out: Some(link.to_string()),
            remap: None,
            failed,
            unreachable: self.unreachable(),
        })
    }

    pub fn map_out_clear(&mut self) -> MapOutInfo {
        self.torus = self.torus_initial.clone();
        tracing::info!("map-outs cleared");
        let failed = self.torus_changed();
        MapOutInfo {
            action: "clear".into(),
            mapped_out: None,
            remap: None,
            failed,
            unreachable: self.unreachable(),
        }
    }

    fn unreachable(&self) -> Option<Vec<[u32; 2]>> {
        (self.torus.logical_pes() <= UNREACHABLE_CHECK_MAX).then(|| {
            self.torus
                .unreachable_pairs()
                .into_iter()
                .map(|(a, b)| [a, b])
                .collect()
        })
    }

    /// The torus changed: forget the routes, and fail what waits in the fabric over a route
    /// that no longer exists (messages waiting for a receive, receives from a named source,
    /// active messages waiting for ring space). Returns how many failed.
    fn torus_changed(&mut self) -> u64 {
        self.routes.clear();
        self.publish_reach();
        let mut failed = 0;
        for b in 0..self.nodes.len() {
            let b_rank = self.rank_of_node(b);
            let sends: Vec<PendingSend> = self.nodes[b].unexpected.iter().copied().collect();
            for s in sends {
                if self.hops(s.src, b).is_err() {
                    self.nodes[b]
                        .unexpected
                        .retain(|w| !(w.src == s.src && w.user == s.user));
                    self.forget_send(&s, Status::LinkDown);
                    self.fail(s.src, &send_request(&s, b_rank), Status::LinkDown);
                    failed += 1;
                }
            }
            let ams: Vec<PendingAm> = self.nodes[b].am_waiting.iter().copied().collect();
            for m in ams {
                if self.hops(m.src, b).is_err() {
                    self.nodes[b]
                        .am_waiting
                        .retain(|w| !(w.src == m.src && w.user == m.user));
                    self.nodes[m.src].outstanding -= 1;
                    if let Some(k) = m.remote {
                        self.remote_answer(k, Status::LinkDown, 0);
                    }
                    self.fail(m.src, &rop_request(&m, b_rank), Status::LinkDown);
                    failed += 1;
                }
            }
            let recvs: Vec<PostedRecv> = self.nodes[b].recvs.iter().copied().collect();
            for rv in recvs {
                if rv.from.is_some_and(|f| self.hops(f, b).is_err()) {
                    self.nodes[b]
                        .recvs
                        .retain(|w| !(w.from == rv.from && w.user == rv.user));
                    self.nodes[b].outstanding -= 1;
                    self.fail(b, &recv_request(&rv), Status::LinkDown);
                    failed += 1;
                }
            }
        }
        failed
    }

    // ---- diagnostics -------------------------------------------------------------------

    /// MLINK NOOP as the administrator: would NI `a`'s ping of NI `b` succeed? Touches no
    /// counter of either.
    pub fn admin_ping(&mut self, a: usize, b: usize) -> PingInfo {
        let mut info = PingInfo {
            from: a as u32,
            to: b as u32,
            partition: None,
            rank: None,
            up: false,
            status: String::new(),
            detail: String::new(),
            hops: None,
        };
        let verdict = (|| {
            let p = self
                .partitions
                .of(a as u32)
                .map(|(p, _)| p.clone())
                .ok_or((Status::OutOfPartition, format!("NI {a} is in no partition")))?;
            info.partition = Some(p.name.clone());
            let rank = p.nodes.iter().position(|&n| n as usize == b).ok_or((
                Status::OutOfPartition,
                format!(
                    "NI {b} is not in NI {a}'s partition {:?}: NI {a} cannot name it",
                    p.name
                ),
            ))?;
            info.rank = Some(rank as u32);
            if !self.nodes[b].ready {
                return Err((
                    Status::PeerDown,
                    format!(
                        "NI {b} is {}: no client with a completion ring",
                        self.node_state(b)
                    ),
                ));
            }
            for (x, which) in [(a, "source"), (b, "target")] {
                if !self.nodes[x].port.up() {
                    return Err((
                        Status::LinkDown,
                        format!("the {which} NI {x}'s port is down"),
                    ));
                }
            }
            let hops = self.hops(a, b).map_err(|s| {
                (
                    s,
                    format!("no route from NI {a} to NI {b} avoids what is mapped out"),
                )
            })?;
            info.hops = Some(hops);
            Ok(format!(
                "NI {b} is up: rank {rank} of partition {:?}, {hops} hop{} away",
                p.name,
                if hops == 1 { "" } else { "s" }
            ))
        })();
        match verdict {
            Ok(d) => {
                info.up = true;
                info.status = "ok".into();
                info.detail = d;
            }
            Err((s, d)) => {
                info.status = status_name(s);
                info.detail = d;
            }
        }
        info
    }

    /// One diagnostic packet from NI `a` to NI `b`: the data-network checks a client's
    /// packet gets (same partition, both ports up, a route), then the fabric's copy engine
    /// moves `len` bytes from `src` to `dst` (the daemon's own memory). Counted on the ports
    /// like any packet.
    pub fn diag_transfer(
        &mut self,
        a: usize,
        b: usize,
        src: &DmaSpace,
        dst: &DmaSpace,
        len: u64,
    ) -> Result<u32, Status> {
        let same = match (self.partitions.of(a as u32), self.partitions.of(b as u32)) {
            (Some((p, _)), Some((q, _))) => p.name == q.name,
            _ => false,
        };
        if !same {
            return Err(Status::OutOfPartition);
        }
        let hops = self.link(a, b)?;
        src.copy_to(0, dst, 0, len as usize)
            .map_err(|_| Status::NotRegistered)?;
        self.wire(a, b, len, hops);
        Ok(hops)
    }
}

pub(super) fn send_request(s: &PendingSend, dst_rank: u32) -> Request {
    Request {
        opcode: op::SEND,
        rank: dst_rank,
        user: s.user,
        len: s.len,
        tag: s.tag,
        ..Default::default()
    }
}

fn rop_request(m: &PendingAm, dst_rank: u32) -> Request {
    Request {
        opcode: op::ROP,
        rank: dst_rank,
        user: m.user,
        len: m.len,
        mask: m.handler,
        ..Default::default()
    }
}

pub(super) fn recv_request(rv: &PostedRecv) -> Request {
    Request {
        opcode: op::RECV,
        rank: rv.from_rank,
        user: rv.user,
        len: rv.len,
        tag: rv.tag,
        ..Default::default()
    }
}

/// Keep the first few distinct failures, in words.
fn note(failures: &mut Vec<String>, f: String) {
    if failures.len() < FAILURES_LISTED && !failures.contains(&f) {
        failures.push(f);
    }
}

/// Memory of the daemon's own for diagnostic traffic: a memfd mapped at IOVA 0 of a private
/// DMA space, so the fabric's copy engine moves it exactly as it moves client memory.
struct DiagBuffer {
    space: DmaSpace,
}

impl DiagBuffer {
    fn new(len: u64) -> Result<DiagBuffer, String> {
        let size = len.max(1).div_ceil(4096) * 4096;
        let file = crate::dma::sealed_memfd(c"ni-diag", size)
            .map_err(|e| format!("diagnostic buffer: memfd: {e}"))?;
        let mut space = DmaSpace::new();
        space
            .map(true, true, 0, 0, size, Some(file))
            .map_err(|e| format!("diagnostic buffer: {e}"))?;
        Ok(DiagBuffer { space })
    }
}

/// A pattern no two messages share: xorshift from the message's seed.
fn pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// Message sizes a diagnostic cycles through, up to `max`: tiny, odd, page-sized, large.
fn size_for(i: u64, max: u64) -> u64 {
    const SIZES: [u64; 8] = [1, 7, 64, 1000, 4096, 65_536 + 13, 1 << 19, u64::MAX];
    SIZES[(i % SIZES.len() as u64) as usize].min(max).max(1)
}

/// One packet a → b of `len` bytes with pattern `seed`, checked at the far end.
enum Outcome {
    Delivered { hops: u32, intact: bool },
    Refused(Status),
}

fn one_packet(
    fabric: &Fabric,
    a: usize,
    b: usize,
    bufs: (&DiagBuffer, &DiagBuffer),
    scratch: (&mut Vec<u8>, &mut Vec<u8>),
    len: u64,
    seed: u64,
) -> Result<Outcome, String> {
    let (src, dst) = bufs;
    let (want, got) = scratch;
    let n = len as usize;
    want.resize(n, 0);
    got.resize(n, 0);
    pattern(want, seed);
    src.space
        .write(0, want)
        .map_err(|e| format!("diagnostic buffer: {e}"))?;
    // Whatever the far buffer held before must not pass for a delivery.
    got.iter_mut().for_each(|b| *b = !0);
    dst.space
        .write(0, got)
        .map_err(|e| format!("diagnostic buffer: {e}"))?;
    let r = fabric
        .lock()
        .diag_transfer(a, b, &src.space, &dst.space, len);
    match r {
        Ok(hops) => {
            dst.space
                .read(0, got)
                .map_err(|e| format!("diagnostic buffer: {e}"))?;
            Ok(Outcome::Delivered {
                hops,
                intact: got == want,
            })
        }
        Err(s) => Ok(Outcome::Refused(s)),
    }
}

impl Fabric {
    /// `diag loopback`: NI `node` sends `count` messages of up to `max` bytes to itself
    /// through its port; every byte is checked.
    pub fn diag_loopback(&self, node: usize, max: u64, count: u32) -> Result<LoopbackInfo, String> {
        let src = DiagBuffer::new(max)?;
        let dst = DiagBuffer::new(max)?;
        let (mut want, mut got) = (Vec::new(), Vec::new());
        let t = Instant::now();
        let mut info = LoopbackInfo {
            node: node as u32,
            messages: 0,
            bytes: 0,
            mismatches: 0,
            secs: 0.0,
            ok: true,
            error: None,
        };
        if self.lock().partitions.of(node as u32).is_none() {
            // A loopback needs no peer, but the fabric only carries partition traffic.
            info.ok = false;
            info.error = Some(format!(
                "NI {node} is in no partition: the fabric carries nothing for it"
            ));
            return Ok(info);
        }
        for i in 0..count as u64 {
            let len = size_for(i, max);
            match one_packet(
                self,
                node,
                node,
                (&src, &dst),
                (&mut want, &mut got),
                len,
                i + 1,
            )? {
                Outcome::Delivered { intact, .. } => {
                    info.messages += 1;
                    info.bytes += len;
                    if !intact {
                        info.mismatches += 1;
                        info.ok = false;
                    }
                }
                Outcome::Refused(s) => {
                    info.ok = false;
                    info.error = Some(format!("{}: {}", status_name(s), s.describe()));
                    break;
                }
            }
        }
        info.secs = t.elapsed().as_secs_f64();
        Ok(info)
    }

    /// `diag traffic`: every member of each partition (or of `only`) sends to every other,
    /// round after round (round r: member j sends to member j + 1 + r mod (size - 1)), for
    /// `secs` per partition, message sizes cycling up to `max`; every byte is checked at the
    /// far end. Runs beside client traffic: the fabric's lock is taken per packet.
    pub fn diag_traffic(
        &self,
        only: Option<&str>,
        secs: f64,
        max: u64,
    ) -> Result<TrafficInfo, String> {
        let parts: Vec<Partition> = {
            let st = self.lock();
            match only {
                Some(name) => vec![st
                    .partitions
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("no partition {name:?}"))?],
                None => st.partitions.list().cloned().collect(),
            }
        };
        if parts.is_empty() {
            return Err("there are no partitions to test: create one first".into());
        }
        let src = DiagBuffer::new(max)?;
        let dst = DiagBuffer::new(max)?;
        let (mut want, mut got) = (Vec::new(), Vec::new());
        let mut out = TrafficInfo {
            ok: true,
            partitions: Vec::new(),
        };
        let limit = Duration::from_secs_f64(secs);
        let mut seed = 0u64;
        for p in parts {
            let k = p.nodes.len();
            let mut tp = TrafficPartition {
                name: p.name.clone(),
                members: k as u32,
                messages: 0,
                bytes: 0,
                secs: 0.0,
                mb_per_sec: 0.0,
                messages_per_sec: 0.0,
                mismatches: 0,
                refused: Vec::new(),
                failures: Vec::new(),
                hops: 0,
            };
            let t = Instant::now();
            let mut round = 0u64;
            // At least one full pass over every pair, then until the time is up.
            let pairs_per_pass = (k.saturating_sub(1)).max(1) as u64;
            while round < pairs_per_pass || t.elapsed() < limit {
                let shift = if k > 1 {
                    1 + (round as usize % (k - 1))
                } else {
                    0
                };
                for j in 0..k {
                    let (a, b) = (p.nodes[j] as usize, p.nodes[(j + shift) % k] as usize);
                    seed += 1;
                    let len = size_for(seed, max);
                    match one_packet(self, a, b, (&src, &dst), (&mut want, &mut got), len, seed)? {
                        Outcome::Delivered { hops, intact } => {
                            tp.messages += 1;
                            tp.bytes += len;
                            tp.hops += hops as u64;
                            if !intact {
                                tp.mismatches += 1;
                                note(
                                    &mut tp.failures,
                                    format!("NI {a} -> NI {b}: {len} bytes arrived different"),
                                );
                            }
                        }
                        Outcome::Refused(s) => {
                            let name = status_name(s);
                            match tp.refused.iter_mut().find(|(n, _)| *n == name) {
                                Some((_, c)) => *c += 1,
                                None => tp.refused.push((name, 1)),
                            }
                            note(
                                &mut tp.failures,
                                format!("NI {a} -> NI {b}: {}", s.describe()),
                            );
                        }
                    }
                }
                round += 1;
            }
            tp.secs = t.elapsed().as_secs_f64();
            if tp.secs > 0.0 {
                tp.mb_per_sec = tp.bytes as f64 / tp.secs / 1e6;
                tp.messages_per_sec = tp.messages as f64 / tp.secs;
            }
            if tp.mismatches > 0 || !tp.refused.is_empty() {
                out.ok = false;
            }
            out.partitions.push(tp);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_are_snake_case() {
        assert_eq!(status_name(Status::PeerDown), "peer_down");
        assert_eq!(status_name(Status::LinkDown), "link_down");
        assert_eq!(status_name(Status::Ok), "ok");
        assert_eq!(status_name(Status::OutOfPartition), "out_of_partition");
    }

    #[test]
    fn diagnostic_sizes_stay_within_bounds() {
        for i in 0..32 {
            let n = size_for(i, 5000);
            assert!((1..=5000).contains(&n));
        }
        assert_eq!(size_for(7, 1 << 20), 1 << 20);
        let (mut a, mut b) = (vec![0u8; 13], vec![0u8; 13]);
        pattern(&mut a, 1);
        pattern(&mut b, 2);
        assert_ne!(a, b);
    }
}
