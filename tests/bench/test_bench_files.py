"""The files a benchmark reads, fed the bad contents of tests/test_cli_bad_files.py (not UTF-8, not JSON, a
list, an empty object, every field of the wrong type, every number -1 or NaN): one line on stderr naming
the file and a non-zero exit, before anything starts (a topology is read with the options, not after the
in-process runs or the planner's timing). Each valid file gets through."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import bench_faults, bench_slow_switch, bench_timeline, bench_tta
from tests.support.paths import REPO
from tests.test_cli_bad_files import BAD


@dataclass(frozen=True)
class Kind:
    """How to write a valid file, and the benchmark's entry given its path and a folder to write into."""

    write: Callable[[Path], None]
    run: Callable[[Path, Path], int | None]


def _star4(path: Path) -> None:
    path.write_text((REPO / "topologies" / "star4.json").read_text())


def _tta_runs(path: Path) -> None:
    record = json.loads((REPO / "docs" / "results" / "bench_tta.json").read_text())
    path.write_text(json.dumps({"runs": record["figures"]["runs"]}))


def _parsed(parse) -> Callable[[Path, Path], None]:
    return lambda f, out: parse(["--topo", str(f)]) and None


KINDS = {
    "bench_tta --topo": Kind(_star4, _parsed(bench_tta.parse_args)),
    "bench_timeline --topo": Kind(_star4, _parsed(bench_timeline.parse_args)),
    "bench_faults --topo": Kind(_star4, _parsed(bench_faults.parse_args)),
    "bench_slow_switch --topo": Kind(_star4, _parsed(bench_slow_switch.parse_args)),
    "bench_tta --replot": Kind(_tta_runs, lambda f, out: bench_tta.main(["--replot", str(f), "--out", str(out)])),
    "bench_timeline --replay": Kind(
        lambda p: p.write_text(json.dumps({"steps_profiled": {}, "probes": {}, "cases": [], "calibration": {}})),
        lambda f, out: bench_timeline.main(["--replay", str(f)]),
    ),
}


def _run(kind: str, path: Path, out: Path) -> tuple[int | None, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = KINDS[kind].run(path, out)
        except SystemExit as exit_:
            status = exit_.code
    return status, err.getvalue()


@pytest.mark.parametrize("kind", KINDS)
def test_the_valid_file_gets_through(tmp_path, kind):
    path = tmp_path / "file.json"
    KINDS[kind].write(path)
    assert _run(kind, path, tmp_path) in ((0, ""), (None, ""))


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("kind", KINDS)
def test_bad_contents_are_refused_in_one_line_naming_the_file(tmp_path, kind, bad):
    valid = tmp_path / "valid.json"
    KINDS[kind].write(valid)
    path = tmp_path / "bad.json"
    path.write_bytes(BAD[bad](valid.read_text()))
    if path.read_bytes() == valid.read_bytes():
        return  # nothing of this kind in the file (no numbers): the valid file's test covers it
    status, err = _run(kind, path, tmp_path)
    assert status not in (0, None), f"{kind} took {bad} contents: {err!r}"
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    assert str(path) in err, f"the error does not name the file: {err!r}"
