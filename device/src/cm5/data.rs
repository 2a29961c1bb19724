//! The CM-5 Data Network interfaces (NI Programmer's Handbook ch. 2, 3; App. A.3–A.5): DR,
//! LDR and RDR, as one state machine per NI.
//!
//! A message is composed word by word in an interface's send FIFO (`send_first` with the
//! destination word, then `send` for each data word, §2.3) and leaves only when whole. Whole
//! messages wait in [`DataNet::out`] until the fabric's poller moves them into the
//! destination's receive FIFO — only when all of it fits there, so nothing is dropped for
//! lack of room: the sender's FIFO stays full and its next message is discarded with
//! `send_ok` = 0, which the handbook's "write the whole message, check `send_ok`, retry" loop
//! (§2.3.1, §8.1.3) expects. Each receive FIFO holds whole messages; reading `recv` pops the
//! head message's words in order (§2.4).
//!
//! What the handbook leaves to the model, and the choices made:
//! - FIFO depths are not given (§6): each send and receive FIFO holds [`FIFO_WORDS`] words,
//!   room for a long message (18 data words and its destination word).
//! - A `DR` send leaves on whichever of the receiver's LDR and RDR has more room (§3.1: "by
//!   load"); an LDR (RDR) send arrives on the receiver's LDR (RDR).
//! - Messages between one pair keep their order here (§3.2.3 allows reordering; none is done).
//! - A locked interface discards what is written to it and reads `send_ok` 0 (§2.7.2); it is
//!   not a Bus Error.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ni_abi::cm5::{self, cause, green, hodgepodge, iface, status};

/// Words each send FIFO and each receive FIFO holds.
pub const FIFO_WORDS: usize = 24;
/// The short form's hardware limit (`MAX_ROUTER_MSG_WORDS`, §3.4).
pub const SHORT_MAX: u32 = 5;
/// The long form's limit (§3.4.2).
pub const LONG_MAX: u32 = 18;

/// A Data Network interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Iface {
    Dr = 0,
    Ldr = 1,
    Rdr = 2,
}

impl Iface {
    pub fn from_fifo(n: u32) -> Option<Iface> {
        match n {
            cm5::fifo::DATA_ROUTER => Some(Iface::Dr),
            cm5::fifo::LEFT_DR => Some(Iface::Ldr),
            cm5::fifo::RIGHT_DR => Some(Iface::Rdr),
            _ => None,
        }
    }

    pub fn base(self) -> u32 {
        match self {
            Iface::Dr => cm5::DR_BASE,
            Iface::Ldr => cm5::LDR_BASE,
            Iface::Rdr => cm5::RDR_BASE,
        }
    }

    pub fn private(self) -> u32 {
        self.base() + iface::PRIVATE
    }

    /// The register block `off` belongs to.
    pub fn of_register(off: u32) -> Option<(Iface, u32)> {
        [Iface::Dr, Iface::Ldr, Iface::Rdr]
            .into_iter()
            .find(|i| (i.base()..i.base() + 0x80).contains(&off))
            .map(|i| (i, off - i.base()))
    }
}

/// A decoded `send_first` or `send_first_long` address (App. A.3, A.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendFirst {
    pub iface: Iface,
    pub physical: bool,
    pub tag: u8,
    pub len: u32,
    pub long: bool,
}

impl SendFirst {
    /// `off` within one window; `None` when it is no Data Network `send_first` address.
    pub fn decode(off: u32) -> Option<SendFirst> {
        let n = cm5::send_first_interface(off)?;
        let iface = Iface::from_fifo(n)?;
        if off < cm5::DR_SEND_FIRST_LONG {
            // Short: aux = md[8] tag[7:4] length[3:0], in address bits 11..3 (App. A.3).
            let aux = (off & 0xFFF) >> cm5::AUXILIARY_START_P;
            Some(SendFirst {
                iface,
                physical: aux & 0x100 != 0,
                tag: ((aux >> 4) & 0xF) as u8,
                len: aux & 0xF,
                long: false,
            })
        } else {
            // Long: aux = md[9] length[8:4] tag[3:0] (App. A.4: the field order differs).
            let aux = (off & (cm5::SEND_FIRST_LONG_SIZE - 1)) >> cm5::AUXILIARY_START_P;
            Some(SendFirst {
                iface,
                physical: aux & 0x200 != 0,
                tag: (aux & 0xF) as u8,
                len: (aux >> 4) & 0x1F,
                long: true,
            })
        }
    }
}

