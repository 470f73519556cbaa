"""`SwitchAggregator`: the THC DDP hook's aggregator, served by the P4 switch.

The hook (ddp.aggregator_hooks) asks an aggregator per bucket for the element-wise max of the workers' chunk
norms and, per coordinate, the sum of the table values of their indices with the number of contributors.
The switch does both (NORM requests keep a running max; THC requests' indices are looked up in the job's
table, installed from the same description the workers got, and summed), so the table passed here is only
checked against the job's. FIX32 goes through the same program without a table: `all_sum_int32`.

Every call comes in two halves, `start_*` and `finish`, so the hook can send the next bucket's norm round
while this bucket's sums are on the wire; calls finish in the order they started, and every worker must
start them in the same order (DDP hands every rank its buckets in the same order)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

import contract
from contract.job import JobSpec
from host_agent import wire
from host_agent.membership import Membership
from host_agent.operation import pack_indices
from host_agent.pool_fallback import PoolFallback
from host_agent.protocol import Interrupted, Operation, WorkerProtocol
from host_agent.transport import RawSocketTransport
from thc.errors import MembershipChanged

_CALLS_MAX = 2**24 - 1  # completed calls are agreed on as float32 NORM values, exact below 2**24


@dataclass
class Call:
    """An aggregation call started and not finished (SwitchAggregator.start_*): how it starts in a job (to
    start it again there after a switch restart), its operation, the protocol (job) that runs it, the
    worker failures the worker had moved past when it started, and what turns the operation's result into
    the call's."""

    start: Callable[[WorkerProtocol], Operation]
    op: Operation
    protocol: WorkerProtocol
    failures: int
    result: Callable[[Operation, object], object]


