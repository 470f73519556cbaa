"""The README and docs/ against the code: every `make` target and variable they name is in the Makefile,
every option they give a command is in that command's --help, every relative link and anchor resolves,
and the marked command blocks run as written: `make run` variants expand (make -n) to a thc-run command
that thc-run's options accept, the thc-ctl examples and the multi-host controller commands run as dry
runs without a switch, and the multi-host host preparation is what tests/support/machines.py does.
(tests/e2e/test_multi_host.py runs the multi-host blocks for real, as root.)"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from controller import ctl_cli
from controller.topology import Topology
from emulator import switch_cli
from host_agent import worker_cli
from planner import plan_cli
from tests.support import docs
from tests.support.machines import host_setup
from tests.support.paths import REPO, TOPOLOGIES
from thc import cli as thc_cli
from topologies import run_cli

BIN = Path(sys.executable).parent
OPTION = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*")

PARSERS = {
    "thc-run": run_cli.build_parser,
    "thc-worker": worker_cli.build_parser,
    "thc-switch": switch_cli.build_parser,
    "thc-ctl": ctl_cli.build_parser,
    "thc-plan": plan_cli.build_parser,
    "python -m thc": thc_cli.build_parser,
}
MODULES = {"thc": "python -m thc", "host_agent.worker": "thc-worker"}
# options the docs give to commands that are not ours
FOREIGN = {
    "torchrun": {"--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port"},
    "configure": {"--with-pi", "--with-thrift", "--with-nanomsg"},
}
MARKED = {"make-run", "thc-ctl", "multi-host-switch", "multi-host-controller", "multi-host-h1"}
MARKED |= {"multi-host-worker", "multi-host-backend"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_options(parser: argparse.ArgumentParser) -> set[str]:
    return set(OPTION.findall(parser.format_help()))


@cache
def _parser(cli: str) -> argparse.ArgumentParser:
    return PARSERS[cli]()


@cache
def bench_help() -> dict[str, set[str]]:
    """Each benchmark's --help and the results page's writer's, from one interpreter (the scripts build their
    parsers in main)."""
    script = (
        "import contextlib, io, json, runpy, sys\n"
        "out = {}\n"
        "for path in sys.argv[1:]:\n"
        "    sys.argv = [path, '--help']\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            runpy.run_path(path, run_name='__main__')\n"
        "        except SystemExit:\n"
        "            pass\n"
        "    out[path] = buf.getvalue()\n"
        "print(json.dumps(out))\n"
    )
    scripts = sorted(str(p.relative_to(REPO)) for p in (REPO / "bench").glob("bench_*.py")) + ["bench/results.py"]
    proc = subprocess.run(
        [sys.executable, "-c", script, *scripts], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    helps = json.loads(proc.stdout.strip().splitlines()[-1])
    return {Path(path).name: set(OPTION.findall(text)) for path, text in helps.items()}


def _strip(argv: list[str]) -> list[str]:
    """Drop what runs a command rather than being it: VAR=value, sudo, flock LOCK, paths to .venv/bin."""
    while argv:
        if re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]) or argv[0] == "sudo":
            argv = argv[1:]
        elif argv[0] == "flock" and len(argv) > 2:
            argv = argv[2:]
        else:
            break
    if argv:
        argv = [argv[0].rsplit("/", 1)[-1], *argv[1:]]
    return argv


def resolve(argv: list[str]) -> tuple[str, set[str], list[str]] | None:
    """(the command, the options its --help lists, the options given) for a command of ours, else None."""
    argv = _strip(argv)
    if not argv:
        return None
    head, rest = argv[0], argv[1:]
    if head == "torchrun" and "-m" in rest:
        i = rest.index("-m")
        head, rest = MODULES.get(rest[i + 1], ""), rest[i + 2 :]
    elif head in ("python", "python3", "python3.11") and rest:
        if rest[0] == "-m" and len(rest) > 1 and rest[1] in MODULES:
            head, rest = MODULES[rest[1]], rest[2:]
        elif re.match(r"^(\./)?bench/bench_\w+\.py$", rest[0]):
            name = Path(rest[0]).name
            return name, bench_help()[name], _given(rest[1:])
        else:
            return None
    elif re.match(r"^bench_\w+\.py$", head):
        return head, bench_help()[head], _given(rest)
    if head not in PARSERS:
        return None
    parser, name = _parser(head), head
    while rest and (sub := _subparsers(parser).get(rest[0])) is not None:
        parser, name, rest = sub, f"{name} {rest[0]}", rest[1:]
    return name, _help_options(parser), _given(rest)


def _given(argv: list[str]) -> list[str]:
    given = []
    for word in argv:
        if word == "--":  # thc-switch: what follows is simple_switch_grpc's target options
            break
        if word.startswith("--") and len(word) > 2:
            given.append(word.split("=", 1)[0])
    return given


def _snippets():
    for path in docs.DOCS:
        for line, text in docs.code_snippets(path):
            yield path, line, text


def _argv(text: str) -> list[str] | None:
    try:
        return docs.words(text)
    except ValueError:  # not a command (an unbalanced quote in prose code)
        return None


@cache
def _all_options() -> set[str]:
    known = set().union(*FOREIGN.values(), *bench_help().values())
    for cli in PARSERS:
        parsers = [_parser(cli)]
        while parsers:
            p = parsers.pop()
            known |= _help_options(p)
            parsers += _subparsers(p).values()
    return known


def test_every_tested_block_is_marked_once():
    names = docs.marked_names()
    assert sorted(names) == sorted(set(names)), "a block name is marked twice"
    assert set(names) == MARKED, "tests run exactly these blocks; add a test for a new marker"


def test_every_option_the_docs_give_a_command_is_in_its_help():
    wrong = []
    for path, line, text in _snippets():
        argv = _argv(text)
        found = resolve(argv) if argv else None
        if found is None:
            continue
        name, offered, given = found
        wrong += [f"{path.name}:{line}: {name} has no {opt}" for opt in given if opt not in offered]
    assert not wrong, "\n".join(wrong)


def test_every_option_the_docs_name_exists_somewhere():
    """An option named on its own (`--window 32`) must be one of some command's options."""
    known = _all_options()
    wrong = [
        f"{path.name}:{line}: {opt}"
        for path, line, text in _snippets()
        for opt in OPTION.findall(text)
        if opt not in known
    ]
    assert not wrong, "no command of the project (nor torchrun, configure) has these options:\n" + "\n".join(wrong)


