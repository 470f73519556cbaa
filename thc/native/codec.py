"""THCCompressor's handle on codec.c: one table's constants, a tensor's chunks and the random streams' keys
as the structs and arrays the C reads, and its two calls, encode and decode of a whole tensor.

The streams are numpy's SeedSequence(seed, spawn_key=prefix + (chunk,)) seeding PCG64, hashed in C from
the key's words (key_words); the C appends the chunk. Scratch buffers come from the caller's Workspace,
so compressors that run one at a time share them, as they share the numpy path's.
"""

from __future__ import annotations

import ctypes
import functools
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

__all__ = ["KeySlot", "NativeCodec", "NormRefused", "key_words"]


def _words(value: int) -> list[int]:
    """numpy's 32-bit words of a non-negative integer, least significant first (0 is one word)."""
    out = [value & 0xFFFFFFFF]
    value >>= 32
    while value:
        out.append(value & 0xFFFFFFFF)
        value >>= 32
    return out


@functools.lru_cache(maxsize=16)
def _entropy_words(entropy: int) -> tuple[int, ...]:
    """The entropy's words zero-padded to the pool of 4 (one seed per job: computed once)."""
    words = _words(entropy)
    return (*words, *[0] * (4 - len(words)))


def key_words(entropy: int, prefix: tuple[int, ...]) -> np.ndarray:
    """SeedSequence(entropy, spawn_key=prefix + (i,)).get_assembled_entropy() without the words of i:
    the entropy's words zero-padded to the pool of 4 (a spawn key follows), then each key entry's."""
    if prefix and 0 <= min(prefix) and max(prefix) <= 0xFFFFFFFF:  # the usual case: one word each
        return np.array((*_entropy_words(entropy), *prefix), dtype=np.uint32)
    words = list(_entropy_words(entropy))
    for k in prefix:
        words += _words(k)
    return np.array(words, dtype=np.uint32)


class KeySlot:
    """key_words of one stream family at a time, as codec.c takes them (address, size), in a buffer that is
    rewritten for each call: fill(prefix) puts the prefix's words after the entropy's. A prefix of another
    length or with an entry of more than one word gets an array of its own (kept until the next fill)."""

    __slots__ = ("_entropy", "_words", "_lead", "_at", "_own", "_prefix", "address", "size")

    def __init__(self, entropy: int, entries: int) -> None:
        lead = _entropy_words(entropy)
        self._entropy, self._lead = entropy, len(lead)
        self._words = np.zeros(len(lead) + entries, dtype=np.uint32)
        self._words[: len(lead)] = lead
        self._at = address_of(self._words)
        self._own: np.ndarray | None = None
        self._prefix: tuple[int, ...] | None = None  # what the words hold now
        self.address, self.size = self._at, self._words.size

    def fill(self, prefix: tuple[int, ...]) -> KeySlot:
        if prefix == self._prefix:  # a round's decode after its encode: the words are these already
            return self
        if len(prefix) == self._words.size - self._lead and 0 <= min(prefix) and max(prefix) <= 0xFFFFFFFF:
            self._words[self._lead :] = prefix
            self.address, self.size = self._at, self._words.size
        else:
            self._own = key_words(self._entropy, prefix)
            self.address, self.size = address_of(self._own), self._own.size
        self._prefix = tuple(prefix)
        return self


