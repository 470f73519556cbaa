"""Testbed.run_workers removes each run's job when the run ends, so that runs with windows of 256 slots
do not fill the switch's 1024 slots (no Mininet: the network, workers and control plane are stand-ins)."""

import json

import pytest

from contract.job import JobSpec
from contract.ticket import Ticket
from tests.support.testbed_standins import Control, bed_with, run_workers, stand_in_workers
from topologies import testbed as testbed_module
from topologies.workers import WorkerOptions


@pytest.mark.parametrize("fails", [False, True])
def test_the_job_is_removed_after_its_run(monkeypatch, tmp_path, fails):
    stand_in_workers(monkeypatch, fails)
    control = Control()
    options = WorkerOptions(mode="thc", steps=1, spec=JobSpec(job_id=5, workers=8, window=64))
    run_workers(bed_with(control, tmp_path), options, fails)
    assert control.calls == [("start", 5, 3, 64), ("end", 5)]  # n follows the topology's three workers
    ticket = json.loads((tmp_path / "thc" / "job.json").read_text())  # what the workers are started with
    described, grant = ticket["job"], ticket["grant"]
    assert (described["job_id"], described["workers"], described["window"]) == (5, 3, 64)
    assert (grant["key"], grant["epoch"], grant["slot_base"], grant["n_slots"]) == (0xBEEF, 7, 0, 256)
    assert Ticket.load(tmp_path / "thc" / "job.json").spec.key == 0xBEEF


def test_gloo_runs_add_and_remove_no_job(monkeypatch, tmp_path):
    stand_in_workers(monkeypatch)
    control = Control()
    bed_with(control, tmp_path).run_workers(WorkerOptions(mode="gloo", steps=1))
    assert control.calls == []


@pytest.mark.parametrize("mode", ["thc", "gloo"])
def test_ctrl_c_while_waiting_for_the_workers_stops_them_and_reaches_the_caller(monkeypatch, tmp_path, mode):
    """A KeyboardInterrupt in the wait for the workers is not taken for a worker failure or swallowed: the
    workers are stopped, the job removed, and the interrupt goes on to the caller (a bench's Ctrl-C)."""
    events = []

    def follow(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(testbed_module, "start_workers", lambda *args: ["worker"])
    monkeypatch.setattr(testbed_module, "follow", follow)
    monkeypatch.setattr(testbed_module, "stop_workers", lambda workers, ledger: events.append(("stop", workers)))
    control = Control()
    with pytest.raises(KeyboardInterrupt):
        bed_with(control, tmp_path).run_workers(WorkerOptions(mode=mode, steps=1, spec=JobSpec(job_id=5, workers=3)))
    assert events == [("stop", ["worker"])]
    assert control.calls == ([("start", 5, 3, 256), ("end", 5)] if mode == "thc" else [])
