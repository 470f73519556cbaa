"""thc-run --trace's loop (topologies/trace_run.py) on a stand-in testbed, without Mininet: each job is
programmed when it starts (static, or pool with its fallback server) and removed when its workers are done,
a job the switch refuses waits for one to leave, the switch's cells are sampled, and a failed job stops the
others. The workers are stand-ins that finish `steps` seconds after they start on a virtual clock."""

import dataclasses
import threading
import time
from types import SimpleNamespace

import pytest

import contract
from contract.job import JobSpec
from contract.ticket import Grant, Ticket
from controller.errors import JobRefused
from controller.pool import Pool, PoolUse
from controller.topology import Topology
from tests.support.paths import REPO
from topologies import report
from topologies import trace_run as trace_run_module
from topologies.job_trace import TraceJob
from topologies.trace_run import TraceRun
from topologies.trace_schedule import Schedule
from topologies.workers import WorkerFailed, WorkerOptions

SLOTS = 512  # a static job's slots: two of them fill the switch's 1024


class Clock:
    """Virtual seconds; the loop's sleep moves them on (and lets the workers' threads look)."""

    def __init__(self):
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            return self.now

    def sleep(self, seconds):
        with self.lock:
            self.now += seconds
        time.sleep(0.002)


class Switch:
    """The aggregating switch's session: installed jobs, and a pool that counts each job's fallbacks."""

    def __init__(self, pool: bool):
        self.pool, self.jobs = pool, {}

    def installed_jobs(self):
        return [SimpleNamespace(job_id=j, n_slots=n) for j, n in self.jobs.items()]

    def pool_usage(self):
        if not self.jobs:
            return None, []
        return Pool(contract.CELLS - 256, 256), [PoolUse(j, 1, 10 * j + 4, 10 * j, j, j) for j in self.jobs]


class Bed:
    def __init__(self, tmp_path, pool: bool):
        self.topo = Topology.load(REPO / "topologies" / "star4.json").with_workers(6)
        self.log_dir, self.ledger = tmp_path, "ledger"
        self.net = SimpleNamespace(check_switches=lambda: None)
        self.control = SimpleNamespace(aggregator=Switch(pool))
        self.calls = []

    def start_job(self, options, job_topo, run_dir, **placement):
        switch = self.control.aggregator
        if not placement and sum(switch.jobs.values()) + options.spec.slots > contract.SLOTS:
            raise JobRefused(f"no free range of {options.spec.slots} slots")
        switch.jobs[options.spec.job_id] = options.spec.slots
        self.calls.append(("add", options.spec.job_id, job_topo.workers, placement))
        return dataclasses.replace(options, spec=options.spec.replace(key=0xBEEF))

    def end_job(self, options, job_ids):
        for job_id in job_ids:
            self.control.aggregator.jobs.pop(job_id, None)
            self.calls.append(("remove", job_id))


class Servers:
    fallback_address = "10.0.0.201,02:00:00:00:02:01"

    def __init__(self, calls):
        self.calls = calls

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.calls.append(("servers stopped",))

    def add_fallback_job(self, spec, job_topo):
        self.calls.append(("serve", spec.job_id, spec.key, job_topo.workers))

    def end_fallback_job(self, job_id):
        self.calls.append(("unserve", job_id))

    def check(self):
        pass


@pytest.fixture
def workers(monkeypatch):
    """Stand-in workers: `follow` returns once the clock is `steps` seconds past their start (raises for a
    job named 'fails'); what they were started with is kept."""
    started, stopped = [], []

    def start_workers(net, topo, options, ledger, run_dir):
        started.append((options, run_dir))
        return [SimpleNamespace(options=options, since=clock())]

    def follow(ws, on_event, **timeouts):
        (w,) = ws
        while clock() < w.since + w.options.steps:
            time.sleep(0.0005)
        if w.options.spec.job_id == 1 and w.options.mode == "fix32":  # the job made to fail
            raise WorkerFailed("worker h1 (rank 0): exited with code 1")

    clock = Clock()
    monkeypatch.setattr(trace_run_module, "start_workers", start_workers)
    monkeypatch.setattr(trace_run_module, "follow", follow)
    monkeypatch.setattr(
        trace_run_module, "load_results", lambda ws: [{"parameter_sha256": "one model", "setup_s": 2.5} for _ in ws]
    )
    monkeypatch.setattr(trace_run_module, "stop_workers", lambda ws, ledger: stopped.append(ws))
    row = SimpleNamespace(train_s=1.0, metric="accuracy", target=0.9, time_to_target_s=None, final_metric=0.5)
    monkeypatch.setattr(report, "summarize", lambda mode, results, target: row)
    return SimpleNamespace(clock=clock, started=started, stopped=stopped)


