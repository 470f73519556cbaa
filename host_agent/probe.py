"""thc-worker ``--probe``: rounds of aggregation of seeded random gradients instead of training.

Each round runs the phases a training step's hook runs (prepare, the norm round, encode, the sum, decode)
through the switch or the parameter servers, or a gloo all-reduce, and saves its inputs, outputs and where
its time went (PhaseClock), so that a test recomputes every round with thc's reference aggregation and a
benchmark reads the phases.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from host_agent.worker_cli import switch_aggregator
from host_agent.worker_io import cpu_counters, emit, interface_counters, use_interface
from thc.modes import FIX32, GLOO, PROBE_MODES, TABLE_MODES, codec_mode

if TYPE_CHECKING:
    import numpy as np


def probe_gradient(seed: int, rank: int, round_: int, size: int):
    """The random gradient worker ``rank`` aggregates in probe round ``round_`` (heavy-tailed on purpose,
    so that clipping and the norm round matter)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 1009 + round_)
    return torch.randn(size, generator=g) * torch.rand(size, generator=g).pow(4) * (rank + 1)


def probe(args) -> dict:
    """``--probe``: rounds of aggregation of seeded random gradients (THC or FIX32 through the switch, or a
    gloo all-reduce), timed after a barrier; every round's inputs and outputs go to the .npz file."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    aggregator = barrier = None
    if args.mode == GLOO:
        import torch.distributed as dist

        use_interface(args.iface)
        dist.init_process_group(
            "gloo",
            init_method=args.init_method,
            rank=args.rank,
            world_size=args.world_size,
            timeout=timedelta(seconds=args.rendezvous_timeout),
        )
        barrier = dist.barrier
    else:
        aggregator = switch_aggregator(args)
        barrier = lambda: aggregator.all_max(torch.zeros(1))  # a NORM round waits for every worker
    if args.mode not in PROBE_MODES:
        raise ValueError(f"--probe aggregates with {', '.join(PROBE_MODES)}, not {args.mode}")
    one_round = _gloo_round if args.mode == GLOO else switch_round_deferred
    codec = probe_codec(args)
    # every round's gradient made before the rounds start, and what a round saves put together after the last:
    # either between two rounds would hold the next norm round back for every worker, a cost of this harness,
    # not of aggregation
    grads = [probe_gradient(args.probe_seed, args.rank, k, args.probe_size) for k in range(args.probe_rounds)]
    saved, rounds = {}, []
    try:
        emit({"event": "start", "rank": args.rank, "mode": args.mode, "setup_s": 0.0, "parameters": args.probe_size})
        barrier()
        before = interface_counters(args.iface)
        cpu_before = cpu_counters()
        for k, grad in enumerate(grads):
            start = time.perf_counter()
            arrays = one_round(args, aggregator, grad, k, codec)
            seconds = time.perf_counter() - start
            rounds.append((k, seconds, arrays))
            emit(
                {
                    "event": "step",
                    "rank": args.rank,
                    "step": k + 1,
                    "loss": 0.0,
                    "step_time": seconds,
                    "t": 0.0,
                }
            )
        cpu_after = cpu_counters()
        after = interface_counters(args.iface)
        for k, seconds, arrays in rounds:
            saved.update({f"r{k}_{name}": value for name, value in arrays().items()})
            saved[f"r{k}_seconds"] = np.float64(seconds)
        saved["cpu"] = np.array(json.dumps({k: cpu_after[k] - cpu_before[k] for k in cpu_after}))
        saved["wire"] = np.array(json.dumps({k: after[k] - before[k] for k in after}))
        if aggregator is not None:
            saved["stats"] = np.array(json.dumps(aggregator.stats()))
    finally:
        if aggregator is not None:
            aggregator.close()
        else:
            import torch.distributed as dist

            dist.destroy_process_group()
    args.probe.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.probe, **saved)
    return {"rounds": args.probe_rounds}


def probe_codec(args):
    """The mode's codec, built once per process as a training worker builds it once per run (THC's table
    comes from a dynamic programme: seconds the first time), and run once on a zero gradient so that the
    first timed round pays no lazy initialisation either. None for gloo."""
    import numpy as np
    import torch

    if codec_mode(args.mode) in TABLE_MODES:
        from thc.compressor import THCCompressor

        # the job's codec without error feedback: a probe round depends on its own gradient only
        config = dataclasses.replace(args.spec.codec, error_feedback=False)
        codec = THCCompressor(config, worker_id=args.rank)
    elif codec_mode(args.mode) == FIX32:
        from thc.baselines import FixedPoint32

        codec = FixedPoint32(args.world_size, worker_id=args.rank)
    else:
        return None
    warm = torch.ones(args.probe_size)
    prep = codec.prepare(warm, step=0)
    stats = prep.stats
    encoded = codec.encode(prep, stats)
    if codec_mode(args.mode) in TABLE_MODES:
        sums = [codec.table.values[i].astype(np.int64) for i in encoded]
    else:
        sums = [np.asarray(e, np.int64) for e in encoded]
    codec.decode(prep, sums, 1, stats)
    return codec


def _sums_int64(sums) -> np.ndarray:
    import numpy as np

    return np.concatenate([np.asarray(s, dtype=np.int64) for s in sums])


class PhaseClock:
    """Where a probe round's time goes: per phase its wall time and this thread's CPU time (ms), and for
    each aggregation call when its first result came (the wait for the slowest worker) and its
    retransmissions. Saved with the round as ``r{k}_phases`` (JSON)."""

    def __init__(self, aggregator=None):
        self.aggregator = aggregator
        self.records: dict[str, float] = {}
        self._ops: list = []  # (phase, the aggregation call's operation) of each phase that ran one
        self._seen = self._last_operation()
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def _last_operation(self):
        return getattr(getattr(self.aggregator, "protocol", None), "last_operation", None)

    def lap(self, name: str) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        self.records[f"{name}_ms"] = (wall - self._wall) * 1e3
        self.records[f"{name}_cpu_ms"] = (cpu - self._cpu) * 1e3
        op = self._last_operation()
        if op is not None and op is not self._seen:  # the phase ran an aggregation call: looked at in saved()
            self._seen = op
            self._ops.append((name, op))
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def saved(self):
        """The records, with each aggregation call's timings (read from its operation once the round is over)."""
        import numpy as np

        for name, op in self._ops:
            if op.first_result is not None:
                self.records[f"{name}_first_result_ms"] = (op.first_result - op.started) * 1e3
            self.records[f"{name}_op_ms"] = (op.finished - op.started) * 1e3
            if op.n:
                sent = op.first_sent.max() - op.started
                self.records[f"{name}_all_sent_ms"] = sent * 1e3  # the window let the last request go
                at = np.sort(op.answered_at) - op.started
                for q in (50, 90):
                    self.records[f"{name}_results{q}_ms"] = float(at[min(op.n - 1, op.n * q // 100)]) * 1e3
            self.records[f"{name}_requests"] = op.n
            self.records[f"{name}_transmissions"] = int(op.attempts.sum())
        self._ops = []
        return np.array(json.dumps(self.records))


# what a round saves of the max-reduced statistics and of the payload (the names bench and the tests read),
# and how the aggregator sums the payload: a table codec's indices as their table values, fix32's words as is
_TABLE_WIRE = (
    "max_norms",
    "indices",
    lambda agg, codec, indices: agg.all_sum_table_values(indices, codec.table),
)
_FIX32_WIRE = ("stats", "words", lambda agg, _codec, words: agg.all_sum_int32(words))


def switch_round(args, aggregator, grad, k: int, codec=None) -> dict:
    """One probe round with the mode's codec (``codec``, else a fresh one) through ``aggregator``: the
    codec interface's phases, each timed (PhaseClock); THC's, TernGrad-switch's and FIX32's differ only in
    what they save and how their payload is summed. What the round saves, as named arrays."""
    return switch_round_deferred(args, aggregator, grad, k, codec)()


def switch_round_deferred(args, aggregator, grad, k: int, codec=None) -> Callable[[], dict]:
    """switch_round's aggregation now, and a function that puts together what it saves, to call later."""
    import numpy as np

    codec = codec if codec is not None else probe_codec(args)
    stats_name, payload_name, all_sum = _TABLE_WIRE if codec_mode(args.mode) in TABLE_MODES else _FIX32_WIRE
    clock = PhaseClock(aggregator)
    prep = codec.prepare(grad, step=k)
    clock.lap("prepare")
    stats = aggregator.all_max(prep.stats)
    clock.lap("norm")
    if stats_name == "max_norms" and callable(getattr(aggregator, "start_sum_encoded", None)):
        return _packed_round(aggregator, codec, prep, stats, clock)
    payload = codec.encode(prep, stats)
    clock.lap("encode")
    sums, contributors = all_sum(aggregator, codec, payload)
    clock.lap("sum")
    decoded = codec.decode(prep, sums, contributors, stats)
    clock.lap("decode")
    return lambda: {
        stats_name: stats.numpy(),
        payload_name: np.concatenate(payload),
        "sums": _sums_int64(sums),
        "decoded": decoded.numpy(),
        "contributors": np.int64(contributors),
        "phases": clock.saved(),
    }


def _packed_round(aggregator, codec, prep, max_norms, clock: PhaseClock) -> Callable[[], dict]:
    """A table codec's round after its norm round as the DDP hook runs it through the switch (ddp.aggregator_hooks):
    encoded straight into the requests' layout and the sums started ("encode"), the flat sums waited for
    ("sum"), decoded from them ("decode"). The indices and per-chunk sums are saved as switch_round saves
    them, read back from the requests' frames and the flat sums after the last lap."""
    import numpy as np
    import torch

    from host_agent.wire import PAYLOAD_OFFSET, unpack_nibbles

    call = aggregator.start_sum_encoded(codec, prep, max_norms)
    clock.lap("encode")
    lanes, per_packet, contributors = aggregator.finish(call)
    clock.lap("sum")
    decoded = codec.decode_lanes(prep, lanes, per_packet, contributors, max_norms, out=torch.empty(prep.numel))
    clock.lap("decode")

    def arrays() -> dict:
        payload = call.op.frames[:, PAYLOAD_OFFSET : PAYLOAD_OFFSET + per_packet // 2]
        indices = unpack_nibbles(np.ascontiguousarray(payload).tobytes())
        padded = [c.padded for c in prep.chunks]
        starts = np.cumsum([0] + [-(-n // per_packet) * per_packet for n in padded])
        return {
            "max_norms": max_norms.numpy(),
            "indices": np.concatenate([indices[at : at + n] for at, n in zip(starts.tolist(), padded)]),
            "sums": np.concatenate([lanes[at : at + n] for at, n in zip(starts.tolist(), padded)]).astype(np.int64),
            "decoded": decoded.view(prep.shape).numpy(),
            "contributors": np.int64(contributors),
            "phases": clock.saved(),
        }

    return arrays


def _gloo_round(args, _aggregator, grad, _k: int, _codec=None) -> Callable[[], dict]:
    import numpy as np
    import torch.distributed as dist

    total = grad.clone()
    dist.all_reduce(total)
    return lambda: {
        "sums": total.numpy(),
        "decoded": (total / args.world_size).numpy(),
        "contributors": np.int64(args.world_size),
    }
