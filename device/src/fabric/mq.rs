//! T3E message-queue arrival (HMM-148-0 pp. 9-15, digest cray-metro.md §A.3).
//!
//! The receiving NI reads the MQCW with an atomic read-modify-write, so a client's own atomic
//! SWAP of the MQCW (the documented software reset) never races it. The model stores the 64
//! bytes before it moves Tail, so software that polls Tail never sees a slot before its data.
//!
//! That order needs one writer per queue. A queue in an exported region may also be written
//! by members of a partition window on the direct path, so there every writer takes the
//! queue's arrival lock (`ni_abi::window::mq_lock`) first; the device never waits for it
//! beyond a short spin — the fabric retries the SEND later ([`Arrival::Locked`]).

use ni_abi::fastpath::{mqcw, Status, MQ_MESSAGE};
use ni_abi::window::mq_lock;
use std::sync::atomic::Ordering;

use crate::dma::DmaSpace;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Stored; `tail` is the new Tail; `threshold` when Tail reached Threshold (Sig set).
    Stored { tail: u64, threshold: bool },
    /// Tail = Limit: nothing stored, MQCW unchanged (the sender sees FULL_SR).
    Rejected,
    /// The queue's arrival lock is held (by `holder`; `FREE`: the MQCW kept changing under
    /// the arrival): nothing done, try again later.
    Locked { holder: u64 },
}

