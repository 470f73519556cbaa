"""A tiny pure-Python aggregating switch that follows p4/README.md, for tests without the P4 engine.

It has the engine's `process(port, frame)` interface, one service address and any number of jobs; per cell
it keeps the (epoch, round) tag, the worker bitmap, the remaining count and the sums as the contract
describes, and records every decision so tests can check what the switch saw. It is independent of
emulator/ and p4/build/ on purpose: host-agent tests can check the protocol against the contract alone,
and the same tests then run against the compiled program (tests/test_host_agent_engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from host_agent import wire

SERVICE = wire.Endpoint("02:00:00:00:00:fe", "10.0.0.254")


def worker_endpoint(worker_id: int) -> wire.Endpoint:
    return wire.Endpoint(f"02:00:00:00:01:{worker_id:02x}", f"10.0.1.{worker_id + 1}")


@dataclass
class FakeJob:
    n_workers: int
    n_slots: int
    table: list[int]
    lane_bits: int = 16
    epoch: int = 1
    ports: dict[int, int] = field(default_factory=dict)  # worker id -> switch port


class FakeSwitch:
    def __init__(self):
        self.jobs: dict[int, FakeJob] = {}
        self.cells: dict[tuple[int, int, int], dict] = {}
        self.events: list[str] = []
        self.arrivals: list[tuple[int, int, int, int]] = []  # (worker, slot, round, op) of every request

    def add_job(self, job_id: int, job: FakeJob) -> None:
        self.jobs[job_id] = job

    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        p = wire.parse_frame(frame)
        if p is None or frame[30:34] != wire.ip_bytes(SERVICE.ip) or p.kind != wire.KIND_REQUEST:
            self.events.append("FORWARDED")
            return []
        job = self.jobs.get(p.job_id)
        if job is None or p.worker_id not in job.ports or p.slot >= job.n_slots:
            self.events.append("REJECTED")
            return []
        self.arrivals.append((p.worker_id, p.slot, p.round, p.op))
        cell = self.cells.setdefault((p.job_id, p.slot, p.round & 1), {"tag": None})
        tag = (job.epoch, p.round)
        if cell["tag"] is None or cell["tag"][0] != job.epoch or p.round > cell["tag"][1]:
            cell.update(tag=tag, bitmap=0, remaining=job.n_workers, sums=None, norm=0)
        elif p.round < cell["tag"][1]:
            self.events.append("STALE_ROUND")
            return []
        bit = 1 << p.worker_id
        if cell["bitmap"] & bit:
            if cell["remaining"]:
                self.events.append("DUPLICATE")
                return []
            self.events.append("RETX_ANSWERED")
            return [(port, self._result(p.job_id, job, p, cell, p.worker_id, wire.KIND_RESULT_RETX))]
        cell["bitmap"] |= bit
        cell["remaining"] -= 1
        if p.op == wire.OP_NORM:
            cell["norm"] = max(cell["norm"], p.value)
        else:
            if p.op == wire.OP_THC:
                contribution = np.asarray(job.table, np.int64)[wire.unpack_nibbles(p.payload)]
            else:
                contribution = np.frombuffer(p.payload, ">i4").astype(np.int64)
            cell["sums"] = contribution if cell["sums"] is None else cell["sums"] + contribution
        if cell["remaining"]:
            self.events.append("CONSUMED")
            return []
        self.events.append("COMPLETED")
        return [(job.ports[w], self._result(p.job_id, job, p, cell, w, wire.KIND_RESULT)) for w in job.ports]

    def _result(self, job_id, job, p, cell, worker_id, kind) -> bytes:
        builder = wire.FrameBuilder(SERVICE, worker_endpoint(worker_id))
        if p.op == wire.OP_NORM:
            return builder.frame(p.op, kind, job_id, worker_id, p.slot, p.round, cell["norm"],
                                 count=job.n_workers)
        if p.op == wire.OP_THC:
            dtype = np.uint8 if job.lane_bits == 8 else ">u2"
            payload = cell["sums"].astype(dtype).tobytes()
            lane_bits = job.lane_bits
        else:
            payload = (cell["sums"] & 0xFFFFFFFF).astype(">u4").tobytes()
            lane_bits = 32
        return builder.frame(p.op, kind, job_id, worker_id, p.slot, p.round, payload=payload,
                             count=job.n_workers, lane_bits=lane_bits)
