//! The METRO MLINK register block (MIT METRO Ch. 11): the node's side of its links.
//!
//! §11.2 lets the processor configure each MLINK, launch or abort operations and watch their
//! status through 32-bit registers. A launch is checked and its header (and, for WRITE and
//! ROP, its data) taken from SRAM here, so what the checksums cover is what travels; the
//! fabric's poller carries the operation to the target (device/src/fabric/mlink.rs) and
//! reports back through [`Mlink::finish`]. The receive side (the exposed window, the boot
//! hold, the incoming ROP queue) is state the fabric reads and changes at the target.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ni_abi::lanai::SRAM_SIZE;
use ni_abi::mlink::{
    self, boot, command, config, link as reg, reason, rx, status, LINKS, LINK_STRIDE, MAX_LEN,
    QUEUE_DATA_MAX, QUEUE_ENTRIES,
};

use crate::counters::Counters;
use crate::sram::Sram;

/// One link's launch registers and the state of its last operation.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Link {
    config: u32,
    target: u32,
    remote: u32,
    local: u32,
    len: u32,
    handler: u32,
    status: u32,
    checksums: u32,
    completed: u32,
    /// Numbers launches, so an answer to an aborted one is recognised and dropped.
    seq: u64,
}

/// An operation on its way: everything the target needs, taken at launch.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Launch {
    pub link: usize,
    pub op: u32,
    pub target: u32,
    pub remote: u32,
    pub local: u32,
    pub len: u32,
    pub handler: u32,
    /// WRITE and ROP: the words from local SRAM.
    pub data: Vec<u8>,
    /// An injected fault: the header (or data) checksum on the wire does not match.
    pub bad_header: bool,
    pub bad_data: bool,
    seq: u64,
    epoch: u64,
}

impl Launch {
    /// An operation another host's MLINK launched, as its host carried it here
    /// (`fabric/doors.rs`): what the target needs; the source's link state stays there.
    #[allow(clippy::too_many_arguments)]
    pub fn across(
        op: u32,
        target: u32,
        remote: u32,
        len: u32,
        handler: u32,
        data: Vec<u8>,
        bad_header: bool,
        bad_data: bool,
    ) -> Launch {
        Launch {
            link: 0,
            op,
            target,
            remote,
            local: 0,
            len,
            handler,
            data,
            bad_header,
            bad_data,
            seq: 0,
            epoch: 0,
        }
    }

    pub fn bytes(&self) -> u64 {
        8 * self.len as u64
    }
}

/// A ROP waiting in the register-read queue.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueuedRop {
    pub handler: u32,
    pub source: u32,
    pub data: Vec<u8>,
}

/// How the target answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    /// `status::ACK`, `NACK` or `REFUSED`.
    pub state: u32,
    pub reason: u32,
    /// The two mlink-status bytes.
    pub bytes: [u8; 2],
    /// READ: the checksum of the data that came back.
    pub data_checksum: Option<u16>,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Mlink {
    links: [Link; LINKS as usize],
    expose_base: u32,
    expose_size: u32,
    boot: u32,
    queue: VecDeque<QueuedRop>,
    queue_drops: u32,
    /// Faults `ni-ctl mlink fault` asked for: the next launches' header / data checksums.
    pub header_faults: u32,
    pub data_faults: u32,
    epoch: u64,
    /// An operation ended on a link with CONFIG.INTERRUPT: MSI-X vector `MLINK` is due.
    interrupt: bool,
    outbox: VecDeque<Launch>,
    /// Launches or aborts wait: the fabric's poller looks.
    #[serde(skip)]
    pub pending: Arc<AtomicBool>,
}

impl Default for Mlink {
    fn default() -> Self {
        Self::new()
    }
}

