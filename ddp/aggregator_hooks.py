"""A PyTorch DDP communication hook that aggregates gradients with THC (or FIX32) through any aggregator.

Shaped like torch's own hooks: a small state class and one function, so the same hook trains through the
P4 switch, parameter servers or gloo, whichever aggregator the state holds (ddp/README.md: the two methods
an aggregator needs). ``thc_hook`` does not block the backward pass: it hands the bucket to the state's
aggregation thread and returns a future, as torch's hooks return an asynchronous all-reduce's, and gives
bit-identical results to the blocking reference (harness/blocking_hooks.py).

    >>> state = THCHookState(THCConfig(), GlooAggregator())
    >>> ddp_model.register_comm_hook(state, thc_hook)
"""

# No "from __future__ import annotations": DDP compares the hook's annotations with real types.

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist

from thc.aggregate import check_lanes
from thc.baselines.fixed_point import FixedPoint32
from thc.compressor import THCCompressor
from thc.config import THCConfig
from thc.errors import AggregationError, ConfigError, MembershipChanged
from thc.tables import Table
from thc.workspace import Workspace

__all__ = [
    "Aggregator",
    "GlooAggregator",
    "THCHookState",
    "thc_hook",
    "thc_reduce",
    "FixedPointHookState",
    "fix32_hook",
    "fix32_reduce",
    "round_of",
    "SerialRunner",
    "redo_on_membership_change",
]


_STOP = object()  # SerialRunner's end of work


