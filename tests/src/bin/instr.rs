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

use ni::{Ni, Region};

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
}

fn pattern() -> Pattern {
    match std::env::var("NIB_INSTR_PATTERN").as_deref() {
        Ok("send") => Pattern::Send,
        Ok("recv") => Pattern::Recv,
        Ok("posted") => Pattern::Posted,
        Ok("pingpong") | Err(_) => Pattern::PingPong,
        Ok(other) => panic!("NIB_INSTR_PATTERN={other}: pingpong, send, recv or posted"),
    }
}

/// One window of `msgrate`: the sender's isends and waits, then the receiver's answer.
fn window(ni: &Ni, buf: &Region, size: usize, sender: bool, go: bool, ops: &mut Vec<ni::Op>) {
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
    for o in ops.drain(..) {
        ni.wait(o).expect("wait");
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
pub fn nib_pingpong(ni: &Ni, buf: &Region, iters: u64, size: usize) {
    let p = pattern();
    if p != Pattern::PingPong {
        let mut ops = Vec::with_capacity(WINDOW);
        let sender = (ni.rank() == 0) == (p == Pattern::Send);
        for _ in 0..iters {
            window(ni, buf, size, sender, p == Pattern::Posted, &mut ops);
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
    ni.barrier().expect("barrier");
    nib_warmup(&ni, &buf, size);
    nib_pingpong(&ni, &buf, iters, size);
    ni.barrier().expect("barrier");
}

#[inline(never)]
fn nib_warmup(ni: &Ni, buf: &Region, size: usize) {
    nib_pingpong(ni, buf, 200, size);
}
