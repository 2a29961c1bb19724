#!/usr/bin/env bash
# Runs one program as the ranks of an NI partition in QEMU guests (libni over VFIO), and
# optionally in host processes too (libni over the vfio-user socket), with one command:
# starts ni-device (or uses a running one), boots the guests in parallel, each with one NI,
# runs PROGRAM in each (copied into its initramfs), runs the host ranks, prints every rank's
# output with a prefix, and tears everything down. Exit status 0 only if every rank exited 0,
# as parsed from the guest consoles (never QEMU's own status) and the host processes.
#
# Usage: run-guests.sh [options] [--] PROGRAM [ARGS...]
#   -n, --guests N     guests to boot (default 2); guest i gets NI i unless --ni says otherwise
#   --ni LIST          comma-separated NI numbers of the guests, e.g. 2,0
#   --host N           also run PROGRAM in N host processes (NI_SOCKET set), on the NIs after
#                      the guests' (or --host-ni LIST)
#   --run-dir DIR      use the ni-device serving DIR (default: start one with --nodes NIs,
#                      log in the log directory, stopped at the end)
#   --nodes N          NIs of the daemon started here (default: highest NI used + 1)
#   --direct MODE      the daemon's --direct (default shared: the window kind guests can map;
#                      see device/abi/fastpath.md, "One writer per page")
#   --device PATH      ni-device binary (default $NI_DEVICE, else target/release/ni-device,
#                      built if missing)
#   --add FILE         another file for the guests' /usr/local/bin (repeatable)
#   --overlay FILE     a cpio unpacked over every guest's initramfs (launch.sh --overlay;
#                      e.g. mpi-overlay.sh's Open MPI; repeatable)
#   --env NAME=VALUE   environment of every rank, guest or host (repeatable)
#   --guest-env I:NAME=VALUE  environment of guest I only (repeatable)
#   --net              link guests 0 and 1 by virtio-net (169.254.77.1 and .2/24, QEMU dgram
#                      netdev over unix sockets: no host network is touched)
#   --on REGEX CMD     when a rank first prints a line matching REGEX, run CMD (sh -c) on the
#                      host; NI_RUN_DIR and NI_LOG_DIR are set; non-zero fails the run
#   --after CMD        run CMD on the host after every rank finished, before teardown
#   --poweroff I:REGEX when a rank prints REGEX, SIGKILL guest I's QEMU (its power cord):
#                      that guest's outcome is "powered off", not a failure
#   --replace          after the power-off, boot a replacement guest on the freed NI with
#                      NI_VM_REPLACEMENT=1 in its environment
#   --timeout SEC      per guest and host rank (default 600)
#   --mem MIB          guest RAM (default 512)
#   --append ARGS      extra guest kernel command line (e.g. intel_iommu=off)
#   --log-dir DIR      consoles (guest<i>.log), QEMU output and pid (guest<i>.log.qemu,
#                      guest<i>.qemu-pid), QMP sockets (guest<i>.qmp: qmp.py plugs and
#                      unplugs the guest's NI, device ni0 on root port ni_rp0), host output
#                      (host<j>.out), daemon log, hook output
#                      (default $NI_CACHE/logs/run-<time>-<pid>; kept)
# Output: each rank's lines as "[guest0 ni0] ..." / "[host ni2] ...", then a summary line per
# rank. On failure: the failed guests' consoles and QEMU output, and the daemon log.
# Every rank gets NI_ATTACH_TIMEOUT=300 (guests under TCG boot at different speeds) unless
# --env sets it.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

