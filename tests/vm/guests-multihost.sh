#!/usr/bin/env bash
# VM test (issue 17): one fabric across hosts, a QEMU guest on each. Hosts a and b are network
# namespaces, each with its own ni-device (--fabric, --host), linked over a veth
# (tests/multihost/lib.bash); QEMU stays in the root namespace and reaches its daemon's socket
# by path, so everything between the guests crosses the daemons' link.
#  1. Guest 0 on host a's NI 0, guest 1 on host b's NI 3 (partition "pair"): libni over VFIO
#     in each, ping-pong of every size 0 B..1 MiB checked both ways; `ni-ctl nodes` on host a
#     shows NI 3 attached on host b (its daemon asked over the link); the counters of both
#     NIs, gathered from host a, match what the ranks counted.
#  2. Partition "four" = NIs 1, 4, 2, 5: guests on NI 1 (host a) and NI 4 (host b), host
#     processes on NI 2 (a) and NI 5 (b): barriers and allreduces done in the network, every
#     result checked at every rank.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"
# shellcheck source-path=SCRIPTDIR source=../multihost/lib.bash
. "$NI_REPO/tests/multihost/lib.bash"

vm_prepare
# The window kind guests can map, though a partition that spans hosts gets none.
mh_setup shared
# run-guests.sh takes one run directory: the sockets of both daemons, and host a's control.
all="$MH_DIR/all"
mkdir -p "$all"
for n in 0 1 2; do ln -s "$MH_DIR/a/ni$n.sock" "$all/ni$n.sock"; done
for n in 3 4 5; do ln -s "$MH_DIR/b/ni$n.sock" "$all/ni$n.sock"; done
ln -s "$MH_DIR/a/control.sock" "$all/control.sock"

vm_run --run-dir "$all" --ni 0,3 --env NI_VM_LINGER_MS=3000 \
    --on '^stats node=' "\"$NI_CTL\" --json nodes >\"\$NI_LOG_DIR/nodes.json\"" \
    --after "\"$NI_CTL\" --json counters >\"\$NI_LOG_DIR/counters.json\"; \"$NI_CTL\" --json hosts >\"\$NI_LOG_DIR/hosts.json\"" \
    "$GUEST_BIN/ni-vm-rank" pingpong

expect "run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
expect "guest 0 attached over VFIO as rank 0 on NI 0" has "^\[guest0 ni0\] attached: rank 0 of 2 on NI 0 .*\(VFIO\)$"
expect "guest 1 attached over VFIO as rank 1 on NI 3" has "^\[guest1 ni3\] attached: rank 1 of 2 on NI 3 .*\(VFIO\)$"
for g in "guest0 ni0" "guest1 ni3"; do
    expect "$g: pingpong 0 B..1 MiB checked" has "^\[$g\] pingpong: [0-9]+ sizes 0..=1 MiB checked both ways"
    expect "$g: ok pingpong" has "^\[$g\] ok pingpong$"
done
fabric_seen() {
    python3 - "$LOG/nodes.json" "$LOG/hosts.json" <<'PY'
import json, sys
nodes = {n["node"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
hosts = json.load(open(sys.argv[2]))
ok = True
for ni, host in ((0, "a"), (3, "b")):
    n = nodes.get(ni, {})
    print(f"NI {ni}: host={n.get('host')} state={n.get('state')} client={n.get('client_kind')} dma_regions={n.get('dma_regions')}")
    ok &= n.get("host") == host and n.get("state") == "attached" and bool(n.get("dma_regions"))
c = dict(hosts["counters"])
print(f"link: {c.get('link_bytes_sent')} bytes sent, {c.get('link_bytes_rcvd')} received, {c.get('remote_sends_out')} sends out, {c.get('remote_sends_in')} in")
ok &= c.get("link_bytes_sent", 0) > 1 << 20 and c.get("link_protocol_errors") == 0
sys.exit(0 if ok else 1)
PY
}
expect "ni-ctl on host a: NI 0 (host a) and NI 3 (host b) attached to their QEMUs; MiBs over the link" fabric_seen
expect "ni-ctl counters (both hosts, from host a) match what the ranks counted" check_counters

vm_run --run-dir "$all" --ni 1,4 --host 2 --host-ni 2,5 "$GUEST_BIN/ni-vm-rank" collectives
expect "collectives: run-guests.sh succeeded (exit $RC)" test "$RC" -eq 0
for r in "guest0 ni1" "guest1 ni4" "host ni2" "host ni5"; do
    expect "$r: 20 barriers" has "^\[$r\] collectives: 20 barriers in "
    expect "$r: allreduce f64 sum / i64 min / u64 xor checked over 4 ranks" \
        has "^\[$r\] collectives: allreduce f64 sum \(100003 elements, .*\), i64 min, u64 xor checked over 4 ranks$"
done
if grep -E " (WARN|ERROR) " "$MH_DIR/a.log" "$MH_DIR/b.log" >&2; then
    failt "WARN/ERROR in the daemons' logs (above)"
else
    pass "daemons' logs free of WARN/ERROR"
fi
cp "$MH_DIR"/a.log "$LOG/daemon-a.log"
cp "$MH_DIR"/b.log "$LOG/daemon-b.log"
vm_finish
