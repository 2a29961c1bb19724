//! One rank of the collective tests: `ni-test-coll SCENARIO`. Every rank derives every
//! member's inputs from (rank, round), so it computes the expected results itself, with
//! plain i128 arithmetic independent of the device's.

use ni_tests::check::{expect_status, status_of};
use std::time::{Duration, Instant};

use ni::{participation, Combiner, Error, Ni, Pattern, ReduceOp, Status};

fn mix(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 32)
}

/// Member `rank`'s words for round `round`: up to 3 random words, the rest sign extension,
/// so every value is an i96 the reference holds exactly (carries still cross all 5 words).
fn words(rank: u32, round: u64, len: usize, c: Combiner) -> Vec<u32> {
    let mut v: i128 = 0;
    let small = round.is_multiple_of(3);
    for i in 0..len.min(3) {
        let w = mix(rank as u64 + 1, round * 8 + i as u64) as u32;
        v |= ((if small { w % 5 } else { w }) as i128) << (32 * i);
    }
    if len >= 3 || !small {
        // Sign-extend from the top random bit.
        let bits = 32 * len.min(3) as u32;
        if v >> (bits - 1) & 1 == 1 && !matches!(c, Combiner::Uadd) {
            v -= 1i128 << bits;
        }
    }
    to_words(v, len, c)
}

fn to_words(v: i128, len: usize, c: Combiner) -> Vec<u32> {
    let mut w: Vec<u32> = (0..len)
        .map(|i| {
            if i < 4 {
                (v >> (32 * i)) as u32
            } else if v < 0 {
                u32::MAX
            } else {
                0
            }
        })
        .collect();
    if c == Combiner::Max {
        w.reverse();
    }
    w
}

fn value(w: &[u32], c: Combiner) -> i128 {
    let mut w = w.to_vec();
    if c == Combiner::Max {
        w.reverse();
    }
    let len = w.len();
    let mut v: i128 = 0;
    for (i, x) in w.iter().enumerate().take(len.min(3)) {
        v |= (*x as i128) << (32 * i);
    }
    let bits = 32 * len.min(3) as u32;
    let negative = if len > 3 {
        w[3] & 0x8000_0000 != 0
    } else {
        v >> (bits - 1) & 1 == 1
    };
    if negative && c != Combiner::Uadd || (c == Combiner::Uadd && len > 3 && w[3] != 0) {
        v -= 1i128 << bits;
    }
    v
}

struct Expect {
    words: Option<Vec<u32>>,
    overflow: bool,
}

/// The reference: what member `me` of `p` gets.
#[allow(clippy::too_many_arguments)]
fn reference(
    p: u32,
    me: u32,
    round: u64,
    pattern: Pattern,
    c: Combiner,
    len: usize,
    starts: &[bool],
    abstain: &[bool],
) -> Option<Expect> {
    let bits = 32 * len as u32;
    let val = |r: u32| value(&words(r, round, len, c), c);
    let fold = |rs: &mut dyn Iterator<Item = u32>| -> Option<i128> {
        let mut acc: Option<i128> = None;
        for r in rs {
            if abstain[r as usize] {
                continue;
            }
            let v = val(r);
            acc = Some(match (acc, c) {
                (None, _) => v,
                (Some(a), Combiner::Or) => a | v,
                (Some(a), Combiner::Xor) => a ^ v,
                (Some(a), Combiner::Add | Combiner::Uadd) => a + v,
                (Some(a), Combiner::Max) => a.max(v),
                (_, Combiner::RouterDone) => unreachable!("network-done has no values"),
            });
        }
        acc
    };
    let e = match pattern {
        Pattern::RouterDone => unreachable!("network-done has no values"),
        Pattern::Reduce => fold(&mut (0..p)),
        _ if abstain[me as usize] => return None,
        Pattern::ScanForward => {
            let s = (0..=me).rev().find(|&j| starts[j as usize]).unwrap_or(0);
            fold(&mut (s..me))
        }
        Pattern::ScanBackward => {
            let e = (me..p).find(|&j| starts[j as usize]).unwrap_or(p - 1);
            fold(&mut (me + 1..=e))
        }
    };
    let Some(e) = e else {
        // The identity: 0, or for MAX the most negative value (most significant word first).
        let mut w = vec![0u32; len];
        if c == Combiner::Max {
            w[0] = 0x8000_0000;
        }
        return Some(Expect {
            words: Some(w),
            overflow: false,
        });
    };
    let fits = match c {
        Combiner::Add => bits > 96 || (e >= -(1i128 << (bits - 1)) && e < (1i128 << (bits - 1))),
        Combiner::Uadd => e >= 0 && (bits > 96 || e < (1i128 << bits)),
        _ => true,
    };
    Some(Expect {
        words: Some(to_words(e, len, c)),
        overflow: !fits,
    })
}

fn combines(ni: &Ni) {
    let (p, me) = (ni.size(), ni.rank());
    // Members 3, 7: abstain; 7 still receives reductions (reduce_rec_abstain clear).
    let abstain: Vec<bool> = (0..p).map(|r| r % 4 == 3).collect();
    let rec_reduce = |r: u32| r == 7;
    if abstain[me as usize] {
        let f = participation::COM_REC_ABSTAIN
            | if rec_reduce(me) {
                0
            } else {
                participation::REDUCE_REC_ABSTAIN
            };
        ni.set_participation(f).unwrap();
    }
    ni.barrier().unwrap();
    let mut round = 0u64;
    for pattern in [Pattern::ScanForward, Pattern::ScanBackward, Pattern::Reduce] {
        for c in [
            Combiner::Or,
            Combiner::Add,
            Combiner::Xor,
            Combiner::Uadd,
            Combiner::Max,
        ] {
            for len in 1..=5usize {
                for segmented in [false, true] {
                    round += 1;
                    // scan_start is latched when a member sends; an abstainer sends nothing,
                    // so it starts no segment.
                    let starts: Vec<bool> = (0..p)
                        .map(|r| {
                            segmented
                                && !abstain[r as usize]
                                && mix(round, r as u64).is_multiple_of(3)
                        })
                        .collect();
                    let want = reference(p, me, round, pattern, c, len, &starts, &abstain);
                    if abstain[me as usize] {
                        // Abstainers send nothing; one that takes reductions asks for them.
                        if pattern == Pattern::Reduce && rec_reduce(me) {
                            let got = ni.combine_receive(len).unwrap();
                            let w = want.unwrap();
                            assert_eq!(got.words, w.words, "abstainer's reduction, round {round}");
                        }
                        continue;
                    }
                    let got = ni
                        .combine(pattern, c, &words(me, round, len, c), starts[me as usize])
                        .unwrap_or_else(|e| {
                            panic!("round {round} {pattern:?} {c:?} len {len}: {e}")
                        });
                    let w = want.expect("a participant gets a result");
                    assert_eq!(
                        got.words, w.words,
                        "p={p} me={me} round {round} {pattern:?} {c:?} len {len} seg {segmented}"
                    );
                    assert_eq!(
                        got.overflow, w.overflow,
                        "overflow: p={p} me={me} round {round} {pattern:?} {c:?} len {len}"
                    );
                }
            }
        }
    }
    // An abstainer may not send.
    if abstain[me as usize] {
        expect_status(
            ni.combine(Pattern::Reduce, Combiner::Add, &[1], false),
            Status::Abstaining,
        );
    }
    ni.barrier().unwrap();
}

fn collision(ni: &Ni) {
    let me = ni.rank();
    // Two different combine operations in flight: collision everywhere.
    let c = if me == 0 { Combiner::Add } else { Combiner::Or };
    let r = ni.combine(Pattern::Reduce, c, &[1], false);
    if ni.size() > 1 {
        expect_status(r, Status::Collision);
        // Until a flush, every combine fails.
        expect_status(
            ni.combine(Pattern::Reduce, Combiner::Add, &[1], false),
            Status::Collision,
        );
        ni.combine_flush().unwrap();
    } else {
        r.unwrap();
    }
    let got = ni
        .combine(Pattern::Reduce, Combiner::Add, &[me + 1], false)
        .unwrap();
    let n = ni.size();
    assert_eq!(got.words.unwrap(), vec![n * (n + 1) / 2]);
    // Vector collectives that disagree collide too, without needing a flush.
    let buf = ni.alloc(4096).unwrap();
    let count = if me == 0 { 2 } else { 1 };
    let r = ni.allreduce::<i64>(ReduceOp::Sum, &buf, 0, &buf, 1024, count);
    if n > 1 {
        expect_status(r, Status::Collision);
    }
    ni.barrier().unwrap();
}

