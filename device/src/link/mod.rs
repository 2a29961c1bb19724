//! Links between daemons: how one daemon's fabric reaches the NIs another daemon hosts
//! (device/abi/links.md). The fabric sees only [`Link`]: it hands frames for a host to
//! it and takes events from it; which wire carries them is the backend's business.
//!
//! [`tcp`] is the backend that needs nothing installed: TCP driven by one io_uring, no
//! thread per connection. [`ofi`] carries the frames over libfabric's reliable datagrams, so
//! a cluster's own interconnect (verbs, EFA, CXI) carries the emulated one.

pub mod ofi;
pub mod tcp;
pub mod wire;

pub use wire::Msg;

/// At most one warning a second about what peers send, so a hostile one cannot flood the
/// log; the count of those left out goes with the next.
#[derive(Debug, Default)]
pub struct WarnLimit {
    last: Option<std::time::Instant>,
    skipped: u64,
}

impl WarnLimit {
    /// `Some(skipped since the last)` when a warning may be logged now.
    pub fn allow(&mut self) -> Option<u64> {
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(1))
        {
            self.skipped += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.skipped))
    }
}

/// A daemon's index in the fabric description (`[[host]]` order).
pub type HostId = u32;

/// What a link reports to the fabric, in the order it happened.
#[derive(Debug)]
pub enum Event {
    /// `host` is connected and speaks our fabric description: frames to it now go out.
    Up(HostId),
    /// `host`'s connection ended (closed, silent too long, or it broke the protocol): every
    /// frame queued for it is gone, and nothing arrives from it until the next `Up`.
    Down(HostId, String),
    Frame(HostId, Msg),
}

/// The seam between the fabric and the wire to other daemons.
pub trait Link: Send + Sync {
    /// Queue `msg` for `host`; false when `host` is not connected (nothing was queued).
    /// Never blocks: flow control is the caller's, by [`Link::queued`].
    fn send(&self, host: HostId, msg: &Msg) -> bool;
    /// Queue `msgs` for `host` together: a backend that can writes them at once (one
    /// packet when they fit). False when `host` is not connected.
    fn send_all(&self, host: HostId, msgs: &[Msg]) -> bool {
        msgs.iter().all(|m| self.send(host, m))
    }
    /// Move what happened since the last call into `out`.
    fn poll(&self, out: &mut Vec<Event>);
    /// Bytes queued for `host` and not yet handed to the wire.
    fn queued(&self, host: HostId) -> usize;
    /// Counters: frames and bytes each way, protocol errors, connections made.
    fn stats(&self) -> LinkStats;
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LinkStats {
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub frames_rcvd: u64,
    pub bytes_rcvd: u64,
    /// Connections ended for a malformed frame or a wrong HELLO.
    pub protocol_errors: u64,
    /// Connections ended for silence past the dead time.
    pub timeouts: u64,
    pub connects: u64,
    /// Host by host: connected now.
    pub up: Vec<bool>,
}

/// What every backend's tests check the same way (`tcp.rs`, `ofi.rs`).
#[cfg(test)]
pub(crate) mod conformance {
    use std::collections::VecDeque;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::tcp::DEAD;
    use super::wire::{self, Msg};
    use super::{Event, Link};

    /// The next event of `l`, waiting (up to 5 s) on its notifications `r`.
    pub fn next(l: &dyn Link, r: &mpsc::Receiver<()>, got: &mut VecDeque<Event>) -> Event {
        loop {
            if let Some(e) = got.pop_front() {
                return e;
            }
            r.recv_timeout(Duration::from_secs(5))
                .expect("an event within 5 s");
            let mut v = Vec::new();
            l.poll(&mut v);
            got.extend(v);
        }
    }

    /// Hosts 0 (`a`) and 1 (`b`) come up; `n` frames from b, every tenth a whole chunk,
    /// reach a in order and intact; idle past `DEAD`, heartbeats keep both sides up.
    pub fn frames_cross_in_order(
        a: &dyn Link,
        ra: &mpsc::Receiver<()>,
        b: &dyn Link,
        rb: &mpsc::Receiver<()>,
        n: u64,
    ) {
        let (mut qa, mut qb) = (VecDeque::new(), VecDeque::new());
        assert!(matches!(next(a, ra, &mut qa), Event::Up(1)));
        assert!(matches!(next(b, rb, &mut qb), Event::Up(0)));
        for i in 0..n {
            let payload = vec![(i % 251) as u8; if i % 10 == 0 { wire::CHUNK } else { 8 }];
            let m = Msg::Put {
                id: i,
                src: 1,
                dst: 0,
                key: 1,
                offset: i,
                payload,
            };
            assert!(b.send(0, &m));
        }
        for i in 0..n {
            match next(a, ra, &mut qa) {
                Event::Frame(1, Msg::Put { id, payload, .. }) => {
                    assert_eq!(id, i, "frames keep their order");
                    assert!(payload.iter().all(|&x| x == (i % 251) as u8));
                }
                e => panic!("unexpected {e:?}"),
            }
        }
        std::thread::sleep(DEAD * 2);
        let mut v = Vec::new();
        a.poll(&mut v);
        b.poll(&mut v);
        assert!(v.is_empty(), "an idle link stays up: {v:?}");
        assert_eq!(a.stats().up, vec![false, true]);
        assert_eq!(b.stats().up, vec![true, false]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_about_peers_are_one_a_second_with_a_count_of_the_rest() {
        let mut w = WarnLimit::default();
        assert_eq!(w.allow(), Some(0));
        for _ in 0..1000 {
            assert_eq!(w.allow(), None);
        }
        w.last = Some(std::time::Instant::now() - std::time::Duration::from_secs(2));
        assert_eq!(w.allow(), Some(1000));
        assert_eq!(w.allow(), None);
    }
}
