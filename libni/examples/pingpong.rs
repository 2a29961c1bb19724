//! Ping-pong between rank 0 and rank 1, every size from 0 bytes to 4 MiB, payload checked.
//!
//!     nirun -n 2 target/release/examples/pingpong [ITERATIONS]

use std::time::Instant;

fn main() -> Result<(), ni::Error> {
    let ni = ni::Ni::attach()?;
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    if ni.size() < 2 {
        eprintln!("pingpong needs 2 ranks");
        std::process::exit(2);
    }
    let max = 4 << 20;
    let buf = ni.alloc(max)?;
    let peer = 1 - ni.rank();
    if ni.rank() > 1 {
        return Ok(());
    }
    let mut size = 0usize;
    while size <= max {
        let pattern: Vec<u8> = (0..size).map(|i| (i * 31 + size) as u8).collect();
        let t = Instant::now();
        for _ in 0..iters {
            if ni.rank() == 0 {
                buf.write_at(0, &pattern);
                ni.send(peer, &buf, 0..size, 1)?;
                let d = ni.recv(Some(peer), &buf, 0..max, 2, u64::MAX)?;
                assert_eq!(d.len as usize, size);
            } else {
                let d = ni.recv(Some(peer), &buf, 0..max, 1, u64::MAX)?;
                assert_eq!(d.len as usize, size);
                let mut got = vec![0u8; size];
                buf.read_at(0, &mut got);
                assert!(got == pattern, "payload of {size} bytes corrupted");
                ni.send(peer, &buf, 0..size, 2)?;
            }
        }
        if ni.rank() == 0 {
            let half_rtt = t.elapsed().as_secs_f64() / iters as f64 / 2.0;
            println!(
                "{size:>9} B  {:>10.2} us  {:>9.1} MB/s",
                half_rtt * 1e6,
                size as f64 / half_rtt / 1e6
            );
        }
        size = if size == 0 { 1 } else { size * 4 };
    }
    Ok(())
}
