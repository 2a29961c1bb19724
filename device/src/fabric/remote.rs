//! NIs hosted by other daemons, reached through the [`Link`] seam (device/abi/links.md).
//!
//! Every daemon of a fabric holds a [`Node`](super::node::Node) for every NI of the fabric:
//! its own NIs' nodes are what they always were; another host's are stand-ins that carry
//! only what that host told us (`ready`, from `READY`), so partitions, ranks, the torus and
//! PEERS_UP read the same everywhere. A request whose peer is a stand-in is carried across:
//!
//! - SEND: the message goes to the receiver's host with its payload (eager, up to
//!   [`EAGER_MAX`] and while [`EAGER_BUDGET`] allows) or without (rendezvous: the receiver's
//!   host pulls it in chunks once a receive matches). Matching happens where the receiver
//!   is, in arrival order, as for a local sender; the sender's SEND completes when its
//!   receiver's host says it was received (`DONE`), as a local one does when copied.
//! - PUT/GET: chunks to and from the target's registered region, checked there (key,
//!   access, bounds) as a local one is; at most [`WINDOW`] chunks of one operation in flight.
//!
//! A host that goes away (link down) or an NI there that loses its client (READY false)
//! fails what was pending with it: `LinkDown` and `PeerDown`. Nothing is retried, so
//! nothing is duplicated; frames of one link keep their order, so messages of one sender
//! keep theirs.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ni_abi::fastpath::{access, op, Completion, Request, Status};

use super::collective::{Door, Entry, Kind, Round};
use super::node::{PendingSend, PostedRecv};
use super::State;
use crate::link::wire::CHUNK;
use crate::link::{Event, HostId, Link, Msg};
use crate::ni::read_dma;

/// Messages up to this size travel with their send.
pub const EAGER_MAX: u64 = 32 << 10;
/// Eager bytes one daemon may have sent to another and not yet seen received: past it,
/// sends go rendezvous, so a receiver that never posts receives costs its host at most this
/// per sending host.
pub const EAGER_BUDGET: u64 = 4 << 20;
/// Chunks of one put, get or pull in flight.
pub const WINDOW: u64 = 8;
/// Bytes queued on a link past which no new chunks are issued until it drains.
pub const QUEUE_MAX: usize = 4 << 20;

/// One of this daemon's operations waiting on another host.
enum Op {
    Send {
        a: usize,
        dst: usize,
        host: HostId,
        r: Request,
        /// Bytes it holds of the eager budget.
        eager: u64,
    },
    /// An active message (ROP) or a T3E message-queue SEND: one frame, one answer.
    Small {
        a: usize,
        dst: usize,
        host: HostId,
        r: Request,
    },
    OneSided {
        a: usize,
        dst: usize,
        host: HostId,
        r: Request,
        put: bool,
        /// Chunks sent (put) or asked for (get), and answered, of [`chunks`] in all.
        next: u64,
        answered: u64,
    },
}

impl Op {
    fn dst(&self) -> usize {
        match self {
            Op::Send { dst, .. } | Op::Small { dst, .. } | Op::OneSided { dst, .. } => *dst,
        }
    }
    fn origin(&self) -> usize {
        match self {
            Op::Send { a, .. } | Op::Small { a, .. } | Op::OneSided { a, .. } => *a,
        }
    }
}

/// A rendezvous message of another host matched here: its bytes being pulled.
struct Pull {
    b: usize,
    s: PendingSend,
    rv: PostedRecv,
    /// Bytes to move, asked for, and arrived.
    n: u64,
    next: u64,
    got: u64,
}

/// Network-done rounds other hosts may have said are quiet before ours are done.
const QUIET_MAX: usize = 4096;
/// Contributions up to this size wait for the rest of the host's members of their round.
const STASH_DATA_MAX: usize = 4 << 10;
/// How long they wait at most.
const STASH_WAIT: Duration = Duration::from_millis(10);

/// JOIN frames of one round for the other hosts of its partition.
struct Stash {
    /// Partition id, kind code, round.
    key: (u32, u8, u64),
    name: String,
    k: Kind,
    hosts: Vec<HostId>,
    frames: Vec<Msg>,
    since: Instant,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RemoteCounters {
    /// Frames from a peer daemon that named an NI it does not host, an operation that does
    /// not exist, or lengths that do not add up: refused (and answered where they can be).
    pub bad_frames: u64,
    pub sends_out: u64,
    pub sends_in: u64,
    pub rendezvous: u64,
    pub puts_out: u64,
    pub gets_out: u64,
    pub chunks_in: u64,
    pub chunks_out: u64,
    pub failed_link_down: u64,
    pub failed_peer_down: u64,
    /// Collective contributions (JOIN) sent to and taken from other hosts.
    pub joins_out: u64,
    pub joins_in: u64,
    /// Register-level operations and their answers (`DOOR`, `DOOR_ANSWER`) sent and taken.
    pub doors_out: u64,
    pub doors_in: u64,
}

/// What the link brings for the daemon's control side (`serve_peers`), in arrival order.
#[derive(Debug)]
pub enum Incoming {
    /// Another host's question `id` (a control request, JSON).
    Question(HostId, u64, Vec<u8>),
    /// The partition manager's change `seq` (a control request, JSON).
    Change(HostId, u64, Vec<u8>),
    /// A host (re)joined: the partition manager sends it the changes so far.
    HostUp(HostId),
}

/// Questions between daemons' control sockets (`Msg::Query`/`Answer`) and the partition
/// manager's changes, opaque here: the poller only carries them between the link and the
/// control threads, which block on them.
#[derive(Default)]
pub struct Queries {
    inbound: Mutex<VecDeque<Incoming>>,
    inbound_cv: Condvar,
    /// Answers awaited (`None` until it comes), by id.
    answers: Mutex<HashMap<u64, Option<Vec<u8>>>>,
    answers_cv: Condvar,
    next: AtomicU64,
}

/// Questions from other hosts waiting for the control thread, at most: more are refused.
const QUERIES_MAX: usize = 64;

impl Queries {
    /// Ask `host` (through `link`) and wait up to `timeout` for its answer.
    pub fn ask(
        &self,
        link: &dyn Link,
        host: HostId,
        q: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        if q.len() > CHUNK {
            return Err("question too long".into());
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.answers).insert(id, None);
        if !link.send(host, &Msg::Query { id, payload: q }) {
            lock(&self.answers).remove(&id);
            return Err("its link is down".into());
        }
        let g = lock(&self.answers);
        let (mut g, _) = self
            .answers_cv
            .wait_timeout_while(g, timeout, |a| a.get(&id).is_some_and(|x| x.is_none()))
            .unwrap_or_else(|e| e.into_inner());
        match g.remove(&id).flatten() {
            Some(a) => Ok(a),
            None => Err(format!("no answer within {} ms", timeout.as_millis())),
        }
    }

