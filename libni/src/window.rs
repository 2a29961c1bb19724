//! The partition window as one member sees it (`ni_abi::window`): the rings it sends and
//! receives on, its peers' states, the collective slots.
//!
//! Only this rank's own zone is written here (in an isolated window it is the only part this
//! process has writable; every other page is mapped read-only); what peers wrote is read
//! through bounds
//! that come from this side (ring indices modulo the ring, lengths checked by
//! [`Header::decode`]), so a peer that scribbles on the window can garble what it sends,
//! never make this process touch memory outside the window.

use std::collections::VecDeque;
use std::sync::atomic::{compiler_fence, fence, AtomicU32, AtomicU64, Ordering};

use ni_abi::fastpath::Completion;
use ni_abi::window::{self as w, hdr, state, Header};

use crate::direct::{prefetch, prefetch_for_write};
use crate::mem::Mem;

/// The most members of a partition whose waiters' looks ask for the next payload line of
/// every ring ([`Window::has_arrivals`]): beyond, the look's own cost grows past what the
/// line saves.
const AHEAD_MEMBERS: u32 = 8;

/// A message waiting for room in a ring: header, payload, the send's completion.
pub(crate) type Waiting = (Header, Vec<u8>, Option<Completion>);

/// An eager or active message at the head of a ring, as [`Window::next_eager`] read its
/// header slot (an active message's `tag` is its handler).
pub(crate) struct Eager {
    pub am: bool,
    pub tag: u64,
    pub len: usize,
    inline: [u8; w::INLINE as usize],
}

pub(crate) struct Window {
    mem: Mem,
    pub rank: u32,
    pub size: u32,
    /// Slots and bytes of every ring of this partition (`w::ring_slots`, `w::ring_bytes`).
    ring_slots: u32,
    ring_bytes: u64,
    /// The longest ring collective's vector (`w::ring_coll_max`) and broadcast sent as one
    /// message (`direct::bcast_ring_max`) in this partition, worked out once.
    pub coll_max: u64,
    pub bcast_max: u64,
    /// Where ring (peer → rank) and ring (rank → peer) start in the window.
    in_ring: Vec<u64>,
    out_ring: Vec<u64>,
    /// `GEN` when this rank last looked at the members' states, and those states.
    gen: u32,
    pub states: Vec<u32>,
    /// Next slot index to write in ring (rank → peer), and the peer's `HEAD` of that ring
    /// when we last read it: room is known without a load until the ring looks full.
    out_tail: Vec<u32>,
    out_head: Vec<u32>,
    /// Next slot index to read in ring (peer → rank), and what `HEAD` says.
    in_head: Vec<u32>,
    in_published: Vec<u32>,
    /// Some `HEAD` lags what this rank consumed (a receive that took its message straight
    /// from the ring leaves it for the next progress pass, unless it lags far).
    heads_behind: bool,
    /// Messages for a peer whose ring was full, in order, with the completion each send
    /// gets once its message is in the ring; `backlogged` counts them all.
    backlog: Vec<VecDeque<Waiting>>,
    backlogged: usize,
    pub coll_timeout_ms: u32,
    /// Our own incarnation when we opened the window, and whether we have seen the next.
    opened_incarnation: u32,
    live: bool,
    /// What this rank last wrote in its `CPU` word.
    cpu: u32,
    /// `w::SLEEPING_MEMBARRIER` if this process registered for global expedited
    /// membarriers on the daemon's host (then it issues one before it blocks, and skips its
    /// own fence toward members that do the same), else 0.
    membarrier: u32,
}

/// What `refresh` found changed in the members' states.
pub(crate) struct Change {
    pub rank: u32,
    pub up: bool,
    /// The member came back as a new client: rings to and from it start empty.
    pub new_incarnation: bool,
}

impl Window {
    /// `rank`'s view of a window of `size` members in `mem`, every cursor at 0, not live.
    fn blank(mem: Mem, rank: u32, size: u32) -> Window {
        let bounded = size.clamp(1, w::MAX_RANKS);
        let ring_bytes = w::ring_bytes(bounded);
        Window {
            mem,
            rank,
            size,
            ring_slots: w::ring_slots(bounded),
            ring_bytes,
            coll_max: w::ring_coll_max(bounded),
            bcast_max: crate::direct::bcast_ring_max(bounded),
            in_ring: (0..size).map(|s| w::ring_at(s, rank, ring_bytes)).collect(),
            out_ring: (0..size).map(|d| w::ring_at(rank, d, ring_bytes)).collect(),
            gen: 0,
            states: vec![0; size as usize],
            out_tail: vec![0; size as usize],
            out_head: vec![0; size as usize],
            in_head: vec![0; size as usize],
            in_published: vec![0; size as usize],
            heads_behind: false,
            backlog: (0..size).map(|_| VecDeque::new()).collect(),
            backlogged: 0,
            coll_timeout_ms: 0,
            opened_incarnation: 0,
            live: false,
            cpu: 0,
            membarrier: 0,
        }
    }

    /// The mapping itself (to let go of it when the device is unplugged).
    pub fn mem_mut(&mut self) -> &mut Mem {
        &mut self.mem
    }

