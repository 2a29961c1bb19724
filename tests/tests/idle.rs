//! An idle daemon sleeps: its poller yields only for a while after work (a client's request,
//! an attach, a timer), not after each of its timed wake-ups with nothing to do, which used to
//! keep it yielding 2 ms out of every 50 — 4% of a cpu taken from whatever shares it (the
//! ranks beside it, a guest's vCPU) while no client did anything.

use std::time::Duration;

use ni_tests::Daemon;

/// Process `pid`'s cpu time so far, in clock ticks (`/proc/PID/stat` utime + stime).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("daemon stat");
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn an_idle_daemon_takes_almost_no_cpu() {
    let mut d = Daemon::start(2);
    // Clients came and went: the poller had work, then none.
    drop(d.attach_pair());
    std::thread::sleep(Duration::from_millis(500));
    let pid = d.child.id();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let window = Duration::from_secs(4);
    let before = cpu_ticks(pid);
    std::thread::sleep(window);
    let used = cpu_ticks(pid) - before;
    // 2% of one cpu; the old poller took about 4%, this one well under 1%.
    let limit = window.as_secs() * hz / 50;
    assert!(
        used <= limit,
        "idle ni-device used {used} ticks of cpu in {window:?} (limit {limit}, {hz} a second)"
    );
    let _ = d.child.kill();
}
