"""Stand-ins for a Testbed's network and control plane, so its run logic (jobs added and removed, files
written, failures) is tested without Mininet or a switch."""

from types import SimpleNamespace

from topologies import testbed as testbed_module


class Control:
    def __init__(self):
        self.calls = []

    def add_job(self, spec, hosts=None):
        self.calls.append(("start", spec.job_id, spec.workers, spec.window))
        return SimpleNamespace(key=0xBEEF, epoch=7)

    def end_job(self, job_id):
        self.calls.append(("end", job_id))

    def stats(self):
        return {}


def bed_with(control, log_dir, topo=None) -> testbed_module.Testbed:
    """A Testbed on a stand-in network (no Mininet) with ``control`` as its control plane."""
    net = SimpleNamespace(check_switches=lambda: None, switch_log_level="info", switch_backend="auto")
    topo = topo or SimpleNamespace(workers=["h1", "h2", "h3"], aggregation=SimpleNamespace(switch="s1"))
    bed = testbed_module.Testbed(topo, log_dir, say=lambda message: None, net=net)
    bed.control = control
    return bed
