//! `Ni::register`: the application's own memory as NI regions (what `fi_mr_reg` gives MPI
//! windows). On a host its pages move onto a memfd the daemon maps; the target's NI checks
//! key, access and bounds; registrations that share pages share their mapping; running out
//! of what the daemon maps for a client is an error, never a crash, and what was registered
//! before keeps working.

use std::time::Duration;

use ni::Error;
use ni_abi::fastpath::Status;
use ni_tests::Daemon;

fn status(r: Result<(), Error>) -> Option<Status> {
    match r {
        Err(Error::Failed { status, .. }) => Some(status),
        _ => None,
    }
}

#[test]
fn registered_heap_memory_takes_puts_and_the_target_checks_access_and_bounds() {
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let mut heap = vec![0x11u8; 20_000].into_boxed_slice();
    // SAFETY: `heap` outlives the region (dropped first).
    let write_only =
        unsafe { a.register(heap.as_mut_ptr().wrapping_add(100), 10_000, false, true) }.unwrap();
    assert!(
        heap.iter().all(|&x| x == 0x11),
        "registration kept every byte"
    );
    let src = b.alloc(4096).unwrap();
    src.write_at(0, &[0xAB; 4096]);
    b.put(0, &src, 0..4096, write_only.key(), 5000).unwrap();
    assert!(
        heap[5100..5100 + 4096].iter().all(|&x| x == 0xAB),
        "the put landed at its offset"
    );
    assert!(
        heap[5099] == 0x11 && heap[5100 + 4096] == 0x11,
        "and nowhere else"
    );
    // No read access: a get is refused by a's NI; past the end: out of bounds.
    assert_eq!(
        status(b.get(0, &src, 0..16, write_only.key(), 0)),
        Some(Status::BadKey)
    );
    assert_eq!(
        status(b.put(0, &src, 0..100, write_only.key(), 9_950)),
        Some(Status::OutOfBounds)
    );
    // Deregistered: the key is gone, the memory is the application's as it was.
    let key = write_only.key();
    drop(write_only);
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        status(b.put(0, &src, 0..16, key, 0)) == Some(Status::BadKey)
    });
    assert!(gone, "a dropped region's key still took a put");
    assert!(heap[5100..5100 + 4096].iter().all(|&x| x == 0xAB));
}

#[test]
fn registrations_sharing_pages_share_them_and_running_out_is_an_error() {
    let d = Daemon::start(2);
    let (a, b) = d.attach_pair();
    let src = b.alloc(4096).unwrap();
    src.write_at(0, &[0x5A; 4096]);
    // Two registrations over the same pages: one mapping; dropping one keeps the other.
    let mut heap = vec![0u8; 64 << 10].into_boxed_slice();
    let p = heap.as_mut_ptr();
    // SAFETY: `heap` outlives both regions.
    let r1 = unsafe { a.register(p, 10_000, true, true) }.unwrap();
    // SAFETY: as above.
    let r2 = unsafe { a.register(p.wrapping_add(5_000), 30_000, true, true) }.unwrap();
    drop(r1);
    b.put(0, &src, 0..4096, r2.key(), 0).unwrap();
    assert!(heap[5_000..5_000 + 4096].iter().all(|&x| x == 0x5A));
    // Separate pages, each a file the daemon maps for this client, until it refuses: an
    // error each time, never a crash; everything registered before still works.
    let pages: Vec<Box<[u8]>> = (0..100)
        .map(|_| vec![0u8; 3 << 12].into_boxed_slice())
        .collect();
    let mut regions = Vec::new();
    let mut refused = None;
    for (i, pg) in pages.iter().enumerate() {
        // SAFETY: `pages` outlives `regions` (dropped first, below).
        match unsafe { a.register(pg.as_ptr().wrapping_add(4096) as *mut u8, 4096, true, true) } {
            Ok(r) => regions.push(r),
            Err(e) => {
                refused = Some((i, e.to_string()));
                break;
            }
        }
    }
    let (at, why) = refused.expect("the daemon never refused: it maps at most 64 files a client");
    eprintln!("registration {at} refused: {why}");
    assert!(at > 10, "refused after only {at} registrations: {why}");
    assert!(
        why.contains("DMA_MAP") || why.contains("distinct files") || why.contains("refused"),
        "{why}"
    );
    b.put(0, &src, 0..4096, r2.key(), 0).unwrap();
    let last = regions.last().unwrap();
    b.put(0, &src, 0..4096, last.key(), 0).unwrap();
    // Room again once some go.
    regions.truncate(regions.len() / 2);
    // SAFETY: as above.
    let again = unsafe {
        a.register(
            pages[99].as_ptr().wrapping_add(4096) as *mut u8,
            4096,
            true,
            true,
        )
    };
    assert!(
        again.is_ok(),
        "no room after dropping half: {:?}",
        again.err()
    );
    drop(again);
    drop(regions);
    drop(r2);
}
