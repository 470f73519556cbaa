"""`thc-run --trace FILE`: a trace of jobs that come and go (topologies/job_trace.py) on one running testbed.

Each job starts when trace_schedule.py says (its time, its hosts) and is programmed like any run's job
(Testbed.start_job): a static job owning a slot range, or with --policy pool a pool job claiming cells round
by round, whose FALLBACK rounds go to one parameter server that holds every pool job. Its workers are
thc-worker processes on its hosts, each step slowed by the job's `compute` seconds; when they are done the
job is removed, and a job that waited for hosts or slots may start. One thread follows each job's workers;
only the main thread uses the control plane (programming, the pool's counters, the occupancy samples).
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import contract
from contract.job import JobSpec
from controller.errors import JobRefused
from controller.topology import Topology
from thc.modes import BACKEND_MODES, PLAN, SWITCH_MODES
from topologies import report
from topologies.trace_schedule import Schedule, ScheduledJob
from topologies.workers import MASTER_PORT, Worker, WorkerOptions, follow, load_results, start_workers, stop_workers

POLICIES = ("static", "pool")
# a trace job's modes: those whose workers aggregate through the switch with a SwitchAggregator
MODES = tuple(m for m in SWITCH_MODES if m not in BACKEND_MODES and m != PLAN)
SAMPLE_S = 0.5  # the switch's cell occupancy is read this often
POLL_S = 0.1  # how often the loop looks at due jobs and finished workers


def fallback_placement(topo: Topology) -> str | None:
    """The topology's first placement of one server (the pool policy's fallback server), else None."""
    return next((name for name, servers in topo.servers.items() if len(servers) == 1), None)


def job_topology(topo: Topology, hosts) -> Topology:
    """`topo` as a trace job sees it: its hosts are the workers, worker ids (ranks) 0..n-1."""
    return dataclasses.replace(topo, workers=tuple(hosts))


@dataclass
class Running:
    """A started job's workers and the thread that follows them."""

    job: ScheduledJob
    options: WorkerOptions
    topo: Topology
    workers: list[Worker]
    thread: threading.Thread | None = None
    error: BaseException | None = None
    ended: float | None = None  # seconds after the trace began when its workers were done


