//! The CM-5 broadcast interfaces, user (BC) and supervisor (SBC), as the registers show
//! them (NI Programmer's Handbook §4.1, App. A.5.4, A.5.5): one state machine per interface.
//!
//! A message is composed in the send FIFO (`send_first` with the length in the address,
//! then `send` words) and is offered to the partition only when whole (§4.1.2, "atomic with
//! respect to sending"). The fabric's poller (`fabric/cm5.rs`) delivers it to every
//! non-abstaining member, the sender included, and only then takes it out of the sender's
//! FIFO (§4.1.2 usage note: "a message is not removed from the send FIFO before all
//! non-abstaining nodes have received it"). Arrivals are concatenated into one receive
//! "message" whose length freezes when the receiver first looks at it (§4.1.2, §4.1.6).
//!
//! Choices where the handbook leaves room:
//! - The send FIFO holds [`SEND_WORDS`] words (two messages of the 4-word maximum); the
//!   receive FIFO [`REC_WORDS`]. A message is delivered only when every receiver has room for
//!   all of it, so it is never split in transit and nothing is dropped for lack of room.
//! - `rec_abstain` stops reception only; sending is gated by `send_enable` (§4.1.8). The
//!   handbook's PM examples (§7.5, App. G) abstain from reception and still broadcast, which
//!   the generic abstain rule of §2.6.1 would forbid.

use std::collections::VecDeque;

use ni_abi::cm5::{private, status};

/// Words of the send FIFO.
pub const SEND_WORDS: usize = 8;
/// Words of the receive FIFO.
pub const REC_WORDS: usize = 16;
/// `MAX_BROADCAST_MSG_WORDS` and `MAX_SBC_MSG_WORDS` (§4.1.3).
pub const MAX_WORDS: usize = 4;

/// Which broadcast interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Which {
    User = 0,
    Supervisor = 1,
}

impl Which {
    pub const BOTH: [Which; 2] = [Which::User, Which::Supervisor];

    pub fn base(self) -> u32 {
        match self {
            Which::User => ni_abi::cm5::BC_BASE,
            Which::Supervisor => ni_abi::cm5::SBC_BASE,
        }
    }

    /// The Green `rec ok` cause of this interface.
    pub fn rec_ok_cause(self) -> u32 {
        match self {
            Which::User => ni_abi::cm5::green::BC_REC_OK,
            Which::Supervisor => ni_abi::cm5::green::SBC_REC_OK,
        }
    }

    /// The register block `off` belongs to, and the offset in it.
    pub fn of_register(off: u32) -> Option<(Which, u32)> {
        Which::BOTH
            .into_iter()
            .find(|w| (w.base()..w.base() + 0x80).contains(&off))
            .map(|w| (w, off - w.base()))
    }

    /// The interface a `send_first` address selects (App. A.3: 3 user, 4 supervisor).
    pub fn from_fifo(n: u32) -> Option<Which> {
        match n {
            ni_abi::cm5::fifo::USER_BC => Some(Which::User),
            ni_abi::cm5::fifo::SUPERVISOR_BC => Some(Which::Supervisor),
            _ => None,
        }
    }
}