class SerialRunner:
    """One daemon thread that runs submitted functions in order, each completing its own torch Future with
    the function's result, or with a RuntimeError "<type>: <message>" of what it raised (the exception
    itself is kept in ``errors``). Started on the first submit; ``close()`` ends it. A running function may
    look at the next one (``peek``) to start part of its work early."""

    def __init__(self, name: str = "thc-aggregation") -> None:
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ahead = None  # the next item, taken off the queue by peek()
        self.errors: list[BaseException] = []  # what the submitted functions raised, in order

    def submit(self, fn: Callable[[], torch.Tensor]) -> torch.futures.Future[torch.Tensor]:
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self._queue.put((fn, fut))
        return fut

    def peek(self) -> Callable | None:
        """The function submitted after the running one, if one is (for the running function, on the
        runner's thread: it runs next all the same)."""
        if self._ahead is None:
            try:
                self._ahead = self._queue.get_nowait()
            except queue.Empty:
                return None
        return None if self._ahead is _STOP else self._ahead[0]

    def _run(self) -> None:
        while True:
            item, self._ahead = (self._ahead if self._ahead is not None else self._queue.get()), None
            if item is _STOP:
                return
            fn, fut = item
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                # DDP re-raises a hook future's error as a RuntimeError carrying only its message: keep the
                # type's name in it, and the exception in `errors` (where thc-worker reads its type)
                self.errors.append(exc)
                fut.set_exception(RuntimeError(f"{type(exc).__name__}: {exc}"))
            else:
                fut.set_result(result)

    def close(self) -> None:
        """Let the thread finish what was submitted, then end it."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()


class Aggregator(Protocol):
    def all_max(self, t: torch.Tensor) -> torch.Tensor: ...

    def all_sum_table_values(self, indices: Sequence[np.ndarray], table: Table) -> tuple[list[np.ndarray], int]: ...


class GlooAggregator:
    """Aggregates over a torch.distributed process group: MAX all-reduce of norms, SUM all-reduce of int32
    table values (looked up locally). Every rank of the group contributes, so contributors = group size."""

    LANE_BITS = 31  # int32 sums, non-negative

    def __init__(self, process_group: dist.ProcessGroup | None = None) -> None:
        self.process_group = process_group

    def _size(self) -> int:
        return dist.get_world_size(self.process_group)

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        out = t.detach().to(device="cpu", dtype=torch.float32).clone()
        dist.all_reduce(out, op=dist.ReduceOp.MAX, group=self.process_group)
        return out

    def all_sum_table_values(self, indices: Sequence[np.ndarray], table: Table) -> tuple[list[np.ndarray], int]:
        n = self._size()
        check_lanes(n, table.granularity, self.LANE_BITS)
        lut = table.values.astype(np.int32)
        flat = np.concatenate([np.take(lut, np.asarray(idx)) for idx in indices])
        sums = torch.from_numpy(flat)
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=self.process_group)
        sizes = np.cumsum([len(idx) for idx in indices])[:-1]
        return list(np.split(sums.numpy(), sizes)), n

    def all_sum_int32(self, values: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
        """Per chunk, the int32 sum over workers (the fixed-point baseline), and the number of workers."""
        flat = torch.from_numpy(np.concatenate([np.asarray(v, dtype=np.int32) for v in values]))
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.process_group)
        sizes = np.cumsum([len(v) for v in values])[:-1]
        return list(np.split(flat.numpy(), sizes)), self._size()


class THCHookState:
    """State of :func:`thc_hook` on one worker.

    config: the THC job parameters (identical on every rank). aggregator: see the module docstring.
    worker_id: this rank's id, which selects its own rounding stream (default: the process-group rank).
    The round counter ``iteration`` advances after the last bucket of each backward pass; with the bucket
    index it keys the shared Hadamard signs. One compressor per bucket holds that bucket's error-feedback
    memory; if DDP rebuilds its buckets (after the first iteration) a bucket of a new size starts afresh.
    """

    __slots__ = [
        "config",
        "aggregator",
        "worker_id",
        "iteration",
        "compressors",
        "buckets_seen",
        "workspace",
        "runner",
    ]

    def __init__(self, config: THCConfig, aggregator: Aggregator, worker_id: int | None = None) -> None:
        if not isinstance(config, THCConfig):
            raise ConfigError(f"config must be a THCConfig, not {type(config).__name__}")
        for method in ("all_max", "all_sum_table_values"):
            if not callable(getattr(aggregator, method, None)):
                raise ConfigError(f"aggregator {type(aggregator).__name__} has no {method}() method")
        if worker_id is None:
            worker_id = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.config = config
        self.aggregator = aggregator
        self.worker_id = worker_id
        self.iteration = 0
        self.compressors: dict[int, THCCompressor] = {}
        self.buckets_seen = 0
        self.workspace = Workspace()  # the buckets are reduced one at a time: one set of scratch buffers
        self.runner = SerialRunner()  # thc_hook's aggregation thread

    def close(self) -> None:
        """End the aggregation thread (after the buckets it holds)."""
        self.runner.close()

    def compressor_for(self, bucket_index: int, numel: int) -> THCCompressor:
        comp = self.compressors.get(bucket_index)
        if comp is None:
            comp = THCCompressor(self.config, self.worker_id, workspace=self.workspace)
            self.compressors[bucket_index] = comp
        elif comp.feedback is not None and comp.feedback.memory is not None and comp.feedback.memory.numel() != numel:
            comp.feedback.reset()
        return comp


NEXT_BUCKET_POLL = 0.001  # s: while a bucket's sums are in flight, how often the thread looks for the next


def _overlaps(aggregator) -> bool:
    """Whether the aggregator can start a call while another is in flight (SwitchAggregator can)."""
    return all(callable(getattr(aggregator, m, None)) for m in ("start_max", "start_sum_table_values", "finish"))


class _THCRound:
    """One bucket's THC round: norm round (all_max), encode to table indices, integer sums
    (all_sum_table_values), decode into the bucket in place (the bucket takes the average). Its
    preparation and norm round may start early (``start_norm``), on the aggregation thread, while the
    previous bucket's sums are in flight."""

    def __init__(
        self, state: THCHookState, buffer: torch.Tensor, index: int, iteration: int, last: bool = True
    ) -> None:
        self.state, self.buffer, self.index, self.iteration = state, buffer, index, iteration
        self.last = last  # the last bucket of its backward pass: no next one comes while its sums are out
        self.comp: THCCompressor | None = None
        self.prep = None
        self.norm = None  # the norm round's call, started early

    def _prepare(self) -> None:
        if self.prep is None:
            self.comp = self.state.compressor_for(self.index, self.buffer.numel())
            self.prep = self.comp.prepare(self.buffer, self.iteration, key=self.index)

    def start_norm(self) -> None:
        """Prepare the bucket and send its norm round now."""
        self._prepare()
        if self.norm is None:
            self.norm = self.state.aggregator.start_max(self.prep.norms)

    def __call__(self, overlap: bool = True) -> torch.Tensor:
        """The round (on the aggregation thread; ``overlap`` False: in the caller, nothing started early)."""
        state, agg = self.state, self.state.aggregator
        overlapped = _overlaps(agg)
        self._prepare()
        comp, prep = self.comp, self.prep
        meanwhile = self._start_next if overlap and overlapped and not self.last else None

        def norm_encode_sum():
            if overlapped:
                norm, self.norm = self.norm or agg.start_max(prep.norms), None
                max_norms = agg.finish(norm)
            else:
                max_norms = agg.all_max(prep.norms)
            # sets the EF memory anew: a redone round overwrites it; a partial norm round may lack our own norm
            partial = bool(getattr(agg, "last_max_partial", False))
            if encodes:  # the aggregator encodes into its requests' layout; the sums come back flat
                call = agg.start_sum_encoded(comp, prep, max_norms, partial=partial)
                return max_norms, agg.finish(call, meanwhile=meanwhile, poll=NEXT_BUCKET_POLL)
            indices = comp.encode(prep, max_norms, partial=partial)
            if overlapped:
                call = agg.start_sum_table_values(indices, comp.table)
                return max_norms, agg.finish(call, meanwhile=meanwhile, poll=NEXT_BUCKET_POLL)
            return max_norms, agg.all_sum_table_values(indices, comp.table)

        encodes = overlapped and callable(getattr(agg, "start_sum_encoded", None))
        max_norms, summed = redo_on_membership_change(norm_encode_sum)
        contributors = summed[-1]
        if isinstance(contributors, (int, np.integer)) and contributors < 1:
            raise AggregationError(f"the aggregator reported {contributors} contributors")
        if encodes:
            lanes, per_packet, _ = summed
            comp.decode_lanes(prep, lanes, per_packet, contributors, max_norms, out=self.buffer)
        else:
            comp.decode(prep, summed[0], contributors, max_norms, out=self.buffer)
        state.buckets_seen += 1
        return self.buffer

    def _start_next(self) -> bool:
        """While this bucket's sums are in flight: once the next bucket is handed over, its norm round goes
        out (after this bucket's sums, as in the blocking order). Whether to keep looking."""
        nxt = self.state.runner.peek()
        if not isinstance(nxt, _THCRound):
            return nxt is None
        try:
            nxt._prepare()
        except Exception:  # noqa: BLE001 - the next bucket's own error (its gradient): raised again when it runs
            return False
        nxt.start_norm()
        return False


