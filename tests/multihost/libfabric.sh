#!/usr/bin/env bash
# Issue 17: the same fabric across hosts with its link over libfabric (`transport =
# "libfabric:tcp"`: reliable-datagram endpoints of libfabric's tcp provider, device/src/link/
# ofi.rs) instead of the io_uring TCP link. Two network namespaces joined by a veth, one
# daemon in each, as tests/multihost/run.sh; the ranks and checks are the same programs:
# point-to-point, put/get, many-to-one, collectives done in the network with members on both
# hosts; a daemon killed under pending operations (they fail within 1 s) and restarted (it
# rejoins: its new HELLO epoch tells the other side it is a new run). Needs root and
# libfabric1 (tests/setup installs it for the provider; this installs it if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source-path=SCRIPTDIR source=lib.bash
. tests/multihost/lib.bash

pass() { echo "ok: $*"; }

if ! ldconfig -p | grep -q 'libfabric\.so\.1 '; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm libfabric1 >/dev/null
fi
MH_TRANSPORT=libfabric:tcp mh_setup
pass "two daemons linked over libfabric (provider tcp) across the veth"

mh_ranks integrity a:0 b:3
pass "point-to-point over libfabric: 0 B to 64 MiB checked both ways, truncation"
mh_ranks put-get a:0 b:3
pass "put/get over libfabric"
mh_ranks many-to-one a:1 b:4 a:2 b:5
pass "many-to-one over libfabric, four ranks on alternating hosts"
for s in vectors combines network-done; do
  MH_RANK_BIN=ni-test-coll mh_ranks "$s" a:1 b:4 a:2 b:5
  pass "collectives over libfabric: $s, four ranks on alternating hosts"
done

# A daemon killed under a pending receive and send, then mid-collective; restarted, it
# rejoins (its new HELLO epoch tells the other side it is a new run).
D=$MH_DIR
mh_kill_rejoin cross-fault b2
pass "daemon killed: host a's pending operations fail within 1 s; restarted, it rejoins over libfabric"
mh_kill_rejoin cross-coll-fault b3
pass "daemon killed mid-collective: the barrier on host a fails within 1 s; restarted, it rejoins over libfabric"

ip netns exec "$MH_NA" "$MH_BIN/ni-ctl" --run-dir "$D/a" hosts >"$D/hosts.txt" 2>&1 || true
grep -q "linked over libfabric:tcp" "$D/hosts.txt" && grep -qE "^b +up" "$D/hosts.txt" ||
  mh_fail "ni-ctl hosts on a: $(cat "$D/hosts.txt")"
pass "ni-ctl hosts: linked over libfabric:tcp, host b up"
# The restarted daemon rightly warns of the sockets its killed predecessor left behind.
if grep -E " (WARN|ERROR) " "$D/a.log" "$D/b.log"; then
  mh_fail "WARN/ERROR in the daemons' logs above"
fi
if grep -E " (WARN|ERROR) " "$D/b2.log" "$D/b3.log" | grep -v "removing stale socket"; then
  mh_fail "WARN/ERROR in the restarted daemon's log above"
fi
pass "daemon logs free of WARN/ERROR"
echo "multihost over libfabric: all checks passed (logs in $D)"
