#!/usr/bin/env bash
# VM test: collectives done in the network across a partition of two QEMU guests (libni over
# VFIO, NIs 0 and 1) and a host process (vfio-user socket, NI 2): 20 barriers, then allreduce
# of a 100003-element f64 vector (sum), i64 MIN and u64 XOR in place, every result checked at
# every rank.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
vm_run -n 2 --host 1 "$GUEST_BIN/ni-vm-rank" collectives

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for r in "guest0 ni0" "guest1 ni1" "host ni2"; do
    expect "$r: 20 barriers" has "^\[$r\] collectives: 20 barriers in "
    expect "$r: allreduce f64 sum / i64 min / u64 xor checked over 3 ranks" \
        has "^\[$r\] collectives: allreduce f64 sum \(100003 elements, .*\), i64 min, u64 xor checked over 3 ranks$"
    expect "$r: ok collectives" has "^\[$r\] ok collectives$"
done
vm_finish
