//! The C ABI end to end: `include/ni.h` compiles as C99 and C++, every function it declares
//! links against `libni.so`, the pkg-config file generated from `ni.pc.in` gives working
//! flags, `examples/c/pingpong.c`, built against `libni.so` and against `libni.a`, passes
//! under `nirun -n 2` (which starts a private `ni-device`), and `examples/c/collectives.c`
//! passes under `nirun -n 3`.
//!
//! Needs gcc (and g++ for the C++ check). pkg-config is optional: without it the pkg-config
//! test says SKIPPED loudly (set `NI_REQUIRE_PKG_CONFIG=1` to make that a failure).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const NIRUN: &str = env!("CARGO_BIN_EXE_nirun");
const LIBNI: &str = env!("CARGO_MANIFEST_DIR");
const TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// Where the freshly built artifacts are.
struct Built {
    /// nirun's directory (target/<profile>): ni-device must be there too.
    bin_dir: PathBuf,
    /// The directory of the newest libni.so.
    so_dir: PathBuf,
    /// The newest libni.a.
    archive: PathBuf,
}

/// Say something the test harness does not capture (a skip must be seen).
fn loud(msg: &str) {
    let _ = writeln!(std::io::stderr(), "\n*** c_abi: {msg}\n");
}

fn include_dir() -> PathBuf {
    Path::new(LIBNI).join("include")
}

fn example() -> PathBuf {
    Path::new(LIBNI).join("examples/c/pingpong.c")
}

fn collectives_example() -> PathBuf {
    Path::new(LIBNI).join("examples/c/collectives.c")
}

fn work_dir(name: &str) -> PathBuf {
    let d = Path::new(TMP).join("c_abi").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn show(cmd: &Command, out: &Output) -> String {
    format!(
        "{cmd:?} exited {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `cmd`, panicking with its output unless it succeeds.
fn run(mut cmd: Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{}", show(&cmd, &out));
    out
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `cargo build -p <packages>` into the target directory and profile nirun came from.
fn cargo_build(bin_dir: &Path, packages: &[&str]) {
    let profile = match bin_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) => p.to_string(),
        None => panic!("cannot tell the profile of {}", bin_dir.display()),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(Path::new(LIBNI).join(".."))
        .arg("build")
        .args(["--profile", &profile, "--target-dir"])
        .arg(bin_dir.parent().unwrap());
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "building what this test needs failed: {}",
        show(&cmd, &out)
    );
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        assert!(
            have("gcc"),
            "gcc is needed to build the C examples (apt-get install -y gcc)"
        );
        let bin_dir = Path::new(NIRUN).parent().unwrap().to_path_buf();
        // nirun starts the ni-device next to it. `cargo test -p libni` does not build it, and
        // one left from an older build may not speak this libni's protocol: build it (a
        // no-op when it is up to date, as under `cargo test --workspace`).
        let device = bin_dir.join("ni-device");
        assert!(
            device.exists(),
            "{} is missing even after cargo build -p ni-device: build it with the same \
             profile and target directory as this test",
            device.display()
        );
        // `cargo test` builds the library's cdylib and staticlib into deps/ (not always
        // fresh there: the test binary itself only needs the rlib), and only `cargo build`
        // copies them up. Build them (a no-op when up to date) and take the copied-up ones,
        // so a stale library from an older build is never linked.
        cargo_build(&bin_dir, &["libni", "ni-device"]);
        let (so, archive) = (bin_dir.join("libni.so"), bin_dir.join("libni.a"));
        assert!(
            so.exists() && archive.exists(),
            "libni.so/libni.a missing after cargo build -p libni"
        );
        Built {
            so_dir: so.parent().unwrap().to_path_buf(),
            bin_dir,
            archive,
        }
    })
}

fn gcc(out: &Path) -> Command {
    let mut cmd = Command::new("gcc");
    cmd.args(["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-g"])
        .arg("-I")
        .arg(include_dir())
        .arg("-o")
        .arg(out);
    cmd
}

/// Build the example against libni.so (-L, -lni, rpath).
fn build_shared(dir: &Path) -> PathBuf {
    build_shared_from(dir, &example(), "pingpong")
}

