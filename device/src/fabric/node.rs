//! One NI's fast-path state inside the fabric: its rings, registered regions, and the
//! messages and receives waiting to be matched.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};

use super::port::Port;
use crate::counters::FabricCounters;
use crate::dma::DmaSpace;
use crate::sram::Sram;

/// Requests of one NI that may wait inside the fabric at once (sends not yet matched,
/// receives posted, active messages waiting for ring space). Past it the fabric stops
/// taking that NI's requests, so its submission ring fills and the client sees
/// "would block": the fabric never drops a request for lack of room.
pub const MAX_OUTSTANDING: usize = 65536;
/// Completions held for a client whose completion ring is full. Past it the fabric takes no
/// more of that client's requests until it consumes its ring: a client that never does
/// costs the daemon this much and no more (each request yields at most one completion, and
/// one pass takes at most a batch).
pub const MAX_BACKLOG: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ring {
    pub iova: u64,
    pub entries: u32,
}

/// A region the client registered for remote access (`REG_MR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mr {
    pub iova: u64,
    pub len: u64,
    pub access: u32,
}

/// A send that reached its destination before a matching receive: only its description
/// waits; the payload stays in the sender's memory until it is copied once, into the receive.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct PendingSend {
    pub src: usize,
    pub src_rank: u32,
    pub user: u64,
    pub addr: u64,
    pub len: u64,
    pub tag: u64,
    /// A message of another host: that host and its id for the message (`remote.rs`);
    /// `addr` is then nothing, the payload is there or held by the fabric.
    pub remote: Option<(u32, u64)>,
}

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct PostedRecv {
    pub user: u64,
    pub addr: u64,
    pub len: u64,
    pub tag: u64,
    pub mask: u64,
    /// The physical NI the receive is for, or any.
    pub from: Option<usize>,
    pub from_rank: u32,
}

impl PostedRecv {
    pub fn matches(&self, s: &PendingSend) -> bool {
        self.from.is_none_or(|f| f == s.src) && (s.tag & self.mask) == (self.tag & self.mask)
    }
}

/// An active message waiting for a free slot in the target's AM ring.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct PendingAm {
    pub src: usize,
    pub src_rank: u32,
    pub user: u64,
    pub addr: u64,
    pub len: u64,
    pub handler: u64,
    /// From another host: that host and its id for it; the payload is held by the fabric.
    pub remote: Option<(u32, u64)>,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Node {
    pub index: u32,
    /// The NI generation this state belongs to.
    pub generation: u64,
    /// A client is attached and the control page is published.
    pub live: bool,
    /// The client has set up its completion ring since the last reset: peers may address it.
    /// (A guest's QEMU is attached from boot; its process resets the NI when it starts, so
    /// only this says someone is there to take messages.)
    pub ready: bool,
    #[serde(skip)]
    pub sram: Option<Arc<Sram>>,
    #[serde(skip)]
    pub dma: Arc<RwLock<DmaSpace>>,
    pub sq_head: u32,
    pub cq: Option<Ring>,
    pub cq_produced: u32,
    pub backlog: VecDeque<ni_abi::fastpath::Completion>,
    pub am: Option<Ring>,
    pub am_produced: u32,
    pub mrs: HashMap<u32, Mr>,
    pub recvs: VecDeque<PostedRecv>,
    /// Sends addressed to this NI, in arrival order, not yet matched.
    pub unexpected: VecDeque<PendingSend>,
    /// Active messages addressed to this NI waiting for ring space.
    pub am_waiting: VecDeque<PendingAm>,
    /// This NI's own requests still waiting in the fabric.
    pub outstanding: usize,
    /// Partition members seen attached since this NI's client attached (for PEERS_UP).
    pub seen: std::collections::BTreeSet<u32>,
    /// Control-network participation flags (`participation::*`); all abstaining after reset.
    pub participation: u32,
    /// The client drives the CM-5 control network through its registers (it sent an
    /// event from them): results for it go to its COM receive FIFO.
    pub cm5_registers: bool,
    pub counters: FabricCounters,
    /// Port 0's link, shared with the NI's Lanai registers.
    #[serde(skip)]
    pub port: Arc<Port>,
    /// The control page's `EPOCH`: bumped whenever what the client knew is void (a reset,
    /// an attach, a partition change). Survives [`Node::clear`] so it never repeats.
    pub epoch: u32,
    /// CM-5 `ni_dr_message_count`: +1 per message this NI sent, -1 per message it received
    /// (on arrival at a receive, the fast path's "arrival"), so a partition's sum is the
    /// messages still in the network. Signed; survives resets like the counters.
    pub dr_message_count: i64,
    /// Which of this NI's SENDs waits for a queue's arrival lock (`mq.rs`), and since when:
    /// the request at the head of its submission ring (by epoch and ring index), and its
    /// E-register SEND (by epoch and register). Not carried over a restart: the wait starts
    /// again.
    #[serde(skip)]
    pub mq_held_since: Option<(u64, std::time::Instant)>,
    #[serde(skip)]
    pub t3e_held_since: Option<(u64, std::time::Instant)>,
}

impl Node {
    pub fn new(index: u32, dma: Arc<RwLock<DmaSpace>>, port: Arc<Port>) -> Node {
        Node {
            index,
            generation: 0,
            live: false,
            ready: false,
            sram: None,
            dma,
            sq_head: 0,
            cq: None,
            cq_produced: 0,
            backlog: VecDeque::new(),
            am: None,
            am_produced: 0,
            mrs: HashMap::new(),
            recvs: VecDeque::new(),
            unexpected: VecDeque::new(),
            am_waiting: VecDeque::new(),
            outstanding: 0,
            seen: Default::default(),
            participation: ni_abi::fastpath::participation::RESET,
            cm5_registers: false,
            counters: FabricCounters::default(),
            port,
            epoch: 0,
            dr_message_count: 0,
            mq_held_since: None,
            t3e_held_since: None,
        }
    }

    pub fn live_sram(&self) -> Option<Arc<Sram>> {
        if self.live {
            self.sram.clone()
        } else {
            None
        }
    }

    pub fn accepts_more(&self) -> bool {
        self.outstanding < MAX_OUTSTANDING && self.backlog.len() < MAX_BACKLOG
    }

    /// Forget everything of the client that was here (counters, epoch and port stay).
    pub fn clear(&mut self) {
        let counters = std::mem::take(&mut self.counters);
        let (epoch, dr) = (self.epoch, self.dr_message_count);
        *self = Node::new(self.index, self.dma.clone(), self.port.clone());
        self.counters = counters;
        self.epoch = epoch;
        self.dr_message_count = dr;
    }
}
