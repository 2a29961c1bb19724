#!/usr/bin/env bash
# Boots one QEMU guest (TCG, q35 + intel-iommu) with zero or more NIs attached over vfio-user,
# runs one shell command or script in it, and exits with that command's exit status as parsed
# from the guest console (never QEMU's own exit status, which is 0 even if the device died).
#
# Usage: launch.sh [options]
#   --socket PATH     attach a vfio-user-pci device served at PATH (repeatable; order = PCI order)
#   --cmd CMD         guest shell command (passed base64-encoded as ni.cmd= on the kernel cmdline)
#   --script FILE     guest shell script (appended to the initramfs as /ni/cmd.sh)
#   --add FILE        also put FILE in the guest's /usr/local/bin (repeatable; static binaries)
#   --initramfs FILE  base initramfs (default $NI_CACHE/initramfs.cpio.gz, built if missing)
#   --overlay FILE    a cpio (gzip'd or not) unpacked over the base, e.g. mpi-overlay.sh's
#                     (repeatable, in order)
#   --log FILE        console log (default $NI_CACHE/logs/guest-<time>-<pid>.log)
#   --mem MIB         guest RAM, memfd-backed with share=on (default 512)
#   --smp N           vCPUs (default 1)
#   --timeout SEC     kill the guest after SEC seconds (default 300)
#   --append ARGS     extra kernel command line arguments
#   --qemu-arg ARG    extra QEMU argument (repeatable)
#   --qmp PATH        a QMP socket at PATH (qmp.py plugs and unplugs NIs through it); the
#                     NIs are devices ni<i> behind root ports ni_rp<i>
#   --hotplug-port R  an empty PCIe root port ni_hp<j> for a hot-plugged NI, with mem-reserve=R
#                     (e.g. 256M; an NI's BARs need 147 MiB) or R=default (the firmware's small
#                     window, too small for an NI: its BARs stay unassigned) (repeatable)
#   -q, --quiet       do not copy the guest command's output to stdout
# NI_QEMU_TRACE=EVENTS (e.g. vfio_msi_interrupt): QEMU trace events into the QEMU log, with
# wall-clock timestamps (-msg timestamp=on), to line up with the daemon's.
# Exit status: the guest command's; 124 on timeout; 125 when no exit marker was seen (boot
# failure, QEMU error, guest crash). On any non-zero status the console log is printed to stderr.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sockets=() adds=() overlays=() qemu_extra=() hotplug=()
cmd="" script="" initramfs="" log="" mem=512 smp=1 timeout_s=300 append="" quiet=0 qmp=""
while (($#)); do
    case "$1" in
        --socket) sockets+=("${2:?--socket needs a path}"); shift 2 ;;
        --cmd) cmd="${2:?--cmd needs a command}"; shift 2 ;;
        --script) script="${2:?--script needs a file}"; shift 2 ;;
        --add) adds+=("${2:?--add needs a file}"); shift 2 ;;
        --initramfs) initramfs="${2:?--initramfs needs a file}"; shift 2 ;;
        --overlay) overlays+=("${2:?--overlay needs a file}"); shift 2 ;;
        --log) log="${2:?--log needs a path}"; shift 2 ;;
        --mem) mem="${2:?--mem needs MiB}"; shift 2 ;;
        --smp) smp="${2:?--smp needs a count}"; shift 2 ;;
        --timeout) timeout_s="${2:?--timeout needs seconds}"; shift 2 ;;
        --append) append="${2?--append needs arguments}"; shift 2 ;;
        --qemu-arg) qemu_extra+=("${2?--qemu-arg needs an argument}"); shift 2 ;;
        --qmp) qmp="${2:?--qmp needs a path}"; shift 2 ;;
        --hotplug-port) hotplug+=("${2:?--hotplug-port needs a mem-reserve size or default}"); shift 2 ;;
        -q|--quiet) quiet=1; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) ni_die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ -n $cmd || -n $script ]] || ni_die "nothing to run: give --cmd or --script"
[[ -z $cmd || -z $script ]] || ni_die "give only one of --cmd and --script"
[[ $mem =~ ^[0-9]+$ && $smp =~ ^[0-9]+$ && $timeout_s =~ ^[0-9]+$ ]] ||
    ni_die "--mem, --smp and --timeout take whole numbers"
ni_require_setup

if [[ -z $initramfs ]]; then
    initramfs="$(ni_base_initramfs)" || ni_die "building the base initramfs failed"
fi
[[ -f $initramfs ]] || ni_die "initramfs $initramfs not found"