class TraceRun:
    """Runs `schedule`'s jobs on the started Testbed `bed` under `policy` (POLICIES).

    `base`: the options every job's workers share (batch size, lr, seed, timeouts, codec), `spec`: the job
    description of the job options (its id and workers replaced per job), `server_set`: a factory of the
    pool policy's fallback ServerSet (None for static), `target_acc`: the time-to-accuracy threshold (None:
    each model's own target)."""

    def __init__(
        self,
        bed,
        schedule: Schedule,
        policy: str,
        base: WorkerOptions,
        spec: JobSpec,
        server_set: Callable[[], object] | None = None,
        pool_cells: int | None = None,
        target_acc: float | None = None,
        stall_timeout: float = 120.0,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
        self.bed, self.schedule, self.policy = bed, schedule, policy
        self.base, self.spec, self.pool_cells = base, spec, pool_cells
        self.server_set, self.servers = server_set, None
        self.target_acc, self.stall_timeout, self.say = target_acc, stall_timeout, say
        self.clock, self.sleep = clock, sleep
        self.running: list[Running] = []
        self.rows: dict[str, dict] = {}  # job name -> its record
        self.occupancy: list[tuple[float, int]] = []
        self.cells = contract.CELLS if policy == "static" else 0
        self._t0 = 0.0

    # ---- one job --------------------------------------------------------------------------------------

    def options_for(self, job: ScheduledJob) -> WorkerOptions:
        t = job.trace
        return dataclasses.replace(
            self.base,
            mode=t.mode,
            steps=t.steps,
            model=t.model,
            spec=self.spec.replace(job_id=job.job_id, workers=t.workers),
            master_port=MASTER_PORT + job.job_id,
            stragglers={h: 1000 * t.compute for h in job.hosts} if t.compute else {},
            fallback_server=self.servers.fallback_address if self.servers is not None else None,
        )

    def _place(self, job: ScheduledJob) -> str | None:
        """ScheduledJob.start_due's `place`: the job on the switch (and the fallback server), its workers
        started; None, or why the switch refused it."""
        topo = job_topology(self.bed.topo, job.hosts)
        options = self.options_for(job)
        run_dir = self.bed.log_dir / "trace" / job.trace.name
        pool = dict(pool=True, pool_cells=self.pool_cells) if self.policy == "pool" else {}
        try:
            options = self.bed.start_job(options, topo, run_dir, **pool)
        except JobRefused as exc:
            return str(exc)
        if self.servers is not None:
            try:
                self.servers.add_fallback_job(options.spec, topo)
            except JobRefused as exc:
                self.bed.end_job(options, [job.job_id])
                return f"the fallback server: {exc}"
        workers = start_workers(self.bed.net, topo, options, self.bed.ledger, run_dir)
        run = Running(job, options, topo, workers)
        run.thread = threading.Thread(target=self._follow, args=(run,), name=f"trace {job.trace.name}", daemon=True)
        self.running.append(run)
        run.thread.start()
        where = ", ".join(job.hosts)
        self.say(f"trace: {job.trace.name} started ({job.trace.mode}, {job.trace.model}, job {job.job_id} on {where})")
        return None

    def _follow(self, run: Running) -> None:
        try:
            timeouts = dict(stall_timeout=self.stall_timeout, start_timeout=self.stall_timeout + 60)
            follow(run.workers, lambda w, e: None, **timeouts)
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it
            run.error = exc
        run.ended = self.clock() - self._t0

    def _end(self, run: Running, now: float) -> None:
        """A job whose workers are done: its fallbacks read, its entries removed, its record made."""
        job = run.job
        fallbacks = claimed = 0
        if self.policy == "pool":
            _, uses = self.bed.control.aggregator.pool_usage()
            use = next((u for u in uses if u.job_id == job.job_id), None)
            if use is not None:
                fallbacks, claimed = use.fallbacks, use.claimed
        self.bed.end_job(run.options, [job.job_id])
        if self.servers is not None:
            self.servers.end_fallback_job(job.job_id)
        self.running.remove(run)
        self.schedule.finish(job, now)
        results = load_results(run.workers)
        target = self.target_acc if self.target_acc is not None else _model_target(job.trace.model)
        row = report.summarize(job.trace.mode, results, target)
        self.rows[job.trace.name] = {
            "name": job.trace.name,
            "job_id": job.job_id,
            "mode": job.trace.mode,
            "model": job.trace.model,
            "workers": job.trace.workers,
            "hosts": list(job.hosts),
            "steps": job.trace.steps,
            "arrived_s": job.trace.start,
            "started_s": job.started,
            "finished_s": job.finished,
            "wait_s": job.wait_s,
            "completion_s": job.completion_s,
            "train_s": row.train_s,
            "setup_s": max((r.get("setup_s") or 0.0 for r in results), default=0.0),  # its slowest worker's start
            "metric": row.metric,
            "target": row.target,
            "time_to_target_s": row.time_to_target_s,
            "final_metric": row.final_metric,
            "fallbacks": fallbacks,
            "uses": claimed + fallbacks if self.policy == "pool" else None,
            "refusals": job.refusals,
            "replicas_agree": replicas_agree(results),
        }
        reached = "" if row.time_to_target_s is None else f", {row.time_to_target_s:.1f} s to target"
        fell = f", {fallbacks} rounds fell back" if self.policy == "pool" else ""
        self.say(f"trace: {job.trace.name} done: {job.completion_s:.1f} s after its arrival{reached}{fell}")

    # ---- the loop ---------------------------------------------------------------------------------------

    def _held(self) -> int:
        """Cells of sums the jobs hold now: a static job its slots' two cells each, a pool job what it claimed
        and has not freed."""
        session = self.bed.control.aggregator
        if self.policy == "static":
            return 2 * sum(j.n_slots for j in session.installed_jobs())
        pool, uses = session.pool_usage()
        if pool is not None:
            self.cells = pool.cells
        return sum(u.held for u in uses)

    def _check(self) -> None:
        self.bed.net.check_switches()
        if self.servers is not None:
            self.servers.check()
        for run in self.running:
            if run.error is not None:
                raise run.error

    def run(self) -> dict:
        """Run every job of the schedule to its end; the trace's summary (summary_document)."""
        with self.server_set() if self.server_set is not None else nullcontext() as servers:
            self.servers = servers
            self._t0 = self.clock()
            next_sample = 0.0
            try:
                while True:
                    now = self.clock() - self._t0
                    for run in [r for r in self.running if not r.thread.is_alive()]:
                        if run.error is not None:
                            raise run.error
                        self._end(run, run.ended)
                    self.schedule.start_due(now, self._place)
                    if now >= next_sample or self.schedule.done:
                        self.occupancy.append((round(now, 3), self._held()))
                        next_sample += SAMPLE_S
                    if self.schedule.done:
                        break
                    self._check()
                    self.sleep(POLL_S)
            except BaseException:
                for run in self.running:  # the others would wait for a failed job's peers or a dead switch
                    stop_workers(run.workers, self.bed.ledger)
                    self.bed.end_job(run.options, [run.job.job_id])
                raise
        return self.summary()

    def summary(self) -> dict:
        rows = [self.rows[j.trace.name] for j in self.schedule.jobs]
        completion = [r["completion_s"] for r in rows]
        fallbacks = sum(r["fallbacks"] for r in rows)
        uses = sum(r["uses"] or 0 for r in rows)
        return {
            "all_reached": all(r["time_to_target_s"] is not None for r in rows),
            "replicas_differ": [r["name"] for r in rows if r["replicas_agree"] is False],
            "policy": self.policy,
            "jobs": rows,
            "mean_completion_s": statistics.mean(completion),
            "p95_completion_s": report.percentile95(completion),
            "fallbacks": fallbacks,
            "uses": uses if self.policy == "pool" else None,
            "fallback_share": fallbacks / uses if uses else 0.0,
            "cells": self.cells,
            "occupancy": [list(s) for s in self.occupancy],
        }


def replicas_agree(results: list[dict]) -> bool | None:
    """Whether a job's workers ended with one model, bit for bit (their `parameter_sha256`); None when a
    record has no digest. A trained run has no reference for its sums, but a wrong sum that reached only
    some workers (another job's cell, a stale round) leaves their replicas different."""
    digests = [r.get("parameter_sha256") for r in results]
    return None if not digests or None in digests else len(set(digests)) == 1


def _model_target(model: str) -> float:
    from host_agent import workloads

    return workloads.get(model).target


def plot(path: Path, summary: dict, title: str) -> None:
    """The switch's cells held over the trace (report.plot_occupancy, bench_pool's figure)."""
    occupancy = [tuple(s) for s in summary["occupancy"]]
    lines = {summary["policy"]: (occupancy, summary["cells"])}
    report.plot_occupancy(path, {title: lines}, "time since the trace began (s)")


def table(summary: dict) -> str:
    """The per-job lines thc-run prints at the end."""
    head = ("job", "mode", "workers", "wait s", "completion s", "to target s", "fell back")
    lines = ["{:<10} {:<8} {:>7} {:>7} {:>12} {:>11} {:>9}".format(*head)]
    for r in summary["jobs"]:
        tta = "-" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.1f}"
        fell = "-" if r["uses"] is None else f"{r['fallbacks']}/{r['uses']}"
        lines.append(
            f"{r['name']:<10} {r['mode']:<8} {r['workers']:>7} {r['wait_s']:>7.1f} {r['completion_s']:>12.1f} "
            f"{tta:>11} {fell:>9}"
        )
    lines.append(
        f"{summary['policy']}: mean completion {summary['mean_completion_s']:.1f} s, p95 "
        f"{summary['p95_completion_s']:.1f} s, rounds fell back {summary['fallback_share']:.1%}, every job "
        f"reached its target: {'yes' if summary['all_reached'] else 'no'}, jobs whose workers' models differ: "
        f"{len(summary['replicas_differ'])}"
    )
    return "\n".join(lines)
