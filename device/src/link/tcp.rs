//! The TCP backend of [`Link`]: every connection of the daemon served by one thread around
//! one io_uring.
//!
//! Each connection has two buffers registered with the ring (`READ_FIXED`/`WRITE_FIXED`,
//! so the kernel does not map them per operation) and at most one read and one write in
//! flight. Frames the fabric queues are batched: a write takes everything queued for that
//! host up to a buffer's worth. One connection per pair of daemons: the one later in the
//! fabric description connects to the earlier one, which accepts, and both start with
//! `HELLO` (their host index and the description's digest). A connection that goes
//! [`DEAD`] without a frame is closed; [`HEARTBEAT`]s keep an idle one alive; the connecting
//! side retries every [`RETRY`].

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

use super::wire::{self, Msg};
use super::{Event, HostId, Link, LinkStats};

/// A silent connection is declared dead after this long (the issue's bound on noticing a
/// lost host is 1 s: this, plus one tick).
pub const DEAD: Duration = Duration::from_millis(600);
/// An idle connection sends a heartbeat this often.
pub const HEARTBEAT: Duration = Duration::from_millis(100);
/// The connecting side tries again this long after a failure.
pub const RETRY: Duration = Duration::from_millis(200);
/// The longest a connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Hosts a fabric description may name.
pub const MAX_HOSTS: usize = 64;
/// Connections accepted and not yet identified by their HELLO, at most.
const PENDING: usize = 8;
/// The longest HELLO (header, magic, version, host, digest, epoch).
const HELLO_MAX: usize = wire::HEADER + 32;
/// Each registered buffer.
const BUF: usize = 256 << 10;
/// Bytes of frames a connection may have read and not yet parsed (one frame, at most).
const INBUF_MAX: usize = wire::MAX_FRAME + BUF;

/// Where the link listens and whom it connects to.
pub struct Config {
    pub me: HostId,
    /// Every host's link address, `me`'s included (it listens there).
    pub addrs: Vec<SocketAddr>,
    /// Of the fabric description: a peer with another is refused.
    pub digest: u64,
    /// Called when events wait in [`Link::poll`] (the fabric's doorbell).
    pub notify: Box<dyn Fn() + Send + Sync>,
}

/// Frames queued for one host. The loop hands them to the wire from `at` on; a sender that
/// finds nothing queued and no write of the loop in flight writes its frame itself (`fd`),
/// which saves waking the loop (a thread hand-off each way matters on a round trip).
struct Outbox {
    up: bool,
    buf: Vec<u8>,
    at: usize,
    /// The connection while up (closed only under this lock, after `up` is cleared).
    fd: RawFd,
    loop_writing: bool,
}

impl Default for Outbox {
    fn default() -> Outbox {
        Outbox {
            up: false,
            buf: Vec::new(),
            at: 0,
            fd: -1,
            loop_writing: false,
        }
    }
}

impl Outbox {
    fn pending(&self) -> usize {
        self.buf.len() - self.at
    }

    /// `n` bytes went to the wire: forget them (moving the rest down only when that is
    /// cheap against what was sent, so a long queue is not moved per write).
    fn consumed(&mut self, n: usize) {
        self.at += n;
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        } else if self.at > (1 << 20) && self.at > self.buf.len() / 2 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
    }

    fn reset(&mut self) {
        *self = Outbox::default();
    }
}

