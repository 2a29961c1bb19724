#!/usr/bin/env bash
# VM test: hot-plug of NIs into a running guest (issue 16). The guest boots with no NI and two
# empty PCIe root ports: ni_hp0 with mem-reserve=256M, ni_hp1 with the firmware's default window.
# QMP device_add (qmp.py plug) puts NI 0 behind the first and NI 1 behind the second; the guest
# waits for both functions to appear, then attaches to each with libni (NI_PCI):
# - behind the reserved port the kernel assigns all four BARs and libni attaches;
# - behind the default port BAR0 (16 MiB) and BAR4 (64 MiB) stay unassigned ("no space"), and
#   libni's error names that cause and the fix (mem-reserve), not "not an NI".
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
run="$LOG/run"
vm_daemon "$run" 2 "$LOG/daemon.log"
trap 'kill "$DAEMON_PID" 2>/dev/null || true' EXIT
cat >"$LOG/guest.sh" <<'GUEST'
echo "READY-FOR-PLUG"
for i in $(seq 600); do [ "$(lspci -n -d 1234:4e49 | wc -l)" -ge 2 ] && break; sleep 0.2; done
lspci -D -n -d 1234:4e49 | sed 's/^/found /'
rc=0
for d in $(lspci -D -n -d 1234:4e49 | cut -d' ' -f1); do
    echo "== $d"
    out="$(NI_PCI=$d ni-vm-rank attach 2>&1)" || rc=1
    echo "$out" | grep -E '^(attached|ok attach)|BAR'
done
exit $rc
GUEST
RC=0
NI_QEMU_VARIANT=patched "$NI_QEMU_DIR/launch.sh" --add "$GUEST_BIN/ni-vm-rank" \
    --script "$LOG/guest.sh" --hotplug-port 256M --hotplug-port default \
    --qmp "$LOG/qmp.sock" --log "$LOG/guest0.log" --timeout "${NI_VM_TIMEOUT:-600}" \
    >"$LOG/launch.out" 2>"$LOG/launch.err" &
lpid=$!
for _ in $(seq 1500); do grep -q '^READY-FOR-PLUG' "$LOG/guest0.log" 2>/dev/null && break; sleep 0.2; done
python3 "$NI_QEMU_DIR/qmp.py" "$LOG/qmp.sock" plug ni0 ni_hp0 "$run/ni0.sock" >"$LOG/plug.out" 2>&1 || RC=1
python3 "$NI_QEMU_DIR/qmp.py" "$LOG/qmp.sock" plug ni1 ni_hp1 "$run/ni1.sock" >>"$LOG/plug.out" 2>&1 || RC=1
wait "$lpid" || RC=$?
OUT="$(cat "$LOG/plug.out" "$LOG/launch.out")"
printf '%s\n' "$OUT"

expect "QMP device_add of both NIs" test "$(grep -c '^plugged ni' "$LOG/plug.out")" -eq 2
expect "the guest saw both functions appear" test "$(tr -d '\r' <"$LOG/guest0.log" | grep -c '^found ')" -eq 2
expect "libni attached to the NI behind the reserved port" \
    has '^attached: rank 0 of 2 on NI 0 in .* \(VFIO\)$'
expect "the reserved port's NI: ok attach" has '^ok attach$'
expect "behind the default port libni names the unassigned BAR0 and the fix" \
    has 'BAR0 is not assigned \(0 bytes\).*mem-reserve=256M'
# The guest script exits 1 because the second attach fails, as it must.
expect "the guest ran to its end (exit 1: the second attach failed)" test "$RC" -eq 1
expect "the daemon logged no WARN or ERROR" sh -c "! grep -aE ' (WARN|ERROR) ' '$LOG/daemon.log'"
vm_finish
