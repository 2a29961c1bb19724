//! The NI's lock, biased toward the one thread that uses it.
//!
//! An `Ni` is `Sync`, but most programs drive it from one thread (an MPI rank, the bench).
//! A mutex costs that thread two atomic read-modify-writes per call, and each is a full
//! fence: after a send it waits until the line of the ring slot just written comes back
//! from the receiver that is reading it (a sixth of the 8 B message rate, both ranks on one
//! core; ~10% on two). So the first thread that locks owns the lock: it enters by storing
//! `busy` and reading `revoked`, and leaves by storing `busy` — no read-modify-write, no
//! fence. The first time any other thread locks, it revokes the bias for good: it sets
//! `revoked` and makes every thread of the process fence (`membarrier`), so the owner
//! either had stored `busy` before that fence (the other thread sees it and waits for the
//! owner to leave) or reads `revoked` after it (and takes the mutex like everyone else from
//! then on). Where the kernel offers no private expedited membarrier the lock is never
//! biased: a plain mutex.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub struct NiLock<T> {
    /// The thread the lock is biased to (its [`this_thread`]), 0 before the first
    /// lock.
    owner: AtomicUsize,
    /// The owner is inside (stored only by the owner).
    busy: AtomicBool,
    /// Another thread locked once: everyone goes through `mutex`.
    revoked: AtomicBool,
    mutex: Mutex<()>,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through a guard, and guards exclude each other (module
// comment); `T: Send` because a guard hands it to whichever thread locks.
unsafe impl<T: Send> Sync for NiLock<T> {}
// SAFETY: as for a `Mutex<T>`.
unsafe impl<T: Send> Send for NiLock<T> {}

/// The calling thread: its `pthread_self`, unique among live threads (a thread that reuses
/// a dead owner's inherits a bias no one else holds). Not a thread-local's address: in a
/// library loaded with `dlopen` (the libfabric provider) that costs a `__tls_get_addr` call,
/// ~20 instructions, on every lock.
fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

pub struct NiGuard<'a, T> {
    lock: &'a NiLock<T>,
    /// `None`: the owner's fast path.
    _mutex: Option<MutexGuard<'a, ()>>,
    /// Shared between threads only where `T` is `Sync` (as a `MutexGuard`).
    _data: PhantomData<&'a mut T>,
}

impl<T> NiLock<T> {
    pub fn new(data: T) -> NiLock<T> {
        NiLock {
            owner: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            mutex: Mutex::new(()),
            data: UnsafeCell::new(data),
        }
    }

    pub fn lock(&self) -> NiGuard<'_, T> {
        let me = this_thread();
        let owner = self.owner.load(Ordering::Relaxed);
        if (owner == me && !self.revoked.load(Ordering::Relaxed))
            || (owner == 0
                && !self.revoked.load(Ordering::Relaxed)
                && crate::membarrier::register_private()
                && self
                    .owner
                    .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok())
        {
            // Only the owner stores `busy`: set here means it locked twice (a drop under
            // the lock that locks again), which a mutex would have deadlocked on.
            debug_assert!(
                !self.busy.load(Ordering::Relaxed),
                "NiLock locked recursively"
            );
            self.busy.store(true, Ordering::Relaxed);
            // The store stays before the load in the code; a revoking thread's membarrier
            // orders them on the cpu.
            compiler_fence(Ordering::SeqCst);
            if !self.revoked.load(Ordering::Acquire) {
                return NiGuard {
                    lock: self,
                    _mutex: None,
                    _data: PhantomData,
                };
            }
            self.busy.store(false, Ordering::Release);
        }
        self.lock_shared()
    }

    #[cold]
    fn lock_shared(&self) -> NiGuard<'_, T> {
        let g = self.mutex.lock().unwrap_or_else(|e| e.into_inner());
        if !self.revoked.load(Ordering::Relaxed) {
            self.revoked.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if self.owner.load(Ordering::Relaxed) != 0 && !crate::membarrier::private() {
                // Registered, so it does not fail (unless the kernel dropped the
                // registration, as across a fork may); should it, a store still in the
                // owner's buffer drains long before this.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // The owner may be inside (it stored `busy` before the fence): wait for it to leave,
        // which takes a request to the daemon at most.
        let mut looks = 0u32;
        while self.busy.load(Ordering::Acquire) {
            looks += 1;
            if looks < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        NiGuard {
            lock: self,
            _mutex: Some(g),
            _data: PhantomData,
        }
    }

    /// Whether the owner still enters without the mutex (tests).
    #[cfg(test)]
    fn biased(&self) -> bool {
        self.owner.load(Ordering::Relaxed) != 0 && !self.revoked.load(Ordering::Relaxed)
    }
}

impl<T: Default> Default for NiLock<T> {
    fn default() -> NiLock<T> {
        NiLock::new(T::default())
    }
}

impl<T> NiGuard<'_, T> {
    /// Whether no other thread has wanted this lock, ever: holding it a moment longer then
    /// keeps no one waiting (one that wants it from now on waits for that moment once).
    pub fn unshared(&self) -> bool {
        self._mutex.is_none() && !self.lock.revoked.load(Ordering::Relaxed)
    }
}

impl<T> Deref for NiGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard excludes every other (`NiLock`).
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for NiGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and the guard is borrowed mutably.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for NiGuard<'_, T> {
    fn drop(&mut self) {
        if self._mutex.is_none() {
            self.lock.busy.store(false, Ordering::Release);
        }
        // The mutex, if held, is released after this.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_thread_keeps_the_bias() {
        let l = NiLock::new(0u64);
        for _ in 0..1000 {
            *l.lock() += 1;
        }
        assert_eq!(*l.lock(), 1000);
        assert!(l.biased() || !crate::membarrier::register_private());
    }

    /// Increments that are not atomic: any two threads inside at once lose some. The owner
    /// runs throughout the revocation and after it.
    #[test]
    fn owner_and_others_exclude_each_other() {
        const N: u64 = 200_000;
        let l = Arc::new(NiLock::new((0u64, 0u64)));
        *l.lock() = (0, 0); // the test thread owns it
        let others: Vec<_> = (0..3)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..N {
                        let mut g = l.lock();
                        let v = g.0;
                        std::hint::black_box(&mut *g);
                        g.0 = v + 1;
                    }
                })
            })
            .collect();
        for _ in 0..N {
            let mut g = l.lock();
            let v = g.1;
            std::hint::black_box(&mut *g);
            g.1 = v + 1;
            let v = g.0;
            g.0 = v + 1;
        }
        for t in others {
            t.join().unwrap();
        }
        let g = l.lock();
        assert_eq!((g.0, g.1), (4 * N, N));
    }

    /// A thread that locks while the owner is inside waits until the owner leaves.
    #[test]
    fn a_revoking_thread_waits_for_the_owner_inside() {
        let l = Arc::new(NiLock::new(Vec::<u32>::new()));
        let mut g = l.lock();
        let other = {
            let l = l.clone();
            std::thread::spawn(move || l.lock().push(2))
        };
        std::thread::sleep(Duration::from_millis(100));
        g.push(1);
        drop(g);
        other.join().unwrap();
        l.lock().push(3);
        assert_eq!(*l.lock(), [1, 2, 3]);
        assert!(!l.biased());
    }
}
