#!/usr/bin/env python3
"""Apply qemu-patches/patches/0001-vfio-user-pci-unplug-pba.patch to a QEMU *binary*.

Usage: patch-qemu.py STOCK_BINARY OUT

Debian's source packages cannot be fetched on the project's machines (only binary packages),
so QEMU cannot be rebuilt with the source patch. The patch removes one call, so its binary
equivalent is small and checkable: in vfio_user_instance_finalize() (static, so found by its
shape, not its name) the call to memory_region_del_subregion() that vfio_user_msix_teardown()
was inlined into becomes a 5-byte NOP. The shape, in instruction order:

    call memory_region_del_subregion      <- the PBA overlay removal (patched)
    ... g_free(pba_region); pba_region = NULL ...
    call vfio_pci_put_device
    ... test proxy ...
    jmp/call vfio_user_disconnect

Exactly one such site must exist and its bytes must be a rel32 call to the symbol, or nothing
is written and the exit status is 1 with the reason. Exit 0: OUT written (a copy of the stock
binary with the 5 bytes changed). Needs objdump and nm (binutils).
"""
import re
import shutil
import subprocess
import sys

NOP5 = bytes.fromhex("0f1f440000")
WINDOW = 0x40000  # bytes disassembled on each side of vfio_user_device_reset (same object)


def die(msg):
    print(f"[patch-qemu.py] error: {msg}", file=sys.stderr)
    sys.exit(1)


def symbols(binary):
    out = subprocess.run(["nm", "-D", "--defined-only", binary], check=True,
                         capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2].split("@")[0]] = int(parts[0], 16)
    return syms


def file_offset(binary, vaddr):
    out = subprocess.run(["readelf", "-lW", binary], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return off + (vaddr - va)
    die(f"address {vaddr:#x} is in no loadable segment")


def main():
    if len(sys.argv) != 3:
        die("usage: patch-qemu.py STOCK_BINARY OUT")
    stock, out = sys.argv[1], sys.argv[2]
    syms = symbols(stock)
    need = ["vfio_user_device_reset", "memory_region_del_subregion", "vfio_pci_put_device",
            "vfio_user_disconnect"]
    missing = [s for s in need if s not in syms]
    if missing:
        die(f"{stock} exports no {', '.join(missing)}: not a QEMU with vfio-user-pci")
    anchor = syms["vfio_user_device_reset"]
    dis = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--start-address={anchor - WINDOW:#x}",
         f"--stop-address={anchor + WINDOW:#x}", stock],
        check=True, capture_output=True, text=True).stdout
    insns = []
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2), m.group(3)))

    def target(ins, name):
        return ins[1] in ("call", "jmp") and f"<{name}@@" in ins[2]

    sites = []
    for i, ins in enumerate(insns):
        if not target(ins, "memory_region_del_subregion"):
            continue
        after = insns[i + 1:i + 16]
        put = [j for j, x in enumerate(after) if target(x, "vfio_pci_put_device")]
        if put and any(target(x, "vfio_user_disconnect") for x in after[put[0] + 1:put[0] + 8]):
            sites.append(ins[0])
    if len(sites) != 1:
        die(f"found {len(sites)} vfio_user_instance_finalize PBA removals in {stock}, "
            "expected 1: this QEMU build is not one the patch knows")
    site = sites[0]
    with open(stock, "rb") as f:
        data = bytearray(f.read())
    at = file_offset(stock, site)
    rel = int.from_bytes(data[at + 1:at + 5], "little", signed=True)
    if data[at] != 0xE8 or site + 5 + rel != syms["memory_region_del_subregion"]:
        die(f"bytes at {site:#x} are not a rel32 call to memory_region_del_subregion")
    data[at:at + 5] = NOP5
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    shutil.copymode(stock, tmp)
    shutil.move(tmp, out)
    print(f"[patch-qemu.py] {out}: call memory_region_del_subregion at {site:#x} "
          "(vfio_user_instance_finalize) replaced by a NOP", file=sys.stderr)


if __name__ == "__main__":
    main()
