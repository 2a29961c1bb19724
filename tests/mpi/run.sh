#!/usr/bin/env bash
# MPI over the libfabric provider "ni": Open MPI 4.1.4 (pml cm + mtl ofi) and MPICH 5.0.2
# (ch4:ofi) on ni-device.
#
#   tests/mpi/run.sh        everything below; exit status 0 only if all of it passed
#
# 1. installs what is missing from bookworm (openmpi-bin libopenmpi-dev libfabric-bin
#    libfabric-dev python3-mpi4py python3-pip python3-dev) when run as root;
# 2. takes $CARGO_TARGET_DIR (default target)/release/{ni-device,ni-ctl,libni_fi.so}, built
#    already (it fails if they are missing; it never builds), and makes a provider directory
#    holding the symlink libni-fi.so that FI_PROVIDER_PATH names;
# 3. compiles tests/mpi/{p2p,coll}.c and runs each under mpirun --mca pml cm --mca mtl ofi
#    --mca mtl_ofi_provider_include ni on a private ni-device: N = 2 and 4 on the default
#    direct path (the partition window), N = 2 again with --direct off (every message through
#    the daemon's fabric thread) and N = 3 (odd size). Each run: exit status 0, PASS lines,
#    no FAIL line, and afterwards `ni-ctl --json counters` must show that every NI was
#    attached once and carried the traffic (sends/recvs on every NI, the payload bytes in
#    recv_bytes; window_sends > 0 on the window path and 0 with --direct off), so a silent
#    fallback to another transport cannot pass;
# 4. proves the path: one run with pml/mtl verbose output must name pml cm, mtl ofi and
#    provider ni<k> on every rank, and one run with FI_PROVIDER_PATH pointing at an empty
#    directory must FAIL (no ni provider: pml cm cannot be selected);
# 5. runs mpi4py's own test suite (the sdist of the version Debian's python3-mpi4py is, from
#    PyPI by pip, cached in $CARGO_TARGET_DIR/mpi-tests/) with 2 ranks over ni, twice: as is,
#    and with mpi4py.rc.recv_mprobe off (see tests/mpi/mpi4py_run.py for the few tests left
#    out and why);
# 6. MPICH 5.0.2 (ch4:ofi; PyPI's `mpich` wheel, cached in $CARGO_TARGET_DIR/mpi-tests/, with
#    its own libfabric 2.5.1): the same p2p and coll built with its mpicc, run under its
#    mpiexec with FI_PROVIDER=ni and MPIR_CVAR_NOLOCAL=1 (no shared-memory shortcut between
#    local ranks), the same counter checks; its capability report must name provider ni, and
#    an empty FI_PROVIDER_PATH must make MPI_Init fail; mpi4py's suite again, with mpi4py
#    built from the same sdist against MPICH (exclusions per library in mpi4py_run.py);
# 7. prints a table: program, N, path, result, time, detail.
#
# Environment:
#   CARGO_TARGET_DIR        where the release binaries are (default target)
#   NI_MPI_TIMEOUT          seconds one mpirun may take (default 300; mpi4py: 3x that)
#   NI_MPI_P2P_ARGS, NI_MPI_COLL_ARGS   extra arguments, e.g. "--skip order,backlog"
#                           (printed loudly; for narrowing a failure down, not for CI)
#   NI_MPI_SKIP_MPI4PY=1    leave out step 5 (said loudly; the run then cannot pass as full)
#   NI_MPI_SKIP_MPICH=1     leave out step 6 (said loudly, likewise)
#   NI_MPI_KEEP=1           keep the work directory (logs, daemon logs) after the run
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"

step() { printf '\n==> %s\n' "$*"; }
loud() { printf '\n==> !!!!!!!! %s\n' "$*"; }
die() {
    printf '\n==> FAILED: %s\n' "$*" >&2
    exit 1
}

# Debian's own interpreter: python3-mpi4py is installed for it (a python3 earlier in PATH,
# e.g. pyenv's, does not see it).
PY=/usr/bin/python3
TIMEOUT="${NI_MPI_TIMEOUT:-300}"

