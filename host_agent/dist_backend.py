"""The switch as a torch.distributed backend named "thc": code that calls ``dist.all_reduce`` aggregates in it.

    import host_agent.dist_backend  # registers the backend
    dist.init_process_group("thc")  # under torchrun, with THC_JOB, THC_IFACE and THC_SERVICE_IP set

The DDP hook (``ddp.aggregator_hooks``) reaches the switch only from a model whose DDP registered it; a
backend serves every caller of the collective API (DDP without a hook, a custom loop, a library averaging
its metrics). Float SUM and AVG all-reduces go through the switch (``ddp.allreduce``), every other
collective to a gloo group on the same store, and an all-reduce the switch cannot do is refused with a
message rather than sent to gloo silently. The configuration (environment or ``pg_options``) and what goes
where are in docs/multi-host.md. The group's rank is the worker id in the job, and a process holds one
"thc" group: a second would number its requests from 0 again in the same job's slots.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from contract.job import JobSpec
from contract.ticket import Ticket
from ddp.allreduce import Fix32Sum, THCSum
from host_agent import identity
from thc.modes import BACKEND_MODES, THC
from thc.validation import SUPPORTED_DTYPES

__all__ = ["NAME", "MODES", "Options", "SwitchProcessGroup", "Unsupported", "options_from_environ"]

NAME = "thc"
MODES = tuple(BACKEND_MODES.values())  # THC_MODE: the codec of thc-worker's backend modes
SWITCH_OPS = {dist.ReduceOp.SUM: False, dist.ReduceOp.AVG: True}  # RedOpType -> average


class Unsupported(ValueError):
    """A collective the backend will not do; the message says what to set or use instead."""


@dataclass
class Options:
    """Everything the backend needs beyond rank, size and store. ``aggregator``: this rank's, open on its
    interface (``SwitchAggregator.open``), or any object with its methods (tests: the loopback wire); the
    group closes it when it shuts down."""

    spec: JobSpec
    aggregator: object
    mode: str = THC
    fallback: bool = False
    iface: str | None = None  # gloo's interface, unless GLOO_SOCKET_IFNAME is set

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise Unsupported(f"THC_MODE={self.mode!r}: use {' or '.join(MODES)}")


def _required(environ: Mapping[str, str], name: str, what: str) -> str:
    value = environ.get(name)
    if not value:
        raise Unsupported(f"the thc backend needs ${name}, {what}: set it, e.g. in front of torchrun")
    return value


def options_from_environ(rank: int, environ: Mapping[str, str] = os.environ) -> Options:
    """The backend's options from THC_* variables (module docstring), with rank's aggregator open."""
    from host_agent.aggregator import SwitchAggregator

    path = _required(environ, "THC_JOB", "the job's ticket (thc-ctl job add --save FILE)")
    iface = _required(environ, "THC_IFACE", "the interface towards the switch")
    service_ip = _required(environ, "THC_SERVICE_IP", "the switch's THC service address")
    mode = environ.get("THC_MODE", THC)
    fallback = environ.get("THC_FALLBACK", "0")
    if fallback not in ("0", "1"):
        raise Unsupported(f"THC_FALLBACK={fallback!r}: 1 sends the all-reduces the switch cannot do to gloo, 0 refuses")
    service_mac = environ.get("THC_SERVICE_MAC") or identity.neighbour_mac(service_ip, iface)
    if service_mac is None:
        raise Unsupported(
            f"no neighbour entry for THC_SERVICE_IP={service_ip} on {iface} (the switch answers no ARP): add one, "
            f"ip neigh replace {service_ip} lladdr MAC dev {iface} nud permanent, or set $THC_SERVICE_MAC"
        )
    spec = Ticket.load(path).spec  # the key the switch granted, as thc-worker --job reads it
    src = (identity.interface_ipv4(iface), identity.interface_mac(iface))
    aggregator = SwitchAggregator.open(iface, spec, rank, service_ip, service_mac, *src)
    return Options(spec, aggregator, mode, fallback == "1", iface)


def gloo_group(store, rank: int, size: int, timeout: timedelta, iface: str | None) -> dist.ProcessGroup:
    """A gloo process group on ``store``, on the interfaces GLOO_SOCKET_IFNAME names (as torch's own gloo
    groups), else on ``iface``, else on the address the host name resolves to."""
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timeout
    names = os.environ.get("GLOO_SOCKET_IFNAME") or iface
    if names:
        options._devices = [dist.ProcessGroupGloo.create_device(interface=name) for name in names.split(",")]
    else:
        options._devices = [dist.ProcessGroupGloo.create_default_device()]
    pg = dist.ProcessGroup(store, rank, size)
    pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    pg._register_backend(
        torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, dist.ProcessGroupGloo(store, rank, size, options)
    )
    return pg


class SwitchProcessGroup(dist.ProcessGroup):
    """Float SUM/AVG all-reduces through the switch, one at a time in call order on an aggregation thread
    (``Work`` completes when the sum is in, so DDP's backward overlaps it as it overlaps gloo); everything
    else through gloo."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, options: Options) -> None:
        super().__init__(rank, size)
        if options.spec.workers != size:
            raise Unsupported(
                f"job {options.spec.job_id} has {options.spec.workers} workers but the group has {size} ranks: "
                "the thc backend serves the job's workers, ranks 0..n-1 of the world"
            )
        self.options = options
        if options.mode == THC:
            self._sum = THCSum(options.spec.codec, options.aggregator, rank)
        else:
            self._sum = Fix32Sum(options.aggregator, size)
        self._gloo = gloo_group(dist.PrefixStore("gloo/", store), rank, size, timeout, options.iface)
        self._steps = itertools.count()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="thc-allreduce")
        self.closed = False
        # per switch all-reduce, the seconds from the call to the sum, less what the previous one still
        # held it: the wall time during which the switch path was busy (thc-worker's timed() for a hook)
        self.aggregation_seconds: list[float] = []
        self._last_done = 0.0
        self.errors: list[BaseException] = []  # what the aggregation thread raised, as raised

    def getBackendName(self) -> str:
        return NAME

    def allreduce(self, tensors: list[torch.Tensor], opts=None):
        op = _op_type(opts)
        if len(tensors) != 1:  # gloo would sum them into each other, as replicas of one tensor
            raise Unsupported(f"all_reduce of {len(tensors)} tensors at once: the thc backend takes one")
        if self._through_switch(tensors, op, "all_reduce"):
            return self._switch(tensors, SWITCH_OPS[op])
        return self._gloo.allreduce(tensors, opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts=None):
        op = _op_type(opts)
        if self._through_switch(tensors, op, "all_reduce_coalesced"):
            return self._switch(tensors, SWITCH_OPS[op])
        return self._gloo.allreduce_coalesced(tensors, opts or dist.AllreduceCoalescedOptions())

    def _through_switch(self, tensors: list[torch.Tensor], op, what: str) -> bool:
        """Whether the switch sums these; False sends them to gloo (fallback); refused otherwise."""
        wrong = next((t.dtype for t in tensors if t.dtype not in SUPPORTED_DTYPES), None)
        if op in SWITCH_OPS and wrong is None:
            return True
        if self.options.fallback:
            return False
        bad = f"{str(wrong).replace('torch.', '')} tensors" if wrong is not None else f"ReduceOp.{op.name}"
        raise Unsupported(
            f"{what} of {bad}: the thc backend sums float tensors (SUM or AVG) through the switch and does "
            "nothing else silently; set THC_FALLBACK=1 (Options(fallback=True)) to send such all-reduces to "
            'gloo, or all-reduce them on a gloo group (dist.new_group(backend="gloo"))'
        )

    def _switch(self, tensors: list[torch.Tensor], average: bool):
        """A Work that completes when the aggregation thread has summed ``tensors`` (as one) in place."""
        step = next(self._steps)  # taken in call order: every rank numbers its rounds alike
        future: torch.futures.Future = torch.futures.Future()
        called = time.perf_counter()

        def run() -> None:
            try:
                _reduce_in_place(self._sum, tensors, step, average)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the work
                # DDP re-raises only the text: the type's name stays in it, the exception in `errors`
                self.errors.append(exc)
                future.set_exception(RuntimeError(f"{type(exc).__name__}: {exc}"))
                return
            done = time.perf_counter()
            self.aggregation_seconds.append(done - max(called, self._last_done))
            self._last_done = done
            future.set_result(tensors)

        self._thread.submit(run)
        return SwitchWork(future)

    def shutdown(self) -> None:
        """After the all-reduces handed over: the aggregation thread, the switch socket, gloo."""
        self.closed = True
        self._thread.shutdown(wait=True)
        close = getattr(self.options.aggregator, "close", None)
        if close is not None:
            close()
        self._gloo.shutdown()


