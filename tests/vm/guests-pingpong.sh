#!/usr/bin/env bash
# VM test: two QEMU guests, each with one NI, run libni over VFIO (kernel bypass inside the
# guest) and ping-pong every size from 0 B to 1 MiB, checking the payload both ways.
# While they run, `ni-ctl nodes --json` on the host must show both NIs attached to the
# guests' QEMU processes; after, `ni-ctl counters --json` must match the traffic each rank
# counted (receives, bytes received, bytes sent) with no DMA fault.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
# The ranks stay attached 3 s after their traffic: the host looks at the NIs then.
vm_run --env NI_VM_LINGER_MS=3000 \
    --on '^stats node=' "\"$NI_CTL\" --json nodes >\"\$NI_LOG_DIR/nodes.json\"" \
    --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$GUEST_BIN/ni-vm-rank" pingpong

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for g in 0 1; do
    expect "guest $g attached over VFIO as rank $g" has "^\[guest$g ni$g\] attached: rank $g of 2 on NI $g .*\(VFIO\)$"
    expect "guest $g: pingpong 0 B..1 MiB checked" has "^\[guest$g ni$g\] pingpong: [0-9]+ sizes 0..=1 MiB checked both ways"
    expect "guest $g: ok pingpong" has "^\[guest$g ni$g\] ok pingpong$"
done

# The NIs were attached to the two QEMU processes while the guests ran (the client pid is
# compared when the daemon reports one).
nodes_ok() {
    python3 - "$LOG/nodes.json" "$(cat "$LOG/guest0.qemu-pid")" "$(cat "$LOG/guest1.qemu-pid")" <<'PY'
import json, sys
nodes = {n["node"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
ok = True
for i, pid in enumerate(sys.argv[2:]):
    n = nodes.get(i, {})
    print(f"NI {i}: state={n.get('state')} client_pid={n.get('client_pid')} (QEMU {pid}) "
          f"attaches={n.get('attaches')} dma_regions={n.get('dma_regions')} dma_bytes={n.get('dma_bytes')}")
    if n.get("state") != "attached" or n.get("attaches") != 1 or not n.get("dma_regions"):
        ok = False
    if n.get("client_pid") is not None and n.get("client_pid") != int(pid):
        ok = False
sys.exit(0 if ok else 1)
PY
}
expect "ni-ctl nodes --json: NI 0 and 1 attached (the guests' QEMUs), with DMA mappings" nodes_ok
expect "ni-ctl counters --json match what the ranks counted" check_counters
vm_finish
