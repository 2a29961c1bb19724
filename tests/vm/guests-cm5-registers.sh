#!/usr/bin/env bash
# VM test (issue 11): a CM-5 driver written from the NI Programmer's Handbook alone, in C,
# drives two guests' NIs through BAR2 mapped by VFIO — no libni. The guests run a Data
# Network ping-pong (LDR, §2.3/§8.1.3), combines (ADD reduce, forward ADD scan, MAX reduce,
# §4.2) and network-done (§4.2.9), with sync globals (§4.3.1) as barriers; each checks every
# word and that no Bus Error happened, and reports the cost of one trapped register access.
# Afterwards `ni-ctl counters` must show the register-level traffic on both NIs.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

TRIPS=300
vm_prepare
bin="$(mktemp -d "${TMPDIR:-/tmp}/ni-cm5-c.XXXXXX")"
trap 'rm -rf "$bin"' EXIT
# Static: the guests' initramfs has no libc.
cc -std=c99 -O2 -Wall -Werror -static -I "$NI_REPO/device/abi/include" \
    -o "$bin/cm5_registers" "$NI_REPO/libni/examples/c/cm5_registers.c" ||
    ni_die "building libni/examples/c/cm5_registers.c (static) failed: needs gcc and libc6-dev"
vm_run --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$bin/cm5_registers" "$TRIPS"

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for g in 0 1; do
    expect "guest $g: BAR2 mapped through VFIO" has "^\[guest$g ni$g\] cm5-registers: NI [0-9a-f:.]+, BAR2 mapped$"
    expect "guest $g: relative address $g of 2" has "^\[guest$g ni$g\] cm5-registers: rank $g of 2 "
    expect "guest $g: $TRIPS checked round trips, combines and network-done" \
        has "^\[guest$g ni$g\] cm5-registers: ok rank $g: $TRIPS round trips, .* combines ok$"
done
printf '%s\n' "$OUT" | grep -E 'cm5-registers: ok' | sed 's/^/    /'
counters_ok() {
    python3 - "$LOG/counters.json" "$TRIPS" <<'PY'
import json, sys
trips = int(sys.argv[2])
nis = {n["node"]: n["counters"] for n in json.load(open(sys.argv[1]))["counters"]}
ok = True
for i in (0, 1):
    c = nis[i]
    print(f"NI {i}: cm5_dr_sends={c.get('cm5_dr_sends')} cm5_dr_recvs={c.get('cm5_dr_recvs')} "
          f"cm5_combines={c.get('cm5_combines')} bus_errors={c.get('bus_errors')}")
    # Each rank sent and received every message of the ping-pong; 3 combines and a
    # network-done; never a Bus Error.
    if (c.get("cm5_dr_sends") != trips or c.get("cm5_dr_recvs") != trips
            or c.get("cm5_combines") != 4 or c.get("bus_errors") != 0):
        ok = False
sys.exit(0 if ok else 1)
PY
}
expect "ni-ctl counters: the register-level traffic on both NIs, no Bus Error" counters_ok
vm_finish
