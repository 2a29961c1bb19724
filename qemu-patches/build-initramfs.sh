#!/usr/bin/env bash
# Builds the guest initramfs (gzip'd newc cpio):
#   - static busybox (host's busybox-static) with its applets linked in /bin, /sbin, /usr/bin, ...
#   - lspci and setpci from the trixie rootfs, with the shared libraries they need, plus pci.ids
#   - the VFIO modules from setup.sh in /lib/modules/ni/ (loaded by /init in order)
#   - /init (qemu-patches/guest-init.sh): mounts proc/sys/dev, loads the VFIO modules, enables
#     madvise THP, runs the guest command (see launch.sh), prints the end marker, powers off
#   - any extra files given as arguments, copied to /usr/local/bin/ (meant for static binaries:
#     RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu)
# Usage: build-initramfs.sh [-o OUT] [--script FILE] [FILE...]
#   -o OUT         output path (default $NI_CACHE/initramfs.cpio.gz)
#   --script FILE  embed FILE as /ni/cmd.sh (run when the kernel command line has no ni.cmd=)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

out="$NI_CACHE/initramfs.cpio.gz"
script=""
extra=()
while (($#)); do
    case "$1" in
        -o) out="${2:?-o needs a path}"; shift 2 ;;
        --script) script="${2:?--script needs a file}"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        -*) ni_die "unknown option $1" ;;
        *) extra+=("$1"); shift ;;
    esac
done
ni_require_setup
[[ $(id -u) -eq 0 ]] || ni_die "must run as root (creates device nodes)"
busybox_bin="$(command -v busybox || true)"
[[ -n $busybox_bin ]] || ni_die "busybox not found; run qemu-patches/setup.sh"
is_static() {
    local o
    o="$(ldd "$1" 2>&1 || true)"
    [[ $o == *"not a dynamic"* || $o == *"statically linked"* ]]
}
is_static "$busybox_bin" ||
    ni_die "$busybox_bin is not static (install busybox-static)"
[[ -z $script || -f $script ]] || ni_die "script $script not found"

stage="$(mktemp -d "${TMPDIR:-/tmp}/ni-initramfs.XXXXXX")"
trap 'rm -rf "$stage"' EXIT

# Merged-/usr layout like the rootfs, so the copied loader path (/lib64/...) resolves.
mkdir -p "$stage"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,usr/local/bin,usr/share/misc} \
    "$stage"/{dev,proc,sys,tmp,run,root,etc,ni}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$stage/$d"; done
mknod -m 600 "$stage/dev/console" c 5 1
mknod -m 666 "$stage/dev/null" c 1 3

# pciutils from the rootfs, with the libraries the rootfs's loader resolves for them.
lib="$NI_ROOTFS/usr/lib/x86_64-linux-gnu"
for tool in lspci setpci; do
    bin="$(find "$NI_ROOTFS/usr/bin" "$NI_ROOTFS/usr/sbin" -maxdepth 1 -name "$tool" | head -n1)"
    [[ -n $bin ]] || ni_die "$tool not found in rootfs (pciutils missing?)"
    cp "$bin" "$stage/usr/bin/$tool"
    while read -r so; do
        [[ -n $so ]] || continue
        cp -L "$so" "$stage/usr/lib/x86_64-linux-gnu/$(basename "$so")"
    done < <("$lib/ld-linux-x86-64.so.2" --library-path "$lib" --list "$bin" |
        sed -n 's/.*=> \(\/[^ ]*\) (0x.*/\1/p')
done
cp -L "$lib/ld-linux-x86-64.so.2" "$stage/usr/lib/x86_64-linux-gnu/"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$stage/usr/lib64/ld-linux-x86-64.so.2"
if [[ -f $NI_ROOTFS/usr/share/misc/pci.ids ]]; then
    cp "$NI_ROOTFS/usr/share/misc/pci.ids" "$stage/usr/share/misc/"
fi

# busybox and its applets (never over a real tool copied above)
cp "$busybox_bin" "$stage/usr/bin/busybox"
while read -r applet; do
    applet="${applet#/}"
    case "$applet" in bin/*|sbin/*) applet="usr/$applet" ;; esac
    [[ -e $stage/$applet || -L $stage/$applet ]] && continue
    mkdir -p "$stage/$(dirname "$applet")"
    ln -s /usr/bin/busybox "$stage/$applet"
done < <("$busybox_bin" --list-full)

# VFIO modules under /lib/modules/<version>/ni/, with the module indexes from the rootfs's depmod
# (libkmod, e.g. lspci -k, fails without them); /init loads them in the order of ni/order.
kver="$(cat "$NI_KERNEL_DIR/version")"
kmods="$stage/usr/lib/modules/$kver"
mkdir -p "$kmods/ni"
for m in "${NI_VFIO_MODULES[@]}"; do
    cp "$NI_KERNEL_DIR/modules/$m.ko" "$kmods/ni/"
done
printf '%s\n' "${NI_VFIO_MODULES[@]}" >"$kmods/ni/order"
for f in modules.builtin modules.builtin.modinfo modules.order; do
    [[ ! -f $NI_KERNEL_DIR/$f ]] || cp "$NI_KERNEL_DIR/$f" "$kmods/$f"
done
depmod_bin="$(find "$NI_ROOTFS/usr/sbin" "$NI_ROOTFS/usr/bin" -maxdepth 1 -name depmod | head -n1)"
[[ -n $depmod_bin ]] || ni_die "depmod not found in rootfs (kmod missing?); re-run qemu-patches/setup.sh"
"$lib/ld-linux-x86-64.so.2" --library-path "$lib" --argv0 depmod "$(readlink -f "$depmod_bin")" -b "$stage" "$kver" ||
    ni_die "depmod failed"
[[ -f $kmods/modules.dep ]] || ni_die "depmod wrote no modules.dep under $kmods"
printf '%s\n' "$kver" >"$stage/etc/ni-kernel-version"

for f in "${extra[@]}"; do
    [[ -f $f ]] || ni_die "extra file $f not found"
    if ! is_static "$f"; then
        ni_log "warning: $f is dynamically linked; only the rootfs libraries listed above are in the guest"
    fi
    cp "$f" "$stage/usr/local/bin/$(basename "$f")"
    chmod 755 "$stage/usr/local/bin/$(basename "$f")"
done
[[ -z $script ]] || install -m 755 "$script" "$stage/ni/cmd.sh"

install -m 755 "$NI_QEMU_DIR/guest-init.sh" "$stage/init"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$stage/etc/passwd"
printf 'root:x:0:\n' >"$stage/etc/group"

ni_pack_cpio "$stage" "$out" 6
ni_log "wrote $out ($(du -h "$out" | cut -f1); ${#extra[@]} extra file(s))"
