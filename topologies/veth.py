"""Veth pairs that put a switch's ports next to raw sockets in this process, without Mininet.

For packet tests and benchmarks that drive a switch process (thc-switch or simple_switch_grpc) frame by
frame: port p of the switch is `<prefix><p>s`, and the test sends into and reads from its peer
`<prefix><p>h`. The prefix is the caller's stem, with a letter added when links of that name are already
there (a run killed before its clean-up leaves them, and a later process may get the same pid).
IPv6 is off on both ends so the kernel's own traffic (router solicitations) never reaches the switch.
Needs root; removes exactly the links it made.
"""

from __future__ import annotations

import socket
import string
import subprocess
from pathlib import Path

ETH_P_ALL = 0x0003
IFNAMSIZ = 15  # the longest interface name Linux takes


def unused_prefix(stem: str, taken, stale: str) -> str:
    """`stem`, or `stem` and a letter a-z, for which `taken(prefix)` is false: a run killed before its
    clean-up leaves its names behind, and a later process may get the same pid. `stale` names what to remove
    when every letter is taken."""
    for extra in ("", *string.ascii_lowercase):
        if not taken(stem + extra):
            return stem + extra
    raise RuntimeError(f"{stem}* is taken for every letter a-z: remove the stale {stale}")


def free_prefix(stem: str, ports) -> str:
    """`stem`, or `stem` and a letter, such that none of the ports' link names exists yet."""

    def taken(prefix: str) -> bool:
        names = [f"{prefix}{p}{end}" for p in ports for end in "sh"]
        if max(map(len, names)) > IFNAMSIZ:
            raise ValueError(f"veth names from {prefix!r} exceed {IFNAMSIZ} characters: use a shorter prefix")
        return any(Path("/sys/class/net", name).exists() for name in names)

    return unused_prefix(stem, taken, "links (ip link del NAME)")


class VethPorts:
    """One veth pair per switch port, with a non-blocking raw socket on each host end."""

    def __init__(self, prefix: str, ports, rcvbuf: int = 1 << 22):
        self.ports = list(ports)
        self.prefix = prefix = free_prefix(prefix, self.ports)
        self.links: list[str] = []
        self.socks: dict[int, socket.socket] = {}
        try:
            for p in self.ports:
                sw_end, host_end = self.switch_end(p), f"{prefix}{p}h"
                subprocess.run(["ip", "link", "add", sw_end, "type", "veth", "peer", "name", host_end], check=True)
                self.links.append(sw_end)
                for end in (sw_end, host_end):
                    subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1"], check=True)
                    subprocess.run(["ip", "link", "set", end, "up"], check=True)
                # protocol 0 until bound: an ETH_P_ALL socket hears every interface of the namespace until
                # bind(), and frames of other runs' links waited in its queue
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
                sock.bind((host_end, ETH_P_ALL))
                sock.setblocking(False)
                self.socks[p] = sock
        except Exception:
            self.close()
            raise

    def switch_end(self, port: int) -> str:
        return f"{self.prefix}{port}s"

    def interface_args(self) -> list[str]:
        """`-i PORT@IFACE` for every port, as both switch targets take them."""
        args = []
        for p in self.ports:
            args += ["-i", f"{p}@{self.switch_end(p)}"]
        return args

    def receive_ready(self, ready: list[socket.socket]) -> list[tuple[int, bytes]]:
        """Drain the ready sockets: (port, frame) for every frame the switch sent (not our own sends)."""
        port_of = {s.fileno(): p for p, s in self.socks.items()}
        out = []
        for sock in ready:
            while True:
                try:
                    data, addr = sock.recvfrom(65535)
                except BlockingIOError:
                    break
                if addr[2] != socket.PACKET_OUTGOING:
                    out.append((port_of[sock.fileno()], data))
        return out

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()
        self.socks = {}
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], check=False)
        self.links = []