/// Build `source` into `dir/name` against libni.so (-L, -lni, rpath).
fn build_shared_from(dir: &Path, source: &Path, name: &str) -> PathBuf {
    let b = built();
    let exe = dir.join(name);
    let mut cmd = gcc(&exe);
    cmd.arg(source)
        .arg("-L")
        .arg(&b.so_dir)
        .arg("-lni")
        .arg(format!("-Wl,-rpath,{}", b.so_dir.display()));
    run(cmd);
    exe
}

/// The functions ni.h declares (`int ni_x(` and `const char *ni_x(`).
fn declared_functions() -> Vec<String> {
    let header = std::fs::read_to_string(include_dir().join("ni.h")).unwrap();
    let mut names = Vec::new();
    for line in header.lines() {
        for prefix in ["int ni_", "const char *ni_"] {
            if let Some(rest) = line.strip_prefix(prefix) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if rest[name.len()..].starts_with('(') {
                    names.push(format!("ni_{name}"));
                }
            }
        }
    }
    names
}

/// Run the example under `nirun -n 2` and check what both ranks printed.
fn run_pingpong(exe: &Path) {
    let mut cmd = Command::new(NIRUN);
    cmd.args(["-n", "2", "--timeout", "120", "--device"])
        .arg(built().bin_dir.join("ni-device"))
        .arg(exe)
        .arg("3");
    let out = cmd.output().expect("running nirun");
    let text = show(&cmd, &out);
    assert!(out.status.success(), "the C example failed:\n{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let mut expected: Vec<String> = Vec::new();
    for r in 0..2 {
        expected.push(format!("[{r}] rank {r} of 2"));
        expected.push(format!("[{r}] local error paths ok"));
        expected.push(format!("[{r}] peer {} is up", 1 - r));
        for n in [0, 1, 63, 64, 65, 4096, 1 << 20] {
            expected.push(format!("[{r}] pingpong {n} bytes ok (3 round trips)"));
        }
        expected.push(format!("[{r}] PASS"));
    }
    for e in [
        "[1] truncated receive reported: ni_recv: recv to/from rank 0: message truncated: \
         receive buffer too small (the message has 100 bytes, tag 3)",
        "[1] non-blocking truncated receive reported length 50",
        "[0] wait_all window sent",
        "[1] wait_all ok: 7 entries in order, the truncated one reported (length 100), the NULL \
         one skipped",
        "[0] get verified (300 bytes)",
        "[0] remote error codes ok",
        "[1] put verified (200 bytes at offset 128, the rest untouched)",
        "[1] active message handled: \"am request 42\" from rank 0 (replied from the handler)",
        "[0] active message round trip ok: \"am reply to: am request 42\"",
        "[0] mq send accepted (tail 2)",
        "[0] mq send rejected (queue full)",
        "[1] mq receive ok: \"mq message from rank 0\"; threshold status and reset ok",
    ] {
        expected.push(e.to_string());
    }
    for e in &expected {
        assert!(
            lines.iter().any(|l| l.starts_with(e.as_str())),
            "no line starting {e:?} in the output:\n{text}"
        );
    }
    // PASS is each rank's last word.
    for r in 0..2 {
        let last = lines
            .iter()
            .rev()
            .find(|l| l.starts_with(&format!("[{r}] ")))
            .unwrap();
        assert_eq!(*last, format!("[{r}] PASS"), "{text}");
    }
}

#[test]
fn header_compiles_as_c99_and_cxx_and_every_function_links() {
    let b = built();
    let dir = work_dir("header");
    let names = declared_functions();
    assert!(
        names.len() > 30,
        "parsed too few functions from ni.h: {names:?}"
    );
    // Layout checks C99 can express (a negative array size fails), and a table naming every
    // declared function: the link fails if libni.so lacks one.
    let mut src = String::from(
        "#include <ni.h>\n#include <stddef.h>\n#include <stdio.h>\n\
         typedef char status_size[sizeof(ni_status_t) == 32 ? 1 : -1];\n\
         typedef char status_len[offsetof(ni_status_t, len) == 8 ? 1 : -1];\n\
         typedef char status_aux[offsetof(ni_status_t, aux) == 24 ? 1 : -1];\n\
         typedef char addr_size[sizeof(ni_mq_addr_t) == 16 ? 1 : -1];\n\
         typedef char addr_offset[offsetof(ni_mq_addr_t, offset) == 8 ? 1 : -1];\n\
         typedef char any[NI_ANY_SOURCE == -1 ? 1 : -1];\n\
         typedef char dtype_size[sizeof(ni_dtype_t) == sizeof(int) ? 1 : -1];\n\
         typedef char redop_size[sizeof(ni_redop_t) == sizeof(int) ? 1 : -1];\n\
         typedef char pattern_size[sizeof(ni_pattern_t) == sizeof(int) ? 1 : -1];\n\
         typedef char combiner_size[sizeof(ni_combiner_t) == sizeof(int) ? 1 : -1];\n\
         typedef char f64[NI_F64 == 5 && NI_XOR == 6 && NI_COMBINER_MAX == 4 ? 1 : -1];\n\
         typedef void (*fn_t)(void);\n\
         static const fn_t functions[] = {\n",
    );
    for n in &names {
        src.push_str(&format!("    (fn_t){n},\n"));
    }
    src.push_str(
        "};\n\
         int main(void) {\n\
         \x20   size_t n = 0;\n\
         \x20   for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++)\n\
         \x20       n += functions[i] != NULL;\n\
         \x20   printf(\"%zu functions, %s\\n\", n, ni_strerror(NI_ETRUNCATED));\n\
         \x20   return ni_attach(NULL) == NI_EINVAL ? 0 : 1;\n\
         }\n",
    );
    let c = dir.join("all.c");
    std::fs::write(&c, &src).unwrap();
    let exe = dir.join("all");
    let mut cmd = gcc(&exe);
    cmd.arg(&c)
        .arg("-L")
        .arg(&b.so_dir)
        .arg("-lni")
        .arg(format!("-Wl,-rpath,{}", b.so_dir.display()));
    run(cmd);
    let out = run(Command::new(&exe));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "{} functions, message truncated: receive buffer too small\n",
            names.len()
        )
    );

    // The header in C++: extern "C" and no C-only constructs.
    if have("g++") {
        let cc = dir.join("all.cc");
        std::fs::write(
            &cc,
            "#include <ni.h>\nint main() { return ni_strerror(NI_OK) ? 0 : 1; }\n",
        )
        .unwrap();
        let mut cmd = Command::new("g++");
        cmd.args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-I",
        ])
        .arg(include_dir())
        .arg(&cc)
        .arg("-o")
        .arg(dir.join("allcc"))
        .arg("-L")
        .arg(&b.so_dir)
        .arg("-lni")
        .arg(format!("-Wl,-rpath,{}", b.so_dir.display()));
        run(cmd);
        run(Command::new(dir.join("allcc")));
    } else {
        loud("g++ not found: the C++ check of ni.h is SKIPPED");
    }
}

