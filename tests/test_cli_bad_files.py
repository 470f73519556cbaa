"""Every file a CLI reads, fed bad contents: not UTF-8, not JSON, the wrong shape (a list, an empty
object), every field of the wrong type, every number -1, every number NaN. The CLI must refuse it before
it starts anything: a non-zero exit and one line on stderr that names the file, no traceback (the
contents' counterpart of tests/test_cli_bad_values.py, which feeds the options themselves).

Each file kind also runs with its valid file, which must get past the file to the point where the command
would start its work (a root check, a switch that is not there, a stubbed training loop), so that a
refusal is the bad contents' and not the command line's.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from contract.job import JobSpec
from controller import ctl_cli
from host_agent import worker
from host_agent.sharded import Server, save_servers
from planner import plan_cli, profiles
from tests.support.paths import REPO, THC_JSON
from topologies import interrupts, runner
from topologies.targets import free_tcp_port


class Started(BaseException):
    """Raised where a command would start its work: the file got through (a BaseException: the worker
    reports every Exception of its run in one line)."""


def _star4() -> dict:
    topo = json.loads((REPO / "topologies" / "star4.json").read_text())
    topo["switches"]["s1"]["grpc_port"] = free_tcp_port()  # nothing listens: thc-ctl stops at connecting
    return topo


IDENTITY = ["--iface", "lo", "--src-ip", "127.0.0.2", "--src-mac", "02:00:00:00:00:02"]
IDENTITY += ["--rank", "1", "--world-size", "4", "--master-addr", "127.0.0.1"]
SWITCH = ["--service-ip", "127.0.0.1", "--service-mac", "02:00:00:00:00:01", *IDENTITY]
STEP = {"forward_ms": 2.0, "backward_ms": 4.0, "buckets": [{"index": 0, "numel": 4096, "ready_ms": 3.0}]}
CASE = {"model": "mlp-digits", "mode": "thc", "mbps": 20, "measured_ms": 10.0, "predicted_ms": 11.0}
SERVERS = [Server("ps1", "10.0.0.9", "02:00:00:00:00:09", 7), Server("ps2", "10.0.0.10", "02:00:00:00:00:0a", 8)]


def _json(doc) -> Callable[[Path], None]:
    return lambda path: path.write_text(json.dumps(doc))


STARTED = "started"
NEEDS_ROOT = "needs root"
NO_SWITCH = "no P4Runtime server answers"
NOWHERE = ["--connect-timeout", "0.2"]


@dataclass(frozen=True)
class Kind:
    """A file a CLI reads: how to write a valid one, the command given its path, and how far a valid file
    gets (the status STARTED, 0, or words of the one-line error where the command stops without root or a
    switch)."""

    write: Callable[[Path], None]
    command: Callable[[str, Path], tuple[str, list[str]]]
    reached: str | int


KINDS = {
    "thc-run --topo": Kind(
        lambda p: p.write_text(json.dumps(_star4())),
        lambda f, tmp: ("thc-run", ["--topo", f, "--log-dir", str(tmp / "logs")]),
        NEEDS_ROOT,
    ),
    "thc-run --trace": Kind(
        _json({"jobs": [{"name": "a", "start": 0, "model": "mlp-digits", "workers": 2, "mode": "thc", "steps": 3}]}),
        lambda f, tmp: ("thc-run", ["--trace", f, "--log-dir", str(tmp / "logs")]),
        NEEDS_ROOT,
    ),
    "thc-ctl --topology": Kind(
        lambda p: p.write_text(json.dumps(_star4())),
        lambda f, tmp: ("thc-ctl", ["job", "add", "--topology", f, "--id", "1", "--workers", "h1,h2", *NOWHERE]),
        NO_SWITCH,
    ),
    "thc-worker --job": Kind(
        lambda p: JobSpec(job_id=5, workers=4).save(p),
        lambda f, tmp: ("thc-worker", ["--mode", "thc", *SWITCH, "--job", f]),
        STARTED,
    ),
    "thc-worker --plan": Kind(
        _json({"buckets": {"0": "thc", "1": "gloo"}}),
        lambda f, tmp: ("thc-worker", ["--mode", "plan", *SWITCH, "--plan", f]),
        STARTED,
    ),
    "thc-worker --servers": Kind(
        lambda p: save_servers(p, SERVERS),
        lambda f, tmp: ("thc-worker", ["--mode", "thc-ps", *IDENTITY, "--servers", f]),
        STARTED,
    ),
    "thc-plan --step-profile": Kind(_json(STEP), lambda f, tmp: ("thc-plan", ["plan", "--step-profile", f]), 0),
    "thc-plan --profile": Kind(
        _json(profiles.preset("tofino").to_dict()),
        lambda f, tmp: ("thc-plan", ["plan", "--model", "resnet50", "--profile", f]),
        0,
    ),
    "thc-plan validate": Kind(_json({"cases": [CASE]}), lambda f, tmp: ("thc-plan", ["validate", "--results", f]), 0),
    "thc-switch PROGRAM.json": Kind(
        lambda p: p.write_bytes(THC_JSON.read_bytes()), lambda f, tmp: ("thc-switch", [f, *SERVE]), STARTED
    ),
    "thc-switch --p4info": Kind(
        lambda p: p.write_bytes(THC_JSON.with_name("thc.p4info.txtpb").read_bytes()),
        lambda f, tmp: ("thc-switch", [str(THC_JSON), "--p4info", f, *SERVE]),
        STARTED,
    ),
}
SERVE = ["--grpc-server-addr", "127.0.0.1:0"]
READY_S = 120  # a switch still up after this long took the file (it loads thc.json in a few seconds)


def _numbers(value, change):
    """`value` with every number (not bool) replaced by change(number)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return change(value)
    if isinstance(value, dict):
        return {k: _numbers(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v, change) for v in value]
    return value


