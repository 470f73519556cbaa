"""The ps modes' plumbing without Mininet: thc-run's mode names and placements, the workers' command line,
the job on every server and the files the workers start from, the busiest link from interface counters,
and the summary's lines."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from contract.job import JobSpec
from controller.topology import Topology
from host_agent import worker
from host_agent.sharded import Server, load_servers
from tests.support import paths
from tests.support.testbed_standins import bed_with, run_workers, stand_in_workers
from topologies import interrupts, link_bytes, report, runner
from topologies import testbed as testbed_module
from topologies.workers import WorkerOptions, worker_command

STAR_PS = str(paths.TOPOLOGIES / "star4_ps.json")


@pytest.fixture
def as_user(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(interrupts, "install", lambda: None)
    return tmp_path


@pytest.mark.parametrize(
    "topo, modes, status, words",
    [  # the topology's faults are found once it is read (1); the option's own, where it is parsed (2)
        (STAR_PS, "thc,thc-ps:nowhere", 1, "no placement 'nowhere' (it has dedicated1, dedicated4, colocated4)"),
        ("topologies/star4.json", "thc-ps", 1, "has no parameter servers"),
        (STAR_PS, "gloo:colocated4", 2, "argument --modes: 'gloo:colocated4': unknown 'gloo:colocated4'"),
        (STAR_PS, "thc-ps,thc-ps", 2, "argument --modes: 'thc-ps,thc-ps': a name empty or twice"),
    ],
)
def test_a_ps_mode_the_topology_cannot_run_is_refused_before_root(as_user, capsys, topo, modes, status, words):
    assert runner.main(["--topo", topo, "--modes", modes, "--log-dir", str(as_user / "logs")]) == status
    err = capsys.readouterr().err.strip()
    assert err.startswith("thc-run: error: ") and words in err and "\n" not in err


def test_ps_modes_with_their_placements_get_as_far_as_the_root_check(as_user, capsys):
    modes = "thc,thc-ps:dedicated1,thc-ps:colocated4,fix32-ps,fix32,gloo"
    assert runner.main(["--topo", STAR_PS, "--modes", modes, "--log-dir", str(as_user / "logs"), "--no-pcap"]) == 1
    assert "needs root" in capsys.readouterr().err


def test_without_a_topology_a_ps_mode_runs_on_star4_ps(as_user, capsys):
    assert runner.main(["--modes", "thc,thc-ps,fix32,gloo", "--log-dir", str(as_user / "logs"), "--no-pcap"]) == 1
    assert "needs root" in capsys.readouterr().err  # star4.json would have no servers to run thc-ps on


def test_a_ps_worker_is_started_with_its_servers_not_a_service_address(tmp_path):
    topo = Topology.load(STAR_PS)
    options = WorkerOptions(
        mode="thc-ps:colocated4", steps=5, job_file=tmp_path / "job.json", servers_file=tmp_path / "servers.json"
    )
    argv = worker_command(topo, "h2", options, tmp_path / "h2.json")
    at = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
    assert (at["--mode"], at["--servers"], at["--job"], at["--src-ip"]) == (
        "thc-ps",
        str(tmp_path / "servers.json"),
        str(tmp_path / "job.json"),
        "10.0.0.2",
    )
    assert "--service-ip" not in at and "--membership" not in at
    assert (options.worker_mode, options.placement) == ("thc-ps", "colocated4")
    assert WorkerOptions(mode="fix32-ps", steps=1).placement is None  # the topology's first


class Servers:
    """A stand-in ServerSet: records its life and gives each server's job a key."""

    log: list = []

    def __init__(self, net, topo, placement, ledger, log_dir, level, backend, say):
        self.placement = topo.placement(placement)

    def __enter__(self):
        self.log.append("start")
        return self

    def __exit__(self, *exc):
        self.log.append("stop")

    def add_job(self, spec):
        self.log.append(("job", spec.job_id, spec.workers))
        return [Server(s.name, str(s.service_ip), s.service_mac, 100 + i) for i, s in enumerate(self.placement)]

    def stats(self):
        return {}

    def check(self):
        pass