guests=2 hosts=0 run_dir="" nodes="" direct=shared device="${NI_DEVICE:-}" net=0 replace=0
timeout_s=600 mem=512 log_dir="" after="" poweroff="" append=""
guest_ni=() host_ni=() adds=() overlays=() envs=() genvs=() on_re=() on_cmd=()
while (($#)); do
    case "$1" in
        -n|--guests) guests="${2:?$1 needs a number}"; shift 2 ;;
        --ni) IFS=, read -r -a guest_ni <<<"${2:?--ni needs a list}"; shift 2 ;;
        --host) hosts="${2:?--host needs a number}"; shift 2 ;;
        --host-ni) IFS=, read -r -a host_ni <<<"${2:?--host-ni needs a list}"; shift 2 ;;
        --run-dir) run_dir="${2:?--run-dir needs a directory}"; shift 2 ;;
        --nodes) nodes="${2:?--nodes needs a number}"; shift 2 ;;
        --direct) direct="${2:?--direct needs isolated, shared or off}"; shift 2 ;;
        --device) device="${2:?--device needs a path}"; shift 2 ;;
        --add) adds+=("${2:?--add needs a file}"); shift 2 ;;
        --overlay) overlays+=("${2:?--overlay needs a file}"); shift 2 ;;
        --env) envs+=("${2:?--env needs NAME=VALUE}"); shift 2 ;;
        --guest-env) genvs+=("${2:?--guest-env needs I:NAME=VALUE}"); shift 2 ;;
        --net) net=1; shift ;;
        --on) on_re+=("${2:?--on needs REGEX CMD}"); on_cmd+=("${3:?--on needs REGEX CMD}"); shift 3 ;;
        --after) after="${2:?--after needs a command}"; shift 2 ;;
        --poweroff) poweroff="${2:?--poweroff needs I:REGEX}"; shift 2 ;;
        --replace) replace=1; shift ;;
        --timeout) timeout_s="${2:?--timeout needs seconds}"; shift 2 ;;
        --mem) mem="${2:?--mem needs MiB}"; shift 2 ;;
        --append) append="${2?--append needs arguments}"; shift 2 ;;
        --log-dir) log_dir="${2:?--log-dir needs a directory}"; shift 2 ;;
        -h|--help) sed -n '2,46p' "$0"; exit 0 ;;
        --) shift; break ;;
        -*) ni_die "unknown option '$1' (see --help)" ;;
        *) break ;;
    esac
