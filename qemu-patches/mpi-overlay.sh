#!/usr/bin/env bash
# Builds an initramfs overlay (gzip'd newc cpio, appended after the base initramfs with
# launch.sh / run-guests.sh --overlay) that gives a guest the host's Open MPI and libfabric:
#   - every file of bookworm's openmpi-bin, libopenmpi3, openmpi-common, libpmix2, libfabric1
#     (docs and man pages left out), at the host's paths, /etc/openmpi included;
#   - the shared libraries all their programs and plugins need (ldd, transitively), except
#     those the base initramfs already has (its newer trixie copies serve); glibc's from the
#     trixie rootfs, whose loader the base has (bookworm's binaries run on the newer glibc);
#   - /usr/bin/mpirun -> orterun (the host's goes through /etc/alternatives);
#   - the provider: LIB (libni_fi.so) as /usr/local/lib/ni-fi/libni-fi.so, FI_PROVIDER_PATH's
#     directory in the guest;
#   - any FILE given after it in /usr/local/bin (dynamically linked programs are fine: their
#     libraries are added as above).
# Usage: mpi-overlay.sh -o OUT LIB [FILE...]
# Installs openmpi-bin libopenmpi-dev libfabric1 from bookworm when missing (root).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

out=""
while (($#)); do
    case "$1" in
        -o) out="${2:?-o needs a path}"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        -*) ni_die "unknown option $1" ;;
        *) break ;;
    esac
done
[[ -n $out ]] || ni_die "give -o OUT"
lib="${1:?give the provider library (libni_fi.so)}"
shift
[[ -f $lib ]] || ni_die "provider library $lib not found (cargo build --release -p ni-fi)"
ni_require_setup
# The base it goes over: what the base has already is left out.
base="$(ni_base_initramfs)" || ni_die "building the base initramfs failed"

pkgs=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libfabric1)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    [[ $(id -u) -eq 0 ]] || ni_die "missing ${missing[*]} and not root to install them"
    ni_log "installing ${missing[*]} from bookworm"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm "${missing[@]}" >&2
fi

stage="$(mktemp -d "${TMPDIR:-/tmp}/ni-mpi-overlay.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/usr/lib/x86_64-linux-gnu" "$stage/usr/local/bin" "$stage/usr/local/lib/ni-fi" "$stage/usr/bin"

# The packages' files, symlinks as symlinks (their targets are in the same packages).
while read -r f; do
    [[ $f == /usr/share/doc/* || $f == /usr/share/man/* || $f == /usr/share/lintian/* ]] && continue
    [[ -f $f || -L $f ]] || continue
    mkdir -p "$stage$(dirname "$f")"
    cp -a "$f" "$stage$f"
done < <(dpkg -L "${pkgs[@]}" | LC_ALL=C sort -u)
ln -sf orterun "$stage/usr/bin/mpirun"
install -m 755 "$lib" "$stage/usr/local/lib/ni-fi/libni-fi.so"
for f in "$@"; do
    [[ -f $f ]] || ni_die "file $f not found"
    install -m 755 "$f" "$stage/usr/local/bin/$(basename "$f")"
done

# What the base initramfs has already; glibc's libraries come from the rootfs the base's loader
# is from (a libc must match its loader), the rest from the host.
declare -A have=()
while read -r f; do have["$(basename "$f")"]=1; done < <(zcat "$base" | cpio -it --quiet 2>/dev/null | grep '\.so')
rootlib="$NI_ROOTFS/usr/lib/x86_64-linux-gnu"
for g in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1 \
    libanl.so.1 libmvec.so.1 ld-linux-x86-64.so.2; do
    if [[ -z ${have[$g]:-} ]]; then
        [[ -e $rootlib/$g ]] || ni_die "$g not in the rootfs $rootlib"
        cp -L "$rootlib/$g" "$stage/usr/lib/x86_64-linux-gnu/$g"
    fi
    have[$g]=1
done

# The libraries of every ELF file staged (ldd lists each one's whole closure).
declare -A added=()
while read -r -d '' f; do
    head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
    while read -r so; do
        name="$(basename "$so")"
        [[ -n ${have[$name]:-} || -n ${added[$name]:-} || -e $stage/usr/lib/x86_64-linux-gnu/$name ]] && continue
        cp -L "$so" "$stage/usr/lib/x86_64-linux-gnu/$name"
        added[$name]=1
    done < <(ldd "$f" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) (0x.*/\1/p')
done < <(find "$stage" -type f -print0)

ni_pack_cpio "$stage" "$out" 1
ni_log "wrote $out ($(du -h "$out" | cut -f1); ${#added[@]} libraries beside the packages)"
