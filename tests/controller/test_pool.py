"""The shared pool from the controller (controller/pool.py): placement and accounting under random arrivals
and departures (pure planning), and `thc-ctl job add --pool` and `thc-ctl pool` on a software switch
serving P4Runtime, with packets making the pool's cells be claimed, freed and fall back."""

import json
import random
import re

import numpy as np
import pytest

import contract
from contract.job import JobSpec
from controller import jobs
from controller import pool as pools
from controller.errors import JobRefused
from controller.session import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, SwitchSession
from harness import frames as tp
from tests.controller import test_switch
from tests.support.thc_ctl import cli

# test_switch's fixtures: a software switch serving P4Runtime, the program pushed and forwarding installed
switch, programmed = test_switch.switch, test_switch.programmed

pytestmark = pytest.mark.skipif(
    not (DEFAULT_BMV2_JSON.exists() and DEFAULT_P4INFO.exists()), reason="p4/build/thc.json is not built"
)


def workers(n: int) -> list[jobs.JobWorker]:
    return [jobs.JobWorker(w, f"08:00:00:00:00:{w + 1:02x}", f"10.0.0.{w + 1}", w + 1) for w in range(n)]


def check_invariants(installed: dict[int, jobs.Job]) -> None:
    static = [j for j in installed.values() if j.pool is None]
    pooled = [j for j in installed.values() if j.pool is not None]
    cells_of = {j.job_id: set(range(2 * j.slot_base, 2 * (j.slot_base + j.n_slots))) for j in static}
    for a in static:
        assert 0 <= a.slot_base and a.slot_base + a.n_slots <= contract.SLOTS
        for b in static:
            assert a.job_id == b.job_id or not cells_of[a.job_id] & cells_of[b.job_id]
    assert len({j.pool[:2] for j in pooled}) <= 1  # one pool per switch
    if pooled:
        base, cells, _ = pooled[0].pool
        pool_cells = set(range(base, base + cells))
        assert cells & (cells - 1) == 0 and base + cells <= contract.CELLS
        assert all(not pool_cells & c for c in cells_of.values())  # no static job's cell is the pool's
    for a in pooled:
        assert contract.SLOTS <= a.slot_base and a.slot_base + a.n_slots <= contract.BOOK_SLOTS
        assert 0 <= a.pool[2] < max(a.pool[1], 1)
        for b in pooled:
            overlap = a.slot_base < b.slot_base + b.n_slots and b.slot_base < a.slot_base + a.n_slots
            assert a.job_id == b.job_id or not overlap
    epochs = [j.epoch for j in installed.values()]
    assert len(set(epochs)) == len(epochs)


@pytest.mark.parametrize("seed", range(6))
def test_random_arrivals_and_departures_keep_the_pool_and_the_static_slots_apart(seed):
    rng = random.Random(seed)
    installed: dict[int, jobs.Job] = {}
    last_epoch = 0
    admitted_pool = refused_static = 0
    for _ in range(60):
        job_id = rng.randrange(12)
        if job_id in installed and rng.random() < 0.4:
            del installed[job_id]  # departure
            continue
        spec = JobSpec(job_id=job_id, workers=2, window=rng.choice([16, 64, 256]))
        pool = rng.random() < 0.5
        try:
            job = jobs.plan_job(
                spec, workers(2), list(installed.values()), last_epoch=last_epoch, rng=rng, pool=pool,
                pool_cells=rng.choice([None, 0, 64, 256]),
            )  # fmt: skip
        except JobRefused as exc:
            assert not pool or "bookkeeping slots" in str(exc) or "does not fit" in str(exc), exc
            refused_static += not pool
            continue
        admitted_pool += pool
        last_epoch = job.epoch
        installed[job_id] = job
        check_invariants(installed)
        if pool:
            assert re.fullmatch(rf"job {job_id}: (pool of \d+ cells .*|the pool has no cells .*)",
                                pools.fallback_note(job, list(installed.values())))  # fmt: skip
    assert admitted_pool > 0


def test_a_pool_job_is_admitted_when_static_jobs_hold_every_cell():
    full = [
        jobs.plan_job(JobSpec(job_id=i, workers=2, window=256), workers(2), [], slot_base=256 * i, epoch=i + 1)
        for i in range(4)
    ]
    with pytest.raises(JobRefused, match="no free range of 256 slots"):
        jobs.plan_job(JobSpec(job_id=9, workers=2, window=256), workers(2), full, last_epoch=4)
    job = jobs.plan_job(JobSpec(job_id=9, workers=2, window=256), workers(2), full, last_epoch=4, pool=True)
    assert job.pool == (contract.CELLS, 0, 0) and job.slot_base == contract.SLOTS
    assert "every use falls back" in pools.fallback_note(job, full)


def test_rings_are_placed_apart_while_the_pool_has_room():
    installed = []
    for i in range(3):
        spec = JobSpec(job_id=i, workers=2, window=16, slots=16)
        installed.append(
            jobs.plan_job(spec, workers(2), installed, last_epoch=i, pool=True, pool_cells=128 if i == 0 else None)
        )
    assert [j.pool for j in installed] == [(1920, 128, 0), (1920, 128, 64), (1920, 128, 0)]  # the third overlaps
    assert [j.slot_base for j in installed] == [1024, 1040, 1056]


