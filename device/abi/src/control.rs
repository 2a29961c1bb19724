//! The control socket protocol between `ni-device` and `ni-ctl`.
//!
//! One JSON object per line in each direction. Every request carries the protocol version;
//! a daemon answers a version it does not speak with an error naming the versions it does.
//! Fields added since version 1 was first published default when absent, so version 1 is
//! still the version: an older reader ignores what it does not know.
//!
//! Numbers an administrator meets: an NI's number is its physical NI (socket `ni<N>.sock`)
//! and its **logical PE number** (SSD-T90: the index into the routing-tag LUT); its
//! **physical PE number** is where it sits in the torus, hex `ZZYYXX`; its **virtual PE
//! number** is its rank in its partition (CM-5 relative address, 0..size-1 in the order the
//! partition lists its NIs).

use serde::{Deserialize, Serialize};

pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line the daemon reads before refusing it.
pub const MAX_REQUEST: usize = 64 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Envelope<T> {
    pub version: u32,
    #[serde(flatten)]
    pub body: T,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Daemon version, run directory, uptime, NI summary.
    Status,
    /// Planned restart into `binary` (default: the path the daemon was started from, which
    /// an upgrade replaced), every client kept attached. Answered by the new process with
    /// its `Status`, or with an error by the old one, which carries on.
    DaemonRestart {
        #[serde(default)]
        binary: Option<String>,
    },
    /// Every NI and its attach state.
    Nodes,
    /// Per-NI counters; `nodes` empty means all.
    Counters {
        #[serde(default)]
        nodes: Vec<u32>,
        #[serde(default)]
        reset: bool,
    },
    /// Function-level reset of one NI, as the administrator (the MLINK RESET path).
    ResetNode { node: u32 },
    /// The direction-order route between two NIs (logical PE numbers) on the torus.
    Route { from: u32, to: u32 },
    /// The torus dimensions, datelines and the routing-tag LUT.
    Topology,
    /// The daemons of a fabric that spans hosts, their NIs and links (links.md).
    Hosts,
    /// Create a partition of `nodes` (NI numbers; rank i is `nodes[i]`). The NIs must be in
    /// no partition. Their clients see the change (new EPOCH: attach again).
    PartitionCreate { name: String, nodes: Vec<u32> },
    /// Delete a partition: what its members had in flight fails (`cancelled`), their clients
    /// see the change (new EPOCH), and they are in no partition until one is created.
    PartitionDelete { name: String },
    /// Every partition.
    Partitions,
    /// One partition with its rank -> NI translation.
    PartitionShow { name: String },
    /// Port 0 of each NI; `nodes` empty means all.
    Ports {
        #[serde(default)]
        nodes: Vec<u32>,
    },
    /// Set an NI's port mode (`myrinet`, `ethernet`, `infiniband`) and/or link state (`up`,
    /// `down`). Taking a link down, or changing the mode of a link that is up (the link
    /// retrains), fails what was in flight through the port with `link down`.
    PortSet {
        node: u32,
        #[serde(default)]
        mode: Option<String>,
        #[serde(default)]
        state: Option<String>,
    },
    /// Map out a bad node: `node` is an NI number (the node holding that logical PE) or a
    /// six-hex-digit physical PE number. The logical PE it held moves to `replacement` or to
    /// the first spare node; routes stop passing through it.
    MapOutNode {
        node: String,
        #[serde(default)]
        replacement: Option<String>,
    },
    /// Map out the link between two neighbouring nodes (NI numbers or physical PE numbers):
    /// routes that used it detour with sign changes, an initial hop or a final -Z hop.
    MapOutLink { a: String, b: String },
    /// Undo every map-out: the torus and its LUT as the daemon started with them.
    MapOutClear,
    /// One SSD-T90 router's registers and its R_NET_LUT: `node` is an NI number (the node
    /// holding that logical PE) or a six-hex-digit physical PE number.
    RouterShow { node: String },
    /// Make the link between `position` and `position + 1` of every ring in `axis` (`X`,
    /// `Y`, `Z`) a dateline; `position` absent: clear that dimension's datelines.
    DatelineSet {
        axis: String,
        #[serde(default)]
        position: Option<u32>,
    },
    /// Inject MLINK checksum faults: the next `count` operations launched from NI `node`
    /// carry a bad header checksum (`kind` = `header`) or a bad data checksum (`data`).
    MlinkFault {
        node: u32,
        kind: String,
        #[serde(default)]
        count: Option<u32>,
    },
    /// Allow (or forbid) MLINK remote boot in a partition: WRITE anywhere into a member held
    /// in reset, and RESET to release it.
    PartitionRemoteBoot { name: String, enabled: bool },
    /// MLINK NOOP from the administrator: is NI `to` up as NI `from`'s partition sees it.
    DiagPing { from: u32, to: u32 },
    /// The NI sends to itself through its port and the fabric, from memory of the daemon's
    /// own, and every byte is checked. Needs no client and touches none.
    DiagLoopback {
        node: u32,
        /// Largest message, bytes [default 65536].
        #[serde(default)]
        size: Option<u64>,
        /// Messages [default 16].
        #[serde(default)]
        count: Option<u32>,
    },
    /// xnet-style load test: every member of a partition sends to every other, round after
    /// round, messages of many sizes through ports, routes and the fabric's copy engine, from
    /// memory of the daemon's own; every byte is checked. Needs no client and touches none.
    DiagTraffic {
        /// One partition [default: every partition, one after the other].
        #[serde(default)]
        partition: Option<String>,
        /// How long per partition, seconds [default 1].
        #[serde(default)]
        secs: Option<f64>,
        /// Largest message, bytes [default 1 MiB].
        #[serde(default)]
        max_size: Option<u64>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    Status(Status),
    Nodes { nodes: Vec<NodeInfo> },
    Counters { counters: Vec<NodeCounters> },
    Done,
    Error { error: String },
    Route(RouteInfo),
    Topology(TopologyInfo),
    Router(RouterInfo),
    Partitions { partitions: Vec<PartitionInfo> },
    Partition(PartitionInfo),
    Ports { ports: Vec<PortInfo> },
    Port(PortInfo),
    MapOut(MapOutInfo),
    Ping(PingInfo),
    Loopback(LoopbackInfo),
    Traffic(TrafficInfo),
    Hosts(HostsInfo),
}

/// The fabric's hosts as one daemon sees them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostsInfo {
    /// The host answering; none when the fabric is this one daemon.
    pub me: Option<String>,
    /// What carries frames between the daemons: `tcp` or `libfabric:PROVIDER`.
    #[serde(default)]
    pub transport: Option<String>,
    pub hosts: Vec<HostInfo>,
    /// The link's counters (frames, bytes, protocol errors, timeouts, connects) and the
    /// fabric's counters of work across hosts, name and value.
    #[serde(default)]
    pub counters: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    pub name: String,
    /// Where its daemon listens for the others.
    pub link: String,
    /// Its NIs: `first..end`.
    pub first: u32,
    pub end: u32,
    /// `self`, `up` or `down` (no connection to it now).
    pub state: String,
    /// Its daemon is the partition manager: partitions and map-outs change there.
    #[serde(default)]
    pub manager: bool,
    /// Fabric-wide changes (partitions, map-outs) made so far (the manager) or applied
    /// here (this host); none known for the others.
    #[serde(default)]
    pub changes: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub daemon_version: String,
    pub run_dir: String,
    pub pid: u32,
    pub uptime_secs: f64,
    pub nodes: u32,
    pub attached: u32,
    pub errors: u64,
    /// Planned restarts (`ni-ctl daemon restart`, SIGHUP) since the daemon first started.
    #[serde(default)]
    pub restarts: u64,
    /// How long the last one held clients up, milliseconds.
    #[serde(default)]
    pub last_restart_pause_ms: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NodeInfo {
    pub node: u32,
    pub socket: String,
    /// "free" or "attached".
    pub state: String,
    /// Peer process id of the attached client, when the socket reports one.
    pub client_pid: Option<i32>,
    pub attaches: u64,
    pub dma_regions: u32,
    pub dma_bytes: u64,
    /// `process` or `guest` (a QEMU), when a client is attached and the daemon could tell.
    #[serde(default)]
    pub client_kind: Option<String>,
    /// The client's command name (`/proc/PID/comm`).
    #[serde(default)]
    pub client_name: Option<String>,
    /// The client has set up its completion ring: peers may address it.
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub partition: Option<String>,
    /// Virtual PE number: the rank in the partition.
    #[serde(default)]
    pub rank: Option<u32>,
    /// Logical PE number (= the NI number).
    #[serde(default)]
    pub logical: u32,
    /// Physical PE number, hex `ZZYYXX`, per the routing-tag LUT.
    #[serde(default)]
    pub physical: String,
    /// Port 0's link: `up` or `down`.
    #[serde(default)]
    pub link: String,
    /// Port 0's link state machine state (e.g. `IN_SYNC_GO`).
    #[serde(default)]
    pub clsm: String,
    /// The host whose daemon serves it, when the fabric spans hosts.
    #[serde(default)]
    pub host: Option<String>,
}

/// Counter name and value pairs, in a stable order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NodeCounters {
    pub node: u32,
    pub counters: Vec<(String, u64)>,
    /// Signed values that go up and down (CM-5 `dr_message_count`).
    #[serde(default)]
    pub gauges: Vec<(String, i64)>,
}

