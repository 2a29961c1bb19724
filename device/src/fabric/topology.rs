//! The CRAY SSD-T90 interconnect network as plain data (seed 003, digest §B).
//!
//! Nodes (a PE plus its network router) sit in a three-dimensional torus. A node is named by
//! its **physical PE number** `ZZYYXX` (hex hops from the origin node 000000), software names
//! it by a **logical PE number** through the routing-tag look-up table, and packets follow
//! **direction-order routing**: initial hop, +X, +Y, +Z, -X, -Y, -Z, final -Z hop.
//!
//! The router never chooses which way round a ring to go: the routing tag's X_SGN/Y_SGN/Z_SGN
//! bits do, and software writes the tags. So [`Torus::route_tag`] is the hardware (it follows
//! whatever tag it is given) and [`Torus::routing_tag`] is the software that programs the
//! R_NET_LUT: the shorter way round each ring (ties go +, as the +Y leg of Fig. 17 does in a
//! ring of four), and, once nodes or links are mapped out, whichever sign flip, initial hop
//! or final hop gives the shortest path that avoids them.
//!
//! Choices the seed leaves open, made here:
//! - A dateline is a link position in one dimension (the link between coordinates `c` and
//!   `c + 1`, wrapping), shared by every ring of that dimension, as Fig. 7 draws one line
//!   across the plane. The *dateline node* is the node a packet leaves over that link.
//! - A packet that leaves the dateline node over the dateline link moves from VC0 to VC2
//!   (VC1 to VC3), whether it passed through the node or entered the dimension there, and
//!   keeps it while it stays in the dimension. The seed's example (Fig. 6) is a packet passing
//!   through; read as a rule about the node's traffic that does "not switch to a new
//!   dimension", it covers a packet injected there too. Under that reading every VC0 buffer
//!   past the dateline link holds only packets that have not crossed it, so the ring's VC0
//!   channels form no cycle, and a VC2 packet could close a cycle only by crossing a
//!   dateline again — the violation the seed's note flags. Figs. 6 and 7 are deadlock-free.
//! - How long VC2 lasts is [`VcScope`]; see there for why the default is per dimension.
//! - The dateline-violation port (R_ERR0 `<5:0>`) is the output port at the dateline node.
//! - Routers are per node, so the LUT of router `s` may hold a different tag for the same
//!   logical PE than router `t`'s: the signs depend on where the packet starts.
//! - The LUT has 544 entries per router. Entries nobody wrote hold the tag software would
//!   program (computed here); entries written by SPUT hold what was written until the
//!   administrator's tooling reprograms the network (a map-out). R_LUT_OVERRIDE's modes 1-3
//!   (Table 6) apply per router.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use ni_abi::control::{DatelineInfo, HopInfo, LutEntry, RouteInfo, TopologyInfo};

/// Largest X dimension: the routing tag's X address is `<2:0>`.
pub const MAX_X: u32 = 8;
/// Largest Y dimension: the routing tag's Y address is `<12:8>`.
pub const MAX_Y: u32 = 32;
/// Largest Z dimension: the routing tag's Z address is `<19:16>`.
pub const MAX_Z: u32 = 16;
/// Largest machine; also what the 12-bit `Dest`/`Src` packet fields can name.
pub const MAX_NODES: u32 = MAX_X * MAX_Y * MAX_Z;

// Routing tag fields, Table 7.
const X_ADR_MASK: u64 = 0x7;
const X_SGN_BIT: u32 = 7;
const Y_ADR_SHIFT: u32 = 8;
const Y_ADR_MASK: u64 = 0x1F;
const Y_SGN_BIT: u32 = 15;
const Z_ADR_SHIFT: u32 = 16;
const Z_ADR_MASK: u64 = 0xF;
const Z_SGN_BIT: u32 = 23;
const INITIAL_HOP_SHIFT: u32 = 32;
const INITIAL_HOP_NONE: u64 = 0b11;
const FINAL_HOP_BIT: u32 = 36;
const ADAPTIVE_BIT: u32 = 37;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Axis {
    X,
    Y,
    Z,
}

impl Axis {
    pub const ALL: [Axis; 3] = [Axis::X, Axis::Y, Axis::Z];

    /// Bit of this dimension in R_ORIENT `<2:0>`.
    pub fn index(self) -> u32 {
        self as u32
    }

    fn max(self) -> u32 {
        match self {
            Axis::X => MAX_X,
            Axis::Y => MAX_Y,
            Axis::Z => MAX_Z,
        }
    }
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Axis::X => "X",
            Axis::Y => "Y",
            Axis::Z => "Z",
        })
    }
}

/// A routing tag's direction bit: 0 = +, 1 = -.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Sign {
    Plus,
    Minus,
}

impl Sign {
    fn bit(self) -> u64 {
        match self {
            Sign::Plus => 0,
            Sign::Minus => 1,
        }
    }

    fn from_bit(b: u64) -> Sign {
        if b & 1 == 0 {
            Sign::Plus
        } else {
            Sign::Minus
        }
    }

    fn flip(self) -> Sign {
        match self {
            Sign::Plus => Sign::Minus,
            Sign::Minus => Sign::Plus,
        }
    }
}

/// One of the six directions a link leaves a router in: +X ... -Z.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Direction {
    pub sign: Sign,
    pub axis: Axis,
}

impl Direction {
    pub const PLUS_X: Direction = Direction::new(Sign::Plus, Axis::X);
    pub const PLUS_Y: Direction = Direction::new(Sign::Plus, Axis::Y);
    pub const PLUS_Z: Direction = Direction::new(Sign::Plus, Axis::Z);
    pub const MINUS_X: Direction = Direction::new(Sign::Minus, Axis::X);
    pub const MINUS_Y: Direction = Direction::new(Sign::Minus, Axis::Y);
    pub const MINUS_Z: Direction = Direction::new(Sign::Minus, Axis::Z);

    /// Direction-order routing travels the dimensions in this order.
    pub const ORDER: [Direction; 6] = [
        Direction::PLUS_X,
        Direction::PLUS_Y,
        Direction::PLUS_Z,
        Direction::MINUS_X,
        Direction::MINUS_Y,
        Direction::MINUS_Z,
    ];

    pub const fn new(sign: Sign, axis: Axis) -> Direction {
        Direction { sign, axis }
    }

    /// Position in [`Direction::ORDER`].
    pub fn order(self) -> usize {
        Direction::ORDER
            .iter()
            .position(|&d| d == self)
            .expect("every direction is in the order")
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.sign {
            Sign::Plus => '+',
            Sign::Minus => '-',
        };
        write!(f, "{s}{}", self.axis)
    }
}

/// A network router port. The discriminant is the port's bit in R_ERR0 `<5:0>`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Port {
    X0,
    X1,
    Y0,
    Y1,
    Z0,
    Z1,
}

impl Port {
    /// Bit of this port in R_ERR0 `<5:0>` (dateline violation) and, plus 16, `<21:16>`.
    pub fn index(self) -> u32 {
        self as u32
    }

    /// The port software oriented as `dir` with R_ORIENT `<2:0>` = `orient`: bit d = 0 makes
    /// d0 the + port and d1 the - port, bit d = 1 swaps them (Table 1).
    pub fn for_direction(dir: Direction, orient: u8) -> Port {
        let swapped = (orient >> dir.axis.index()) & 1 == 1;
        let zero = (dir.sign == Sign::Plus) != swapped;
        match (dir.axis, zero) {
            (Axis::X, true) => Port::X0,
            (Axis::X, false) => Port::X1,
            (Axis::Y, true) => Port::Y0,
            (Axis::Y, false) => Port::Y1,
            (Axis::Z, true) => Port::Z0,
            (Axis::Z, false) => Port::Z1,
        }
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A physical PE number: the node's position in hops from the origin node 000000. Printed,
/// as the seed prints it, as the hex digits `ZZYYXX` ("010300 is 3 hops +Y and 1 hop +Z").
///
/// Field order makes the derived ordering the numeric order of `ZZYYXX`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PhysPe {
    pub z: u32,
    pub y: u32,
    pub x: u32,
}

impl PhysPe {
    pub const ORIGIN: PhysPe = PhysPe { z: 0, y: 0, x: 0 };

    pub const fn new(x: u32, y: u32, z: u32) -> PhysPe {
        PhysPe { z, y, x }
    }

    /// `0xZZYYXX`.
    pub fn number(self) -> u32 {
        (self.z << 16) | (self.y << 8) | self.x
    }

    pub fn from_number(n: u32) -> PhysPe {
        PhysPe::new(n & 0xFF, (n >> 8) & 0xFF, (n >> 16) & 0xFF)
    }

    pub fn coord(self, a: Axis) -> u32 {
        match a {
            Axis::X => self.x,
            Axis::Y => self.y,
            Axis::Z => self.z,
        }
    }

    fn with(mut self, a: Axis, v: u32) -> PhysPe {
        match a {
            Axis::X => self.x = v,
            Axis::Y => self.y = v,
            Axis::Z => self.z = v,
        }
        self
    }
}

impl fmt::Display for PhysPe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02X}{:02X}{:02X}", self.z, self.y, self.x)
    }
}

impl FromStr for PhysPe {
    type Err = TopologyError;

    fn from_str(s: &str) -> Result<PhysPe, TopologyError> {
        if s.len() != 6 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(TopologyError::BadPhysPe(s.into()));
        }
        let n = u32::from_str_radix(s, 16).map_err(|_| TopologyError::BadPhysPe(s.into()))?;
        Ok(PhysPe::from_number(n))
    }
}

/// The torus's size in each dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Dims {
    x: u32,
    y: u32,
    z: u32,
}

impl Dims {
    pub fn new(x: u32, y: u32, z: u32) -> Result<Dims, TopologyError> {
        for (axis, size) in [(Axis::X, x), (Axis::Y, y), (Axis::Z, z)] {
            if size == 0 || size > axis.max() {
                return Err(TopologyError::DimensionOutOfRange {
                    axis,
                    size,
                    max: axis.max(),
                });
            }
        }
        Ok(Dims { x, y, z })
    }

    /// The smallest torus with at least `n` nodes. Among equally small ones: the smallest
    /// diameter, then the most even sides (a cube over a line), then the longer Y, then the
    /// longer X — which for 16 nodes is the seed's own 16-PE machine, 2×4×2 (Fig. 12).
    pub fn smallest_holding(n: u32) -> Result<Dims, TopologyError> {
        if n == 0 || n > MAX_NODES {
            return Err(TopologyError::NodeCount { n });
        }
        use std::cmp::Reverse;
        let candidates = (1..=MAX_X).flat_map(|x| {
            (1..=MAX_Y).flat_map(move |y| (1..=MAX_Z).map(move |z| Dims { x, y, z }))
        });
        let best = candidates.filter(|d| d.nodes() >= n).min_by_key(|d| {
            (
                d.nodes(),
                d.diameter(),
                d.x * d.x + d.y * d.y + d.z * d.z,
                Reverse(d.y),
                Reverse(d.x),
            )
        });
        Ok(best.expect("8x32x16 holds every allowed count"))
    }

