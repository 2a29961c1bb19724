//! The partition window: memory shared by the NIs of one partition, the medium of the
//! direct path (`device/abi/fastpath.md`, "The partition window").
//!
//! Every member maps the same pages, so a message to a peer on the same daemon is two stores
//! and a load away, with no device thread between sender and receiver: the receiver's NI *is*
//! the ring the sender writes. Small tagged messages travel whole in per-pair rings (a
//! 32-byte header slot, the payload beside it); larger ones send a header there and their
//! payload through the fabric (one copy, rendezvous); vector collectives of up to
//! [`COLL_MAX`] bytes combine in per-rank slots that every member reads in rank order.
//!
//! **One writer per page.** The window is laid out by writer: the device page (header,
//! `STATE`, `REACH`) is written by the device alone, and rank `r`'s [`zone`] holds every word
//! rank `r` writes — its `SLEEPING` line, its counters, the `HEAD` of each ring it receives on,
//! its collective slots, its outgoing rings. Each part
//! is page-aligned, so the MMU can hand every member its own zone writable and everything
//! else read-only ([`Kind`]). Everything is little-endian. Readers never trust a peer's words
//! for an index or a length beyond what they check here.

/// How the daemon backs a partition's window (`ni-device --direct`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One file per writer: the device page and each rank's zone are separate memfds, shown
    /// to a host client as the vfio-user regions [`DEVICE_REGION`] and [`zone_region`] — its
    /// own zone read-write, every other one through a read-only descriptor, so no mapping it
    /// can make writes a word another member owns. A VMM shows only PCI regions to a guest,
    /// so guests cannot map it.
    Isolated,
    /// One file for the whole window, shown in two BARs: BAR4 from [`WINDOW_OFFSET`], the
    /// whole window through a read-only descriptor and without `FLAG_WRITE` (so a VMM maps
    /// it read-only), and BAR3 from 0, the member's own zone read-write. A member maps
    /// BAR4's window and then its zone over its place in it ([`zone`]). A VMM can show
    /// this, so guests can map it; the MMU keeps one writer per page either way.
    Shared,
}

/// Where the window starts in BAR4 (after the MSI-X table and PBA), for [`Kind::Shared`];
/// trapped accesses there (and to BAR3, the member's zone) reach the window of either kind.
pub const WINDOW_OFFSET: u64 = 16 << 20;
pub const WINDOW_SIZE: u64 = 80 << 20;
/// Partitions of more NIs than this use the fabric path only. Every zone has room for this
/// many rings; a partition's rings share it ([`ring_bytes`]).
pub const MAX_RANKS: u32 = 64;

/// vfio-user region of an isolated window's device page (read-only to every client).
pub const DEVICE_REGION: u32 = crate::pci::NUM_REGIONS;
/// vfio-user region of rank `r`'s zone of an isolated window: read-write for rank `r`'s
/// client, read-only for the others, empty beyond the partition's size.
pub const fn zone_region(rank: u32) -> u32 {
    DEVICE_REGION + 1 + rank
}
/// Regions a session with an isolated window offers.
pub const ISOLATED_REGIONS: u32 = zone_region(MAX_RANKS);

/// The device page: [`hdr`], then [`STATE`] and [`REACH`] lines.
pub const DEVICE_PAGE: u64 = 0;
pub const DEVICE_PAGE_SIZE: u64 = 0x10000;

/// Header words (device-written, u32).
pub mod hdr {
    pub const MAGIC: u64 = 0x00;
    pub const MAGIC_VALUE: u32 = 0x4E57_494E; // "NIWN"
    pub const VERSION: u64 = 0x04;
    /// 3: ring slots carry their own sequence ([`super::SEQ`]); no `TAIL` words.
    /// 4: members store T3E SENDs into peers' exported queues under [`super::mq_lock`].
    /// 5: up to 64 members; `REACH` is a u64; ring size depends on the partition's size.
    /// 6: collective slots of 4 KiB.
    /// 7: ring slots of 32 bytes (two small messages a cache line), continuation data at +4.
    /// 8: `SLEEPING` bit 2 ([`super::SLEEPING_MEMBARRIER`]).
    /// 9: rings up to 256 KiB ([`super::ring_bytes`]).
    /// 10: payloads beyond [`super::INLINE`] in the ring's payload area, in one piece
    /// ([`super::payload_area`]); no continuation slots; rings up to 512 KiB.
    /// 11: eager messages up to [`super::big_max`] (`kind::BIG`).
    /// 12: rendezvous read by the receiver from the sender's exported region (`kind::GET`,
    /// `kind::FIN`).
    /// 13: small broadcasts as messages from the root in the rings (`kind::COLL`).
    /// 14: small reduces (to the root) and scans (member to next member) in the rings too.
    /// 15: broadcasts of up to 16 slots read where the root keeps them ([`super::coll_id`],
    /// [`super::zone::RNDV_ENDED`]).
    /// 16: reduces' and scans' vectors in the rings up to [`super::ring_coll_max`].
    pub const VERSION_VALUE: u32 = 16;
    /// Daemon-unique serial of this window; the control page's `WINDOW` names the one a
    /// client must find mapped.
    pub const SERIAL: u64 = 0x08;
    /// Members (partition size).
    pub const SIZE: u64 = 0x0C;
    /// Bumped whenever a member's `STATE` changes: one load tells a waiter to look.
    pub const GEN: u64 = 0x10;
    /// The daemon's collective timeout, in milliseconds.
    pub const COLL_TIMEOUT_MS: u64 = 0x14;
}

/// A cache line: the device page gives each rank one (`+ rank * LINE`), and a ring's lines
/// hold two slots each.
pub const LINE: u64 = 64;
/// Device-written: [`state`] of the rank's NI.
pub const STATE: u64 = 0x1000;
/// Device-written, beside `STATE` (u64): bit `j` set when this rank's NI reaches rank `j`'s —
/// both ports up and a route through the torus (`ni-ctl port`, `ni-ctl map-out`). The
/// direct path honours the links the administrator took down, as the fabric does.
pub const REACH: u64 = STATE + 16;

/// Device-written, beside `STATE`: moved whenever the rank's client registers or
/// deregisters a region it exports (`access::EXPORT`), and when a new client comes up, so
/// peers drop what they mapped (or were refused) of its regions before they use one again.
pub const REGIONS: u64 = STATE + 8;

