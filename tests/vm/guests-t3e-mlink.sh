#!/usr/bin/env bash
# VM test (issue 13): a driver written from the seeds alone, in C, drives two guests' NIs
# through the T3E E-register window, the SSD-T90 router registers (special routing) and the
# METRO MLINK block in BAR0 mapped by VFIO — no libni. Each rank defines a message queue
# (MQCW Tail 1, Limit 3, Threshold 0) in segment 1 of a buffer mapped for the NI's DMA and
# exposes an MLINK window in SRAM; the ranks find each other by MLINK NOOPs (the reply's status
# byte shows EXPOSED). Rank 0 SENDs three messages from E registers 8..15 into rank 1's queue:
# two accepted (ERS FULL), the third rejected at Tail = Limit (FULL_SR); rank 1 checks both,
# drains and resets its queue, and rank 0 issues the same SEND again without reloading the E
# registers (FULL), which rank 1 checks in slot 1. Rank 0 SGETs R_PHYS of its own router and,
# after SPUTting the peer router's R_SGET_RTRN, of the peer's (000000 and 000001 on the default
# 2x1x1 torus). Both ranks MLINK WRITE 4 KiB into the peer's window, READ it back and compare
# every byte and the CHECKSUMS. Afterwards `ni-ctl counters` must show the queue traffic at
# NI 1, the SENDs and MLINK ACKs at NI 0, and no access error, refused or failed command.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
bin="$(mktemp -d "${TMPDIR:-/tmp}/ni-t3e-mlink-c.XXXXXX")"
trap 'rm -rf "$bin"' EXIT
# Static: the guests' initramfs has no libc.
cc -std=c99 -O2 -Wall -Werror -static -I "$NI_REPO/device/abi/include" \
    -o "$bin/t3e_mlink" "$NI_REPO/libni/examples/c/t3e_mlink.c" ||
    ni_die "building libni/examples/c/t3e_mlink.c (static) failed: needs gcc and libc6-dev"
# The default torus for two NIs is 1x2x1 (ni-ctl topology), NI 1 at Y = 1: one hop +Y from
# rank 0, back by -Y.
vm_run --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"" \
    "$bin/t3e_mlink" --deltas 0,1,0,0,0,0 --return 0,-1,0,0,0,0 \
    --phys-self 000000 --phys-peer 000100

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for g in 0 1; do
    expect "guest $g: BAR0 mapped through VFIO" has "^\[guest$g ni$g\] t3e_mlink: NI [0-9a-f:.]+, BAR0 mapped$"
    expect "guest $g: rank $g of 2" has "^\[guest$g ni$g\] t3e_mlink: rank $g of 2$"
    expect "guest $g: MLINK window exposed" \
        has "^\[guest$g ni$g\] t3e_mlink rank $g: MLINK window exposed: SRAM 0x100000, 65536 bytes$"
    expect "guest $g: the peer found by NOOP (EXPOSED)" \
        has "^\[guest$g ni$g\] t3e_mlink rank $g: rank $((1 - g)) is up \(NOOP [0-9]+: STATUS 0x[0-9a-f]+: ACK, "
    expect "guest $g: MLINK READ back every byte" \
        has "^\[guest$g ni$g\] t3e_mlink rank $g: MLINK READ of 4096 bytes from rank $((1 - g)) .* every byte as written$"
    expect "guest $g: NOOP status bytes PRESENT and EXPOSED" \
        has "^\[guest$g ni$g\] t3e_mlink rank $g: MLINK NOOP to rank $((1 - g)): status byte0 0x[0-9a-f]{2} \(PRESENT .*EXPOSED\), byte1 0x00; "
done
expect "guest 0: messages 0 and 1 accepted, message 2 rejected" \
    has '^\[guest0 ni0\] t3e_mlink rank 0: SEND of message 2 to rank 1: ERS FULL_SR \(queue full: message not accepted\)$'
expect "guest 0: message 2 sent again without reloading, accepted" \
    has '^\[guest0 ni0\] t3e_mlink rank 0: SEND of message 2 again \(no reload\): ERS FULL \(accepted\)$'
