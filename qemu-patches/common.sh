# shellcheck shell=bash
# Sourced by the scripts in qemu-patches/ and tests/vm/: locates the repo and the VM cache.
#   NI_CACHE   cache directory (default: <repo>/.cache/vm); holds the trixie rootfs,
#              the guest kernel + VFIO modules, initramfs images and logs.

NI_QEMU_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NI_REPO="$(cd "$NI_QEMU_DIR/.." && pwd)"
NI_CACHE="${NI_CACHE:-$NI_REPO/.cache/vm}"
NI_ROOTFS="$NI_CACHE/rootfs"
NI_KERNEL_DIR="$NI_CACHE/kernel"
NI_PATCHED_QEMU_DIR="$NI_CACHE/qemu-patched"
# shellcheck disable=SC2034  # used by the scripts that source this file
# VFIO modules, in load order (file names as shipped by the kernel package, decompressed).
NI_VFIO_MODULES=(irqbypass vfio vfio_iommu_type1 vfio-pci-core vfio-pci)

ni_log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
ni_die() { printf '[%s] error: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# Fail with a hint unless setup.sh has completed.
ni_require_setup() {
    [[ -f "$NI_CACHE/.setup-stamp" && -x "$NI_ROOTFS/usr/bin/qemu-system-x86_64" && -f "$NI_KERNEL_DIR/vmlinuz" ]] ||
        ni_die "VM cache $NI_CACHE is not set up; run qemu-patches/setup.sh first"
}

# ni_pack_cpio DIR OUT LEVEL: DIR's tree as a gzip'd (-LEVEL) newc cpio owned by root, written
# to OUT atomically (the kernel unpacks such archives one after another: base, overlays).
ni_pack_cpio() {
    local dir="$1" out="$2" level="$3" tmp
    mkdir -p "$(dirname "$out")"
    tmp="$(mktemp "$out.XXXXXX")"
    (cd "$dir" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet --owner=0:0 | gzip "-$level") >"$tmp"
    chmod 644 "$tmp"
    mv "$tmp" "$out"
}

# ni_base_initramfs: prints the default base initramfs's path, (re)building it first when it is
# missing or older than its inputs (build-initramfs.sh writes it atomically, so guests booting
# in parallel may both rebuild it).
ni_base_initramfs() {
    local out="$NI_CACHE/initramfs.cpio.gz" dep
    for dep in "$NI_CACHE/.setup-stamp" "$NI_QEMU_DIR/build-initramfs.sh" "$NI_QEMU_DIR/guest-init.sh" "$NI_QEMU_DIR/common.sh"; do
        if [[ ! -f $out || $dep -nt $out ]]; then
            "$NI_QEMU_DIR/build-initramfs.sh" -o "$out" >&2 || return 1
            break
        fi
    done
    printf '%s\n' "$out"
}