pub fn state_word(rank: u32) -> u64 {
    STATE + rank as u64 * LINE
}
pub fn reach_word(rank: u32) -> u64 {
    REACH + rank as u64 * LINE
}
pub fn regions_word(rank: u32) -> u64 {
    REGIONS + rank as u64 * LINE
}

/// vfio-user region indices through which a host client asks for a mapping of a partition
/// peer's exported region: `PEER_REGIONS | rank << 24 | key` (`peer_region`). The reply's
/// descriptor maps the region whole, read-write; anything else is refused.
pub const PEER_REGIONS: u32 = 0x4000_0000;

pub const fn peer_region(rank: u32, key: u32) -> Option<u32> {
    if rank < MAX_RANKS && key < 1 << 24 {
        Some(PEER_REGIONS | rank << 24 | key)
    } else {
        None
    }
}

/// The (rank, key) a `peer_region` index names.
pub const fn peer_region_of(index: u32) -> Option<(u32, u32)> {
    if index & 0xC000_0000 == PEER_REGIONS {
        Some(((index >> 24) & 0x3F, index & 0xFF_FFFF))
    } else {
        None
    }
}

/// Rank zones follow the device page, `ZONE_SIZE` apart.
pub const ZONES: u64 = DEVICE_PAGE + DEVICE_PAGE_SIZE;
pub const ZONE_SIZE: u64 = zone::RINGS + RINGS_BYTES;

/// Where rank `r`'s zone starts in the window.
pub const fn zone(rank: u32) -> u64 {
    ZONES + rank as u64 * ZONE_SIZE
}

/// The rank whose zone holds window offset `off`, if any: the only rank that may write it.
pub fn owner(off: u64) -> Option<u32> {
    let r = off.checked_sub(ZONES)? / ZONE_SIZE;
    (r < MAX_RANKS as u64).then_some(r as u32)
}

/// Offsets inside a zone.
pub mod zone {
    /// u32: bit 0 while the rank blocks on its completion interrupt, so a writer that finds
    /// it set asks the device to `WAKE` it ([`super::SLEEPING_BLOCKED`] and the others).
    pub const SLEEPING: u64 = 0x0;
    /// u32: the cpu this rank's client last waited on, plus one (0: not said). A waiter
    /// spins before it yields only while no peer waits on its cpu (`fastpath.md`,
    /// "Waiting and waking").
    pub const CPU: u64 = 0x4;
    /// u64: the number of the last broadcast this rank rooted that members read where it
    /// keeps it ([`super::coll_id::RNDV`]) and that ended here: a member that read one of
    /// that number or lower since may have read it rewritten, and drops what it read. Its
    /// own line, apart from the words writers read on every message.
    pub const RNDV_ENDED: u64 = 0x40;
    /// The rank's counters, [`super::stats`].
    pub const STATS: u64 = 0x100;
    /// Per destination `d`, at `+ 16·d`: T3E SENDs this rank stored into `d`'s queues
    /// itself (u64), and those `d`'s queues rejected (u64) — [`super::mq_stats`].
    pub const MQ_STATS: u64 = 0x1000;
    /// `HEAD` of ring (`s` → this rank) at `+ 64·s`: u32, free-running count of the slots
    /// this rank has taken.
    pub const HEADS: u64 = 0x1400;
    /// Collective slots, `COLL_SLOT` per parity.
    pub const COLL: u64 = 0x4000;
    /// Ring (this rank → `d`) at `+ ring_bytes(size)·d`.
    pub const RINGS: u64 = 0x6000;
}

/// `SLEEPING` bits: the rank blocks on its interrupt; and it waits for room in a ring toward
/// some peer (whose receiver, on moving that ring's `HEAD`, asks for its `WAKE` too).
pub const SLEEPING_BLOCKED: u32 = 1;
pub const SLEEPING_FOR_ROOM: u32 = 2;
/// Kept set while the rank's client lives, blocked or not: before it blocks it makes every
/// thread on its host that registered for it execute a full fence (Linux `membarrier`,
/// `MEMBARRIER_CMD_GLOBAL_EXPEDITED`). A writer on the same host that registered needs no
/// fence of its own between its store and its read of this word (`fastpath.md`, "Waiting
/// and waking").
pub const SLEEPING_MEMBARRIER: u32 = 4;

pub fn sleeping(rank: u32) -> u64 {
    zone(rank) + zone::SLEEPING
}

pub fn cpu_word(rank: u32) -> u64 {
    zone(rank) + zone::CPU
}

pub fn rndv_ended_word(rank: u32) -> u64 {
    zone(rank) + zone::RNDV_ENDED
}