    /// Take the mapped window if it is the one the device named (`serial`) and this rank
    /// fits; `Err` says what did not match.
    pub fn open(mem: Mem, serial: u32, rank: u32, size: u32) -> Result<Window, String> {
        let mut win = Window::blank(mem, rank, size);
        let magic = win.u32(hdr::MAGIC).load(Ordering::Acquire) == hdr::MAGIC_VALUE;
        let version = win.u32(hdr::VERSION).load(Ordering::Relaxed);
        if magic && version != hdr::VERSION_VALUE {
            return Err(format!(
                "the window's layout is version {version}, this libni's {}: ni-device and \
                 libni come from different builds",
                hdr::VERSION_VALUE
            ));
        }
        if !magic
            || win.u32(hdr::SERIAL).load(Ordering::Relaxed) != serial
            || win.u32(hdr::SIZE).load(Ordering::Relaxed) != size
            || size > w::MAX_RANKS
            || rank >= size
        {
            return Err(format!(
                "the mapped window is not the partition's (serial {serial}): the partition \
                 changed while attaching; attach again"
            ));
        }
        win.coll_timeout_ms = win.u32(hdr::COLL_TIMEOUT_MS).load(Ordering::Relaxed);
        win.gen = win.u32(hdr::GEN).load(Ordering::Acquire);
        for r in 0..size {
            win.states[r as usize] = win.state(r);
        }
        win.opened_incarnation = state::incarnation(win.states[rank as usize]);
        // Cursors stay at 0: the device empties every ring to and from this rank when this
        // client comes up (after this), which `refresh` sees as our own new incarnation.
        Ok(win)
    }

    fn u32(&self, off: u64) -> &AtomicU32 {
        debug_assert!(off + 4 <= w::WINDOW_SIZE && off.is_multiple_of(4));
        // SAFETY: `off` comes from the layout constants, 4-aligned and inside the mapping,
        // which lives as long as `self`; peers and the device access these words atomically.
        unsafe { &*(self.mem.ptr().add(off as usize) as *const AtomicU32) }
    }