def trace(mode="thc"):
    return [TraceJob(name, start, "mlp-digits", 2, mode, steps=3, compute=c) for name, start, c in
            [("a", 0.0, 0.0), ("b", 0.0, 0.25), ("c", 1.0, 0.0)]]  # fmt: skip


def run(bed, workers, policy, jobs, servers=None):
    base = WorkerOptions(mode="thc", steps=1, seed=3)
    spec = JobSpec(job_id=1, workers=2, slots=SLOTS)
    schedule = Schedule(jobs, list(bed.topo.workers))
    return TraceRun(
        bed, schedule, policy, base, spec, servers, pool_cells=256 if policy == "pool" else None,
        say=lambda line: None, clock=workers.clock, sleep=workers.clock.sleep,
    )  # fmt: skip


def test_static_a_job_the_switch_cannot_hold_waits_for_one_to_leave(tmp_path, workers):
    bed = Bed(tmp_path, pool=False)
    summary = run(bed, workers, "static", trace()).run()
    a, b, c = summary["jobs"]
    assert c["refusals"] == [f"no free range of {SLOTS} slots"]
    assert c["started_s"] >= min(a["finished_s"], b["finished_s"]) and c["wait_s"] > 0
    assert bed.calls[:2] == [("add", 1, ("h1", "h2"), {}), ("add", 2, ("h3", "h4"), {})]
    (c_add,) = [call for call in bed.calls[2:] if call[0] == "add"]  # on the hosts of the job that left first
    assert c_add in [("add", 3, ("h1", "h2"), {}), ("add", 3, ("h3", "h4"), {})]
    assert sorted(call for call in bed.calls if call[0] == "remove") == [("remove", 1), ("remove", 2), ("remove", 3)]
    assert bed.control.aggregator.jobs == {}
    assert all(r["completion_s"] >= 3 and r["uses"] is None and r["fallbacks"] == 0 for r in summary["jobs"])
    assert summary["cells"] == contract.CELLS and max(c for _, c in summary["occupancy"]) == 2 * 2 * SLOTS
    options = {o.spec.job_id: (o, run_dir) for o, run_dir in workers.started}
    b_options, b_dir = options[2]
    assert (b_options.master_port, b_options.spec.key, b_options.seed) == (29502, 0xBEEF, 3)
    assert b_options.stragglers == {"h3": 250.0, "h4": 250.0} and b_options.fallback_server is None
    assert b_dir == tmp_path / "trace" / "b"
    assert "static: mean completion" in trace_run_module.table(summary)
    assert (
        all(r["replicas_agree"] and r["setup_s"] == 2.5 for r in summary["jobs"]) and summary["replicas_differ"] == []
    )
    assert summary["all_reached"] is False  # the stand-in rows reach no target
    assert "every job reached its target: no, jobs whose workers' models differ: 0" in trace_run_module.table(summary)


def test_a_jobs_replicas_agree_when_every_worker_ends_with_one_digest():
    agree = trace_run_module.replicas_agree
    assert agree([{"parameter_sha256": "ab"}, {"parameter_sha256": "ab"}]) is True
    assert agree([{"parameter_sha256": "ab"}, {"parameter_sha256": "cd"}]) is False
    assert agree([{"parameter_sha256": "ab"}, {}]) is None and agree([]) is None  # a record without its digest


