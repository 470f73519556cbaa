"""Every option of every CLI, fed bad values: each numeric option 0, -1, NaN and a huge number, each
HOST:PORT one without a port or with one out of range, each IP or MAC address one that is none, each file
option a path in a folder that does not exist or under a file. The parser must refuse the value in one
line that names the option (exit 2, no traceback, no usage block), before anything starts, unless the
value is one the option documents as meaningful (ACCEPTED, with the reason).

The parsers are found, not listed: the installed CLIs' build_parser() and `python -m thc`'s, each
benchmark's parser (caught as its main() or parse_args() starts to parse), and every subcommand of each.
A new option is tested the day it is added; a new acceptance needs a line in ACCEPTED.
"""

import argparse
import contextlib
import importlib
import inspect
import io
import re
from pathlib import Path

import pytest

from tests.support.paths import REPO

BAD_NUMBERS = ("0", "-1", "nan", "1e30", "1" + "0" * 30)
BAD_ADDRESSES = ("127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1", ":50051")  # gRPC wraps 99999 round to 34463
BAD_IPS = ("999.1.1.1", "x")  # for an option named *-ip
BAD_MACS = ("zz", "02:00")  # for an option named *-mac
MISSING = "/no/such/folder/f.json"
UNDER_A_FILE = str(REPO / "README.md" / "f.json")  # no folder can be made there

# (cli, option) -> {value: why the option takes it}; cli "*" is every CLI with that option.
ZERO = {"0": "0 is a valid id, seed or index"}
ACCEPTED = {
    ("*", "--seed"): ZERO,
    ("*", "--thc-seed"): ZERO,
    ("*", "--probe-seed"): ZERO,
    ("*", "--job-id"): ZERO,
    ("*", "--id"): ZERO,
    ("*", "--rank"): ZERO,
    ("*", "--device-id"): ZERO,
    ("*", "--slot-base"): {"0": "the first slot of the switch's registers"},
    ("*", "--loss"): {"0": "no loss (the default)"},
    ("*", "--coalesce"): {"0": "documented: take every batch of results at once"},
    ("*", "--step-delay"): {"0": "no delay (the default)"},
    ("*", "--dump-packet-data"): {"0": "dump nothing (the default)"},
    ("thc-ctl", "--job"): ZERO,
    ("*", "--pool-cells"): {"0": "documented: a pool of no cells (every pool round falls back)"},
    ("thc-worker", "--steps"): {"0": "documented: 0 with --probe"},
    ("thc-worker", "--dupthresh"): {"0": "documented: timers only"},
    ("thc-worker", "--result"): {MISSING: "the worker creates the folder, parents and all"},
    ("thc-worker", "--probe"): {MISSING: "the worker creates the folder, parents and all"},
    ("thc-worker", "--membership"): {
        MISSING: "the runner writes it when a worker fails; polled until then",
        UNDER_A_FILE: "read, never written, by the worker: polled as a missing one is",
    },
    ("bench_e2e", "--rounds"): {"0": "documented: 0 skips the aggregation part"},
    ("bench_e2e", "--steps"): {"0": "documented: 0 skips training"},
    ("bench_timeline", "--warmup"): {"0": "leave no step out of the mean"},
    ("thc-switch", "--cpu-port"): {"0": "a port number, as BMv2 takes it"},
    ("thc-switch", "--thrift-port"): {"0": "documented: accepted and ignored (no Thrift server)"},
    ("thc-switch", "--log-file"): dict.fromkeys(
        (MISSING, UNDER_A_FILE), "refused in one line by thc-switch's main before it starts (test_ports.py)"
    ),
    ("thc-switch", "--p4runtime-log"): dict.fromkeys(
        (MISSING, UNDER_A_FILE), "refused in one line by thc-switch's main before it starts"
    ),
    ("thc-switch", "--pcap"): {
        MISSING: "a folder the switch creates, parents and all",
        UNDER_A_FILE: "refused in one line by thc-switch's main before it starts",
    },
    ("thc-switch", "--nanolog"): dict.fromkeys(
        (MISSING, UNDER_A_FILE), "an address, not a file: accepted and ignored, as its help says"
    ),
    ("*", "--log-dir"): {MISSING: "a folder the run creates, parents and all"},
    ("*", "--pcap-dir"): {MISSING: "a folder the run creates, parents and all"},
    ("*", "--pcap"): {MISSING: "a folder the switch creates, parents and all"},
    ("*", "--out"): {MISSING: "a folder the benchmark creates, parents and all"},
}


class _Captured(Exception):
    pass


