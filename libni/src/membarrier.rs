//! Linux `membarrier(2)`: one thread makes others execute a full memory fence, so that the
//! others' hot paths need none of their own (the window's writers, the NI's lock).
//! Both commands used here reach only the processes that registered for them.

use std::sync::OnceLock;

// From <linux/membarrier.h>.
const CMD_QUERY: libc::c_long = 0;
const CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;
const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn call(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    }
}

/// `NI_MEMBARRIER=off`: use none (every writer fences, the lock is a plain mutex).
fn allowed() -> bool {
    !std::env::var("NI_MEMBARRIER").is_ok_and(|v| v == "off")
}

fn register(command: libc::c_long, registration: libc::c_long) -> bool {
    if !allowed() {
        return false;
    }
    let cmds = call(CMD_QUERY);
    let wanted = command | registration;
    cmds >= 0 && cmds & wanted == wanted && call(registration) == 0
}

/// Register this process (once) for global expedited membarriers; whether it is.
pub fn register_global() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| register(CMD_GLOBAL_EXPEDITED, CMD_REGISTER_GLOBAL_EXPEDITED))
}

/// Register this process (once) for private expedited membarriers; whether it is.
pub fn register_private() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| register(CMD_PRIVATE_EXPEDITED, CMD_REGISTER_PRIVATE_EXPEDITED))
}

/// Run a full fence on every cpu that runs a thread of a process registered with
/// [`register_global`] (this one need not be). Once the kernel offered the command and took
/// a registration it does not fail (`EPERM` is for unregistered callers of the private one).
pub fn global() -> bool {
    call(CMD_GLOBAL_EXPEDITED) == 0
}

/// Run a full fence on every cpu that runs a thread of this process, which must have
/// registered ([`register_private`]).
pub fn private() -> bool {
    call(CMD_PRIVATE_EXPEDITED) == 0
}