def test_pool_every_job_starts_at_once_with_its_fallback_server_and_its_fallbacks_counted(tmp_path, workers):
    bed = Bed(tmp_path, pool=True)
    summary = run(bed, workers, "pool", trace(), servers=lambda: Servers(bed.calls)).run()
    assert [r["wait_s"] <= 1 for r in summary["jobs"]] == [True] * 3
    adds = [c for c in bed.calls if c[0] == "add"]
    assert adds == [("add", i, hosts, {"pool": True, "pool_cells": 256})
                    for i, hosts in [(1, ("h1", "h2")), (2, ("h3", "h4")), (3, ("h5", "h6"))]]  # fmt: skip
    served = [c for c in bed.calls if c[0] == "serve"]
    assert served == [("serve", 1, 0xBEEF, ("h1", "h2")), ("serve", 2, 0xBEEF, ("h3", "h4")),
                      ("serve", 3, 0xBEEF, ("h5", "h6"))]  # fmt: skip
    assert sorted(c for c in bed.calls if c[0] == "unserve") == [("unserve", 1), ("unserve", 2), ("unserve", 3)]
    assert bed.calls[-1] == ("servers stopped",)
    assert [(r["fallbacks"], r["uses"]) for r in summary["jobs"]] == [(1, 15), (2, 26), (3, 37)]
    assert (summary["fallbacks"], summary["uses"], summary["cells"]) == (6, 78, 256)
    assert summary["fallback_share"] == 6 / 78
    assert all(o.fallback_server == Servers.fallback_address for o, _ in workers.started)


def test_a_failed_job_stops_the_others_and_removes_their_jobs(tmp_path, workers):
    bed = Bed(tmp_path, pool=False)
    jobs = [TraceJob("a", 0.0, "mlp-digits", 2, "fix32", steps=1), TraceJob("b", 0.0, "mlp-digits", 2, "thc", steps=9)]
    with pytest.raises(WorkerFailed, match="worker h1"):
        run(bed, workers, "static", jobs).run()
    assert len(workers.stopped) == 2  # both jobs' workers: the failed one's and the other's
    assert bed.control.aggregator.jobs == {}


def test_a_trace_job_is_programmed_on_its_own_hosts_as_workers_0_to_n_minus_1(tmp_path):
    """The programming path a trace job takes (Testbed.start_job -> ControlPlane.add_job) against a mock
    P4Runtime switch: the job on hosts h3, h4 has worker ids 0 and 1 (its workers' ranks) on ports 3 and 4,
    a pool job takes the pool's cells, and its ticket (job.json, with the key and the pool cells granted) is
    written in the job's own folder."""
    import random

    from controller.session import SwitchSession
    from tests.support.mock_switch import MockSwitch, contract_p4info
    from tests.support.thc_ctl import star4
    from topologies.control_plane import ControlPlane
    from topologies.testbed import Testbed
    from topologies.trace_run import job_topology

    mock = MockSwitch(contract_p4info(contract.WORDS))
    mock.start()
    try:
        topo = Topology.from_dict(star4(int(mock.addr.rsplit(":", 1)[1])))
        with SwitchSession(mock.addr, 0, (0, 1), name="s1", rng=random.Random(7)) as session:
            bed = Testbed(topo, tmp_path, say=lambda line: None, net=SimpleNamespace())
            bed.control = ControlPlane(topo, {"s1": session})
            job_topo = job_topology(topo, ["h3", "h4"])
            options = WorkerOptions(mode="thc", steps=1, spec=JobSpec(job_id=4, workers=2, window=8))
            started = bed.start_job(options, job_topo, tmp_path / "trace" / "b", pool=True, pool_cells=64)
            (job,) = session.list_jobs(topo)
            assert [(w.worker_id, w.port, w.host) for w in job.workers] == [(0, 3, "h3"), (1, 4, "h4")]
            assert job.pool[:2] == (contract.CELLS - 64, 64) and job.slot_base >= contract.SLOTS
            written = Ticket.load(tmp_path / "trace" / "b" / "thc" / "job.json")
            assert written.spec.key == job.key == started.spec.key and written.spec.workers == 2
            assert written.grant == Grant.of(job) and written.grant.pool == job.pool  # the pool job's cells
    finally:
        mock.stop()
