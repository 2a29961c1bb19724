//! The CM-5 NI register file (App. A) behind BAR2: user window and supervisor window.

pub mod bc;
pub mod com;
pub mod combine;
pub mod data;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ni_abi::cm5::{self, bad_address, cause, green, level};
use ni_abi::regs::{Kind, RegDef};

use crate::counters::Counters;
use crate::regfile::RegFile;

/// The model's CM-5 node clock for `ni_time` ("+1 per CPU clock", §6.5): a 40 MHz SPARC.
const CPU_HZ: u128 = 40_000_000;
/// Nanoseconds per `ni_time` tick.
const TICK_NS: u64 = (1_000_000_000 / CPU_HZ) as u64;

/// The time base of timer deadlines ([`Cm5::timer`]): nanoseconds since the first use.
pub fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Cm5 {
    #[serde(serialize_with = "crate::regfile::serialize_values")]
    #[serde(deserialize_with = "regs_serde::deserialize")]
    pub regs: RegFile,
    #[serde(with = "crate::handover::serde_with::array")]
    pub chunk_table: [u8; 64],
    #[serde(with = "crate::handover::serde_with::instant")]
    epoch: Instant,
    time: (u32, u64),
    /// The Data Network interfaces (`data.rs`).
    pub data: data::DataNet,
    /// The Control Network's register side (`com.rs`).
    pub com: com::Com,
    /// The broadcast interfaces, BC and SBC (`bc.rs`), indexed by [`bc::Which`].
    pub bc: [bc::Broadcast; 2],
    /// Colours (§5.5: 8 red, 4 orange, 2 yellow, 1 green) of a broadcast interrupt written
    /// to `ni_interrupt_send` and not yet delivered; 0: none.
    pub interrupt_send: u32,
    /// `router_done_complete` (DR status, §3.5.6): 0 from a network-done send until the
    /// fabric completes it.
    pub router_done: bool,
    /// Set when an access queued a message or freed receive room: the NI rings the fabric's
    /// doorbell, since only the poller moves messages between NIs.
    pub kick: bool,
    /// When `ni_time` next equals `ni_interrupt_now` with `timer_ie` set ([`monotonic_ns`];
    /// 0: never). The fabric's poller watches it and calls [`Cm5::timer_due`] (§6.5).
    #[serde(skip)]
    pub timer: Arc<AtomicU64>,
}

impl Default for Cm5 {
    fn default() -> Self {
        Self::new()
    }
}

/// The interrupt colours, in MSI-X vector order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Colour {
    Red,
    Orange,
    Yellow,
    Green,
}

