#!/usr/bin/env bash
# VM test: a guest powered off mid-run. Two guests ping-pong; once the survivor (rank 0)
# runs, guest 1's QEMU is killed (SIGKILL: the power cord). The survivor must get `peer down`
# within 10 s of its last good round trip (no hang); then a new guest boots on the freed NI 1,
# attaches, and the two do 20 checked round trips.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
vm_run --poweroff '1:^survivor: running' --replace \
    --after "\"$NI_CTL\" --json nodes >\"\$NI_LOG_DIR/nodes.json\"" \
    "$GUEST_BIN/ni-vm-rank" poweroff

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
expect "guest 1 was powered off" has '^run-guests: guest1 ni1: powered off as asked'
expect "the victim was echoing before the power-off" has '^\[guest1 ni1\] victim: ready$'
expect "the survivor got peer down within the bound" \
    has '^\[guest0 ni0\] survivor: [0-9]+ round trips, then .*peer down.* [0-9]+ ms after the last one$'
expect "a replacement guest attached to the freed NI 1" \
    has '^\[guest2 ni1\] replacement: attached to NI 1$'
expect "replacement: 20 round trips" has '^\[guest2 ni1\] replacement: 20 round trips done$'
expect "survivor: 20 round trips with the replacement" \
    has '^\[guest0 ni0\] survivor: 20 round trips with the replacement guest$'
expect "survivor: ok poweroff" has '^\[guest0 ni0\] ok poweroff$'
expect "replacement: ok poweroff" has '^\[guest2 ni1\] ok poweroff$'
# After the run NI 1 has seen two clients (the killed guest's QEMU and the replacement's).
expect "NI 1 was attached twice (the powered-off guest, then its replacement)" \
    node_attaches "$LOG/nodes.json" 1 2
vm_finish
