"""The worker's native helper: fastio.c (sendmmsg/recvmmsg over rows of a numpy buffer), compiled at run
time with the system C compiler into a cached shared object and loaded with ctypes.

The compile step is deliberately small and private: it mirrors emulator/native/build.py's `build_shared`
(same cache directory, `$THC_NATIVE_CACHE` or ~/.cache/thc-native, keyed by the sha256 of source, flags and
compiler), and should become a call to it once that helper is shared by both packages (host_agent may not
import emulator today: tests/test_architecture.py).

`load()` returns the library, or None with a one-line notice on stderr when it cannot be built (no C
compiler: install the Debian package gcc); the transport then batches in Python, with the same results.
`THC_NATIVE=0` skips the helper, `THC_NATIVE=1` makes a failure to build it an error (NativeUnavailable).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "fastio.c"
FLAGS = ("-O2", "-fPIC", "-shared", "-Wall")


class NativeUnavailable(RuntimeError):
    """fastio.c could not be compiled or loaded (the message says why and what to install)."""


def cache_dir() -> Path:
    return Path(os.environ.get("THC_NATIVE_CACHE") or Path.home() / ".cache" / "thc-native")


def _compiler() -> list[str]:
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    for name in ("cc", "gcc"):
        if shutil.which(name):
            return [name]
    raise NativeUnavailable(
        "no C compiler found (looked for $CC, cc, gcc) to build host_agent/native/fastio.c: "
        "install the Debian package gcc (apt-get install gcc)"
    )


def build() -> Path:
    """Compile fastio.c into the cache (once per source, flags and compiler) and return the .so path."""
    compiler = _compiler()
    try:
        version = subprocess.run([*compiler, "--version"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeUnavailable(
            f"C compiler {compiler[0]} does not run ({exc}): install the Debian package gcc"
        ) from None
    text = SOURCE.read_bytes()
    digest = hashlib.sha256(b"\0".join([version, " ".join([*compiler, *FLAGS]).encode(), text])).hexdigest()[:20]
    target = cache_dir() / f"host_fastio-{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="host_fastio-", dir=target.parent) as scratch:
        partial = Path(scratch) / "out.so"
        done = subprocess.run([*compiler, *FLAGS, "-o", str(partial), str(SOURCE)], capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeUnavailable(f"compiling {SOURCE.name} failed ({compiler[0]}): {done.stderr.strip()}")
        os.replace(partial, target)  # atomic: a concurrent worker never loads half a file
    return target


_TAKE_INTS = "job_id key window next_request q0 n op per_packet n_workers lane_bits result_bytes outstanding ref_count"


class Take(ctypes.Structure):
    """struct thc_take of fastio.c: an operation as thc_take_results sees it, and the batch's counts."""

    _fields_ = (
        [(name, ctypes.c_int64) for name in _TAKE_INTS.split()]
        + [(name, ctypes.c_void_p) for name in ("done", "attempts", "sums", "counts")]
        + [(name, ctypes.c_int64) for name in ("ignored", "bad_key", "stale", "duplicate", "rejected", "accepted")]
    )


_lib: ctypes.CDLL | None = None
_tried = False


def load() -> ctypes.CDLL | None:
    """The loaded helper (built on first use), or None if THC_NATIVE=0 or it cannot be built."""
    global _lib, _tried
    if _tried:
        return _lib
    mode = os.environ.get("THC_NATIVE", "")
    if mode == "0":
        _tried = True
        return None
    try:
        lib = ctypes.CDLL(str(build()))
    except (NativeUnavailable, OSError) as exc:
        if mode == "1":
            raise NativeUnavailable(str(exc)) from None
        print(f"host_agent: batching frames in Python, not natively: {exc}", file=sys.stderr)
        _tried = True
        return None
    c_long, c_ptr = ctypes.c_long, ctypes.c_void_p
    lib.thc_send_rows.argtypes = [ctypes.c_int, c_ptr, c_long, c_long, c_long]
    lib.thc_send_rows.restype = c_long
    lib.thc_recv_rows.argtypes = [ctypes.c_int, c_ptr, c_long, c_long, c_long, c_ptr]
    lib.thc_recv_rows.restype = c_long
    lib.thc_take_results.argtypes = [c_ptr, c_long, c_long, c_ptr, ctypes.POINTER(Take), c_ptr, c_ptr]
    lib.thc_take_results.restype = c_long
    _lib, _tried = lib, True
    return lib
