"""A benchmark's record: its figures with the command, commit, date and machine load that produced them
(usage/provenance.py), written as JSON beside its printout. `make results` (bench/results.py)
renders docs/results.md's generated tables from the records kept in docs/results/.

Benchmarks that measure in child processes collect the children's figures through `note`: the parent
names a file in THC_BENCH_NOTES, each child appends one JSON line per figure, the parent reads them back.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from usage import provenance

NOTES = "THC_BENCH_NOTES"


def write(folder: Path, benchmark: str, started: dict, figures) -> Path:
    """folder/<benchmark>.record.json: the run's provenance (with the load at its end) and its figures."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{benchmark}.record.json"
    document = {"benchmark": benchmark, **provenance.finished(started), "figures": figures}
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"record: {path}")
    return path


def note(figure: dict) -> None:
    """Append one figure to the parent's notes file (a no-op when no parent asked for them)."""
    path = os.environ.get(NOTES)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(figure) + "\n")


class Notes:
    """The parent's side of `note`: sets THC_BENCH_NOTES for the children it starts, then reads what they
    wrote. Use as a context manager; `figures` holds the notes once it exits."""

    def __enter__(self) -> Notes:
        fd, self.path = tempfile.mkstemp(prefix="thc-bench-notes-", suffix=".jsonl")
        os.close(fd)
        self.previous = os.environ.get(NOTES)
        os.environ[NOTES] = self.path
        self.figures: list[dict] = []
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is None:
            os.environ.pop(NOTES, None)
        else:
            os.environ[NOTES] = self.previous
        with open(self.path) as f:
            self.figures = [json.loads(line) for line in f if line.strip()]
        os.unlink(self.path)