def _parser_of(entry) -> argparse.ArgumentParser:
    """The parser `entry` builds, caught as it starts parsing (nothing after that runs)."""
    original = argparse.ArgumentParser.parse_known_args

    def caught(self, args=None, namespace=None):
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = caught
    try:
        entry([]) if inspect.signature(entry).parameters else entry()
    except _Captured as found:
        return found.args[0]
    finally:
        argparse.ArgumentParser.parse_known_args = original
    raise AssertionError(f"{entry} parsed nothing")


def _bench(name: str):
    module = importlib.import_module(f"bench.{name}")
    return lambda: _parser_of(getattr(module, "parse_args", None) or module.main)


def _parse(cli, path, parser):
    """What the CLI does with its arguments before it starts: a benchmark's parse_args(argv) where it has
    one (its checks after parsing included), else the parser's parse_args."""
    module = importlib.import_module(f"bench.{cli}") if cli in BENCHES else None
    if module is not None and hasattr(module, "parse_args"):
        return module.parse_args
    return parser.parse_args


BENCHES = [p.stem for p in sorted((REPO / "bench").glob("*.py")) if "Parser(" in p.read_text()]
CLIS = {
    "thc-run": lambda: importlib.import_module("topologies.run_cli").build_parser(),
    "thc-worker": lambda: importlib.import_module("host_agent.worker_cli").build_parser(),
    "thc-ctl": lambda: importlib.import_module("controller.ctl_cli").build_parser(),
    "thc-switch": lambda: importlib.import_module("emulator.switch_cli").build_parser(),
    "thc-plan": lambda: importlib.import_module("planner.plan_cli").build_parser(),
    "python -m thc": lambda: importlib.import_module("thc.cli").build_parser(),
    **{name: _bench(name) for name in BENCHES},
}


def _subparsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subparsers(sub, (*path, name))


NUMBER_LIST = re.compile(r"^-?[\d.]+(,-?[\d.]+)*$")  # a default like "50,10,5": numbers, split later
FILE_WORDS = re.compile(r"(file|path|dir|out|save|log|json|png|pcap|topo|plan|servers|profile|p4info|membership)")


def _kind(action) -> str | None:
    """'number', 'path', 'address' (HOST:PORT), 'ip', 'mac' or None (not probed: a choice, a name, a host)."""
    if action.choices is not None:
        return None
    if "PORT" in (action.metavar or ""):
        return "address"
    if isinstance(action.default, str) and re.match(r"^[a-z][\w-]*(,[a-z][\w-]*)+$", action.default):
        return "names"
    if action.dest.endswith(("_ip", "_mac")):
        return action.dest.rsplit("_", 1)[1]
    kind = action.type
    name = getattr(kind, "__qualname__", "")
    if kind in (int, float) or name.split(".")[0] in ("_finite_number", "int_in", "whole_number", "finite_number"):
        return "number"
    if isinstance(action.default, (int, float)) and not isinstance(action.default, bool):
        return "number"
    if kind in (None, str) and isinstance(action.default, str) and NUMBER_LIST.match(action.default):
        return "number"
    if kind is Path or name in ("output_file", "input_file", "input_path", "folder") or FILE_WORDS.search(action.dest):
        return "path"
    return None


def _cases():
    for cli, build in CLIS.items():
        for path, parser in _subparsers(build()):
            for action in parser._actions:
                if not action.option_strings or action.nargs == 0 or action.help == argparse.SUPPRESS:
                    continue
                kind = _kind(action)
                bad = {"number": BAD_NUMBERS, "path": (MISSING, UNDER_A_FILE), "address": BAD_ADDRESSES}
                bad |= {"ip": BAD_IPS, "mac": BAD_MACS, "names": ("nosuch",)}
                for value in bad.get(kind, ()):
                    option = action.option_strings[-1]
                    yield pytest.param(cli, path, option, value, id=f"{cli} {' '.join(path)} {option}={value}")


def _parser(cli, path):
    return dict(_subparsers(CLIS[cli]()))[tuple(path)]


@pytest.mark.parametrize("cli, path, option, value", list(_cases()))
def test_a_bad_value_is_refused_in_one_line_naming_the_option(cli, path, option, value):
    parser = _parser(cli, path)
    accepted = ACCEPTED.get((cli, option), ACCEPTED.get(("*", option), {}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            _parse(cli, path, parser)([f"{option}={value}"])
            code = None
        except SystemExit as exit_:
            code = exit_.code
    text = err.getvalue()
    refused = code == 2 and re.search(rf"{re.escape(option)}\b(?!-)", text) is not None
    if value in accepted:
        assert not refused, f"{option} {value} is documented as accepted ({accepted[value]}) but refused: {text}"
        return
    assert refused, f"{cli} {' '.join(path)} {option} {value}: taken without a word (exit {code}; {text!r})"
    assert text.count("\n") == 1 and text.endswith("\n"), f"not one line: {text!r}"
    assert "Traceback" not in text
