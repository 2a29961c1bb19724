//! Completion queues (`fi_cq_open`): what the engines finished, in the format the
//! application chose, successes and errors in one order.
//!
//! Reading one progresses every endpoint bound to it first (`FI_PROGRESS_MANUAL`: the
//! application's reads are what move the NI's work along). An empty queue reads `-FI_EAGAIN`,
//! never 0; an error at the head reads `-FI_EAVAIL` until `fi_cq_readerr` takes it.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ni::NiLock;

use crate::engine::Engine;
use crate::ffi::errno::*;
use crate::ffi::*;
use crate::{container, guard, guard_ssize, Av};

/// One completion, in every format's fields.
#[derive(Clone, Copy, Debug, Default)]
pub struct Entry {
    pub context: usize,
    pub flags: u64,
    pub len: usize,
    pub buf: usize,
    pub data: u64,
    pub tag: u64,
    /// The peer's rank (for `fi_cq_readfrom`).
    pub src: u32,
}

#[derive(Debug)]
enum Item {
    Ok(Entry),
    Err {
        e: Entry,
        olen: usize,
        err: c_int,
        prov_errno: c_int,
    },
}

pub struct Cq {
    format: c_int,
    items: NiLock<VecDeque<Item>>,
    pub bound: Bound,
    /// The AV of the endpoint bound to it, for `fi_cq_readfrom`.
    pub av: Mutex<Option<Arc<Av>>>,
}

/// The endpoints a CQ or counter moves along when it is read (`FI_PROGRESS_MANUAL`), and
/// how long reads have found nothing.
#[derive(Default)]
pub struct Bound {
    /// Under one lock, which a read takes once ([`Bound::poll`]): each lock is a call and a
    /// dozen instructions of an empty read's few hundred.
    state: NiLock<BoundState>,
    /// The NI of the first bound endpoint, for `idle` (one NI per process).
    ni: std::sync::OnceLock<Weak<ni::Ni>>,
}

#[derive(Default)]
struct BoundState {
    /// Engines of the endpoints bound (progressed by reads), held until the endpoint closes
    /// (`unbind`): a weak reference would cost every read two atomic read-modify-writes to
    /// upgrade and drop. A read locks each while it holds this: an endpoint binds and
    /// unbinds with its engine unlocked (`fi_ep_bind`, `fi_close`), so the two are always
    /// taken in this order.
    engines: Vec<Arc<NiLock<Engine>>>,
    /// How long reads have found nothing (`note`).
    idle: Idle,
}

/// How long an application may poll an empty CQ before each further empty read gives the
/// CPU away: a window message from a peer on another core arrives within this, a rendezvous
/// payload needs the device's poller to run.
const SPIN: Duration = Duration::from_micros(2);

impl Bound {
    /// Called with the engine unlocked (`fi_ep_bind`): a read locks this, then the engine.
    pub fn bind(&self, engine: &Arc<NiLock<Engine>>, ni: &Arc<ni::Ni>) {
        let g = &mut self.state.lock().engines;
        if !g.iter().any(|e| Arc::ptr_eq(e, engine)) {
            g.push(engine.clone());
        }
        let _ = self.ni.set(Arc::downgrade(ni));
    }

    /// The endpoint of `engine` closes: reads no longer progress it (and the engine, which
    /// holds this CQ or counter, is freed with its endpoint). Called with it unlocked.
    pub fn unbind(&self, engine: &Arc<NiLock<Engine>>) {
        self.state
            .lock()
            .engines
            .retain(|e| !Arc::ptr_eq(e, engine));
    }

    pub fn progress(&self) {
        for e in self.state.lock().engines.iter() {
            e.lock().progress();
        }
    }

    /// A read found something (`empty` false), or nothing: then, past `SPIN`, give the CPU
    /// away as libni's own waits do, so the device's poller (rendezvous payloads, the
    /// fabric path) and a peer on the same core run. Applications poll an empty CQ in a
    /// tight loop (Open MPI's progress does).
    pub fn note(&self, empty: bool) {
        let give = self
            .state
            .lock()
            .idle
            .note(empty, Instant::now, || self.shared());
        if give {
            self.give_way();
        }
    }

