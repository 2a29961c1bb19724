#!/usr/bin/env bash
# Instructions per message (issue 15: "find where the time goes before changing things"):
# an 8-byte ping-pong between two ranks, rank 0 under `valgrind --tool=callgrind` collecting
# only inside the ping-pong loop (`nib_pingpong`), run twice (ITERS_A and ITERS_B round
# trips); (Ir_B - Ir_A) / (ITERS_B - ITERS_A) is what one round trip costs rank 0 — one send
# and one receive, the waiting included — with every constant cost (start-up, warm-up,
# first-touch) cancelled. Instruction counts do not depend on what else the machine runs;
# the waiting part does (rank 1 runs natively, so rank 0 polls a few of valgrind's slow
# instructions for each answer; more when rank 1 is descheduled): each count is the fewest of
# NIB_INSTR_REPS (3) runs. Run it on a quiet machine, and compare stacks, not digits.
#
#   tests/bench/instr.sh OUT_DIR [SIZE]      writes OUT_DIR/instr.json and OUT_DIR/instr.txt
#
# NIB_INSTR_KEEP=1 keeps the callgrind outputs (for callgrind_annotate --tree=caller).
# Under `taskset -c 0` every rank shares one cpu (ni-bench's placement `same`): the counts
# then include each wait's path to its yield.
# NIB_INSTR_PATTERN=send|recv|posted: the message-rate pattern instead (`msgrate`: windows of 64
# messages, the sender waits for all of them, a 0-byte answer closes the window), rank 0 the
# sender (send) or the receiver (recv); counts are then per message (per window / 64).
# posted: rank 0 receives into receives it posted before rank 1 sends (rank 1 waits for a
# go-ahead): the path of a receiver that shares its core with the sender.
# am|mq: a ping-pong of 64-byte active messages or T3E SENDs (`ni-bench am`, `mq`), per round
# trip; MPI has neither, so its stack runs the 64-byte ping-pong beside it, and the stacks
# over ni are left out.
# allreduce: both ranks sum SIZE / 8 f64 (libni's allreduce, MPI_Allreduce), per allreduce.
# reduce|scan|bcast: the same with a reduce to rank 0 (rank 0 takes), an inclusive scan (rank
# 0 sends) or a broadcast from rank 0 (rank 0 sends), per collective. NIB_INSTR_ROOT=1 makes
# rank 1 the root of the reduce and the broadcast: rank 0 then sends or takes instead.
# poll: a test of a receive whose message has not come (Ni::test, MPI_Test), per look: what
# a polling loop pays between two messages.
#
# Stacks, each with its own private ni-device where it uses ni:
#   ni        libni (Ni::irecv + send + wait; rank 1 recv + send), the partition window
#   mpi       Open MPI over its shared memory (pml ob1, btl vader,self)
#   mpi-ni    Open MPI over ni (pml cm, mtl ofi, provider ni)
#   mpich-ni  MPICH 5.0.2 over ni (ch4:ofi), when tests/mpi/run.sh left it in the cache
# Needs the release binaries in $CARGO_TARGET_DIR (ni-device, nirun, ni-instr, libni_fi.so),
# valgrind, and mpicc/mpirun for the MPI stacks (a stack whose tools are missing is left out
# and says so).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
OUT="${1:?usage: tests/bench/instr.sh OUT_DIR [SIZE]}"
SIZE="${2:-8}"
export NIB_INSTR_PATTERN="${NIB_INSTR_PATTERN:-pingpong}"
case "$NIB_INSTR_PATTERN" in
pingpong) PER=1 UNIT="round trip" DEF_A=2000 DEF_B=4000 ;;
send | recv | posted) PER=64 UNIT="message ($NIB_INSTR_PATTERN, windows of 64)" DEF_A=200 DEF_B=400 ;;
am | mq) PER=1 UNIT="round trip ($NIB_INSTR_PATTERN)" DEF_A=2000 DEF_B=4000 SIZE=64 MPI_ONLY=1 ;;
allreduce) PER=1 UNIT="allreduce of $((SIZE / 8)) f64 (sum, 2 ranks)" DEF_A=2000 DEF_B=4000 ;;
reduce | scan | bcast) PER=1 UNIT="$NIB_INSTR_PATTERN of $((SIZE / 8)) f64 (2 ranks, rank ${NIB_INSTR_ROOT:-0} the root, rank 0 a scan's first)" DEF_A=2000 DEF_B=4000 ;;
poll) PER=1 UNIT="look that finds nothing (a test of a receive)" DEF_A=20000 DEF_B=40000 ;;
*) echo "NIB_INSTR_PATTERN=$NIB_INSTR_PATTERN: pingpong, send, recv, posted, am, mq, allreduce, reduce, scan, bcast or poll" >&2; exit 2 ;;
esac
ITERS_A="${NIB_INSTR_A:-$DEF_A}"
ITERS_B="${NIB_INSTR_B:-$DEF_B}"
T="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$T" in /*) ;; *) T="$ROOT/$T" ;; esac # the provider is linked from elsewhere
BIN="$T/release"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d -t ni-instr.XXXXXX)
DAEMON=""
cleanup() {
    [ -z "$DAEMON" ] || { kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; }
    if [ -n "${NIB_INSTR_KEEP:-}" ]; then
        echo "callgrind outputs kept in $WORK (NIB_INSTR_KEEP)" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

say() { printf '==> %s\n' "$*" >&2; }
command -v valgrind >/dev/null || { say "valgrind missing: no instruction counts (apt-get install valgrind)"; exit 1; }
for f in ni-device nirun ni-instr; do
    [ -x "$BIN/$f" ] || { say "$BIN/$f missing: build first (cargo build --release)"; exit 1; }
done

daemon() { # daemon N: a private ni-device in $WORK/run
    rm -rf "$WORK/run"
    mkdir -p "$WORK/run"
    NI_LOG=warn "$BIN/ni-device" -n "$1" --run-dir "$WORK/run" >"$WORK/daemon.log" 2>&1 &
    DAEMON=$!
    for _ in $(seq 100); do
        [ -S "$WORK/run/ni$(($1 - 1)).sock" ] && [ -S "$WORK/run/control.sock" ] && return 0
        sleep 0.1
    done
    say "ni-device did not come up"
    cat "$WORK/daemon.log" >&2
    exit 1
}
undaemon() {
    kill "$DAEMON" 2>/dev/null || true
    wait "$DAEMON" 2>/dev/null || true
    DAEMON=""
}

# The wrapper every rank runs: rank 0 (by the launcher's variable) under callgrind.
cat >"$WORK/rank0-under-callgrind" <<'EOF'
#!/bin/sh
r="${NI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}}"
if [ "$r" = 0 ]; then
    exec valgrind -q --tool=callgrind --toggle-collect=nib_pingpong \
        --callgrind-out-file="$NIB_CG_OUT" "$@"
fi
exec "$@"
EOF
chmod +x "$WORK/rank0-under-callgrind"

# totals FILE: the collected instruction count of a callgrind output
totals() { sed -n 's/^\(totals\|summary\): *\([0-9]*\).*/\2/p' "$1" | head -1; }