class SwitchAggregator:
    """Aggregates through the switch for one worker of one job. Blocking; raises AggregationTimeout.

    Build it with `open(...)` on a host (a raw socket on the worker's interface), or around any
    WorkerProtocol (e.g. one on the in-process loopback wire).
    """

    def __init__(
        self,
        protocol: WorkerProtocol,
        membership: Callable[[], Membership | None] | None = None,
        on_rejoin: Callable[[dict], None] = lambda record: None,
    ):
        self.protocol = protocol  # its job's description (protocol.spec) says n, the framing and the table
        self.last_max_partial = (
            False  # the latest all_max had results of released slots (ddp.aggregator_hooks reads it)
        )
        self._tables: dict[JobSpec, np.ndarray] = {}
        self._checked: tuple | None = None  # (table object, (job, n), its values): the last table that passed
        # worker failure (see "Worker failure" in host_agent/README.md): `membership` polls for notices
        self.membership = membership
        self.on_rejoin = on_rejoin
        self.generation = 0
        self.calls = 0  # aggregation calls completed, over all generations
        self.rejoins: list[dict] = []
        self._pending: tuple | None = None  # (notice, its protocol, X, lowest, when noticed, calls then)
        self._retired: list[WorkerProtocol] = []
        self._last: Callable[[WorkerProtocol], Operation] | None = None  # the last completed call, to replay
        self._failures = 0  # moves to a new job after a worker failure (a call started before one is redone)

    @classmethod
    def open(
        cls,
        iface: str,
        spec: JobSpec,
        worker_id: int,
        service_ip: str,
        service_mac: str,
        src_ip: str,
        src_mac: str,
        *,
        timeout: float = 0.05,
        max_timeout: float = 1.0,
        deadline: float = 30.0,
        min_timeout: float = 0.002,
        dupthresh: int = 3,
        coalesce: float = 0.5,
        membership: Callable[[], Membership | None] | None = None,
        on_rejoin: Callable[[dict], None] = lambda record: None,
        straggler_timeout: float | None = None,
        query_first: bool = False,
        fallback_server: wire.Endpoint | None = None,
    ) -> SwitchAggregator:
        """A raw socket on `iface`, sending to the switch's service address (service_ip, and service_mac: the next
        hop's MAC towards the switch) from this host's (src_ip, src_mac).

        `spec` is the job's description, the one the switch's job was added with (Ticket.load(FILE).spec): its
        window, key, n and framing are the worker's. Retransmission: `timeout` is the first timeout, then the
        measured round trip (at least `min_timeout`), doubled per expiry up to `max_timeout`; `dupthresh` later
        results resend a missing request at once (0: timers only); past `deadline` a missing result raises
        AggregationTimeout; `coalesce`: the share of the outstanding results' expected time a blocking call lets
        them gather (WorkerProtocol.hold); `query_first`: a retransmission asks with a QUERY first. `membership`
        polls for new memberships, `on_rejoin` gets a record per move; `straggler_timeout`: seconds after which an
        unanswered request releases its slot (None: wait for all); `fallback_server`: where a pool job's FALLBACK
        rounds go (host_agent/pool_fallback.py)."""
        transport = RawSocketTransport(iface, src_ip=src_ip)
        builder = wire.FrameBuilder(wire.Endpoint(src_mac, src_ip), wire.Endpoint(service_mac, service_ip))
        try:
            protocol = WorkerProtocol(
                transport,
                builder,
                spec,
                worker_id,
                timeout=timeout,
                min_timeout=min_timeout,
                max_timeout=max_timeout,
                deadline=deadline,
                dupthresh=dupthresh,
                coalesce=coalesce,
                straggler_timeout=straggler_timeout,
                query_first=query_first,
            )
            if fallback_server is not None:
                protocol.pool_fallback = PoolFallback(fallback_server)
        except Exception:
            transport.close()
            raise
        return cls(protocol, membership, on_rejoin)

    @property
    def n_workers(self) -> int:
        """n of the job this worker aggregates in now (fewer after a worker failure)."""
        return self.protocol.n_workers

    # ---- the hook's interface ----------------------------------------------------------------------

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        """Element-wise max over workers of non-negative float32 values (the chunk norms)."""
        return self.finish(self.start_max(t))

    def all_sum_table_values(self, indices: Sequence[np.ndarray], table) -> tuple[list[np.ndarray], int]:
        """Per chunk and coordinate, Σ_workers table[index]; and the number of workers summed (per chunk and
        coordinate when released slots counted fewer: WorkerProtocol's partial aggregation).

        `indices`: one uint8 array of table indices (one per coordinate) per chunk. `table`: the 2^b
        integer values the caller decodes with (a sequence, array or an object with `.values`): the job's,
        which the switch sums with.
        """
        return self.finish(self.start_sum_table_values(indices, table))

    def all_sum_int32(self, values: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
        """FIX32 baseline: per chunk and coordinate the int32 sum over workers (wrapping), and the number
        of workers summed."""
        return self.finish(self.start_sum_int32(values))

    def start_max(self, t: torch.Tensor) -> Call | None:
        """all_max's first half: the NORM requests go out; finish() returns the maxima."""
        as_given = t.device.type == "cpu" and t.dtype == torch.float32  # the maxima need no conversion
        values = t if as_given else t.to("cpu", torch.float32)
        values = self._kept((values.detach() if values.requires_grad else values).numpy().reshape(-1))

        def maxima(op: Operation, result: np.ndarray) -> torch.Tensor:
            if op.n:  # every result has the first's count unless partial aggregation mixed them
                one = not op.mixed_counts and op.count is not None
                self.last_max_partial = (op.count if one else int(op.counts.min())) < self.n_workers
            else:
                self.last_max_partial = False
            out = torch.from_numpy(result)
            if out.shape != t.shape:
                out = out.reshape(t.shape)
            return out if as_given else out.to(device=t.device, dtype=t.dtype)

        return self._begin(lambda p: p.start_max(values), maxima)

    def start_sum_table_values(self, indices: Sequence[np.ndarray], table) -> Call | None:
        """all_sum_table_values' first half (the table is checked against the job's at once)."""
        values = self._check_table(table)
        for chunk in indices:
            if chunk.size and int(np.max(chunk)) >= values.size:
                raise ValueError(
                    f"index {int(np.max(chunk))} is outside the table of {values.size} entries: "
                    f"the switch would drop the packet (BAD_INDEX)"
                )
        indices = [self._kept(chunk) for chunk in indices]
        return self._begin(lambda p: p.start_sum_indices(indices), lambda op, result: result)

    def start_sum_encoded(self, comp, prep, max_norms, partial: bool = False) -> Call | None:
        """Encode `prep` (a THCCompressor's prepared gradient) with `max_norms` straight into the layout of
        THC requests (THCCompressor.encode_packed) and start their sums: no index array, no packing pass.
        finish() returns (the sums of every request as one flat int32 array, K: the coordinates a request,
        contributors), which THCCompressor.decode_lanes takes back. The compressor's table is checked
        against the job's as all_sum_table_values checks it; its indices are in range by construction."""
        self._check_table(comp.table)
        k = self.protocol.spec.coords_per_request
        if comp.table.bits == 4:  # the wire's indices are nibbles: encode_packed writes them so
            packed = np.empty(comp.packed_bytes(prep, k), np.uint8)  # the call's own: replayed as it is
            lengths = comp.encode_packed(prep, max_norms, packed, k, partial=partial)
        else:  # fewer bits an index: each still takes a nibble on the wire
            indices = comp.encode(prep, max_norms, partial=partial)
            packed, lengths = np.frombuffer(pack_indices(indices, k)[0], np.uint8), [i.size for i in indices]
        return self._begin(lambda p: p.start_sum_packed(packed, lengths), lambda op, result: (result[0], k, result[1]))

    def _check_table(self, table) -> np.ndarray:
        """The table's values, checked against the job's (once per table object, job and n: a check walks
        the table)."""
        spec = self.protocol.spec
        if self._checked is not None and self._checked[0] is table and self._checked[1] == (spec, self.n_workers):
            return self._checked[2]
        values = np.asarray(getattr(table, "values", table)).reshape(-1)
        if not 2 <= values.size <= 2**contract.MAX_BITS:
            raise ValueError(f"the switch takes tables of 2..16 entries (b = 1..4 bits), got {values.size}")
        lane_max = (1 << spec.lane_bits) - 1
        if values.min() < 0 or values.max() > contract.TABLE_VALUE_MAX or self.n_workers * values.max() > lane_max:
            raise ValueError(
                f"table values 0..{contract.TABLE_VALUE_MAX} whose sums over {self.n_workers} workers fit job "
                f"{spec.job_id}'s {spec.lane_bits}-bit lanes (n·g ≤ {lane_max}); got values up to {int(values.max())}"
            )
        job_table = self._job_table(spec)
        if values.shape != job_table.shape or (values != job_table).any():
            raise ValueError(
                f"the switch sums job {spec.job_id}'s table {job_table.tolist()} but this call decodes with "
                f"{values.tolist()}: compress with the job's description (JobSpec.codec, thc-worker --job)"
            )
        frozen = getattr(table, "values", None)
        if isinstance(frozen, np.ndarray) and not frozen.flags.writeable:  # a Table; anything else may change
            self._checked = (table, (spec, self.n_workers), values)
        return values

    def start_sum_int32(self, values: Sequence[np.ndarray]) -> Call | None:
        """all_sum_int32's first half."""
        values = [self._kept(chunk) for chunk in values]
        return self._begin(lambda p: p.start_sum_fix32(values), lambda op, result: result)

    def _kept(self, values: np.ndarray) -> np.ndarray:
        """A call's input as the call saw it: a copy when notices may come (a restarted switch makes a worker
        replay its last call, whose input buffers the caller may have reused since)."""
        return np.array(values, copy=True) if self.membership is not None else values

    def _job_table(self, spec: JobSpec) -> np.ndarray:
        """The job's table values (computed once per description: an optimal table is a dynamic programme)."""
        if spec not in self._tables:
            self._tables[spec] = np.asarray(spec.table_values())
        return self._tables[spec]

    # ---- worker failure and switch restart -------------------------------------------------------
    #
    # A notice names the survivors' new job. Each survivor first agrees with the others on where the old
    # job ends: a NORM round in the new job (request 0) of the number of calls it has completed, and
    # of its complement, gives the maximum X and the minimum over the survivors. No survivor can have
    # completed a call that the dead worker did not contribute to, and a survivor that completed call X − 1
    # proves every worker sent all of X − 1's requests, so one that is behind is at most one call behind and
    # can still finish its calls below X in the old job (the switch answers their retransmissions from the
    # stored results). Call X then raises MembershipChanged on every survivor, before or while it runs, and
    # it and everything after go to the new job: the survivors redo the same round from its norm phase,
    # with the same request numbers, and no round mixes the two memberships.
    #
    # A notice that the switch restarted names the same workers in the job re-added with a fresh key and
    # epoch. The switch lost the old job's cells and stored results, so nothing can finish there: every
    # worker runs the call it was in again in the new job, with the same input (the membership is the same,
    # so are the sums, and no round needs redoing). One that is behind needs the others' part of its call
    # once more: if the minimum is below X, the workers that completed call X − 1 send it again first (its
    # result, the one they already have, is dropped).

    # Calls in flight together (the next bucket's norm round started while this bucket's sums are out):
    # a move abandons every call in flight of the old job. After a worker failure each of them raises
    # MembershipChanged when it is finished, and the survivors redo the round in the new job in the order
    # they would have started its calls; after a switch restart each starts again in the new job when it
    # is finished, in the order they started, as a worker that never started one early starts it then.

    def _begin(self, start: Callable[[WorkerProtocol], Operation], result: Callable) -> Call | None:
        """Start a call in the current job (or MembershipChanged, see above). A call started while others
        are in flight (the next bucket's norm round) never moves the worker to a new job: the calls in
        flight come first, and a move abandons them and starts them again in the new job ahead of this one.
        So with a notice pending it is not started (None): the caller starts it again once they are
        finished, when the move has happened or is known not to be due yet."""
        if self.protocol.busy:
            if self._pending is not None:
                return None
        else:
            self._follow_membership(waiting=False)
        return Call(start, start(self.protocol), self.protocol, self._failures, result)

    def finish(self, call: Call, meanwhile: Callable[[], bool] | None = None, poll: float = 0.05):
        """Wait for `call` (the oldest call not finished) and return its result, or raise MembershipChanged
        (see above). `meanwhile`, when given, is called at least every `poll` s while the call waits, until
        it returns False: other work, e.g. starting the next call."""
        while True:
            if self._follow_membership(waiting=True) or call.protocol is not self.protocol:
                if call.failures != self._failures:
                    raise MembershipChanged(
                        f"a call started in job {call.protocol.job_id} before this worker moved to job "
                        f"{self.protocol.job_id} after a worker failure: the round is redone in the new job"
                    )
                call.op, call.protocol = call.start(self.protocol), self.protocol  # the switch restarted
            notice = self._notice if self.membership else None
            interrupt, every = notice, 0.05
            if meanwhile is not None:
                every = poll

                def interrupt():
                    nonlocal meanwhile
                    if not meanwhile():
                        meanwhile = None
                        return True  # wait again, with the ordinary poll
                    return notice is not None and notice()

            try:
                result = self.protocol.wait(call.op, interrupt=interrupt, poll=every)
            except Interrupted:
                continue  # meanwhile's work is done, or a notice: _follow_membership decides
            self.calls += 1
            self._last = call.start
            return call.result(call.op, result)

    def _notice(self) -> bool:
        """A notice of a new generation is there (and not yet agreed on)."""
        if self._pending is not None or self.membership is None:
            return False
        notice = self.membership()
        if notice is None or notice.generation <= self.generation:
            return False
        self._agree(notice)
        return True

    def _follow_membership(self, waiting: bool) -> bool:
        """Move to the noticed job once it is time; True when the move was a switch restart's (the call in
        progress starts again in the new job); MembershipChanged when it was a worker failure's."""
        if self._pending is None:
            self._notice()
        if self._pending is None:
            return False
        notice, protocol, switch_at, lowest, noticed, calls_then = self._pending
        if not notice.restarted and self.calls < switch_at:
            return False  # finish this call in the old job first
        if waiting:
            self.protocol.abandon()
        self._retired.append(self.protocol)
        self.protocol, self.generation = protocol, notice.generation
        self._pending = None
        replayed = notice.restarted and self.calls > lowest
        if replayed:
            if self.calls != lowest + 1 or self._last is None:
                raise RuntimeError(f"worker {protocol.worker_id} is {self.calls - lowest} calls ahead of another")
            protocol.wait(self._last(protocol))  # the one behind needs this worker's part of call `lowest`
        record = {
            "generation": notice.generation,
            "job_id": notice.job_id,
            "epoch": notice.epoch,
            "n_workers": notice.n_workers,
            "failed": list(notice.failed),
            "restarted": notice.restarted,
            "at_call": lowest if notice.restarted else switch_at,  # the first call made in the new job
            "calls_at_notice": calls_then,  # below at_call: this worker finished calls in the old job first
            "replayed": replayed,  # a restart: this worker sent its last completed call again
            "rejoin_s": time.monotonic() - noticed,
        }
        self.rejoins.append(record)
        self.on_rejoin(record)
        if notice.restarted:
            return True
        self._failures += 1
        raise MembershipChanged(
            f"job {notice.job_id} (generation {notice.generation}): {notice.n_workers} workers from call {switch_at}"
        )

    def _agree(self, notice: Membership) -> None:
        me = self.protocol.worker_id
        if me not in notice.workers:
            raise RuntimeError(f"worker {me} is not among job {notice.job_id}'s workers {list(notice.workers)}")
        noticed = time.monotonic()
        protocol = self.protocol.for_job(notice.job_id, notice.n_workers, notice.key)
        # the maximum and the minimum of the completed calls, both as a max (exact: calls < 2**24)
        agreed = protocol.all_max(np.array([self.calls, _CALLS_MAX - self.calls], np.float32))
        highest, lowest = int(agreed[0]), _CALLS_MAX - int(agreed[1])
        self._pending = (notice, protocol, highest, lowest, noticed, self.calls)

    # ---- bookkeeping ------------------------------------------------------------------------------

    def stats(self) -> dict:
        """The protocol's counters, summed over every job this worker was in; the rejoins."""
        out = self.protocol.stats()
        for old in self._retired:
            for key, value in old.counters.as_dict().items():
                if key.endswith("_seconds") and key.startswith(("max_", "last_")):
                    continue
                if isinstance(value, (int, float)) and key != "mean_operation_seconds":
                    out[key] += value
        if out["operations"]:
            out["mean_operation_seconds"] = out["operation_seconds"] / out["operations"]
        out["generation"] = self.generation
        out["rejoins"] = self.rejoins
        return out

    def close(self) -> None:
        self.protocol.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
