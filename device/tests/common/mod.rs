//! A real `ni-device` process and real vfio-user clients for the integration tests.
#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ni_abi::pci;
use vfio_user::Client;

pub mod cm5_driver;
pub mod lanai_driver;
pub mod mlink_driver;
pub mod t3e_driver;

pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    _tmp: TempDir,
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(
            format!("ni-test-{tag}-{}-{:?}", std::process::id(), Instant::now())
                .replace([' ', '.'], "_"),
        );
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn wait_for(path: &Path) {
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Daemon {
    pub fn start(nodes: u32) -> Daemon {
        Daemon::start_with(nodes, &[])
    }

    /// With a TOML config file of `text` (`--config`).
    #[allow(dead_code)]
    pub fn start_config(nodes: u32, text: &str) -> Daemon {
        let tmp = TempDir::new("dev");
        let conf = tmp.0.join("ni.toml");
        std::fs::write(&conf, text).unwrap();
        let dir = tmp.0.join("run");
        let child = spawn_with(&dir, nodes, &["--config", conf.to_str().unwrap()]);
        Daemon {
            child,
            dir,
            _tmp: tmp,
        }
    }

    /// With more `ni-device` arguments.
    pub fn start_with(nodes: u32, args: &[&str]) -> Daemon {
        let tmp = TempDir::new("dev");
        let dir = tmp.0.join("run");
        let child = spawn_with(&dir, nodes, args);
        Daemon {
            child,
            dir,
            _tmp: tmp,
        }
    }

    /// One host of a fabric that spans hosts: `ni-device --fabric FILE --host HOST` (every
    /// host of a fabric gets the same description, byte for byte). It serves only its own
    /// NIs, `ni{N}.sock` with N the fabric-wide NI number; its log is `run.log` beside the
    /// run directory (`dir.with_extension("log")`), as `start_with`'s is.
    pub fn start_fabric(description: &str, host: &str) -> Daemon {
        let tmp = TempDir::new(&format!("fabric-{host}"));
        let desc = tmp.0.join("fabric.toml");
        std::fs::write(&desc, description).expect("writing the fabric description");
        let dir = tmp.0.join("run");
        let log = File::create(dir.with_extension("log")).expect("creating the daemon's log");
        let child = Command::new(env!("CARGO_BIN_EXE_ni-device"))
            .arg("--fabric")
            .arg(&desc)
            .args(["--host", host, "--run-dir"])
            .arg(&dir)
            .env("NI_LOG", "debug")
            .stderr(Stdio::from(log))
            .spawn()
            .expect("ni-device starts");
        wait_for(&dir.join("control.sock"));
        Daemon {
            child,
            dir,
            _tmp: tmp,
        }
    }

    pub fn sock(&self, i: u32) -> PathBuf {
        self.dir.join(format!("ni{i}.sock"))
    }

    pub fn client(&self, i: u32) -> Client {
        Client::new(&self.sock(i)).expect("vfio-user client connects")
    }

    /// One control-socket request, one response.
    pub fn control(&self, line: &str) -> serde_json::Value {
        let mut s = UnixStream::connect(self.dir.join("control.sock")).unwrap();
        s.write_all(line.as_bytes()).unwrap();
        s.write_all(b"\n").unwrap();
        let mut r = BufReader::new(s);
        let mut out = String::new();
        r.read_line(&mut out).unwrap();
        serde_json::from_str(&out).unwrap()
    }

    pub fn counter(&self, node: u32, name: &str) -> u64 {
        let v = self.control(&format!(
            r#"{{"version":1,"request":"counters","nodes":[{node}]}}"#
        ));
        let list = v["counters"][0]["counters"].as_array().unwrap();
        list.iter()
            .find(|p| p[0] == name)
            .unwrap_or_else(|| panic!("no counter {name}"))[1]
            .as_u64()
            .unwrap()
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

pub fn spawn(dir: &Path, nodes: u32) -> Child {
    spawn_with(dir, nodes, &[])
}

pub fn spawn_with(dir: &Path, nodes: u32, args: &[&str]) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_ni-device"))
        .args(["--nodes", &nodes.to_string(), "--run-dir"])
        .arg(dir)
        .args(args)
        .env("NI_LOG", "debug")
        .stderr(Stdio::from(
            File::create(dir.with_extension("log")).unwrap(),
        ))
        .spawn()
        .expect("ni-device starts");
    wait_for(&dir.join("control.sock"));
    child
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- config-space and register helpers over a crate Client ----

pub fn cfg_read32(c: &mut Client, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(pci::CONFIG_REGION, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

pub fn cfg_read16(c: &mut Client, off: u64) -> u16 {
    let mut b = [0u8; 2];
    c.region_read(pci::CONFIG_REGION, off, &mut b).unwrap();
    u16::from_le_bytes(b)
}

pub fn cfg_write16(c: &mut Client, off: u64, v: u16) {
    c.region_write(pci::CONFIG_REGION, off, &v.to_le_bytes())
        .unwrap();
}

pub fn cfg_write32(c: &mut Client, off: u64, v: u32) {
    c.region_write(pci::CONFIG_REGION, off, &v.to_le_bytes())
        .unwrap();
}

/// Memory Space and Bus Master Enable, as a driver does first.
pub fn enable(c: &mut Client) {
    let cmd = cfg_read16(c, 4);
    cfg_write16(c, 4, cmd | 0x6);
}

/// Lanai special register, big-endian, over BAR0.
pub fn special_read(c: &mut Client, off: u32, width: usize) -> u64 {
    let mut b = vec![0u8; width];
    c.region_read(
        pci::BAR0_REGION,
        ni_abi::lanai::SPECIALS + off as u64,
        &mut b,
    )
    .unwrap();
    b.iter().fold(0u64, |a, &x| (a << 8) | x as u64)
}

pub fn special_write(c: &mut Client, off: u32, width: usize, v: u64) {
    let b: Vec<u8> = (0..width).rev().map(|i| (v >> (8 * i)) as u8).collect();
    c.region_write(pci::BAR0_REGION, ni_abi::lanai::SPECIALS + off as u64, &b)
        .unwrap();
}

/// CM-5 register, 32-bit little-endian over BAR2; `sup` selects the supervisor window.
pub fn cm5_read(c: &mut Client, sup: bool, off: u32) -> u32 {
    let base = if sup { ni_abi::cm5::SUPERVISOR } else { 0 };
    let mut b = [0u8; 4];
    c.region_read(pci::BAR2_REGION, base + off as u64, &mut b)
        .unwrap();
    u32::from_le_bytes(b)
}

pub fn cm5_write(c: &mut Client, sup: bool, off: u32, v: u32) {
    let base = if sup { ni_abi::cm5::SUPERVISOR } else { 0 };
    c.region_write(pci::BAR2_REGION, base + off as u64, &v.to_le_bytes())
        .unwrap();
}

/// MSI-X on, every vector unmasked in the table (a direct client programs it).
pub fn enable_msix(c: &mut Client) {
    let ctl = cfg_read16(c, 0x52);
    cfg_write16(c, 0x52, ctl | 0x8000);
    for v in 0..16u64 {
        c.region_write(pci::BAR4_REGION, v * 16 + 12, &0u32.to_le_bytes())
            .unwrap();
    }
}

/// MSI-X on, and `vector` delivered to a fresh eventfd: a driver's first step towards one
/// interrupt.
pub fn msix_vector(c: &mut Client, vector: u16) -> File {
    use std::os::fd::AsRawFd;
    use vfio_bindings::bindings::vfio::{VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD};
    enable_msix(c);
    let ev = eventfd();
    c.set_irqs(
        pci::MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        vector as u32,
        1,
        &[ev.as_raw_fd()],
    )
    .expect("an MSI-X vector on an eventfd");
    ev
}

pub fn eventfd() -> File {
    // SAFETY: eventfd returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh descriptor we own.
    unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) }
}

/// Wait up to `ms` for an eventfd to fire; returns its count (0 if it did not).
pub fn wait_event(f: &File, ms: u64) -> u64 {
    let t = Instant::now();
    loop {
        let mut b = [0u8; 8];
        match (&*f).read(&mut b) {
            Ok(8) => return u64::from_ne_bytes(b),
            _ if t.elapsed() > Duration::from_millis(ms) => return 0,
            _ => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Client memory the device will map: a memfd sealed against shrinking.
pub fn memfd(size: u64) -> File {
    ni_device::dma::sealed_memfd(c"ni-test", size).unwrap()
}

// ---- a raw vfio-user client for requests the crate's Client cannot express ----

pub const REPLY: u32 = 1;
pub const ERROR: u32 = 1 << 5;

pub struct Raw {
    pub s: UnixStream,
    id: u16,
}

pub struct RawReply {
    pub flags: u32,
    pub error: u32,
    pub body: Vec<u8>,
}

impl RawReply {
    pub fn is_error(&self) -> bool {
        self.flags & ERROR != 0
    }
}

impl Raw {
    pub fn connect(path: &Path) -> Raw {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Raw { s, id: 0 }
    }

    /// Send one command (header + payload) and read the reply.
    pub fn call(&mut self, command: u16, payload: &[u8]) -> std::io::Result<RawReply> {
        self.id = self.id.wrapping_add(1);
        let mut msg = Vec::new();
        msg.extend_from_slice(&self.id.to_le_bytes());
        msg.extend_from_slice(&command.to_le_bytes());
        msg.extend_from_slice(&(16 + payload.len() as u32).to_le_bytes());
        msg.extend_from_slice(&0u32.to_le_bytes());
        msg.extend_from_slice(&0u32.to_le_bytes());
        msg.extend_from_slice(payload);
        self.s.write_all(&msg)?;
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h)?;
        let size = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
        let mut body = vec![0u8; size.saturating_sub(16)];
        self.s.read_exact(&mut body)?;
        Ok(RawReply {
            flags: u32::from_le_bytes(h[8..12].try_into().unwrap()),
            error: u32::from_le_bytes(h[12..16].try_into().unwrap()),
            body,
        })
    }

    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> RawReply {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        self.call(9, &p).unwrap()
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> RawReply {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&(data.len() as u32).to_le_bytes());
        p.extend_from_slice(data);
        self.call(10, &p).unwrap()
    }

    pub fn dma_unmap(&mut self, address: u64, size: u64) -> RawReply {
        let mut p = Vec::new();
        p.extend_from_slice(&24u32.to_le_bytes()); // argsz
        p.extend_from_slice(&0u32.to_le_bytes()); // flags
        p.extend_from_slice(&address.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(3, &p).unwrap()
    }

    /// DMA_MAP without a file descriptor.
    pub fn dma_map_no_fd(&mut self, address: u64, size: u64) -> RawReply {
        let mut p = Vec::new();
        p.extend_from_slice(&32u32.to_le_bytes());
        p.extend_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&0u64.to_le_bytes());
        p.extend_from_slice(&address.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(2, &p).unwrap()
    }
}

/// A small deterministic generator (xorshift) for hostile tests: the garbage is the same on
/// every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Poll `done` until it holds; fail with `what` after 5 s.
pub fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(5), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
