# shellcheck shell=bash
# Sourced by the tests in tests/vm/ that run programs in guests with qemu-patches/run-guests.sh
# (not a test itself: tests/run.sh runs only tests/vm/*.sh).
#   vm_prepare           setup.sh, static guest binaries ($GUEST_BIN), ni-ctl ($NI_CTL), python3
#   vm_run ARGS...       run-guests.sh --log-dir $LOG ARGS; output in $OUT, status in $RC
#   expect WHAT CMD...   one assertion; has REGEX: grep -E the last run's output
#   vm_finish            "N passed, N failed"; on failure the consoles and the daemon log
#   vm_daemon RUN N LOG  a daemon of this test's own (for tests that drive it themselves)
# Environment: NI_VM_TIMEOUT (per guest, default 600 s), NI_CTL, NI_DEVICE, NI_CACHE.
# shellcheck source-path=SCRIPTDIR source=../../../qemu-patches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../../qemu-patches/common.sh"

passed=0 failed=0 OUT="" RC=0 LOG=""
TEST_NAME="vm/$(basename "$0" .sh)"
pass() { echo "ok - $*"; passed=$((passed + 1)); }
failt() { echo "not ok - $*" >&2; failed=$((failed + 1)); }
expect() { # expect DESCRIPTION COMMAND...: pass if COMMAND succeeds
    local what="$1"
    shift
    if "$@"; then pass "$what"; else failt "$what"; fi
}
has() { grep -qE -- "$1" <<<"$OUT"; }

vm_prepare() {
    "$NI_QEMU_DIR/setup.sh"
    GUEST_BIN="$("$NI_QEMU_DIR/guest-bins.sh")"
    NI_CTL="${NI_CTL:-$NI_REPO/target/release/ni-ctl}"
    if [[ ! -x $NI_CTL ]]; then
        ni_log "building ni-ctl (cargo build --release -p ni-ctl)"
        (cd "$NI_REPO" && cargo build --release -q -p ni-ctl) || ni_die "building ni-ctl failed"
    fi
    if ! command -v python3 >/dev/null; then
        ni_log "installing python3 (JSON checks)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-minimal >/dev/null; } ||
            ni_die "python3 is missing and could not be installed"
    fi
    mkdir -p "$NI_CACHE/logs"
    LOG="$NI_CACHE/logs/$(basename "$0" .sh)-$(date +%Y%m%d-%H%M%S)-$$"
    export GUEST_BIN NI_CTL LOG
}

# vm_daemon RUN_DIR NODES LOG: start ni-device (NI_DEVICE, else target/release/ni-device,
# built if missing) with --direct shared on RUN_DIR, output to LOG; DAEMON_BIN is the binary,
# DAEMON_PID the process. Returns once the control socket and every NI's socket exist.
vm_daemon() {
    local run="$1" nodes="$2" log="$3"
    DAEMON_BIN="${NI_DEVICE:-$NI_REPO/target/release/ni-device}"
    if [[ ! -x $DAEMON_BIN ]]; then
        (cd "$NI_REPO" && cargo build --release -q -p ni-device) || ni_die "building ni-device failed"
    fi
    mkdir -p "$run"
    "$DAEMON_BIN" --nodes "$nodes" --run-dir "$run" --direct shared >"$log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 100); do
        [[ -S $run/control.sock && -S $run/ni$((nodes - 1)).sock ]] && return 0
        sleep 0.1
    done
    ni_die "ni-device did not serve $run within 10 s (log: $log)"
}

vm_run() {
    RC=0
    # shellcheck disable=SC2034  # RC is for the sourcing test
    OUT="$("$NI_QEMU_DIR/run-guests.sh" --log-dir "$LOG" --timeout "${NI_VM_TIMEOUT:-600}" "$@")" || RC=$?
    printf '%s\n' "$OUT"
}

vm_logs() {
    local f
    for f in "$LOG"/guest*.log; do
        [[ -f $f ]] || continue
        echo "===== guest console ($f) ====="
        tr -d '\r' <"$f"
        echo "===== QEMU output ($f.qemu) ====="
        cat "$f.qemu" 2>/dev/null || true
    done
    for f in "$LOG"/host*.out; do
        [[ -f $f ]] || continue
        echo "===== host rank output ($f) ====="
        cat "$f"
    done
    echo "===== ni-device log ($LOG/daemon.log) ====="
    cat "$LOG/daemon.log" 2>/dev/null || true
    echo "====="
}

vm_finish() {
    if ((failed)); then
        vm_logs >&2
        echo "FAIL $TEST_NAME (logs: $LOG)" >&2
    else
        echo "PASS $TEST_NAME (logs: $LOG)"
    fi
    echo "$passed passed, $failed failed"
    ((failed == 0))
}

# check_counters: every NI's counters (the --after hook's $LOG/counters.json) match the
# "stats node=N recvs=R recv_bytes=B send_bytes=S" lines the ranks printed.
check_counters() {
    local stats
    stats="$(grep -oE 'stats node=[0-9]+ recvs=[0-9]+ recv_bytes=[0-9]+ send_bytes=[0-9]+' <<<"$OUT" || true)"
    [[ -n $stats ]] || { echo "no stats lines in the output" >&2; return 1; }
    python3 -c "$COUNTERS_PY" "$LOG/counters.json" <<<"$stats"
}
read -r -d '' COUNTERS_PY <<'PY' || true
import json, re, sys
with open(sys.argv[1]) as f:
    nodes = {c["node"]: c["counters"] for c in json.load(f)["counters"]}
ok = True
for line in sys.stdin:
    s = dict(kv.split("=") for kv in line.split()[1:])
    n = int(s.pop("node"))
    c = nodes.get(n)
    if c is None:
        print(f"NI {n}: no counters", file=sys.stderr); ok = False; continue
    for k, v in s.items():
        if c.get(k) != int(v):
            print(f"NI {n}: counter {k} = {c.get(k)}, the rank counted {v}", file=sys.stderr)
            ok = False
    if c.get("dma_faults", 0) != 0:
        print(f"NI {n}: {c['dma_faults']} DMA faults", file=sys.stderr); ok = False
    print(f"NI {n}: recvs={c.get('recvs')} recv_bytes={c.get('recv_bytes')} send_bytes={c.get('send_bytes')} sends={c.get('sends')} doorbells={c.get('doorbells')} msix_sent={c.get('msix_sent')} resets={c.get('resets')}")
sys.exit(0 if ok else 1)
PY

# node_attaches FILE NODE N: `ni-ctl --json nodes` (saved in FILE) shows NI NODE attached N
# times (one per vfio-user client it has had: a QEMU, its replacement, a re-plug).
node_attaches() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
n = {x["node"]: x for x in json.load(open(sys.argv[1]))["nodes"]}
node, want = int(sys.argv[2]), int(sys.argv[3])
print(f"NI {node}: attaches={n[node]['attaches']} state={n[node]['state']}")
sys.exit(0 if n[node]["attaches"] == want else 1)
PY
}
