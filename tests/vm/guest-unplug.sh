#!/usr/bin/env bash
# VM test: hot-unplug and re-plug of a guest's NI under traffic (issue 16).
# A guest (NI 1, rank 1) echoes a host process's (NI 0, rank 0) checked messages. Once the
# echo runs, QMP device_del takes the NI away: vfio-pci relays the unplug to libni (the
# device request), the guest's receive fails with `unplugged` (NI_EUNPLUGGED), libni lets go
# of the function, the guest's kernel gives it back, QEMU drops its vfio-user connection and
# the host rank gets `peer down`. Then QMP device_add plugs the same socket back in; the guest
# process attaches again and the two ranks do 20 checked round trips.
# QEMU 10.1-11.1 abort on device_del of any vfio-user-pci device with MSI-X
# (qemu-patches/patches/0001-vfio-user-pci-unplug-pba.patch says why): the run uses the patched
# binary setup.sh makes (NI_QEMU_VARIANT=patched), and a second, idle guest on the stock
# binary shows the difference.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
QMP="$NI_QEMU_DIR/qmp.py"
# The hook (run on the host when the guest's echo runs): unplug, check that QEMU has no NI
# left, plug it back, check that it is there again.
hook="set -e
python3 '$QMP' --timeout 120 \"\$NI_LOG_DIR/guest0.qmp\" unplug ni0
python3 '$QMP' \"\$NI_LOG_DIR/guest0.qmp\" query >\"\$NI_LOG_DIR/query-unplugged\"
python3 '$QMP' \"\$NI_LOG_DIR/guest0.qmp\" plug ni0 ni_rp0 \"\$NI_RUN_DIR/ni1.sock\"
python3 '$QMP' \"\$NI_LOG_DIR/guest0.qmp\" query"
NI_QEMU_VARIANT=patched vm_run -n 1 --ni 1 --host 1 --host-ni 0 \
    --on '^victim: ready$' "$hook" \
    --after "\"$NI_CTL\" --json nodes >\"\$NI_LOG_DIR/nodes.json\"" \
    "$GUEST_BIN/ni-vm-rank" unplug

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
expect "the guest echoed before the unplug" has '^\[guest0 ni1\] victim: ready$'
expect "QMP device_del completed (DEVICE_DELETED)" has '^\[hook 0\] unplugged ni0 in [0-9.]+ s$'
expect "QEMU showed no NI while unplugged" test ! -s "$LOG/query-unplugged"
expect "QMP device_add plugged the NI back" \
    has "^\[hook 0\] plugged ni0 \(.*/ni1\.sock\) into ni_rp0$"
expect "QEMU showed the NI again" has '^\[hook 0\] ni0 bus [0-9]+ slot 0 1234:4e49$'
expect "the guest's receive failed with unplugged (no hang)" \
    has '^\[guest0 ni1\] victim: unplugged after [0-9]+ round trips: the NI .* was unplugged'
expect "the host rank got peer down within the bound" \
    has '^\[host ni0\] survivor: [0-9]+ round trips, then .*peer down.* [0-9]+ ms after the last one$'
expect "the guest process attached again to NI 1" \
    has '^\[guest0 ni1\] attached again to NI 1 as rank 1 after [0-9.]+ s$'
expect "20 checked round trips after the re-plug" \
    has '^\[guest0 ni1\] replacement: 20 round trips done$'
expect "host: 20 round trips after the re-plug" \
    has '^\[host ni0\] survivor: 20 round trips with the replacement guest$'
expect "guest: ok unplug" has '^\[guest0 ni1\] ok unplug$'
# NI 1 saw two vfio-user clients: the guest's QEMU before the unplug and after the re-plug.
expect "NI 1 was attached twice (before the unplug, after the re-plug)" \
    node_attaches "$LOG/nodes.json" 1 2
expect "the daemon logged no WARN or ERROR" \
    sh -c "! grep -aE ' (WARN|ERROR) ' '$LOG/daemon.log'"

# Stock QEMU: the same device_del aborts it (the reason for the patch). Idle guest, no libni.
stock_log="$LOG/stock"
mkdir -p "$stock_log"
vm_daemon "$stock_log/run" 1 "$stock_log/daemon.log"
dpid=$DAEMON_PID
NI_QEMU_VARIANT=stock "$NI_QEMU_DIR/launch.sh" -q --socket "$stock_log/run/ni0.sock" \
    --qmp "$stock_log/qmp.sock" --log "$stock_log/guest.log" --timeout 120 \
    --cmd 'echo NI-UP; sleep 100' >/dev/null 2>&1 &
lpid=$!
for _ in $(seq 600); do grep -q '^NI-UP' "$stock_log/guest.log" 2>/dev/null && break; sleep 0.2; done
python3 "$QMP" --timeout 30 "$stock_log/qmp.sock" unplug ni0 >"$stock_log/qmp.out" 2>&1 || true
wait "$lpid" || true
kill "$dpid" 2>/dev/null || true
wait "$dpid" 2>/dev/null || true
expect "stock QEMU aborts on device_del (the assertion the patch removes)" \
    grep -q "memory_region_del_subregion: Assertion .subregion->container == mr. failed" \
    "$stock_log/guest.log.qemu"
vm_finish
