"""Where a measured figure came from: the command that ran, the commit it ran on, when, and how loaded the
machine was (a loaded machine costs THC most, since its codec needs the CPU). Benchmarks, thc-run and
`thc-plan project --json` put this beside their figures, so that docs/results.md can name all of it for
every figure it shows (bench/results.py renders that page from such records)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the repository: usage/ is at its root


def commit() -> str | None:
    """The checked-out commit (short hash), with "+changes" when tracked files differ from it; None
    outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def command(argv: list[str] | None = None) -> str:
    """The command line as a user would type it from the repository's root: a script under the tree by
    its relative path after `python`, an installed entry point (thc-run) by its name."""
    argv = list(sys.argv if argv is None else argv)
    program = Path(argv[0])
    try:
        shown = ["python", str(program.resolve().relative_to(REPO))] if program.suffix == ".py" else [program.name]
    except ValueError:
        shown = [program.name]
    return shlex.join(shown + argv[1:])


def load() -> float:
    """The machine's 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def started(argv: list[str] | None = None, quick: bool = False) -> dict:
    """A record's provenance at the start of a run; `finished` adds the load at its end. quick: a short
    form of the run (fewer rounds or steps than its defaults), whose figures are noisier."""
    return {
        "command": command(argv),
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_start": load(),
        "quick": quick,
    }


def finished(provenance: dict) -> dict:
    """`provenance` with the load average at the run's end."""
    return dict(provenance, load_end=load())
