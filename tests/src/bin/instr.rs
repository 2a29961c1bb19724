//! `ni-instr ITERS SIZE`: a libni ping-pong of SIZE-byte messages between ranks 0 and 1 (as
//! `ni-bench latency` runs it: rank 0 posts the receive of the answer, sends, waits), for
//! `tests/bench/instr.sh`, which runs rank 0 under `valgrind --tool=callgrind` collecting only
//! inside [`nib_pingpong`] and takes the difference of two ITERS to get the instructions one
//! round trip costs rank 0. 200 round trips before it warm everything up.
//!
//! `NIB_INSTR_PATTERN=send|recv`: instead, rank 0 streams (`send`) or takes (`recv`) windows
//! of [`WINDOW`] messages as `ni-bench msgrate` does (isends, wait for all, a 0-byte answer
//! closes the window); an iteration is one window. `posted`: rank 0 receives, but posts its
//! receives before rank 1 sends (rank 1 waits for a 0-byte go-ahead), as a receiver does that
//! shares its core with the sender.
//!
//! `am`, `mq`: a ping-pong of 64-byte active messages (MLINK ROP: the handler counts, the
//! waiter polls the count with `progress`, as `ni-bench am` does), or of T3E SENDs into the
//! peer's message queue (the waiter polls its MQCW, as `ni-bench mq` does), pacing each
//! poll with `Ni::relax`. SIZE is ignored (64).
//!
//! `allreduce`: both ranks sum SIZE / 8 f64 (`Ni::allreduce`, separate send and receive
//! regions, as `ni-bench allreduce` runs it); an iteration is one allreduce. `reduce`, `scan`,
//! `bcast`: the same with `Ni::reduce` (root 0: rank 0 takes), `Ni::scan` (inclusive: rank 0
//! sends) and `Ni::broadcast` (root 0: rank 0 sends). `NIB_INSTR_ROOT=1` makes rank 1 the
//! root of a reduce or broadcast: rank 0 then sends a reduce's vector or takes a broadcast.
//!
//! `poll`: an iteration is one `Ni::test` of a receive whose message has not come (rank 1
//! sends it once rank 0 is done looking): what a look that finds nothing costs.

#[path = "../bench/waits.rs"]
mod waits;

use ni::{MessageQueue, Ni, Region};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const TAG_DATA: u64 = 1;
const TAG_BACK: u64 = 2;

pub const WINDOW: usize = 64;
const TAG_ACK: u64 = 3;
const TAG_GO: u64 = 4;

#[derive(Clone, Copy, PartialEq)]
enum Pattern {
    PingPong,
    /// Rank 0 sends the windows.
    Send,
    /// Rank 0 receives them.
    Recv,
    /// Rank 0 receives them into receives it posted before rank 1 sends.
    Posted,
    /// Active messages, each way.
    Am,
    /// T3E SENDs into the peer's queue, each way.
    Mq,
    /// Allreduces of f64 sums.
    Allreduce,
    /// Reduces of f64 sums to rank 0.
    Reduce,
    /// Inclusive scans of f64 sums.
    Scan,
    /// Broadcasts of f64 from rank 0.
    Bcast,
    /// Looks at a receive whose message has not come.
    Poll,
}

const AM_HANDLER: u64 = 7;
/// Slots of each rank's queue; it restarts at slot 1 well before it fills.
const MQ_LIMIT: u64 = 4096;

/// What the `am` and `mq` patterns wait on: the handler's count, or the queue; where
/// `allreduce` puts its result.
pub struct Peer {
    ams: Arc<AtomicU64>,
    ams_due: u64,
    mq: MessageQueue,
    rbuf: Region,
}

