"""A trace of jobs (topologies/job_trace.py) run in process on one software switch under one of three
policies for the switch's memory, on a virtual clock: every frame goes through the compiled program and every
sum is checked against the reference, while time is modelled, so the figures are the same on any machine
and load.

  static  each job owns `budget` slots for its lifetime (controller/jobs.py, first fit); a job that does not
          fit is refused, as `thc-ctl job add` refuses it, and waits until a job leaves;
  pool    every job is admitted and claims cells round by round from a pool of 2 * budget cells (the same
          memory); a use whose cell is taken falls back to the fallback server;
  none    no switch: every job's workers send to the fallback server (a parameter server) directly."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

import contract
from contract.job import JobSpec
from controller import jobs
from controller.writes import EngineWriter
from emulator.switch import SoftwareSwitch
from harness.fallback_server import SERVER, SwitchAndServer, serve
from harness.loopback import LoopbackWire
from harness.sim import SERVICE, SimJob, admit, attach_workers, retire, worker_endpoint, worker_port
from host_agent.clock import VirtualClock
from host_agent.pool_fallback import PoolFallback

POLICIES = ("static", "pool", "none")


@dataclass(frozen=True)
class Setup:
    budget: int = 32  # switch slots the jobs share (the pool: 2 * budget cells)
    window: int = 8  # slots (and window) of every job
    requests: int = 16  # requests a worker sends per step
    rate: float = 10e6  # bit/s of every link, the fallback server's too
    timeout: float = 0.05  # first retransmission timeout (virtual s)
    sample: float = 0.5  # occupancy sampled every this many virtual seconds


@dataclass
class JobRun:
    """One trace job as it runs: its place on the switch, its workers and its progress."""

    trace: object  # topologies/job_trace.TraceJob
    job_id: int
    admitted: float | None = None
    finished: float | None = None
    sim: SimJob | None = None
    workers: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    want: np.ndarray | None = None
    steps_done: int = 0
    next_at: float = 0.0
    wrong: int = 0
    fell_back: int = 0

    @property
    def running(self) -> bool:
        return self.admitted is not None and self.finished is None


@dataclass
class TraceResult:
    policy: str
    runs: list[JobRun]
    occupancy: list[tuple[float, int]]  # (virtual s, switch cells held for jobs)
    cells: int  # switch cells the jobs may use
    uses: int  # (slot, round) uses of all jobs
    fallbacks: int  # of them, answered FALLBACK by the switch (all of them with no switch)

    def jct(self) -> list[float]:
        return [r.finished - r.trace.start for r in self.runs]

    @property
    def wrong_sums(self) -> int:
        return sum(r.wrong for r in self.runs)


class TraceRunner:
    """Runs one trace under one policy (POLICIES); `run()` returns its TraceResult."""

    def __init__(self, trace, policy: str, setup: Setup = Setup(), seed: int = 0, program: str | None = None):
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
        if setup.budget * 2 & (setup.budget * 2 - 1):
            raise ValueError(f"budget {setup.budget}: the pool of 2 * budget cells must be a power of two")
        program = program or str(contract.PROGRAM_JSON)
        self.policy, self.setup = policy, setup
        self.clock = VirtualClock()
        self.switch = SoftwareSwitch.from_json(program)
        self.server = SoftwareSwitch.from_json(program)
        self.engine = SwitchAndServer(self.switch, self.server, SERVER, setup.rate)
        self.wire = LoopbackWire(self.engine, seed=seed, clock=self.clock, rate_up=setup.rate, rate_down=setup.rate)
        self.engine.wire = self.wire
        EngineWriter(self.switch).apply([jobs.service_address_write(SERVICE.ip)])
        self.served: list[SimJob] = []
        self.installed: list = []  # controller Jobs on the switch
        self.free_ids = list(range(contract.MAX_WORKERS))
        self.last_epoch = 0
        self.rng = np.random.default_rng(seed)
        self.runs = [JobRun(t, i + 1) for i, t in enumerate(trace)]
        self.occupancy: list[tuple[float, int]] = []

    # ---- admission and departure ------------------------------------------------------------------

    def _admit(self, run: JobRun) -> bool:
        t, s = run.trace, self.setup
        if len(self.free_ids) < t.workers:
            return False
        spec = JobSpec(job_id=run.job_id, workers=t.workers, window=s.window, slots=s.window)
        ids = self.free_ids[: t.workers]
        workers = [jobs.JobWorker(w, worker_endpoint(w).mac, worker_endpoint(w).ip, worker_port(w)) for w in ids]
        options = dict(epoch=self.last_epoch + 1, rng=random.Random(run.job_id))
        if self.policy == "static":
            base = jobs.free_range(s.window, self.installed, None, range(s.budget))
            if base is None:
                return False  # refused: waits for a job to leave
            job = jobs.plan_job(spec, workers, self.installed, slot_base=base, **options)
        else:
            job = jobs.plan_job(spec, workers, self.installed, pool=True, pool_cells=2 * s.budget, **options)
        self.last_epoch = job.epoch
        del self.free_ids[: t.workers]
        run.sim = SimJob(spec.replace(key=job.key), job)
        if self.policy != "none":
            admit(self.switch, run.sim)
            self.installed.append(job)
        serve(self.server, run.sim, self.served, fallback=self.policy == "pool")
        service = SERVER if self.policy == "none" else SERVICE
        _, run.workers = attach_workers(
            self.engine, run.sim, lw=self.wire, clock=self.clock, service=service,
            timeout=s.timeout, max_timeout=20 * s.timeout, deadline=1e6,
        )  # fmt: skip
        if self.policy == "pool":
            for w in run.workers:
                w.pool_fallback = PoolFallback(SERVER)
        run.admitted = self.clock()
        run.next_at = run.admitted + t.compute
        return True

    def _leave(self, run: JobRun) -> None:
        run.finished = self.clock()
        if self.policy != "none":
            run.fell_back = self._taken(self.switch, run.job_id)
            retire(self.switch, run.sim)
            self.installed.remove(run.sim.job)
        else:
            run.fell_back = self.setup.requests * run.trace.steps
        for w in run.sim.worker_ids:
            self.wire.detach(worker_port(w))
        self.free_ids = sorted(self.free_ids + run.sim.worker_ids)
        run.workers = []

    @staticmethod
    def _taken(sw, job_id: int) -> int:
        """The job's uses the switch answered FALLBACK for (POOL_TAKEN)."""
        return sw.counter_read(contract.THC_JOB_EVENTS, contract.job_event_cell(job_id, "POOL_TAKEN"))[0]

    # ---- steps ------------------------------------------------------------------------------------

    def _start_step(self, run: JobRun) -> None:
        per = contract.per_request(run.sim.spec.lane_bits) * self.setup.requests
        data = [self.rng.integers(0, 16, size=per, dtype=np.uint8) for _ in run.workers]
        table = np.asarray(run.sim.job.table)
        run.want = sum(table[d] for d in data)
        run.ops = [w.start_sum_indices([d]) for w, d in zip(run.workers, data)]

    def _end_step(self, run: JobRun) -> None:
        for op in run.ops:
            sums, count = op.result()
            if not (np.all(count == run.trace.workers) and np.array_equal(sums[0], run.want)):
                run.wrong += 1
        run.ops = []
        run.steps_done += 1
        run.next_at = self.clock() + run.trace.compute

    def _cells_held(self) -> int:
        if self.policy == "static":
            return 2 * sum(j.n_slots for j in self.installed)
        if self.policy == "none":
            return 0
        held = 0
        for job in self.installed:
            claims = self.switch.counter_read(contract.POOL_CLAIMS, job.epoch)[0]
            frees = self.switch.counter_read(contract.POOL_FREES, job.epoch)[0]
            held += claims - frees
        return held

    # ---- the loop ---------------------------------------------------------------------------------

    def _events_due(self) -> None:
        now = self.clock()
        for run in self.runs:
            if run.admitted is None and run.trace.start <= now and not self._admit(run):
                break  # first come, first served: a later job does not overtake one that waits
        for run in self.runs:
            if not run.running or any(w.busy for w in run.workers):
                continue
            if run.ops:
                self._end_step(run)
            if run.next_at <= now:
                if run.steps_done < run.trace.steps:
                    self._start_step(run)
                else:
                    self._leave(run)
                    self._events_due()  # its slots and workers may admit a job that waits
                    return

    def _next_time(self, busy) -> float | None:
        times = [d for p in busy if (d := p.next_deadline()) is not None]
        if (due := self.wire.next_event()) is not None:
            times.append(due)
        times += [r.trace.start for r in self.runs if r.admitted is None and r.trace.start > self.clock()]
        times += [r.next_at for r in self.runs if r.running and not r.ops]
        return min(times) if times else None

    def run(self) -> TraceResult:
        next_sample = 0.0
        while True:
            self._events_due()
            while self.clock() >= next_sample:
                self.occupancy.append((next_sample, self._cells_held()))
                next_sample += self.setup.sample
            if all(r.finished is not None for r in self.runs):
                break
            busy = [w for r in self.runs if r.running for w in r.workers if w.busy]
            if any([w.pump(0.0) for w in busy]):
                continue
            when = self._next_time(busy)
            if when is None:
                raise RuntimeError(f"trace run: jobs wait on nothing at {self.clock():.3f} s (virtual)")
            self.clock.advance_to(when)
            self.wire.run_due()
        self.occupancy.append((self.clock(), self._cells_held()))
        uses = sum(self.setup.requests * r.trace.steps for r in self.runs)
        cells = 0 if self.policy == "none" else 2 * self.setup.budget
        return TraceResult(self.policy, self.runs, self.occupancy, cells, uses, sum(r.fell_back for r in self.runs))
