"""The fake switch keeps a cell's use as the compiled program does (p4/README.md, "Round window"): one
script of requests, its events and answers, against host_agent.fake_switch and the compiled program."""

from collections import Counter

import pytest

from controller import contract, jobs
from controller.writes import MODIFY, EngineWriter
from host_agent import wire
from host_agent.fake_switch import FakeSwitch
from host_agent.sim import SERVICE, SimJob, worker_endpoint, worker_port

TABLE = [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30]
JOB = 7
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


def frame(worker, op, slot, rnd) -> bytes:
    payload = {THC: bytes(wire.INDEX_PAIRS), FIX32: bytes(4 * wire.INDEX_PAIRS), NORM: b""}[op]
    return wire.FrameBuilder(worker_endpoint(worker), SERVICE).frame(
        op, wire.KIND_REQUEST, JOB, worker, slot, rnd, value=1 if op == NORM else 0, payload=payload
    )


def run(engine, script) -> list[tuple[str, int]]:
    seen = []
    for (worker, op, slot, rnd), _ in script:
        before = events(engine)
        out = engine.process(worker_port(worker), frame(worker, op, slot, rnd))
        moved = [name for name, count in events(engine).items() if count != before.get(name, 0)]
        assert len(moved) == 1, f"one event per packet, got {moved}"
        seen.append((moved[0], len(out)))
    return seen


def expected(script) -> list[tuple[str, int]]:
    return [(event, ANSWERS.get(event, 0)) for _, event in script]


def test_cell_rules_match_the_program(new_engine):
    job = SimJob(JOB, 2, TABLE, n_slots=4, epoch=1)
    engine = new_engine(job)
    assert run(engine, SCRIPT) == expected(SCRIPT)
    renewed = SimJob(JOB, 2, TABLE, n_slots=4, epoch=2)
    if isinstance(engine, FakeSwitch):
        engine.add_job(renewed)
    else:
        EngineWriter(engine).apply([jobs.job_write(MODIFY, renewed.to_job())])
    assert run(engine, AFTER_NEW_EPOCH) == expected(AFTER_NEW_EPOCH)


@pytest.mark.parametrize("rnd, event", [(0, "COMPLETED"), (2, "DROP_FAR_ROUND"), (FAR, "DROP_FAR_ROUND")])
def test_a_one_worker_job_completes_only_a_reachable_round(new_engine, rnd, event):
    engine = new_engine(SimJob(JOB, 1, TABLE, n_slots=4))
    assert run(engine, [((0, THC, 0, rnd), event)]) == [(event, 1 if event == "COMPLETED" else 0)]
