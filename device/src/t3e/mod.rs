//! The T3E PE's support circuitry (HMM-148-0 "Messaging Components"): the E registers and
//! the commands issued through them (`ereg`). The message queues they fill are the fabric's
//! (`fabric/mq.rs`), shared with the fast path; the routers special routing reaches are the
//! network's (`fabric/router.rs`).

pub mod ereg;
