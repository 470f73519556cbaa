"""The worker's native helper: fastio.c (sendmmsg/recvmmsg over rows of a numpy buffer, request frames
built from a template, the per-frame rules for results), compiled at run time with the system C compiler
into a cached shared object (native_build, the switch's build step too) and loaded with ctypes.

`load()` returns the library, or None with a one-line notice on stderr when it cannot be built (no C
compiler: install the Debian package gcc); the transport then batches in Python, with the same results.
`THC_NATIVE=0` skips the helper, `THC_NATIVE=1` makes a failure to build it an error (NativeUnavailable).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from contract import THC_VERSION
from native_build import NativeBuildError, build_shared, load_switched

SOURCE = Path(__file__).resolve().parent / "fastio.c"
FLAGS = ("-O2", "-Wall", f"-DTHC_VERSION={THC_VERSION}")  # the wire format's version, from the contract


class NativeUnavailable(RuntimeError):
    """fastio.c could not be compiled or loaded (the message says why and what to install)."""


def build() -> Path:
    """Compile fastio.c into the cache (once per source, flags and compiler) and return the .so path."""
    try:
        return build_shared([SOURCE], "host_fastio", FLAGS)
    except NativeBuildError as exc:
        raise NativeUnavailable(f"building host_agent/native/{SOURCE.name}: {exc}") from None


_TAKE_INTS = "job_id key window next_request q0 n op per_packet n_workers lane_bits result_bytes outstanding ref_count"


class Take(ctypes.Structure):
    """struct thc_take of fastio.c: an operation as thc_take_results sees it, and the batch's counts."""

    _fields_ = (
        [(name, ctypes.c_int64) for name in _TAKE_INTS.split()]
        + [(name, ctypes.c_void_p) for name in ("done", "attempts", "sums", "counts")]
        + [(name, ctypes.c_int64) for name in ("ignored", "bad_key", "stale", "duplicate", "rejected", "accepted")]
    )


_SEND_INTS = "send_stride send_next send_end send_cap in_flight max_sends sends"


class Wait(ctypes.Structure):
    """struct thc_wait of fastio.c: when thc_wait_results stops waiting, and what it took in."""

    _fields_ = (
        [(name, ctypes.c_double) for name in ("until", "fixed", "slack", "cap")]
        + [(name, ctypes.c_int64) for name in ("low", "max_batches", "preloaded", "frames", "bytes", "batches", "stop")]
        + [(name, ctypes.c_double) for name in ("coalesce", "max_hold", "min_hold", "first", "last")]
        + [(name, ctypes.c_int64) for name in ("hold_after", "answered", "holds")]
        + [("send_base", ctypes.c_void_p)]
        + [(name, ctypes.c_int64) for name in _SEND_INTS.split()]
        + [(name, ctypes.c_void_p) for name in ("send_batch_end", "send_batch_time")]
    )


class Book(ctypes.Structure):
    """struct thc_book of fastio.c: an operation's booking done in C when one wait sent and answered all of it."""

    _fields_ = (
        [(name, ctypes.c_void_p) for name in ("times", "ints")]
        + [(name, ctypes.c_int64) for name in ("tx", "firsts", "per_window", "adaptive", "held")]
        + [(name, ctypes.c_int64) for name in ("rtt_known", "gap_known")]
        + [(name, ctypes.c_double) for name in ("rtt_mean", "rtt_var", "gap_mean", "gap_var")]
        + [(name, ctypes.c_int64) for name in ("booked", "fresh")]
        + [(name, ctypes.c_double) for name in ("first", "last", "min_rtt")]
    )


_lib: ctypes.CDLL | None = None
_tried = False


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    c_long, c_ptr = ctypes.c_long, ctypes.c_void_p
    lib.thc_send_rows.argtypes = [ctypes.c_int, c_ptr, c_long, c_long, c_long]
    lib.thc_send_rows.restype = c_long
    lib.thc_recv_rows.argtypes = [ctypes.c_int, c_ptr, c_long, c_long, c_long, c_ptr]
    lib.thc_recv_rows.restype = c_long
    lib.thc_build_requests.argtypes = [c_ptr, c_long, c_ptr, ctypes.c_int64, ctypes.c_int64, c_ptr, c_long, c_long]
    lib.thc_build_requests.restype = c_long
    lib.thc_take_results.argtypes = [c_ptr, c_long, c_long, c_ptr, ctypes.POINTER(Take), c_ptr, c_ptr]
    lib.thc_take_results.restype = c_long
    lib.thc_wait_results.argtypes = [ctypes.c_int, c_ptr, c_long, c_long, c_ptr, ctypes.POINTER(Take),
                                     ctypes.POINTER(Wait), c_ptr, c_ptr, c_ptr, c_ptr, c_ptr, c_ptr]  # fmt: skip
    lib.thc_wait_results.restype = c_long
    return lib


def load() -> ctypes.CDLL | None:
    """The loaded helper (built on first use), or None if THC_NATIVE=0 or it cannot be built (one notice)."""
    global _lib, _tried
    if not _tried:
        lib = load_switched(build, (NativeUnavailable,), "host_agent: batching frames in Python, not natively")
        _lib, _tried = (None if lib is None else _declare(lib)), True
    return _lib