    fn u64(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off + 8 <= w::WINDOW_SIZE && off.is_multiple_of(8));
        // SAFETY: as for `u32`, 8-aligned.
        unsafe { &*(self.mem.ptr().add(off as usize) as *const AtomicU64) }
    }

    /// `HEAD` of ring (src → dst), in dst's zone.
    fn head(&self, src: u32, dst: u32) -> &AtomicU32 {
        self.u32(w::ring_head(src, dst))
    }

    fn state(&self, r: u32) -> u32 {
        self.u32(w::state_word(r)).load(Ordering::Acquire)
    }

    pub fn up(&self, r: u32) -> bool {
        state::up(self.states[r as usize])
    }

    /// Whether this rank's NI reaches `dst`'s (ports up, a route through the torus).
    pub fn reaches(&self, dst: u32) -> bool {
        self.u64(w::reach_word(self.rank)).load(Ordering::Acquire) & (1 << dst) != 0
    }

    /// Member `r`'s `REGIONS` word: moves when what it exports changes.
    pub fn regions(&self, r: u32) -> u32 {
        self.u32(w::regions_word(r)).load(Ordering::Acquire)
    }

    /// The number of the last broadcast member `r` rooted, read where it keeps it, that
    /// ended there ([`w::zone::RNDV_ENDED`]).
    pub fn rndv_ended(&self, r: u32) -> u64 {
        self.u64(w::rndv_ended_word(r)).load(Ordering::Acquire)
    }

    /// Say this rank's broadcast `seq` ended: a member that reads it from here on drops what
    /// it read. The full fence keeps the application's next stores into the buffer behind
    /// this one (a member checks this word after its copy: if it does not see it, its copy
    /// saw none of them).
    pub fn set_rndv_ended(&self, seq: u64) {
        self.u64(w::rndv_ended_word(self.rank))
            .store(seq, Ordering::Release);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    pub fn all_up(&self) -> bool {
        (0..self.size).all(|r| self.up(r))
    }

    /// Whether the device moved `GEN` since we looked.
    pub fn gen_moved(&self) -> bool {
        self.u32(hdr::GEN).load(Ordering::Acquire) != self.gen
    }

    /// Whether this client's NI is up in the window yet. Until the device publishes it (when
    /// the completion ring is set up, after `open`), the rings may still hold a previous
    /// client's words, so nothing is read or written.
    #[inline]
    pub fn live(&mut self) -> bool {
        self.live || self.comes_live()
    }

    #[inline(never)]
    fn comes_live(&mut self) -> bool {
        let now = self.state(self.rank);
        if state::up(now) && state::incarnation(now) > self.opened_incarnation {
            // The device emptied every ring to and from us just before publishing this.
            (0..self.size as usize).for_each(|r| self.rings_emptied(r));
            self.states[self.rank as usize] = now;
            // ... and our `CPU` and `SLEEPING` words: say them again.
            self.cpu = 0;
            self.u32(w::sleeping(self.rank))
                .store(self.membarrier, Ordering::Release);
            self.live = true;
        }
        self.live
    }

    /// The device emptied the rings to and from member `r`: our cursors start again.
    fn rings_emptied(&mut self, r: usize) {
        self.out_tail[r] = 0;
        self.out_head[r] = 0;
        self.in_head[r] = 0;
        // Not 0: the next publish stores HEAD 0 whatever this rank stored there while the
        // device was emptying the ring.
        self.in_published[r] = u32::MAX;
    }

    /// Re-read the members' states; what changed.
    pub fn refresh(&mut self) -> Vec<Change> {
        self.gen = self.u32(hdr::GEN).load(Ordering::Acquire);
        let mut out = vec![];
        for r in 0..self.size {
            let now = self.state(r);
            let was = self.states[r as usize];
            if now == was {
                continue;
            }
            let new_incarnation = state::incarnation(now) != state::incarnation(was);
            if r == self.rank {
                // Ours is `sync_self`'s business.
                continue;
            }
            if new_incarnation && state::up(now) {
                self.rings_emptied(r as usize);
            }
            self.states[r as usize] = now;
            out.push(Change {
                rank: r,
                up: state::up(now),
                new_incarnation,
            });
        }
        out
    }

    /// Slot `index` of ring (src → this rank), and of ring (this rank → dst).
    #[inline]
    fn in_slot(&self, src: u32, index: u32) -> u64 {
        // A power of two of slots (`w::ring_slots`): a mask, not a division, on every slot.
        self.in_ring[src as usize] + (index & (self.ring_slots - 1)) as u64 * w::SLOT
    }

    #[inline]
    fn out_slot(&self, dst: u32, index: u32) -> u64 {
        self.out_ring[dst as usize] + (index & (self.ring_slots - 1)) as u64 * w::SLOT
    }

    fn in_seq(&self, src: u32, index: u32) -> &AtomicU32 {
        self.u32(self.in_slot(src, index) + w::SEQ)
    }

    /// Whether `need` slots of (rank → dst) are free now (reading `dst`'s `HEAD` again only
    /// when the one read last says they are not).
    #[inline]
    fn has_room(&mut self, dst: u32, need: u32) -> bool {
        let d = dst as usize;
        let tail = self.out_tail[d];
        let fits = |head: u32| {
            let used = tail.wrapping_sub(head);
            // A receiver's HEAD past our tail is a lie: the ring counts as full.
            used <= self.ring_slots && self.ring_slots - used >= need
        };
        if fits(self.out_head[d]) {
            return true;
        }
        let head = self.head(self.rank, dst).load(Ordering::Acquire);
        // Kept even when it does not fit yet: `room_moved` watches for the next move.
        self.out_head[d] = head;
        fits(head)
    }

    /// Whether (rank → dst) is empty: nothing waits for room before a message to `dst`, and
    /// the receiver took every message in the ring (as its `HEAD`, read again if need be,
    /// says). A `BIG` goes into the ring only then — a ping-pong's finds it so, and a
    /// stream's first — and the rest of a stream goes as rendezvous, whose one copy beats the
    /// ring's two there (16 KiB in windows of 64 between two cores: 0.55–0.71 Mmsg/s, against
    /// 0.46–0.51 with `BIG`s filling the ring first); none waits in the backlog, where it
    /// would cost a third copy.
    pub fn drained(&mut self, dst: u32) -> bool {
        self.backlog[dst as usize].is_empty() && self.has_room(dst, self.ring_slots)
    }

    /// Write one message into (rank → dst) if it fits now.
    fn try_put(&mut self, dst: u32, h: &Header, payload: &[u8]) -> bool {
        let d = dst as usize;
        let need = h.slots();
        if !self.has_room(dst, need) {
            return false;
        }
        let tail = self.out_tail[d];
        let inline = if payload.len() > w::INLINE as usize {
            self.write_payload(dst, tail, payload);
            &[][..]
        } else {
            payload
        };
        let first = self.out_slot(dst, tail);
        let words = h.encode_words(inline);
        assert!(first as usize + w::SLOT as usize <= self.mem.len());
        // SAFETY: the slot is inside the mapping (checked above) and 8-aligned; its `SEQ`
        // (the low half of word 0) is left alone, stored last with release.
        unsafe {
            let p = self.mem.ptr().add(first as usize) as *mut u64;
            (p as *mut u32).add(1).write((words[0] >> 32) as u32);
            for (k, &x) in words.iter().enumerate().skip(1) {
                p.add(k).write(x.to_le());
            }
        }
        self.u32(first + w::SEQ)
            .store(w::seq_for(tail), Ordering::Release);
        let next = tail.wrapping_add(need);
        self.out_tail[d] = next;
        // Ask for the line after the one the receiver polls next, if it is known free (else
        // the receiver may be reading it): its write then finds it here instead of waiting for
        // it behind this message's stores. 8 B messages on two cores: 11 -> 15 Mmsg/s.
        let ahead = next.wrapping_add(2);
        if ahead.wrapping_sub(self.out_head[d]) < self.ring_slots {
            let at = self.out_slot(dst, ahead) as usize;
            prefetch_for_write(self.mem.ptr().wrapping_add(at));
        }
        true
    }

    /// Publish one raw slot as the next message to `dst`, whatever it says after its `SEQ`,
    /// with `area` in its payload area (conformance tests: a peer that writes what no sender
    /// writes).
    pub fn inject(&mut self, dst: u32, raw: &[u8; w::SLOT as usize], area: &[u8]) {
        let tail = self.out_tail[dst as usize];
        if !area.is_empty() {
            self.write_payload(dst, tail, &area[..area.len().min(self.area_bytes())]);
        }
        let at = self.out_slot(dst, tail);
        self.mem.write_at((at + 4) as usize, &raw[4..]);
        self.u32(at + w::SEQ)
            .store(w::seq_for(tail), Ordering::Release);
        self.out_tail[dst as usize] = tail.wrapping_add(1);
    }

    /// Send a message to `dst`: into its ring, or behind what waits for room, where `done()`
    /// (the send's completion, made only then) waits with it. Returns `Err(())` when
    /// queued, else whether `dst` is blocked and must be woken.
    #[inline]
    pub fn put(
        &mut self,
        dst: u32,
        h: Header,
        payload: &[u8],
        done: impl FnOnce() -> Option<Completion>,
    ) -> Result<bool, ()> {
        match self.put_now(dst, &h, payload) {
            Some(wake) => Ok(wake),
            None => {
                self.backlog[dst as usize].push_back((h, payload.to_vec(), done()));
                self.backlogged += 1;
                Err(())
            }
        }
    }

    /// [`Self::put`] if the message goes into the ring now (nothing waits toward `dst` and
    /// it has room): whether `dst` must be woken; `None`, and nothing done, if not.
    #[inline]
    pub fn put_now(&mut self, dst: u32, h: &Header, payload: &[u8]) -> Option<bool> {
        if !self.backlog[dst as usize].is_empty() || !self.try_put(dst, h, payload) {
            return None;
        }
        self.count_put(h);
        Some(self.sleeping_after_store(dst))
    }

    /// How many messages wait for room toward `dst`.
    pub fn backlog_len(&self, dst: u32) -> usize {
        self.backlog[dst as usize].len()
    }

    /// Make `c` the completion of the last message waiting for room toward `dst` (one that
    /// had none), made when it goes into the ring.
    pub fn complete_last_with(&mut self, dst: u32, c: Completion) {
        if let Some(last) = self.backlog[dst as usize].back_mut() {
            last.2 = Some(c);
        }
    }

    /// [`Self::complete_last_with`] if the last message waiting toward `dst` has no
    /// completion yet; `c` back if it has one, or nothing waits.
    pub fn complete_last_if_free(&mut self, dst: u32, c: Completion) -> Result<(), Completion> {
        match self.backlog[dst as usize].back_mut() {
            Some(last) if last.2.is_none() => {
                last.2 = Some(c);
                Ok(())
            }
            _ => Err(c),
        }
    }

    /// Whether messages wait for room in some ring.
    #[inline]
    pub fn backlogged(&self) -> bool {
        self.backlogged > 0
    }

    /// Take back what waits for room toward `dst` (a peer that left, or came back anew).
    pub fn drop_backlog(&mut self, dst: u32) -> Vec<Waiting> {
        let v: Vec<Waiting> = self.backlog[dst as usize].drain(..).collect();
        self.backlogged -= v.len();
        v
    }

    /// Move waiting messages into rings with room. Adds the peers to wake to `wake` and the
    /// completions of the sends now in a ring to `done`.
    pub fn flush(&mut self, wake: &mut Vec<u32>, done: &mut Vec<Completion>) {
        if self.backlogged == 0 {
            return;
        }
        for dst in 0..self.size {
            let mut sent = false;
            while let Some((h, p, c)) = self.backlog[dst as usize].pop_front() {
                if !self.try_put(dst, &h, &p) {
                    self.backlog[dst as usize].push_front((h, p, c));
                    break;
                }
                self.backlogged -= 1;
                self.count_put(&h);
                done.extend(c);
                sent = true;
            }
            if sent && self.sleeping_after_store(dst) {
                wake.push(dst);
            }
        }
    }

    /// Count `msgs` messages received here, `bytes` of payload in all.
    pub fn count_recvs(&self, msgs: u64, bytes: u64) {
        self.add(w::stats::RECVS, msgs);
        self.add(w::stats::RECV_BYTES, bytes);
    }

    /// Count an MLINK WRITE (`put`) or READ done in a peer's exported region.
    pub fn count_one_sided(&self, put: bool, bytes: u64) {
        if put {
            self.count(w::stats::PUTS);
            self.add(w::stats::PUT_BYTES, bytes);
        } else {
            self.count(w::stats::GETS);
            self.add(w::stats::GET_BYTES, bytes);
        }
    }

    /// Count a message that went into a ring: an eager send's payload, an active message.
    fn count_put(&self, h: &Header) {
        match h.kind {
            w::kind::EAGER | w::kind::BIG => {
                self.count(w::stats::SENDS);
                self.add(w::stats::BYTES, h.len as u64);
            }
            w::kind::AM => self.count(w::stats::AMS),
            _ => {}
        }
    }

    /// Count a T3E SEND this rank did itself into `dest`'s queue: `stored`, or rejected.
    pub fn count_mq(&self, dest: u32, stored: bool) {
        self.count(w::stats::MQ_SENDS);
        let field = if stored { w::MQ_STORED } else { w::MQ_REJECTED };
        self.bump(w::mq_stats(self.rank, dest) + field, 1);
    }

    /// What this client stores in a queue's arrival lock while it holds it.
    pub fn lock_holder(&self) -> u64 {
        w::mq_lock::member(
            self.rank,
            state::incarnation(self.states[self.rank as usize]),
        )
    }

    pub fn count_collective(&self) {
        self.count(w::stats::COLLECTIVES);
    }

    fn count_ring_error(&self) {
        self.count(w::stats::RING_ERRORS);
    }

    /// Bump one of this rank's counters (`w::stats::*`); only this rank writes its line.
    pub fn count(&self, which: u64) {
        self.add(which, 1);
    }

    pub fn add(&self, which: u64, n: u64) {
        self.bump(w::stats_line(self.rank) + which, n);
    }

    /// Add `n` to the counter at window offset `at` in this rank's zone (only this rank
    /// writes it, so a load and a store will do).
    fn bump(&self, at: u64, n: u64) {
        let s = self.u64(at);
        s.store(s.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Let this member skip its store-load fence toward members that blocked with a
    /// membarrier: this process registered for them, on the daemon's host.
    pub fn use_membarrier(&mut self) {
        self.membarrier = w::SLEEPING_MEMBARRIER;
    }

    /// After publishing: is `dst` blocked? Pairs with its store of `SLEEPING`, fence, last
    /// look at its rings (`set_sleeping`).
    fn sleeping_after_store(&self, dst: u32) -> bool {
        self.sleeping_word_after_store(dst, &mut false) & w::SLEEPING_BLOCKED != 0
    }

    /// `r`'s `SLEEPING` word as it is after what this rank just stored (0 for itself).
    /// `fenced`: whether this rank fenced since that store (then set).
    ///
    /// Store, fence, load on both sides, so that one side always sees the other — except
    /// that when both sides registered for membarriers on one host, the sleeper's
    /// membarrier stands for the writer's fence: it runs a full fence on every cpu that
    /// runs a registered thread, so either this load comes after that fence and sees the
    /// sleeper's store, or this rank's store came before it and the sleeper's last look sees
    /// it. A line the receiver is reading makes the writer's fence wait for that line: a
    /// third of a sender's time at the 8 B message rate went there.
    fn sleeping_word_after_store(&self, r: u32, fenced: &mut bool) -> u32 {
        if r == self.rank {
            return 0;
        }
        let word = self.u32(w::sleeping(r));
        if !*fenced {
            if self.membarrier != 0 {
                // The store stays before the load in the code; the cpu may still swap them.
                compiler_fence(Ordering::SeqCst);
                let v = word.load(Ordering::Acquire);
                if v & w::SLEEPING_MEMBARRIER != 0 {
                    return v;
                }
            }
            fence(Ordering::SeqCst);
            *fenced = true;
        }
        word.load(Ordering::Acquire)
    }

    /// The members blocked on their interrupt after what this rank just stored (its
    /// collective slot), into `out`; returns how many.
    pub fn sleepers_after_store(&self, out: &mut [u32]) -> usize {
        let mut fenced = false;
        let mut n = 0;
        for r in 0..self.size {
            if self.sleeping_word_after_store(r, &mut fenced) & w::SLEEPING_BLOCKED != 0 {
                out[n] = r;
                n += 1;
            }
        }
        n
    }

    /// How many other members of the window last waited on the cpu this thread runs on (0:
    /// spinning costs no peer its turn). Says this rank's cpu (`zone::CPU`) if it moved.
    pub fn cpu_sharers(&mut self) -> u32 {
        // SAFETY: sched_getcpu has no preconditions; it returns -1 on error.
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu < 0 {
            return 0;
        }
        let mine = cpu as u32 + 1;
        if self.cpu != mine {
            self.cpu = mine;
            self.u32(w::cpu_word(self.rank))
                .store(mine, Ordering::Relaxed);
        }
        (0..self.size)
            .filter(|&r| {
                r != self.rank
                    && state::up(self.states[r as usize])
                    && self.u32(w::cpu_word(r)).load(Ordering::Relaxed) == mine
            })
            .count() as u32
    }

    /// Say that this rank blocks on its interrupt (and whether it waits for room in a ring
    /// too: [`w::SLEEPING_FOR_ROOM`]), or no longer does.
    pub fn set_sleeping(&mut self, on: bool) {
        let v = match (on, self.backlogged > 0) {
            (false, _) => 0,
            (true, false) => w::SLEEPING_BLOCKED,
            (true, true) => w::SLEEPING_BLOCKED | w::SLEEPING_FOR_ROOM,
        };
        self.u32(w::sleeping(self.rank))
            .store(v | self.membarrier, Ordering::Release);
        if on {
            fence(Ordering::SeqCst);
            if self.membarrier != 0 && !crate::membarrier::global() {
                // The kernel said it offers it: should it fail anyway, writers fence from
                // now on (what one stored unfenced just before shows at the next timed look).
                self.membarrier = 0;
                self.u32(w::sleeping(self.rank)).store(v, Ordering::Release);
                fence(Ordering::SeqCst);
            }
        }
    }

    /// Whether a receiver moved `HEAD` of a ring this rank has messages waiting for (so the
    /// backlog can move on).
    pub fn room_moved(&self) -> bool {
        self.backlogged > 0
            && (0..self.size).any(|d| {
                !self.backlog[d as usize].is_empty()
                    && self.head(self.rank, d).load(Ordering::Acquire) != self.out_head[d as usize]
            })
    }

    /// Nothing to do for a progress pass but perhaps publish the `HEAD`s of messages taken
    /// ([`Window::publish_heads`]; a receive that takes its message straight from the ring
    /// publishes only every quarter ring): no message to take, no member whose state moved,
    /// nothing waiting for room in a ring.
    #[inline]
    pub fn quiet_but_heads(&self) -> bool {
        self.backlogged == 0 && !self.gen_moved() && !self.has_arrivals()
    }

    /// Nothing at all for a progress pass: [`Window::quiet_but_heads`], and no `HEAD` to
    /// publish either.
    #[inline]
    pub fn quiet(&self) -> bool {
        !self.heads_behind && self.quiet_but_heads()
    }

    /// Publish every `HEAD` that moved; the members that must be woken for it (they block
    /// waiting for room in our rings) go to `wake`.
    #[inline]
    pub fn publish_heads(&mut self, wake: &mut Vec<u32>) {
        if !self.heads_behind {
            return;
        }
        for src in 0..self.size {
            if self.publish_head(src) {
                wake.push(src);
            }
        }
        self.heads_behind = false;
    }

    /// Whether any ring toward this rank holds a message we have not taken.
    ///
    /// In a partition of at most [`AHEAD_MEMBERS`] it also asks for the line where the next
    /// message from each member keeps a payload longer than its header slot holds: while
    /// the waiter polls, that line comes over as soon as the sender wrote it, alongside the
    /// header's, instead of after it (64 B ping-pong between two cores, by turns in one
    /// launch: 10 ns less in fast launches, 85-95 in slow ones; 8 B unchanged).
    pub fn has_arrivals(&self) -> bool {
        // `arrived` for every source, without its per-source bounds checks: every waiter's
        // look that finds nothing runs this over all the members (68 instructions at P = 2
        // -> 40).
        let (base, mask) = (self.mem.ptr(), self.ring_slots - 1);
        let (ahead, area) = (self.size <= AHEAD_MEMBERS, w::payload_area(self.ring_bytes));
        self.in_head
            .iter()
            .zip(&self.in_ring)
            .any(|(&head, &ring)| {
                let slot = ring + (head & mask) as u64 * w::SLOT;
                if ahead {
                    prefetch(base.wrapping_add((slot + area) as usize));
                }
                let off = slot + w::SEQ;
                debug_assert!(off + 4 <= w::WINDOW_SIZE && off.is_multiple_of(4));
                // SAFETY: as `Window::u32`: a slot's SEQ word of a ring inside the mapping,
                // which lives as long as `self`; peers write it atomically.
                let seq = unsafe { &*(base.add(off as usize) as *const AtomicU32) };
                seq.load(Ordering::Acquire) == w::seq_for(head)
            })
    }

    /// Whether the next slot of ring (`src` → this rank) starts a cache line.
    #[inline]
    pub fn next_starts_line(&self, src: u32) -> bool {
        (self.in_head[src as usize] as u64 * w::SLOT).is_multiple_of(w::LINE)
    }

    /// Whether the ring from `src` holds a message we have not taken.
    #[inline]
    pub fn arrived(&self, src: u32) -> bool {
        let head = self.in_head[src as usize];
        self.in_seq(src, head).load(Ordering::Acquire) == w::seq_for(head)
    }

    /// The next message `src` published toward this rank, if any, left in the ring until
    /// [`Window::consume`]. A header slot no honest sender writes is skipped and counted
    /// (one slot: the liar's ring resynchronises on its next honest header).
    #[inline]
    pub fn next(&mut self, src: u32) -> Option<Header> {
        if !self.arrived(src) {
            return None;
        }
        self.next_published(src)
    }

    fn next_published(&mut self, src: u32) -> Option<Header> {
        loop {
            let head = self.in_head[src as usize];
            if self.in_seq(src, head).load(Ordering::Acquire) != w::seq_for(head) {
                return None;
            }
            self.prefetch(src, head.wrapping_add(1));
            self.prefetch(src, head.wrapping_add(2));
            let mut b = [0u8; w::SLOT as usize];
            self.mem.read_at(self.in_slot(src, head) as usize, &mut b);
            match Header::decode(&b) {
                // A BIG or COLL longer than this partition's rings take is no honest
                // sender's.
                Some(h)
                    if match h.kind {
                        w::kind::BIG => h.full <= w::big_max(self.size),
                        w::kind::COLL => h.full <= self.coll_max,
                        _ => true,
                    } =>
                {
                    return Some(h)
                }
                _ => {
                    self.count_ring_error();
                    self.in_head[src as usize] = head.wrapping_add(1);
                    self.heads_behind = true;
                }
            }
        }
    }

    /// The next message from `src` if it is an eager or an active one (the common messages),
    /// from one read of its header slot: what the peer writes there later changes nothing
    /// checked, and a payload of at most [`w::INLINE`] bytes comes with it. `None`: nothing
    /// there, or anything else ([`Window::next`] takes it, and judges it).
    #[inline(always)]
    pub fn next_eager(&self, src: u32) -> Option<Eager> {
        if !self.arrived(src) {
            return None;
        }
        let mut b = [0u8; w::SLOT as usize];
        let at = self.in_slot(src, self.in_head[src as usize]);
        self.mem.read_at(at as usize, &mut b);
        let len = u16::from_le_bytes([b[w::LEN_AT], b[w::LEN_AT + 1]]) as usize;
        let kind = b[w::KIND_AT];
        if (kind != w::kind::EAGER && kind != w::kind::AM)
            || b[w::PAD_AT] != 0
            || len > w::max_len(kind) as usize
        {
            return None;
        }
        Some(Eager {
            am: kind == w::kind::AM,
            tag: u64::from_le_bytes(b[w::TAG_AT..w::TAG_AT + 8].try_into().unwrap()),
            len,
            inline: b[w::HEADER as usize..].try_into().unwrap(),
        })
    }

    /// Copy the first `out.len()` bytes (at most its `len`) of the payload of the message
    /// [`Window::next_eager`] returned.
    #[inline(always)]
    pub fn eager_payload(&self, src: u32, e: &Eager, out: &mut [u8]) {
        if e.len <= w::INLINE as usize {
            crate::mem::copy_slice(out, &e.inline[..out.len()]);
        } else {
            self.area_read(src, self.in_head[src as usize], out);
        }
    }

    /// Past the message [`Window::next_eager`] returned.
    #[inline]
    pub fn consume_eager(&mut self, src: u32, e: &Eager) {
        let head = &mut self.in_head[src as usize];
        *head = head.wrapping_add(w::slots_for(e.len as u64));
        self.heads_behind = true;
    }

    /// Ask for slot `index` of ring (`src` → this rank) ahead of reading it.
    #[inline]
    fn prefetch(&self, src: u32, index: u32) {
        let at = self.in_slot(src, index) as usize;
        prefetch(self.mem.ptr().wrapping_add(at));
    }

    /// Copy the first `out.len()` bytes (at most `h.len`) of the payload of the message
    /// [`Window::next`] returned.
    pub fn payload(&self, src: u32, h: &Header, out: &mut [u8]) {
        let len = out.len().min(h.len as usize);
        let head = self.in_head[src as usize];
        if h.len as u64 <= w::INLINE {
            let first = self.in_slot(src, head);
            self.mem
                .read_at((first + w::HEADER) as usize, &mut out[..len]);
        } else {
            self.area_read(src, head, &mut out[..len]);
        }
    }

    /// The payload of the message [`Window::next`] returned where it lies in the ring's
    /// payload area: its part up to the area's end and the part that goes on at its start
    /// (empty unless it wraps); `None` for a payload inline in its header slot.
    pub fn payload_in_place(&self, src: u32, h: &Header) -> Option<[&[u8]; 2]> {
        if h.len as u64 <= w::INLINE {
            return None;
        }
        let (at, to_end) = self.payload_at(self.in_ring[src as usize], self.in_head[src as usize]);
        let len = h.len as usize;
        let first = len.min(to_end);
        Some([
            self.mem.slice_at(at, first),
            self.mem
                .slice_at(at + to_end - self.area_bytes(), len - first),
        ])
    }

    /// Copy `out.len()` bytes of the payload of the message at slot `i` of ring (src → this
    /// rank) out of its payload area (out of line: the one-slot message's path stays short).
    #[inline(never)]
    fn area_read(&self, src: u32, i: u32, out: &mut [u8]) {
        let (at, to_end) = self.payload_at(self.in_ring[src as usize], i);
        let len = out.len();
        let (a, b) = out.split_at_mut(len.min(to_end));
        self.mem.read_at(at, a);
        // Most payloads end before the area does.
        if !b.is_empty() {
            self.mem.read_at(at + to_end - self.area_bytes(), b);
        }
    }

    /// Where the payload of the message at slot `i` of a ring that starts at `ring` is in
    /// the window, and how many bytes of the payload area follow it up to the area's end.
    #[inline]
    fn payload_at(&self, ring: u64, i: u32) -> (usize, usize) {
        let area = ring + w::payload_area(self.ring_bytes);
        let off = (i & (self.ring_slots - 1)) as usize * w::SLOT as usize;
        (area as usize + off, self.area_bytes() - off)
    }

    #[inline]
    fn area_bytes(&self) -> usize {
        self.ring_slots as usize * w::SLOT as usize
    }

    /// Store a payload longer than a header slot holds into the payload area of ring
    /// (rank → dst) for the message at slot `i`: one copy, two where it meets the area's end
    /// (ordered before the header's `SEQ` by its release).
    fn write_payload(&self, dst: u32, i: u32, payload: &[u8]) {
        let (at, to_end) = self.payload_at(self.out_ring[dst as usize], i);
        let (a, b) = payload.split_at(payload.len().min(to_end));
        self.mem.write_at(at, a);
        if !b.is_empty() {
            self.mem.write_at(at + to_end - self.area_bytes(), b);
        }
    }

    /// Done with the message [`Window::next`] returned; its slots go back to `src` at the
    /// next [`Window::publish_head`].
    pub fn consume(&mut self, src: u32, h: &Header) {
        let head = &mut self.in_head[src as usize];
        *head = head.wrapping_add(h.slots());
        self.heads_behind = true;
    }

    /// Every `HEAD` published (a progress pass published them all).
    pub fn heads_published(&mut self) {
        self.heads_behind = false;
    }

    /// [`Window::publish_head`] once `src`'s `HEAD` lags a quarter of the ring: a receive
    /// that took its message straight from the ring publishes no more often (each publish
    /// is a fence), nor so rarely that the sender finds the ring full while it is not.
    #[inline]
    pub fn publish_head_if_far(&mut self, src: u32) -> bool {
        let s = src as usize;
        if self.in_head[s].wrapping_sub(self.in_published[s]) < self.ring_slots / 4 {
            return false;
        }
        self.publish_head(src)
    }

    /// Tell `src` how far this rank has read, if that moved.
    /// Returns whether `src` must be woken: it blocks waiting for room in a ring (only ours
    /// can be the one: a wake it did not need costs it a look). Pairs with its store of
    /// `SLEEPING`, fence, look at `HEAD` (`set_sleeping`, `room_moved`).
    pub fn publish_head(&mut self, src: u32) -> bool {
        let s = src as usize;
        if self.in_published[s] == self.in_head[s] {
            return false;
        }
        self.in_published[s] = self.in_head[s];
        self.head(src, self.rank)
            .store(self.in_head[s], Ordering::Release);
        self.sleeping_word_after_store(src, &mut false) & w::SLEEPING_FOR_ROOM != 0
    }

    /// Publish this rank's contribution to collective round `round`.
    pub fn coll_write(&self, round: u64, meta: u64, data: &[u8]) {
        let s = w::coll_slot(round, self.rank);
        self.mem.write_at((s + w::COLL_DATA) as usize, data);
        self.u64(s + w::COLL_META).store(meta, Ordering::Relaxed);
        self.u64(s + w::COLL_SEQ)
            .store(round + 1, Ordering::Release);
    }

    /// Whether every member published round `round`.
    pub fn coll_ready(&self, round: u64) -> bool {
        (0..self.size).all(|r| {
            self.u64(w::coll_slot(round, r) + w::COLL_SEQ)
                .load(Ordering::Acquire)
                == round + 1
        })
    }

    pub fn coll_meta(&self, round: u64, r: u32) -> u64 {
        self.u64(w::coll_slot(round, r) + w::COLL_META)
            .load(Ordering::Relaxed)
    }

    /// The first `len` bytes (at most a slot's) of member `r`'s data in round `round`, in
    /// place: for a reduction that reads each byte once. The member's own words: a member
    /// writing them while the round is read changes only what it contributes (its garbage),
    /// never what is read or written outside its slot.
    pub fn coll_data(&self, round: u64, r: u32, len: usize) -> &[u8] {
        let at = (w::coll_slot(round, r) + w::COLL_DATA) as usize;
        let len = len.min(w::COLL_MAX as usize);
        assert!(at + len <= self.mem.len());
        // SAFETY: inside the mapping (checked above), which lives as long as `self`; read
        // only, as bytes (any value is valid).
        unsafe { std::slice::from_raw_parts(self.mem.ptr().add(at), len) }
    }

    pub fn coll_read(&self, round: u64, r: u32, out: &mut [u8]) {
        let n = out.len().min(w::COLL_MAX as usize);
        self.mem.read_at(
            (w::coll_slot(round, r) + w::COLL_DATA) as usize,
            &mut out[..n],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ni_abi::window::kind;

    /// Rank `rank`'s view of a window of `size` members in `mem`, up, with every cursor at
    /// `start` (rings that wrap soon).
    fn member(mem: &Mem, rank: u32, size: u32, start: u32) -> Window {
        let mut win = fake(mem, rank, size);
        for r in 0..size as usize {
            win.out_tail[r] = start;
            win.out_head[r] = start;
            win.in_head[r] = start;
            win.in_published[r] = start;
        }
        win
    }

    /// A `Window` on memory no device set up (`open` refuses it: no MAGIC), live.
    fn fake(mem: &Mem, rank: u32, size: u32) -> Window {
        let mut win = Window::blank(Mem::view(mem.ptr(), mem.len()), rank, size);
        win.live = true;
        win
    }

    /// Payloads full of the `SEQ`s the receiver will wait for on the next laps (what a
    /// layout with payload bytes in the slots would mistake for headers once the ring comes
    /// round): lap after lap, the receiver finds exactly the messages sent, and nothing
    /// after the last (`ni_abi::window::SEQ`).
    #[test]
    fn payloads_never_read_as_headers() {
        let mem = Mem::alloc(w::zone(2) as usize).unwrap();
        let n = w::ring_slots(2);
        let mut tx = member(&mem, 0, 2, 0);
        let mut rx = member(&mem, 1, 2, 0);
        let mut sent = 0u32;
        while sent < 3 * n {
            let len = [4096usize, 17, 1000, 33][(sent % 4) as usize];
            let payload: Vec<u8> = (0..len / 4)
                .flat_map(|k| {
                    let i = sent.wrapping_add(k as u32 / 8);
                    w::seq_for(i.wrapping_add(n)).to_le_bytes()
                })
                .collect();
            let h = Header {
                kind: kind::EAGER,
                len: payload.len() as u32,
                tag: sent as u64,
                id: 0,
                full: payload.len() as u64,
            };
            assert!(tx.try_put(1, &h, &payload));
            sent = sent.wrapping_add(h.slots());
            let got = rx.next(0).expect("published");
            assert_eq!(got, h);
            let mut out = vec![0u8; payload.len()];
            rx.payload(0, &got, &mut out);
            assert_eq!(out, payload);
            rx.consume(0, &got);
            assert_eq!(rx.next(0), None, "after {sent} slots");
            tx.out_head[1] = rx.in_head[0];
        }
    }

    /// Every payload length up to the largest eager message, starting at every slot of a
    /// 64-slot stretch around the ring's end: what the receiver copies out (whole or cut
    /// short) is what was sent, and nothing past what it asked for is written.
    #[test]
    fn payloads_cross_the_ring_end_whole_and_cut_short() {
        let mem = Mem::alloc(w::zone(2) as usize).unwrap();
        let slots = w::ring_slots(2);
        let lens: Vec<usize> = (0..200).chain([1000, 1001, 3000, 4095, 4096]).collect();
        for start in (slots - 40..slots + 24).step_by(3) {
            let mut tx = member(&mem, 0, 2, start);
            let mut rx = member(&mem, 1, 2, start);
            for &len in &lens {
                let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                let h = Header {
                    kind: kind::EAGER,
                    len: len as u32,
                    tag: len as u64,
                    id: 0,
                    full: len as u64,
                };
                assert!(tx.try_put(1, &h, &payload), "len {len}: room");
                let got = rx.next(0).expect("published");
                assert_eq!((got.len as usize, got.tag), (len, len as u64));
                for cut in [len, len / 2, len.saturating_sub(5)] {
                    let mut out = vec![0xEEu8; cut + 40];
                    rx.payload(0, &got, &mut out[..cut]);
                    assert_eq!(&out[..cut], &payload[..cut], "len {len} cut {cut}");
                    assert!(out[cut..].iter().all(|&b| b == 0xEE), "len {len} cut {cut}");
                }
                rx.consume(0, &got);
                // The receiver's HEAD as the sender would read it.
                tx.out_head[1] = rx.in_head[0];
            }
        }
    }
}
