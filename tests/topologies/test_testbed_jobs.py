"""Testbed.run_workers removes each run's job when the run ends, so that runs with windows of 256 slots
do not fill the switch's 1024 slots (no Mininet: the network, workers and control plane are stand-ins)."""

import json
from types import SimpleNamespace

import pytest

from spec.job import JobSpec
from topologies import testbed as testbed_module
from topologies.workers import WorkerOptions


class Control:
    def __init__(self):
        self.calls = []

    def add_job(self, spec, hosts=None):
        self.calls.append(("start", spec.job_id, spec.workers, spec.window))
        return SimpleNamespace(key=0xBEEF)

    def end_job(self, job_id):
        self.calls.append(("end", job_id))

    def stats(self):
        return {}


def bed_with(control, log_dir=None) -> testbed_module.Testbed:
    bed = object.__new__(testbed_module.Testbed)
    bed.control, bed.ledger, bed.log_dir = control, None, log_dir
    bed.net = type("Net", (), {"check_switches": lambda self: None})()
    bed.topo = SimpleNamespace(workers=["h1", "h2", "h3"], aggregation=SimpleNamespace(switch="s1"))
    bed.say, bed.last_switch_events = lambda message: None, {}
    return bed


@pytest.mark.parametrize("fails", [False, True])
def test_the_job_is_removed_after_its_run(monkeypatch, tmp_path, fails):
    def follow(*args, **kwargs):
        if fails:
            raise RuntimeError("worker failed")

    monkeypatch.setattr(testbed_module, "start_workers", lambda *args: [])
    monkeypatch.setattr(testbed_module, "follow", follow)
    monkeypatch.setattr(testbed_module, "stop_workers", lambda *args: None)
    monkeypatch.setattr(testbed_module, "load_results", lambda workers: [])
    control = Control()
    bed = bed_with(control, tmp_path)
    options = WorkerOptions(mode="thc", steps=1, job=JobSpec(job_id=5, workers=8, window=64))
    if fails:
        with pytest.raises(RuntimeError):
            bed.run_workers(options)
    else:
        bed.run_workers(options)
    assert control.calls == [("start", 5, 3, 64), ("end", 5)]  # n follows the topology's three workers
    described = json.loads((tmp_path / "thc" / "job.json").read_text())  # what the workers are started with
    assert (described["job_id"], described["workers"], described["window"], described["key"]) == (5, 3, 64, 0xBEEF)


def test_gloo_runs_add_and_remove_no_job(monkeypatch):
    monkeypatch.setattr(testbed_module, "start_workers", lambda *args: [])
    monkeypatch.setattr(testbed_module, "follow", lambda *args, **kwargs: None)
    monkeypatch.setattr(testbed_module, "stop_workers", lambda *args: None)
    monkeypatch.setattr(testbed_module, "load_results", lambda workers: [])
    control = Control()
    bed_with(control).run_workers(WorkerOptions(mode="gloo", steps=1))
    assert control.calls == []