# measure STACK LAUNCH...: runs LAUNCH ... ITERS SIZE for both ITERS, REPS times each, and
# keeps the run with the fewest instructions of each (waiting only ever adds instructions: the
# fewest is the run that waited least); prints Ir per round trip
declare -A PER_RT
declare -A TOP
REPS="${NIB_INSTR_REPS:-3}"
measure() {
    local stack=$1 iters rep ir ir_a="" ir_b=""
    shift
    for iters in "$ITERS_A" "$ITERS_B"; do
        local best="" cg="$WORK/$stack.$iters.cg"
        for rep in $(seq "$REPS"); do
            local try="$WORK/$stack.$iters.$rep.cg"
            rm -f "$try"
            if ! NIB_CG_OUT="$try" timeout 600 "$@" "$iters" "$SIZE" >"$WORK/$stack.$iters.log" 2>&1 ||
                [ ! -s "$try" ]; then
                say "$stack: the run of $iters round trips failed:"
                tail -15 "$WORK/$stack.$iters.log" >&2
                return 1
            fi
            ir=$(totals "$try")
            if [ -z "$best" ] || [ "$ir" -lt "$best" ]; then
                best=$ir
                cp "$try" "$cg"
            fi
        done
        if [ "$iters" = "$ITERS_A" ]; then ir_a=$best; else ir_b=$best; fi
    done
    PER_RT[$stack]=$(( (ir_b - ir_a) / (ITERS_B - ITERS_A) / PER ))
    # where a round trip's instructions go: each function's own instructions, the same
    # difference of the two runs (so start-up and first-wait costs drop out)
    TOP[$stack]=$(python3 - "$WORK/$stack.$ITERS_A.cg" "$WORK/$stack.$ITERS_B.cg" \
        "$(((ITERS_B - ITERS_A) * PER))" <<'PY'
import re, subprocess, sys
def own(f):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=no", "--threshold=100", f],
                         capture_output=True, text=True).stdout
    d = {}
    for line in out.splitlines():
        if "=>" in line or "<" in line.split(")", 1)[-1][:4]:
            continue  # call lines of a tree, not functions' own cost
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*?)(?: \[.*\])?$", line)
        if m and "PROGRAM TOTALS" not in line and ":" in m.group(2):
            d[m.group(2)] = d.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return d
