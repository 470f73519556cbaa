"""THC: Tensor Homomorphic Compression of one worker's gradient (NSDI'24), as three phases.

    prep = comp.prepare(grad, step)             # validate, add EF memory, chunk; prep.norms: one L2 norm per chunk
    M = <max over workers of prep.norms>        # the norm round, the only metadata
    idx = comp.encode(prep, M)                  # RHT, scale to N(0,1), clip at T, stochastic rounding -> b-bit indices
    S = <sum over workers of table.values[idx]> # integer sums in the network (thc.aggregate.reference_aggregate)
    avg = comp.decode(prep, S, n, M)            # inverse RHT of (S/n - g/2) inc M / sqrt(d): the average gradient

Split in phases because the network sits between them: the switch only sums table values, so everything else
happens here. The C codec (thc.native), where loaded, is bit for bit equal to the numpy path (its reference).
Every finite float32 gradient is encoded, however small or large: chunks are scaled by exact powers of two
(_exponents), so a gradient scaled by 2^k decodes to exactly 2^k times the same."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import direct, parallel
from .aggregate import check_counts, lane_bits_needed, reference_aggregate
from .chunking import Chunk, ChunkGroup, group_chunks, plan_chunks
from .config import THCConfig
from .errors import AggregationError, ConfigError
from .feedback import ErrorFeedback
from .hadamard import flip_signs_, fwht, sign_bit_rows, sign_mask, sign_masks, sign_stream_prefix
from .interface import Bits, Compressor, Prepared
from .intraop import one_thread_if_small
from .native import load as load_native
from .native.codec import KeySlot, NativeCodec, NormRefused
from .packing import pack_indices, packed_size
from .quantize import TableQuantizer
from .streams import spawn_seeds
from .validation import check_float32_scale, flatten_gradient, raise_if_not_finite
from .workspace import Workspace, empty_cpu

__all__ = ["THCCompressor", "THCPrepared"]

_ROUND_DOMAIN = 0x524F554E  # "ROUN": the rounding streams never share bits with the sign streams
_SAFE_NORM = 2.0**-32  # a float32 norm at least this large lost nothing to squares that underflowed
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_DIRECT_NORMS = (torch.float32, torch.float64)  # max norms codec.c reads as they are
_FEW = 64  # chunks: up to this many, a check of their norms is cheaper on Python floats than in numpy


def _exponents(m: np.ndarray) -> np.ndarray:
    """Per chunk, e such that M 2^-e lies in [0.5, 1) (0 for a zero norm): the scale encode and decode use."""
    return np.frexp(m)[1].astype(np.int64)


def _pow2_steps(e: int) -> list[float]:
    """Factors whose product is 2^e, each a normal float32 (2^e itself is not for |e| > 126)."""
    steps = []
    while e:
        step = max(-126, min(127, e))
        steps.append(2.0**step)
        e -= step
    return steps


def _scale_pow2_(x: torch.Tensor | np.ndarray, e: int) -> None:
    """x *= 2^e in place, exact unless the result leaves float32's range."""
    for factor in _pow2_steps(int(e)):
        if isinstance(x, np.ndarray):
            np.multiply(x, np.float32(factor), out=x)
        else:
            x.mul_(factor)


def _scale_rows_pow2_(x: np.ndarray, d: int, exps: np.ndarray) -> None:
    """x *= 2^e row by row: x (float32) holds len(exps) rows of d coordinates, or part of one row.

    The same products as _scale_pow2_ on each row, in one call when every factor is a single normal float32.
    """
    if len(exps) == 1:
        _scale_pow2_(x, int(exps[0]))
    elif exps.min() >= -126 and exps.max() <= 127:
        rows = x.reshape(len(exps), d)
        np.multiply(rows, np.ldexp(np.float32(1.0), exps.astype(np.int32))[:, None], out=rows)
    else:
        for i, e in enumerate(exps):
            _scale_pow2_(x[i * d : i * d + d], int(e))


