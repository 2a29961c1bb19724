#!/usr/bin/env bash
# VM test (issue 16): a planned restart of ni-device under two running guests. The guests run
# a checked exchange over VFIO round after round (ping-pongs of 8 B to 1 MiB, an allreduce, a
# barrier: ni-vm-rank soak) while the host restarts the daemon four times, twice with
# `ni-ctl daemon restart` and twice with SIGHUP. Nothing may fail in the guests: the same
# QEMU connections, guest memory maps, interrupts, SRAM and window are handed to the new
# process (device/abi/handover.md). Afterwards the daemon is the same pid, says 4 restarts,
# its counters match what the ranks counted, and neither it nor QEMU logged an error.
# Stock QEMU (no device_del involved).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
run_dir="$(mktemp -d "${TMPDIR:-/tmp}/ni-planned.XXXXXX")"
vm_daemon "$run_dir" 2 "$run_dir/daemon.log"
dpid=$DAEMON_PID
cleanup() {
    kill "$dpid" 2>/dev/null || true
    sleep 0.3
    rm -rf "$run_dir"
}
trap cleanup EXIT
restarts="set -e
ctl() { '$NI_CTL' --run-dir '$run_dir' \"\$@\"; }
for i in 1 2 3 4; do
    sleep 4
    if [ \$((i % 2)) = 1 ]; then
        ctl daemon restart
    else
        kill -HUP $dpid
        for t in \$(seq 100); do
            ctl --json status | grep -q \"\\\"restarts\\\": *\$i\" && break
            sleep 0.1
        done
        echo \"SIGHUP: \$(ctl status | grep restarts)\"
    fi
done
echo 'four restarts done'"
vm_run --run-dir "$run_dir" --env NI_VM_SOAK_SECS=40 \
    --on '^soaking$' "$restarts" \
    --after "\"$NI_CTL\" --run-dir '$run_dir' --json counters >\"\$NI_LOG_DIR/counters.json\"; \"$NI_CTL\" --run-dir '$run_dir' --json status >\"\$NI_LOG_DIR/status.json\"" \
    "$GUEST_BIN/ni-vm-rank" soak
cp "$run_dir/daemon.log" "$LOG/daemon.log" 2>/dev/null || true

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for g in 0 1; do
    expect "guest $g: the exchange ran through the restarts, every payload checked" \
        has "^\[guest$g ni$g\] soak: [0-9]+ rounds checked in [0-9.]+ s$"
    expect "guest $g: ok soak" has "^\[guest$g ni$g\] ok soak$"
done
expect "ni-ctl daemon restart carried both guests over" \
    has '^\[hook 0\] restarted: ni-device .* 2 client\(s\) carried over, paused [0-9.]+ ms, restart 3$'
expect "SIGHUP restarted it too" has '^\[hook 0\] SIGHUP: restarts +4 '
expect "the hook saw all four" has '^\[hook 0\] four restarts done$'
status_ok() {
    python3 - "$LOG/status.json" "$dpid" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"pid {s['pid']} (started as {sys.argv[2]}), restarts {s['restarts']}, "
      f"last pause {s.get('last_restart_pause_ms')} ms, attached {s['attached']}")
sys.exit(0 if s["pid"] == int(sys.argv[2]) and s["restarts"] == 4 else 1)
PY
}
expect "the same daemon process, four restarts" status_ok
expect "the daemon's counters match what the ranks counted across the restarts" check_counters
expect "each restart completed in the daemon" \
    test "$(grep -c 'planned restart done' "$run_dir/daemon.log")" -eq 4
expect "the daemon logged no WARN or ERROR" sh -c "! grep -aE ' (WARN|ERROR) ' '$run_dir/daemon.log'"
# QEMU's log may only hold the refusals of its descriptor-less DMA maps of ROM and BAR ranges
# (vfio-user command 2), which it sends at boot by design: nothing about a broken
# connection, a timeout or a reconnect.
for g in 0 1; do
    expect "guest $g's QEMU logged nothing but the boot-time map refusals" \
        sh -c "! grep -avE 'request:? command 2 error Invalid argument' '$LOG/guest$g.log.qemu'"
done
vm_finish
