"""Compressors by name, so that the CLI and the benchmark build them the same way (a BytePS-style registry)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .baselines import FP16, QSGD, FixedPoint32, NoCompression, TernGrad, TopK
from .compressor import THCCompressor
from .config import DEFAULT_CHUNK, PAPER_CHUNK, THCConfig
from .errors import ConfigError
from .interface import Compressor

__all__ = ["COMPRESSORS", "make_compressor"]


def _thc(kind: str) -> Callable[..., Compressor]:
    def build(
        workers: int,
        worker_id: int,
        *,
        bits: int = 4,
        granularity: int = 30,
        clip: float = 1 / 32,
        chunk: int = DEFAULT_CHUNK,
        seed: int = 0,
        error_feedback: bool = False,
        **_: Any,
    ) -> Compressor:
        cfg = THCConfig(
            bits=bits,
            granularity=granularity,
            clip=clip,
            table=kind,
            chunk=chunk,
            seed=seed,
            error_feedback=error_feedback,
        )
        return THCCompressor(cfg, worker_id)

    return build


COMPRESSORS: dict[str, Callable[..., Compressor]] = {
    "thc": _thc("optimal"),
    "thc-uniform": _thc("uniform"),
    "fp32": lambda workers, worker_id, *, chunk=PAPER_CHUNK, seed=0, **_: NoCompression(chunk, seed, worker_id),
    "fp16": lambda workers, worker_id, *, chunk=PAPER_CHUNK, seed=0, **_: FP16(workers, chunk, seed, worker_id),
    "fixed32": lambda workers, worker_id, *, chunk=PAPER_CHUNK, seed=0, **_: FixedPoint32(
        workers, chunk, seed, worker_id
    ),
    "topk": lambda workers, worker_id, *, ratio=0.01, chunk=PAPER_CHUNK, seed=0, **_: TopK(
        ratio, True, chunk, seed, worker_id
    ),
    "qsgd": lambda workers, worker_id, *, qsgd_bits=4, bucket=512, chunk=PAPER_CHUNK, seed=0, **_: QSGD(
        qsgd_bits, bucket, chunk, seed, worker_id
    ),
    "terngrad": lambda workers, worker_id, *, chunk=PAPER_CHUNK, seed=0, **_: TernGrad(2.5, chunk, seed, worker_id),
}


def make_compressor(name: str, workers: int, worker_id: int = 0, **params: Any) -> Compressor:
    """Build compressor ``name`` for worker ``worker_id`` of ``workers``; unknown params are ignored."""
    try:
        build = COMPRESSORS[name]
    except KeyError:
        raise ConfigError(f"unknown compressor {name!r}: choose from {', '.join(COMPRESSORS)}") from None
    return build(workers, worker_id, **params)
