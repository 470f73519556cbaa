"""Two-level aggregation in-process: leaf switches and a spine, each a software switch running the compiled
program, chained by a packet loop with seeded loss, and workers that retransmit what is still unanswered.
With `levels=1` the same network aggregates at the spine only (the leaves just route), for comparison.
`backend` picks the software switch's engine; `switches` builds other switches instead (BMv2 in the tests).

Addresses and ports follow p4/README.md, "Two-level aggregation": leaf L serves its workers on ports 1..W
and reaches the spine on port W + 1; the spine reaches leaf L on port L + 1. Worker ids are global
(leaf L holds workers L·W .. L·W + W − 1), so the spine's result can carry any worker's id back down.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import contract
from contract.job import JobSpec
from controller import jobs, two_level
from controller.topology import Topology
from harness import frames as tp
from harness.switches import SoftwareTarget, SwitchTarget
from thc.config import THCConfig

SPINE_IP = "10.0.9.254"
KEY = 0x7EAF5917


def ip_int(ip: str) -> int:
    return struct.unpack("!I", bytes(int(x) for x in ip.split(".")))[0]


def leaf_ip(leaf: int) -> str:
    return f"10.0.{leaf + 1}.254"


def switch_mac(index: int) -> int:
    return 0xFE0000000000 + index


def mac_str(mac: int) -> str:
    return ":".join(f"{b:02x}" for b in mac.to_bytes(6, "big"))


def worker_ip(w: int) -> str:
    return f"10.1.0.{w + 1}"


def worker_mac(w: int) -> int:
    return 0x020000000000 + w + 1


@dataclass
class LeafSpine:
    """`leaves` leaf switches of `per_leaf` workers each and one spine, running one job (`spec`) as `thc-ctl`
    would: placed by the controller's planners on the fabric's topology and installed with its writes."""

    leaves: int
    per_leaf: int
    table: object
    job_id: int = 7
    n_slots: int = 4
    epoch: int = 3
    loss: float = 0.0
    seed: int = 0
    backend: str = "python"
    levels: int = 2
    # other switches than the software switch: switches(name, ports) -> a SwitchTarget with those ports
    # (tests/support/targets.py's bmv2_switches runs simple_switch_grpc on veth pairs)
    switches: Callable[[str, int], SwitchTarget] | None = None
    spine: SwitchTarget = field(init=False)
    leaf: list[SwitchTarget] = field(init=False)
    spine_link_bytes: int = field(init=False, default=0)

    def __post_init__(self):
        if self.levels not in (1, 2):
            raise ValueError(f"levels must be 1 or 2, not {self.levels}")
        self.n = self.leaves * self.per_leaf
        self.rng = random.Random(self.seed)
        table = self.table
        codec = THCConfig(bits=table.bits, granularity=table.granularity, clip=table.clip, table=table.kind)
        self.spec = JobSpec(self.job_id, self.n, codec, window=self.n_slots, slots=self.n_slots, key=KEY)
        self.lane_bits = self.spec.lane_bits
        self.coords = contract.per_request(self.lane_bits)
        self.topology = self._topology()
        self.leaf = []
        self.spine = self._switch("spine", self.leaves)
        self.leaf = [self._switch(f"leaf{i}", self.per_leaf + 1) for i in range(self.leaves)]
        self._route()
        self._program()

    def _switch(self, name: str, ports: int) -> SwitchTarget:
        if self.switches is None:
            return SoftwareTarget(self.backend)
        try:
            return self.switches(name, ports)
        except BaseException:
            self.close()
            raise

    def _topology(self) -> Topology:
        """The fabric as a topology file would describe it (the addresses and ports above): what the
        controller's planners place a job on. On one level the spine aggregates and the leaves only route."""
        hosts = {f"h{w + 1}": {"ip": f"{worker_ip(w)}/24", "mac": mac_str(worker_mac(w))} for w in range(self.n)}
        links = [[f"h{w + 1}", f"leaf{w // self.per_leaf}-p{w % self.per_leaf + 1}"] for w in range(self.n)]
        links += [[f"leaf{i}-p{self.per_leaf + 1}", f"spine-p{i + 1}"] for i in range(self.leaves)]
        aggregation = {"switch": "spine", "service_ip": SPINE_IP, "service_mac": mac_str(switch_mac(99))}
        if self.levels == 2:
            aggregation["leaves"] = {
                f"leaf{i}": {"service_ip": leaf_ip(i), "service_mac": mac_str(switch_mac(i))}
                for i in range(self.leaves)
            }
        switches = {"spine": {}} | {f"leaf{i}": {} for i in range(self.leaves)}
        data = {"name": "leafspine", "hosts": hosts, "switches": switches, "links": links, "aggregation": aggregation}
        return Topology.from_dict(data)

    def _route(self) -> None:
        """IPv4 routes, the fabric's own (no job's): each leaf reaches its workers and the spine; the spine
        reaches the leaves (two levels) or every worker through its leaf (one level)."""
        for leaf in range(self.leaves):
            self.leaf[leaf].add_route(ip_int(SPINE_IP), 32, switch_mac(99), self.per_leaf + 1)
            for port, w in enumerate(self.local_workers(leaf), start=1):
                self.leaf[leaf].add_route(ip_int(worker_ip(w)), 32, worker_mac(w), port)
                if self.levels == 1:
                    self.spine.add_route(ip_int(worker_ip(w)), 32, worker_mac(w), leaf + 1)
            if self.levels == 2:
                self.spine.add_route(ip_int(leaf_ip(leaf)), 32, switch_mac(leaf), leaf + 1)

    def _program(self) -> None:
        """The job, placed by the controller's planners (two_level.plan: the spine's part, whose workers are
        the leaves, and each leaf's, with its uplink) and installed with the controller's writes."""
        hosts = list(self.topology.workers)
        options = {"words": getattr(self.spine, "words", None), "slot_base": 0, "epoch": self.epoch}
        if self.levels == 2:
            for name, writes in two_level.fresh_writes(
                two_level.plan(self.topology, self.spec, hosts, **options)
            ).items():
                self._target(name).apply(writes)
            return
        job = jobs.plan_job(self.spec, jobs.workers_from_topology(self.topology, "spine", hosts), [], **options)
        self.spine.apply(jobs.fresh_writes(job, SPINE_IP))

    def _target(self, name: str) -> SwitchTarget:
        return self.spine if name == "spine" else self.leaf[int(name.removeprefix("leaf"))]

    def local_workers(self, leaf: int) -> list[int]:
        return list(range(leaf * self.per_leaf, (leaf + 1) * self.per_leaf))

    def request(
        self, w: int, idx: np.ndarray, slot: int, rnd: int, kind: int = contract.KIND_REQUEST, op: int = contract.OP_THC
    ) -> bytes:
        """Worker `w`'s request (or RELEASE) of (slot, round), to its leaf (or the spine, on one level): THC
        indices `idx`, or with op NORM up to NORMS_PER_REQUEST norms."""
        leaf = w // self.per_leaf
        service = leaf_ip(leaf) if self.levels == 2 else SPINE_IP
        lane_bits = self.lane_bits if op == contract.OP_THC else contract.LANES_INT32
        if kind != contract.KIND_REQUEST:
            payload = tp.release_payload(op)
        elif op == contract.OP_NORM:
            payload = tp.pack_norms(idx)
        else:
            payload = tp.request_payload(idx, self.lane_bits)
        return tp.frame(
            (mac_str(worker_mac(w)), worker_ip(w)),
            (mac_str(switch_mac(leaf)), service),
            op=op,
            kind=kind,
            job_id=self.job_id,
            worker_id=w,
            slot=slot,
            round_=rnd,
            lane_bits=lane_bits,
            key=KEY,
            payload=payload,
            sport=40000 + w,
        )

    def _lost(self) -> bool:
        return self.loss > 0 and self.rng.random() < self.loss

    def release(self, w: int, slot: int, rnd: int, op: int = contract.OP_THC) -> bytes:
        """Worker `w`'s RELEASE of (slot, round), to its leaf (or the spine, on one level)."""
        return self.request(w, np.zeros(0, dtype=np.uint8), slot, rnd, kind=contract.KIND_RELEASE, op=op)

    def carry(self, sent: list[tuple[int, bytes]]) -> dict[int, list[bytes]]:
        """Frames sent by workers [(w, frame)], carried through the fabric (each link losing `loss`) until
        nothing moves; returns what each worker received, in order."""
        queue = deque()
        for w, frame in sent:
            if not self._lost():
                queue.append(("leaf", w // self.per_leaf, w % self.per_leaf + 1, frame))
        received: dict[int, list[bytes]] = {}
        while queue:
            kind, index, port, frame = queue.popleft()
            sw = self.spine if kind == "spine" else self.leaf[index]
            for out_port, out in sw.send(port, frame):
                if kind == "spine":
                    self.spine_link_bytes += len(out)
                    if not self._lost():
                        queue.append(("leaf", out_port - 1, self.per_leaf + 1, out))
                elif out_port == self.per_leaf + 1:
                    self.spine_link_bytes += len(out)
                    if not self._lost():
                        queue.append(("spine", 0, index + 1, out))
                elif not self._lost():
                    received.setdefault(self.local_workers(index)[out_port - 1], []).append(out)
        return received

    def run_round(
        self, idx: list[np.ndarray], slot: int, rnd: int, max_tries: int = 50, op: int = contract.OP_THC
    ) -> dict[int, bytes]:
        """Every worker sends its request (and retransmits it while unanswered, like a timeout would);
        returns the first result frame each worker received for (slot, round)."""
        results: dict[int, bytes] = {}
        for _ in range(max_tries):
            waiting = [w for w in range(self.n) if w not in results]
            if not waiting:
                return results
            received = self.carry([(w, self.request(w, idx[w], slot, rnd, op=op)) for w in waiting])
            for w, frames in received.items():
                for out in frames:
                    thc = tp.Parsed.of(out)
                    if (thc.slot, thc.round, thc.worker_id) == (slot, rnd, w):
                        results.setdefault(w, out)
        raise AssertionError(f"workers {sorted(set(range(self.n)) - set(results))} got no result in {max_tries} tries")

    def close(self) -> None:
        for sw in [getattr(self, "spine", None), *self.leaf]:
            if sw is not None:
                sw.close()


# ---- a topology file's network, switch by switch --------------------------------------------------


def worker_request(topo, host: str, spec: JobSpec, slot: int, rnd: int, idx, kind: int = 0) -> bytes:
    """`host`'s THC request (or RELEASE, kind 3) for (slot, round) of job `spec`, addressed to its service
    (its leaf's)."""
    ip, mac = topo.service_of(host)
    h = topo.hosts[host]
    return tp.frame(
        (h.mac, h.address),
        (mac, str(ip)),
        op=contract.OP_THC,
        kind=kind,
        job_id=spec.job_id,
        worker_id=topo.worker_id(host),
        slot=slot,
        round_=rnd,
        lane_bits=spec.lane_bits,
        key=spec.key,
        payload=tp.request_payload(idx, spec.lane_bits) if kind == 0 else tp.release_payload(contract.OP_THC),
    )


def walk(topo, send, frames: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    """Carry `frames` (host, frame) across the topology's links until nothing moves: `send(switch, port,
    frame)` returns the switch's outputs [(port, frame)]. Returns what each host received, in order."""
    queue = deque()
    for host, frame in frames:
        peer = topo.links_of(host)[0].other(host)
        queue.append((peer.node, peer.port, frame))
    received: dict[str, list[bytes]] = {}
    while queue:
        switch, port, frame = queue.popleft()
        for out_port, out in send(switch, port, frame):
            peer = next(link for link in topo.links_of(switch) if link.end(switch).port == out_port).other(switch)
            if peer.node in topo.hosts:
                received.setdefault(peer.node, []).append(out)
            else:
                queue.append((peer.node, peer.port, out))
    return received
