"""torch's intra-op threads, switched off for small work on the calling thread.

torch runs GEMMs (MKL) and the larger reductions (OpenMP) on all its intra-op threads. For the transform
and the norms of a chunk a second thread saves little when a core is free, and costs a great deal when
none is: every parallel region waits for its threads to be scheduled, so on a busy machine microseconds
of work take milliseconds. torch.set_num_threads cannot help: besides the calling thread's counts it
resets process-wide state (the count new threads start with, QNNPACK's thread pool, oneDNN's cache).
OpenMP's thread count and MKL's MKL_Set_Num_Threads_Local are settings of the calling thread alone; both
are made here, through ctypes, in the libraries torch loaded. Where torch was built without one of them,
that part does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
from collections.abc import Callable

import torch

__all__ = ["SMALL", "one_thread_if_small"]

SMALL = 2**16  # coordinates: every DDP bucket of a small model (1k-40k), where a free thread saves the least


def _function(library: str, name: str, restype=ctypes.c_int) -> Callable | None:
    try:
        fn = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
    fn.restype = restype
    return fn


@functools.cache
def _knobs() -> tuple[Callable | None, Callable | None]:
    """omp_set_num_threads and MKL_Set_Num_Threads_Local of torch's libraries."""
    top = os.path.dirname(torch.__file__)
    gomp = sorted(glob.glob(os.path.join(top, "lib", "libgomp*.so*")) + glob.glob(top + ".libs/libgomp*.so*"))
    omp = gomp[0] if gomp else None  # None: whatever the process has loaded
    mkl = os.path.join(top, "lib", "libtorch_cpu.so")
    return _function(omp, "omp_set_num_threads", None), _function(mkl, "MKL_Set_Num_Threads_Local")


class _OneThread:
    """one_thread_if_small's block for small CPU work (a class: a generator-based context manager costs as much
    again as the four calls it makes)."""

    __slots__ = ("_omp_before", "_mkl_before")

    def __enter__(self) -> None:
        omp_set, mkl_set = _knobs()
        # torch sets a thread's counts at its first parallel op: done now (by asking), so that it cannot undo ours
        self._omp_before = torch.get_num_threads() if omp_set else None  # OpenMP's count for this thread
        if self._omp_before == 1:  # already one: nothing to set, nothing to restore
            self._omp_before = None
        elif omp_set:
            omp_set(1)
        self._mkl_before = mkl_set(1) if mkl_set else None  # the previous per-thread count; 0: none, the global one

    def __exit__(self, *exc: object) -> None:
        omp_set, mkl_set = _knobs()
        if self._mkl_before is not None and self._mkl_before != 1:  # 1: it is as it was
            mkl_set(self._mkl_before)
        if self._omp_before is not None:
            omp_set(self._omp_before)


_AS_IT_IS = contextlib.nullcontext()  # reusable: it keeps no state


def one_thread_if_small(coordinates: int, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Within the block, torch's CPU work on this thread is single-threaded if it covers at most SMALL
    coordinates; other threads keep their settings."""
    if coordinates > SMALL or device.type != "cpu":
        return _AS_IT_IS
    return _OneThread()
