"""--codec (thc-run, bench_e2e): the workers' codec as one flag. 'numpy' starts every worker with THC_NATIVE=0
(the numpy reference and Python I/O), 'native' leaves the environment as the caller's; both CLIs parse it
alike and refuse anything else."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from controller.topology import Topology
from host_agent.worker import native_libraries
from topologies import run_cli, runner
from topologies.workers import CODECS, WorkerOptions, codec_environment, start_workers

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench import bench_e2e  # noqa: E402


def _environments(tmp_path, monkeypatch, events=None, caller="", **options) -> list[dict]:
    """The environment each worker of a star of 4 is started with; `events` gets "start" per worker and
    the name of each native build, in order. caller: THC_NATIVE in thc-run's own environment."""
    monkeypatch.setenv("THC_NATIVE", caller)  # the caller's setting, kept by 'native'
    seen, events = [], [] if events is None else events
    for native in native_libraries():
        monkeypatch.setattr(native, "build", lambda native=native: events.append(native.__name__))

    def popen(argv, **kwargs):
        seen.append(kwargs["env"])
        events.append("start")
        return SimpleNamespace(pid=0, stdout=None)

    net = SimpleNamespace(host=lambda name: SimpleNamespace(popen=popen))
    ledger = SimpleNamespace(add_process=lambda *args: None)
    topo = Topology.load(REPO / runner.DEFAULT_TOPO)
    workers = start_workers(net, topo, WorkerOptions(mode="thc", steps=1, **options), ledger, tmp_path)
    for w in workers:
        w.log.close()
    assert len(seen) == len(topo.workers)
    return seen


def test_numpy_starts_every_worker_with_the_native_path_off(tmp_path, monkeypatch):
    assert all(env["THC_NATIVE"] == "0" for env in _environments(tmp_path, monkeypatch, codec="numpy"))


def test_native_is_the_default_and_leaves_the_callers_setting(tmp_path, monkeypatch):
    assert all(env["THC_NATIVE"] == "" for env in _environments(tmp_path, monkeypatch))


def test_native_builds_the_workers_c_once_before_they_start(tmp_path, monkeypatch):
    """Four workers compiling at once would each spend seconds of set-up on the same two cores."""
    events = []
    _environments(tmp_path, monkeypatch, events)
    assert events == ["thc.native", "host_agent.native"] + ["start"] * 4


def test_numpy_builds_no_c(tmp_path, monkeypatch):
    events = []
    _environments(tmp_path, monkeypatch, events, codec="numpy")
    assert events == ["start"] * 4
    events.clear()  # native, but the caller turned the C off: the workers will not load it either
    _environments(tmp_path, monkeypatch, events, caller="0")
    assert events == ["start"] * 4


def test_an_unknown_codec_is_refused_by_name():
    with pytest.raises(ValueError, match="'c': expected one of native, numpy"):
        codec_environment("c")


@pytest.mark.parametrize("parse", [lambda argv: run_cli.build_parser().parse_args(argv), bench_e2e.parse_args])
def test_both_clis_take_the_flag_with_native_as_default(parse, capsys):
    assert parse([]).codec == "native"
    assert [parse(["--codec", c]).codec for c in CODECS] == list(CODECS)
    with pytest.raises(SystemExit):
        parse(["--codec", "numba"])
    assert "--codec" in capsys.readouterr().err
