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
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    Status(Status),
    Nodes { nodes: Vec<NodeInfo> },
    Counters { counters: Vec<NodeCounters> },
    Done,
    Error { error: String },
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
