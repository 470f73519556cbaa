"""Packet-level tests of the shared pool (p4/README.md, "Shared pool"), on every target present.

Two pool jobs contend for a pool of a few cells: a use claims its cell with its first request and frees it
once every worker has its result (every worker acked it, the slot's next round completed with all n, or the
bookkeeping cell's next use started); a use that finds its cell taken falls back as a whole (every
request of it is answered FALLBACK), and is then aggregated by a parameter server, which is the same program
on a software switch (host_agent/sharded.py), here with the jobs as static ones. Sums are checked against
thc's reference aggregator, never against the switch.
"""

from __future__ import annotations

import numpy as np
import pytest

import contract
from controller import pool as pools
from controller.writes import DELETE, INSERT
from harness.switches import SoftwareTarget
from tests.p4.test_thc_pipeline import (
    GROUP,
    KEY,
    SERVICE,
    TABLE,
    TARGETS,
    N,
    expected,
    ip_int,
    mac_int,
    parsed,
    random_indices,
    release,
    request,
    set_job,
    thc_request,
    worker,
    worker_port,
)
from tests.support.paths import THC_JSON
from tests.support.targets import Bmv2Target, bmv2_binary

pytestmark = pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built")

A, B = 7, 9  # two pool jobs of the same three workers, with their own keys, epochs and groups
# both rings start at the pool's first cell: the same (slot, round) of A and B meet on one cell
JOBS = {
    A: dict(key=KEY, epoch=5, group=GROUP, book=contract.SLOTS, ring=0),
    B: dict(key=0x0B0B0B0B, epoch=6, group=90, book=contract.SLOTS + 8, ring=0),
}
SLOTS_PER_JOB = 4
FALLBACK = contract.KIND_FALLBACK


def pool_of(cells: int) -> tuple[int, int]:
    return (contract.CELLS - cells, cells)


def install(t, job_id: int, *, pool: tuple[int, int] | None, slot_base: int | None = None) -> None:
    """Job `job_id` of workers 0..N-1: a pool job (bookkeeping slots from SLOTS on) or, with `pool` None, a
    static one at `slot_base` (the parameter server's)."""
    j = JOBS[job_id]
    set_job(
        t,
        job_id,
        epoch=j["epoch"],
        key=j["key"],
        mask=(1 << N) - 1,
        group=j["group"],
        slot_base=j["book"] if pool else slot_base,
        n_slots=SLOTS_PER_JOB,
    )
    t.set_group(j["group"], [(worker_port(w), w) for w in range(N)])
    for w in range(N):
        mac, ip = worker(w)
        t.add_result_dst(job_id, w, mac_int(mac), ip_int(ip))
    t.set_table(job_id, TABLE.values, 4)
    if pool is not None:
        t.apply([pools.pool_write(INSERT, job_id, (*pool, j["ring"])), pools.live_write(INSERT, j["epoch"])])


def make_switch(kind: str, workdir, pool: tuple[int, int] | None, job_ids=(A, B)):
    if kind == "bmv2":
        import os

        if os.geteuid() != 0:
            pytest.skip("BMv2 on veth pairs needs root")
        t = Bmv2Target(bmv2_binary(), workdir)
    else:
        t = SoftwareTarget(backend="native" if kind == "native" else "python")
    try:
        t.add_service(ip_int(SERVICE[1]))
        for w in range(4):
            mac, ip = worker(w)
            t.add_route(ip_int(ip), 32, mac_int(mac), worker_port(w))
        for i, job_id in enumerate(job_ids):
            install(t, job_id, pool=pool, slot_base=8 * i)
    except Exception:
        t.close()
        raise
    return t


@pytest.fixture(params=TARGETS)
def kind(request):
    return request.param


@pytest.fixture
def switches(kind, tmp_path):
    made = []

    def make(pool, job_ids=(A, B), on=None):
        t = make_switch(on or kind, tmp_path / f"sw{len(made)}", pool, job_ids)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def frame(job_id: int, w: int, idx: np.ndarray, **kw) -> bytes:
    return thc_request(w, idx, job_id=job_id, key=JOBS[job_id]["key"], **kw)


def send_round(t, job_id: int, idx, *, slot: int = 0, rnd: int = 0, workers=None):
    out = []
    for w in range(N) if workers is None else workers:
        out += t.send(worker_port(w), frame(job_id, w, idx[w], slot=slot, round_=rnd))
    return out


def assert_sums(out, job_id: int, idx, kind=contract.KIND_RESULT) -> None:
    assert sorted(port for port, _ in out) == [worker_port(w) for w in range(N)]
    for _, data in out:
        p = parsed(data)
        assert (p.job_id, p.kind, p.count, p.key) == (job_id, kind, N, JOBS[job_id]["key"])
        assert p.lanes() == expected(idx)


