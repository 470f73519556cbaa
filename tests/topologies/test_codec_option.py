"""--codec (thc-run, bench_e2e): the workers' codec as one flag. 'numpy' starts every worker with THC_NATIVE=0
(the numpy reference and Python I/O), 'native' leaves the environment as the caller's; both CLIs parse it
alike and refuse anything else."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from controller.topology import Topology
from topologies import run_cli, runner
from topologies.workers import CODECS, WorkerOptions, codec_environment, start_workers

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench import bench_e2e  # noqa: E402


def _environments(tmp_path, monkeypatch, **options) -> list[dict]:
    """The environment each worker of a star of 4 is started with."""
    monkeypatch.setenv("THC_NATIVE", "")  # the caller's setting, kept by 'native'
    seen = []

    def popen(argv, **kwargs):
        seen.append(kwargs["env"])
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
