#!/usr/bin/env bash
# Guest figures (issue 16): two QEMU guests (TCG here), one NI each, virtio-net between them,
# in one run of qemu-patches/run-guests.sh:
#   - 8 B half round trip with libni's own wait, a pure spin, and TCP over virtio-net
#     (ni-vm-rank lat N wait,spin);
#   - the round trip to a receiver asleep on its MSI-X beside one that polls, and the guest
#     kernel's own eventfd wake-up (ni-vm-rank wake N).
#
#   tests/bench/vm.sh [N]          (default 500 round trips per point)
# TCG timings count only as ratios: the report says what the machine's load was.
set -euo pipefail
cd "$(dirname "$0")/../.."
N="${1:-500}"
cargo build --release -q -p ni-device -p ni-ctl
# The daemon just built, wherever CARGO_TARGET_DIR put it (run-guests.sh would otherwise take
# target/release's, perhaps of another build: its window layout may not be the guests' libni's).
T="${CARGO_TARGET_DIR:-target}"
case "$T" in /*) ;; *) T="$PWD/$T" ;; esac
export NI_DEVICE="$T/release/ni-device"
bins="$(qemu-patches/guest-bins.sh)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
qemu-patches/run-guests.sh --net "$bins/ni-vm-rank" lat "$N" wait,spin | grep -E '\] lat '
qemu-patches/run-guests.sh "$bins/ni-vm-rank" wake "$N" | grep -E '\] wake '
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