    pub fn size(&self, a: Axis) -> u32 {
        match a {
            Axis::X => self.x,
            Axis::Y => self.y,
            Axis::Z => self.z,
        }
    }

    pub fn nodes(&self) -> u32 {
        self.x * self.y * self.z
    }

    /// Longest shortest path: half of each ring.
    pub fn diameter(&self) -> u32 {
        Axis::ALL.iter().map(|&a| self.size(a) / 2).sum()
    }

    pub fn contains(&self, p: PhysPe) -> bool {
        p.x < self.x && p.y < self.y && p.z < self.z
    }

    /// Dense index, X fastest: the order physical nodes are listed and first assigned
    /// logical numbers in.
    pub fn index(&self, p: PhysPe) -> usize {
        (p.x + self.x * (p.y + self.y * p.z)) as usize
    }

    pub fn node(&self, i: usize) -> PhysPe {
        let i = i as u32;
        PhysPe::new(i % self.x, (i / self.x) % self.y, i / (self.x * self.y))
    }

    /// Every physical node, in [`Dims::index`] order.
    pub fn all(&self) -> impl Iterator<Item = PhysPe> + '_ {
        (0..self.nodes() as usize).map(|i| self.node(i))
    }

    /// Hops one way round a ring of `k` from `from` to `to`.
    fn ring_hops(k: u32, from: u32, to: u32, sign: Sign) -> u32 {
        match sign {
            Sign::Plus => (to + k - from) % k,
            Sign::Minus => (from + k - to) % k,
        }
    }

    /// The shorter way round; a tie goes + (Fig. 17 takes +Y from 03 to 01 in a ring of 4).
    fn shorter_sign(k: u32, from: u32, to: u32) -> Sign {
        if Self::ring_hops(k, from, to, Sign::Plus) <= Self::ring_hops(k, from, to, Sign::Minus) {
            Sign::Plus
        } else {
            Sign::Minus
        }
    }

    /// Shortest hop count between two nodes on the torus, wraparound links included.
    pub fn distance(&self, a: PhysPe, b: PhysPe) -> u32 {
        Axis::ALL
            .iter()
            .map(|&ax| {
                let k = self.size(ax);
                let (f, t) = (a.coord(ax), b.coord(ax));
                Self::ring_hops(k, f, t, Sign::Plus).min(Self::ring_hops(k, f, t, Sign::Minus))
            })
            .sum()
    }
}

impl fmt::Display for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.x, self.y, self.z)
    }
}

impl FromStr for Dims {
    type Err = TopologyError;

    fn from_str(s: &str) -> Result<Dims, TopologyError> {
        let bad = || TopologyError::BadDims(s.into());
        let parts: Vec<u32> = s
            .split(['x', 'X'])
            .map(|p| p.trim().parse::<u32>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match parts[..] {
            [x, y, z] => Dims::new(x, y, z),
            _ => Err(bad()),
        }
    }
}

/// A routing tag as an R_NET_LUT register holds it (Table 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RoutingTag {
    pub x: u32,
    pub x_sgn: Sign,
    pub y: u32,
    pub y_sgn: Sign,
    pub z: u32,
    pub z_sgn: Sign,
    /// INITIAL_HOP `<33:32>`: one hop in +X (00), +Y (01) or +Z (10) first; 11 = none.
    pub initial_hop: Option<Axis>,
    /// FINAL_HOP, bit 36: one hop in -Z last. Ignored by the routers when Z_SGN = 1.
    pub final_hop: bool,
    /// Bit 37: adaptive routing. The model routes such tags in direction order, which is
    /// always one of the paths an adaptive packet may take.
    pub adaptive: bool,
}

impl RoutingTag {
    /// A plain tag: travel to `dest` with the given signs, no extra hops.
    pub fn to(dest: PhysPe, signs: [Sign; 3]) -> RoutingTag {
        RoutingTag {
            x: dest.x,
            x_sgn: signs[0],
            y: dest.y,
            y_sgn: signs[1],
            z: dest.z,
            z_sgn: signs[2],
            initial_hop: None,
            final_hop: false,
            adaptive: false,
        }
    }

    pub fn addr(&self, a: Axis) -> u32 {
        match a {
            Axis::X => self.x,
            Axis::Y => self.y,
            Axis::Z => self.z,
        }
    }

    pub fn sgn(&self, a: Axis) -> Sign {
        match a {
            Axis::X => self.x_sgn,
            Axis::Y => self.y_sgn,
            Axis::Z => self.z_sgn,
        }
    }

    /// The final hop the routers actually make: "When the Z_SGN bit is a 1, the hardware
    /// forces the final hop bit to 0".
    pub fn takes_final_hop(&self) -> bool {
        self.final_hop && self.z_sgn == Sign::Plus
    }

    pub fn encode(&self) -> u64 {
        let initial = match self.initial_hop {
            Some(a) => a.index() as u64,
            None => INITIAL_HOP_NONE,
        };
        (self.x as u64 & X_ADR_MASK)
            | (self.x_sgn.bit() << X_SGN_BIT)
            | ((self.y as u64 & Y_ADR_MASK) << Y_ADR_SHIFT)
            | (self.y_sgn.bit() << Y_SGN_BIT)
            | ((self.z as u64 & Z_ADR_MASK) << Z_ADR_SHIFT)
            | (self.z_sgn.bit() << Z_SGN_BIT)
            | (initial << INITIAL_HOP_SHIFT)
            | ((self.final_hop as u64) << FINAL_HOP_BIT)
            | ((self.adaptive as u64) << ADAPTIVE_BIT)
    }

    /// Decode a register value; the bits Table 7 marks unused are ignored, as the router does.
    pub fn decode(v: u64) -> RoutingTag {
        RoutingTag {
            x: (v & X_ADR_MASK) as u32,
            x_sgn: Sign::from_bit(v >> X_SGN_BIT),
            y: ((v >> Y_ADR_SHIFT) & Y_ADR_MASK) as u32,
            y_sgn: Sign::from_bit(v >> Y_SGN_BIT),
            z: ((v >> Z_ADR_SHIFT) & Z_ADR_MASK) as u32,
            z_sgn: Sign::from_bit(v >> Z_SGN_BIT),
            initial_hop: match (v >> INITIAL_HOP_SHIFT) & 0b11 {
                0 => Some(Axis::X),
                1 => Some(Axis::Y),
                2 => Some(Axis::Z),
                _ => None,
            },
            final_hop: (v >> FINAL_HOP_BIT) & 1 == 1,
            adaptive: (v >> ADAPTIVE_BIT) & 1 == 1,
        }
    }
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum VirtualChannel {
    Vc0,
    Vc1,
    Vc2,
    Vc3,
}

impl VirtualChannel {
    pub fn number(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for VirtualChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VC{}", self.number())
    }
}

/// Requests and responses travel on separate VCs so neither can block the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PacketClass {
    /// VC0, and VC2 past a dateline.
    Request,
    /// VC1, and VC3 past a dateline.
    Response,
}

impl PacketClass {
    fn vc(self, past_dateline: bool) -> VirtualChannel {
        match (self, past_dateline) {
            (PacketClass::Request, false) => VirtualChannel::Vc0,
            (PacketClass::Request, true) => VirtualChannel::Vc2,
            (PacketClass::Response, false) => VirtualChannel::Vc1,
            (PacketClass::Response, true) => VirtualChannel::Vc3,
        }
    }
}

/// How long a packet stays on VC2/VC3 once a dateline moved it there.
///
/// The seed says "until the packet reaches the destination node" in a one-dimension example
/// (Fig. 6), yet Fig. 7 places an X and a Y dateline in the same plane. Read literally, every
/// packet that passes through the X dateline and then the Y dateline would be a dateline
/// violation, so a machine with datelines in two dimensions could not route minimally. The
/// default therefore returns a packet to VC0/VC1 when it switches to a new dimension (each
/// ring is its own deadlock cycle, broken by its own dateline); the literal reading is kept
/// selectable.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum VcScope {
    /// VC2 lasts until the packet switches to a new dimension.
    #[default]
    PerDimension,
    /// VC2 lasts until the destination; any later dateline pass-through is a violation.
    UntilDestination,
}

/// A communication link: the two unidirectional channels between `plus_end`'s + port and
/// `minus_end`'s - port in dimension `axis`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Link {
    pub axis: Axis,
    pub plus_end: PhysPe,
    pub minus_end: PhysPe,
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{} ({})", self.plus_end, self.minus_end, self.axis)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum HopKind {
    Initial,
    Travel,
    Final,
}

impl fmt::Display for HopKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HopKind::Initial => "initial",
            HopKind::Travel => "travel",
            HopKind::Final => "final",
        })
    }
}

/// One hop of a route: out of `from`'s `out_port`, over `link`, into `to`'s `in_port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hop {
    pub from: PhysPe,
    pub to: PhysPe,
    pub direction: Direction,
    pub out_port: Port,
    pub in_port: Port,
    pub link: Link,
    pub vc: VirtualChannel,
    pub kind: HopKind,
    /// The link is a dateline (whether or not the VC changed on it).
    pub dateline: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Route {
    pub source: PhysPe,
    pub destination: PhysPe,
    pub tag: RoutingTag,
    pub class: PacketClass,
    pub hops: Vec<Hop>,
}

impl Route {
    pub fn len(&self) -> usize {
        self.hops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hops.is_empty()
    }

    pub fn uses_link(&self, l: &Link) -> bool {
        self.hops.iter().any(|h| h.link == *l)
    }

    /// Whether the packet enters or leaves `p` on the way (source and destination included).
    pub fn visits(&self, p: PhysPe) -> bool {
        self.source == p || self.hops.iter().any(|h| h.to == p)
    }
}

