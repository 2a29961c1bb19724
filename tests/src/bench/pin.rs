//! Explicit placements. Every worker (ni rank, socket process, MPI rank) pins itself from its
//! rank and `NIB_PIN`; the runner pins what it launches around them (`nirun` and through it
//! `ni-device` with its poller thread, `mpirun`).

use std::process::Command;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Rank r on cpu r mod ncpu; ni-device, nirun and mpirun unpinned.
    Split,
    /// Every rank and ni-device (its poller) on cpu 0.
    Same,
    /// ni-device (its poller), nirun, mpirun alone on cpu 0; every rank on the last cpu.
    DevAlone,
}

impl Placement {
    pub fn parse(s: &str) -> Option<Placement> {
        match s {
            "split" => Some(Placement::Split),
            "same" => Some(Placement::Same),
            "dev-alone" => Some(Placement::DevAlone),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Placement::Split => "split",
            Placement::Same => "same",
            Placement::DevAlone => "dev-alone",
        }
    }

    pub fn from_env() -> Option<Placement> {
        std::env::var("NIB_PIN")
            .ok()
            .and_then(|s| Placement::parse(&s))
    }

    pub fn rank_cpu(self, rank: u32) -> usize {
        match self {
            Placement::Split => rank as usize % ncpus(),
            Placement::Same => 0,
            Placement::DevAlone => ncpus() - 1,
        }
    }

    /// CPUs for the launcher and the daemon (None: unpinned).
    pub fn helper_cpus(self) -> Option<Vec<usize>> {
        match self {
            Placement::Split => None,
            Placement::Same | Placement::DevAlone => Some(vec![0]),
        }
    }

    pub fn describe(self, ranks: u32) -> String {
        match self {
            Placement::Split => {
                let n = ncpus();
                let r: Vec<String> = (0..ranks.min(n as u32))
                    .map(|r| format!("rank{r}->cpu{}", self.rank_cpu(r)))
                    .collect();
                format!(
                    "split: rank r on cpu r mod {n} ({}); ni-device (poller), nirun, mpirun unpinned",
                    r.join(" ")
                )
            }
            Placement::Same => {
                format!("same: all {ranks} ranks and ni-device (poller), nirun, mpirun on cpu0")
            }
            Placement::DevAlone => format!(
                "dev-alone: all {ranks} ranks on cpu{}; ni-device (poller), nirun, mpirun on cpu0",
                ncpus() - 1
            ),
        }
    }
}

/// CPUs online (not the ones this process may use: workers start with a narrowed mask).
pub fn ncpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

/// Pin the calling thread (and the threads it starts later) to `cpus`.
pub fn pin_self(cpus: &[usize]) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "sched_setaffinity {cpus:?}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn current_cpus() -> Vec<usize> {
    // SAFETY: as above; sched_getaffinity fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pin a worker by its rank, as `NIB_PIN` says. Returns the cpus it is on.
pub fn pin_rank(rank: u32) -> Result<Vec<usize>, String> {
    if let Some(p) = Placement::from_env() {
        pin_self(&[p.rank_cpu(rank)])?;
    }
    Ok(current_cpus())
}

/// Make `cmd` start pinned to `cpus` (it and its children inherit the mask), in a process
/// group of its own (so the runner can stop it with everything it started).
pub fn pin_command(cmd: &mut Command, cpus: Option<Vec<usize>>) {
    use std::os::unix::process::CommandExt;
    let cpus = cpus.unwrap_or_else(|| (0..ncpus()).collect());
    cmd.process_group(0);
    // SAFETY: the closure only calls the async-signal-safe sched_setaffinity.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &cpus {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Process groups of the runs under way, stopped when the runner is interrupted.
static GROUPS: [std::sync::atomic::AtomicI32; 4] =
    [const { std::sync::atomic::AtomicI32::new(0) }; 4];

/// Remember a running group (its leader's pid).
pub fn track_group(pgid: u32) {
    use std::sync::atomic::Ordering;
    for g in &GROUPS {
        if g.compare_exchange(0, pgid as i32, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
}

/// Kill a group (and forget it).
pub fn kill_group(pgid: u32, sig: i32) {
    use std::sync::atomic::Ordering;
    // SAFETY: kill on a process group we started.
    unsafe { libc::kill(-(pgid as i32), sig) };
    for g in &GROUPS {
        let _ = g.compare_exchange(pgid as i32, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Forget a group that ended by itself.
pub fn untrack_group(pgid: u32) {
    use std::sync::atomic::Ordering;
    for g in &GROUPS {
        let _ = g.compare_exchange(pgid as i32, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    use std::sync::atomic::Ordering;
    for g in &GROUPS {
        let p = g.load(Ordering::SeqCst);
        if p > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(-p, libc::SIGTERM) };
        }
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(128 + sig) };
}

/// On SIGINT/SIGTERM/SIGHUP, stop every run under way, then exit.
pub fn stop_runs_on_signal() {
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only calls async-signal-safe functions.
        unsafe { libc::signal(s, on_signal as *const () as libc::sighandler_t) };
    }
}
