"""The fake switch keeps a cell's use as the compiled program does (p4/README.md, "Round window") and
checks a request against its job as the program does (key, lane width, size, indices): scripts of
requests, their events and answers, against harness.fake_switch and the compiled program."""

from collections import Counter

import numpy as np
import pytest

import contract
from contract.job import JobSpec
from controller import jobs
from controller.writes import MODIFY, EngineWriter
from harness.fake_switch import FakeSwitch
from harness.sim import SERVICE, SimJob, worker_endpoint, worker_port
from host_agent import wire

JOB = 7
SPEC = JobSpec(job_id=JOB, workers=2, window=4, slots=4)  # 8-bit lanes: n·g = 60
THC, NORM, FIX32 = wire.OP_THC, wire.OP_NORM, wire.OP_FIX32
FAR = 0xFFFFFFF0

# (worker, op, slot, round) -> event; the answers follow from the event (COMPLETED: both workers, RETX: one)
SCRIPT = [
    ((0, THC, 0, 0), "CONSUMED"),
    ((1, NORM, 0, 0), "DROP_OP_MISMATCH"),  # worker 1's bit is free, but the round is THC's
    ((0, THC, 0, FAR), "DROP_FAR_ROUND"),
    ((1, THC, 0, 2), "DROP_FAR_ROUND"),  # round 0 is incomplete: nobody can be at round 2
    ((1, THC, 0, 0), "COMPLETED"),
    ((1, NORM, 0, 0), "DROP_OP_MISMATCH"),  # no answer from another op's round
    ((0, THC, 0, 0), "RETX_ANSWERED"),
    ((0, THC, 0, 4), "DROP_FAR_ROUND"),  # stored + 4
    ((0, NORM, 0, 2), "CONSUMED"),  # stored + 2: the next use, of any op
    ((1, THC, 0, 2), "DROP_OP_MISMATCH"),
    ((1, NORM, 0, 2), "COMPLETED"),
    ((0, THC, 0, 0), "DROP_STALE_ROUND"),
    ((0, FIX32, 1, 3), "DROP_FAR_ROUND"),  # a cell's first use is round 0 or 1
    ((1, FIX32, 1, 1), "CONSUMED"),
]
AFTER_NEW_EPOCH = [
    ((0, THC, 0, 4), "DROP_FAR_ROUND"),  # the cell holds round 2 of the old epoch
    ((0, THC, 0, 2), "DROP_FAR_ROUND"),
    ((0, THC, 0, 0), "CONSUMED"),
]
ANSWERS = {"COMPLETED": 2, "RETX_ANSWERED": 1}


def events(engine) -> Counter:
    if isinstance(engine, FakeSwitch):
        return engine.event_counts()
    return Counter({name: engine.counter_read(contract.THC_EVENTS, i)[0] for i, name in enumerate(contract.EVENTS)})


def frame(job: SimJob, worker, op, slot, rnd, **changes) -> bytes:
    """A request of `job` as its workers frame it; `changes`: header fields or the payload, made wrong."""
    lane_bits = wire.op_lane_bits(op, job.spec.lane_bits)
    fields = dict(
        payload=bytes(wire.payload_length(op, wire.KIND_REQUEST, lane_bits)),
        lane_bits=lane_bits,
        key=job.spec.key,
        kind=wire.KIND_REQUEST,
    )
    fields.update(changes)
    kind = fields.pop("kind")
    return wire.FrameBuilder(worker_endpoint(worker), SERVICE).frame(op, kind, JOB, worker, slot, rnd, **fields)


def run(engine, job, script) -> list[tuple[str, int]]:
    seen = []
    for (worker, op, slot, rnd, *changes), _ in script:
        before = events(engine)
        out = engine.process(worker_port(worker), frame(job, worker, op, slot, rnd, **dict(changes)))
        moved = [name for name, count in events(engine).items() if count != before.get(name, 0)]
        assert len(moved) == 1, f"one event per packet, got {moved}"
        seen.append((moved[0], len(out)))
    return seen


def expected(script) -> list[tuple[str, int]]:
    return [(event, ANSWERS.get(event, 0)) for _, event in script]


def test_cell_rules_match_the_program(new_engine):
    job = SimJob.plan(SPEC, epoch=1)
    engine = new_engine(job)
    assert run(engine, job, SCRIPT) == expected(SCRIPT)
    renewed = SimJob.plan(job.spec, epoch=2)
    if isinstance(engine, FakeSwitch):
        engine.add_job(renewed)
    else:
        EngineWriter(engine).apply([jobs.job_write(MODIFY, renewed.job)])
    assert run(engine, job, AFTER_NEW_EPOCH) == expected(AFTER_NEW_EPOCH)


