# shellcheck shell=bash
# Sourced by tests/multihost/run.sh, tests/vm/guests-multihost.sh and tests/bench/multihost.sh:
# two "hosts" a and b as network namespaces joined by a veth pair (10.77.0.1 and .2), each
# with its own ni-device (--fabric, --host) whose run directory is $MH_DIR/<host>.
#   mh_setup [DIRECT]     namespaces, veth, fabric.toml (MH_TRANSPORT: its `transport`,
#                         default the io_uring TCP link; MH_NIS NIs per host, default 3:
#                         host a NIs 0-2, b 3-5; partitions MH_PARTITIONS, TOML, default
#                         "pair" = [0, 3], "four" = [1, 4, 2, 5]), both daemons (--direct
#                         DIRECT, default isolated), both linked
#   mh_daemon HOST [LOG]  (re)start HOST's daemon, log $MH_DIR/LOG.log (default HOST)
#   mh_ns HOST            the namespace of HOST
#   mh_cleanup            kill what runs in the namespaces, delete them (an EXIT trap)
# Needs root; installs iproute2, nftables and bc from bookworm if missing. MH_BIN: the
# binaries (default target/release).

MH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MH_BIN="${MH_BIN:-$MH_ROOT/target/release}"
MH_ID=$$
MH_NA=ni-mh-a-$MH_ID
MH_NB=ni-mh-b-$MH_ID
MH_VA=nimha$MH_ID
MH_VB=nimhb$MH_ID
MH_DIRECT=isolated
MH_DIR=""
MH_NIS="${MH_NIS:-3}"
if [ -z "${MH_PARTITIONS:-}" ]; then
  MH_PARTITIONS='[[partition]]
name = "pair"
nodes = [0, 3]

[[partition]]
name = "four"
nodes = [1, 4, 2, 5]'
fi
MH_PIDS=()

mh_fail() { echo "FAIL: $*" >&2; exit 1; }

mh_ns() { [ "$1" = a ] && echo "$MH_NA" || echo "$MH_NB"; }

mh_cleanup() {
  local p
  for p in "${MH_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  ip netns pids "$MH_NA" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  ip netns pids "$MH_NB" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  ip netns del "$MH_NA" 2>/dev/null || true
  ip netns del "$MH_NB" 2>/dev/null || true
}

# mh_wait_for FILE PATTERN [SECONDS]
mh_wait_for() {
  local t=$((${3:-20} * 10))
  while ! grep -q -- "$2" "$1" 2>/dev/null; do
    t=$((t - 1))
    [ $t -gt 0 ] || mh_fail "no '$2' in $1 within ${3:-20} s: $(tail -n 5 "$1" 2>/dev/null)"
    sleep 0.1
  done
}

mh_daemon() {
  local h=$1 log=${2:-$1}
  ip netns exec "$(mh_ns "$h")" env NI_LOG=info NO_COLOR=1 "$MH_BIN/ni-device" \
    --fabric "$MH_DIR/fabric.toml" --host "$h" --run-dir "$MH_DIR/$h" --direct "$MH_DIRECT" \
    >"$MH_DIR/$log.log" 2>&1 &
  eval "MH_PID_$h=$!"
  disown "$!"
  MH_PIDS+=($!)
}

# mh_rank HOST NI SCENARIO OUT: one rank in HOST's namespace on NI, in the background; its
# pid in MH_RANK_PID (MH_RANK_BIN: the program, default ni-test-rank).
mh_rank() {
  ip netns exec "$(mh_ns "$1")" env NI_SOCKET="$MH_DIR/$1/ni$2.sock" timeout 120 \
    "$MH_BIN/${MH_RANK_BIN:-ni-test-rank}" "$3" >"$4" 2>&1 &
  MH_RANK_PID=$!
}

# mh_ranks SCENARIO HOST:NI...: one rank per HOST:NI, all must print "ok SCENARIO".
mh_ranks() {
  local s=$1
  shift
  local pids=() outs=() i=0
  for hn in "$@"; do
    local out="$MH_DIR/$s.$i.out"
    mh_rank "${hn%%:*}" "${hn##*:}" "$s" "$out"
    pids+=("$MH_RANK_PID")
    outs+=("$out")
    i=$((i + 1))
  done
  for j in "${!pids[@]}"; do
    wait "${pids[$j]}" || mh_fail "$s: rank $j failed: $(tail -n 20 "${outs[$j]}")"
    grep -q "^ok $s" "${outs[$j]}" || mh_fail "$s: rank $j: $(tail -n 5 "${outs[$j]}")"
  done
}

