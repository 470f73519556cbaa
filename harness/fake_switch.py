"""A tiny pure-Python aggregating switch that follows p4/README.md, for tests without the P4 engine.

It has the engine's `process(port, frame)` interface, one service address, cells of `words` 64-bit words
and any number of jobs, each with its own key, lane width and lookup table, as the controller plans them
(harness.sim.SimJob). Per cell it keeps the (epoch, round, op) tag, the worker bitmap, the remaining
count, the contributions' count and the sums as the contract describes (partial aggregation too: RELEASE,
LATE), and records every decision so tests can check what the switch saw. It is independent of emulator/
and p4/build/ on purpose: host-agent tests can check the protocol against the contract alone, and the same
tests then run against the compiled program.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from controller.jobs import Job, JobWorker
from harness.sim import SERVICE, SimJob
from host_agent import wire

# Request payloads the parser extracts (op, lane_bits), so that a shorter request is MALFORMED.
_PARSED = {
    (wire.OP_THC, wire.LANES_8),
    (wire.OP_THC, wire.LANES_16),
    (wire.OP_FIX32, wire.LANES_INT32),
    (wire.OP_NORM, wire.LANES_INT32),
}


class FakeSwitch:
    """Aggregates like thc.p4 for the jobs added with add_job; results go to each job's worker ports."""

    def __init__(self, service: wire.Endpoint = SERVICE, words: int = wire.WORDS):
        self.service = service
        self.words = words
        self.jobs: dict[int, Job] = {}
        self.cells: dict[tuple[int, int], dict] = {}  # (slot_base + slot, round & 1) -> the cell
        self.events: list[str] = []  # one per frame, named as thc_events' cells

    def add_job(self, job: SimJob) -> None:
        if job.spec.words != self.words:
            raise ValueError(
                f"job {job.job_id} is described for {job.spec.words}-word cells, this switch has {self.words}"
            )
        self.jobs[job.job_id] = job.job

    def event_counts(self) -> Counter:
        return Counter(self.events)

    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        event, out = self._process(port, frame)
        self.events.append(event)
        return out

    def _process(self, port: int, frame: bytes) -> tuple[str, list[tuple[int, bytes]]]:
        """What the program does with `frame`, in its order of checks: (the event, the frames out)."""
        p = wire.parse_frame(frame)
        if p is None or frame[30:34] != wire.ip_bytes(self.service.ip):
            return "FORWARDED", []
        if p.kind not in (wire.KIND_REQUEST, wire.KIND_RELEASE, wire.KIND_QUERY):
            return "FORWARDED", []
        need = wire.request_payload_bytes(p.op, p.lane_bits, self.words) if (p.op, p.lane_bits) in _PARSED else 0
        if p.kind == wire.KIND_REQUEST and len(p.payload) < need:
            return "DROP_MALFORMED", []
        if p.kind == wire.KIND_RELEASE and len(p.payload) < wire.release_payload_bytes(p.op):
            return "DROP_MALFORMED", []  # without its padding (p4/README.md, "Cells")
        job = self.jobs.get(p.job_id)
        if job is None:
            return "DROP_UNKNOWN_JOB", []
        if p.key != job.key:
            return "DROP_BAD_KEY", []
        if p.worker_id >= wire.MAX_WORKERS or not job.worker_mask >> p.worker_id & 1:
            return "DROP_FOREIGN_WORKER", []
        if p.slot >= job.n_slots:
            return "DROP_SLOT_RANGE", []
        if p.op not in wire.OP_NAMES:
            return "DROP_BAD_OP", []
        if p.lane_bits != wire.op_lane_bits(p.op, job.lane_bits):
            return "DROP_LANE_MISMATCH", []
        cell_at = (job.slot_base + p.slot, p.round & 1)
        if p.kind == wire.KIND_RELEASE:
            return self._release(job, p, self.cells.get(cell_at, {"tag": None}))
        if p.kind == wire.KIND_QUERY:
            return self._query(job, p, port, self.cells.get(cell_at, {"tag": None}))
        payload = p.payload[: need - wire.padding(p.op, p.kind, p.lane_bits)]
        if p.op == wire.OP_THC:
            indices = wire.unpack_nibbles(payload)
            if not job.table or int(indices.max()) >= len(job.table):
                return "DROP_BAD_INDEX", []
        cell = self.cells.setdefault(cell_at, {"tag": None})
        refused = self._refusal(cell, job.epoch, p)
        if refused:
            return refused, []
        if cell["tag"] is None or cell["tag"][:2] != (job.epoch, p.round):
            cell.update(tag=(job.epoch, p.round, p.op), bitmap=0, remaining=job.n_workers, count=0, sums=None)
        bit = 1 << p.worker_id
        if cell["bitmap"] & bit or cell["remaining"] == 0:
            if cell["remaining"]:
                return "DROP_DUPLICATE", []
            sender = next(w for w in job.workers if w.worker_id == p.worker_id)
            answer = self._result(job, p, cell, sender, wire.KIND_RESULT_RETX)  # on the port it came in
            return ("RETX_ANSWERED" if cell["bitmap"] & bit else "LATE"), [(port, answer)]
        cell["bitmap"] |= bit
        cell["remaining"] -= 1
        cell["count"] += 1
        if p.op == wire.OP_THC:
            contribution = np.asarray(job.table, np.int64)[indices]
        else:  # FIX32 int32 values, NORM float32 bit patterns (reduced with an unsigned max)
            contribution = np.frombuffer(payload, ">i4" if p.op == wire.OP_FIX32 else ">u4").astype(np.int64)
        if cell["sums"] is None:
            cell["sums"] = contribution
        elif p.op == wire.OP_NORM:
            cell["sums"] = np.maximum(cell["sums"], contribution)
        else:
            cell["sums"] = cell["sums"] + contribution
        if cell["remaining"]:
            return "CONSUMED", []
        return "COMPLETED", self._multicast(job, p, cell)

    def _release(self, job: Job, p: wire.ThcFrame, cell: dict) -> tuple[str, list[tuple[int, bytes]]]:
        """A RELEASE completes the cell's current, incomplete use with the contributions it has."""
        tag = cell["tag"]
        if tag is None or tag[0] != job.epoch or p.round > tag[1]:
            return "RELEASE_IGNORED", []
        if p.round < tag[1]:
            return "DROP_STALE_ROUND", []
        if p.op != tag[2]:
            return "DROP_OP_MISMATCH", []
        if cell["remaining"] == 0:
            return "RELEASE_IGNORED", []
        cell["remaining"] = 0
        return "RELEASED", self._multicast(job, p, cell)

    def _query(self, job: Job, p: wire.ThcFrame, port: int, cell: dict) -> tuple[str, list[tuple[int, bytes]]]:
        """A QUERY is answered with the cell's STATUS for the use it names: the bitmap of the workers in
        it and the contributions it still lacks (0: complete); a use not started here has none in."""
        tag = cell["tag"]
        if tag is None or tag[0] != job.epoch or p.round > tag[1]:
            bitmap, lacking = 0, job.n_workers
        elif p.round < tag[1]:
            return "DROP_STALE_ROUND", []
        elif p.op != tag[2]:
            return "DROP_OP_MISMATCH", []
        else:
            bitmap, lacking = cell["bitmap"], cell["remaining"]
        sender = next(w for w in job.workers if w.worker_id == p.worker_id)
        builder = wire.FrameBuilder(self.service, wire.Endpoint(sender.mac, sender.ip))
        status = builder.frame(
            p.op, wire.KIND_STATUS, job.job_id, p.worker_id, p.slot, p.round, bitmap, b"", lacking, p.lane_bits,
            p.key,
        )  # fmt: skip
        return "QUERY_ANSWERED", [(port, status)]

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

    def _multicast(self, job: Job, p: wire.ThcFrame, cell: dict) -> list[tuple[int, bytes]]:
        """The result to every worker of the job, each copy addressed to its worker (result_dst)."""
        return [(w.port, self._result(job, p, cell, w, wire.KIND_RESULT)) for w in job.workers]

    def _result(self, job: Job, p: wire.ThcFrame, cell: dict, to: JobWorker, kind: int) -> bytes:
        """A result as the program writes it: the cell's words in the op's lanes (NORM: the lane-wise maxima),
        its count, the request's key, lengths that match the payload."""
        builder = wire.FrameBuilder(self.service, wire.Endpoint(to.mac, to.ip))
        lane_bits = wire.op_lane_bits(p.op, job.lane_bits)
        lanes = cell["sums"] if p.op == wire.OP_THC else (cell["sums"] + 2**31) % 2**32 - 2**31
        payload = lanes.astype(wire.LANE_DTYPES[lane_bits]).tobytes()
        return builder.frame(
            p.op, kind, job.job_id, to.worker_id, p.slot, p.round, p.value, payload, cell["count"], lane_bits, p.key
        )
