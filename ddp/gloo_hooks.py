"""The modes that aggregate over a torch.distributed process group (gloo), as DDP communication hooks:
gloo, fp16 and powersgd are torch's own hooks, topk, qsgd and terngrad thc's compressors (ddp/README.md).

The thc baselines run behind the same hook interface as torch's own, so every mode is compared on one
training loop: ``compressor_hook`` returns a future that completes with the bucket's average. Everything up
to the payload runs in the hook; the payload's collective is asynchronous and decoding runs when it
completes, so DDP's backward pass goes on meanwhile. Payloads that cannot be summed (TopK, QSGD) are
all-gathered, one byte tensor per worker, whose layout the chunk lengths fix.

    >>> state, hook = make_gloo_hook("topk", workers=4, worker_id=rank)
    >>> ddp_model.register_comm_hook(state, hook)
"""

# No "from __future__ import annotations": DDP compares the hook's annotations with real types.

from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from thc.baselines.terngrad import TernGrad
from thc.errors import ConfigError
from thc.interface import Compressor
from thc.modes import FP16, GLOO, GLOO_MODES
from thc.registry import make_compressor

__all__ = ["GLOO_MODES", "CompressorHookState", "compressor_hook", "make_gloo_hook", "pack", "unpack"]

POWERSGD_RANK = 2
POWERSGD_START = 2  # the earliest PowerSGD allows with error feedback / warm start


class CompressorHookState:
    """State of :func:`compressor_hook`: one compressor per bucket index, ``factory(bucket_index)`` (TopK's
    error-feedback memory is per bucket, and each bucket draws its own random stream), the round counter
    (advanced after the last bucket of a backward pass), the process group."""

    __slots__ = ["factory", "process_group", "iteration", "compressors"]

    def __init__(self, factory: Callable[[int], Compressor], process_group: dist.ProcessGroup | None = None) -> None:
        self.factory = factory
        self.process_group = process_group
        self.iteration = 0
        self.compressors: dict[int, Compressor] = {}

    def compressor_for(self, bucket_index: int, numel: int) -> Compressor:
        comp = self.compressors.get(bucket_index)
        feedback = getattr(comp, "feedback", None)
        if comp is None or (feedback is not None and feedback.memory is not None and feedback.memory.numel() != numel):
            comp = self.compressors[bucket_index] = self.factory(bucket_index)  # a rebuilt bucket starts afresh
        return comp


def _arrays(payload) -> list[np.ndarray]:
    """The arrays of one worker's payload in order: per chunk an array or a tuple of arrays."""
    out = []
    for part in payload:
        out.extend(part if isinstance(part, tuple) else (part,))
    return [np.ascontiguousarray(a) for a in out]


def pack(payload) -> tuple[torch.Tensor, list]:
    """(one uint8 tensor holding every array of ``payload``, the layout to unpack it with)."""
    arrays = _arrays(payload)
    layout = [(isinstance(part, tuple), len(part) if isinstance(part, tuple) else 1) for part in payload]
    shapes = [(a.dtype, a.shape) for a in arrays]
    flat = np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays]) if arrays else np.zeros(0, np.uint8)
    return torch.from_numpy(flat), [layout, shapes]


def unpack(data: torch.Tensor, layout) -> list:
    """The payload :func:`pack` packed, from its bytes and layout."""
    chunks, shapes = layout
    raw = data.numpy()
    arrays, offset = [], 0
    for dtype, shape in shapes:
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        arrays.append(raw[offset : offset + size].view(dtype).reshape(shape).copy())
        offset += size
    out, k = [], 0
    for is_tuple, count in chunks:
        out.append(tuple(arrays[k : k + count]) if is_tuple else arrays[k])
        k += count
    return out