impl Peer {
    fn new(ni: &Ni, size: usize) -> Peer {
        let ams = Arc::new(AtomicU64::new(0));
        let count = ams.clone();
        ni.am_register(AM_HANDLER, move |_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        Peer {
            ams,
            ams_due: 0,
            mq: ni.mq_create(MQ_LIMIT, 0).expect("mq_create"),
            rbuf: ni.alloc(size.max(4096)).expect("alloc"),
        }
    }

    fn am_wait(&mut self, ni: &Ni) {
        self.ams_due += 1;
        waits::am_wait(ni, &self.ams, self.ams_due).expect("progress");
    }

    fn mq_take(&mut self, ni: &Ni) {
        let mut msg = [[0u8; 64]; 1];
        waits::mq_take(ni, &mut self.mq, &mut msg);
        // Restart at slot 1 while nothing is in flight to us (the peer waits for our SEND).
        if ni_abi::fastpath::mqcw::tail(self.mq.mqcw()) + 16 >= MQ_LIMIT {
            self.mq
                .swap(ni_abi::fastpath::mqcw::make(false, 1, MQ_LIMIT, 0));
            self.mq.set_head(1);
        }
    }

    fn mq_send(&self, ni: &Ni, dest: u32) {
        let out = ni
            .mq_send(dest, self.mq.addr(), &[0x5A; 64])
            .expect("mq_send");
        assert!(matches!(out, ni::MqOutcome::Accepted { .. }), "queue full");
    }
}

/// The root of a reduce or broadcast (`NIB_INSTR_ROOT`, 0 or 1).
fn instr_root() -> u32 {
    match std::env::var("NIB_INSTR_ROOT").as_deref() {
        Ok("1") => 1,
        Ok("0") | Err(_) => 0,
        Ok(other) => panic!("NIB_INSTR_ROOT={other}: 0 or 1"),
    }
}

fn pattern() -> Pattern {
    match std::env::var("NIB_INSTR_PATTERN").as_deref() {
        Ok("send") => Pattern::Send,
        Ok("recv") => Pattern::Recv,
        Ok("posted") => Pattern::Posted,
        Ok("am") => Pattern::Am,
        Ok("mq") => Pattern::Mq,
        Ok("allreduce") => Pattern::Allreduce,
        Ok("reduce") => Pattern::Reduce,
        Ok("scan") => Pattern::Scan,
        Ok("bcast") => Pattern::Bcast,
        Ok("poll") => Pattern::Poll,
        Ok("pingpong") | Err(_) => Pattern::PingPong,
        Ok(other) => panic!(
            "NIB_INSTR_PATTERN={other}: pingpong, send, recv, posted, am, mq, allreduce, \
             reduce, scan, bcast or poll"
        ),
    }
}

/// One window of `msgrate`: the sender's isends and waits, then the receiver's answer.
fn window(
    ni: &Ni,
    buf: &Region,
    size: usize,
    sender: bool,
    go: bool,
    ops: &mut Vec<ni::Op>,
    out: &mut Vec<ni::Result<ni::Done>>,
) {
    let peer = 1 - ni.rank();
    if go && sender {
        ni.recv(Some(peer), buf, 0..0, TAG_GO, u64::MAX)
            .expect("go");
    }
    for _ in 0..WINDOW {
        ops.push(if sender {
            ni.isend(peer, buf, 0..size, TAG_DATA).expect("isend")
        } else {
            ni.irecv(Some(peer), buf, 0..size, TAG_DATA, u64::MAX)
                .expect("irecv")
        });
    }
    if go && !sender {
        ni.send(peer, buf, 0..0, TAG_GO).expect("go");
    }
    ni.wait_all(ops, out);
    for r in out.drain(..) {
        r.expect("wait");
    }
    if sender {
        ni.recv(Some(peer), buf, 0..0, TAG_ACK, u64::MAX)
            .expect("ack");
    } else {
        ni.send(peer, buf, 0..0, TAG_ACK).expect("ack");
    }
}

#[inline(never)]
#[no_mangle]
pub fn nib_pingpong(ni: &Ni, buf: &Region, peer: &mut Peer, iters: u64, size: usize) {
    let p = pattern();
    if p == Pattern::Poll {
        const TAG_POLLED: u64 = 5;
        if ni.rank() == 0 {
            let op = ni
                .irecv(Some(1), buf, 0..size, TAG_POLLED, u64::MAX)
                .expect("irecv");
            for _ in 0..iters {
                assert!(
                    ni.test(&op).expect("test").is_none(),
                    "the polled message came early"
                );
            }
            ni.send(1, buf, 0..0, TAG_GO).expect("go");
            ni.wait(op).expect("wait");
        } else if ni.rank() == 1 {
            ni.recv(Some(0), buf, 0..0, TAG_GO, u64::MAX).expect("go");
            ni.send(0, buf, 0..size, TAG_POLLED).expect("send");
        }
        return;
    }
    if matches!(
        p,
        Pattern::Allreduce | Pattern::Reduce | Pattern::Scan | Pattern::Bcast
    ) {
        let (sum, n, out) = (ni::ReduceOp::Sum, size / 8, &peer.rbuf);
        let root = instr_root();
        for _ in 0..iters {
            match p {
                Pattern::Allreduce => ni.allreduce::<f64>(sum, buf, 0, out, 0, n),
                Pattern::Reduce => ni.reduce::<f64>(root, sum, buf, 0, out, 0, n),
                Pattern::Scan => ni.scan::<f64>(sum, true, buf, 0, out, 0, n),
                _ => ni.broadcast::<f64>(root, buf, 0, n),
            }
            .expect("collective");
        }
        return;
    }
    if p == Pattern::Am || p == Pattern::Mq {
        let me = ni.rank();
        for _ in 0..iters {
            match (p, me) {
                (Pattern::Am, 0) => {
                    ni.am_send(1, AM_HANDLER, &[0xA7; 64]).expect("am_send");
                    peer.am_wait(ni);
                }
                (Pattern::Am, _) => {
                    peer.am_wait(ni);
                    ni.am_send(0, AM_HANDLER, &[0xA7; 64]).expect("am_send");
                }
                (_, 0) => {
                    peer.mq_send(ni, 1);
                    peer.mq_take(ni);
                }
                _ => {
                    peer.mq_take(ni);
                    peer.mq_send(ni, 0);
                }
            }
        }
        return;
    }
    if p != Pattern::PingPong {
        let mut ops = Vec::with_capacity(WINDOW);
        let mut out = Vec::with_capacity(WINDOW);
        let sender = (ni.rank() == 0) == (p == Pattern::Send);
        for _ in 0..iters {
            window(
                ni,
                buf,
                size,
                sender,
                p == Pattern::Posted,
                &mut ops,
                &mut out,
            );
        }
        return;
    }
    for _ in 0..iters {
        if ni.rank() == 0 {
            let back = ni
                .irecv(Some(1), buf, 0..size, TAG_BACK, u64::MAX)
                .expect("irecv");
            ni.send(1, buf, 0..size, TAG_DATA).expect("send");
            ni.wait(back).expect("wait");
        } else if ni.rank() == 1 {
            ni.recv(Some(0), buf, 0..size, TAG_DATA, u64::MAX)
                .expect("recv");
            ni.send(0, buf, 0..size, TAG_BACK).expect("send");
        }
    }
}

fn main() {
    let mut a = std::env::args().skip(1);
    let usage = "usage: ni-instr ITERS SIZE (under nirun -n 2)";
    let iters: u64 = a.next().and_then(|s| s.parse().ok()).expect(usage);
    let size: usize = a.next().and_then(|s| s.parse().ok()).expect(usage);
    let ni = Ni::attach().expect("attach");
    let buf = ni.alloc(size.max(4096)).expect("alloc");
    let mut peer = Peer::new(&ni, size);
    // Every rank's queue and handler exist before anyone sends.
    ni.barrier().expect("barrier");
    nib_warmup(&ni, &buf, &mut peer, size);
    nib_pingpong(&ni, &buf, &mut peer, iters, size);
    ni.barrier().expect("barrier");
}

#[inline(never)]
fn nib_warmup(ni: &Ni, buf: &Region, peer: &mut Peer, size: usize) {
    nib_pingpong(ni, buf, peer, 200, size);
}
