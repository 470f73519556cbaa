"""The aggregator's side of THC: look each index up in the table and add integers.

This is the homomorphic step a parameter server or a switch performs: no floats, no decompression.
Sums lie in [0, n*g], so a lane of L bits holds them iff n*g < 2**L; a job that cannot fit is refused
instead of silently wrapping (the reference code's 8-bit lanes overflow for n*g > 255).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .chunking import Chunk
from .errors import AggregationError, ConfigError, LaneOverflowError
from .tables import Table

__all__ = ["lane_bits_needed", "check_lanes", "check_counts", "max_workers", "lane_dtype", "reference_aggregate"]


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive integer")
    return int(value)


def lane_bits_needed(n: int, g: int) -> int:
    """Bits per coordinate for sums of n workers' table values in 0..g: ceil(log2(n*g + 1))."""
    n = _check_positive("n (workers)", n)
    g = _check_positive("g (granularity)", g)
    return math.ceil(math.log2(n * g + 1))


def max_workers(g: int, lane_bits: int) -> int:
    """The most workers whose sums fit a lane of ``lane_bits`` bits at granularity g."""
    g = _check_positive("g (granularity)", g)
    lane_bits = _check_positive("lane_bits", lane_bits)
    return (2**lane_bits - 1) // g


def check_lanes(n: int, g: int, lane_bits: int) -> None:
    """Refuse a job whose sums cannot fit: raises LaneOverflowError when n*g >= 2**lane_bits."""
    n = _check_positive("n (workers)", n)
    g = _check_positive("g (granularity)", g)
    lane_bits = _check_positive("lane_bits", lane_bits)
    limit = 2**lane_bits - 1
    if n * g > limit:
        raise LaneOverflowError(
            f"sums of n={n} workers at granularity g={g} reach n*g={n * g}, more than a {lane_bits}-bit lane "
            f"holds ({limit}); at most {limit // g} workers fit at g={g}, or use lanes of at least "
            f"{lane_bits_needed(n, g)} bits"
        )


def lane_dtype(lane_bits: int) -> np.dtype:
    """The smallest unsigned numpy integer type with at least ``lane_bits`` bits."""
    lane_bits = _check_positive("lane_bits", lane_bits)
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if np.iinfo(dt).bits >= lane_bits:
            return np.dtype(dt)
    raise ConfigError(f"lane_bits={lane_bits} exceeds 64")


def reference_aggregate(indices: Sequence[np.ndarray], table: Table, lane_bits: int | None = None) -> np.ndarray:
    """Sum over workers of table.values[index], per coordinate, as int64.

    indices: one uint8 index array per contributing worker (same length). Fewer arrays than the job's n
    is a partial aggregation; decode it with contributors=len(indices). lane_bits: if given, the job is
    checked against that lane width first and the sums are accumulated in a lane-sized integer type,
    as a switch would.
    """
    if len(indices) == 0:
        raise AggregationError("reference_aggregate needs at least one worker's indices")
    arrays = [np.asarray(a) for a in indices]
    length = arrays[0].shape
    for i, a in enumerate(arrays):
        if a.ndim != 1 or a.shape != length:
            raise AggregationError(f"worker {i} sent {a.shape} indices, worker 0 sent {length}: all must match")
        if a.dtype.kind not in "iu":
            raise AggregationError(f"worker {i} sent indices of dtype {a.dtype}; table indices are integers")
    n = len(arrays)
    bits = lane_bits if lane_bits is not None else lane_bits_needed(n, table.granularity)
    check_lanes(n, table.granularity, bits)
    lane = lane_dtype(bits)
    lut = table.values.astype(lane)
    acc = np.zeros(length, dtype=lane)
    for i, a in enumerate(arrays):
        if a.size and int(a.max()) >= table.size:
            raise AggregationError(f"worker {i} sent index {int(a.max())}; a {table.bits}-bit table has {table.size}")
        np.add(acc, np.take(lut, a), out=acc)
    return acc.astype(np.int64)


def check_counts(chunks: Sequence[Chunk], counts: Sequence, padded: bool) -> list[np.ndarray]:
    """Per-chunk arrays of per-coordinate contributor counts (partial aggregation), as int64: one integer
    >= 1 per coordinate of each chunk (of its padded buffer if ``padded``, as THC's sums are)."""
    if len(counts) != len(chunks):
        raise AggregationError(f"got counts for {len(counts)} chunks, the tensor has {len(chunks)}")
    arrays = []
    for chunk, c in zip(chunks, counts):
        a, size = np.asarray(c), chunk.padded if padded else chunk.length
        if a.dtype.kind not in "iu" or a.shape != (size,):
            raise AggregationError(
                f"counts of chunk {chunk.index} must be integers of shape ({size},), got {a.dtype} {a.shape}"
            )
        if a.size and int(a.min()) < 1:
            raise AggregationError(f"counts of chunk {chunk.index} must be >= 1, got {int(a.min())}")
        arrays.append(a.astype(np.int64))
    return arrays
