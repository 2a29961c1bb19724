//! The fabric between the daemon's NIs, and the fast path that feeds it (device/abi/fastpath.md).
//!
//! One poller thread serves every NI: it takes requests from each client's submission ring in
//! SRAM, moves data between the clients' registered memory (one copy, straight from the
//! sender's pages into the receiver's), and writes completions into each client's completion
//! ring. It spins briefly when work stops, then yields, then sleeps until a doorbell, so a
//! 2-core machine shared with the clients keeps running them.

pub mod admin;
pub mod cm5;
pub mod collective;
pub mod doors;
pub mod handover;
pub mod lanai;
pub mod mlink;
pub mod mq;
pub mod node;
pub mod ops;
pub mod partition;
pub mod port;
pub mod remote;
pub mod router;
pub mod t3e;
pub mod topology;
pub mod transfer;
pub mod window;

use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ops::Taken;

use ni_abi::fastpath::{ctrl, Completion, Request, Status, ENTRY_SIZE, SQ_ENTRIES, SQ_OFFSET};
use ni_abi::pci::vector;

use crate::counters::FabricCounters;
use crate::ni::read_dma;
use crate::server::{lock, Slot};
use node::Node;
use partition::Partitions;
use topology::{PacketClass, Torus};

/// How long the poller spins, then yields, after its last piece of work before sleeping.
/// No spin: on a machine with fewer cores than runnable threads (ranks plus this poller) a
/// spinning poller starves the rank that shares its core; yielding costs ~1 µs when a core
/// is free and gives it away when not (measured: 8 B half round trip 24.7 -> 2.4 µs on 2 cores).
pub const SPIN: Duration = Duration::ZERO;
pub const YIELD: Duration = Duration::from_millis(2);
/// The longest the poller sleeps without a doorbell (it re-checks attachments then).
pub const SLEEP: Duration = Duration::from_millis(50);
/// Requests taken from one NI's ring per pass, so one busy client cannot starve the others.
const BATCH: u32 = 64;
/// Routes remembered at most (an all-to-all over thousands of NIs would hold millions).
const ROUTE_CACHE_MAX: usize = 1 << 20;

/// A peer's region as `Fabric::export` hands it out.
#[derive(Debug)]
pub struct Export {
    pub file: std::fs::File,
    pub offset: u64,
    pub len: u64,
}

/// The poller's wake-up: rung by a trapped DOORBELL write, a reset or a detach.
#[derive(Default)]
pub struct Doorbell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Doorbell {
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_one();
    }

    /// Sleep until rung or `timeout`; clears the bell. Returns whether it was rung.
    fn wait(&self, timeout: Duration) -> bool {
        let g = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        let (mut g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |rung| !*rung)
            .unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, false)
    }
}

/// A cached route: its hops, or where its failure is logged (router, R_ERR0 bit) if anywhere.
type RouteResult = Result<u32, Option<(topology::PhysPe, u32)>>;

pub struct Fabric {
    pub state: Mutex<State>,
    pub doorbell: Arc<Doorbell>,
    /// Each NI with its "engines have background work" flag (`Ni::engines`): stepped by the
    /// poller between passes, outside `state`, so engine work never delays the fast path
    /// or the control socket by more than one step.
    engines: Vec<(Arc<Slot>, Arc<std::sync::atomic::AtomicBool>)>,
    /// Each NI with its CM-5 timer deadline (`Cm5::timer`, §6.5).
    timers: Vec<(Arc<Slot>, Arc<std::sync::atomic::AtomicU64>)>,
}

