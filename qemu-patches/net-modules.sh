#!/usr/bin/env bash
# Idempotent: puts the guest kernel's virtio-net modules (failover, net_failover, virtio_net,
# decompressed, in load order) into $NI_CACHE/kernel/net/, for guests that need a network
# (run-guests.sh --net: the TCP baseline of the latency measurement). setup.sh keeps only the
# VFIO modules; this fetches the same kernel package again with the rootfs's own apt (trixie,
# the exact version setup.sh unpacked) and keeps three more modules from it.
# Usage: net-modules.sh        prints the directory on stdout
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NET_MODULES=(failover net_failover virtio_net)
ni_require_setup
[[ $(id -u) -eq 0 ]] || ni_die "must run as root (chroot into the rootfs for apt)"
kver="$(cat "$NI_KERNEL_DIR/version")"
out="$NI_KERNEL_DIR/net"
if [[ -f $out/order && $(cat "$out/version" 2>/dev/null) == "$kver" ]]; then
    printf '%s\n' "$out"
    exit 0
fi

exec 9>"$NI_CACHE/.net-modules.lock"
flock 9
work="$(mktemp -d "$NI_CACHE/net-modules.XXXXXX")"
trap 'rm -rf "$work"' EXIT
pkg="linux-image-$kver"
ni_log "fetching $pkg with the rootfs's apt for ${NET_MODULES[*]}"
mkdir -p "$NI_ROOTFS/tmp/ni-net"
chroot "$NI_ROOTFS" apt-get update -qq >&2 || ni_die "apt-get update in the rootfs failed"
chroot "$NI_ROOTFS" sh -ec "cd /tmp/ni-net && apt-get download -q '$pkg'" >&2 ||
    ni_die "apt-get download $pkg failed (is the mirror still carrying kernel $kver? re-run setup.sh --force)"
deb="$(find "$NI_ROOTFS/tmp/ni-net" -name '*.deb' | head -n1)"
[[ -n $deb ]] || ni_die "no package downloaded"
dpkg-deb -x "$deb" "$work/x"
rm -rf "$NI_ROOTFS/tmp/ni-net"
moddir="$work/x/usr/lib/modules/$kver"
[[ -d $moddir ]] || moddir="$work/x/lib/modules/$kver"
mkdir -p "$work/net"
for m in "${NET_MODULES[@]}"; do
    src="$(find "$moddir" -name "$m.ko*" | head -n1)"
    [[ -n $src ]] || ni_die "module $m not found in $pkg"
    case "$src" in
        *.ko.xz) xz -dc "$src" >"$work/net/$m.ko" ;;
        *.ko.zst) zstd -qdc "$src" >"$work/net/$m.ko" ;;
        *.ko.gz) gzip -dc "$src" >"$work/net/$m.ko" ;;
        *.ko) cp "$src" "$work/net/$m.ko" ;;
        *) ni_die "unexpected module file $src" ;;
    esac
done
printf '%s\n' "${NET_MODULES[@]}" >"$work/net/order"
printf '%s\n' "$kver" >"$work/net/version"
rm -rf "$out"
mv "$work/net" "$out"
printf '%s\n' "$out"