/// A LUT rewrite done by [`Torus::map_out_node`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Remap {
    pub lpe: u32,
    pub from: PhysPe,
    pub to: PhysPe,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum TopologyError {
    #[error("a {axis} dimension of {size} nodes is outside 1 to {max} (the routing tag's {axis} address field)")]
    DimensionOutOfRange { axis: Axis, size: u32, max: u32 },
    #[error("cannot parse torus dimensions {0:?}: expected XxYxZ, e.g. 2x4x2")]
    BadDims(String),
    #[error("{n} nodes: a torus holds 1 to {MAX_NODES} (8x32x16)")]
    NodeCount { n: u32 },
    #[error("{lpes} logical PEs do not fit the {nodes} physical nodes of the torus")]
    TooManyLogicalPes { lpes: u32, nodes: u32 },
    #[error("no logical PE {lpe}: the routing-tag LUT holds {count} logical PEs")]
    NoSuchLogicalPe { lpe: u32, count: u32 },
    #[error("physical PE {pe} is outside the {dims} torus")]
    NoSuchPhysicalPe { pe: PhysPe, dims: Dims },
    #[error("cannot parse physical PE number {0:?}: expected six hex digits ZZYYXX")]
    BadPhysPe(String),
    #[error("R_ORIENT value {0:#x} sets bits above <2:0>")]
    BadOrient(u8),
    #[error("no {axis} link at position {position}: the {axis} dimension has {size} nodes")]
    NoSuchLinkPosition {
        axis: Axis,
        position: u32,
        size: u32,
    },
    #[error("node {node} has no {direction} link: its dimension has a single node")]
    NoLink { node: PhysPe, direction: Direction },
    #[error("routing tag {tag:#x} names a node outside the {dims} torus (packet misroute, R_ERR0 bit 56)")]
    Misroute { tag: u64, dims: Dims },
    #[error("node {0} is mapped out")]
    NodeMappedOut(PhysPe),
    #[error("node {0} is already mapped out")]
    AlreadyMappedOut(PhysPe),
    #[error("link {0} is mapped out")]
    LinkMappedOut(Link),
    #[error("dateline violation at node {node} port {port}: a packet already on {vc} passed through another dateline node (R_ERR0 <5:0>)")]
    DatelineViolation {
        node: PhysPe,
        port: Port,
        vc: VirtualChannel,
    },
    #[error("no spare physical node to take logical PE {lpe} from bad node {bad}: every healthy node holds a logical PE")]
    NoSpareNode { lpe: u32, bad: PhysPe },
    #[error("physical node {node} already holds logical PE {lpe}")]
    NodeInUse { node: PhysPe, lpe: u32 },
    #[error("no direction-order route from {from} to {to} avoids the mapped-out nodes and links, with or without an initial or final hop")]
    NoRoute { from: PhysPe, to: PhysPe },
    #[error("physical nodes {a} and {b} are not neighbours: no link joins them")]
    NotNeighbours { a: PhysPe, b: PhysPe },
    #[error("link {0} is already mapped out")]
    LinkAlreadyMappedOut(Link),
    #[error("routing tag {tag:#x} from {from} ends at {reached}, not at logical PE {lpe}'s node {expected} (packet misroute, R_ERR0 bit 56)")]
    Misdelivered {
        tag: u64,
        from: PhysPe,
        lpe: u32,
        reached: PhysPe,
        expected: PhysPe,
    },
    #[error("special-routing delta {delta} in {axis}: a {axis} ring of {size} node(s) takes at most {max} steps either way")]
    BadDelta {
        axis: Axis,
        delta: i8,
        size: u32,
        max: u32,
    },
    #[error("no R_NET_LUT entry {0}: a router holds 544")]
    NoSuchLutEntry(u32),
}

/// The interconnect network: the torus, its router settings, the routing-tag LUT and what
/// has been mapped out.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Torus {
    dims: Dims,
    /// R_ORIENT `<2:0>` per router, in [`Dims::index`] order.
    r_orient: Vec<u8>,
    /// Per dimension, bit `c`: the link between coordinates `c` and `c + 1` is a dateline.
    datelines: [u32; 3],
    vc_scope: VcScope,
    /// Logical PE number -> physical node: the destination each R_NET_LUT entry routes to.
    lut: Vec<PhysPe>,
    mapped_out_nodes: BTreeSet<PhysPe>,
    mapped_out_links: BTreeSet<Link>,
    /// R_NET_LUT entries software wrote by SPUT, by (router index, entry): they read back
    /// and route as written until the administrator's tooling reprograms the LUTs (a
    /// map-out). Entries nobody wrote hold what that tooling computes ([`Torus::routing_tag`]).
    #[serde(with = "crate::handover::serde_with::pairs")]
    lut_written: BTreeMap<(usize, u32), u64>,
    /// R_LUT_OVERRIDE (mode `<41:40>`, tag `<37:0>`) of the routers where it is not 0, by
    /// router index: so whether any is set is known without a walk over every router.
    lut_override: BTreeMap<usize, u64>,
}

impl Torus {
    /// A torus with `logical_pes` logical PEs on its first physical nodes in
    /// [`Dims::index`] order; the rest are spares. No datelines, R_ORIENT 0 everywhere.
    pub fn new(dims: Dims, logical_pes: u32) -> Result<Torus, TopologyError> {
        if logical_pes > dims.nodes() {
            return Err(TopologyError::TooManyLogicalPes {
                lpes: logical_pes,
                nodes: dims.nodes(),
            });
        }
        Ok(Torus {
            dims,
            r_orient: vec![0; dims.nodes() as usize],
            datelines: [0; 3],
            vc_scope: VcScope::default(),
            lut: (0..logical_pes as usize).map(|i| dims.node(i)).collect(),
            mapped_out_nodes: BTreeSet::new(),
            mapped_out_links: BTreeSet::new(),
            lut_written: BTreeMap::new(),
            lut_override: BTreeMap::new(),
        })
    }

    /// The daemon's default for `n` NIs: the smallest torus holding them, NI i as logical PE
    /// i, and a dateline on the wraparound link of every dimension with a ring.
    pub fn for_nodes(n: u32) -> Result<Torus, TopologyError> {
        let mut t = Torus::new(Dims::smallest_holding(n)?, n)?;
        for a in Axis::ALL {
            let k = t.dims.size(a);
            if k > 1 {
                t.set_dateline(a, k - 1)?;
            }
        }
        Ok(t)
    }

    /// `n` logical PEs on a torus of `dims` (the nodes past them are spares, which map-outs
    /// can move logical PEs to), with datelines where [`Torus::for_nodes`] puts them.
    pub fn with_dims(dims: Dims, n: u32) -> Result<Torus, TopologyError> {
        let mut t = Torus::new(dims, n)?;
        for a in Axis::ALL {
            let k = t.dims.size(a);
            if k > 1 {
                t.set_dateline(a, k - 1)?;
            }
        }
        Ok(t)
    }

    pub fn dims(&self) -> Dims {
        self.dims
    }

    /// Whether any node or link is mapped out (without, every route is a shortest path).
    pub fn has_map_outs(&self) -> bool {
        !self.mapped_out_nodes.is_empty() || !self.mapped_out_links.is_empty()
    }

    /// Every route is the computed shortest one: nothing mapped out, no LUT entry written
    /// by software, no override mode.
    pub fn is_pristine(&self) -> bool {
        !self.has_map_outs() && self.lut_written.is_empty() && self.lut_override.is_empty()
    }

    /// R_NET_LUT entry `i` of router `router` as a PE reads it back: what SPUT wrote, else
    /// the tag the administrator's tooling programs (0 past the logical PEs, or where no
    /// route is left).
    pub fn lut_entry(&self, router: PhysPe, i: u32) -> Result<u64, TopologyError> {
        self.check(router)?;
        if i >= ni_abi::t3e::router::LUT_ENTRIES {
            return Err(TopologyError::NoSuchLutEntry(i));
        }
        if !self.lut_written.contains_key(&(self.dims.index(router), i)) && i >= self.logical_pes()
        {
            return Ok(0);
        }
        Ok(self.lut_tag(router, i).unwrap_or(0))
    }

    /// R_NET_LUT entry `i` of `router`: as written, else as computed (failing where the
    /// tooling finds no route).
    fn lut_tag(&self, router: PhysPe, i: u32) -> Result<u64, TopologyError> {
        self.check(router)?;
        if let Some(&t) = self.lut_written.get(&(self.dims.index(router), i)) {
            return Ok(t);
        }
        self.routing_tag(router, i).map(|t| t.encode())
    }

    /// SPUT of R_NET_LUT entry `i` at `router`.
    pub fn write_lut(&mut self, router: PhysPe, i: u32, tag: u64) -> Result<(), TopologyError> {
        self.check(router)?;
        if i >= ni_abi::t3e::router::LUT_ENTRIES {
            return Err(TopologyError::NoSuchLutEntry(i));
        }
        let k = (self.dims.index(router), i);
        self.lut_written.insert(k, tag);
        Ok(())
    }

    /// The SPUT-written LUT entries: (router, entry, tag).
    pub fn written_lut(&self) -> Vec<(PhysPe, u32, u64)> {
        self.lut_written
            .iter()
            .map(|(&(r, i), &t)| (self.dims.node(r), i, t))
            .collect()
    }

    pub fn lut_override(&self, router: PhysPe) -> Result<u64, TopologyError> {
        self.check(router)?;
        Ok(self
            .lut_override
            .get(&self.dims.index(router))
            .copied()
            .unwrap_or(0))
    }

    pub fn set_lut_override(&mut self, router: PhysPe, v: u64) -> Result<(), TopologyError> {
        self.check(router)?;
        let i = self.dims.index(router);
        if v == 0 {
            self.lut_override.remove(&i);
        } else {
            self.lut_override.insert(i, v);
        }
        Ok(())
    }

    /// The tag router `router` gives a packet for logical PE `lpe`, per its R_LUT_OVERRIDE
    /// mode (Table 6): 0 the LPE's own entry; 1 and 2 the entry of `lpe >> 2` with bits 0 and
    /// 8 taken from the LPE (bits 0 and 1, or 1 and 8 as the table prints for mode 2); 3 the
    /// override register's tag for every packet.
    pub fn effective_tag(&self, router: PhysPe, lpe: u32) -> Result<RoutingTag, TopologyError> {
        use ni_abi::t3e::router::{OVERRIDE_MODE_MASK, OVERRIDE_MODE_SHIFT, TAG_MASK};
        let o = self.lut_override(router)?;
        let bit = |v: u32, b: u32| ((v >> b) & 1) as u64;
        let with = |t: u64, b0: u64, b8: u64| (t & !(1 | 1 << 8)) | b0 | b8 << 8;
        let tag = match (o >> OVERRIDE_MODE_SHIFT) & OVERRIDE_MODE_MASK {
            0 => self.lut_tag(router, lpe)?,
            1 => with(self.lut_tag(router, lpe >> 2)?, bit(lpe, 0), bit(lpe, 1)),
            2 => with(self.lut_tag(router, lpe >> 2)?, bit(lpe, 1), bit(lpe, 8)),
            _ => o & TAG_MASK,
        };
        Ok(RoutingTag::decode(tag))
    }

