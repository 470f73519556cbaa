"""Topology files: their JSON format, read with every error located, and written back.

A topology file is JSON in the style of p4lang/tutorials' ``topology.json``, plus what THC needs (which
switch aggregates, at which service address) and each switch's P4Runtime endpoint. This module turns the
JSON into the parts of topology_parts.py and back; topology.py connects them.

The format, every field annotated, is in topologies/README.md ("Topology files"); the files live beside it.

Errors name the file, the line and the entry (``star4.json:12: links[3]: unknown node 'h9'``), and a file
with several errors reports all of them at once.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contract import MAX_WORKERS  # the program's worker bitmap
from controller.topology_parts import (
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
    Switch,
    TopologyError,
)

_NAME = re.compile(r"^[a-z][a-z0-9]{0,9}$")  # short: Mininet interface names are "<node>-eth<N>" <= 15
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_DELAY = re.compile(r"^(\d+(\.\d+)?)(us|ms|s)$")
_SWITCH_PORT = re.compile(r"^(?P<node>[^-]+)-p(?P<port>\d+)$")

_TOP_KEYS = {"name", "description", "hosts", "switches", "links", "aggregation", "workers", "servers"}
_HOST_KEYS = {"ip", "mac"}
_SWITCH_KEYS = {"device_id", "grpc_port"}
_AGG_KEYS = {"switch", "service_ip", "service_mac", "leaves"}
_LEAF_KEYS = {"service_ip", "service_mac"}
_LINK_KEYS = {"bw", "delay", "loss", "max_queue_size"}
_SERVER_KEYS = {"host", "service_ip", "service_mac"}
_PLACEMENT = re.compile(r"^[a-z][a-z0-9]{0,15}$")  # in server names, log files and mode names (thc-ps:NAME)


def load(path: str | Path, make: Callable[..., Any]) -> Any:
    """The topology in the file at ``path``, built by ``make`` (the Topology class)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(str(path), [f"cannot read topology file {path}: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise TopologyError(str(path), [f"{path}: byte {exc.start} is not UTF-8: save the file as UTF-8"]) from None
    return parse(text, make, source=str(path), default_name=path.stem)


def parse(text: str, make: Callable[..., Any], source: str = "<string>", default_name: str = "topology") -> Any:
    """The topology in JSON ``text``; errors name ``source`` and the line."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(source, [f"{source}:{exc.lineno}: not valid JSON: {exc.msg}"]) from None
    lines, duplicates = _json_lines(text)
    parser = _Parser(data, source, lines, default_name)
    for path, line in duplicates:  # json.loads keeps the last one silently
        parser.problems.append(f"{source}:{line}: {_path_label(path)}: '{path[-1]}' appears twice")
    return parser.build(make)


def from_data(data: dict, make: Callable[..., Any], source: str = "<dict>") -> Any:
    """The topology in already decoded JSON (no line numbers in errors)."""
    return _Parser(data, source, {}, data.get("name", "topology") if isinstance(data, dict) else "").build(make)


def to_data(topology: Any) -> dict:
    """A topology's JSON form (explicit ports and defaults), e.g. to record what a run used."""

    def end(e: Endpoint) -> str:
        return e.node if e.port is None else f"{e.node}-p{e.port}"

    def opts(p: LinkParams) -> dict:
        d = {
            "bw": p.bw,
            "delay": None if p.delay_ms is None else f"{p.delay_ms:g}ms",
            "loss": p.loss,
            "max_queue_size": p.max_queue_size,
        }
        return {k: v for k, v in d.items() if v is not None}

    return {
        "name": topology.name,
        "description": topology.description,
        "hosts": {h.name: {"ip": str(h.ip), "mac": h.mac} for h in topology.hosts.values()},
        "switches": {s.name: {"device_id": s.device_id, "grpc_port": s.grpc_port} for s in topology.switches.values()},
        "links": [
            [end(link.a), end(link.b)] + ([opts(link.params)] if opts(link.params) else []) for link in topology.links
        ],
        "aggregation": {
            "switch": topology.aggregation.switch,
            "service_ip": str(topology.aggregation.service_ip),
            "service_mac": topology.aggregation.service_mac,
        }
        | (
            {
                "leaves": {
                    leaf.switch: {"service_ip": str(leaf.service_ip), "service_mac": leaf.service_mac}
                    for leaf in topology.aggregation.leaves
                }
            }
            if topology.aggregation.leaves
            else {}
        ),
        "workers": list(topology.workers),
    } | (
        {
            "servers": {
                name: [
                    {"host": s.host, "service_ip": str(s.service_ip), "service_mac": s.service_mac} for s in placement
                ]
                for name, placement in topology.servers.items()
            }
        }
        if topology.servers
        else {}
    )


class _Parser:
    """Turns decoded JSON into a topology's fields, collecting every problem with its line."""

    def __init__(self, data: Any, source: str, lines: dict[tuple, int], default_name: str):
        self.data = data
        self.source = source
        self.lines = lines
        self.default_name = default_name
        self.problems: list[str] = []
        self.declared: set[str] = set()  # every node name in the file, valid or not: no cascading errors
        self.declared_switches: set[str] = set()

    def problem(self, path: tuple, message: str) -> None:
        line = self._line(path)
        where = f"{self.source}:{line}" if line else self.source
        label = _path_label(path)
        self.problems.append(f"{where}: {label + ': ' if label else ''}{message}")

    def _line(self, path: tuple) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def build(self, make: Callable[..., Any]) -> Any:
        """``make(**fields)`` (the Topology class) once every part is valid and every node reaches the
        aggregating switch; raises TopologyError listing every problem otherwise."""
        data = self.data
        if not isinstance(data, dict):
            raise TopologyError(self.source, [f"{self.source}: the top level must be a JSON object"])
        self._unknown_keys(data, _TOP_KEYS, ())
        for key in ("hosts", "switches", "links", "aggregation"):
            if key not in data:
                self.problem((), f"missing '{key}'")
        hosts = self._hosts(data.get("hosts", {}))
        switches = self._switches(data.get("switches", {}), hosts)
        links = self._links(data.get("links", []), hosts, switches)
        aggregation = self._aggregation(data.get("aggregation"), hosts, switches)
        workers = self._workers(data.get("workers"), hosts)
        servers = self._servers(data.get("servers", {}), hosts, workers, aggregation)
        name = data.get("name", self.default_name)
        if not isinstance(name, str) or not name:
            self.problem(("name",), "must be a non-empty string")
        if not self.problems:
            self._check_graph(make, hosts, switches, links, workers)
        if self.problems:
            raise TopologyError(self.source, self.problems)
        return make(
            name=name,
            hosts=hosts,
            switches=switches,
            links=tuple(links),
            aggregation=aggregation,
            workers=workers,
            description=str(data.get("description", "")),
            servers=servers,
        )

    def _unknown_keys(self, obj: dict, allowed: set[str], path: tuple) -> None:
        for key in obj:
            if key not in allowed:
                self.problem(path + (key,), f"unknown key '{key}' (expected one of: {', '.join(sorted(allowed))})")

    def _name(self, name: str, path: tuple) -> bool:
        if not _NAME.match(name):
            self.problem(path, f"bad node name '{name}': lower-case letter then letters/digits, at most 10 characters")
            return False
        return True

    def _hosts(self, raw: Any) -> dict[str, Host]:
        if not isinstance(raw, dict):
            self.problem(("hosts",), "must be an object of name: {ip, mac}")
            return {}
        hosts: dict[str, Host] = {}
        seen_ip: dict[ipaddress.IPv4Address, str] = {}
        seen_mac: dict[str, str] = {}
        self.declared.update(raw)
        for name, spec in raw.items():
            path = ("hosts", name)
            if not self._name(name, path):
                continue
            if not isinstance(spec, dict):
                self.problem(path, "must be an object with 'ip' and 'mac'")
                continue
            self._unknown_keys(spec, _HOST_KEYS, path)
            ip = self._ip_interface(spec.get("ip"), path + ("ip",))
            mac = self._mac(spec.get("mac"), path + ("mac",))
            if ip is None or mac is None:
                continue
            if ip.ip in seen_ip:
                self.problem(path + ("ip",), f"address {ip.ip} is already used by {seen_ip[ip.ip]}")
                continue
            if mac in seen_mac:
                self.problem(path + ("mac",), f"MAC {mac} is already used by {seen_mac[mac]}")
                continue
            seen_ip[ip.ip], seen_mac[mac] = name, name
            hosts[name] = Host(name, ip, mac)
        if not raw:
            self.problem(("hosts",), "no hosts")
        return hosts

    def _switches(self, raw: Any, hosts: dict[str, Host]) -> dict[str, Switch]:
        if not isinstance(raw, dict):
            self.problem(("switches",), "must be an object of name: {device_id, grpc_port}")
            return {}
        switches: dict[str, Switch] = {}
        seen_id: dict[int, str] = {}
        seen_port: dict[int, str] = {}
        self.declared.update(raw)
        self.declared_switches.update(raw)
        for index, (name, spec) in enumerate(raw.items()):
            path = ("switches", name)
            if not self._name(name, path):
                continue
            if name in hosts:
                self.problem(path, f"'{name}' is both a host and a switch")
                continue
            if not isinstance(spec, dict):
                self.problem(path, "must be an object (may be empty: {})")
                continue
            self._unknown_keys(spec, _SWITCH_KEYS, path)
            device_id = self._int(spec.get("device_id", index), path + ("device_id",), 0, 2**32 - 1)
            grpc_port = self._int(spec.get("grpc_port", FIRST_GRPC_PORT + index), path + ("grpc_port",), 1024, 65535)
            if device_id is None or grpc_port is None:
                continue
            if device_id in seen_id:
                self.problem(path + ("device_id",), f"device_id {device_id} is already used by {seen_id[device_id]}")
                continue
            if grpc_port in seen_port:
                self.problem(path + ("grpc_port",), f"grpc_port {grpc_port} is already used by {seen_port[grpc_port]}")
                continue
            seen_id[device_id], seen_port[grpc_port] = name, name
            switches[name] = Switch(name, device_id, grpc_port)
        if not raw:
            self.problem(("switches",), "no switches")
        return switches

    def _links(self, raw: Any, hosts: dict[str, Host], switches: dict[str, Switch]) -> list[Link]:
        if not isinstance(raw, list):
            self.problem(("links",), "must be a list of [node, node, options?]")
            return []
        parsed: list[tuple[int, Endpoint, Endpoint, LinkParams]] = []
        used_ports: dict[str, dict[int, int]] = {s: {} for s in switches}
        host_links: dict[str, int] = {}
        seen_pairs: dict[frozenset, int] = {}
        for i, entry in enumerate(raw):
            path = ("links", i)
            if not isinstance(entry, list) or not 2 <= len(entry) <= 4:
                self.problem(path, "must be [node, node], [node, node, {options}] or [node, node, delay, bw]")
                continue
            ends = [self._endpoint(entry[k], path + (k,), hosts, switches) for k in (0, 1)]
            params = self._link_params(entry[2:], path)
            if None in ends:
                continue
            a, b = ends
            if a.node == b.node:
                self.problem(path, f"links {a.node} to itself")
                continue
            if a.node in hosts and b.node in hosts:
                self.problem(path, f"links two hosts ({a.node}, {b.node}); hosts connect to switches only")
                continue
            pair = frozenset((a.node, b.node))
            if pair in seen_pairs and pair & set(hosts):
                self.problem(path, f"duplicate link between {a.node} and {b.node} (also links[{seen_pairs[pair]}])")
                continue
            seen_pairs.setdefault(pair, i)
            bad = False
            for end in (a, b):
                if end.node in hosts:
                    if end.node in host_links:
                        self.problem(
                            path,
                            f"host {end.node} already has a link (links[{host_links[end.node]}]); "
                            "a host has one interface",
                        )
                        bad = True
                    else:
                        host_links[end.node] = i
                elif end.port is not None:
                    if end.port in used_ports[end.node]:
                        self.problem(
                            path,
                            f"port {end.node}-p{end.port} is already used by links[{used_ports[end.node][end.port]}]",
                        )
                        bad = True
                    else:
                        used_ports[end.node][end.port] = i
            if not bad and params is not None:
                parsed.append((i, a, b, params))
        links = []
        for i, a, b, params in parsed:  # ports left out: the lowest free one, in file order
            ends = []
            for end in (a, b):
                if end.node in switches and end.port is None:
                    port = next(p for p in range(1, MAX_PORT + 2) if p not in used_ports[end.node])
                    if port > MAX_PORT:
                        self.problem(("links", i), f"{end.node} has no free port left")
                    used_ports[end.node][port] = i
                    end = Endpoint(end.node, port)
                ends.append(end)
            links.append(Link(ends[0], ends[1], params))
        for name in hosts:
            if name not in host_links and not any(
                isinstance(e, list) and name in e[:2] for e in raw
            ):  # its link has its own error
                self.problem(("hosts", name), f"host {name} has no link")
        return links

    def _endpoint(self, raw: Any, path: tuple, hosts: dict, switches: dict) -> Endpoint | None:
        if not isinstance(raw, str):
            self.problem(path, f"endpoint must be a string like 'h1' or 's1-p2', not {json.dumps(raw)}")
            return None
        match = _SWITCH_PORT.match(raw)
        node, port = (match["node"], int(match["port"])) if match else (raw, None)
        if node in hosts:
            if port is not None:
                self.problem(path, f"'{raw}': a host has one interface (eth0); write just '{node}'")
                return None
            return Endpoint(node, None)
        if node in switches:
            if port is not None and not 1 <= port <= MAX_PORT:
                self.problem(path, f"'{raw}': port must be 1..{MAX_PORT}")
                return None
            return Endpoint(node, port)
        if node not in self.declared:  # a declared node with errors has its own message
            self.problem(path, f"unknown node '{node}'")
        return None

    def _link_params(self, rest: list, path: tuple) -> LinkParams | None:
        if not rest:
            return LinkParams()
        if isinstance(rest[0], dict):
            if len(rest) > 1:
                self.problem(path, "options object must be the last element")
                return None
            opts = rest[0]
            self._unknown_keys(opts, _LINK_KEYS, path + (2,))
            opt_path = path + (2,)
        else:  # tutorials: [a, b, "delay", bw]
            opts = {"delay": rest[0]}
            if len(rest) > 1:
                opts["bw"] = rest[1]
            opt_path = path
        ok = True
        bw = delay = loss = queue = None
        if "bw" in opts:
            bw = self._number(opts["bw"], opt_path + ("bw",), "bw (Mbit/s)", 0, MAX_BW_MBITS, low_open=True)
            ok &= bw is not None
        if "delay" in opts:
            delay = self._delay(opts["delay"], opt_path + ("delay",))
            ok &= delay is not None
        if "loss" in opts:
            loss = self._number(opts["loss"], opt_path + ("loss",), "loss (percent)", 0, 100, high_open=True)
            ok &= loss is not None
        if "max_queue_size" in opts:
            queue = self._int(opts["max_queue_size"], opt_path + ("max_queue_size",), 1, 1_000_000)
            ok &= queue is not None
        return LinkParams(bw, delay, loss, queue) if ok else None

    def _aggregation(self, raw: Any, hosts: dict[str, Host], switches: dict[str, Switch]) -> Aggregation | None:
        path = ("aggregation",)
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.problem(path, "must be an object {switch, service_ip, service_mac?}")
            return None
        self._unknown_keys(raw, _AGG_KEYS, path)
        switch = raw.get("switch")
        if switch not in switches and switch not in self.declared_switches:  # else it has its own message
            self.problem(
                path + ("switch",),
                f"unknown switch {json.dumps(switch)}" + (f" (switches: {', '.join(switches)})" if switches else ""),
            )
        service_ip = self._ip(raw.get("service_ip"), path + ("service_ip",))
        service_mac = self._mac(raw.get("service_mac", DEFAULT_SERVICE_MAC), path + ("service_mac",))
        for host in hosts.values():
            if service_ip is not None and host.ip.ip == service_ip:
                self.problem(path + ("service_ip",), f"{service_ip} is host {host.name}'s address")
            if service_mac is not None and host.mac == service_mac:
                self.problem(path + ("service_mac",), f"{service_mac} is host {host.name}'s MAC")
        leaves = self._leaves(raw.get("leaves", {}), switch, switches, path + ("leaves",))
        if switch not in switches or service_ip is None or service_mac is None or leaves is None:
            return None
        taken = [service_ip] + [leaf.service_ip for leaf in leaves]
        if len(set(taken)) != len(taken):
            self.problem(path + ("leaves",), "every leaf needs its own service_ip, different from the spine's")
            return None
        return Aggregation(switch, service_ip, service_mac, leaves)

    def _leaves(self, raw: Any, spine: Any, switches: dict[str, Switch], path: tuple) -> tuple[Leaf, ...] | None:
        if not isinstance(raw, dict):
            self.problem(path, "must be an object {switch: {service_ip, service_mac?}}")
            return None
        leaves = []
        for name, entry in raw.items():
            where = path + (name,)
            if name not in switches:
                self.problem(where, f"unknown switch {json.dumps(name)}")
                continue
            if name == spine:
                self.problem(where, "the spine (aggregation.switch) cannot also be a leaf")
                continue
            if not isinstance(entry, dict):
                self.problem(where, "must be an object {service_ip, service_mac?}")
                continue
            self._unknown_keys(entry, _LEAF_KEYS, where)
            ip = self._ip(entry.get("service_ip"), where + ("service_ip",))
            mac = self._mac(entry.get("service_mac", DEFAULT_SERVICE_MAC), where + ("service_mac",))
            if ip is not None and mac is not None:
                leaves.append(Leaf(name, ip, mac))
        if len(leaves) != len(raw):
            return None
        return tuple(leaves)

    def _workers(self, raw: Any, hosts: dict[str, Host]) -> tuple[str, ...]:
        if raw is None:
            workers = tuple(hosts)
        elif not isinstance(raw, list) or not all(isinstance(w, str) for w in raw):
            self.problem(("workers",), "must be a list of host names")
            return ()
        else:
            workers = tuple(raw)
            for i, name in enumerate(workers):
                if name not in hosts:
                    self.problem(("workers", i), f"unknown host '{name}'")
                elif workers.index(name) != i:
                    self.problem(("workers", i), f"host '{name}' is listed twice")
        if not 1 <= len(workers) <= MAX_WORKERS:
            self.problem(("workers",), f"{len(workers)} workers; a THC job has 1..{MAX_WORKERS}")
        return workers

    def _servers(
        self, raw: Any, hosts: dict[str, Host], workers: tuple[str, ...], agg: Aggregation | None
    ) -> dict[str, tuple[ParameterServer, ...]]:
        """Placements of parameter servers: 1..n servers each, one per host, every service address its own."""
        if not isinstance(raw, dict):
            self.problem(("servers",), "must be an object {placement: [{host, service_ip, service_mac}, ...]}")
            return {}
        taken: dict[Any, str] = {h.ip.ip: f"host {h.name}'s address" for h in hosts.values()}
        taken.update((h.mac, f"host {h.name}'s MAC") for h in hosts.values())
        if agg is not None:
            for owner in (agg, *agg.leaves):
                taken[owner.service_ip] = "an aggregating switch's service address"
                taken[owner.service_mac] = "an aggregating switch's service MAC"
        placements = {}
        for name, entries in raw.items():
            path = ("servers", name)
            if not _PLACEMENT.match(name):
                self.problem(path, f"bad placement name '{name}': lower-case letter then letters/digits, at most 16")
                continue
            if not isinstance(entries, list) or not 1 <= len(entries) <= max(len(workers), 1):
                self.problem(path, f"must be a list of 1..{len(workers)} servers (at most one per worker)")
                continue
            servers = []
            for i, entry in enumerate(entries):
                server = self._server(name, entry, path + (i,), hosts, taken)
                if server is not None and any(s.host == server.host for s in servers):
                    self.problem(path + (i, "host"), f"host {server.host} already holds a server of {name}")
                elif server is not None:
                    servers.append(server)
            if len(servers) == len(entries):
                placements[name] = tuple(servers)
        return placements

    def _server(self, placement: str, raw: Any, path: tuple, hosts: dict, taken: dict) -> ParameterServer | None:
        if not isinstance(raw, dict):
            self.problem(path, "must be an object {host, service_ip, service_mac}")
            return None
        self._unknown_keys(raw, _SERVER_KEYS, path)
        host = raw.get("host")
        if host not in hosts:
            if host not in self.declared:
                self.problem(path + ("host",), f"unknown host {json.dumps(host)}")
            return None
        if "service_mac" not in raw:
            self.problem(path, "missing 'service_mac': every server needs a MAC of its own")
            return None
        ip = self._ip(raw.get("service_ip"), path + ("service_ip",))
        mac = self._mac(raw["service_mac"], path + ("service_mac",))
        if ip is None or mac is None:
            return None
        for value, key in ((ip, "service_ip"), (mac, "service_mac")):
            if value in taken:
                self.problem(path + (key,), f"{value} is {taken[value]}")
                return None
        server = ParameterServer(placement, host, ip, mac)
        taken[ip], taken[mac] = f"server {server.name}'s service address", f"server {server.name}'s service MAC"
        return server

    def _check_graph(self, make, hosts, switches, links, workers) -> None:
        """Every node must reach the aggregating switch."""
        topo = make("check", hosts, switches, tuple(links), Aggregation("", ipaddress.IPv4Address(0), ""), workers)
        agg = self.data["aggregation"]["switch"]
        for name in list(switches) + list(hosts):
            if name == agg:
                continue
            try:
                topo.path(name, agg)
            except KeyError:
                kind = "hosts" if name in hosts else "switches"
                self.problem((kind, name), f"{name} is not connected to the aggregating switch {agg}")

    # ---- scalar checks ----------------------------------------------------------------------------

    def _int(self, raw: Any, path: tuple, low: int, high: int) -> int | None:
        if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
            self.problem(path, f"{json.dumps(raw)}: expected an integer in {low}..{high}")
            return None
        return raw

    def _number(
        self, raw: Any, path: tuple, what: str, low: float, high: float, low_open: bool = False, high_open: bool = False
    ) -> float | None:
        ok = isinstance(raw, (int, float)) and not isinstance(raw, bool)
        if ok:
            ok = (raw > low if low_open else raw >= low) and (raw < high if high_open else raw <= high)
        if not ok:
            lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
            self.problem(path, f"{json.dumps(raw)}: {what} must be a number in {lo}{low:g}, {high:g}{hi}")
            return None
        return float(raw)

    def _delay(self, raw: Any, path: tuple) -> float | None:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool) and 0 <= raw <= 10_000:
            return float(raw)
        match = _DELAY.match(raw) if isinstance(raw, str) else None
        if match:
            value = float(match[1]) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[match[3]]
            if value <= 10_000:
                return value
        self.problem(path, f'{json.dumps(raw)}: delay must be like "2ms", "500us" or milliseconds 0..10000')
        return None

    def _ip_interface(self, raw: Any, path: tuple) -> ipaddress.IPv4Interface | None:
        try:
            if not isinstance(raw, str) or "/" not in raw:
                raise ValueError
            iface = ipaddress.IPv4Interface(raw)
        except ValueError:
            self.problem(path, f'{json.dumps(raw)}: expected an IPv4 address with prefix, like "10.0.0.1/24"')
            return None
        if (
            iface.ip in (iface.network.network_address, iface.network.broadcast_address)
            and iface.network.prefixlen < 31
        ):
            self.problem(path, f"{raw}: is the network or broadcast address of {iface.network}")
            return None
        if iface.ip.is_multicast or iface.ip.is_loopback or iface.ip.is_unspecified:
            self.problem(path, f"{raw}: not a unicast host address")
            return None
        return iface

    def _ip(self, raw: Any, path: tuple) -> ipaddress.IPv4Address | None:
        try:
            if not isinstance(raw, str):
                raise ValueError
            ip = ipaddress.IPv4Address(raw)
        except ValueError:
            self.problem(path, f'{json.dumps(raw)}: expected an IPv4 address like "10.0.0.254"')
            return None
        if ip.is_multicast or ip.is_loopback or ip.is_unspecified:
            self.problem(path, f"{raw}: not a unicast address")
            return None
        return ip

    def _mac(self, raw: Any, path: tuple) -> str | None:
        if not isinstance(raw, str) or not _MAC.match(raw.lower()):
            self.problem(path, f'{json.dumps(raw)}: expected a MAC address like "08:00:00:00:00:01"')
            return None
        mac = raw.lower()
        if int(mac[:2], 16) & 1:
            self.problem(path, f"{raw}: a multicast MAC (lowest bit of the first byte set)")
            return None
        if mac == "00:00:00:00:00:00":
            self.problem(path, f"{raw}: the zero MAC")
            return None
        return mac


def _path_label(path: tuple) -> str:
    label = ""
    for part in path:
        label += f"[{part}]" if isinstance(part, int) else (f".{part}" if label else str(part))
    return label


def _json_lines(text: str) -> tuple[dict[tuple, int], list[tuple[tuple, int]]]:
    """The line where each value of a valid JSON document starts, keyed by its path
    (("links", 3, 0) is the first element of the fourth link), and the (path, line) of every key
    that appears twice in the same object."""
    lines: dict[tuple, int] = {}
    duplicates: list[tuple[tuple, int]] = []
    decoder = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")

    def skip(pos: int) -> int:
        return ws.match(text, pos).end()

    def value(pos: int, path: tuple) -> int:
        pos = skip(pos)
        lines[path] = text.count("\n", 0, pos) + 1
        char = text[pos]
        if char == "{":
            pos = skip(pos + 1)
            if text[pos] == "}":
                return pos + 1
            while True:
                key, pos = json.decoder.scanstring(text, skip(pos) + 1)
                key_line = text.count("\n", 0, pos) + 1
                if path + (key,) in lines:
                    duplicates.append((path + (key,), key_line))
                pos = skip(pos) + 1  # ':'
                pos = value(pos, path + (key,))
                lines.setdefault(path + (key,), key_line)
                pos = skip(pos)
                if text[pos] == "}":
                    return pos + 1
                pos += 1  # ','
        if char == "[":
            pos = skip(pos + 1)
            if text[pos] == "]":
                return pos + 1
            index = 0
            while True:
                pos = skip(value(pos, path + (index,)))
                index += 1
                if text[pos] == "]":
                    return pos + 1
                pos += 1
        _, end = decoder.raw_decode(text, pos)
        return end

    try:
        value(0, ())
    except (IndexError, ValueError):  # not the valid JSON we were promised: no line numbers
        return {}, []
    return lines, duplicates
