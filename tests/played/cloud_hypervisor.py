#!/usr/bin/env python3
"""Cloud Hypervisor's API, played for osbx's tests (tests/played/kata.rs starts it).

Why played: Cloud Hypervisor is in no registry this project may use (crates.io has only a 0.0.0
placeholder; Debian 12 has no package), and the project may not build its source.

What it does, as measured against Cloud Hypervisor v51.1 (../shared/reference/real-node.md,
"Kata as it runs"): it listens on --api-socket; `GET /api/v1/vm.info` answers `HTTP/1.1 200` with
`Connection: keep-alive` and `Content-Length`, and the connection stays open even when the request
asks to close it; the body has `state: Running`, `config.memory` {size, shared: true, hugepages:
false, thp: true, hotplug_method: Acpi}, `config.fs` [{tag: kataShared, socket:
<dir>/virtiofsd.sock}], `config.vsock` {cid: 3, socket: <dir>/clh.sock}, `config.cpus`
{boot_vcpus: 1}. Guest RAM is mapped shared from a memfd named `ch_ram` (in /proc/<pid>/maps:
`rw-s /memfd:ch_ram (deleted)`, the size of the guest memory); the mapping is never touched, so
it costs no memory. The process is started with argv[0] `cloud-hypervisor`: its command line, like
CH's, is the binary and `--api-socket`.

What it cannot show: a VM, and every other CH endpoint and behaviour (boot, hotplug, errors).
"""
import argparse
import json
import mmap
import os
import socket
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--api-socket", required=True)
ap.add_argument("--memory-mib", type=int, default=1024)
ap.add_argument("--not-shared", action="store_true")
a = ap.parse_args()

size = a.memory_mib << 20
shared = not a.not_shared
fd = os.memfd_create("ch_ram")
os.ftruncate(fd, size)
ram = mmap.mmap(fd, size, flags=mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE)

d = os.path.dirname(a.api_socket)
body = json.dumps({
    "config": {
        "cpus": {"boot_vcpus": 1, "max_vcpus": 1},
        "memory": {"size": size, "mergeable": False, "hotplug_method": "Acpi", "shared": shared,
                   "hugepages": False, "thp": True},
        "fs": [{"tag": "kataShared", "socket": os.path.join(d, "virtiofsd.sock"), "num_queues": 1,
                "queue_size": 1024, "id": "_fs0"}],
        "vsock": {"cid": 3, "socket": os.path.join(d, "clh.sock"), "iommu": False, "id": "_vsock0"},
    },
    "state": "Running",
    "memory_actual_size": size,
}).encode()


def serve(conn):
    buf = b""
    while True:
        data = conn.recv(65536)
        if not data:
            return
        buf += data
        while b"\r\n\r\n" in buf:
            head, _, buf = buf.partition(b"\r\n\r\n")
            path = head.split(b" ")[1] if b" " in head else b""
            if path == b"/api/v1/vm.info":
                conn.sendall(b"HTTP/1.1 200 \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\n"
                             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            else:
                conn.sendall(b"HTTP/1.1 404 \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\n"
                             b"Content-Length: 0\r\n\r\n")
            # Kept open whatever the request asked: the client reads by Content-Length.


try:
    os.unlink(a.api_socket)
except FileNotFoundError:
    pass
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(a.api_socket)
srv.listen(8)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