/// A partition and its CM-5 relative numbering.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PartitionInfo {
    pub name: String,
    /// The number published in the control page's `PARTITION`.
    pub id: u32,
    pub size: u32,
    /// Rank order: `members[r].rank == r`.
    pub members: Vec<MemberInfo>,
    /// The rank -> NI translation as runs of consecutive ranks on consecutive NIs (what a
    /// CM-5 chunk table expresses chunk by chunk).
    pub runs: Vec<RunInfo>,
    /// MLINK remote boot is allowed (WRITE into held members, RESET releases them).
    #[serde(default)]
    pub remote_boot: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemberInfo {
    /// Relative address = virtual PE number.
    pub rank: u32,
    /// Physical NI = logical PE number.
    pub node: u32,
    /// Physical PE number, hex `ZZYYXX`.
    pub physical: String,
    /// `free`, `attached` or `ready`.
    pub state: String,
    /// `up` or `down`.
    pub link: String,
}

/// Ranks `ranks[0]..=ranks[1]` are NIs `nodes[0]..=nodes[1]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    pub ranks: [u32; 2],
    pub nodes: [u32; 2],
}

/// An NI's port 0 (Lanai X port model).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PortInfo {
    pub node: u32,
    pub port: u32,
    /// `myrinet`, `ethernet` (GEX) or `infiniband`.
    pub mode: String,
    /// The one-hot `MODE` port register.
    pub mode_register: u16,
    /// `up` or `down`.
    pub state: String,
    /// The link state machine's state name and code (the `STATE` port register).
    pub clsm: String,
    pub clsm_code: u8,
    /// ISR `P0_LINK_READY`.
    pub link_ready: bool,
    /// Counters of this port (the `p0_*` counters of the NI).
    pub counters: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MapOutInfo {
    /// `node`, `link` or `clear`.
    pub action: String,
    /// The node or link mapped out (physical PE numbers).
    #[serde(default)]
    pub mapped_out: Option<String>,
    /// The LUT rewrite: a logical PE moved to another physical node.
    #[serde(default)]
    pub remap: Option<RemapInfo>,
    /// Operations waiting in the fabric that failed (`link down`) because no route is left.
    pub failed: u64,
    /// NI pairs (from, to) with no route left; `None` when there are too many NIs to check.
    #[serde(default)]
    pub unreachable: Option<Vec<[u32; 2]>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RemapInfo {
    pub lpe: u32,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PingInfo {
    pub from: u32,
    pub to: u32,
    /// `from`'s partition, and `to`'s rank in it.
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default)]
    pub rank: Option<u32>,
    pub up: bool,
    /// `ok`, or the status a client's NOOP would get (`peer_down`, `out_of_partition`,
    /// `link_down`).
    pub status: String,
    pub detail: String,
    /// Torus hops between them.
    #[serde(default)]
    pub hops: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LoopbackInfo {
    pub node: u32,
    pub messages: u64,
    pub bytes: u64,
    /// Messages whose bytes came back different.
    pub mismatches: u64,
    pub secs: f64,
    pub ok: bool,
    /// Why it stopped, if it failed (e.g. link down).
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TrafficInfo {
    pub ok: bool,
    pub partitions: Vec<TrafficPartition>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TrafficPartition {
    pub name: String,
    pub members: u32,
    /// Messages delivered and checked, and their bytes.
    pub messages: u64,
    pub bytes: u64,
    pub secs: f64,
    pub mb_per_sec: f64,
    pub messages_per_sec: f64,
    /// Messages whose bytes arrived different.
    pub mismatches: u64,
    /// Messages the fabric refused, by status (e.g. `link_down`).
    pub refused: Vec<(String, u64)>,
    /// The first few failures, in words.
    pub failures: Vec<String>,
    /// Torus hops travelled, in total.
    pub hops: u64,
}

/// A route through the interconnect torus (CRAY SSD-T90 direction-order routing).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RouteInfo {
    /// Logical PE numbers (= NI numbers).
    pub from: u32,
    pub to: u32,
    /// Physical PE numbers, hex `ZZYYXX`.
    pub source: String,
    pub destination: String,
    /// The R_NET_LUT routing tag the source's router uses (Table 7 layout).
    pub tag: u64,
    /// Shortest hop count between the two nodes on the torus; more hops mean a detour.
    pub distance: u32,
    pub hops: Vec<HopInfo>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HopInfo {
    /// Physical PE numbers, hex `ZZYYXX`.
    pub from: String,
    pub to: String,
    /// `+X` .. `-Z`.
    pub direction: String,
    /// Router ports `X0` .. `Z1`, per each router's R_ORIENT.
    pub out_port: String,
    pub in_port: String,
    /// Virtual channel 0-3.
    pub vc: u8,
    /// `initial`, `travel` or `final`.
    pub kind: String,
    /// The hop crosses a dateline link.
    pub dateline: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TopologyInfo {
    pub x: u32,
    pub y: u32,
    pub z: u32,
    pub physical_nodes: u32,
    pub logical_pes: u32,
    /// `per_dimension` or `until_destination`: how long VC2/VC3 lasts after a dateline.
    pub vc_scope: String,
    pub datelines: Vec<DatelineInfo>,
    /// Logical PE -> physical PE, in logical order.
    pub lut: Vec<LutEntry>,
    /// Healthy physical nodes with no logical PE.
    pub spares: Vec<String>,
    pub mapped_out_nodes: Vec<String>,
    pub mapped_out_links: Vec<String>,
    /// R_NET_LUT entries PEs wrote by SPUT (they route as written until a map-out
    /// reprograms the LUTs).
    #[serde(default)]
    pub written_lut: Vec<WrittenLut>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WrittenLut {
    /// The router, hex `ZZYYXX`.
    pub router: String,
    pub index: u32,
    pub tag: u64,
}

/// One router's registers (SSD-T90 Tables 6-8) and its R_NET_LUT.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RouterInfo {
    /// Hex `ZZYYXX`.
    pub physical: String,
    /// The NI on this node, if any.
    pub ni: Option<u32>,
    pub r_sw: u64,
    pub r_orient: u64,
    pub r_lut_override: u64,
    pub r_sget_rtrn: u64,
    pub r_err0: u64,
    pub r_err1: u64,
    /// Entries 0..max(logical PEs, highest written + 1).
    pub lut: Vec<RouterLutEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RouterLutEntry {
    pub index: u32,
    pub tag: u64,
    /// Written by SPUT (else the administrator's computed tag).
    pub written: bool,
}

/// A dateline: the link between coordinates `between[0]` and `between[1]` of every ring in
/// dimension `axis`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DatelineInfo {
    pub axis: String,
    pub between: [u32; 2],
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LutEntry {
    pub lpe: u32,
    /// Hex `ZZYYXX`.
    pub physical: String,
}