# ---------------------------------------------------------------------------------------------
install_packages() {
    step "host packages (bookworm): Open MPI, libfabric, mpi4py"
    local need=() p
    for p in openmpi-bin libopenmpi-dev libfabric-bin libfabric-dev python3-mpi4py python3-pip python3-dev; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
    done
    if [ ${#need[@]} -eq 0 ]; then
        echo "all present: $(dpkg-query -W -f='${Package} ${Version}, ' openmpi-bin libfabric1 python3-mpi4py)"
        return
    fi
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null ||
        die "missing packages ${need[*]} and cannot install them (not root or no apt-get): apt-get install -t bookworm ${need[*]}"
    echo "installing: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm "${need[@]}" >/dev/null
}

# ---------------------------------------------------------------------------------------------
T="${CARGO_TARGET_DIR:-target}"
BIN=""
WORK=""
DAEMONS=()      # pids of the ni-device processes this script started
RESULTS=()      # rows of the summary table: prog|N|path|result|seconds|detail
FAILED=0

summary() {
    [ ${#RESULTS[@]} -gt 0 ] || return 0
    step "summary"
    printf '%-26s %-3s %-30s %-6s %8s  %s\n' program N path result time detail
    printf '%-26s %-3s %-30s %-6s %8s  %s\n' -------------------------- --- \
        ------------------------------ ------ -------- ------
    local r prog n path res secs detail
    for r in "${RESULTS[@]}"; do
        IFS='|' read -r prog n path res secs detail <<<"$r"
        printf '%-26s %-3s %-30s %-6s %7ss  %s\n' "$prog" "$n" "$path" "$res" "$secs" "$detail"
    done
}

cleanup() {
    local rc=$?
    local pid
    for pid in "${DAEMONS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    summary
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        if [ "${NI_MPI_KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then
            echo "==> logs kept in $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

record() { RESULTS+=("$1|$2|$3|$4|$5|$6"); }

# verdict PROG N PATH SECS PASS_DETAIL [FAIL_PREFIX]: record PASS with PASS_DETAIL when the
# caller's `why` is empty; else set FAILED and record FAIL with FAIL_PREFIX and the reasons
# (status 1).
verdict() {
    if [ ${#why[@]} -eq 0 ]; then
        record "$1" "$2" "$3" PASS "$4" "$5"
        return 0
    fi
    FAILED=1
    record "$1" "$2" "$3" FAIL "$4" "${6:+$6; }$(IFS=';'; echo "${why[*]}")"
    return 1
}

# counters_verdict RUNDIR N MIN_BYTES DIRECT [rma]: check_counters into `digest`, its failures
# into the caller's `why`; prints the digest's first line.
counters_verdict() {
    if digest=$(check_counters "$@"); then :; else
        why+=("$(echo "$digest" | grep 'COUNTERS FAIL' | sed 's/COUNTERS FAIL: //' | paste -sd';')")
    fi
    echo "    $(echo "$digest" | head -1)"
}

# ---------------------------------------------------------------------------------------------
# start_daemon LABEL N DIRECT -> sets RUNDIR and DAEMON_PID
start_daemon() {
    local label=$1 n=$2 direct=$3
    RUNDIR="$WORK/run-$label"
    mkdir -p "$RUNDIR"
    # server=debug: the daemon then logs why it refuses a client's request (e.g. a DMA map)
    NI_LOG="${NI_LOG:-info,ni_device::server=debug}" \
        "$BIN/ni-device" -n "$n" --run-dir "$RUNDIR" --direct "$direct" \
        >"$WORK/$label.daemon.log" 2>&1 &
    DAEMON_PID=$!
    DAEMONS+=("$DAEMON_PID")
    local i k ok
    for i in $(seq 100); do
        ok=1
        [ -S "$RUNDIR/control.sock" ] || ok=0
        for ((k = 0; k < n; k++)); do [ -S "$RUNDIR/ni$k.sock" ] || ok=0; done
        [ $ok = 1 ] && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$WORK/$label.daemon.log" >&2
    die "ni-device -n $n --direct $direct did not come up in $RUNDIR"
}

# The daemon's log lines that are not routine (refusals logged at DEBUG, warnings, errors),
# colours stripped.
daemon_notes() {
    sed 's/\x1b\[[0-9;]*m//g' "$WORK/$1.daemon.log" | grep -vE ' (INFO|DEBUG) .*(client (attaching|detached|version)|serving|SIGTERM)' |
        grep -v ' INFO ' | head -10 | sed 's/^/    ni-device: /' || true
}

stop_daemon() {
    kill "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    # forget it, so that the exit trap never signals a pid the system may have reused
    local keep=() p
    for p in "${DAEMONS[@]}"; do [ "$p" = "$DAEMON_PID" ] || keep+=("$p"); done
    DAEMONS=(${keep[@]+"${keep[@]}"})
}

# mpirun_ni N RUNDIR PROVDIR LOG TIMEOUT ARGS... : one mpirun over ni (Open MPI's, or with
# IMPL=mpich MPICH's mpiexec), output to LOG and, as it comes, to the console (indented);
# returns the launcher's exit status (124: timed out).
IMPL=ompi
mpirun_ni() {
    local n=$1 rundir=$2 prov=$3 log=$4 secs=$5
    shift 5
    local rc
    set +e
    if [ "$IMPL" = mpich ]; then
        # Hydra passes the environment on. FI_PROVIDER: MPICH 5 takes its provider only from
        # there; NOLOCAL: local ranks would otherwise talk through MPICH's shared memory.
        FI_PROVIDER_PATH="$prov" NI_RUN_DIR="$rundir" FI_PROVIDER=ni MPIR_CVAR_CH4_NETMOD=ofi \
            MPIR_CVAR_NOLOCAL=1 timeout -k 10 "$secs" "$MPICH/bin/mpiexec" -n "$n" "$@" 2>&1 \
            </dev/null | tee "$log" | sed -u 's/^/    /'
    else
        FI_PROVIDER_PATH="$prov" NI_RUN_DIR="$rundir" \
            timeout -k 10 "$secs" mpirun --allow-run-as-root --oversubscribe -n "$n" \
            --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ni \
            -x FI_PROVIDER_PATH -x NI_RUN_DIR -x FI_LOG_LEVEL "$@" 2>&1 </dev/null | tee "$log" | sed -u 's/^/    /'
    fi
    rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" -ne 124 ] || echo "    (timeout: the launcher killed after $secs s)"
    return "$rc"
}

# check_counters RUNDIR N MIN_RECV_BYTES DIRECT [rma] -> prints a one-line digest; fails
# (status 1) with the reason when the NIs did not carry the run's traffic. With `rma`, every NI
# must also have done MLINK WRITEs and READs (puts, gets) of at least MIN_RECV_BYTES in all.
check_counters() {
    "$BIN/ni-ctl" --run-dir "$1" --json counters >"$WORK/counters.json" ||
        { echo "ni-ctl counters failed"; return 1; }
    "$PY" - "$WORK/counters.json" "$2" "$3" "$4" "${5:-}" <<'EOF'
import json, sys
path, n, min_bytes, direct, rma = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
nis = {e["node"]: e["counters"] for e in json.load(open(path))["counters"]}
bad = []
if sorted(nis) != list(range(n)):
    bad.append(f"daemon reports NIs {sorted(nis)}, expected 0..{n-1}")
tot = {k: sum(c.get(k, 0) for c in nis.values()) for k in ("sends", "recvs", "recv_bytes", "window_sends")}
for i, c in sorted(nis.items()):
    if c.get("attaches") != 1:
        bad.append(f"NI {i}: attaches {c.get('attaches')}, expected 1 (one rank per NI)")
    if c.get("sends", 0) < 1 or c.get("recvs", 0) < 1:
        bad.append(f"NI {i}: sends {c.get('sends')} recvs {c.get('recvs')}: carried no messages")
    if direct == "off" and c.get("window_sends", 0) != 0:
        bad.append(f"NI {i}: window_sends {c['window_sends']} with --direct off")
if not rma and tot["recv_bytes"] < min_bytes:
    bad.append(f"recv_bytes {tot['recv_bytes']} over all NIs, less than the {min_bytes} the program moved")
if direct != "off" and tot["window_sends"] == 0:
    bad.append("window_sends 0 on every NI: the partition window was not used")
if rma:
    for i, c in sorted(nis.items()):
        if c.get("puts", 0) < 1 or c.get("gets", 0) < 1:
            bad.append(f"NI {i}: puts {c.get('puts')} gets {c.get('gets')}: no MLINK WRITE/READ")
    moved = sum(c.get("put_bytes", 0) + c.get("get_bytes", 0) for c in nis.values())
    if moved < min_bytes:
        bad.append(f"put_bytes + get_bytes {moved}, less than the {min_bytes} the program moved one-sided")
errs = {k: sum(c.get(k, 0) for c in nis.values()) for c in nis.values() for k in c if k.startswith("err_")}
errs = {k: v for k, v in errs.items() if v}
digest = (f"ni: {tot['sends']} sends, {tot['recvs']} recvs, {tot['recv_bytes']/2**20:.1f} MiB, "
          f"{tot['window_sends']} via window"
          + (f", {sum(c.get('puts', 0) for c in nis.values())} puts, "
             f"{sum(c.get('gets', 0) for c in nis.values())} gets" if rma else "")
          + (f", errors {errs}" if errs else ""))
print(digest)
for b in bad:
    print("COUNTERS FAIL: " + b)
sys.exit(1 if bad else 0)
EOF
}

# run_prog PROG N DIRECT MIN_RECV_BYTES ARGS...
run_prog() {
    local prog=$1 n=$2 direct=$3 min_bytes=$4
    shift 4
    local label="$IMPL-$prog-n$n-$direct" path name=$prog
    [ "$IMPL" = ompi ] || name="$IMPL $prog"
    [ "$direct" = off ] && path="fabric (--direct off)" || path="window (--direct $direct)"
    step "$name, $n ranks, $path $*"
    start_daemon "$label" "$n" "$direct"
    local t0 rc=0 secs log="$WORK/$label.log" why=() digest=""
    t0=$(date +%s.%N)
    if [ "$IMPL" = mpich ]; then
        mpirun_ni "$n" "$RUNDIR" "$PROV" "$log" "$TIMEOUT" "$WORK/bin/mpich-$prog" "$@" || rc=$?
    else
        mpirun_ni "$n" "$RUNDIR" "$PROV" "$log" "$TIMEOUT" \
            -x MPITEST_CHECK_SECS "$WORK/bin/$prog" "$@" || rc=$?
    fi
    secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
    local pass fail total
    pass=$(grep -c '^PASS ' "$log" || true)
    fail=$(grep -c 'FAIL' "$log" || true)
    total=$(sed -n "s/^$prog: \([0-9]*\) of \([0-9]*\) checks passed.*/\1\/\2/p" "$log")
    [ $rc -eq 0 ] || why+=("exit status $rc")
    [ "$pass" -gt 0 ] || why+=("no PASS line")
    [ "$fail" -eq 0 ] || why+=("$fail FAIL line(s)")
    [ -n "$total" ] || why+=("no final summary line")
    counters_verdict "$RUNDIR" "$n" "$min_bytes" "$direct" "$([ "$prog" = rma ] && echo rma)"
    stop_daemon
    if [ ${#why[@]} -eq 0 ]; then
        record "$name" "$n" "$path" PASS "$secs" "$total checks; $(echo "$digest" | head -1)"
    else
        FAILED=1
        local first
        first=$(grep -m1 '^FAIL ' "$log" | cut -c1-110 || true)
        record "$name" "$n" "$path" FAIL "$secs" "${total:-?} checks; $(IFS=';'; echo "${why[*]}")${first:+; first: $first}"
        echo "    ==> FAIL: $(IFS=';'; echo "${why[*]}")"
        grep -E 'FAIL|<warn>' "$log" | head -20 | sed 's/^/    /' || true
        daemon_notes "$label"
    fi
}

# ---------------------------------------------------------------------------------------------
prove_path() {
    local n=2 label=verbose log t0 secs why=() k
    step "path: pml cm + mtl ofi + provider ni selected on every rank (verbose selection)"
    start_daemon "$label" $n isolated
    log="$WORK/$label.log"
    t0=$(date +%s.%N)
    local rc=0
    mpirun_ni $n "$RUNDIR" "$PROV" "$log" "$TIMEOUT" --mca pml_base_verbose 10 \
        --mca mtl_base_verbose 10 "$WORK/bin/coll" --only comms >/dev/null || rc=$?
    secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
    stop_daemon
    grep -E 'select: component cm selected|Selected component \[ofi\]|mtl:ofi:provider' "$log" |
        sed 's/^/    /' || true
    [ $rc -eq 0 ] || why+=("exit status $rc")
    [ "$(grep -c 'select: component cm selected' "$log")" -eq $n ] || why+=("pml cm not selected on every rank")
    [ "$(grep -c 'Selected component \[ofi\]' "$log")" -eq $n ] || why+=("mtl ofi not selected on every rank")
    for ((k = 0; k < n; k++)); do
        grep -q "mtl:ofi:provider: ni$k\$" "$log" || why+=("no rank on provider ni (domain ni$k)")
    done
    verdict "coll --only comms" $n "verbose selection" "$secs" "pml cm, mtl ofi, provider ni0..ni$((n - 1))" || true

    step "path: FI_PROVIDER_PATH without libni-fi.so must make mpirun FAIL (no fallback)"
    must_fail_without_provider noprov p2p p2p 'PML cm cannot be selected' "mpirun failed"
}

# must_fail_without_provider LABEL BINARY NAME REASON WHAT: the program run with
# FI_PROVIDER_PATH an empty directory must fail, for REASON (a line of its output), with no PASS
# line and no NI attached: without ni nothing runs, and nothing falls back to another transport.
must_fail_without_provider() {
    local label=$1 bin=$2 name=$3 reason=$4 what=$5 n=2 log t0 secs rc=0 attaches why=()
    mkdir -p "$WORK/empty-provider-dir"
    start_daemon "$label" $n isolated
    log="$WORK/$label.log"
    t0=$(date +%s.%N)
    mpirun_ni $n "$RUNDIR" "$WORK/empty-provider-dir" "$log" 120 "$WORK/bin/$bin" || rc=$?
    secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
    attaches=$("$BIN/ni-ctl" --run-dir "$RUNDIR" --json counters |
        "$PY" -c 'import json,sys; print(sum(e["counters"]["attaches"] for e in json.load(sys.stdin)["counters"]))')
    stop_daemon
    [ $rc -ne 0 ] || why+=("it succeeded without the ni provider")
    [ $rc -ne 124 ] || why+=("timed out instead of failing")
    ! grep -q '^PASS ' "$log" || why+=("PASS lines without the ni provider")
    grep -q "$reason" "$log" || why+=("not the expected reason ($reason)")
    [ "$attaches" = 0 ] || why+=("$attaches attach(es) to the NIs")
    if verdict "$name" $n "no provider (empty dir)" "$secs" "$what as required (exit $rc)"; then
        echo "    ==> failed as it must (exit $rc: $reason; no NI attached)"
    fi
}

# ---------------------------------------------------------------------------------------------
MPI4PY_DIR=""
fetch_mpi4py() {
    local ver deb cache sdist tmp
    ver=$("$PY" -c 'import mpi4py; print(mpi4py.__version__)') ||
        die "python3-mpi4py is not importable by $PY"
    deb=$(dpkg-query -W -f='${Version}' python3-mpi4py)
    step "mpi4py $ver (Debian python3-mpi4py $deb): its test suite from the PyPI sdist"
    case "$deb" in "$ver"-* | *:"$ver"-*) ;; *) die "python3-mpi4py $deb is not mpi4py $ver" ;; esac
    cache="$T/mpi-tests"
    sdist="$cache/mpi4py-$ver.tar.gz"
    mkdir -p "$cache"
    if [ -s "$sdist" ]; then
        echo "using the cached $sdist"
    else
        tmp=$(mktemp -d "$cache/download.XXXXXX")
        echo "pip download --no-deps --no-binary :all: mpi4py==$ver"
        if ! timeout 600 "$PY" -m pip download --disable-pip-version-check -q --no-deps \
            --no-binary :all: "mpi4py==$ver" -d "$tmp" >"$WORK/pip.log" 2>&1 ||
            [ ! -s "$tmp/mpi4py-$ver.tar.gz" ]; then
            sed 's/^/    /' "$WORK/pip.log"
            rm -rf "$tmp"
            loud "pip could not download mpi4py==$ver from PyPI (no network? proxy?): the mpi4py step FAILS"
            return 1
        fi
        mv "$tmp/mpi4py-$ver.tar.gz" "$sdist"
        rm -rf "$tmp"
    fi
    mkdir -p "$WORK/mpi4py"
    tar -xzf "$sdist" -C "$WORK/mpi4py"
    MPI4PY_DIR="$WORK/mpi4py/mpi4py-$ver"
    [ -f "$MPI4PY_DIR/test/runtests.py" ] || die "no test/runtests.py in $sdist"
}

# run_mpi4py LABEL RECV_MPROBE(yes|no)
run_mpi4py() {
    local label=$1 mprobe=$2 n=2 log t0 secs rc=0 why=() s0 s1 digest
    step "mpi4py test suite, $n ranks over ni (mpi4py.rc.recv_mprobe=$mprobe); progress per module"
    start_daemon "mpi4py-$label" $n isolated
    log="$WORK/mpi4py-$label.log"
    t0=$(date +%s.%N)
    if [ "$IMPL" = mpich ]; then
        # mpi4py built against MPICH (build_mpi4py_mpich); hydra passes the environment on
        PYTHONPATH="$MPI4PY_MPICH" MPI4PY_RC_RECV_MPROBE=$mprobe mpirun_ni $n "$RUNDIR" "$PROV" \
            "$log" $((3 * TIMEOUT)) "$PY" "$ROOT/tests/mpi/mpi4py_run.py" \
            --testdir "$MPI4PY_DIR/test" --per-test-timeout 120 || rc=$?
    else
        MPI4PY_RC_RECV_MPROBE=$mprobe mpirun_ni $n "$RUNDIR" "$PROV" "$log" $((3 * TIMEOUT)) \
            -x MPI4PY_RC_RECV_MPROBE "$PY" "$ROOT/tests/mpi/mpi4py_run.py" \
            --testdir "$MPI4PY_DIR/test" --per-test-timeout 120 || rc=$?
    fi
    secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
    # (the ranks' output interleaves: a summary need not start its line)
    s0=$(grep -ao 'MPI4PY-SUMMARY rank=0 .*' "$log" | sed 's/^MPI4PY-SUMMARY rank=0 //' || true)
    s1=$(grep -ao 'MPI4PY-SUMMARY rank=1 .*' "$log" || true)
    [ $rc -eq 0 ] || why+=("exit status $rc")
    [ -n "$s0" ] && [ -n "$s1" ] || why+=("no summary from every rank (a hang or a crash: see the log)")
    ! grep -aq 'FAIL mpi4py' "$log" || why+=("$(grep -ac 'FAIL mpi4py' "$log") failing test report(s)")
    if grep -aq '^Timeout (' "$log"; then
        why+=("a test hung: $(grep -a -A1 '^Timeout (' "$log" | grep -ao 'File "[^"]*", line [0-9]* in [A-Za-z_0-9]*' | head -1)")
    fi
    counters_verdict "$RUNDIR" $n 1 isolated
    stop_daemon
    local name="mpi4py $label"
    [ "$IMPL" = ompi ] || name="$IMPL mpi4py $label"
    verdict "$name" $n "window (--direct isolated)" "$secs" "${s0% seconds=*}" "${s0% seconds=*}" || true
}

# ---------------------------------------------------------------------------------------------
# MPICH: PyPI's `mpich` wheel (MPICH's own binary build: ch4 with the ucx and ofi netmods,
# hydra, and an embedded libfabric 2.5.1 that loads providers from FI_PROVIDER_PATH).
MPICH_VERSION=5.0.2
MPICH=""
fetch_mpich() {
    local cache="$T/mpi-tests" dir tmp whl
    dir="$cache/mpich-$MPICH_VERSION"
    step "MPICH $MPICH_VERSION (ch4:ofi) from PyPI's mpich wheel"
    mkdir -p "$cache"
    if [ -x "$dir/bin/mpiexec" ]; then
        echo "using the cached $dir"
    else
        tmp=$(mktemp -d "$cache/download.XXXXXX")
        echo "pip download --no-deps --only-binary :all: mpich==$MPICH_VERSION"
        if ! timeout 600 "$PY" -m pip download --disable-pip-version-check -q --no-deps \
            --only-binary :all: "mpich==$MPICH_VERSION" -d "$tmp" >"$WORK/pip-mpich.log" 2>&1; then
            sed 's/^/    /' "$WORK/pip-mpich.log"
            rm -rf "$tmp"
            loud "pip could not download mpich==$MPICH_VERSION from PyPI: the MPICH step FAILS"
            return 1
        fi
        whl=$(ls "$tmp"/mpich-"$MPICH_VERSION"-*.whl)
        # A wheel is a zip; its files keep their Unix modes in the external attributes.
        "$PY" - "$whl" "$tmp/x" <<'PYEOF'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        p = z.extract(i, sys.argv[2])
        mode = i.external_attr >> 16
        if mode:
            os.chmod(p, mode & 0o777)
PYEOF
        rm -rf "$dir"
        mv "$tmp/x/mpich-$MPICH_VERSION.data/data" "$dir"
        rm -rf "$tmp"
    fi
    "$dir/bin/mpichversion" | sed -n '1p;/Device/p' | sed 's/^/    /'
    grep -q 'Device:.*ofi' <<<"$("$dir/bin/mpichversion")" || { loud "$dir has no ch4:ofi netmod"; return 1; }
    MPICH="$dir"
}

# mpi4py (the version Debian's is, from the sdist fetch_mpi4py unpacked) built against MPICH,
# once, into $CARGO_TARGET_DIR/mpi-tests/; sets MPI4PY_MPICH to the directory for PYTHONPATH.
MPI4PY_MPICH=""
build_mpi4py_mpich() {
    local ver dir
    ver=$(basename "$MPI4PY_DIR")
    dir="$T/mpi-tests/$ver-mpich-$MPICH_VERSION"
    step "$ver built against MPICH $MPICH_VERSION (its mpicc)"
    if ls "$dir"/src/mpi4py/MPI.cpython-*.so >/dev/null 2>&1; then
        echo "using the cached $dir"
    else
        rm -rf "$dir"
        cp -a "$MPI4PY_DIR" "$dir"
        if ! (cd "$dir" && MPICC="$MPICH/bin/mpicc" timeout 900 "$PY" setup.py -q build_ext --inplace \
            >"$WORK/mpi4py-mpich-build.log" 2>&1); then
            tail -20 "$WORK/mpi4py-mpich-build.log" | sed 's/^/    /'
            rm -rf "$dir"
            loud "building mpi4py against MPICH failed"
            return 1
        fi
    fi
    # (not `ldd | grep -q`: under pipefail, grep leaving at its first match can kill ldd
    # with SIGPIPE and fail the pipeline; CI saw it)
    local linked
    linked=$(ldd "$dir"/src/mpi4py/MPI.cpython-*.so)
    grep -q "$MPICH/lib/libmpi" <<<"$linked" ||
        { loud "$dir's mpi4py is not linked to MPICH's libmpi"; return 1; }
    MPI4PY_MPICH="$dir/src"
}

# MPICH's own report of its capability set must name provider ni; without libni-fi.so in
# FI_PROVIDER_PATH, MPI_Init must fail (no fallback to sockets/tcp).
prove_mpich_path() {
    local n=2 label=mpich-verbose log t0 secs rc=0 why=() k
    step "path: MPICH ch4:ofi reports provider ni (MPIR_CVAR_CH4_OFI_CAPABILITY_SETS_DEBUG)"
    start_daemon "$label" $n isolated
    log="$WORK/$label.log"
    t0=$(date +%s.%N)
    MPIR_CVAR_CH4_OFI_CAPABILITY_SETS_DEBUG=1 mpirun_ni $n "$RUNDIR" "$PROV" "$log" "$TIMEOUT" \
        "$WORK/bin/mpich-coll" --only comms >/dev/null || rc=$?
    secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
    grep -E 'libfabric provider:|MPIDI_OFI_ENABLE_(TAGGED|RMA|AM):' "$log" | sed 's/^/    /' || true
    [ $rc -eq 0 ] || why+=("exit status $rc")
    grep -q '^libfabric provider: ni - ni' "$log" || why+=("MPICH's capability report does not name provider ni")
    counters_verdict "$RUNDIR" $n 1 isolated
    stop_daemon
    verdict "mpich coll --only comms" $n "capability report" "$secs" "ch4:ofi on provider ni" || true

    step "path: MPICH with FI_PROVIDER_PATH without libni-fi.so must FAIL in MPI_Init"
    must_fail_without_provider mpich-noprov mpich-p2p "mpich p2p" 'OFI call getinfo failed' \
        "MPI_Init failed"
}

# =============================================================================================
install_packages
for c in mpirun mpicc bc timeout "$PY"; do
    command -v "$c" >/dev/null || die "$c not found"
done

step "binaries from $T/release (built already: this script does not run cargo)"
[ -d "$T" ] || die "$T does not exist: build first (cargo build --release)"
T=$(cd "$T" && pwd)
BIN="$T/release"
for f in ni-device ni-ctl libni_fi.so; do
    [ -e "$BIN/$f" ] || die "$BIN/$f is missing: build first (cargo build --release)"
done
ls -l "$BIN/ni-device" "$BIN/ni-ctl" "$BIN/libni_fi.so" | sed 's/^/    /'

WORK=$(mktemp -d -t ni-mpi.XXXXXX)
PROV="$WORK/provider"
mkdir -p "$PROV" "$WORK/bin"
ln -s "$BIN/libni_fi.so" "$PROV/libni-fi.so"
echo "work directory $WORK; FI_PROVIDER_PATH=$PROV (libni-fi.so -> $BIN/libni_fi.so)"
export MPITEST_CHECK_SECS="${MPITEST_CHECK_SECS:-120}"
# the provider's warnings (lines with `:ni:` and `ni: ...`) say why a call failed
export FI_LOG_LEVEL="${FI_LOG_LEVEL:-warn}"

step "compiling tests/mpi/{p2p,coll}.c with mpicc ($(mpicc --showme:version 2>&1 | head -1))"
for p in p2p coll; do
    mpicc -O2 -g -Wall -Wextra -o "$WORK/bin/$p" "tests/mpi/$p.c"
done

read -r -a P2P_ARGS <<<"${NI_MPI_P2P_ARGS:-}"
read -r -a COLL_ARGS <<<"${NI_MPI_COLL_ARGS:-}"
[ -z "${NI_MPI_P2P_ARGS:-}" ] || loud "p2p runs with extra arguments: ${NI_MPI_P2P_ARGS}"
[ -z "${NI_MPI_COLL_ARGS:-}" ] || loud "coll runs with extra arguments: ${NI_MPI_COLL_ARGS}"

prove_path

# Bytes the programs move at least (received, over all NIs): p2p has one 16 MiB message each
# way per pair; coll broadcasts 4 MiB from two roots on WORLD. With extra arguments (a subset
# of the checks) only "some traffic on every NI" is required.
P2P_BYTES=$((32 << 20))
COLL_BYTES=$((8 << 20))
# rma: every rank puts and gets 2 x 3.2 MiB under fences (twice) and more after
RMA_BYTES=$((8 << 20))
[ ${#P2P_ARGS[@]} -eq 0 ] || P2P_BYTES=1
[ ${#COLL_ARGS[@]} -eq 0 ] || COLL_BYTES=1
for cfg in "2 isolated" "2 off" "4 isolated" "3 isolated"; do
    read -r n direct <<<"$cfg"
    run_prog p2p "$n" "$direct" $P2P_BYTES ${P2P_ARGS[@]+"${P2P_ARGS[@]}"}
done
for cfg in "2 isolated" "2 off" "4 isolated" "3 isolated"; do
    read -r n direct <<<"$cfg"
    run_prog coll "$n" "$direct" $COLL_BYTES ${COLL_ARGS[@]+"${COLL_ARGS[@]}"}
done

if [ "${NI_MPI_SKIP_MPI4PY:-0}" = 1 ]; then
    loud "mpi4py test suite SKIPPED because NI_MPI_SKIP_MPI4PY=1"
    record mpi4py 2 - SKIP 0 "NI_MPI_SKIP_MPI4PY=1"
elif fetch_mpi4py; then
    run_mpi4py default yes
    run_mpi4py no-mprobe no
else
    FAILED=1
    record mpi4py 2 - FAIL 0 "could not fetch the mpi4py sdist from PyPI"
fi

if [ "${NI_MPI_SKIP_MPICH:-0}" = 1 ]; then
    loud "MPICH SKIPPED because NI_MPI_SKIP_MPICH=1"
    record mpich - - SKIP 0 "NI_MPI_SKIP_MPICH=1"
elif fetch_mpich; then
    step "compiling tests/mpi/{p2p,coll}.c with MPICH's mpicc"
    for p in p2p coll rma; do
        "$MPICH/bin/mpicc" -O2 -g -Wall -Wextra -Wno-unused-function -o "$WORK/bin/mpich-$p" "tests/mpi/$p.c"
    done
    IMPL=mpich
    prove_mpich_path
    for cfg in "2 isolated" "2 off" "4 isolated" "3 isolated"; do
        read -r n direct <<<"$cfg"
        run_prog p2p "$n" "$direct" $P2P_BYTES ${P2P_ARGS[@]+"${P2P_ARGS[@]}"}
        run_prog coll "$n" "$direct" $COLL_BYTES ${COLL_ARGS[@]+"${COLL_ARGS[@]}"}
        # one-sided: MPI_Put/MPI_Get become fi_write/fi_read, MLINK WRITE/READ at the NIs
        run_prog rma "$n" "$direct" $RMA_BYTES
    done
    if [ "${NI_MPI_SKIP_MPI4PY:-0}" = 1 ]; then
        record "mpich mpi4py" 2 - SKIP 0 "NI_MPI_SKIP_MPI4PY=1"
    elif [ -n "$MPI4PY_DIR" ] && build_mpi4py_mpich; then
        # One pass: the recv_mprobe exclusions concern Open MPI only.
        run_mpi4py default yes
    else
        FAILED=1
        record "mpich mpi4py" 2 - FAIL 0 "no mpi4py built against MPICH"
    fi
    IMPL=ompi
else
    FAILED=1
    record mpich - - FAIL 0 "could not fetch MPICH from PyPI"
fi

if [ $FAILED -ne 0 ]; then
    step "MPI tests FAILED (see the table and the logs)"
    exit 1
fi
step "MPI tests passed"