fn network_done(ni: &Ni) {
    let (p, me) = (ni.size(), ni.rank());
    let buf = ni.alloc(4096).unwrap();
    // Without outstanding messages it completes at once.
    ni.network_done().unwrap();
    if p < 2 {
        return;
    }
    // Rank 0 sends a counted message that rank 1 receives only 200 ms later, and only then
    // joins: nobody's network-done may complete before it did (the counting itself, a
    // message that has not arrived holding every member, is tests/cm5.rs's register-level
    // `network_done_waits_for_every_member_and_every_message`). The ranks compare their
    // ends with that moment on the host's monotonic clock, one clock for every process: each
    // timing from its own start would start late whenever a rank is scheduled late.
    let mut joined = 0;
    if me == 0 {
        let s = ni.isend(1, &buf, 0..16, 5).unwrap();
        ni.network_done().unwrap();
        ni.wait(s).unwrap();
    } else if me == 1 {
        std::thread::sleep(Duration::from_millis(200));
        ni.recv(Some(0), &buf, 0..16, 5, u64::MAX).unwrap();
        joined = monotonic_ns();
        ni.network_done().unwrap();
    } else {
        ni.network_done().unwrap();
    }
    let done = monotonic_ns();
    let words = [(joined >> 32) as u32, joined as u32];
    let got = ni
        .combine(Pattern::Reduce, Combiner::Or, &words, false)
        .unwrap();
    let w = got.words.unwrap();
    let joined = (u64::from(w[0]) << 32) | u64::from(w[1]);
    assert!(joined > 0, "rank 1 said when it joined");
    assert!(
        done >= joined,
        "network-done finished {} µs before rank 1 joined it",
        (joined - done) / 1000
    );
}

/// `CLOCK_MONOTONIC` in nanoseconds: unlike `Instant`, comparable between processes.
fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn globals(ni: &Ni) {
    let (p, me) = (ni.size(), ni.rank());
    assert!(!ni.sync_global(false).unwrap());
    assert!(ni.sync_global(me == p - 1).unwrap());
    // Rank 0 abstains: its bit does not count and it may not send.
    if me == 0 && p > 1 {
        ni.set_participation(participation::SYNC_GLOBAL_ABSTAIN)
            .unwrap();
        expect_status(ni.sync_global(true), Status::Abstaining);
    }
    ni.barrier().unwrap();
    if !(me == 0 && p > 1) {
        assert!(
            !ni.sync_global(false).unwrap(),
            "an abstainer's bit counts as 0"
        );
    }
    ni.barrier().unwrap();
    if me == 0 {
        ni.set_participation(participation::GLOBAL_REC_IE).unwrap();
    }
    ni.barrier().unwrap();
    // Asynchronous global: the OR follows the last member's bit within a bounded delay.
    if me == p - 1 {
        ni.set_async_global(true).unwrap();
    }
    let t = Instant::now();
    while !ni.global_rec() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "global_rec never rose"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
    if me == 0 {
        let t = Instant::now();
        while ni.global_rises().unwrap() == 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "no global rec event");
        }
    }
    ni.barrier().unwrap();
    if me == p - 1 {
        ni.set_async_global(false).unwrap();
    }
    ni.barrier().unwrap();
    assert!(!ni.global_rec(), "global_rec falls with the last bit");
}

