//! The ni side: one rank under `nirun`, driving libni. Rank 0 measures and prints `NIB`
//! lines; the others obey its control messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ni::{MessageQueue, MqAddr, MqOutcome, Ni, Op, ReduceOp, Region, Request};
use ni_abi::fastpath::{mqcw, op};

use super::driver::{cmd, Ctl, Laps, Link, R};
use super::waits;

/// Tags above anything the patterns use.
const TAG_CTL: u64 = 0xC7C7_0000_0000_0000;
const TAG_DATA: u64 = 1;
const TAG_BACK: u64 = 2;
const TAG_ACK: u64 = 3;
const TAG_BARRIER_IN: u64 = 0xBA55_0000_0000_0001;
const TAG_BARRIER_OUT: u64 = 0xBA55_0000_0000_0002;
/// Slots of each rank's message queue.
const MQ_LIMIT: u64 = 4096;
/// Free slots a queue keeps between iterations of any pattern: the largest MQ window + 1
/// (a queue left nearly full by one point must still take the next point's first window).
const MQ_ROOM: u64 = 1024;
/// The active-message handler every rank registers: it counts what it ran for.
const AM_HANDLER: u64 = 1;

fn e(x: ni::Error) -> String {
    x.to_string()
}

pub struct NiLink {
    ni: Ni,
    /// Data buffer; allocated first on every rank, so its key is the same everywhere.
    buf: Region,
    ctl: Region,
    mq: MessageQueue,
    mq_src: Region,
    /// Point-to-point receives' buffer: sends go from `buf`, as the MPI programs' (and OSU's)
    /// go from one buffer and receive into another.
    recv: Region,
    /// Collectives' receive buffer (allocated last, only when collectives run).
    rbuf: Option<Region>,
    ops: Vec<Op>,
    /// Their results (`Ni::wait_all`), kept to reuse its room.
    results: Vec<ni::Result<ni::Done>>,
    /// Active messages this rank's handler ran for, and those it was sent so far (the
    /// handler may run for one before its pattern starts: it counts from this, not from
    /// what it finds).
    ams: Arc<AtomicU64>,
    ams_due: u64,
}

impl NiLink {
    /// `collectives`: the collectives' receive buffer's size, if any run.
    pub fn new(max_bytes: usize, collectives: Option<usize>) -> R<NiLink> {
        let ni = Ni::attach().map_err(e)?;
        let buf = ni.alloc(max_bytes.max(4096)).map_err(e)?;
        let recv = ni.alloc(max_bytes.max(4096)).map_err(e)?;
        let ctl = ni.alloc(4096).map_err(e)?;
        let mq = ni.mq_create(MQ_LIMIT, 0).map_err(e)?;
        let mq_src = ni.alloc(4096).map_err(e)?;
        let rbuf = match collectives {
            Some(bytes) => Some(ni.alloc(bytes.max(4096)).map_err(e)?),
            None => None,
        };
        let ams = Arc::new(AtomicU64::new(0));
        let count = ams.clone();
        ni.am_register(AM_HANDLER, move |_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        // Every rank's regions (and handler) exist before anyone uses them.
        ni.barrier().map_err(e)?;
        Ok(NiLink {
            ni,
            buf,
            recv,
            ctl,
            mq,
            mq_src,
            rbuf,
            ops: Vec::new(),
            results: Vec::new(),
            ams,
            ams_due: 0,
        })
    }

    pub fn size(&self) -> u32 {
        self.ni.size()
    }

    fn mq_addr(&self) -> MqAddr {
        // Every rank created its queue at the same point: same key.
        self.mq.addr()
    }

    fn wait_all(&mut self) -> R<()> {
        self.ni.wait_all(&mut self.ops, &mut self.results);
        for r in self.results.drain(..) {
            r.map_err(e)?;
        }
        Ok(())
    }

    fn barrier(&self) -> R<()> {
        let p = self.ni.size();
        if self.ni.rank() == 0 {
            for r in 1..p {
                self.ni
                    .recv(Some(r), &self.ctl, 0..0, TAG_BARRIER_IN, u64::MAX)
                    .map_err(e)?;
            }
            for r in 1..p {
                self.ni
                    .send(r, &self.ctl, 0..0, TAG_BARRIER_OUT)
                    .map_err(e)?;
            }
        } else {
            self.ni
                .send(0, &self.ctl, 0..0, TAG_BARRIER_IN)
                .map_err(e)?;
            self.ni
                .recv(Some(0), &self.ctl, 0..0, TAG_BARRIER_OUT, u64::MAX)
                .map_err(e)?;
        }
        Ok(())
    }

    /// Take `count` messages from our queue, waiting for them.
    fn mq_take(&mut self, count: u64) -> R<()> {
        let mut got = 0;
        let mut msgs = [[0u8; 64]; 16];
        while got < count {
            got += waits::mq_take(&self.ni, &mut self.mq, &mut msgs) as u64;
        }
        Ok(())
    }

    /// Restart the queue at slot 1 when fewer than `MQ_ROOM` slots are left (callers only do
    /// so when nothing is in flight to us).
    fn mq_reset_if_full(&mut self) {
        let tail = mqcw::tail(self.mq.mqcw());
        if tail + MQ_ROOM >= MQ_LIMIT {
            self.mq.swap(mqcw::make(false, 1, MQ_LIMIT, 0));
            self.mq.set_head(1);
        }
    }

    /// Wait until the handler has run for the next active message sent to this rank.
    fn am_wait(&mut self) -> R<()> {
        self.ams_due += 1;
        waits::am_wait(&self.ni, &self.ams, self.ams_due).map_err(e)
    }

    fn mq_send(&self, dest: u32) -> R<()> {
        let msg = [0x5Au8; 64];
        match self.ni.mq_send(dest, self.mq_addr(), &msg).map_err(e)? {
            MqOutcome::Accepted { .. } => Ok(()),
            MqOutcome::Rejected => Err("message queue full (FULL_SR)".into()),
        }
    }

    fn raw(&self, opcode: u8, dest: u32, len: u64) -> R<Op> {
        self.ni
            .submit(Request {
                opcode,
                rank: dest,
                addr: if opcode == op::MQ_SEND {
                    self.mq_src.iova()
                } else {
                    self.buf.iova()
                },
                len,
                key: if opcode == op::MQ_SEND {
                    self.mq_addr().key
                } else {
                    self.buf.key()
                },
                tag: 0,
                ..Default::default()
            })
            .map_err(e)
    }
}

/// Spin for 2 us, then yield (what libni's own wait does before it blocks).
impl Link for NiLink {
    fn rank(&self) -> u32 {
        self.ni.rank()
    }