impl Cm5 {
    pub fn new() -> Self {
        Cm5 {
            regs: RegFile::new(&cm5::REGS),
            chunk_table: [0; 64],
            epoch: Instant::now(),
            time: (0, 0),
            data: data::DataNet::new(Arc::new(AtomicBool::new(false))),
            com: com::Com::default(),
            bc: Default::default(),
            interrupt_send: 0,
            router_done: true,
            kick: false,
            timer: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The current `ni_time`.
    fn now_time(&self) -> u32 {
        self.time
            .0
            .wrapping_add((self.cycles() - self.time.1) as u32)
    }

    /// Set the timer's deadline from `ni_time`, `ni_interrupt_now` and `timer_ie`.
    fn rearm_timer(&mut self) {
        let ie = self.regs.get(cm5::NI_HODGEPODGE) as u32 & ni_abi::cm5::hodgepodge::TIMER_IE;
        if ie == 0 {
            self.timer.store(0, Ordering::Release);
            return;
        }
        let target = self.regs.get(cm5::NI_INTERRUPT_NOW) as u32;
        let ticks = target.wrapping_sub(self.now_time()) as u64;
        let at = monotonic_ns() + ticks * TICK_NS;
        self.timer.store(at.max(1), Ordering::Release);
    }

    /// The poller saw the deadline pass: `ni_time` reached `ni_interrupt_now` (§6.5). Raises
    /// the Orange `timer interrupt` and waits for the next equality, 2^32 ticks on.
    pub fn timer_due(&mut self) {
        let at = self.timer.load(Ordering::Acquire);
        if at == 0 || at > monotonic_ns() {
            return;
        }
        self.raise(cause::TIMER_INTERRUPT);
        self.timer
            .store(at + (1u64 << 32) * TICK_NS, Ordering::Release);
    }

    /// NI Reset (§6.10): the table's reset values are the handbook's (locks and abstains 1,
    /// levels 0, flush_complete and sync_global_complete 1, longest_dr_message 5,
    /// disable_bus_error 0), FIFOs empty. The fabric keeps its handle on `data.pending`.
    pub fn reset(&mut self) {
        let pending = self.data.pending.clone();
        let timer = self.timer.clone();
        // What the registers had queued for the fabric (messages, control events) goes too.
        *self = Cm5::new();
        self.data = data::DataNet::new(pending);
        timer.store(0, Ordering::Release);
        self.timer = timer;
    }

    /// The registers the Data Network reads, as an access through the `supervisor` window
    /// sees them.
    pub fn setup(&self, supervisor: bool) -> data::Setup {
        let r = |o| self.regs.get(o) as u32;
        data::Setup {
            supervisor,
            user_tag_mask: r(cm5::NI_USER_TAG_MASK),
            longest: r(cm5::NI_LONGEST_DR_MESSAGE),
            partition_size: r(cm5::NI_PARTITION_SIZE),
            partition_base: r(cm5::NI_PARTITION_BASE),
            chunk_size: r(cm5::NI_CHUNK_SIZE),
            hodgepodge: r(cm5::NI_HODGEPODGE),
            msg_count_mask: r(cm5::NI_COUNT_MASK),
            rec_interrupt_mask: r(cm5::NI_REC_INTERRUPT_MASK),
            user_rec_interrupt_mask: r(cm5::NI_USER_REC_INTERRUPT_MASK),
        }
    }

    fn locked(&self, i: data::Iface) -> bool {
        self.regs.get(i.private()) & ni_abi::cm5::private::LOCK as u64 != 0
    }

    fn rec_ok_ie(&self, k: usize) -> bool {
        let i = [data::Iface::Ldr, data::Iface::Rdr][k];
        self.regs.get(i.private()) & ni_abi::cm5::private::REC_OK_IE as u64 != 0
    }

    /// Raise Green cause bits (their enables were checked by whoever found the event).
    pub fn raise_green(&mut self, bits: u32) {
        let v = self.regs.get(cm5::NI_INTERRUPT_CAUSE_GREEN) | bits as u64;
        self.regs.set(cm5::NI_INTERRUPT_CAUSE_GREEN, v);
    }

    fn apply(
        &mut self,
        fx: data::Effects,
        addr: u64,
        size: usize,
        write: bool,
        counters: &mut Counters,
    ) {
        if fx.cause != 0 {
            self.raise(fx.cause);
        }
        if fx.green != 0 {
            self.raise_green(fx.green);
        }
        if fx.sent {
            counters.cm5_dr_sends += 1;
        }
        self.kick |= fx.sent | fx.freed;
        if fx.bus_error {
            self.bus_error(addr, size, write, counters);
        }
    }

    /// A message the fabric delivers from `from` (an interface of the sender): whether it
    /// fit whole in a receive FIFO (if not, it waits in the sender's send FIFO).
    pub fn deliver(
        &mut self,
        from: data::Iface,
        tag: u8,
        words: &[u32],
        counters: &mut Counters,
    ) -> bool {
        let Some(k) = self.data.arrival_fifo(from, words.len()) else {
            return false;
        };
        let set = self.setup(true);
        let g = self
            .data
            .arrive(k, tag, words.to_vec(), &set, self.rec_ok_ie(k));
        counters.cm5_dr_recvs += 1;
        self.raise_green(g);
        true
    }

    /// The oldest message left this NI's send FIFOs (delivered or dropped by the fabric).
    pub fn sent_out(&mut self) {
        let sfifo_ie = self.regs.get(data::Iface::Dr.private()) as u32
            & cm5::private::SFIFO_GOES_EMPTY_IE
            != 0;
        let g = self.data.pop_out(sfifo_ie);
        self.raise_green(g);
    }

    /// A Data Network register read (DR, LDR, RDR blocks); `None`: not one of those.
    fn data_read(
        &mut self,
        addr: u64,
        sup: bool,
        off: u32,
        size: usize,
        counters: &mut Counters,
    ) -> Option<u32> {
        use cm5::iface as f;
        let (i, r) = data::Iface::of_register(off)?;
        let set = self.setup(sup);
        let locked = self.locked(i);
        let k = match i {
            data::Iface::Ldr => Some(0),
            data::Iface::Rdr => Some(1),
            data::Iface::Dr => None,
        };
        // router_done_complete (§3.5.6): DR status bit 6, status_long bit 7, status_all bit 31.
        let done = |bit: u32| {
            if self.router_done && i == data::Iface::Dr {
                1 << bit
            } else {
                0
            }
        };
        let all_done = if self.router_done { 1 << 31 } else { 0 };
        Some(match (r, k) {
            (f::STATUS, _) => self.data.status(i, false, &set, locked) | done(6),
            (f::STATUS_LONG, _) => self.data.status(i, true, &set, locked) | done(7),
            (f::STATUS_ALL, _) => self.data.status_all(i, &set, locked) | all_done,
            (f::STATUS_POP, Some(_)) => self.data.status_all(i, &set, locked) | all_done,
            (r, Some(k)) if r == f::STATUS_POP + 4 => {
                // The doubleword's second word: one word popped, if there is one (§3.5.3).
                if self.data.can_pop(k, &set) {
                    let (w, fx) = self.data.recv(k, &set, self.rec_ok_ie(k));
                    self.apply(fx, addr, size, false, counters);
                    w.unwrap_or(0)
                } else {
                    0
                }
            }
            (r, Some(k)) if (f::RECV..f::RECV + 16).contains(&r) => {
                let (w, fx) = self.data.recv(k, &set, self.rec_ok_ie(k));
                self.apply(fx, addr, size, false, counters);
                w.unwrap_or(u32::MAX)
            }
            (f::PRIVATE, _) => {
                let v = self.regs.get(i.private()) as u32 & !cm5::private::REC_FULL;
                v | if self.data.rec_full(i) {
                    cm5::private::REC_FULL
                } else {
                    0
                }
            }
            _ => return None,
        })
    }

    /// A Data Network `send_first` (App. A.3, A.4).
    fn data_send_first(
        &mut self,
        addr: u64,
        sf: data::SendFirst,
        value: u32,
        sup: bool,
        size: usize,
        counters: &mut Counters,
    ) {
        let set = self.setup(sup);
        let locked = self.locked(sf.iface);
        let table = self.chunk_table;
        let fx = self.data.send_first(sf, value, &set, locked, &table);
        if !self.data.send_ok(sf.iface) {
            counters.cm5_discarded_sends += 1;
        }
        self.apply(fx, addr, size, true, counters);
    }

    /// A Data Network register write (`send`, `private`); whether it was one.
    fn data_write(
        &mut self,
        addr: u64,
        sup: bool,
        off: u32,
        value: u32,
        size: usize,
        counters: &mut Counters,
    ) -> bool {
        use cm5::iface as f;
        let Some((i, r)) = data::Iface::of_register(off) else {
            return false;
        };
        match r {
            r if (f::SEND..f::SEND + 16).contains(&r) => {
                let set = self.setup(sup);
                let locked = self.locked(i);
                let fx = self.data.send(i, value, &set, locked);
                self.apply(fx, addr, size, true, counters);
                true
            }
            f::PRIVATE => {
                let reg = cm5::decode(off).expect("private register");
                let v = self.regs.store_write(reg, value as u64);
                if v & cm5::private::LOCK as u64 != 0 {
                    self.data.lock(i);
                }
                true
            }
            _ => false,
        }
    }

    /// The abstain flags as the registers hold them, in `fastpath::participation` bits.
    pub fn participation(&self) -> u32 {
        use ni_abi::fastpath::participation as p;
        let com = self.regs.get(cm5::COM_BASE + cm5::iface::CONTROL) as u32;
        let bc = self.regs.get(cm5::BC_BASE + cm5::iface::CONTROL) as u32;
        let sg = self.regs.get(cm5::NI_SYNC_GLOBAL_ABSTAIN) as u32;
        (com & (p::COM_REC_ABSTAIN | p::REDUCE_REC_ABSTAIN))
            | if bc & 1 != 0 { p::BC_REC_ABSTAIN } else { 0 }
            | if sg & 1 != 0 {
                p::SYNC_GLOBAL_ABSTAIN
            } else {
                0
            }
    }

    /// The fabric's poller has work from these registers (`fabric/cm5.rs`).
    fn wake_fabric(&mut self) {
        self.data.pending.store(true, Ordering::Release);
        self.kick = true;
    }

    /// A control-network event other than a combine (`Com` queues those itself).
    fn event(&mut self, e: com::Event) {
        self.com.events.push_back(e);
        self.wake_fabric();
    }

    fn com_private(&self) -> u32 {
        self.regs.get(cm5::COM_BASE + cm5::iface::PRIVATE) as u32
    }

    /// A Control Network register read; `None`: not one of those.
    fn control_read(
        &mut self,
        addr: u64,
        off: u32,
        size: usize,
        counters: &mut Counters,
    ) -> Option<u32> {
        use cm5::iface as f;
        match off {
            o if o == cm5::COM_BASE + f::STATUS => {
                let locked = self.com_private() & cm5::private::LOCK != 0;
                Some(self.com.status(locked))
            }
            o if o == cm5::COM_BASE + f::PRIVATE => {
                let v = self.com_private() & !cm5::private::REC_FULL;
                Some(
                    v | if self.com.rec_full() {
                        cm5::private::REC_FULL
                    } else {
                        0
                    },
                )
            }
            o if (cm5::COM_BASE + f::RECV..cm5::COM_BASE + f::RECV + 16).contains(&o) => {
                let Some((w, overflow_first, emptied)) = self.com.recv() else {
                    self.bus_error(addr, size, false, counters);
                    return Some(u32::MAX);
                };
                let pr = self.com_private();
                let mut g = 0;
                if overflow_first && pr & cm5::private::COM_SCAN_OVERFLOW_IE != 0 {
                    g |= green::SCAN_OVERFLOW;
                }
                if emptied && pr & cm5::private::COM_REC_EMPTY_IE != 0 {
                    g |= green::COM_REC_EMPTY;
                }
                if self.com.head_is_fresh() && pr & cm5::private::REC_OK_IE != 0 {
                    g |= green::COM_REC_OK;
                }
                self.raise_green(g);
                Some(w)
            }
            _ => None,
        }
    }

    /// A Control Network register write; whether it was one.
    fn control_write(
        &mut self,
        addr: u64,
        off: u32,
        value: u32,
        size: usize,
        counters: &mut Counters,
    ) -> bool {
        use cm5::hodgepodge as hp;
        use cm5::iface as f;
        let com_control = cm5::COM_BASE + f::CONTROL;
        let sync = || self.regs.get(cm5::NI_SYNC_GLOBAL) as u32;
        let complete = || sync() & 2 != 0;
        match off {
            o if cm5::send_first_interface(o) == Some(cm5::fifo::COMBINE) => {
                let locked = self.com_private() & cm5::private::LOCK != 0;
                let abstain = self.regs.get(com_control) & 1 != 0;
                let (p, c, _) = com::decode_send_first(o);
                let done = p == 0 && c == 5;
                // §4.2.10: an abstainer may not send; §4.2.9: nor network-done twice.
                if abstain || (done && !self.router_done) {
                    self.bus_error(addr, size, true, counters);
                    return true;
                }
                let scan_start = self.regs.get(cm5::NI_SCAN_START) & 1 != 0;
                let before = self.com.events.len();
                if self.com.send_first(o, value, scan_start, locked).is_err() {
                    self.bus_error(addr, size, true, counters);
                } else if locked {
                    counters.cm5_discarded_sends += 1;
                }
                self.after_com_send(before, counters);
                true
            }
            o if (cm5::COM_BASE + f::SEND..cm5::COM_BASE + f::SEND + 16).contains(&o) => {
                let before = self.com.events.len();
                if self.com.send(value).is_err() {
                    self.bus_error(addr, size, true, counters);
                }
                self.after_com_send(before, counters);
                true
            }
            o if o == cm5::COM_BASE + f::PRIVATE => {
                let reg = cm5::decode(o).expect("COM private");
                if self.regs.store_write(reg, value as u64) & cm5::private::LOCK as u64 != 0 {
                    self.com.lock();
                }
                true
            }
            o if o == com_control => {
                // B.3.3: not while a combine is in the send FIFO.
                let old = self.regs.get(o) as u32;
                if self.com.busy() && (old ^ value) & 3 != 0 {
                    self.raise(cause::COM_ABSTAIN_CHANGED);
                    return true;
                }
                self.regs.set(o, (value & 3) as u64);
                self.com.participation_changed = true;
                self.wake_fabric();
                true
            }
            o if o == cm5::BC_BASE + f::CONTROL => {
                self.regs.set(o, (value & 1) as u64);
                self.com.participation_changed = true;
                self.wake_fabric();
                true
            }
            cm5::NI_SYNC_GLOBAL_ABSTAIN => {
                if !complete() {
                    self.bus_error(addr, size, true, counters);
                    return true;
                }
                self.regs
                    .set(cm5::NI_SYNC_GLOBAL_ABSTAIN, (value & 1) as u64);
                self.com.participation_changed = true;
                self.wake_fabric();
                true
            }
            cm5::NI_SYNC_GLOBAL_SEND => {
                // §4.3.1: not while one is pending, nor while abstaining.
                let abstain = self.regs.get(cm5::NI_SYNC_GLOBAL_ABSTAIN) & 1 != 0;
                let rec = sync() & 1;
                if !complete() || abstain {
                    self.bus_error(addr, size, true, counters);
                    return true;
                }
                self.regs.set(cm5::NI_SYNC_GLOBAL, rec as u64);
                self.event(com::Event::SyncGlobal(value & 1 != 0));
                true
            }
            cm5::NI_ASYNC_GLOBAL | cm5::NI_ASYNC_SUP_GLOBAL => {
                let v = self.regs.get(off) & !1 | (value & 1) as u64;
                self.regs.set(off, v);
                let bit = Some(value & 1 != 0);
                if off == cm5::NI_ASYNC_GLOBAL {
                    self.com.async_global = bit;
                } else {
                    self.com.async_sup_global = bit;
                }
                self.wake_fabric();
                true
            }
            cm5::NI_INTERRUPT_SEND => {
                // §5.5: a broadcast interrupt while the last one is on its way is a Bus Error.
                let h = self.regs.get(cm5::NI_HODGEPODGE) as u32;
                if h & hp::INTERRUPT_SEND_OK == 0 {
                    self.bus_error(addr, size, true, counters);
                    return true;
                }
                let colours = value & 0xF;
                if colours != 0 {
                    self.regs
                        .set(cm5::NI_HODGEPODGE, (h & !hp::INTERRUPT_SEND_OK) as u64);
                    self.interrupt_send = colours;
                    self.wake_fabric();
                }
                true
            }
            cm5::NI_COM_FLUSH_SEND => {
                let h = self.regs.get(cm5::NI_HODGEPODGE) as u32;
                let abstain = self.regs.get(com_control) & 1 != 0;
                if h & hp::FLUSH_COMPLETE == 0 || abstain {
                    self.bus_error(addr, size, true, counters);
                    return true;
                }
                self.regs
                    .set(cm5::NI_HODGEPODGE, (h & !hp::FLUSH_COMPLETE) as u64);
                self.event(com::Event::Flush);
                true
            }
            _ => false,
        }
    }

    fn after_com_send(&mut self, before: usize, counters: &mut Counters) {
        if self.com.events.len() > before {
            if let Some(com::Event::Combine {
                pattern: ni_abi::cm5::Pattern::RouterDone,
                ..
            }) = self.com.events.back()
            {
                self.router_done = false;
            }
            counters.cm5_combines += 1;
            self.wake_fabric();
        }
    }

    fn bc_private(&self, w: bc::Which) -> u32 {
        self.regs.get(w.base() + cm5::iface::PRIVATE) as u32
    }

    /// A write to broadcast interface `w`'s send FIFO (`send_first` or `send`).
    fn bc_send(
        &mut self,
        w: bc::Which,
        addr: u64,
        size: usize,
        counters: &mut Counters,
        f: impl FnOnce(&mut bc::Broadcast, u32) -> Result<(), bc::SendError>,
    ) {
        let pr = self.bc_private(w);
        let b = &mut self.bc[w as usize];
        let before = b.queued();
        let first = f(b, pr);
        let whole = b.queued() > before;
        let discarding = b.discarding();
        match first {
            Err(e) => {
                tracing::debug!(?w, ?e, "broadcast send refused");
                self.bus_error(addr, size, true, counters);
            }
            Ok(()) if discarding => counters.cm5_discarded_sends += 1,
            Ok(()) => {}
        }
        if whole {
            self.wake_fabric();
        }
    }

    /// A broadcast register read (BC, SBC blocks); `None`: not one of those.
    fn bc_read(
        &mut self,
        addr: u64,
        off: u32,
        size: usize,
        counters: &mut Counters,
    ) -> Option<u32> {
        use cm5::iface as f;
        let (w, r) = bc::Which::of_register(off)?;
        let pr = self.bc_private(w);
        let b = &mut self.bc[w as usize];
        Some(match r {
            f::STATUS => b.status(pr & cm5::private::LOCK != 0),
            f::PRIVATE => {
                pr & !cm5::private::REC_FULL
                    | if b.rec_full() {
                        cm5::private::REC_FULL
                    } else {
                        0
                    }
            }
            r if (f::RECV..f::RECV + 16).contains(&r) => {
                let Some(v) = b.recv() else {
                    self.bus_error(addr, size, false, counters);
                    return Some(u32::MAX);
                };
                // Room freed: a broadcast waiting for it may go.
                self.wake_fabric();
                v
            }
            _ => return None,
        })
    }

    /// A broadcast register write (send words, private, SBC control); whether it was one.
    fn bc_write(
        &mut self,
        addr: u64,
        off: u32,
        value: u32,
        size: usize,
        counters: &mut Counters,
    ) -> bool {
        use cm5::iface as f;
        let Some((w, r)) = bc::Which::of_register(off) else {
            return false;
        };
        match r {
            r if (f::SEND..f::SEND + 16).contains(&r) => {
                self.bc_send(w, addr, size, counters, |b, pr| b.send(value, pr));
                true
            }
            f::PRIVATE => {
                let reg = cm5::decode(off).expect("broadcast private");
                let v = self.regs.store_write(reg, value as u64) as u32;
                if v & cm5::private::LOCK != 0 {
                    self.bc[w as usize].lock();
                }
                // send_stop released: held messages may go (§2.7.4).
                self.wake_fabric();
                true
            }
            f::CONTROL => {
                // The BC one is the control network's participation (control_write); the
                // SBC one only gates reception.
                self.regs.set(off, (value & 1) as u64);
                self.wake_fabric();
                true
            }
            _ => false,
        }
    }

    /// Writing `clear_bc_or_com_collision` empties both broadcast send FIFOs and ends a
    /// pending broadcast interrupt (B.3.5); the partition's broadcasts may go on.
    fn collision_cleared(&mut self) {
        for b in &mut self.bc {
            b.empty_send();
        }
        self.interrupt_sent();
        self.wake_fabric();
    }

    /// A broadcast interrupt of `colours` from another NI (§5.5), unless this NI ignores
    /// them (`interrupt_rec_enable` 0).
    pub fn broadcast_interrupt(&mut self, colours: u32) {
        let h = self.regs.get(cm5::NI_HODGEPODGE) as u32;
        if h & cm5::hodgepodge::INTERRUPT_REC_ENABLE == 0 {
            return;
        }
        let mut c = 0;
        if colours & 8 != 0 {
            c |= cause::BC_INTERRUPT_RED;
        }
        if colours & 4 != 0 {
            c |= cause::BC_INTERRUPT_ORANGE;
        }
        if colours & 2 != 0 {
            c |= cause::BC_INTERRUPT_YELLOW;
        }
        self.raise(c);
        if colours & 1 != 0 {
            self.raise_green(green::BC_INTERRUPT_GREEN);
        }
    }

    /// No broadcast interrupt is on its way any more (delivered, or ended by clearing a
    /// collision): `interrupt_send_ok` again.
    pub fn interrupt_sent(&mut self) {
        self.interrupt_send = 0;
        let h = self.regs.get(cm5::NI_HODGEPODGE) | cm5::hodgepodge::INTERRUPT_SEND_OK as u64;
        self.regs.set(cm5::NI_HODGEPODGE, h);
    }

    /// The partition's OR of an async global (`sup`: the supervisor's, §4.3.3) is `or`:
    /// shown as bit 1 of its register; when it `rose`, its Green cause if enabled. Returns
    /// whether a cause was raised.
    pub fn global_rec(&mut self, sup: bool, or: bool, rose: bool) -> bool {
        use cm5::hodgepodge as hp;
        let (reg, ie, bit) = if sup {
            (
                cm5::NI_ASYNC_SUP_GLOBAL,
                hp::SUPERVISOR_GLOBAL_REC_IE,
                green::SUPERVISOR_GLOBAL_REC,
            )
        } else {
            (cm5::NI_ASYNC_GLOBAL, hp::GLOBAL_REC_IE, green::GLOBAL_REC)
        };
        let v = self.regs.get(reg) & 1 | (or as u64) << 1;
        self.regs.set(reg, v);
        let raise = rose && self.regs.get(cm5::NI_HODGEPODGE) as u32 & ie != 0;
        if raise {
            self.raise_green(bit);
        }
        raise
    }

    /// Words of a broadcast arrive on interface `w`; whether it had room for all of them.
    pub fn bc_arrive(&mut self, w: bc::Which, words: &[u32]) -> bool {
        if !self.bc[w as usize].room(words.len()) {
            return false;
        }
        let fresh = self.bc[w as usize].arrive(words);
        if fresh && self.bc_private(w) & cm5::private::REC_OK_IE != 0 {
            self.raise_green(w.rec_ok_cause());
        }
        true
    }

    /// Whether broadcast interface `w` receives (`rec_abstain` 0).
    pub fn bc_receives(&self, w: bc::Which) -> bool {
        self.regs.get(w.base() + cm5::iface::CONTROL) & cm5::control::REC_ABSTAIN as u64 == 0
    }

    /// The oldest whole message of interface `w` ready to leave (not held by `send_stop`).
    pub fn bc_ready(&self, w: bc::Which) -> Option<&[u32]> {
        if self.bc_private(w) & cm5::private::SEND_STOP != 0 {
            return None;
        }
        self.bc[w as usize].front()
    }

    /// Whether `bc_or_com_collision` is set: no broadcast proceeds (B.3.5).
    pub fn collided(&self) -> bool {
        self.regs.get(cm5::NI_INTERRUPT_CAUSE) as u32 & cause::BC_OR_COM_COLLISION != 0
    }

    fn cycles(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() * CPU_HZ / 1_000_000_000) as u64
    }

    /// Which colours are asking for an interrupt: some cause of that colour is set and its
    /// level is non-zero.
    pub fn pending(&self) -> [bool; 4] {
        let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE) as u32;
        let g = self.regs.get(cm5::NI_INTERRUPT_CAUSE_GREEN) as u32;
        let l = self.regs.get(cm5::NI_INTERRUPT_LEVEL) as u32;
        [
            c & cause::RED != 0 && l & level::RED != 0,
            c & cause::ORANGE != 0 && l & level::ORANGE != 0,
            c & cause::YELLOW != 0 && l & level::YELLOW != 0,
            g & green::ALL != 0 && l & level::GREEN != 0,
        ]
    }