fn vectors(ni: &Ni) {
    let (p, me) = (ni.size() as usize, ni.rank() as usize);
    let max = 64 << 20;
    let send = ni.alloc(max).unwrap();
    let recv = ni.alloc(max * if p <= 2 { 2 } else { 1 }).unwrap();
    // Broadcast from every root.
    for root in 0..p {
        let data: Vec<u8> = (0..4096).map(|i| mix(root as u64, i) as u8).collect();
        if me == root {
            send.write_at(0, &data);
        } else {
            send.write_at(0, &[0u8; 4096]);
        }
        ni.broadcast::<u32>(root as u32, &send, 0, 1024).unwrap();
        let mut got = vec![0u8; 4096];
        send.read_at(0, &mut got);
        assert!(got == data, "broadcast from {root}");
    }
    // Broadcasts past a slot: every member reads the root's vector where the root keeps it
    // — in its `alloc` region as it is, or copied from registered heap memory (odd roots)
    // into a bounce (2100 u64, fastpath.md "Broadcasts read where the root keeps them") or
    // its scratch (larger, "Large broadcast in the window") — or with NI_TEST_DIRECT=off
    // the fabric's path. 12 MiB goes in two pieces. Twice each size, the second with the
    // keys already agreed on; a member's buffer holds garbage before.
    let heap = ni_tests::AppMemory::register(ni, 12 << 20, 0);
    for count in [2100usize, 2100, 200_000, 200_000, (12 << 20) / 8] {
        for root in 0..p {
            let buf: &ni::Region = if root % 2 == 1 { &heap } else { &send };
            let data: Vec<u8> = (0..count)
                .flat_map(|i| mix(root as u64 + count as u64, i as u64).to_le_bytes())
                .collect();
            if me == root {
                buf.write_at(0, &data);
            } else {
                buf.write_at(0, &vec![0xA5u8; count * 8]);
            }
            ni.broadcast::<u64>(root as u32, buf, 0, count).unwrap();
            let mut got = vec![0u8; count * 8];
            buf.read_at(0, &mut got);
            if let Some(i) = (0..count * 8).find(|&i| got[i] != data[i]) {
                panic!("broadcast of {count} u64 from {root}: byte {i} differs");
            }
        }
    }
    // Allreduce of f64, 1 element to 64 MiB: rank order, bit-identical to the reference.
    // 300: one window slot; 700: two slots in a row (`collective_pieces`); 2000 and up:
    // reduce-scatter and allgather through the members' exported scratch (`large.rs`),
    // or with NI_TEST_DIRECT=off the fabric's path.
    for &count in &[1usize, 3, 300, 700, 2000, 131072, (64 << 20) / 8] {
        if count * 8 > max {
            continue;
        }
        let mine: Vec<f64> = (0..count)
            .map(|i| (mix(me as u64, i as u64) % 1_000_000) as f64 * 1.000_000_1e-3)
            .collect();
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
        send.write_at(0, &bytes);
        ni.allreduce::<f64>(ReduceOp::Sum, &send, 0, &recv, 0, count)
            .unwrap();
        let mut got = vec![0u8; count * 8];
        recv.read_at(0, &mut got);
        // Check a sample (all of it for small counts) against ((x0 + x1) + x2) ...
        let step = (count / 4096).max(1);
        for i in (0..count).step_by(step) {
            let mut acc = (mix(0, i as u64) % 1_000_000) as f64 * 1.000_000_1e-3;
            for r in 1..p {
                acc += (mix(r as u64, i as u64) % 1_000_000) as f64 * 1.000_000_1e-3;
            }
            let g = f64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(
                g.to_bits(),
                acc.to_bits(),
                "allreduce f64 count {count} element {i}"
            );
        }
        // Every member holds the same bits: compare a digest across ranks.
        let digest = got.chunks(8).fold(0u64, |h, c| {
            mix(h, u64::from_le_bytes(c.try_into().unwrap()))
        });
        send.write_at(0, &digest.to_le_bytes());
        ni.allgather::<u64>(&send, 0, &recv, 0, 1).unwrap();
        for r in 0..p {
            let mut d = [0u8; 8];
            recv.read_at(r * 8, &mut d);
            assert_eq!(u64::from_le_bytes(d), digest, "rank {r}'s result differs");
        }
    }
    // In place (send and receive the same bytes; one window slot, two, the scratch path):
    // the result is built in the buffer that held this member's data.
    for count in [257usize, 700, 2000] {
        let mine: Vec<u8> = (0..count)
            .flat_map(|i| ((mix(me as u64, i as u64) % 1000) as i64).to_le_bytes())
            .collect();
        send.write_at(0, &mine);
        ni.allreduce::<i64>(ReduceOp::Max, &send, 0, &send, 0, count)
            .unwrap();
        let mut got = vec![0u8; count * 8];
        send.read_at(0, &mut got);
        for i in 0..count {
            let want = (0..p)
                .map(|r| (mix(r as u64, i as u64) % 1000) as i64)
                .max();
            let g = i64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(Some(g), want, "in-place max, count {count} element {i}");
        }
    }
    // Members reading one another's data where each has it: odd ranks' buffers are
    // registered heap memory (not exported: copied into scratch), even ranks' `alloc`
    // regions (read in place, and, result apart, results read in the receive buffer); one
    // receive buffer of the same region as its send buffer. Twice each, the second with
    // the keys already agreed on.
    let heap_send = ni_tests::AppMemory::register(ni, 2 << 20, 0);
    let heap_recv = ni_tests::AppMemory::register(ni, 2 << 20, 0);
    for (count, lap) in [(2000usize, 0), (2000, 1), (200_000, 0), (200_000, 1)] {
        let mine: Vec<u8> = (0..count)
            .flat_map(|i| ((mix(me as u64 + lap, i as u64) % 1000) as i64).to_le_bytes())
            .collect();
        let (sbuf, rbuf, at): (&ni::Region, &ni::Region, usize) = match (me % 2, lap) {
            (1, _) => (&heap_send, &heap_recv, 0),
            (_, 0) => (&send, &recv, 0),
            _ => (&send, &send, count * 8),
        };
        sbuf.write_at(0, &mine);
        ni.allreduce::<i64>(ReduceOp::Sum, sbuf, 0, rbuf, at, count)
            .unwrap();
        let mut got = vec![0u8; count * 8];
        rbuf.read_at(at, &mut got);
        for i in (0..count).step_by(7) {
            let want: i64 = (0..p)
                .map(|r| (mix(r as u64 + lap, i as u64) % 1000) as i64)
                .sum();
            let g = i64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(g, want, "mixed places, count {count} lap {lap} element {i}");
        }
    }
    // Every member's result in an exported receive buffer, each member at its own offset in
    // it, cut off a cache line (fastpath.md, "Large allreduce in the window": each member
    // writes its part into every other's buffer, an allreduce's and, past the rings — the
    // 200003 — a scan's): the bytes either side of every member's vector stay as they were,
    // whatever the others write (each member's its own bytes). The allreduce a minimum of
    // i64; the scans minimums over ±0, which keep the first operand's sign (the first
    // member's), so a prefix folded with its operands swapped shows, and sums of i64, whose
    // prefixes differ from member to member, so a prefix written to the wrong member shows.
    // Twice: every member's data in its send buffer (an `alloc` region: read where it is),
    // then odd members' in registered heap memory (copied into their scratch half first).
    let min_of = |r: usize, i: usize| (mix(r as u64, i as u64) % 1000) as i64 - 500;
    let sum_of = |r: usize, i: usize| (mix(r as u64 + 3, i as u64) % 1000) as i64;
    for (count, heap) in [(1009usize, false), (200_003, false), (200_003, true)] {
        let at = 8 * (1 + me);
        let bytes = count * 8;
        let guard = [0xa5 ^ me as u8; 64];
        let sbuf: &ni::Region = if heap && me % 2 == 1 {
            &heap_send
        } else {
            &send
        };
        for what in ["allreduce", "scan", "exscan", "scan-sum", "exscan-sum"] {
            recv.write_at(at - 8, &guard[..8]);
            recv.write_at(at + bytes, &guard);
            let mine: Vec<u8> = (0..count)
                .flat_map(|i| match what {
                    "allreduce" => min_of(me, i).to_le_bytes(),
                    "scan" | "exscan" => signed_zero(me, i).to_le_bytes(),
                    _ => sum_of(me, i).to_le_bytes(),
                })
                .collect();
            sbuf.write_at(0, &mine);
            let inclusive = what.starts_with("scan");
            match what {
                "allreduce" => ni.allreduce::<i64>(ReduceOp::Min, sbuf, 0, &recv, at, count),
                "scan" | "exscan" => {
                    ni.scan::<f64>(ReduceOp::Min, inclusive, sbuf, 0, &recv, at, count)
                }
                _ => ni.scan::<i64>(ReduceOp::Sum, inclusive, sbuf, 0, &recv, at, count),
            }
            .unwrap();
            let mut got = vec![0u8; bytes + 72];
            recv.read_at(at - 8, &mut got);
            assert_eq!(
                got[..8],
                guard[..8],
                "{what} of {count}: the 8 bytes before written"
            );
            assert_eq!(
                got[8 + bytes..],
                guard[..],
                "{what} of {count}: the 64 after written"
            );
            let upto = if inclusive { me + 1 } else { me };
            for i in 0..count {
                let g = u64::from_le_bytes(got[8 + i * 8..16 + i * 8].try_into().unwrap());
                let want = match what {
                    "allreduce" => (0..p).map(|r| min_of(r, i)).min().unwrap() as u64,
                    "exscan" if me == 0 => f64::INFINITY.to_bits(),
                    "scan" | "exscan" => signed_zero(0, i).to_bits(),
                    _ => (0..upto).map(|r| sum_of(r, i)).sum::<i64>() as u64,
                };
                assert_eq!(
                    g, want,
                    "{what} at offset {at}, count {count} (heap {heap}): element {i}"
                );
            }
        }
    }
    // Reduces past two slots (fastpath.md, "Large allreduce in the window", the reduce): an
    // even root's buffer an `alloc` region, every member folding its part into it; an odd
    // root's registered heap memory, of more than two the allreduce's rounds, the root
    // alone copying the result out. Every other member's receive buffer is left as it was.
    for (count, lap) in [(2000usize, 0u64), (2000, 1), (200_000, 0)] {
        for root in 0..p {
            let of = |r: usize, i: usize| {
                (mix(r as u64 + 8 * lap + 64 * root as u64, i as u64) % 1000) as i64
            };
            let mine: Vec<u8> = (0..count).flat_map(|i| of(me, i).to_le_bytes()).collect();
            let (sbuf, rbuf): (&ni::Region, &ni::Region) = if me % 2 == 1 {
                (&heap_send, &heap_recv)
            } else {
                (&send, &recv)
            };
            sbuf.write_at(0, &mine);
            rbuf.write_at(0, &vec![0xEEu8; count * 8]);
            ni.reduce::<i64>(root as u32, ReduceOp::Sum, sbuf, 0, rbuf, 0, count)
                .unwrap();
            let mut got = vec![0u8; count * 8];
            rbuf.read_at(0, &mut got);
            if me != root {
                assert!(
                    got.iter().all(|&b| b == 0xEE),
                    "reduce of {count} to {root}: member {me}'s receive buffer was written"
                );
                continue;
            }
            for i in (0..count).step_by(7) {
                let want: i64 = (0..p).map(|r| of(r, i)).sum();
                let g = i64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
                assert_eq!(g, want, "reduce of {count} to {root} lap {lap} element {i}");
            }
        }
    }
    // Reduces of f64 minima over ±0 past the rings: equal values, so each element keeps the
    // sign of the first operand, member 0's in rank order — a fold with its operands swapped
    // anywhere shows. Of two members whose root's receive buffer is exported, each member
    // folds its part into the root's buffer (fastpath.md, "Large allreduce in the window",
    // the reduce of 2 members): here 8 bytes into the region (the cut off a cache line), from
    // heap memory (the data in scratch), and up to 2 members 8 MiB and 3 elements (two
    // pieces, the last tiny); each twice, the second with the keys agreed on. Every element
    // checked, every other member's receive buffer left as it was.
    let big = (p <= 2).then_some(((8 << 20) / 8 + 3, 0usize, false));
    for (count, roff, heap) in [(200_003usize, 8usize, false), (200_003, 0, true)]
        .into_iter()
        .chain(big)
    {
        for root in 0..p {
            for lap in 0..2 {
                let sbuf = if heap { &heap_send } else { &send };
                let mine: Vec<u8> = (0..count)
                    .flat_map(|i| signed_zero(me, i).to_le_bytes())
                    .collect();
                sbuf.write_at(0, &mine);
                recv.write_at(roff, &vec![0x5Au8; count * 8]);
                ni.reduce::<f64>(root as u32, ReduceOp::Min, sbuf, 0, &recv, roff, count)
                    .unwrap();
                let mut got = vec![0u8; count * 8];
                recv.read_at(roff, &mut got);
                for (i, g) in got.chunks_exact(8).enumerate() {
                    let g = u64::from_le_bytes(g.try_into().unwrap());
                    let want = if me == root {
                        signed_zero(0, i).to_bits()
                    } else {
                        0x5A5A_5A5A_5A5A_5A5A
                    };
                    assert_eq!(
                        g, want,
                        "min over ±0 of {count} f64 to {root} (offset {roff}, heap {heap}, lap \
                         {lap}): member {me}'s element {i}"
                    );
                }
            }
        }
    }
    // Allgathers past a slot (fastpath.md, "Large allreduce in the window", its last
    // paragraph): every member copies the others' vectors from where they are. Odd ranks'
    // buffers are heap memory; the last lap's even ranks send from their own place in the
    // receive buffer. Up to 3 members, 8 MiB and a bit more (two pieces, each into every
    // member's block of the receive buffer), from `alloc` regions.
    let past_half = (p <= 3).then_some(((8 << 20) + 8000) / 8);
    let laps = [(600usize, 0u64), (600, 1), (30_000, 0), (30_000, 2)];
    for (count, lap) in laps.into_iter().chain(past_half.map(|n| (n, 3))) {
        let of = |r: usize, i: usize| mix(r as u64 * 31 + lap, i as u64);
        let mine: Vec<u8> = (0..count).flat_map(|i| of(me, i).to_le_bytes()).collect();
        let (sbuf, soff, rbuf): (&ni::Region, usize, &ni::Region) = match (me % 2, lap) {
            (_, 3) => (&send, 0, &recv),
            (1, _) => (&heap_send, 0, &heap_recv),
            (_, 2) => (&recv, me * count * 8, &recv),
            _ => (&send, 0, &recv),
        };
        sbuf.write_at(soff, &mine);
        ni.allgather::<u64>(sbuf, soff, rbuf, 0, count).unwrap();
        let mut got = vec![0u8; count * 8 * p];
        rbuf.read_at(0, &mut got);
        for r in 0..p {
            for i in (0..count).step_by(5) {
                let at = (r * count + i) * 8;
                let g = u64::from_le_bytes(got[at..at + 8].try_into().unwrap());
                assert_eq!(
                    g,
                    of(r, i),
                    "allgather of {count} lap {lap}: member {r}'s element {i}"
                );
            }
        }
    }
    // Scans past two slots, inclusive and exclusive (fastpath.md, "Large allreduce in the
    // window", its last paragraph): every member reduces the earlier members' vectors from
    // where they are, in rank order, so an f64 sum has the fabric's bits. Odd ranks'
    // buffers are heap memory (up to 2 MiB); lap 1 with the keys already agreed on; lap 2 in
    // place (send and receive the same bytes: the data copied to scratch first); 9.6 MB
    // goes in two pieces.
    for (count, lap) in [
        (1100usize, 0u64),
        (1100, 1),
        (200_000, 0),
        (200_000, 2),
        (1_200_000, 0),
    ] {
        let of = |r: usize, i: usize| {
            (mix(r as u64 * 7 + lap, i as u64) % 1_000_000) as f64 * 1.000_000_1e-3
        };
        let mine: Vec<u8> = (0..count).flat_map(|i| of(me, i).to_le_bytes()).collect();
        let (sbuf, rbuf): (&ni::Region, &ni::Region) = match (me % 2, lap) {
            (_, 2) => (&send, &send),
            (1, _) if count * 8 <= 2 << 20 => (&heap_send, &heap_recv),
            _ => (&send, &recv),
        };
        for inclusive in [true, false] {
            sbuf.write_at(0, &mine);
            if !std::ptr::eq(sbuf, rbuf) {
                rbuf.write_at(0, &vec![0xEEu8; count * 8]);
            }
            ni.scan::<f64>(ReduceOp::Sum, inclusive, sbuf, 0, rbuf, 0, count)
                .unwrap();
            let mut got = vec![0u8; count * 8];
            rbuf.read_at(0, &mut got);
            let upto = if inclusive { me + 1 } else { me };
            for i in (0..count).step_by(3) {
                let want = if upto == 0 {
                    0.0
                } else {
                    (1..upto).fold(of(0, i), |a, r| a + of(r, i))
                };
                let g = f64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
                assert_eq!(
                    g.to_bits(),
                    want.to_bits(),
                    "scan (inclusive {inclusive}) of {count} f64 lap {lap}: element {i}"
                );
            }
        }
    }
    // Integer ops and scans.
    let count = 257;
    let mine: Vec<i64> = (0..count)
        .map(|i| (mix(me as u64, i as u64) % 2001) as i64 - 1000)
        .collect();
    send.write_at(
        0,
        &mine
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    let of = |r: usize, i: usize| (mix(r as u64, i as u64) % 2001) as i64 - 1000;
    for (op, f) in [
        (
            ReduceOp::Sum,
            (|a: i64, b: i64| a.wrapping_add(b)) as fn(i64, i64) -> i64,
        ),
        (ReduceOp::Prod, |a, b| a.wrapping_mul(b)),
        (ReduceOp::Min, |a, b| a.min(b)),
        (ReduceOp::Max, |a, b| a.max(b)),
        (ReduceOp::And, |a, b| a & b),
        (ReduceOp::Or, |a, b| a | b),
        (ReduceOp::Xor, |a, b| a ^ b),
    ] {
        ni.allreduce::<i64>(op, &send, 0, &recv, 0, count).unwrap();
        let mut got = vec![0u8; count * 8];
        recv.read_at(0, &mut got);
        for i in 0..count {
            let want = (1..p).fold(of(0, i), |a, r| f(a, of(r, i)));
            assert_eq!(
                i64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap()),
                want,
                "{op:?} element {i}"
            );
        }
        for inclusive in [true, false] {
            ni.scan::<i64>(op, inclusive, &send, 0, &recv, 0, count)
                .unwrap();
            recv.read_at(0, &mut got);
            for i in 0..count {
                let upto = if inclusive { me + 1 } else { me };
                let want = if upto == 0 {
                    match op {
                        ReduceOp::Prod => 1,
                        ReduceOp::Min => i64::MAX,
                        ReduceOp::Max => i64::MIN,
                        ReduceOp::And => -1,
                        _ => 0,
                    }
                } else {
                    (1..upto).fold(of(0, i), |a, r| f(a, of(r, i)))
                };
                assert_eq!(
                    i64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap()),
                    want,
                    "scan {op:?} incl {inclusive} element {i}"
                );
            }
        }
    }
    // Reduce to a root, u32 and f32 too.
    for root in 0..p {
        send.write_at(0, &(me as u32 + 1).to_le_bytes());
        recv.write_at(0, &0u32.to_le_bytes());
        ni.reduce::<u32>(root as u32, ReduceOp::Sum, &send, 0, &recv, 0, 1)
            .unwrap();
        let mut g = [0u8; 4];
        recv.read_at(0, &mut g);
        let want = if me == root {
            (p * (p + 1) / 2) as u32
        } else {
            0
        };
        assert_eq!(u32::from_le_bytes(g), want, "reduce to {root}");
    }
    send.write_at(0, &(me as f32 + 0.5).to_le_bytes());
    ni.allreduce::<f32>(ReduceOp::Max, &send, 0, &recv, 0, 1)
        .unwrap();
    let mut g = [0u8; 4];
    recv.read_at(0, &mut g);
    assert_eq!(f32::from_le_bytes(g), (p - 1) as f32 + 0.5);
    // Bitwise ops on floats are refused, in a window slot and past the slots (where the
    // window would otherwise take the exported-scratch path).
    for count in [1, 2000] {
        assert!(
            matches!(
                ni.allreduce::<f64>(ReduceOp::Xor, &send, 0, &recv, 0, count),
                Err(Error::Failed {
                    status: Status::BadDescriptor,
                    ..
                })
            ),
            "XOR of {count} f64"
        );
    }
    ni.barrier().unwrap();
}