a, b, n = own(sys.argv[1]), own(sys.argv[2]), int(sys.argv[3])
rows = sorted(((b.get(k, 0) - a.get(k, 0)) / n, k) for k in set(a) | set(b))
for per, k in reversed(rows[-12:]):
    if per >= 1:
        k = re.sub(r"^/rustc/[0-9a-f]+/library/", "std:", k)
        print(f"{per:8.0f}  {k[:110]}")
PY
)
    say "$stack: ${PER_RT[$stack]} instructions per $UNIT at rank 0 (Ir $ir_a at $ITERS_A, $ir_b at $ITERS_B)"
}

STACKS=()
say "ni: libni ping-pong, rank 0 under callgrind"
daemon 2
if measure ni env NI_RUN_DIR="$WORK/run" "$BIN/nirun" -n 2 --run-dir "$WORK/run" \
    "$WORK/rank0-under-callgrind" "$BIN/ni-instr"; then STACKS+=(ni); fi
undaemon

PROV="$WORK/provider"
mkdir -p "$PROV"
if [ -e "$BIN/libni_fi.so" ]; then
    ln -s "$BIN/libni_fi.so" "$PROV/libni-fi.so"
else
    say "$BIN/libni_fi.so missing: the mpi-ni stack is left out (cargo build --release -p ni-fi)"
fi
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    mpicc -O2 -o "$WORK/instr" tests/bench/mpi/instr.c
    # MPI has neither active messages nor T3E queues: against ni's am and mq, Open MPI's
    # 64-byte ping-pong (what `ni-bench am` and `mq` compare with), and no mpi-ni.
    mpi_pattern="$NIB_INSTR_PATTERN"
    [ -z "${MPI_ONLY:-}" ] || mpi_pattern=pingpong
    ompi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 -x NIB_CG_OUT
        -x "NIB_INSTR_PATTERN=$mpi_pattern" -x "NIB_INSTR_ROOT=${NIB_INSTR_ROOT:-0}")
    # Run on one cpu (`taskset -c 0 tests/bench/instr.sh`), Open MPI's ranks would spin
    # through each other's time slices (hundreds of thousands of instructions a round trip):
    # ask them to yield, as ni-bench does for its placement `same`.
    if [ "$(nproc)" = 1 ]; then
        ompi+=(--mca mpi_yield_when_idle 1)
        say "one cpu: Open MPI with mpi_yield_when_idle 1"
    fi
    say "mpi: Open MPI ob1 + vader, rank 0 under callgrind"
    if measure mpi "${ompi[@]}" --mca pml ob1 --mca btl self,vader \
        "$WORK/rank0-under-callgrind" "$WORK/instr"; then STACKS+=(mpi); fi
    if [ -e "$PROV/libni-fi.so" ] && [ -z "${MPI_ONLY:-}" ]; then
        say "mpi-ni: Open MPI cm + ofi + ni, rank 0 under callgrind"
        daemon 2
        if FI_PROVIDER_PATH="$PROV" NI_RUN_DIR="$WORK/run" measure mpi-ni "${ompi[@]}" \
            -x FI_PROVIDER_PATH -x NI_RUN_DIR --mca pml cm --mca mtl ofi \
            --mca mtl_ofi_provider_include ni "$WORK/rank0-under-callgrind" "$WORK/instr"; then
            STACKS+=(mpi-ni)
        fi
        undaemon
    fi
else
    say "Open MPI (mpicc, mpirun) missing: the mpi and mpi-ni stacks are left out"