    /// [`Bound::progress`], then `read` (which says whether it found nothing, if that is
    /// to be noted), then [`Bound::note`], under one lock; when the note says so, the CPU
    /// is given away after it and the three run once more.
    /// Locks are taken in one order: this, an engine, a CQ's entries (`read`'s, and those
    /// an engine's progress pushes to), the NI.
    ///
    /// A read that gave the CPU away looks once more before it answers: what it found before
    /// the yield is stale after it (a peer on this cpu ran meanwhile), and an application
    /// that yields on an empty read itself (Open MPI with `mpi_yield_when_idle`, which
    /// `mpirun` sets when oversubscribed) would give it away a second time for nothing —
    /// two context switches a turn where one does (8 B MPI ping-pong, both ranks on one
    /// cpu: 1.9 `sched_yield`s a half round trip, 3.9 µs).
    pub fn poll<R>(&self, mut read: impl FnMut() -> (R, Option<bool>)) -> R {
        let (r, give) = self.look(&mut read);
        if !give {
            return r;
        }
        self.give_way();
        // One yield a read: if this look finds nothing too, the next read gives way.
        self.look(&mut read).0
    }

    /// [`Bound::poll`]'s progress, read and note, under one lock: the read's result and
    /// whether to give the CPU away.
    fn look<R>(&self, read: &mut impl FnMut() -> (R, Option<bool>)) -> (R, bool) {
        let mut g = self.state.lock();
        for e in g.engines.iter() {
            e.lock().progress();
        }
        let (r, empty) = read();
        let give = empty.is_some_and(|empty| g.idle.note(empty, Instant::now, || self.shared()));
        (r, give)
    }

    /// Whether a peer waits on this cpu (`Ni::cpu_shared`).
    fn shared(&self) -> bool {
        self.ni
            .get()
            .and_then(Weak::upgrade)
            .is_some_and(|n| n.cpu_shared())
    }

    fn give_way(&self) {
        if let Some(ni) = self.ni.get().and_then(Weak::upgrade) {
            ni.idle();
        }
    }
}

/// A run of empty reads, and when it is past [`SPIN`]. A clock read (25 ns here) on every
/// empty read was a fifth of an MPI 8-byte half round trip between two cores (0.46-0.52 µs,
/// 0.38 without): the clock is read when a run starts and then only at the read that should
/// reach `SPIN`, by how many reads took `SPIN` in the last run that got there.
///
/// Where a peer waits on this cpu (`Ni::cpu_shared`, asked at a run's second empty read),
/// spinning only delays it: the run is past `SPIN` there and then. Not at the first empty
/// read: an MPI send polls once on its way out, before its receive waits (yielding there
/// too made both ranks on one cpu slower, 4.2 -> 5.6 µs a half round trip; from the second,
/// 2.4).
#[derive(Default)]
struct Idle {
    /// When the run started.
    since: Option<Instant>,
    /// Empty reads in it after the first.
    reads: u32,
    /// The read at which to look at the clock next.
    look_at: u32,
    /// Past `SPIN`: every further empty read gives the CPU away.
    past: bool,
    /// Reads that took `SPIN` in the last run that lasted so long.
    per_spin: u32,
}

impl Idle {
    /// A read found something (`empty` false) or nothing: whether to give the CPU away.
    /// `shared`: whether a peer waits on this cpu.
    fn note(
        &mut self,
        empty: bool,
        now: impl FnOnce() -> Instant,
        shared: impl FnOnce() -> bool,
    ) -> bool {
        if !empty {
            self.since = None;
            return false;
        }
        let Some(since) = self.since else {
            self.since = Some(now());
            (self.reads, self.past) = (0, false);
            // A little early rather than late: the look then goes read by read.
            self.look_at = (self.per_spin - self.per_spin / 8).max(1);
            return false;
        };
        if self.past {
            return true;
        }
        self.reads += 1;
        if self.reads == 1 && shared() {
            self.past = true;
            return true;
        }
        if self.reads < self.look_at {
            return false;
        }
        let took = now().saturating_duration_since(since);
        if took >= SPIN {
            (self.past, self.per_spin) = (true, self.reads);
            return true;
        }
        // Reads so far took `took`: as many again at most (a run whose reads slowed, the
        // process preempted, overshoots `SPIN` by no more than twice).
        let left = (SPIN - took).as_nanos() * self.reads as u128 / took.as_nanos().max(1);
        self.look_at = self.reads + (left as u32).clamp(1, self.reads);
        false
    }
}