/// Why a write to the send FIFO is a Bus Error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// `send_enable` is 0 (§4.1.8).
    NotEnabled,
    /// A length outside 1..=4, or aux bits above the length not 0 (§4.1.4).
    BadLength,
    /// `send_first` while a message is open, or `send` with none open (§2.3).
    Sequence,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Open {
    len: usize,
    words: Vec<u32>,
    /// Written while locked or without room: discarded, `send_ok` 0.
    discarded: bool,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Broadcast {
    open: Option<Open>,
    /// Whole messages not yet delivered to the whole partition, oldest first.
    out: VecDeque<Vec<u32>>,
    out_words: usize,
    send_ok: bool,
    rx: VecDeque<u32>,
    /// Words left of the receive "message" whose length is frozen (0: none frozen).
    frozen: usize,
}

impl Broadcast {
    /// A `send_first` at App. A.3 auxiliary bits `aux` with the first word.
    pub fn send_first(&mut self, aux: u32, first: u32, private_reg: u32) -> Result<(), SendError> {
        if private_reg & private::SEND_ENABLE == 0 {
            self.abandon();
            return Err(SendError::NotEnabled);
        }
        let len = (aux & 0xF) as usize;
        if aux >> 4 != 0 || !(1..=MAX_WORDS).contains(&len) {
            self.abandon();
            return Err(SendError::BadLength);
        }
        if self.open.as_ref().is_some_and(|o| !o.discarded) {
            self.abandon();
            return Err(SendError::Sequence);
        }
        let locked = private_reg & private::LOCK != 0;
        let room = !locked && self.out_words + len <= SEND_WORDS;
        self.open = Some(Open {
            len,
            words: Vec::with_capacity(len),
            discarded: !room,
        });
        self.send_ok = room;
        self.push(first);
        Ok(())
    }

    /// A `send` word.
    pub fn send(&mut self, word: u32, private_reg: u32) -> Result<(), SendError> {
        if private_reg & private::SEND_ENABLE == 0 {
            self.abandon();
            return Err(SendError::NotEnabled);
        }
        if self.open.is_none() {
            self.send_ok = false;
            return Err(SendError::Sequence);
        }
        self.push(word);
        Ok(())
    }

    fn abandon(&mut self) {
        self.open = None;
        self.send_ok = false;
    }

    fn push(&mut self, word: u32) {
        let o = self.open.as_mut().expect("open broadcast");
        o.words.push(word);
        if o.words.len() < o.len {
            return;
        }
        let o = self.open.take().expect("open broadcast");
        if !o.discarded {
            self.out_words += o.len;
            self.out.push_back(o.words);
        }
    }

    /// Whether the last `send_first` discarded its message (locked, or no room).
    pub fn discarding(&self) -> bool {
        !self.send_ok
    }

    /// `lock` (§2.7.2): what is being written is discarded.
    pub fn lock(&mut self) {
        self.abandon();
    }

    /// Whole messages waiting to be broadcast.
    pub fn queued(&self) -> usize {
        self.out.len()
    }

    /// The oldest whole message waiting to be broadcast.
    pub fn front(&self) -> Option<&[u32]> {
        self.out.front().map(|m| &m[..])
    }

    /// The oldest message reached every receiver.
    pub fn delivered(&mut self) {
        if let Some(m) = self.out.pop_front() {
            self.out_words -= m.len();
        }
    }

    /// Clearing `bc_or_com_collision` empties the send FIFO (B.3.5).
    pub fn empty_send(&mut self) {
        self.out.clear();
        self.out_words = 0;
        self.abandon();
    }

    /// Whether `n` more words fit in the receive FIFO.
    pub fn room(&self, n: usize) -> bool {
        self.rx.len() + n <= REC_WORDS
    }

    /// Words arrive; whether the FIFO was empty before (a new `rec ok`).
    pub fn arrive(&mut self, words: &[u32]) -> bool {
        let was_empty = self.rx.is_empty();
        self.rx.extend(words);
        was_empty
    }

    pub fn rec_ok(&self) -> bool {
        !self.rx.is_empty()
    }

    /// Looking at the receive side fixes the length of the waiting message (§4.1.2).
    fn freeze(&mut self) {
        if self.frozen == 0 {
            self.frozen = self.rx.len();
        }
    }

    /// A `recv` read: the next word; `None` when empty (a Bus Error).
    pub fn recv(&mut self) -> Option<u32> {
        self.freeze();
        let w = self.rx.pop_front()?;
        self.frozen -= 1;
        Some(w)
    }

    /// The status register (App. A.5.4): send_space[3:0], rec_ok, send_ok, send_empty,
    /// rec_length_left[13:7] (7 bits since NI v2.2, App. I.4).
    pub fn status(&mut self, locked: bool) -> u32 {
        self.freeze();
        let open = self.open.as_ref().map_or(0, |o| o.words.len());
        let space = if locked {
            0
        } else {
            SEND_WORDS.saturating_sub(self.out_words + open) as u32
        };
        space.min(status::SEND_SPACE_MASK)
            | if self.rec_ok() { status::REC_OK } else { 0 }
            | if self.send_ok && !locked {
                status::SEND_OK
            } else {
                0
            }
            | if self.out.is_empty() && self.open.is_none() {
                status::SEND_EMPTY
            } else {
                0
            }
            | (self.frozen.min(0x7F) as u32) << 7
    }

    /// `rec_full` of the private register: a maximal message would not fit.
    pub fn rec_full(&self) -> bool {
        !self.room(MAX_WORDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENABLED: u32 = private::SEND_ENABLE;

    /// §4.1.3, §4.1.8: a message is offered only when whole; send_enable gates sending;
    /// lengths 1..=4 with the high aux bits 0.
    #[test]
    fn messages_leave_whole_and_bad_sends_are_refused() {
        let mut b = Broadcast::default();
        assert_eq!(b.send_first(1, 7, 0), Err(SendError::NotEnabled));
        assert_eq!(b.send_first(5, 7, ENABLED), Err(SendError::BadLength));
        assert_eq!(b.send_first(0x12, 7, ENABLED), Err(SendError::BadLength));
        assert_eq!(b.send(1, ENABLED), Err(SendError::Sequence));
        b.send_first(3, 1, ENABLED).unwrap();
        b.send(2, ENABLED).unwrap();
        assert!(b.front().is_none());
        assert_eq!(b.status(false) & status::SEND_EMPTY, 0);
        b.send(3, ENABLED).unwrap();
        assert_eq!(b.front(), Some(&[1, 2, 3][..]));
        assert_eq!(b.status(false) & 0xF, 5);
        b.delivered();
        assert_ne!(b.status(false) & status::SEND_EMPTY, 0);
        // Locked: discarded, send_ok 0, not a Bus Error.
        b.send_first(1, 9, ENABLED | private::LOCK).unwrap();
        assert!(b.discarding());
        assert!(b.front().is_none());
    }

    /// §4.1.2: arrivals concatenate; the length freezes when the receiver looks, and later
    /// words form the next message.
    #[test]
    fn arrivals_concatenate_until_the_receiver_looks() {
        let mut b = Broadcast::default();
        assert!(b.arrive(&[1, 2]));
        assert!(!b.arrive(&[3]));
        assert_eq!(b.status(false) >> 7 & 0x7F, 3);
        b.arrive(&[4, 5]);
        assert_eq!(b.status(false) >> 7 & 0x7F, 3, "frozen");
        assert_eq!(b.recv(), Some(1));
        assert_eq!(b.recv(), Some(2));
        assert_eq!(b.recv(), Some(3));
        assert_eq!(b.status(false) >> 7 & 0x7F, 2, "the next message");
        assert_eq!(b.recv(), Some(4));
        assert_eq!(b.recv(), Some(5));
        assert_eq!(b.recv(), None);
        assert_eq!(b.status(false) & status::REC_OK, 0);
    }
}
