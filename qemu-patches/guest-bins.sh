#!/usr/bin/env bash
# Builds the static programs that run inside guests (the guest initramfs has no libc): the
# test ranks (ni-tests: ni-vm-rank, ni-test-rank) and libni's pingpong example, with
#   RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu
# into their own target directory (default <repo>/target/guest, or $NI_GUEST_TARGET_DIR), so
# host builds are not disturbed. Prints the directory holding the binaries on stdout
# (examples are in its examples/ subdirectory). The same static binaries also run on the host.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

target=x86_64-unknown-linux-gnu
dir="${NI_GUEST_TARGET_DIR:-$NI_REPO/target/guest}"
ni_log "building static guest binaries into $dir"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
rc=0
(cd "$NI_REPO" && RUSTFLAGS='-C target-feature=+crt-static' CARGO_TARGET_DIR="$dir" \
    cargo build --release -q --target "$target" -p ni-tests --bin ni-vm-rank --bin ni-test-rank \
    -p libni --example pingpong) 2>"$log" || rc=$?
# crt-static drops libni's cdylib (static binaries are what the guests need): not news.
grep -v 'dropping unsupported crate type .cdylib.' "$log" >&2 || true
((rc == 0)) || ni_die "cargo build of the guest binaries failed"
out="$dir/$target/release"
for b in ni-vm-rank ni-test-rank; do
    [[ -x $out/$b ]] || ni_die "$out/$b was not built"
    ldd "$out/$b" 2>&1 | grep -qE 'not a dynamic|statically linked' || ni_die "$out/$b is not static"
done
printf '%s\n' "$out"