/// Everything the poller owns. Lock order: `Fabric::state`, then an NI's `Slot::ni`, then its
/// DMA space; the vfio-user threads never take `state`.
pub struct State {
    pub nodes: Vec<Node>,
    pub partitions: Partitions,
    slots: Vec<Arc<Slot>>,
    /// Control-network state per partition (by name).
    colls: std::collections::HashMap<String, collective::PartitionColl>,
    /// How long a collective round may wait for its last member.
    pub collective_timeout: Duration,
    /// The SSD-T90 torus the NIs sit on: NI i is logical PE i, the LUT says where it is.
    pub torus: Torus,
    /// The torus as configured at start, which `map-out clear` restores.
    torus_initial: Torus,
    /// Hops of the route from one logical PE to another (`None`: no route avoids what is
    /// mapped out). Filled as pairs first talk, emptied whenever the torus changes.
    routes: HashMap<(u32, u32), RouteResult>,
    /// Partition windows by partition name (`window.rs`); none when `direct` is off, for a
    /// partition larger than `window::MAX_RANKS`, or one created while a member was attached.
    windows: HashMap<String, Arc<window::Window>>,
    /// The kind of window partitions get; `None`: the fabric path only
    /// (`ni-device --direct`).
    pub direct: Option<ni_abi::window::Kind>,
    /// Copies larger than `transfer::INLINE_MAX` in progress (transfer.rs).
    transfers: std::collections::VecDeque<transfer::Transfer>,
    /// Each NI's "CM-5 Data Network messages wait to leave" flag (`cm5.rs`).
    cm5_pending: Vec<Arc<std::sync::atomic::AtomicBool>>,
    /// Each NI's "a Lanai port has a packet, or a buffer was issued" flag (`lanai.rs`), and
    /// since when flow control has held the head packet of each of its ports.
    pub(super) lanai_pending: Vec<Arc<std::sync::atomic::AtomicBool>>,
    lanai_held: Vec<[Option<(u64, Instant)>; 2]>,
    /// Each NI's "E-register commands were issued" flag (`t3e.rs`).
    t3e_pending: Vec<Arc<std::sync::atomic::AtomicBool>>,
    /// Each NI's "MLINK launches wait" flag, and the operations in flight (`mlink.rs`).
    mlink_pending: Vec<Arc<std::sync::atomic::AtomicBool>>,
    mlink_flights: std::collections::VecDeque<mlink::Flight>,
    /// Register-level operations between this host and others (`doors.rs`).
    doors: doors::Doors,
    /// The SSD-T90 routers' own registers, one per physical node (`router.rs`).
    pub routers: Vec<router::RouterRegs>,
    /// The other daemons of a fabric that spans hosts (`remote.rs`); none for one host.
    pub remote: Option<remote::Remote>,
}

