#!/usr/bin/env bash
# VM test: one-sided transfers (MLINK WRITE/READ) into memory programs allocated themselves
# and registered with Ni::register (what fi_mr_reg does for MPI's windows), across a partition
# of two QEMU guests (libni over VFIO: the guest's IOMMU maps the heap pages in place) and a
# host process (vfio-user: the pages move onto a memfd at the same address). Each rank puts
# 100000 B into the next rank's registered heap buffer, gets it back into its own registered
# buffer and puts from it; every byte is checked where it landed and around it.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
vm_run -n 2 --host 1 --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$GUEST_BIN/ni-vm-rank" onesided

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for r in "guest0 ni0" "guest1 ni1"; do
    expect "$r: registered heap memory, in place" \
        has "^\[$r\] onesided: put/get of 100000 B into registered heap memory checked around 3 ranks in .* \(guest: pages mapped in place by the IOMMU\)$"
    expect "$r: ok onesided" has "^\[$r\] ok onesided$"
done
expect "host ni2: registered heap memory, moved onto a memfd" \
    has "^\[host ni2\] onesided: put/get of 100000 B into registered heap memory checked around 3 ranks in .* \(host: pages moved onto a memfd\)$"
expect "host ni2: ok onesided" has "^\[host ni2\] ok onesided$"

# Every NI did MLINK WRITEs and READs, none refused or faulted.
counters_ok() {
    python3 - "$LOG/counters.json" <<'PY'
import json, sys
nis = {e["node"]: e["counters"] for e in json.load(open(sys.argv[1]))["counters"]}
bad = []
for i in range(3):
    c = nis.get(i, {})
    if c.get("puts", 0) < 2 or c.get("gets", 0) < 1:
        bad.append(f"NI {i}: puts {c.get('puts')} gets {c.get('gets')}")
    for k in ("dma_faults", "mlink_refused"):
        if c.get(k, 0):
            bad.append(f"NI {i}: {k} {c[k]}")
print("; ".join(bad) or "puts and gets on every NI, no fault")
sys.exit(1 if bad else 0)
PY
}
expect "counters: puts and gets on every NI, no DMA fault" counters_ok
vm_finish