    /// Special routing (SSD "Special Routing"): from `start`, the deltas pΔX, pΔY, pΔZ, sΔX,
    /// sΔY, sΔZ in that order, each one step at a time in its sign's direction. LUTs and
    /// datelines play no part; mapped-out links and nodes stop the packet.
    pub fn special_route(&self, start: PhysPe, deltas: [i8; 6]) -> Result<PhysPe, TopologyError> {
        self.check(start)?;
        let mut at = start;
        for (i, &d) in deltas.iter().enumerate() {
            let axis = Axis::ALL[i % 3];
            let size = self.dims.size(axis);
            let steps = d.unsigned_abs() as u32;
            if steps >= size.max(1) && d != 0 {
                return Err(TopologyError::BadDelta {
                    axis,
                    delta: d,
                    size,
                    max: size.saturating_sub(1),
                });
            }
            let sign = if d < 0 { Sign::Minus } else { Sign::Plus };
            for _ in 0..steps {
                let dir = Direction::new(sign, axis);
                let link = self.link(at, dir)?;
                if self.mapped_out_links.contains(&link) {
                    return Err(TopologyError::LinkMappedOut(link));
                }
                at = self.neighbor(at, dir)?;
                if self.mapped_out_nodes.contains(&at) {
                    return Err(TopologyError::NodeMappedOut(at));
                }
            }
        }
        Ok(at)
    }

    /// The link that joins neighbours `a` and `b`, with the direction it leaves `a` in: the
    /// link leaving `a` in the plus direction when `b` is its plus neighbour, else the one
    /// leaving it in minus. (In a ring of two both links join them: this is the one leaving
    /// `a` in plus, and the one leaving `b` in plus is the other.)
    pub fn link_between(&self, a: PhysPe, b: PhysPe) -> Result<(Link, Direction), TopologyError> {
        self.check(a)?;
        self.check(b)?;
        for sign in [Sign::Plus, Sign::Minus] {
            for axis in Axis::ALL {
                let d = Direction::new(sign, axis);
                if self.neighbor(a, d).ok() == Some(b) && a != b {
                    return Ok((self.link(a, d)?, d));
                }
            }
        }
        Err(TopologyError::NotNeighbours { a, b })
    }

    pub fn logical_pes(&self) -> u32 {
        self.lut.len() as u32
    }

    /// The LUT: index = logical PE number.
    pub fn lut(&self) -> &[PhysPe] {
        &self.lut
    }

    pub fn physical(&self, lpe: u32) -> Result<PhysPe, TopologyError> {
        self.lut
            .get(lpe as usize)
            .copied()
            .ok_or(TopologyError::NoSuchLogicalPe {
                lpe,
                count: self.logical_pes(),
            })
    }

    pub fn logical(&self, p: PhysPe) -> Option<u32> {
        self.lut.iter().position(|&q| q == p).map(|i| i as u32)
    }

    /// Healthy physical nodes that hold no logical PE, in [`Dims::index`] order.
    pub fn spares(&self) -> Vec<PhysPe> {
        self.dims
            .all()
            .filter(|p| !self.mapped_out_nodes.contains(p) && !self.lut.contains(p))
            .collect()
    }

    pub fn mapped_out_nodes(&self) -> impl Iterator<Item = PhysPe> + '_ {
        self.mapped_out_nodes.iter().copied()
    }

    pub fn mapped_out_links(&self) -> impl Iterator<Item = Link> + '_ {
        self.mapped_out_links.iter().copied()
    }

    pub fn vc_scope(&self) -> VcScope {
        self.vc_scope
    }

    pub fn set_vc_scope(&mut self, s: VcScope) {
        self.vc_scope = s;
    }

    fn check(&self, p: PhysPe) -> Result<(), TopologyError> {
        if self.dims.contains(p) {
            Ok(())
        } else {
            Err(TopologyError::NoSuchPhysicalPe {
                pe: p,
                dims: self.dims,
            })
        }
    }

    /// Make the link between coordinates `position` and `position + 1` (wrapping) of every
    /// ring in dimension `axis` a dateline.
    pub fn set_dateline(&mut self, axis: Axis, position: u32) -> Result<(), TopologyError> {
        let size = self.dims.size(axis);
        if size < 2 || position >= size {
            return Err(TopologyError::NoSuchLinkPosition {
                axis,
                position,
                size,
            });
        }
        self.datelines[axis as usize] |= 1 << position;
        Ok(())
    }

    pub fn clear_datelines(&mut self, axis: Axis) {
        self.datelines[axis as usize] = 0;
    }

    /// Every dateline as (dimension, link position).
    pub fn datelines(&self) -> Vec<(Axis, u32)> {
        Axis::ALL
            .iter()
            .flat_map(|&a| {
                (0..self.dims.size(a))
                    .filter(move |c| self.datelines[a as usize] & (1 << c) != 0)
                    .map(move |c| (a, c))
            })
            .collect()
    }

    pub fn is_dateline(&self, l: &Link) -> bool {
        self.datelines[l.axis as usize] & (1 << l.plus_end.coord(l.axis)) != 0
    }

    pub fn r_orient(&self, p: PhysPe) -> Result<u8, TopologyError> {
        self.check(p)?;
        Ok(self.r_orient[self.dims.index(p)])
    }

    pub fn set_r_orient(&mut self, p: PhysPe, bits: u8) -> Result<(), TopologyError> {
        self.check(p)?;
        if bits > 0b111 {
            return Err(TopologyError::BadOrient(bits));
        }
        let i = self.dims.index(p);
        self.r_orient[i] = bits;
        Ok(())
    }

    /// The port `p`'s router uses for `dir`, per its R_ORIENT.
    pub fn port(&self, p: PhysPe, dir: Direction) -> Result<Port, TopologyError> {
        Ok(Port::for_direction(dir, self.r_orient(p)?))
    }

    pub fn neighbor(&self, p: PhysPe, dir: Direction) -> Result<PhysPe, TopologyError> {
        self.check(p)?;
        let k = self.dims.size(dir.axis);
        if k < 2 {
            return Err(TopologyError::NoLink {
                node: p,
                direction: dir,
            });
        }
        let c = p.coord(dir.axis);
        let n = match dir.sign {
            Sign::Plus => (c + 1) % k,
            Sign::Minus => (c + k - 1) % k,
        };
        Ok(p.with(dir.axis, n))
    }

    /// The link `p` uses in direction `dir`.
    pub fn link(&self, p: PhysPe, dir: Direction) -> Result<Link, TopologyError> {
        let n = self.neighbor(p, dir)?;
        let (plus_end, minus_end) = match dir.sign {
            Sign::Plus => (p, n),
            Sign::Minus => (n, p),
        };
        Ok(Link {
            axis: dir.axis,
            plus_end,
            minus_end,
        })
    }

    pub fn distance(&self, a: PhysPe, b: PhysPe) -> u32 {
        self.dims.distance(a, b)
    }

    /// What the routers do with `tag` for a packet injected at `source`: the hop-by-hop path,
    /// its ports and virtual channels. Fails where the hardware would lose or flag the
    /// packet: a tag outside the machine (misroute), a mapped-out link or node on the way, a
    /// dateline violation.
    pub fn route_tag(
        &self,
        source: PhysPe,
        tag: &RoutingTag,
        class: PacketClass,
    ) -> Result<Route, TopologyError> {
        self.check(source)?;
        if self.mapped_out_nodes.contains(&source) {
            return Err(TopologyError::NodeMappedOut(source));
        }
        if Axis::ALL.iter().any(|&a| tag.addr(a) >= self.dims.size(a)) {
            return Err(TopologyError::Misroute {
                tag: tag.encode(),
                dims: self.dims,
            });
        }
        let mut w = Walk {
            torus: self,
            class,
            at: source,
            previous: None,
            past_dateline: false,
            hops: Vec::new(),
        };
        if let Some(a) = tag.initial_hop {
            w.hop(Direction::new(Sign::Plus, a), HopKind::Initial)?;
        }
        for dir in Direction::ORDER {
            if tag.sgn(dir.axis) != dir.sign {
                continue;
            }
            // The router stays in the dimension while its coordinate differs from the tag's;
            // with the tag inside the ring this ends within one lap.
            while w.at.coord(dir.axis) != tag.addr(dir.axis) {
                w.hop(dir, HopKind::Travel)?;
            }
        }
        if tag.takes_final_hop() {
            w.hop(Direction::MINUS_Z, HopKind::Final)?;
        }
        Ok(Route {
            source,
            destination: w.at,
            tag: *tag,
            class,
            hops: w.hops,
        })
    }

    /// The tag software writes into router `source`'s R_NET_LUT for logical PE `lpe`.
    pub fn routing_tag(&self, source: PhysPe, lpe: u32) -> Result<RoutingTag, TopologyError> {
        let dest = self.physical(lpe)?;
        self.tag_between(source, dest)
    }

    /// The shortest direction-order tag from `source` to `dest` that the routers deliver
    /// without touching a mapped-out node or link or violating a dateline. With nothing
    /// mapped out that is the shorter way round every ring; otherwise sign flips (the long
    /// way round), an initial +X/+Y/+Z hop and a final -Z hop are tried, as the seed
    /// prescribes for routing around a bad link. Ties keep the earliest candidate: no extra
    /// hops, shorter signs.
    pub fn tag_between(&self, source: PhysPe, dest: PhysPe) -> Result<RoutingTag, TopologyError> {
        self.check(source)?;
        self.check(dest)?;
        for p in [source, dest] {
            if self.mapped_out_nodes.contains(&p) {
                return Err(TopologyError::NodeMappedOut(p));
            }
        }
        let mut best: Option<(usize, RoutingTag)> = None;
        for initial in [None, Some(Axis::X), Some(Axis::Y), Some(Axis::Z)] {
            let start = match initial {
                Some(a) => match self.neighbor(source, Direction::new(Sign::Plus, a)) {
                    Ok(p) => p,
                    Err(_) => continue,
                },
                None => source,
            };
            for final_hop in [false, true] {
                let mut target = dest;
                if final_hop {
                    let kz = self.dims.size(Axis::Z);
                    if kz < 2 {
                        continue;
                    }
                    // The final hop goes -Z, so the tag's Z address is one beyond the node.
                    target = dest.with(Axis::Z, (dest.z + 1) % kz);
                }
                let shorter = Axis::ALL.map(|a| {
                    Dims::shorter_sign(self.dims.size(a), start.coord(a), target.coord(a))
                });
                for flips in 0..8u32 {
                    let mut signs = shorter;
                    for (i, s) in signs.iter_mut().enumerate() {
                        if flips & (1 << i) != 0 {
                            *s = s.flip();
                        }
                    }
                    if final_hop && signs[2] == Sign::Minus {
                        continue; // the hardware would drop the final hop
                    }
                    let tag = RoutingTag {
                        initial_hop: initial,
                        final_hop,
                        ..RoutingTag::to(target, signs)
                    };
                    if let Ok(r) = self.route_tag(source, &tag, PacketClass::Request) {
                        if r.destination == dest && !matches!(best, Some((n, _)) if n <= r.len()) {
                            best = Some((r.len(), tag));
                        }
                    }
                }
            }
        }
        best.map(|(_, t)| t).ok_or(TopologyError::NoRoute {
            from: source,
            to: dest,
        })
    }

    /// Router `source`'s whole R_NET_LUT, index = logical PE number.
    pub fn r_net_lut(&self, source: PhysPe) -> Result<Vec<RoutingTag>, TopologyError> {
        (0..self.logical_pes())
            .map(|lpe| self.lut_tag(source, lpe).map(RoutingTag::decode))
            .collect()
    }

    /// The route a packet from logical PE `from` to logical PE `to` takes.
    pub fn route(&self, from: u32, to: u32, class: PacketClass) -> Result<Route, TopologyError> {
        let source = self.physical(from)?;
        let expected = self.physical(to)?;
        let tag = self.effective_tag(source, to)?;
        let r = self.route_tag(source, &tag, class)?;
        if r.destination != expected {
            return Err(TopologyError::Misdelivered {
                tag: tag.encode(),
                from: source,
                lpe: to,
                reached: r.destination,
                expected,
            });
        }
        Ok(r)
    }

    /// Rewrite the LUT so logical PE `lpe` lives on physical node `to`.
    pub fn assign(&mut self, lpe: u32, to: PhysPe) -> Result<(), TopologyError> {
        self.physical(lpe)?;
        self.check(to)?;
        if self.mapped_out_nodes.contains(&to) {
            return Err(TopologyError::NodeMappedOut(to));
        }
        match self.logical(to) {
            Some(other) if other != lpe => Err(TopologyError::NodeInUse {
                node: to,
                lpe: other,
            }),
            _ => {
                self.lut[lpe as usize] = to;
                self.lut_written.clear();
                Ok(())
            }
        }
    }

    /// Map out a bad node: routes stop passing through it, and the logical PE it held (if
    /// any) is given to `replacement`, or to the first spare node, by rewriting the LUT —
    /// "assigning the logical number of the bad node to a different physical node".
    pub fn map_out_node(
        &mut self,
        bad: PhysPe,
        replacement: Option<PhysPe>,
    ) -> Result<Option<Remap>, TopologyError> {
        self.check(bad)?;
        if self.mapped_out_nodes.contains(&bad) {
            return Err(TopologyError::AlreadyMappedOut(bad));
        }
        let remap = match self.logical(bad) {
            None => None,
            Some(lpe) => {
                let to = match replacement {
                    Some(r) => r,
                    None => *self
                        .spares()
                        .iter()
                        .find(|&&p| p != bad)
                        .ok_or(TopologyError::NoSpareNode { lpe, bad })?,
                };
                if to == bad {
                    return Err(TopologyError::NodeInUse { node: bad, lpe });
                }
                self.assign(lpe, to)?;
                Some(Remap { lpe, from: bad, to })
            }
        };
        self.mapped_out_nodes.insert(bad);
        self.lut_written.clear();
        Ok(remap)
    }

    /// Map out the link `node` uses in direction `dir` (both its channels); routes detour.
    pub fn map_out_link(&mut self, node: PhysPe, dir: Direction) -> Result<Link, TopologyError> {
        let l = self.link(node, dir)?;
        if !self.mapped_out_links.insert(l) {
            return Err(TopologyError::LinkAlreadyMappedOut(l));
        }
        self.lut_written.clear();
        Ok(l)
    }

    /// Logical PE pairs with no route left, e.g. after mapping out.
    pub fn unreachable_pairs(&self) -> Vec<(u32, u32)> {
        let n = self.logical_pes();
        (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| self.route(a, b, PacketClass::Request).is_err())
            .collect()
    }

    /// The control socket's view of the route from logical PE `from` to `to`.
    pub fn route_info(&self, from: u32, to: u32) -> Result<RouteInfo, TopologyError> {
        let r = self.route(from, to, PacketClass::Request)?;
        Ok(RouteInfo {
            from,
            to,
            source: r.source.to_string(),
            destination: r.destination.to_string(),
            tag: r.tag.encode(),
            distance: self.distance(r.source, r.destination),
            hops: r
                .hops
                .iter()
                .map(|h| HopInfo {
                    from: h.from.to_string(),
                    to: h.to.to_string(),
                    direction: h.direction.to_string(),
                    out_port: h.out_port.to_string(),
                    in_port: h.in_port.to_string(),
                    vc: h.vc.number(),
                    kind: h.kind.to_string(),
                    dateline: h.dateline,
                })
                .collect(),
        })
    }

    /// The control socket's view of the torus and its LUT.
    pub fn topology_info(&self) -> TopologyInfo {
        TopologyInfo {
            x: self.dims.size(Axis::X),
            y: self.dims.size(Axis::Y),
            z: self.dims.size(Axis::Z),
            physical_nodes: self.dims.nodes(),
            logical_pes: self.logical_pes(),
            vc_scope: match self.vc_scope {
                VcScope::PerDimension => "per_dimension",
                VcScope::UntilDestination => "until_destination",
            }
            .into(),
            datelines: self
                .datelines()
                .into_iter()
                .map(|(a, c)| DatelineInfo {
                    axis: a.to_string(),
                    between: [c, (c + 1) % self.dims.size(a)],
                })
                .collect(),
            lut: self
                .lut
                .iter()
                .enumerate()
                .map(|(i, p)| LutEntry {
                    lpe: i as u32,
                    physical: p.to_string(),
                })
                .collect(),
            spares: self.spares().iter().map(|p| p.to_string()).collect(),
            mapped_out_nodes: self.mapped_out_nodes().map(|p| p.to_string()).collect(),
            mapped_out_links: self.mapped_out_links().map(|l| l.to_string()).collect(),
            written_lut: self
                .written_lut()
                .into_iter()
                .map(|(r, index, tag)| ni_abi::control::WrittenLut {
                    router: r.to_string(),
                    index,
                    tag,
                })
                .collect(),
        }
    }
}