    fn ctl_send(&mut self, c: Ctl) -> R<()> {
        self.ctl.write_at(0, &c.encode());
        for r in 1..self.ni.size() {
            self.ni
                .send(r, &self.ctl, 0..Ctl::BYTES, TAG_CTL)
                .map_err(e)?;
        }
        Ok(())
    }

    fn ctl_recv(&mut self) -> R<Ctl> {
        self.ni
            .recv(Some(0), &self.ctl, 0..Ctl::BYTES, TAG_CTL, u64::MAX)
            .map_err(e)?;
        let mut b = [0u8; Ctl::BYTES];
        self.ctl.read_at(0, &mut b);
        Ok(Ctl::decode(&b))
    }

    fn run(&mut self, c: &Ctl, mut iters: Option<&mut Vec<f64>>) -> R<()> {
        let me = self.ni.rank();
        let p = self.ni.size();
        let size = c.size as usize;
        let ni = &self.ni;
        match c.cmd {
            cmd::PINGPONG => {
                let mut laps = Laps::start(iters.as_deref_mut(), c.n);
                for _ in 0..c.n {
                    if me == 0 {
                        let back = ni
                            .irecv(Some(1), &self.recv, 0..size, TAG_BACK, u64::MAX)
                            .map_err(e)?;
                        ni.send(1, &self.buf, 0..size, TAG_DATA).map_err(e)?;
                        ni.wait(back).map_err(e)?;
                    } else if me == 1 {
                        ni.recv(Some(0), &self.recv, 0..size, TAG_DATA, u64::MAX)
                            .map_err(e)?;
                        ni.send(0, &self.buf, 0..size, TAG_BACK).map_err(e)?;
                    }
                    laps.lap();
                }
                laps.finish();
            }
            cmd::STREAM | cmd::MSGRATE => {
                let (sender, peer) = if c.cmd == cmd::STREAM {
                    match me {
                        0 => (true, 1),
                        1 => (false, 0),
                        _ => return Ok(()),
                    }
                } else {
                    let half = p / 2;
                    if me >= 2 * half {
                        return Ok(());
                    }
                    (me < half, if me < half { me + half } else { me - half })
                };
                if c.cmd == cmd::MSGRATE {
                    self.barrier()?;
                }
                for _ in 0..c.n {
                    if sender {
                        for _ in 0..c.window {
                            let o = self
                                .ni
                                .isend(peer, &self.buf, 0..size, TAG_DATA)
                                .map_err(e)?;
                            self.ops.push(o);
                        }
                        self.wait_all()?;
                        self.ni
                            .recv(Some(peer), &self.ctl, 0..0, TAG_ACK, u64::MAX)
                            .map_err(e)?;
                    } else {
                        for _ in 0..c.window {
                            let o = self
                                .ni
                                .irecv(Some(peer), &self.recv, 0..size, TAG_DATA, u64::MAX)
                                .map_err(e)?;
                            self.ops.push(o);
                        }
                        self.wait_all()?;
                        self.ni.send(peer, &self.ctl, 0..0, TAG_ACK).map_err(e)?;
                    }
                }
                if c.cmd == cmd::MSGRATE {
                    self.barrier()?;
                }
            }
            cmd::MQ_PINGPONG => {
                let mut laps = Laps::start(iters.as_deref_mut(), c.n);
                for _ in 0..c.n {
                    if me == 0 {
                        self.mq_send(1)?;
                        self.mq_take(1)?;
                        self.mq_reset_if_full();
                    } else if me == 1 {
                        self.mq_take(1)?;
                        self.mq_reset_if_full();
                        self.mq_send(0)?;
                    }
                    laps.lap();
                }
                laps.finish();
            }
            cmd::AM_PINGPONG => {
                let msg = [0xA7u8; 64];
                let mut laps = Laps::start(iters.as_deref_mut(), c.n);
                for _ in 0..c.n {
                    if me == 0 {
                        self.ni.am_send(1, AM_HANDLER, &msg).map_err(e)?;
                        self.am_wait()?;
                    } else if me == 1 {
                        self.am_wait()?;
                        self.ni.am_send(0, AM_HANDLER, &msg).map_err(e)?;
                    }
                    laps.lap();
                }
                laps.finish();
            }
            cmd::MQ_STREAM => {
                if c.window >= MQ_ROOM {
                    return Err(format!("MQ window {} exceeds {}", c.window, MQ_ROOM - 1));
                }
                for _ in 0..c.n {
                    if me == 0 && self.ni.direct() {
                        // Member to member each SEND is done when `mq_send` returns.
                        for _ in 0..c.window {
                            self.mq_send(1)?;
                        }
                        self.ni
                            .recv(Some(1), &self.ctl, 0..0, TAG_ACK, u64::MAX)
                            .map_err(e)?;
                    } else if me == 0 {
                        // Through the fabric: `window` requests in flight at once.
                        for _ in 0..c.window {
                            let o = self.raw(op::MQ_SEND, 1, 64)?;
                            self.ops.push(o);
                        }
                        self.wait_all()?;
                        self.ni
                            .recv(Some(1), &self.ctl, 0..0, TAG_ACK, u64::MAX)
                            .map_err(e)?;
                    } else if me == 1 {
                        self.mq_take(c.window)?;
                        self.mq_reset_if_full();
                        self.ni.send(0, &self.ctl, 0..0, TAG_ACK).map_err(e)?;
                    }
                }
            }
            cmd::PUT | cmd::GET => {
                if me == 0 {
                    let key = self.buf.key();
                    let mut laps = Laps::start(iters, c.n);
                    for _ in 0..c.n {
                        if c.cmd == cmd::PUT {
                            ni.put(1, &self.buf, 0..size, key, 0).map_err(e)?;
                        } else {
                            ni.get(1, &self.buf, 0..size, key, 0).map_err(e)?;
                        }
                        laps.lap();
                    }
                    laps.finish();
                }
            }
            cmd::PUT_STREAM | cmd::GET_STREAM => {
                if me == 0 {
                    let key = self.buf.key();
                    for _ in 0..c.n {
                        for _ in 0..c.window {
                            let o = if c.cmd == cmd::PUT_STREAM {
                                self.ni.iput(1, &self.buf, 0..size, key, 0)
                            } else {
                                self.ni.iget(1, &self.buf, 0..size, key, 0)
                            };
                            self.ops.push(o.map_err(e)?);
                        }
                        self.wait_all()?;
                    }
                }
            }
            cmd::BARRIER
            | cmd::BCAST
            | cmd::ALLREDUCE_I64
            | cmd::ALLREDUCE_F64
            | cmd::REDUCE_F64
            | cmd::SCAN_F64
            | cmd::ALLGATHER => {
                let rbuf = self.rbuf.as_ref().ok_or("no collective buffer")?;
                for _ in 0..c.n {
                    match c.cmd {
                        cmd::BARRIER => ni.barrier(),
                        cmd::BCAST => ni.broadcast::<i64>(0, &self.buf, 0, size),
                        cmd::ALLREDUCE_I64 => {
                            ni.allreduce::<i64>(ReduceOp::Sum, &self.buf, 0, rbuf, 0, size)
                        }
                        cmd::ALLREDUCE_F64 => {
                            ni.allreduce::<f64>(ReduceOp::Sum, &self.buf, 0, rbuf, 0, size)
                        }
                        cmd::REDUCE_F64 => {
                            ni.reduce::<f64>(0, ReduceOp::Sum, &self.buf, 0, rbuf, 0, size)
                        }
                        cmd::SCAN_F64 => {
                            ni.scan::<f64>(ReduceOp::Sum, true, &self.buf, 0, rbuf, 0, size)
                        }
                        _ => ni.allgather::<u64>(&self.buf, 0, rbuf, 0, size),
                    }
                    .map_err(e)?;
                }
                // The batch ends when the slowest rank is done.
                ni.barrier().map_err(e)?;
            }
            other => return Err(format!("unknown pattern {other}")),
        }
        Ok(())
    }
}