/// Rank-written counters (u64) at [`stats_line`]: messages and bytes whose payload went
/// through the window (sent, and received), collectives done in the window, ring words (and
/// large collectives' places) from this rank's peers it refused, and the direct-path operations that failed, by status. The
/// daemon adds them to its own `sends`, `recvs`, `err_*`... counters.
pub mod stats {
    pub const LEN: u64 = 256;
    pub const SENDS: u64 = 0;
    pub const BYTES: u64 = 8;
    pub const COLLECTIVES: u64 = 16;
    pub const RING_ERRORS: u64 = 24;
    pub const PEER_DOWN: u64 = 32;
    pub const TIMEOUT: u64 = 40;
    pub const LINK_DOWN: u64 = 48;
    pub const COLLISION: u64 = 56;
    pub const RECVS: u64 = 64;
    pub const RECV_BYTES: u64 = 72;
    pub const TRUNCATED: u64 = 80;
    /// Active messages sent through the window, and those taken from it for a handler.
    pub const AMS: u64 = 88;
    pub const AMS_TAKEN: u64 = 96;
    /// MLINK WRITE/READ done in a peer's exported region, and their bytes.
    pub const PUTS: u64 = 104;
    pub const PUT_BYTES: u64 = 112;
    pub const GETS: u64 = 120;
    pub const GET_BYTES: u64 = 128;
    /// T3E SENDs done in peers' exported queues (stored or rejected).
    pub const MQ_SENDS: u64 = 136;
    /// Allreduces done through the members' exported scratch (too large for the slots), and
    /// this member's bytes in them.
    pub const LARGE_ALLREDUCES: u64 = 144;
    pub const LARGE_ALLREDUCE_BYTES: u64 = 152;
    /// Rendezvous messages (`kind::GET`) this rank read itself from their sender's exported
    /// region, and their bytes (also counted in `RECVS`, `RECV_BYTES`).
    pub const READS: u64 = 160;
    pub const READ_BYTES: u64 = 168;
    /// Of `LARGE_ALLREDUCES`, those whose data this member's peers read in its send buffer
    /// (an exported region apart from its receive buffer): no copy into scratch.
    pub const LARGE_ALLREDUCES_IN_PLACE: u64 = 176;
    /// Broadcasts too large for the slots whose vector the members read from the root's
    /// exported memory, and this member's bytes in them.
    pub const LARGE_BCASTS: u64 = 184;
    pub const LARGE_BCAST_BYTES: u64 = 192;
    /// Reduces too large for the slots done as the large allreduce (the root alone copying
    /// the result out), and this member's bytes in them.
    pub const LARGE_REDUCES: u64 = 200;
    pub const LARGE_REDUCE_BYTES: u64 = 208;
    /// Allgathers of vectors too large for the slots whose members each copied the others'
    /// from where they are, and this member's bytes in them.
    pub const LARGE_ALLGATHERS: u64 = 216;
    pub const LARGE_ALLGATHER_BYTES: u64 = 224;
    /// Scans (inclusive and exclusive) of vectors too large for the slots whose members each
    /// reduced the earlier members' vectors from where they are, and this member's bytes in
    /// them.
    pub const LARGE_SCANS: u64 = 232;
    pub const LARGE_SCAN_BYTES: u64 = 240;
    /// Of the large allreduces and scans, those in which this member wrote its part of the
    /// result straight into every member's receive buffer (all exported): nobody copied a
    /// result out.
    pub const LARGE_PUSHED: u64 = 248;
}

/// Rank `src`'s counts of the SENDs it did itself into rank `dst`'s queues: stored at
/// `+ MQ_STORED`, rejected (Tail = Limit) at `+ MQ_REJECTED`. The daemon adds them to `dst`'s
/// `mq_stored` and `mq_rejected`.
pub fn mq_stats(src: u32, dst: u32) -> u64 {
    zone(src) + zone::MQ_STATS + dst as u64 * MQ_STATS_LEN
}
pub const MQ_STATS_LEN: u64 = 16;
pub const MQ_STORED: u64 = 0;
pub const MQ_REJECTED: u64 = 8;

/// The arrival lock of a T3E message queue in an exported region (`fastpath.md`, "Message
/// queues in the window"): the u64 right after the MQCW, in slot 0 (which the seed leaves
/// unused beyond the MQCW). Whoever stores a SEND into such a queue — the device for the
/// fabric's path, or a member on the direct path — holds it from reading the MQCW until its
/// compare-and-swap moved Tail, so the seed's arrival algorithm (store, then move Tail) keeps
/// its one writer at a time. The receiver's own atomic SWAP of the MQCW needs no lock.
pub mod mq_lock {
    /// Offset from the MQCW.
    pub const OFFSET: u64 = 8;
    pub const FREE: u64 = 0;
    /// Held by the device.
    pub const DEVICE: u64 = u64::MAX;
    /// Held by partition rank `rank`'s client of incarnation `incarnation` (never `FREE`
    /// or `DEVICE`).
    pub const fn member(rank: u32, incarnation: u32) -> u64 {
        ((incarnation as u64) << 8) | (rank as u64 + 1)
    }
    /// How many times a writer tries a held lock before it leaves the SEND for later (the
    /// device) or to the fabric (a member): a holder keeps it for one 64-byte store and two
    /// atomics, unless it was preempted.
    pub const SPINS: u32 = 256;

    /// Take the lock for `me`, trying [`SPINS`] times; `Err` names who holds it.
    pub fn take(lock: &std::sync::atomic::AtomicU64, me: u64) -> Result<(), u64> {
        use std::sync::atomic::Ordering;
        let mut holder = FREE;
        for _ in 0..SPINS {
            match lock.compare_exchange(FREE, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(h) => holder = h,
            }
            std::hint::spin_loop();
        }
        Err(holder)
    }

    /// The (rank, incarnation) a held lock names, if a member's.
    pub const fn holder(v: u64) -> Option<(u32, u32)> {
        let r = v & 0xFF;
        if v == FREE || v == DEVICE || r == 0 || r > super::MAX_RANKS as u64 {
            None
        } else {
            Some(((r - 1) as u32, (v >> 8) as u32))
        }
    }
}

pub fn stats_line(rank: u32) -> u64 {
    zone(rank) + zone::STATS
}

/// `STATE`: bit 0 up (a client that set up its completion ring), bits 1.. its incarnation.
pub mod state {
    pub const UP: u32 = 1;
    pub fn make(up: bool, incarnation: u32) -> u32 {
        (incarnation << 1) | up as u32
    }
    pub fn up(v: u32) -> bool {
        v & UP != 0
    }
    pub fn incarnation(v: u32) -> u32 {
        v >> 1
    }
}

/// Collective slots: two per rank, round `n` uses parity `n % 2`.
pub const COLL_SLOT: u64 = 4096;
/// In a slot: `seq` (u64, `n + 1`, stored last with release), `meta` (u64, [`coll_meta`]),
/// data from `COLL_DATA`.
pub const COLL_SEQ: u64 = 0;
pub const COLL_META: u64 = 8;
pub const COLL_DATA: u64 = 64;
/// The largest vector collective (bytes per member) done in the window.
pub const COLL_MAX: u64 = COLL_SLOT - COLL_DATA;

/// The largest reduce's or scan's vector in the rings (bytes per member), where a ring's
/// payload area holds four of them; never less than a slot's [`COLL_MAX`]. Longer vectors go
/// as pieces of this, each a collective of its own: 16 KiB up to 8 members, 8 KiB for 16,
/// 4032 bytes past. A piece costs each member its request and its look at the ring whatever
/// its length (4 KiB pieces of a 32 KiB reduce at P = 2: about half the root's instructions).
#[inline]
pub const fn ring_coll_max(size: u32) -> u64 {
    area_share(size, 4, COLL_MAX, RING_COLL_MAX)
}