@pytest.mark.parametrize("rnd, event", [(0, "COMPLETED"), (2, "DROP_FAR_ROUND"), (FAR, "DROP_FAR_ROUND")])
def test_a_one_worker_job_completes_only_a_reachable_round(new_engine, rnd, event):
    job = SimJob.plan(SPEC.replace(workers=1))
    assert run(new_engine(job), job, [((0, THC, 0, rnd), event)]) == [(event, 1 if event == "COMPLETED" else 0)]


# Requests that do not fit their job, each dropped with its own event before it touches a cell; then the
# same slot's use completes normally: none of them was counted.
MISFITS = [
    ((0, THC, 0, 0, ("key", 0x1234)), "DROP_BAD_KEY"),
    ((0, THC, 0, 0, ("lane_bits", 16), ("payload", bytes(512))), "DROP_LANE_MISMATCH"),  # 16-bit framing, padded
    ((0, FIX32, 0, 0, ("lane_bits", 16)), "DROP_LANE_MISMATCH"),
    ((0, NORM, 0, 0, ("lane_bits", 8)), "DROP_LANE_MISMATCH"),
    ((0, NORM, 0, 0, ("lane_bits", 0), ("payload", b"")), "DROP_LANE_MISMATCH"),  # version 2's one-norm framing
    ((0, NORM, 0, 0, ("payload", bytes(8 * contract.NORM_WORDS - 1))), "DROP_MALFORMED"),
    ((0, THC, 0, 0, ("payload", bytes(511))), "DROP_MALFORMED"),  # a byte short of 1,024 indices
    ((0, FIX32, 0, 0, ("payload", bytes(1000))), "DROP_MALFORMED"),
    ((0, THC, 0, 0, ("payload", bytes([0x0F]) * 512)), "DROP_BAD_INDEX"),  # index 15 of a 3-bit table
    ((0, THC, 4, 0), "DROP_SLOT_RANGE"),
    ((0, THC, 0, 0, ("payload", bytes(512)), ("key", 0)), "DROP_BAD_KEY"),
    ((0, THC, 0, 0), "CONSUMED"),
    ((1, THC, 0, 0, ("payload", bytes([0x77]) * 512)), "COMPLETED"),
]


def test_requests_that_do_not_fit_their_job_are_dropped_with_their_event(new_engine):
    job = SimJob.plan(SPEC.replace(bits=3, granularity=20))
    engine = new_engine(job)
    assert run(engine, job, MISFITS) == expected(MISFITS)


def test_results_carry_the_cells_words_the_jobs_lanes_and_key(new_engine):
    """A completed slot's result: the job's key, the op's lane width, the cell's 1 KiB of words in those
    lanes (NORM: the lane-wise maxima of its NORM_WORDS words), lengths that match; the same for 16-bit
    lanes."""
    a = np.float32([3.5, 0.0, 1e-45, np.inf] * (wire.NORMS_PER_REQUEST // 4))
    b = np.float32([2.0, 1e30, 0.0, 7.0] * (wire.NORMS_PER_REQUEST // 4))
    norms = [v.view(np.uint32).astype(">u4").tobytes() for v in (a, b)]
    for spec in (SPEC, SPEC.replace(granularity=200)):
        job = SimJob.plan(spec)
        engine = new_engine(job)
        table = job.job.table
        for slot, (op, payload) in enumerate(((THC, bytes([0x12]) * 512), (FIX32, b"\xff" * 1024), (NORM, None))):
            if op == THC and spec.lane_bits == 16:
                payload = payload[:256] + bytes(contract.PAD16_BYTES)  # 512 indices and the padding
            lane_bits = wire.op_lane_bits(op, spec.lane_bits)
            engine.process(worker_port(0), frame(job, 0, op, slot, 0, payload=payload or norms[0]))
            out = engine.process(worker_port(1), frame(job, 1, op, slot, 0, payload=payload or norms[1]))
            assert sorted(port for port, _ in out) == [worker_port(0), worker_port(1)]
            for port, result in out:
                r = wire.parse_frame(result)
                assert (r.kind, r.op, r.count, r.lane_bits, r.key) == (wire.KIND_RESULT, op, 2, lane_bits, job.spec.key)
                assert r.worker_id == port - 1 and len(result) == wire.PAYLOAD_OFFSET + len(r.payload)
                if op == NORM:
                    assert r.payload == np.maximum(a, b).view(np.uint32).astype(">u4").tobytes()
                    continue
                lanes = np.frombuffer(r.payload, wire.LANE_DTYPES[lane_bits])
                want = [2 * table[1], 2 * table[2]] * (len(lanes) // 2) if op == THC else [-2] * len(lanes)
                assert len(r.payload) == 8 * contract.WORDS and lanes.tolist() == want
