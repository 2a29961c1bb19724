#!/usr/bin/env bash
# VM test (issue 18 item 6): a guest member of a shared partition window cannot write what
# other members own (device/abi/fastpath.md, "One writer per page"). Rank 0, in a guest
# booted with iomem=relaxed, maps its NI's BAR3 (its own zone) and BAR4 (the whole window)
# writable through sysfs, past libni and VFIO; fills its zone with garbage for 5 s, writes
# BAR3's hole, then stores into rank 1's zone through BAR4. QEMU mapped BAR4 read-only (the
# region has no FLAG_WRITE and its descriptor is read-only), so the store cannot land: under
# TCG the VMM faults on it and the attacking guest dies, or the store is dropped. Ranks 1
# and 2, host processes, run checked round trips through the window throughout and must see
# no error; the daemon must live and count the garbage it refused.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
stop="$(mktemp -u "${TMPDIR:-/tmp}/ni-scribble-stop.XXXXXX")"
trap 'rm -f "$stop"' EXIT
vm_run -n 1 --host 2 --append iomem=relaxed --env "NI_VM_STOP_FILE=$stop" \
    --on '^scribbled: [0-9]+ passes' "sleep 3; touch '$stop'" \
    --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$GUEST_BIN/ni-vm-rank" scribble

expect "the guest is rank 0 over VFIO" has '^\[guest0 ni0\] attached: rank 0 of 3 on NI 0 .*\(VFIO\)$'
expect "the attacker filled its own zone through BAR3" has '^\[guest0 ni0\] scribbled: [0-9]+ passes'
if has '^\[guest0 ni0\] a store into rank 1.s zone did not stick$'; then
    expect "the store into rank 1's zone was dropped, and the guest exited 0" \
        has '^run-guests: guest0 ni0: exit 0$'
else
    expect "the store into rank 1's zone killed the attacker's own VMM (no exit marker)" \
        has '^run-guests: guest0 ni0: NO EXIT MARKER'
    expect "... of SIGSEGV (QEMU exit status 139)" grep -q 'QEMU exit status 139' "$LOG/guest0.launch"
fi
expect "host rank 1: checked round trips, no error" has '^\[host ni1\] ok scribble$'
expect "host rank 2: checked round trips, no error" has '^\[host ni2\] ok scribble$'
daemon_lived() { ! has '^run-guests: ni-device: DIED'; }
expect "the daemon lived" daemon_lived
counters_ok() {
    python3 - "$LOG/counters.json" <<'PY'
import json, sys
nis = {n["node"]: n["counters"] for n in json.load(open(sys.argv[1]))["counters"]}
refused = nis[1].get("window_ring_errors", 0) + nis[2].get("window_ring_errors", 0)
sends = nis[1].get("window_sends", 0)
print(f"window_ring_errors on the honest NIs: {refused}; window_sends of rank 1: {sends}")
sys.exit(0 if refused > 0 and sends > 0 else 1)
PY
}
expect "the honest ranks refused the attacker's garbage and kept using the window" counters_ok
vm_finish
