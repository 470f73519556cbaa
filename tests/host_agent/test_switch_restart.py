"""The switch restarted mid-training, in process: the engine goes away with every cell and stored result
(frames to it are lost), a fresh engine comes up with the job re-added under a new key and epoch, the
controller-equivalent posts a restart notice, and the workers redo the unfinished call there. Every
round, the interrupted one included, is the four workers' reference aggregation bit for bit, even when a
worker was one call behind the others as the switch went down; and DDP training through a restart ends
with the parameters an uninterrupted run ends with, on every rank."""

import threading
import time

import numpy as np
import pytest
import torch

from harness.ddp_cluster import thc_spec, train_ddp
from harness.fake_switch import FakeSwitch
from harness.sim import SimJob, attach_workers
from host_agent.aggregator import SwitchAggregator
from host_agent.membership import Membership, MembershipBoard
from tests.host_agent.test_worker_failure import CONFIG, DIES_IN, ROUNDS, StalledCluster, reference
from thc.config import THCConfig

N = 4


class Down:
    """The switch while its process is dead: every frame sent to it is lost."""

    def __init__(self):
        self.frames = 0

    def process(self, port, frame):
        self.frames += 1
        return []


def jobs(spec) -> tuple[SimJob, SimJob]:
    """The job before the restart, and as the runner re-adds it on the restarted switch: the same id and
    workers, a fresh key, a later epoch."""
    before = SimJob.plan(spec, epoch=1)
    after = SimJob.plan(spec.replace(key=before.spec.key ^ 0x5A5A5A5A), epoch=2)
    assert after.spec.key != before.spec.key
    return before, after


def restart_notice(job: SimJob, generation: int = 1) -> Membership:
    return Membership(generation, job.job_id, tuple(job.worker_ids), job.epoch, key=job.spec.key, restarted=True)


def test_a_restart_with_a_worker_one_call_behind_redoes_that_call_for_everyone(new_engine):
    before, after = jobs(thc_spec(CONFIG, 1, N, window=8, slots=8))
    behind = 1
    cluster = StalledCluster(new_engine(before), before, behind)
    cluster.wait_for_the_others()  # the three ahead wait in call 7, round 3's sums
    restarted = new_engine(after)  # the switch as it will be once restarted, program and job pushed again
    down = Down()
    cluster.lw.engine = down  # the switch process dies: cells, stored results and the job are gone
    time.sleep(0.1)
    cluster.gate.released.set()  # the one behind resends round 3's norm into the void
    time.sleep(0.1)
    cluster.lw.engine = restarted
    cluster.board.post(restart_notice(after))
    cluster.join(range(N))
    assert down.frames > 0
    aggs, records = cluster.aggs, cluster.records

    for k in range(ROUNDS):
        max_norms, indices, sums = reference(list(range(N)), k)
        for r in range(N):
            got, where = records[r][k], f"round {k}, worker {r}"
            assert got["n"] == N, where
            assert np.array_equal(got["max_norms"], max_norms), where
            assert np.array_equal(got["indices"], indices[r]), where
            assert np.array_equal(got["sums"], sums), where
    for r in range(N):
        (rejoin,) = aggs[r].rejoins
        assert rejoin["restarted"] and rejoin["failed"] == [] and rejoin["epoch"] == after.epoch
        assert rejoin["at_call"] == 2 * DIES_IN  # the call the one behind was in: round 3's norm
        assert rejoin["replayed"] == (r != behind)
        stats = aggs[r].stats()
        assert stats["generation"] == 1 and stats["job_id"] == after.job_id
        # the old job: the calls each completed there; the new one: the agreement, the replay of round 3's
        # norm by those ahead, and everything from the call it was in on
        redone = 2 * DIES_IN if r == behind else 2 * DIES_IN + 1
        assert stats["operations"] == redone + 1 + (r != behind) + (2 * ROUNDS - redone)


def _switch(job: SimJob) -> FakeSwitch:
    sw = FakeSwitch()
    sw.add_job(job)
    return sw


def _aggregators(engine, job, board=None):
    """The workers' aggregators on a loopback wire to ``engine`` (which serves ``job``), and the wire."""
    lw, protocols = attach_workers(engine, job, clock=time.monotonic, timeout=0.01, max_timeout=0.1, deadline=60.0)
    return [SwitchAggregator(p, membership=board.reader() if board else None) for p in protocols], lw


@pytest.mark.parametrize("mode", ["thc", "fix32"])
def test_training_through_a_switch_restart_ends_as_an_uninterrupted_run(mode):
    config = THCConfig()
    before, after = jobs(thc_spec(config, 3, 2, window=64, slots=64))
    steps, restart_at = 12, 9  # aggregation calls a step: thc 2 per bucket (norm, sums), fix32 1
    plain, _ = _aggregators(_switch(before), before)
    untouched = train_ddp("mlp-digits", mode, steps, n=2, config=config, aggregators=plain)

    board = MembershipBoard()
    aggs, lw = _aggregators(_switch(before), before, board)
    down = Down()

    def restart():
        while aggs[0].calls < restart_at:
            time.sleep(0.001)
        lw.engine = down  # from here the workers' requests are lost
        time.sleep(0.2)
        lw.engine = _switch(after)
        board.post(restart_notice(after))

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    out = train_ddp("mlp-digits", mode, steps, n=2, config=config, aggregators=aggs)
    thread.join(10)
    assert down.frames > 0, "the restart came after training had ended"
    assert all(a.generation == 1 and a.rejoins[0]["restarted"] for a in aggs)
    for rank in range(2):
        assert torch.equal(out[rank]["params"], out[0]["params"]), f"rank {rank} differs from rank 0"
        assert torch.equal(out[rank]["params"], untouched[rank]["params"]), f"rank {rank}: not the uninterrupted run"
