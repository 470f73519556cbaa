"""Workers of a pool job whose uses fall back (p4/README.md, "Shared pool"): the compiled program on the
software switch, in-process, with a pool too small for the job's uses in flight (or none at all), and a
fallback server (a parameter server: the same program on a second software switch, holding the job with
the same key and a fallback_rounds entry). Every worker's sums equal the reference, with and without loss,
and each worker counts the uses that fell back: exactly the ones the switch counted as POOL_TAKEN."""

import random

import numpy as np
import pytest

import contract
from contract.job import JobSpec
from controller import jobs
from emulator.switch import SoftwareSwitch
from harness.fallback_server import SERVER, SwitchAndServer, serve
from harness.sim import SimJob, attach_workers, program_engine, worker_endpoint, worker_port
from host_agent.clock import VirtualClock
from host_agent.pool_fallback import PoolFallback
from host_agent.protocol import drive
from tests.support import paths

pytestmark = pytest.mark.skipif(not paths.THC_JSON.exists(), reason="p4/build/thc.json not built")

JOB, N, WINDOW = 7, 3, 8
TABLE = [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30]  # the default description's (b = 4, g = 30)


def pool_job(pool_cells: int) -> SimJob:
    spec = JobSpec(job_id=JOB, workers=N, window=WINDOW, slots=WINDOW)
    workers = [jobs.JobWorker(w, worker_endpoint(w).mac, worker_endpoint(w).ip, worker_port(w)) for w in range(N)]
    job = jobs.plan_job(spec, workers, [], epoch=3, rng=random.Random(JOB), pool=True, pool_cells=pool_cells)
    return SimJob(spec.replace(key=job.key), job)


def fallback_server(job: SimJob) -> SoftwareSwitch:
    """The same job on a parameter server: static slots, the same key, any later round."""
    sw = SoftwareSwitch.from_json(str(paths.THC_JSON))
    serve(sw, job, [])
    return sw


def job_events(sw, job_id: int) -> dict[str, int]:
    return {e: sw.counter_read(contract.THC_JOB_EVENTS, contract.job_event_cell(job_id, e))[0] for e in contract.EVENTS}


@pytest.mark.parametrize(
    "pool_cells, loss",
    [(8, 0.0), (8, 0.05), (0, 0.0)],
    ids=["pool-of-8", "pool-of-8-lossy", "no-pool"],
)
def test_uses_that_fall_back_are_summed_exactly_by_the_fallback_server_and_counted(pool_cells, loss):
    job = pool_job(pool_cells)
    switch = SoftwareSwitch.from_json(str(paths.THC_JSON))
    program_engine(switch, job)
    server = fallback_server(job)
    clock = VirtualClock()
    _, workers = attach_workers(
        SwitchAndServer(switch, server), job, loss_up=loss, loss_down=loss, seed=5, clock=clock,
        timeout=0.01, max_timeout=0.1, deadline=60.0,
    )  # fmt: skip
    for w in workers:
        w.pool_fallback = PoolFallback(SERVER)
    rng = np.random.default_rng(pool_cells * 10 + int(loss * 100))
    table = np.asarray(TABLE)
    for _ in range(3):  # three operations: 3 * 48 requests, rounds wrapping around the window many times
        data = [[rng.integers(0, 16, size=48 * contract.per_request(8), dtype=np.uint8)] for _ in range(N)]
        ops = [w.start_sum_indices(d) for w, d in zip(workers, data)]
        drive(workers)
        want = sum(table[d[0]] for d in data)
        for op in ops:
            sums, count = op.result()
            assert count == N
            assert np.array_equal(sums[0], want)
    events = job_events(switch, JOB)
    taken = events["POOL_TAKEN"]
    assert taken > 0
    if pool_cells == 0:
        assert taken == 3 * 48 and events["CONSUMED"] == events["COMPLETED"] == 0
    for w in workers:
        stats = w.stats()
        assert stats["pool_fallbacks"] == taken  # every worker was sent elsewhere for exactly those uses
        assert stats["fallback_sent"] >= taken
    served = job_events(server, JOB)
    assert served["COMPLETED"] == taken and served["DROP_FAR_ROUND"] == 0


def test_workers_ack_their_last_uses_so_the_job_holds_no_cell_between_operations():
    job = pool_job(32)  # room for the job's ring: nothing falls back
    switch = SoftwareSwitch.from_json(str(paths.THC_JSON))
    program_engine(switch, job)
    clock = VirtualClock()
    _, workers = attach_workers(SwitchAndServer(switch, fallback_server(job)), job, seed=6, clock=clock)
    for w in workers:
        w.pool_fallback = PoolFallback(SERVER)
    rng = np.random.default_rng(7)
    for step in range(1, 4):
        data = [[rng.integers(0, 16, size=20 * contract.per_request(8), dtype=np.uint8)] for _ in range(N)]
        ops = [w.start_sum_indices(d) for w, d in zip(workers, data)]
        drive(workers)
        want = sum(np.asarray(TABLE)[d[0]] for d in data)
        assert all(np.array_equal(op.result()[0][0], want) for op in ops)
        claimed, freed = (switch.counter_read(c, job.epoch)[0] for c in (contract.POOL_CLAIMS, contract.POOL_FREES))
        assert claimed == 20 * step and freed == claimed  # every cell back once the operation is done
        assert all(w.stats()["pool_acks"] == WINDOW * step for w in workers)  # one ACK per slot and operation
    events = job_events(switch, JOB)
    assert events["POOL_ACK"] == 3 * N * WINDOW and events["POOL_TAKEN"] == 0


def test_the_survivors_job_after_a_worker_failure_still_falls_back_to_the_server():
    """WorkerProtocol.for_job (the survivors' job) keeps the fallback server: a use that falls back there is
    summed by the server, not retransmitted to the switch until the deadline."""
    job = pool_job(0)  # no pool at all: every use falls back
    survivors = 2
    switch = SoftwareSwitch.from_json(str(paths.THC_JSON))
    program_engine(switch, job)
    _, workers = attach_workers(SwitchAndServer(switch, fallback_server(job)), job, seed=8, clock=VirtualClock())
    for w in workers:
        w.pool_fallback = PoolFallback(SERVER)
    moved = [w.for_job(JOB, survivors, w.key) for w in workers[:survivors]]
    assert all(m.pool_fallback is not None and m.pool_fallback.server == SERVER for m in moved)
    for m, w in zip(moved, workers):
        assert m.pool_fallback is not w.pool_fallback and m.stats()["pool_fallbacks"] == 0