/// A `parts`-th of a ring's payload area in a partition of `size` members, kept within
/// `[least, most]`.
#[inline]
const fn area_share(size: u32, parts: u64, least: u64, most: u64) -> u64 {
    let share = payload_area(ring_bytes(size)) / parts;
    if share < least {
        least
    } else if share > most {
        most
    } else {
        share
    }
}
pub const RING_COLL_MAX: u64 = 16 << 10;

pub fn coll_slot(parity: u64, rank: u32) -> u64 {
    zone(rank) + zone::COLL + (parity & 1) * COLL_SLOT
}

/// What every member of a round must agree on: kind, dtype, op, root and count.
pub fn coll_meta(kind: u8, dtype: u32, op: u32, root: u32, count: u64) -> u64 {
    (kind as u64)
        | ((dtype as u64 & 0xFF) << 8)
        | ((op as u64 & 0xFF) << 16)
        | ((root as u64 & 0xFF) << 24)
        | ((count & 0xFFFF_FFFF) << 32)
}

/// The first round of a collective too large for the slots (libni `large.rs`,
/// `fastpath.md` "Large allreduce in the window"): a window `ALLGATHER` of [`large::RECORD`]
/// u64 per member, each member's record from byte [`large::RECORDS`] of its control region.
pub mod large {
    /// Word 0 of every record; a member whose record says otherwise is in another protocol
    /// (every member fails with `collision`). "NIARSD" v3 (v2 gathered the records from byte
    /// 64, over the last word of the member's own).
    pub const MAGIC: u64 = 0x4e49_4152_5344_0003;
    /// u64 per record, at byte 0 of the member's control region: [`MAGIC`], the scratch
    /// region's key (0: none), the operation's [`super::coll_meta`], the scratch half's offset,
    /// the [`digest`] of the keys last agreed on (0: agree again), the data's key and offset
    /// (key 0: in the scratch half), the result's key and offset (key 0: in the scratch half,
    /// or nowhere the others reach).
    pub const RECORD: usize = 9;
    /// The byte of the control region from which every member's record is gathered, in rank
    /// order: apart from the member's own (72 bytes), on a cache line of its own.
    pub const RECORDS: usize = 128;

    /// The digest of every member's three keys (scratch, data, result, in rank order) that a
    /// member publishes when it still holds the mappings all agreed on: never 0 (but for no
    /// keys at all).
    pub fn digest(keys: &[u32]) -> u64 {
        if keys.is_empty() {
            return 0;
        }
        keys.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &k| {
            (h ^ k as u64).wrapping_mul(0x100_0000_01b3)
        }) | 1
    }
}

/// The ring's one cursor, `HEAD`, in the receiver's zone. What the sender published needs no
/// cursor: every slot carries its [`SEQ`].
pub fn ring_head(src: u32, dst: u32) -> u64 {
    zone(dst) + zone::HEADS + src as u64 * LINE
}
/// Every zone's room for its outgoing rings, shared by the partition's members.
pub const RINGS_BYTES: u64 = 1 << 20;
/// A ring's bytes, its slots and its payload area: the zone's rings shared out by the
/// partition's size rounded up to a power of two, at most 512 KiB: 512 KiB for 2 members,
/// 64 KiB for 16, 16 KiB for 64. Always a power of two slots, so free-running indices wrap
/// onto the same slot. A sender that fills its ring waits for the receiver; sharing a core
/// with it, that costs two context switches: with the 32 KiB rings of version 5 a window of
/// 64 4 KiB messages took eleven such rounds where Open MPI's shared memory takes one.
pub const fn ring_bytes(size: u32) -> u64 {
    let per = RINGS_BYTES / size.next_power_of_two() as u64;
    if per < MAX_RING_BYTES {
        per
    } else {
        MAX_RING_BYTES
    }
}
pub const MAX_RING_BYTES: u64 = 512 << 10;
pub const SLOT: u64 = 32;
/// Slots of one ring in a partition of `size` members: the first half of the ring's bytes;
/// the payload area, as many 32-byte pieces, is the second ([`payload_area`]).
pub const fn ring_slots(size: u32) -> u32 {
    (ring_bytes(size) / (2 * SLOT)) as u32
}

/// Where a ring's payload area starts, from the ring, given its [`ring_bytes`]. The message
/// in slot `i` keeps its payload (when longer than [`INLINE`]) in the area from byte
/// `(i mod N)·SLOT` on, in one piece that goes on at the area's start past its end (N =
/// [`ring_slots`]): the slots `i..i + slots_for(len)` the message takes cover exactly
/// those bytes, so the ring's one `HEAD` frees both, and the receiver finds the payload
/// from its own `HEAD`, with no offset of the sender's to check.
pub const fn payload_area(ring_bytes: u64) -> u64 {
    ring_bytes / 2
}

/// Ring (src → dst) of a partition of `size` members, in the source's zone.
pub const fn ring_data(src: u32, dst: u32, size: u32) -> u64 {
    ring_at(src, dst, ring_bytes(size))
}

/// [`ring_data`] for a caller that keeps the partition's [`ring_bytes`] (no division).
pub const fn ring_at(src: u32, dst: u32, ring_bytes: u64) -> u64 {
    zone(src) + zone::RINGS + dst as u64 * ring_bytes
}

