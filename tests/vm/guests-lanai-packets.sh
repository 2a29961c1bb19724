#!/usr/bin/env bash
# VM test (issue 12): a Lanai X "firmware" written from the Lanai X spec alone, in C, drives
# two guests' NIs through BAR0 mapped by VFIO — no libni. Each guest runs App. C's structure:
# hardware event dispatch (§15: select blocks, DISPATCH_STATE/DISPATCH_INDEX, a handler
# table), port 0 in Myrinet mode through PORT_ADDR/PORT_DATA (§13), receive buffers issued on
# P0_NO_BACKUP and RPDs read from the RPL (§9), packets sent as a route SPD and a payload SPD
# and reclaimed on P0_PACKET_SENT (§10). Each rank sends its peer packets of varying length
# across the partition's crossbar and checks every one it receives: CRC zeroes, RPD flags,
# length, sender, order and every byte. A rank sends data only once its peer's HELLO showed
# the peer's port enabled (the crossbar drops packets for a port not yet enabled); each
# reports the HELLOs it sent and received. Afterwards `ni-ctl counters` must account for
# every packet on both NIs: the data packets exactly once each way, the HELLOs, and as the
# only drops the HELLOs sent before the peer's program had started.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

PACKETS=200
vm_prepare
bin="$(mktemp -d "${TMPDIR:-/tmp}/ni-lanai-c.XXXXXX")"
trap 'rm -rf "$bin"' EXIT
# Static: the guests' initramfs has no libc.
cc -std=c99 -O2 -Wall -Werror -static -I "$NI_REPO/device/abi/include" \
    -o "$bin/lanai_packets" "$NI_REPO/libni/examples/c/lanai_packets.c" ||
    ni_die "building libni/examples/c/lanai_packets.c (static) failed: needs gcc and libc6-dev"
vm_run --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$bin/lanai_packets" "$PACKETS"

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for g in 0 1; do
    expect "guest $g: BAR0 mapped through VFIO" has "^\[guest$g ni$g\] lanai-packets: NI [0-9a-f:.]+, BAR0 mapped$"
    expect "guest $g: rank $g of 2" has "^\[guest$g ni$g\] lanai-packets: rank $g of 2$"
    expect "guest $g: start-up HELLOs counted" \
        has "^\[guest$g ni$g\] lanai-packets: hellos rank $g: [0-9]+ sent, [0-9]+ received$"
    expect "guest $g: $PACKETS packets sent, $PACKETS received and checked" \
        has "^\[guest$g ni$g\] lanai-packets: ok rank $g: $PACKETS sent, $PACKETS received, checked; .* per packet$"
done
printf '%s\n' "$OUT" | grep -E 'lanai-packets: (hellos|ok|FAIL)' | sed 's/^/    /'
# "S R" for guest $1: the HELLOs it sent (retired from its FIFO) and received.
hellos() {
    sed -nE "s/^\[guest$1 ni$1\] lanai-packets: hellos rank $1: ([0-9]+) sent, ([0-9]+) received$/\1 \2/p" <<<"$OUT"
}
counters_ok() {
    local h0 h1
    h0="$(hellos 0)" h1="$(hellos 1)"
    [[ -n $h0 && -n $h1 ]] || { echo "no hellos lines in the output" >&2; return 1; }
    # shellcheck disable=SC2086  # "S R" splits into two arguments on purpose
    python3 - "$LOG/counters.json" "$PACKETS" $h0 $h1 <<'PY'
import json, sys
packets = int(sys.argv[2])
hs = {0: (int(sys.argv[3]), int(sys.argv[4])), 1: (int(sys.argv[5]), int(sys.argv[6]))}
nis = {n["node"]: n["counters"] for n in json.load(open(sys.argv[1]))["counters"]}
ok = True
for i in (0, 1):
    c = nis[i]
    sent, rcvd = hs[i]
    peer_rcvd = hs[1 - i][1]
    print(f"NI {i}: lanai_packets_sent={c.get('lanai_packets_sent')} "
          f"lanai_packets_received={c.get('lanai_packets_received')} "
          f"lanai_route_dropped={c.get('lanai_route_dropped')} "
          f"lanai_blocked_dropped={c.get('lanai_blocked_dropped')} "
          f"lanai_rx_dropped={c.get('lanai_rx_dropped')}; HELLOs sent {sent}, received {rcvd}")
    want = {
        # Every data packet once each way, plus the start-up HELLOs.
        "lanai_packets_sent": packets + sent,
        "lanai_packets_received": packets + rcvd,
        # The crossbar drops only HELLOs sent before the peer's program enabled its port:
        # those of this NI's HELLOs the peer never received.
        "lanai_route_dropped": sent - peer_rcvd,
        "lanai_blocked_dropped": 0,
        "lanai_rx_dropped": 0,
        "lanai_send_faults": 0,
        "lanai_send_overflows": 0,
        "lanai_bad_buffers": 0,
    }
    for k, v in want.items():
        if c.get(k) != v:
            print(f"NI {i}: {k} = {c.get(k)}, expected {v}", file=sys.stderr)
            ok = False
sys.exit(0 if ok else 1)
PY
}
expect "ni-ctl counters: $PACKETS packets each way on both NIs, every drop a start-up HELLO" counters_ok
vm_finish
