#!/usr/bin/env bash
# Runs the trixie rootfs's qemu-system-x86_64 (QEMU >= 10.1, has vfio-user-pci) on the bookworm
# host through the rootfs's own dynamic loader and libraries: no chroot, no mounts, no host libc
# change. Firmware comes from the rootfs (-L). All arguments are passed to QEMU.
# NI_QEMU_VARIANT: stock (default: the package's binary) or patched (the same binary with
# qemu-patches/patches/ applied by setup.sh; needed for device_del of an NI, see README.md).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="$NI_ROOTFS/usr/lib/x86_64-linux-gnu"
loader="$lib/ld-linux-x86-64.so.2"
[[ -x $loader && -x $NI_ROOTFS/usr/bin/qemu-system-x86_64 ]] ||
    ni_die "no QEMU in $NI_ROOTFS; run qemu-patches/setup.sh first"
# QEMU modules (accel, ui, ...) are looked up under QEMU_MODULE_DIR.
case "${NI_QEMU_VARIANT:-stock}" in
    stock) bin="$NI_ROOTFS/usr/bin/qemu-system-x86_64" ;;
    patched)
        bin="$NI_PATCHED_QEMU_DIR/qemu-system-x86_64"
        [[ -x $bin ]] || ni_die "no patched QEMU at $bin: setup.sh could not patch this QEMU (its log says why)"
        ;;
    *) ni_die "NI_QEMU_VARIANT must be stock or patched, not '$NI_QEMU_VARIANT'" ;;
esac
export QEMU_MODULE_DIR="$NI_ROOTFS/usr/lib/x86_64-linux-gnu/qemu"
exec "$loader" --library-path "$lib:$NI_ROOTFS/lib/x86_64-linux-gnu" "$bin" \
    -L "$NI_ROOTFS/usr/share/qemu" -L "$NI_ROOTFS/usr/share/seabios" "$@"
