"""An in-process cluster: one switch engine and n workers on a loopback wire, for tests and benchmarks.

A job is planned from its description (contract/job.py's JobSpec) by the controller's own planner
(controller/jobs.py plan_job), and `program_engine` installs it with the controller's own writes
(add_writes: the job's lookup table, its multicast group, the per-worker result destinations, the jobs
entry), applied straight to the engine by controller.writes.EngineWriter instead of over P4Runtime. The
workers get the same description, key included, as `thc-worker --job FILE` does. No IPv4 routes are
needed: workers address the service directly and results go out by multicast or back on the ingress port.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import contract
from contract.job import JobSpec
from controller import jobs
from controller.jobs import Job, JobWorker
from controller.writes import EngineWriter
from harness.loopback import LoopbackWire
from host_agent import wire
from host_agent.protocol import WorkerProtocol

SERVICE = wire.Endpoint("02:00:00:00:00:fe", "10.0.0.254")


def worker_endpoint(worker_id: int) -> wire.Endpoint:
    return wire.Endpoint(f"02:00:00:00:01:{worker_id:02x}", f"10.0.1.{worker_id + 1}")


def worker_port(worker_id: int) -> int:
    return worker_id + 1


@dataclass(frozen=True)
class SimJob:
    """A job on an in-process switch: the description its workers are given (`spec`, with the key the
    switch holds) and the controller's plan of it (`job`: slots, epoch, group, workers, lookup table)."""

    spec: JobSpec
    job: Job

    @classmethod
    def plan(
        cls, spec: JobSpec, worker_ids: Iterable[int] | None = None, *, slot_base: int = 0, epoch: int = 1
    ) -> SimJob:
        """`spec`'s job as `thc-ctl job add` plans it, for workers `worker_ids` (default 0 .. n − 1) on ports
        worker_port(w) at worker_endpoint(w): slots from `slot_base`, `epoch`, and the description's key, or
        (without one) a key drawn from the job id, so that a run is reproducible."""
        ids = range(spec.workers) if worker_ids is None else worker_ids
        workers = [JobWorker(w, worker_endpoint(w).mac, worker_endpoint(w).ip, worker_port(w)) for w in ids]
        job = jobs.plan_job(spec, workers, [], slot_base=slot_base, epoch=epoch, rng=random.Random(spec.job_id))
        return cls(spec.replace(key=job.key), job)

    @property
    def job_id(self) -> int:
        return self.spec.job_id

    @property
    def epoch(self) -> int:
        return self.job.epoch

    @property
    def worker_ids(self) -> list[int]:
        return [w.worker_id for w in self.job.workers]


def engine_words(engine) -> int | None:
    """Register words per cell of the program `engine` runs; None for an engine without a P4 program."""
    registers = getattr(getattr(engine, "program", None), "registers", None)
    if registers is None:
        return None
    words = 0
    while contract.acc_register(words) in registers:
        words += 1
    return words


def program_engine(sw, job: SimJob, service: wire.Endpoint | None = SERVICE) -> None:
    """Install `job` on the engine `sw` with the controller's own writes (controller/writes.py); `service`
    None: the service address is there already (a second job on the same switch)."""
    words = engine_words(sw)
    if words is not None and words != job.spec.words:
        raise ValueError(
            f"job {job.job_id} is described for {job.spec.words}-word cells but the engine's program has "
            f"{words}: plan it with JobSpec(words={words}), or load the program it was made for"
        )
    EngineWriter(sw).apply(jobs.fresh_writes(job.job, service.ip if service is not None else None))


def admit(engine, job: SimJob) -> None:
    """Add one more job to a running engine (the controller's `job add`): on the software switch with the
    controller's writes, on the FakeSwitch with its add_job."""
    if hasattr(engine, "add_job"):
        engine.add_job(job)
        return
    program_engine(engine, job, service=None)


def retire(engine, job: SimJob) -> None:
    """Remove `job` from a running engine (the controller's `job remove`: the jobs entry first; a pool job's
    pool entry and its run's liveness after it, so its cells are free)."""
    if hasattr(engine, "add_job"):
        del engine.jobs[job.job_id]
        return
    first, then = jobs.remove_writes(
        job.job_id, job.job.mcast_grp, set(job.worker_ids), table_installed=bool(job.job.table), job=job.job
    )
    EngineWriter(engine).apply([*first, *then])


def attach_workers(
    engine,
    job: SimJob,
    *,
    loss_up: float = 0.0,
    loss_down: float = 0.0,
    seed: int = 0,
    clock: Callable[[], float] = time.monotonic,
    service: wire.Endpoint = SERVICE,
    lw: LoopbackWire | None = None,
    **options,
) -> tuple[LoopbackWire, list[WorkerProtocol]]:
    """A loopback wire to `engine` and one WorkerProtocol per worker of `job`, each given the job's
    description (`options`: WorkerProtocol's keyword arguments, e.g. timeout, deadline). `lw`: attach to
    this wire instead (several jobs on one switch: their workers need distinct worker ids, i.e. ports)."""
    if lw is None:
        lw = LoopbackWire(engine, loss_up=loss_up, loss_down=loss_down, seed=seed, clock=clock)
    protocols = []
    for w in job.worker_ids:
        builder = wire.FrameBuilder(worker_endpoint(w), service)
        protocols.append(WorkerProtocol(lw.attach(worker_port(w)), builder, job.spec, w, clock=clock, **options))
    return lw, protocols


def thc_round(workers: list[WorkerProtocol], comps: list, grads: list, step: int) -> tuple:
    """One THC round of `workers` (blocking protocols, driven here) with their compressors `comps`: the NORM
    round of the prepared `grads`, their encoding against its maxima, the THC sums. Returns (preps, maxima,
    indices, ops); ops[w].result() is worker w's (sums, count)."""
    import torch

    from host_agent.protocol import drive

    preps = [c.prepare(g, step) for c, g in zip(comps, grads)]
    ops = [w.start_max(p.norms.numpy()) for w, p in zip(workers, preps)]
    drive(workers)
    maxima = torch.from_numpy(ops[0].result())
    indices = [c.encode(p, maxima) for c, p in zip(comps, preps)]
    ops = [w.start_sum_indices(i) for w, i in zip(workers, indices)]
    drive(workers)
    return preps, maxima, indices, ops
