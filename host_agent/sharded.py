"""`ShardedAggregator`: one worker's aggregator across k parameter servers, as BytePS shards its server.

A parameter server here is the THC program itself on a host's one interface (topologies/servers.py): it
speaks the worker protocol and sums table values without decoding them, as the switch does. So a shard is an
ordinary SwitchAggregator pointed at its server, and this class only splits each call by coordinates and
puts the sums back: THC's chunk j goes whole to shard j mod k with its norm (so no chunk is padded twice),
FIX32's one chunk is cut into k pieces at cell boundaries. The shards run at once, one thread each; every
worker makes the same calls in the same order, so each server sees the usual schedule of one job."""

from __future__ import annotations

import ipaddress
import json
import socket
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from contract.job import KEYS, JobSpec
from host_agent import transport, wire
from host_agent.aggregator import SwitchAggregator

Part = tuple[int, int, int]  # (chunk, start, stop): the coordinates of one chunk that one shard sums
REPORTED = ("requests", "retransmissions", "timer_retransmissions", "fast_retransmissions", "probe_retransmissions")
REPORTED += ("rejected_results", "operations")  # the counters the runner's summary adds up


@dataclass(frozen=True)
class Server:
    """Where one shard is summed: a server's service address, and the key its job got there."""

    name: str
    service_ip: str
    service_mac: str
    key: int


def save_servers(path: str | Path, servers: Sequence[Server]) -> None:
    """The file a ps mode's workers are started with (thc-worker --servers), in shard order."""
    Path(path).write_text(json.dumps([asdict(s) for s in servers], indent=1) + "\n")


def _server(entry: dict) -> Server:
    """One entry of a servers file, its addresses and key checked (ValueError, TypeError or KeyError)."""
    server = Server(str(entry["name"]), str(entry["service_ip"]), str(entry["service_mac"]), entry["key"])
    ipaddress.IPv4Address(server.service_ip)  # ValueError names the address
    wire.mac_bytes(server.service_mac)
    if isinstance(server.key, bool) or not isinstance(server.key, int) or server.key not in KEYS:
        raise ValueError(f"{server.name}: key {server.key!r} is not a job key (1..{KEYS[-1]})")
    return server


def load_servers(path: str | Path) -> list[Server]:
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))
        servers = [_server(e) for e in entries]
    except OSError as exc:
        raise ValueError(f"cannot read the servers file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text (a JSON list of servers)") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: not a list of servers {{name, service_ip, service_mac, key}} ({exc})") from None
    if not servers:
        raise ValueError(f"{path}: no servers")
    return servers


def whole_chunks(sizes: Sequence[int], k: int) -> list[list[Part]]:
    """Per shard its parts: chunk j whole to shard j mod k."""
    return [[(j, 0, sizes[j]) for j in range(s, len(sizes), k)] for s in range(k)]


