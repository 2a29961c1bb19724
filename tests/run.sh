#!/usr/bin/env bash
# The project's test command: everything CI runs, on a fresh machine too.
#   tests/run.sh          format, lint, unit + integration tests, VM tests
#   NI_SKIP_VM=1 tests/run.sh   everything but the QEMU guests (say so loudly)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "host packages the tests use (from bookworm)"
need=()
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v gcc >/dev/null || need+=(gcc)
# libfabric: the provider (libni/fi) and the daemons' libfabric link (device/src/link/ofi.rs);
# its headers for the layout test, fi_info/fi_pingpong, and Open MPI for the MPI programs that
# run over the provider.
[ -e /usr/include/rdma/fabric.h ] || need+=(libfabric-dev)
command -v fi_pingpong >/dev/null || need+=(libfabric-bin)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -t bookworm "${need[@]}"
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets -q -- -D warnings

step "cargo build --release (binaries the VM tests and benchmarks use)"
cargo build --workspace --release -q

step "unit and integration tests"
cargo test --workspace -q

# The same point-to-point and collective suites with the direct path off: every message and
# collective through the daemon's fabric (the default run takes the partition window).
step "point-to-point and collectives again over the fabric path (ni-device --direct off)"
NI_TEST_DIRECT=off cargo test -q -p ni-tests --test p2p --test collectives --test direct --test fi_provider

# And with the window guests use (one file every member maps whole; the default gives each
# writer its own file): the same layout and protocol, other mappings. This pass also goes
# without membarriers, as guests' window writers do: every writer fences, and the NI's lock
# is a plain mutex (the default pass covers the membarrier paths).
step "point-to-point and collectives again over a shared window (ni-device --direct shared), without membarriers"
NI_TEST_DIRECT=shared NI_MEMBARRIER=off cargo test -q -p ni-tests --test p2p --test collectives --test direct --test fi_provider

# Unmodified MPI programs (our p2p/coll/rma suites and mpi4py's own tests) under Open MPI's
# pml cm + mtl ofi and MPICH's ch4:ofi on the provider "ni"; it installs Open MPI and mpi4py
# from bookworm and MPICH from PyPI itself.
step "MPI programs over the libfabric provider: tests/mpi/run.sh"
bash tests/mpi/run.sh

# One fabric across hosts: two network namespaces, a daemon in each, linked over a veth.
step "fabric across hosts: tests/multihost/run.sh"
bash tests/multihost/run.sh
step "fabric across hosts, linked over libfabric: tests/multihost/libfabric.sh"
bash tests/multihost/libfabric.sh

if [ "${NI_SKIP_VM:-0}" = 1 ]; then
  step "VM tests SKIPPED because NI_SKIP_VM=1: QEMU guests were not booted"
else
  for t in tests/vm/*.sh; do
    [ -e "$t" ] || continue
    step "VM test $t"
    bash "$t"
  done
fi
step "all tests passed"