for s in "${sockets[@]}"; do
    [[ -S $s ]] || ni_die "vfio-user socket $s does not exist (is the daemon running?)"
    [[ $s != *[\"\\]* ]] || ni_die "socket path $s must not contain quotes or backslashes"
done

if [[ -z $log ]]; then
    mkdir -p "$NI_CACHE/logs"
    log="$NI_CACHE/logs/guest-$(date +%Y%m%d-%H%M%S)-$$.log"
fi
mkdir -p "$(dirname "$log")"
: >"$log"
qemu_log="$log.qemu"

work="$(mktemp -d "${TMPDIR:-/tmp}/ni-launch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Per-run files go in a second cpio appended to the base one (the kernel unpacks both).
initrd="$initramfs"
if ((${#overlays[@]})); then
    for f in "${overlays[@]}"; do [[ -f $f ]] || ni_die "--overlay file $f not found"; done
    cat "$initramfs" "${overlays[@]}" >"$work/base-initrd"
    initramfs="$work/base-initrd"
    initrd="$initramfs"
fi
if [[ -n $script || ${#adds[@]} -gt 0 ]]; then
    mkdir -p "$work/overlay/ni" "$work/overlay/usr/local/bin"
    [[ -z $script ]] || { [[ -f $script ]] || ni_die "script $script not found"; install -m 755 "$script" "$work/overlay/ni/cmd.sh"; }
    for f in "${adds[@]}"; do
        [[ -f $f ]] || ni_die "--add file $f not found"
        install -m 755 "$f" "$work/overlay/usr/local/bin/$(basename "$f")"
    done
    (cd "$work/overlay" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet --owner=0:0 | gzip -1) >"$work/overlay.cpio.gz"
    cat "$initramfs" "$work/overlay.cpio.gz" >"$work/initrd"
    initrd="$work/initrd"
fi

# no_timer_check: under TCG on a loaded host the IO-APIC timer check can miss its ticks and
# panic the guest ("timer doesn't work through Interrupt-remapped IO-APIC").
kcmd="console=ttyS0 intel_iommu=on panic=-1 rdinit=/init no_timer_check"
[[ -z $cmd ]] || kcmd+=" ni.cmd=$(printf '%s\n' "$cmd" | base64 -w0)"
[[ -z $append ]] || kcmd+=" $append"
((${#kcmd} < 2000)) || ni_die "kernel command line too long (${#kcmd} chars): use --script for long commands"

args=(
    -accel tcg -cpu max -smp "$smp"
    -object "memory-backend-memfd,id=mem,size=${mem}M,share=on"
    -M "q35,kernel-irqchip=split,memory-backend=mem" -m "${mem}M"
    -nodefaults -no-user-config -nographic -monitor none -vga none
    -serial "file:$log"
    -no-reboot
    -kernel "$NI_KERNEL_DIR/vmlinuz" -initrd "$initrd" -append "$kcmd"
    # The vIOMMU must come before the vfio-user devices; caching-mode=on is mandatory for them.
    -device "intel-iommu,intremap=on,caching-mode=on"
)
# Each NI sits behind its own PCIe root port: on the root bus QEMU would present it as a Root
# Complex Integrated Endpoint instead of the Express Endpoint the device declares.
i=0
for s in "${sockets[@]}"; do
    args+=(-device "pcie-root-port,id=ni_rp$i,chassis=$((i + 1)),slot=$((i + 1))")
    args+=(-device "{\"driver\":\"vfio-user-pci\",\"id\":\"ni$i\",\"bus\":\"ni_rp$i\",\"socket\":{\"path\":\"$s\",\"type\":\"unix\"}}")
    i=$((i + 1))
done
# Empty root ports for QMP device_add: the firmware sizes a bridge's window at boot from
# what is behind it, so an empty port gets only what mem-reserve asks for.
j=0
for r in "${hotplug[@]}"; do
    port="pcie-root-port,id=ni_hp$j,chassis=$((i + j + 1)),slot=$((i + j + 1))"
    [[ $r == default ]] || port+=",mem-reserve=$r"
    args+=(-device "$port")
    j=$((j + 1))
done
[[ -z $qmp ]] || args+=(-qmp "unix:$qmp,server=on,wait=off")
args+=("${qemu_extra[@]}")
[[ -z ${NI_QEMU_TRACE:-} ]] || args+=(-trace "$NI_QEMU_TRACE" -msg timestamp=on)

t0=$SECONDS
qrc=0
timeout -k 10 "$timeout_s" "$NI_QEMU_DIR/qemu.sh" "${args[@]}" </dev/null >"$qemu_log" 2>&1 || qrc=$?
elapsed=$((SECONDS - t0))

console="$(tr -d '\r' <"$log")"
marker="$(grep -E '^NI-GUEST-EXIT rc=[0-9]+$' <<<"$console" | tail -n1 || true)"
if [[ -n $marker ]]; then
    rc="${marker#NI-GUEST-EXIT rc=}"
    why="guest command exited with $rc"
elif ((qrc == 124 || qrc == 137)); then
    rc=124
    why="timed out after ${timeout_s}s"
else
    rc=125
    why="no exit marker on the console (QEMU exit status $qrc)"
fi

if ((quiet == 0)); then
    sed -n '/^NI-GUEST-BEGIN$/,/^NI-GUEST-EXIT rc=/{/^NI-GUEST-BEGIN$/d;/^NI-GUEST-EXIT rc=/d;p}' <<<"$console"
fi
if ((rc != 0)); then
    {
        echo "===== guest console ($log) ====="
        cat <<<"$console"
        echo "===== QEMU output ($qemu_log) ====="
        cat "$qemu_log"
        echo "====="
    } >&2
fi
ni_log "$why (${elapsed}s; console: $log)"
exit "$rc"