    /// The next thing from another host (blocks).
    pub fn next_incoming(&self) -> Incoming {
        let mut g = lock(&self.inbound);
        loop {
            if let Some(q) = g.pop_front() {
                return q;
            }
            g = self.inbound_cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn question(&self, host: HostId, id: u64, q: Vec<u8>) -> bool {
        let mut g = lock(&self.inbound);
        if g.len() >= QUERIES_MAX {
            return false;
        }
        g.push_back(Incoming::Question(host, id, q));
        self.inbound_cv.notify_one();
        true
    }

    /// Changes and joins are never dropped: the partition manager sends each once (and
    /// all again when a host rejoins), and there are few.
    fn push(&self, i: Incoming) {
        lock(&self.inbound).push_back(i);
        self.inbound_cv.notify_one();
    }

    fn answer(&self, id: u64, a: Vec<u8>) {
        let mut g = lock(&self.answers);
        // Only one that is awaited: a late or unasked answer costs nothing.
        if let Some(slot) = g.get_mut(&id) {
            *slot = Some(a);
            self.answers_cv.notify_all();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Remote {
    pub link: Arc<dyn Link>,
    pub queries: Arc<Queries>,
    pub me: HostId,
    /// The host of every NI of the fabric.
    pub host_of: Vec<HostId>,
    pub names: Vec<String>,
    next_id: u64,
    ops: HashMap<u64, Op>,
    pulls: HashMap<(HostId, u64), Pull>,
    /// Payloads of eager messages and active messages from other hosts waiting here.
    payloads: Held,
    /// Our NIs' readiness and participation flags as last told to the other hosts.
    announced: Vec<(bool, u32)>,
    eager_out: Vec<u64>,
    pub up: Vec<bool>,
    pub counters: RemoteCounters,
    events: Vec<Event>,
    /// Contributions of other hosts' members arriving ahead of their JOIN, and their total.
    join_data: HashMap<(u32, u8, u64, u32), Vec<u8>>,
    join_bytes: usize,
    /// Messages of each host waiting here for a receive (their descriptions, eager or not).
    queued_in: Vec<usize>,
    /// Bytes asked of each host by PULLs and not yet arrived.
    pull_inflight: Vec<u64>,
    /// The newest SEND/AM/MQ id each host used since it joined: ids only grow, so a peer
    /// cannot name one that is waiting here twice.
    last_id_in: Vec<u64>,
    /// The partition manager: CHANGE frames come from it only.
    pub manager: HostId,
    /// Our members' JOINs of small rounds, waiting for the rest of our members.
    stash: Vec<Stash>,
    /// Network-done rounds (partition id, round) we said are quiet here, and the hosts
    /// that said so of theirs.
    quiet_sent: std::collections::HashSet<(u32, u64)>,
    quiet_from: HashMap<(u32, u64), Vec<HostId>>,
    warn: crate::link::WarnLimit,
}

impl Remote {
    /// The other hosts with NIs among `members`, each once.
    fn others(&self, members: &[u32]) -> Vec<HostId> {
        let mut hosts: Vec<HostId> = members
            .iter()
            .map(|&m| self.host_of[m as usize])
            .filter(|&h| h != self.me)
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        hosts
    }

    /// The ids of our operations `f` picks.
    fn ops_where(&self, f: impl Fn(&Op) -> bool) -> Vec<u64> {
        self.ops
            .iter()
            .filter(|(_, o)| f(o))
            .map(|(&id, _)| id)
            .collect()
    }

    /// The pulls `f` picks.
    fn pulls_where(&self, f: impl Fn(&Pull) -> bool) -> Vec<(HostId, u64)> {
        self.pulls
            .iter()
            .filter(|(_, p)| f(p))
            .map(|(&k, _)| k)
            .collect()
    }

    pub fn new(
        link: Arc<dyn Link>,
        me: HostId,
        host_of: Vec<HostId>,
        names: Vec<String>,
    ) -> Remote {
        let hosts = names.len();
        Remote {
            link,
            queries: Arc::new(Queries::default()),
            me,
            announced: vec![(false, 0); host_of.len()],
            host_of,
            names,
            next_id: 1,
            ops: HashMap::new(),
            pulls: HashMap::new(),
            payloads: Held::new(hosts),
            eager_out: vec![0; hosts],
            up: vec![false; hosts],
            counters: RemoteCounters::default(),
            events: Vec::new(),
            join_data: HashMap::new(),
            join_bytes: 0,
            queued_in: vec![0; hosts],
            pull_inflight: vec![0; hosts],
            last_id_in: vec![0; hosts],
            manager: 0,
            stash: Vec::new(),
            quiet_sent: Default::default(),
            quiet_from: HashMap::new(),
            warn: Default::default(),
        }
    }
}

fn status_of(v: u16) -> Status {
    Status::from_u16(v).unwrap_or(Status::BadDescriptor)
}

impl State {
    /// The host NI `n` is on, when it is not this daemon's.
    pub(super) fn other_host(&self, n: usize) -> Option<HostId> {
        let r = self.remote.as_ref()?;
        let h = *r.host_of.get(n)?;
        (h != r.me).then_some(h)
    }

    /// Whether partition `members` has one on another host.
    pub(super) fn spans_hosts(&self, members: &[u32]) -> bool {
        members
            .iter()
            .any(|&m| self.other_host(m as usize).is_some())
    }

    pub(super) fn frame(&mut self, host: HostId, m: Msg) -> bool {
        let r = self.remote.as_mut().expect("remote");
        r.link.send(host, &m)
    }

    pub(super) fn fresh_id(&mut self) -> u64 {
        let r = self.remote.as_mut().expect("remote");
        let id = r.next_id;
        r.next_id += 1;
        id
    }

    /// SEND from local NI `a` to NI `b` on another host (checked as a local one is).
    pub(super) fn remote_send(
        &mut self,
        a: usize,
        b: usize,
        r: &Request,
    ) -> Result<Option<Completion>, Status> {
        let host = self.other_host(b).expect("remote peer");
        let rm = self.remote.as_ref().expect("remote");
        let eager = r.len <= EAGER_MAX && rm.eager_out[host as usize] + r.len <= EAGER_BUDGET;
        let mut payload = Vec::new();
        if eager {
            payload.resize(r.len as usize, 0);
            read_dma(&self.nodes[a].dma)
                .read(r.addr, &mut payload)
                .map_err(|_| Status::NotRegistered)?;
        }
        let id = self.fresh_id();
        let m = Msg::Send {
            id,
            src: a as u32,
            dst: b as u32,
            src_rank: self.partitions.rank_size(a as u32).0,
            tag: r.tag,
            len: r.len,
            eager,
            payload,
        };
        if !self.frame(host, m) {
            return Err(Status::LinkDown);
        }
        let e = if eager { r.len } else { 0 };
        let rm = self.remote.as_mut().expect("remote");
        rm.eager_out[host as usize] += e;
        rm.counters.sends_out += 1;
        if !eager {
            rm.counters.rendezvous += 1;
        }
        rm.ops.insert(
            id,
            Op::Send {
                a,
                dst: b,
                host,
                r: *r,
                eager: e,
            },
        );
        let n = &mut self.nodes[a];
        n.counters.sends += 1;
        n.outstanding += 1;
        n.dr_message_count += 1;
        Ok(None)
    }

    /// ROP or MQ_SEND of local NI `a` to NI `b` on another host (checked as a local one is
    /// up to what the target holds: its handler ring, its queue).
    pub(super) fn remote_small(
        &mut self,
        a: usize,
        b: usize,
        r: &Request,
    ) -> Result<Option<Completion>, Status> {
        let host = self.other_host(b).expect("remote peer");
        let mut payload = vec![0u8; r.len as usize];
        read_dma(&self.nodes[a].dma)
            .read(r.addr, &mut payload)
            .map_err(|_| Status::NotRegistered)?;
        let id = self.fresh_id();
        let m = if r.opcode == op::ROP {
            Msg::Am {
                id,
                src: a as u32,
                dst: b as u32,
                src_rank: self.rank_of(a),
                handler: r.mask,
                payload,
            }
        } else {
            Msg::Mq {
                id,
                src: a as u32,
                dst: b as u32,
                key: r.key,
                offset: r.tag,
                payload,
            }
        };
        if !self.frame(host, m) {
            return Err(Status::LinkDown);
        }
        self.remote.as_mut().expect("remote").ops.insert(
            id,
            Op::Small {
                a,
                dst: b,
                host,
                r: *r,
            },
        );
        let c = &mut self.nodes[a].counters;
        if r.opcode == op::ROP {
            c.rops += 1;
        } else {
            c.mq_sends += 1;
        }
        self.nodes[a].outstanding += 1;
        Ok(None)
    }

    /// Write the payload of active message `k` of another host into NI `b` at `at`.
    pub(super) fn remote_am_payload(&mut self, k: (HostId, u64), b: usize, at: u64) -> bool {
        let Some(p) = self.remote.as_mut().and_then(|r| r.payloads.remove(&k)) else {
            return false;
        };
        read_dma(&self.nodes[b].dma).write(at, &p).is_ok()
    }

    /// Tell the host of operation `k` how it ended here.
    pub(super) fn remote_answer(&mut self, k: (HostId, u64), status: Status, aux: u64) {
        if let Some(rm) = self.remote.as_mut() {
            rm.payloads.remove(&k);
            rm.link.send(
                k.0,
                &Msg::Done {
                    id: k.1,
                    status: status as u16,
                    dst_rank: 0,
                    len: 0,
                    aux,
                },
            );
        }
    }

    /// PUT or GET of local NI `a` at NI `b` on another host.
    pub(super) fn remote_one_sided(
        &mut self,
        a: usize,
        b: usize,
        r: &Request,
        put: bool,
    ) -> Result<Option<Completion>, Status> {
        let host = self.other_host(b).expect("remote peer");
        if !self.remote.as_ref().expect("remote").up[host as usize] {
            return Err(Status::LinkDown);
        }
        let id = self.fresh_id();
        let rm = self.remote.as_mut().expect("remote");
        if put {
            rm.counters.puts_out += 1;
        } else {
            rm.counters.gets_out += 1;
        }
        rm.ops.insert(
            id,
            Op::OneSided {
                a,
                dst: b,
                host,
                r: *r,
                put,
                next: 0,
                answered: 0,
            },
        );
        self.nodes[a].outstanding += 1;
        self.issue_chunks(id);
        Ok(None)
    }

    /// Send the next chunks of one-sided operation `id` its window and the link allow.
    fn issue_chunks(&mut self, id: u64) -> bool {
        let mut issued = false;
        loop {
            let rm = self.remote.as_mut().expect("remote");
            let Some(Op::OneSided {
                a,
                dst,
                host,
                r,
                put,
                next,
                answered,
            }) = rm.ops.get(&id)
            else {
                return issued;
            };
            let (a, dst, host, r, put, k) = (*a, *dst, *host, *r, *put, *next);
            if k >= chunks(r.len) || k - answered >= WINDOW || rm.link.queued(host) > QUEUE_MAX {
                return issued;
            }
            let at = k * CHUNK as u64;
            let n = (r.len - at).min(CHUNK as u64);
            let m = if put {
                let mut payload = vec![0u8; n as usize];
                if read_dma(&self.nodes[a].dma)
                    .read(r.addr + at, &mut payload)
                    .is_err()
                {
                    self.finish_op(id, Status::NotRegistered);
                    return true;
                }
                Msg::Put {
                    id,
                    src: a as u32,
                    dst: dst as u32,
                    key: r.key,
                    offset: r.tag + at,
                    payload,
                }
            } else {
                Msg::Get {
                    id,
                    src: a as u32,
                    dst: dst as u32,
                    key: r.key,
                    offset: r.tag + at,
                    len: n as u32,
                }
            };
            if !self.frame(host, m) {
                self.finish_op(id, Status::LinkDown);
                return true;
            }
            issued = true;
            let rm = self.remote.as_mut().expect("remote");
            rm.counters.chunks_out += 1;
            if let Some(Op::OneSided { next, .. }) = rm.ops.get_mut(&id) {
                *next += 1;
            }
        }
    }

    /// End operation `id` of ours with `status`, completing it at its NI.
    fn finish_op(&mut self, id: u64, status: Status) {
        let rm = self.remote.as_mut().expect("remote");
        let Some(op) = rm.ops.remove(&id) else {
            return;
        };
        match status {
            Status::LinkDown => rm.counters.failed_link_down += 1,
            Status::PeerDown => rm.counters.failed_peer_down += 1,
            _ => {}
        }
        match op {
            Op::Send {
                a, host, r, eager, ..
            } => {
                rm.eager_out[host as usize] -= eager;
                let n = &mut self.nodes[a];
                n.outstanding -= 1;
                if status != Status::Ok {
                    n.dr_message_count -= 1;
                    self.fail(a, &r, status);
                }
            }
            Op::Small { a, r, .. } => {
                self.nodes[a].outstanding -= 1;
                if status != Status::Ok {
                    self.fail(a, &r, status);
                }
            }
            Op::OneSided { a, r, put, .. } => {
                self.nodes[a].outstanding -= 1;
                if status == Status::Ok {
                    let c = &mut self.nodes[a].counters;
                    if put {
                        c.puts += 1;
                        c.put_bytes += r.len;
                        c.p0_packets_sent += 1;
                        c.p0_bytes_sent += r.len;
                    } else {
                        c.gets += 1;
                        c.get_bytes += r.len;
                        c.p0_packets_rcvd += 1;
                        c.p0_bytes_rcvd += r.len;
                    }
                    if let Some(c) = super::ops::done(&r) {
                        self.complete(a, c);
                    }
                } else {
                    self.fail(a, &r, status);
                }
            }
        }
    }

    /// Pair a message of another host (`s`, at `unexpected[i]` of NI `b`) with receive
    /// `recvs[j]`: copy an eager one now, start pulling a rendezvous one.
    pub(super) fn remote_match(&mut self, b: usize, i: usize, j: usize) {
        let s = self.nodes[b].unexpected.remove(i).expect("matched message");
        let rv = self.nodes[b].recvs.remove(j).expect("matched receive");
        let (host, id) = s.remote.expect("a message of another host");
        self.unqueue((host, id));
        let n = s.len.min(rv.len);
        let rm = self.remote.as_mut().expect("remote");
        if let Some(payload) = rm.payloads.remove(&(host, id)) {
            let ok = payload
                .get(..n as usize)
                .is_some_and(|p| read_dma(&self.nodes[b].dma).write(rv.addr, p).is_ok());
            self.remote_received(
                b,
                &s,
                &rv,
                if ok {
                    Status::Ok
                } else {
                    Status::NotRegistered
                },
            );
            return;
        }
        if n == 0 {
            self.remote_received(b, &s, &rv, Status::Ok);
            return;
        }
        rm.pulls.insert(
            (host, id),
            Pull {
                b,
                s,
                rv,
                n,
                next: 0,
                got: 0,
            },
        );
        self.issue_pulls(host, id);
    }

    /// Ask for the next chunks of pull `(host, id)` its window, the host's share and the
    /// link allow; whether any was asked for.
    fn issue_pulls(&mut self, host: HostId, id: u64) -> bool {
        let mut issued = false;
        loop {
            let rm = self.remote.as_mut().expect("remote");
            let Some(p) = rm.pulls.get_mut(&(host, id)) else {
                return issued;
            };
            if p.next >= p.n
                || p.next - p.got >= WINDOW * CHUNK as u64
                || rm.pull_inflight[host as usize] >= PULL_INFLIGHT_MAX
                || rm.link.queued(host) > QUEUE_MAX
            {
                return issued;
            }
            let len = (p.n - p.next).min(CHUNK as u64);
            let offset = p.next;
            p.next += len;
            rm.pull_inflight[host as usize] += len;
            issued = true;
            if !rm.link.send(
                host,
                &Msg::Pull {
                    id,
                    offset,
                    len: len as u32,
                },
            ) {
                // The link-down event that follows fails it.
                return issued;
            }
        }
    }

    /// Take pull `k` out (failed, done, or its receiver gone), giving back what it had asked.
    fn take_pull(&mut self, k: (HostId, u64)) -> Option<Pull> {
        let rm = self.remote.as_mut()?;
        let p = rm.pulls.remove(&k)?;
        let f = &mut rm.pull_inflight[k.0 as usize];
        *f = f.saturating_sub(p.next - p.got);
        Some(p)
    }

    /// Message `s` of another host reached receive `rv` of NI `b` (or failed to, `status`):
    /// complete the receive here and tell the sender's host.
    fn remote_received(&mut self, b: usize, s: &PendingSend, rv: &PostedRecv, status: Status) {
        let (host, id) = s.remote.expect("remote message");
        let n = s.len.min(rv.len);
        self.nodes[b].outstanding -= 1;
        let dst_rank = self.rank_of(b);
        if status == Status::Ok {
            let c = &mut self.nodes[b].counters;
            c.p0_packets_rcvd += 1;
            c.p0_bytes_rcvd += n;
            self.recv_done(b, s, rv);
        } else {
            let r = super::admin::recv_request(rv);
            self.fail(b, &r, status);
        }
        self.frame(
            host,
            Msg::Done {
                id,
                status: status as u16,
                dst_rank,
                len: n,
                aux: 0,
            },
        );
    }

    pub(super) fn bad_frame(&mut self, host: HostId, what: &str) {
        let rm = self.remote.as_mut().expect("remote");
        rm.counters.bad_frames += 1;
        // A hostile peer must not flood the log: once a second, with what was left out.
        if let Some(skipped) = rm.warn.allow() {
            tracing::warn!(host = %rm.names[host as usize], skipped, "link: refused a frame: {what}");
        }
    }

    /// Whether `id` is newer than every SEND/AM/MQ id `h` used before (and note it).
    fn fresh_from(&mut self, h: HostId, id: u64) -> bool {
        let last = &mut self.remote.as_mut().expect("remote").last_id_in[h as usize];
        if id <= *last {
            return false;
        }
        *last = id;
        true
    }

    /// Message `k` of another host no longer waits here.
    pub(super) fn unqueue(&mut self, k: (HostId, u64)) {
        if let Some(q) = self
            .remote
            .as_mut()
            .and_then(|r| r.queued_in.get_mut(k.0 as usize))
        {
            *q = q.saturating_sub(1);
        }
    }

    /// Whether NI `n` is one of ours with a client ready, for a frame from `host` about it.
    pub(super) fn ours(&self, n: u32) -> bool {
        self.other_host(n as usize).is_none() && (n as usize) < self.nodes.len()
    }

    /// Whether NIs `a` and `b` are in one partition: what another host may ask of ours is
    /// what one of its NIs could ask locally.
    pub(super) fn partners(&self, a: u32, b: u32) -> bool {
        match (self.partitions.of(a), self.partitions.of(b)) {
            (Some((p, _)), Some((q, _))) => p.name == q.name,
            _ => false,
        }
    }

    pub(super) fn hosted_by(&self, n: u32, host: HostId) -> bool {
        self.remote
            .as_ref()
            .and_then(|r| r.host_of.get(n as usize))
            .is_some_and(|&h| h == host)
    }

    /// Events of the link, and READY for what changed here: one pass of the poller.
    pub(super) fn pump_link(&mut self) -> bool {
        let Some(rm) = self.remote.as_mut() else {
            return false;
        };
        let mut events = std::mem::take(&mut rm.events);
        rm.link.poll(&mut events);
        let mut work = !events.is_empty();
        for e in events.drain(..) {
            match e {
                Event::Up(h) => self.host_up(h),
                Event::Down(h, why) => self.host_down(h, &why),
                Event::Frame(h, m) => self.on_frame(h, m),
            }
        }
        self.remote.as_mut().expect("remote").events = events;
        work |= self.announce();
        work |= self.resume_chunks();
        self.flush_joins();
        work
    }

    /// Tell every host about our NIs whose readiness or participation flags changed.
    fn announce(&mut self) -> bool {
        let mut changed = Vec::new();
        let rm = self.remote.as_ref().expect("remote");
        for i in 0..self.nodes.len() {
            if rm.host_of[i] != rm.me {
                continue;
            }
            let ready = self.nodes[i].ready;
            // Flags matter only while there is a client (they reset with it).
            let flags = if ready { self.flags(i) } else { 0 };
            if (ready, flags) != rm.announced[i] {
                changed.push((i, ready, flags));
            }
        }
        if changed.is_empty() {
            return false;
        }
        let rm = self.remote.as_mut().expect("remote");
        for (i, ready, flags) in changed {
            rm.announced[i] = (ready, flags);
            for h in 0..rm.up.len() {
                if rm.up[h] {
                    rm.link.send(
                        h as HostId,
                        &Msg::Ready {
                            node: i as u32,
                            ready,
                            flags,
                        },
                    );
                }
            }
        }
        true
    }

    /// Operations held back by a full link queue: issue what now fits.
    fn resume_chunks(&mut self) -> bool {
        let rm = self.remote.as_ref().expect("remote");
        let waiting: Vec<u64> = rm
            .ops
            .iter()
            .filter_map(|(&id, op)| match op {
                Op::OneSided { r, next, .. } if *next < chunks(r.len) => Some(id),
                _ => None,
            })
            .collect();
        let pulls: Vec<(HostId, u64)> = rm.pulls_where(|p| p.next < p.n);
        // Work only when something went out: operations that wait for answers alone must let
        // the poller sleep.
        let mut work = false;
        for id in waiting {
            work |= self.issue_chunks(id);
        }
        for (h, id) in pulls {
            work |= self.issue_pulls(h, id);
        }
        work
    }

    fn host_up(&mut self, h: HostId) {
        let rm = self.remote.as_mut().expect("remote");
        rm.up[h as usize] = true;
        // A daemon that rejoins may have restarted: its ids start again.
        rm.last_id_in[h as usize] = 0;
        tracing::info!(host = %rm.names[h as usize], "host joined the fabric");
        rm.queries.push(Incoming::HostUp(h));
        // What it must know of ours: every NI with a client.
        for i in 0..self.nodes.len() {
            let (ready, flags) = rm.announced[i];
            if rm.host_of[i] == rm.me && ready {
                rm.link.send(
                    h,
                    &Msg::Ready {
                        node: i as u32,
                        ready,
                        flags,
                    },
                );
            }
        }
    }

    fn host_down(&mut self, h: HostId, why: &str) {
        let rm = self.remote.as_mut().expect("remote");
        rm.up[h as usize] = false;
        tracing::info!(host = %rm.names[h as usize], "host left the fabric: {why}");
        let theirs: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.remote.as_ref().unwrap().host_of[i] == h)
            .collect();
        for x in theirs {
            self.remote_node_gone(x, Status::LinkDown);
        }
        let rm = self.remote.as_mut().expect("remote");
        rm.payloads.drop_host(h);
        rm.eager_out[h as usize] = 0;
        self.doors_host_down(h);
        let rm = self.remote.as_mut().expect("remote");
        rm.queued_in[h as usize] = 0;
        // Contributions it had started to send will not be finished.
        let parts: Vec<(u32, Vec<u32>)> = self
            .partitions
            .list()
            .map(|p| (p.id, p.nodes.clone()))
            .collect();
        let rm = self.remote.as_mut().expect("remote");
        let host_of = &rm.host_of;
        let mut freed = 0;
        rm.join_data.retain(|&(pid, _, _, rank), d| {
            let theirs = parts
                .iter()
                .find(|(id, _)| *id == pid)
                .and_then(|(_, m)| m.get(rank as usize))
                .is_some_and(|&n| host_of[n as usize] == h);
            if theirs {
                freed += d.len();
            }
            !theirs
        });
        rm.join_bytes -= freed;
    }

    /// NI `x` of another host is gone (its client, or its host): fail what waited on it.
    fn remote_node_gone(&mut self, x: usize, status: Status) {
        let was_ready = std::mem::replace(&mut self.nodes[x].ready, false);
        let rm = self.remote.as_mut().expect("remote");
        let ids: Vec<u64> = rm.ops_where(|o| o.dst() == x);
        for id in ids {
            self.finish_op(id, status);
        }
        let rm = self.remote.as_mut().expect("remote");
        let keys: Vec<(HostId, u64)> = rm.pulls_where(|p| p.s.src == x);
        for k in keys {
            let p = self.take_pull(k).expect("pull");
            if status == Status::PeerDown {
                // Its host is there to hear it (it may only have lost its client for a while).
                self.remote_answer(k, status, 0);
            }
            self.nodes[p.b].outstanding -= 1;
            let r = super::admin::recv_request(&p.rv);
            self.fail(p.b, &r, status);
        }
        for j in 0..self.nodes.len() {
            if self.other_host(j).is_some() {
                continue;
            }
            let n = &mut self.nodes[j];
            let before = n.unexpected.len();
            let mut dropped = Vec::new();
            n.unexpected.retain(|s| {
                let keep = s.src != x;
                if !keep {
                    dropped.push(s.remote);
                }
                keep
            });
            let _ = before;
            for k in dropped.drain(..).flatten() {
                self.unqueue(k);
                if status == Status::PeerDown {
                    self.remote_answer(k, status, 0);
                } else if let Some(rm) = self.remote.as_mut() {
                    rm.payloads.remove(&k);
                }
            }
            let n = &mut self.nodes[j];
            let mut ams = 0;
            n.am_waiting.retain(|m| {
                let keep = m.src != x;
                if !keep {
                    ams += 1;
                    dropped.push(m.remote);
                }
                keep
            });
            self.nodes[x].outstanding -= ams;
            if let Some(rm) = self.remote.as_mut() {
                for k in dropped.drain(..).flatten() {
                    rm.payloads.remove(&k);
                }
            }
            let n = &mut self.nodes[j];
            let (dead, live): (Vec<PostedRecv>, Vec<PostedRecv>) =
                n.recvs.drain(..).partition(|r| r.from == Some(x));
            n.recvs = live.into();
            n.outstanding -= dead.len();
            for rv in dead {
                let r = super::admin::recv_request(&rv);
                self.fail(j, &r, status);
            }
        }
        if was_ready {
            self.publish_peers_up();
            // Collectives need every member: what its partition had pending fails.
            self.reset_partition_colls(x, status);
        }
    }

    /// Fail the operations our NI `x` has in flight with other hosts (`cancel_involving`).
    pub(super) fn remote_cancel_origin(&mut self, x: usize, status: Status) {
        let Some(rm) = self.remote.as_ref() else {
            return;
        };
        let ids: Vec<u64> = rm.ops_where(|o| o.origin() == x);
        for id in ids {
            self.finish_op(id, status);
        }
    }

    /// Our NI `x` lost its client: drop its operations with other hosts, and answer the
    /// messages of other hosts it had not taken.
    pub(super) fn remote_local_gone(&mut self, x: usize, waiting: Vec<PendingSend>) {
        let Some(rm) = self.remote.as_mut() else {
            return;
        };
        let mine: Vec<u64> = rm.ops_where(|o| o.origin() == x);
        for id in mine {
            if let Some(Op::Send { host, eager, .. }) = rm.ops.remove(&id) {
                rm.eager_out[host as usize] -= eager;
            }
        }
        let pulls: Vec<(HostId, u64)> = rm.pulls_where(|p| p.b == x);
        let mut answers = Vec::new();
        for k in pulls {
            if let Some(p) = rm.pulls.remove(&k) {
                let f = &mut rm.pull_inflight[k.0 as usize];
                *f = f.saturating_sub(p.next - p.got);
            }
            answers.push(k);
        }
        for s in waiting {
            if let Some(k) = s.remote {
                if let Some(q) = rm.queued_in.get_mut(k.0 as usize) {
                    *q = q.saturating_sub(1);
                }
                rm.payloads.remove(&k);
                answers.push(k);
            }
        }
        for (host, id) in answers {
            rm.link.send(
                host,
                &Msg::Done {
                    id,
                    status: Status::PeerDown as u16,
                    dst_rank: 0,
                    len: 0,
                    aux: 0,
                },
            );
        }
    }

    fn on_frame(&mut self, h: HostId, m: Msg) {
        match m {
            Msg::Ready { node, ready, flags } => {
                if !self.hosted_by(node, h) {
                    return self.bad_frame(h, "READY for an NI it does not host");
                }
                self.nodes[node as usize].participation = flags;
                if ready {
                    if !self.nodes[node as usize].ready {
                        self.nodes[node as usize].ready = true;
                        self.publish_peers_up();
                    }
                } else {
                    self.remote_node_gone(node as usize, Status::PeerDown);
                }
            }
            Msg::Send {
                id,
                src,
                dst,
                src_rank: _,
                tag,
                len,
                eager,
                payload,
            } => {
                let answer = |st: Status| Msg::Done {
                    id,
                    status: st as u16,
                    dst_rank: 0,
                    len: 0,
                    aux: 0,
                };
                if !self.hosted_by(src, h)
                    || !self.ours(dst)
                    || (eager && payload.len() as u64 != len)
                {
                    self.bad_frame(h, "SEND that does not add up");
                    self.frame(h, answer(Status::BadDescriptor));
                    return;
                }
                if !self.partners(src, dst) {
                    self.bad_frame(h, "SEND between NIs of different partitions");
                    self.frame(h, answer(Status::OutOfPartition));
                    return;
                }
                if !self.fresh_from(h, id) {
                    // Not answered: the id names something of its own it is waiting for.
                    return self.bad_frame(h, "SEND with an id it used before");
                }
                // Its rank as our partition table says, not as the frame does.
                let src_rank = self.rank_of(src as usize);
                let b = dst as usize;
                if !self.nodes[b].ready {
                    self.frame(h, answer(Status::PeerDown));
                    return;
                }
                let rm = self.remote.as_mut().expect("remote");
                rm.counters.sends_in += 1;
                if rm.queued_in[h as usize] >= QUEUED_IN_MAX {
                    self.bad_frame(h, "messages past what a host may have waiting here");
                    self.frame(h, answer(Status::QueueFull));
                    return;
                }
                let rm = self.remote.as_mut().expect("remote");
                if eager && !rm.payloads.insert((h, id), payload) {
                    self.bad_frame(h, "eager messages past what a host may have held here");
                    self.frame(h, answer(Status::QueueFull));
                    return;
                }
                // Its sender's host counted it (CM-5 ni_dr_message_count: +1 at the sender,
                // -1 at the receiver when it arrives at a receive).
                self.remote.as_mut().expect("remote").queued_in[h as usize] += 1;
                self.nodes[b].unexpected.push_back(PendingSend {
                    src: src as usize,
                    src_rank,
                    user: 0,
                    addr: 0,
                    len,
                    tag,
                    remote: Some((h, id)),
                });
                self.match_at(b);
            }
            Msg::Pull { id, offset, len } => {
                let rm = self.remote.as_ref().expect("remote");
                let Some(Op::Send { a, r, host, .. }) = rm.ops.get(&id) else {
                    // Gone meanwhile (its sender left, or it was cancelled): say so, and the
                    // puller fails its receive instead of waiting for it.
                    let m = Msg::Data {
                        id,
                        offset,
                        status: Status::PeerDown as u16,
                        payload: Vec::new(),
                    };
                    self.frame(h, m);
                    return;
                };
                let (a, r) = (*a, *r);
                if *host != h
                    || len as usize > CHUNK
                    || offset.checked_add(len as u64).is_none_or(|e| e > r.len)
                {
                    self.bad_frame(h, "PULL outside its message");
                    return;
                }
                if rm.link.queued(h) > PULL_QUEUE_MAX {
                    self.bad_frame(h, "PULLs past what the link may have queued");
                    let m = Msg::Data {
                        id,
                        offset,
                        status: Status::QueueFull as u16,
                        payload: Vec::new(),
                    };
                    self.frame(h, m);
                    self.finish_op(id, Status::QueueFull);
                    return;
                }
                let mut payload = vec![0u8; len as usize];
                let status = match read_dma(&self.nodes[a].dma).read(r.addr + offset, &mut payload)
                {
                    Ok(()) => Status::Ok,
                    Err(_) => {
                        payload.clear();
                        Status::NotRegistered
                    }
                };
                self.remote.as_mut().unwrap().counters.chunks_out += 1;
                self.frame(
                    h,
                    Msg::Data {
                        id,
                        offset,
                        status: status as u16,
                        payload,
                    },
                );
                if status != Status::Ok {
                    self.finish_op(id, status);
                }
            }
            Msg::Data {
                id,
                offset,
                status,
                payload,
            } => {
                let rm = self.remote.as_mut().expect("remote");
                let Some(p) = rm.pulls.get_mut(&(h, id)) else {
                    return;
                };
                rm.counters.chunks_in += 1;
                let status = status_of(status);
                // Chunks come in the order they were asked for, and only those.
                let fits = offset == p.got && offset + payload.len() as u64 <= p.next;
                let (b, s, rv) = (p.b, p.s, p.rv);
                let ok = status == Status::Ok
                    && fits
                    && read_dma(&self.nodes[b].dma)
                        .write(rv.addr + offset, &payload)
                        .is_ok();
                if !fits && status == Status::Ok {
                    self.bad_frame(h, "DATA out of order or past its message");
                }
                if !ok {
                    self.take_pull((h, id));
                    let st = if status == Status::Ok {
                        Status::NotRegistered
                    } else {
                        status
                    };
                    self.remote_received(b, &s, &rv, st);
                    return;
                }
                let rm = self.remote.as_mut().expect("remote");
                let p = rm.pulls.get_mut(&(h, id)).expect("pull");
                p.got += payload.len() as u64;
                let f = &mut rm.pull_inflight[h as usize];
                *f = f.saturating_sub(payload.len() as u64);
                if p.got == p.n {
                    self.take_pull((h, id));
                    self.remote_received(b, &s, &rv, Status::Ok);
                } else {
                    self.issue_pulls(h, id);
                }
            }
            Msg::Done {
                id, status, aux, ..
            } => {
                let rm = self.remote.as_ref().expect("remote");
                if let Some(Op::Small { a, dst, host, r }) = rm.ops.get(&id) {
                    if *host != h {
                        return self.bad_frame(h, "DONE for another host's operation");
                    }
                    let (a, dst, r) = (*a, *dst, *r);
                    let status = status_of(status);
                    if status == Status::Ok {
                        let c = &mut self.nodes[a].counters;
                        c.p0_packets_sent += 1;
                        c.p0_bytes_sent += r.len;
                        let mut c = super::ops::done(&r).expect("a completion");
                        if r.opcode == op::ROP {
                            c.rank = self.rank_of(dst);
                            c.tag = r.mask;
                        } else {
                            c.aux = aux;
                        }
                        self.complete(a, c);
                    }
                    self.finish_op(id, status);
                    return;
                }
                let Some(Op::Send {
                    a, dst, host, r, ..
                }) = rm.ops.get(&id)
                else {
                    return;
                };
                if *host != h {
                    return self.bad_frame(h, "DONE for another host's message");
                }
                let (a, dst, r) = (*a, *dst, *r);
                let status = status_of(status);
                if status == Status::Ok {
                    let dst_rank = self.rank_of(dst);
                    let c = &mut self.nodes[a].counters;
                    c.send_bytes += r.len;
                    c.p0_packets_sent += 1;
                    c.p0_bytes_sent += r.len;
                    self.complete(
                        a,
                        Completion {
                            opcode: op::SEND,
                            status: Status::Ok as u16,
                            rank: dst_rank,
                            user: r.user,
                            len: r.len,
                            tag: r.tag,
                            ..Default::default()
                        },
                    );
                }
                self.finish_op(id, status);
            }
            Msg::Am {
                id,
                src,
                dst,
                src_rank: _,
                handler,
                payload,
            } => {
                if !self.hosted_by(src, h)
                    || !self.ours(dst)
                    || payload.len() as u64 > ni_abi::fastpath::AM_MAX_PAYLOAD
                {
                    self.bad_frame(h, "active message that does not add up");
                    return self.remote_answer((h, id), Status::BadDescriptor, 0);
                }
                if !self.partners(src, dst) {
                    self.bad_frame(h, "active message between NIs of different partitions");
                    return self.remote_answer((h, id), Status::OutOfPartition, 0);
                }
                if !self.fresh_from(h, id) {
                    return self.bad_frame(h, "active message with an id it used before");
                }
                let src_rank = self.rank_of(src as usize);
                let b = dst as usize;
                if !self.nodes[b].ready {
                    return self.remote_answer((h, id), Status::PeerDown, 0);
                }
                if self.nodes[b].am.is_none() {
                    return self.remote_answer((h, id), Status::NoHandlerRing, 0);
                }
                let len = payload.len() as u64;
                let rm = self.remote.as_mut().expect("remote");
                if !rm.payloads.insert((h, id), payload) {
                    // Its ring is that far behind: refused, as a full queue refuses.
                    return self.remote_answer((h, id), Status::QueueFull, 0);
                }
                // The stand-in counts it as its own would: delivery takes it off.
                self.nodes[src as usize].outstanding += 1;
                self.nodes[b].am_waiting.push_back(super::node::PendingAm {
                    src: src as usize,
                    src_rank,
                    user: 0,
                    addr: 0,
                    len,
                    handler,
                    remote: Some((h, id)),
                });
                self.flush_active_messages(b);
            }
            Msg::Mq {
                id,
                src,
                dst,
                key,
                offset,
                payload,
            } => {
                let Ok(msg) = <[u8; 64]>::try_from(payload.as_slice()) else {
                    self.bad_frame(h, "message-queue SEND not of 64 bytes");
                    return self.remote_answer((h, id), Status::BadLength, 0);
                };
                if !self.hosted_by(src, h) || !self.ours(dst) {
                    self.bad_frame(h, "message-queue SEND that does not add up");
                    return self.remote_answer((h, id), Status::BadDescriptor, 0);
                }
                if !self.partners(src, dst) {
                    self.bad_frame(h, "message-queue SEND between NIs of different partitions");
                    return self.remote_answer((h, id), Status::OutOfPartition, 0);
                }
                if !self.fresh_from(h, id) {
                    return self.bad_frame(h, "message-queue SEND with an id it used before");
                }
                let b = dst as usize;
                if !self.nodes[b].ready {
                    return self.remote_answer((h, id), Status::PeerDown, 0);
                }
                // A partition that spans hosts has no window, so no member holds a lock
                // of its queues; should one be held anyway, the sender hears it timed out.
                let arrival = self
                    .mq_arrive(b, key, offset, &msg)
                    .unwrap_or(Err(Status::Timeout));
                match arrival {
                    Ok(tail) => {
                        let c = &mut self.nodes[b].counters;
                        c.p0_packets_rcvd += 1;
                        c.p0_bytes_rcvd += 64;
                        self.remote_answer((h, id), Status::Ok, tail)
                    }
                    Err(st) => self.remote_answer((h, id), st, 0),
                }
            }
            Msg::Put {
                id,
                src,
                dst,
                key,
                offset,
                payload,
            } => {
                if !self.hosted_by(src, h) || !self.ours(dst) {
                    self.bad_frame(h, "PUT that does not add up");
                    return;
                }
                if !self.partners(src, dst) {
                    self.bad_frame(h, "PUT between NIs of different partitions");
                    return self.refuse(h, id, offset, Status::OutOfPartition);
                }
                let status = self
                    .remote_access(
                        dst as usize,
                        key,
                        offset,
                        payload.len() as u64,
                        access::REMOTE_WRITE,
                    )
                    .and_then(|at| {
                        read_dma(&self.nodes[dst as usize].dma)
                            .write(at, &payload)
                            .map_err(|_| Status::OutOfBounds)
                    })
                    .err()
                    .unwrap_or(Status::Ok);
                self.remote.as_mut().unwrap().counters.chunks_in += 1;
                if status == Status::Ok {
                    let c = &mut self.nodes[dst as usize].counters;
                    c.p0_bytes_rcvd += payload.len() as u64;
                }
                self.frame(
                    h,
                    Msg::Reply {
                        id,
                        offset,
                        status: status as u16,
                        payload: Vec::new(),
                    },
                );
            }
            Msg::Get {
                id,
                src,
                dst,
                key,
                offset,
                len,
            } => {
                if !self.hosted_by(src, h) || !self.ours(dst) || len as usize > CHUNK {
                    self.bad_frame(h, "GET that does not add up");
                    return;
                }
                if self.remote.as_ref().expect("remote").link.queued(h) > PULL_QUEUE_MAX {
                    self.bad_frame(h, "GETs past what the link may have queued");
                    return self.refuse(h, id, offset, Status::QueueFull);
                }
                if !self.partners(src, dst) {
                    self.bad_frame(h, "GET between NIs of different partitions");
                    return self.refuse(h, id, offset, Status::OutOfPartition);
                }
                let mut payload = vec![0u8; len as usize];
                let status = self
                    .remote_access(dst as usize, key, offset, len as u64, access::REMOTE_READ)
                    .and_then(|at| {
                        read_dma(&self.nodes[dst as usize].dma)
                            .read(at, &mut payload)
                            .map_err(|_| Status::OutOfBounds)
                    })
                    .err()
                    .unwrap_or(Status::Ok);
                if status != Status::Ok {
                    payload.clear();
                } else {
                    self.nodes[dst as usize].counters.p0_bytes_sent += len as u64;
                }
                self.frame(
                    h,
                    Msg::Reply {
                        id,
                        offset,
                        status: status as u16,
                        payload,
                    },
                );
            }
            Msg::Reply {
                id,
                offset,
                status,
                payload,
            } => {
                let rm = self.remote.as_mut().expect("remote");
                let Some(Op::OneSided {
                    a,
                    host,
                    r,
                    put,
                    answered,
                    next,
                    ..
                }) = rm.ops.get(&id)
                else {
                    return;
                };
                if *host != h {
                    return self.bad_frame(h, "REPLY for another host's operation");
                }
                let (a, r, put, k, issued) = (*a, *r, *put, *answered, *next);
                let status = status_of(status);
                if status != Status::Ok {
                    self.finish_op(id, status);
                    return;
                }
                // Chunks are answered in the order they were sent (one link, one target).
                let at = k * CHUNK as u64;
                let n = (r.len - at.min(r.len)).min(CHUNK as u64);
                if k >= issued
                    || offset != r.tag.wrapping_add(at)
                    || (!put && payload.len() as u64 != n)
                {
                    self.bad_frame(h, "REPLY out of order or past its operation");
                    self.finish_op(id, Status::BadDescriptor);
                    return;
                }
                if !put
                    && read_dma(&self.nodes[a].dma)
                        .write(r.addr + at, &payload)
                        .is_err()
                {
                    self.finish_op(id, Status::NotRegistered);
                    return;
                }
                let rm = self.remote.as_mut().expect("remote");
                rm.counters.chunks_in += 1;
                if let Some(Op::OneSided { answered, .. }) = rm.ops.get_mut(&id) {
                    *answered += 1;
                    if *answered == chunks(r.len) {
                        self.finish_op(id, Status::Ok);
                        return;
                    }
                }
                self.issue_chunks(id);
            }
            Msg::Query { id, payload } => {
                let rm = self.remote.as_ref().expect("remote");
                if !rm.queries.question(h, id, payload) {
                    let busy = br#"{"result":"error","error":"too many questions waiting"}"#;
                    rm.link.send(
                        h,
                        &Msg::Answer {
                            id,
                            payload: busy.to_vec(),
                        },
                    );
                }
            }
            Msg::Change { seq, payload } => {
                let rm = self.remote.as_ref().expect("remote");
                if h != rm.manager {
                    return self
                        .bad_frame(h, "CHANGE from a host that is not the partition manager");
                }
                rm.queries.push(Incoming::Change(h, seq, payload));
            }
            Msg::Answer { id, payload } => {
                self.remote
                    .as_ref()
                    .expect("remote")
                    .queries
                    .answer(id, payload);
            }
            Msg::Join {
                pid,
                kind,
                seq,
                rank,
                flags,
                req,
                words,
                payload,
            } => self.on_join(h, pid, kind, seq, rank, flags, &req, &words, payload),
            Msg::JoinData {
                pid,
                kind,
                seq,
                rank,
                payload,
            } => {
                if self.span_member(h, pid, rank).is_none() {
                    return self.bad_frame(h, "JOIN_DATA for no member of its host");
                }
                let rm = self.remote.as_mut().expect("remote");
                if rm.join_bytes + payload.len() > JOIN_BUFFER_MAX {
                    return self.bad_frame(h, "collective contributions past the buffer limit");
                }
                rm.join_bytes += payload.len();
                rm.join_data
                    .entry((pid, kind, seq, rank))
                    .or_default()
                    .extend_from_slice(&payload);
            }
            Msg::Global {
                pid,
                rank,
                sup,
                bit,
            } => match self.span_member(h, pid, rank) {
                Some((name, members, _)) => {
                    self.apply_global(&name, &members, rank as usize, sup, bit)
                }
                None => self.bad_frame(h, "GLOBAL for no member of its host"),
            },
            Msg::Door {
                id,
                door,
                src,
                dst,
                more,
                words,
                payload,
            } => self.on_door(h, id, door, src, dst, more, words, payload),
            Msg::DoorAnswer {
                id,
                door,
                words,
                payload,
            } => {
                self.remote.as_mut().expect("remote").counters.doors_in += 1;
                self.on_door_answer(h, id, door, &words, &payload)
            }
            Msg::Quiet { pid, seq } => {
                let p = self.partitions.list().find(|p| p.id == pid);
                let theirs = p.is_some_and(|p| p.nodes.iter().any(|&n| self.hosted_by(n, h)));
                let rm = self.remote.as_mut().expect("remote");
                if !theirs || rm.quiet_from.len() >= QUIET_MAX {
                    return self.bad_frame(h, "QUIET for no partition of its host");
                }
                let from = rm.quiet_from.entry((pid, seq)).or_default();
                if !from.contains(&h) {
                    from.push(h);
                }
                // Now, before the frames after it: the host may complete the round and its
                // members leave, and their READY false must not fail a round that is over.
                if let Some(name) = p.map(|p| p.name.clone()) {
                    self.advance(&name);
                }
            }
            Msg::Hello { .. } | Msg::Heartbeat => {}
        }
    }

    /// What a collective of a partition that spans hosts needs beyond a local one.
    pub(super) fn span_check(&self, members: &[u32], k: Kind, r: &Request) -> Result<(), Status> {
        let rm = self.remote.as_ref().expect("remote");
        for &m in members {
            let h = rm.host_of[m as usize];
            if h != rm.me && !rm.up[h as usize] {
                return Err(Status::LinkDown);
            }
        }
        if k == Kind::Vector {
            let esize = ni_abi::fastpath::dtype::size(r.access & 0xFF).unwrap_or(0);
            if r.len.saturating_mul(esize) > SPAN_DATA_MAX {
                return Err(Status::BadLength);
            }
        }
        Ok(())
    }

    /// Our member `rank` joined round `seq` of `k` in partition `name`: tell the partition's
    /// other hosts, with the contribution they need.
    pub(super) fn span_join(
        &mut self,
        name: &str,
        members: &[u32],
        k: Kind,
        seq: u64,
        rank: usize,
        e: &Entry,
    ) {
        let Some(pid) = self.partitions.get(name).map(|p| p.id) else {
            return;
        };
        let data = if k == Kind::Vector {
            use ni_abi::fastpath::coll;
            let r = e.req;
            let bytes = r.len * ni_abi::fastpath::dtype::size(r.access & 0xFF).unwrap_or(0);
            let needed = match r.flags {
                coll::BARRIER => false,
                coll::BCAST => rank == r.rank as usize,
                _ => true,
            };
            let mut d = vec![0u8; if needed { bytes as usize } else { 0 }];
            if !d.is_empty()
                && read_dma(&self.nodes[e.node].dma)
                    .read(r.addr, &mut d)
                    .is_err()
            {
                // Checked at the join; unmapped since. The round fails on its own hosts
                // when they find the bytes missing.
                d.clear();
            }
            d
        } else {
            Vec::new()
        };
        let flags = self.flags(e.node);
        let rm = self.remote.as_mut().expect("remote");
        let hosts = rm.others(members);
        let chunks: Vec<&[u8]> = if data.is_empty() {
            vec![&[][..]]
        } else {
            data.chunks(CHUNK).collect()
        };
        let (last, rest) = chunks.split_last().expect("one chunk at least");
        let mut frames: Vec<Msg> = rest
            .iter()
            .map(|c| Msg::JoinData {
                pid,
                kind: kind_code(k),
                seq,
                rank: rank as u32,
                payload: c.to_vec(),
            })
            .collect();
        frames.push(Msg::Join {
            pid,
            kind: kind_code(k),
            seq,
            rank: rank as u32,
            flags,
            req: e.req.encode().to_vec(),
            words: e.words.to_vec(),
            payload: last.to_vec(),
        });
        if data.len() > STASH_DATA_MAX {
            // Large contributions go at once: their bytes are the round's cost.
            for h in hosts {
                rm.link.send_all(h, &frames);
                rm.counters.joins_out += 1;
            }
            return;
        }
        // Small ones wait for the host's other members of the round, and all go in one
        // write: one packet per host per round.
        let key = (pid, kind_code(k), seq);
        match rm.stash.iter_mut().find(|x| x.key == key) {
            Some(x) => x.frames.extend(frames),
            None => rm.stash.push(Stash {
                key,
                name: name.to_string(),
                k,
                hosts,
                frames,
                since: Instant::now(),
            }),
        }
        self.flush_joins();
    }

    /// Send the stashed JOINs of every round whose members here have all joined (or that
    /// waited [`STASH_WAIT`]: a member may have left or started abstaining meanwhile).
    pub(super) fn flush_joins(&mut self) {
        let Some(rm) = self.remote.as_ref() else {
            return;
        };
        if rm.stash.is_empty() {
            return;
        }
        let done: Vec<usize> = rm
            .stash
            .iter()
            .enumerate()
            .filter(|(_, x)| x.since.elapsed() >= STASH_WAIT || self.joined_here(x))
            .map(|(i, _)| i)
            .collect();
        let rm = self.remote.as_mut().expect("remote");
        for i in done.into_iter().rev() {
            let x = rm.stash.swap_remove(i);
            let joins = x
                .frames
                .iter()
                .filter(|m| matches!(m, Msg::Join { .. }))
                .count() as u64;
            for &h in &x.hosts {
                rm.link.send_all(h, &x.frames);
                rm.counters.joins_out += joins;
            }
        }
    }

    /// Whether every member on this host that round `x` needs has joined it.
    fn joined_here(&self, x: &Stash) -> bool {
        let (_, _, seq) = x.key;
        let Some(p) = self.partitions.get(&x.name) else {
            return true;
        };
        let Some(rs) = self.colls.get(&x.name).and_then(|pc| pc.rounds.get(&x.k)) else {
            return true;
        };
        let Some(round) = seq
            .checked_sub(rs.base)
            .and_then(|i| rs.rounds.get(i as usize))
        else {
            // Completed here already (its other members abstained).
            return true;
        };
        p.nodes.iter().enumerate().all(|(r, &m)| {
            self.other_host(m as usize).is_some()
                || round.entries.get(r).is_some_and(|e| e.is_some())
                || !self.round_needs(x.k, m as usize)
        })
    }

    /// Partition `pid`'s rounds of kind `k` restart from 0: drop our stashed JOINs and the
    /// network-done state of the old ones.
    pub(super) fn forget_span_rounds(&mut self, pid: u32, k: Kind) {
        let Some(rm) = self.remote.as_mut() else {
            return;
        };
        rm.stash
            .retain(|x| (x.key.0, x.key.1) != (pid, kind_code(k)));
        if k == Kind::Combine {
            rm.quiet_sent.retain(|&(p, _)| p != pid);
            rm.quiet_from.retain(|&(p, _), _| p != pid);
        }
    }

    /// Messages of `members` between hosts: our members' SENDs to other hosts not yet
    /// received there, and their CM-5 messages on the link or held here.
    pub(super) fn in_flight_across(&self, members: &[u32]) -> usize {
        let Some(rm) = self.remote.as_ref() else {
            return 0;
        };
        let sends = rm
            .ops
            .values()
            .filter(|o| matches!(o, Op::Send { a, .. } if members.contains(&(*a as u32))))
            .count();
        sends + self.doors_in_flight(members)
    }

    /// Whether this host said network-done round `seq` of partition `name` is quiet here.
    pub(super) fn quiet_declared(&self, name: &str, seq: u64) -> bool {
        let (Some(p), Some(rm)) = (self.partitions.get(name), self.remote.as_ref()) else {
            return false;
        };
        rm.quiet_sent.contains(&(p.id, seq))
    }

    /// Network-done round `seq` of partition `name` is ready here (every member joined,
    /// nothing counted here is in the network): tell the partition's other hosts once, and
    /// say whether every one of them has said the same. A message sent before its sender
    /// joined is counted by its sender's host until the receiver's host has it received, so
    /// when every host has been quiet once, every message of the round has arrived.
    pub(super) fn span_quiet(&mut self, name: &str, seq: u64) -> bool {
        let Some(p) = self.partitions.get(name) else {
            return false;
        };
        let pid = p.id;
        let rm = self.remote.as_mut().expect("remote");
        let hosts = rm.others(&p.nodes);
        if rm.quiet_sent.insert((pid, seq)) {
            for &h in &hosts {
                rm.link.send(h, &Msg::Quiet { pid, seq });
            }
        }
        let from = rm.quiet_from.get(&(pid, seq));
        let all = hosts.iter().all(|h| from.is_some_and(|f| f.contains(h)));
        if all {
            rm.quiet_sent.remove(&(pid, seq));
            rm.quiet_from.remove(&(pid, seq));
        }
        all
    }

    /// Our member `rank` set its async global: tell the partition's other hosts.
    pub(super) fn span_global(
        &mut self,
        name: &str,
        members: &[u32],
        rank: usize,
        sup: bool,
        bit: bool,
    ) {
        let Some(pid) = self.partitions.get(name).map(|p| p.id) else {
            return;
        };
        let rm = self.remote.as_ref().expect("remote");
        for h in rm.others(members) {
            rm.link.send(
                h,
                &Msg::Global {
                    pid,
                    rank: rank as u32,
                    sup,
                    bit,
                },
            );
        }
    }

    /// The partition `pid` names and `rank`'s NI in it, if that NI is on host `h`.
    fn span_member(&self, h: HostId, pid: u32, rank: u32) -> Option<(String, Vec<u32>, usize)> {
        let p = self.partitions.list().find(|p| p.id == pid)?;
        let node = *p.nodes.get(rank as usize)?;
        self.hosted_by(node, h)
            .then(|| (p.name.clone(), p.nodes.clone(), node as usize))
    }

    #[allow(clippy::too_many_arguments)]
    fn on_join(
        &mut self,
        h: HostId,
        pid: u32,
        kind: u8,
        seq: u64,
        rank: u32,
        flags: u32,
        req: &[u8],
        words: &[u32],
        payload: Vec<u8>,
    ) {
        let (Some((name, members, node)), Some(k), Ok(raw)) = (
            self.span_member(h, pid, rank),
            kind_of(kind),
            <&[u8; 64]>::try_from(req),
        ) else {
            return self.bad_frame(h, "JOIN for no member of its host");
        };
        if !members
            .iter()
            .any(|&m| self.other_host(m as usize).is_none())
        {
            // No member here: nothing here waits for its rounds.
            return self.bad_frame(h, "JOIN for a partition with no member on this host");
        }
        let mut req = Request::decode(raw);
        let want = match join_data_len(k, &req, members.len(), rank) {
            Some(n) => n,
            None => return self.bad_frame(h, "JOIN with a request its host would have refused"),
        };
        // Its addresses mean nothing here: offsets from zero.
        req.addr = 0;
        req.tag = if k == Kind::Vector { 0 } else { req.tag };
        let rm = self.remote.as_mut().expect("remote");
        rm.counters.joins_in += 1;
        let mut data = rm
            .join_data
            .remove(&(pid, kind, seq, rank))
            .unwrap_or_default();
        rm.join_bytes -= data.len();
        data.extend_from_slice(&payload);
        if data.len() as u64 != want {
            return self.bad_frame(
                h,
                "JOIN whose contribution is not the size its request says",
            );
        }
        self.nodes[node].participation = flags;
        let mut w = [0u32; crate::cm5::combine::MAX_WORDS];
        for (d, s) in w.iter_mut().zip(words) {
            *d = *s;
        }
        let entry = Entry {
            node,
            req,
            words: w,
            door: Door::FastPath,
        };
        let size = members.len();
        let pc = self.colls.entry(name.clone()).or_default();
        pc.sized(size);
        let rs = pc.rounds(k, size);
        let ahead = if want > 0 {
            DATA_ROUNDS_AHEAD_MAX
        } else {
            ROUNDS_AHEAD_MAX
        };
        if seq < rs.base || seq - rs.base > ahead {
            tracing::warn!(partition = %name, ?k, seq, base = rs.base, "JOIN from another host out of step: ignored");
            return;
        }
        let idx = (seq - rs.base) as usize;
        while rs.rounds.len() <= idx {
            rs.rounds.push_back(Round {
                entries: vec![None; size],
                started: std::time::Instant::now(),
                data: HashMap::new(),
            });
        }
        let round = &mut rs.rounds[idx];
        round.entries[rank as usize] = Some(entry);
        if !data.is_empty() {
            round.data.insert(rank as usize, data);
        }
        rs.next[rank as usize] = rs.next[rank as usize].max(seq + 1);
        self.nodes[node].outstanding += 1;
        self.advance(&name);
    }

    /// Answer PUT or GET chunk `id` at `offset` of host `h` with `status` and no data.
    fn refuse(&mut self, h: HostId, id: u64, offset: u64, status: Status) {
        let m = Msg::Reply {
            id,
            offset,
            status: status as u16,
            payload: Vec::new(),
        };
        self.frame(h, m);
    }

    /// The target IOVA of `[offset, offset + len)` of region `key` of our NI `b`.
    fn remote_access(
        &self,
        b: usize,
        key: u32,
        offset: u64,
        len: u64,
        need: u32,
    ) -> Result<u64, Status> {
        if !self.nodes[b].ready {
            return Err(Status::PeerDown);
        }
        let mr = self.nodes[b].mrs.get(&key).ok_or(Status::BadKey)?;
        if mr.access & need != need {
            return Err(Status::BadKey);
        }
        match offset.checked_add(len) {
            Some(end) if end <= mr.len => Ok(mr.iova + offset),
            _ => Err(Status::OutOfBounds),
        }
    }
}

/// Payload bytes from one host held here at most (eager messages waiting for a receive,
/// active messages waiting for ring space): a sender keeps to `EAGER_BUDGET`, so only a
/// broken or hostile daemon reaches it, and gets `queue full`.
pub const HELD_MAX: usize = 64 << 20;

/// Payloads held for other hosts' operations, counted per host.
struct Held {
    map: HashMap<(HostId, u64), Vec<u8>>,
    bytes: Vec<usize>,
}

impl Held {
    fn new(hosts: usize) -> Held {
        Held {
            map: HashMap::new(),
            bytes: vec![0; hosts],
        }
    }

    /// Hold `p` for operation `k`; false (nothing held) past the host's limit.
    fn insert(&mut self, k: (HostId, u64), p: Vec<u8>) -> bool {
        let b = &mut self.bytes[k.0 as usize];
        if *b + p.len() > HELD_MAX || self.map.contains_key(&k) {
            return false;
        }
        *b += p.len();
        self.map.insert(k, p);
        true
    }

    fn remove(&mut self, k: &(HostId, u64)) -> Option<Vec<u8>> {
        let p = self.map.remove(k)?;
        self.bytes[k.0 as usize] -= p.len();
        Some(p)
    }

    fn drop_host(&mut self, h: HostId) {
        self.map.retain(|&(host, _), _| host != h);
        self.bytes[h as usize] = 0;
    }
}

/// Messages of one host waiting here for receives, at most (a local client may have
/// `MAX_OUTSTANDING` requests in the fabric; a host, this many messages waiting here).
pub const QUEUED_IN_MAX: usize = super::node::MAX_OUTSTANDING;
/// Bytes queued on a link past which PULLs and GETs are refused (`queue full`): a puller
/// keeps at most `PULL_INFLIGHT_MAX` asked of one host, so only a broken or hostile one gets
/// here.
pub const PULL_QUEUE_MAX: usize = 256 << 20;
/// Bytes one host's PULLs may have asked of another and not received.
pub const PULL_INFLIGHT_MAX: u64 = 32 << 20;
/// Rounds ahead of the oldest open one a JOIN with a contribution may be for.
const DATA_ROUNDS_AHEAD_MAX: u64 = 16;

/// A member's contribution to a collective whose partition spans hosts, at most: it travels
/// to every other host of the partition and waits there for the round.
pub const SPAN_DATA_MAX: u64 = 64 << 20;
/// Contribution bytes from other hosts held for rounds not yet joined, at most.
const JOIN_BUFFER_MAX: usize = 1 << 30;
/// Rounds ahead of the oldest open one a member of another host may join.
const ROUNDS_AHEAD_MAX: u64 = 4096;

fn kind_code(k: Kind) -> u8 {
    match k {
        Kind::Combine => 0,
        Kind::Vector => 1,
        Kind::Sync => 2,
        Kind::Flush => 3,
    }
}

fn kind_of(c: u8) -> Option<Kind> {
    Some(match c {
        0 => Kind::Combine,
        1 => Kind::Vector,
        2 => Kind::Sync,
        3 => Kind::Flush,
        _ => return None,
    })
}

/// The contribution a JOIN for `k` with request `r` (of member `rank` of `size`) must carry,
/// or `None` if its own host would have refused the request (`join_door`, `check_vector`).
fn join_data_len(k: Kind, r: &Request, size: usize, rank: u32) -> Option<u64> {
    use crate::cm5::combine::{legal, Combiner, Pattern};
    use ni_abi::fastpath::{coll, combine as cflag, dtype, redop};
    match k {
        Kind::Combine => {
            let pattern = Pattern::from_bits((r.flags & cflag::PATTERN_MASK) as u32);
            let combiner = Combiner::from_bits(r.access)?;
            legal(pattern, combiner, r.len as usize).then_some(0)
        }
        Kind::Sync | Kind::Flush => Some(0),
        Kind::Vector => {
            let d = r.access & 0xFF;
            let o = (r.access >> 8) & 0xFF;
            let esize = dtype::size(d)?;
            if o > redop::XOR
                || (o >= redop::AND && matches!(d, dtype::F32 | dtype::F64))
                || r.flags > coll::ALLGATHER
                || (matches!(r.flags, coll::BCAST | coll::REDUCE) && r.rank as usize >= size)
            {
                return None;
            }
            let bytes = r.len.checked_mul(esize)?;
            if bytes > SPAN_DATA_MAX {
                return None;
            }
            Some(match r.flags {
                coll::BARRIER => 0,
                coll::BCAST if r.rank != rank => 0,
                _ => bytes,
            })
        }
    }
}

/// Chunks a one-sided operation of `len` bytes takes: one at least, so a zero-length one
/// still has the target check its key.
fn chunks(len: u64) -> u64 {
    len.div_ceil(CHUNK as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_cannot_make_this_daemon_hold_more_than_its_share() {
        let mut h = Held::new(2);
        let chunk = vec![0u8; 1 << 20];
        for id in 0..(HELD_MAX >> 20) as u64 {
            assert!(
                h.insert((1, id), chunk.clone()),
                "within the limit ({id} MiB)"
            );
        }
        assert!(
            !h.insert((1, 999), vec![0]),
            "one byte past the limit is refused"
        );
        assert!(
            h.insert((0, 1), chunk.clone()),
            "another host has its own share"
        );
        assert_eq!(h.remove(&(1, 0)).map(|p| p.len()), Some(1 << 20));
        assert!(h.insert((1, 999), vec![0]), "room again once one is taken");
        h.drop_host(1);
        assert_eq!(h.bytes, vec![1 << 20, 0]);
        assert!(h.remove(&(1, 999)).is_none());
    }

    #[test]
    fn every_collective_kind_has_a_code_and_back() {
        for k in [Kind::Combine, Kind::Vector, Kind::Sync, Kind::Flush] {
            assert_eq!(kind_of(kind_code(k)), Some(k));
        }
        assert_eq!(kind_of(200), None);
        assert_eq!(
            chunks(0),
            1,
            "a zero-length one-sided operation still checks its key"
        );
        assert_eq!(chunks(CHUNK as u64), 1);
        assert_eq!(chunks(CHUNK as u64 + 1), 2);
    }
}
