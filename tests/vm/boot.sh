#!/usr/bin/env bash
# VM smoke test without any NI: the VM tooling itself (setup, initramfs, launch.sh's exit-status
# contract). Boots a guest and checks the kernel, the VFIO modules, madvise THP, the vIOMMU, and
# that launch.sh returns the guest command's exit status (not QEMU's).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../qemu-patches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../qemu-patches/common.sh"

"$NI_QEMU_DIR/setup.sh"
passed=0 failed=0
pass() { echo "ok - $*"; passed=$((passed + 1)); }
failt() { echo "not ok - $*" >&2; failed=$((failed + 1)); }
expect() { # expect DESCRIPTION COMMAND...: pass if COMMAND succeeds
    local what="$1"
    shift
    if "$@"; then pass "$what"; else failt "$what"; fi
}
has() { grep -q "$@" <<<"$out"; } # grep the last guest output

out="$("$NI_QEMU_DIR/launch.sh" --timeout 180 --cmd '
uname -r
lsmod | cut -d" " -f1
cat /sys/kernel/mm/transparent_hugepage/enabled
ls /sys/class/iommu
test -c /dev/vfio/vfio && echo have-dev-vfio
')" || { failt "guest boot (launch.sh exit $?)"; out=""; }
kver="$(cat "$NI_KERNEL_DIR/version")"
expect "guest runs kernel $kver" has -xF "$kver"
for m in irqbypass vfio vfio_iommu_type1 vfio_pci_core vfio_pci; do
    expect "module $m loaded" has -x "$m"
done
expect "THP is madvise" has -F '[madvise]'
expect "intel-iommu dmar0 present" has -x dmar0
expect "/dev/vfio/vfio present" has -x have-dev-vfio

rc=0
"$NI_QEMU_DIR/launch.sh" --quiet --timeout 180 --cmd 'exit 7' 2>/dev/null || rc=$?
expect "launch.sh returns the guest's exit status (got $rc for 'exit 7')" test "$rc" -eq 7

script="$(mktemp)"
trap 'rm -f "$script"' EXIT
printf 'echo from-script\n/usr/local/bin/%s true && echo added-file-runs\n' "$(basename "$(command -v busybox)")" >"$script"
out="$("$NI_QEMU_DIR/launch.sh" --timeout 180 --script "$script" --add "$(command -v busybox)" 2>/dev/null)" || true
expect "--script runs" has -x from-script
expect "--add puts a file in /usr/local/bin" has -x added-file-runs

echo "$passed passed, $failed failed"
((failed == 0))
