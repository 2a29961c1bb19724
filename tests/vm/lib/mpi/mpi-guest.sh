#!/bin/sh
# Runs in both guests of tests/vm/guests-mpi.sh (run-guests.sh --net, the Open MPI overlay of
# qemu-patches/mpi-overlay.sh): one MPI rank per guest, each on its guest's NI.
#   guest 1 (NI_MPI_GUEST=1): serves ni-rsh on TCP port 2222 (busybox nc -ll -e ni-rshd) so
#     that mpirun can start its orted there, and exits with the status of the last of the
#     orted sessions it expects (one per command), or fails when the launcher says it is done
#     before they all came;
#   guest 0 (NI_MPI_GUEST=0): waits for guest 1's server, then runs each argument as one
#     `mpirun -n 2` command line (ranks 0 here, 1 there) over pml cm + mtl ofi + provider ni.
# Usage: mpi-guest.sh 'PROGRAM ARGS' ['PROGRAM ARGS'...]   (the same in both guests)
set -u
me="${NI_MPI_GUEST:?NI_MPI_GUEST must be 0 or 1}"
hostname "ni-guest$me"
printf '127.0.0.1 localhost\n169.254.77.1 ni-guest0\n169.254.77.2 ni-guest1\n' >/etc/hosts
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ "$me" = 1 ]; then
    nc -ll -p 2222 -e /usr/local/bin/ni-rshd &
    server=$!
    t=0
    while [ "$(cat /tmp/ni-rsh.done 2>/dev/null | wc -l)" -lt $# ]; do
        if [ -f /tmp/ni-rsh.stop ]; then
            echo "mpi-guest: the launcher finished after $(cat /tmp/ni-rsh.done 2>/dev/null | wc -l) of $# orted sessions"
            exit 1
        fi
        sleep 1
        t=$((t + 1))
        if [ $t -ge 1800 ]; then
            echo "mpi-guest: $(cat /tmp/ni-rsh.done 2>/dev/null | wc -l) of $# orted sessions ended within 1800 s"
            exit 1
        fi
    done
    kill "$server"
    rc=$(tail -n 1 /tmp/ni-rsh.done)
    echo "mpi-guest: $# orted sessions served; the last exited $rc"
    [ "$(grep -cv '^0$' /tmp/ni-rsh.done)" -eq 0 ] || exit 1
    exit 0
fi

t=0
until [ "$(echo ni-ping | nc -w 2 ni-guest1 2222 2>/dev/null)" = pong ]; do
    sleep 1
    t=$((t + 1))
    [ $t -lt 900 ] || { echo "mpi-guest: ni-rshd on ni-guest1 did not answer within 900 s"; exit 1; }
done
echo "mpi-guest: ni-rshd on ni-guest1 answers"
rc=0
for cmd in "$@"; do
    echo "mpi-guest: mpirun -n 2 $cmd"
    # shellcheck disable=SC2086  # cmd is a command line: split on purpose
    mpirun --host ni-guest0:1,ni-guest1:1 -n 2 \
        --mca plm_rsh_agent /usr/local/bin/ni-rsh \
        --mca oob_tcp_if_include 169.254.77.0/24 \
        --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ni \
        --mca pml_base_verbose 10 --mca mtl_base_verbose 10 \
        -x FI_PROVIDER_PATH=/usr/local/lib/ni-fi -x FI_LOG_LEVEL=warn \
        $cmd </dev/null 2>&1
    r=$?
    echo "mpi-guest: mpirun $cmd exited $r"
    [ $r -eq 0 ] || rc=$r
done
echo ni-done | nc -w 5 ni-guest1 2222 >/dev/null 2>&1
exit $rc
