#!/usr/bin/env bash
# VM test: boots one QEMU guest with one NI attached over vfio-user and checks what the guest's
# Linux PCI core and lspci make of it, then binds it to vfio-pci.
# Asserts: device [1234:4e49] with class [0280]; capabilities Power Management, MSI-X and
# Express (v2) Endpoint decoded, no "<?>", "!!!" or "Unknown"; Region 0 [size=16M],
# Region 2 [size=1M], Region 3 [size=2M] 32-bit, Region 4 [size=128M]; driver vfio-pci after driver_override + drivers_probe.
# Environment: NI_DEVICE (daemon binary, default target/release/ni-device, built if missing),
# NI_CACHE (see qemu-patches/common.sh), NI_VM_TIMEOUT (guest timeout, default 300 s).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../qemu-patches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../qemu-patches/common.sh"

name="vm/lspci"
"$NI_QEMU_DIR/setup.sh"

daemon="${NI_DEVICE:-$NI_REPO/target/release/ni-device}"
if [[ ! -x $daemon ]]; then
    [[ -z ${NI_DEVICE:-} ]] || ni_die "NI_DEVICE=$daemon is not executable"
    ni_log "building ni-device (cargo build --release -p ni-device)"
    (cd "$NI_REPO" && cargo build --release -p ni-device) || ni_die "cargo build of ni-device failed"
fi

mkdir -p "$NI_CACHE/logs"
stamp="$(date +%Y%m%d-%H%M%S)-$$"
console="$NI_CACHE/logs/lspci-$stamp.log"
daemon_log="$NI_CACHE/logs/lspci-$stamp.daemon.log"
run_dir="$(mktemp -d "${TMPDIR:-/tmp}/ni-vm-lspci.XXXXXX")"
daemon_pid=""
cleanup() {
    if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$daemon_pid" 2>/dev/null; then
            ni_log "daemon did not exit on SIGTERM within 5 s; killing it"
            kill -KILL "$daemon_pid" 2>/dev/null || true
        fi
        wait "$daemon_pid" 2>/dev/null || true
    fi
    rm -rf "$run_dir"
}
trap cleanup EXIT

fail() {
    {
        echo "FAIL $name: $*"
        echo "===== guest console ($console) ====="
        [[ -f $console ]] && tr -d '\r' <"$console"
        echo "===== QEMU output ($console.qemu) ====="
        [[ -f $console.qemu ]] && cat "$console.qemu"
        echo "===== daemon log ($daemon_log) ====="
        [[ -f $daemon_log ]] && cat "$daemon_log"
        echo "====="
        echo "0 passed, 1 failed"
    } >&2
    exit 1
}

NO_COLOR=1 "$daemon" --nodes 1 --run-dir "$run_dir" >"$daemon_log" 2>&1 &
daemon_pid=$!
sock="$run_dir/ni0.sock"
for _ in $(seq 300); do
    [[ -S $sock ]] && break
    kill -0 "$daemon_pid" 2>/dev/null || fail "daemon exited before creating $sock"
    sleep 0.1
done
[[ -S $sock ]] || fail "daemon did not create $sock within 30 s"

guest_script="$run_dir/guest.sh"
cat >"$guest_script" <<'GUEST'
D=""
for d in /sys/bus/pci/devices/*; do
    if [ "$(cat "$d/vendor")" = 0x1234 ] && [ "$(cat "$d/device")" = 0x4e49 ]; then
        D="${d##*/}"
        break
    fi
done
echo "=== lspci -nn"
lspci -nn
if [ -z "$D" ]; then
    echo "NI-TEST: no 1234:4e49 device"
    exit 10
fi
echo "NI-TEST: device $D"
echo "=== NI-LSPCI-BEGIN"
lspci -vvv -nn -s "$D"
echo "=== NI-LSPCI-END"
echo vfio-pci >"/sys/bus/pci/devices/$D/driver_override" || exit 11
echo "$D" >/sys/bus/pci/drivers_probe || exit 12
drv="$(readlink "/sys/bus/pci/devices/$D/driver")"
echo "NI-TEST: driver $drv"
echo "NI-TEST: iommu_group $(readlink "/sys/bus/pci/devices/$D/iommu_group")"
ls -l /dev/vfio
case "$drv" in */vfio-pci) ;; *) exit 13 ;; esac
lspci -k -s "$D"
GUEST

grc=0
"$NI_QEMU_DIR/launch.sh" --quiet --socket "$sock" --script "$guest_script" --log "$console" \
    --timeout "${NI_VM_TIMEOUT:-300}" 2>/dev/null || grc=$?
out="$(tr -d '\r' <"$console")"
((grc == 0)) || fail "guest script exited with $grc (124 = timeout, 125 = no exit marker; 10 = no NI, 11-13 = vfio-pci bind)"
kill -0 "$daemon_pid" 2>/dev/null || fail "daemon died while the guest ran"

ni="$(sed -n '/^=== NI-LSPCI-BEGIN$/,/^=== NI-LSPCI-END$/p' <<<"$out" | sed '1d;$d')"
[[ -n $ni ]] || fail "no lspci -vvv output for the NI"

errors=()
check() { # check DESCRIPTION EXTENDED-REGEX: the NI's lspci output must match
    grep -qE -- "$2" <<<"$ni" || errors+=("$1 (no line matching /$2/)")
}
check "device 1234:4e49 with class 0280" '^[0-9a-f:.]+ .*\[0280\]: .*\[1234:4e49\]'
check "Power Management capability" '^\s+Capabilities: \[[0-9a-f]+\] Power Management version [0-9]'
check "MSI-X capability" '^\s+Capabilities: \[[0-9a-f]+\] MSI-X: Enable[+-] Count=[0-9]+'
check "PCI Express v2 endpoint capability" '^\s+Capabilities: \[[0-9a-f]+\] Express \(v2\) Endpoint'
check "Region 0 of 16M" '^\s+Region 0: Memory at [0-9a-f]+ .*\[size=16M\]'
check "Region 2 of 1M" '^\s+Region 2: Memory at [0-9a-f]+ .*\[size=1M\]'
check "Region 3 of 2M (32-bit: the own zone of a shared window)" '^\s+Region 3: Memory at [0-9a-f]+ \(32-bit, non-prefetchable\) \[size=2M\]'
check "Region 4 of 128M" '^\s+Region 4: Memory at [0-9a-f]+ \(64-bit, non-prefetchable\) \[size=128M\]'
bad="$(grep -nE '<\?>|!!!|Unknown|<access denied>|Capabilities: \[[0-9a-f]+\] #[0-9a-f]{2}|Extended Capability ID' <<<"$ni" || true)"
[[ -z $bad ]] || errors+=("lspci reported problems: $bad")
grep -qE '^NI-TEST: driver .*/vfio-pci$' <<<"$out" || errors+=("driver is not vfio-pci")
grep -qE '^\s+Kernel driver in use: vfio-pci$' <<<"$out" || errors+=("lspci -k does not show vfio-pci in use")

if ((${#errors[@]})); then
    printf 'NI lspci -vvv output:\n%s\n' "$ni" >&2
    fail "$(printf '\n  - %s' "${errors[@]}")"
fi
printf '%s\n' "$ni"
echo "PASS $name (console: $console)"
echo "1 passed, 0 failed"
