//! Baselines over kernel sockets: TCP on loopback (TCP_NODELAY) and Unix stream sockets, two
//! processes, the same patterns as the ni side. Messages are framed (an 8-byte length, then
//! the payload), written with one `write` when they fit 64 KiB and read through a 64 KiB
//! buffer, as a small message-passing library over sockets would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};

use super::driver::{cmd, serve, Ctl, Laps, Link, R};

const SMALL: usize = 64 << 10;

fn io(x: std::io::Error) -> String {
    x.to_string()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Tcp,
    Unix,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "tcp" => Some(Kind::Tcp),
            "unix" => Some(Kind::Unix),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Unix => "unix",
        }
    }
}

pub struct SockLink<S: Read + Write> {
    rank: u32,
    r: BufReader<S>,
    w: S,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl<S: Read + Write> SockLink<S> {
    fn new(rank: u32, r: S, w: S, max: usize) -> Self {
        SockLink {
            rank,
            r: BufReader::with_capacity(SMALL, r),
            w,
            buf: vec![0u8; max.max(64)],
            out: vec![0u8; SMALL + 8],
        }
    }

    fn send(&mut self, len: usize) -> R<()> {
        let hdr = (len as u64).to_le_bytes();
        if len <= SMALL {
            self.out[..8].copy_from_slice(&hdr);
            self.out[8..8 + len].copy_from_slice(&self.buf[..len]);
            self.w.write_all(&self.out[..8 + len]).map_err(io)
        } else {
            self.w.write_all(&hdr).map_err(io)?;
            self.w.write_all(&self.buf[..len]).map_err(io)
        }
    }

    fn recv(&mut self) -> R<usize> {
        let mut hdr = [0u8; 8];
        self.r.read_exact(&mut hdr).map_err(io)?;
        let len = u64::from_le_bytes(hdr) as usize;
        if len > self.buf.len() {
            return Err(format!("frame of {len} bytes exceeds the buffer"));
        }
        self.r.read_exact(&mut self.buf[..len]).map_err(io)?;
        Ok(len)
    }

    /// Rank 0 sends `a` bytes, rank 1 answers with `b`.
    fn pingpong(&mut self, n: u64, a: usize, b: usize, it: Option<&mut Vec<f64>>) -> R<()> {
        let mut laps = Laps::start(it, n);
        for _ in 0..n {
            if self.rank == 0 {
                self.send(a)?;
                self.recv()?;
            } else {
                self.recv()?;
                self.send(b)?;
            }
            laps.lap();
        }
        laps.finish();
        Ok(())
    }

    /// `window` messages of `size` from rank 0 (or to it, `reverse`), one 0-byte ack back.
    fn stream(&mut self, n: u64, size: usize, window: u64, reverse: bool) -> R<()> {
        let sender = (self.rank == 0) != reverse;
        for _ in 0..n {
            if reverse && self.rank == 0 {
                // The requests.
                for _ in 0..window {
                    self.send(0)?;
                }
            }
            if sender {
                if reverse {
                    for _ in 0..window {
                        self.recv()?;
                    }
                }
                for _ in 0..window {
                    self.send(size)?;
                }
                self.w.flush().map_err(io)?;
                if !reverse {
                    self.recv()?;
                }
            } else {
                for _ in 0..window {
                    self.recv()?;
                }
                if !reverse {
                    self.send(0)?;
                }
            }
        }
        Ok(())
    }
}

impl<S: Read + Write> Link for SockLink<S> {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn ctl_send(&mut self, c: Ctl) -> R<()> {
        self.w.write_all(&c.encode()).map_err(io)
    }

    fn ctl_recv(&mut self) -> R<Ctl> {
        let mut b = [0u8; Ctl::BYTES];
        self.r.read_exact(&mut b).map_err(io)?;
        Ok(Ctl::decode(&b))
    }