/// A whole message on its way: from `iface` of its sender, to CM-5 physical address `phys`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Packet {
    pub iface: Iface,
    pub phys: u32,
    pub tag: u8,
    pub words: Vec<u32>,
}

/// The message being written into one interface's send FIFO.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Open {
    phys: u32,
    tag: u8,
    len: u32,
    words: Vec<u32>,
    /// Discarded (locked, no room, bad address): its remaining `send` writes are no-ops.
    discarded: bool,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct RxMsg {
    tag: u8,
    words: Vec<u32>,
    read: usize,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Tx {
    open: Option<Open>,
    /// Words of this interface's whole messages still in [`DataNet::out`].
    queued: usize,
    send_ok: bool,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Rx {
    msgs: VecDeque<RxMsg>,
    words: usize,
}

/// What a register access asks of the NI around it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// A Bus Error: the access is lost (`Cm5::bus_error`).
    pub bus_error: bool,
    /// Non-Green cause bits to raise.
    pub cause: u32,
    /// Green cause bits to raise (already filtered by their enables).
    pub green: u32,
    /// A message was queued: the fabric's poller should look.
    pub sent: bool,
    /// Receive room was freed: the poller may deliver what waited for it.
    pub freed: bool,
}

/// The registers the data network reads around it (supervisor-set in the register file).
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Setup {
    pub supervisor: bool,
    pub user_tag_mask: u32,
    pub longest: u32,
    pub partition_size: u32,
    pub partition_base: u32,
    pub chunk_size: u32,
    pub hodgepodge: u32,
    pub msg_count_mask: u32,
    pub rec_interrupt_mask: u32,
    pub user_rec_interrupt_mask: u32,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct DataNet {
    tx: [Tx; 3],
    /// LDR and RDR receive FIFOs.
    rx: [Rx; 2],
    /// Whole messages, oldest first, for the poller.
    out: VecDeque<Packet>,
    /// Set while `out` is not empty; the fabric's poller clears it when it finds it empty.
    #[serde(skip)]
    pub pending: Arc<AtomicBool>,
    /// `ni_dr_message_count` (§3.5.4), signed.
    pub message_count: i32,
}

impl DataNet {
    pub fn new(pending: Arc<AtomicBool>) -> DataNet {
        pending.store(false, Ordering::Release);
        DataNet {
            tx: Default::default(),
            rx: Default::default(),
            out: VecDeque::new(),
            pending,
            message_count: 0,
        }
    }

    fn used(&self, i: Iface) -> usize {
        let t = &self.tx[i as usize];
        t.queued + t.open.as_ref().map_or(0, |o| 1 + o.words.len())
    }

    fn send_space(&self, i: Iface, locked: bool) -> u32 {
        if locked {
            0
        } else {
            FIFO_WORDS.saturating_sub(self.used(i)) as u32
        }
    }

    /// A `send_first` write: `word` is the destination address word (§3.2).
    pub fn send_first(
        &mut self,
        sf: SendFirst,
        word: u32,
        set: &Setup,
        locked: bool,
        chunk_table: &[u8; 64],
    ) -> Effects {
        let mut fx = Effects::default();
        let i = sf.iface as usize;
        // One message at a time per interface, and DR excludes LDR/RDR while either is
        // partial (§2.3, §3.1).
        let partial = |t: &Tx| t.open.as_ref().is_some_and(|o| !o.discarded);
        let clash = match sf.iface {
            Iface::Dr => partial(&self.tx[1]) || partial(&self.tx[2]),
            _ => partial(&self.tx[0]),
        };
        if partial(&self.tx[i]) || clash {
            self.tx[i].open = None;
            self.tx[i].send_ok = false;
            fx.bus_error = true;
            return fx;
        }
        let limit = if sf.long {
            set.longest.min(LONG_MAX)
        } else {
            set.longest.min(SHORT_MAX)
        };
        let user_bad = !set.supervisor && (sf.physical || set.user_tag_mask & (1 << sf.tag) != 0);
        if user_bad || sf.len == 0 || sf.len > limit {
            if sf.len > limit && set.hodgepodge & hodgepodge::MSG_TOO_LONG_IE != 0 {
                fx.cause |= cause::MESSAGE_TOO_LONG;
            }
            self.tx[i].open = None;
            self.tx[i].send_ok = false;
            fx.bus_error = true;
            return fx;
        }
        let phys = if sf.physical {
            Some(word & 0xF_FFFF)
        } else {
            translate(word & 0xF_FFFF, set, chunk_table)
        };
        let room = !locked && self.used(sf.iface) + 1 + sf.len as usize <= FIFO_WORDS;
        if phys.is_none() {
            fx.cause |= cause::BAD_RELATIVE_ADDRESS;
        }
        self.tx[i].open = Some(Open {
            phys: phys.unwrap_or(0),
            tag: sf.tag,
            len: sf.len,
            words: Vec::with_capacity(sf.len as usize),
            discarded: phys.is_none() || !room,
        });
        self.tx[i].send_ok = phys.is_some() && room;
        fx
    }

    /// A `send` write of one data word.
    pub fn send(&mut self, iface: Iface, word: u32, set: &Setup, locked: bool) -> Effects {
        let mut fx = Effects::default();
        let t = &mut self.tx[iface as usize];
        let Some(o) = t.open.as_mut() else {
            // No message open (§2.3): a Bus Error.
            t.send_ok = false;
            fx.bus_error = true;
            return fx;
        };
        if locked && !o.discarded {
            o.discarded = true;
            t.send_ok = false;
        }
        o.words.push(word);
        if o.words.len() < o.len as usize {
            return fx;
        }
        let o = t.open.take().expect("open message");
        if o.discarded {
            return fx;
        }
        t.queued += 1 + o.words.len();
        if set.msg_count_mask & (1 << o.tag) != 0 {
            self.message_count = self.message_count.wrapping_add(1);
        }
        self.out.push_back(Packet {
            iface,
            phys: o.phys,
            tag: o.tag,
            words: o.words,
        });
        self.pending.store(true, Ordering::Release);
        fx.sent = true;
        fx
    }

    /// `lock` set on an interface (§2.7.2): what is being written and what waits to leave
    /// is discarded.
    pub fn lock(&mut self, iface: Iface) {
        let t = &mut self.tx[iface as usize];
        t.open = None;
        t.send_ok = false;
        t.queued = 0;
        self.out.retain(|p| p.iface != iface);
    }

    /// The oldest whole message waiting to leave (the poller's view).
    pub fn front_out(&self) -> Option<&Packet> {
        self.out.front()
    }

    /// The oldest message left the NI (delivered, or dropped by the fabric). Returns the
    /// Green causes it raises (`sfifo empty` when a send FIFO went empty).
    pub fn pop_out(&mut self, sfifo_ie: bool) -> u32 {
        let Some(p) = self.out.pop_front() else {
            return 0;
        };
        let t = &mut self.tx[p.iface as usize];
        t.queued = t.queued.saturating_sub(1 + p.words.len());
        if sfifo_ie && t.queued == 0 && t.open.is_none() {
            green::SFIFO_EMPTY
        } else {
            0
        }
    }

    /// Which receive FIFO a message from `from` lands in, if it fits whole.
    pub fn arrival_fifo(&self, from: Iface, len: usize) -> Option<usize> {
        let free = |k: usize| FIFO_WORDS - self.rx[k].words;
        let k = match from {
            Iface::Ldr => 0,
            Iface::Rdr => 1,
            Iface::Dr => {
                if free(1) > free(0) {
                    1
                } else {
                    0
                }
            }
        };
        (free(k) >= len).then_some(k)
    }

    /// A message arrives whole into receive FIFO `k` (0 LDR, 1 RDR). Returns the Green
    /// causes it raises.
    pub fn arrive(
        &mut self,
        k: usize,
        tag: u8,
        words: Vec<u32>,
        set: &Setup,
        rec_ok_ie: bool,
    ) -> u32 {
        if set.msg_count_mask & (1 << tag) != 0 {
            self.message_count = self.message_count.wrapping_sub(1);
        }
        self.rx[k].words += words.len();
        self.rx[k].msgs.push_back(RxMsg {
            tag,
            words,
            read: 0,
        });
        if self.rx[k].msgs.len() == 1 {
            head_causes(k, tag, set, rec_ok_ie)
        } else {
            0
        }
    }

    /// The head message of FIFO `k` as `who` may see it: a tag the supervisor reserved for
    /// interrupts (`ni_rec_interrupt_mask`) is hidden from the user window (§3.5.4).
    fn head(&self, k: usize, supervisor: bool, set: &Setup) -> Option<&RxMsg> {
        self.rx[k]
            .msgs
            .front()
            .filter(|m| supervisor || set.rec_interrupt_mask & (1 << m.tag) == 0)
    }

    /// A read of `recv`: one word of the head message, or a Bus Error when there is none
    /// (§2.4). `rec_ok_ie`: whether the next head raises `rec ok`.
    pub fn recv(&mut self, k: usize, set: &Setup, rec_ok_ie: bool) -> (Option<u32>, Effects) {
        let mut fx = Effects::default();
        if self.head(k, set.supervisor, set).is_none() {
            fx.bus_error = true;
            return (None, fx);
        }
        let rx = &mut self.rx[k];
        let m = rx.msgs.front_mut().expect("head");
        let w = m.words[m.read];
        m.read += 1;
        rx.words -= 1;
        if m.read == m.words.len() {
            rx.msgs.pop_front();
            fx.freed = true;
            if let Some(next) = rx.msgs.front() {
                fx.green |= head_causes(k, next.tag, set, rec_ok_ie);
            }
        }
        (Some(w), fx)
    }

    /// Whether a word is there to pop (`status_pop`).
    pub fn can_pop(&self, k: usize, set: &Setup) -> bool {
        self.head(k, set.supervisor, set).is_some()
    }

    /// Whether the last message written to `i` is still accepted (§2.5.1).
    pub fn send_ok(&self, i: Iface) -> bool {
        self.tx[i as usize].send_ok
    }

    /// `ni_*_status` (`long` = false) or `ni_*_status_long` of `iface` (App. A.5.1, A.5.2).
    pub fn status(&self, i: Iface, long: bool, set: &Setup, locked: bool) -> u32 {
        let space = self.send_space(i, locked);
        let ok = self.tx[i as usize].send_ok && !locked;
        // DR has no receive side of its own: its rec fields describe nothing (§3.1).
        let (rec_ok, len, left, tag) = match i {
            Iface::Dr => (false, 0, 0, 0),
            _ => match self.head(i as usize - 1, set.supervisor, set) {
                Some(m) => (
                    true,
                    m.words.len() as u32,
                    (m.words.len() - m.read) as u32,
                    m.tag as u32,
                ),
                None => (false, 0, 0, 0),
            },
        };
        let send_state = self.send_state();
        let rec_state = if self
            .rx
            .iter()
            .any(|r| r.msgs.front().is_some_and(|m| m.read > 0))
        {
            2
        } else {
            0
        };
        if long {
            space.min(31)
                | (rec_ok as u32) << 5
                | (ok as u32) << 6
                | left.min(31) << 8
                | len.min(31) << 13
                | tag << 18
                | send_state << 24
                | rec_state << 26
        } else {
            space.min(status::SEND_SPACE_MASK)
                | if rec_ok { status::REC_OK } else { 0 }
                | if ok { status::SEND_OK } else { 0 }
                | left.min(15) << 7
                | len.min(15) << 11
                | tag << 15
                | send_state << 21
                | rec_state << 23
        }
    }

    /// `dr_send_state` (§3.5.5): 0 none, 1 a partial message in DR, 2 in LDR and/or RDR.
    fn send_state(&self) -> u32 {
        // Every message has at least one data word: an open one is partial.
        let partial = |t: &Tx| t.open.is_some();
        if partial(&self.tx[0]) {
            1
        } else if partial(&self.tx[1]) || partial(&self.tx[2]) {
            2
        } else {
            0
        }
    }

    /// `ni_*_status_all` (App. A.5.3): both receive FIFOs, this interface's send side.
    pub fn status_all(&self, i: Iface, set: &Setup, locked: bool) -> u32 {
        let (first, second) = match i {
            Iface::Rdr => (1, 0),
            _ => (0, 1),
        };
        let head = |k| self.head(k, set.supervisor, set);
        let ok = |k| head(k).is_some() as u32;
        let tag = |k| head(k).map_or(0, |m: &RxMsg| m.tag as u32);
        let len = |k| head(k).map_or(0, |m: &RxMsg| (m.words.len() as u32).min(31));
        ok(first)
            | ok(second) << 1
            | ((self.tx[i as usize].send_ok && !locked) as u32) << 2
            | tag(first) << 3
            | tag(second) << 7
            | len(first) << 11
            | len(second) << 16
            | self.send_space(i, locked).min(31) << 21
    }

    /// `rec_full` of a private register: the receive FIFO cannot take a long message.
    pub fn rec_full(&self, i: Iface) -> bool {
        match i {
            Iface::Dr => false,
            _ => FIFO_WORDS - self.rx[i as usize - 1].words < LONG_MAX as usize,
        }
    }

    /// Messages waiting to leave (tests and counters).
    pub fn out_len(&self) -> usize {
        self.out.len()
    }
}

/// The Green causes of a message becoming the head of receive FIFO `k` (§2.7.1, §3.5.4).
fn head_causes(k: usize, tag: u8, set: &Setup, rec_ok_ie: bool) -> u32 {
    let bit = 1u32 << tag;
    let mut g = 0;
    if rec_ok_ie {
        g |= [green::LDR_REC_OK, green::RDR_REC_OK][k];
    }
    let hp = set.hodgepodge;
    if set.rec_interrupt_mask & bit != 0 {
        g |= green::DR_REC_TAG;
        if hp & [hodgepodge::LDR_REC_TAG_IE, hodgepodge::RDR_REC_TAG_IE][k] != 0 {
            g |= [green::LDR_REC_TAG, green::RDR_REC_TAG][k];
        }
    } else if set.user_rec_interrupt_mask & bit != 0
        && hp
            & [
                hodgepodge::LDR_USER_REC_TAG_IE,
                hodgepodge::RDR_USER_REC_TAG_IE,
            ][k]
            != 0
    {
        g |= [green::LDR_USER_REC_TAG, green::RDR_USER_REC_TAG][k];
    }
    g
}

/// Relative to physical (§6.3.2): `None` past the partition (`bad relative address`).
/// chunk = the relative address's high bits, select = its low `2 · chunk_size` bits (4^s
/// addresses per chunk); absolute = chunk position · 4^s + select; physical = absolute +
/// partition base.
pub fn translate(rel: u32, set: &Setup, table: &[u8; 64]) -> Option<u32> {
    if rel >= set.partition_size {
        return None;
    }
    let bits = 2 * set.chunk_size.clamp(1, 6);
    let chunk = (rel >> bits) as usize;
    let select = rel & ((1 << bits) - 1);
    let pos = *table.get(chunk)? as u32;
    Some(((pos << bits) | select).wrapping_add(set.partition_base) & 0xF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup {
            supervisor: false,
            longest: 5,
            partition_size: 4,
            chunk_size: 1,
            ..Default::default()
        }
    }

    fn identity() -> [u8; 64] {
        std::array::from_fn(|i| i as u8)
    }

    /// App. A.3: LDR short send_first at 0x6000 + (aux << 3).
    #[test]
    fn send_first_addresses_decode_as_app_a3_and_a4() {
        let aux = (3 << 4) | 2; // tag 3, length 2, relative
        let sf = SendFirst::decode(0x6000 + (aux << 3)).unwrap();
        assert_eq!(
            sf,
            SendFirst {
                iface: Iface::Ldr,
                physical: false,
                tag: 3,
                len: 2,
                long: false
            }
        );
        assert!(SendFirst::decode(0x6800).unwrap().physical);
        // Long form: md[9] length[8:4] tag[3:0] from 0x10000 (LDR).
        let aux = (17 << 4) | 9;
        let sf = SendFirst::decode(cm5::LDR_SEND_FIRST_LONG + (aux << 3)).unwrap();
        assert_eq!(
            (sf.iface, sf.len, sf.tag, sf.long),
            (Iface::Ldr, 17, 9, true)
        );
        assert_eq!(SendFirst::decode(0x1000).unwrap().iface, Iface::Dr);
        assert!(SendFirst::decode(0x3000).is_none(), "BC is no data network");
    }

    /// §6.3.2: identity table, base 10: relative r is physical 10 + r; past the size: none.
    #[test]
    fn relative_addresses_translate_through_the_chunk_table() {
        let mut s = setup();
        s.partition_base = 10;
        assert_eq!(translate(3, &s, &identity()), Some(13));
        assert_eq!(translate(4, &s, &identity()), None);
        // A table that skips a chunk (broken hardware): chunk 1 sits at position 2.
        let mut t = identity();
        t[1] = 2;
        s.partition_size = 8;
        assert_eq!(translate(5, &s, &t), Some(10 + 8 + 1));
    }

    /// §2.3, §2.5.1: a message leaves only whole; a full FIFO discards with send_ok 0.
    #[test]
    fn a_message_is_queued_only_when_whole_and_a_full_fifo_discards() {
        let mut d = DataNet::new(Arc::default());
        let s = setup();
        let sf = SendFirst::decode(0x6000 + ((5 << 4 | 5) << 3)).unwrap();
        for round in 0..4 {
            assert!(!d.send_first(sf, 1, &s, false, &identity()).bus_error);
            for w in 0..5 {
                d.send(Iface::Ldr, w, &s, false);
            }
            let st = d.status(Iface::Ldr, false, &s, false);
            // 24 words: four messages of 6 words fit, the fifth does not.
            assert_ne!(st & status::SEND_OK, 0, "message {round} accepted");
        }
        assert_eq!(d.out_len(), 4);
        d.send_first(sf, 1, &s, false, &identity());
        for w in 0..5 {
            assert!(
                !d.send(Iface::Ldr, w, &s, false).bus_error,
                "sends after a discard are no-ops"
            );
        }
        assert_eq!(d.status(Iface::Ldr, false, &s, false) & status::SEND_OK, 0);
        assert_eq!(d.out_len(), 4);
        // The fabric takes one: room again.
        d.pop_out(false);
        d.send_first(sf, 1, &s, false, &identity());
        for w in 0..5 {
            d.send(Iface::Ldr, w, &s, false);
        }
        assert_ne!(d.status(Iface::Ldr, false, &s, false) & status::SEND_OK, 0);
    }

    /// §2.3, §3.4, §3.5.4: Bus Errors of the send side.
    #[test]
    fn user_mode_send_errors_are_bus_errors() {
        let mut d = DataNet::new(Arc::default());
        let mut s = setup();
        let t = identity();
        assert!(
            d.send(Iface::Ldr, 0, &s, false).bus_error,
            "send without send_first"
        );
        let phys = SendFirst::decode(0x6800 + ((1) << 3)).unwrap();
        assert!(
            d.send_first(phys, 0, &s, false, &t).bus_error,
            "physical mode"
        );
        s.user_tag_mask = 1 << 7;
        let tag7 = SendFirst::decode(0x6000 + ((7 << 4 | 1) << 3)).unwrap();
        assert!(
            d.send_first(tag7, 0, &s, false, &t).bus_error,
            "reserved tag"
        );
        s.supervisor = true;
        assert!(
            !d.send_first(tag7, 0, &s, false, &t).bus_error,
            "the supervisor may"
        );
        d.send(Iface::Ldr, 0, &s, false);
        s.supervisor = false;
        let six = SendFirst::decode(0x6000 + ((6) << 3)).unwrap();
        assert!(d.send_first(six, 0, &s, false, &t).bus_error, "6 words > 5");
        s.longest = 18;
        let long = SendFirst::decode(cm5::LDR_SEND_FIRST_LONG + ((18 << 4) << 3)).unwrap();
        assert!(!d.send_first(long, 0, &s, false, &t).bus_error);
        let dr = SendFirst::decode(0x1000 + (1 << 3)).unwrap();
        assert!(
            d.send_first(dr, 0, &s, false, &t).bus_error,
            "DR while LDR is partial"
        );
    }

    /// §2.4: words in order, rec_length fixed while rec_length_left counts down, then a
    /// Bus Error on an empty FIFO.
    #[test]
    fn receive_pops_in_order_and_an_empty_fifo_is_a_bus_error() {
        let mut d = DataNet::new(Arc::default());
        let s = setup();
        let k = d.arrival_fifo(Iface::Ldr, 3).unwrap();
        let g = d.arrive(k, 4, vec![7, 8, 9], &s, true);
        assert_eq!(g, green::LDR_REC_OK);
        let st = d.status(Iface::Ldr, false, &s, false);
        assert_ne!(st & status::REC_OK, 0);
        assert_eq!((st >> 11) & 0xF, 3);
        assert_eq!((st >> 15) & 0xF, 4);
        for (i, want) in [7, 8, 9].into_iter().enumerate() {
            let st = d.status(Iface::Ldr, false, &s, false);
            assert_eq!((st >> 7) & 0xF, 3 - i as u32, "rec_length_left");
            assert_eq!((st >> 11) & 0xF, 3, "rec_length stays");
            assert_eq!(d.recv(0, &s, true).0, Some(want));
        }
        let (w, fx) = d.recv(0, &s, true);
        assert_eq!(w, None);
        assert!(fx.bus_error);
    }
}