def assert_fallback(out, job_id: int, w: int, slot: int, rnd: int) -> None:
    """One header-only FALLBACK, back to the sender, naming the use."""
    assert [port for port, _ in out] == [worker_port(w)]
    p = parsed(out[0][1])
    assert (p.kind, p.job_id, p.worker_id, p.slot, p.round) == (FALLBACK, job_id, w, slot, rnd)
    assert p.key == JOBS[job_id]["key"]
    assert (p.dst_ip, p.src_ip, p.payload) == (worker(w)[1], SERVICE[1], b"")


def claims_frees(t, epoch: int) -> tuple[int, int]:
    """pool_claims and pool_frees of `epoch`, read as the controller reads them (BMv2) or from the engine."""
    if isinstance(t, SoftwareTarget):
        return tuple(t.sw.counter_read(name, epoch)[0] for name in (contract.POOL_CLAIMS, contract.POOL_FREES))
    counts = pools.decode_counts(t.p4info, t.session._read(pools.counter_reads(t.p4info, [epoch])))
    return counts[contract.POOL_CLAIMS].get(epoch, 0), counts[contract.POOL_FREES].get(epoch, 0)


# ---- claim and free ------------------------------------------------------------------------------------


def test_a_pool_use_claims_a_cell_with_its_first_request_and_sums_exactly(switches):
    t = switches(pool_of(4))
    idx = random_indices(np.random.default_rng(11))
    assert t.send(worker_port(0), frame(A, 0, idx[0], slot=3, round_=1)) == []
    assert claims_frees(t, JOBS[A]["epoch"]) == (1, 0)
    assert_sums(send_round(t, A, idx, slot=3, rnd=1, workers=[1, 2]), A, idx)
    assert claims_frees(t, JOBS[A]["epoch"]) == (1, 0)
    if isinstance(t, SoftwareTarget):  # registers are readable here: the cell is the contract's, tagged A's
        cell = contract.pool_cell(3, 1, SLOTS_PER_JOB, *pool_of(4), JOBS[A]["ring"])
        book = 2 * (JOBS[A]["book"] + 3) + 1
        assert t.sw.register_read(contract.POOL_OWNER, cell) == JOBS[A]["epoch"] << 16 | book
        assert t.sw.register_read(contract.CELL_LEASE, book) == contract.LEASE_CLAIMED | cell
    ev = t.job_events(A)
    assert (ev["CONSUMED"], ev["COMPLETED"], ev["POOL_TAKEN"], ev["POOL_FALLBACK"]) == (2, 1, 0, 0)


def test_a_retransmission_to_a_complete_pool_use_gets_the_stored_result(switches):
    t = switches(pool_of(4))
    idx = random_indices(np.random.default_rng(12))
    send_round(t, A, idx)
    out = t.send(worker_port(1), frame(A, 1, idx[1]))
    assert [port for port, _ in out] == [worker_port(1)]
    p = parsed(out[0][1])
    assert (p.kind, p.count, p.lanes()) == (contract.KIND_RESULT_RETX, N, expected(idx))


def ack(job_id: int, w: int, *, slot: int = 0, rnd: int = 0, key: int | None = None) -> bytes:
    """Worker w's header-only ACK: it has the result of job_id's use (slot, rnd)."""
    key = JOBS[job_id]["key"] if key is None else key
    return request(w, contract.OP_THC, kind=contract.KIND_ACK, job_id=job_id, key=key, slot=slot, round_=rnd)


def test_a_complete_round_of_all_n_frees_the_cell_of_the_slots_round_before(switches):
    t = switches(pool_of(8))
    rng = np.random.default_rng(13)
    epoch = JOBS[A]["epoch"]
    for rnd in range(5):
        idx = random_indices(rng)
        assert_sums(send_round(t, A, idx, rnd=rnd), A, idx)
        # every worker sent round rnd only once it had round rnd - 1's result: that use's cell goes back
        assert claims_frees(t, epoch) == (rnd + 1, rnd)


def test_the_next_use_of_a_bookkeeping_cell_frees_the_cell_of_a_use_whose_next_round_was_released(switches):
    t = switches(pool_of(8))
    rng = np.random.default_rng(20)
    epoch = JOBS[A]["epoch"]
    idx = [random_indices(rng) for _ in range(3)]
    assert_sums(send_round(t, A, idx[0], rnd=0), A, idx[0])
    send_round(t, A, idx[1], rnd=1, workers=[0, 1])
    released = t.send(worker_port(0), release(0, job_id=A, key=JOBS[A]["key"], round_=1))
    assert len(released) == N  # round 1 completes with k = 2: worker 2 may still lack round 0's result
    assert claims_frees(t, epoch) == (2, 0)
    out = t.send(worker_port(2), frame(A, 2, idx[0][2], round_=0))  # and gets it from round 0's cell
    assert [parsed(d).lanes() for _, d in out] == [expected(idx[0])]
    # round 2 starts: round 0's cell goes back; it completes with all n: so does round 1's
    assert_sums(send_round(t, A, idx[2], rnd=2), A, idx[2])
    assert claims_frees(t, epoch) == (3, 2)