    fn run(&mut self, c: &Ctl, it: Option<&mut Vec<f64>>) -> R<()> {
        let s = c.size as usize;
        match c.cmd {
            cmd::PINGPONG => self.pingpong(c.n, s, s, it),
            cmd::MQ_PINGPONG | cmd::AM_PINGPONG => self.pingpong(c.n, 64, 64, it),
            cmd::PUT => self.pingpong(c.n, s, 0, it),
            cmd::GET => self.pingpong(c.n, 0, s, it),
            cmd::STREAM | cmd::MSGRATE | cmd::PUT_STREAM => self.stream(c.n, s, c.window, false),
            cmd::MQ_STREAM => self.stream(c.n, 64, c.window, false),
            cmd::GET_STREAM => self.stream(c.n, s, c.window, true),
            other => Err(format!("unknown pattern {other}")),
        }
    }
}

/// The serving side (rank 1): listen, print `ADDR <address>`, take one connection, obey.
pub fn server(kind: Kind, max: usize, dir: &std::path::Path) -> R<()> {
    let mut out = std::io::stdout();
    match kind {
        Kind::Tcp => {
            // Across hosts (tests/bench/multihost.sh) the address the other host reaches.
            let ip = std::env::var("NIB_TCP_BIND").unwrap_or_else(|_| "127.0.0.1".into());
            let l = TcpListener::bind((ip.as_str(), 0)).map_err(io)?;
            writeln!(out, "ADDR {}", l.local_addr().map_err(io)?).map_err(io)?;
            out.flush().map_err(io)?;
            let (s, _) = l.accept().map_err(io)?;
            s.set_nodelay(true).map_err(io)?;
            let r = s.try_clone().map_err(io)?;
            serve(&mut SockLink::new(1, r, s, max))
        }
        Kind::Unix => {
            let path = dir.join(format!("nib-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).map_err(io)?;
            writeln!(out, "ADDR {}", path.display()).map_err(io)?;
            out.flush().map_err(io)?;
            let (s, _) = l.accept().map_err(io)?;
            let _ = std::fs::remove_file(&path);
            let r = s.try_clone().map_err(io)?;
            serve(&mut SockLink::new(1, r, s, max))
        }
    }
}

/// The driving side (rank 0): connect and hand the link to `f`.
pub fn client(kind: Kind, addr: &str, max: usize, f: impl FnOnce(&mut dyn Link) -> R<()>) -> R<()> {
    match kind {
        Kind::Tcp => {
            let s = TcpStream::connect(addr).map_err(io)?;
            s.set_nodelay(true).map_err(io)?;
            let r = s.try_clone().map_err(io)?;
            f(&mut SockLink::new(0, r, s, max))
        }
        Kind::Unix => {
            let s = UnixStream::connect(addr).map_err(io)?;
            let r = s.try_clone().map_err(io)?;
            f(&mut SockLink::new(0, r, s, max))
        }
    }
}

/// Read the server's `ADDR` line.
pub fn read_addr(stdout: &mut impl BufRead) -> R<String> {
    let mut line = String::new();
    stdout.read_line(&mut line).map_err(io)?;
    line.trim()
        .strip_prefix("ADDR ")
        .map(str::to_string)
        .ok_or_else(|| format!("socket server said {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::driver::{measure, Plan};
    use std::time::Duration;

    #[test]
    fn unix_pingpong_and_stream_in_threads() {
        let (a, b) = UnixStream::pair().unwrap();
        let srv = std::thread::spawn(move || {
            let r = b.try_clone().unwrap();
            serve(&mut SockLink::new(1, r, b, 1 << 20))
        });
        let r = a.try_clone().unwrap();
        let mut l = SockLink::new(0, r, a, 1 << 20);
        let plan = Plan {
            warm: Duration::from_micros(100),
            target: Duration::from_micros(300),
            batches: 3,
            cap: Duration::from_secs(2),
        };
        for (c, ops) in [
            (
                Ctl {
                    cmd: cmd::PINGPONG,
                    size: 100,
                    ..Default::default()
                },
                2.0,
            ),
            (
                Ctl {
                    cmd: cmd::STREAM,
                    size: 1 << 17,
                    window: 4,
                    ..Default::default()
                },
                4.0,
            ),
            (
                Ctl {
                    cmd: cmd::GET_STREAM,
                    size: 4096,
                    window: 4,
                    ..Default::default()
                },
                4.0,
            ),
            (
                Ctl {
                    cmd: cmd::PUT,
                    size: 10,
                    ..Default::default()
                },
                1.0,
            ),
        ] {
            let p = measure(&mut l, c, ops, &plan, true).unwrap();
            assert_eq!(p.batches.len(), 3);
        }
        l.ctl_send(Ctl::default()).unwrap();
        srv.join().unwrap().unwrap();
    }
}