/// Rank 1 joins nothing and waits to be killed (or sleeps past the collective timeout); the
/// others must fail in bounded time, then (after a new rank 1 attaches) run again.
/// A partition wider than 16 (`ni_abi::window::ring_bytes`: its rings are smaller): every
/// pair exchanges messages in a ring that wraps several times (one slot, several slots, and
/// rendezvous payloads), checked byte for byte and in order per pair; then collectives in
/// the slots and through the exported scratch, checked against the inputs every rank derives.
fn wide(ni: &Ni) {
    let (p, me) = (ni.size(), ni.rank());
    ni.wait_for_partition(Duration::from_secs(120)).unwrap();
    const SIZES: [usize; 3] = [8, 3000, 20000];
    let laps = 6u64;
    let send = ni.alloc(64 << 10).unwrap();
    let recv = ni.alloc(64 << 10).unwrap();
    let bytes = |src: u32, dst: u32, n: u64, len: usize| -> Vec<u8> {
        (0..len as u64)
            .map(|i| mix(((src as u64) << 32) | dst as u64, (n << 20) | i) as u8)
            .collect()
    };
    // Pairwise exchange: at shift s every rank sends to me + s and receives from me - s, so
    // no rendezvous waits on a rank that is itself waiting.
    for shift in 1..p {
        let (dst, src) = ((me + shift) % p, (me + p - shift) % p);
        for n in 0..laps * SIZES.len() as u64 {
            let len = SIZES[(n % SIZES.len() as u64) as usize];
            let r = ni.irecv(Some(src), &recv, 0..len, n, u64::MAX).unwrap();
            send.write_at(0, &bytes(me, dst, n, len));
            ni.send(dst, &send, 0..len, n).unwrap();
            let d = ni.wait(r).unwrap();
            assert_eq!((d.rank, d.len, d.tag), (src, len as u64, n), "{src} → {me}");
            let mut got = vec![0u8; len];
            recv.read_at(0, &mut got);
            assert!(got == bytes(src, me, n, len), "{src} → {me} message {n}");
        }
    }
    ni.barrier().unwrap();
    // One element, a vector in the slots, one through the scratch.
    for count in [1usize, 100, 2000] {
        let of = |r: u32, i: usize| (mix(r as u64, i as u64) % 2001) as i64 - 1000;
        let mine: Vec<u8> = (0..count).flat_map(|i| of(me, i).to_le_bytes()).collect();
        send.write_at(0, &mine);
        ni.allreduce::<i64>(ReduceOp::Sum, &send, 0, &recv, 0, count)
            .unwrap();
        let mut got = vec![0u8; count * 8];
        recv.read_at(0, &mut got);
        for i in 0..count {
            let want: i64 = (0..p).map(|r| of(r, i)).sum();
            let g = i64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(g, want, "allreduce of {count}, element {i}");
        }
    }
    let root = p - 1;
    let data = bytes(root, root, 99, 512);
    send.write_at(
        0,
        if me == root {
            &data[..]
        } else {
            &[0u8; 512][..]
        },
    );
    ni.broadcast::<u64>(root, &send, 0, 64).unwrap();
    let mut got = vec![0u8; 512];
    send.read_at(0, &mut got);
    assert!(got == data, "broadcast from {root}");
    ni.barrier().unwrap();
}