def send_round(engine, topo, job: dict, slot: int, rnd: int, hosts=("h1", "h2")):
    service = ("02:00:00:00:00:fe", "10.0.0.254")
    rng = np.random.default_rng(slot * 100 + rnd)
    out = []
    for worker_id, host in enumerate(hosts):
        h = topo["hosts"][host]
        frame = tp.frame(
            (h["mac"], h["ip"].split("/")[0]), service, op=contract.OP_THC, job_id=job["job_id"], worker_id=worker_id,
            slot=slot, round_=rnd, lane_bits=8, key=job["key"],
            payload=tp.pack_indices(rng.integers(0, 16, contract.per_request(8))),
        )  # fmt: skip
        out += engine.process(worker_id + 1, frame)
    return [tp.Parsed.of(f).kind for _, f in out]


def test_thc_ctl_admits_pool_jobs_with_their_fallback_and_shows_the_pool(programmed):
    topo = json.loads(programmed.topo.read_text())
    engine = programmed.device.engine
    added = {}
    for job_id in (3, 4):
        status, out, err = cli(
            "job", "add", "--topology", programmed.topo, "--id", job_id, "--workers", "h1,h2", "--window", 4,
            "--slots", 4, "--pool", "--pool-cells", 4,
        )  # fmt: skip
        assert status == 0, err
        lines = out.strip().splitlines()
        assert len(lines) == 2 and "a use whose cell is taken falls back" in lines[1], out
        status, out, _ = cli("job", "list", "--topology", programmed.topo, "--json")
        added[job_id] = next(j for j in json.loads(out) if j["job_id"] == job_id)
    assert added[3]["pool"] == [2044, 4, 0] and added[4]["pool"] == [2044, 4, 0]  # a pool of 4: the rings overlap
    assert "cells from the pool (ring from cell 2044)" in cli("job", "list", "--topology", programmed.topo)[1]
    assert send_round(engine, topo, added[3], 0, 0) == [contract.KIND_RESULT] * 2  # job 3 claims cell 2044
    assert send_round(engine, topo, added[4], 0, 0) == [contract.KIND_FALLBACK] * 2  # job 4 finds it taken
    assert send_round(engine, topo, added[4], 1, 0) == [contract.KIND_RESULT] * 2  # cell 2045 was free
    # job 3's next use of slot 0's bookkeeping cell (round 2) frees round 0's cell and claims it again
    assert send_round(engine, topo, added[3], 0, 2) == [contract.KIND_RESULT] * 2
    status, out, err = cli("pool", "--topology", programmed.topo, "--json")
    assert status == 0, err
    shown = json.loads(out)
    assert shown["pool"] == {"base": 2044, "cells": 4, "held": 2}
    by_job = {j["job"]: j for j in shown["jobs"]}
    assert (by_job[3]["claimed"], by_job[3]["freed"], by_job[3]["fallbacks"]) == (2, 1, 0)
    assert (by_job[4]["cells_held"], by_job[4]["fallbacks"], by_job[4]["fallback_answers"]) == (1, 1, 1)
    status, out, _ = cli("pool", "--topology", programmed.topo)
    assert "job 4: epoch" in out and "1 rounds fell back" in out
    # job 3 leaves: its cells are free for job 4's next use that reaches one
    assert cli("job", "remove", "--topology", programmed.topo, "--id", 3)[0] == 0
    with SwitchSession(programmed.addr, name="s1") as s:
        assert [j.job_id for j in s.list_jobs()] == [4]
        live = s.show()["tables"][contract.POOL_LIVE]
        assert [e["match"]["meta.owner_epoch"] for e in live] == [added[4]["epoch"]]
    assert send_round(engine, topo, added[4], 0, 2) == [contract.KIND_RESULT] * 2
    assert cli("job", "remove", "--topology", programmed.topo, "--id", 4)[0] == 0
    assert cli("pool", "--topology", programmed.topo)[1].strip().endswith("no pool jobs (thc-ctl job add --pool)")


def test_pool_cells_without_pool_is_a_one_line_error(programmed):
    status, _, err = cli(
        "job", "add", "--topology", programmed.topo, "--id", 5, "--workers", "h1,h2", "--pool-cells", 8
    )  # fmt: skip
    assert status != 0 and "needs --pool" in err and len(err.strip().splitlines()) == 1


def test_a_fallback_server_takes_any_later_round_of_its_job_until_the_job_ends(programmed):
    """SwitchSession.serve_fallback (what thc-run --trace installs on its fallback server): the job with the
    switch's key and its fallback_rounds entry, so a slot's first use there may be any round (the server sees
    only the uses that fell back); a plain job drops it (FAR_ROUND). end_fallback removes both."""
    topo = json.loads(programmed.topo.read_text())
    engine = programmed.device.engine
    plain, served = (JobSpec(job_id=j, workers=2, window=4, slots=4, key=0xABCD + j) for j in (7, 6))
    with SwitchSession(programmed.addr, name="s1") as s:
        s.add_job_workers(plain, workers(2), service_ip="10.0.0.254")
        s.serve_fallback(served, workers(2), "10.0.0.254")
        assert [e["match"]["hdr.thc.job_id"] for e in s.show()["tables"][contract.FALLBACK_ROUNDS]] == [6]
        assert {j.job_id: j.key for j in s.list_jobs()}[6] == served.key
        assert send_round(engine, topo, {"job_id": 7, "key": plain.key}, 0, 2) == []
        assert send_round(engine, topo, {"job_id": 6, "key": served.key}, 0, 2) == [contract.KIND_RESULT] * 2
        s.end_fallback(6)
        s.end_fallback(6)  # already gone: nothing to do
        s.remove_job(7)
        assert s.show()["tables"][contract.FALLBACK_ROUNDS] == [] and [j.job_id for j in s.list_jobs()] == []