/// A packet on its way, as the routers see it hop by hop.
struct Walk<'t> {
    torus: &'t Torus,
    class: PacketClass,
    at: PhysPe,
    previous: Option<Direction>,
    past_dateline: bool,
    hops: Vec<Hop>,
}

impl Walk<'_> {
    fn hop(&mut self, dir: Direction, kind: HopKind) -> Result<(), TopologyError> {
        let t = self.torus;
        let link = t.link(self.at, dir)?;
        let to = t.neighbor(self.at, dir)?;
        if t.mapped_out_links.contains(&link) {
            return Err(TopologyError::LinkMappedOut(link));
        }
        if t.mapped_out_nodes.contains(&to) {
            return Err(TopologyError::NodeMappedOut(to));
        }
        let out_port = t.port(self.at, dir)?;
        // A's +Out connects to B's -In: the packet arrives on the port `to` orients opposite.
        let in_port = t.port(to, Direction::new(dir.sign.flip(), dir.axis))?;
        let passing_through = self.previous == Some(dir);
        if !passing_through && t.vc_scope == VcScope::PerDimension {
            self.past_dateline = false;
        }
        let dateline = t.is_dateline(&link);
        if dateline {
            if self.past_dateline {
                return Err(TopologyError::DatelineViolation {
                    node: self.at,
                    port: out_port,
                    vc: self.class.vc(true),
                });
            }
            self.past_dateline = true;
        }
        self.hops.push(Hop {
            from: self.at,
            to,
            direction: dir,
            out_port,
            in_port,
            link,
            vc: self.class.vc(self.past_dateline),
            kind,
            dateline,
        });
        self.previous = Some(dir);
        self.at = to;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A planned restart carries the torus as JSON (`crate::handover`): entries software
    /// wrote by SPUT (keyed by router and entry, not a string) and map-outs come back.
    #[test]
    fn the_torus_crosses_a_handover_with_its_lut_writes() {
        let mut t = Torus::for_nodes(8).unwrap();
        let r = t.lut()[3];
        t.write_lut(r, 5, 0x1234).unwrap();
        let back: Torus = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(back.lut_entry(r, 5).unwrap(), 0x1234);
        assert_eq!(back.written_lut(), t.written_lut());
        assert_eq!(back.lut(), t.lut());
    }

    fn pe(s: &str) -> PhysPe {
        s.parse().unwrap()
    }

    fn path(r: &Route) -> Vec<String> {
        r.hops.iter().map(|h| h.to.to_string()).collect()
    }

    fn dirs(r: &Route) -> Vec<String> {
        r.hops.iter().map(|h| h.direction.to_string()).collect()
    }

    fn vcs(r: &Route) -> Vec<u8> {
        r.hops.iter().map(|h| h.vc.number()).collect()
    }

    fn t242() -> Torus {
        Torus::new(Dims::new(2, 4, 2).unwrap(), 16).unwrap()
    }

    /// Every hop links neighbours, the path ends where it says, and the dimensions come in
    /// direction order (after any initial hop, before any final hop).
    fn check_well_formed(t: &Torus, r: &Route) {
        let mut at = r.source;
        let mut last_order = 0;
        for h in &r.hops {
            assert_eq!(h.from, at);
            assert_eq!(t.neighbor(at, h.direction).unwrap(), h.to);
            if h.kind == HopKind::Travel {
                assert!(h.direction.order() >= last_order, "{r:?}");
                last_order = h.direction.order();
            }
            at = h.to;
        }
        assert_eq!(at, r.destination);
    }

    #[test]
    fn physical_numbers_print_as_zzyyxx() {
        let p = PhysPe::new(0, 3, 1);
        assert_eq!(p.to_string(), "010300");
        assert_eq!(p.number(), 0x010300);
        assert_eq!(pe("010300"), p);
        assert_eq!(PhysPe::new(7, 31, 15).to_string(), "0F1F07");
        assert_eq!(pe("0f1f07"), PhysPe::new(7, 31, 15));
        for bad in ["", "01030", "0103000", "01030g", "+10300"] {
            assert_eq!(
                bad.parse::<PhysPe>(),
                Err(TopologyError::BadPhysPe(bad.into()))
            );
        }
        // Numeric order of ZZYYXX is the derived order.
        assert!(pe("000007") < pe("000100") && pe("001F07") < pe("010000"));
    }

    #[test]
    fn dimensions_are_bounded_by_the_tag_fields() {
        assert!(Dims::new(8, 32, 16).is_ok());
        assert_eq!(
            Dims::new(9, 1, 1),
            Err(TopologyError::DimensionOutOfRange {
                axis: Axis::X,
                size: 9,
                max: 8
            })
        );
        assert!(Dims::new(1, 33, 1).is_err());
        assert!(Dims::new(1, 1, 17).is_err());
        assert!(Dims::new(1, 0, 1).is_err());
        assert_eq!(
            "2x4x2".parse::<Dims>().unwrap(),
            Dims::new(2, 4, 2).unwrap()
        );
        assert!(matches!(
            "2x4".parse::<Dims>(),
            Err(TopologyError::BadDims(_))
        ));
        assert!(matches!(
            "2x4xq".parse::<Dims>(),
            Err(TopologyError::BadDims(_))
        ));
        let d = Dims::new(2, 4, 2).unwrap();
        for i in 0..16 {
            assert_eq!(d.index(d.node(i)), i);
        }
        assert_eq!(d.node(15), pe("010301"));
    }

    #[test]
    fn smallest_torus_for_a_node_count() {
        let s = |n| Dims::smallest_holding(n).unwrap().to_string();
        assert_eq!(s(1), "1x1x1");
        assert_eq!(s(4), "2x2x1");
        assert_eq!(s(8), "2x2x2");
        assert_eq!(s(16), "2x4x2");
        assert_eq!(s(4096), "8x32x16");
        // 7 is prime, so a 7-ring (diameter 3) loses to 2x2x2 only on size: it wins.
        assert_eq!(Dims::smallest_holding(7).unwrap().nodes(), 7);
        for n in 1..=300 {
            let d = Dims::smallest_holding(n).unwrap();
            assert!(d.nodes() >= n);
        }
        assert_eq!(
            Dims::smallest_holding(0),
            Err(TopologyError::NodeCount { n: 0 })
        );
        assert!(Dims::smallest_holding(4097).is_err());
    }

    #[test]
    fn routing_tag_bits_follow_table_7() {
        // Fig. 17: no initial hop (3), +X to 01, +Y to 01, +Z to 01, no final hop.
        let fig17 = RoutingTag::to(pe("010101"), [Sign::Plus; 3]);
        assert_eq!(fig17.encode(), 0x3_0001_0101);
        // Fig. 18: INITIAL_HOP = 2 (+Z), +X to 01, -Y to 03, +Z to 00.
        let fig18 = RoutingTag {
            initial_hop: Some(Axis::Z),
            ..RoutingTag::to(pe("000301"), [Sign::Plus, Sign::Minus, Sign::Plus])
        };
        assert_eq!(fig18.encode(), (2 << 32) | (1 << 15) | (3 << 8) | 1);
        let every = RoutingTag {
            x: 7,
            x_sgn: Sign::Minus,
            y: 31,
            y_sgn: Sign::Minus,
            z: 15,
            z_sgn: Sign::Minus,
            initial_hop: Some(Axis::Y),
            final_hop: true,
            adaptive: true,
        };
        assert_eq!(every.encode(), 0x31_008F_9F87);
        for t in [fig17, fig18, every] {
            assert_eq!(RoutingTag::decode(t.encode()), t);
        }
        // Unused bits are ignored.
        assert_eq!(
            RoutingTag::decode(fig17.encode() | 0xFFFF_FFC0_FF70_6078),
            fig17
        );
        // Z_SGN = 1 forces the final hop off.
        assert!(!every.takes_final_hop());
    }

    #[test]
    fn fig17_direction_order_with_wraparound() {
        let t = t242();
        let tag = RoutingTag::to(pe("010101"), [Sign::Plus; 3]);
        let r = t
            .route_tag(pe("000300"), &tag, PacketClass::Request)
            .unwrap();
        // +X to X 01; +Y from 03 through 00 to 01; +Z to 01, then delivered.
        assert_eq!(path(&r), ["000301", "000001", "000101", "010101"]);
        assert_eq!(dirs(&r), ["+X", "+Y", "+Y", "+Z"]);
        assert_eq!(r.destination, pe("010101"));
        check_well_formed(&t, &r);
    }

    #[test]
    fn fig18_initial_hop() {
        let t = t242();
        let tag = RoutingTag {
            initial_hop: Some(Axis::Z),
            ..RoutingTag::to(pe("000301"), [Sign::Plus, Sign::Minus, Sign::Plus])
        };
        let r = t
            .route_tag(PhysPe::ORIGIN, &tag, PacketClass::Request)
            .unwrap();
        // +Z first, then +X to 01, +Z (round) to 00, -Y to 03.
        assert_eq!(path(&r), ["010000", "010001", "000001", "000301"]);
        assert_eq!(dirs(&r), ["+Z", "+X", "+Z", "-Y"]);
        assert_eq!(r.hops[0].kind, HopKind::Initial);
        assert!(r.hops[1..].iter().all(|h| h.kind == HopKind::Travel));
    }

    #[test]
    fn fig19_final_hop_and_z_sgn_forces_it_off() {
        let t = t242();
        let tag = RoutingTag {
            final_hop: true,
            ..RoutingTag::to(pe("000001"), [Sign::Plus, Sign::Minus, Sign::Plus])
        };
        let r = t
            .route_tag(pe("010200"), &tag, PacketClass::Request)
            .unwrap();
        // +X to 01, +Z to 00, -Y to 00, then one hop -Z.
        assert_eq!(path(&r), ["010201", "000201", "000101", "000001", "010001"]);
        assert_eq!(dirs(&r), ["+X", "+Z", "-Y", "-Y", "-Z"]);
        assert_eq!(r.hops.last().unwrap().kind, HopKind::Final);
        // The tag's Z address is one beyond the node a final hop delivers to.
        assert_eq!(r.destination.z, (tag.z + 1) % 2);

        let minus_z = RoutingTag {
            z_sgn: Sign::Minus,
            ..tag
        };
        let r = t
            .route_tag(pe("010200"), &minus_z, PacketClass::Request)
            .unwrap();
        assert!(r.hops.iter().all(|h| h.kind != HopKind::Final));
        assert_eq!(r.destination, pe("000001"));
    }

    #[test]
    fn misroute_when_the_tag_is_outside_the_machine() {
        let t = t242();
        let tag = RoutingTag::to(pe("000400"), [Sign::Plus; 3]);
        assert!(matches!(
            t.route_tag(PhysPe::ORIGIN, &tag, PacketClass::Request),
            Err(TopologyError::Misroute { .. })
        ));
        assert!(matches!(
            t.route_tag(
                pe("000002"),
                &RoutingTag::to(PhysPe::ORIGIN, [Sign::Plus; 3]),
                PacketClass::Request
            ),
            Err(TopologyError::NoSuchPhysicalPe { .. })
        ));
    }

    #[test]
    fn software_takes_the_shorter_way_round() {
        let t = Torus::new(Dims::new(8, 1, 1).unwrap(), 8).unwrap();
        // 1 -> 7: two hops -X through the wraparound link, not six +X.
        let r = t.route(1, 7, PacketClass::Request).unwrap();
        assert_eq!(path(&r), ["000000", "000007"]);
        assert_eq!(dirs(&r), ["-X", "-X"]);
        assert_eq!(r.tag.x_sgn, Sign::Minus);
        // 6 -> 1: three hops +X, round through 000000.
        let r = t.route(6, 1, PacketClass::Request).unwrap();
        assert_eq!(path(&r), ["000007", "000000", "000001"]);
        // Half way round either way is a tie, taken +.
        let r = t.route(0, 4, PacketClass::Request).unwrap();
        assert_eq!(dirs(&r), ["+X"; 4]);

        let t = Torus::new(Dims::new(4, 1, 1).unwrap(), 4).unwrap();
        let r = t.route(0, 3, PacketClass::Request).unwrap();
        assert_eq!(path(&r), ["000003"]);
        assert_eq!(dirs(&r), ["-X"]);
    }

    #[test]
    fn every_route_on_2x4x2_is_minimal_and_direction_ordered() {
        let t = Torus::for_nodes(16).unwrap();
        assert_eq!(t.dims().to_string(), "2x4x2");
        for a in 0..16 {
            for b in 0..16 {
                let r = t.route(a, b, PacketClass::Request).unwrap();
                let (pa, pb) = (t.physical(a).unwrap(), t.physical(b).unwrap());
                assert_eq!(r.source, pa);
                assert_eq!(r.destination, pb);
                assert_eq!(r.len() as u32, t.distance(pa, pb), "{a} -> {b}");
                assert!(r.tag.initial_hop.is_none() && !r.tag.final_hop);
                check_well_formed(&t, &r);
                assert_eq!(a == b, r.is_empty());
            }
        }
        assert_eq!(t.distance(PhysPe::ORIGIN, pe("010201")), 4);
        assert_eq!(t.dims().diameter(), 4);
    }

    #[test]
    fn ports_follow_r_orient() {
        let mut t = Torus::new(Dims::new(4, 1, 1).unwrap(), 4).unwrap();
        let r = t.route(0, 1, PacketClass::Request).unwrap();
        // +X leaves on X0 and arrives on the neighbour's -X port, X1.
        assert_eq!(
            (r.hops[0].out_port, r.hops[0].in_port),
            (Port::X0, Port::X1)
        );
        t.set_r_orient(PhysPe::ORIGIN, 0b001).unwrap();
        t.set_r_orient(pe("000001"), 0b001).unwrap();
        let r = t.route(0, 1, PacketClass::Request).unwrap();
        assert_eq!(
            (r.hops[0].out_port, r.hops[0].in_port),
            (Port::X1, Port::X0)
        );
        assert_eq!(
            t.set_r_orient(PhysPe::ORIGIN, 8),
            Err(TopologyError::BadOrient(8))
        );
        assert_eq!(Port::for_direction(Direction::MINUS_Z, 0b100), Port::Z0);
        assert_eq!(Port::for_direction(Direction::MINUS_Y, 0b101), Port::Y1);
        assert_eq!(Port::Z1.index(), 5);
    }

    #[test]
    fn fig6_dateline_moves_a_request_from_vc0_to_vc2() {
        // Four X nodes; the dateline is the link between 000001 and 000002.
        let mut t = Torus::new(Dims::new(4, 1, 1).unwrap(), 4).unwrap();
        t.set_dateline(Axis::X, 1).unwrap();
        let r = t.route(0, 2, PacketClass::Request).unwrap();
        assert_eq!(path(&r), ["000001", "000002"]);
        assert_eq!(vcs(&r), [0, 2]);
        assert_eq!(
            r.hops.iter().map(|h| h.dateline).collect::<Vec<_>>(),
            [false, true]
        );
        // Responses move VC1 -> VC3 the same way.
        let r = t.route(0, 2, PacketClass::Response).unwrap();
        assert_eq!(vcs(&r), [1, 3]);
        // The dateline is the link: a request that starts its X travel at the dateline node
        // crosses it too and moves to VC2, so no VC0 buffer on the far side of the link is
        // ever held by a packet that crossed it.
        let r = t.route(1, 2, PacketClass::Request).unwrap();
        assert_eq!((vcs(&r), r.hops[0].dateline), (vec![2], true));
        // Nor does one that crosses no dateline.
        assert_eq!(vcs(&t.route(2, 0, PacketClass::Request).unwrap()), [0, 0]);
        // The -X channel of the dateline link is a dateline too.
        let minus = RoutingTag::to(pe("000001"), [Sign::Minus; 3]);
        let r = t
            .route_tag(pe("000003"), &minus, PacketClass::Request)
            .unwrap();
        assert_eq!(dirs(&r), ["-X", "-X"]);
        assert_eq!(vcs(&r), [0, 2]);
    }

    /// SSD "Special Routing": pΔX, pΔY, pΔZ, then sΔX, sΔY, sΔZ, one step at a time; LUTs
    /// and datelines play no part, map-outs stop the packet.
    #[test]
    fn special_routing_consumes_the_deltas_in_order() {
        let mut t = t242();
        assert_eq!(t.special_route(PhysPe::ORIGIN, [0; 6]), Ok(PhysPe::ORIGIN));
        assert_eq!(
            t.special_route(PhysPe::ORIGIN, [1, 0, 0, 0, 1, 0]),
            Ok(pe("000101"))
        );
        // Negative deltas wrap round the ring; the secondary deltas add to the primary.
        assert_eq!(
            t.special_route(PhysPe::ORIGIN, [0, -1, 1, 0, -1, 0]),
            Ok(pe("010200"))
        );
        // A full lap or more, or a step in a dimension of one node, is refused.
        assert!(matches!(
            t.special_route(PhysPe::ORIGIN, [0, 4, 0, 0, 0, 0]),
            Err(TopologyError::BadDelta { max: 3, .. })
        ));
        let flat = Torus::new(Dims::new(4, 1, 1).unwrap(), 4).unwrap();
        assert!(matches!(
            flat.special_route(PhysPe::ORIGIN, [0, 0, 1, 0, 0, 0]),
            Err(TopologyError::BadDelta { .. })
        ));
        t.map_out_link(PhysPe::ORIGIN, Direction::PLUS_X).unwrap();
        assert!(matches!(
            t.special_route(PhysPe::ORIGIN, [1, 0, 0, 0, 0, 0]),
            Err(TopologyError::LinkMappedOut(_))
        ));
    }

    /// Table 6: written entries route as written, override modes 1-3, and a map-out (the
    /// administrator reprogramming the LUTs) drops what SPUT wrote.
    #[test]
    fn written_lut_entries_and_override_modes() {
        let mut t = Torus::new(Dims::new(4, 1, 1).unwrap(), 4).unwrap();
        assert!(t.is_pristine());
        let computed = t.lut_entry(PhysPe::ORIGIN, 2).unwrap();
        assert_eq!(computed, t.routing_tag(PhysPe::ORIGIN, 2).unwrap().encode());
        assert_eq!(t.lut_entry(PhysPe::ORIGIN, 100), Ok(0));
        assert!(t.lut_entry(PhysPe::ORIGIN, 544).is_err());
        // Send LPE 2's packets to X 3: they arrive at the wrong node.
        let wrong = RoutingTag::to(pe("000003"), [Sign::Plus; 3]).encode();
        t.write_lut(PhysPe::ORIGIN, 2, wrong).unwrap();
        assert!(!t.is_pristine());
        assert_eq!(t.lut_entry(PhysPe::ORIGIN, 2), Ok(wrong));
        assert!(matches!(
            t.route(0, 2, PacketClass::Request),
            Err(TopologyError::Misdelivered { reached, .. }) if reached == pe("000003")
        ));
        // Other routers are untouched.
        assert_eq!(t.route(1, 2, PacketClass::Request).unwrap().len(), 1);
        // Mode 3: one tag for every packet.
        let to2 = RoutingTag::to(pe("000002"), [Sign::Plus; 3]).encode();
        t.set_lut_override(PhysPe::ORIGIN, 3 << 40 | to2).unwrap();
        assert_eq!(
            t.route(0, 2, PacketClass::Request).unwrap().destination,
            pe("000002")
        );
        assert!(t.route(0, 1, PacketClass::Request).is_err());
        // Mode 1: entry lpe >> 2, tag bit 0 from LPE bit 0 and bit 8 from LPE bit 1.
        t.set_lut_override(PhysPe::ORIGIN, 1 << 40).unwrap();
        t.write_lut(PhysPe::ORIGIN, 0, 0x3_0000_0000).unwrap();
        assert_eq!(
            t.effective_tag(PhysPe::ORIGIN, 3).unwrap().encode(),
            0x3_0000_0101
        );
        assert_eq!(t.effective_tag(PhysPe::ORIGIN, 1).unwrap().x, 1);
        // Mode 2 as printed: bit 0 from LPE bit 1, bit 8 from LPE bit 8.
        t.set_lut_override(PhysPe::ORIGIN, 2 << 40).unwrap();
        assert_eq!(
            t.effective_tag(PhysPe::ORIGIN, 2).unwrap().encode(),
            0x3_0000_0001
        );
        t.set_lut_override(PhysPe::ORIGIN, 0).unwrap();
        t.map_out_link(pe("000002"), Direction::PLUS_X).unwrap();
        assert!(t.written_lut().is_empty());
        assert_ne!(t.lut_entry(PhysPe::ORIGIN, 2), Ok(wrong));
    }

    #[test]
    fn a_second_dateline_on_vc2_is_a_violation() {
        let mut t = Torus::new(Dims::new(8, 1, 1).unwrap(), 8).unwrap();
        t.set_dateline(Axis::X, 1).unwrap();
        t.set_dateline(Axis::X, 3).unwrap();
        assert_eq!(t.datelines(), [(Axis::X, 1), (Axis::X, 3)]);
        // Four hops +X pass through 000001 (VC0 -> VC2), then through 000003 on VC2.
        let plus = RoutingTag::to(pe("000004"), [Sign::Plus; 3]);
        let e = t
            .route_tag(PhysPe::ORIGIN, &plus, PacketClass::Request)
            .unwrap_err();
        assert_eq!(
            e,
            TopologyError::DatelineViolation {
                node: pe("000003"),
                port: Port::X0,
                vc: VirtualChannel::Vc2,
            }
        );
        assert!(e.to_string().contains("R_ERR0"));
        // The flagged port follows R_ORIENT.
        t.set_r_orient(pe("000003"), 1).unwrap();
        assert!(matches!(
            t.route_tag(PhysPe::ORIGIN, &plus, PacketClass::Response),
            Err(TopologyError::DatelineViolation {
                port: Port::X1,
                vc: VirtualChannel::Vc3,
                ..
            })
        ));
        // Software programs the other half-ring, just as short, which passes no dateline.
        let r = t.route(0, 4, PacketClass::Request).unwrap();
        assert_eq!(dirs(&r), ["-X"; 4]);
        assert_eq!(vcs(&r), [0; 4]);
        assert!(t.set_dateline(Axis::X, 8).is_err());
        assert!(t.set_dateline(Axis::Y, 0).is_err());
    }

    #[test]
    fn vc_scope_per_dimension_or_until_destination() {
        let mut t = Torus::new(Dims::new(4, 4, 1).unwrap(), 16).unwrap();
        t.set_dateline(Axis::X, 1).unwrap();
        t.set_dateline(Axis::Y, 1).unwrap();
        let to = t.logical(pe("000202")).unwrap();
        let r = t.route(0, to, PacketClass::Request).unwrap();
        assert_eq!(dirs(&r), ["+X", "+X", "+Y", "+Y"]);
        assert_eq!(vcs(&r), [0, 2, 0, 2]);

        t.set_vc_scope(VcScope::UntilDestination);
        // Now the packet keeps VC2 into Y and passing the Y dateline node is a violation.
        let plus = RoutingTag::to(pe("000202"), [Sign::Plus; 3]);
        assert_eq!(
            t.route_tag(PhysPe::ORIGIN, &plus, PacketClass::Request),
            Err(TopologyError::DatelineViolation {
                node: pe("000102"),
                port: Port::Y0,
                vc: VirtualChannel::Vc2
            })
        );
        // The software instead programs an equally short tag that passes one dateline only.
        let r = t.route(0, to, PacketClass::Request).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r.tag.x_sgn, Sign::Minus);
        let to = t.logical(pe("000102")).unwrap();
        assert_eq!(
            vcs(&t.route(0, to, PacketClass::Request).unwrap()),
            [0, 2, 2]
        );
    }

    #[test]
    fn for_nodes_routes_every_pair_without_violations() {
        for n in [1, 2, 3, 4, 5, 8, 12, 16, 27, 32, 64] {
            let t = Torus::for_nodes(n).unwrap();
            assert_eq!(t.logical_pes(), n);
            assert!(t.unreachable_pairs().is_empty(), "{n}");
        }
        let t = Torus::for_nodes(16).unwrap();
        assert_eq!(t.datelines(), [(Axis::X, 1), (Axis::Y, 3), (Axis::Z, 1)]);
    }

    #[test]
    fn map_out_a_node_then_a_link() {
        // 15 logical PEs on 16 nodes: 010301 is the spare.
        let mut t = Torus::new(Dims::new(2, 4, 2).unwrap(), 15).unwrap();
        assert_eq!(t.spares(), [pe("010301")]);
        let bad = t.physical(5).unwrap();
        assert_eq!(bad, pe("000201"));
        let remap = t.map_out_node(bad, None).unwrap().unwrap();
        assert_eq!(
            remap,
            Remap {
                lpe: 5,
                from: bad,
                to: pe("010301")
            }
        );
        assert_eq!(t.physical(5).unwrap(), pe("010301"));
        assert_eq!(t.logical(bad), None);
        assert!(t.spares().is_empty());
        assert_eq!(
            t.map_out_node(bad, None),
            Err(TopologyError::AlreadyMappedOut(bad))
        );
        // No spare is left for another bad node holding a logical PE.
        assert_eq!(
            t.clone().map_out_node(PhysPe::ORIGIN, None),
            Err(TopologyError::NoSpareNode {
                lpe: 0,
                bad: PhysPe::ORIGIN
            })
        );
        // A replacement that holds a logical PE is refused, and nothing changes.
        assert_eq!(
            t.clone().map_out_node(PhysPe::ORIGIN, Some(pe("000001"))),
            Err(TopologyError::NodeInUse {
                node: pe("000001"),
                lpe: 1
            })
        );

        let link = t.map_out_link(PhysPe::ORIGIN, Direction::PLUS_Y).unwrap();
        assert_eq!(link.to_string(), "000000-000100 (Y)");
        // The minus side of the same link names the same link.
        assert_eq!(t.link(pe("000100"), Direction::MINUS_Y).unwrap(), link);

        for a in 0..15 {
            for b in 0..15 {
                let r = t
                    .route(a, b, PacketClass::Request)
                    .unwrap_or_else(|e| panic!("{a} -> {b}: {e}"));
                assert!(!r.uses_link(&link), "{a} -> {b} uses {link}");
                assert!(!r.visits(bad), "{a} -> {b} visits {bad}");
                assert_eq!(r.destination, t.physical(b).unwrap());
                check_well_formed(&t, &r);
            }
        }
        assert!(t.unreachable_pairs().is_empty());
        // 000000 -> 000100 detours the long way round Y: three hops instead of one.
        let r = t.route(0, 2, PacketClass::Request).unwrap();
        assert_eq!(path(&r), ["000300", "000200", "000100"]);
        // The hardware would send a packet with the old tag over the bad link.
        let old = RoutingTag::to(pe("000100"), [Sign::Plus; 3]);
        assert_eq!(
            t.route_tag(PhysPe::ORIGIN, &old, PacketClass::Request),
            Err(TopologyError::LinkMappedOut(link))
        );
        let info = t.topology_info();
        assert_eq!(info.mapped_out_nodes, ["000201"]);
        assert_eq!(info.mapped_out_links, ["000000-000100 (Y)"]);
        assert_eq!(info.lut[5].physical, "010301");
    }

    #[test]
    fn initial_hop_routes_around_a_cut_ring() {
        // Both X links between 000000 and 000001 are bad: only a detour through Y remains,
        // which direction order can take only with an initial +Y hop.
        let mut t = Torus::new(Dims::new(2, 2, 1).unwrap(), 4).unwrap();
        t.map_out_link(PhysPe::ORIGIN, Direction::PLUS_X).unwrap();
        t.map_out_link(PhysPe::ORIGIN, Direction::MINUS_X).unwrap();
        let r = t.route(0, 1, PacketClass::Request).unwrap();
        assert_eq!(r.tag.initial_hop, Some(Axis::Y));
        assert_eq!(path(&r), ["000100", "000101", "000001"]);
        assert_eq!(r.hops[0].kind, HopKind::Initial);
        // The other X ring is intact.
        assert_eq!(t.route(2, 3, PacketClass::Request).unwrap().len(), 1);

        // With no second dimension there is no way round.
        let mut t = Torus::new(Dims::new(2, 1, 1).unwrap(), 2).unwrap();
        t.map_out_link(PhysPe::ORIGIN, Direction::PLUS_X).unwrap();
        assert_eq!(t.route(0, 1, PacketClass::Request).unwrap().len(), 1);
        t.map_out_link(PhysPe::ORIGIN, Direction::MINUS_X).unwrap();
        assert_eq!(
            t.route(0, 1, PacketClass::Request),
            Err(TopologyError::NoRoute {
                from: PhysPe::ORIGIN,
                to: pe("000001")
            })
        );
        assert_eq!(t.unreachable_pairs(), [(0, 1), (1, 0)]);
    }

    #[test]
    fn fig19_final_hop_is_chosen_to_reach_a_node_cut_off_in_its_plane() {
        // Cut 010001's X and Y links: it can only be entered over Z. From 010200 the
        // shortest direction-order way in is Fig. 19's: +X, +Z round to plane 00, -Y to 00,
        // then the final -Z hop.
        let mut t = t242();
        let dest = pe("010001");
        for d in [
            Direction::PLUS_X,
            Direction::MINUS_X,
            Direction::PLUS_Y,
            Direction::MINUS_Y,
        ] {
            t.map_out_link(dest, d).unwrap();
        }
        let from = t.logical(pe("010200")).unwrap();
        let to = t.logical(dest).unwrap();
        let r = t.route(from, to, PacketClass::Request).unwrap();
        // Two tags tie at five hops; the software keeps the first it tries (X flipped
        // before Y): +Y round to 00, +Z round to plane 00, -X to 01, final -Z.
        assert!(r.tag.final_hop);
        assert_eq!(path(&r), ["010300", "010000", "000000", "000001", "010001"]);
        assert_eq!(r.hops.last().unwrap().kind, HopKind::Final);
        // Fig. 19's own tag is the other, and also gets there.
        let fig19 = RoutingTag {
            final_hop: true,
            ..RoutingTag::to(pe("000001"), [Sign::Plus, Sign::Minus, Sign::Plus])
        };
        let f = t.route_tag(r.source, &fig19, PacketClass::Request).unwrap();
        assert_eq!(path(&f), ["010201", "000201", "000101", "000001", "010001"]);
        assert_eq!(t.distance(r.source, dest), 3);
        check_well_formed(&t, &r);
        // Every pair is still reachable, none over a cut link.
        assert!(t.unreachable_pairs().is_empty());
    }

    #[test]
    fn without_map_outs_every_route_is_as_long_as_the_distance() {
        // What the fabric relies on to count hops without walking routes.
        for dims in ["2x4x2", "3x3x1", "8x1x1", "2x3x5"] {
            let d: Dims = dims.parse().unwrap();
            let t = Torus::with_dims(d, d.nodes()).unwrap();
            assert!(!t.has_map_outs());
            for a in 0..t.logical_pes() {
                for b in 0..t.logical_pes() {
                    let r = t.route(a, b, PacketClass::Request).unwrap();
                    let (pa, pb) = (t.physical(a).unwrap(), t.physical(b).unwrap());
                    assert_eq!(r.len() as u32, t.distance(pa, pb), "{dims}: {a} -> {b}");
                }
            }
        }
    }

    #[test]
    fn links_between_neighbours_and_spare_tori() {
        let t = Torus::with_dims(Dims::new(4, 2, 1).unwrap(), 4).unwrap();
        assert_eq!(t.spares().len(), 4);
        assert_eq!(t.datelines(), [(Axis::X, 3), (Axis::Y, 1)]);
        let (l, d) = t.link_between(pe("000000"), pe("000001")).unwrap();
        assert_eq!(
            (l.to_string(), d),
            ("000000-000001 (X)".into(), Direction::PLUS_X)
        );
        // The wraparound neighbour is the - link.
        let (l, d) = t.link_between(pe("000000"), pe("000003")).unwrap();
        assert_eq!(
            (l.plus_end, l.minus_end, d),
            (pe("000003"), pe("000000"), Direction::MINUS_X)
        );
        assert_eq!(
            t.link_between(pe("000000"), pe("000002")),
            Err(TopologyError::NotNeighbours {
                a: pe("000000"),
                b: pe("000002")
            })
        );
        assert!(t.link_between(pe("000000"), pe("000000")).is_err());
        let mut t = t;
        let l = t.map_out_link(PhysPe::ORIGIN, Direction::PLUS_X).unwrap();
        assert_eq!(
            t.map_out_link(PhysPe::ORIGIN, Direction::PLUS_X),
            Err(TopologyError::LinkAlreadyMappedOut(l))
        );
        assert!(Torus::with_dims(Dims::new(2, 1, 1).unwrap(), 3).is_err());
    }

    #[test]
    fn map_out_errors_name_the_cause() {
        let mut t = Torus::new(Dims::new(2, 2, 1).unwrap(), 3).unwrap();
        assert_eq!(
            t.map_out_link(PhysPe::ORIGIN, Direction::PLUS_Z),
            Err(TopologyError::NoLink {
                node: PhysPe::ORIGIN,
                direction: Direction::PLUS_Z
            })
        );
        assert!(matches!(
            t.map_out_node(pe("000002"), None),
            Err(TopologyError::NoSuchPhysicalPe { .. })
        ));
        // A spare can be mapped out: no LUT change.
        assert_eq!(t.map_out_node(pe("000101"), None), Ok(None));
        assert_eq!(
            t.assign(0, pe("000101")),
            Err(TopologyError::NodeMappedOut(pe("000101")))
        );
        assert_eq!(
            t.physical(3),
            Err(TopologyError::NoSuchLogicalPe { lpe: 3, count: 3 })
        );
        assert!(Torus::new(Dims::new(2, 2, 1).unwrap(), 5).is_err());
        assert!(t.r_net_lut(PhysPe::ORIGIN).unwrap().len() == 3);
        assert_eq!(
            t.r_net_lut(pe("000101")),
            Err(TopologyError::NodeMappedOut(pe("000101")))
        );
    }

    #[test]
    fn lut_tags_depend_on_the_source_router() {
        let t = Torus::new(Dims::new(8, 1, 1).unwrap(), 8).unwrap();
        // Logical PE 4 is two hops +X from 000002 and two hops -X from 000006.
        assert_eq!(t.routing_tag(pe("000002"), 4).unwrap().x_sgn, Sign::Plus);
        assert_eq!(t.routing_tag(pe("000006"), 4).unwrap().x_sgn, Sign::Minus);
        let lut = t.r_net_lut(pe("000002")).unwrap();
        assert_eq!(lut.len(), 8);
        assert!(lut.iter().enumerate().all(|(i, tag)| tag.x == i as u32));
    }

    #[test]
    fn control_views() {
        let t = Torus::for_nodes(4).unwrap();
        let info = t.topology_info();
        assert_eq!((info.x, info.y, info.z), (2, 2, 1));
        assert_eq!(info.lut.len(), 4);
        assert_eq!(info.lut[3].physical, "000101");
        assert_eq!(info.datelines.len(), 2);
        assert_eq!(info.datelines[0].between, [1, 0]);
        let r = t.route_info(0, 3).unwrap();
        assert_eq!(
            (r.source.as_str(), r.destination.as_str()),
            ("000000", "000101")
        );
        assert_eq!(r.hops.len() as u32, r.distance);
        assert_eq!(r.hops[0].direction, "+X");
        assert_eq!(r.hops[0].out_port, "X0");
        assert_eq!(RoutingTag::decode(r.tag).addr(Axis::Y), 1);
        assert!(t.route_info(0, 4).is_err());
    }
}