def cell_pieces(sizes: Sequence[int], k: int, cell: int) -> list[list[Part]]:
    """Per shard its parts: every chunk cut into k pieces of whole cells (the last one shorter), piece s to
    shard s; a chunk of fewer than k cells leaves the last shards out (an empty one goes to shard 0)."""
    plan: list[list[Part]] = [[] for _ in range(k)]
    for j, size in enumerate(sizes):
        cells = -(-size // cell)
        piece = -(-cells // k) * cell
        for s in range(k):
            start, stop = s * piece, min(size, (s + 1) * piece)
            if start < stop or (s == 0 and size == 0):
                plan[s].append((j, start, stop))
    return plan


def join(sizes: Sequence[int], plan: list[list[Part]], results: dict[int, list]) -> list:
    """Per chunk its array, from the shards' results (per shard, one array per part) put in place."""
    pieces: list[list] = [[] for _ in sizes]
    for s, arrays in results.items():
        for (j, start, _), array in zip(plan[s], arrays):
            pieces[j].append((start, array))
    out = []
    for parts in pieces:
        parts.sort(key=lambda p: p[0])
        out.append(parts[0][1] if len(parts) == 1 else np.concatenate([a for _, a in parts]))
    return out


def join_counts(sizes: Sequence[int], plan: list[list[Part]], counts: dict[int, object]) -> int | list[np.ndarray]:
    """The contributors of a call: one count when every shard summed the same number of workers, else per
    chunk and coordinate (partial aggregation released slots on some server), as THC's decode takes them."""
    whole = [int(c) for c in counts.values() if isinstance(c, (int, np.integer))]
    if whole and len(whole) == len(counts) and len(set(whole)) == 1:
        return whole[0]
    per_part = {
        s: [np.full(stop - start, c, np.int64) for _, start, stop in plan[s]] if isinstance(c, (int, np.integer)) else c
        for s, c in counts.items()
    }
    return [np.asarray(a, np.int64) for a in join(sizes, plan, per_part)]


def accept_only_from(shard: SwitchAggregator, service_ip: str) -> None:
    """Narrow the shard's kernel filter to results from its own server: k shards on one interface would
    otherwise each get every server's results, parse them and drop the others' by their key. (A transport
    without a socket, e.g. the loopback wire's port, is left as it is.)"""
    fileno = getattr(shard.protocol.transport, "fileno", None)
    if fileno is None:
        return
    results = transport.thc_result_filter()
    ip_source = transport.BPF_LD | transport.BPF_W | transport.BPF_ABS
    equal = transport.BPF_JMP | transport.BPF_JEQ | transport.BPF_K
    source = struct.unpack("!I", socket.inet_aton(service_ip))[0]
    # IPv4 source at byte 26; another source jumps to the results program's last instruction: drop
    program = [(ip_source, 26, 0, 0), (equal, source, 0, len(results) - 1), *results]
    with socket.fromfd(fileno(), socket.AF_PACKET, socket.SOCK_RAW) as sock:  # a dup of the same socket
        transport.attach_filter(sock, program)


class ShardedAggregator:
    """The hook's aggregator (ddp.aggregator_hooks) over k servers: all_max, all_sum_table_values, all_sum_int32.

    `shards`: one SwitchAggregator per server, in the same order on every worker; `cell`: the FIX32 values a
    request carries (JobSpec.fix32_per_request), the unit a FIX32 chunk is cut in."""

    def __init__(self, shards: Sequence[SwitchAggregator], cell: int):
        if not shards:
            raise ValueError("a sharded aggregator needs at least one server")
        self.shards = list(shards)
        self.cell = cell
        self.last_max_partial = False
        self.generation = 0  # no failover through servers: a worker failure stops a ps mode
        self._pool = ThreadPoolExecutor(len(shards), "thc-shard") if len(shards) > 1 else None

    @classmethod
    def open(
        cls,
        iface: str,
        spec: JobSpec,
        worker_id: int,
        servers: Sequence[Server],
        src_ip: str,
        src_mac: str,
        **options,
    ) -> ShardedAggregator:
        """A SwitchAggregator per server on `iface` (SwitchAggregator.open's `options`), each with the job's
        description and that server's key."""
        shards: list[SwitchAggregator] = []
        try:
            for server in servers:
                shard = SwitchAggregator.open(
                    iface,
                    spec.replace(key=server.key),
                    worker_id,
                    server.service_ip,
                    server.service_mac,
                    src_ip,
                    src_mac,
                    **options,
                )
                shards.append(shard)
                accept_only_from(shard, server.service_ip)
        except Exception:
            for shard in shards:
                shard.close()
            raise
        return cls(shards, spec.fix32_per_request)

    @property
    def n_workers(self) -> int:
        return self.shards[0].n_workers

    # ---- the hook's interface ----------------------------------------------------------------------

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        """Element-wise max over workers; element i (chunk i's norm) on shard i mod k."""
        values = t.detach().to("cpu", torch.float32).reshape(-1)
        k = len(self.shards)
        got = self._each({s: partial(self.shards[s].all_max, values[s::k]) for s in range(min(k, values.numel()))})
        out = torch.empty_like(values)
        for s, maxima in got.items():
            out[s::k] = maxima
        self.last_max_partial = any(self.shards[s].last_max_partial for s in got)
        return out.reshape(t.shape).to(device=t.device, dtype=t.dtype)

    def all_sum_table_values(self, indices: Sequence[np.ndarray], table) -> tuple[list[np.ndarray], object]:
        """Per chunk, Σ_workers table[index] and the contributors; chunk j summed by shard j mod k."""
        sizes = [len(chunk) for chunk in indices]
        plan = whole_chunks(sizes, len(self.shards))
        return self._sum(sizes, plan, lambda shard, parts: shard.all_sum_table_values(parts, table), indices)

    def all_sum_int32(self, values: Sequence[np.ndarray]) -> tuple[list[np.ndarray], object]:
        """Per chunk the int32 sums and the contributors; each chunk cut into k pieces of whole cells."""
        values = [np.asarray(v) for v in values]
        sizes = [len(v) for v in values]
        plan = cell_pieces(sizes, len(self.shards), self.cell)
        return self._sum(sizes, plan, lambda shard, parts: shard.all_sum_int32(parts), values)

    def _sum(self, sizes, plan, call: Callable, arrays) -> tuple[list[np.ndarray], object]:
        calls = {
            s: partial(call, self.shards[s], [arrays[j][start:stop] for j, start, stop in parts])
            for s, parts in enumerate(plan)
            if parts
        }
        got = self._each(calls)
        sums = join(sizes, plan, {s: result[0] for s, result in got.items()})
        return sums, join_counts(sizes, plan, {s: result[1] for s, result in got.items()})

    def _each(self, calls: dict[int, Callable]) -> dict:
        """Run the shards' calls at once and wait for all of them (a shard must not be left mid-operation
        when the next call starts); then raise the first shard's error, if any."""
        if self._pool is None or len(calls) == 1:
            return {s: call() for s, call in calls.items()}
        futures = {s: self._pool.submit(call) for s, call in calls.items()}
        errors = [f.exception() for f in futures.values()]
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            raise error
        return {s: f.result() for s, f in futures.items()}

    # ---- bookkeeping ------------------------------------------------------------------------------

    def stats(self) -> dict:
        """The counters the runner adds up, summed over the shards; every shard's own under "shards"."""
        per_shard = [shard.stats() for shard in self.shards]
        out = {key: sum(s.get(key, 0) for s in per_shard) for key in REPORTED}
        out["generation"] = 0
        out["rejoins"] = []
        out["shards"] = per_shard
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for shard in self.shards:
            shard.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
