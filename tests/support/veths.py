"""Veth pairs and namespaces for the port tests: hosts in namespaces, switch ports in the root namespace.

Shared by the Python (test_ports) and native (test_native_portloop) port loop tests. `needs_netns()`
marks a test `mininet` (root and iproute2's `ip`) or skips it. VethLab names everything with a
unique prefix and removes it on exit. This module holds no tests.
"""

import ctypes
import os
import shutil
import socket
import subprocess
import threading
import uuid

import pytest

ETHERTYPE_TEST = 0x88B5  # IEEE local experimental
CLONE_NEWNET = 0x40000000


def needs_netns():
    if os.geteuid() != 0:
        return pytest.mark.skip(reason="needs root for veths and namespaces")
    if shutil.which("ip") is None:
        return pytest.mark.skip(reason="needs iproute2's ip")
    return pytest.mark.mininet


# ------------------------------------------------------------------ test network scaffolding


class VethLab:
    """Namespaces h1..hN, each with one veth whose peer (a switch port) stays in the root namespace."""

    def __init__(self, hosts: int):
        tag = uuid.uuid4().hex[:5]
        self.prefix = f"tp{tag}"
        self.namespaces = [f"{self.prefix}h{i}" for i in range(1, hosts + 1)]
        self.switch_ifaces = [f"{self.prefix}s{i}" for i in range(1, hosts + 1)]
        self.host_iface = "eth0"

    def __enter__(self):
        try:
            for ns, sw in zip(self.namespaces, self.switch_ifaces):
                _ip("netns", "add", ns)
                _ip("link", "add", sw, "type", "veth", "peer", "name", f"{sw}p")
                _ip("link", "set", f"{sw}p", "netns", ns)
                _ip("-n", ns, "link", "set", f"{sw}p", "name", self.host_iface)
                # no IPv6 chatter (MLD, router solicitations) on the test links
                _sysctl((), f"net.ipv6.conf.{sw}.disable_ipv6=1")
                _sysctl(("ip", "netns", "exec", ns), f"net.ipv6.conf.{self.host_iface}.disable_ipv6=1")
                _ip("link", "set", sw, "up")
                _ip("-n", ns, "link", "set", self.host_iface, "up")
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for sw in self.switch_ifaces:
            subprocess.run(["ip", "link", "del", sw], capture_output=True)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def host_socket(self, index: int, ethertype: int = ETHERTYPE_TEST) -> socket.socket:
        """A raw socket on host `index`'s eth0 (created inside that namespace)."""
        return socket_in_netns(self.namespaces[index], self.host_iface, ethertype)


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _sysctl(prefix, setting):
    subprocess.run([*prefix, "sysctl", "-q", "-w", setting], check=False, capture_output=True)


def socket_in_netns(namespace: str, iface: str, ethertype: int = ETHERTYPE_TEST) -> socket.socket:
    """Raw AF_PACKET socket bound to `iface` inside `namespace`; the socket keeps that namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    result = {}

    def worker():
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns failed")
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            sock.bind((iface, ethertype))
            result["sock"] = sock
        except Exception as exc:
            result["error"] = exc
        finally:
            libc.setns(own, CLONE_NEWNET)
            os.close(own)
            os.close(target)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["sock"]


def make_frame(marker: bytes) -> bytes:
    return (
        b"\x02\x00\x00\x00\x00\x02"
        + b"\x02\x00\x00\x00\x00\x01"
        + ETHERTYPE_TEST.to_bytes(2, "big")
        + marker.ljust(46, b".")
    )


def receive_marked(sock: socket.socket, marker: bytes, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    while True:
        frame = sock.recv(65536)
        if marker in frame:
            return frame


def read_pcap(path):
    from scapy.utils import rdpcap

    return [bytes(p) for p in rdpcap(path)]
