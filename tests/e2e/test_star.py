"""End to end on the default star (4 workers, one software switch): THC rounds through the switch are
exact, also with 1 % and 5 % loss on every link, and a short training run learns digits.

One network serves the whole module (bring-up and programming take a while on 2 cores); each test adds
the job again, which gives it a fresh epoch, as a new training run would.
"""

import pytest

from contract.job import JobSpec
from tests.support import e2e
from tests.support.e2e import assert_fix32_probes_exact, assert_thc_probes_exact, mininet_marks, served
from topologies.workers import WorkerFailed, WorkerOptions, follow, start_workers, stop_workers

pytestmark = mininet_marks()

PROBE_SIZE = 3000  # chunks of 2048 and 952 -> 1024 coordinates: 2 + 1 THC requests (one cell each), 2 norms


def spec(job_id: int) -> JobSpec:
    return JobSpec(job_id=job_id, workers=4)


@pytest.fixture(scope="module")
def star(tmp_path_factory):
    with served("star4.json", tmp_path_factory.mktemp("star")) as bed:
        yield bed


def probe(bed, rounds: int, job_id: int, mode: str = "thc"):
    return e2e.probe(bed, mode, rounds, PROBE_SIZE, job_id=job_id)


def test_one_round_is_exact(star):
    probes = probe(star, rounds=1, job_id=1)
    assert_thc_probes_exact(probes, 1, PROBE_SIZE)
    events = star.last_switch_events["s1"]
    # 4 workers x (barrier norm + one NORM request of the 2 chunk norms + 3 THC requests, one cell each); one
    # multicast result per slot
    assert events["CONSUMED"] + events["COMPLETED"] == 4 * 5
    assert events["COMPLETED"] == 5


def test_fix32_round_is_exact(star):
    probes = probe(star, rounds=1, job_id=4, mode="fix32")
    assert_fix32_probes_exact(probes, 1, PROBE_SIZE)


@pytest.mark.parametrize("loss", [1, 5])
def test_rounds_are_exact_under_loss(star, loss):
    star.set_loss(loss)
    try:
        probes = probe(star, rounds=2, job_id=2)
    finally:
        star.set_loss(0)
    assert_thc_probes_exact(probes, 2, PROBE_SIZE)
    retransmissions = sum(p["stats"].item().count('"retransmissions": 0') == 0 for p in probes)
    assert retransmissions >= 1, "with loss on every link some worker must have retransmitted"


def test_short_training_reaches_85_percent(star):
    records = star.run_workers(WorkerOptions(mode="thc", steps=66, spec=spec(3), switch_timeout=20))
    rank0 = min(records, key=lambda r: r["rank"])
    assert rank0["final_test_acc"] >= 0.85, rank0["epochs"]
    # data parallel: every worker ends with the same model, hence the same test accuracy
    assert {r["final_test_acc"] for r in records} == {rank0["final_test_acc"]}


def test_a_worker_whose_switch_never_answers_times_out_clearly(star):
    # job 9 was never installed: the switch drops every request (UNKNOWN_JOB) and no result comes back
    described = star.log_dir / "unanswered-job.json"
    spec(9).save(described)
    options = WorkerOptions(
        mode="thc", steps=0, spec=spec(9), job_file=described, probe_rounds=1, probe_size=64, switch_timeout=3
    )
    workers = start_workers(star.net, star.topo, options, star.ledger, star.log_dir / "unanswered")
    with pytest.raises(WorkerFailed, match=r"no answer from the switch at 10\.0\.0\.254 for 3 s"):
        follow(workers, lambda w, e: None, stall_timeout=60, start_timeout=120)
    stop_workers(workers, star.ledger)
    assert all(w.process.poll() is not None for w in workers)
