"""Worker failure, in process: four workers aggregate THC rounds through the switch (the compiled program
on the software switch, and the contract's fake switch), one stops in the middle of a round, the
controller-equivalent admits the three survivors as a new job and posts the notice, and the survivors
finish. Every round before the failure is the four workers' reference aggregation; the interrupted round
and every round after it are the survivors' alone, bit for bit, with the survivors' own norm maximum."""

import threading
import time

import numpy as np
import pytest
import torch

from ddp.aggregator_hooks import redo_on_membership_change
from harness.ddp_cluster import thc_spec
from harness.sim import SimJob, admit, attach_workers, retire
from host_agent.aggregator import SwitchAggregator
from host_agent.membership import Membership, MembershipBoard
from host_agent.probe import probe_gradient
from thc.compressor import THCCompressor
from thc.config import THCConfig

N, DEAD, ROUNDS, DIES_IN = 4, 2, 6, 3  # worker 2 dies in round 3, after its norm, while sending its sums
SIZE = 16000  # one chunk of 16,000 coordinates (16,384 after padding): 1 NORM and 16 THC requests, window 8
CONFIG = THCConfig(bits=4, granularity=30, seed=0, error_feedback=False, chunk=16384)
SURVIVORS = [w for w in range(N) if w != DEAD]
K = 1024  # coordinates a THC request: 8-bit lanes (n·g = 120), 1 KiB cells


def jobs() -> tuple[SimJob, SimJob]:
    """The job the four start in, and the survivors' (what the runner adds: the same description with a
    fresh id, n − 1 and a fresh key; free slots next to the old job's, a fresh epoch)."""
    old = SimJob.plan(thc_spec(CONFIG, 1, N, window=8, slots=8), epoch=1)
    new = SimJob.plan(old.spec.replace(job_id=2, workers=N - 1, key=0), SURVIVORS, slot_base=8, epoch=2)
    assert new.spec.key != old.spec.key and new.spec.coords_per_request == old.spec.coords_per_request == K
    return old, new


def notice(new: SimJob) -> Membership:
    return Membership(1, new.job_id, tuple(SURVIVORS), new.epoch, failed=(DEAD,), key=new.spec.key)


def thc_round(agg, comp, rank, k):
    """One probe round through ``agg``, redone from its norm phase when the membership changes."""
    prep = comp.prepare(probe_gradient(7, rank, k, SIZE), step=k)

    def norm_encode_sum():
        max_norms = agg.all_max(prep.norms)
        indices = comp.encode(prep, max_norms)
        return max_norms, indices, *agg.all_sum_table_values(indices, comp.table)

    max_norms, indices, sums, count = redo_on_membership_change(norm_encode_sum)
    return {
        "max_norms": max_norms.numpy(),
        "indices": np.concatenate(indices),
        "sums": np.concatenate(sums),
        "n": count,
    }


def assert_survivors_rounds_are_the_reference(records) -> None:
    """Every survivor's rounds are thc's aggregation over the workers in them: all N before round DIES_IN,
    the survivors from it on."""
    for k in range(ROUNDS):
        ranks = list(range(N)) if k < DIES_IN else SURVIVORS
        max_norms, indices, sums = reference(ranks, k)
        for r in SURVIVORS:
            got, where = records[r][k], f"round {k}, worker {r}"
            assert got["n"] == len(ranks), where
            assert np.array_equal(got["max_norms"], max_norms), where
            assert np.array_equal(got["indices"], indices[r]), where
            assert np.array_equal(got["sums"], sums), where


def reference(ranks, k):
    """thc's own aggregation of round k over the workers ``ranks`` (their norm max, their indices)."""
    comps = {r: THCCompressor(CONFIG, worker_id=r) for r in ranks}
    preps = {r: comps[r].prepare(probe_gradient(7, r, k, SIZE), step=k) for r in ranks}
    max_norms = torch.stack([p.norms for p in preps.values()]).amax(0)
    indices = {r: comps[r].encode(preps[r], max_norms) for r in ranks}
    sums = comps[ranks[0]].aggregate(list(indices.values()))
    return max_norms.numpy(), {r: np.concatenate(i) for r, i in indices.items()}, np.concatenate(sums)


def join_workers(threads, errors, ranks) -> None:
    """Wait for the worker threads of `ranks`: none may hang, none may have failed."""
    for r in ranks:
        threads[r].join(60)
        assert not threads[r].is_alive(), f"worker {r} hangs"
    assert not errors, errors


