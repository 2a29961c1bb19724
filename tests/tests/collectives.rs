//! Collectives in the network (issue 4): separate processes on a real daemon, P = 1 to 8.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ni_tests::*;

const LIMIT: Duration = Duration::from_secs(300);

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ni-test-coll"))
}

fn run(d: &Daemon, p: u32, scenario: &str) {
    let ranks: Vec<_> = (0..p).map(|i| d.rank(&bin(), i, scenario)).collect();
    for r in ranks {
        assert_ok(&finish(r, LIMIT), scenario, d);
    }
}

#[test]
fn cm5_combines_every_pattern_combiner_width_with_segments_and_abstainers() {
    for p in 1..=8 {
        let d = Daemon::start(p);
        run(&d, p, "combines");
    }
}

#[test]
fn collision_then_flush() {
    for p in [1, 2, 5] {
        let d = Daemon::start(p);
        run(&d, p, "collision");
        if p > 1 {
            assert!(d.counter(0, "err_collision") >= 2);
        }
    }
}

#[test]
fn network_done_waits_for_every_member_and_its_messages() {
    for p in [1, 2, 3] {
        let d = Daemon::start(p);
        run(&d, p, "network-done");
    }
}

#[test]
fn sync_and_async_globals() {
    for p in [1, 2, 4] {
        let d = Daemon::start(p);
        run(&d, p, "globals");
    }
}

/// The C ABI's blocking vector collectives run as the Rust API's typed calls do: vectors
/// past a window slot in the window's pieces or through the members' exported memory, not
/// as one operation through the device's thread (which they were until stop 49).
#[test]
fn c_abi_blocking_collectives_take_the_window_past_a_slot() {
    let direct = std::env::var("NI_TEST_DIRECT").as_deref() != Ok("off");
    for p in [2, 3] {
        let d = Daemon::start(p);
        run(&d, p, "c-abi");
        let count = |name: &str| d.counter(0, name);
        let on = |n: u64| if direct { n } else { 0 };
        assert_eq!(count("window_large_allreduces"), on(1), "P = {p}");
        // The 100 000 u64 from every root; the 3000 are read without a round.
        assert_eq!(count("window_large_bcasts"), on(p as u64), "P = {p}");
        assert_eq!(count("window_large_reduces"), on(p as u64), "P = {p}");
        assert_eq!(count("window_large_scans"), on(1), "P = {p}");
        assert_eq!(count("window_large_allgathers"), on(1), "P = {p}");
    }
}

#[test]
fn vector_collectives_broadcast_allreduce_scan_reduce_allgather() {
    let direct = std::env::var("NI_TEST_DIRECT").as_deref() != Ok("off");
    for p in [1, 2, 3, 8] {
        let d = Daemon::start(p);
        run(&d, p, "vectors");
        // Allreduces of 2000 elements and up go through the members' exported scratch
        // (fastpath.md, "Large allreduce in the window").
        let large = d.counter(0, "window_large_allreduces");
        assert_eq!(
            large > 0,
            direct,
            "{large} large allreduces in the window, P = {p}"
        );
        // Broadcasts of 200000 u64 and up (fastpath.md, "Large broadcast in the window"):
        // 3 sizes from every root, the last in two pieces; the 2100 u64 are read where the
        // root keeps them, without a round ("Broadcasts read where the root keeps them").
        let bcasts = d.counter(0, "window_large_bcasts");
        let want = if direct { 4 * p as u64 } else { 0 };
        assert_eq!(bcasts, want, "large broadcasts in the window, P = {p}");
        // Reduces of 2000 i64 (twice) and 200000 to every root: the 200000 through the same
        // exported memory, the 2000 i64 as pieces in the rings (any number of members); then
        // minima over ±0 to every root twice each, two of 200003 f64 and, up to 2 members,
        // one of 8 MiB and a bit in two pieces.
        let reduces = d.counter(0, "window_large_reduces");
        let want = if direct {
            p as u64 * (1 + 2 * 2 + if p <= 2 { 2 * 2 } else { 0 })
        } else {
            0
        };
        assert_eq!(reduces, want, "large reduces in the window, P = {p}");
        // Allgathers of 600 and 30000 u64, twice each; up to 3 members one of 8 MiB and a
        // bit, in two pieces.
        let allgathers = d.counter(0, "window_large_allgathers");
        assert_eq!(
            allgathers,
            if direct {
                4 + if p <= 3 { 2 } else { 0 }
            } else {
                0
            },
            "large allgathers in the window, P = {p}"
        );
        // Scans of 1100, 200000 and 1.2 M f64 (two pieces), inclusive and exclusive, and of
        // 200003 elements into buffers at each member's own offset (minimums and sums,
        // inclusive and exclusive, twice); the 1100 f64 (8800 bytes) and 1009 go in the
        // rings: whole where a ring's piece holds them (`ring_coll_max`, 16 KiB up to 8
        // members), else, with 4 members and more, as pieces.
        let scans = d.counter(0, "window_large_scans");
        let want = if direct { 16 } else { 0 };
        assert_eq!(scans, want, "large scans in the window, P = {p}");
        // Results written into every member's buffer (fastpath.md, "Large allreduce in the
        // window"), where all are `alloc` regions apart from the data: the allreduces of
        // 2000, 131072 and 8 Mi f64 (8 pieces) and of 1009 and 200003 (twice) at each
        // member's own offset; alone, also the four of "mixed places" (nobody's buffers are
        // heap memory); with 2 members and more, the scans at those offsets (8: the 1009 go
        // in the rings) and the 1.2 M f64 ones (two pieces, twice). Not the in-place ones
        // (send = receive), nor any where an odd member's receive buffer is heap memory.
        let pushed = d.counter(0, "window_large_pushed");
        let want = match (direct, p) {
            (false, _) => 0,
            (true, 1) => 10 + 3 + 4,
            (true, _) => 10 + 3 + 8 + 4,
        };
        assert_eq!(pushed, want, "large collectives pushed, P = {p}");
        // Rank 0's buffers are `alloc` regions apart from each other: its data read where
        // it is (fastpath.md, "Large allreduce in the window"); the in-place allreduce
        // (send and receive the same bytes) and rank 1's heap memory through scratch.
        let in_place = d.counter(0, "window_large_allreduces_in_place");
        let heap = if p > 1 {
            d.counter(1, "window_large_allreduces")
                - d.counter(1, "window_large_allreduces_in_place")
        } else {
            0
        };
        if direct {
            assert!(
                in_place > 0 && in_place < large,
                "{in_place} of {large} large allreduces read in place, P = {p}"
            );
            assert!(
                p == 1 || heap >= 4,
                "rank 1's heap memory through scratch, P = {p}"
            );
        } else {
            assert_eq!(in_place, 0);
        }
        // Honest members' places, however they lie (heap memory, offsets, scratch sized for
        // an earlier vector), are never refused as a liar's.
        for r in 0..p {
            assert_eq!(d.counter(r, "window_ring_errors"), 0, "rank {r}, P = {p}");
        }
    }
}