#[test]
fn pkg_config_file_gives_working_flags() {
    let b = built();
    let dir = work_dir("pkgconfig");
    let mut cmd = Command::new("sh");
    cmd.arg(Path::new(LIBNI).join("gen-pc.sh"))
        .arg("/opt/ni")
        .arg(&b.so_dir)
        .arg(include_dir());
    let pc = run(cmd).stdout;
    let pc = String::from_utf8(pc).unwrap();
    assert!(!pc.contains('@'), "unsubstituted placeholder in:\n{pc}");
    assert!(pc.contains("prefix=/opt/ni\n"), "{pc}");
    assert!(
        pc.contains(&format!("Version: {}\n", env!("CARGO_PKG_VERSION"))),
        "{pc}"
    );
    std::fs::write(dir.join("ni.pc"), &pc).unwrap();

    if !have("pkg-config") {
        let msg = "pkg-config not found: the pkg-config check is SKIPPED \
                   (apt-get install -y -t bookworm pkg-config)";
        if std::env::var("NI_REQUIRE_PKG_CONFIG").as_deref() == Ok("1") {
            panic!("{msg}, and NI_REQUIRE_PKG_CONFIG=1");
        }
        loud(msg);
        return;
    }
    let pkg_config = |args: &[&str]| {
        let mut cmd = Command::new("pkg-config");
        cmd.args(args)
            .arg("ni")
            .env("PKG_CONFIG_PATH", &dir)
            .env_remove("PKG_CONFIG_LIBDIR")
            .env_remove("PKG_CONFIG_SYSROOT_DIR");
        String::from_utf8(run(cmd).stdout)
            .unwrap()
            .trim()
            .to_string()
    };
    let flags = pkg_config(&["--cflags", "--libs"]);
    let words: Vec<&str> = flags.split_whitespace().collect();
    assert!(
        words.contains(&format!("-I{}", include_dir().display()).as_str()),
        "no -I for ni.h in {flags:?}"
    );
    assert!(
        words.contains(&format!("-L{}", b.so_dir.display()).as_str()),
        "no -L in {flags:?}"
    );
    assert!(words.contains(&"-lni"), "no -lni in {flags:?}");
    let static_libs = pkg_config(&["--static", "--libs"]);
    for l in ["-lni", "-lpthread", "-ldl", "-lm"] {
        assert!(
            static_libs.split_whitespace().any(|w| w == l),
            "no {l} in --static --libs: {static_libs:?}"
        );
    }
    assert_eq!(pkg_config(&["--modversion"]), env!("CARGO_PKG_VERSION"));

    // The flags are enough to build the example.
    let exe = dir.join("pingpong");
    let mut cmd = gcc(&exe);
    cmd.arg(example())
        .args(words)
        .arg(format!("-Wl,-rpath,{}", b.so_dir.display()));
    run(cmd);
}

