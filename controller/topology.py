"""A network's topology: which node links to which on what port, shortest paths, and what the controller
installs from them (routes, multicast replicas); variants with other workers or link parameters. Pure
Python: the runner builds the Mininet network from it, the controller computes forwarding entries and
multicast replicas from it, and neither needs root. The file format: topology_file.py; the parts:
topology_parts.py (re-exported here, so ``from controller.topology import Host`` keeps working)."""

from __future__ import annotations

import ipaddress
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contract import MAX_WORKERS  # noqa: F401  (the program's worker bitmap; re-exported)
from controller import topology_file
from controller.topology_parts import (  # noqa: F401  (re-exported)
    DEFAULT_SERVICE_MAC,
    FIRST_GRPC_PORT,
    MAX_BW_MBITS,
    MAX_PORT,
    Aggregation,
    Endpoint,
    Host,
    Leaf,
    Link,
    LinkParams,
    ParameterServer,
    Replica,
    Route,
    Switch,
    TopologyError,
)


@dataclass(frozen=True)
class Topology:
    name: str
    hosts: dict[str, Host]
    switches: dict[str, Switch]
    links: tuple[Link, ...]
    aggregation: Aggregation
    workers: tuple[str, ...]
    description: str = ""
    servers: dict[str, tuple[ParameterServer, ...]] = field(default_factory=dict)  # placement -> its servers

    # ---- loading ----------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        """The topology in a JSON file (topology_file.py says the format); TopologyError lists every problem."""
        return topology_file.load(path, cls)

    @classmethod
    def parse(cls, text: str, source: str = "<string>", default_name: str = "topology") -> Topology:
        return topology_file.parse(text, cls, source, default_name)

    @classmethod
    def from_dict(cls, data: dict, source: str = "<dict>") -> Topology:
        return topology_file.from_data(data, cls, source)

    # ---- graph ------------------------------------------------------------------------------------

    def links_of(self, node: str) -> list[Link]:
        return [link for link in self.links if node in (link.a.node, link.b.node)]

    def neighbors(self, node: str) -> list[tuple[int | None, str]]:
        """(own port, neighbour) for every link of ``node``, by port."""
        pairs = [(link.end(node).port, link.other(node).node) for link in self.links_of(node)]
        return sorted(pairs, key=lambda p: (p[0] or 0, p[1]))

    def port(self, switch: str, neighbor: str) -> int:
        """The port of ``switch`` that faces ``neighbor`` (the lowest one if several)."""
        for port, other in self.neighbors(switch):
            if other == neighbor:
                return port
        raise KeyError(f"{switch} has no link to {neighbor}")

    def path(self, src: str, dst: str) -> list[str]:
        """A shortest path of node names from ``src`` to ``dst`` (ties: lowest port first).

        Hosts are endpoints only: a path never crosses a host.
        """
        previous: dict[str, str | None] = {src: None}
        queue = deque([src])
        while queue:
            node = queue.popleft()
            if node == dst:
                break
            if node != src and node in self.hosts:
                continue
            for _, other in self.neighbors(node):
                if other not in previous:
                    previous[other] = node
                    queue.append(other)
        if dst not in previous:
            raise KeyError(f"no path from {src} to {dst}")
        path = [dst]
        while previous[path[-1]] is not None:
            path.append(previous[path[-1]])
        return path[::-1]

    def next_hop(self, switch: str, dst: str) -> tuple[int, str]:
        """(port, neighbour) on the way from ``switch`` to node ``dst``."""
        hop = self.path(switch, dst)[1]
        return self.port(switch, hop), hop

    # ---- what the controller installs -------------------------------------------------------------

    def routes(self, switch: str) -> list[Route]:
        """The ``ipv4_lpm`` entries of ``switch``: a /32 to every host, and to the service address
        on every switch but the aggregating one (which serves it itself)."""
        routes = []
        for host in self.hosts.values():
            port, _ = self.next_hop(switch, host.name)
            routes.append(Route(f"{host.address}/32", host.mac, port))
        agg = self.aggregation
        if switch != agg.switch:
            port, _ = self.next_hop(switch, agg.switch)
            routes.append(Route(f"{agg.service_ip}/32", agg.service_mac, port))
        for leaf in agg.leaves:
            if switch != leaf.switch:
                port, _ = self.next_hop(switch, leaf.switch)
                routes.append(Route(f"{leaf.service_ip}/32", leaf.service_mac, port))
        for server in self.all_servers():
            port, _ = self.next_hop(switch, server.host)
            routes.append(Route(f"{server.service_ip}/32", server.service_mac, port))
        return routes

    # ---- parameter servers ------------------------------------------------------------------------

    def all_servers(self) -> list[ParameterServer]:
        return [server for placement in self.servers.values() for server in placement]

    def placement(self, name: str | None = None) -> tuple[ParameterServer, ...]:
        """The servers of placement ``name`` (None: the file's first); KeyError naming the ones there are."""
        if not self.servers:
            raise KeyError(f"topology {self.name} has no parameter servers (a 'servers' entry, e.g. star4_ps.json)")
        if name is None:
            return next(iter(self.servers.values()))
        if name not in self.servers:
            raise KeyError(f"topology {self.name} has no placement '{name}' (it has {', '.join(self.servers)})")
        return self.servers[name]

    # ---- two-level aggregation ----------------------------------------------------------------------

    @property
    def two_level(self) -> bool:
        return bool(self.aggregation.leaves)

    def leaf_of(self, host: str) -> Leaf | None:
        """The leaf that aggregates ``host``: the first leaf on its path to the spine (None: the spine)."""
        on_path = self.path(host, self.aggregation.switch)
        for node in on_path:
            for leaf in self.aggregation.leaves:
                if leaf.switch == node:
                    return leaf
        return None

    def service_of(self, host: str) -> tuple[ipaddress.IPv4Address, str]:
        """(IPv4, MAC) that ``host`` sends its THC requests to: its leaf's service address, or the spine's."""
        leaf = self.leaf_of(host)
        agg = leaf or self.aggregation
        return agg.service_ip, agg.service_mac

    def worker_id(self, host: str) -> int:
        return self.workers.index(host)

    def replicas(self, workers: Iterable[str] | None = None) -> list[Replica]:
        """Multicast replicas of a job's results on the aggregating switch: one per worker, on the
        port toward it, with rid = its worker id (the program's ``result_dst`` key)."""
        agg = self.aggregation.switch
        names = self.workers if workers is None else tuple(workers)
        return [Replica(self.next_hop(agg, h)[0], self.worker_id(h), h) for h in names]

    def interfaces(self, switch: str) -> dict[int, str]:
        """port -> Mininet interface name of ``switch``."""
        return {port: self.switches[switch].interface(port) for port, _ in self.neighbors(switch)}

    def is_star(self) -> bool:
        return len(self.switches) == 1 and all({link.a.node, link.b.node} & set(self.hosts) for link in self.links)

    # ---- variants ---------------------------------------------------------------------------------

    def with_workers(self, n: int) -> Topology:
        """The same topology with ``n`` workers.

        A star grows or shrinks: hosts h1..hn on consecutive addresses and switch ports, links like
        the first host's. Any other topology keeps its hosts and uses the first ``n`` workers.
        """
        if not 1 <= n <= MAX_WORKERS:
            raise TopologyError(self.name, [f"--workers {n}: must be 1..{MAX_WORKERS}"])
        if not self.is_star():
            if n > len(self.workers):
                raise TopologyError(
                    self.name,
                    [
                        f"--workers {n}: this topology has {len(self.workers)} workers and is not a star, "
                        "so it cannot grow; edit the file"
                    ],
                )
            return replace(self, workers=self.workers[:n])
        switch = next(iter(self.switches))
        first = self.hosts[self.workers[0]]
        first_link = self.links_of(first.name)[0]
        base_ip = int(first.ip.ip) - 1
        base_mac = int(first.mac.replace(":", ""), 16) - 1
        others = [h for h in self.hosts.values() if h.name not in self.workers]  # dedicated servers' hosts stay
        taken = {self.aggregation.service_ip} | {h.ip.ip for h in others} | {s.service_ip for s in self.all_servers()}
        taken_ports = {self.links_of(h.name)[0].end(switch).port: h.name for h in others}
        hosts, links = {}, []
        for i in range(1, n + 1):
            ip = ipaddress.IPv4Interface(f"{ipaddress.IPv4Address(base_ip + i)}/{first.ip.network.prefixlen}")
            if ip.ip in taken or ip.ip not in first.ip.network:
                raise TopologyError(self.name, [f"--workers {n}: host address {ip.ip} is not free"])
            if i in taken_ports:
                raise TopologyError(self.name, [f"--workers {n}: port {switch}-p{i} is host {taken_ports[i]}'s"])
            mac = ":".join(f"{base_mac + i:012x}"[j : j + 2] for j in range(0, 12, 2))
            hosts[f"h{i}"] = Host(f"h{i}", ip, mac)
            links.append(Link(Endpoint(f"h{i}", None), Endpoint(switch, i), first_link.params))
        workers = tuple(hosts)
        hosts.update((h.name, h) for h in others)
        links += [self.links_of(h.name)[0] for h in others]
        servers = {  # the placements whose hosts are all still there, with no more servers than workers
            name: placement
            for name, placement in self.servers.items()
            if len(placement) <= n and all(s.host in hosts for s in placement)
        }
        return replace(self, hosts=hosts, links=tuple(links), workers=workers, servers=servers)

    def with_link_params(self, **overrides: Any) -> Topology:
        """Every link with the given LinkParams fields replaced (``None`` values are ignored)."""
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if not overrides:
            return self
        links = tuple(replace(link, params=replace(link.params, **overrides)) for link in self.links)
        return replace(self, links=links)

    def to_dict(self) -> dict:
        """The JSON form (explicit ports and defaults), e.g. to record what a run used."""
        return topology_file.to_data(self)


def load_for_cli(parser, path: str | Path, workers: int | None = None) -> Topology:
    """The topology a command's option names (grown or shrunk to `workers`), or the parser's one-line error
    naming the file's first problem: read with the options, before the command starts anything."""
    try:
        topo = Topology.load(path)
        return topo if workers is None else topo.with_workers(workers)
    except TopologyError as exc:
        parser.error(exc.one_line())
