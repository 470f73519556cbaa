"""THC lookup tables: which integer in 0..g each b-bit index stands for.

Entry j of a table stands for the normalised level l_j = (v_j - g/2) * inc with inc = 2T/g, so the table
spans [-T, T]. A valid table has 2**b non-decreasing integers from 0 to g and is symmetric
(v_j + v_{last-j} = g), which keeps the rounding unbiased around zero.

The optimal table is the exact minimiser, over all such tables, of the expected variance of unbiased
stochastic rounding of a standard normal clipped to [-T, T]:

    sum_j  integral_{l_j}^{l_{j+1}} phi(z) (z - l_j) (l_{j+1} - z) dz

found by a dynamic programme over integer breakpoints of the lower half (the upper half mirrors it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import ConfigError, TableError
from .limits import TABLE_KINDS, check_bits, check_granularity, parse_probability

__all__ = [
    "Table",
    "make_table",
    "optimal_values",
    "uniform_values",
    "clip_threshold",
    "segment_cost",
    "table_rounding_variance",
    "clipping_error",
]


@functools.cache
def _normal():
    """scipy's standard normal, imported on first use: scipy.stats takes most of a second to import, and a
    process that only reads a job's config (the controller, a worker's argv check) never needs it."""
    from scipy.stats import norm

    return norm


# The exact DP touches (g+1)^2 * 2**(b-1) cells; beyond this it is slow enough to be a mistake.
_MAX_DP_CELLS = 2_000_000_000


def clip_threshold(clip: float) -> float:
    """T = Phi^-1(1 - p/2): a standard normal falls outside [-T, T] with probability p."""
    return float(_normal().isf(parse_probability(clip) / 2.0))


def segment_cost(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Rounding variance contributed by the interval [lo, hi] of N(0,1): int phi(z)(z-lo)(hi-z) dz.

    Closed form from the truncated moments of the normal: with M0 = Phi(hi) - Phi(lo),
    M1 = phi(lo) - phi(hi), M2 = M0 + lo phi(lo) - hi phi(hi), the cost is -M2 + (lo+hi) M1 - lo hi M0.
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    m0 = _normal().cdf(hi) - _normal().cdf(lo)
    pl, ph = _normal().pdf(lo), _normal().pdf(hi)
    m1 = pl - ph
    m2 = m0 + lo * pl - hi * ph
    cost = -m2 + (lo + hi) * m1 - lo * hi * m0
    return np.where(hi > lo, np.maximum(cost, 0.0), 0.0)


def _grid_levels(granularity: int, threshold: float) -> np.ndarray:
    inc = 2.0 * threshold / granularity
    return (np.arange(granularity + 1, dtype=np.float64) - granularity / 2.0) * inc


def optimal_values(bits: int, granularity: int, clip: float) -> np.ndarray:
    """The symmetric integer table of 2**bits entries in 0..g with the least expected rounding variance.

    Exact: a dynamic programme over the lower half. best[s][x] is the least cost of a non-decreasing path
    0 = v_0 <= ... <= v_s = x (zero-length steps cost nothing, so duplicate values are allowed); the table
    is the lower path to m, the mirrored upper path, and the middle segment [m, g-m]. Ties go to the
    smaller breakpoint, so the result is deterministic.
    """
    check_bits(bits)
    check_granularity(granularity)
    g = granularity
    half = 2 ** (bits - 1)
    if (g + 1) ** 2 * half > _MAX_DP_CELLS:
        raise ConfigError(
            f"the exact optimal table for b={bits}, g={g} needs {(g + 1) ** 2 * half:.2e} DP cells "
            f"(limit {_MAX_DP_CELLS:.0e}); use a smaller granularity or the uniform table"
        )
    levels = _grid_levels(g, clip_threshold(clip))
    # cost[a, x]: cost of one segment from grid point a to grid point x (inf when a > x).
    cost = segment_cost(levels[:, None], levels[None, :])
    cost[np.tril_indices(g + 1, -1)] = np.inf
    best = np.full(g + 1, np.inf)
    best[0] = 0.0
    choices = []
    for _ in range(half - 1):
        total = best[:, None] + cost
        arg = np.argmin(total, axis=0)
        choices.append(arg)
        best = total[arg, np.arange(g + 1)]
    middles = np.arange(g // 2 + 1)
    objective = 2.0 * best[middles] + cost[middles, g - middles]
    m = int(np.argmin(objective))
    lower = [m]
    for arg in reversed(choices):
        lower.append(int(arg[lower[-1]]))
    lower = np.array(lower[::-1], dtype=np.int64)
    return np.concatenate([lower, g - lower[::-1]])


def uniform_values(bits: int, granularity: int) -> np.ndarray:
    """Evenly spaced values v_j = round(j g / (2**b - 1)), rounded symmetrically."""
    check_bits(bits)
    check_granularity(granularity)
    size = 2**bits
    half = np.arange(size // 2, dtype=np.float64)
    lower = np.floor(half * granularity / (size - 1) + 0.5).astype(np.int64)
    return np.concatenate([lower, granularity - lower[::-1]])


def _validate_values(values: np.ndarray, bits: int, granularity: int) -> None:
    size = 2**bits
    if values.ndim != 1 or values.size != size:
        raise TableError(f"a {bits}-bit table needs {size} entries, got shape {values.shape}")
    if values[0] != 0 or values[-1] != granularity:
        raise TableError(f"a table must run from 0 to g={granularity}, got first {values[0]} and last {values[-1]}")
    steps = np.diff(values)
    if np.any(steps < 0):
        j = int(np.argmax(steps < 0))
        raise TableError(f"table is not increasing: entry {j + 1} ({values[j + 1]}) < entry {j} ({values[j]})")
    mirror = values + values[::-1]
    if np.any(mirror != granularity):
        j = int(np.argmax(mirror != granularity))
        raise TableError(
            f"table is not symmetric: v[{j}] + v[{size - 1 - j}] = {mirror[j]}, must equal g={granularity}"
        )


@dataclass(frozen=True, eq=False)
class Table:
    """A validated THC lookup table (read-only).

    values: int64 array of 2**bits table values in 0..granularity; clip: the two-sided clip probability p;
    threshold: T; inc: the value of one table unit in normalised coordinates, 2T/g; kind: how it was made.
    """

    values: np.ndarray
    bits: int
    granularity: int
    clip: float
    kind: str = "custom"
    threshold: float = field(init=False)
    inc: float = field(init=False)

    def __post_init__(self) -> None:
        check_bits(self.bits)
        check_granularity(self.granularity)
        object.__setattr__(self, "clip", parse_probability(self.clip))
        raw = np.asarray(self.values)
        if raw.dtype.kind not in "iu" and not (
            raw.dtype.kind == "f" and np.all(np.isfinite(raw)) and np.all(raw == np.round(raw))
        ):
            raise TableError(f"table values must be integers, got dtype {raw.dtype}")
        values = raw.astype(np.int64)
        _validate_values(values, self.bits, self.granularity)
        values.setflags(write=False)
        object.__setattr__(self, "values", values)
        threshold = clip_threshold(self.clip)
        object.__setattr__(self, "threshold", threshold)
        object.__setattr__(self, "inc", 2.0 * threshold / self.granularity)

    @property
    def size(self) -> int:
        return 2**self.bits

    @property
    def levels(self) -> np.ndarray:
        """Normalised value of each entry, (v_j - g/2) * inc, in [-T, T]."""
        return (self.values - self.granularity / 2.0) * self.inc

    def rounding_variance(self) -> float:
        """Expected rounding variance per coordinate of N(0,1) clipped to [-T, T] (the optimisation objective)."""
        return table_rounding_variance(self)

    def __repr__(self) -> str:
        vals = " ".join(str(int(v)) for v in self.values)
        return f"Table(kind={self.kind!r}, bits={self.bits}, g={self.granularity}, p={self.clip:g}, values=[{vals}])"


def table_rounding_variance(table: Table) -> float:
    lv = table.levels
    return float(np.sum(segment_cost(lv[:-1], lv[1:])))


def clipping_error(clip: float) -> float:
    """E[(z - clamp(z, -T, T))^2] for z ~ N(0,1): 2 ((1 + T^2) Q(T) - T phi(T))."""
    p = parse_probability(clip)
    t = clip_threshold(p)
    return float(2.0 * ((1.0 + t * t) * (p / 2.0) - t * _normal().pdf(t)))


@functools.lru_cache(maxsize=256)
def _cached_table(bits: int, granularity: int, clip: float, kind: str) -> Table:
    if kind == "optimal":
        values = optimal_values(bits, granularity, clip)
    else:
        values = uniform_values(bits, granularity)
    return Table(values=values, bits=bits, granularity=granularity, clip=clip, kind=kind)


def make_table(
    bits: int = 4,
    granularity: int = 30,
    clip: float | str = 1 / 32,
    kind: str = "optimal",
) -> Table:
    """The ``kind`` ("optimal" or "uniform") table for b bits, granularity g and clip probability p.

    Computed once per process and cached: b=4, g=30, p=1/32 gives 0 3 5 7 9 11 13 14 16 17 19 21 23 25 27 30.
    """
    check_bits(bits)
    check_granularity(granularity)
    p = parse_probability(clip)
    if kind not in TABLE_KINDS:
        raise ConfigError(f"table kind {kind!r} unknown: use one of {', '.join(TABLE_KINDS)}")
    return _cached_table(bits, granularity, p, kind)


def table_from_values(values: Sequence[int], clip: float | str, granularity: int | None = None) -> Table:
    """A custom table from explicit values (validated); b and g are read from the values unless g is given."""
    arr = np.asarray(values)
    size = arr.size
    bits = int(math.log2(size)) if size > 0 else 0
    if size == 0 or 2**bits != size:
        raise TableError(f"a table needs 2**b entries for some b in 1..8, got {size}")
    g = int(arr[-1]) if granularity is None else granularity
    return Table(values=arr, bits=bits, granularity=g, clip=parse_probability(clip), kind="custom")