/// Message kinds in a ring's header slot.
pub mod kind {
    /// The payload follows in the ring.
    pub const EAGER: u8 = 1;
    /// Ready to send: the payload waits in the sender's memory for a fabric receive of
    /// tag `id` from the sender (`fastpath.md`: rendezvous).
    pub const RTS: u8 = 2;
    /// An active message (MLINK ROP): `tag` names the handler, the payload (at most
    /// [`crate::fastpath::AM_MAX_PAYLOAD`]) follows in the ring as an eager one does.
    pub const AM: u8 = 3;
    /// An eager message longer than [`super::EAGER_MAX`] (at most [`super::big_max`] of the
    /// partition's size): `len` 0, the length in `full` (@16), the payload in the payload
    /// area as an eager one's.
    pub const BIG: u8 = 4;
    /// Ready to be read: a rendezvous whose payload the receiver copies itself out of the
    /// sender's exported region (`Ni::alloc`'s), as a `get` would. `id` and `full` as a
    /// `RTS`'s; `len` is [`super::GET_LEN`], the [`super::GetFrom`] in the payload area.
    /// The receiver answers with a `FIN` of the same `id`.
    pub const GET: u8 = 5;
    /// The receiver's answer to a `GET` (in its ring back to the sender): `tag` the `GET`'s
    /// `id`, @16 a [`super::fin`] status — read (the send is done), or "use the fabric" (it
    /// could not map the region: the sender posts the fabric `SEND` of tag `id` a `RTS`
    /// would have, and the receiver its `RECV`). `len` 0.
    pub const FIN: u8 = 6;
    /// A member's vector in a broadcast, reduce or scan of at most [`super::COLL_MAX`]
    /// bytes (`fastpath.md`, "Collectives in the rings"): `tag` the collective's
    /// [`super::coll_meta`], the vector as an eager message's payload. Its sender is done
    /// once it sent; its receiver takes the next from that sender when it calls the
    /// collective. `tag` [`super::COLL_FAILED`], `len` 8: the scan this member's prefix
    /// would have come in failed here, with the status as the payload (u64). With
    /// [`super::coll_id::CTL`] in `tag`: a broadcast's words ([`super::coll_id`]).
    pub const COLL: u8 = 7;
}

/// A `COLL`'s `id`: its role in the low byte, and in a broadcast read where the root keeps
/// it, the root's number for that broadcast above (`fastpath.md`, "Collectives in the
/// rings"). A `COLL`'s header slot has no room for an id (its payload's first 16 bytes are
/// there): a `COLL` that has one sets [`coll_id::CTL`] in its `tag` and carries the id as its
/// payload's first 8 bytes (little-endian), the rest after.
pub mod coll_id {
    /// In a `COLL`'s `tag` (over the collective's `meta`, whose low byte, the collective's
    /// kind, never has it): the payload starts with the id. [`super::COLL_FAILED`] has it.
    pub const CTL: u64 = 0x80;
    /// A vector (or a slot-sized piece of one), as the payload.
    pub const VECTOR: u64 = 0;
    /// From a broadcast's root: read the vector yourself, in my region, at the
    /// [`super::GetFrom`] in the payload ([`super::GET_LEN`] bytes).
    pub const RNDV: u64 = 1;
    /// To the root: read (or not wanted: a member in another collective); the root may
    /// return.
    pub const ACK: u64 = 2;
    /// To the root: I cannot map your region (a guest): send me the vector in pieces.
    pub const NOMAP: u64 = 3;

    pub const fn make(role: u64, seq: u64) -> u64 {
        role | seq << 8
    }
    pub const fn role(id: u64) -> u64 {
        id & 0xFF
    }
    pub const fn seq(id: u64) -> u64 {
        id >> 8
    }
}

/// A `COLL`'s `tag` in place of a scan's prefix that will not come: its sender's scan
/// failed (its status as the id, [`coll_id::CTL`]), and so does the next member's. No
/// [`coll_meta`] is this (kind 0xFF).
pub const COLL_FAILED: u64 = 0xFF;

/// A `FIN`'s status (@16).
pub mod fin {
    /// The receiver copied the payload: the sender's send is done.
    pub const READ: u64 = 0;
    /// The receiver could not read the region: the payload goes through the fabric, as a
    /// `RTS`'s (fabric tag = the `GET`'s `id`).
    pub const FABRIC: u64 = 1;
}

/// Payload bytes of a `kind::GET` (in the payload area: more than [`INLINE`]).
pub const GET_LEN: u64 = 32;

/// Where a `kind::GET`'s payload lies: region `key` of the sender, from `offset`. In the
/// payload area: `key` u32 @0, zero u32 @4, `offset` u64 @8, zeros to [`GET_LEN`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetFrom {
    pub key: u32,
    pub offset: u64,
}