@pytest.mark.parametrize("loss", [0.0, 0.03])
def test_survivors_readmitted_as_a_new_job_aggregate_only_their_own_rounds(new_engine, loss):
    old, new = jobs()
    engine = new_engine(old)
    _, protocols = attach_workers(
        engine, old, loss_up=loss, loss_down=loss, seed=5, clock=time.monotonic, timeout=0.005, max_timeout=0.05,
        deadline=30.0,
    )  # fmt: skip
    board = MembershipBoard()
    aggs = [SwitchAggregator(p, membership=board.reader()) for p in protocols]
    records = {r: [] for r in range(N)}
    errors = []

    def work(rank):
        comp = THCCompressor(CONFIG, worker_id=rank)
        try:
            for k in range(ROUNDS):
                if rank == DEAD and k == DIES_IN:
                    prep = comp.prepare(probe_gradient(7, rank, k, SIZE), step=k)
                    indices = comp.encode(prep, aggs[rank].all_max(prep.norms))
                    # it dies after sending its first 4 of 16 requests: had pump() sent them all (it refills
                    # the window as results come), round 3 could complete with all four, as it rightly would
                    aggs[rank].protocol.start_sum_indices([indices[0][: 4 * K]])
                    aggs[rank].protocol.pump()
                    return
                records[rank].append(thc_round(aggs[rank], comp, rank, k))
        except Exception as exc:  # surfaced below with the worker's id
            errors.append((rank, exc))

    threads = {r: threading.Thread(target=work, args=(r,), daemon=True) for r in range(N)}
    for t in threads.values():
        t.start()
    threads[DEAD].join(60)
    assert not threads[DEAD].is_alive()

    # the controller-equivalent: the survivors as a fresh job on free slots with a fresh epoch, then the notice
    admit(engine, new)
    board.post(notice(new))
    deadline = time.monotonic() + 60
    while any(aggs[r].generation < 1 for r in SURVIVORS) and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    retire(engine, old)  # every survivor is in the new job: the old one's cells are of no use now
    join_workers(threads, errors, SURVIVORS)

    assert_survivors_rounds_are_the_reference(records)
    # every survivor moved at the same call: the sum of round 3 (calls 0..5 are rounds 0..2, 6 its norm)
    assert {aggs[r].rejoins[0]["at_call"] for r in SURVIVORS} == {2 * DIES_IN + 1}
    stats = aggs[SURVIVORS[0]].stats()
    assert stats["job_id"] == new.job_id and stats["generation"] == 1
    # old job: 2 calls per round before the failure and round 3's norm (its sum never completed); new
    # job: the agreement, then 2 calls per round from the redone round 3 on
    assert stats["operations"] == (2 * DIES_IN + 1) + (1 + 2 * (ROUNDS - DIES_IN))


class Gate:
    """A worker's port that can stall: while held, receiving blocks until released, and what arrived
    meanwhile is lost (the worker falls behind the others, as one that is descheduled and loses results)."""

    def __init__(self, port):
        self.port = port
        self.held = False
        self.released = threading.Event()

    def send(self, frame):
        self.port.send(frame)

    def recv(self, timeout):
        if self.held:
            self.released.wait(60)
            self.port.recv(0.0)  # lost
            self.held = False
            return []
        return self.port.recv(timeout)

    def close(self):
        self.port.close()

    def describe(self):
        return self.port.describe()


class StalledCluster:
    """N workers running ROUNDS probe rounds in threads, each with a SwitchAggregator that follows `board`'s
    notices; worker `behind` stalls in round DIES_IN (its norm result lost while it waits on its gate), and
    worker `dead` (None: nobody) stops after round DIES_IN's norm. `records[rank]`: its rounds' results."""

    def __init__(self, engine, job: SimJob, behind: int, dead: int | None = None):
        self.lw, protocols = attach_workers(
            engine, job, seed=5, clock=time.monotonic, timeout=0.005, max_timeout=0.05, deadline=30.0
        )
        self.behind, self.dead = behind, dead
        self.gate = Gate(protocols[behind].transport)
        protocols[behind].transport = self.gate
        self.board = MembershipBoard()
        self.aggs = [SwitchAggregator(p, membership=self.board.reader()) for p in protocols]
        self.records = {r: [] for r in range(N)}
        self.errors = []
        self.threads = {r: threading.Thread(target=self._work, args=(r,), daemon=True) for r in range(N)}
        for t in self.threads.values():
            t.start()

    def _work(self, rank):
        comp, agg = THCCompressor(CONFIG, worker_id=rank), self.aggs[rank]
        try:
            for k in range(ROUNDS):
                if rank == self.dead and k == DIES_IN:
                    agg.all_max(comp.prepare(probe_gradient(7, rank, k, SIZE), step=k).norms)
                    return  # gone after round 3's norm (call 6): nobody completes call 7, its sums
                if rank == self.behind and k == DIES_IN:
                    self.gate.held = True  # round 3's norm is sent, and its result lost while the worker stalls
                self.records[rank].append(thc_round(agg, comp, rank, k))
        except Exception as exc:  # surfaced by join() with the worker's id
            self.errors.append((rank, exc))

    def wait_for_the_others(self) -> None:
        """Until every worker but the one behind and the dead one has completed round 3's norm (call 6)."""
        ahead = [r for r in range(N) if r not in (self.behind, self.dead)]
        deadline = time.monotonic() + 60
        while any(self.aggs[r].calls < 2 * DIES_IN + 1 for r in ahead) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(self.aggs[r].calls == 2 * DIES_IN + 1 for r in ahead)  # stuck in call 7, round 3's sums

    def join(self, ranks) -> None:
        join_workers(self.threads, self.errors, ranks)


