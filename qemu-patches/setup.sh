#!/usr/bin/env bash
# Idempotent setup of everything needed to boot QEMU guests with the NI attached:
#   - host tools from bookworm (mmdebstrap, busybox-static, cpio, xz-utils, zstd)
#   - $NI_CACHE/rootfs: a trixie minbase root filesystem holding QEMU >= 10.1 (trixie-backports),
#     SeaBIOS and pciutils; QEMU runs from it through its own loader (see qemu.sh), nothing is
#     installed into the host's libc
#   - $NI_CACHE/kernel: trixie's linux-image-cloud-amd64 vmlinuz and the VFIO modules, decompressed
#   - $NI_CACHE/qemu-patched: that QEMU with qemu-patches/patches/ applied (patch-qemu.py), used
#     when NI_QEMU_VARIANT=patched (hot-unplug of NIs needs it; see README.md)
# Re-runs only when this script or its inputs (mirror, suite, packages) change; --force rebuilds.
# Environment: NI_CACHE (cache dir), NI_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

force=0
case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) ni_die "unknown argument '$1' (usage: setup.sh [--force])" ;;
esac

MIRROR="${NI_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=trixie
ROOTFS_PACKAGES=(
    qemu-system-x86/trixie-backports
    qemu-system-common/trixie-backports
    qemu-system-data/trixie-backports
    seabios/trixie-backports
    pciutils
    pci.ids
    kmod
)
KERNEL_META=linux-image-cloud-amd64
HOST_PACKAGES=(mmdebstrap busybox-static cpio xz-utils zstd)
HOST_COMMANDS=(mmdebstrap busybox cpio xz zstd)

[[ $(id -u) -eq 0 ]] || ni_die "must run as root (mmdebstrap root mode, apt-get)"
[[ $(uname -m) == x86_64 ]] || ni_die "only x86_64 hosts are supported"

# kmod: depmod for the initramfs's module indexes (lspci -k / libkmod need them)
# --- host packages (bookworm only; never trixie into the host) ---------------------------------
missing=()
for i in "${!HOST_COMMANDS[@]}"; do
    command -v "${HOST_COMMANDS[$i]}" >/dev/null 2>&1 || missing+=("${HOST_PACKAGES[$i]}")
done
# busybox from busybox-static is what the initramfs needs (a dynamic busybox would not run there).
if command -v busybox >/dev/null && ! dpkg -s busybox-static >/dev/null 2>&1; then
    missing+=(busybox-static)
