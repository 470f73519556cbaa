"""Two-level aggregation (p4/README.md, "Two-level aggregation"): two leaves of four workers and a spine,
each a software switch running the compiled program, chained in-process. Expected sums come from thc's
reference aggregation of all eight workers, never from a switch."""

from __future__ import annotations

import os

import numpy as np
import pytest

import contract
from harness import frames as tp
from harness.leaf_spine import LeafSpine
from tests.support.bmv2 import needs_bmv2
from tests.support.paths import THC_JSON
from tests.support.targets import bmv2_switches
from thc import make_table
from thc.aggregate import reference_aggregate

pytestmark = pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built")

SMALL = make_table(bits=4, granularity=30, clip=1 / 32, kind="optimal")  # 8 · 30 ≤ 255: 8-bit lanes
LARGE = make_table(bits=4, granularity=200, clip=1 / 32, kind="optimal")  # 16-bit lanes


def sums(frame: bytes) -> list[int]:
    return tp.Parsed.of(frame).lanes()


def indices(rng, fabric: LeafSpine) -> list[np.ndarray]:
    return [rng.integers(0, 16, size=fabric.coords, dtype=np.uint8) for _ in range(fabric.n)]


def assert_every_worker_exact(fabric: LeafSpine, results: dict[int, bytes], idx) -> None:
    expected = [int(v) for v in reference_aggregate(idx, fabric.table)]
    assert sorted(results) == list(range(fabric.n))
    for w, frame in results.items():
        thc = tp.Parsed.of(frame)
        assert thc.lengths_match(len(frame)) and thc.ip_checksum_ok, f"worker {w}"
        assert (thc.kind, thc.count, thc.lane_bits) == (1, fabric.n, fabric.lane_bits), f"worker {w}"
        assert sums(frame) == expected, f"worker {w}"


BMV2 = pytest.param(
    "bmv2",
    marks=[pytest.mark.bmv2, needs_bmv2()],
)


@pytest.fixture(params=["python", "native", BMV2])
def backend(request):
    """The switch engine of every switch in the fabric; BMv2 (three simple_switch_grpc on veth pairs) where
    it is installed and the tests run as root."""
    if request.param == "bmv2" and os.geteuid() != 0:
        pytest.skip("BMv2 on veth pairs needs root")
    return request.param


@pytest.fixture
def fabric(backend, tmp_path):
    """Two leaves of four workers and a spine, lossless, summing SMALL's 8-bit lanes."""
    fabric = LeafSpine(leaves=2, per_leaf=4, table=SMALL, **on(backend, tmp_path))
    yield fabric
    fabric.close()


def on(backend: str, workdir) -> dict:
    """LeafSpine's arguments for a fabric of `backend` switches (BMv2 logs in workdir)."""
    return {"switches": bmv2_switches(workdir)} if backend == "bmv2" else {"backend": backend}