def test_a_survivor_behind_the_others_finishes_its_call_in_the_old_job_first(new_engine):
    old, new = jobs()
    engine = new_engine(old)
    behind = 1
    cluster = StalledCluster(engine, old, behind, dead=DEAD)
    cluster.wait_for_the_others()
    admit(engine, new)
    cluster.board.post(notice(new))
    cluster.gate.released.set()
    cluster.join(SURVIVORS)
    aggs, records = cluster.aggs, cluster.records

    for r in SURVIVORS:
        (rejoin,) = aggs[r].rejoins
        assert rejoin["at_call"] == 2 * DIES_IN + 1
        assert rejoin["calls_at_notice"] == (2 * DIES_IN if r == behind else 2 * DIES_IN + 1)
    assert_survivors_rounds_are_the_reference(records)


@pytest.mark.parametrize("handed_over", ["before the notice", "after the notice", "mixed"])
def test_overlapped_hook_survivors_redo_the_round_and_the_early_norm_round_in_the_new_job(new_engine, handed_over):
    """thc_hook with two buckets a step, through the switch: while bucket 0's sums are out, bucket 1's norm
    round goes out early. The dead worker never completes round 3's bucket 0 sums. Bucket 1 of that round is
    handed over before the notice (its norm round is out when the survivors move) or after it (its early
    start must not move the worker, which would number it before the redone bucket 0), or before it on one
    survivor and after it on the others (they must still number alike). Either way the
    survivors abandon what is in flight and redo the round in the new job in the blocking order (bucket 0's
    norm, its sums, bucket 1's norm ...): every bucket before the failure is the four workers' average,
    every one from round 3 on the survivors'."""
    from ddp import aggregator_hooks
    from tests.support.grad_bucket import GradBucket

    old, new = jobs()
    engine = new_engine(old)
    _, protocols = attach_workers(
        engine, old, seed=5, clock=time.monotonic, timeout=0.005, max_timeout=0.05, deadline=30.0
    )
    board = MembershipBoard()
    aggs = [SwitchAggregator(p, membership=board.reader()) for p in protocols]
    decoded = {r: [] for r in range(N)}
    errors = []
    posted = threading.Event()
    late = {r: handed_over == "after the notice" or (handed_over == "mixed" and r != SURVIVORS[0]) for r in SURVIVORS}

    def grads(rank, k):
        return [probe_gradient(7, rank, 2 * k + b, SIZE) for b in range(2)]

    def work(rank):
        state = aggregator_hooks.THCHookState(CONFIG, aggs[rank], worker_id=rank)
        try:
            for k in range(ROUNDS):
                if rank == DEAD and k == DIES_IN:
                    comp = state.compressor_for(0, SIZE)
                    prep = comp.prepare(grads(rank, k)[0], k, key=0)
                    indices = comp.encode(prep, aggs[rank].all_max(prep.norms))
                    aggs[rank].protocol.start_sum_indices([indices[0][: 4 * K]])  # 4 of 16, then gone
                    aggs[rank].protocol.pump()
                    return
                buckets = [GradBucket(g, index=b, last=b == 1) for b, g in enumerate(grads(rank, k))]
                futures = [aggregator_hooks.thc_hook(state, buckets[0])]
                if k == DIES_IN and late[rank]:
                    assert posted.wait(60)
                futures.append(aggregator_hooks.thc_hook(state, buckets[1]))
                decoded[rank].append([f.wait().clone() for f in futures])
        except Exception as exc:  # surfaced below with the worker's id
            errors.append((rank, exc))
        finally:
            state.close()

    threads = {r: threading.Thread(target=work, args=(r,), daemon=True) for r in range(N)}
    for t in threads.values():
        t.start()
    threads[DEAD].join(60)
    assert not threads[DEAD].is_alive()
    out = {r: 1 if late[r] else 2 for r in SURVIVORS}  # bucket 0's sums, and bucket 1's norm round
    deadline = time.monotonic() + 60
    while any(len(aggs[r].protocol.in_flight) < out[r] for r in SURVIVORS) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(len(aggs[r].protocol.in_flight) == out[r] for r in SURVIVORS)
    admit(engine, new)
    board.post(notice(new))
    posted.set()
    join_workers(threads, errors, SURVIVORS)

    for k in range(ROUNDS):
        ranks = list(range(N)) if k < DIES_IN else SURVIVORS
        for b in range(2):
            comps = {r: THCCompressor(CONFIG, worker_id=r) for r in ranks}
            preps = {r: comps[r].prepare(grads(r, k)[b], step=k, key=b) for r in ranks}
            max_norms = torch.stack([p.norms for p in preps.values()]).amax(0)
            sums = comps[ranks[0]].aggregate([comps[r].encode(preps[r], max_norms) for r in ranks])
            for r in SURVIVORS:
                want = comps[r].decode(preps[r], sums, len(ranks), max_norms)
                assert torch.equal(decoded[r][k][b], want), f"round {k}, bucket {b}, worker {r}"
    assert {aggs[r].rejoins[0]["at_call"] for r in SURVIVORS} == {4 * DIES_IN + 1}
