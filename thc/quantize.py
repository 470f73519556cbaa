"""Unbiased stochastic rounding of grid positions onto a THC table.

A coordinate at grid position u in [0, g] (u = y/inc + g/2) lies between two consecutive table values
v_j <= u <= v_{j+1}; it becomes index j+1 with probability (u - v_j)/(v_{j+1} - v_j), else j, so that
E[v_index] = u exactly. With F the piecewise-linear map F(v_j) = j, that is index = floor(F(u) + r) for one
uniform r. Table values are integers, so F is linear on every unit cell [k, k+1]: F(u) = A[k] + B[k] u,
with (A, B) read from a (g+1)-entry lookup indexed by k = floor(u). No search, one gather.

Work proceeds in blocks (thc.parallel) so that the temporaries stay in cache and the blocks can run on
several threads. Each block draws its uniforms from the chunk's PCG64 stream advanced to the block's
offset, so the indices depend only on the seed, never on the block size or the thread count. A block
holds several short segments whole (each with its own scale and stream), so that small chunks do not
pay a dozen numpy calls each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.random.bit_generator import ISeedSequence

from . import parallel
from .tables import Table

__all__ = ["TableQuantizer"]


class TableQuantizer:
    """Rounds float32 grid positions to table indices (uint8), unbiased, with a caller-supplied stream."""

    def __init__(self, table: Table) -> None:
        self.table = table
        g = table.granularity
        values = table.values
        size = table.size
        lut = np.zeros((g + 1, 2), dtype=np.float32)
        for k in range(g + 1):
            cell = min(k, g - 1)  # u = g belongs to the last cell [g-1, g]
            # the segment covering [cell, cell+1]: largest j with v_j <= cell, then v_{j+1} >= cell+1
            j = min(int(np.searchsorted(values, cell, side="right")) - 1, size - 2)
            width = float(values[j + 1] - values[j])
            lut[k, 0] = j - values[j] / width  # A: F(u) = A + B u
            lut[k, 1] = 1.0 / width  # B
        self._lut = np.ascontiguousarray(lut).view(np.float64).reshape(g + 1)
        self._last = size - 1

    @property
    def coefficients(self) -> np.ndarray:
        """Per unit cell k = 0..g of the grid, (A, B) with F(u) = A + B u: float32, shape (g + 1, 2)."""
        return self._lut.view(np.float32).reshape(-1, 2)

    def quantize_(
        self,
        u: np.ndarray,
        seeds: ISeedSequence | Sequence[ISeedSequence],
        out: np.ndarray | None = None,
        segment: int | None = None,
        scales: Sequence[float] | np.ndarray | None = None,
        shift: float = 0.0,
    ) -> np.ndarray:
        """Table indices for ``u`` (float32, 1-D, overwritten in place).

        u is cut into segments of ``segment`` entries (one per chunk; default: one segment). Segment c is
        mapped to grid positions u * scales[c] + shift (default scale 1), clipped to [0, g], and rounded with
        uniforms from seeds[c]: the same seeds give the same indices, whatever the blocking or threading.
        """
        n = u.size
        segment = n if segment is None else segment
        if isinstance(seeds, ISeedSequence):
            seeds = [seeds]
        count = -(-n // segment) if n else 0
        if len(seeds) != count or (scales is not None and len(scales) != count):
            raise ValueError(f"{count} segments need {count} seeds and scales")
        if out is None:
            out = np.empty(n, dtype=np.uint8)
        g, shift32 = np.float32(self.table.granularity), np.float32(shift)
        lut, last = self._lut, np.float32(self._last)
        scales32 = None if scales is None else np.asarray(scales, dtype=np.float32)
        if segment < parallel.BLOCK and n % segment == 0:
            block = segment * (parallel.BLOCK // segment)  # whole short segments
        else:
            block = min(parallel.BLOCK, segment)  # within one segment

        def block_fn(start: int, stop: int) -> None:
            m = stop - start
            first = start // segment
            ub = u[start:stop]
            if scales32 is not None:
                if m <= segment:
                    np.multiply(ub, scales32[first], out=ub)
                else:  # whole segments, one scale per row
                    rows = ub.reshape(-1, segment)
                    np.multiply(rows, scales32[first : first + len(rows), None], out=rows)
            if shift:
                np.add(ub, shift32, out=ub)
            np.minimum(np.maximum(ub, 0.0, out=ub), g, out=ub)  # np.clip, without its Python wrapper
            cells = ub.astype(np.intp)  # floor, since ub >= 0; numpy gathers fastest with intp indices
            coef = np.take(lut, cells).view(np.float32).reshape(m, 2)
            np.multiply(ub, coef[:, 1], out=ub)
            np.add(ub, coef[:, 0], out=ub)
            # uniforms in [0, 1) with 24 bits, exactly numpy's Generator.random(dtype=float32) for this stream
            # (low then high 32 bits of each 64-bit draw, >> 8, * 2^-24), made without its per-number call
            raw = _draws(seeds, segment, start, stop)
            np.right_shift(raw, 8, out=raw)
            uniform = np.multiply(raw, np.float32(2.0**-24), dtype=np.float32, casting="unsafe")
            np.add(ub, uniform, out=ub)
            # F + r can round up to 2^b in float32; clamped before the cast, where 256 would wrap to 0 (b = 8)
            np.minimum(ub, last, out=ub)
            np.copyto(out[start:stop], ub, casting="unsafe")

        parallel.for_blocks(n, block_fn, block=block)
        return out


def _draws(seeds: Sequence[ISeedSequence], segment: int, start: int, stop: int) -> np.ndarray:
    """32-bit draws for coordinates [start, stop): each segment's from its own stream, advanced to the offset."""
    first, offset = divmod(start, segment)
    if stop - start <= segment:
        bitgen = np.random.PCG64(seeds[first])
        bitgen.advance(offset // 2)  # offsets are even: each 64-bit draw feeds two coordinates
        return bitgen.random_raw((stop - start + 1) // 2).view(np.uint32)[: stop - start]
    raw = np.empty(stop - start, dtype=np.uint32)  # whole segments
    half = (segment + 1) // 2
    for i, at in enumerate(range(0, stop - start, segment)):
        raw[at : at + segment] = np.random.PCG64(seeds[first + i]).random_raw(half).view(np.uint32)[:segment]
    return raw
