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

# A daemon killed under a pending receive and send; restarted, it rejoins.
D=$MH_DIR
mh_rank a 0 cross-fault "$D/kill.a.out"
ra=$MH_RANK_PID
mh_rank b 3 cross-fault "$D/kill.b.out"
rb=$MH_RANK_PID
mh_wait_for "$D/kill.a.out" "^waiting"
mh_wait_for "$D/kill.b.out" "^waiting"
sleep 0.3
killed=$(date +%s.%N)
kill -9 "$MH_PID_b"
mh_wait_for "$D/kill.a.out" "^failed" 5
while read -r _ at why; do
  dt=$(echo "$at - $killed" | bc -l)
  echo "kill: host a's pending operation failed $(printf %.3f "$dt") s after host b's daemon died ($why)"
  [ "$(echo "$dt <= 1.0" | bc -l)" = 1 ] || mh_fail "failed $dt s after the kill (bound: 1 s)"
done < <(grep '^failed' "$D/kill.a.out")
wait "$rb" || true
mh_daemon b b2
mh_wait_for "$D/b2.log" "host joined the fabric"
mh_rank b 3 cross-rejoin "$D/rejoin.b.out"
rb=$MH_RANK_PID
wait "$ra" || mh_fail "after the restart, rank on a: $(tail -n 20 "$D/kill.a.out")"
wait "$rb" || mh_fail "after the restart, new rank on b: $(tail -n 20 "$D/rejoin.b.out")"
grep -q "^ok cross-fault" "$D/kill.a.out" || mh_fail "rank on a: $(tail -n 5 "$D/kill.a.out")"
pass "daemon killed: host a's pending operations fail within 1 s; restarted, it rejoins over libfabric"

ip netns exec "$MH_NA" "$MH_BIN/ni-ctl" --run-dir "$D/a" hosts >"$D/hosts.txt" 2>&1 || true
grep -q "linked over libfabric:tcp" "$D/hosts.txt" && grep -qE "^b +up" "$D/hosts.txt" ||
  mh_fail "ni-ctl hosts on a: $(cat "$D/hosts.txt")"
pass "ni-ctl hosts: linked over libfabric:tcp, host b up"
# The restarted daemon rightly warns of the sockets its killed predecessor left behind.
if grep -E " (WARN|ERROR) " "$D/a.log" "$D/b.log"; then
  mh_fail "WARN/ERROR in the daemons' logs above"
fi
if grep -E " (WARN|ERROR) " "$D/b2.log" | grep -v "removing stale socket"; then
  mh_fail "WARN/ERROR in the restarted daemon's log above"
fi
pass "daemon logs free of WARN/ERROR"
echo "multihost over libfabric: all checks passed (logs in $D)"
