//! The waits of the active-message and message-queue points, shared by `ni-bench` and
//! `ni-instr` (whose instruction counts are of the very loops the bench times).

use ni::{MessageQueue, Ni, Relax};
use std::sync::atomic::{AtomicU64, Ordering};

/// Wait until the handler that counts into `count` has run `due` times. The wait begins at
/// the first look that finds nothing (`Ni::relax`'s first pause, as libni's own waits do): a
/// clock read is 18 ns here, and most looks find what they wait for.
pub fn am_wait(ni: &Ni, count: &AtomicU64, due: u64) -> ni::Result<()> {
    let mut wait = Relax::default();
    loop {
        ni.progress()?;
        // Look before pausing: the handler may have run in that progress, and a yield now
        // would hand the cpu to a peer with nothing to do (on a shared cpu, two context
        // switches per message).
        if count.load(Ordering::Relaxed) >= due {
            return Ok(());
        }
        ni.relax(&mut wait);
    }
}

/// Wait until `mq` holds a message past its software head; take up to `out.len()`. Returns
/// how many it took (at least one).
pub fn mq_take(ni: &Ni, mq: &mut MessageQueue, out: &mut [[u8; 64]]) -> usize {
    let mut wait = Relax::default();
    loop {
        let n = mq.take_into(out);
        if n > 0 {
            return n;
        }
        ni.relax(&mut wait);
    }
}
