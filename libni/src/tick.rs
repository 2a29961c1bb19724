//! The clocks of libni's polling loops.
//!
//! [`Tick`]: the clock a wait reads between its looks, `CLOCK_MONOTONIC` in nanoseconds, one
//! `u64`. A waiter reads it around its yields (how long a yield took tells a free core from a
//! taken one, `Contention`); `Instant::now` and `Instant::duration_since` checked what the
//! kernel returned and subtracted seconds and nanoseconds apart: ≈ 160 of the ≈ 1900
//! instructions a one-core 8 B round trip cost rank 0 (`taskset -c 0 tests/bench/instr.sh`).
//! The same vDSO call, kept as nanoseconds, leaves a subtraction. (A waiter whose cpu another
//! member waits on now reads none: it yields at every look, `Ni::wait_step`.)
//!
//! [`time_stamp`]: the time-stamp counter, for pacing a loop by a few hundred ticks
//! (`MessageQueue::take_into`) where even the vDSO call costs more than the pause.

use std::time::Duration;

/// A reading of `CLOCK_MONOTONIC`, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tick(u64);

impl Tick {
    #[inline]
    pub(crate) fn now() -> Tick {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC exists on every Linux,
        // so the call cannot fail (were it to, `ts` stays 0: a wait would only look idle
        // for less long).
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Tick(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    /// How long after `earlier` this reading is (zero if it is not after it).
    #[inline]
    pub(crate) fn since(self, earlier: Tick) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// The time-stamp counter (x86-64), else 0 (no pacing).
#[inline]
pub(crate) fn time_stamp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rdtsc` reads a counter; it touches no memory and every x86-64 cpu has it.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

#[cfg(test)]
mod tests {
    use super::Tick;
    use std::time::{Duration, Instant};

    /// It is the clock `Instant` reads, and never goes back: each reading, taken between two
    /// of `Instant`'s, spans no more than the outer pair and no less than the inner one (a
    /// preemption between the reads widens the bounds, never breaks them).
    #[test]
    fn ticks_follow_the_monotonic_clock() {
        let (i0, t0, i0b) = (Instant::now(), Tick::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (i1, t1, i1b) = (Instant::now(), Tick::now(), Instant::now());
        let ticked = t1.since(t0);
        assert!(ticked >= Duration::from_millis(20), "{ticked:?}");
        let (inner, outer) = (i1.duration_since(i0b), i1b.duration_since(i0));
        assert!(
            inner <= ticked && ticked <= outer,
            "{ticked:?} outside {inner:?}..={outer:?}"
        );
        assert_eq!(t0.since(t1), Duration::ZERO);
    }
}