/// Small broadcasts go as messages from their root in the rings (fastpath.md, "Small
/// broadcasts in the rings"): every member gets every root's vectors in order, mixed with
/// slot allreduces and tagged messages; a root runs ahead of members that have not called
/// the broadcast yet; a member in a different broadcast alone fails with collision.
#[test]
fn small_broadcasts_from_a_root_that_runs_ahead_arrive_in_order() {
    let direct = std::env::var("NI_TEST_DIRECT").as_deref() != Ok("off");
    for p in [1, 2, 3, 5] {
        let d = Daemon::start(p);
        run(&d, p, "bcast-rings");
        // Rank 1 counted each broadcast it took from the rings as a collective, and the
        // daemon counts the window's collectives in `collectives` too.
        if p > 1 {
            let colls = d.counter(1, "window_collectives");
            let want = if direct {
                (300 * p + 200 + 2) as u64
            } else {
                0
            };
            assert!(
                colls >= want && (direct || colls == 0),
                "P = {p}: {colls} window collectives at rank 1"
            );
        }
    }
}

/// Broadcasts of more than a slot read where the root keeps them (fastpath.md, "Broadcasts
/// read where the root keeps them"): from `alloc` regions and from registered heap memory,
/// with a member that maps nobody's memory (as a guest), a member in a different broadcast,
/// and a member later than the collective timeout.
#[test]
fn broadcasts_past_a_slot_are_read_where_the_root_keeps_them() {
    let direct = std::env::var("NI_TEST_DIRECT").as_deref() != Ok("off");
    for p in [1, 2, 3, 5] {
        let d = Daemon::start(p);
        run(&d, p, "bcast-read");
        // Every one of the 4 sizes × 2 buffers from every root went member to member, none
        // through the exported-memory rounds (or, without a window, the fabric).
        let colls = d.counter(1 % p, "window_collectives");
        assert!(
            (colls >= 8 * p as u64) == direct,
            "P = {p}: {colls} window collectives"
        );
        assert_eq!(d.counter(0, "window_large_bcasts"), 0, "P = {p}");
        if p >= 3 {
            run(&d, p, "bcast-read-guest");
        }
    }
    let d = Daemon::start_with(2, Some("collective_timeout_secs = 1.0\n"));
    run(&d, 2, "bcast-read-late");
}

/// Reduces and scans as messages in the rings: the members that only send run ahead of
/// the root (a reduce) or of the next member (a scan), results keep the fabric's bits, and a
/// member in a different collective fails where it is seen (fastpath.md, "Collectives in the
/// rings").
#[test]
fn small_reduces_and_scans_run_ahead_in_the_rings() {
    let direct = std::env::var("NI_TEST_DIRECT").as_deref() != Ok("off");
    for p in [1, 2, 3, 5] {
        let d = Daemon::start(p);
        run(&d, p, "reduce-scan-rings");
        // Every member counts each reduce and scan it finished in the window.
        let colls = d.counter(p - 1, "window_collectives");
        let want = if direct {
            (p * 200 + 200 + 150 * 3) as u64
        } else {
            0
        };
        assert!(
            colls >= want && (direct || colls == 0),
            "P = {p}: {colls} window collectives at rank {}",
            p - 1
        );
    }
}

