"""Stand-ins for a Testbed's network and control plane, so its run logic (jobs added and removed, files
written, failures) is tested without Mininet or a switch."""

from types import SimpleNamespace

import pytest

from topologies import testbed as testbed_module


class Control:
    def __init__(self):
        self.calls = []

    def add_job(self, spec, hosts=None):
        self.calls.append(("start", spec.job_id, spec.workers, spec.window))
        return SimpleNamespace(key=0xBEEF, epoch=7, slot_base=0, n_slots=spec.slots)  # a controller Job's grant

    def end_job(self, job_id):
        self.calls.append(("end", job_id))

    def stats(self):
        return {}


def stand_in_workers(monkeypatch, fails: bool = False) -> None:
    """The Testbed's worker processes as stand-ins that finish at once (or, when `fails`, whose following
    raises a worker's failure), with nothing to stop or load."""

    def follow(*args, **kwargs):
        if fails:
            raise RuntimeError("worker failed")

    monkeypatch.setattr(testbed_module, "start_workers", lambda *args: [])
    monkeypatch.setattr(testbed_module, "follow", follow)
    monkeypatch.setattr(testbed_module, "stop_workers", lambda *args: None)
    monkeypatch.setattr(testbed_module, "load_results", lambda workers: [])


def run_workers(bed, options, fails: bool) -> None:
    """bed.run_workers(options), which must raise the stand-in workers' failure when they fail."""
    if fails:
        with pytest.raises(RuntimeError):
            bed.run_workers(options)
    else:
        bed.run_workers(options)


def bed_with(control, log_dir, topo=None) -> testbed_module.Testbed:
    """A Testbed on a stand-in network (no Mininet) with ``control`` as its control plane."""
    net = SimpleNamespace(check_switches=lambda: None, switch_log_level="info", switch_backend="auto")
    topo = topo or SimpleNamespace(workers=["h1", "h2", "h3"], aggregation=SimpleNamespace(switch="s1"))
    bed = testbed_module.Testbed(topo, log_dir, say=lambda message: None, net=net)
    bed.control = control
    return bed
