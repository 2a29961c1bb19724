//! The register-level doors across hosts (device/abi/links.md, "Register-level doors").
//!
//! What a driver does through its registers to an NI of another host crosses the link as a
//! `DOOR` frame, is carried out there by the code that serves a local peer, and comes back
//! as a `DOOR_ANSWER`: the issuing NI sees what it would see of a local peer, later.
//!
//! - **T3E E registers** (HMM-148-0 Table 1, SSD-T90 Table 2): SEND, GET/PUT and their
//!   vector forms, the atomics. The block's registers stay EMPTY until the answer.
//! - **MLINK** (METRO §11.3): every command. A paused target holds the operation at its
//!   host, for at most `BLOCK_TIMEOUT_MS`, as a blocked path would.
//! - **CM-5 Data Network** (NI Programmer's Handbook ch. 3): a message leaves its sender's
//!   FIFO when it goes on the link, at most [`CM5_CREDITS`] per sender unanswered; the
//!   target's host keeps them, in order, until the receive FIFO has room (the routers'
//!   buffers), and answers each as it lands, which frees the credit.
//! - **Lanai packets** (Lanai X §10, §13): a unicast packet stays at the head of its
//!   sender's FIFO until the target's host says what became of it (delivered, dropped by
//!   the port, or held by flow control past `HOLD_TIMEOUT`), so one packet per port is on
//!   the link at a time, as one is on a blocked path. A flood's copies do not wait.
//!
//! A host that goes away ends what waited on it: T3E commands fail `NoRoute`, MLINK answers
//! REFUSED/UNREACHABLE, CM-5 messages and Lanai packets count as dropped at the sender.
//! What another host asks is checked as its NI would be here (it hosts the source, ours is
//! the destination, both in one partition), and what it may leave here is bounded.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use ni_abi::mlink::{reason, status};
use ni_abi::t3e::Error;

use super::lanai::{Fate, HOLD_TIMEOUT};
use super::mlink::{reply, At, Flight};
use super::topology::PhysPe;
use super::State;
use crate::cm5::bc::Which;
use crate::cm5::data::{Iface, Packet};
use crate::lanai::packet::{Arrival, Outgoing, Wire};
use crate::link::wire::{door, CHUNK};
use crate::link::{HostId, Msg};
use crate::mlink::{Launch, Reply};
use crate::server::lock;
use crate::t3e::ereg::{Command, Outcome};

/// CM-5 messages one sender may have on the link unanswered.
pub const CM5_CREDITS: u32 = 16;
/// Operations of one host held here at most (MLINK, CM-5, Lanai): more are refused.
const HELD_OPS_MAX: usize = 4096;
/// Bytes of one host's Lanai packets held or being assembled here at most.
const HELD_BYTES_MAX: usize = 64 << 20;
/// How long one of our T3E, MLINK or Lanai operations waits for its answer at most: the
/// target's own bound (1 s) and the link's dead time, with room to spare.
const WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest Lanai packet (the packet interface moves at most 16 MiB whole).
const LANAI_MAX: usize = 16 << 20;

/// One of our operations waiting for another host's answer.
enum Waiting {
    T3e {
        a: usize,
        c: Command,
    },
    Mlink(Flight),
    /// `bc`: a broadcast's copy (not a Data Network message).
    Cm5 {
        a: usize,
        bc: bool,
    },
    Lanai {
        a: usize,
        port: usize,
        seq: u64,
        len: usize,
        j: usize,
    },
}

/// Another host's operation held here.
struct Held {
    host: HostId,
    id: u64,
    src: usize,
    dst: usize,
    since: Instant,
    op: HeldOp,
}

enum HeldOp {
    Mlink {
        src_rank: u32,
        x: Launch,
    },
    Cm5 {
        iface: Iface,
        tag: u8,
        words: Vec<u32>,
    },
    /// A broadcast to our members of the sender's partition: a message on interface `w`,
    /// or (`colours` non-zero) the broadcast interrupt.
    Bc {
        w: Which,
        msg: Vec<u32>,
        colours: u32,
    },
    /// `answer`: false for a flood's copy.
    Lanai {
        wire: Wire,
        answer: bool,
    },
}

impl HeldOp {
    /// The bytes it keeps here (what [`HELD_BYTES_MAX`] counts).
    fn bytes(&self) -> usize {
        match self {
            HeldOp::Lanai { wire, .. } => wire.bytes.len(),
            HeldOp::Mlink { x, .. } => x.data.len(),
            _ => 0,
        }
    }

    /// What must keep its order behind what came before it from the same sender for the same
    /// NI: CM-5 Data Network messages (one class) and broadcasts (another).
    fn order_key(&self, src: usize, dst: usize) -> Option<(bool, usize, usize)> {
        match self {
            HeldOp::Cm5 { .. } => Some((false, src, dst)),
            HeldOp::Bc { .. } => Some((true, src, dst)),
            _ => None,
        }
    }
}

