"""THCCompressor's handle on codec.c: one table's constants, a tensor's chunks and the random streams' keys
as the structs and arrays the C reads, and its two calls, encode and decode of a whole tensor.

The streams are numpy's SeedSequence(seed, spawn_key=prefix + (chunk,)) seeding PCG64, hashed in C from
the key's words (key_words); the C appends the chunk. Scratch buffers come from the caller's Workspace,
so compressors that run one at a time share them, as they share the numpy path's.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import torch

from native_build import address_of

from .. import parallel
from ..chunking import Chunk
from ..errors import AggregationError
from ..quantize import TableQuantizer
from ..workspace import Workspace
from . import Chunks, Job

__all__ = ["NativeCodec", "key_words"]


def _words(value: int) -> list[int]:
    """numpy's 32-bit words of a non-negative integer, least significant first (0 is one word)."""
    out = [value & 0xFFFFFFFF]
    value >>= 32
    while value:
        out.append(value & 0xFFFFFFFF)
        value >>= 32
    return out


def key_words(entropy: int, prefix: tuple[int, ...]) -> np.ndarray:
    """SeedSequence(entropy, spawn_key=prefix + (i,)).get_assembled_entropy() without the words of i:
    the entropy's words zero-padded to the pool of 4 (a spawn key follows), then each key entry's."""
    words = _words(entropy)
    words += [0] * (4 - len(words))
    for k in prefix:
        words += _words(k)
    return np.array(words, dtype=np.uint32)


class _Plan:
    """A tensor's chunks as struct thc_chunks, and the widest one (what the scratch buffers must hold)."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.start = np.array([c.start for c in chunks], dtype=np.int64)
        self.length = np.array([c.length for c in chunks], dtype=np.int64)
        self.padded = np.array([c.padded for c in chunks], dtype=np.int64)
        self.widest = int(self.padded.max())
        self.struct = Chunks(len(chunks), address_of(self.start), address_of(self.length), address_of(self.padded))
        self.ref = ctypes.byref(self.struct)
        self._offsets: tuple[tuple[int, ...], np.ndarray] | None = None

    def offsets_for(self, spans: Sequence[int]) -> np.ndarray:
        """Byte offsets of each chunk's int32 sums when chunk c takes spans[c] sums (kept for the last spans)."""
        key = tuple(spans)
        if self._offsets is None or self._offsets[0] != key:
            starts = np.concatenate([[0], np.cumsum(key)[:-1]]).astype(np.uintp) * np.uintp(4)
            self._offsets = (key, starts)
        return self._offsets[1]


