//! `ni-bench`: ni's benchmark suite beside the baselines users would pick instead (TCP
//! loopback, Unix stream sockets, Open MPI over shared memory). See `tests/bench/README.md`.

#[path = "../bench/mod.rs"]
mod bench;

fn main() -> std::process::ExitCode {
    bench::main()
}
