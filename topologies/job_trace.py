"""A trace of jobs that come and go on one switch (issue 39): when each job starts, what it trains, with how
many workers, in which mode, and for how many steps. thc-run and bench/bench_pool.py read the same file:

    {"jobs": [{"name": "a", "start": 0, "model": "mlp-digits", "workers": 4, "mode": "thc",
               "steps": 20, "compute": 0.5}, ...]}

`start` is seconds after the trace begins; `steps` (default 20) and `compute` (seconds of a step's own work
before its sums, default 0.5) are optional. A bad file is refused in one line naming the file, the job and
the field (TraceError), before any job starts: a trace is read whole, never half run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import contract

STEPS = 20
COMPUTE = 0.5
LONGEST = 1e6  # seconds: no start or step time of a trace means anything longer (about 11 days)
FIELDS = {"name", "start", "model", "workers", "mode", "steps", "compute"}


class TraceError(ValueError):
    """A trace that cannot be run, in one line."""


@dataclass(frozen=True)
class TraceJob:
    name: str
    start: float
    model: str
    workers: int
    mode: str
    steps: int = STEPS
    compute: float = COMPUTE


def _number(where: str, field: str, value, *, integer: bool, low: float, high: float):
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        raise TraceError(f"{where}: {field} must be {kind}, not {json.dumps(value)}")
    if not (low <= value <= high) or (isinstance(value, float) and math.isnan(value)):
        raise TraceError(f"{where}: {field} must be {low:g}..{high:g}, not {value}")
    return value


def _choice(where: str, field: str, value, allowed: Iterable[str] | None) -> str:
    if not isinstance(value, str) or not value:
        raise TraceError(f"{where}: {field} must be a name, not {json.dumps(value)}")
    allowed = None if allowed is None else sorted(allowed)
    if allowed is not None and value not in allowed:
        raise TraceError(f"{where}: {field} {value!r} is not one of {', '.join(allowed)}")
    return value


def parse(document, source: str = "trace", *, models=None, modes=None) -> list[TraceJob]:
    """The jobs of a parsed trace document, ordered by start time; `models`/`modes`: the names a job may
    give (None: any name)."""
    if isinstance(document, dict) and set(document) == {"jobs"}:
        document = document["jobs"]
    if not isinstance(document, list) or not document:
        raise TraceError(f'{source}: expected {{"jobs": [...]}} with at least one job')
    jobs, names = [], set()
    for i, entry in enumerate(document):
        where = f"{source}: job {i}"
        if not isinstance(entry, dict):
            raise TraceError(f"{where}: expected an object, not {json.dumps(entry)[:40]}")
        unknown = sorted(set(entry) - FIELDS)
        missing = sorted({"start", "model", "workers", "mode"} - set(entry))
        if unknown or missing:
            what = f"unknown field {unknown[0]!r}" if unknown else f"missing field {missing[0]!r}"
            raise TraceError(f"{where}: {what} (fields: {', '.join(sorted(FIELDS))})")
        name = entry.get("name", f"job{i}")
        if not isinstance(name, str) or not name or name in names:
            raise TraceError(f"{where}: name must be a fresh non-empty string, not {json.dumps(name)}")
        names.add(name)
        where = f"{source}: job {name!r}"
        jobs.append(
            TraceJob(
                name=name,
                start=float(_number(where, "start", entry["start"], integer=False, low=0, high=LONGEST)),
                model=_choice(where, "model", entry["model"], models),
                workers=_number(where, "workers", entry["workers"], integer=True, low=1, high=contract.MAX_WORKERS),
                mode=_choice(where, "mode", entry["mode"], modes),
                steps=_number(where, "steps", entry.get("steps", STEPS), integer=True, low=1, high=10**6),
                compute=float(
                    _number(where, "compute", entry.get("compute", COMPUTE), integer=False, low=0, high=LONGEST)
                ),
            )
        )
    return sorted(jobs, key=lambda j: j.start)


def load(path: str | Path, *, models=None, modes=None) -> list[TraceJob]:
    """The jobs of the trace file `path`, or TraceError in one line."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot read the trace ({getattr(e, 'strerror', None) or e})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse(document, str(path), models=models, modes=modes)


def dump(jobs: Iterable[TraceJob]) -> str:
    """The trace file of `jobs` (what `load` reads back)."""
    return json.dumps({"jobs": [vars(j) for j in jobs]}, indent=1) + "\n"
