//! The CM-5 Control Network as the registers show it (NI Programmer's Handbook ch. 4): the
//! combine interface (COM), synchronous and asynchronous global, combine flush, and the
//! participation (abstain) flags.
//!
//! The rounds themselves are the fabric's (`fabric/collective.rs`), shared with libni's
//! requests, so a member driving these registers and a member using libni take part in the
//! same combine, network-done or sync global and get the same result. This side composes
//! what the registers send into [`Event`]s for the fabric's poller, and holds what comes
//! back: the COM receive FIFO, `sync_global_complete`, `router_done_complete`.
//!
//! Choices where the handbook leaves room:
//! - A combine leaves the COM send FIFO when the poller takes it into its round; the FIFO
//!   holds [`SEND_WORDS`] words of messages not yet taken (pipelining, §4.2.5).
//! - The COM receive FIFO holds [`REC_WORDS`] words; a result that finds it full is dropped
//!   and counted (`cm5_com_overruns`): the handbook's receivers read before they send again.

use std::collections::VecDeque;

use ni_abi::cm5::{Combiner, Pattern, MAX_COMBINE_WORDS};

/// Words of combines composed but not yet taken by the fabric.
pub const SEND_WORDS: usize = 10;
/// Words of results the COM receive FIFO holds.
pub const REC_WORDS: usize = 20;

