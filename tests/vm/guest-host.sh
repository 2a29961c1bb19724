#!/usr/bin/env bash
# VM test: one partition of a QEMU guest (libni over VFIO, NI 0) and a host process (libni
# over the vfio-user socket, NI 1): ping-pong 0 B..1 MiB with payload checks both ways, and
# the daemon's counters match what both ranks counted.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
vm_run -n 1 --host 1 \
    --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$GUEST_BIN/ni-vm-rank" pingpong

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
expect "the guest is rank 0 over VFIO" has '^\[guest0 ni0\] attached: rank 0 of 2 on NI 0 .*\(VFIO\)$'
expect "the host process is rank 1 over the vfio-user socket" \
    has '^\[host ni1\] attached: rank 1 of 2 on NI 1 .*\(vfio-user socket\)$'
expect "guest: ok pingpong" has '^\[guest0 ni0\] ok pingpong$'
expect "host: ok pingpong" has '^\[host ni1\] ok pingpong$'
expect "counters match what the ranks counted" check_counters
vm_finish