impl GetFrom {
    pub fn encode(&self) -> [u8; GET_LEN as usize] {
        let mut b = [0u8; GET_LEN as usize];
        b[..4].copy_from_slice(&self.key.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    /// `None` if no honest sender writes it (the reserved bytes not zero).
    pub fn decode(b: &[u8; GET_LEN as usize]) -> Option<GetFrom> {
        if b[4..8].iter().chain(&b[16..]).any(|&x| x != 0) {
            return None;
        }
        Some(GetFrom {
            key: u32::from_le_bytes(b[..4].try_into().unwrap()),
            offset: u64::from_le_bytes(b[8..16].try_into().unwrap()),
        })
    }
}

/// The largest payload carried in the ring in every partition (`kind::EAGER`).
pub const EAGER_MAX: u64 = 4096;
/// The largest payload a `kind::BIG` message ever carries; [`big_max`] bounds it by the ring.
/// A `BIG` goes only into an empty ring (a stream's later messages are rendezvous, whose one
/// copy beats the ring's two there), so it need only win the half round trip: at 32 KiB
/// 5.1 µs against the rendezvous's 8.7–9.7, at 64 KiB no more (9.8–10.1 against 8.9–11;
/// `tests/bench/README.md`, stop 41).
pub const BIG_MAX: u64 = 32 << 10;

/// The largest eager payload in a partition of `size` members: up to [`BIG_MAX`] where an
/// eighth of the ring's payload area holds it (2 members: 32 KiB; 3–4: 16; 5–8: 8; 9 and
/// more: [`EAGER_MAX`]). Between 4 KiB and this a message from memory the receiver cannot
/// read itself (`kind::GET` needs an exported region) goes as one `kind::BIG` in the ring
/// (two copies, no device thread: 8 KiB half round trip 8.5 → 1.3 µs) instead of a
/// rendezvous through the fabric. A receiver refuses (counts, skips) a `BIG` beyond it.
#[inline]
pub const fn big_max(size: u32) -> u64 {
    area_share(size, 8, EAGER_MAX, BIG_MAX)
}

/// A message's header slot starts with `SEQ` (u32): the slot's free-running index in the ring
/// plus one ([`seq_for`]). The sender stores the message's payload, then its header slot's
/// other bytes, then the header's `SEQ` with release; the receiver polls the `SEQ` of the slot
/// at its `HEAD`, so a message costs the receiver one cache line, not a cursor and then the
/// line. Only headers are ever written in the slots (payloads go to the [`payload_area`]),
/// so what an earlier lap left in a slot is an older `SEQ`, never the one the receiver
/// waits for, whatever the payloads were.
pub const SEQ: u64 = 0;
/// Header slot: `SEQ` u32 @0, `kind` u8 @4, a zero byte @5, `len` u16 @6 (payload bytes in the
/// ring), `tag` u64 @8, then the payload if it is at most [`INLINE`] bytes (a `RTS`: `id` u64
/// @16, `full` u64 @24).
pub const HEADER: u64 = 16;
pub const INLINE: u64 = SLOT - HEADER;
/// Header byte offsets, for a reader that checks a header without [`Header::decode`].
pub const KIND_AT: usize = 4;
pub const PAD_AT: usize = 5;
pub const LEN_AT: usize = 6;
pub const TAG_AT: usize = 8;

/// The `SEQ` of the slot with free-running index `index`.
pub const fn seq_for(index: u32) -> u32 {
    index.wrapping_add(1)
}

/// Up to [`INLINE`] bytes as the header slot's two little-endian payload words, zero past
/// their end: loads that may overlap, never a copy through memory (with the `memcpy` call an
/// 8-byte send cost ≈ 30 of its ≈ 490 instructions more).
#[inline]
pub fn inline_words(b: &[u8]) -> (u64, u64) {
    let n = b.len();
    debug_assert!(n <= INLINE as usize);
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let half = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as u64;
    match n {
        16.. => (word(0), word(8)),
        // Bytes 8..n are the top n - 8 of the word that ends at n.
        9..=15 => (word(0), word(n - 8) >> ((16 - n) * 8)),
        8 => (word(0), 0),
        // The two halves overlap where n < 8; the bytes they share are the same.
        4..=7 => (half(0) | (half(n - 4) << ((n - 4) * 8)), 0),
        _ => (b.iter().rev().fold(0, |w, &x| (w << 8) | x as u64), 0),
    }
}

/// A ring message's header: `kind`, `len` (payload bytes in the ring), `tag`, and for a
/// `RTS` or a `GET` the fabric tag `id` of its payload and its length `full` (an eager
/// message's `full` is its `len`). A `FIN` carries the `GET`'s `id` in `tag` and its
/// [`fin`] status in `id`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub len: u32,
    pub tag: u64,
    pub id: u64,
    pub full: u64,
}

impl Header {
    /// The header slot as the sender stores it, `SEQ` left 0 (stored last, on its own), with
    /// `inline`, an eager payload of at most [`INLINE`] bytes (a longer one goes to the
    /// [`payload_area`] and is not passed).
    pub fn encode(&self, inline: &[u8]) -> [u8; SLOT as usize] {
        let mut b = [0u8; SLOT as usize];
        for (i, w) in self.encode_words(inline).iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// [`Header::encode`] as the slot's four little-endian u64 words (a sender stores them
    /// as words, with no byte buffer in between; `SEQ`, the low half of word 0, is 0).
    #[inline]
    pub fn encode_words(&self, inline: &[u8]) -> [u64; 4] {
        let len = if self.kind == kind::BIG {
            0
        } else {
            self.len as u16
        };
        let w0 = ((self.kind as u64) << 32) | ((len as u64) << 48);
        let (w2, w3) = if self.kind == kind::RTS || self.kind == kind::GET {
            (self.id, self.full)
        } else if self.kind == kind::FIN {
            (self.id, 0)
        } else if self.kind == kind::BIG {
            (self.full, 0)
        } else {
            inline_words(&inline[..inline.len().min(INLINE as usize)])
        };
        [w0, self.tag, w2, w3]
    }

    /// Decode and check a header slot a peer wrote (`SEQ` aside): `None` if no honest sender
    /// writes it.
    pub fn decode(b: &[u8; SLOT as usize]) -> Option<Header> {
        let kind = b[KIND_AT];
        let len = u16::from_le_bytes([b[LEN_AT], b[LEN_AT + 1]]) as u32;
        let tag = u64::from_le_bytes(b[TAG_AT..TAG_AT + 8].try_into().unwrap());
        let pad = b[PAD_AT];
        let h = match kind {
            kind::EAGER | kind::AM | kind::COLL if len as u64 <= max_len(kind) && pad == 0 => {
                Header {
                    kind,
                    len,
                    tag,
                    id: 0,
                    full: len as u64,
                }
            }
            // A `RTS` carries no ring payload, a `GET` exactly its `GetFrom`.
            kind::RTS | kind::GET if len as u64 == max_len(kind) && pad == 0 => Header {
                kind,
                len,
                tag,
                id: u64::from_le_bytes(b[16..24].try_into().unwrap()),
                full: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            },
            kind::FIN if len == 0 && pad == 0 => {
                let status = u64::from_le_bytes(b[16..24].try_into().unwrap());
                let rest = u64::from_le_bytes(b[24..32].try_into().unwrap());
                if status > fin::FABRIC || rest != 0 {
                    return None;
                }
                Header {
                    kind,
                    len,
                    tag,
                    id: status,
                    full: 0,
                }
            }
            kind::BIG if len == 0 && pad == 0 => {
                let full = u64::from_le_bytes(b[16..24].try_into().unwrap());
                if full <= EAGER_MAX || full > BIG_MAX {
                    return None;
                }
                Header {
                    kind,
                    len: full as u32,
                    tag,
                    id: 0,
                    full,
                }
            }
            _ => return None,
        };
        let rendezvous = h.kind == kind::RTS || h.kind == kind::GET;
        (!rendezvous || h.full <= crate::fastpath::MAX_TRANSFER).then_some(h)
    }

    /// Ring slots the message takes, header included.
    pub fn slots(&self) -> u32 {
        slots_for(self.len as u64)
    }
}

/// The most ring payload a message of `kind` carries (a `GET`: exactly that).
pub const fn max_len(kind: u8) -> u64 {
    match kind {
        kind::AM => crate::fastpath::AM_MAX_PAYLOAD,
        kind::EAGER => EAGER_MAX,
        kind::BIG => BIG_MAX,
        kind::GET => GET_LEN,
        kind::COLL => RING_COLL_MAX,
        _ => 0,
    }
}

/// Ring slots a message of `len` payload bytes takes: one with its payload, or the payload
/// area's 32-byte pieces it covers.
/// (`INLINE` < `SLOT`, so that is `⌈len / 32⌉`, at least 1.)
#[inline]
pub const fn slots_for(len: u64) -> u32 {
    let pieces = len.div_ceil(SLOT) as u32;
    if pieces > 1 {
        pieces
    } else {
        1
    }
}

// The layout fits, does not overlap, and puts every writer on pages of its own, checked when
// the crate compiles.
const _: () = {
    const PAGE: u64 = 4096;
    assert!(hdr::COLL_TIMEOUT_MS + 4 <= STATE);
    assert!(STATE + MAX_RANKS as u64 * LINE <= DEVICE_PAGE + DEVICE_PAGE_SIZE);
    assert!(
        DEVICE_PAGE_SIZE.is_multiple_of(PAGE)
            && ZONES.is_multiple_of(PAGE)
            && ZONE_SIZE.is_multiple_of(PAGE)
    );
    assert!(zone::SLEEPING + 4 <= zone::CPU && zone::CPU + 4 <= zone::STATS);
    assert!(zone::STATS + stats::LEN <= zone::MQ_STATS);
    assert!(zone::MQ_STATS + MAX_RANKS as u64 * MQ_STATS_LEN <= zone::HEADS);
    assert!(stats::LARGE_ALLREDUCES_IN_PLACE + 8 <= stats::LEN);
    assert!(stats::LARGE_PUSHED + 8 <= stats::LEN);
    assert!(stats::READ_BYTES + 8 <= stats::LEN);
    assert!(stats::GET_BYTES + 8 <= stats::LEN);
    assert!(REGIONS + 4 <= REACH && REACH.is_multiple_of(8) && REACH - STATE + 8 <= LINE);
    assert!(zone::HEADS + MAX_RANKS as u64 * LINE <= zone::COLL);
    assert!(zone::COLL + 2 * COLL_SLOT <= zone::RINGS);
    assert!(zone(MAX_RANKS) <= WINDOW_SIZE);
    assert!(WINDOW_OFFSET + WINDOW_SIZE <= crate::pci::BAR4_SIZE);
    assert!(ZONE_SIZE <= crate::pci::BAR3_SIZE);
    assert!(MAX_RANKS <= 64, "REACH is a 64-bit mask");
    assert!(MAX_RANKS < 0xFF, "mq_lock names rank + 1 in a byte");
    assert!(MAX_RANKS <= 64, "peer_region names the rank in 6 bits");
    assert!(ring_bytes(MAX_RANKS) * MAX_RANKS as u64 <= RINGS_BYTES);
    assert!(ring_bytes(1) == MAX_RING_BYTES && ring_bytes(2) == MAX_RING_BYTES);
    assert!(EAGER_MAX <= u16::MAX as u64, "len is a u16");
    assert!(crate::fastpath::AM_MAX_PAYLOAD <= EAGER_MAX);
    assert!(stats::AMS_TAKEN + 8 <= stats::LEN);
    // The smallest ring still holds a largest eager message with room to spare.
    assert!((slots_for(EAGER_MAX) as u64) < ring_slots(MAX_RANKS) as u64);
    assert!(big_max(2) == BIG_MAX && big_max(MAX_RANKS) == EAGER_MAX);
    // A ring collective's vector: 16 KiB in small partitions, a slot's in the largest, and
    // its length fits the header's u16 `len`.
    assert!(ring_coll_max(2) == RING_COLL_MAX && ring_coll_max(MAX_RANKS) == COLL_MAX);
    assert!(RING_COLL_MAX <= u16::MAX as u64);
    assert!(
        BIG_MAX <= u32::MAX as u64,
        "a BIG's length is kept in Header::len"
    );
    assert!(payload_area(ring_bytes(MAX_RANKS)) == ring_slots(MAX_RANKS) as u64 * SLOT);
    assert!(
        INLINE < SLOT,
        "slots_for: a payload that fits the header is one piece or none"
    );
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to a header slot's inline room: the words hold the bytes in order,
    /// zero after them.
    #[test]
    fn inline_words_hold_the_bytes_and_zeros_after() {
        let src: Vec<u8> = (1..=INLINE as u8).map(|x| x.wrapping_mul(37) | 1).collect();
        for n in 0..=INLINE as usize {
            let (lo, hi) = inline_words(&src[..n]);
            let mut want = [0u8; INLINE as usize];
            want[..n].copy_from_slice(&src[..n]);
            let mut got = [0u8; INLINE as usize];
            got[..8].copy_from_slice(&lo.to_le_bytes());
            got[8..].copy_from_slice(&hi.to_le_bytes());
            assert_eq!(got, want, "{n} bytes");
        }
    }

    #[test]
    fn headers_round_trip_and_lies_are_refused() {
        let h = Header {
            kind: kind::EAGER,
            len: 100,
            tag: 7,
            id: 0,
            full: 100,
        };
        let payload = [7u8; 100];
        let b = h.encode(&payload[..INLINE as usize]);
        assert_eq!(Header::decode(&b), Some(h));
        assert_eq!(&b[HEADER as usize..], &payload[..INLINE as usize]);
        // Beyond 16 bytes the payload covers 32-byte pieces of the area: 100 → 4.
        assert_eq!(h.slots(), 4);
        assert_eq!(slots_for(0), 1);
        assert_eq!(slots_for(16), 1);
        assert_eq!(slots_for(17), 1);
        assert_eq!(slots_for(32), 1);
        assert_eq!(slots_for(33), 2);
        assert_eq!(slots_for(EAGER_MAX), 128);
        let mut padded = b;
        padded[PAD_AT] = 1;
        assert_eq!(Header::decode(&padded), None);
        let rts = Header {
            kind: kind::RTS,
            len: 0,
            tag: 9,
            id: 3,
            full: 1 << 20,
        };
        assert_eq!(Header::decode(&rts.encode(&[])), Some(rts));
        let too_long = Header {
            len: EAGER_MAX as u32 + 1,
            full: EAGER_MAX + 1,
            ..h
        };
        assert_eq!(Header::decode(&too_long.encode(&[])), None);
        let mut rts_with_len = rts.encode(&[]);
        rts_with_len[6] = 1;
        assert_eq!(Header::decode(&rts_with_len), None);
        let huge = Header {
            full: crate::fastpath::MAX_TRANSFER + 1,
            ..rts
        };
        assert_eq!(Header::decode(&huge.encode(&[])), None);
        let am = Header {
            kind: kind::AM,
            len: crate::fastpath::AM_MAX_PAYLOAD as u32,
            tag: 7,
            id: 0,
            full: crate::fastpath::AM_MAX_PAYLOAD,
        };
        assert_eq!(Header::decode(&am.encode(&[1; 48])), Some(am));
        let long_am = Header {
            len: am.len + 1,
            full: am.full + 1,
            ..am
        };
        assert_eq!(Header::decode(&long_am.encode(&[])), None);
        // A reduce's vector: up to the largest the rings of any partition take.
        let coll = Header {
            kind: kind::COLL,
            len: RING_COLL_MAX as u32,
            tag: coll_meta(crate::fastpath::coll::REDUCE, 3, 0, 1, RING_COLL_MAX / 8),
            id: 0,
            full: RING_COLL_MAX,
        };
        assert_eq!(Header::decode(&coll.encode(&[])), Some(coll));
        let long_coll = Header {
            len: coll.len + 1,
            full: coll.full + 1,
            ..coll
        };
        assert_eq!(Header::decode(&long_coll.encode(&[])), None);
        // A BIG: its length in `full`, only between EAGER_MAX and BIG_MAX, and `len` 0.
        let big = Header {
            kind: kind::BIG,
            len: 16000,
            tag: 9,
            id: 0,
            full: 16000,
        };
        let b = big.encode(&[]);
        assert_eq!(u16::from_le_bytes([b[LEN_AT], b[LEN_AT + 1]]), 0);
        assert_eq!(Header::decode(&b), Some(big));
        assert_eq!(big.slots(), 500);
        for full in [0, 16, EAGER_MAX, BIG_MAX + 1, u64::MAX] {
            let lie = Header { full, ..big };
            assert_eq!(Header::decode(&lie.encode(&[])), None, "BIG of {full}");
        }
        let mut with_len = big.encode(&[]);
        with_len[LEN_AT] = 1;
        assert_eq!(Header::decode(&with_len), None);
        assert_eq!(
            (big_max(2), big_max(4), big_max(5), big_max(8), big_max(9)),
            (BIG_MAX, 16 << 10, 8 << 10, 8 << 10, EAGER_MAX)
        );
        let mut junk = [0xFFu8; SLOT as usize];
        assert_eq!(Header::decode(&junk), None);
        junk[4] = kind::RTS;
        assert_eq!(Header::decode(&junk), None);
    }

    #[test]
    fn every_word_a_rank_writes_is_in_its_own_zone() {
        for r in 0..MAX_RANKS {
            let mine = |off: u64, len: u64| {
                assert_eq!(owner(off), Some(r), "{off:#x}");
                assert_eq!(owner(off + len - 1), Some(r), "{off:#x}+{len}");
            };
            mine(sleeping(r), 4);
            mine(cpu_word(r), 4);
            mine(rndv_ended_word(r), 8);
            mine(stats_line(r), stats::LEN);
            for p in 0..MAX_RANKS {
                mine(mq_stats(r, p), MQ_STATS_LEN);
            }
            assert_eq!(owner(regions_word(r)), None);
            let i = peer_region(r, (1 << 24) - 1).unwrap();
            assert_eq!(peer_region_of(i), Some((r, (1 << 24) - 1)));
            assert!(i >= PEER_REGIONS);
            assert_eq!(peer_region_of(ISOLATED_REGIONS), None);
            mine(coll_slot(0, r), COLL_SLOT);
            mine(coll_slot(1, r), COLL_SLOT);
            for p in 0..MAX_RANKS {
                mine(ring_head(p, r), 4);
            }
            for size in (r + 1..=MAX_RANKS).filter(|n| [1, 2, 16, 17, 33, 64].contains(n)) {
                for p in 0..size {
                    mine(ring_data(r, p, size), ring_bytes(size));
                }
            }
            assert_eq!(owner(state_word(r)), None);
            assert_eq!(owner(reach_word(r)), None);
        }
        assert_eq!(owner(hdr::GEN), None);
        assert_eq!(owner(zone(MAX_RANKS)), None);
        assert_eq!(zone(1) - zone(0), ZONE_SIZE);
        assert_eq!(zone_region(0), 10);
    }

    #[test]
    fn rings_halve_as_partitions_double() {
        let sizes = [
            (2, 512 << 10),
            (3, 256 << 10),
            (4, 256 << 10),
            (8, 128 << 10),
            (16, 64 << 10),
            (17, 32 << 10),
            (32, 32 << 10),
        ];
        for (size, bytes) in sizes.into_iter().chain([(33, 16 << 10), (64, 16 << 10)]) {
            assert_eq!(ring_bytes(size), bytes, "{size} members");
            assert!(ring_slots(size).is_power_of_two());
            assert_eq!(ring_slots(size) as u64 * SLOT, payload_area(bytes));
            // The last ring ends inside the zone.
            assert!(ring_data(0, size - 1, size) + bytes <= zone(1));
        }
    }

    #[test]
    fn lock_holders_name_a_member_or_nobody() {
        assert_eq!(mq_lock::holder(mq_lock::member(0, 0)), Some((0, 0)));
        assert_eq!(
            mq_lock::holder(mq_lock::member(MAX_RANKS - 1, u32::MAX)),
            Some((MAX_RANKS - 1, u32::MAX))
        );
        assert_ne!(mq_lock::member(0, 0), mq_lock::FREE);
        assert_eq!(mq_lock::holder(mq_lock::FREE), None);
        assert_eq!(mq_lock::holder(mq_lock::DEVICE), None);
        assert_eq!(mq_lock::holder(0x100), None);
        assert_eq!(mq_lock::holder(MAX_RANKS as u64 + 1), None);
    }

    #[test]
    fn state_words() {
        let s = state::make(true, 5);
        assert!(state::up(s));
        assert_eq!(state::incarnation(s), 5);
        assert!(!state::up(state::make(false, 5)));
    }
}
