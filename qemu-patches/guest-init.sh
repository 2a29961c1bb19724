#!/bin/sh
# /init of the guest initramfs (see build-initramfs.sh). Runs the guest command and powers off.
# The command comes from the kernel command line as ni.cmd=<base64 of a shell script>, else from
# /ni/cmd.sh (embedded with build-initramfs.sh --script, or appended by launch.sh --script).
# Markers on the console (parsed by launch.sh):
#   NI-GUEST-BEGIN          the command starts
#   NI-GUEST-EXIT rc=<N>    the command's exit status (also printed if setup fails, with rc 200+)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
umask 022

finish() {
    echo "NI-GUEST-EXIT rc=$1"
    sync
    poweroff -f
    sleep 5
    echo o >/proc/sysrq-trigger 2>/dev/null
    exit "$1"
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null || true
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
hostname ni-guest
ip link set lo up 2>/dev/null || true

mods="/lib/modules/$(uname -r)/ni"
while read -r m; do
    [ -n "$m" ] || continue
    if ! out="$(insmod "$mods/$m.ko" 2>&1)"; then
        echo "ni-init: insmod $m failed: $out"
        dmesg | tail -n 20
        finish 201
    fi
done <"$mods/order"
if [ -w /sys/kernel/mm/transparent_hugepage/enabled ]; then
    echo madvise >/sys/kernel/mm/transparent_hugepage/enabled
    # libni's buffers are memfds: 2 MiB pages for the whole 2 MiB stretches of a file, so
    # that a buffer of N MiB is N/2 IOMMU mappings, not N*256 (the daemon takes at most 4096
    # mappings of one client: a 16 MiB message in 4 KiB pages alone would use them all).
    echo within_size >/sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null ||
        echo "ni-init: warning: no shmem hugepage control"
else
    echo "ni-init: warning: no transparent hugepage control"
fi

cmd=""
read -r cmdline </proc/cmdline
for arg in $cmdline; do
    case "$arg" in ni.cmd=*) cmd="${arg#ni.cmd=}" ;; esac
done
if [ -n "$cmd" ]; then
    if ! echo "$cmd" | base64 -d >/ni/cmd-line.sh 2>/dev/null; then
        echo "ni-init: ni.cmd= is not valid base64"
        finish 202
    fi
    script=/ni/cmd-line.sh
elif [ -f /ni/cmd.sh ]; then
    script=/ni/cmd.sh
else
    echo "ni-init: no command (ni.cmd= on the kernel command line or /ni/cmd.sh)"
    finish 203
fi

# Keep kernel messages off the console while the command runs; dump them on failure.
dmesg -n 1
echo "NI-GUEST-BEGIN"
cd /root || finish 204
sh "$script" </dev/null
rc=$?
if [ "$rc" -ne 0 ]; then
    echo "--- guest dmesg (last 40 lines) ---"
    dmesg | tail -n 40
fi
finish "$rc"
