use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use nix::sys::signal::{SigSet, Signal};

use ni_abi::window::Kind;
use ni_device::daemon::{ConfigFile, Daemon};

/// Hosts N emulated network interfaces (Lanai X / CM-5 NI class) and the fabric between
/// them. Each NI is a PCI function served over vfio-user at RUN_DIR/ni<i>.sock, for QEMU's
/// `-device vfio-user-pci` or for libni directly; RUN_DIR/control.sock is for ni-ctl.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Number of NIs to host [default: 2, or the config file's `nodes`].
    #[arg(long, short = 'n')]
    nodes: Option<u32>,
    /// Directory for the sockets and the pid/lock file [default: the config file's
    /// `run_dir`, or $XDG_RUNTIME_DIR/ni, or /tmp/ni-$UID].
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// TOML config file: `nodes = N`, `run_dir = "DIR"`, `collective_timeout_secs = S`,
    /// `torus = "XxYxZ"`, and `[[partition]]` tables with `name` and `nodes = [..]`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Seconds a collective may wait for its last member before it fails on every member
    /// [default: 30, or the config file's `collective_timeout_secs`].
    #[arg(long)]
    collective_timeout: Option<f64>,
    /// The SSD-T90 torus, XxYxZ: NI i sits on its i-th node, the rest are spares for
    /// `ni-ctl map-out` [default: the config file's `torus`, or the smallest that holds the
    /// NIs].
    #[arg(long, value_name = "XxYxZ")]
    torus: Option<String>,
    /// The direct path: each partition of up to 64 NIs gets a window of shared memory where
    /// its members exchange small messages and collectives without the daemon's poller.
    /// `isolated` (or `on`): one file per writer, each member maps its own part writable and
    /// the rest read-only — host processes only. `shared`: one file, the whole window
    /// read-only in BAR4 and the member's own part read-write in BAR3 — what guests (QEMU)
    /// can map. `off`: everything through the fabric [default: isolated, or the config
    /// file's `direct`].
    #[arg(long, value_name = "isolated|shared|off", value_parser = parse_direct)]
    direct: Option<Direct>,
    /// A fabric that spans hosts: a TOML file with `[[host]]` tables (`name`, `link =
    /// "ADDRESS:PORT"`, `nis`), the fabric's `[[partition]]` tables, `torus`,
    /// `collective_timeout_secs`, `manager` (the partition manager's host, default the
    /// first) and `transport` (`tcp`, the default, or `libfabric:PROVIDER`). Every daemon of the fabric runs with the same file; NIs are numbered across
    /// hosts in its order (device/abi/links.md). Needs --host.
    #[arg(long, requires = "host")]
    fabric: Option<PathBuf>,
    /// Which `[[host]]` of the --fabric file this daemon is.
    #[arg(long, requires = "fabric")]
    host: Option<String>,
    /// Take over from an earlier process of this daemon (a planned restart: `ni-ctl daemon
    /// restart` or SIGHUP); the descriptor of its state. Not for people.
    #[arg(long, hide = true)]
    handover_fd: Option<i32>,
    /// Print the handover image format this binary reads and exit.
    #[arg(long, hide = true)]
    handover_format: bool,
    /// Check that this binary can take the handover image at this descriptor, and exit.
    #[arg(long, hide = true)]
    handover_check_fd: Option<i32>,
}

/// `--direct`'s value (a newtype: clap reads `Option<Option<_>>` as an optional value).
#[derive(Clone, Copy, Debug)]
struct Direct(Option<Kind>);

fn parse_direct(s: &str) -> Result<Direct, String> {
    ni_device::daemon::parse_direct(s).map(Direct)
}

fn default_run_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("ni"),
        // SAFETY: getuid has no preconditions.
        None => PathBuf::from(format!("/tmp/ni-{}", unsafe { libc::getuid() })),
    }
}