impl Cq {
    pub fn push(&self, e: Entry) {
        self.items.lock().push_back(Item::Ok(e));
    }

    pub fn push_err(&self, e: Entry, olen: usize, err: c_int, prov_errno: c_int) {
        self.items.lock().push_back(Item::Err {
            e,
            olen,
            err,
            prov_errno,
        });
    }

    fn entry_size(&self) -> usize {
        match self.format {
            FI_CQ_FORMAT_CONTEXT => 8,
            FI_CQ_FORMAT_MSG => 24,
            FI_CQ_FORMAT_DATA => 40,
            _ => std::mem::size_of::<fi_cq_tagged_entry>(),
        }
    }

    /// Copy up to `count` successes into `buf` (and their sources into `src`).
    ///
    /// # Safety
    /// `buf` holds `count` entries of this CQ's format; `src`, if not null, `count` addresses.
    unsafe fn read(
        &self,
        buf: *mut c_void,
        count: usize,
        src: *mut fi_addr_t,
        av: Option<&Av>,
    ) -> isize {
        self.bound.poll(|| {
            let mut items = self.items.lock();
            let size = self.entry_size();
            let mut n = 0;
            while n < count {
                match items.front() {
                    Some(Item::Ok(e)) => {
                        let t = fi_cq_tagged_entry {
                            op_context: e.context as *mut c_void,
                            flags: e.flags,
                            len: e.len,
                            buf: e.buf as *mut c_void,
                            data: e.data,
                            tag: e.tag,
                        };
                        // SAFETY: entry `n` of the caller's array has `size` bytes, a prefix
                        // of the tagged entry in every format.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                &t as *const _ as *const u8,
                                (buf as *mut u8).add(n * size),
                                size,
                            );
                            if !src.is_null() {
                                *src.add(n) = av.map_or(e.src as u64, |a| a.fi_addr_of(e.src));
                            }
                        }
                        items.pop_front();
                        n += 1;
                    }
                    Some(Item::Err { .. }) if n == 0 => return (-(FI_EAVAIL as isize), None),
                    _ => break,
                }
            }
            if n == 0 {
                (-(FI_EAGAIN as isize), Some(true))
            } else {
                (n as isize, Some(false))
            }
        })
    }

    /// # Safety
    /// `out` is a writable `fi_cq_err_entry`.
    unsafe fn readerr(&self, out: *mut fi_cq_err_entry) -> isize {
        let mut items = self.items.lock();
        let Some(Item::Err { .. }) = items.front() else {
            return -(FI_EAGAIN as isize);
        };
        let Some(Item::Err {
            e,
            olen,
            err,
            prov_errno,
        }) = items.pop_front()
        else {
            unreachable!()
        };
        // SAFETY: the caller passes a writable entry; its err_data fields are the
        // application's (1.5+: a buffer it supplies) and we have none to give.
        unsafe {
            let o = &mut *out;
            o.op_context = e.context as *mut c_void;
            o.flags = e.flags;
            o.len = e.len;
            o.buf = e.buf as *mut c_void;
            o.data = e.data;
            o.tag = e.tag;
            o.olen = olen;
            o.err = err;
            o.prov_errno = prov_errno;
            o.err_data_size = 0;
        }
        1
    }
}

#[repr(C)]
pub struct CqFid {
    pub fid: fid_cq,
    pub cq: Arc<Cq>,
}

static CQ_FI_OPS: fi_ops = crate::stub::fid_ops!(cq_close, crate::stub::bind, cq_control);

static CQ_OPS: fi_ops_cq = fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

