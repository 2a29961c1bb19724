#!/usr/bin/env bash
# ni's benchmark suite beside its baselines, in one run (design brief §5 tier 5; issue 7).
#
#   tests/bench/run.sh                 everything: every mode, placements split and same,
#                                      P = 2,4,8, ni + TCP + Unix + Open MPI (≈ 8 min)
#   tests/bench/run.sh --quick         a smoke run (seconds)
#   tests/bench/run.sh latency bw      some modes; any other ni-bench option passes through
#   tests/bench/run.sh --instr         instructions per 8-byte round trip only (callgrind;
#                                      a full run includes it: tests/bench/instr.sh)
#
# Builds release into $CARGO_TARGET_DIR (default target-bench, so it does not wait on the
# shared target/ lock), installs Open MPI from Debian when mpirun/mpicc are missing
# (NIB_NO_INSTALL=1 skips that; NIB_NO_BUILD=1 skips the cargo build and uses what is
# there), builds the MPI programs of tests/bench/mpi/, runs
# ni-bench and leaves the results under $NIB_OUT (default target/bench/<date-time>/, with
# target/bench/latest pointing at it): results.json, table.txt, plot-*.svg, run.log.
# Benchmarks are not tests: nothing here fails on a number.
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-bench}"
stamp="$(date +%Y%m%d-%H%M%S)"
out="${NIB_OUT:-target/bench/$stamp}"
mkdir -p "$out"

step() { printf '\n==> %s\n' "$*" >&2; }

if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  if [ "${NIB_NO_INSTALL:-0}" = 1 ]; then
    step "Open MPI not installed and NIB_NO_INSTALL=1: the MPI baseline is skipped"
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing Open MPI (openmpi-bin libopenmpi-dev) from bookworm"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm openmpi-bin libopenmpi-dev >/dev/null
  else
    step "Open MPI missing and cannot install it (not root or no apt-get): the MPI baseline is skipped"
  fi
fi

if [ "${NIB_NO_BUILD:-0}" = 1 ]; then
  step "NIB_NO_BUILD=1: using the binaries already in $CARGO_TARGET_DIR/release"
else
  step "cargo build --release (ni-device, nirun, ni-bench, libni-fi.so) into $CARGO_TARGET_DIR"
  cargo build --release -q -p ni-device -p libni -p ni-tests --bins
  cargo build --release -q -p ni-fi
fi

# Instructions per message (tests/bench/instr.sh): in a full run (no argument), or with
# --instr (alone: only that); NIB_NO_INSTR=1 leaves it out.
instr=0
case " $* " in *" --instr "*) instr=1 ;; esac
set -- $(printf '%s\n' "$@" | grep -vx -- --instr || true)
only_instr=0
[ $instr = 1 ] && [ $# -eq 0 ] && only_instr=1
if [ "${NIB_NO_INSTR:-0}" != 1 ] && { [ $instr = 1 ] || [ $# -eq 0 ]; }; then
  instr=1
  if ! command -v valgrind >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing valgrind (bookworm) for the instruction counts"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm valgrind >/dev/null
  fi
else
  instr=0
fi

if command -v mpicc >/dev/null; then
  step "building the MPI programs (tests/bench/mpi) into $out/mpi"
  mkdir -p "$out/mpi"
  for p in pt2pt rma coll; do
    mpicc -O2 -Wall -o "$out/mpi/$p" "tests/bench/mpi/$p.c"
  done
fi

step "machine: $(nproc) cpus, $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
step "ni-bench $* -> $out"
set +e
rc=0
# The instruction counts first: ni-bench reports them among the issue-15 targets when it
# finds $out/instr.json (never one left from an earlier run into the same directory).
rm -f "$out/instr.json" "$out/instr.txt"
: >"$out/run.log"
if [ $instr = 1 ]; then
  step "instructions per 8-byte round trip (tests/bench/instr.sh, callgrind)"
  if ! bash tests/bench/instr.sh "$out" 8 2>>"$out/run.log"; then
    step "instr.sh failed (see $out/run.log)"
    rc=1
  fi
fi
if [ $only_instr = 0 ]; then
  "$CARGO_TARGET_DIR/release/ni-bench" --out "$out" --mpi-dir "$out/mpi" "$@" 2> >(tee -a "$out/run.log" >&2)
  rc2=$?
  [ $rc2 = 0 ] || rc=$rc2
fi
[ ! -s "$out/instr.txt" ] || cat "$out/instr.txt" >>"$out/table.txt"
set -e
[ "$out" = "target/bench/$stamp" ] && ln -sfn "$stamp" target/bench/latest
step "results in $out (results.json, table.txt, plot-*.svg, run.log)"
exit $rc