fn main() -> Result<()> {
    ni_device::handover::record_invocation();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NI_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // A panic inside one client's session is caught and ends that session; log it as such
    // instead of printing a raw backtrace.
    std::panic::set_hook(Box::new(|info| tracing::error!("panic: {info}")));
    let args = Args::parse();
    if args.handover_format {
        println!("{}", ni_device::handover::FORMAT);
        return Ok(());
    }
    if let Some(fd) = args.handover_check_fd {
        let img = ni_device::handover::load(fd)?;
        ni_device::handover::validate(&img)?;
        println!("ok");
        return Ok(());
    }
    let handover = args
        .handover_fd
        .map(ni_device::handover::load)
        .transpose()
        .context("taking over from the previous process")?;
    // Taking over: how the daemon was started comes with the image, not from a config file
    // that may have changed since.
    let file = match (&args.config, &handover) {
        (Some(p), None) => ConfigFile::load(p)?,
        _ => ConfigFile::default(),
    };
    let span = match (&args.fabric, &args.host) {
        (Some(path), Some(host)) => Some(ni_device::daemon::Span::load(path, host)?),
        _ => None,
    };
    let mut partitions = file.partition;
    let mut torus = args.torus.or(file.torus);
    let mut collective_timeout = args.collective_timeout.or(file.collective_timeout_secs);
    let nodes = match &span {
        None => args.nodes.or(file.nodes).unwrap_or(2),
        Some((s, d)) => {
            let total = s.total();
            if let Some(n) = args.nodes.or(file.nodes).filter(|&n| n != total) {
                anyhow::bail!("--nodes {n}, but the fabric description has {total} NIs");
            }
            if !partitions.is_empty() {
                anyhow::bail!("with --fabric, partitions come from the fabric description");
            }
            partitions = d
                .partition
                .iter()
                .map(|p| ni_device::daemon::PartitionConfig {
                    name: p.name.clone(),
                    nodes: p.nodes.clone(),
                })
                .collect();
            torus = torus.or(d.torus.clone());
            collective_timeout = collective_timeout.or(d.collective_timeout_secs);
            total
        }
    };
    let mut run_dir = args
        .run_dir
        .or(file.run_dir)
        .unwrap_or_else(default_run_dir);
    let mut nodes = nodes;
    let mut direct_taken = None;
    if let Some(img) = &handover {
        let st = &img.startup;
        nodes = st.nodes;
        run_dir = st.run_dir.clone();
        torus = Some(st.torus.clone());
        collective_timeout = Some(st.collective_timeout_ms as f64 / 1000.0);
        direct_taken = Some(match &st.direct {
            None => None,
            Some(d) => ni_device::daemon::parse_direct(d).map_err(anyhow::Error::msg)?,
        });
    }

    // Block the shutdown and restart signals in every thread; the main thread waits for
    // them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGHUP);
    signals.thread_block().context("blocking signals")?;

    let timeout = collective_timeout
        .map(std::time::Duration::from_secs_f64)
        .unwrap_or(ni_device::fabric::collective::DEFAULT_TIMEOUT);
    let direct = match (direct_taken, args.direct) {
        (Some(d), _) => d,
        (None, Some(Direct(d))) => d,
        (None, None) => file
            .direct
            .as_ref()
            .map(|d| d.kind())
            .transpose()
            .map_err(anyhow::Error::msg)
            .context("the config file's `direct`")?
            .unwrap_or(Some(Kind::Isolated)),
    };
    let daemon = Daemon::start_or_resume(
        &run_dir,
        nodes,
        &partitions,
        timeout,
        torus.as_deref(),
        direct,
        span.map(|(s, _)| s),
        handover,
    )?;
    let sig = loop {
        let sig = signals.wait().context("waiting for a signal")?;
        if sig != Signal::SIGHUP {
            break sig;
        }
        // A planned restart into the same path; returns only when refused (logged).
        tracing::info!("SIGHUP: planned restart");
        ni_device::handover::restart(&daemon, None, None);
    };
    tracing::info!("{sig:?}: shutting down");
    daemon.cleanup();
    Ok(())
}
