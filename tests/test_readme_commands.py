"""The README's own examples of thc-run, thc-switch, thc-plan, `python -m thc` and the worker under
torchrun, read from its command blocks and each run as written as far as this machine allows without root,
a switch or a network: thc-run through every check it makes before it needs root (its only complaint must
be root), thc-plan and `python -m thc` to their end, thc-switch's --dump-generated to its file, the rest
through their parsers. The worker's torchrun line must be docs/multi-host.md's tested one with options
left out, so the README never shows a command the multi-host test does not run. (tests/test_docs.py runs
the marked make-run and thc-ctl blocks; this file covers the others, so a README edit that breaks one of
its examples fails here.)"""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from emulator import switch_cli
from host_agent import worker_cli
from planner import plan_cli
from tests.support import docs
from tests.support.paths import REPO
from thc import cli as thc_cli
from topologies import interrupts, run_cli, runner

OURS = ("thc-run", "thc-switch", "thc-plan", "python -m thc", "torchrun")


def _command(text: str) -> tuple[str, list[str]] | None:
    """(which of OURS, its arguments) for a README line that runs one of them, else None."""
    try:
        argv = docs.words(text)
    except ValueError:
        return None
    while argv and argv[0] == "sudo":
        argv = argv[1:]
    if not argv:
        return None
    head = argv[0].rsplit("/", 1)[-1]
    if head.startswith("python") and argv[1:3] == ["-m", "thc"]:
        return "python -m thc", argv[3:]
    return (head, argv[1:]) if head in OURS else None


EXAMPLES = [
    pytest.param(*found, id=f"README.md:{line}")
    for line, text in docs.fenced_commands(REPO / "README.md")
    if (found := _command(text)) is not None
]


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A folder like a checkout's, for the commands' relative paths, that the commands may write into."""
    for name in ("topologies", "p4"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "bench" / "out").mkdir(parents=True)
    timeline = json.loads((REPO / "docs" / "results" / "bench_timeline.json").read_text())["figures"]
    (tmp_path / "bench" / "out" / "bench_timeline.json").write_text(json.dumps(timeline))  # for thc-plan validate
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _options(argv: list[str]) -> set[tuple[str, str | None]]:
    """Each option with its value (None for a flag)."""
    return {
        (word, argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None)
        for i, word in enumerate(argv)
        if word.startswith("--")
    }


def _run(main, argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
    return status, err.getvalue()


def test_the_readme_has_an_example_of_each():
    assert {cli for cli, _ in (p.values for p in EXAMPLES)} == set(OURS)


@pytest.mark.parametrize("cli, argv", EXAMPLES)
def test_a_readme_example_runs_as_written(cli, argv, here, monkeypatch):
    if cli == "thc-run" and "--stop" not in argv:
        monkeypatch.setattr(os, "geteuid", lambda: 1000)  # its last check before it starts anything
        monkeypatch.setattr(interrupts, "install", lambda: None)
        status, err = _run(runner.main, argv)
        assert status == 1 and err.count("\n") == 1 and "needs root" in err, err
    elif cli == "thc-switch" and "--dump-generated" in argv:
        assert _run(switch_cli.main, argv) == (0, "")
        out = here / argv[argv.index("--dump-generated") + 1]
        assert "def " in out.read_text()
    elif cli in ("thc-plan", "python -m thc"):
        status, err = _run(plan_cli.main if cli == "thc-plan" else thc_cli.main, argv)
        assert status == 0, err
    elif cli == "torchrun":
        worker = argv[argv.index("-m") + 2 :]
        tested = docs.words(docs.command_lines(docs.tested_block("multi-host-worker"))[0])[1:]  # without torchrun
        assert argv[: argv.index("-m") + 2] == tested[: tested.index("-m") + 2], "torchrun's own options differ"
        differ = _options(worker) - _options(tested[tested.index("-m") + 2 :])
        assert not differ, f"not as in docs/multi-host.md's tested worker command: {sorted(differ)}"
        (here / worker[worker.index("--job") + 1]).write_text("{}")  # thc-ctl job add --save writes it first
        worker_cli.build_parser().parse_args(worker)
    else:  # thc-run --stop, thc-switch on interfaces this machine may not have: their parsers
        parse = run_cli.build_parser().parse_args if cli == "thc-run" else switch_cli.parse_args
        parse(argv)