def _makefile() -> tuple[set[str], set[str]]:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M))
    variables = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*[?:+]?=", text, re.M))
    return targets, variables


def test_every_make_target_and_variable_the_docs_name_exists():
    targets, variables = _makefile()
    wrong = []
    for path, line, text in _snippets():
        argv = _argv(text) or []
        if argv[:1] != ["make"]:
            continue
        for word in argv[1:]:
            if "=" in word:
                var = word.split("=", 1)[0]
                if var not in variables:
                    wrong.append(f"{path.name}:{line}: no variable {var} in the Makefile")
            elif not word.startswith("-") and word != "..." and word not in targets:  # `make run ... X=1`
                wrong.append(f"{path.name}:{line}: no target {word} in the Makefile")
    assert not wrong, "\n".join(wrong)


README_LINES = 350  # issue 41's floor: a guide a reader gets through in ten minutes; figures live in docs/results.md


def test_the_readme_stays_a_guide_of_at_most_350_lines():
    lines = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines: move detail into docs/ or a package README"


def test_every_relative_link_and_anchor_resolves():
    wrong = []
    for path in docs.DOCS:
        for line, target in docs.links(path):
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                wrong.append(f"{path.name}:{line}: no file {file}")
            elif anchor and dest.suffix == ".md" and anchor not in docs.anchors(dest):
                wrong.append(f"{path.name}:{line}: no heading #{anchor} in {dest.name}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("line", docs.command_lines(docs.tested_block("make-run")))
def test_the_make_run_examples_expand_to_a_thc_run_that_parses(line):
    argv = docs.words(line)
    assert argv[0] == "make", line
    proc = subprocess.run(["make", "-n", *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.replace("\\\n", " ")
    runs = [ln for ln in printed.splitlines() if re.search(r"(^|/)thc-run\b", ln)]
    assert len(runs) == 1, printed
    words = shlex.split(runs[0].lstrip("-@ "))
    assert words[0].endswith("/thc-run"), runs[0]
    args = run_cli.build_parser().parse_args(words[1:])  # exits (SystemExit) on an option thc-run lacks
    if args.topo is not None:
        assert (REPO / args.topo).is_file(), args.topo


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _copy_topology(src: Path, dest: Path) -> None:
    """The topology with its switches' P4Runtime ports moved to free ones: a dry run reads a switch that
    answers, and another run on this machine may have one on the committed port."""
    text = re.sub(r'"grpc_port":\s*\d+', lambda _: f'"grpc_port": {_free_port()}', src.read_text())
    dest.write_text(text)


def _dry_run(line: str, cwd: Path) -> None:
    argv = docs.words(line)
    assert argv[0] == "thc-ctl", line
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    cmd = [*argv, "--dry-run", "--connect-timeout", "0.5"]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{line}\n{proc.stderr[-2000:]}"


@pytest.fixture(scope="module")
def topologies(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("docs")
    (cwd / "topologies").mkdir()
    for src in TOPOLOGIES.glob("*.json"):
        _copy_topology(src, cwd / "topologies" / src.name)
    _copy_topology(TOPOLOGIES / "star4.json", cwd / "mine.json")  # docs/multi-host.md's topology
    return cwd


@pytest.mark.parametrize("line", docs.command_lines(docs.tested_block("thc-ctl")))
def test_the_readme_thc_ctl_examples_run_as_dry_runs(line, topologies):
    _dry_run(line, topologies)


@pytest.mark.parametrize("line", docs.command_lines(docs.tested_block("multi-host-controller")))
def test_the_multi_host_controller_commands_run_as_dry_runs(line, topologies):
    _dry_run(line, topologies)


def test_the_multi_host_host_preparation_is_what_the_multi_host_test_runs():
    topo = Topology.load(TOPOLOGIES / "star4.json")
    written = [docs.words(line) for line in docs.command_lines(docs.tested_block("multi-host-h1"))]
    assert written == [shlex.split(line) for line in host_setup(topo, "h1")]


def test_the_multi_host_commands_parse(tmp_path, monkeypatch):
    """The switch's, workers' and backend's commands use only options their programs have (the e2e test,
    root only, runs them). They run where the page's earlier steps wrote the job's file (thc-ctl job add
    --save), which the workers' --job must name: here an empty stand-in."""
    monkeypatch.chdir(tmp_path)
    switch = docs.words(docs.tested_block("multi-host-switch"))
    assert switch[0] == "thc-switch"
    switch_cli.parse_args(switch[1:])  # thc-switch's own split at `--`, as simple_switch_grpc's
    worker = docs.words(docs.command_lines(docs.tested_block("multi-host-worker"))[0])
    i = worker.index("-m")
    assert worker[i + 1] == "host_agent.worker"
    worker_args = [w.replace("$R", "0") for w in worker[i + 2 :]]
    for option in ("--job", "--plan", "--servers"):
        if option in worker_args:
            (tmp_path / worker_args[worker_args.index(option) + 1]).write_text("{}")
    worker_cli.build_parser().parse_args(worker_args)
    backend = docs.words(docs.command_lines(docs.tested_block("multi-host-backend"))[0])
    assert [w.split("=")[0] for w in backend[:3]] == ["THC_JOB", "THC_IFACE", "THC_SERVICE_IP"]
