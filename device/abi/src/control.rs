//! The control socket protocol between `ni-device` and `ni-ctl`.
//!
//! One JSON object per line in each direction. Every request carries the protocol version;
//! a daemon answers a version it does not speak with an error naming the versions it does.

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
}

/// Counter name and value pairs, in a stable order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NodeCounters {
    pub node: u32,
    pub counters: Vec<(String, u64)>,
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