#[test]
fn c_pingpong_against_the_shared_library() {
    let dir = work_dir("shared");
    let exe = build_shared(&dir);

    // With no NI behind NI_SOCKET it fails, and says why with ni_last_error().
    let mut cmd = Command::new(&exe);
    cmd.env("NI_SOCKET", dir.join("no-such-ni.sock"));
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", show(&cmd, &out));
    assert!(
        (err.contains("ni_attach(&ni) returned -104") || err.contains("returned -106"))
            && err.contains("no-such-ni.sock"),
        "{}",
        show(&cmd, &out)
    );

    run_pingpong(&exe);
}

#[test]
fn c_pingpong_against_the_static_library() {
    let b = built();
    let dir = work_dir("static");
    let exe = dir.join("pingpong");
    let mut cmd = gcc(&exe);
    // What a Rust staticlib needs from the system (rustc --print native-static-libs).
    cmd.arg(example())
        .arg(&b.archive)
        .args(["-lpthread", "-ldl", "-lm"]);
    run(cmd);
    if have("readelf") {
        let mut cmd = Command::new("readelf");
        cmd.arg("-d").arg(&exe);
        let dynamic = String::from_utf8(run(cmd).stdout).unwrap();
        assert!(
            !dynamic.contains("libni.so"),
            "the static build still needs libni.so:\n{dynamic}"
        );
    }
    run_pingpong(&exe);
}

#[test]
fn c_collectives_under_nirun_3() {
    let dir = work_dir("collectives");
    let exe = build_shared_from(&dir, &collectives_example(), "collectives");
    let n = 3;
    let mut cmd = Command::new(NIRUN);
    cmd.args(["-n", &n.to_string(), "--timeout", "120", "--device"])
        .arg(built().bin_dir.join("ni-device"))
        .arg(&exe);
    let out = cmd.output().expect("running nirun");
    let text = show(&cmd, &out);
    assert!(
        out.status.success(),
        "the C collectives example failed:\n{text}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    for r in 0..n {
        let below: u32 = (0..r).sum();
        let mut expected = vec![
            format!("[{r}] rank {r} of {n}"),
            format!("[{r}] allreduce of doubles ok: sum[0] = 3"),
            format!("[{r}] iallreduce (max) and in-place allreduce (min) ok"),
            format!("[{r}] barrier ok"),
            format!("[{r}] broadcast from every root ok"),
            format!("[{r}] reduce to every root ok"),
            format!(
                "[{r}] scan ok: inclusive {}, exclusive {}",
                (r + 1) * (r + 2) / 2,
                r * (r + 1) / 2
            ),
            format!("[{r}] allgather ok"),
            format!("[{r}] collective error codes ok"),
            format!("[{r}] cm5 add-scan ok: {below} (sum of the ranks below {r})"),
            format!("[{r}] cm5 backward scan, two-word uadd and max ok"),
            format!("[{r}] abstainer ok: the reduction without rank 1 is 4"),
            format!("[{r}] collision and combine flush ok"),
            format!("[{r}] network done and globals ok"),
        ];
        expected.push(format!("[{r}] PASS"));
        for e in &expected {
            assert!(
                lines.iter().any(|l| l == e),
                "no line {e:?} in the output:\n{text}"
            );
        }
        let last = lines
            .iter()
            .rev()
            .find(|l| l.starts_with(&format!("[{r}] ")))
            .unwrap();
        assert_eq!(*last, format!("[{r}] PASS"), "{text}");
    }
}