class NativeCodec:
    """codec.c for one table: encode and decode a tensor's chunks (THC's transform and quantizer, CPU)."""

    def __init__(self, lib: ctypes.CDLL, quantizer: TableQuantizer) -> None:
        table = quantizer.table
        self.lib = lib
        self.bits = table.bits
        self._lut = np.ascontiguousarray(quantizer.coefficients, dtype=np.float32)
        self._values = np.ascontiguousarray(table.values, dtype=np.int32)
        g = table.granularity
        self.job = Job(
            granularity=g,
            last=table.size - 1,
            bits=table.bits,
            inc=table.inc,
            half_g_inc=g / 2.0 * table.inc,
            shift=float(np.float32(g / 2.0)),
            g32=float(np.float32(g)),
            lut=address_of(self._lut),
            values=address_of(self._values),
        )
        self._job = ctypes.byref(self.job)
        self._plans: dict[int, _Plan] = {}

    def plan(self, chunks: Sequence[Chunk]) -> _Plan:
        numel = chunks[-1].stop
        plan = self._plans.get(numel)
        if plan is None:
            if len(self._plans) >= 64:  # a caller of many sizes: forget them rather than grow
                self._plans.clear()
            plan = self._plans[numel] = _Plan(chunks)
        return plan

    @staticmethod
    def _scratch(ws: Workspace, plan: _Plan) -> tuple[int, int, int]:
        """Addresses of work (floats), idx (bytes) and signs (64-bit words) for the widest chunk."""
        d = plan.widest
        work = ws.get("native.work", d).data_ptr()
        idx = ws.get("native.idx", d, torch.uint8).data_ptr()
        signs = ws.get("native.signs", (d + 63) // 64, torch.int64).data_ptr()
        return work, idx, signs

    def encode(
        self,
        chunks: Sequence[Chunk],
        v: torch.Tensor,
        max_norms: np.ndarray,
        sign_key: np.ndarray,
        round_key: np.ndarray,
        ws: Workspace,
        indices: np.ndarray | None = None,
        packed: np.ndarray | None = None,
        per_packet: int = 1,
        memory: torch.Tensor | None = None,
    ) -> None:
        """codec.c thc_encode of v (flat float32, CPU) into any of: indices (uint8, the chunks' padded
        lengths one after another), packed (b bits an index, each chunk padded to a multiple of
        per_packet), memory (float32 like v: v minus this worker's own decoded contribution)."""
        plan = self.plan(chunks)
        work, idx, signs = self._scratch(ws, plan)
        m = np.ascontiguousarray(max_norms, dtype=np.float64)
        self.lib.thc_encode(
            self._job,
            plan.ref,
            address_of(sign_key),
            sign_key.size,
            address_of(round_key),
            round_key.size,
            address_of(m),
            v.data_ptr(),
            None if indices is None else address_of(indices),
            None if packed is None else address_of(packed),
            per_packet,
            None if memory is None else memory.data_ptr(),
            work,
            idx,
            signs,
        )

    def decode(
        self,
        chunks: Sequence[Chunk],
        sums: Sequence[np.ndarray],
        n: int | Sequence[np.ndarray],
        max_norms: np.ndarray,
        sign_key: np.ndarray,
        ws: Workspace,
        out: torch.Tensor,
    ) -> tuple[int, int] | None:
        """codec.c thc_decode of per-chunk integer sums into out (flat float32, CPU). n: one contributor count,
        or per chunk int64 per-coordinate counts. Returns None, or (chunk, coordinate) of the first sum that
        leaves [0, n g] (the caller words the error)."""
        arrays, width = _integer_rows(sums)
        pointers = np.array([address_of(a) for a in arrays], dtype=np.uintp)
        return self._decode(chunks, pointers, width, n, max_norms, sign_key, ws, out)

    def decode_flat(
        self,
        chunks: Sequence[Chunk],
        lanes: np.ndarray,
        spans: Sequence[int],
        n: int,
        max_norms: np.ndarray,
        sign_key: np.ndarray,
        ws: Workspace,
        out: torch.Tensor,
    ) -> tuple[int, int] | None:
        """decode of int32 sums laid out chunk after chunk in one contiguous array, chunk c's `spans[c]` long
        (its padded length rounded up to whole requests): the rows are pointers into it, no per-chunk array."""
        plan = self.plan(chunks)
        offsets = plan.offsets_for(spans)
        return self._decode(chunks, offsets + np.uintp(address_of(lanes)), 4, n, max_norms, sign_key, ws, out)

    def _decode(self, chunks, pointers: np.ndarray, width: int, n, max_norms, sign_key, ws, out):
        """thc_decode of rows of sums at `pointers` (each `width` bytes a sum)."""
        plan = self.plan(chunks)
        work, _, signs = self._scratch(ws, plan)
        piece = min(parallel.BLOCK, plan.widest)
        scratch = ws.get("native.means", piece, torch.float64).data_ptr()
        counts = None
        if not isinstance(n, int):
            counts = [np.ascontiguousarray(k, dtype=np.int64) for k in n]
            count_pointers = np.array([address_of(k) for k in counts], dtype=np.uintp)
        m = np.ascontiguousarray(max_norms, dtype=np.float64)
        bad = np.zeros(2, dtype=np.int64)
        failed = self.lib.thc_decode(
            self._job,
            plan.ref,
            address_of(sign_key),
            sign_key.size,
            address_of(m),
            address_of(pointers),
            width,
            n if counts is None else 1,
            None if counts is None else address_of(count_pointers),
            parallel.BLOCK,
            out.data_ptr(),
            work,
            scratch,
            signs,
            address_of(bad),
        )
        return (int(bad[0]), int(bad[1])) if failed else None


def _integer_rows(sums: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """The sums as contiguous int32 rows (4) when they all are, else as int64 rows (8). Any integer dtype
    converts without changing a value's order against [0, n g]: uint64 beyond int64 wraps negative, which
    the C reads as unsigned, i.e. out of range, as the reference's unsigned view does."""
    if all(a.dtype == np.int32 and a.flags.c_contiguous for a in sums):
        return list(sums), 4
    rows = []
    for a in sums:
        if a.dtype.kind not in "iu":
            raise AggregationError(f"sums must be integers, got dtype {a.dtype}")
        rows.append(np.ascontiguousarray(a.view(np.int64) if a.dtype == np.uint64 else a, dtype=np.int64))
    return rows, 8