fi
MPICH="$T/mpi-tests/mpich-5.0.2"
if [ -x "$MPICH/bin/mpiexec" ] && [ -e "$PROV/libni-fi.so" ] && [ -z "${MPI_ONLY:-}" ]; then
    "$MPICH/bin/mpicc" -O2 -o "$WORK/instr-mpich" tests/bench/mpi/instr.c
    say "mpich-ni: MPICH ch4:ofi + ni, rank 0 under callgrind"
    daemon 2
    if FI_PROVIDER_PATH="$PROV" NI_RUN_DIR="$WORK/run" FI_PROVIDER=ni MPIR_CVAR_CH4_NETMOD=ofi \
        MPIR_CVAR_NOLOCAL=1 measure mpich-ni "$MPICH/bin/mpiexec" -n 2 \
        "$WORK/rank0-under-callgrind" "$WORK/instr-mpich"; then STACKS+=(mpich-ni); fi
    undaemon
else
    say "MPICH not in $MPICH (tests/mpi/run.sh puts it there): the mpich-ni stack is left out"
fi

{
    if [ "$NIB_INSTR_PATTERN" = poll ]; then
        printf 'instructions per %s at rank 0 (rank 1 sends only once rank 0 is done;\n' "$UNIT"
        printf 'callgrind, (Ir at %s - Ir at %s looks) / %s, each the fewest of %s runs;\n' "$ITERS_B" "$ITERS_A" "$((ITERS_B - ITERS_A))" "$REPS"
    elif [[ "$NIB_INSTR_PATTERN" =~ ^(allreduce|reduce|scan|bcast)$ ]]; then
        printf 'instructions per %s at rank 0 (%s bytes a rank, waiting included;\n' "$UNIT" "$SIZE"
        printf 'callgrind, (Ir at %s - Ir at %s %ss) / %s, each the fewest of %s runs;\n' "$ITERS_B" "$ITERS_A" "$NIB_INSTR_PATTERN" "$((ITERS_B - ITERS_A))" "$REPS"
    elif [ "$PER" = 1 ]; then
        printf 'instructions per %s-byte round trip at rank 0 (one send + one receive, waiting included;\n' "$SIZE"
        printf 'callgrind, (Ir at %s - Ir at %s round trips) / %s, each the fewest of %s runs;\n' "$ITERS_B" "$ITERS_A" "$((ITERS_B - ITERS_A))" "$REPS"
    else
        printf 'instructions per %s-byte %s at rank 0 (waiting and the answer closing each window included;\n' "$SIZE" "$UNIT"
        printf 'callgrind, (Ir at %s - Ir at %s windows) / %s / %s, each the fewest of %s runs;\n' "$ITERS_B" "$ITERS_A" "$((ITERS_B - ITERS_A))" "$PER" "$REPS"
    fi
    printf 'load average when it ended: %s)\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-10s %12s %10s\n' stack "$([ "$PER" = 1 ] && echo Ir/op || echo Ir/msg)" 'x mpi'
    for s in "${STACKS[@]}"; do
        ratio="-"
        [ -n "${PER_RT[mpi]:-}" ] && ratio=$(python3 -c "print(f'{${PER_RT[$s]}/${PER_RT[mpi]}:.2f}')")
        printf '%-10s %12s %10s\n' "$s" "${PER_RT[$s]}" "$ratio"
    done
    for s in "${STACKS[@]}"; do
        printf '\n%s: instructions per '"$UNIT"' by function (their own, not their callees'"'"')\n%s\n' \
            "$s" "${TOP[$s]}"
    done
} >"$OUT/instr.txt"
python3 - "$OUT/instr.json" "$SIZE" "$ITERS_A" "$ITERS_B" "${STACKS[@]/#/}" <<PY
import json, sys
out, size, a, b, *stacks = sys.argv[1:]
per = {$(for s in "${STACKS[@]}"; do printf '"%s": %s, ' "$s" "${PER_RT[$s]}"; done)}
key = {"pingpong": "per_round_trip", "allreduce": "per_allreduce", "reduce": "per_reduce",
       "scan": "per_scan", "bcast": "per_bcast", "poll": "per_look"}.get("$NIB_INSTR_PATTERN", "per_message")
json.dump({"size": int(size), "iters": [int(a), int(b)], "pattern": "$NIB_INSTR_PATTERN", key: per,
           "method": "callgrind Ir inside nib_pingpong at rank 0, difference of two runs"},
          open(out, "w"), indent=1)
PY
cat "$OUT/instr.txt"
