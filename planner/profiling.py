"""Profiling on this machine: a model's step (forward, when each DDP bucket is ready in the backward pass,
optimizer) and each compressor's encode and decode time per size, for the timeline model.

Medians over repeats, after a warm-up; no DDP needed (the buckets are DDP's assignment, models_zoo.ddp_buckets,
and a bucket is ready when the last of its parameters has its gradient accumulated).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from thc.limits import DEFAULT_CHUNK
from thc.modes import FIX32, FP16, THC

from .models_zoo import DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, ddp_buckets
from .timeline import Bucket, LinearCost, StepProfile

__all__ = ["measure_step", "measure_compression", "fit_linear", "PROFILED_MODES"]

PROFILED_MODES = (THC, FIX32, FP16)  # the plannable modes with a compression to time


def measure_step(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable = nn.functional.cross_entropy,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES,
    repeats: int = 30,
    lr: float = 0.1,
    momentum: float = 0.9,
    name: str = "",
) -> StepProfile:
    """Time ``model``'s training step on (x, y) with SGD: forward, backward with each bucket's ready time,
    optimizer. The model's parameters are trained (work on a copy if that matters)."""
    assignment = ddp_buckets(model, bucket_bytes, first_bucket_bytes)
    params = dict(model.named_parameters())
    owner = {n: i for i, names in enumerate(assignment) for n in names}
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    stamps: dict[int, float] = {}

    def hook_for(name):
        def hook(_p):
            stamps[owner[name]] = time.perf_counter()  # the last parameter of a bucket sets its ready time

        return hook

    handles = [p.register_post_accumulate_grad_hook(hook_for(n)) for n, p in params.items()]
    fwd, bwd, step, ready = [], [], [], {i: [] for i in range(len(assignment))}
    try:
        for k in range(repeats + 3):
            opt.zero_grad(set_to_none=True)
            stamps.clear()
            t0 = time.perf_counter()
            loss = loss_fn(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            if k < 3:
                continue
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            step.append(t3 - t2)
            for i, t in stamps.items():
                ready[i].append(t - t1)
    finally:
        for h in handles:
            h.remove()
    backward = statistics.median(bwd)
    buckets = tuple(
        Bucket(i, sum(params[n].numel() for n in names), min(statistics.median(ready[i]), backward))
        for i, names in enumerate(assignment)
    )
    return StepProfile(buckets, statistics.median(fwd), backward, statistics.median(step), name=name)


def fit_linear(sizes, seconds) -> LinearCost:
    """Least-squares base + per-coordinate line through (size, seconds), clamped at zero."""
    slope, base = np.polyfit(np.asarray(sizes, float), np.asarray(seconds, float), 1)
    return LinearCost(max(float(base), 0.0), max(float(slope), 0.0))


def _median_time(fn, repeats: int) -> float:
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def measure_compression(
    mode: str, sizes=(2048, 16384, 65536), workers: int = 4, repeats: int = 15, chunk: int = DEFAULT_CHUNK
) -> tuple[LinearCost, LinearCost]:
    """(encode, decode) cost of ``mode`` as the hooks run it: THC's prepare (norms, RHT) + encode and its
    decode; FIX32's prepare + encode and decode; fp16's cast and cast back. The aggregation in between is
    not timed (the sums are computed once, outside)."""
    from thc.baselines.fixed_point import FixedPoint32
    from thc.compressor import THCCompressor
    from thc.config import THCConfig

    enc_t, dec_t = [], []
    rng = np.random.default_rng(0)
    for n in sizes:
        grad = torch.from_numpy(rng.normal(size=n).astype(np.float32))
        if mode == THC:
            comp = THCCompressor(THCConfig(chunk=chunk), worker_id=0)
            prep = comp.prepare(grad, 0)
            idx = comp.encode(prep, prep.norms)
            sums = [np.take(comp.table.values.astype(np.int32), i) * workers for i in idx]
            enc = lambda: comp.encode(comp.prepare(grad, 0), prep.norms)
            dec = lambda: comp.decode(prep, sums, workers, prep.norms)
        elif mode == FIX32:
            codec = FixedPoint32(workers)
            prep = codec.prepare(grad, 0)
            words = codec.encode(prep, prep.stats)
            enc = lambda: codec.encode(codec.prepare(grad, 0), prep.stats)
            dec = lambda: codec.decode(prep, words, workers, prep.stats)
        elif mode == FP16:
            half = grad.half()
            enc = lambda: grad.half()
            dec = lambda: grad.copy_(half)
        else:
            raise ValueError(f"no compression to profile for mode {mode!r} (profiled: {', '.join(PROFILED_MODES)})")
        enc_t.append(_median_time(enc, repeats))
        dec_t.append(_median_time(dec, repeats))
    return fit_linear(sizes, enc_t), fit_linear(sizes, dec_t)