done
(($#)) || ni_die "no program given (see --help)"
program="$1"
shift
prog_args=("$@")
[[ -f $program ]] || ni_die "program $program not found"
for v in "$guests" "$hosts" "$timeout_s" "$mem"; do
    [[ $v =~ ^[0-9]+$ ]] || ni_die "-n, --host, --timeout and --mem take whole numbers"
done
((guests + hosts > 0)) || ni_die "nothing to run: no guests and no host ranks"
if ((${#guest_ni[@]} == 0)); then
    for ((i = 0; i < guests; i++)); do guest_ni+=("$i"); done
fi
((${#guest_ni[@]} == guests)) || ni_die "--ni lists ${#guest_ni[@]} NIs for $guests guests"
if ((${#host_ni[@]} == 0 && hosts > 0)); then
    next=0
    for k in "${guest_ni[@]}"; do if ((k + 1 > next)); then next=$((k + 1)); fi; done
    for ((i = 0; i < hosts; i++)); do host_ni+=($((next + i))); done
fi
((${#host_ni[@]} == hosts)) || ni_die "--host-ni lists ${#host_ni[@]} NIs for $hosts host ranks"
max_ni=-1
for k in "${guest_ni[@]}" "${host_ni[@]}"; do
    [[ $k =~ ^[0-9]+$ ]] || ni_die "NI number '$k' is not a whole number"
    if ((k > max_ni)); then max_ni=$k; fi
done
poff_guest="" poff_re=""
if [[ -n $poweroff ]]; then
    poff_guest="${poweroff%%:*}" poff_re="${poweroff#*:}"
    if ! [[ $poff_guest =~ ^[0-9]+$ ]] || ((poff_guest >= guests)); then
        ni_die "--poweroff $poweroff: no guest $poff_guest"
    fi
fi
((replace == 0 || ${#poweroff} > 0)) || ni_die "--replace needs --poweroff"
((net == 0 || guests >= 2)) || ni_die "--net needs two guests"
ni_require_setup

# --- where things go -------------------------------------------------------------------------
if [[ -z $log_dir ]]; then
    log_dir="$NI_CACHE/logs/run-$(date +%Y%m%d-%H%M%S)-$$"
fi
mkdir -p "$log_dir"
log_dir="$(cd "$log_dir" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/ni-run-guests.XXXXXX")"
daemon_pid="" own_daemon=0
pids=() # background launch.sh subshells and host ranks: ours to stop
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local f p
    # QEMUs of guests still running (no result yet): their pid is still theirs.
    for f in "$log_dir"/guest*.pid; do
        [[ -f $f && ! -f ${f%.pid}.rc ]] || continue
        p="$(cat "$f" 2>/dev/null || true)"
        if [[ $p =~ ^[0-9]+$ ]]; then kill -KILL "$p" 2>/dev/null || true; fi
    done
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the daemon ------------------------------------------------------------------------------
daemon_log="$log_dir/daemon.log"
if [[ -z $run_dir ]]; then
    if [[ -z $device ]]; then
        device="$NI_REPO/target/release/ni-device"
        if [[ ! -x $device ]]; then
            ni_log "building ni-device (cargo build --release -p ni-device)"
            (cd "$NI_REPO" && cargo build --release -q -p ni-device) || ni_die "building ni-device failed"
        fi
    fi
    [[ -x $device ]] || ni_die "ni-device binary $device is not executable"
    nodes="${nodes:-$((max_ni + 1))}"
    ((nodes > max_ni)) || ni_die "--nodes $nodes is too few for NI $max_ni"
    run_dir="$work/run"
    NO_COLOR=1 "$device" --nodes "$nodes" --run-dir "$run_dir" --direct "$direct" >"$daemon_log" 2>&1 &
    daemon_pid=$!
    own_daemon=1
fi
for k in "${guest_ni[@]}" "${host_ni[@]}"; do
    s="$run_dir/ni$k.sock"
    for _ in $(seq 300); do
        [[ -S $s ]] && break
        [[ -z $daemon_pid ]] || kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.1
    done
    [[ -S $s ]] || {
        [[ ! -f $daemon_log ]] || cat "$daemon_log" >&2
        ni_die "no vfio-user socket $s (daemon not running, or too few NIs)"
    }
done
export NI_RUN_DIR="$run_dir" NI_LOG_DIR="$log_dir"

# --- the guests ------------------------------------------------------------------------------
net_files=()
if ((net)); then
    net_dir="$("$NI_QEMU_DIR/net-modules.sh")"
    while read -r m; do net_files+=("$net_dir/$m.ko"); done <"$net_dir/order"
fi
has_env() { # has_env NAME: does --env set NAME?
    local e
    for e in "${envs[@]}"; do [[ ${e%%=*} == "$1" ]] && return 0; done
    return 1
}
has_env NI_ATTACH_TIMEOUT || envs+=(NI_ATTACH_TIMEOUT=300)
squote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# guest_script INDEX SLOT EXTRA_ENV...: the shell script guest INDEX runs
guest_script() {
    local i="$1" slot="$2" e
    shift 2
    {
        echo "# run-guests.sh: guest $i"
        if ((net && slot < 2)); then
            echo "for m in ${net_files[*]##*/}; do insmod /usr/local/bin/\$m || exit 205; done"
            echo "ip link set eth0 up && ip addr add 169.254.77.$((slot + 1))/24 dev eth0 || exit 206"
        fi
        for e in "${envs[@]}" "$@"; do
            [[ $e == *=* ]] || ni_die "environment entry '$e' is not NAME=VALUE"
            echo "export ${e%%=*}=$(squote "${e#*=}")"
        done
        printf '/usr/local/bin/%s' "$(basename "$program")"
        for a in "${prog_args[@]}"; do printf ' %s' "$(squote "$a")"; done
        echo
    } >"$work/guest$i.sh"
}

# start_guest INDEX NI SLOT [EXTRA_ENV...]: boot guest INDEX on NI in the background
start_guest() {
    local i="$1" k="$2" slot="$3" e
    shift 3
    local extra=("$@")
    for e in "${genvs[@]}"; do
        [[ ${e%%:*} == "$slot" ]] && extra+=("${e#*:}")
    done
    guest_script "$i" "$slot" "${extra[@]}"
    local args=(--quiet --socket "$run_dir/ni$k.sock" --script "$work/guest$i.sh"
        --add "$program" --log "$log_dir/guest$i.log" --timeout "$timeout_s" --mem "$mem"
        --qemu-arg -pidfile --qemu-arg "$log_dir/guest$i.pid" --qmp "$log_dir/guest$i.qmp")
    [[ -z $append ]] || args+=(--append "$append")
    for f in "${adds[@]}" "${net_files[@]}"; do args+=(--add "$f"); done
    for f in "${overlays[@]}"; do args+=(--overlay "$f"); done
    if ((net && slot < 2)); then
        args+=(--qemu-arg -netdev --qemu-arg "dgram,id=ninet,local.type=unix,local.path=$work/net$slot.sock,remote.type=unix,remote.path=$work/net$((1 - slot)).sock"
            --qemu-arg -device --qemu-arg "virtio-net-pci,netdev=ninet,mac=52:54:00:4e:49:0$slot")
    fi
    rm -f "$log_dir/guest$i.pid" "$log_dir/guest$i.qemu-pid" "$log_dir/guest$i.rc"
    ((net == 0 || slot >= 2)) || rm -f "$work/net$slot.sock"
    (
        rc=0
        "$NI_QEMU_DIR/launch.sh" "${args[@]}" >"$log_dir/guest$i.launch" 2>&1 || rc=$?
        echo "$rc" >"$log_dir/guest$i.rc"
    ) &
    pids+=($!)
    gname[i]="guest$i ni$k"
    ni_log "guest $i: booting on NI $k ($run_dir/ni$k.sock)"
}

gname=()
t0=$SECONDS
for ((i = 0; i < guests; i++)); do
    start_guest "$i" "${guest_ni[$i]}" "$i"
done
nguests=$guests

# --- the host ranks ----------------------------------------------------------------------------
for ((j = 0; j < hosts; j++)); do
    k="${host_ni[$j]}"
    rm -f "$log_dir/host$j.rc"
    (
        rc=0
        env "${envs[@]}" NI_SOCKET="$run_dir/ni$k.sock" timeout -k 10 "$timeout_s" \
            "$program" "${prog_args[@]}" </dev/null >"$log_dir/host$j.out" 2>&1 || rc=$?
        echo "$rc" >"$log_dir/host$j.rc"
    ) &
    pids+=($!)
    ni_log "host rank $j: started on NI $k"
done

# --- watch: hooks, power-off, completion -----------------------------------------------------
outputs() { # every rank's output so far (guest consoles, host output)
    local f
    for f in "$log_dir"/guest*.log "$log_dir"/host*.out; do
        [[ -f $f ]] && tr -d '\r' <"$f"
    done
    return 0
}
hook_failed=0
on_done=()
run_hook() { # run_hook NAME CMD
    local rc=0
    ni_log "hook $1: $2"
    sh -c "$2" >"$log_dir/hook-$1.out" 2>&1 </dev/null || rc=$?
    sed "s/^/[hook $1] /" "$log_dir/hook-$1.out"
    if ((rc != 0)); then
        ni_log "hook $1 failed with exit status $rc"
        hook_failed=1
    fi
}
powered_off="" poff_done=0
all_done() {
    local i j
    for ((i = 0; i < nguests; i++)); do [[ -f $log_dir/guest$i.rc ]] || return 1; done
    for ((j = 0; j < hosts; j++)); do [[ -f $log_dir/host$j.rc ]] || return 1; done
    return 0
}
while ! all_done; do
    # QEMU removes its pid file when it exits: keep a copy (guest<i>.qemu-pid) for the record.
    for ((i = 0; i < nguests; i++)); do
        if [[ -s $log_dir/guest$i.pid && ! -s $log_dir/guest$i.qemu-pid ]]; then
            cp "$log_dir/guest$i.pid" "$log_dir/guest$i.qemu-pid" 2>/dev/null || true
        fi
    done
    out=""
    if ((${#on_re[@]} > ${#on_done[@]})) || { [[ -n $poff_re ]] && ((poff_done == 0)); }; then
        out="$(outputs)"
    fi
    for h in "${!on_re[@]}"; do
        [[ -z ${on_done[$h]:-} ]] || continue
        if grep -qE -- "${on_re[$h]}" <<<"$out"; then
            on_done[h]=1
            run_hook "$h" "${on_cmd[$h]}"
        fi
    done
    if [[ -n $poff_re ]] && ((poff_done == 0)) && grep -qE -- "$poff_re" <<<"$out"; then
        poff_done=1
        pf="$log_dir/guest$poff_guest.pid"
        qpid="$(cat "$pf" 2>/dev/null || true)"
        if [[ $qpid =~ ^[0-9]+$ ]] && kill -KILL "$qpid" 2>/dev/null; then
            powered_off="$poff_guest"
            ni_log "guest $poff_guest: powered off (SIGKILL to QEMU pid $qpid) after $((SECONDS - t0)) s"
            if ((replace)); then
                start_guest "$nguests" "${guest_ni[$poff_guest]}" "$poff_guest" NI_VM_REPLACEMENT=1
                nguests=$((nguests + 1))
            fi
        else
            ni_log "guest $poff_guest: could not power it off (no QEMU pid in $pf)"
            hook_failed=1
        fi
    fi
    if ((own_daemon)) && ! kill -0 "$daemon_pid" 2>/dev/null; then
        ni_log "ni-device died while the ranks ran"
        break
    fi
    sleep 0.2
done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
elapsed=$((SECONDS - t0))
[[ -z $after ]] || run_hook after "$after"

# --- results ---------------------------------------------------------------------------------
failed=0 summary=()
for ((i = 0; i < nguests; i++)); do
    rc="$(cat "$log_dir/guest$i.rc" 2>/dev/null || echo 125)"
    if [[ -f $log_dir/guest$i.log ]]; then
        tr -d '\r' <"$log_dir/guest$i.log" |
            sed -n '/^NI-GUEST-BEGIN$/,/^NI-GUEST-EXIT rc=/{/^NI-GUEST-BEGIN$/d;/^NI-GUEST-EXIT rc=/d;p}' |
            sed "s/^/[${gname[$i]}] /"
    fi
    if [[ $i == "$powered_off" ]]; then
        summary+=("${gname[$i]}: powered off as asked (launch.sh status $rc)")
        continue
    fi
    case "$rc" in
        0) summary+=("${gname[$i]}: exit 0") ;;
        124) summary+=("${gname[$i]}: TIMED OUT after ${timeout_s}s"); failed=1 ;;
        125) summary+=("${gname[$i]}: NO EXIT MARKER (boot failure, QEMU error or crash)"); failed=1 ;;
        *) summary+=("${gname[$i]}: exit $rc"); failed=1 ;;
    esac
done
for ((j = 0; j < hosts; j++)); do
    rc="$(cat "$log_dir/host$j.rc" 2>/dev/null || echo 125)"
    sed "s/^/[host ni${host_ni[$j]}] /" "$log_dir/host$j.out" 2>/dev/null || true
    case "$rc" in
        0) summary+=("host ni${host_ni[$j]}: exit 0") ;;
        124) summary+=("host ni${host_ni[$j]}: TIMED OUT after ${timeout_s}s"); failed=1 ;;
        *) summary+=("host ni${host_ni[$j]}: exit $rc"); failed=1 ;;
    esac
done
if ((own_daemon)) && ! kill -0 "$daemon_pid" 2>/dev/null; then
    summary+=("ni-device: DIED during the run")
    failed=1
fi
((hook_failed == 0)) || { summary+=("a host hook or the power-off failed"); failed=1; }
printf 'run-guests: %s\n' "${summary[@]}"
if ((failed)); then
    {
        for ((i = 0; i < nguests; i++)); do
            rc="$(cat "$log_dir/guest$i.rc" 2>/dev/null || echo 125)"
            [[ $rc != 0 && $i != "$powered_off" ]] || continue
            echo "===== ${gname[$i]}: console ($log_dir/guest$i.log) ====="
            tr -d '\r' <"$log_dir/guest$i.log" 2>/dev/null || true
            echo "===== ${gname[$i]}: QEMU output ($log_dir/guest$i.log.qemu) ====="
            cat "$log_dir/guest$i.log.qemu" 2>/dev/null || true
        done
        echo "===== ni-device log ($daemon_log) ====="
        if [[ -f $daemon_log ]]; then cat "$daemon_log"; else echo "(not started here: see the daemon serving $run_dir)"; fi
        echo "====="
    } >&2
fi
ni_log "$([[ $failed == 0 ]] && echo passed || echo FAILED) in ${elapsed}s; logs in $log_dir"
exit "$failed"