class _Plan:
    """A tensor's chunks as struct thc_chunks, and the widest one (what the scratch buffers must hold); the
    addresses of the scratch buffers in the last workspace asked, while it keeps them (Workspace.generation)."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.start = np.array([c.start for c in chunks], dtype=np.int64)
        self.length = np.array([c.length for c in chunks], dtype=np.int64)
        self.padded = np.array([c.padded for c in chunks], dtype=np.int64)
        self.widest = int(self.padded.max())
        self.struct = Chunks(len(chunks), address_of(self.start), address_of(self.length), address_of(self.padded))
        self.ref = ctypes.addressof(self.struct)  # kept alive by self.struct
        self._offsets: tuple[tuple[int, ...], np.ndarray] | None = None
        self.rows = np.empty(len(chunks), dtype=np.uintp)  # the rows of sums thc_decode reads
        self.rows_at = address_of(self.rows)
        self._rows_of: tuple[tuple[int, ...], int] | None = None  # rows points into flat sums: (spans, base)
        self._scratch: tuple[Workspace, int, tuple[int, int, int, int]] | None = None

    def offsets_for(self, spans: Sequence[int]) -> np.ndarray:
        """Byte offsets of each chunk's int32 sums when chunk c takes spans[c] sums (kept for the last spans)."""
        key = spans if type(spans) is tuple else tuple(spans)
        if self._offsets is None or (self._offsets[0] is not key and self._offsets[0] != key):
            starts = np.concatenate([[0], np.cumsum(key)[:-1]]).astype(np.uintp) * np.uintp(4)
            self._offsets = (key, starts)
        return self._offsets[1]

    def point_rows(self, addresses: Sequence[int]) -> None:
        """rows = the given addresses (one per chunk)."""
        self.rows[:] = addresses
        self._rows_of = None

    def point_rows_into(self, spans: tuple[int, ...], base: int) -> None:
        """rows = the chunks' int32 sums laid out from address base, chunk c's spans[c] long; left as they are
        when they already point there (a caller's lanes buffer reused from round to round)."""
        kept = self._rows_of
        if kept is not None and kept[1] == base and (kept[0] is spans or kept[0] == tuple(spans)):
            return
        np.add(self.offsets_for(spans), np.uintp(base), out=self.rows)
        self._rows_of = (self._offsets[0], base)

    def scratch(self, ws: Workspace) -> tuple[int, int, int, int]:
        """Addresses of work (floats), idx (bytes), signs (64-bit words) for the widest chunk and means (float64,
        one summation piece), from ws; looked up again only when ws (re)allocated or cleared a buffer."""
        kept = self._scratch
        if kept is not None and kept[0] is ws and kept[1] == ws.generation:
            return kept[2]
        d = self.widest
        addresses = (
            ws.get("native.work", d).data_ptr(),
            ws.get("native.idx", d, torch.uint8).data_ptr(),
            ws.get("native.signs", (d + 63) // 64, torch.int64).data_ptr(),
            ws.get("native.means", min(parallel.BLOCK, d), torch.float64).data_ptr(),
        )
        self._scratch = (ws, ws.generation, addresses)  # the generation after the gets, which may have moved one
        return addresses


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
        self._job = ctypes.addressof(self.job)  # kept alive by self.job
        self._plans: dict[int, _Plan] = {}
        self._bad = np.zeros(2, dtype=np.int64)  # thc_decode's (chunk, coordinate) of a sum out of range
        self._bad_at = address_of(self._bad)
        self._norms: tuple[np.ndarray | None, int] = (None, 0)  # _norms_at's last array and its address

    def plan(self, chunks: Sequence[Chunk]) -> _Plan:
        numel = chunks[-1].stop
        plan = self._plans.get(numel)
        if plan is None:
            if len(self._plans) >= 64:  # a caller of many sizes: forget them rather than grow
                self._plans.clear()
            plan = self._plans[numel] = _Plan(chunks)
        return plan

    def _norms_at(self, max_norms: np.ndarray | torch.Tensor) -> tuple[int, int]:
        """The address of the max norms and their width (4: float32, 8: float64). A tensor (1-D, contiguous,
        float32 or float64 on the CPU: see THCCompressor._direct_norms) is read where it is. An array is read
        as contiguous float64; a round's encode and decode pass the same such array (the compressor's checked
        norms): its address is looked up once, and it is kept, so that the address stays valid (the C reads
        its values as they are at the call). A converted copy is found again only as itself, i.e. never."""
        if isinstance(max_norms, torch.Tensor):
            return max_norms.data_ptr(), max_norms.element_size()
        if max_norms is not self._norms[0]:
            m = np.ascontiguousarray(max_norms, dtype=np.float64)
            self._norms = (m, address_of(m))
        return self._norms[1], 8

    def encode(
        self,
        chunks: Sequence[Chunk],
        v: torch.Tensor,
        max_norms: np.ndarray,
        sign_key: KeySlot,
        round_key: KeySlot,
        ws: Workspace,
        indices: np.ndarray | None = None,
        packed: np.ndarray | None = None,
        per_packet: int = 1,
        memory: torch.Tensor | None = None,
        own: torch.Tensor | None = None,
    ) -> None:
        """codec.c thc_encode of v (flat float32, CPU) into any of: indices (uint8, the chunks' padded
        lengths one after another), packed (b bits an index, each chunk padded to a multiple of
        per_packet), memory (float32 like v: v minus this worker's own decoded contribution).
        max_norms: checked float64 norms, or a tensor the C checks (finite, non-negative, and with `own`, this
        worker's contiguous float32 norms, not below them): NormRefused if it refuses one, nothing written."""
        plan = self.plan(chunks)
        work, idx, signs, _ = plan.scratch(ws)
        norms, width = self._norms_at(max_norms)
        refused = self.lib.thc_encode(
            self._job,
            plan.ref,
            sign_key.address,
            sign_key.size,
            round_key.address,
            round_key.size,
            norms,
            width,
            None if own is None else own.data_ptr(),
            v.data_ptr(),
            None if indices is None else address_of(indices),
            None if packed is None else address_of(packed),
            per_packet,
            None if memory is None else memory.data_ptr(),
            work,
            idx,
            signs,
        )
        if refused:
            raise NormRefused(refused - 1)

    def decode(
        self,
        chunks: Sequence[Chunk],
        sums: Sequence[np.ndarray],
        n: int | Sequence[np.ndarray],
        max_norms: np.ndarray,
        sign_key: KeySlot,
        ws: Workspace,
        out: torch.Tensor,
    ) -> tuple[int, int] | None:
        """codec.c thc_decode of per-chunk integer sums into out (flat float32, CPU). n: one contributor count,
        or per chunk int64 per-coordinate counts. Returns None, or (chunk, coordinate) of the first sum that
        leaves [0, n g] (the caller words the error)."""
        arrays, width = _integer_rows(sums)
        plan = self.plan(chunks)
        plan.point_rows([address_of(a) for a in arrays])
        return self._decode(plan, width, n, max_norms, sign_key, ws, out)

    def decode_flat(
        self,
        chunks: Sequence[Chunk],
        lanes: np.ndarray,
        spans: Sequence[int],
        n: int,
        max_norms: np.ndarray,
        sign_key: KeySlot,
        ws: Workspace,
        out: torch.Tensor,
    ) -> tuple[int, int] | None:
        """decode of int32 sums laid out chunk after chunk in one contiguous array, chunk c's `spans[c]` long
        (its padded length rounded up to whole requests): the rows are pointers into it, no per-chunk array."""
        plan = self.plan(chunks)
        plan.point_rows_into(spans, address_of(lanes))
        return self._decode(plan, 4, n, max_norms, sign_key, ws, out)

    def _decode(self, plan: _Plan, width: int, n, max_norms, sign_key: KeySlot, ws, out):
        """thc_decode of the rows of sums whose addresses are in plan.rows (each `width` bytes a sum)."""
        work, _, signs, scratch = plan.scratch(ws)
        counts = None
        if not isinstance(n, int):
            counts = [np.ascontiguousarray(k, dtype=np.int64) for k in n]
            count_pointers = np.array([address_of(k) for k in counts], dtype=np.uintp)
        norms, norm_width = self._norms_at(max_norms)
        failed = self.lib.thc_decode(
            self._job,
            plan.ref,
            sign_key.address,
            sign_key.size,
            norms,
            norm_width,
            plan.rows_at,
            width,
            n if counts is None else 1,
            None if counts is None else address_of(count_pointers),
            parallel.BLOCK,
            out.data_ptr(),
            work,
            scratch,
            signs,
            self._bad_at,
        )
        if failed == 2:
            raise NormRefused(int(self._bad[0]))
        return (int(self._bad[0]), int(self._bad[1])) if failed else None


class NormRefused(Exception):
    """codec.c refused a max norm of chunk `args[0]` (see NativeCodec.encode); the caller checks the norms
    itself, which words the error."""


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