def thc_reduce(state: THCHookState, buffer: torch.Tensor, index: int, iteration: int) -> torch.Tensor:
    """One bucket's THC round in the caller (harness/blocking_hooks.py's reference)."""
    return _THCRound(state, buffer, index, iteration)(overlap=False)


MAX_REDOS = 32  # a round is redone once per membership change, and a job has at most 32 workers


def redo_on_membership_change(round_fn: Callable[[], tuple]) -> tuple:
    """``round_fn()`` (a round's norm, encode and sum phases), run again whenever the aggregator reports
    that the job's workers changed (MembershipChanged: a worker failed and the survivors were admitted as
    a new job). The round's prepared input is reused: ``prepare`` added the error-feedback memory once,
    and ``encode`` sets the memory from scratch, so a redone round is the survivors' round exactly."""
    for _ in range(MAX_REDOS):
        try:
            return round_fn()
        except MembershipChanged:
            continue
    raise AggregationError(f"the job's membership changed {MAX_REDOS} times within one round")


def round_of(state, bucket) -> int:
    """The round this bucket belongs to; the last bucket of a backward pass ends it (when handed over, so
    the next pass's buckets take the next round whether or not this one is done)."""
    iteration = state.iteration
    if bucket.is_last():
        state.iteration += 1
    return iteration


def thc_hook(state: THCHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average one gradient bucket across workers with THC; the result replaces the bucket's contents.

    Returns at once: the state's aggregation thread runs the round (see the module docstring) and then
    completes the future with the AVERAGE gradient, like DDP's default all-reduce hook.
    """
    buffer, index, last = bucket.buffer(), bucket.index(), bucket.is_last()
    iteration = round_of(state, bucket)
    return state.runner.submit(_THCRound(state, buffer, index, iteration, last))


class FixedPointHookState:
    """State of :func:`fix32_hook`, the uncompressed SwitchML-style baseline (int32 fixed point).

    aggregator: needs ``all_max`` and ``all_sum_int32(values) -> (sums, contributors)``. workers: the job's
    n, which sets the int32 headroom; by default the aggregator's ``n_workers``, else the process group's size.
    """

    __slots__ = ["aggregator", "compressor", "iteration", "runner"]

    def __init__(self, aggregator, workers: int | None = None, chunk: int = 2**20) -> None:
        for method in ("all_max", "all_sum_int32"):
            if not callable(getattr(aggregator, method, None)):
                raise ConfigError(f"aggregator {type(aggregator).__name__} has no {method}() method")
        if workers is None:
            workers = getattr(aggregator, "n_workers", None)
        if workers is None and dist.is_available() and dist.is_initialized():
            workers = dist.get_world_size()
        self.aggregator = aggregator
        self.compressor = FixedPoint32(workers, chunk=chunk) if workers is not None else FixedPoint32(chunk=chunk)
        self.iteration = 0
        self.runner = SerialRunner("fix32-aggregation")  # fix32_hook's aggregation thread

    def close(self) -> None:
        """End the aggregation thread (after the buckets it holds)."""
        self.runner.close()


def fix32_reduce(state: FixedPointHookState, buffer: torch.Tensor, iteration: int) -> torch.Tensor:
    """One bucket's FIX32 round: max |x| round, int32 sums, decode into ``buffer``."""
    comp = state.compressor
    prep = comp.prepare(buffer, iteration)

    def norm_encode_sum():
        stats = state.aggregator.all_max(prep.stats)
        partial = bool(getattr(state.aggregator, "last_max_partial", False))  # may lack our own max |x|
        return stats, *state.aggregator.all_sum_int32(comp.encode(prep, stats, partial=partial))

    stats, sums, contributors = redo_on_membership_change(norm_encode_sum)
    # one count, or per-coordinate counts where partial aggregation released slots with fewer workers
    buffer.copy_(comp.decode(prep, sums, contributors, stats))
    return buffer


def fix32_hook(state: FixedPointHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average one bucket with int32 fixed point; returns at once, like :func:`thc_hook` (the state's
    thread completes the future with the average), so THC and FIX32 overlap the backward pass alike."""
    buffer = bucket.buffer()
    iteration = round_of(state, bucket)
    return state.runner.submit(lambda: fix32_reduce(state, buffer, iteration))