def _flip_scale(src: np.ndarray, dst: np.ndarray, bits: np.ndarray, d: int, exps: np.ndarray, threads: bool) -> None:
    """dst[:len(src)] = D src 2^e for rows of d coordinates (uint32 views of float32 data).

    bits: the rows' packed signs (one row per chunk); exps: one e per row. Works block by block, so that
    the sign masks are expanded in cache and never stored whole; the blocks may run on several threads.
    """

    def block(start: int, stop: int) -> None:
        row, offset = divmod(start, d)
        if stop - start <= d - offset:  # within one row
            mask = sign_mask(bits[row][offset // 8 :], stop - start)
        else:  # whole rows
            mask = sign_masks(bits[row : row + (stop - start) // d], d)
        np.bitwise_xor(src[start:stop], mask, out=dst[start:stop])
        _scale_rows_pow2_(dst[start:stop].view(np.float32), d, exps[row : (stop - 1) // d + 1])

    size = parallel.BLOCK if d >= parallel.BLOCK else d * (parallel.BLOCK // d)
    if threads and src.size > size:
        parallel.for_blocks(src.size, block, block=size)
    else:  # first-touch page faults of a fresh output cost more from several threads than the pass itself
        for start in range(0, src.size, size):
            block(start, min(start + size, src.size))


def _native_codec(quantizer: TableQuantizer) -> NativeCodec | None:
    """codec.c bound to this table, or None where it is not loaded (THC_NATIVE=0, no C compiler)."""
    lib = load_native()
    return None if lib is None else NativeCodec(lib, quantizer)


def _scaled_norm(x: torch.Tensor) -> float:
    """L2 norm of x without losing scale: computed on x 2^-e, with 2^e the largest |x| rounded up (float64)."""
    top = float(x.abs().amax())
    if top == 0.0 or not math.isfinite(top):
        return top
    e = int(np.frexp(top)[1])
    y = x.clone()
    _scale_pow2_(y, -e)
    return math.ldexp(float(torch.linalg.vector_norm(y)), e)


def _direct_norms(prep: THCPrepared, max_norms, own: bool) -> torch.Tensor | None:
    """max_norms as codec.c can read and check them where they are (1-D, contiguous, float32 or float64,
    on the CPU, one per chunk; with `own`, this worker's norms float32 and contiguous too), else None:
    then _check_norms checks them."""
    if not (
        type(max_norms) is torch.Tensor
        and max_norms.dtype in _DIRECT_NORMS
        and max_norms.is_cpu
        and max_norms.dim() == 1
        and max_norms.numel() == len(prep.chunks)
        and max_norms.is_contiguous()
    ):
        return None
    norms = prep.norms
    if own and not (norms.dtype == torch.float32 and norms.is_cpu and norms.is_contiguous()):
        return None
    return max_norms


def _check_index(name: str, value: object) -> int:
    if type(value) is int and value >= 0:  # the usual case, at once
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"{name}={value!r} must be a non-negative integer")
    return int(value)


@dataclass
class THCPrepared(Prepared):
    """A gradient ready for THC encoding. ``norms`` (= ``stats``) go to the max round: L2 norms, or for
    TernGrad the largest |x| after clipping (its clip bounds are in ``extra["bounds"]``)."""

    key: int = 0

    @property
    def norms(self) -> torch.Tensor:
        return self.stats


class THCCompressor(Compressor):
    """One worker's THC encoder and decoder.

    config: the job's :class:`THCConfig` (identical on all workers). worker_id: this worker's rank; it
    selects an independent rounding stream (derived from seed and worker_id with numpy's SeedSequence), so
    the workers' rounding errors are independent and their average error shrinks like 1/n.
    Not thread-safe (it reuses scratch buffers); use one per thread. workspace: scratch buffers to share
    with other compressors that run one at a time (e.g. one per DDP bucket); by default its own.
    """

    summable = True

    def __init__(self, config: THCConfig | None = None, worker_id: int = 0, workspace: Workspace | None = None) -> None:
        self.config = config if config is not None else THCConfig()
        if not isinstance(self.config, THCConfig):
            raise ConfigError(f"config must be a THCConfig, not {type(self.config).__name__}")
        self.worker_id = _check_index("worker_id", worker_id)
        self.table = self.config.make_table()
        self.quantizer = TableQuantizer(self.table)
        self.feedback = ErrorFeedback() if self.config.error_feedback else None
        self._ws = workspace if workspace is not None else Workspace()
        self._plans: dict[int, tuple[tuple[Chunk, ...], tuple[ChunkGroup, ...]]] = {}
        self._layouts: dict[tuple[int, int, int], tuple[tuple[int, ...], int, int]] = {}
        self.ternary = self.config.quantizer == "terngrad"
        self._native = _native_codec(self.quantizer) if not self.ternary and self.config.transform else None
        # the codec's stream keys, rewritten for each call: (domain, key, step) and (domain, worker, key, step)
        self._sign_slot, self._round_slot = KeySlot(self.config.seed, 3), KeySlot(self.config.seed, 4)
        if self.ternary:
            self.name = "TernGrad-switch"
        else:
            kind = self.table.kind
            self.name = f"THC-{kind} b={self.table.bits} g={self.table.granularity}"
            self.name += "" if self.config.transform else " no-RHT"

    @property
    def native(self) -> bool:
        """Whether encode and decode of CPU tensors run in the C codec (thc.native) rather than in numpy."""
        return self._native is not None

    # ----------------------------------------------------------------------------------------- phases
    def prepare(self, grad: torch.Tensor, step: int, key: int = 0) -> THCPrepared:
        """Validate (NaN/Inf, empty, dtype), add the EF memory, flatten and chunk; compute the chunk norms.

        step: the round number (all workers must agree; it refreshes the Hadamard signs). key: which tensor
        of the round this is (e.g. a DDP bucket index), so that tensors of one round get distinct signs.
        """
        step = _check_index("step", step)
        key = _check_index("key", key)
        flat = flatten_gradient(grad)
        with one_thread_if_small(flat.numel(), flat.device):
            v = self.feedback.compensate(flat) if self.feedback is not None else flat
            chunks = list(self._plan(v.numel())[0])
            norms, plain = self._measured_norms(v, chunks)
            if not plain and not np.isfinite(norms.numpy()).all():  # plain norms are finite
                raise_if_not_finite(grad, v, flat)
            if grad.dtype == torch.float64:
                check_float32_scale(grad, chunks, norms if v is flat else self._chunk_norms(flat, chunks))
            extra = {}
            if self.ternary:
                norms, extra["bounds"] = direct.ternary_scales(v, chunks, self.table.threshold)
        return THCPrepared(
            shape=grad.shape,
            dtype=grad.dtype,
            device=grad.device,
            numel=v.numel(),
            step=step,
            chunks=chunks,
            stats=norms,
            data=v,
            extra=extra,
            key=key,
        )

    def encode(
        self, prep: THCPrepared, max_norms: torch.Tensor | Sequence[float], partial: bool = False
    ) -> list[np.ndarray]:
        """Table indices (uint8, one array of padded length per chunk) for this worker's contribution.

        max_norms: per chunk, the maximum of all workers' ``prep.norms``. With error feedback on, the memory
        becomes v minus this worker's own decoded contribution. ``partial``: the maximum came from a norm
        round that was released without some workers (partial aggregation), so it may lie below this
        worker's own norm; its coordinates are then clipped to the table's range like any outlier.
        """
        m = self._check_norms(prep, max_norms, own=not partial)
        if self._native_for(prep) is not None:
            flat = np.empty(sum(c.padded for c in prep.chunks), dtype=np.uint8)
            self._encode_native(prep, m, indices=flat)
            return np.split(flat, np.cumsum([c.padded for c in prep.chunks[:-1]])) if len(prep.chunks) > 1 else [flat]
        with one_thread_if_small(prep.numel, prep.data.device):
            indices = self._transformed_indices(prep, m) if self.config.transform else self._direct_indices(prep, m)
            if self.feedback is not None:
                own = [np.take(self.table.values, idx) for idx in indices]
                self.feedback.update(prep.data, self._decode_flat(prep, own, 1, m))
            return indices

    def encode_packed(
        self,
        prep: THCPrepared,
        max_norms: torch.Tensor | Sequence[float],
        out: np.ndarray,
        per_packet: int,
        partial: bool = False,
    ) -> list[int]:
        """encode, with the indices written packed into ``out`` as THC requests carry them: b bits each, the
        first coordinate in the high bits (b = 4: two a byte, high nibble first; thc.packing), each chunk's
        padded indices followed by index 0 up to a multiple of ``per_packet`` (host_agent.operation's
        pack_indices layout, which puts per_packet indices in one request).

        out: writable 1-D uint8 with at least packed_bytes(prep, per_packet) bytes; per_packet * b must be a
        multiple of 8, so that every chunk starts on a byte. Returns the chunks' padded lengths (the sums'
        lengths that decode_lanes takes back). Error feedback is updated as by encode.
        """
        spans, _, need = self._check_layout(prep, per_packet)
        if not (isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.ndim == 1 and out.flags.writeable):
            raise AggregationError("out must be a writable 1-D uint8 numpy array")
        if not out.flags.c_contiguous or out.size < need:
            raise AggregationError(f"out must be contiguous with at least {need} bytes, got {out.size}")
        if self._native_for(prep) is not None:
            own = not partial
            direct = _direct_norms(prep, max_norms, own)
            if direct is not None:  # the usual case: codec.c checks them as it reads them
                try:
                    self._encode_native(prep, direct, packed=out, per_packet=per_packet, own=own)
                    return [c.padded for c in prep.chunks]
                except NormRefused:
                    pass  # _check_norms words the error
            self._encode_native(prep, self._check_norms(prep, max_norms, own=own), packed=out, per_packet=per_packet)
        else:  # encode checks the norms
            at = 0
            for idx, span in zip(self.encode(prep, max_norms, partial=partial), spans):
                padded = np.zeros(span, dtype=np.uint8)
                padded[: idx.size] = idx
                size = packed_size(span, self.table.bits)
                out[at : at + size] = pack_indices(padded, self.table.bits)
                at += size
        return [c.padded for c in prep.chunks]

    def packed_bytes(self, prep: THCPrepared, per_packet: int) -> int:
        """Bytes encode_packed writes for this gradient with per_packet indices a request."""
        return self._check_layout(prep, per_packet)[2]

    def _check_layout(self, prep: THCPrepared, per_packet: int) -> tuple[tuple[int, ...], int, int]:
        """Each chunk's coordinates in requests of per_packet (its padded length rounded up), their total and
        the bytes they take packed; computed once per chunking (size and first chunk's length) and per_packet."""
        if isinstance(per_packet, bool) or not isinstance(per_packet, (int, np.integer)) or per_packet < 1:
            raise AggregationError(f"per_packet={per_packet!r} must be a positive integer")
        key = (prep.numel, prep.chunks[0].length, int(per_packet))
        layout = self._layouts.get(key)
        if layout is None:
            if per_packet * self.table.bits % 8:
                raise AggregationError(
                    f"per_packet={per_packet} indices of {self.table.bits} bits do not fill whole bytes"
                )
            if len(self._layouts) >= 64:  # a caller of many sizes: forget them rather than grow
                self._layouts.clear()
            spans = tuple(-(-c.padded // per_packet) * per_packet for c in prep.chunks)
            total = int(sum(spans))
            layout = self._layouts[key] = (spans, total, packed_size(total, self.table.bits))
        return layout

    def _native_for(self, prep: THCPrepared) -> NativeCodec | None:
        """The C codec when it is loaded and covers this call: THC's transform and quantizer on the CPU."""
        return self._native if self._native is not None and prep.data.is_cpu else None

    def _encode_native(
        self,
        prep: THCPrepared,
        m: np.ndarray | torch.Tensor,
        indices: np.ndarray | None = None,
        packed: np.ndarray | None = None,
        per_packet: int = 1,
        own: bool = False,
    ) -> None:
        """codec.c's encode into indices and/or packed; with error feedback, the new memory too. m: checked
        norms, or a tensor of _direct_norms (own: held to this worker's norms), which may raise NormRefused."""
        memory = empty_cpu(prep.numel) if self.feedback is not None else None
        self._native.encode(
            prep.chunks,
            prep.data,
            m,
            self._sign_key(prep),
            self._round_slot.fill(self._round_prefix(prep)),
            self._ws,
            indices=indices,
            packed=packed,
            per_packet=per_packet,
            memory=memory,
            own=prep.norms if own else None,
        )
        if memory is not None:
            self.feedback.keep(memory)

    def _sign_key(self, prep: THCPrepared) -> KeySlot:
        """The Hadamard signs' stream key of this gradient, for the codec call about to be made."""
        return self._sign_slot.fill(sign_stream_prefix(prep.step, prep.key))

    def _transformed_indices(self, prep: THCPrepared, m: np.ndarray) -> list[np.ndarray]:
        """THC's encode: the indices of H D v scaled by the max norms, one array per chunk."""
        table = self.table
        groups = self._plan(prep.numel)[1]
        signs = [self._sign_rows(prep, group) for group in groups]
        exps = _exponents(m)
        # y = H D v 2^-e / (M 2^-e); grid position u = y / inc + g/2 (a zero max norm means an all-zero chunk)
        scales = np.zeros_like(m)
        np.divide(1.0, np.ldexp(m, -exps) * table.inc, out=scales, where=m > 0)
        indices: list[np.ndarray] = []
        for group, bits in zip(groups, signs):
            rows = slice(group.chunks[0].index, group.chunks[0].index + group.count)
            flipped = self._flipped(prep.data, group, bits, exps[rows])
            u = self._ws.get("encode.u", group.size, torch.float32, flipped.device)
            fwht(flipped.view(group.count, group.padded), out=u.view(group.count, group.padded), workspace=self._ws)
            seeds = self._round_seeds(prep, group)
            idx = self.quantizer.quantize_(
                u.cpu().numpy(), seeds, segment=group.padded, scales=scales[rows], shift=table.granularity / 2.0
            )
            indices.extend(idx.reshape(group.count, group.padded))
        prep.extra["signs"] = signs
        return indices

    def _direct_indices(self, prep: THCPrepared, m: np.ndarray) -> list[np.ndarray]:
        """The indices of the coordinates as they are (no transform; thc.direct), from the same streams."""
        v = prep.data.detach().cpu().numpy()
        steps = self._steps(prep, m)
        bounds = prep.extra.get("bounds")
        indices: list[np.ndarray] = []
        for group in self._plan(prep.numel)[1]:
            u = direct.grid_positions(v, group, steps, self.table.granularity, bounds)
            idx = self.quantizer.quantize_(u, self._round_seeds(prep, group), segment=group.padded)
            indices.extend(idx.reshape(group.count, group.padded))
        return indices

    def _round_seeds(self, prep: THCPrepared, group: ChunkGroup) -> list:
        """The rounding streams of a group's chunks: this worker's own, per tensor, round and chunk."""
        return spawn_seeds(self.config.seed, self._round_prefix(prep), group.chunks[0].index, group.count)

    def _round_prefix(self, prep: THCPrepared) -> tuple[int, ...]:
        """The spawn key of this worker's rounding streams without the chunk: chunk c's is this + (c,)."""
        return (_ROUND_DOMAIN, self.worker_id, prep.key, prep.step)

    def _steps(self, prep: THCPrepared, m: np.ndarray) -> np.ndarray:
        """Per chunk, what one table unit is worth in the gradient's units without a transform (thc.direct):
        TernGrad's 2s/g, THC's inc M/sqrt(d)."""
        g = self.table.granularity
        if self.ternary:
            return 2.0 * m / g
        return self.table.inc * m / np.sqrt([c.padded for c in prep.chunks])

    def aggregate(self, payloads: Sequence[list[np.ndarray]]) -> list[np.ndarray]:
        """Reference aggregation of all workers' indices: per chunk, integer sums of table values."""
        return [reference_aggregate([p[c] for p in payloads], self.table) for c in range(len(payloads[0]))]

    def decode(
        self,
        prep: THCPrepared,
        sums: Sequence[np.ndarray],
        contributors: int | Sequence[np.ndarray],
        max_norms: torch.Tensor | Sequence[float],
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The average of the ``contributors`` workers' gradients, shaped and typed like the gradient.

        sums: per chunk, integer sums of table values (any integer dtype), as the aggregator returned them.
        Fewer contributors than workers (partial aggregation) is fine: the sums are divided by their count.
        contributors: one count for every coordinate, or per chunk an integer array of per-coordinate
        counts shaped like its sums (a switch that released some slots with fewer contributions).
        out: optionally, a tensor with the gradient's number of elements to write the result into (e.g. the
        DDP bucket itself); it is returned.
        """
        if isinstance(contributors, (int, np.integer)) and not isinstance(contributors, bool):
            if contributors < 1:
                raise AggregationError(f"contributors={contributors!r} must be a positive integer")
            n: int | list[np.ndarray] = int(contributors)
        elif isinstance(contributors, (list, tuple)):
            n = check_counts(prep.chunks, contributors, padded=True)
        else:
            raise AggregationError(
                f"contributors={contributors!r} must be a positive integer or per-chunk arrays of counts"
            )
        m = self._check_norms(prep, max_norms, own=False)
        arrays = self._check_sums(prep, sums)
        if out is not None and out.numel() != prep.numel:
            raise AggregationError(f"out has {out.numel()} elements, the gradient has {prep.numel}")
        direct = (
            out is not None and out.dtype == torch.float32 and out.is_contiguous() and out.device == prep.data.device
        )
        with one_thread_if_small(prep.numel, prep.data.device):
            if self._native_for(prep) is not None:
                flat = out.view(-1) if direct else empty_cpu(prep.numel)
                bad = self._native.decode(prep.chunks, arrays, n, m, self._sign_key(prep), self._ws, flat)
                if bad is not None:
                    chunk, at = bad
                    piece = min(parallel.BLOCK, prep.chunks[chunk].padded)
                    raise self._range_error(prep.chunks[chunk], arrays[chunk], at // piece * piece, piece, n)
            else:
                flat = self._decode_flat(prep, arrays, n, m, out=out.view(-1) if direct else None)
            if out is None:
                return flat.view(prep.shape).to(prep.dtype)
            if not direct:
                out.copy_(flat.view(out.shape))
            return out

    def decode_lanes(
        self,
        prep: THCPrepared,
        lanes: np.ndarray,
        per_packet: int,
        contributors: int | Sequence[np.ndarray],
        max_norms: torch.Tensor | Sequence[float],
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """decode, with the sums read from one flat integer array in the request layout (encode_packed's):
        chunk c's padded sums start where the chunks before it end, each rounded up to a multiple of
        per_packet, as host_agent's operation scatters results into its int32 sums. Read in place: the
        per-chunk views go to decode, which on the native path reads int32 rows without a copy."""
        spans, total, _ = self._check_layout(prep, per_packet)
        if not isinstance(lanes, np.ndarray) or lanes.ndim != 1 or lanes.size < total:
            raise AggregationError(f"lanes must be a 1-D array of at least {total} sums")
        native = self._native_for(prep)
        whole = (
            native is not None
            and lanes.dtype == np.int32
            and lanes.flags.c_contiguous
            and isinstance(contributors, (int, np.integer))
            and not isinstance(contributors, bool)
            and contributors >= 1
            and out is not None
            and out.dtype == torch.float32
            and out.is_contiguous()
            and out.is_cpu  # prep.data is (native)
            and out.numel() == prep.numel
        )
        if whole:  # the common case (one count, int32 lanes, decoded into the bucket): one C call, no views
            n, direct = int(contributors), _direct_norms(prep, max_norms, own=False)
            m = direct if direct is not None else self._check_norms(prep, max_norms, own=False)
            try:
                bad = native.decode_flat(prep.chunks, lanes, spans, n, m, self._sign_key(prep), self._ws, out)
            except NormRefused:  # codec.c refused a norm it read directly: _check_norms words the error
                m = self._check_norms(prep, max_norms, own=False)
                bad = native.decode_flat(prep.chunks, lanes, spans, n, m, self._sign_key(prep), self._ws, out)
            if bad is not None:
                chunk, at = bad
                c = prep.chunks[chunk]
                piece = min(parallel.BLOCK, c.padded)
                start = int(sum(spans[:chunk]))
                raise self._range_error(c, lanes[start : start + c.padded], at // piece * piece, piece, n)
            return out
        starts = np.concatenate([[0], np.cumsum(spans)[:-1]])
        sums = [lanes[at : at + c.padded] for at, c in zip(starts.tolist(), prep.chunks)]
        return self.decode(prep, sums, contributors, max_norms, out=out)

    def bits_per_coordinate(self, n: int) -> Bits:
        """b bits up; ceil(log2(n g + 1)) bits down (the sums), plus one float norm per chunk each way."""
        per_chunk = 32.0 / self.config.chunk
        return Bits(self.table.bits + per_chunk, lane_bits_needed(n, self.table.granularity) + per_chunk)

    # ---------------------------------------------------------------------------------------- helpers
    def _plan(self, numel: int) -> tuple[tuple[Chunk, ...], tuple[ChunkGroup, ...]]:
        """The chunks of a gradient of ``numel`` coordinates and their batches, computed once per size."""
        plan = self._plans.get(numel)
        if plan is None:
            if len(self._plans) >= 64:  # a caller of many sizes: forget them rather than grow
                self._plans.clear()
            chunks = plan_chunks(numel, self.config.chunk)
            plan = self._plans[numel] = (tuple(chunks), tuple(group_chunks(chunks)))
        return plan

    def _sign_rows(self, prep: THCPrepared, group: ChunkGroup) -> np.ndarray:
        """The group's Hadamard signs, packed: one row per chunk."""
        first = group.chunks[0].index
        return sign_bit_rows(self.config.seed, prep.step, prep.key, first, group.count, group.padded)

    @staticmethod
    def _chunk_norms(v: torch.Tensor, chunks: list[Chunk]) -> torch.Tensor:
        """One L2 norm per chunk; the leading chunks of equal length in one batched reduction.

        A float32 sum of squares flushes |x| < ~1e-23 to zero and overflows for |x| > ~1e19: chunks whose
        norm came out below _SAFE_NORM or non-finite are measured again scaled by a power of two.
        """
        return THCCompressor._measured_norms(v, chunks)[0]

    @staticmethod
    def _measured_norms(v: torch.Tensor, chunks: list[Chunk]) -> tuple[torch.Tensor, bool]:
        """_chunk_norms, and whether they were plain: every norm finite and at least _SAFE_NORM as measured."""
        size = chunks[0].length
        full = len(chunks) - (chunks[-1].length != size)  # only the last chunk can be shorter
        norms = torch.linalg.vector_norm((v if full == len(chunks) else v[: full * size]).view(full, size), dim=1)
        if full < len(chunks):
            tail = torch.linalg.vector_norm(v[chunks[-1].start : chunks[-1].stop]).reshape(1)
            norms = torch.cat([norms, tail])
        if not norms.is_cpu:
            norms = norms.cpu()
        if len(chunks) <= _FEW:  # the usual case: nothing to measure again (NaN fails both comparisons)
            values = norms.tolist()
            if all(map(_SAFE_NORM.__le__, values)) and all(map(math.inf.__gt__, values)):
                return norms, True
        else:
            values = norms.numpy()
            if values.min() >= _SAFE_NORM and values.max() < math.inf:
                return norms, True
        values = norms.numpy()
        redo = np.flatnonzero(~(values >= _SAFE_NORM) | np.isinf(values)).tolist()
        if redo:
            exact = norms.double()
            for i in redo:
                exact[i] = _scaled_norm(v[chunks[i].start : chunks[i].stop])
            norms = torch.where(exact > _FLOAT32_MAX, torch.tensor(math.inf, dtype=torch.float64), exact).float()
        return norms, False

    def _flipped(self, v: torch.Tensor, group: ChunkGroup, bits: np.ndarray, exps: np.ndarray) -> torch.Tensor:
        """D v 2^-e for a group of chunks, each zero-padded to its power-of-two length, in a scratch buffer.

        bits: the group's packed signs, one row per chunk; exps: one e per chunk of the group.
        """
        d = group.padded
        buf = self._ws.get("encode.flip", group.size, torch.float32, v.device)
        if v.device.type != "cpu":
            for i, c in enumerate(group.chunks):
                part = buf[i * d : i * d + d]
                part[: c.length].copy_(v[c.start : c.stop])
                part[c.length :].zero_()
                flip_signs_(part[: c.length], sign_mask(bits[i], c.length))
                _scale_pow2_(part[: c.length], -int(exps[i]))
            return buf
        length = group.chunks[-1].stop - group.start  # only a group's lone chunk can be shorter than d
        dst = buf.numpy().view(np.uint32)
        _flip_scale(v.numpy().view(np.uint32)[group.start : group.start + length], dst, bits, d, -exps, threads=True)
        if length < group.size:
            dst[length:] = 0
        return buf

    def _decode_flat(
        self,
        prep: THCPrepared,
        sums: Sequence[np.ndarray],
        n: int | list[np.ndarray],
        m: np.ndarray,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Flat float32 average from per-chunk sums: D H((S/n - g/2) inc) M / d, padding dropped.

        Sums are checked to lie in [0, n g] on the way (a wrong contributor count or wrapped lanes). The
        transform runs with M 2^-e in [0.5, 1), so nothing in it overflows or goes subnormal; the result is
        scaled by 2^e in the final pass. `n` per coordinate (per-chunk arrays): S/n is taken coordinate by
        coordinate, and the constant -g/2 inc is the same for every coordinate, so coordinate 0 is made
        exact from the sum of S/n instead of the sum of S.
        """
        counts = None if isinstance(n, int) else n
        table = self.table
        device = prep.data.device
        if out is None:
            out = empty_cpu(prep.numel) if device.type == "cpu" else torch.empty(prep.numel, device=device)
        if not self.config.transform:
            host = out if device.type == "cpu" else torch.empty(prep.numel)
            direct.levels_average(sums, n, self._steps(prep, m), table.granularity, prep.chunks, host.numpy())
            return out if host is out else out.copy_(host)
        groups = self._plan(prep.numel)[1]
        signs = prep.extra.get("signs") or [self._sign_rows(prep, group) for group in groups]
        limit = (n if counts is None else max(int(c.max()) for c in counts)) * table.granularity
        exps = _exponents(m)
        m = np.ldexp(m, -exps)
        for group, bits in zip(groups, signs):
            d = group.padded
            rows = slice(group.chunks[0].index, group.chunks[0].index + group.count)
            alphas = table.inc * m[rows] / float((n if counts is None else 1) * d)
            f = self._ws.get("decode.f", group.size)
            piece = min(parallel.BLOCK, d)  # the range check and the sums of S/n go piece by piece
            tops, totals = self._sums_to_floats(sums[rows], counts[rows] if counts else None, alphas, piece, f.numpy())
            if tops.max() > limit:
                first = int(np.flatnonzero(tops > limit)[0])
                i, offset = divmod(first * piece, d)
                raise self._range_error(group.chunks[i], sums[group.chunks[i].index], offset, piece, n)
            # into warm scratch memory: first-touch page faults from several matmul threads cost more than the
            # transform itself; the single pass that flips the signs then writes the fresh output
            z = self._ws.get("decode.z", group.size, torch.float32, device)
            fwht(f.to(device).view(group.count, d), out=z.view(group.count, d), workspace=self._ws)
            # H maps the constant -g/2 * inc to coordinate 0 only; make that coordinate exact, as it is a
            # difference of two large numbers: alpha * sum(S) - g/2 * inc * M
            totals = np.array([sum(t) for t in totals.reshape(group.count, -1).tolist()], dtype=np.float64)
            zeroth = alphas * totals - table.granularity / 2.0 * table.inc * m[rows]
            length = group.chunks[-1].stop - group.start  # only a group's lone chunk can be shorter than d
            if device.type == "cpu":
                z.numpy().reshape(group.count, d)[:, 0] = zeroth
                src = z.numpy()[:length].view(np.uint32)
                dst = out.numpy()[group.start : group.start + length].view(np.uint32)
                _flip_scale(src, dst, bits, d, exps[rows], threads=False)
            else:
                z.view(group.count, d)[:, 0] = torch.from_numpy(zeroth).to(device=device, dtype=torch.float32)
                for i, c in enumerate(group.chunks):
                    dst = out[c.start : c.stop]
                    dst.copy_(z[i * d : i * d + c.length])
                    flip_signs_(dst, sign_mask(bits[i], c.length))
                    _scale_pow2_(dst, int(exps[c.index]))
        return out

    def _range_error(
        self, chunk: Chunk, sums: np.ndarray, offset: int, piece: int, n: int | list[np.ndarray]
    ) -> AggregationError:
        """The error for sums of ``chunk`` out of [0, n g], naming the piece [offset, offset + piece)."""
        g = self.table.granularity
        limit = (n if isinstance(n, int) else max(int(c.max()) for c in n)) * g
        part = sums[offset : offset + piece]
        return AggregationError(
            f"sums of chunk {chunk.index} leave [0, n*g] = [0, {limit}] (seen {int(part.min())} to "
            f"{int(part.max())}) for {n} contributors at g={g}: wrong contributor count or overflowed lanes"
        )

    def _sums_to_floats(
        self, sums: list[np.ndarray], counts: list[np.ndarray] | None, alphas: np.ndarray, piece: int, f: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """f = alpha S (one count) or alpha S/n (per-coordinate counts) for a group's rows of sums.

        Piece by piece (pieces of ``piece`` coordinates, ascending), the largest sum read as unsigned (a
        negative one is huge, so one max() checks both ends of [0, n g]; with counts: above limit if any
        sum exceeds its count times g) and the sum of S (or of S/n); computed on several threads.
        """
        g = self.table.granularity
        d = sums[0].size
        per_row = d // piece
        tops = np.zeros(len(sums) * per_row, dtype=np.uint64)
        totals = np.zeros(len(sums) * per_row, dtype=np.int64 if counts is None else np.float64)
        alphas32 = alphas.astype(np.float32)

        def convert(start: int, stop: int) -> None:
            row, rows = start // d, (stop - start) // d
            if counts is None and rows > 1 and all(a.dtype == sums[row].dtype for a in sums[row : row + rows]):
                whole = np.stack(sums[row : row + rows])  # short rows: one copy, then one call per step
                tops[row : row + rows] = whole.view(whole.dtype.str.replace("i", "u")).max(axis=1)
                totals[row : row + rows] = whole.sum(axis=1, dtype=np.int64)
                dst = f[start:stop].reshape(rows, d)
                np.multiply(whole, alphas32[row : row + rows, None], out=dst, dtype=np.float32, casting="unsafe")
                return
            for at in range(start, stop, piece):
                row, offset = divmod(at, d)
                part = sums[row][offset : offset + piece]
                unsigned = part.view(part.dtype.str.replace("i", "u"))
                if counts is None:
                    tops[at // piece] = int(unsigned.max())
                    totals[at // piece] = int(part.sum(dtype=np.int64))
                    np.multiply(part, alphas32[row], out=f[at : at + piece], dtype=np.float32, casting="unsafe")
                    continue
                k = counts[row][offset : offset + piece]
                mean = part / k  # float64: S/n per coordinate
                tops[at // piece] = np.iinfo(np.uint64).max if (unsigned > k * g).any() else 0
                totals[at // piece] = float(np.sum(mean))
                np.multiply(mean, alphas[row], out=f[at : at + piece], casting="unsafe")

        size = piece if d >= parallel.BLOCK else d * (parallel.BLOCK // d)
        parallel.for_blocks(len(sums) * d, convert, block=size)
        return tops, totals

    def _check_norms(self, prep: THCPrepared, max_norms, own: bool) -> np.ndarray:
        """The max norms as float64, checked (and, with `own`, held to this worker's own norms). A round's
        encode and decode take the same tensor: checked once, while the tensor is unchanged (its version)."""
        seen = prep.extra.get("max_norms")
        if seen is not None and seen[0] is max_norms and seen[1] == max_norms._version and (seen[2] or not own):
            return seen[3]
        m = self._checked_norms(prep, max_norms, own)
        if isinstance(max_norms, torch.Tensor):
            prep.extra["max_norms"] = (max_norms, max_norms._version, own, m)
        return m

    def _checked_norms(self, prep: THCPrepared, max_norms, own: bool) -> np.ndarray:
        m = max_norms.detach().cpu().numpy() if isinstance(max_norms, torch.Tensor) else np.asarray(max_norms)
        m = m.astype(np.float64).reshape(-1)
        if m.size != len(prep.chunks):
            raise AggregationError(f"got {m.size} max norms for {len(prep.chunks)} chunks")
        if not (m.min() >= 0 and m.max() < math.inf):  # NaN fails both comparisons
            raise AggregationError(f"max norms must be finite and non-negative, got {m.tolist()[:8]}")
        if own:
            mine = prep.norms.numpy().astype(np.float64)
            low = m < mine * (1 - 1e-6)
            if low.any():
                c = int(np.flatnonzero(low)[0])
                raise AggregationError(
                    f"max norm {m[c]:.6g} of chunk {c} is below this worker's own norm {mine[c]:.6g}: "
                    f"the max-norm round must include every contributor"
                )
        return m

    def _check_sums(self, prep: THCPrepared, sums) -> list[np.ndarray]:
        """Chunk count, shape and integer dtype; the value range is checked while decoding."""
        if len(sums) != len(prep.chunks):
            raise AggregationError(f"got sums for {len(sums)} chunks, the tensor has {len(prep.chunks)}")
        arrays = []
        for chunk, s in zip(prep.chunks, sums):
            a = s.detach().cpu().numpy() if isinstance(s, torch.Tensor) else np.asarray(s)
            if a.dtype.kind not in "iu":
                raise AggregationError(f"sums of chunk {chunk.index} have dtype {a.dtype}; they must be integers")
            if a.shape != (chunk.padded,):
                raise AggregationError(f"sums of chunk {chunk.index} have shape {a.shape}, expected ({chunk.padded},)")
            arrays.append(a)
        return arrays