fi
if ((${#missing[@]})); then
    ni_log "installing host packages from bookworm: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || ni_die "apt-get update failed"
    apt-get install -y -qq -t bookworm "${missing[@]}" >/dev/null ||
        ni_die "apt-get install -t bookworm ${missing[*]} failed"
fi

# --- stamp: hash of this script, common.sh and the inputs -------------------------------------
stamp_hash="$(
    {
        cat "$0" "$NI_QEMU_DIR/common.sh" "$NI_QEMU_DIR/patch-qemu.py"
        printf '%s\n' "$MIRROR" "$SUITE" "$KERNEL_META" "${ROOTFS_PACKAGES[@]}"
    } | sha256sum | cut -d' ' -f1
)"
stamp="$NI_CACHE/.setup-stamp"
mkdir -p "$NI_CACHE"
# One setup at a time per cache (parallel test runs wait here).
exec 9>"$NI_CACHE/.setup.lock"
flock 9
if ((force == 0)) && [[ -f $stamp && $(cat "$stamp") == "$stamp_hash" ]] &&
    [[ -x $NI_ROOTFS/usr/bin/qemu-system-x86_64 && -f $NI_KERNEL_DIR/vmlinuz ]]; then
    ni_log "up to date ($NI_CACHE)"
    exit 0
fi

# Keep the cache out of git wherever it lives.
printf '*\n' >"$NI_CACHE/.gitignore"
rm -f "$stamp" "$NI_CACHE/initramfs.cpio.gz"
t0=$SECONDS

# --- trixie root filesystem ------------------------------------------------------------------
ni_log "building trixie rootfs with mmdebstrap (${ROOTFS_PACKAGES[*]}) ..."
tmp_root="$NI_CACHE/rootfs.tmp"
rm -rf "$tmp_root" "$NI_CACHE/kernel.tmp"
mkdir -p "$NI_CACHE/kernel.tmp/debs"
include="$(IFS=,; echo "${ROOTFS_PACKAGES[*]}")"
# The customize hook fetches (not installs) the kernel package with the rootfs's own apt, so the
# kernel matches the suite; root mode runs hooks on the host with $1 = the rootfs directory.
# shellcheck disable=SC2016  # $1 in the hooks is expanded by mmdebstrap's shell
mmdebstrap --mode=root --variant=minbase \
    --aptopt='Apt::Install-Recommends "false"' \
    --include="$include" \
    --customize-hook='mkdir -p "$1/tmp/ni-kernel" && chmod 1777 "$1/tmp/ni-kernel"' \
    --customize-hook="chroot \"\$1\" sh -ec 'cd /tmp/ni-kernel; pkg=\$(apt-cache depends $KERNEL_META | sed -n \"s/^ *Depends: \\(linux-image-[^ ]*\\).*/\\1/p\" | head -n1); test -n \"\$pkg\"; apt-get download -q \"\$pkg\"'" \
    --customize-hook="mv \"\$1\"/tmp/ni-kernel/*.deb '$NI_CACHE/kernel.tmp/debs/'; rm -rf \"\$1/tmp/ni-kernel\"" \
    "$SUITE" "$tmp_root" \
    "deb $MIRROR $SUITE main" \
    "deb $MIRROR $SUITE-backports main" 2>&1 |
    sed -u 's/^/  mmdebstrap: /' >&2 || ni_die "mmdebstrap failed (see output above)"
[[ -x $tmp_root/usr/bin/qemu-system-x86_64 ]] || ni_die "rootfs has no qemu-system-x86_64"
rm -rf "$NI_ROOTFS"
mv "$tmp_root" "$NI_ROOTFS"
ni_log "rootfs done in $((SECONDS - t0)) s ($(du -sh "$NI_ROOTFS" | cut -f1))"

# --- guest kernel and VFIO modules -----------------------------------------------------------
kdir="$NI_CACHE/kernel.tmp"
deb="$(find "$kdir/debs" -name 'linux-image-*.deb' | head -n1)"
[[ -n $deb ]] || ni_die "kernel package was not downloaded"
ni_log "unpacking $(basename "$deb")"
dpkg-deb -x "$deb" "$kdir/x"
vmlinuz="$(find "$kdir/x/boot" -name 'vmlinuz-*' | head -n1)"
[[ -n $vmlinuz ]] || ni_die "no vmlinuz in $deb"
kver="${vmlinuz##*/vmlinuz-}"
cp "$vmlinuz" "$kdir/vmlinuz"
printf '%s\n' "$kver" >"$kdir/version"
mkdir -p "$kdir/modules"
moddir="$kdir/x/usr/lib/modules/$kver"
[[ -d $moddir ]] || moddir="$kdir/x/lib/modules/$kver"
for m in "${NI_VFIO_MODULES[@]}"; do
    alt="${m//-/_}" alt2="${m//_/-}"
    src="$(find "$moddir" \( -name "$m.ko*" -o -name "$alt.ko*" -o -name "$alt2.ko*" \) | head -n1)"
    [[ -n $src ]] || ni_die "module $m not found in $deb"
    case "$src" in
        *.ko.xz) xz -dc "$src" >"$kdir/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$src" >"$kdir/modules/$m.ko" ;;
        *.ko.gz) gzip -dc "$src" >"$kdir/modules/$m.ko" ;;
        *.ko) cp "$src" "$kdir/modules/$m.ko" ;;
        *) ni_die "unexpected module file $src" ;;
    esac
done
for f in modules.builtin modules.builtin.modinfo modules.order; do
    [[ ! -f $moddir/$f ]] || cp "$moddir/$f" "$kdir/$f"
done
rm -rf "$kdir/x" "$kdir/debs"
rm -rf "$NI_KERNEL_DIR"
mv "$kdir" "$NI_KERNEL_DIR"

# (output captured whole, not piped into `head`/`grep -q`: under pipefail a reader that leaves
# early can kill QEMU with SIGPIPE and fail the check)
qemu_version="$("$NI_QEMU_DIR/qemu.sh" --version)"
qemu_version="${qemu_version%%$'\n'*}"
grep -q '"vfio-user-pci"' <<<"$("$NI_QEMU_DIR/qemu.sh" -device help 2>/dev/null)" ||
    ni_die "$qemu_version has no vfio-user-pci device"
# --- patched QEMU (qemu-patches/patches/, applied to the binary: patch-qemu.py says why) -------
rm -rf "$NI_PATCHED_QEMU_DIR"
mkdir -p "$NI_PATCHED_QEMU_DIR"
if python3 "$NI_QEMU_DIR/patch-qemu.py" "$NI_ROOTFS/usr/bin/qemu-system-x86_64" \
    "$NI_PATCHED_QEMU_DIR/qemu-system-x86_64"; then
    ni_log "patched QEMU (NI_QEMU_VARIANT=patched): $NI_PATCHED_QEMU_DIR/qemu-system-x86_64"
else
    ni_log "note: $qemu_version could not be patched (see above); NI_QEMU_VARIANT=patched is unavailable"
fi
printf '%s\n' "$stamp_hash" >"$stamp"
ni_log "done in $((SECONDS - t0)) s: $qemu_version, guest kernel $kver, cache $NI_CACHE"