impl Mlink {
    pub fn new() -> Mlink {
        Mlink {
            links: Default::default(),
            expose_base: 0,
            expose_size: 0,
            boot: 0,
            queue: VecDeque::new(),
            queue_drops: 0,
            header_faults: 0,
            data_faults: 0,
            epoch: 0,
            interrupt: false,
            outbox: VecDeque::new(),
            pending: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Power-on state: operations in flight are forgotten, the queue emptied. Injected
    /// faults are the administrator's and stay.
    pub fn reset(&mut self) {
        let (epoch, pending) = (self.epoch + 1, self.pending.clone());
        let (h, d) = (self.header_faults, self.data_faults);
        *self = Mlink::new();
        self.epoch = epoch;
        self.pending = pending;
        self.header_faults = h;
        self.data_faults = d;
    }

    pub fn read(&self, offset: u64) -> Option<u32> {
        if offset < LINK_STRIDE * LINKS as u64 {
            let l = &self.links[(offset / LINK_STRIDE) as usize];
            return Some(match offset % LINK_STRIDE {
                reg::CONFIG => l.config,
                reg::TARGET => l.target,
                reg::REMOTE => l.remote,
                reg::LOCAL => l.local,
                reg::LEN => l.len,
                reg::HANDLER => l.handler,
                reg::COMMAND => 0,
                reg::STATUS => l.status,
                reg::CHECKSUMS => l.checksums,
                reg::COMPLETED => l.completed,
                _ => return None,
            });
        }
        let head = self.queue.front();
        Some(match offset {
            rx::EXPOSE_BASE => self.expose_base,
            rx::EXPOSE_SIZE => self.expose_size,
            rx::BOOT => self.boot,
            rx::QUEUE_COUNT => self.queue.len() as u32,
            rx::QUEUE_HANDLER => head.map_or(0, |q| q.handler),
            rx::QUEUE_SOURCE => head.map_or(0, |q| q.source),
            rx::QUEUE_LEN => head.map_or(0, |q| (q.data.len() / 8) as u32),
            rx::QUEUE_POP => 0,
            rx::QUEUE_DROPS => self.queue_drops,
            o if (rx::QUEUE_DATA..rx::QUEUE_DATA + 8 * QUEUE_DATA_MAX as u64).contains(&o) => {
                let at = (o - rx::QUEUE_DATA) as usize;
                let mut b = [0u8; 4];
                if let Some(q) = head {
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = q.data.get(at + i).copied().unwrap_or(0);
                    }
                }
                u32::from_le_bytes(b)
            }
            _ => return None,
        })
    }

    /// A 32-bit write. Returns `Some(true)` when the poller should look (a launch, an
    /// abort, a receiver that stopped pausing), `None` when nothing is at `offset`.
    pub fn write(
        &mut self,
        offset: u64,
        v: u32,
        sram: &Sram,
        counters: &mut Counters,
    ) -> Option<bool> {
        if offset < LINK_STRIDE * LINKS as u64 {
            let i = (offset / LINK_STRIDE) as usize;
            let l = &mut self.links[i];
            match offset % LINK_STRIDE {
                reg::CONFIG => {
                    let was = l.config;
                    l.config = v & config::ALL;
                    return Some(was & config::RX_PAUSE != 0 && v & config::RX_PAUSE == 0);
                }
                reg::TARGET => l.target = v,
                reg::REMOTE => l.remote = v,
                reg::LOCAL => l.local = v,
                reg::LEN => l.len = v,
                reg::HANDLER => l.handler = v,
                reg::COMMAND if v & command::ABORT != 0 => return Some(self.abort(i, counters)),
                reg::COMMAND => return Some(self.launch(i, v, sram, counters)),
                _ => return None,
            }
            return Some(false);
        }
        match offset {
            rx::EXPOSE_BASE => self.expose_base = v,
            rx::EXPOSE_SIZE => self.expose_size = v,
            rx::BOOT => {
                self.boot = if v & boot::HOLD != 0 { boot::HOLD } else { 0 };
            }
            rx::QUEUE_POP => {
                self.queue.pop_front();
            }
            _ => return None,
        }
        Some(false)
    }

    fn launch(&mut self, i: usize, cmd: u32, sram: &Sram, counters: &mut Counters) -> bool {
        if self.links[i].status & status::STATE_MASK == status::BUSY {
            counters.mlink_refused += 1;
            return false;
        }
        let op = cmd & command::OP_MASK;
        let l = &self.links[i];
        let moves_data = matches!(op, command::READ | command::WRITE | command::ROP);
        let refused =
            if !(command::READ..=command::ROP).contains(&op) || cmd & !command::OP_MASK != 0 {
                Some(reason::BAD_COMMAND)
            } else if moves_data && !(1..=MAX_LEN).contains(&l.len) {
                Some(reason::LENGTH)
            } else if (moves_data
                && (!l.local.is_multiple_of(8) || l.local as u64 + 8 * l.len as u64 > SRAM_SIZE))
                || !l.remote.is_multiple_of(8)
                || l.remote > 0xFF_FFFF
            {
                Some(reason::ADDRESS)
            } else {
                None
            };
        if let Some(r) = refused {
            counters.mlink_refused += 1;
            self.end(i, status::REFUSED, r, [0, 0]);
            return false;
        }
        let len = if moves_data { l.len } else { 0 };
        let mut data = Vec::new();
        if matches!(op, command::WRITE | command::ROP) {
            data = vec![0u8; 8 * len as usize];
            if sram.read(l.local as u64, &mut data).is_err() {
                counters.mlink_refused += 1;
                self.end(i, status::REFUSED, reason::ADDRESS, [0, 0]);
                return false;
            }
        }
        let bad_header = self.header_faults > 0;
        if bad_header {
            self.header_faults -= 1;
        }
        let bad_data = moves_data && self.data_faults > 0;
        if bad_data {
            self.data_faults -= 1;
        }
        let l = &mut self.links[i];
        l.seq += 1;
        let header = mlink::checksum(&mlink::header(op, len, l.remote));
        let data_ck = if data.is_empty() {
            0
        } else {
            mlink::checksum(&data)
        };
        l.checksums = header as u32 | (data_ck as u32) << 16;
        l.status = status::BUSY;
        self.outbox.push_back(Launch {
            link: i,
            op,
            target: l.target,
            remote: l.remote,
            local: l.local,
            len,
            handler: l.handler,
            data,
            bad_header,
            bad_data,
            seq: l.seq,
            epoch: self.epoch,
        });
        self.pending.store(true, Ordering::Release);
        true
    }

    fn abort(&mut self, i: usize, counters: &mut Counters) -> bool {
        let l = &mut self.links[i];
        if l.status & status::STATE_MASK != status::BUSY {
            counters.mlink_abort_idle += 1;
            l.status = (l.status & !(0xF << status::REASON_SHIFT))
                | reason::NOTHING_TO_ABORT << status::REASON_SHIFT;
            return false;
        }
        // The answer to this launch, should one still come, is dropped (its seq is stale).
        l.seq += 1;
        counters.mlink_aborts += 1;
        self.outbox.retain(|x| x.link != i);
        self.end(i, status::ABORTED, reason::NONE, [0, 0]);
        true
    }

    fn end(&mut self, i: usize, state: u32, why: u32, bytes: [u8; 2]) {
        let l = &mut self.links[i];
        self.interrupt |= l.config & config::INTERRUPT != 0;
        l.status = state
            | why << status::REASON_SHIFT
            | (bytes[0] as u32) << status::BYTES_SHIFT
            | (bytes[1] as u32) << (status::BYTES_SHIFT + 8);
        l.completed = l.completed.wrapping_add(1);
    }

    /// Launches not yet taken by the fabric, oldest first.
    pub fn take(&mut self) -> Vec<Launch> {
        self.outbox.drain(..).collect()
    }

    /// Whether `x` is still the launch its link waits for (not aborted, no reset since).
    pub fn current(&self, x: &Launch) -> bool {
        x.epoch == self.epoch
            && self.links[x.link].seq == x.seq
            && self.links[x.link].status & status::STATE_MASK == status::BUSY
    }

    /// The target's answer to `x`. Returns whether the link asked for an interrupt.
    pub fn finish(&mut self, x: &Launch, reply: Reply) -> bool {
        if !self.current(x) {
            return false;
        }
        if let Some(ck) = reply.data_checksum {
            let l = &mut self.links[x.link];
            l.checksums = (l.checksums & 0xFFFF) | (ck as u32) << 16;
        }
        self.end(x.link, reply.state, reply.reason, reply.bytes);
        self.take_interrupt()
    }

    /// Whether an operation that asked for the completion interrupt ended since last asked
    /// (a refusal or an abort ends one at the register write).
    pub fn take_interrupt(&mut self) -> bool {
        std::mem::take(&mut self.interrupt)
    }

    // ---- the receive side, as the fabric sees it at the target ----------------------

    /// The target's link 0 refuses connections for now.
    pub fn paused(&self) -> bool {
        self.links[0].config & config::RX_PAUSE != 0
    }

    pub fn held(&self) -> bool {
        self.boot & boot::HOLD != 0
    }

    /// Whether `[addr, addr + len)` lies in the exposed window.
    pub fn exposed(&self, addr: u64, len: u64) -> bool {
        let (b, s) = (self.expose_base as u64, self.expose_size as u64);
        s != 0 && addr >= b && addr + len <= b + s
    }

    pub fn exposes(&self) -> bool {
        self.expose_size != 0
    }

    pub fn queue_full(&self) -> bool {
        self.queue.len() >= QUEUE_ENTRIES as usize
    }

    /// Queue a ROP for the registers; `false` (and a drop counted) when full.
    pub fn enqueue(&mut self, rop: QueuedRop) -> bool {
        if self.queue_full() {
            self.queue_drops = self.queue_drops.wrapping_add(1);
            return false;
        }
        self.queue.push_back(rop);
        true
    }

    /// A peer's RESET released this node.
    pub fn release(&mut self, by: u32) {
        self.boot = boot::RELEASED | by << boot::RELEASER_SHIFT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sram() -> Sram {
        Sram::new().unwrap()
    }

    fn set(m: &mut Mlink, s: &Sram, c: &mut Counters, l: u64, off: u64, v: u32) -> bool {
        m.write(l * LINK_STRIDE + off, v, s, c).unwrap()
    }

    #[test]
    fn launch_checks_and_takes_the_data_it_checksums() {
        let (s, mut c) = (sram(), Counters::default());
        let mut m = Mlink::new();
        s.write(0x1000, &[7u8; 16]).unwrap();
        set(&mut m, &s, &mut c, 0, reg::LEN, 0);
        assert!(!set(&mut m, &s, &mut c, 0, reg::COMMAND, command::WRITE));
        assert_eq!(
            m.read(reg::STATUS).unwrap(),
            status::REFUSED | reason::LENGTH << 8
        );
        set(&mut m, &s, &mut c, 0, reg::LEN, 2);
        set(&mut m, &s, &mut c, 0, reg::LOCAL, 0x1000);
        set(&mut m, &s, &mut c, 0, reg::REMOTE, 0x20);
        assert!(set(&mut m, &s, &mut c, 0, reg::COMMAND, command::WRITE));
        assert_eq!(m.read(reg::STATUS).unwrap(), status::BUSY);
        let ck = m.read(reg::CHECKSUMS).unwrap();
        assert_eq!(
            ck & 0xFFFF,
            mlink::checksum(&mlink::header(command::WRITE, 2, 0x20)) as u32
        );
        assert_eq!(ck >> 16, mlink::checksum(&[7u8; 16]) as u32);
        // BUSY: a second launch is ignored.
        assert!(!set(&mut m, &s, &mut c, 0, reg::COMMAND, command::NOOP));
        assert_eq!(c.mlink_refused, 2);
        let x = m.take().pop().unwrap();
        assert_eq!(x.data, vec![7u8; 16]);
        let irq = m.finish(
            &x,
            Reply {
                state: status::ACK,
                reason: 0,
                bytes: [1, 0],
                data_checksum: None,
            },
        );
        assert!(!irq);
        assert_eq!(m.read(reg::STATUS).unwrap(), status::ACK | 1 << 16);
        assert_eq!(m.read(reg::COMPLETED).unwrap(), 2);
    }

    #[test]
    fn abort_drops_the_answer_and_idle_aborts_only_say_so() {
        let (s, mut c) = (sram(), Counters::default());
        let mut m = Mlink::new();
        set(&mut m, &s, &mut c, 1, reg::COMMAND, command::NOOP);
        let x = m.take().pop().unwrap();
        assert!(set(&mut m, &s, &mut c, 1, reg::COMMAND, command::ABORT));
        assert_eq!(m.read(LINK_STRIDE + reg::STATUS).unwrap(), status::ABORTED);
        assert!(!m.current(&x));
        m.finish(
            &x,
            Reply {
                state: status::ACK,
                reason: 0,
                bytes: [0, 0],
                data_checksum: None,
            },
        );
        assert_eq!(m.read(LINK_STRIDE + reg::STATUS).unwrap(), status::ABORTED);
        assert!(!set(&mut m, &s, &mut c, 1, reg::COMMAND, command::ABORT));
        assert_eq!(
            m.read(LINK_STRIDE + reg::STATUS).unwrap(),
            status::ABORTED | reason::NOTHING_TO_ABORT << 8
        );
        assert_eq!(c.mlink_abort_idle, 1);
    }

    #[test]
    fn the_queue_is_bounded_and_read_through_registers() {
        let mut m = Mlink::new();
        for i in 0..QUEUE_ENTRIES {
            assert!(m.enqueue(QueuedRop {
                handler: i,
                source: 1,
                data: (0..16u8).collect(),
            }));
        }
        assert!(!m.enqueue(QueuedRop {
            handler: 99,
            source: 1,
            data: vec![],
        }));
        assert_eq!(m.read(rx::QUEUE_DROPS), Some(1));
        assert_eq!(m.read(rx::QUEUE_COUNT), Some(QUEUE_ENTRIES));
        assert_eq!(m.read(rx::QUEUE_LEN), Some(2));
        assert_eq!(
            m.read(rx::QUEUE_DATA + 4),
            Some(u32::from_le_bytes([4, 5, 6, 7]))
        );
        let (s, mut c) = (sram(), Counters::default());
        m.write(rx::QUEUE_POP, 0, &s, &mut c);
        assert_eq!(m.read(rx::QUEUE_HANDLER), Some(1));
    }
}
