#!/usr/bin/env bash
# Cross-host figures (issue 17): ni between two "hosts" — network namespaces a and b, a
# daemon each, linked over a veth (tests/multihost/lib.bash) — beside TCP between the same
# namespaces and Open MPI over its TCP transport between them (ob1 + btl tcp), and Open MPI
# over ni across them, all in one ni-bench run. Rank r runs on host a when r is even, b when
# odd, so every rank's neighbour is on the other host.
#
#   tests/bench/multihost.sh [OUT] [ni-bench options]   (default OUT target/bench/multihost;
#                                                        modes latency bw allreduce, P = 2,4,8)
# Placement: ranks pinned as ni-bench's `split` does, the two daemons' pollers float; on a
# 2-core machine the daemons and ranks share the cores, which the report's load column shows.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-target/bench/multihost}"
shift || true
cargo build --workspace --release -q
# shellcheck source-path=SCRIPTDIR source=../multihost/lib.bash
. tests/multihost/lib.bash

# Host a NIs 0-6, host b 7-13: a partition per rank count, ranks alternating hosts.
MH_NIS=7
MH_PARTITIONS='[[partition]]
name = "p2"
nodes = [0, 7]

[[partition]]
name = "p4"
nodes = [1, 8, 2, 9]

[[partition]]
name = "p8"
nodes = [3, 10, 4, 11, 5, 12, 6, 13]'
mh_setup

# The NIs of partition pP, rank order: read by both launchers below.
nis_of() { case "$1" in 2) echo "0 7" ;; 4) echo "1 8 2 9" ;; 8) echo "3 10 4 11 5 12 6 13" ;; esac; }
for p in 2 4 8; do echo "$(nis_of $p)" >"$MH_DIR/p$p"; done

# NIRUN for ni-bench's ni runs: `launcher -n P --timeout S PROGRAM ARGS...`.
cat >"$MH_DIR/nirun" <<EOS
#!/usr/bin/env bash
set -u
n=\$2; shift 4
read -r -a nis <"$MH_DIR/p\$n"
pids=()
for ((r = 0; r < n; r++)); do
  h=\$([ \$((r % 2)) = 0 ] && echo a || echo b)
  ns=\$([ \$h = a ] && echo $MH_NA || echo $MH_NB)
  if ((r == 0)); then
    ip netns exec "\$ns" env NI_SOCKET="$MH_DIR/\$h/ni\${nis[r]}.sock" NI_RANK=\$r "\$@" &
  else
    ip netns exec "\$ns" env NI_SOCKET="$MH_DIR/\$h/ni\${nis[r]}.sock" NI_RANK=\$r "\$@" >/dev/null &
  fi
  pids+=(\$!)
done
rc=0
for p in "\${pids[@]}"; do wait "\$p" || rc=\$?; done
exit \$rc
EOS
# NIB_RSH: mpirun's "ssh" to a host (its address), i.e. into its namespace.
cat >"$MH_DIR/rsh" <<EOS
#!/usr/bin/env bash
case "\$1" in 10.77.0.1) ns=$MH_NA ;; 10.77.0.2) ns=$MH_NB ;; *) echo "rsh: no host \$1" >&2; exit 255 ;; esac
shift
exec ip netns exec "\$ns" sh -c "\$*"
EOS
# NIB_MPI_WRAPPER: over ni, each MPI rank onto its NI of its host's daemon.
cat >"$MH_DIR/mpi-wrapper" <<EOS
#!/usr/bin/env bash
r=\$OMPI_COMM_WORLD_RANK n=\$OMPI_COMM_WORLD_SIZE
read -r -a nis <"$MH_DIR/p\$n"
h=\$([ \$((r % 2)) = 0 ] && echo a || echo b)
[ "\${NIB_MPI_NI:-0}" = 1 ] && export NI_SOCKET="$MH_DIR/\$h/ni\${nis[r]}.sock"
exec "\$@"
EOS
chmod +x "$MH_DIR/nirun" "$MH_DIR/mpi-wrapper" "$MH_DIR/rsh"

NIB_HOSTS="$MH_NA,$MH_NB" NIB_TCP_BIND=10.77.0.2 NIRUN="$MH_DIR/nirun" \
  NIB_MPI_WRAPPER="$MH_DIR/mpi-wrapper" NIB_RSH="$MH_DIR/rsh" NIB_HOST_ADDRS=10.77.0.1,10.77.0.2 \
  target/release/ni-bench latency bw allreduce --ranks 2,4,8 --placements split \
  --baselines tcp,mpi,mpi-ni --out "$OUT" "$@"
echo "daemon logs: $MH_DIR/a.log $MH_DIR/b.log"
if grep -E " (WARN|ERROR) " "$MH_DIR/a.log" "$MH_DIR/b.log"; then
  echo "WARN/ERROR in the daemons' logs above" >&2
  exit 1
fi
