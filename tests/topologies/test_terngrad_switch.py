"""thc-run's terngrad-switch mode: a switch mode whose job is TernGrad's codec on the run's framing
(host_agent.worker.mode_job), installed on the switch from that description and handed to its workers,
so the switch sums the table the workers decode with; the run's parts options reach the thc mode's job."""

import json
from pathlib import Path

from contract.job import JobSpec
from contract.ticket import Ticket
from controller.topology import Topology
from tests.support.testbed_standins import Control, bed_with, stand_in_workers
from tests.topologies.test_runner_cli import as_user  # noqa: F401 - the fixture
from thc.config import THCConfig
from topologies import runner
from topologies.workers import WorkerOptions, worker_command

REPO = Path(__file__).resolve().parents[2]


def test_the_mode_is_one_of_the_runs_modes():
    assert runner.parse_modes("thc,terngrad-switch,terngrad") == ["thc", "terngrad-switch", "terngrad"]


def test_the_parts_options_get_as_far_as_the_root_check(as_user, capsys):  # noqa: F811
    argv = ["--modes", "thc,terngrad-switch", "--no-transform", "--error-feedback", "--table", "uniform"]
    assert runner.main([*argv, "--steps", "1", "--log-dir", str(as_user / "logs")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs root" in err


def test_the_job_each_mode_runs():
    spec = JobSpec(job_id=4, workers=8, codec=THCConfig(error_feedback=True), window=64)
    topo = type("Topo", (), {"workers": ["h1", "h2", "h3"]})()
    assert WorkerOptions(mode="thc", steps=1, spec=spec).spec_for(topo) == spec.replace(workers=3)
    tern = WorkerOptions(mode="terngrad-switch", steps=1, spec=spec).spec_for(topo)
    terngrad = dict(quantizer="terngrad", bits=2, granularity=2, table="uniform", transform=False)
    assert tern == spec.replace(workers=3, **terngrad)  # the run's framing and error feedback stay


def test_a_terngrad_switch_run_installs_the_three_level_job_its_workers_get(monkeypatch, tmp_path):
    stand_in_workers(monkeypatch)
    installed = []

    class Recording(Control):
        def add_job(self, spec, hosts=None):
            installed.append(spec)
            return super().add_job(spec, hosts)

    options = WorkerOptions(mode="terngrad-switch", steps=1, spec=JobSpec(job_id=5, workers=3))
    bed_with(Recording(), tmp_path).run_workers(options)
    assert installed[0].codec.quantizer == "terngrad" and installed[0].table_values() == [0, 1, 1, 2]
    given = Ticket.load(tmp_path / "terngrad-switch" / "job.json")
    assert given.spec == installed[0].replace(key=0xBEEF)  # the workers' description is the switch's, key included
    assert json.loads((tmp_path / "terngrad-switch" / "job.json").read_text())["job"]["quantizer"] == "terngrad"


def test_its_workers_are_started_as_switch_workers_with_the_description(tmp_path):
    topo = Topology.load(REPO / runner.DEFAULT_TOPO)
    options = WorkerOptions(mode="terngrad-switch", steps=1, job_file=tmp_path / "job.json")
    argv = worker_command(topo, topo.workers[0], options, tmp_path / "h1.json")
    assert argv[argv.index("--mode") + 1] == "terngrad-switch"
    assert argv[argv.index("--job") + 1] == str(tmp_path / "job.json") and "--service-ip" in argv