def test_a_use_acked_by_every_worker_gives_its_cell_back_and_answers_nothing_more(switches):
    t = switches(pool_of(1))  # one cell: A's use holds it until every worker acked
    rng = np.random.default_rng(21)
    idx_a, idx_b = random_indices(rng), random_indices(rng)
    epoch = JOBS[A]["epoch"]
    assert_sums(send_round(t, A, idx_a), A, idx_a)
    for w in (0, 1, 1):  # two workers, one of them twice: the cell stays A's
        assert t.send(worker_port(w), ack(A, w)) == []
    assert claims_frees(t, epoch) == (1, 0)
    assert_fallback(t.send(worker_port(0), frame(B, 0, idx_b[0], slot=1)), B, 0, 1, 0)
    assert t.send(worker_port(2), ack(A, 2)) == []  # the last worker: the cell goes back
    assert claims_frees(t, epoch) == (1, 1)
    assert t.job_events(A)["POOL_ACK"] == 4
    assert_sums(send_round(t, B, idx_b, slot=2), B, idx_b)  # B's next use claims it
    # a late copy of A's request finds its use over: dropped, never answered from B's cell
    assert t.send(worker_port(1), frame(A, 1, idx_a[1])) == []
    assert t.job_events(A)["DROP_STALE_ROUND"] == 1


def test_an_ack_frees_nothing_that_is_not_a_complete_use_of_its_job(switches):
    t = switches(pool_of(2))
    rng = np.random.default_rng(22)
    idx = random_indices(rng)
    epoch = JOBS[A]["epoch"]
    send_round(t, A, idx, workers=[0, 1])  # incomplete: acks of it change nothing
    for w in range(N):
        assert t.send(worker_port(w), ack(A, w)) == []
    for w in range(N):  # another job's key: dropped before the bookkeeping
        assert t.send(worker_port(w), ack(A, w, key=JOBS[B]["key"])) == []
    assert_sums(send_round(t, A, idx, workers=[2]), A, idx)
    assert claims_frees(t, epoch) == (1, 0)
    assert t.job_events(A)["DROP_BAD_KEY"] == N
    out = t.send(worker_port(0), frame(A, 0, idx[0]))  # still held: a retransmission gets the result
    assert [parsed(d).lanes() for _, d in out] == [expected(idx)]


# ---- taken, exhausted, departed ---------------------------------------------------------------------------


def test_a_use_whose_cell_is_taken_falls_back_as_a_whole(switches):
    t = switches(pool_of(1))  # one cell: job A's first use holds it
    rng = np.random.default_rng(14)
    idx_a, idx_b = random_indices(rng), random_indices(rng)
    assert send_round(t, A, idx_a, workers=[0]) == []  # A's use claims the cell and waits
    for w in range(N):
        assert_fallback(t.send(worker_port(w), frame(B, w, idx_b[w])), B, w, 0, 0)
    assert_sums(send_round(t, A, idx_a, workers=[1, 2]), A, idx_a)  # B added nothing to A's cell
    # a retransmission of B's use after A completed still falls back: the use's fate was decided once
    assert_fallback(t.send(worker_port(2), frame(B, 2, idx_b[2])), B, 2, 0, 0)
    ev_b = t.job_events(B)
    assert (ev_b["POOL_TAKEN"], ev_b["POOL_FALLBACK"], ev_b["CONSUMED"], ev_b["COMPLETED"]) == (1, 3, 0, 0)
    assert claims_frees(t, JOBS[B]["epoch"]) == (0, 0)
    # B's next use of that bookkeeping cell may start (the fallen-back use counts as complete, it is not
    # FAR_ROUND); it finds the pool's one cell still A's, whose use is complete but not yet delivered
    assert_fallback(t.send(worker_port(0), frame(B, 0, idx_b[0], round_=2)), B, 0, 0, 2)
    assert t.job_events(B)["POOL_TAKEN"] == 2


def test_an_exhausted_pool_sends_every_use_elsewhere(switches):
    t = switches(pool_of(0))
    idx = random_indices(np.random.default_rng(15))
    for rnd, slot in ((0, 0), (0, 1), (1, 0)):
        for w in range(N):
            assert_fallback(t.send(worker_port(w), frame(A, w, idx[w], slot=slot, round_=rnd)), A, w, slot, rnd)
    ev = t.job_events(A)
    assert (ev["POOL_TAKEN"], ev["POOL_FALLBACK"]) == (3, 6)
    assert claims_frees(t, JOBS[A]["epoch"]) == (0, 0)


