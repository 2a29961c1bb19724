#!/usr/bin/env python3
"""Hot-plug and unplug NIs of a running guest through QEMU's QMP socket.

Usage:
  qmp.py SOCKET plug ID BUS NI_SOCKET   device_add a vfio-user-pci NI served at NI_SOCKET
                                        behind the PCIe root port BUS (launch.sh names its
                                        ports ni_rp<i> and its NIs ni<i>)
  qmp.py SOCKET unplug ID               device_del ID, then wait for QEMU's DEVICE_DELETED:
                                        the guest let go of the function and QEMU freed it
  qmp.py SOCKET replug ID BUS NI_SOCKET unplug, then plug: an NI whose daemon died and was
                                        restarted comes back (QEMU never reconnects a
                                        vfio-user device by itself)
  qmp.py SOCKET query                   the NIs (vfio-user-pci devices) QEMU has now
  qmp.py SOCKET raw COMMAND [JSON]      any QMP command with JSON arguments
Options (before SOCKET): --timeout SEC (default 60) for the connection and for unplug.

SOCKET is QEMU's `-qmp unix:PATH,server=on,wait=off` (launch.sh --qmp PATH; run-guests.sh
gives every guest one at LOG_DIR/guest<i>.qmp). HMP's device_add cannot express the
`socket` property (an object); QMP's can. Exit status 0 on success; 1 with QEMU's error text.
"""
import json
import socket
import sys
import time


class Qmp:
    def __init__(self, path, timeout):
        self.deadline = time.monotonic() + timeout
        self.sock = socket.socket(socket.AF_UNIX)
        while True:
            try:
                self.sock.connect(path)
                break
            except OSError as e:
                if time.monotonic() > self.deadline:
                    fail(f"cannot connect to QMP at {path}: {e}")
                time.sleep(0.1)
        self.buf = b""
        self.events = []
        self.read()  # the greeting
        self.command("qmp_capabilities")

    def read(self):
        while b"\n" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                fail("timed out waiting for QEMU")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                fail("timed out waiting for QEMU")
            if not chunk:
                fail("QEMU closed the QMP connection (did it exit?)")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def command(self, name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            m = self.read()
            if "event" in m:
                self.events.append(m)
            elif "error" in m:
                fail(f"{name}: {m['error'].get('desc', m['error'])}")
            else:
                return m.get("return")

    def wait_event(self, name, match):
        for m in self.events:
            if m["event"] == name and match(m.get("data", {})):
                return m
        while True:
            m = self.read()
            if "event" in m and m["event"] == name and match(m.get("data", {})):
                return m


def fail(msg):
    print(f"[qmp.py] error: {msg}", file=sys.stderr)
    sys.exit(1)


def main(argv):
    timeout = 60.0
    if len(argv) >= 2 and argv[0] == "--timeout":
        timeout = float(argv[1])
        argv = argv[2:]
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    path, verb, rest = argv[0], argv[1], argv[2:]
    q = Qmp(path, timeout)
    t0 = time.monotonic()
    def unplug(dev_id):
        q.command("device_del", id=dev_id)
        q.wait_event("DEVICE_DELETED", lambda d: d.get("device") == dev_id)
        print(f"unplugged {dev_id} in {time.monotonic() - t0:.1f} s")

    def plug(dev_id, bus, ni_socket):
        q.command("device_add", driver="vfio-user-pci", id=dev_id, bus=bus,
                  socket={"type": "unix", "path": ni_socket})
        print(f"plugged {dev_id} ({ni_socket}) into {bus}")

    if verb == "plug" and len(rest) == 3:
        plug(*rest)
    elif verb == "unplug" and len(rest) == 1:
        unplug(rest[0])
    elif verb == "replug" and len(rest) == 3:
        unplug(rest[0])
        plug(*rest)
    elif verb == "query" and not rest:
        def walk(devs):
            for d in devs:
                yield d
                yield from walk(d.get("pci_bridge", {}).get("devices", []))
        for bus in q.command("query-pci"):
            for d in walk(bus["devices"]):
                if d["id"]["vendor"] == 0x1234 and d["id"]["device"] == 0x4E49:
                    print(f"{d['qdev_id']} bus {bus['bus']} slot {d['slot']} "
                          f"{d['id']['vendor']:04x}:{d['id']['device']:04x}")
    elif verb == "raw" and 1 <= len(rest) <= 2:
        args = json.loads(rest[1]) if len(rest) == 2 else {}
        print(json.dumps(q.command(rest[0], **args), indent=1))
    else:
        fail(f"bad arguments {argv[1:]} (see --help)")


if __name__ == "__main__":
    main(sys.argv[1:])