def _other_type(value):
    """A value of another JSON type than `value`."""
    if isinstance(value, dict):
        return [1]
    if isinstance(value, list):
        return "x"
    if isinstance(value, str):
        return 7
    return "x"  # a number, a bool or null


def _wrong_types(doc):
    """Each field of the object (or of each object in the list) of another type."""
    if isinstance(doc, list):
        return [_wrong_types(e) for e in doc]
    return {k: _other_type(v) for k, v in doc.items()} if isinstance(doc, dict) else _other_type(doc)


BAD = {
    "not-utf8": lambda text: b"\xff\xfe" + text.encode(),
    "not-json": lambda text: text[: len(text) // 2].encode(),
    "a-list": lambda text: b"[]",
    "empty-object": lambda text: b"{}",
    "wrong-types": lambda text: json.dumps(_wrong_types(json.loads(text))).encode(),
    "negative": lambda text: json.dumps(_numbers(json.loads(text), lambda x: -1)).encode(),
    "nan": lambda text: json.dumps(_numbers(json.loads(text), lambda x: math.nan)).encode(),
}


def _serve(argv: list[str]) -> tuple[int | str, str]:
    """thc-switch as a process (it serves until stopped): its exit status and stderr, or STARTED once it
    prints its ready line (then it is stopped). A process neither ready nor ended after READY_S is "hung"."""
    command = [sys.executable, "-c", "import sys; from emulator.switch_cli import main; sys.exit(main())", *argv]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        timer = threading.Timer(READY_S, proc.kill)
        timer.start()
        try:
            ready = any("thc-switch ready" in line for line in proc.stdout)  # stops at the ready line or EOF
            proc.kill()
            err = proc.stderr.read()
            proc.wait()
        finally:
            timer.cancel()
    if ready:
        return STARTED, err
    return ("hung" if proc.returncode == -9 else proc.returncode), err


BAD_P4INFO = {  # a text protobuf, not JSON: the same faults in its own syntax
    "not-utf8": BAD["not-utf8"],
    "not-json": lambda text: text[: len(text) // 2].encode(),  # cut mid-message: not a P4Info
    "a-list": lambda text: b"[1, 2]",
    "empty-object": lambda text: b"tables { preamble { name: 5 } }",
    "wrong-types": lambda text: re.sub(r"\bid: (\d+)", r'id: "\1"', text).encode(),
    "negative": lambda text: re.sub(r"\bid: (\d+)", r"id: -\1", text).encode(),
    "nan": lambda text: re.sub(r"\bbitwidth: (\d+)", "bitwidth: nan", text).encode(),
}


def _run(cli: str, argv: list[str], monkeypatch) -> tuple[int | str, str]:
    """The CLI's main in this process, stopped where it would start its work: (exit status, stderr)."""
    if cli == "thc-switch":
        return _serve(argv)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # thc-run stops at its root check
    monkeypatch.setattr(interrupts, "install", lambda: None)

    def started(*args, **kwargs):
        raise Started

    monkeypatch.setattr(worker, "run", started)
    monkeypatch.setattr(worker, "probe", started)
    main = {"thc-run": runner.main, "thc-worker": worker.main, "thc-plan": plan_cli.main}.get(cli)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = ctl_cli.run(argv, io.StringIO(), err) if cli == "thc-ctl" else main(argv)
        except SystemExit as exit_:
            status = exit_.code
        except Started:
            status = STARTED
    return status, err.getvalue()


@pytest.mark.parametrize("kind", KINDS)
def test_the_valid_file_gets_past_the_file(tmp_path, monkeypatch, kind):
    path = tmp_path / "file.json"
    KINDS[kind].write(path)
    status, err = _run(*KINDS[kind].command(str(path), tmp_path), monkeypatch)
    reached = KINDS[kind].reached
    if isinstance(reached, str) and reached != STARTED:
        assert status not in (0, STARTED) and reached in err and err.count("\n") == 1, (status, err)
    else:
        assert status == reached, (status, err)


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("kind", KINDS)
def test_bad_contents_are_refused_in_one_line_naming_the_file(tmp_path, monkeypatch, kind, bad):
    valid = tmp_path / "valid.json"
    KINDS[kind].write(valid)
    path = tmp_path / "bad.json"
    path.write_bytes((BAD_P4INFO if kind == "thc-switch --p4info" else BAD)[bad](valid.read_text()))
    if path.read_bytes() == valid.read_bytes():
        return  # nothing of this kind in the file (a plan has no numbers): the valid file's test covers it
    status, err = _run(*KINDS[kind].command(str(path), tmp_path), monkeypatch)
    assert status not in (0, None, STARTED), f"{kind} took {bad} contents (status {status}): {err!r}"
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    assert str(path) in err, f"the error does not name the file: {err!r}"