/// A member that moves its places once the others stopped agreeing on them (`coll.rs`
/// `moved_places`; fastpath.md "Large allreduce in the window"): its result over its data,
/// then its data past its region, then its scratch half, then no scratch half at all. The
/// others refuse the places, count them, and take the fabric's path with it — the sum right, no `peer down` — then agree afresh.
#[test]
fn a_member_that_moves_its_places_after_agreeing_is_refused_without_failing_the_others() {
    if std::env::var("NI_TEST_DIRECT").as_deref() == Ok("off") {
        eprintln!("NI_TEST_DIRECT=off: no window, so no places to lie about; not run");
        return;
    }
    let d = Daemon::start(3);
    run(&d, 3, "moved-places");
    for r in 0..2 {
        assert_eq!(
            d.counter(r, "window_ring_errors"),
            4,
            "rank {r}: the four refusals"
        );
        // Laps 0, 1, 3, 5 and 8 through the members' memory, each member's chunk pushed.
        assert_eq!(d.counter(r, "window_large_allreduces"), 5, "rank {r}");
        assert_eq!(d.counter(r, "window_large_pushed"), 5, "rank {r}");
    }
    assert_eq!(d.counter(2, "window_large_pushed"), 1, "the liar's lap 8");
}

/// A root's last broadcast is not lost when it detaches before the members call theirs.
#[test]
fn a_broadcast_outlives_its_root() {
    let d = Daemon::start(3);
    run(&d, 3, "bcast-root-leaves");
}

/// Partitions beyond 16 members keep the direct path (issue 15): their rings are smaller
/// (`ni_abi::window::ring_bytes`), every pair still talks through the window, and the
/// collectives still combine there. 64 ranks on this machine's 2 cores: oversubscribed.
#[test]
fn partitions_of_17_to_64_members_talk_and_combine_in_the_window() {
    let direct = std::env::var("NI_TEST_DIRECT").as_deref() != Ok("off");
    for p in [17, 64] {
        let d = Daemon::start(p);
        run(&d, p, "wide");
        let pairs = (p * (p - 1)) as u64;
        let (mut sends, mut colls, mut large) = (0, 0, 0);
        for r in 0..p {
            sends += d.counter(r, "window_sends");
            colls += d.counter(r, "window_collectives");
            large += d.counter(r, "window_large_allreduces");
        }
        // 6 laps of 3 sizes per pair; the 20000-byte ones are rendezvous, counted when
        // their payload crosses the fabric.
        if direct {
            assert!(sends >= pairs * 12, "P = {p}: {sends} sends in the window");
            assert!(
                colls >= p as u64 * 5,
                "P = {p}: {colls} collectives in the window"
            );
            assert_eq!(large, p as u64, "P = {p}: large allreduces");
        } else {
            assert_eq!((sends, colls, large), (0, 0, 0), "P = {p}");
        }
    }
}

fn victim_then_recover(d: &Daemon, kill: bool) -> Duration {
    let p = 3;
    let mut victim = d.rank(&bin(), 1, "victim");
    let others: Vec<_> = [0, 2]
        .iter()
        .map(|&i| d.rank(&bin(), i, "victim"))
        .collect();
    let mut out = std::io::BufReader::new(victim.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "victim ready");
    // Let the survivors block in the barrier.
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    // Killed: the survivors fail at once. Not killed: they fail when the round times out;
    // only then is the victim removed so a replacement can take its NI.
    if !kill {
        while d.counter(0, "err_timeout") == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "no timeout");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    let failed_after = t.elapsed();
    while d.control(r#"{"version":1,"request":"nodes"}"#)["nodes"][1]["state"] != "free" {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    let rejoin = d.rank(&bin(), 1, "rejoin");
    for o in others {
        assert_ok(&finish(o, LIMIT), "victim", d);
    }
    assert_ok(&finish(rejoin, LIMIT), "rejoin", d);
    let _ = p;
    failed_after
}

#[test]
fn a_member_killed_mid_collective_fails_the_others_then_the_partition_recovers() {
    let d = Daemon::start(3);
    let took = victim_then_recover(&d, true);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(d.counter(0, "err_peer_down") >= 1);
}

#[test]
fn a_member_that_never_joins_times_out_within_the_configured_bound() {
    let d = Daemon::start_with(3, Some("collective_timeout_secs = 1.0\n"));
    let took = victim_then_recover(&d, false);
    // The round started ~0.3 s before `t`; the timeout is 1 s (checked each poller pass).
    assert!(took < Duration::from_secs(3), "took {took:?}");
}
