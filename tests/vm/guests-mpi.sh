#!/usr/bin/env bash
# VM test (issue 14): unmodified Open MPI programs between two QEMU guests, one rank each, over
# the libfabric provider "ni" on the guests' NIs (libni over VFIO inside each guest). The guest
# image gains the host's Open MPI 4.1.4, libfabric 1.17 and libni-fi.so as an initramfs overlay
# (qemu-patches/mpi-overlay.sh); mpirun in guest 0 starts its orted in guest 1 through ni-rsh
# over a virtio-net link (the launcher's own wire-up only: every MPI message crosses the NIs).
# Runs tests/mpi/p2p.c and coll.c (compiled here with mpicc): every check must pass, both
# ranks must select pml cm + mtl ofi + provider ni, and `ni-ctl counters` must show both NIs
# attached (one QEMU each) and carrying the payload.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
provider="$NI_REPO/target/release/libni_fi.so"
if [[ ! -f $provider ]]; then
    ni_log "building the provider (cargo build --release -p ni-fi)"
    (cd "$NI_REPO" && cargo build --release -q -p ni-fi) || ni_die "building ni-fi failed"
fi
command -v mpicc >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm openmpi-bin libopenmpi-dev >/dev/null
} || ni_die "mpicc missing and Open MPI could not be installed"
mkdir -p "$LOG/bin"
for p in p2p coll; do
    mpicc -O2 -g -Wall -Wextra -o "$LOG/bin/$p" "$NI_REPO/tests/mpi/$p.c" || ni_die "mpicc $p.c failed"
done
overlay="$LOG/mpi-overlay.cpio.gz"
"$NI_QEMU_DIR/mpi-overlay.sh" -o "$overlay" "$provider" "$LOG/bin/p2p" "$LOG/bin/coll" \
    "$here/lib/mpi/ni-rsh" "$here/lib/mpi/ni-rshd"

vm_run --net --mem 1024 --overlay "$overlay" \
    --guest-env 0:NI_MPI_GUEST=0 --guest-env 1:NI_MPI_GUEST=1 \
    --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$here/lib/mpi/mpi-guest.sh" "p2p" "coll"

g0="guest0 ni0"
expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
expect "guest 1 served both orted sessions" has "^\[guest1 ni1\] mpi-guest: 2 orted sessions served"
expect "p2p: every check passed on 2 ranks" has "^\[$g0\] p2p: ([0-9]+) of \1 checks passed on 2 ranks"
expect "coll: every check passed on 2 ranks" has "^\[$g0\] coll: ([0-9]+) of \1 checks passed on 2 ranks"
expect "no FAIL line" bash -c '! grep -qE "^\[guest[01] ni[01]\] +FAIL" <<<"$1"' _ "$OUT"
expect "pml cm selected by all 4 processes" test "$(grep -c 'select: component cm selected' <<<"$OUT")" -eq 4
expect "mtl ofi selected by all 4 processes" test "$(grep -c 'Selected component \[ofi\]' <<<"$OUT")" -eq 4
# mtl_ofi_provider_include ni admits no other provider; its domain in a guest is the NI's PCI
# address (libni found it by PCI ID), on the host the socket's stem.
expect "provider ni on its guest's PCI NI in all 4 processes" \
    test "$(grep -cE 'mtl:ofi:provider: [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$' <<<"$OUT")" -eq 4

# The NI is attached once per guest (its QEMU is the vfio-user client); each process that
# opens it over VFIO resets the function (FLR), counters included, so they show the last
# program, coll: ~38 MiB over the NIs on the host.
mpi_counters_ok() {
    python3 - "$LOG/counters.json" <<'PY'
import json, sys
nis = {e["node"]: e["counters"] for e in json.load(open(sys.argv[1]))["counters"]}
ok = True
for i in (0, 1):
    c = nis.get(i, {})
    print(f"NI {i}: attaches={c.get('attaches')} sends={c.get('sends')} recvs={c.get('recvs')} "
          f"recv_bytes={c.get('recv_bytes')} window_sends={c.get('window_sends')} dma_faults={c.get('dma_faults')}")
    if c.get("attaches") != 1 or c.get("sends", 0) < 300 or c.get("recvs", 0) < 300 \
            or c.get("recv_bytes", 0) < 16 << 20 or c.get("dma_faults", 0) != 0:
        ok = False
sys.exit(0 if ok else 1)
PY
}
expect "ni-ctl counters: both NIs (one QEMU each) carried coll's traffic, no DMA fault" mpi_counters_ok
vm_finish