/// A Lanai packet of another host arriving in pieces.
struct Part {
    src: usize,
    dst: usize,
    total: usize,
    wire: Wire,
    answer: bool,
}

#[derive(Default)]
pub(super) struct Doors {
    waiting: HashMap<u64, (HostId, Waiting)>,
    /// When each T3E, MLINK and Lanai operation of ours went, oldest first.
    deadlines: VecDeque<(Instant, u64)>,
    /// CM-5 messages each of our NIs has unanswered on the link.
    cm5_out: HashMap<usize, u32>,
    /// Our Lanai ports whose head packet is on another host.
    lanai_out: HashSet<(usize, usize)>,
    /// Other hosts' operations held here, oldest first.
    held: VecDeque<Held>,
    parts: HashMap<(HostId, u64), Part>,
    /// Per host: operations held and bytes held or being assembled.
    ops: HashMap<HostId, usize>,
    bytes: HashMap<HostId, usize>,
}

impl Doors {
    fn hold(&mut self, h: Held) {
        *self.ops.entry(h.host).or_default() += 1;
        *self.bytes.entry(h.host).or_default() += h.op.bytes();
        self.held.push_back(h);
    }

    fn release(&mut self, h: &Held) {
        self.unhold(h.host, h.op.bytes());
    }

    /// One operation of `host`'s, `bytes` long, no longer held (or assembled) here.
    fn unhold(&mut self, host: HostId, bytes: usize) {
        if let Some(n) = self.ops.get_mut(&host) {
            *n = n.saturating_sub(1);
        }
        if let Some(b) = self.bytes.get_mut(&host) {
            *b = b.saturating_sub(bytes);
        }
    }

    fn room(&self, host: HostId, bytes: usize) -> bool {
        self.ops.get(&host).copied().unwrap_or(0) < HELD_OPS_MAX
            && self.bytes.get(&host).copied().unwrap_or(0) + bytes <= HELD_BYTES_MAX
    }
}

fn t3e_answer(o: &Outcome) -> Vec<u64> {
    match *o {
        Outcome::Done => vec![0],
        Outcome::Rejected => vec![1],
        Outcome::Values { words, n } => {
            let mut v = vec![2, 0, n as u64];
            v.extend_from_slice(&words);
            v
        }
        Outcome::Failed(e) => vec![3, e as u64],
        // A partition across hosts has no window, so its queues have no arrival lock that
        // anyone holds; should one be held, the sender hears so.
        Outcome::Held => vec![3, Error::QueueLocked as u64],
    }
}

fn t3e_outcome(w: &[u64]) -> Option<Outcome> {
    Some(match *w.first()? {
        0 => Outcome::Done,
        1 => Outcome::Rejected,
        2 => {
            let n = *w.get(2)? as usize;
            let words: [u64; 8] = w.get(3..11)?.try_into().ok()?;
            if n > 8 {
                return None;
            }
            Outcome::Values { words, n }
        }
        3 => Outcome::Failed(t3e_error(*w.get(1)?)?),
        _ => return None,
    })
}

fn t3e_error(v: u64) -> Option<Error> {
    // `None` is not a failure: an answer that says so does not add up.
    Error::from_u16(u16::try_from(v).ok()?).filter(|e| *e != Error::None)
}

fn mlink_answer(r: &Reply) -> Vec<u64> {
    vec![
        r.state as u64,
        r.reason as u64,
        r.bytes[0] as u64,
        r.bytes[1] as u64,
        r.data_checksum.map_or(u64::MAX, |c| c as u64),
    ]
}

fn mlink_reply(w: &[u64]) -> Option<Reply> {
    let [state, why, b0, b1, ck] = *w else {
        return None;
    };
    // Only what a target answers: an answer that left the link BUSY, or spilled into the
    // status word's other fields, would wedge our MLINK.
    let answer = [status::ACK, status::NACK, status::REFUSED].contains(&(state as u32))
        && state <= u32::MAX as u64
        && why <= 0xF
        && b0 <= 0xFF
        && b1 <= 0xFF;
    answer.then(|| Reply {
        state: state as u32,
        reason: why as u32,
        bytes: [b0 as u8, b1 as u8],
        data_checksum: u16::try_from(ck).ok(),
    })
}

/// What a Lanai packet's fate is called on the link.
mod fate {
    pub const ARRIVED: u64 = 0;
    pub const DROPPED: u64 = 1;
    pub const DROPPED_THERE: u64 = 2;
    pub const TIMED_OUT: u64 = 3;
}

