#!/usr/bin/env bash
# VM test (issue 16): a guest survives a crash of ni-device without a reboot.
# A guest process blocks in a receive; the daemon is SIGKILLed and a new one started on the
# same run directory. The guest's receive fails with "daemon gone" (the heartbeat stops), and
# the old vfio-user connection is dead for good (QEMU does not reconnect), so the host re-plugs
# the NI: QMP device_del (the guest kernel asks for the function back, libni lets go of it),
# then device_add of the same socket, now served by the new daemon. The same guest process
# attaches again and sends a checked message to itself through the new daemon.
# Needs the patched QEMU (device_del; qemu-patches/README.md, "Hot-plug and unplug").
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
run_dir="$(mktemp -d "${TMPDIR:-/tmp}/ni-restart.XXXXXX")"
vm_daemon "$run_dir" 1 "$run_dir/daemon.log"
dpid=$DAEMON_PID
disown "$dpid" # its SIGKILL is the test, not news for the shell
cleanup() {
    kill -KILL "$dpid" 2>/dev/null || true
    [[ ! -s $run_dir/new.pid ]] || kill "$(cat "$run_dir/new.pid")" 2>/dev/null || true
    sleep 0.5
    rm -rf "$run_dir"
}
trap cleanup EXIT
QMP="$NI_QEMU_DIR/qmp.py"
restart="set -e
kill -KILL $dpid
while kill -0 $dpid 2>/dev/null; do sleep 0.05; done
setsid '$DAEMON_BIN' --nodes 1 --run-dir '$run_dir' --direct shared 2>'$run_dir/daemon2.log' </dev/null >/dev/null &
echo \$! >'$run_dir/new.pid'
for i in \$(seq 100); do [ -S '$run_dir/ni0.sock' ] && '$NI_CTL' --run-dir '$run_dir' status >/dev/null 2>&1 && break; sleep 0.1; done
echo 'restarted ni-device'"
# Only once the guest saw the daemon die: re-plug onto the new one.
replug="python3 '$QMP' --timeout 120 \"\$NI_LOG_DIR/guest0.qmp\" replug ni0 ni_rp0 '$run_dir/ni0.sock'"
NI_QEMU_VARIANT=patched vm_run -n 1 --run-dir "$run_dir" --env NI_VM_REATTACH=1 \
    --on '^waiting$' "$restart" --on '^gone after ' "$replug" \
    "$GUEST_BIN/ni-vm-rank" daemon-dies

expect "the guest rank exited 0" test "$RC" -eq 0
expect "the first daemon was killed while the rank waited" sh -c "! kill -0 $dpid 2>/dev/null"
expect "the blocked receive failed with 'daemon gone' (no heartbeat)" \
    has '^\[guest0 ni0\] gone after [0-9]+ ms: no heartbeat for [0-9]+ ms$'
expect "a new daemon was started on the same run directory" has '^\[hook 0\] restarted ni-device$'
expect "QMP device_del of the dead daemon's NI completed" has '^\[hook 1\] unplugged ni0 in [0-9.]+ s$'
expect "QMP device_add onto the new daemon" has '^\[hook 1\] plugged ni0 \(.*/ni0\.sock\) into ni_rp0$'
expect "the same guest process attached again" \
    has '^\[guest0 ni0\] attached again to NI 0 as rank 0 after [0-9.]+ s$'
expect "a checked message through the new daemon" \
    has '^\[guest0 ni0\] loopback through the new daemon: 2048 bytes checked$'
expect "the new daemon served the guest's QEMU" grep -q 'client attaching' "$run_dir/daemon2.log"
expect "the new daemon logged no WARN or ERROR" sh -c "! grep -aE ' (WARN|ERROR) ' '$run_dir/daemon2.log'"
# Not asserted: while the dead daemon's function is still plugged in, QEMU logs every failed
# access the guest kernel makes to it (thousands of lines a second under TCG); the re-plug is
# what ends that.
echo "QEMU's log: $(wc -l <"$LOG/guest0.log.qemu") lines"
vm_finish