/// `fi_cq_open`.
///
/// # Safety
/// `attr` is the application's attribute block or null; `out` is writable.
pub unsafe fn open(attr: *mut fi_cq_attr, out: *mut *mut fid_cq, context: *mut c_void) -> c_int {
    // SAFETY: the caller passes a valid attribute block or null.
    let (format, wait) = match unsafe { attr.as_ref() } {
        Some(a) => (a.format, a.wait_obj),
        None => (FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE),
    };
    let format = match format {
        FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_TAGGED,
        f @ (FI_CQ_FORMAT_CONTEXT | FI_CQ_FORMAT_MSG | FI_CQ_FORMAT_DATA | FI_CQ_FORMAT_TAGGED) => {
            f
        }
        f => {
            crate::warn(FI_LOG_CQ, &format!("ni: fi_cq_open: unknown format {f}"));
            return -FI_ENOSYS;
        }
    };
    // No file descriptor or condition variable to hand out: reads poll, sread polls too.
    if !matches!(wait, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD) {
        crate::warn(
            FI_LOG_CQ,
            &format!("ni: fi_cq_open: wait object {wait} not offered (FI_WAIT_NONE, FI_WAIT_UNSPEC or FI_WAIT_YIELD)"),
        );
        return -FI_ENOSYS;
    }
    let cq = Box::new(CqFid {
        fid: fid_cq {
            fid: fid {
                fclass: FI_CLASS_CQ,
                context,
                ops: &CQ_FI_OPS as *const _ as *mut _,
            },
            ops: &CQ_OPS as *const _ as *mut _,
        },
        cq: Arc::new(Cq {
            format,
            items: NiLock::new(VecDeque::new()),
            bound: Bound::default(),
            av: Mutex::new(None),
        }),
    });
    // SAFETY: `out` is writable (caller contract).
    unsafe { *out = Box::into_raw(cq) as *mut fid_cq };
    0
}

unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is the fid of a CqFid we boxed in `open`; libfabric closes it once.
        drop(unsafe { Box::from_raw(f as *mut CqFid) });
        0
    })
}

unsafe extern "C" fn cq_control(_f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    if command == FI_GETWAIT {
        -FI_ENODATA
    } else {
        -FI_ENOSYS
    }
}

unsafe extern "C" fn cq_read(c: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: `c` is one of our CQs; `buf` holds `count` entries (caller contract).
    guard_ssize(|| unsafe {
        container::<CqFid>(c as *mut fid)
            .cq
            .read(buf, count, std::ptr::null_mut(), None)
    })
}

unsafe extern "C" fn cq_readfrom(
    c: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    guard_ssize(|| {
        // SAFETY: `c` is one of our CQs; `buf` and `src` hold `count` entries.
        unsafe {
            let cq = container::<CqFid>(c as *mut fid);
            let av = cq.cq.av.lock().unwrap().clone();
            cq.cq.read(buf, count, src, av.as_deref())
        }
    })
}

unsafe extern "C" fn cq_readerr(c: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    // SAFETY: `c` is one of our CQs; `buf` a writable error entry.
    guard_ssize(|| unsafe { container::<CqFid>(c as *mut fid).cq.readerr(buf) })
}

/// Blocking read: poll (progressing the NI), yielding the CPU between looks.
unsafe fn sread_inner(
    c: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    timeout: c_int,
) -> isize {
    let t = Instant::now();
    loop {
        // SAFETY: as `cq_readfrom`.
        let r = unsafe { cq_readfrom(c, buf, count, src) };
        if r != -(FI_EAGAIN as isize) {
            return r;
        }
        if timeout >= 0 && t.elapsed() >= Duration::from_millis(timeout as u64) {
            return -(FI_EAGAIN as isize);
        }
        std::thread::yield_now();
    }
}

unsafe extern "C" fn cq_sread(
    c: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: as `cq_readfrom`.
    unsafe { sread_inner(c, buf, count, std::ptr::null_mut(), timeout) }
}

unsafe extern "C" fn cq_sreadfrom(
    c: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: as `cq_readfrom`.
    unsafe { sread_inner(c, buf, count, src, timeout) }
}

unsafe extern "C" fn cq_signal(_c: *mut fid_cq) -> c_int {
    0
}

