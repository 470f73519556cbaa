"""THC: Tensor Homomorphic Compression of one worker's gradient (NSDI'24), as three phases.

    prep = comp.prepare(grad, step)             # validate, add EF memory, chunk; prep.norms: one L2 norm per chunk
    M = <max over workers of prep.norms>        # the norm round, the only metadata
    idx = comp.encode(prep, M)                  # RHT, scale to N(0,1), clip at T, stochastic rounding -> b-bit indices
    S = <sum over workers of table.values[idx]> # integer sums in the network (thc.aggregate.reference_aggregate)
    avg = comp.decode(prep, S, n, M)            # inverse RHT of (S/n - g/2) inc M / sqrt(d): the average gradient

Per chunk of d = 2^k coordinates (the last one zero-padded), with H the Walsh–Hadamard matrix and D
the round's shared random signs:  y = clamp(H D v / M, -T, T)  (unit variance coordinates for the
max-norm worker), then u = y/inc + g/2 in [0, g] is rounded to a table index, unbiased, from the
worker's own random stream. Decode computes D H ((S/n - g/2) inc) M / d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .chunking import Chunk, plan_chunks
from .config import THCConfig
from .errors import AggregationError, ConfigError
from .feedback import ErrorFeedback
from .hadamard import fwht, sign_bits, sign_mask, flip_signs_
from .interface import Bits, Compressor, Prepared
from .aggregate import lane_bits_needed, reference_aggregate
from .quantize import TableQuantizer
from .validation import flatten_gradient, raise_if_not_finite
from .workspace import Workspace, empty_cpu

__all__ = ["THCCompressor", "THCPrepared"]

_ROUND_DOMAIN = 0x524F554E  # "ROUN": the rounding streams never share bits with the sign streams


def _check_index(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"{name}={value!r} must be a non-negative integer")
    return int(value)


@dataclass
class THCPrepared(Prepared):
    """A gradient ready for THC encoding. ``norms`` (= ``stats``) go to the max-norm round."""

    key: int = 0

    @property
    def norms(self) -> torch.Tensor:
        return self.stats


class THCCompressor(Compressor):
    """One worker's THC encoder and decoder.

    config: the job's :class:`THCConfig` (identical on all workers). worker_id: this worker's rank; it
    selects an independent rounding stream (derived from seed and worker_id with numpy's SeedSequence), so
    the workers' rounding errors are independent and their average error shrinks like 1/n.
    Not thread-safe (it reuses scratch buffers); use one per thread.
    """

    summable = True

    def __init__(self, config: THCConfig | None = None, worker_id: int = 0) -> None:
        self.config = config if config is not None else THCConfig()
        if not isinstance(self.config, THCConfig):
            raise ConfigError(f"config must be a THCConfig, not {type(self.config).__name__}")
        self.worker_id = _check_index("worker_id", worker_id)
        self.table = self.config.make_table()
        self.quantizer = TableQuantizer(self.table)
        self.feedback = ErrorFeedback() if self.config.error_feedback else None
        self._ws = Workspace()
        kind = self.table.kind
        self.name = f"THC-{kind} b={self.table.bits} g={self.table.granularity}"

    # ----------------------------------------------------------------------------------------- phases
    def prepare(self, grad: torch.Tensor, step: int, key: int = 0) -> THCPrepared:
        """Validate (NaN/Inf, empty, dtype), add the EF memory, flatten and chunk; compute the chunk norms.

        step: the round number (all workers must agree; it refreshes the Hadamard signs). key: which tensor
        of the round this is (e.g. a DDP bucket index), so that tensors of one round get distinct signs.
        """
        step = _check_index("step", step)
        key = _check_index("key", key)
        flat = flatten_gradient(grad)
        v = self.feedback.compensate(flat) if self.feedback is not None else flat
        chunks = plan_chunks(v.numel(), self.config.chunk)
        norms = self._chunk_norms(v, chunks)
        if not bool(torch.isfinite(norms).all()):
            raise_if_not_finite(grad, v)
        return THCPrepared(
            shape=grad.shape, dtype=grad.dtype, device=grad.device, numel=v.numel(), step=step,
            chunks=chunks, stats=norms, data=v, key=key,
        )

    def encode(self, prep: THCPrepared, max_norms: torch.Tensor | Sequence[float]) -> list[np.ndarray]:
        """Table indices (uint8, one array of padded length per chunk) for this worker's contribution.

        max_norms: per chunk, the maximum of all workers' ``prep.norms``. With error feedback on, the memory
        becomes v minus this worker's own decoded contribution.
        """
        m = self._check_norms(prep, max_norms, own=True)
        cfg, table = self.config, self.table
        indices, masks = [], []
        for chunk in prep.chunks:
            mask = sign_mask(sign_bits(cfg.seed, prep.step, prep.key, chunk.index, chunk.padded), chunk.padded)
            masks.append(mask)
            flipped = self._flipped(prep.data, chunk, mask)
            u = self._ws.get("encode.u", chunk.padded, torch.float32, flipped.device)
            scale = 1.0 / (m[chunk.index] * table.inc) if m[chunk.index] > 0 else 0.0
            fwht(flipped, out=u, workspace=self._ws, scale=scale, shift=table.granularity / 2.0)
            seed = np.random.SeedSequence(
                entropy=cfg.seed, spawn_key=(_ROUND_DOMAIN, self.worker_id, prep.key, prep.step, chunk.index)
            )
            indices.append(self.quantizer.quantize_(u.cpu().numpy(), seed))
        prep.extra["masks"] = masks
        if self.feedback is not None:
            own = [np.take(table.values, idx) for idx in indices]
            decoded = self._decode_flat(prep, own, 1, m)
            self.feedback.update(prep.data, decoded)
        return indices

    def aggregate(self, payloads: Sequence[list[np.ndarray]]) -> list[np.ndarray]:
        """Reference aggregation of all workers' indices: per chunk, integer sums of table values."""
        return [reference_aggregate([p[c] for p in payloads], self.table) for c in range(len(payloads[0]))]

    def decode(
        self,
        prep: THCPrepared,
        sums: Sequence[np.ndarray],
        contributors: int,
        max_norms: torch.Tensor | Sequence[float],
    ) -> torch.Tensor:
        """The average of the ``contributors`` workers' gradients, shaped and typed like the gradient.

        sums: per chunk, integer sums of table values (any integer dtype), as the aggregator returned them.
        Fewer contributors than workers (partial aggregation) is fine: the sums are divided by their count.
        """
        if isinstance(contributors, bool) or not isinstance(contributors, (int, np.integer)) or contributors < 1:
            raise AggregationError(f"contributors={contributors!r} must be a positive integer")
        m = self._check_norms(prep, max_norms, own=False)
        arrays = self._check_sums(prep, sums, int(contributors))
        out = self._decode_flat(prep, arrays, int(contributors), m)
        return out.view(prep.shape).to(prep.dtype)

    def bits_per_coordinate(self, n: int) -> Bits:
        """b bits up; ceil(log2(n g + 1)) bits down (the sums), plus one float norm per chunk each way."""
        per_chunk = 32.0 / self.config.chunk
        return Bits(self.table.bits + per_chunk, lane_bits_needed(n, self.table.granularity) + per_chunk)

    # ---------------------------------------------------------------------------------------- helpers
    @staticmethod
    def _chunk_norms(v: torch.Tensor, chunks: list[Chunk]) -> torch.Tensor:
        full = [c for c in chunks if c.length == chunks[0].length]
        parts = []
        if len(full) == len(chunks) or len(full) > 1:
            size = chunks[0].length
            parts.append(torch.linalg.vector_norm(v[: len(full) * size].view(len(full), size), dim=1))
        for c in chunks[len(parts[0]) if parts else 0 :]:
            parts.append(torch.linalg.vector_norm(v[c.start : c.stop]).reshape(1))
        return torch.cat(parts).to(device="cpu", dtype=torch.float32)

    def _flipped(self, v: torch.Tensor, chunk: Chunk, mask: np.ndarray) -> torch.Tensor:
        """D v for one chunk, zero-padded to its power-of-two length, in a scratch buffer."""
        buf = self._ws.get("encode.flip", chunk.padded, torch.float32, v.device)
        part = v[chunk.start : chunk.stop]
        if v.device.type == "cpu":
            dst = buf.numpy().view(np.uint32)
            np.bitwise_xor(part.numpy().view(np.uint32), mask[: chunk.length], out=dst[: chunk.length])
            dst[chunk.length :] = 0
        else:
            buf[: chunk.length].copy_(part)
            buf[chunk.length :].zero_()
            flip_signs_(buf[: chunk.length], mask)
        return buf

    def _decode_flat(self, prep: THCPrepared, sums: Sequence[np.ndarray], n: int, m: np.ndarray) -> torch.Tensor:
        """Flat float32 average from per-chunk sums: D H((S/n - g/2) inc) M / d, padding dropped."""
        table, cfg = self.table, self.config
        device = prep.data.device
        out = empty_cpu(prep.numel) if device.type == "cpu" else torch.empty(prep.numel, device=device)
        masks = prep.extra.get("masks")
        for chunk, s in zip(prep.chunks, sums):
            d = chunk.padded
            mask = masks[chunk.index] if masks is not None else sign_mask(
                sign_bits(cfg.seed, prep.step, prep.key, chunk.index, d), d
            )
            alpha = table.inc * float(m[chunk.index]) / (n * d)
            f = self._ws.get("decode.f", d)
            np.multiply(s, np.float32(alpha), out=f.numpy(), dtype=np.float32, casting="unsafe")
            f = f.to(device)
            dst = out[chunk.start : chunk.stop]
            z = dst if chunk.length == d else self._ws.get("decode.z", d, torch.float32, device)
            fwht(f, out=z, workspace=self._ws)
            # H applied to the constant -g/2 * inc lands on coordinate 0 only; also make that one exact,
            # as it is a difference of two large numbers: alpha * sum(S) - g/2 * inc * M.
            z[0] = alpha * float(np.sum(s, dtype=np.int64)) - table.granularity / 2.0 * table.inc * float(m[chunk.index])
            flip_signs_(z[: chunk.length], mask)
            if z is not dst:
                dst.copy_(z[: chunk.length])
        return out

    def _check_norms(self, prep: THCPrepared, max_norms, own: bool) -> np.ndarray:
        m = max_norms.detach().cpu().numpy() if isinstance(max_norms, torch.Tensor) else np.asarray(max_norms)
        m = m.astype(np.float64).reshape(-1)
        if m.size != len(prep.chunks):
            raise AggregationError(f"got {m.size} max norms for {len(prep.chunks)} chunks")
        if not np.all(np.isfinite(m)) or np.any(m < 0):
            raise AggregationError(f"max norms must be finite and non-negative, got {m.tolist()[:8]}")
        if own:
            mine = prep.norms.numpy().astype(np.float64)
            low = np.nonzero(m < mine * (1 - 1e-6))[0]
            if low.size:
                c = int(low[0])
                raise AggregationError(
                    f"max norm {m[c]:.6g} of chunk {c} is below this worker's own norm {mine[c]:.6g}: "
                    f"the max-norm round must include every contributor"
                )
        return m

    def _check_sums(self, prep: THCPrepared, sums, n: int) -> list[np.ndarray]:
        if len(sums) != len(prep.chunks):
            raise AggregationError(f"got sums for {len(sums)} chunks, the tensor has {len(prep.chunks)}")
        limit = n * self.table.granularity
        arrays = []
        for chunk, s in zip(prep.chunks, sums):
            a = s.detach().cpu().numpy() if isinstance(s, torch.Tensor) else np.asarray(s)
            if a.dtype.kind not in "iu":
                raise AggregationError(f"sums of chunk {chunk.index} have dtype {a.dtype}; they must be integers")
            if a.shape != (chunk.padded,):
                raise AggregationError(f"sums of chunk {chunk.index} have shape {a.shape}, expected ({chunk.padded},)")
            hi = int(a.max())
            lo = int(a.min()) if a.dtype.kind == "i" else 0
            if lo < 0 or hi > limit:
                raise AggregationError(
                    f"sums of chunk {chunk.index} span [{lo}, {hi}], outside [0, n*g] = [0, {limit}] for "
                    f"{n} contributors at g={self.table.granularity}: wrong contributor count or overflowed lanes"
                )
            arrays.append(a)
        return arrays
