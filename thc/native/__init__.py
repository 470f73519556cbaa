"""THC's native codec: codec.c, compiled at run time with the system C compiler into a cached shared object
(native_build, as the switch's backend and the workers' fastio.c are) and loaded with ctypes.

`load()` returns the library, or None with a one-line notice on stderr when it cannot be built (no C
compiler: install the Debian package gcc); THCCompressor then encodes and decodes in numpy, with the same
results bit for bit. `THC_NATIVE=0` skips the native codec, `THC_NATIVE=1` makes a failure to build it an
error (NativeUnavailable). `THC_NATIVE_SANITIZE=1` builds it with ASan and UBSan (the fuzz test's child),
`THC_NATIVE_SANITIZE=avx2` the same with its AVX2 loops where the CPU has them.

The C computes every float operation as the numpy reference does, one IEEE operation at a time:
-ffp-contract=off keeps the compiler from fusing a multiply and an add into one rounding.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from native_build import SANITIZER_FLAGS, NativeBuildError, build_shared, load_switched

__all__ = ["Chunks", "Job", "NativeUnavailable", "build", "declare", "load"]

SOURCE = Path(__file__).resolve().parent / "codec.c"
FLAGS = ("-O3", "-Wall", "-Wextra", "-ffp-contract=off", "-fno-math-errno")


def _vector_flags() -> tuple[str, ...]:
    """-mavx2 where this CPU has AVX2: the transform's and the quantizer's loops run 8 floats at a time.
    The flag is part of the cache key, so a machine without AVX2 never loads an object built with it."""
    try:
        with open("/proc/cpuinfo") as info:
            return ("-mavx2",) if " avx2" in info.read() else ()
    except OSError:
        return ()


class NativeUnavailable(RuntimeError):
    """codec.c could not be compiled or loaded (the message says why and what to install)."""


class Job(ctypes.Structure):
    """struct thc_job of codec.c: one table's constants."""

    _fields_ = [
        ("granularity", ctypes.c_int64),
        ("last", ctypes.c_int64),
        ("bits", ctypes.c_int64),
        ("inc", ctypes.c_double),
        ("half_g_inc", ctypes.c_double),
        ("shift", ctypes.c_float),
        ("g32", ctypes.c_float),
        ("lut", ctypes.c_void_p),
        ("values", ctypes.c_void_p),
    ]


class Chunks(ctypes.Structure):
    """struct thc_chunks of codec.c: a tensor's chunks (int64 arrays of starts, lengths, padded lengths)."""

    _fields_ = [
        ("count", ctypes.c_int64),
        ("start", ctypes.c_void_p),
        ("length", ctypes.c_void_p),
        ("padded", ctypes.c_void_p),
    ]


def flags(sanitize: bool = False, scalar: bool = False, vector: bool | None = None) -> tuple[str, ...]:
    """The compiler flags: optimised, or with the sanitizers (-O1: the codec is small and its fuzz
    test runs many encodes; the switch's large generated C is sanitized at -O0). vector:
    -mavx2 where the CPU has it (by default only in the optimised build); scalar: codec.c's scalar loops even
    where AVX2 is targeted (-DTHC_NO_AVX2; the tests compare both paths)."""
    chosen = (*SANITIZER_FLAGS, "-O1", *FLAGS[1:]) if sanitize else FLAGS
    if vector if vector is not None else not sanitize:
        chosen = (*chosen, *_vector_flags())
    return (*chosen, "-DTHC_NO_AVX2") if scalar else chosen


def build(sanitize: bool = False, scalar: bool = False, vector: bool | None = None) -> Path:
    """Compile codec.c into the cache (once per source, flags and compiler) and return the .so path."""
    name = "thc_codec" + ("_asan" if sanitize else "") + ("_scalar" if scalar else "")
    try:
        return build_shared([SOURCE], name, flags(sanitize, scalar, vector))
    except NativeBuildError as exc:
        raise NativeUnavailable(f"building thc/native/{SOURCE.name}: {exc}") from None


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """lib (a loaded codec.c) with its two calls' argument and result types set."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    job = chunks = ptr  # the addresses of a Job and a Chunks (ctypes.addressof): a byref costs a microsecond a call
    lib.thc_encode.argtypes = [job, chunks, ptr, i64, ptr, i64, ptr, i64, ptr, ptr, ptr, ptr, i64, ptr, ptr, ptr, ptr]
    lib.thc_encode.restype = i64
    lib.thc_decode.argtypes = [job, chunks, ptr, i64, ptr, i64, ptr, i64, i64, ptr, i64, ptr, ptr, ptr, ptr, ptr]
    lib.thc_decode.restype = i64
    return lib


_lib: ctypes.CDLL | None = None
_tried = False


def load() -> ctypes.CDLL | None:
    """The loaded codec (built on first use), or None if THC_NATIVE=0 or it cannot be built."""
    global _lib, _tried
    if not _tried:
        sanitize = os.environ.get("THC_NATIVE_SANITIZE", "")
        lib = load_switched(
            lambda: build(sanitize in ("1", "avx2"), vector=sanitize == "avx2" or None),
            (NativeUnavailable,),
            "thc: encoding and decoding in numpy",
        )
        _lib, _tried = (None if lib is None else declare(lib)), True
    return _lib
