"""When each job of a trace (topologies/job_trace.py) starts on the testbed, and on which hosts: thc-run
--trace's scheduling, kept apart from the network so that it is tested without Mininet.

A job is due at its trace start time. Due jobs start first come, first served, as harness/trace_run.py
admits them in-process: a job takes the first free worker hosts it needs and is placed on the switch
(`place`, the controller's add_job); one that finds too few free hosts, or that the switch refuses (static
partitions: no free slot range), waits until a running job ends, and no later job overtakes it. A job that
can never start is refused in one line before it would wait forever: more workers than the topology has
(checked before anything starts), or a switch that refuses it while no other job holds anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import contract
from topologies.job_trace import TraceError, TraceJob


@dataclass
class ScheduledJob:
    """A trace job as the run goes: its switch job id, the hosts it was given, when it started and ended."""

    trace: TraceJob
    job_id: int
    hosts: tuple[str, ...] = ()
    started: float | None = None  # seconds after the trace began (None: not yet)
    finished: float | None = None
    refusals: list[str] = field(default_factory=list)  # why the switch made it wait, in order

    @property
    def running(self) -> bool:
        return self.started is not None and self.finished is None

    @property
    def completion_s(self) -> float:
        """Seconds from its arrival in the trace (its start time) to its end, waiting included."""
        return self.finished - self.trace.start

    @property
    def wait_s(self) -> float:
        return self.started - self.trace.start


class Schedule:
    """The trace's jobs on the worker hosts `hosts` (a topology's, in order); job ids 1, 2, ... in start order."""

    def __init__(self, trace: list[TraceJob], hosts: list[str], source: str = "trace"):
        if len(trace) > contract.JOB_ID_MAX:
            raise TraceError(f"{source}: {len(trace)} jobs, but the switch names at most {contract.JOB_ID_MAX}")
        for job in trace:
            if job.workers > len(hosts):
                raise TraceError(
                    f"{source}: job {job.name!r} needs {job.workers} workers but the topology has {len(hosts)} "
                    "worker hosts, so it could never start (give --workers, or a larger topology)"
                )
        self.jobs = [ScheduledJob(t, i + 1) for i, t in enumerate(sorted(trace, key=lambda j: j.start))]
        self.hosts = list(hosts)
        self.free = list(hosts)

    @property
    def running(self) -> list[ScheduledJob]:
        return [j for j in self.jobs if j.running]

    @property
    def done(self) -> bool:
        return all(j.finished is not None for j in self.jobs)

    def start_due(self, now: float, place: Callable[[ScheduledJob], str | None]) -> list[ScheduledJob]:
        """Start the jobs due at `now`, in trace order, until one must wait; `place(job)` (job.hosts set)
        puts it on the switch and returns None, or the switch's reason for refusing it. The jobs started."""
        started = []
        for job in self.jobs:
            if job.started is not None:
                continue
            if job.trace.start > now or len(self.free) < job.trace.workers:
                break  # first come, first served: a later job does not overtake one that waits
            job.hosts = tuple(self.free[: job.trace.workers])
            refused = place(job)
            if refused is not None:
                job.hosts = ()
                if not self.running:
                    raise TraceError(f"job {job.trace.name!r} can never start: with no other job running, {refused}")
                if refused not in job.refusals:
                    job.refusals.append(refused)
                break
            self.free = [h for h in self.free if h not in job.hosts]
            job.started = now
            started.append(job)
        return started

    def finish(self, job: ScheduledJob, now: float) -> None:
        """`job` ended at `now`: its hosts are free again (in the topology's order)."""
        job.finished = now
        self.free = [h for h in self.hosts if h in self.free or h in job.hosts]

    def next_start(self, now: float) -> float | None:
        """When the first waiting job is due, if later than `now` (None: it is due, or none waits)."""
        waiting = [j for j in self.jobs if j.started is None]
        if not waiting or waiting[0].trace.start <= now:
            return None
        return waiting[0].trace.start
