#!/usr/bin/env bash
# VM test: libni's VFIO attach says what went wrong, inside real guests.
#   - no vIOMMU (intel_iommu=off): "no IOMMU group" with what to add to QEMU and the cmdline
#   - NI_PCI naming no device / a device that is not an NI
#   - vfio-pci not loaded (rmmod vfio_pci): says to load it
#   - the NI already in use by another process of the guest: says so
#   - a guest without any NI: NI_SOCKET is not set (no NI function either)
# Each failing attach must exit non-zero with the message; a good attach after it must work.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
script="$(mktemp "${TMPDIR:-/tmp}/ni-errors.XXXXXX.sh")"
trap 'rm -f "$script"' EXIT
cat >"$script" <<'GUEST'
#!/bin/sh
# Runs in the guest: each case prints "case NAME rc=N" after the attach's own messages.
B=/usr/local/bin/ni-vm-rank
try() { name="$1"; shift; "$@" 2>&1; echo "case $name rc=$?"; }
if [ "$1" = noiommu ]; then
    try noiommu $B attach
    exit 0
fi
try nodev env NI_PCI=0000:0f:1f.7 $B attach
try notni env NI_PCI=0000:00:00.0 $B attach
rmmod vfio_pci
try nodriver $B attach
insmod "/lib/modules/$(uname -r)/ni/vfio-pci.ko"
NI_VM_LINGER_MS=8000 $B attach >/tmp/first.out 2>&1 &
sleep 4
try busy $B attach
wait
cat /tmp/first.out
try good $B attach
GUEST
chmod +x "$script"

# A guest whose NI sits behind no IOMMU.
vm_run -n 1 --append intel_iommu=off --add "$GUEST_BIN/ni-vm-rank" "$script" noiommu
out1="$OUT" rc1=$RC
LOG="$LOG-2"
vm_run -n 1 --add "$GUEST_BIN/ni-vm-rank" "$script"
OUT="$out1
$OUT"
expect "guest runs exited 0 (exits $rc1, $RC)" test "$rc1" -eq 0 -a "$RC" -eq 0
expect "no vIOMMU: the error names the missing IOMMU group and the fix" \
    has 'cannot attach to the NI at PCI 0000:[0-9a-f:.]+: it has no IOMMU group: .*intel-iommu.*intel_iommu=on'
expect "no vIOMMU: attach fails" has '^\[guest0 ni0\] case noiommu rc=101$'
expect "NI_PCI naming no device: says so and lists the NIs found" \
    has 'PCI 0000:0f:1f.7: no such PCI device in /sys/bus/pci/devices; NI functions here: 0000:'
expect "NI_PCI naming a device that is not an NI: says so" has 'PCI 0000:00:00.0: not an NI'
expect "vfio-pci not loaded: says to load it" has 'vfio-pci driver is not loaded \(modprobe vfio-pci\)'
expect "NI in use by another process: says so" has 'another process of this machine using the NI'
for c in nodev notni nodriver busy; do
    expect "case $c: attach fails" has "^\[guest0 ni0\] case $c rc=101$"
done
expect "the process holding the NI was unaffected" has '^\[guest0 ni0\] ok attach$'
expect "a good attach after all that works" has '^\[guest0 ni0\] case good rc=0$'
vm_finish