fn packet_words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl State {
    fn door_send(&mut self, h: HostId, m: Msg) {
        let rm = self.remote.as_mut().expect("remote");
        rm.counters.doors_out += 1;
        rm.link.send(h, &m);
    }

    fn door_answer(&mut self, h: HostId, id: u64, d: u8, words: Vec<u64>, payload: Vec<u8>) {
        self.door_send(
            h,
            Msg::DoorAnswer {
                id,
                door: d,
                words,
                payload,
            },
        );
    }

    /// Whether the host of NI `b` is linked; `false` ends the operation here and now.
    fn door_up(&self, b: usize) -> Option<HostId> {
        let h = self.other_host(b)?;
        let rm = self.remote.as_ref()?;
        rm.up[h as usize].then_some(h)
    }

    // ---- our operations, to other hosts ------------------------------------------------

    /// T3E command `c` of NI `a` for NI `b` of another host (GVA `g`).
    pub(super) fn door_t3e(&mut self, a: usize, b: usize, h: HostId, c: &Command, g: u64) {
        if self.door_up(b).is_none() {
            return self.t3e_finish(a, c, Outcome::Failed(Error::NoRoute));
        }
        let id = self.fresh_id();
        let mut words = vec![c.op, g, c.operands[0], c.operands[1]];
        words.extend_from_slice(&c.words);
        self.doors
            .waiting
            .insert(id, (h, Waiting::T3e { a, c: *c }));
        self.doors.deadlines.push_back((Instant::now(), id));
        self.door_send(
            h,
            Msg::Door {
                id,
                door: door::T3E,
                src: a as u32,
                dst: b as u32,
                more: false,
                words,
                payload: Vec::new(),
            },
        );
    }

    /// MLINK operation `f` for NI `b` of another host.
    pub(super) fn door_mlink(&mut self, f: Flight, b: usize, h: HostId) {
        if self.door_up(b).is_none() {
            let r = reply(status::REFUSED, reason::UNREACHABLE, 0);
            return self.mlink_answered(&f, r);
        }
        let id = self.fresh_id();
        let x = &f.x;
        let words = vec![
            x.op as u64,
            x.remote as u64,
            x.len as u64,
            x.handler as u64,
            x.bad_header as u64 | (x.bad_data as u64) << 1,
        ];
        let m = Msg::Door {
            id,
            door: door::MLINK,
            src: f.a as u32,
            dst: b as u32,
            more: false,
            words,
            payload: x.data.clone(),
        };
        self.doors.waiting.insert(id, (h, Waiting::Mlink(f)));
        self.doors.deadlines.push_back((Instant::now(), id));
        self.door_send(h, m);
    }

    /// CM-5 message `p` of NI `i` for NI `j` of another host. False: `i` has no credit left
    /// there, and the message stays in its FIFO. A host that is not linked drops it.
    pub(super) fn door_cm5(&mut self, i: usize, j: usize, p: &Packet) -> bool {
        let Some(h) = self.door_up(j) else {
            lock(&self.slots[i].ni).counters.cm5_dr_dropped += 1;
            return true;
        };
        if !self.cm5_credits(i, 1) {
            return false;
        }
        let words = vec![p.iface as u64, p.tag as u64];
        self.door_cm5_send(i, h, j, door::CM5, words, &p.words);
        true
    }

    /// CM-5 door frame `d` (a message, or a broadcast's copy) of NI `i` for NI `dst` of host
    /// `h`: it takes one of `i`'s credits until answered.
    fn door_cm5_send(&mut self, i: usize, h: HostId, dst: usize, d: u8, w: Vec<u64>, m: &[u32]) {
        *self.doors.cm5_out.entry(i).or_default() += 1;
        let id = self.fresh_id();
        let bc = d == door::CM5_BC;
        self.doors
            .waiting
            .insert(id, (h, Waiting::Cm5 { a: i, bc }));
        self.door_send(
            h,
            Msg::Door {
                id,
                door: d,
                src: i as u32,
                dst: dst as u32,
                more: false,
                words: w,
                payload: packet_words(m),
            },
        );
    }

    /// CM-5 Data Network messages of `members` on the link, or held here for them: what a
    /// network-done round waits for besides the messages in their FIFOs.
    pub(super) fn doors_in_flight(&self, members: &[u32]) -> usize {
        let of = |n: usize| members.contains(&(n as u32));
        let out = self
            .doors
            .waiting
            .values()
            .filter(|(_, w)| matches!(w, Waiting::Cm5 { a, bc: false } if of(*a)))
            .count();
        let held = self
            .doors
            .held
            .iter()
            .filter(|x| matches!(x.op, HeldOp::Cm5 { .. }) && of(x.dst))
            .count();
        out + held
    }

    /// The other linked hosts with members in `members`, each with its first member, and
    /// how many members are on hosts not linked: they do not hear a broadcast (the sender
    /// counts them when it goes, as a port down is counted).
    pub(super) fn hosts_of(&self, members: &[usize]) -> (Vec<(HostId, usize)>, u64) {
        let mut out: Vec<(HostId, usize)> = Vec::new();
        let mut unreached = 0;
        for &m in members {
            let Some(h) = self.other_host(m) else {
                continue;
            };
            if self.door_up(m).is_none() {
                unreached += 1;
            } else if !out.iter().any(|&(x, _)| x == h) {
                out.push((h, m));
            }
        }
        (out, unreached)
    }

    /// Whether NI `i` has `n` CM-5 credits left on the link (broadcasts take one per host).
    pub(super) fn cm5_credits(&self, i: usize, n: u32) -> bool {
        n == 0 || self.doors.cm5_out.get(&i).copied().unwrap_or(0) + n <= CM5_CREDITS
    }

    /// NI `i`'s broadcast (`msg` on interface `w`, or the interrupt `colours`) for the
    /// members on host `h`, `m` the first of them; it takes one of `i`'s CM-5 credits.
    pub(super) fn door_cm5_bc(
        &mut self,
        i: usize,
        h: HostId,
        m: usize,
        w: Which,
        msg: &[u32],
        colours: u32,
    ) {
        let words = vec![w as u64, colours as u64];
        self.door_cm5_send(i, h, m, door::CM5_BC, words, msg);
    }

    /// NI `a`'s SPUT to router `node`, done here: every other linked host applies it to its
    /// copy of the torus, so routes and router registers read the same everywhere.
    pub(super) fn door_router(&mut self, a: usize, node: PhysPe, addr: u64, v: u64) {
        let Some(rm) = self.remote.as_ref() else {
            return;
        };
        let hosts: Vec<HostId> = (0..rm.up.len() as HostId)
            .filter(|&h| h != rm.me && rm.up[h as usize])
            .collect();
        let i = self.torus.dims().index(node) as u64;
        for h in hosts {
            let id = self.fresh_id();
            let m = Msg::Door {
                id,
                door: door::ROUTER,
                src: a as u32,
                dst: a as u32,
                more: false,
                words: vec![i, addr, v],
                payload: Vec::new(),
            };
            self.door_send(h, m);
        }
    }

    /// NI `i` was reset or changed clients: its CM-5 FIFOs are empty again, and so are its
    /// credits (answers about its old messages come to nothing).
    pub(super) fn doors_reset_ni(&mut self, i: usize) {
        self.doors.cm5_out.remove(&i);
    }

    /// Whether NI `i`'s Lanai port `p` waits for another host's answer about its head packet.
    pub(super) fn lanai_away(&self, i: usize, p: usize) -> bool {
        self.remote.is_some() && self.doors.lanai_out.contains(&(i, p))
    }

    /// Lanai packet `out` of NI `i` for NI `j` of another host: from port `p`, which waits
    /// for the answer, or (`None`) a flood's copy, which does not.
    pub(super) fn door_lanai(&mut self, i: usize, p: Option<usize>, j: usize, out: &Outgoing) {
        let Some(h) = self.door_up(j) else {
            if let Some(p) = p {
                self.lanai_retire(i, p, out.seq, out.wire.bytes.len(), Fate::Dropped);
            }
            return;
        };
        let id = self.fresh_id();
        let w = &out.wire;
        if let Some(port) = p {
            self.doors.lanai_out.insert((i, port));
            let len = w.bytes.len();
            let waiting = Waiting::Lanai {
                a: i,
                port,
                seq: out.seq,
                len,
                j,
            };
            self.doors.waiting.insert(id, (h, waiting));
            self.doors.deadlines.push_back((Instant::now(), id));
        }
        let words = vec![
            w.bytes.len() as u64,
            w.link as u64 | (w.marked_bad as u64) << 1 | (p.is_some() as u64) << 2,
        ];
        let mut pieces = w.bytes.chunks(CHUNK).peekable();
        let mut first = true;
        loop {
            let piece = pieces.next().unwrap_or(&[]);
            let more = pieces.peek().is_some();
            let m = Msg::Door {
                id,
                door: door::LANAI,
                src: i as u32,
                dst: j as u32,
                more,
                words: if first { words.clone() } else { Vec::new() },
                payload: piece.to_vec(),
            };
            self.door_send(h, m);
            first = false;
            if !more {
                break;
            }
        }
    }

    // ---- answers to ours ---------------------------------------------------------------

    pub(super) fn on_door_answer(&mut self, h: HostId, id: u64, d: u8, w: &[u64], data: &[u8]) {
        let mine = matches!(self.doors.waiting.get(&id), Some((host, _)) if *host == h);
        if !mine {
            return self.bad_frame(h, "DOOR_ANSWER for no operation of ours there");
        }
        let (_, waiting) = self.doors.waiting.remove(&id).expect("checked");
        match waiting {
            Waiting::T3e { a, c } => {
                let o = t3e_outcome(w).filter(|_| d == door::T3E);
                let o = o.unwrap_or_else(|| {
                    self.bad_frame(h, "DOOR_ANSWER (T3E) that does not add up");
                    Outcome::Failed(Error::NoRoute)
                });
                if let Outcome::Values { n, .. } = o {
                    if n != c.block() as usize && n != 1 {
                        return self.t3e_finish(a, &c, Outcome::Failed(Error::NoRoute));
                    }
                }
                self.e_count_across(a, &c, &o);
                self.t3e_finish(a, &c, o);
            }
            Waiting::Mlink(f) => {
                if !lock(&self.slots[f.a].ni).mlink.current(&f.x) {
                    // Aborted or reset meanwhile: nothing lands, nobody is answered.
                    return;
                }
                let r = match mlink_reply(w).filter(|_| d == door::MLINK) {
                    Some(r) if f.x.op == ni_abi::mlink::command::READ && r.state == status::ACK => {
                        if data.len() as u64 != f.x.bytes() {
                            self.bad_frame(h, "DOOR_ANSWER (MLINK READ) of the wrong length");
                            reply(status::REFUSED, reason::UNREACHABLE, 0)
                        } else {
                            self.mlink_read_back(&f, r, data)
                        }
                    }
                    Some(r) => r,
                    None => {
                        self.bad_frame(h, "DOOR_ANSWER (MLINK) that does not add up");
                        reply(status::REFUSED, reason::UNREACHABLE, 0)
                    }
                };
                self.mlink_answered(&f, r);
            }
            Waiting::Cm5 { a, bc } => {
                self.cm5_credit(a);
                if w.first() != Some(&1) {
                    self.cm5_lost(a, bc);
                }
            }
            Waiting::Lanai {
                a,
                port,
                seq,
                len,
                j,
            } => {
                let f = match w.first().copied() {
                    Some(fate::ARRIVED) => Fate::Arrived(j),
                    Some(fate::DROPPED_THERE) => Fate::DroppedThere,
                    Some(fate::TIMED_OUT) => Fate::TimedOut,
                    _ => Fate::Dropped,
                };
                self.doors.lanai_out.remove(&(a, port));
                self.lanai_retire(a, port, seq, len, f);
                self.lanai_pending[a].store(true, std::sync::atomic::Ordering::Release);
            }
        }
    }

    /// A CM-5 message (or a broadcast's copy) of NI `a` that did not arrive, counted as the
    /// same loss is locally.
    fn cm5_lost(&mut self, a: usize, bc: bool) {
        let c = &mut lock(&self.slots[a].ni).counters;
        if bc {
            c.cm5_bc_unreached += 1;
        } else {
            c.cm5_dr_dropped += 1;
        }
    }

    fn cm5_credit(&mut self, a: usize) {
        if let Some(n) = self.doors.cm5_out.get_mut(&a) {
            *n = n.saturating_sub(1);
        }
        // Messages may wait in its FIFO for this credit.
        self.cm5_pending[a].store(true, std::sync::atomic::Ordering::Release);
    }

    // ---- other hosts' operations, here ---------------------------------------------------

    /// `DOOR` `id` from host `h`: NI `src` there to our NI `dst`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_door(
        &mut self,
        h: HostId,
        id: u64,
        d: u8,
        src: u32,
        dst: u32,
        more: bool,
        w: Vec<u64>,
        data: Vec<u8>,
    ) {
        let rm = self.remote.as_mut().expect("remote");
        rm.counters.doors_in += 1;
        if d != door::ROUTER
            && !self.doors.parts.contains_key(&(h, id))
            && rm.link.queued(h) > super::remote::PULL_QUEUE_MAX
        {
            // Its host does not read what we send it: no more answers to queue, and no work.
            return self.door_refuse(h, id, d, more);
        }
        if let Some(part) = self.doors.parts.get(&(h, id)) {
            // The rest of a Lanai packet.
            let (s, t) = (part.src, part.dst);
            return self.lanai_piece(
                h,
                id,
                (s == src as usize && t == dst as usize).then_some(data),
                more,
            );
        }
        if d == door::ROUTER {
            // Not answered: the SPUT completed at its host.
            let ok = match *w.as_slice() {
                [i, addr, v] if self.hosted_by(src, h) && (i as usize) < self.routers.len() => {
                    let node = self.torus.dims().node(i as usize);
                    self.router_write(node, addr, v).is_ok()
                }
                _ => false,
            };
            if !ok {
                self.bad_frame(h, "DOOR (router write) that does not add up");
            }
            return;
        }
        let fine = self.hosted_by(src, h) && self.ours(dst) && self.partners(src, dst);
        let (a, b) = (src as usize, dst as usize);
        match d {
            door::T3E => {
                let o = if !fine || w.len() != 12 {
                    self.bad_frame(h, "DOOR (T3E) that does not add up");
                    Outcome::Failed(Error::NoSuchPe)
                } else {
                    let words: [u64; 8] = w[4..12].try_into().expect("8 words");
                    match Command::across(w[0], [w[2], w[3]], words) {
                        None => Outcome::Failed(Error::BadOpcode),
                        Some(c) => self
                            .e_route(a, b)
                            .and_then(|hops| self.e_at(a, b, hops, w[1], &c))
                            .unwrap_or_else(Outcome::Failed),
                    }
                };
                self.door_answer(h, id, d, t3e_answer(&o), Vec::new());
            }
            door::MLINK => {
                let x = match *w.as_slice() {
                    [op, remote, len, handler, flags]
                        if fine
                            && len <= ni_abi::mlink::MAX_LEN as u64
                            && remote <= u32::MAX as u64
                            && handler <= u32::MAX as u64 =>
                    {
                        let data_len = data.len() as u64;
                        let x = Launch::across(
                            op as u32,
                            self.partitions.rank_size(b as u32).0,
                            remote as u32,
                            len as u32,
                            handler as u32,
                            data,
                            flags & 1 != 0,
                            flags & 2 != 0,
                        );
                        let carries = matches!(
                            x.op,
                            ni_abi::mlink::command::WRITE | ni_abi::mlink::command::ROP
                        );
                        (!carries || data_len == x.bytes()).then_some(x)
                    }
                    _ => None,
                };
                let Some(x) = x else {
                    self.bad_frame(h, "DOOR (MLINK) that does not add up");
                    let r = reply(status::REFUSED, reason::UNREACHABLE, 0);
                    return self.door_answer(h, id, d, mlink_answer(&r), Vec::new());
                };
                let src_rank = self.partitions.rank_size(src).0;
                let held = Held {
                    host: h,
                    id,
                    src: a,
                    dst: b,
                    since: Instant::now(),
                    op: HeldOp::Mlink { src_rank, x },
                };
                self.door_try(held, true);
            }
            door::CM5 | door::CM5_BC => {
                let max = if d == door::CM5 {
                    crate::cm5::data::LONG_MAX as usize
                } else {
                    crate::cm5::bc::REC_WORDS
                };
                let words = (data.len().is_multiple_of(4) && data.len() / 4 <= max).then(|| {
                    data.chunks_exact(4)
                        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                        .collect::<Vec<u32>>()
                });
                let op = match (d, w.as_slice(), words) {
                    (door::CM5, &[i, tag], Some(words)) if tag <= u8::MAX as u64 => {
                        let iface = [Iface::Dr, Iface::Ldr, Iface::Rdr].get(i as usize).copied();
                        iface.map(|iface| HeldOp::Cm5 {
                            iface,
                            tag: tag as u8,
                            words,
                        })
                    }
                    (door::CM5_BC, &[which, colours], Some(msg)) if colours <= u32::MAX as u64 => {
                        Which::BOTH.get(which as usize).map(|&w| HeldOp::Bc {
                            w,
                            msg,
                            colours: colours as u32,
                        })
                    }
                    _ => None,
                };
                let Some(op) = op.filter(|_| fine) else {
                    self.bad_frame(h, "DOOR (CM-5) that does not add up");
                    return self.door_answer(h, id, d, vec![0], Vec::new());
                };
                let held = Held {
                    host: h,
                    id,
                    src: a,
                    dst: b,
                    since: Instant::now(),
                    op,
                };
                self.door_try(held, true);
            }
            door::LANAI => {
                let (total, flags) = match *w.as_slice() {
                    [t, f] => (t as usize, f),
                    _ => (usize::MAX, 0),
                };
                let answer = flags & 4 != 0;
                // A packet has at least its route byte: an empty one that never ends would
                // hold a part for nothing.
                if !fine || total == 0 || total > LANAI_MAX || !self.doors.room(h, total) {
                    self.bad_frame(h, "DOOR (Lanai) that does not add up or does not fit");
                    if answer {
                        self.door_answer(h, id, d, vec![fate::DROPPED], Vec::new());
                    }
                    return;
                }
                // Held while it is assembled: counted as an operation and its bytes.
                *self.doors.ops.entry(h).or_default() += 1;
                *self.doors.bytes.entry(h).or_default() += total;
                let wire = Wire {
                    bytes: Vec::with_capacity(total.min(CHUNK)),
                    link: flags & 1 != 0,
                    marked_bad: flags & 2 != 0,
                };
                let part = Part {
                    src: a,
                    dst: b,
                    total,
                    wire,
                    answer,
                };
                self.doors.parts.insert((h, id), part);
                self.lanai_piece(h, id, Some(data), more);
            }
            _ => self.bad_frame(h, "DOOR through a door we do not have"),
        }
    }

    /// Refuse door operation `id` of host `h` with its smallest answer, doing nothing.
    fn door_refuse(&mut self, h: HostId, id: u64, d: u8, more: bool) {
        let words = match d {
            door::T3E => t3e_answer(&Outcome::Failed(Error::NoRoute)),
            door::MLINK => mlink_answer(&reply(status::NACK, reason::QUEUE_FULL, 0)),
            door::CM5 | door::CM5_BC => vec![0],
            // The first piece of a packet asks for an answer; the rest of it is refused
            // by `lanai_piece`, which finds no part.
            door::LANAI if !more => vec![fate::DROPPED_THERE],
            _ => return,
        };
        self.door_answer(h, id, d, words, Vec::new());
    }

    /// A piece of Lanai packet `id` of host `h` (`None`: one that does not belong to it).
    fn lanai_piece(&mut self, h: HostId, id: u64, data: Option<Vec<u8>>, more: bool) {
        let part = self.doors.parts.get_mut(&(h, id)).expect("a part");
        let fits = data
            .as_ref()
            .is_some_and(|d| part.wire.bytes.len() + d.len() <= part.total);
        if fits {
            part.wire.bytes.extend_from_slice(&data.expect("checked"));
        }
        let whole = part.wire.bytes.len() == part.total;
        if fits && more && !whole {
            return;
        }
        let part = self.doors.parts.remove(&(h, id)).expect("a part");
        // What `on_door` counted for the packet; `hold` counts what it keeps.
        self.doors.unhold(h, part.total);
        let fits = fits && !more;
        if !fits || !whole {
            self.bad_frame(h, "DOOR (Lanai) pieces that do not add up");
            if part.answer {
                self.door_answer(h, id, door::LANAI, vec![fate::DROPPED], Vec::new());
            }
            return;
        }
        let held = Held {
            host: h,
            id,
            src: part.src,
            dst: part.dst,
            since: Instant::now(),
            op: HeldOp::Lanai {
                wire: part.wire,
                answer: part.answer,
            },
        };
        self.door_try(held, true);
    }

    /// Try another host's operation; hold it if its target is not ready for it yet (`new`:
    /// it just arrived, and takes its place behind what is held for the same NI).
    fn door_try(&mut self, held: Held, new: bool) {
        let key = held.op.order_key(held.src, held.dst);
        let behind = new
            && key.is_some()
            && self
                .doors
                .held
                .iter()
                .any(|x| x.op.order_key(x.src, x.dst) == key);
        if !behind {
            if let Some((words, data)) = self.door_attempt(&held) {
                if !new {
                    self.doors.release(&held);
                }
                let d = match held.op {
                    HeldOp::Mlink { .. } => door::MLINK,
                    HeldOp::Cm5 { .. } => door::CM5,
                    HeldOp::Bc { .. } => door::CM5_BC,
                    HeldOp::Lanai { answer, .. } => {
                        if !answer {
                            return;
                        }
                        door::LANAI
                    }
                };
                return self.door_answer(held.host, held.id, d, words, data);
            }
        }
        if !new {
            self.doors.held.push_back(held);
            return;
        }
        let bytes = match &held.op {
            HeldOp::Lanai { wire, .. } => wire.bytes.len(),
            _ => 0,
        };
        if !self.doors.room(held.host, bytes) {
            self.bad_frame(
                held.host,
                "more register-level operations held than allowed",
            );
            let (d, words) = match held.op {
                HeldOp::Mlink { .. } => (
                    door::MLINK,
                    mlink_answer(&reply(status::NACK, reason::QUEUE_FULL, 0)),
                ),
                HeldOp::Cm5 { .. } => (door::CM5, vec![0]),
                HeldOp::Bc { .. } => (door::CM5_BC, vec![0]),
                HeldOp::Lanai { answer: false, .. } => return,
                HeldOp::Lanai { .. } => (door::LANAI, vec![fate::DROPPED_THERE]),
            };
            return self.door_answer(held.host, held.id, d, words, Vec::new());
        }
        self.doors.hold(held);
    }

    /// One try at a held operation: its answer, or `None` to keep holding it.
    fn door_attempt(&mut self, held: &Held) -> Option<(Vec<u64>, Vec<u8>)> {
        let (a, b) = (held.src, held.dst);
        match &held.op {
            HeldOp::Mlink { src_rank, x } => match self.mlink_at(a, b, *src_rank, x, held.since) {
                At::Blocked => None,
                At::Answered(r, data) => Some((mlink_answer(&r), data.unwrap_or_default())),
            },
            HeldOp::Cm5 { iface, tag, words } => {
                let slot = self.slots[b].clone();
                let mut g = lock(&slot.ni);
                let nb = &mut *g;
                if !nb.cm5.deliver(*iface, *tag, words, &mut nb.counters) {
                    return None;
                }
                nb.update_interrupts();
                drop(g);
                let hops = self.link(a, b).unwrap_or(0);
                self.wire(a, b, 4 * (1 + words.len() as u64), hops);
                Some((vec![1], Vec::new()))
            }
            HeldOp::Bc { w, msg, colours } => {
                let members: Vec<usize> = self
                    .partition_of(a)
                    .map(|(_, m, _)| m.into_iter().map(|m| m as usize).collect())
                    .unwrap_or_default();
                let ours: Vec<usize> = members
                    .into_iter()
                    .filter(|&m| self.other_host(m).is_none())
                    .collect();
                if *colours != 0 {
                    for &m in &ours {
                        let mut ni = lock(&self.slots[m].ni);
                        ni.cm5.broadcast_interrupt(*colours);
                        ni.update_interrupts();
                    }
                    return Some((vec![1], Vec::new()));
                }
                let mut to = Vec::new();
                for &m in &ours {
                    // A member whose port (or route) is down does not hear it, as locally.
                    let Ok(hops) = self.link(a, m) else {
                        continue;
                    };
                    let ni = lock(&self.slots[m].ni);
                    if !ni.cm5.bc_receives(*w) {
                        continue;
                    }
                    if !ni.cm5.bc[*w as usize].room(msg.len()) {
                        // Wait until it reads, which rings the doorbell.
                        return None;
                    }
                    to.push((m, hops));
                }
                for (m, hops) in to {
                    let mut g = lock(&self.slots[m].ni);
                    let nm = &mut *g;
                    nm.cm5.bc_arrive(*w, msg);
                    nm.counters.cm5_bc_recvs += 1;
                    nm.update_interrupts();
                    drop(g);
                    self.wire(a, m, 4 * msg.len() as u64, hops);
                }
                Some((vec![1], Vec::new()))
            }
            HeldOp::Lanai { wire, answer } => {
                let f = match self.lanai_deliver(b, wire) {
                    Arrival::Delivered => {
                        self.wire(a, b, wire.bytes.len() as u64, 1);
                        fate::ARRIVED
                    }
                    Arrival::Dropped => fate::DROPPED_THERE,
                    Arrival::Disabled => fate::DROPPED,
                    // A flood's copy does not wait for anyone.
                    Arrival::Held if !answer => fate::DROPPED,
                    Arrival::Held if held.since.elapsed() >= HOLD_TIMEOUT => fate::TIMED_OUT,
                    Arrival::Held => return None,
                };
                Some((vec![f], Vec::new()))
            }
        }
    }

    /// Another try at every operation other hosts left here. Returns whether any ended.
    pub(super) fn advance_doors(&mut self) -> bool {
        self.doors_expire();
        if self.doors.held.is_empty() {
            return false;
        }
        let before = self.doors.held.len();
        let held = std::mem::take(&mut self.doors.held);
        // A CM-5 message waits behind the one before it from its sender for the same NI.
        let mut stuck = HashSet::new();
        for x in held {
            let key = x.op.order_key(x.src, x.dst);
            if key.is_some_and(|k| stuck.contains(&k)) {
                self.doors.held.push_back(x);
                continue;
            }
            let n = self.doors.held.len();
            self.door_try(x, false);
            if let Some(k) = key.filter(|_| self.doors.held.len() > n) {
                stuck.insert(k);
            }
        }
        self.doors.held.len() < before
    }

    /// Host `h` went away: what it left here, and what of ours waited on it, ends.
    pub(super) fn doors_host_down(&mut self, h: HostId) {
        let mut gone = Vec::new();
        let held = std::mem::take(&mut self.doors.held);
        for x in held {
            if x.host == h {
                gone.push(x);
            } else {
                self.doors.held.push_back(x);
            }
        }
        for x in &gone {
            self.doors.release(x);
        }
        self.doors.parts.retain(|k, _| k.0 != h);
        self.doors.ops.remove(&h);
        self.doors.bytes.remove(&h);
        let ids: Vec<u64> = self
            .doors
            .waiting
            .iter()
            .filter(|(_, (host, _))| *host == h)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let (_, w) = self.doors.waiting.remove(&id).expect("listed");
            self.door_give_up(w);
        }
    }

    /// Our operations that waited [`WAIT_MAX`] for an answer end as if their host went
    /// away (every target answers within its own bound, HOLD_TIMEOUT or BLOCK_TIMEOUT_MS,
    /// so one that does not has lost it). A CM-5 message is not among them: its target may
    /// rightly hold it until its receiver reads.
    fn doors_expire(&mut self) {
        while let Some(&(t, id)) = self.doors.deadlines.front() {
            if t.elapsed() < WAIT_MAX {
                return;
            }
            self.doors.deadlines.pop_front();
            if let Some((h, w)) = self.doors.waiting.remove(&id) {
                tracing::debug!(host = h, id, "door operation unanswered: given up");
                self.door_give_up(w);
            }
        }
    }

    /// End one of our operations without its answer.
    fn door_give_up(&mut self, w: Waiting) {
        {
            match w {
                Waiting::T3e { a, c } => self.t3e_finish(a, &c, Outcome::Failed(Error::NoRoute)),
                Waiting::Mlink(f) => {
                    let r = reply(status::REFUSED, reason::UNREACHABLE, 0);
                    self.mlink_answered(&f, r);
                }
                Waiting::Cm5 { a, bc } => {
                    self.cm5_credit(a);
                    self.cm5_lost(a, bc);
                }
                Waiting::Lanai {
                    a, port, seq, len, ..
                } => {
                    self.doors.lanai_out.remove(&(a, port));
                    self.lanai_retire(a, port, seq, len, Fate::Dropped);
                    self.lanai_pending[a].store(true, std::sync::atomic::Ordering::Release);
                }
            }
        }
    }
}