@pytest.mark.parametrize("fails", [False, True])
def test_a_ps_run_installs_the_job_on_every_server_and_stops_them_after(monkeypatch, tmp_path, fails):
    monkeypatch.setattr(testbed_module, "ServerSet", Servers)
    stand_in_workers(monkeypatch, fails)
    control = SimpleNamespace(stats=lambda: {}, add_job=None)  # the switch gets no job in a ps mode
    bed = bed_with(control, tmp_path, Topology.load(STAR_PS))
    Servers.log = []
    options = WorkerOptions(mode="thc-ps:colocated4", steps=1, spec=JobSpec(job_id=5, workers=4, window=64))
    run_workers(bed, options, fails)
    assert Servers.log == ["start", ("job", 5, 4), "stop"]
    mode_dir = tmp_path / "thc-ps:colocated4"
    assert JobSpec.load(mode_dir / "job.json") == JobSpec(job_id=5, workers=4, window=64)
    servers = load_servers(mode_dir / "servers.json")
    assert [(s.service_ip, s.key) for s in servers] == [(f"10.0.0.21{i + 1}", 100 + i) for i in range(4)]


def write_counters(root: Path, counts: dict[str, tuple[int, int]]) -> None:
    for iface, (rx, tx) in counts.items():
        (root / iface / "statistics").mkdir(parents=True, exist_ok=True)
        (root / iface / "statistics" / "rx_bytes").write_text(f"{rx}\n")
        (root / iface / "statistics" / "tx_bytes").write_text(f"{tx}\n")


def test_the_busiest_link_is_the_direction_that_moved_most(tmp_path):
    topo = Topology.load(STAR_PS)
    names = {f"s1-eth{p}": (0, 0) for p in (1, 2, 3, 4, 33, 34, 35, 36)}
    write_counters(tmp_path, names)
    before = link_bytes.snapshot(topo, tmp_path)
    write_counters(tmp_path, names | {"s1-eth1": (500, 800), "s1-eth33": (4_000, 1_000)})
    busiest = link_bytes.busiest(before, link_bytes.snapshot(topo, tmp_path), steps=10)
    assert busiest == link_bytes.Busiest("p1-s1", "from p1", 400.0)  # the switch received 4,000 from p1


def row(mode, tta, busiest=None, metric_final=0.96) -> report.ModeSummary:
    r = report.ModeSummary(mode, 4, 100, 1000, metric_final, 0.95, tta, 10.0, 50.0, 40.0, 1.0, 1.0, 1.0, 0, {})
    if busiest is not None:
        r.busiest_link, r.busiest_link_bytes_per_step = busiest
    return r


def test_the_summary_compares_each_ps_mode_with_the_switch():
    rows = [
        row("thc", 10.0, ("h1-s1 to h1", 1000.0)),
        row("thc-ps:dedicated1", 25.0, ("p1-s1 from p1", 4000.0)),
        row("fix32-ps:colocated4", None),
    ]
    lines = report.ps_lines(rows)
    assert lines[0] == (
        "THC via PS (dedicated1) reached 95% accuracy in 25.0 s (final 0.960); THC via switch was 2.50x sooner; "
        "busiest link 4,000 B/step (p1-s1 from p1) against 1,000 (h1-s1 to h1)"
    )
    assert lines[1] == "FIX32 via PS (colocated4) missed 95% accuracy (final 0.960)"
    assert "THC via PS (dedicated1)" in report.table(rows) and "4,000" in report.table(rows)
    assert report.speedups(rows)["thc-ps:dedicated1"]["speedup_vs_thc"] == 0.4


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--mode", "thc-ps"], "--mode thc-ps needs --servers"),
        (["--mode", "thc", "--service-ip", "10.0.0.254", "--servers", "s.json"], "--servers is for --mode thc-ps"),
    ],
)
def test_a_worker_refuses_servers_its_mode_does_not_use(capsys, tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text("[]")  # there (a missing --servers file is refused as it is read)
    common = "--iface lo --src-ip 127.0.0.1 --src-mac 02:00:00:00:00:01 --service-mac 02:00:00:00:00:fe".split()
    rank = ["--rank", "1", "--world-size", "4", "--master-addr", "10.0.0.1"]
    assert worker.main([*common, *rank, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("thc-worker: ") and says in err and "\n" not in err


def test_the_servers_file_is_checked_when_read(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps([{"name": "x"}]))
    with pytest.raises(ValueError, match="not a list of servers"):
        load_servers(tmp_path / "bad.json")