struct Shared {
    out: Mutex<Vec<Outbox>>,
    events: Mutex<Vec<Event>>,
    stats: Mutex<LinkStats>,
    frames_sent: std::sync::atomic::AtomicU64,
    /// Bytes senders wrote themselves (`Outbox`).
    bytes_direct: std::sync::atomic::AtomicU64,
    wake: OwnedFd,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The TCP link of one daemon; its thread runs for the daemon's life.
pub struct TcpLink {
    shared: Arc<Shared>,
    pub local: SocketAddr,
}

impl TcpLink {
    pub fn start(cfg: Config) -> std::io::Result<TcpLink> {
        use std::io::{Error, ErrorKind};
        let hosts = cfg.addrs.len();
        if hosts == 0 || hosts > MAX_HOSTS || cfg.me as usize >= hosts {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{hosts} hosts (1 to {MAX_HOSTS}), this one {}", cfg.me),
            ));
        }
        let me = cfg.addrs[cfg.me as usize];
        let listener = TcpListener::bind(me)
            .map_err(|e| Error::new(e.kind(), format!("listening at {me}: {e}")))?;
        let local = listener.local_addr()?;
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: efd is a fresh descriptor nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let shared = Arc::new(Shared {
            out: Mutex::new((0..hosts).map(|_| Outbox::default()).collect()),
            events: Mutex::new(Vec::new()),
            stats: Mutex::new(LinkStats {
                up: vec![false; hosts],
                ..Default::default()
            }),
            frames_sent: Default::default(),
            bytes_direct: Default::default(),
            wake,
        });
        let mut l = Loop::new(cfg, listener, shared.clone())?;
        std::thread::Builder::new()
            .name("link".into())
            .spawn(move || l.run())?;
        Ok(TcpLink { shared, local })
    }

    fn kick(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writing 8 bytes from a live buffer to our eventfd.
        unsafe { libc::write(self.shared.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

impl Link for TcpLink {
    fn send(&self, host: HostId, msg: &Msg) -> bool {
        self.send_all(host, std::slice::from_ref(msg))
    }

    fn send_all(&self, host: HostId, msgs: &[Msg]) -> bool {
        let mut out = lock(&self.shared.out);
        let Some(o) = out.get_mut(host as usize) else {
            return false;
        };
        if !o.up {
            return false;
        }
        let was_empty = o.pending() == 0;
        for m in msgs {
            m.encode(&mut o.buf);
        }
        self.shared
            .frames_sent
            .fetch_add(msgs.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if was_empty && !o.loop_writing && o.fd >= 0 {
            // SAFETY: `fd` is the up connection's, open while this lock is held (the loop
            // closes it only after clearing it under the lock); the buffer is live.
            let n = unsafe {
                libc::send(
                    o.fd,
                    o.buf.as_ptr().cast(),
                    o.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n > 0 {
                self.shared
                    .bytes_direct
                    .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                o.consumed(n as usize);
            }
            if o.pending() == 0 {
                return true;
            }
            // A full socket buffer or an error: the loop carries on (and sees the error).
        }
        drop(out);
        // The loop takes everything queued whenever it looks, so only the first frame of a
        // batch needs to wake it.
        if was_empty {
            self.kick();
        }
        true
    }

    fn poll(&self, out: &mut Vec<Event>) {
        out.append(&mut lock(&self.shared.events));
    }

    fn queued(&self, host: HostId) -> usize {
        lock(&self.shared.out)
            .get(host as usize)
            .map_or(0, |o| o.pending())
    }

    fn stats(&self) -> LinkStats {
        let mut s = lock(&self.shared.stats).clone();
        s.frames_sent = self
            .shared
            .frames_sent
            .load(std::sync::atomic::Ordering::Relaxed);
        s.bytes_sent += self
            .shared
            .bytes_direct
            .load(std::sync::atomic::Ordering::Relaxed);
        s
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Free,
    Connecting,
    /// Connected, our HELLO sent, theirs awaited.
    Hello,
    Up,
    /// Shut down; the descriptor closes when its operations have completed.
    Closing,
}

struct Conn {
    st: St,
    fd: Option<OwnedFd>,
    /// The host: known from the start for a connection we made, from its HELLO for one we
    /// accepted.
    host: Option<HostId>,
    inflight: u32,
    reading: bool,
    /// Bytes of the write buffer in flight: `[at, end)`.
    writing: Option<(usize, usize)>,
    inbuf: Vec<u8>,
    since: Instant,
    last_rx: Instant,
    last_tx: Instant,
    /// The peer's address for `connect`, alive while the operation is.
    sockaddr: Box<(libc::sockaddr_storage, libc::socklen_t)>,
}

impl Conn {
    fn new() -> Conn {
        let now = Instant::now();
        Conn {
            st: St::Free,
            fd: None,
            host: None,
            inflight: 0,
            reading: false,
            writing: None,
            inbuf: Vec::new(),
            since: now,
            last_rx: now,
            last_tx: now,
            // SAFETY: sockaddr_storage is plain data for which zero is valid.
            sockaddr: Box::new((unsafe { std::mem::zeroed() }, 0)),
        }
    }
    fn raw(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }
}

// What a completion was for: the op in the low byte, the connection above it.
const OP_ACCEPT: u64 = 1;
const OP_WAKE: u64 = 2;
const OP_TICK: u64 = 3;
const OP_CONNECT: u64 = 4;
const OP_READ: u64 = 5;
const OP_WRITE: u64 = 6;
const OP_LINK_TIMEOUT: u64 = 7;

fn tag(op: u64, conn: usize) -> u64 {
    op | (conn as u64) << 8
}

struct Loop {
    me: HostId,
    addrs: Vec<SocketAddr>,
    digest: u64,
    notify: Box<dyn Fn() + Send + Sync>,
    ring: IoUring,
    listener: TcpListener,
    shared: Arc<Shared>,
    /// Connections: slot `h` < hosts is the one we make to host `h` (when we are the later
    /// host), slots past them hold accepted connections.
    conns: Vec<Conn>,
    /// The connection that is up with each host.
    by_host: Vec<Option<usize>>,
    /// Two registered buffers per connection: read at 2i, write at 2i + 1.
    bufs: Vec<Box<[u8]>>,
    fixed: bool,
    retry_at: Vec<Instant>,
    wake_buf: Box<[u8; 8]>,
    tick: Box<types::Timespec>,
    connect_limit: Box<types::Timespec>,
    events: Vec<Event>,
    stats: LinkStats,
    warn: super::WarnLimit,
}

impl Loop {
    fn new(cfg: Config, listener: TcpListener, shared: Arc<Shared>) -> std::io::Result<Loop> {
        let hosts = cfg.addrs.len();
        let slots = hosts + PENDING;
        let ring = IoUring::new(((slots * 4 + 8) as u32).next_power_of_two())?;
        let mut bufs: Vec<Box<[u8]>> = (0..slots * 2)
            .map(|_| vec![0u8; BUF].into_boxed_slice())
            .collect();
        let iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: the buffers live as long as the ring (both are the loop's, and the ring is
        // dropped first: fields drop in declaration order... not relied on: the loop never
        // ends while the process lives).
        let fixed = match unsafe { ring.submitter().register_buffers(&iov) } {
            Ok(()) => true,
            Err(e) => {
                // Locked-memory limits can refuse it for an unprivileged daemon: plain reads
                // and writes then, the same otherwise.
                tracing::info!("link: registered buffers refused ({e}): plain reads and writes");
                false
            }
        };
        let now = Instant::now();
        Ok(Loop {
            me: cfg.me,
            digest: cfg.digest,
            notify: cfg.notify,
            ring,
            listener,
            shared,
            conns: (0..slots).map(|_| Conn::new()).collect(),
            by_host: vec![None; hosts],
            bufs,
            fixed,
            retry_at: vec![now; hosts],
            wake_buf: Box::new([0; 8]),
            tick: Box::new(types::Timespec::from(HEARTBEAT / 2)),
            connect_limit: Box::new(types::Timespec::from(CONNECT_TIMEOUT)),
            events: Vec::new(),
            stats: LinkStats {
                up: vec![false; hosts],
                ..Default::default()
            },
            warn: Default::default(),
            addrs: cfg.addrs,
        })
    }

    fn push(&mut self, e: squeue::Entry) {
        // SAFETY: every entry's buffers (registered buffers, the timespecs, the wake buffer,
        // a connection's sockaddr) live in the loop for as long as the loop runs.
        while unsafe { self.ring.submission().push(&e) }.is_err() {
            if let Err(err) = self.ring.submit() {
                tracing::error!("link: io_uring submit failed: {err}");
            }
        }
    }

    fn run(&mut self) {
        self.push(
            opcode::Accept::new(
                types::Fd(self.listener.as_raw_fd()),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(OP_ACCEPT),
        );
        self.arm_wake();
        self.arm_tick();
        self.connect_due();
        let mut done: VecDeque<(u64, i32)> = VecDeque::new();
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    tracing::error!("link: io_uring wait failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            while let Some((ud, res)) = done.pop_front() {
                self.complete(ud, res);
            }
            self.reap();
            self.write_all();
            lock(&self.shared.stats).clone_from(&self.stats);
            if !self.events.is_empty() {
                lock(&self.shared.events).append(&mut self.events);
                (self.notify)();
            }
        }
    }

    fn arm_wake(&mut self) {
        let e = opcode::Read::new(
            types::Fd(self.shared.wake.as_raw_fd()),
            self.wake_buf.as_mut_ptr(),
            8,
        )
        .build()
        .user_data(OP_WAKE);
        self.push(e);
    }

    fn arm_tick(&mut self) {
        let e = opcode::Timeout::new(&*self.tick as *const _)
            .build()
            .user_data(OP_TICK);
        self.push(e);
    }

    fn complete(&mut self, ud: u64, res: i32) {
        let op = ud & 0xff;
        let c = (ud >> 8) as usize;
        match op {
            OP_ACCEPT => {
                if res >= 0 {
                    // SAFETY: a descriptor the kernel just made for us.
                    let fd = unsafe { OwnedFd::from_raw_fd(res) };
                    self.accepted(fd);
                } else if res != -libc::ECANCELED {
                    tracing::debug!("link: accept: {}", std::io::Error::from_raw_os_error(-res));
                }
                self.push(
                    opcode::Accept::new(
                        types::Fd(self.listener.as_raw_fd()),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                    .flags(libc::SOCK_CLOEXEC)
                    .build()
                    .user_data(OP_ACCEPT),
                );
            }
            OP_WAKE => self.arm_wake(),
            OP_TICK => {
                self.on_tick();
                self.arm_tick();
            }
            OP_LINK_TIMEOUT => {}
            OP_CONNECT => {
                self.conns[c].inflight -= 1;
                if self.conns[c].st != St::Connecting {
                    return;
                }
                if res < 0 {
                    let e = std::io::Error::from_raw_os_error(-res);
                    tracing::debug!(host = c, "link: connect to {}: {e}", self.addrs[c]);
                    self.close(c, format!("connect: {e}"));
                    return;
                }
                self.stats.connects += 1;
                self.start_hello(c);
            }
            OP_READ => {
                self.conns[c].inflight -= 1;
                self.conns[c].reading = false;
                if matches!(self.conns[c].st, St::Closing | St::Free) {
                    return;
                }
                if res <= 0 {
                    let why = if res == 0 {
                        "closed by the peer".to_string()
                    } else {
                        std::io::Error::from_raw_os_error(-res).to_string()
                    };
                    self.close(c, why);
                    return;
                }
                let n = res as usize;
                self.conns[c].last_rx = Instant::now();
                self.stats.bytes_rcvd += n as u64;
                let buf = std::mem::take(&mut self.bufs[2 * c]);
                self.conns[c].inbuf.extend_from_slice(&buf[..n]);
                self.bufs[2 * c] = buf;
                self.parse(c);
                self.arm_read(c);
            }
            OP_WRITE => {
                self.conns[c].inflight -= 1;
                let Some((at, end)) = self.conns[c].writing.take() else {
                    return;
                };
                if matches!(self.conns[c].st, St::Closing | St::Free) {
                    return;
                }
                if res < 0 {
                    self.close(c, std::io::Error::from_raw_os_error(-res).to_string());
                    return;
                }
                self.stats.bytes_sent += res as u64;
                let at = at + res as usize;
                if at < end {
                    self.issue_write(c, at, end);
                } else if let Some(h) = self.conns[c].host {
                    if self.by_host[h as usize] == Some(c) {
                        lock(&self.shared.out)[h as usize].loop_writing = false;
                    }
                }
            }
            _ => {}
        }
    }

    fn accepted(&mut self, fd: OwnedFd) {
        let hosts = self.addrs.len();
        let Some(c) = (hosts..self.conns.len()).find(|&i| self.conns[i].st == St::Free) else {
            tracing::info!("link: {PENDING} connections await their HELLO: one more refused");
            return;
        };
        nodelay(&fd);
        let conn = &mut self.conns[c];
        *conn = Conn::new();
        conn.fd = Some(fd);
        self.start_hello(c);
    }

    /// Connect to each earlier host we are not connected to, when its retry is due.
    fn connect_due(&mut self) {
        let now = Instant::now();
        for h in 0..self.me as usize {
            if self.conns[h].st != St::Free || self.by_host[h].is_some() || now < self.retry_at[h] {
                continue;
            }
            let addr = self.addrs[h];
            let family = if addr.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            // SAFETY: socket() with constant arguments; the result is checked.
            let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                self.retry_at[h] = now + RETRY;
                continue;
            }
            // SAFETY: a fresh descriptor nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            nodelay(&fd);
            let conn = &mut self.conns[h];
            *conn = Conn::new();
            conn.host = Some(h as HostId);
            conn.st = St::Connecting;
            *conn.sockaddr = sockaddr(addr);
            conn.inflight += 1;
            let raw = fd.as_raw_fd();
            conn.fd = Some(fd);
            let sa = &conn.sockaddr.0 as *const libc::sockaddr_storage as *const libc::sockaddr;
            let len = conn.sockaddr.1;
            let connect = opcode::Connect::new(types::Fd(raw), sa, len)
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(tag(OP_CONNECT, h));
            let limit = opcode::LinkTimeout::new(&*self.connect_limit as *const _)
                .build()
                .user_data(tag(OP_LINK_TIMEOUT, h));
            // Both or neither: a link timeout must follow its operation in one submission.
            let need = 2;
            let free = {
                let sq = self.ring.submission();
                sq.capacity() - sq.len()
            };
            if free < need {
                let _ = self.ring.submit();
            }
            self.push(connect);
            self.push(limit);
        }
    }

    fn start_hello(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        conn.st = St::Hello;
        conn.since = Instant::now();
        conn.last_rx = conn.since;
        let mut b = Vec::new();
        Msg::Hello {
            host: self.me,
            digest: self.digest,
            // A connection tells a restart by itself (it closes).
            epoch: 0,
        }
        .encode(&mut b);
        self.bufs[2 * c + 1][..b.len()].copy_from_slice(&b);
        self.shared
            .frames_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.issue_write(c, 0, b.len());
        self.arm_read(c);
    }

    fn arm_read(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if conn.reading || !matches!(conn.st, St::Hello | St::Up) {
            return;
        }
        let fd = types::Fd(conn.raw());
        let buf = self.bufs[2 * c].as_mut_ptr();
        let e = if self.fixed {
            opcode::ReadFixed::new(fd, buf, BUF as u32, (2 * c) as u16)
                .offset(u64::MAX)
                .build()
        } else {
            opcode::Read::new(fd, buf, BUF as u32)
                .offset(u64::MAX)
                .build()
        };
        conn.reading = true;
        conn.inflight += 1;
        self.push(e.user_data(tag(OP_READ, c)));
    }

    fn issue_write(&mut self, c: usize, at: usize, end: usize) {
        let conn = &mut self.conns[c];
        let fd = types::Fd(conn.raw());
        // SAFETY: at < end <= BUF: inside the connection's write buffer.
        let buf = unsafe { self.bufs[2 * c + 1].as_ptr().add(at) };
        let len = (end - at) as u32;
        let e = if self.fixed {
            opcode::WriteFixed::new(fd, buf, len, (2 * c + 1) as u16)
                .offset(u64::MAX)
                .build()
        } else {
            opcode::Write::new(fd, buf, len).offset(u64::MAX).build()
        };
        conn.writing = Some((at, end));
        conn.inflight += 1;
        conn.last_tx = Instant::now();
        self.push(e.user_data(tag(OP_WRITE, c)));
    }

    /// Start a write on every up connection that is idle and has frames queued.
    fn write_all(&mut self) {
        let shared = self.shared.clone();
        let mut out = lock(&shared.out);
        for h in 0..self.by_host.len() {
            let Some(c) = self.by_host[h] else {
                continue;
            };
            if self.conns[c].writing.is_some() || out[h].pending() == 0 {
                continue;
            }
            let o = &mut out[h];
            let n = o.pending().min(BUF);
            self.bufs[2 * c + 1][..n].copy_from_slice(&o.buf[o.at..o.at + n]);
            o.consumed(n);
            o.loop_writing = true;
            self.issue_write(c, 0, n);
        }
    }

    /// Take whole frames out of connection `c`'s input.
    fn parse(&mut self, c: usize) {
        let mut at = 0;
        loop {
            let input = &self.conns[c].inbuf[at..];
            let n = match Msg::frame_len(input) {
                // The first frame is a HELLO, and a HELLO is short.
                Ok(Some(n)) if self.conns[c].st == St::Hello && n > HELLO_MAX => {
                    self.protocol_error(c, format!("a first frame of {n} bytes is no HELLO"));
                    return;
                }
                Ok(Some(n)) if n <= input.len() => n,
                Ok(_) => break,
                Err(e) => {
                    self.protocol_error(c, e.to_string());
                    return;
                }
            };
            let msg = match Msg::decode(&input[..n]) {
                Ok(m) => m,
                Err(e) => {
                    self.protocol_error(c, e.to_string());
                    return;
                }
            };
            at += n;
            self.stats.frames_rcvd += 1;
            if !self.frame(c, msg) {
                return;
            }
        }
        let conn = &mut self.conns[c];
        conn.inbuf.drain(..at);
        if conn.inbuf.len() > INBUF_MAX {
            // frame_len bounds a frame, so this cannot happen with a well-formed stream.
            self.protocol_error(c, "input past the longest frame".into());
        }
    }

    /// Act on one frame; false if the connection was closed.
    fn frame(&mut self, c: usize, msg: Msg) -> bool {
        let st = self.conns[c].st;
        match (st, msg) {
            (St::Hello, Msg::Hello { host, digest, .. }) => {
                let hosts = self.addrs.len() as HostId;
                let expected = self.conns[c].host;
                let ok_host = match expected {
                    Some(h) => host == h,
                    // We accept from later hosts only.
                    None => host > self.me && host < hosts,
                };
                if !ok_host {
                    self.protocol_error(c, format!("HELLO from host {host}, not the one expected"));
                    return false;
                }
                if digest != self.digest {
                    self.protocol_error(
                        c,
                        format!("host {host} runs another fabric description (digest {digest:#x}, ours {:#x})", self.digest),
                    );
                    return false;
                }
                if self.by_host[host as usize].is_some() {
                    // Whoever claims a host that is connected is not it (a restarted daemon
                    // whose old connection has not been found dead yet retries until it is).
                    self.protocol_error(c, format!("host {host} is connected already"));
                    return false;
                }
                let conn = &mut self.conns[c];
                conn.host = Some(host);
                conn.st = St::Up;
                self.by_host[host as usize] = Some(c);
                self.stats.up[host as usize] = true;
                let writing = self.conns[c].writing.is_some();
                let fd = self.conns[c].raw();
                lock(&self.shared.out)[host as usize] = Outbox {
                    up: true,
                    fd,
                    // Our HELLO may still be on its way out: nothing may pass it.
                    loop_writing: writing,
                    ..Outbox::default()
                };
                tracing::info!(host, addr = %self.addrs[host as usize], "link up");
                self.events.push(Event::Up(host));
                true
            }
            (St::Up, Msg::Heartbeat) => true,
            (St::Up, Msg::Hello { .. }) | (St::Hello, _) => {
                self.protocol_error(c, "HELLO out of place".into());
                false
            }
            (St::Up, m) => {
                let host = self.conns[c].host.expect("an up connection has its host");
                self.events.push(Event::Frame(host, m));
                true
            }
            _ => false,
        }
    }

    fn protocol_error(&mut self, c: usize, why: String) {
        self.stats.protocol_errors += 1;
        if let Some(skipped) = self.warn.allow() {
            tracing::warn!(conn = c, skipped, "link: protocol error: {why}");
        }
        self.close(c, format!("protocol error: {why}"));
    }

    /// End connection `c`; its descriptor closes once nothing is in flight on it.
    fn close(&mut self, c: usize, why: String) {
        let conn = &mut self.conns[c];
        if matches!(conn.st, St::Free | St::Closing) {
            return;
        }
        let was_up = conn.st == St::Up;
        conn.st = St::Closing;
        // SAFETY: shutdown on a descriptor we own; pending reads and writes then complete.
        unsafe { libc::shutdown(conn.raw(), libc::SHUT_RDWR) };
        if let Some(h) = conn.host {
            if (h as usize) < self.retry_at.len() && c == h as usize {
                self.retry_at[h as usize] = Instant::now() + RETRY;
            }
            if was_up && self.by_host[h as usize] == Some(c) {
                self.by_host[h as usize] = None;
                self.stats.up[h as usize] = false;
                lock(&self.shared.out)[h as usize].reset();
                tracing::info!(host = h, "link down: {why}");
                self.events.push(Event::Down(h, why));
            }
        }
    }

    /// Free connections whose last operation has completed.
    fn reap(&mut self) {
        for conn in &mut self.conns {
            if conn.st == St::Closing && conn.inflight == 0 {
                conn.fd = None;
                conn.st = St::Free;
                conn.inbuf = Vec::new();
                conn.writing = None;
                conn.reading = false;
            }
        }
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            match conn.st {
                // A connection must say who it is in time, however it trickles bytes.
                St::Hello if now.duration_since(conn.since) > DEAD => {
                    self.protocol_error(c, format!("no HELLO within {} ms", DEAD.as_millis()));
                }
                St::Hello | St::Up if now.duration_since(conn.last_rx) > DEAD => {
                    self.stats.timeouts += 1;
                    self.close(c, format!("no frame for {} ms", DEAD.as_millis()));
                }
                St::Up if now.duration_since(conn.last_tx) >= HEARTBEAT => {
                    let h = conn.host.expect("up has a host") as usize;
                    let mut out = lock(&self.shared.out);
                    if out[h].pending() == 0 {
                        Msg::Heartbeat.encode(&mut out[h].buf);
                        self.shared
                            .frames_sent
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                _ => {}
            }
        }
        self.reap();
        self.connect_due();
    }
}

fn nodelay(fd: &OwnedFd) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a live int of the size given.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage, which is aligned for it.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn pair() -> (TcpLink, TcpLink, mpsc::Receiver<()>, mpsc::Receiver<()>) {
        // Port 0 for the first; the second must know the first's real port.
        let (ta, ra) = mpsc::channel();
        let a = TcpLink::start(Config {
            me: 0,
            addrs: vec![
                "127.0.0.1:0".parse().unwrap(),
                "127.0.0.1:0".parse().unwrap(),
            ],
            digest: 9,
            notify: Box::new(move || {
                let _ = ta.send(());
            }),
        })
        .unwrap();
        let (tb, rb) = mpsc::channel();
        let b = TcpLink::start(Config {
            me: 1,
            addrs: vec![a.local, "127.0.0.1:0".parse().unwrap()],
            digest: 9,
            notify: Box::new(move || {
                let _ = tb.send(());
            }),
        })
        .unwrap();
        (a, b, ra, rb)
    }

    #[test]
    fn frames_cross_in_order_and_idle_links_stay_up() {
        let (a, b, ra, rb) = pair();
        crate::link::conformance::frames_cross_in_order(&a, &ra, &b, &rb, 200);
    }

    #[test]
    fn a_peer_with_another_fabric_is_refused() {
        let (ta, ra) = mpsc::channel();
        let a = TcpLink::start(Config {
            me: 0,
            addrs: vec![
                "127.0.0.1:0".parse().unwrap(),
                "127.0.0.1:0".parse().unwrap(),
            ],
            digest: 1,
            notify: Box::new(move || {
                let _ = ta.send(());
            }),
        })
        .unwrap();
        let b = TcpLink::start(Config {
            me: 1,
            addrs: vec![a.local, "127.0.0.1:0".parse().unwrap()],
            digest: 2,
            notify: Box::new(|| {}),
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let mut v = Vec::new();
        a.poll(&mut v);
        assert!(v.is_empty(), "no Up for a stranger: {v:?}");
        assert!(!b.send(0, &Msg::Heartbeat));
        assert!(a.stats().protocol_errors >= 1);
        drop(ra);
    }
}