/// What the registers ask of the control network, in the order they asked it. Each kind is
/// bounded by the registers themselves: combines by the send FIFO, a sync global and a
/// flush by the Bus Error of a second one while one is pending. Changes whose latest value
/// is all that matters (abstain flags, async globals) are not queued: see [`Com`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Event {
    Combine {
        pattern: Pattern,
        combiner: Combiner,
        len: usize,
        words: [u32; MAX_COMBINE_WORDS],
        scan_start: bool,
    },
    SyncGlobal(bool),
    Flush,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct OpenCombine {
    pattern: Pattern,
    combiner: Combiner,
    len: usize,
    words: Vec<u32>,
    scan_start: bool,
    discarded: bool,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Result {
    words: Vec<u32>,
    read: usize,
    overflow: bool,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Com {
    open: Option<OpenCombine>,
    /// For the fabric, oldest first.
    pub events: VecDeque<Event>,
    /// An abstain flag changed (the registers hold it; the fabric reads it there). Taken
    /// by the fabric whatever waits at the head of `events`, so a driver that writes its
    /// flags in a loop while a round waits for an absent member grows nothing.
    pub participation_changed: bool,
    /// The last `global_send` bit written to `ni_async_global` / `ni_async_sup_global`
    /// and not yet taken by the fabric.
    pub async_global: Option<bool>,
    pub async_sup_global: Option<bool>,
    /// Words of combines in `events`.
    queued: usize,
    send_ok: bool,
    rx: VecDeque<Result>,
    rx_words: usize,
}

/// What a COM `send_first` asks (App. A.3): aux = pattern[8:7] combiner[6:4] length[3:0].
pub fn decode_send_first(off: u32) -> (u32, u32, usize) {
    let aux = (off & 0xFFF) >> ni_abi::cm5::AUXILIARY_START_P;
    ((aux >> 7) & 3, (aux >> 4) & 7, (aux & 0xF) as usize)
}

impl Com {
    /// Nothing is waiting for the fabric.
    pub fn idle(&self) -> bool {
        self.events.is_empty()
            && !self.participation_changed
            && self.async_global.is_none()
            && self.async_sup_global.is_none()
    }

    pub fn busy(&self) -> bool {
        self.open.as_ref().is_some_and(|o| !o.discarded) || self.queued > 0
    }

    pub fn send_space(&self, locked: bool) -> u32 {
        if locked {
            return 0;
        }
        let open = self.open.as_ref().map_or(0, |o| o.words.len());
        SEND_WORDS.saturating_sub(self.queued + open) as u32
    }

    /// A COM `send_first`: `Err(())` is a Bus Error (an illegal combiner/pattern pair, a
    /// length out of 1..5, a message already open, §4.2.4). `first` is the first word.
    #[allow(clippy::result_unit_err)]
    pub fn send_first(
        &mut self,
        off: u32,
        first: u32,
        scan_start: bool,
        locked: bool,
    ) -> std::result::Result<(), ()> {
        let (p, c, len) = decode_send_first(off);
        let pattern = Pattern::from_bits(p);
        let combiner = Combiner::from_bits(c).ok_or(())?;
        if self.open.as_ref().is_some_and(|o| !o.discarded)
            || !ni_abi::cm5::combine_legal(pattern, combiner, len)
        {
            self.open = None;
            self.send_ok = false;
            return Err(());
        }
        let room = !locked && self.queued + len <= SEND_WORDS;
        self.open = Some(OpenCombine {
            pattern,
            combiner,
            len,
            words: Vec::with_capacity(len),
            scan_start,
            discarded: !room,
        });
        self.send_ok = room;
        self.push(first);
        Ok(())
    }

    /// A COM `send` word; `Err(())`: no message open, a Bus Error.
    #[allow(clippy::result_unit_err)]
    pub fn send(&mut self, word: u32) -> std::result::Result<(), ()> {
        if self.open.is_none() {
            self.send_ok = false;
            return Err(());
        }
        self.push(word);
        Ok(())
    }

    fn push(&mut self, word: u32) {
        let o = self.open.as_mut().expect("open combine");
        o.words.push(word);
        if o.words.len() < o.len {
            return;
        }
        let o = self.open.take().expect("open combine");
        if o.discarded {
            return;
        }
        let mut words = [0; MAX_COMBINE_WORDS];
        words[..o.len].copy_from_slice(&o.words);
        self.queued += o.len;
        self.events.push_back(Event::Combine {
            pattern: o.pattern,
            combiner: o.combiner,
            len: o.len,
            words,
            scan_start: o.scan_start,
        });
    }

    /// `lock` (§2.7.2): what is being written is discarded.
    pub fn lock(&mut self) {
        self.open = None;
        self.send_ok = false;
    }

    /// The fabric took the oldest event.
    pub fn taken(&mut self) {
        if let Some(Event::Combine { len, .. }) = self.events.pop_front() {
            self.queued = self.queued.saturating_sub(len);
        }
    }

    /// A combine result arrives; whether it fit.
    pub fn result(&mut self, words: &[u32], overflow: bool) -> bool {
        if self.rx_words + words.len() > REC_WORDS {
            return false;
        }
        self.rx_words += words.len();
        self.rx.push_back(Result {
            words: words.to_vec(),
            read: 0,
            overflow,
        });
        true
    }

    pub fn rec_ok(&self) -> bool {
        !self.rx.is_empty()
    }

    /// Whether the head result is new (none of it read): for `rec ok` causes.
    pub fn head_is_fresh(&self) -> bool {
        self.rx.front().is_some_and(|r| r.read == 0)
    }

    /// A `com_recv` read: (word, first word of an overflowed result, FIFO went empty);
    /// `None`: empty, a Bus Error.
    pub fn recv(&mut self) -> Option<(u32, bool, bool)> {
        let r = self.rx.front_mut()?;
        let w = r.words[r.read];
        let first_of_overflow = r.read == 0 && r.overflow;
        r.read += 1;
        self.rx_words -= 1;
        if r.read == r.words.len() {
            self.rx.pop_front();
        }
        Some((w, first_of_overflow, self.rx.is_empty()))
    }

    /// `ni_com_status` (App. A.5.6).
    pub fn status(&self, locked: bool) -> u32 {
        use ni_abi::cm5::status as s;
        let (len, left, overflow) = self.rx.front().map_or((0, 0, false), |r| {
            (
                r.words.len() as u32,
                (r.words.len() - r.read) as u32,
                r.overflow,
            )
        });
        self.send_space(locked).min(15)
            | if self.rec_ok() { s::REC_OK } else { 0 }
            | if self.send_ok && !locked {
                s::SEND_OK
            } else {
                0
            }
            | if self.busy() { 0 } else { s::SEND_EMPTY }
            | left.min(15) << 7
            | len.min(15) << 11
            | (overflow as u32) << 20
    }

    /// The `rec_full` of the COM private register.
    pub fn rec_full(&self) -> bool {
        self.rx_words + MAX_COMBINE_WORDS > REC_WORDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sf(pattern: u32, combiner: u32, len: u32) -> u32 {
        0x5000 + (((pattern << 7) | (combiner << 4) | len) << 3)
    }

    /// §4.2.4, App. A.3: a combine is taken whole; illegal pairs are Bus Errors.
    #[test]
    fn combines_are_composed_whole_and_illegal_pairs_refused() {
        let mut c = Com::default();
        c.send_first(sf(3, 1, 2), 5, false, false).unwrap();
        assert!(c.events.is_empty());
        c.send(6).unwrap();
        assert_eq!(
            c.events.pop_front(),
            Some(Event::Combine {
                pattern: Pattern::Reduce,
                combiner: Combiner::Add,
                len: 2,
                words: [5, 6, 0, 0, 0],
                scan_start: false
            })
        );
        assert!(
            c.send_first(sf(0, 1, 1), 0, false, false).is_err(),
            "ADD with pattern 0"
        );
        assert!(
            c.send_first(sf(1, 5, 1), 0, false, false).is_err(),
            "router-done scan"
        );
        assert!(
            c.send_first(sf(3, 6, 1), 0, false, false).is_err(),
            "combiner 6"
        );
        assert!(
            c.send_first(sf(3, 1, 6), 0, false, false).is_err(),
            "6 words"
        );
        assert!(c.send(1).is_err(), "send with nothing open");
        assert!(
            c.send_first(sf(0, 5, 1), 0, false, false).is_ok(),
            "network-done"
        );
    }

    #[test]
    fn results_pop_in_order_and_flag_overflow_on_the_first_word() {
        let mut c = Com::default();
        assert!(c.result(&[1, 2], true));
        assert!(c.result(&[3], false));
        assert_ne!(c.status(false) & (1 << 20), 0);
        assert_eq!(c.recv(), Some((1, true, false)));
        assert_eq!(c.recv(), Some((2, false, false)));
        assert_eq!(c.recv(), Some((3, false, true)));
        assert_eq!(c.recv(), None);
    }
}