def test_a_departed_jobs_cell_is_claimed_by_the_next_use_that_finds_it(switches):
    t = switches(pool_of(1))
    rng = np.random.default_rng(16)
    idx_a, idx_b = random_indices(rng), random_indices(rng)
    assert_sums(send_round(t, A, idx_a), A, idx_a)  # A's complete use keeps its cell (results may be lost)
    assert_fallback(t.send(worker_port(0), frame(B, 0, idx_b[0], slot=1)), B, 0, 1, 0)
    t.apply([pools.live_write(DELETE, JOBS[A]["epoch"])])  # A leaves: the controller deletes its liveness
    assert_sums(send_round(t, B, idx_b, slot=2), B, idx_b)
    assert claims_frees(t, JOBS[B]["epoch"]) == (1, 0)


# ---- bad input --------------------------------------------------------------------------------------------


def test_a_foreign_key_neither_claims_nor_blocks_nor_adds_to_a_pool_cell(switches):
    t = switches(pool_of(1))
    rng = np.random.default_rng(17)
    idx = random_indices(rng)
    forged = thc_request(0, idx[0], job_id=B, key=JOBS[A]["key"])  # B's use with A's key
    assert t.send(worker_port(0), forged) == []
    assert t.job_events(B)["DROP_BAD_KEY"] == 1
    assert claims_frees(t, JOBS[B]["epoch"]) == (0, 0)
    assert_sums(send_round(t, A, idx), A, idx)  # the cell was free for A
    assert t.send(worker_port(1), thc_request(1, idx[1], job_id=A, key=JOBS[B]["key"])) == []
    assert t.job_events(A)["DROP_BAD_KEY"] == 1


def test_a_request_of_an_unknown_job_is_dropped_and_counted(switches):
    t = switches(pool_of(2))
    idx = random_indices(np.random.default_rng(18))
    assert t.send(worker_port(0), thc_request(0, idx[0], job_id=3)) == []
    assert t.job_events(3)["DROP_UNKNOWN_JOB"] == 1
    assert claims_frees(t, 0) == (0, 0)


# ---- many uses, a small pool: every sum exact, every fallback counted -------------------------------------


def test_two_jobs_on_a_pool_smaller_than_their_demand_get_exact_sums_and_count_their_fallbacks(switches):
    """Both jobs run four slots for six rounds each on a pool of 8 cells (their rings of 16 cells each start
    on the same cell), their requests interleaved; a use that falls back is aggregated by the parameter
    server."""
    t = switches(pool_of(8))
    ps = switches(None, on="emulator")  # the parameter server: the program on a software switch, jobs static
    rng = np.random.default_rng(19)
    pending = []  # (job, slot, round, worker order) of every use, in the schedule's order
    for rnd in range(6):
        for slot in range(SLOTS_PER_JOB):
            for job_id in (A, B):
                pending.append((job_id, slot, rnd, list(rng.permutation(N))))
    fell_back = {A: 0, B: 0}
    wrong = 0
    # two uses of each job in progress at once, their requests interleaved
    while pending:
        batch, pending = pending[:4], pending[4:]
        idx = {(j, s, r): random_indices(rng) for j, s, r, _ in batch}
        answers: dict = {key: [] for key in idx}
        for turn in range(N):
            for j, s, r, order in batch:
                w = int(order[turn])
                out = t.send(worker_port(w), frame(j, w, idx[(j, s, r)][w], slot=s, round_=r))
                answers[(j, s, r)] += out
        for (j, s, r), out in answers.items():
            kinds = {parsed(d).kind for _, d in out}
            if kinds == {FALLBACK}:
                assert len(out) == N  # every worker was told
                fell_back[j] += 1
                out = send_round(ps, j, idx[(j, s, r)], slot=s, rnd=r)
            want = expected(idx[(j, s, r)])
            assert sorted(p for p, _ in out) == [worker_port(w) for w in range(N)]
            wrong += sum(parsed(d).lanes() != want for _, d in out)
    assert wrong == 0
    assert fell_back[A] + fell_back[B] > 0  # the pool was short
    assert fell_back[A] + fell_back[B] < 2 * 6 * SLOTS_PER_JOB  # and used
    for j in (A, B):
        ev = t.job_events(j)
        assert ev["POOL_TAKEN"] == fell_back[j]
        assert ev["POOL_FALLBACK"] == (N - 1) * fell_back[j]
        claimed, freed = claims_frees(t, JOBS[j]["epoch"])
        assert claimed == 6 * SLOTS_PER_JOB - fell_back[j]
        assert claimed - freed <= 2 * SLOTS_PER_JOB