expect "guest 0: R_PHYS of its own router by SGET is 000000" \
    has '^\[guest0 ni0\] t3e_mlink rank 0: R_PHYS of own router \(deltas \(\+0,\+0,\+0,\+0,\+0,\+0\)\): 000000$'
expect "guest 0: R_PHYS of rank 1's router by special routing is 000100" \
    has "^\[guest0 ni0\] t3e_mlink rank 0: R_PHYS of rank 1's router \(deltas \(\+0,\+1,\+0,\+0,\+0,\+0\), return \(\+0,-1,\+0,\+0,\+0,\+0\)\): 000100$"
expect "guest 1: messages 0 and 1 bit for bit, then message 2 after the reset" \
    has '^\[guest1 ni1\] t3e_mlink rank 1: message 2, sent again without reloading, in slot 1 bit for bit '
expect "guest 0: OK (3 sends, 1 rejected, 1 resent, 2 SGETs, MLINK write+read)" \
    has '^\[guest0 ni0\] t3e_mlink rank 0: OK \(sends 3, rejected 1, resent 1, sget 2, mlink write\+read 4096 bytes\)$'
expect "guest 1: OK (3 received, 1 queue reset, MLINK write+read)" \
    has '^\[guest1 ni1\] t3e_mlink rank 1: OK \(received 3, queue resets 1, mlink write\+read 4096 bytes\)$'
printf '%s\n' "$OUT" | grep -E 't3e_mlink rank [01]: (OK|FAIL|R_PHYS|SEND)' | sed 's/^/    /'
counters_ok() {
    python3 - "$LOG/counters.json" <<'PY'
import json, sys
nis = {n["node"]: n["counters"] for n in json.load(open(sys.argv[1]))["counters"]}
ok = True
# At least: the queue traffic at rank 1's NI (2 stored, 1 rejected, 1 stored again), the SENDs
# (3 and the one issued again), the special-routing SPUTs (own and rank 1's R_SGET_RTRN) and
# SGETs (both R_PHYS) and MLINK ACKs (NOOPs, flags, WRITE, READ) at rank 0's NI.
at_least = {
    1: {"mq_stored": 3, "mq_rejected": 1},
    0: {"t3e_sends": 4, "t3e_sputs": 2, "t3e_sgets": 2, "mlink_acks": 3},
}
# Nothing went wrong on either NI: every access of the right width, no E-register command
# refused or failed, no STORE into a busy register or LOAD of an empty one, every MLINK
# operation that reached its target answered ACK with good checksums.
none = ["bad_accesses", "t3e_refused", "t3e_failed", "t3e_store_busy", "t3e_load_empty",
        "mlink_nacks", "mlink_header_errors", "mlink_data_errors"]
for i in (0, 1):
    c = nis.get(i)
    if c is None:
        print(f"NI {i}: no counters", file=sys.stderr)
        ok = False
        continue
    print(f"NI {i}: " + " ".join(f"{k}={c.get(k)}" for k in
          ["t3e_sends", "t3e_sputs", "t3e_sgets", "mq_sends", "mq_stored", "mq_rejected",
           "mlink_ops", "mlink_acks", "mlink_nacks", "mlink_unreachable", "t3e_refused",
           "t3e_failed", "bad_accesses"]))
    for k, v in at_least.get(i, {}).items():
        if not isinstance(c.get(k), int) or c[k] < v:
            print(f"NI {i}: {k} = {c.get(k)}, expected at least {v}", file=sys.stderr)
            ok = False
    for k in none:
        if c.get(k) != 0:
            print(f"NI {i}: {k} = {c.get(k)}, expected 0", file=sys.stderr)
            ok = False
sys.exit(0 if ok else 1)
PY
}
expect "ni-ctl counters: 3 stored and 1 rejected at NI 1; 4 SENDs, 2 SPUTs, 2 SGETs and MLINK ACKs from NI 0; no errors" \
    counters_ok
vm_finish
