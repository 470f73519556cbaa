"""Unbiased stochastic rounding of grid positions onto a THC table.

A coordinate at grid position u in [0, g] (u = y/inc + g/2) lies between two consecutive table values
v_j <= u <= v_{j+1}; it becomes index j+1 with probability (u - v_j)/(v_{j+1} - v_j), else j, so that
E[v_index] = u exactly. With F the piecewise-linear map F(v_j) = j, that is index = floor(F(u) + r) for one
uniform r. Table values are integers, so F is linear on every unit cell [k, k+1]: F(u) = A[k] + B[k] u,
with (A, B) read from a (g+1)-entry lookup indexed by k = floor(u). No search, one gather.

Work proceeds in blocks of 2^17 coordinates so that the temporaries stay in cache. Each block draws its
uniforms from the chunk's PCG64 stream advanced to the block's offset, so the indices depend only on the
seed, never on the block size.
"""

from __future__ import annotations

import numpy as np

from .tables import Table

__all__ = ["TableQuantizer", "BLOCK"]

BLOCK = 2**17


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
            j = int(np.searchsorted(values, cell, side="right")) - 1
            j = min(j, size - 2)
            width = float(values[j + 1] - values[j])
            lut[k, 0] = j - values[j] / width  # A: F(u) = A + B u
            lut[k, 1] = 1.0 / width  # B
        self._lut = np.ascontiguousarray(lut).view(np.float64).reshape(g + 1)
        self._cell_dtype = np.uint8 if g <= 255 else np.uint16
        self._last = size - 1

    def quantize_(self, u: np.ndarray, seed: np.random.SeedSequence, out: np.ndarray | None = None) -> np.ndarray:
        """Indices for the grid positions ``u`` (float32, 1-D; clipped to [0, g] and overwritten in place).

        ``seed`` fixes the uniforms: the same seed gives the same indices, whatever the block size.
        """
        n = u.size
        if out is None:
            out = np.empty(n, dtype=np.uint8)
        block = min(BLOCK, n)
        cells = np.empty(block, dtype=self._cell_dtype)
        pairs = np.empty(block, dtype=np.float64)
        uniforms = np.empty(block, dtype=np.float32)
        g = float(self.table.granularity)
        for start in range(0, n, block):
            stop = min(start + block, n)
            m = stop - start
            ub, kb, ab, rb = u[start:stop], cells[:m], pairs[:m], uniforms[:m]
            np.clip(ub, 0.0, g, out=ub)
            np.copyto(kb, ub, casting="unsafe")  # floor, since ub >= 0
            np.take(self._lut, kb, out=ab)
            coef = ab.view(np.float32).reshape(m, 2)
            np.multiply(ub, coef[:, 1], out=ub)
            np.add(ub, coef[:, 0], out=ub)
            bitgen = np.random.PCG64(seed)
            bitgen.advance((start + 1) // 2)  # float32 uniforms use 32 of each 64-bit draw
            np.random.Generator(bitgen).random(m, dtype=np.float32, out=rb)
            np.add(ub, rb, out=ub)
            ob = out[start:stop]
            np.copyto(ob, ub, casting="unsafe")
            np.minimum(ob, self._last, out=ob)  # guards F + r rounding up to 2^b in float32
        return out
