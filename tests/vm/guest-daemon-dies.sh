#!/usr/bin/env bash
# VM test (issue 18): a guest process blocked in a receive learns that ni-device died.
# The guest has no socket to the daemon (QEMU holds it), so libni goes by the control page's
# HEARTBEAT (device/abi/fastpath.md, "A daemon that dies"): when the rank prints "waiting",
# the daemon is SIGKILLed; the receive must fail with "daemon gone ... no heartbeat" soon
# after (the bound below includes the console and the hook's own delay under TCG).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/vm-test.bash
. "$(dirname "${BASH_SOURCE[0]}")/lib/vm-test.bash"

vm_prepare
run_dir="$(mktemp -d "${TMPDIR:-/tmp}/ni-dies.XXXXXX")"
vm_daemon "$run_dir" 1 "$run_dir/daemon.log"
dpid=$DAEMON_PID
disown "$dpid"  # its SIGKILL is the test, not news for the shell
trap 'kill -KILL $dpid 2>/dev/null || true; rm -rf "$run_dir"' EXIT
vm_run -n 1 --run-dir "$run_dir" --on '^waiting$' "kill -KILL $dpid" "$GUEST_BIN/ni-vm-rank" daemon-dies
expect "the guest rank exited 0" test "$RC" -eq 0
expect "the daemon was killed while the rank waited" sh -c "! kill -0 $dpid 2>/dev/null"
expect "the blocked receive failed with 'daemon gone' (no heartbeat)" \
    has '^\[guest0 ni0\] gone after [0-9]+ ms: no heartbeat for [0-9]+ ms$'
ms="$(grep -oE 'gone after [0-9]+ ms' <<<"$OUT" | grep -oE '[0-9]+' || echo 999999)"
expect "within 3 s of printing 'waiting' ($ms ms; kill + heartbeat 0.8 s + console latency)" \
    test "$ms" -lt 3000
vm_finish