class SwitchWork(dist._Work):
    """A switch all-reduce in flight. ``wait()`` raises what the aggregation thread raised: torch's own
    Work around a future (``_create_work_from_future``) returns True from a failed one, and a synchronous
    ``dist.all_reduce`` would then go on with the tensor unsummed."""

    def __init__(self, future: torch.futures.Future) -> None:
        super().__init__()
        self._future = future

    def wait(self, timeout=None) -> bool:
        self._future.wait()
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def get_future(self) -> torch.futures.Future:
        return self._future


def _reduce_in_place(reduce: Callable, tensors: list[torch.Tensor], step: int, average: bool) -> None:
    """One switch round over ``tensors`` laid end to end, written back into them."""
    direct = len(tensors) == 1 and tensors[0].dtype == torch.float32 and tensors[0].is_contiguous()
    flat = tensors[0].detach().view(-1) if direct else torch.cat([t.detach().reshape(-1).float() for t in tensors])
    if flat.numel():
        reduce(flat, step, average)
    if not direct:
        for t, part in zip(tensors, flat.split([t.numel() for t in tensors])):
            t.copy_(part.view_as(t))


def _op_type(opts) -> dist.ReduceOp.RedOpType:
    """The options' reduction as the enum (a ReduceOp object compares equal to it but hashes apart)."""
    if opts is None:
        return dist.ReduceOp.SUM
    return getattr(opts.reduceOp, "op", opts.reduceOp)


def _to_gloo(name: str):
    def delegate(self, *args, **kwargs):
        return getattr(self._gloo, name)(*args, **kwargs)

    delegate.__name__ = name
    delegate.__doc__ = f"gloo's {name}: the switch only sums."
    return delegate


GLOO_COLLECTIVES = (
    "broadcast",
    "allgather",
    "_allgather_base",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "gather",
    "scatter",
    "reduce",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "alltoall",
    "alltoall_base",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "recv_anysource",
)
for _name in GLOO_COLLECTIVES:
    setattr(SwitchProcessGroup, _name, _to_gloo(_name))


_current: SwitchProcessGroup | None = None  # the process's "thc" group


def _create(backend_options, options: Options | None) -> SwitchProcessGroup:
    """init_process_group's and new_group's way in (extended API: pg_options arrive as ``options``)."""
    global _current
    if _current is not None and not _current.closed:
        raise Unsupported(
            "this process already has a thc group, and a second would reuse its job's slots: create other "
            'groups with dist.new_group(..., backend="gloo")'
        )
    opts = backend_options
    if options is None:
        options = options_from_environ(opts.group_rank)
    _current = SwitchProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout, options)
    return _current


dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])