def compressor_hook(state: CompressorHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average one bucket with the state's compressor over its process group; a future of the average."""
    buffer = bucket.buffer()
    comp = state.compressor_for(bucket.index(), buffer.numel())
    group = state.process_group
    prep = comp.prepare(buffer, state.iteration)
    if bucket.is_last():
        state.iteration += 1
    if comp.summable:
        stats = prep.stats.clone()
        dist.all_reduce(stats, op=dist.ReduceOp.MAX, group=group)  # the shared scale (TernGrad)
        payload = comp.encode(prep, stats)
        sizes = np.cumsum([len(p) for p in payload])[:-1]
        n = dist.get_world_size(group)
        total, offset = summable_payload(comp, payload, n)

        def summed(fut):
            sums = np.split(fut.value()[0].numpy().astype(np.int64) + offset, sizes)
            buffer.copy_(comp.decode(prep, sums, n, stats))
            return buffer

        return dist.all_reduce(total, group=group, async_op=True).get_future().then(summed)
    zeros = torch.zeros_like(prep.stats)
    payload = comp.encode(prep, zeros)
    mine, layout = pack(payload)
    n = dist.get_world_size(group)
    gathered = [torch.empty_like(mine) for _ in range(n)]

    def decoded(fut):
        payloads = [unpack(t, layout) for t in gathered]
        buffer.copy_(comp.decode(prep, comp.aggregate(payloads), n, zeros))
        return buffer

    return dist.all_gather(gathered, mine, group=group, async_op=True).get_future().then(decoded)


def summable_payload(comp: Compressor, payload: list, n: int) -> tuple[torch.Tensor, int]:
    """A summable compressor's levels as the narrowest tensor an all-reduce of n workers can sum, and what
    to add to each sum to get the sum of the levels back. TernGrad's levels 0, 1, 2 are sent as -1, 0, 1:
    n of them sum to [-n, n], so int8 holds them for n ≤ 127 (a quarter of int32's bytes). The choice
    depends on the compressor and n only, so every worker makes the same one."""
    levels = np.concatenate([np.asarray(p) for p in payload]) if payload else np.zeros(0, np.int64)
    if isinstance(comp, TernGrad) and n <= 127:
        return torch.from_numpy((levels.astype(np.int16) - 1).astype(np.int8)), n
    return torch.from_numpy(levels.astype(np.int32)), 0


def one_bucket_in_flight(hook):
    """``hook`` with each bucket started only once the previous bucket's future is done. torch's
    powerSGD_hook waits inside its future callbacks for nested all-reduces; the callbacks run on gloo's
    worker threads (two per process group), so two buckets in flight can block both threads on collectives
    that only those threads could run, and every rank hangs at the first compressed step (charlm-stdlib,
    whose 3.3 MB of gradients make two DDP buckets). One bucket at a time blocks at most one thread; the
    next bucket's gradients are still computed while the previous one communicates."""
    previous = None

    def in_turn(state, bucket):
        nonlocal previous
        if previous is not None:
            previous.wait()
        previous = hook(state, bucket)
        return previous

    in_turn.__name__ = f"{getattr(hook, '__name__', 'hook')}_one_bucket_in_flight"
    return in_turn


BUCKET_SEEDS = 1 << 16  # bucket b of seed s draws from seed s * BUCKET_SEEDS + b


def _baseline(name: str, worker_id: int, seed: int, **params) -> Callable[[int], Compressor]:
    """The compressor of one bucket: its own random stream (the streams are keyed by worker, round and
    chunk, so two buckets with one seed would round alike)."""
    return lambda index: make_compressor(name, 1, worker_id, seed=seed * BUCKET_SEEDS + index, **params)


def make_gloo_hook(
    mode: str,
    process_group: dist.ProcessGroup | None = None,
    worker_id: int | None = None,
    seed: int = 0,
    **params,
):
    """(state, hook) of gloo mode ``mode`` (GLOO_MODES); ``params`` go to the thc compressor (e.g.
    ratio=0.01 for topk, qsgd_bits=4, chunk=...). worker_id: this rank's random stream (default: its rank)."""
    if mode not in GLOO_MODES:
        raise ConfigError(f"unknown gloo mode {mode!r}: choose from {', '.join(GLOO_MODES)}")
    if mode == GLOO:
        return process_group, default_hooks.allreduce_hook
    if mode == FP16:
        return process_group, default_hooks.fp16_compress_hook
    if mode == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group,
            matrix_approximation_rank=POWERSGD_RANK,
            start_powerSGD_iter=POWERSGD_START,
            random_seed=seed,
        )
        return state, one_bucket_in_flight(powerSGD_hook.powerSGD_hook)
    if worker_id is None:
        worker_id = dist.get_rank(process_group) if dist.is_available() and dist.is_initialized() else 0
    return CompressorHookState(_baseline(mode, worker_id, seed, **params), process_group), compressor_hook