    /// Raise a cause bit as an event (the caller checked its `_ie`).
    pub fn raise(&mut self, bits: u32) {
        let v = self.regs.get(cm5::NI_INTERRUPT_CAUSE) | bits as u64;
        self.regs.set(cm5::NI_INTERRUPT_CAUSE, v);
    }

    /// A Bus Error: the transaction is lost, `ni_bad_address` records it and, since posted PCI
    /// writes cannot trap, the Yellow `bad_memory_access` cause reports it.
    fn bus_error(&mut self, addr: u64, size: usize, write: bool, counters: &mut Counters) {
        counters.bus_errors += 1;
        let size_code = if size == 8 {
            bad_address::SIZE_DOUBLEWORD
        } else {
            bad_address::SIZE_WORD
        };
        let ty = if write {
            bad_address::TYPE_WRITE
        } else {
            bad_address::TYPE_READ
        };
        let v = (addr as u32 & bad_address::LOW_MASK)
            | (size_code << bad_address::SIZE_SHIFT)
            | (ty << bad_address::TYPE_SHIFT);
        self.regs.set(cm5::NI_BAD_ADDRESS, v as u64);
        self.raise(cause::BAD_MEMORY_ACCESS);
        tracing::debug!(addr = format_args!("{addr:#x}"), write, "CM-5 Bus Error");
    }

