"""A Python child with gcc's AddressSanitizer preloaded and UBSan halting on its first report, for the
native backend's fuzz tests: one place for the child's environment, its time budget and for reading what
it reported.

A child says where it is with `progress(program, frame)` (one pwrite into a file the parent names), so a
child that runs out of its budget is reported with the program and frame it was on, not only a timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.toolchain import missing


def libasan() -> str | None:
    """gcc's libasan.so, or None where it (or gcc) is not installed."""
    try:
        out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return None
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


def require_libasan() -> str:
    """gcc's libasan.so; the calling test is skipped without it (failed where the toolchain is required):
    gcc without its sanitizer runtime cannot link the build, a missing tool and not our C."""
    asan = libasan()
    if asan is None:
        missing("gcc's libasan is not installed")
    return asan


PROGRESS_ENV = "THC_FUZZ_PROGRESS"
_progress_fd: int | None = None


def progress(program: str, frame: int) -> None:
    """In a child: record that it is now on `frame` of `program` (overwrites the last record)."""
    global _progress_fd
    if _progress_fd is None:
        path = os.environ.get(PROGRESS_ENV)
        if not path:
            return
        _progress_fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    record = f"{program} frame {frame}".ljust(96).encode()
    os.pwrite(_progress_fd, record, 0)


def run_sanitized(script: str, *args: str, cache: Path, timeout: float) -> subprocess.CompletedProcess:
    """``python -c script args`` with the sanitizers (the test is skipped without libasan); the native
    backend compiles into ``cache``, so the child builds its libraries with its own flags. A child still
    running after ``timeout`` seconds is stopped and the test fails naming the program and frame it was on."""
    asan = require_libasan()
    env = dict(
        os.environ,
        LD_PRELOAD=asan,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:exitcode=99",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98",
        THC_NATIVE_CACHE=str(cache),
        PYTHONPATH=str(REPO),
    )
    cache.mkdir(parents=True, exist_ok=True)
    where = cache / "progress"
    env[PROGRESS_ENV] = str(where)
    try:
        return subprocess.run(
            [sys.executable, "-c", script, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        at = where.read_text().strip() if where.exists() else "its start (no frame recorded)"
        pytest.fail(f"the sanitized child ran out of its {timeout:.0f} s budget at {at}", pytrace=False)


def assert_clean(proc: subprocess.CompletedProcess, fuzzed: int) -> None:
    """The child exited cleanly, no sanitizer reported, and it processed ``fuzzed`` frames."""
    reports = [line for line in proc.stderr.splitlines() if "Sanitizer" in line or "runtime error" in line]
    assert proc.returncode == 0 and not reports, (proc.returncode, "\n".join(reports[:20]), proc.stderr[-3000:])
    assert f"fuzzed {fuzzed}" in proc.stdout