/// Free a lock whose holder is gone (its client is down or came back as a new incarnation,
/// so nothing of it still writes): whether it was still `holder`'s.
pub fn break_lock(dma: &DmaSpace, lock_iova: u64, holder: u64) -> bool {
    dma.atomic_u64(lock_iova).is_ok_and(|l| {
        l.compare_exchange(holder, mq_lock::FREE, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// [`arrive`] for a queue whose writers take its arrival lock (`locked`: the queue is in an
/// exported region of a partition with a window).
pub fn arrive_locked(
    dma: &DmaSpace,
    mqcw_iova: u64,
    region_end: u64,
    msg: &[u8; 64],
    locked: bool,
) -> Result<Arrival, Status> {
    let lock_iova = mqcw_iova + mq_lock::OFFSET;
    // A queue whose lock word is past its region cannot hold a message either: its first
    // slot would be too; `arrive` says so without storing anything.
    if !locked || !mqcw_iova.is_multiple_of(MQ_MESSAGE) || lock_iova + 8 > region_end {
        return arrive(dma, mqcw_iova, region_end, msg);
    }
    let Ok(lock) = dma.atomic_u64(lock_iova) else {
        return Ok(Arrival::Locked {
            holder: mq_lock::DEVICE,
        });
    };
    if let Err(holder) = mq_lock::take(lock, mq_lock::DEVICE) {
        return Ok(Arrival::Locked { holder });
    }
    let r = arrive(dma, mqcw_iova, region_end, msg);
    lock.store(mq_lock::FREE, Ordering::Release);
    r
}

/// Store one message into the queue whose MQCW is at `mqcw_iova`; `region_end` bounds the
/// slots (the end of the registered region holding the queue).
pub fn arrive(
    dma: &DmaSpace,
    mqcw_iova: u64,
    region_end: u64,
    msg: &[u8; 64],
) -> Result<Arrival, Status> {
    if !mqcw_iova.is_multiple_of(MQ_MESSAGE) {
        return Err(Status::BadDescriptor);
    }
    let word = dma
        .atomic_u64(mqcw_iova)
        .map_err(|_| Status::NotRegistered)?;
    for _ in 0..mqcw::TRIES {
        let w = word.load(Ordering::Acquire);
        let (tail, next, hit) = match mqcw::step(w) {
            mqcw::Step::Full => return Ok(Arrival::Rejected),
            mqcw::Step::TailZero => return Err(Status::BadDescriptor),
            mqcw::Step::Store { tail, next, hit } => (tail, next, hit),
        };
        let slot = mqcw_iova + tail * MQ_MESSAGE;
        if slot + MQ_MESSAGE > region_end {
            return Err(Status::OutOfBounds);
        }
        dma.write(slot, msg).map_err(|_| Status::NotRegistered)?;
        if word
            .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Ok(Arrival::Stored {
                tail: tail + 1,
                threshold: hit,
            });
        }
        // Software swapped the MQCW meanwhile: start over with its new value.
    }
    // Someone keeps moving the MQCW under us: try again later rather than spin here.
    Ok(Arrival::Locked {
        holder: mq_lock::FREE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn space() -> (DmaSpace, File) {
        let f = crate::dma::sealed_memfd(c"mq", 0x10000).unwrap();
        let mut d = DmaSpace::new();
        d.map(
            true,
            true,
            0,
            0x100000,
            0x10000,
            Some(f.try_clone().unwrap()),
        )
        .unwrap();
        (d, f)
    }

    fn mqcw_at(d: &DmaSpace, iova: u64) -> u64 {
        d.atomic_u64(iova).unwrap().load(Ordering::SeqCst)
    }

    #[test]
    fn seed_walkthroughs_with_limit_4() {
        let (d, _f) = space();
        let q = 0x100000;
        let end = 0x110000;
        // tail 1, thr 3: slot 1, tail 2, no interrupt.
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 1, 4, 3), Ordering::SeqCst);
        assert_eq!(
            arrive(&d, q, end, &[1; 64]),
            Ok(Arrival::Stored {
                tail: 2,
                threshold: false
            })
        );
        // tail 2, thr 3: slot 2, tail 3 = thr: Sig.
        assert_eq!(
            arrive(&d, q, end, &[2; 64]),
            Ok(Arrival::Stored {
                tail: 3,
                threshold: true
            })
        );
        assert!(mqcw::sig(mqcw_at(&d, q)));
        let mut b = [0u8; 64];
        d.read(q + 128, &mut b).unwrap();
        assert_eq!(b, [2; 64]);
        // tail 3, thr 2 (software reprogrammed): slot 3, tail 4, nothing signalled.
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 3, 4, 2), Ordering::SeqCst);
        assert_eq!(
            arrive(&d, q, end, &[3; 64]),
            Ok(Arrival::Stored {
                tail: 4,
                threshold: false
            })
        );
        assert!(!mqcw::sig(mqcw_at(&d, q)));
        // tail 4 = limit: rejected, MQCW unchanged, slot 4 untouched.
        let before = mqcw_at(&d, q);
        assert_eq!(arrive(&d, q, end, &[4; 64]), Ok(Arrival::Rejected));
        assert_eq!(mqcw_at(&d, q), before);
        d.read(q + 256, &mut b).unwrap();
        assert_eq!(b, [0; 64]);
    }

    #[test]
    fn swap_resets_the_queue_and_bad_geometry_is_refused() {
        let (d, _f) = space();
        let q = 0x100000;
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 1, 2, 5), Ordering::SeqCst);
        assert!(matches!(
            arrive(&d, q, 0x110000, &[9; 64]),
            Ok(Arrival::Stored { tail: 2, .. })
        ));
        assert_eq!(arrive(&d, q, 0x110000, &[9; 64]), Ok(Arrival::Rejected));
        // Software reset: an atomic swap of the MQCW; the old value gives the drain point.
        let old = d
            .atomic_u64(q)
            .unwrap()
            .swap(mqcw::make(false, 1, 2, 5), Ordering::SeqCst);
        assert_eq!(mqcw::tail(old), 2);
        assert!(matches!(
            arrive(&d, q, 0x110000, &[9; 64]),
            Ok(Arrival::Stored { tail: 2, .. })
        ));
        // Unaligned MQCW, Tail 0, slots past the region.
        assert_eq!(
            arrive(&d, q + 8, 0x110000, &[0; 64]),
            Err(Status::BadDescriptor)
        );
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 0, 5, 0), Ordering::SeqCst);
        assert_eq!(
            arrive(&d, q, 0x110000, &[0; 64]),
            Err(Status::BadDescriptor)
        );
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 3, 9, 0), Ordering::SeqCst);
        assert_eq!(
            arrive(&d, q, q + 3 * 64, &[0; 64]),
            Err(Status::OutOfBounds)
        );
    }

    /// A queue in an exported region: nothing is stored while a member holds its lock, the
    /// device frees the lock it took, and a dead holder's lock can be broken (only that one).
    #[test]
    fn a_held_arrival_lock_stores_nothing_until_it_is_free() {
        let (d, _f) = space();
        let q = 0x100000;
        let end = 0x110000;
        let lock = d.atomic_u64(q + mq_lock::OFFSET).unwrap();
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 1, 4, 0), Ordering::SeqCst);
        let member = mq_lock::member(1, 3);
        lock.store(member, Ordering::SeqCst);
        let before = mqcw_at(&d, q);
        assert_eq!(
            arrive_locked(&d, q, end, &[5; 64], true),
            Ok(Arrival::Locked { holder: member })
        );
        assert_eq!(mqcw_at(&d, q), before);
        let mut b = [0u8; 64];
        d.read(q + 64, &mut b).unwrap();
        assert_eq!(b, [0; 64], "nothing stored under someone else's lock");
        // Without a window the same queue has no lock: the word is the client's business.
        assert!(matches!(
            arrive_locked(&d, q, end, &[5; 64], false),
            Ok(Arrival::Stored { tail: 2, .. })
        ));
        assert!(!break_lock(&d, q + mq_lock::OFFSET, mq_lock::member(1, 4)));
        assert!(break_lock(&d, q + mq_lock::OFFSET, member));
        assert!(matches!(
            arrive_locked(&d, q, end, &[6; 64], true),
            Ok(Arrival::Stored { tail: 3, .. })
        ));
        assert_eq!(lock.load(Ordering::SeqCst), mq_lock::FREE);
        d.read(q + 128, &mut b).unwrap();
        assert_eq!(b, [6; 64]);
        // Rejections and errors free it too.
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 4, 4, 0), Ordering::SeqCst);
        assert_eq!(
            arrive_locked(&d, q, end, &[7; 64], true),
            Ok(Arrival::Rejected)
        );
        d.atomic_u64(q)
            .unwrap()
            .store(mqcw::make(false, 0, 4, 0), Ordering::SeqCst);
        assert_eq!(
            arrive_locked(&d, q, end, &[7; 64], true),
            Err(Status::BadDescriptor)
        );
        assert_eq!(lock.load(Ordering::SeqCst), mq_lock::FREE);
    }
}