# mh_kill_rejoin SCENARIO NEWLOG: ranks running SCENARIO (cross-fault, cross-coll-fault) on
# a:0 and b:3; once both wait, host b's daemon is killed (SIGKILL). What host a's rank waited
# for must fail within 1 s (printed), b's rank must see its daemon gone; b's daemon restarts
# (log NEWLOG.log), and a new rank there (cross-rejoin) and a's rank exchange and barrier.
mh_kill_rejoin() {
  local s=$1 log=$2 out="$MH_DIR/$1" ra rb killed dt at why
  mh_rank a 0 "$s" "$out.a.out"
  ra=$MH_RANK_PID
  mh_rank b 3 "$s" "$out.b.out"
  rb=$MH_RANK_PID
  mh_wait_for "$out.a.out" "^waiting"
  mh_wait_for "$out.b.out" "^waiting"
  sleep 0.3
  killed=$(date +%s.%N)
  kill -9 "$MH_PID_b"
  mh_wait_for "$out.a.out" "^failed" 5
  while read -r _ at why; do
    dt=$(echo "$at - $killed" | bc -l)
    echo "$s: host a's pending operation failed $(printf %.3f "$dt") s after host b's daemon died ($why)"
    [ "$(echo "$dt <= 1.0" | bc -l)" = 1 ] || mh_fail "$s: failed $dt s after the kill (bound: 1 s)"
  done < <(grep '^failed' "$out.a.out")
  wait "$rb" || true
  grep -q "own daemon gone" "$out.b.out" ||
    mh_fail "$s: rank on b did not see its daemon die: $(tail -n 5 "$out.b.out")"
  mh_daemon b "$log"
  mh_wait_for "$MH_DIR/$log.log" "host joined the fabric"
  mh_rank b 3 cross-rejoin "$out.rejoin.out"
  rb=$MH_RANK_PID
  wait "$ra" || mh_fail "$s: after the restart, rank on a: $(tail -n 20 "$out.a.out")"
  wait "$rb" || mh_fail "$s: after the restart, new rank on b: $(tail -n 20 "$out.rejoin.out")"
  grep -q "^ok $s" "$out.a.out" || mh_fail "$s: rank on a: $(tail -n 5 "$out.a.out")"
}

mh_setup() {
  MH_DIRECT=${1:-isolated}
  [ "$(id -u)" = 0 ] || mh_fail "network namespaces need root (ip netns); run as root"
  local need=()
  command -v ip >/dev/null || need+=(iproute2)
  command -v nft >/dev/null || need+=(nftables)
  command -v bc >/dev/null || need+=(bc)
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm "${need[@]}" >/dev/null
  fi
  [ -x "$MH_BIN/ni-device" ] || (cd "$MH_ROOT" && cargo build --workspace --release -q)
  MH_DIR=$(mktemp -d /tmp/ni-multihost.XXXXXX)
  trap mh_cleanup EXIT
  ip netns add "$MH_NA"
  ip netns add "$MH_NB"
  ip link add "$MH_VA" type veth peer name "$MH_VB"
  ip link set "$MH_VA" netns "$MH_NA"
  ip link set "$MH_VB" netns "$MH_NB"
  ip -n "$MH_NA" addr add 10.77.0.1/24 dev "$MH_VA"
  ip -n "$MH_NB" addr add 10.77.0.2/24 dev "$MH_VB"
  ip -n "$MH_NA" link set lo up
  ip -n "$MH_NB" link set lo up
  ip -n "$MH_NA" link set "$MH_VA" up
  ip -n "$MH_NB" link set "$MH_VB" up
  local transport=""
  [ -z "${MH_TRANSPORT:-}" ] || transport="transport = \"$MH_TRANSPORT\""
  cat >"$MH_DIR/fabric.toml" <<TOML
$transport

[[host]]
name = "a"
link = "10.77.0.1:7470"
nis = $MH_NIS

[[host]]
name = "b"
link = "10.77.0.2:7470"
nis = $MH_NIS

$MH_PARTITIONS
TOML
  mh_daemon a
  mh_daemon b
  mh_wait_for "$MH_DIR/a.log" "host joined the fabric"
  mh_wait_for "$MH_DIR/b.log" "host joined the fabric"
}
