"""A tiny pure-Python aggregating switch that follows p4/README.md, for tests without the P4 engine.

It has the engine's `process(port, frame)` interface, one service address and any number of jobs; per cell
it keeps the (epoch, round, op) tag, the worker bitmap, the remaining count, the contributions' count and
the sums as the contract describes (partial aggregation too: RELEASE, LATE), and records every decision so
tests can check what the switch saw. It is independent of emulator/ and p4/build/ on purpose: host-agent
tests can check the protocol against the contract alone, and the same tests then run against the compiled
program (tests/test_host_agent_engine.py).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from host_agent import wire
from host_agent.sim import SERVICE, SimJob, worker_endpoint, worker_port


class FakeSwitch:
    """Aggregates like thc.p4 for the jobs added with add_job; workers sit on ports sim.worker_port(w)."""

    def __init__(self, service: wire.Endpoint = SERVICE):
        self.service = service
        self.jobs: dict[int, SimJob] = {}
        self.cells: dict[tuple[int, int, int], dict] = {}
        self.events: list[str] = []  # one per request, named as thc_events' cells
        self.arrivals: list[tuple[int, int, int, int]] = []  # (worker, slot, round, op) of every request

    def add_job(self, job: SimJob) -> None:
        self.jobs[job.job_id] = job

    def event_counts(self) -> Counter:
        return Counter(self.events)

    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        p = wire.parse_frame(frame)
        kinds = (wire.KIND_REQUEST, wire.KIND_RELEASE)
        if p is None or frame[30:34] != wire.ip_bytes(self.service.ip) or p.kind not in kinds:
            self.events.append("FORWARDED")
            return []
        job = self.jobs.get(p.job_id)
        if job is None:
            self.events.append("DROP_UNKNOWN_JOB")
            return []
        if p.worker_id not in job.worker_ids:
            self.events.append("DROP_FOREIGN_WORKER")
            return []
        if p.slot >= job.n_slots:
            self.events.append("DROP_SLOT_RANGE")
            return []
        if p.kind == wire.KIND_RELEASE:
            return self._release(job, p)
        if p.op == wire.OP_THC and max(wire.unpack_nibbles(p.payload)) >= len(job.table):
            self.events.append("DROP_BAD_INDEX")
            return []
        self.arrivals.append((p.worker_id, p.slot, p.round, p.op))
        cell = self.cells.setdefault((p.job_id, p.slot, p.round & 1), {"tag": None})
        refused = self._refusal(cell, job.epoch, p)
        if refused:
            self.events.append(refused)
            return []
        if cell["tag"] is None or cell["tag"][:2] != (job.epoch, p.round):
            cell.update(tag=(job.epoch, p.round, p.op), bitmap=0, remaining=job.n_workers, count=0, sums=None, norm=0)
        bit = 1 << p.worker_id
        if cell["bitmap"] & bit or cell["remaining"] == 0:
            if cell["remaining"]:
                self.events.append("DROP_DUPLICATE")
                return []
            self.events.append("RETX_ANSWERED" if cell["bitmap"] & bit else "LATE")
            return [(port, self._result(job, p, cell, p.worker_id, wire.KIND_RESULT_RETX))]
        cell["bitmap"] |= bit
        cell["remaining"] -= 1
        cell["count"] += 1
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
        return [(worker_port(w), self._result(job, p, cell, w, wire.KIND_RESULT)) for w in job.worker_ids]

    def _release(self, job: SimJob, p: wire.ThcFrame) -> list[tuple[int, bytes]]:
        """A RELEASE completes the cell's current, incomplete use with the contributions it has."""
        cell = self.cells.get((p.job_id, p.slot, p.round & 1), {"tag": None})
        tag = cell["tag"]
        if tag is None or tag[0] != job.epoch or p.round > tag[1]:
            self.events.append("RELEASE_IGNORED")
            return []
        if p.round < tag[1]:
            self.events.append("DROP_STALE_ROUND")
            return []
        if p.op != tag[2]:
            self.events.append("DROP_OP_MISMATCH")
            return []
        if cell["remaining"] == 0:
            self.events.append("RELEASE_IGNORED")
            return []
        cell["remaining"] = 0
        self.events.append("RELEASED")
        return [(worker_port(w), self._result(job, p, cell, w, wire.KIND_RESULT)) for w in job.worker_ids]

    @staticmethod
    def _refusal(cell: dict, epoch: int, p: wire.ThcFrame) -> str | None:
        """The drop event for a request on `cell` if it is refused (p4/README.md, "Round window"): a first
        use in the epoch only at round 0 or 1, the next use only two rounds on and once the current one is
        complete, the same round only with the same op."""
        tag = cell["tag"]
        if tag is None or tag[0] != epoch:
            return "DROP_FAR_ROUND" if p.round >= 2 else None
        _, stored, op = tag
        if p.round < stored:
            return "DROP_STALE_ROUND"
        if p.round == stored:
            return "DROP_OP_MISMATCH" if p.op != op else None
        return None if p.round == stored + 2 and cell["remaining"] == 0 else "DROP_FAR_ROUND"

    def _result(self, job: SimJob, p: wire.ThcFrame, cell: dict, worker_id: int, kind: int) -> bytes:
        builder = wire.FrameBuilder(self.service, worker_endpoint(worker_id))
        if p.op == wire.OP_NORM:
            return builder.frame(p.op, kind, job.job_id, worker_id, p.slot, p.round, cell["norm"], count=cell["count"])
        if p.op == wire.OP_THC:
            payload = cell["sums"].astype(np.uint8 if job.lane_bits == 8 else ">u2").tobytes()
            lane_bits = job.lane_bits
        else:
            payload = (cell["sums"] & 0xFFFFFFFF).astype(">u4").tobytes()
            lane_bits = 32
        return builder.frame(
            p.op,
            kind,
            job.job_id,
            worker_id,
            p.slot,
            p.round,
            payload=payload,
            count=cell["count"],
            lane_bits=lane_bits,
        )
