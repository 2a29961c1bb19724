//! `ni_fi::ffi`, written by hand, against the installed libfabric headers: a C program
//! compiled over `<rdma/*.h>` prints `sizeof` of every struct and `offsetof` of every field
//! that `ffi::layout()` lists, and the value of every constant of `ffi::constants()`; each
//! must equal the Rust side. A mismatch means the provider reads or writes the wrong bytes
//! of what libfabric hands it, or answers with the wrong flag or error number.
//!
//! Needs gcc and libfabric-dev (tests/run.sh installs them).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use ni_fi::ffi::{constants, layout};

const TMP: &str = env!("CARGO_TARGET_TMPDIR");
const INSTALL: &str = "install gcc and libfabric-dev (tests/run.sh does)";

const HEADERS: &[&str] = &[
    "rdma/fabric.h",
    "rdma/fi_domain.h",
    "rdma/fi_endpoint.h",
    "rdma/fi_eq.h",
    "rdma/fi_tagged.h",
    "rdma/fi_rma.h",
    "rdma/fi_cm.h",
    "rdma/fi_errno.h",
    "rdma/providers/fi_prov.h",
    "rdma/providers/fi_log.h",
    "sys/uio.h",
    "stddef.h",
    "stdio.h",
];

/// The C program: one line per struct (`size NAME N`), field (`offset NAME.FIELD N`) and
/// constant (`value NAME N`). Every struct is `struct NAME` (`iovec` too: `struct iovec`).
fn program() -> String {
    let mut c = String::new();
    for h in HEADERS {
        writeln!(c, "#include <{h}>").unwrap();
    }
    c.push_str("\nint main(void)\n{\n");
    for l in layout() {
        let s = l.name;
        writeln!(c, "    printf(\"size {s} %zu\\n\", sizeof(struct {s}));").unwrap();
        for (f, _) in &l.fields {
            writeln!(
                c,
                "    printf(\"offset {s}.{f} %zu\\n\", offsetof(struct {s}, {f}));"
            )
            .unwrap();
        }
    }
    for (name, _) in constants() {
        writeln!(
            c,
            "    printf(\"value {name} %lld\\n\", (long long)({name}));"
        )
        .unwrap();
    }
    c.push_str("    return 0;\n}\n");
    c
}

/// Whether C's `(long long)` of a constant is the Rust value: equal as 64-bit patterns
/// (`FI_ADDR_UNSPEC` is `u64::MAX` in Rust and prints as -1), with the Rust value in range.
fn same_value(c: i64, rust: i128) -> bool {
    (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&rust) && c as u64 == rust as u64
}

/// Compile and run the program; its output as key → number.
fn c_side() -> HashMap<String, i64> {
    let dir = Path::new(TMP).join("layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, program()).unwrap();
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc ({e}): {INSTALL}"));
    assert!(
        out.status.success(),
        "compiling {} failed (a missing header: {INSTALL}; else a struct, field or constant \
         of ffi.rs that the headers do not have):\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{} failed", exe.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut w = l.split(' ');
            let (kind, key, n) = (w.next(), w.next(), w.next());
            match (kind, key, n.and_then(|n| n.parse().ok())) {
                (Some(kind), Some(key), Some(n)) => (format!("{kind} {key}"), n),
                _ => panic!("unexpected line {l:?} from {}", exe.display()),
            }
        })
        .collect()
}

/// Every struct size, field offset and constant value of `ni_fi::ffi` equals the headers'.
#[test]
fn ffi_matches_the_libfabric_headers() {
    let c = c_side();
    let mut want: Vec<(String, i128)> = Vec::new();
    for l in layout() {
        want.push((format!("size {}", l.name), l.size as i128));
        for (f, off) in &l.fields {
            want.push((format!("offset {}.{f}", l.name), *off as i128));
        }
    }
    for (name, v) in constants() {
        want.push((format!("value {name}"), v));
    }
    let bad: Vec<String> = want
        .iter()
        .filter_map(|(key, rust)| match c.get(key) {
            Some(&v) if same_value(v, *rust) => None,
            Some(&v) => Some(format!("{key}: C {v}, Rust {rust}")),
            None => Some(format!("{key}: not printed by the C program")),
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} checks differ from the headers:\n{}",
        bad.len(),
        want.len(),
        bad.join("\n")
    );
}

/// The comparison of constants itself: 64-bit patterns, not signed values.
#[test]
fn constants_compare_as_64_bit_patterns() {
    assert!(same_value(-1, u64::MAX as i128));
    assert!(same_value(2, 2));
    assert!(!same_value(-1, -2));
    assert!(!same_value(0, 1 << 64));
}