@pytest.mark.parametrize("table", [SMALL, LARGE], ids=["8-bit", "16-bit"])
def test_two_level_sums_equal_the_reference_of_all_workers(backend, table, tmp_path):
    fabric = LeafSpine(leaves=2, per_leaf=4, table=table, **on(backend, tmp_path))
    rng = np.random.default_rng(1)
    try:
        for q in range(6):  # two uses of each of three slots: the shadow cells on both levels
            idx = indices(rng, fabric)
            assert_every_worker_exact(fabric, fabric.run_round(idx, slot=q % 3, rnd=q // 3), idx)
        spine = fabric.spine.events()
        assert spine["COMPLETED"] == 6 and spine["CONSUMED"] == 6  # one partial per leaf and use
        for leaf in fabric.leaf:
            assert leaf.events()["FANNED_OUT"] == 6
    finally:
        fabric.close()


def test_two_level_sums_stay_exact_under_one_percent_loss(backend, tmp_path):
    fabric = LeafSpine(leaves=2, per_leaf=4, table=SMALL, loss=0.01, seed=5, **on(backend, tmp_path))
    rng = np.random.default_rng(2)
    try:
        for q in range(60):
            idx = indices(rng, fabric)
            assert_every_worker_exact(fabric, fabric.run_round(idx, slot=q % 4, rnd=q // 4), idx)
        spine, leaves = fabric.spine.events(), [leaf.events() for leaf in fabric.leaf]
        # loss happened and was recovered on both levels; no partial was counted twice
        assert sum(ev["PARTIAL_RESENT"] for ev in leaves) > 0
        assert spine["COMPLETED"] == 60
        assert spine["CONSUMED"] == 60
    finally:
        fabric.close()


def assert_every_worker_has_the_maxima(results: dict[int, bytes], norms: np.ndarray, count: int) -> None:
    want = np.zeros(contract.NORMS_PER_REQUEST, np.float32)
    want[: norms.shape[1]] = norms.max(axis=0)
    for w, frame in results.items():
        thc = tp.Parsed.of(frame)
        assert thc.lengths_match(len(frame)) and (thc.op, thc.kind, thc.count, thc.lane_bits) == (
            contract.OP_NORM,
            1,
            count,
            contract.LANES_INT32,
        ), f"worker {w}"
        assert thc.norms().view(np.uint32).tolist() == want.view(np.uint32).tolist(), f"worker {w}"


def random_norms(rng, n: int, k: int = contract.NORMS_PER_REQUEST) -> np.ndarray:
    return (rng.uniform(0, 1, (n, k)) * 10.0 ** rng.integers(-30, 30, (n, k))).astype(np.float32)


@pytest.mark.parametrize("loss", [0.0, 0.02], ids=["lossless", "2% loss"])
def test_two_level_norm_maxima_over_all_workers_on_a_slots_norm_and_thc_uses(backend, tmp_path, loss):
    """NORM partials carry a leaf's maxima up and the spine takes the maxima of the leaves'; NORM and THC
    uses alternate on the same cells (the first packet of a use writes), with loss on every link."""
    fabric = LeafSpine(leaves=2, per_leaf=4, table=SMALL, loss=loss, seed=9, **on(backend, tmp_path))
    rng = np.random.default_rng(9)
    try:
        for rnd in range(6):
            if rnd % 2:
                idx = indices(rng, fabric)
                assert_every_worker_exact(fabric, fabric.run_round(idx, slot=1, rnd=rnd), idx)
            else:
                norms = random_norms(rng, fabric.n, k=int(rng.integers(1, contract.NORMS_PER_REQUEST + 1)))
                results = fabric.run_round(list(norms), slot=1, rnd=rnd, op=contract.OP_NORM)
                assert sorted(results) == list(range(fabric.n))
                assert_every_worker_has_the_maxima(results, norms, fabric.n)
        assert fabric.spine.events()["COMPLETED"] == 6
    finally:
        fabric.close()


def test_a_norm_release_at_a_leaf_completes_both_levels_with_the_workers_that_made_it(fabric):
    norms = random_norms(np.random.default_rng(10), fabric.n)
    made_it = [w for w in range(fabric.n) if w != 3]
    sent = [(w, fabric.request(w, norms[w], 0, 0, op=contract.OP_NORM)) for w in made_it]
    assert fabric.carry(sent) == {}  # leaf 0 waits for worker 3
    received = fabric.carry([(0, fabric.release(0, 0, 0, op=contract.OP_NORM))])
    assert sorted(received) == list(range(fabric.n))
    assert_every_worker_has_the_maxima({w: f for w, (f,) in received.items()}, norms[made_it], 7)
    late = fabric.carry([(3, fabric.request(3, norms[3] * 0 + np.float32(1e38), 0, 0, op=contract.OP_NORM))])
    assert sorted(late) == fabric.local_workers(0)  # never added: the stored maxima, fanned out again
    assert_every_worker_has_the_maxima({w: f for w, (f,) in late.items()}, norms[made_it], 7)


def test_a_lost_partial_is_recovered_by_a_workers_retransmission(fabric):
    rng = np.random.default_rng(3)
    idx = indices(rng, fabric)
    # leaf 0 completes, but its partial never reaches the spine
    for w in fabric.local_workers(0):
        out = fabric.leaf[0].send(w + 1, fabric.request(w, idx[w], 0, 0))
    assert [port for port, _ in out] == [fabric.per_leaf + 1]
    partial = tp.Parsed.of(out[0][1])
    assert (partial.kind, partial.count, partial.lane_bits) == (4, 4, fabric.lane_bits)
    assert fabric.spine.events()["CONSUMED"] == 0
    results = fabric.run_round(idx, slot=0, rnd=0)  # every worker (re)sends: leaf 0 re-sends its partial
    assert_every_worker_exact(fabric, results, idx)
    assert fabric.leaf[0].events()["PARTIAL_RESENT"] >= 1


def test_a_retransmitted_partial_is_not_counted_twice_and_a_complete_spine_answers_it(fabric):
    rng = np.random.default_rng(4)
    idx = indices(rng, fabric)
    for w in fabric.local_workers(0):
        partial = fabric.leaf[0].send(w + 1, fabric.request(w, idx[w], 0, 0))
    (_, partial_frame) = partial[0]
    assert fabric.spine.send(1, partial_frame) == []
    assert fabric.spine.send(1, partial_frame) == []  # again, before leaf 1: a duplicate, not counted
    assert fabric.spine.events()["DROP_DUPLICATE"] == 1
    results = fabric.run_round(idx, slot=0, rnd=0)
    assert_every_worker_exact(fabric, results, idx)  # count = 8, not 12: leaf 0 counted once
    answer = fabric.spine.send(1, partial_frame)  # the spine is complete: the stored result, unicast
    assert [port for port, _ in answer] == [1]
    thc = tp.Parsed.of(answer[0][1])
    assert (thc.kind, thc.count) == (2, fabric.n)
    assert sums(answer[0][1]) == list(reference_aggregate(idx, fabric.table))
    fanned = fabric.leaf[0].send(fabric.per_leaf + 1, answer[0][1])  # the leaf multicasts it down
    assert sorted(port for port, _ in fanned) == [1, 2, 3, 4]


def test_a_release_at_a_leaf_completes_both_levels_with_the_workers_that_made_it(fabric):
    """Partial aggregation across levels: leaf 0's worker 3 is a straggler; a RELEASE at leaf 0 sends its
    partial up with count 3, the spine completes with 3 + 4 = 7, and every worker (the straggler too, by
    the fan-out) gets the sums of those seven. The straggler's late request is counted (LATE) and never
    added: its answer is the same result again."""
    rng = np.random.default_rng(6)
    idx = indices(rng, fabric)
    made_it = [w for w in range(fabric.n) if w != 3]
    expected = list(reference_aggregate([idx[w] for w in made_it], fabric.table))
    assert fabric.carry([(w, fabric.request(w, idx[w], 2, 0)) for w in made_it]) == {}  # leaf 0 waits
    received = fabric.carry([(0, fabric.release(0, 2, 0))])
    assert sorted(received) == list(range(fabric.n))
    for w, (frame,) in received.items():
        thc = tp.Parsed.of(frame)
        assert (thc.kind, thc.count, thc.worker_id) == (1, 7, w)
        assert sums(frame) == expected, f"worker {w}"
    assert fabric.leaf[0].events()["RELEASED"] == 1 and fabric.spine.events()["COMPLETED"] == 1

    late = fabric.carry([(3, fabric.request(3, idx[3], 2, 0))])
    assert sorted(late) == fabric.local_workers(0)  # the spine's stored result, fanned out again
    for frame in (f for frames in late.values() for f in frames):
        assert tp.Parsed.of(frame).count == 7 and sums(frame) == expected
    leaf, spine = fabric.leaf[0].events(), fabric.spine.events()
    assert (leaf["LATE"], spine["RETX_ANSWERED"], spine["CONSUMED"] + spine["COMPLETED"]) == (1, 1, 2)
    assert fabric.carry([(1, fabric.release(1, 2, 0))]) == {}  # releasing a complete use: ignored
    # leaf 0's use is complete, so it passes the RELEASE on; the spine's is complete too
    assert (fabric.leaf[0].events()["RELEASE_UP"], fabric.spine.events()["RELEASE_IGNORED"]) == (1, 1)


def test_a_release_reaches_the_spine_past_a_leaf_that_completed_so_a_silent_leaf_holds_nothing(fabric):
    """Every worker under leaf 1 is silent. Leaf 0 completes and sends its partial; the spine waits for
    leaf 1. A RELEASE from a leaf-0 worker finds leaf 0's use complete, so leaf 0 passes it to the spine
    (RELEASE_UP), which releases its use with the four contributions it has: leaf 0's workers get those
    sums with count 4, and the next rounds go on the same way."""
    rng = np.random.default_rng(8)
    alive = fabric.local_workers(0)
    for rnd in range(2):
        idx = [rng.integers(0, 16, size=fabric.coords, dtype=np.uint8) for _ in range(fabric.n)]
        expected = [int(v) for v in reference_aggregate([idx[w] for w in alive], fabric.table)]
        assert fabric.carry([(w, fabric.request(w, idx[w], 1, rnd)) for w in alive]) == {}  # the spine waits
        received = fabric.carry([(alive[0], fabric.release(alive[0], 1, rnd))])
        assert sorted(received) == list(range(fabric.n))  # leaf 1 fans out to its (silent) workers too
        for w in alive:
            (frame,) = received[w]
            thc = tp.Parsed.of(frame)
            assert (thc.kind, thc.count, thc.worker_id, thc.round) == (1, 4, w, rnd), f"worker {w}"
            assert sums(frame) == expected, f"worker {w}"
    leaf, spine = fabric.leaf[0].events(), fabric.spine.events()
    assert (leaf["RELEASE_UP"], leaf["COMPLETED"], spine["RELEASED"], spine["COMPLETED"]) == (2, 2, 2, 0)
    assert fabric.carry([(alive[1], fabric.release(alive[1], 1, 1))]) == {}  # the spine's use is over
    assert fabric.spine.events()["RELEASE_IGNORED"] == 1