    fn decode(offset: u64) -> (bool, u32) {
        (
            offset >= cm5::SUPERVISOR,
            (offset % cm5::WINDOW_SIZE) as u32,
        )
    }

    /// A bus read of 4 or 8 bytes at `offset` in BAR2. A doubleword is two word accesses.
    /// Returns whether any cause changed.
    pub fn read(&mut self, offset: u64, data: &mut [u8], counters: &mut Counters) -> bool {
        let before = self.pending();
        // A doubleword access is two word accesses (§2.2.1) of one doubleword transaction:
        // each word sees the transaction's size.
        let size = data.len();
        for (i, chunk) in data.chunks_mut(4).enumerate() {
            let addr = offset + 4 * i as u64;
            let v = self.read_word(addr, size, counters);
            chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
        }
        before != self.pending()
    }

    pub fn write(&mut self, offset: u64, data: &[u8], counters: &mut Counters) -> bool {
        let before = self.pending();
        let size = data.len();
        for (i, chunk) in data.chunks(4).enumerate() {
            let addr = offset + 4 * i as u64;
            let mut w = [0u8; 4];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_word(addr, u32::from_le_bytes(w), size, counters);
        }
        before != self.pending()
    }

    fn read_word(&mut self, addr: u64, size: usize, counters: &mut Counters) -> u32 {
        let (sup, off) = Self::decode(addr);
        let Some(reg) = cm5::decode(off) else {
            self.bus_error(addr, size, false, counters);
            return u32::MAX;
        };
        let perm = if sup { reg.sup } else { reg.user };
        if !perm.read || (reg.width == 8 && size != 8) {
            self.bus_error(addr, size, false, counters);
            return u32::MAX;
        }
        if let Some(v) = self.data_read(addr, sup, off, size, counters) {
            return v;
        }
        if let Some(v) = self.control_read(addr, off, size, counters) {
            return v;
        }
        if let Some(v) = self.bc_read(addr, off, size, counters) {
            return v;
        }
        match (reg.offset, reg.kind) {
            (cm5::NI_TIME, _) => self.now_time(),
            (cm5::NI_CHUNK_TABLE_DATA, _) => {
                let a = self.regs.get(cm5::NI_CHUNK_TABLE_ADDRESS) as usize & 63;
                self.chunk_table[a] as u32
            }
            // An empty receive FIFO: reading recv is a Bus Error (§2.4).
            (_, Kind::Computed) if reg.width == 16 => {
                self.bus_error(addr, size, false, counters);
                u32::MAX
            }
            (_, Kind::Action) if reg.width == 16 => 0,
            _ => reg_word(reg, self.regs.get(reg.offset), off),
        }
    }