fn victim(ni: &Ni) {
    if ni.rank() == 1 {
        println!("victim ready");
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let t = Instant::now();
    let r = ni.barrier();
    let st = r.as_ref().err().and_then(status_of);
    assert!(
        matches!(st, Some(Status::PeerDown | Status::Timeout)),
        "barrier: {r:?}"
    );
    println!("failed with {st:?} after {:?}", t.elapsed());
    // Then the partition works again once rank 1 is back (the harness starts it).
    let buf = ni.alloc(4096).unwrap();
    let t = Instant::now();
    loop {
        match ni.barrier() {
            Ok(()) => break,
            Err(e) if matches!(status_of(&e), Some(Status::PeerDown | Status::Timeout)) => {
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "partition never recovered"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
    buf.write_at(0, &5i64.to_le_bytes());
    ni.allreduce::<i64>(ReduceOp::Sum, &buf, 0, &buf, 8, 1)
        .unwrap();
}

/// Broadcast `k` from `root`: `count` u64 derived from both.
fn bcast_data(root: usize, k: usize, count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|i| mix(root as u64 * 1000 + k as u64, i as u64).to_le_bytes())
        .collect()
}

/// Broadcasts of up to a collective slot's worth as messages from their root in the rings
/// (fastpath.md, "Collectives in the rings"), checked against what every member knows
/// each root sends; with NI_TEST_DIRECT=off the fabric's rounds, in step.
fn bcast_rings(ni: &Ni) {
    const N: usize = 300;
    const TAG: u64 = 0x6263_6173;
    let (p, me) = (ni.size() as usize, ni.rank() as usize);
    let direct = ni.direct();
    let buf = ni.alloc(1 << 16).unwrap();
    let ctl = ni.alloc(4096).unwrap();
    // 1 u64, 100 u64 (in the ring's payload area) and 504 u64 (4032 bytes: a whole slot's).
    let count = |k: usize| [1, 100, 504][k % 3];
    let bcast = |root: usize, k: usize| {
        let want = bcast_data(root, k, count(k));
        if me == root {
            buf.write_at(0, &want);
        } else {
            buf.write_at(0, &vec![0x5Au8; want.len()]);
        }
        ni.broadcast::<u64>(root as u32, &buf, 0, count(k))
            .unwrap_or_else(|e| panic!("broadcast {k} from {root}: {e}"));
        let mut got = vec![0u8; want.len()];
        buf.read_at(0, &mut got);
        assert!(got == want, "broadcast {k} from {root}: wrong bytes");
    };
    for root in 0..p {
        if direct && p > 1 {
            // The root runs ahead: all its broadcasts, then a message to every member, which
            // each receives before its first broadcast — only a root that does not wait for
            // the members lets that finish.
            if me == root {
                for k in 0..N {
                    bcast(root, k);
                }
                for m in (0..p).filter(|&m| m != root) {
                    ni.send(m as u32, &ctl, 0..8, TAG).unwrap();
                }
            } else {
                ni.recv(Some(root as u32), &ctl, 0..8, TAG, u64::MAX)
                    .unwrap();
                for k in 0..N {
                    bcast(root, k);
                }
            }
        } else {
            for k in 0..N {
                bcast(root, k);
            }
        }
    }
    // Mixed with allreduces in the window's slots and tagged messages around a ring:
    // nothing overtakes anything of its own kind.
    for k in 0..200 {
        let root = k % p;
        bcast(root, N + k);
        ctl.write_at(0, &(k as u64 + me as u64).to_le_bytes());
        ni.allreduce::<u64>(ReduceOp::Sum, &ctl, 0, &ctl, 8, 1)
            .unwrap();
        let mut g = [0u8; 8];
        ctl.read_at(8, &mut g);
        let want = (0..p).map(|m| (k + m) as u64).sum::<u64>();
        assert_eq!(u64::from_le_bytes(g), want, "allreduce {k}");
        if p > 1 {
            let (to, from) = ((me + 1) % p, (me + p - 1) % p);
            ctl.write_at(16, &(k as u64 * 7 + me as u64).to_le_bytes());
            let o = ni.isend(to as u32, &ctl, 16..24, TAG + 1).unwrap();
            ni.recv(Some(from as u32), &ctl, 24..32, TAG + 1, u64::MAX)
                .unwrap();
            ni.wait(o).unwrap();
            ctl.read_at(24, &mut g);
            assert_eq!(
                u64::from_le_bytes(g),
                k as u64 * 7 + from as u64,
                "message {k}"
            );
        }
    }
    // A member in a different broadcast (2 elements where the root sends 1) fails with
    // collision; in the rings only it (the root does not wait to learn), in the fabric's
    // round every member. Then all go on in step.
    if p > 1 {
        let n = if me == 1 { 2 } else { 1 };
        let r = ni.broadcast::<u64>(0, &buf, 0, n);
        if me == 1 || !direct {
            expect_status(r, Status::Collision);
        } else {
            r.unwrap();
        }
        bcast(0, 9999);
    }
    ni.barrier().unwrap();
}

/// Member `r`'s vector in reduce or scan `k`: f64s whose sums depend on their order.
fn ring_vector(r: usize, k: usize, count: usize) -> Vec<f64> {
    (0..count)
        .map(|i| (mix(r as u64 * 1000 + k as u64, i as u64) % 1_000_000) as f64 * 1.000_000_1e-3)
        .collect()
}

/// Members `0..upto`'s vectors of reduce or scan `k` summed in rank order: the bits the
/// fabric's reduction gives. Each vector built once: built per element, the check of a
/// 504-element reduce at P = 5 took longer than the members that ran ahead wait (debug
/// build, a loaded machine), and they timed out.
fn rank_order_sum(upto: usize, k: usize, n: usize) -> Vec<f64> {
    let mut sum = ring_vector(0, k, n);
    for r in 1..upto {
        for (a, x) in sum.iter_mut().zip(ring_vector(r, k, n)) {
            *a += x;
        }
    }
    sum
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Vectors that came before their taker's call, with no progress pass in between that would
/// have taken them out of the ring (fastpath.md, "A member whose vector came already"): each
/// sender signals its taker with a put into the taker's memory, which the taker polls as
/// plain memory, then calls. A broadcast's members, a reduce's root (every vector there, or
/// all but a late member's, which it lets go only once its reduce started: the waiting path
/// goes on from there, at the second member and at the last) and a scan's members take them
/// at once; results in rank order, bit for bit.
fn taken_at_once(ni: &Ni, send: &ni::Region, recv: &ni::Region, ctl: &ni::Region) {
    use ni_abi::fastpath::{coll, dtype};
    let (p, me) = (ni.size() as usize, ni.rank() as usize);
    let flags = ni.alloc(4096).unwrap();
    ctl.write_at(128, &(flags.key() as u64).to_le_bytes());
    ni.allgather::<u64>(ctl, 128, ctl, 256, 1).unwrap();
    let key = |m: usize| {
        let mut b = [0u8; 8];
        ctl.read_at(256 + 8 * m, &mut b);
        u64::from_le_bytes(b) as u32
    };
    let signal = |to: usize, seq: u64| {
        ctl.write_at(64, &seq.to_le_bytes());
        ni.put(to as u32, ctl, 64..72, key(to), 8 * me as u64)
            .unwrap_or_else(|e| panic!("signal {seq} to {to}: {e}"));
    };
    let wait_for = |from: usize, seq: u64| {
        let t = Instant::now();
        let mut b = [0u8; 8];
        loop {
            flags.read_at(8 * from, &mut b);
            if u64::from_le_bytes(b) >= seq {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "no signal {seq} from {from}"
            );
            std::thread::yield_now();
        }
    };
    let check = |got: &ni::Region, want: Vec<f64>, what: &str| {
        let mut b = vec![0u8; want.len() * 8];
        got.read_at(0, &mut b);
        assert!(b == f64_bytes(&want), "{what}: wrong bits");
    };
    let mut seq = 0;
    for k in 0..9 {
        let n = [1, 100, 504][k % 3];
        let k = 5000 + k;
        // A broadcast from member k % p.
        seq += 1;
        let root = k % p;
        send.write_at(0, &f64_bytes(&ring_vector(me, k, n)));
        if me == root {
            ni.broadcast::<f64>(root as u32, send, 0, n).unwrap();
            (0..p).filter(|&m| m != me).for_each(|m| signal(m, seq));
        } else {
            wait_for(root, seq);
            ni.broadcast::<f64>(root as u32, send, 0, n).unwrap();
        }
        check(send, ring_vector(root, k, n), "broadcast");
        // Reduces to member 0: every vector there, then all but a late member's.
        for late in [None, Some(1), Some(p - 1)] {
            let late = late.filter(|_| p >= 3);
            seq += 1;
            send.write_at(0, &f64_bytes(&ring_vector(me, k, n)));
            recv.write_at(0, &vec![0x5Au8; n * 8]);
            if me == 0 {
                (1..p)
                    .filter(|&m| Some(m) != late)
                    .for_each(|m| wait_for(m, seq));
                let op = ni
                    .icollective_raw(
                        coll::REDUCE,
                        dtype::F64,
                        ReduceOp::Sum,
                        0,
                        send.iova(),
                        recv.iova(),
                        n,
                    )
                    .unwrap();
                if let Some(l) = late {
                    signal(l, seq);
                }
                ni.wait(op).unwrap();
                check(recv, rank_order_sum(p, k, n), "reduce");
            } else {
                if Some(me) == late {
                    wait_for(0, seq);
                }
                ni.reduce::<f64>(0, ReduceOp::Sum, send, 0, recv, 0, n)
                    .unwrap();
                if Some(me) != late {
                    signal(0, seq);
                }
            }
        }
        // Scans, inclusive and exclusive, each into a buffer of its own (the prefix taken
        // into it where it lies in the ring) and in place: first with each member's prefix
        // there before it calls, then with every prefix coming after its taker started waiting
        // (the last member starts first, each signalling the one before once its own is under
        // way).
        let scan = |inclusive: bool, op: ReduceOp, out: &ni::Region, waits: bool, seq: u64| {
            if waits {
                if me + 1 < p {
                    wait_for(me + 1, seq);
                }
                let started = ni
                    .icollective_raw(
                        if inclusive { coll::SCAN } else { coll::EXSCAN },
                        dtype::F64,
                        op,
                        0,
                        send.iova(),
                        out.iova(),
                        n,
                    )
                    .unwrap();
                if me > 0 {
                    signal(me - 1, seq);
                }
                ni.wait(started).unwrap();
            } else {
                if me > 0 {
                    wait_for(me - 1, seq);
                }
                ni.scan::<f64>(op, inclusive, send, 0, out, 0, n).unwrap();
                if me + 1 < p {
                    signal(me + 1, seq);
                }
            }
        };
        for waits in [false, true] {
            for (inclusive, in_place) in
                [(true, false), (false, true), (false, false), (true, true)]
            {
                seq += 1;
                send.write_at(0, &f64_bytes(&ring_vector(me, k, n)));
                // A result not written shows as this, not as the last scan's.
                recv.write_at(0, &vec![0x5Au8; n * 8]);
                let out = if in_place { send } else { recv };
                scan(inclusive, ReduceOp::Sum, out, waits, seq);
                let upto = if inclusive { me + 1 } else { me };
                check(
                    out,
                    match upto {
                        0 => vec![0.0; n],
                        _ => rank_order_sum(upto, k, n),
                    },
                    if waits {
                        "scan waiting for its prefix"
                    } else {
                        "scan"
                    },
                );
            }
            // Rank order, not only the sum's grouping: a minimum over ±0 keeps the first of
            // equals, so every prefix has member 0's signs (operands swapped anywhere, a
            // member would get its own).
            for inclusive in [true, false] {
                seq += 1;
                let signs = |r: usize| -> Vec<f64> { (0..n).map(|i| signed_zero(r, i)).collect() };
                send.write_at(0, &f64_bytes(&signs(me)));
                recv.write_at(0, &vec![0x5Au8; n * 8]);
                scan(inclusive, ReduceOp::Min, recv, waits, seq);
                let want = if !inclusive && me == 0 {
                    vec![f64::INFINITY; n]
                } else {
                    signs(0)
                };
                check(recv, want, "minimum scan over ±0");
            }
        }
    }
    ni.barrier().unwrap();
}

/// Reduces and scans of up to a collective slot's worth as messages in the rings
/// (fastpath.md, "Collectives in the rings"): every member but a reduce's root, and a
/// scan's first member, run ahead; results in rank order, bit for bit. With
/// NI_TEST_DIRECT=off the fabric's rounds, in step.
fn reduce_scan_rings(ni: &Ni) {
    const N: usize = 200;
    const TAG: u64 = 0x7265_6473;
    let (p, me) = (ni.size() as usize, ni.rank() as usize);
    let direct = ni.direct();
    let send = ni.alloc(1 << 16).unwrap();
    let recv = ni.alloc(1 << 16).unwrap();
    let ctl = ni.alloc(4096).unwrap();
    // 1 f64, 100 (in the ring's payload area) and 504 (4032 bytes: a whole slot's).
    let count = |k: usize| [1, 100, 504][k % 3];
    let reduce = |root: usize, k: usize| {
        let n = count(k);
        send.write_at(0, &f64_bytes(&ring_vector(me, k, n)));
        recv.write_at(0, &vec![0x5Au8; n * 8]);
        ni.reduce::<f64>(root as u32, ReduceOp::Sum, &send, 0, &recv, 0, n)
            .unwrap_or_else(|e| panic!("reduce {k} to {root}: {e}"));
        let mut got = vec![0u8; n * 8];
        recv.read_at(0, &mut got);
        if me != root {
            assert!(
                got.iter().all(|&b| b == 0x5A),
                "reduce {k}: member {me} written"
            );
            return;
        }
        assert!(
            got == f64_bytes(&rank_order_sum(p, k, n)),
            "reduce {k} to {root}: wrong bits"
        );
    };
    // Inclusive scans on even k, exclusive on odd; the odd ones in place (send = receive).
    let scan = |k: usize| {
        let n = count(k);
        let inclusive = k.is_multiple_of(2);
        send.write_at(0, &f64_bytes(&ring_vector(me, k, n)));
        let out = if inclusive { &recv } else { &send };
        if inclusive {
            recv.write_at(0, &vec![0x5Au8; n * 8]);
        }
        ni.scan::<f64>(ReduceOp::Sum, inclusive, &send, 0, out, 0, n)
            .unwrap_or_else(|e| panic!("scan {k}: {e}"));
        let mut got = vec![0u8; n * 8];
        out.read_at(0, &mut got);
        let upto = if inclusive { me + 1 } else { me };
        let want = match upto {
            0 => vec![0.0; n],
            _ => rank_order_sum(upto, k, n),
        };
        assert!(
            got == f64_bytes(&want),
            "scan {k} (inclusive {inclusive}): wrong bits"
        );
    };
    let run_ahead = direct && p > 1;
    for root in 0..p {
        // Every member but the root runs ahead: all its reduces, then a message to the
        // root, which receives every member's before its first reduce — only members that do
        // not wait for the root let that finish.
        if run_ahead && me != root {
            for k in 0..N {
                reduce(root, k);
            }
            ni.send(root as u32, &ctl, 0..8, TAG).unwrap();
        } else {
            if run_ahead {
                for m in (0..p).filter(|&m| m != root) {
                    ni.recv(Some(m as u32), &ctl, 0..8, TAG, u64::MAX).unwrap();
                }
            }
            for k in 0..N {
                reduce(root, k);
            }
        }
    }
    if run_ahead {
        taken_at_once(ni, &send, &recv, &ctl);
    }
    // The first member runs ahead of the scans: all of them, then a message to the second,
    // which receives it before its first scan.
    if run_ahead && me == 0 {
        for k in 0..N {
            scan(k);
        }
        ni.send(1, &ctl, 0..8, TAG + 1).unwrap();
    } else {
        if run_ahead && me == 1 {
            ni.recv(Some(0), &ctl, 0..8, TAG + 1, u64::MAX).unwrap();
        }
        for k in 0..N {
            scan(k);
        }
    }
    // Mixed with broadcasts, allreduces in the slots and tagged messages: nothing overtakes
    // anything of its own kind.
    for k in 0..150 {
        reduce(k % p, N + k);
        scan(N + k);
        ctl.write_at(0, &(k as u64 + me as u64).to_le_bytes());
        ni.allreduce::<u64>(ReduceOp::Sum, &ctl, 0, &ctl, 8, 1)
            .unwrap();
        let mut g = [0u8; 8];
        ctl.read_at(8, &mut g);
        assert_eq!(
            u64::from_le_bytes(g),
            (0..p).map(|m| (k + m) as u64).sum::<u64>(),
            "allreduce {k}"
        );
        ctl.write_at(16, &(k as u64 * 3).to_le_bytes());
        ni.broadcast::<u64>((k % p) as u32, &ctl, 16, 1).unwrap();
        ctl.read_at(16, &mut g);
        assert_eq!(u64::from_le_bytes(g), k as u64 * 3, "broadcast {k}");
    }
    // A member in a different reduce (2 elements where the others say 1): in the rings its
    // root alone fails with collision (the others do not wait to learn; it still takes the
    // later members' vectors, so the next reduce takes its own), in the fabric's round every
    // member. In a scan, every member from the odd one on: a member whose prefix will not
    // come passes its failure on.
    if p > 1 {
        let n = if me == 1 { 2 } else { 1 };
        let r = ni.reduce::<f64>(0, ReduceOp::Sum, &send, 0, &recv, 0, n);
        if me == 0 || !direct {
            expect_status(r, Status::Collision);
        } else {
            r.unwrap();
        }
        reduce(0, 9999);
        let n = if me == 1 { 2 } else { 1 };
        let r = ni.scan::<f64>(ReduceOp::Sum, true, &send, 0, &recv, 0, n);
        if me >= 1 || !direct {
            expect_status(r, Status::Collision);
        } else {
            r.unwrap();
        }
        scan(9999);
    }
    ni.barrier().unwrap();
}

/// Broadcasts of more than a slot (with 4 members or more, three: 505 and 1100 u64 then go
/// as pieces in the rings), up to 16 (fastpath.md, "Broadcasts read where the root keeps them"): every
/// member reads the root's vector where it keeps it — its `alloc`
/// region, or a bounce it copied registered heap memory into — and the root returns only
/// once every member did, so it may rewrite its buffer at once (a member that comes late
/// still gets what was broadcast). With `guest`, member 1 maps nobody's memory and offers
/// none of its own, as a guest's libni: it asks roots for pieces, and as the root sends
/// them. With NI_TEST_DIRECT=off the fabric's path.
fn bcast_read(ni: &Ni, guest: bool) {
    let (p, me) = (ni.size() as usize, ni.rank() as usize);
    let direct = ni.direct();
    if guest && me == 1 {
        ni.act_as_guest();
    }
    let buf = ni.alloc(1 << 16).unwrap();
    let heap = ni_tests::AppMemory::register(ni, 1 << 16, 0);
    // 4040 bytes (just past a slot), 8800, 16392 and 64512 (16 slots: the most).
    for (k, count) in [505usize, 1100, 2049, 8064].into_iter().enumerate() {
        for root in 0..p {
            for on_heap in [false, true] {
                let b: &ni::Region = if on_heap { &heap } else { &buf };
                let data = bcast_data(root, k, count);
                if me == root {
                    b.write_at(0, &data);
                } else {
                    b.write_at(0, &vec![0xA5u8; data.len()]);
                    if me == 1 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                ni.broadcast::<u64>(root as u32, b, 0, count)
                    .unwrap_or_else(|e| panic!("broadcast of {count} u64 from {root}: {e}"));
                if me == root {
                    b.write_at(0, &vec![0x3Cu8; data.len()]);
                    continue;
                }
                let mut got = vec![0u8; data.len()];
                b.read_at(0, &mut got);
                if let Some(i) = (0..got.len()).find(|&i| got[i] != data[i]) {
                    panic!("broadcast of {count} u64 from {root} (heap {on_heap}): byte {i}");
                }
            }
        }
    }
    // A member in a different broadcast (one element more): in the window it alone fails
    // with collision, telling the root it will not read; in the fabric's round every member.
    // Also when the odd member's broadcast is a small one (a slot: a message in the rings).
    if p > 1 {
        for odd in [2050, 500] {
            let n = if me == 1 { odd } else { 2049 };
            let r = ni.broadcast::<u64>(0, &buf, 0, n);
            if me == 1 || !direct {
                expect_status(r, Status::Collision);
            } else {
                r.unwrap();
            }
        }
        // And the next is everyone's again.
        let data = bcast_data(0, 99, 2049);
        buf.write_at(
            0,
            if me == 0 {
                &data[..]
            } else {
                &[0u8; 16392][..]
            },
        );
        ni.broadcast::<u64>(0, &buf, 0, 2049).unwrap();
        let mut got = vec![0u8; data.len()];
        buf.read_at(0, &mut got);
        assert!(got == data, "broadcast after the collision");
    }
    ni.barrier().unwrap();
}

/// A member later than the collective timeout (1 s here) to a broadcast read where the root
/// keeps it: the root stops waiting and fails with timeout, and the member, when it comes,
/// fails too instead of reading a buffer the root may have rewritten since; the next
/// broadcast is everyone's again. Two members, in the window only.
fn bcast_read_late(ni: &Ni) {
    const TAG: u64 = 0x6c61_7465;
    let me = ni.rank();
    let buf = ni.alloc(1 << 16).unwrap();
    let ctl = ni.alloc(4096).unwrap();
    let data = bcast_data(0, 7, 2100);
    if !ni.direct() {
        println!("no window: nothing to time out member to member");
        return;
    }
    if me == 0 {
        buf.write_at(0, &data);
        expect_status(ni.broadcast::<u64>(0, &buf, 0, 2100), Status::Timeout);
        buf.write_at(0, &[0x3Cu8; 16800]);
        ni.recv(Some(1), &ctl, 0..8, TAG, u64::MAX).unwrap();
        buf.write_at(0, &data);
    } else {
        std::thread::sleep(Duration::from_millis(1500));
        buf.write_at(0, &[0xA5u8; 16800]);
        expect_status(ni.broadcast::<u64>(0, &buf, 0, 2100), Status::Timeout);
        ni.send(0, &ctl, 0..8, TAG).unwrap();
    }
    ni.broadcast::<u64>(0, &buf, 0, 2100).unwrap();
    let mut got = vec![0u8; data.len()];
    buf.read_at(0, &mut got);
    assert!(got == data, "broadcast after the late one");
}

/// A root that broadcasts and leaves: what it sent in the rings before it left still comes
/// to every member (its last broadcast is not lost); the next from it fails with peer down.
fn bcast_root_leaves(ni: &Ni) {
    let me = ni.rank() as usize;
    let buf = ni.alloc(4096).unwrap();
    if me == 0 {
        buf.write_at(0, &bcast_data(0, 1, 8));
        ni.broadcast::<u64>(0, &buf, 0, 8).unwrap();
        return;
    }
    // Long after the root detached.
    std::thread::sleep(Duration::from_millis(300));
    buf.write_at(0, &[0u8; 64]);
    ni.broadcast::<u64>(0, &buf, 0, 8).unwrap();
    let mut got = vec![0u8; 64];
    buf.read_at(0, &mut got);
    assert!(got == bcast_data(0, 1, 8), "the departed root's broadcast");
    expect_status(ni.broadcast::<u64>(0, &buf, 0, 8), Status::PeerDown);
}

fn rejoin(ni: &Ni) {
    let buf = ni.alloc(4096).unwrap();
    let t = Instant::now();
    loop {
        match ni.barrier() {
            Ok(()) => break,
            Err(e) if matches!(status_of(&e), Some(Status::PeerDown | Status::Timeout)) => {
                assert!(t.elapsed() < Duration::from_secs(30));
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
    buf.write_at(0, &5i64.to_le_bytes());
    ni.allreduce::<i64>(ReduceOp::Sum, &buf, 0, &buf, 8, 1)
        .unwrap();
    let mut g = [0u8; 8];
    buf.read_at(8, &mut g);
    assert_eq!(i64::from_le_bytes(g), 5 * ni.size() as i64);
}

/// The C ABI's blocking vector collectives (`ni.h`, called as a C program would) on vectors
/// past a window slot: each result checked, the test counting which took the window's
/// paths. Rank `r` contributes `r + 1 + i` (or `(r + 1) * 0.5 + i * 0.25`, exact in binary)
/// at element `i`.
fn c_abi() {
    use ni::capi::*;
    use ni_abi::fastpath::{dtype, redop};
    use std::ffi::{c_int, c_void, CStr};
    let ok = |what: &str, rc: c_int| {
        // SAFETY: ni_last_error returns a NUL-terminated string owned by the library.
        let why = unsafe { CStr::from_ptr(ni_last_error()) };
        assert_eq!(rc, NI_OK, "{what}: {why:?}");
    };
    const LEN: usize = 8 << 20;
    const RECV: usize = LEN / 2;
    let (mut ni, mut buf, mut ptr) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut::<c_void>(),
    );
    let (mut me, mut n) = (0u32, 0u32);
    // SAFETY: every pointer passed is a live handle from these calls or a writable local;
    // the region is LEN bytes, and every access below stays inside it.
    unsafe {
        ok("ni_attach", ni_attach(&mut ni));
        ok("ni_rank", ni_rank(ni, &mut me));
        ok("ni_size", ni_size(ni, &mut n));
        ok("ni_alloc", ni_alloc(ni, LEN, &mut buf));
        ok("ni_region_ptr", ni_region_ptr(buf, &mut ptr));
    }
    let p = ptr as *mut u8;
    // SAFETY: `at` + `count` elements lie inside the region (RECV and LEN bound them).
    let f64s = |at: usize, count: usize| unsafe {
        std::slice::from_raw_parts_mut(p.add(at) as *mut f64, count)
    };
    let u64s = |at: usize, count: usize| unsafe {
        std::slice::from_raw_parts_mut(p.add(at) as *mut u64, count)
    };
    let contribution = |r: u32, i: usize| (r + 1) as f64 * 0.5 + i as f64 * 0.25;
    let d = |t: u32| t as c_int;

    // Allreduce: 64 Ki doubles (exported memory) and 1000 (window pieces).
    for count in [65536, 1000] {
        for (i, x) in f64s(0, count).iter_mut().enumerate() {
            *x = contribution(me, i);
        }
        f64s(RECV, count).fill(-1.0);
        // SAFETY: as above.
        ok("ni_allreduce", unsafe {
            ni_allreduce(ni, d(dtype::F64), d(redop::SUM), buf, 0, buf, RECV, count)
        });
        for (i, x) in f64s(RECV, count).iter().enumerate() {
            let want: f64 = (0..n).map(|r| contribution(r, i)).sum();
            assert_eq!(*x, want, "allreduce of {count}: [{i}]");
        }
    }
    // Broadcast from every root: 3000 u64 (read where the root keeps them) and 100 000
    // (exported memory).
    for count in [3000, 100_000] {
        for root in 0..n {
            for (i, x) in u64s(0, count).iter_mut().enumerate() {
                *x = if me == root {
                    (root as u64) << 40 | i as u64
                } else {
                    0
                };
            }
            // SAFETY: as above.
            ok("ni_broadcast", unsafe {
                ni_broadcast(ni, root, d(dtype::U64), buf, 0, count)
            });
            for (i, x) in u64s(0, count).iter().enumerate() {
                assert_eq!(
                    *x,
                    (root as u64) << 40 | i as u64,
                    "broadcast of {count} from {root}: [{i}]"
                );
            }
        }
    }
    // Reduce of 1000 u64 (window pieces) and 50 000 (exported memory) to every root, only
    // the root passing a result buffer.
    for (count, root) in [1000, 50_000]
        .into_iter()
        .flat_map(|c| (0..n).map(move |r| (c, r)))
    {
        for (i, x) in u64s(0, count).iter_mut().enumerate() {
            *x = (me + 1) as u64 + i as u64;
        }
        u64s(RECV, count).fill(0);
        let recv = if me == root {
            buf
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: as above; a NULL result buffer away from the root is the header's contract.
        ok("ni_reduce", unsafe {
            ni_reduce(
                ni,
                root,
                d(dtype::U64),
                d(redop::SUM),
                buf,
                0,
                recv,
                RECV,
                count,
            )
        });
        for (i, x) in u64s(RECV, count).iter().enumerate() {
            let want = if me == root {
                (0..n as u64).map(|r| r + 1 + i as u64).sum()
            } else {
                0
            };
            assert_eq!(*x, want, "reduce of {count} to {root}: [{i}] (rank {me})");
        }
    }
    // Inclusive scan of 20 000 u64.
    let count = 20_000;
    for (i, x) in u64s(0, count).iter_mut().enumerate() {
        *x = (me + 1) as u64 + i as u64;
    }
    // SAFETY: as above.
    ok("ni_scan", unsafe {
        ni_scan(
            ni,
            d(dtype::U64),
            d(redop::SUM),
            1,
            buf,
            0,
            buf,
            RECV,
            count,
        )
    });
    for (i, x) in u64s(RECV, count).iter().enumerate() {
        let want: u64 = (0..=me as u64).map(|r| r + 1 + i as u64).sum();
        assert_eq!(*x, want, "scan of {count}: [{i}]");
    }
    // Allgather of 1000 u64 a member (past a slot: exported memory).
    let count = 1000;
    for (i, x) in u64s(0, count).iter_mut().enumerate() {
        *x = (me as u64) << 32 | i as u64;
    }
    // SAFETY: as above.
    ok("ni_allgather", unsafe {
        ni_allgather(ni, d(dtype::U64), buf, 0, buf, RECV, count)
    });
    for (k, x) in u64s(RECV, count * n as usize).iter().enumerate() {
        let (q, i) = (k / count, k % count);
        assert_eq!(*x, (q as u64) << 32 | i as u64, "allgather: [{k}]");
    }
    // SAFETY: live handles, freed once.
    unsafe {
        ok("ni_region_free", ni_region_free(buf));
        ok("ni_detach", ni_detach(ni));
    }
}

fn main() {
    let scenario = std::env::args()
        .nth(1)
        .expect("usage: ni-test-coll SCENARIO");
    if scenario == "c-abi" {
        // Attaches through the C ABI itself.
        c_abi();
        println!("ok {scenario}");
        return;
    }
    let ni = if scenario == "rejoin" {
        // A replacement attaches alone: its peers are already up.
        let path = std::env::var("NI_SOCKET").unwrap();
        Ni::attach_path(std::path::Path::new(&path))
    } else {
        Ni::attach()
    }
    .unwrap_or_else(|e| panic!("attach: {e}"));
    match scenario.as_str() {
        "combines" => combines(&ni),
        "collision" => collision(&ni),
        "network-done" => network_done(&ni),
        "globals" => globals(&ni),
        "vectors" => vectors(&ni),
        "wide" => wide(&ni),
        "victim" => victim(&ni),
        "rejoin" => rejoin(&ni),
        "bcast-rings" => bcast_rings(&ni),
        "bcast-root-leaves" => bcast_root_leaves(&ni),
        "bcast-read" => bcast_read(&ni, false),
        "bcast-read-guest" => bcast_read(&ni, true),
        "bcast-read-late" => bcast_read_late(&ni),
        "reduce-scan-rings" => reduce_scan_rings(&ni),
        "moved-places" => moved_places(&ni),
        other => panic!("unknown scenario {other}"),
    }
    println!("ok {scenario}");
}

/// Member r's element i of `moved_places`' allreduces.
fn moved_value(r: usize, i: usize) -> i64 {
    (r as i64 + 1) * 1_000_003 + i as i64 * 7
}

/// A member that lies about where its places are once the others stopped agreeing on them
/// (fastpath.md "Large allreduce in the window": the first round's digest names the keys
/// agreed on, not the offsets). Three members allreduce 4096 i64 (past the slots: through
/// the members' exported memory), nine laps; ranks 0 and 1 through the API, rank 2 speaking
/// the first round itself (`ni_abi::window::large`) with its data and result in one region,
/// apart, and a scratch half in another. Laps 0, 1, 3 and 5 it agrees, and the others write
/// their chunks into its result (it writes none of its own: the others' results are not
/// checked then); at lap 1 it learns the digest the others publish. Laps 2, 4 and 6: that
/// digest, the same keys, and its result moved over its data (2), its data moved to end past
/// its region (4), its scratch half moved to end past its region (6: an allreduce's members
/// all need one). Lap 7, the others agreeing afresh: that digest, said by a member that names
/// no scratch half, which it needs. Places no honest member names, which the others must
/// refuse rather than use (and not fail: they take the fabric's path, as the liar does, and
/// get the sum), and agree afresh the lap after. Lap 8: the liar too through the API.
fn moved_places(ni: &Ni) {
    use ni_abi::fastpath::{coll, dtype};
    use ni_abi::window::large::{MAGIC, RECORD, RECORDS};
    const N: usize = 4096;
    /// The laps whose places the others refuse.
    const LIES: [usize; 4] = [2, 4, 6, 7];
    let (bytes, me) = (N * 8, ni.rank() as usize);
    assert_eq!(ni.size(), 3, "moved-places runs with 3 members");
    let i64s = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let mine: Vec<i64> = (0..N).map(|i| moved_value(me, i)).collect();
    let want: Vec<i64> = (0..N)
        .map(|i| (0..3).map(|r| moved_value(r, i)).sum())
        .collect();
    let check = |buf: &ni::Region, off: usize, lap: usize| {
        let mut got = vec![0u8; bytes];
        buf.read_at(off, &mut got);
        if let Some(i) = (0..N).find(|&i| got[8 * i..8 * i + 8] != want[i].to_le_bytes()) {
            panic!("lap {lap}: element {i} of the sum differs");
        }
    };
    if me < 2 {
        let send = ni.alloc(bytes).unwrap();
        let recv = ni.alloc(bytes).unwrap();
        send.write_at(0, &i64s(&mine));
        for lap in 0..9 {
            recv.write_at(0, &vec![0xa5u8; bytes]);
            ni.allreduce::<i64>(ReduceOp::Sum, &send, 0, &recv, 0, N)
                .unwrap_or_else(|e| panic!("lap {lap}: {e}"));
            if LIES.contains(&lap) || lap == 8 {
                check(&recv, 0, lap);
            }
        }
        return;
    }
    // One region: the data at 0, the result at `bytes` (apart: honest).
    let both = ni.alloc(2 * bytes).unwrap();
    both.write_at(0, &i64s(&mine));
    let scratch = ni.alloc(2 * bytes).unwrap();
    let ctl = ni.alloc(8192).unwrap();
    let meta = ni_abi::window::coll_meta(
        coll::ALLREDUCE,
        dtype::I64,
        ReduceOp::Sum as u32,
        0,
        N as u64,
    );
    let raw = |kind: u8, d: u32, op: ReduceOp, send: u64, recv: u64, count: usize| {
        let o = ni
            .icollective_raw(kind, d, op, 0, send, recv, count)
            .unwrap();
        ni.wait(o)
            .unwrap_or_else(|e| panic!("the liar's round: {e}"));
    };
    let mut digest = 0;
    for lap in 0..8 {
        // (data, result) offsets in `both`, the scratch half's in `scratch`; the agreed
        // digest where it lies.
        let (data_off, result_off, half_off) = match lap {
            2 => (0, 0, 0),
            4 => (bytes + 8, bytes, 0),
            6 => (0, bytes, bytes + 8),
            _ => (0, bytes, 0),
        };
        let lies = LIES.contains(&lap);
        let record = [
            MAGIC,
            if lap == 7 { 0 } else { scratch.key() as u64 },
            meta,
            half_off as u64,
            if lies { digest } else { 0 },
            both.key() as u64,
            data_off as u64,
            both.key() as u64,
            result_off as u64,
        ];
        for (k, v) in record.iter().enumerate() {
            ctl.write_at(8 * k, &v.to_le_bytes());
        }
        raw(
            coll::ALLGATHER,
            dtype::U64,
            ReduceOp::Sum,
            ctl.iova(),
            ctl.iova() + RECORDS as u64,
            RECORD,
        );
        let word = |m: usize, k: usize| {
            let mut b = [0u8; 8];
            ctl.read_at(RECORDS + 8 * (m * RECORD + k), &mut b);
            u64::from_le_bytes(b)
        };
        match lap {
            // Nothing agreed yet; after a refusal, the others agree afresh.
            0 | 3 | 5 | 7 => assert_eq!(word(0, 4), 0, "lap {lap}: the others agree again"),
            _ => {
                let agreed = word(0, 4);
                assert!(
                    agreed != 0 && agreed == word(1, 4) && (lap == 1 || agreed == digest),
                    "lap {lap}: the digest agreed on"
                );
                digest = agreed;
            }
        }
        if word(0, 4) == 0 || !lies {
            // The round of agreement ("I" mapped everything): the others agree unless they
            // refused this record.
            ctl.write_at(0, &1u64.to_le_bytes());
            raw(
                coll::ALLREDUCE,
                dtype::U64,
                ReduceOp::Min,
                ctl.iova(),
                ctl.iova() + 8,
                1,
            );
            let mut b = [0u8; 8];
            ctl.read_at(8, &mut b);
            assert_eq!(u64::from_le_bytes(b), !lies as u64, "lap {lap}: agreed");
        }
        if !lies {
            // Their chunks come into `both`, and a barrier ends it.
            raw(coll::BARRIER, 0, ReduceOp::Sum, 0, 0, 0);
        } else {
            // The others refused the places: the fabric's allreduce, of the data and into
            // the result where they really are.
            raw(
                coll::ALLREDUCE,
                dtype::I64,
                ReduceOp::Sum,
                both.iova(),
                both.iova() + bytes as u64,
                N,
            );
            check(&both, bytes, lap);
        }
    }
    let recv = ni.alloc(bytes).unwrap();
    ni.allreduce::<i64>(ReduceOp::Sum, &both, 0, &recv, 0, N)
        .unwrap_or_else(|e| panic!("lap 8: {e}"));
    check(&recv, 0, 8);
}

/// Member r's element i of the minima over ±0: equal values whose sign says whose they are,
/// member 0's and member 1's opposite at every element.
fn signed_zero(r: usize, i: usize) -> f64 {
    if (r + i).is_multiple_of(2) {
        0.0
    } else {
        -0.0
    }
}
