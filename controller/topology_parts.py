"""The parts of a topology: hosts, switches, links, the aggregation and parameter servers, and what the
controller derives from them (routes, multicast replicas). Plain frozen values: the file parser
(topology_file.py) makes them, the Topology (topology.py) connects them."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

MAX_PORT = 510  # v1model ports are 9 bits; 511 is BMv2's drop port
MAX_BW_MBITS = 1000  # Mininet's TCLink refuses more
DEFAULT_SERVICE_MAC = "02:00:00:00:00:fe"
FIRST_GRPC_PORT = 50051  # p4lang/tutorials' numbering


class TopologyError(ValueError):
    """A topology file that cannot be used; ``problems`` lists every error found, one per entry."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"invalid topology {source}:\n  " + "\n  ".join(problems))

    def one_line(self) -> str:
        """The first problem (each names the file and line), and how many more: a CLI's one-line error."""
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return f"{self.problems[0]}{more}"


@dataclass(frozen=True)
class Host:
    name: str
    ip: ipaddress.IPv4Interface  # address with prefix length, e.g. 10.0.0.1/24
    mac: str

    @property
    def address(self) -> str:
        return str(self.ip.ip)

    @property
    def interface(self) -> str:
        return f"{self.name}-eth0"


@dataclass(frozen=True)
class Switch:
    name: str
    device_id: int
    grpc_port: int

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def interface(self, port: int) -> str:
        return f"{self.name}-eth{port}"


@dataclass(frozen=True)
class LinkParams:
    bw: float | None = None  # Mbit/s
    delay_ms: float | None = None
    loss: float | None = None  # percent
    max_queue_size: int | None = None  # packets

    def mininet_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of Mininet's TCLink (only those that are set)."""
        kwargs: dict[str, Any] = {}
        if self.bw is not None:
            kwargs["bw"] = self.bw
        if self.delay_ms is not None:
            kwargs["delay"] = f"{self.delay_ms:g}ms"
        if self.loss:
            kwargs["loss"] = self.loss
        if self.max_queue_size is not None:
            kwargs["max_queue_size"] = self.max_queue_size
        return kwargs


@dataclass(frozen=True)
class Endpoint:
    node: str
    port: int | None  # None for a host (always eth0)


@dataclass(frozen=True)
class Link:
    a: Endpoint
    b: Endpoint
    params: LinkParams = field(default_factory=LinkParams)

    def other(self, node: str) -> Endpoint:
        return self.b if self.a.node == node else self.a

    def end(self, node: str) -> Endpoint:
        return self.a if self.a.node == node else self.b


@dataclass(frozen=True)
class Leaf:
    """A leaf of two-level aggregation: it sums its own workers and sends one partial to the spine."""

    switch: str
    service_ip: ipaddress.IPv4Address
    service_mac: str


@dataclass(frozen=True)
class Aggregation:
    switch: str  # the aggregating switch; the spine when there are leaves
    service_ip: ipaddress.IPv4Address
    service_mac: str
    leaves: tuple[Leaf, ...] = ()  # two-level aggregation (p4/README.md, "Two-level aggregation")


@dataclass(frozen=True)
class ParameterServer:
    """One server of a placement: the THC program on ``host``'s interface, serving ``service_ip``."""

    placement: str
    host: str
    service_ip: ipaddress.IPv4Address
    service_mac: str

    @property
    def name(self) -> str:
        return f"{self.placement}-{self.host}"  # unique: one server per host and placement


@dataclass(frozen=True)
class Route:
    """One ``ipv4_lpm`` entry: packets to ``prefix`` leave on ``port`` with destination MAC ``dst_mac``."""

    prefix: str  # "10.0.0.1/32"
    dst_mac: str
    port: int


@dataclass(frozen=True)
class Replica:
    """One multicast replica of a job's results: ``port`` toward the worker, ``rid`` = its worker id."""

    port: int
    rid: int
    host: str
