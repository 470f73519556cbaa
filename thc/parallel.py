"""Block-parallel loops for the numpy parts of the hot path.

torch runs the Hadamard matmuls on all its intra-op threads; the elementwise numpy steps around them
(sign flips, stochastic rounding, integer-to-float conversion) would otherwise run on one core and, on an
idle machine, cost more than the transform itself. numpy releases the GIL in these loops, so a small
thread pool over cache-sized blocks uses the same cores torch does. Results never depend on the number
of threads: every block's work, including its random draws, is fixed by its position alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["BLOCK", "for_blocks"]

BLOCK = 2**17  # coordinates per block: a block's temporaries (about 2 MB) stay in a core's L2 cache
TASK_BLOCKS = 8  # at most this many consecutive blocks per thread-pool task
MIN_PARALLEL_BLOCKS = 4

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def _executor(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="thc-blocks")
            _pool_size = size
        return _pool


def for_blocks(n: int, fn: Callable[[int, int], None], block: int | None = None) -> None:
    """Call fn(start, stop) for consecutive blocks covering [0, n), on up to torch.get_num_threads() threads.

    Blocks start at multiples of ``block``. fn must only write its own block's slice of any shared array.
    """
    block = BLOCK if block is None else block
    starts = range(0, n, block)
    # below MIN_PARALLEL_BLOCKS blocks, waking pool threads costs more than the work
    threads = min(torch.get_num_threads(), len(starts)) if len(starts) >= MIN_PARALLEL_BLOCKS else 1
    if threads <= 1 or threading.current_thread().name.startswith("thc-blocks"):
        for start in starts:
            fn(start, min(start + block, n))
        return

    def run(part: range) -> None:
        for start in part:
            fn(start, min(start + block, n))

    # a few blocks per task: little per-task overhead, yet a busy core cannot hold up half the work
    per = max(1, min(TASK_BLOCKS, len(starts) // (2 * threads)))
    list(_executor(threads).map(run, [starts[i : i + per] for i in range(0, len(starts), per)]))
