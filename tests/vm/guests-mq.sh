#!/usr/bin/env bash
# VM test: T3E message queues between two QEMU guests over VFIO: rank 1 creates a queue
# (Limit 5, Threshold 4), rank 0 fills it, the fifth message is rejected (FULL_SR), the
# Threshold hit latches IR_STATUS/MSG_ADDR and raises MSI-X vector MQ (through the guest's
# vfio-pci eventfd), software resets the queue by swapping the MQCW, one more message lands.
# The daemon's counters must agree (5 stored, 1 rejected, 1 threshold hit at NI 1).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
vm_run --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$GUEST_BIN/ni-vm-rank" mq

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
expect "guest 1: queue filled, rejection, Threshold MSI-X, reset by swap" \
    has '^\[guest1 ni1\] mq: 4 stored, 1 rejected at Limit, Threshold MSI-X, reset by swap, 1 more$'
for g in 0 1; do
    expect "guest $g: ok mq" has "^\[guest$g ni$g\] ok mq$"
done
mq_counters() {
    python3 - "$LOG/counters.json" <<'PY'
import json, sys
c = {n["node"]: n["counters"] for n in json.load(open(sys.argv[1]))["counters"]}
want = {0: {"mq_sends": 6}, 1: {"mq_stored": 5, "mq_rejected": 1, "mq_threshold": 1}}
ok = True
for n, kv in want.items():
    for k, v in kv.items():
        print(f"NI {n}: {k} = {c[n].get(k)} (want {v})")
        ok &= c[n].get(k) == v
sys.exit(0 if ok else 1)
PY
}
expect "counters: 6 MQ sends from NI 0; 5 stored, 1 rejected, 1 threshold at NI 1" mq_counters
expect "counters match what the ranks counted" check_counters
vm_finish
