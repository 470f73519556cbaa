"""A topology's nodes as separate machines without Mininet: one network namespace per host and per switch,
each link a veth pair between two of them. Commands run inside a node's namespace through a shell, as a
user types them on that machine, so a test can run the README's commands as written.

Hosts get the topology's MAC and address on ``eth0`` and the setup a P4 switch that answers no ARP and
sees whole frames needs (``host_setup``: permanent neighbour entries, checksum and segmentation offloads
off); switch ports are named as the topology names them (``s1-eth1``). Everything is named with a prefix
that holds this process's pid, and ``stop()`` ends the processes it started (by pid) and deletes the
namespaces it made, which takes their veths along.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from controller.topology import Topology
from topologies.lifecycle import StartStop
from topologies.veth import unused_prefix

HOST_IFACE = "eth0"
OFFLOADS_OFF = "tx off rx off tso off gso off gro off"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def host_setup(topo: Topology, host: str) -> list[str]:
    """The commands that prepare ``host`` for the switch: it forwards IPv4 only and answers no ARP, so
    the service address and every other host need a permanent neighbour entry; a software switch on
    veths needs whole frames (no offloads)."""
    service_ip, service_mac = topo.service_of(host)
    neighbours = [(h.address, h.mac) for h in topo.hosts.values() if h.name != host]
    neighbours.append((str(service_ip), service_mac))
    lines = [f"ip neigh replace {ip} lladdr {mac} dev {HOST_IFACE} nud permanent" for ip, mac in neighbours]
    return [*lines, f"ethtool -K {HOST_IFACE} {OFFLOADS_OFF}"]


def _free_namespace_prefix(stem: str) -> str:
    """`stem`, or `stem` and a letter, that no namespace's name starts with (topologies.veth.unused_prefix)."""
    netns = Path("/run/netns")
    names = [p.name for p in netns.glob(f"{stem}*")] if netns.is_dir() else []
    taken = lambda prefix: any(n.startswith(prefix) for n in names)  # noqa: E731
    return unused_prefix(stem, taken, "namespaces (ip netns del NAME)")


class Machines(StartStop):
    """The nodes of ``topo`` in namespaces ``<prefix><node>``; use as a context manager."""

    def __init__(self, topo: Topology, prefix: str | None = None):
        self.topo = topo
        self.prefix = prefix or _free_namespace_prefix(f"thm{os.getpid()}")
        self.namespaces: list[str] = []
        self.processes: list[subprocess.Popen] = []

    def ns(self, node: str) -> str:
        return f"{self.prefix}{node}"

    def start(self) -> None:
        """Make the namespaces and the links between them (`with machines:` does, and stops them after)."""
        for node in (*self.topo.hosts, *self.topo.switches):
            _ip("netns", "add", self.ns(node))
            self.namespaces.append(self.ns(node))
            _ip("-n", self.ns(node), "link", "set", "lo", "up")
        for k, link in enumerate(self.topo.links):
            temp = (f"{self.prefix}l{k}a"[-15:], f"{self.prefix}l{k}b"[-15:])
            _ip("link", "add", temp[0], "type", "veth", "peer", "name", temp[1])
            for end, name in zip((link.a, link.b), temp):
                iface = HOST_IFACE if end.port is None else self.topo.switches[end.node].interface(end.port)
                ns = self.ns(end.node)
                _ip("link", "set", name, "netns", ns)
                _ip("-n", ns, "link", "set", name, "name", iface)
                self.sh(end.node, f"sysctl -qw net.ipv6.conf.{iface}.disable_ipv6=1")
                if end.port is None:
                    host = self.topo.hosts[end.node]
                    _ip("-n", ns, "link", "set", iface, "address", host.mac)
                    _ip("-n", ns, "addr", "add", str(host.ip), "dev", iface)
                else:
                    self.sh(end.node, f"ethtool -K {iface} {OFFLOADS_OFF}")
                _ip("-n", ns, "link", "set", iface, "up")

    def sh(self, node: str, command: str, **kwargs) -> subprocess.CompletedProcess:
        """Run ``command`` (a shell line) on ``node`` and wait; raises with its output if it fails."""
        done = subprocess.run(self._argv(node, command), capture_output=True, text=True, **kwargs)
        if done.returncode != 0:
            raise AssertionError(f"on {node}: {command}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def launch(self, node: str, command: str, log: Path, **kwargs) -> subprocess.Popen:
        """Start ``command`` on ``node`` in a session of its own, its output to ``log``."""
        with open(log, "w") as out:
            process = subprocess.Popen(
                self._argv(node, command), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kwargs
            )
        self.processes.append(process)
        return process

    def _argv(self, node: str, command: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(node), "bash", "-c", command]

    def stop(self) -> None:
        """End what was started here (SIGTERM to each session, then SIGKILL to whatever is still in our
        namespaces), then delete the namespaces."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for ns in self.namespaces:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:  # only processes inside a namespace this object made
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for process in self.processes:
            if process.poll() is None:
                process.wait(5)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces, self.processes = [], []