unsafe extern "C" fn cq_strerror(
    _c: *mut fid_cq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    const MSG: &[u8] = b"ni: see the FI_LOG_LEVEL=warn line for this operation\0";
    if !buf.is_null() && len > 0 {
        let n = MSG.len().min(len);
        // SAFETY: the caller's buffer holds `len` bytes; we write at most that, NUL-ended.
        unsafe {
            std::ptr::copy_nonoverlapping(MSG.as_ptr() as *const c_char, buf, n);
            *buf.add(n - 1) = 0;
        }
        return buf;
    }
    MSG.as_ptr() as *const c_char
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads every `step`: how many reads until the first that gives the CPU away (never
    /// before `SPIN`), how long they took, and how many clock reads.
    fn run(idle: &mut Idle, start: Instant, step: Duration) -> (u32, Duration, u32) {
        let mut looks = 0;
        for k in 0.. {
            let at = start + step * k;
            let give = idle.note(
                true,
                || {
                    looks += 1;
                    at
                },
                || false,
            );
            if give {
                assert!(
                    at - start >= SPIN,
                    "gave the CPU away after {:?}",
                    at - start
                );
                return (k, at - start, looks);
            }
        }
        unreachable!()
    }

    #[test]
    fn empty_reads_give_the_cpu_away_past_spin_with_few_looks_at_the_clock() {
        let mut idle = Idle::default();
        let t = Instant::now();
        let step = Duration::from_nanos(100);
        // The first run learns: a look at reads 1, 2, 4, ...: no later than twice SPIN.
        let (k, took, looks) = run(&mut idle, t, step);
        assert!(took <= SPIN * 2, "{took:?}");
        assert!(looks <= 7, "{looks} looks in the first run");
        assert_eq!(idle.per_spin, k);
        // Every later run: a look at its start, one a little before SPIN, then one a read.
        idle.note(false, || unreachable!(), || unreachable!());
        let (k2, took, looks) = run(&mut idle, t, step);
        assert!(took <= SPIN + step, "{took:?}");
        assert!(looks <= 5, "{looks} looks in a later run");
        assert_eq!(k2, 20);
        // Once past SPIN, every empty read gives the CPU away without a look.
        assert!(idle.note(true, || unreachable!(), || unreachable!()));
        // Reads that got faster: the look comes early and goes on read by read.
        idle.note(false, || unreachable!(), || unreachable!());
        let (_, took, _) = run(&mut idle, t, Duration::from_nanos(30));
        assert!(took <= SPIN * 2, "{took:?}");
        // Slower ones (preempted between reads, say): at the read that took SPIN before.
        idle.note(false, || unreachable!(), || unreachable!());
        let per_spin = idle.per_spin;
        let (k, _, _) = run(&mut idle, t, Duration::from_nanos(700));
        assert!(k <= per_spin, "{k} reads, {per_spin} took SPIN before");
        // A run that ends before SPIN gives nothing away.
        idle.note(false, || unreachable!(), || unreachable!());
        for k in 0..15 {
            assert!(!idle.note(true, || t + step * k, || false));
        }
    }

    #[test]
    fn a_peer_on_this_cpu_gets_it_from_the_second_empty_read_on() {
        let mut idle = Idle::default();
        let t = Instant::now();
        let mut asked = 0;
        let mut note = |idle: &mut Idle, empty: bool| {
            idle.note(
                empty,
                || t,
                || {
                    asked += 1;
                    true
                },
            )
        };
        // The first empty read keeps the CPU (an MPI send's poll on its way out); the
        // second gives it away, and so does every further one, without asking again.
        assert!(!note(&mut idle, true));
        assert!(note(&mut idle, true));
        assert!(note(&mut idle, true));
        // A read that finds something ends the run; the next run asks once more.
        assert!(!note(&mut idle, false));
        assert!(!note(&mut idle, true));
        assert!(note(&mut idle, true));
        assert_eq!(asked, 2);
        // No peer here: the run spins until SPIN as before.
        let mut alone = Idle::default();
        for k in 0..15 {
            assert!(!alone.note(true, || t + Duration::from_nanos(100) * k, || false));
        }
    }
}
