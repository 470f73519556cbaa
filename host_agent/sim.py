"""An in-process cluster: one switch engine and n workers on a loopback wire, for tests and benchmarks.

`program_engine` installs what one job needs with the controller's own planners (controller/jobs.py,
lookup_tables.py), applied straight to the engine by controller.writes.EngineWriter instead of over
P4Runtime: the service address, the job, the index lookup tables, the multicast group and the per-worker
result destinations. No IPv4 routes are needed: workers address the service directly and results go out
by multicast or back on the ingress port.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controller import jobs
from controller import lookup_tables as luts
from controller.jobs import Job, JobWorker
from controller.writes import EngineWriter
from host_agent import wire
from host_agent.loopback import LoopbackWire
from host_agent.protocol import WorkerProtocol

SERVICE = wire.Endpoint("02:00:00:00:00:fe", "10.0.0.254")


def worker_endpoint(worker_id: int) -> wire.Endpoint:
    return wire.Endpoint(f"02:00:00:00:01:{worker_id:02x}", f"10.0.1.{worker_id + 1}")


def worker_port(worker_id: int) -> int:
    return worker_id + 1


@dataclass
class SimJob:
    """One job as the controller would install it (set_job's parameters)."""

    job_id: int
    n_workers: int
    table: Sequence[int]
    n_slots: int = 64
    slot_base: int = 0
    epoch: int = 1
    lane_bits: int | None = None  # None: as the controller chooses (8 if n·g ≤ 255, else 16)
    mcast_grp: int | None = None  # None: the controller's group for the job
    worker_ids: list[int] = field(default_factory=list)  # empty: 0 .. n_workers − 1

    def __post_init__(self):
        if not self.worker_ids:
            self.worker_ids = list(range(self.n_workers))
        if self.lane_bits is None:
            self.lane_bits = jobs.lane_bits_for(self.n_workers, max(self.table))
        if self.mcast_grp is None:
            self.mcast_grp = jobs.mcast_group(self.job_id)

    @property
    def worker_mask(self) -> int:
        return sum(1 << w for w in self.worker_ids)

    def to_job(self) -> Job:
        """The controller's Job for these parameters (workers on ports worker_port(w), worker_endpoint(w))."""
        workers = tuple(
            JobWorker(w, worker_endpoint(w).mac, worker_endpoint(w).ip, worker_port(w)) for w in sorted(self.worker_ids)
        )
        return Job(
            self.job_id,
            self.n_workers,
            self.slot_base,
            self.n_slots,
            self.mcast_grp,
            self.worker_mask,
            self.lane_bits,
            self.epoch,
            workers,
        )


def program_engine(
    sw,
    job: SimJob,
    service: wire.Endpoint | None = SERVICE,
    lookup_tables: bool = True,
    pairs: int = wire.INDEX_PAIRS,
) -> None:
    """Install `job` on the engine `sw` with the controller's own writes (controller/writes.py); `service`
    None: the service address is there already (a second job on the same switch)."""
    first, then = jobs.add_writes(job.to_job(), None, False, set())
    writer = EngineWriter(sw)
    writer.apply([*([jobs.service_address_write(service.ip)] if service is not None else []), *first, *then])
    if lookup_tables:
        install_table(sw, job.table, pairs)


def admit(engine, job: SimJob) -> None:
    """Add one more job to a running engine (the controller's `job add`): on the software switch with the
    controller's writes, on the FakeSwitch with its add_job."""
    if hasattr(engine, "add_job"):
        engine.add_job(job)
        return
    first, then = jobs.add_writes(job.to_job(), None, False, set())
    EngineWriter(engine).apply([*first, *then])


def retire(engine, job: SimJob) -> None:
    """Remove `job` from a running engine (the controller's `job remove`: the jobs entry first)."""
    if hasattr(engine, "add_job"):
        del engine.jobs[job.job_id]
        return
    first, then = jobs.remove_writes(job.job_id, job.mcast_grp, set(job.worker_ids))
    EngineWriter(engine).apply([*first, *then])


def install_table(sw, table: Sequence[int], pairs: int = wire.INDEX_PAIRS) -> None:
    """The lookup table `table` in every lane, as `thc-ctl table install` writes it."""
    values, bits = luts.check_values(list(table))
    EngineWriter(sw).apply(luts.lut_writes(pairs, values, bits, []))


def attach_workers(
    engine,
    job: SimJob,
    window: int | None = None,
    *,
    loss_up: float = 0.0,
    loss_down: float = 0.0,
    seed: int = 0,
    clock: Callable[[], float] = time.monotonic,
    service: wire.Endpoint = SERVICE,
    lw: LoopbackWire | None = None,
    **options,
) -> tuple[LoopbackWire, list[WorkerProtocol]]:
    """A loopback wire to `engine` and one WorkerProtocol per worker of `job` (window: the job's n_slots;
    `options`: WorkerProtocol's keyword arguments, e.g. timeout, deadline, pairs). `lw`: attach to this
    wire instead (several jobs on one switch: their workers need distinct worker ids, i.e. ports)."""
    if lw is None:
        lw = LoopbackWire(engine, loss_up=loss_up, loss_down=loss_down, seed=seed, clock=clock)
    protocols = [
        WorkerProtocol(
            lw.attach(worker_port(w)),
            wire.FrameBuilder(worker_endpoint(w), service),
            job.job_id,
            w,
            window or job.n_slots,
            clock=clock,
            **options,
        )
        for w in job.worker_ids
    ]
    return lw, protocols