impl Fabric {
    pub fn new(
        doorbell: Arc<Doorbell>,
        slots: Vec<Arc<Slot>>,
        partitions: Partitions,
        collective_timeout: Duration,
        torus: Torus,
    ) -> Fabric {
        let nodes = slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let ni = lock(&s.ni);
                Node::new(i as u32, ni.dma.clone(), ni.lanai.link.clone())
            })
            .collect();
        let engines = slots
            .iter()
            .map(|s| (s.clone(), lock(&s.ni).engines.clone()))
            .collect();
        let timers = slots
            .iter()
            .map(|s| (s.clone(), lock(&s.ni).cm5.timer.clone()))
            .collect();
        let cm5_pending = slots
            .iter()
            .map(|s| lock(&s.ni).cm5.data.pending.clone())
            .collect();
        let nodes_len = slots.len();
        let lanai_pending = slots
            .iter()
            .map(|s| lock(&s.ni).lanai.packets.clone())
            .collect();
        let t3e_pending = slots
            .iter()
            .map(|s| lock(&s.ni).t3e.pending.clone())
            .collect();
        let mlink_pending = slots
            .iter()
            .map(|s| lock(&s.ni).mlink.pending.clone())
            .collect();
        let routers = vec![Default::default(); torus.dims().nodes() as usize];
        Fabric {
            engines,
            timers,
            state: Mutex::new(State {
                nodes,
                partitions,
                slots,
                colls: Default::default(),
                collective_timeout,
                torus_initial: torus.clone(),
                torus,
                routes: HashMap::new(),
                windows: HashMap::new(),
                cm5_pending,
                lanai_pending,
                lanai_held: vec![[None; 2]; nodes_len],
                t3e_pending,
                mlink_pending,
                mlink_flights: Default::default(),
                doors: Default::default(),
                routers,
                direct: None,
                transfers: Default::default(),
                remote: None,
            }),
            doorbell,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One bounded step of every NI's background engine work; whether there was any.
    fn step_engines(&self) -> bool {
        let mut work = false;
        for (slot, busy) in &self.engines {
            if busy.load(Ordering::Acquire) {
                work = true;
                lock(&slot.ni).step_engines();
            }
        }
        work
    }

    /// Raise the CM-5 timer interrupt of every NI whose deadline passed; returns whether
    /// one did and how long until the next deadline.
    fn fire_timers(&self) -> (bool, Option<Duration>) {
        let now = crate::cm5::monotonic_ns();
        let mut fired = false;
        let mut next: Option<u64> = None;
        for (slot, at) in &self.timers {
            let t = at.load(Ordering::Acquire);
            if t == 0 {
                continue;
            }
            if t <= now {
                let mut ni = lock(&slot.ni);
                ni.cm5.timer_due();
                ni.update_interrupts();
                fired = true;
            } else {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        (fired, next.map(|t| Duration::from_nanos(t - now)))
    }

    /// The poller: runs forever.
    pub fn run(self: Arc<Self>) {
        let mut last_work = Instant::now();
        let mut contention = ni_abi::fastpath::Contention::default();
        loop {
            // A planned restart: rest between passes, holding nothing (`crate::handover`).
            if crate::handover::freeze().on() {
                crate::handover::freeze().park(crate::handover::Who::Poller);
                last_work = Instant::now();
            }
            let (fired, next_timer) = self.fire_timers();
            let engines = self.step_engines() | fired;
            if self.lock().poll_once() | engines {
                last_work = Instant::now();
                continue;
            }
            let idle = last_work.elapsed();
            if idle < SPIN {
                std::hint::spin_loop();
                continue;
            }
            // Yield while that is cheap; when a CPU-bound thread holds the core each yield
            // costs its whole slice, so sleep until a doorbell instead.
            if idle < SPIN + YIELD && !contention.blocking() {
                contention.yield_now();
                continue;
            }
            // Announce the sleep, then look once more: a client that published a request
            // before it could see DEV_SLEEPING is caught here; one that published after will
            // see it and ring (both sides fence between their store and their load).
            self.lock().set_sleeping(true);
            fence(Ordering::SeqCst);
            if self.lock().poll_once() {
                self.lock().set_sleeping(false);
                last_work = Instant::now();
                continue;
            }
            let rung = self
                .doorbell
                .wait(next_timer.map_or(SLEEP, |t| t.min(SLEEP)));
            self.lock().set_sleeping(false);
            // A wake-up with nothing to do (the timeout) looks once and sleeps again; only
            // a doorbell starts the yield phase over (an idle daemon used to take 4% of a
            // cpu: 2 ms of yields after each 50 ms sleep).
            if rung {
                last_work = Instant::now();
            }
        }
    }

    /// A mapping for NI `node`'s client of peer `rank`'s exported region `key` (the peer
    /// registered it with `access::EXPORT` and every permission): the region's memory file,
    /// the region's offset in it and its length. Only members of a partition with a window
    /// that the client has bound get one, only for a region that is a file of its own
    /// (`DmaSpace::export`); everything else is refused, and counted.
    pub fn export(&self, node: u32, rank: u32, key: u32) -> Result<Export, Status> {
        let mut s = self.lock();
        let a = node as usize;
        let r = s.export(a, rank, key);
        if let Some(n) = s.nodes.get_mut(a) {
            match r {
                Ok(_) => n.counters.exports += 1,
                Err(_) => n.counters.exports_refused += 1,
            }
        }
        r
    }

    pub fn counters(&self, node: u32) -> Option<FabricCounters> {
        let s = self.lock();
        let mut c = s.nodes.get(node as usize)?.counters.clone();
        // What the client did on the direct path it counts itself, in the window: words any
        // member may scribble on, so every sum saturates (a garbage count is garbage, never
        // an overflow in the daemon).
        if let Some((w, rank)) = s.window_of(node as usize) {
            let ws = w.stats(rank);
            c.window_sends = ws.sends;
            c.window_bytes = ws.bytes;
            c.window_collectives = ws.collectives;
            c.window_ring_errors = ws.ring_errors;
            c.window_ams = ws.ams;
            // Rendezvous payloads the client read from their senders' regions itself.
            c.window_reads = ws.reads;
            c.window_read_bytes = ws.read_bytes;
            // One-sided operations done in peers' exported regions.
            c.window_puts = ws.puts;
            c.window_gets = ws.gets;
            // T3E SENDs members stored into queues themselves.
            c.window_mq_sends = ws.mq_sends;
            // Collectives too large for the slots, through exported memory.
            c.window_large_allreduces = ws.large_allreduces;
            c.window_large_allreduces_in_place = ws.large_allreduces_in_place;
            c.window_large_bcasts = ws.large_bcasts;
            c.window_large_reduces = ws.large_reduces;
            c.window_large_allgathers = ws.large_allgathers;
            c.window_large_scans = ws.large_scans;
            c.window_large_pushed = ws.large_pushed;
            let sum = |v: [u64; 5]| v.into_iter().fold(0, u64::saturating_add);
            let large_collectives = sum([
                ws.large_allreduces,
                ws.large_bcasts,
                ws.large_reduces,
                ws.large_allgathers,
                ws.large_scans,
            ]);
            let large_collective_bytes = sum([
                ws.large_allreduce_bytes,
                ws.large_bcast_bytes,
                ws.large_reduce_bytes,
                ws.large_allgather_bytes,
                ws.large_scan_bytes,
            ]);
            // What the window did is counted with what the fabric did: active messages and
            // one-sided operations, T3E SENDs at both ends, collectives through exported
            // memory, messages whichever path carried them, and failures.
            for (total, window) in [
                (&mut c.rops, ws.ams),
                (&mut c.rops_delivered, ws.ams_taken),
                (&mut c.puts, ws.puts),
                (&mut c.put_bytes, ws.put_bytes),
                (&mut c.gets, ws.gets),
                (&mut c.get_bytes, ws.get_bytes),
                (&mut c.mq_sends, ws.mq_sends),
                (&mut c.mq_stored, ws.mq_stored_here),
                (&mut c.mq_rejected, ws.mq_rejected_here),
                (&mut c.err_queue_full, ws.mq_rejected_mine),
                (&mut c.collectives, large_collectives),
                (&mut c.collective_bytes, large_collective_bytes),
                (&mut c.sends, ws.sends),
                (&mut c.send_bytes, ws.bytes),
                (&mut c.recvs, ws.recvs),
                (&mut c.recv_bytes, ws.recv_bytes),
                (&mut c.err_peer_down, ws.peer_down),
                (&mut c.err_timeout, ws.timeout),
                (&mut c.err_link_down, ws.link_down),
                (&mut c.err_collision, ws.collision),
                (&mut c.err_truncated, ws.truncated),
            ] {
                *total = total.saturating_add(window);
            }
        }
        Some(c)
    }

    /// Choose the partitions' window kind, or none (before any client attaches).
    pub fn set_direct(&self, kind: Option<ni_abi::window::Kind>) {
        let mut s = self.lock();
        s.direct = kind;
        s.sync_windows();
    }

    /// Signed values that go up and down: the CM-5 `dr_message_count`.
    pub fn gauges(&self, node: u32) -> Vec<(String, i64)> {
        self.lock()
            .nodes
            .get(node as usize)
            .map(|n| vec![("dr_message_count".to_string(), n.dr_message_count)])
            .unwrap_or_default()
    }

    pub fn reset_counters(&self, node: u32) {
        if let Some(n) = self.lock().nodes.get_mut(node as usize) {
            n.counters = FabricCounters::default();
            n.dr_message_count = 0;
        }
    }
}

impl State {
    fn set_sleeping(&self, sleeping: bool) {
        for n in &self.nodes {
            if let Some(sram) = n.live_sram() {
                sram.store_u32(ctrl::DEV_SLEEPING, sleeping as u32);
            }
        }
    }

    /// One pass over every NI. Returns whether anything was done.
    pub fn poll_once(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.nodes.len() {
            changed |= self.sync_generation(i);
        }
        if changed {
            self.publish_peers_up();
            self.publish_reach();
        }
        let mut work = changed | self.pump_link();
        for i in 0..self.nodes.len() {
            if !self.nodes[i].live {
                continue;
            }
            work |= self.take_requests(i);
            work |= self.pump_cm5(i);
            work |= self.pump_lanai(i);
            work |= self.pump_t3e(i);
            work |= self.pump_mlink(i);
            work |= self.flush_completions(i);
            work |= self.flush_active_messages(i);
        }
        work |= self.advance_transfers();
        work |= self.advance_mlink();
        if self.remote.is_some() {
            work |= self.advance_doors();
        }
        work | self.poll_collectives()
    }

    /// Notice a reset, attach or detach of NI `i` (its generation moved) and act on it.
    fn sync_generation(&mut self, i: usize) -> bool {
        let slot = self.slots[i].clone();
        let ni = lock(&slot.ni);
        let generation = ni.generation.load(Ordering::SeqCst);
        if generation == self.nodes[i].generation {
            return false;
        }
        let attached = slot.attachment.lock().map(|a| a.attached).unwrap_or(false);
        let sram = ni.sram.clone();
        let dma = ni.dma.clone();
        drop(ni);
        let was_live = self.nodes[i].live;
        self.node_down(i);
        self.doors_reset_ni(i);
        self.nodes[i].generation = generation;
        self.nodes[i].dma = dma;
        if attached {
            self.nodes[i].live = true;
            self.nodes[i].sram = Some(sram);
            self.publish_identity(i);
            tracing::debug!(ni = i, "fast path live");
        } else if was_live {
            tracing::debug!(ni = i, "fast path down");
        }
        true
    }

    /// Publish a fresh control page: a new epoch, then the identity (magic last).
    pub fn publish_identity(&mut self, i: usize) {
        self.bump_epoch(i);
        self.write_identity(i);
    }

    /// Void what the client knew: a new `EPOCH` (libni then answers `Error::Reset`), and
    /// whatever it had published but the fabric had not taken is dropped.
    pub(super) fn bump_epoch(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.epoch = n.epoch.wrapping_add(1);
        if let Some(sram) = n.sram.clone() {
            let tail = sram.load_u32(ctrl::SQ_TAIL);
            n.sq_head = tail;
            sram.store_u32(ctrl::SQ_HEAD, tail);
            sram.store_u32(ctrl::EPOCH, n.epoch);
        }
    }

    /// Write the control page's identity: node, rank, size, partition, version, magic; and
    /// the trapped RANK/SIZE registers.
    pub(super) fn write_identity(&mut self, i: usize) {
        let (rank, size) = self.partitions.rank_size(i as u32);
        let pid = self
            .partitions
            .of(i as u32)
            .map(|(p, _)| p.id)
            .unwrap_or(u32::MAX);
        let window = self.bound_window(i).map(|(w, _)| w.serial).unwrap_or(0);
        if let Some(sram) = self.nodes[i].sram.clone() {
            sram.store_u32(ctrl::WINDOW, window);
            sram.store_u32(ctrl::NODE, i as u32);
            sram.store_u32(ctrl::RANK, rank);
            sram.store_u32(ctrl::SIZE, size);
            sram.store_u32(ctrl::PARTITION, pid);
            sram.store_u32(ctrl::VERSION, ctrl::VERSION_VALUE);
            sram.store_u32(ctrl::MAGIC, ctrl::MAGIC_VALUE);
        }
        let mut ni = lock(&self.slots[i].ni);
        ni.rank = rank;
        ni.size = size;
        drop(ni);
        self.write_cm5_partition(i);
    }

    /// Give each partition its window and each NI's slot the window of its partition.
    /// A partition keeps its window for its whole life. One created while a member had a
    /// client attached gets none: that client's session is bound to what its NI had before,
    /// and all members must share one window or none (they would not find each other's
    /// messages otherwise).
    pub(super) fn sync_windows(&mut self) {
        let parts: Vec<(String, Vec<u32>)> = self
            .partitions
            .list()
            .map(|p| (p.name.clone(), p.nodes.clone()))
            .collect();
        self.windows
            .retain(|name, w| parts.iter().any(|(n, m)| n == name && *m == w.members));
        let timeout_ms = self.collective_timeout.as_millis().min(u32::MAX as u128) as u32;
        for (name, members) in &parts {
            let Some(kind) = self.direct else {
                continue;
            };
            if self.windows.contains_key(name) || members.len() > ni_abi::window::MAX_RANKS as usize
            {
                continue;
            }
            if self.spans_hosts(members) {
                // A window is memory one host shares; members elsewhere are reached through
                // the link, so the whole partition takes the fabric path.
                tracing::info!(partition = %name, "partition spans hosts: fabric path only");
                continue;
            }
            let attached = members.iter().any(|&n| {
                self.slots[n as usize]
                    .attachment
                    .lock()
                    .map(|a| a.attached)
                    .unwrap_or(true)
            });
            if attached {
                tracing::info!(
                    partition = %name,
                    "partition created with a member attached: fabric path only"
                );
                continue;
            }
            match window::Window::new(kind, members.clone(), timeout_ms) {
                Ok(w) => {
                    self.windows.insert(name.clone(), Arc::new(w));
                }
                Err(e) => tracing::error!(partition = %name, "no window: {e}"),
            }
        }
        for (i, slot) in self.slots.iter().enumerate() {
            let w = self
                .partitions
                .of(i as u32)
                .and_then(|(p, _)| self.windows.get(&p.name).cloned());
            *slot.window.lock().unwrap_or_else(|e| e.into_inner()) = w;
        }
        self.publish_reach();
    }

    /// Tell each window which members reach which: ports up and a route through the torus.
    pub(super) fn publish_reach(&mut self) {
        let wins: Vec<Arc<window::Window>> = self.windows.values().cloned().collect();
        for w in wins {
            for (ra, &a) in w.members.iter().enumerate() {
                let mut mask = 0u64;
                for (rb, &b) in w.members.iter().enumerate() {
                    let (a, b) = (a as usize, b as usize);
                    let ok = a == b
                        || (self.nodes[a].port.up()
                            && self.nodes[b].port.up()
                            && self.hops(a, b).is_ok());
                    mask |= (ok as u64) << rb;
                }
                w.set_reach(ra as u32, mask);
            }
        }
    }

    fn export(&self, a: usize, rank: u32, key: u32) -> Result<Export, Status> {
        let (w, _) = self.bound_window(a).ok_or(Status::Permission)?;
        let b = w.member(rank).ok_or(Status::OutOfPartition)? as usize;
        let node = self.nodes.get(b).ok_or(Status::OutOfPartition)?;
        if !node.ready {
            return Err(Status::PeerDown);
        }
        let mr = *node.mrs.get(&key).ok_or(Status::BadKey)?;
        let all = ni_abi::fastpath::access::ALL | ni_abi::fastpath::access::EXPORT;
        if mr.access & all != all {
            return Err(Status::Permission);
        }
        let (file, offset) = crate::ni::read_dma(&node.dma)
            .export(mr.iova, mr.len)
            .ok_or(Status::Permission)?;
        Ok(Export {
            file,
            offset,
            len: mr.len,
        })
    }

    /// The window of NI `i`'s partition and its rank there.
    pub(super) fn window_of(&self, i: usize) -> Option<(Arc<window::Window>, u32)> {
        let (p, _) = self.partitions.of(i as u32)?;
        let w = self.windows.get(&p.name)?.clone();
        let rank = w.rank_of(i as u32)?;
        Some((w, rank))
    }

    /// NI `i`'s partition window, if its client's session has it mapped.
    pub(super) fn bound_window(&self, i: usize) -> Option<(Arc<window::Window>, u32)> {
        let (w, rank) = self.window_of(i)?;
        let bound = lock(&self.slots[i].ni).window.as_ref().map(|b| b.serial);
        (bound == Some(w.serial)).then_some((w, rank))
    }

    /// NI `i`'s client came up (`up`) or went away: publish it in its partition window and
    /// interrupt every live member, so blocked waiters look.
    pub(super) fn window_member(&mut self, i: usize, up: bool) {
        // Only a client that has the window mapped comes up in it; any client goes down.
        let found = if up {
            self.bound_window(i)
        } else {
            self.window_of(i)
        };
        let Some((w, rank)) = found else {
            return;
        };
        if up {
            w.member_up(rank);
        } else {
            w.member_down(rank);
        }
        for &m in &w.members {
            if self.nodes[m as usize].live {
                lock(&self.slots[m as usize].ni).deliver(vector::CQ);
            }
        }
    }

    /// Tell every live NI how many members of its partition have been ready (a client with a
    /// completion ring) since it attached. Sticky, so a peer that was ready and already
    /// finished still counts: ranks that start together see each other however quickly one
    /// leaves.
    pub(super) fn publish_peers_up(&mut self) {
        let parts: Vec<Vec<u32>> = self.partitions.list().map(|p| p.nodes.clone()).collect();
        for members in parts {
            let ready: Vec<u32> = members
                .iter()
                .copied()
                .filter(|&n| self.nodes[n as usize].ready)
                .collect();
            for &n in &members {
                let node = &mut self.nodes[n as usize];
                if !node.live {
                    continue;
                }
                node.seen.extend(ready.iter().copied());
                if let Some(sram) = node.live_sram() {
                    sram.store_u32(ctrl::PEERS_UP, node.seen.len() as u32);
                }
            }
        }
    }

    /// Take up to a batch of requests from NI `i`'s submission ring.
    fn take_requests(&mut self, i: usize) -> bool {
        let Some(sram) = self.nodes[i].live_sram() else {
            return false;
        };
        let tail = sram.load_u32(ctrl::SQ_TAIL);
        let mut head = self.nodes[i].sq_head;
        let pending = tail.wrapping_sub(head);
        if pending == 0 {
            return false;
        }
        if pending > SQ_ENTRIES {
            // The client overwrote requests it had not seen consumed: those are gone, so
            // say so and resynchronise on the newest ring's worth.
            self.nodes[i].counters.sq_overruns += 1;
            tracing::warn!(ni = i, pending, "submission ring overrun");
            head = tail.wrapping_sub(SQ_ENTRIES);
        }
        let mut taken = 0;
        while head != tail && taken < BATCH && self.nodes[i].accepts_more() {
            let mut raw = [0u8; 64];
            let at = SQ_OFFSET + (head % SQ_ENTRIES) as u64 * ENTRY_SIZE;
            if sram.read(at, &mut raw).is_err() {
                break;
            }
            let next = head.wrapping_add(1);
            self.nodes[i].sq_head = next;
            if self.execute(i, Request::decode(&raw)) == Taken::Later {
                // It stays at the head of the ring, unconsumed (so the client cannot reuse
                // its entry), and the poller keeps looking (`mq.rs`: a queue's lock).
                self.nodes[i].sq_head = head;
                return true;
            }
            // Whatever waited at the head is taken now, however it ended.
            self.nodes[i].mq_held_since = None;
            if !self.nodes[i].live {
                break;
            }
            head = next;
            taken += 1;
            sram.store_u32(ctrl::SQ_HEAD, head);
            self.nodes[i].counters.requests += 1;
        }
        taken > 0
    }

    /// Queue a completion for NI `i` and write what fits into its ring.
    pub fn complete(&mut self, i: usize, c: Completion) {
        let n = &mut self.nodes[i];
        if !n.live {
            return;
        }
        n.counters.completions += 1;
        n.backlog.push_back(c);
        self.flush_completions(i);
    }

    /// Write held completions while the client's ring has room; interrupt if it asked.
    fn flush_completions(&mut self, i: usize) -> bool {
        let n = &mut self.nodes[i];
        if n.backlog.is_empty() {
            return false;
        }
        let (Some(sram), Some(cq)) = (n.live_sram(), n.cq) else {
            if n.live && n.cq.is_none() {
                n.counters.cq_lost += n.backlog.len() as u64;
                n.backlog.clear();
            }
            return false;
        };
        let consumed = sram.load_u32(ctrl::CQ_HEAD);
        let dma = read_dma(&n.dma);
        let mut wrote = false;
        while let Some(c) = n.backlog.front() {
            if n.cq_produced.wrapping_sub(consumed) >= cq.entries {
                n.counters.cq_full_waits += 1;
                break;
            }
            let at = cq.iova + (n.cq_produced % cq.entries) as u64 * ENTRY_SIZE;
            let seq = n.cq_produced.wrapping_add(1);
            let ok = dma.write(at, &c.encode_body()).is_ok()
                && dma
                    .store_u32_release(at + ni_abi::fastpath::COMPLETION_SEQ, seq)
                    .is_ok();
            if !ok {
                // The client unmapped its own ring: nothing can be delivered any more.
                n.counters.cq_lost += n.backlog.len() as u64;
                n.backlog.clear();
                n.cq = None;
                break;
            }
            n.backlog.pop_front();
            n.cq_produced = seq;
            wrote = true;
        }
        drop(dma);
        if wrote {
            // Pairs with the client's store of CQ_ARM, fence, re-check of the ring.
            fence(Ordering::SeqCst);
            if sram.atomic_u32(ctrl::CQ_ARM).swap(0, Ordering::AcqRel) != 0 {
                n.counters.cq_interrupts += 1;
                lock(&self.slots[i].ni).deliver(vector::CQ);
            }
        }
        wrote
    }

    /// Hops of the route from NI `a` to NI `b` through the torus; `LinkDown` when map-outs
    /// left none or the routers' tags do not lead there.
    pub(super) fn hops(&mut self, a: usize, b: usize) -> Result<u32, ni_abi::fastpath::Status> {
        self.route_between(a, b)
            .map_err(|_| ni_abi::fastpath::Status::LinkDown)
    }

    /// The route's hops, or where its failure is logged (router, R_ERR0 bit) if anywhere.
    pub(super) fn route_between(&mut self, a: usize, b: usize) -> RouteResult {
        if a == b {
            return Ok(0);
        }
        if self.torus.is_pristine() {
            // Nothing in the way: direction order takes the shorter way round every ring.
            if let (Ok(pa), Ok(pb)) = (self.torus.physical(a as u32), self.torus.physical(b as u32))
            {
                return Ok(self.torus.distance(pa, pb));
            }
        }
        let key = (a as u32, b as u32);
        if let Some(h) = self.routes.get(&key) {
            return *h;
        }
        if self.routes.len() >= ROUTE_CACHE_MAX {
            self.routes.clear();
        }
        let h = match self.torus.route(a as u32, b as u32, PacketClass::Request) {
            Ok(r) => Ok(r.len() as u32),
            Err(e) => Err(self
                .torus
                .physical(a as u32)
                .ok()
                .and_then(|src| router::fault_site(src, &e))),
        };
        self.routes.insert(key, h);
        h
    }

    /// Deliver the interrupt a message-queue threshold hit asks for.
    pub fn mq_interrupt(&mut self, i: usize, mqcw_iova: u64) {
        use ni_abi::fastpath::regs::{IR_ENABLE, MSG_ADDR_VALID, MSG_MULTIPLE};
        let mut ni = lock(&self.slots[i].ni);
        if ni.ir_status & MSG_ADDR_VALID == 0 {
            ni.ir_status |= MSG_ADDR_VALID;
            ni.msg_addr = mqcw_iova;
            if ni.ir_status & IR_ENABLE != 0 {
                ni.deliver(vector::MQ);
            }
        } else {
            ni.ir_status |= MSG_MULTIPLE;
        }
    }
}
