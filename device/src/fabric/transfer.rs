//! Large copies in pieces, so that one big transfer never holds the poller (and with it
//! every other partition) for long: issue 18, item 7.
//!
//! A copy of at most [`INLINE_MAX`] bytes is done when its message is matched or its put/get
//! is taken, as before. A larger one becomes a [`Transfer`]: its message and receive are taken
//! out of the matching queues at once (so matching order is what it always was), and the
//! poller moves [`PIECE`] bytes of it at a time, at most [`PASS_BYTES`] per pass over all
//! transfers, round robin, checking both sides' mappings for every piece. Its completions are
//! written when the last piece has moved. A departure or partition change fails the transfers
//! it involves like the requests it involves.

use ni_abi::fastpath::{Request, Status};

use super::admin::{recv_request, send_request};
use super::node::{PendingSend, PostedRecv};
use super::ops::CopyFault;
use super::State;

/// Bytes moved per piece.
pub const PIECE: u64 = 1 << 20;
/// Copies up to this size are done at once.
pub const INLINE_MAX: u64 = PIECE;
/// Bytes the poller moves per pass over all transfers: ~100 µs of memcpy, the most another
/// partition's request waits for a transfer.
pub const PASS_BYTES: u64 = 2 * PIECE;

#[derive(serde::Serialize, serde::Deserialize)]
pub(super) enum Purpose {
    /// Message `s` into receive `rv` of NI `b`.
    Message {
        s: PendingSend,
        rv: PostedRecv,
        b: usize,
    },
    /// A put (`put`) or get that NI `a` asked of NI `b`.
    OneSided {
        a: usize,
        b: usize,
        r: Request,
        put: bool,
        hops: u32,
    },
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Transfer {
    pub src: usize,
    pub src_addr: u64,
    pub dst: usize,
    pub dst_addr: u64,
    pub len: u64,
    pub done: u64,
    pub purpose: Purpose,
}

impl Transfer {
    fn involves(&self, x: usize) -> bool {
        self.src == x || self.dst == x
    }
}

impl State {
    /// Move the next pieces of the transfers in flight. Returns whether anything moved.
    pub(super) fn advance_transfers(&mut self) -> bool {
        let mut budget = PASS_BYTES;
        let mut work = false;
        while budget > 0 {
            let Some(mut t) = self.transfers.pop_front() else {
                break;
            };
            work = true;
            let n = PIECE.min(t.len - t.done).min(budget);
            match self.copy(t.src, t.src_addr + t.done, t.dst, t.dst_addr + t.done, n) {
                Ok(()) => {
                    t.done += n;
                    budget -= n;
                    if t.done == t.len {
                        self.transfer_done(t);
                    } else {
                        self.transfers.push_back(t);
                    }
                }
                Err(f) => self.transfer_fault(t, f),
            }
        }
        work
    }

    fn transfer_done(&mut self, t: Transfer) {
        match t.purpose {
            Purpose::Message { s, rv, b } => self.message_done(b, &s, &rv),
            Purpose::OneSided { a, b, r, put, hops } => {
                self.nodes[a].outstanding -= 1;
                self.one_sided_done(a, b, &r, put, hops);
            }
        }
    }

    /// A piece faulted: a side unmapped its memory mid-transfer. As when the whole copy
    /// faults at once: a message whose sender's buffer went away is dropped (its receive
    /// waits again, first in line), a receive whose buffer went away fails (its message
    /// waits again, first in line).
    fn transfer_fault(&mut self, t: Transfer, f: CopyFault) {
        match t.purpose {
            Purpose::Message { s, rv, b } => match f {
                CopyFault::Source => {
                    self.nodes[b].recvs.push_front(rv);
                    self.forget_send(&s, Status::NotRegistered);
                    let r = send_request(&s, self.partitions.rank_size(b as u32).0);
                    self.fail(s.src, &r, Status::NotRegistered);
                }
                CopyFault::Destination => {
                    self.nodes[b].unexpected.push_front(s);
                    self.nodes[b].outstanding -= 1;
                    self.fail(b, &recv_request(&rv), Status::NotRegistered);
                }
            },
            Purpose::OneSided { a, r, put, .. } => {
                self.nodes[a].outstanding -= 1;
                let status = match f {
                    CopyFault::Source if put => Status::NotRegistered,
                    CopyFault::Destination if !put => Status::NotRegistered,
                    _ => Status::OutOfBounds,
                };
                self.fail(a, &r, status);
            }
        }
    }

    /// NI `x` went away or left its partition: fail the transfers it was part of with
    /// `status` on the other side; what was x's own is dropped with it.
    pub(super) fn cancel_transfers(&mut self, x: usize, status: Status) {
        let (mine, rest): (Vec<Transfer>, Vec<Transfer>) =
            self.transfers.drain(..).partition(|t| t.involves(x));
        self.transfers = rest.into();
        for t in mine {
            match t.purpose {
                Purpose::Message { s, rv, b } => {
                    // The message never arrives.
                    self.forget_send(&s, status);
                    self.nodes[b].outstanding -= 1;
                    if b != x {
                        self.fail(b, &recv_request(&rv), status);
                    }
                    if s.src != x {
                        let r = send_request(&s, self.partitions.rank_size(b as u32).0);
                        self.fail(s.src, &r, status);
                    }
                }
                Purpose::OneSided { a, r, .. } => {
                    self.nodes[a].outstanding -= 1;
                    if a != x {
                        self.fail(a, &r, status);
                    }
                }
            }
        }
    }
}