    fn write_word(&mut self, addr: u64, value: u32, size: usize, counters: &mut Counters) {
        let (sup, off) = Self::decode(addr);
        if let Some(sf) = data::SendFirst::decode(off) {
            self.data_send_first(addr, sf, value, sup, size, counters);
            return;
        }
        if cm5::send_first_interface(off) == Some(cm5::fifo::COMBINE) {
            self.control_write(addr, off, value, size, counters);
            return;
        }
        if let Some(w) = cm5::send_first_interface(off).and_then(bc::Which::from_fifo) {
            // The supervisor broadcast interface is the supervisor's alone (§4.1.1).
            if w == bc::Which::Supervisor && !sup {
                self.bus_error(addr, size, true, counters);
                return;
            }
            let aux = (off & 0xFFF) >> cm5::AUXILIARY_START_P;
            self.bc_send(w, addr, size, counters, |b, pr| {
                b.send_first(aux, value, pr)
            });
            return;
        }
        let Some(reg) = cm5::decode(off) else {
            self.bus_error(addr, size, true, counters);
            return;
        };
        let perm = if sup { reg.sup } else { reg.user };
        if !perm.write {
            self.bus_error(addr, size, true, counters);
            return;
        }
        if self.data_write(addr, sup, off, value, size, counters)
            || self.control_write(addr, off, value, size, counters)
            || self.bc_write(addr, off, value, size, counters)
        {
            return;
        }
        let v = value as u64;
        match reg.offset {
            cm5::NI_INTERRUPT_CLEAR => {
                let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE) & !(v & cause::ALL as u64);
                self.regs.set(cm5::NI_INTERRUPT_CAUSE, c);
                if value & cause::BC_OR_COM_COLLISION != 0 {
                    self.collision_cleared();
                }
            }
            cm5::NI_INTERRUPT_CLEAR_GREEN => {
                let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE_GREEN) & !(v & green::ALL as u64);
                self.regs.set(cm5::NI_INTERRUPT_CAUSE_GREEN, c);
            }
            // interrupt_set forces a cause even when its enable is off (§5.3).
            cm5::NI_INTERRUPT_SET => self.raise(value & cause::ALL),
            cm5::NI_INTERRUPT_SET_GREEN => {
                let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE_GREEN) | (v & green::ALL as u64);
                self.regs.set(cm5::NI_INTERRUPT_CAUSE_GREEN, c);
            }
            cm5::NI_TIME => self.time = (value, self.cycles()),
            cm5::NI_CHUNK_TABLE_DATA => {
                let a = self.regs.get(cm5::NI_CHUNK_TABLE_ADDRESS) as usize & 63;
                self.chunk_table[a] = value as u8;
            }
            _ if reg.width == 16 => {
                // A send word with no open message (every interface is locked after reset,
                // and no send_first opened one) is a Bus Error (§2.3).
                self.bus_error(addr, size, true, counters);
            }
            _ => {
                self.regs.store_write(reg, v);
            }
        }
        if matches!(
            reg.offset,
            cm5::NI_TIME | cm5::NI_INTERRUPT_NOW | cm5::NI_HODGEPODGE
        ) {
            self.rearm_timer();
        }
    }
}

/// The 32-bit word at `off` of a register (8-byte registers are two words).
fn reg_word(reg: &RegDef, value: u64, off: u32) -> u32 {
    if off >= reg.offset + 4 {
        (value >> 32) as u32
    } else {
        value as u32
    }
}

mod regs_serde {
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<crate::regfile::RegFile, D::Error> {
        crate::regfile::deserialize_values(&ni_abi::cm5::REGS, d)
    }
}
