"""Worker failure during a run: the runner's half of host_agent/membership.py.

A switch-mode worker killed by a signal is noticed by ``follow`` at once, and ``Failover.on_death`` admits the
survivors as a new job for n − 1 workers with a fresh job id, key, epoch and slots, so a request of the old
membership still on its way can only meet the old job's cells or be dropped as UNKNOWN_JOB, never be counted
into the new one. The old job stays until every survivor reports that it moved (one behind may still need its
stored results). After a switch restart ``readmit`` adds the same job again with every worker. Each failure
becomes a record for the summary; ``KillSwitch`` injects them (``thc-run --kill``). topologies/README.md, "A
worker that dies", has the rest."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import contract
from contract.job import JobSpec
from controller.errors import ControlError
from host_agent.membership import Membership, MembershipFile
from topologies.workers import Worker, WorkerFailed


@dataclass
class Failure:
    """One worker's death and the recovery from it (times in seconds, monotonic clock)."""

    host: str
    rank: int
    step: int  # the last step the worker reported
    signal: int
    detected: float
    killed: float | None = None  # when the runner sent the signal (an injected failure)
    admitted: float | None = None  # the survivors' job is installed and the notice written
    rejoined: float | None = None  # every survivor reported that it moved
    generation: int = 0
    old_job_id: int = 0
    job_id: int = 0
    epoch: int = 0
    workers: int = 0  # survivors
    survivors_step: int = 0  # the step the survivors were in when they moved
    at_call: int | None = None  # the aggregation call at which they moved
    waiting: set = field(default_factory=set)  # survivors' ranks that have not moved yet

    def record(self) -> dict:
        start = self.killed if self.killed is not None else self.detected

        def since(t):
            return None if t is None else round(t - start, 4)

        return {
            "host": self.host,
            "rank": self.rank,
            "step": self.step,
            "signal": _signal_name(self.signal),
            "injected": self.killed is not None,
            "detected_s": since(self.detected),
            "readmitted_s": since(self.admitted),
            "recovered_s": since(self.rejoined),
            "old_job_id": self.old_job_id,
            "job_id": self.job_id,
            "epoch": self.epoch,
            "workers": self.workers,
            "survivors_step": self.survivors_step,
            "at_call": self.at_call,
        }


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class KillSwitch:
    """Injected failures (``thc-run --kill HOST:STEP``): the worker ends itself with SIGKILL right after it
    reports STEP (thc-worker --die-after-step, WorkerOptions.kills), saying when in a "dying" record; a
    kill from here would land steps late, after the report crossed a busy machine. A worker that reports
    a later step without dying (a thc-worker without the option) is killed from here then."""

    def __init__(self, kills: list[tuple[str, int]], clock: Callable[[], float] = time.monotonic):
        self.kills = dict(kills)  # host -> step
        self.killed: dict[str, float] = {}  # host -> when it was killed (time.monotonic: the worker's clock too)
        self.clock = clock

    def on_event(self, worker: Worker, event: dict) -> None:
        step = self.kills.get(worker.host)
        if step is None:
            return
        if event.get("event") == "dying":
            del self.kills[worker.host]
            self.killed[worker.host] = float(event.get("t", self.clock()))
        elif event.get("event") == "step" and event["step"] > step:
            del self.kills[worker.host]
            self.killed[worker.host] = self.clock()
            os.kill(worker.process.pid, signal.SIGKILL)


class Failover:
    """Re-admission of a switch mode's survivors (one Failover per mode run)."""

    def __init__(
        self,
        control,
        topo,
        spec: JobSpec,
        notice_path: Path,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        epoch: int = 0,
    ):
        self.control, self.topo = control, topo
        self.spec = spec  # the job the workers are in now
        self.epoch = epoch  # and its epoch
        self.job_id = spec.job_id
        self.used_ids = {spec.job_id}  # never reused within the run: an old request can never match a new job
        self.notices = MembershipFile(notice_path)
        self.notices.clear()
        self.say, self.clock = say, clock
        self.generation = 0
        self.failures: list[Failure] = []
        self.restarts: list = []  # switch restarts the workers followed (topologies/switch_restart.py)
        self.workers: list[Worker] = []
        self.killed: dict[str, float] = {}  # host -> when an injected failure killed it (KillSwitch.killed)

    @property
    def jobs(self) -> list[int]:
        """Every job id this run installed (to remove at the end)."""
        return sorted(self.used_ids)

    # ---- follow's callbacks ----------------------------------------------------------------------

    def on_event(self, worker: Worker, event: dict) -> None:
        if event.get("event") == "rejoined":
            self._rejoined(worker, event)

    def on_death(self, dead: Worker) -> None:
        """Admit the survivors without ``dead`` and tell them; WorkerFailed if that cannot be done."""
        detected = self.clock()
        code = dead.process.poll()
        alive = [w for w in self.workers if w.process.poll() is None]
        if not alive:
            raise WorkerFailed(f"worker {dead.host} died (signal {-code}) and no worker is left")
        failure = Failure(dead.host, dead.rank, dead.step, -code, detected, self.killed.get(dead.host))
        failure.old_job_id = self.job_id
        new_id = self._fresh_job_id()
        hosts = [w.host for w in alive]
        spec = self.spec.replace(job_id=new_id, workers=len(alive), key=0)  # the survivors' description
        try:
            job = self.control.add_job(spec, hosts)
        except ControlError as exc:
            raise WorkerFailed(
                f"worker {dead.host} died at step {dead.step} and the survivors could not be admitted as job "
                f"{new_id}: {exc} (the new job needs {spec.slots} free slots next to the old job's)"
            ) from exc
        self.spec, self.epoch = spec.replace(key=job.key), job.epoch
        self.used_ids.add(new_id)
        self.generation += 1
        ranks = tuple(sorted(w.rank for w in alive))
        self.notices.write(Membership(self.generation, new_id, ranks, job.epoch, failed=(dead.rank,), key=job.key))
        failure.admitted = self.clock()
        failure.generation, failure.job_id, failure.epoch = self.generation, new_id, job.epoch
        failure.workers = len(alive)
        failure.waiting = set(ranks)
        self.failures.append(failure)
        self.job_id = new_id
        self.say(
            f"worker {dead.host} (rank {dead.rank}) died at step {dead.step} (signal {-code}): the {len(alive)} "
            f"survivors are job {new_id} now (epoch {job.epoch}, slots {job.slot_base}.."
            f"{job.slot_base + job.n_slots - 1})"
        )

    def readmit(self, restart) -> None:
        """The switch restarted (topologies/switch_restart.py's Restart): add the job again with every
        worker still in it, a fresh key and an epoch above the job's last, and tell them. The job keeps its
        id: the restarted switch holds nothing of it, and a request with the old key is dropped."""
        alive = [w for w in self.workers if not w.lost and w.process.poll() is None]
        spec = self.spec.replace(key=0)
        epoch = max(self.epoch, self.control.last_epoch()) + 1
        try:
            job = self.control.add_job(spec, [w.host for w in alive], epoch=epoch)
        except ControlError as exc:
            raise WorkerFailed(
                f"{restart.switch} restarted, but job {spec.job_id} could not be added again: {exc}"
            ) from exc
        self.spec, self.epoch = spec.replace(key=job.key), job.epoch
        self.generation += 1
        ranks = tuple(sorted(w.rank for w in alive))
        self.notices.write(Membership(self.generation, spec.job_id, ranks, job.epoch, key=job.key, restarted=True))
        restart.admitted = self.clock()
        restart.generation, restart.job_id, restart.epoch = self.generation, spec.job_id, job.epoch
        restart.workers, restart.waiting = len(alive), set(ranks)
        self.restarts.append(restart)

    # ---- internals -------------------------------------------------------------------------------

    def _fresh_job_id(self) -> int:
        installed = self.control.job_ids()
        for step in range(1, contract.JOB_ID_MAX + 1):  # the ids after the current one, wrapping
            candidate = (self.job_id + step) % (contract.JOB_ID_MAX + 1)
            if candidate not in self.used_ids and candidate not in installed:
                return candidate
        raise WorkerFailed("no free job id on the switch for the survivors")

    def _rejoined(self, worker: Worker, event: dict) -> None:
        """A worker moved to the job of a failure's or a restart's notice; once every one has, the record is
        complete (and after a failure the old job is removed)."""
        entries = [*self.failures, *self.restarts]
        entry = next((e for e in entries if e.generation == event.get("generation")), None)
        if entry is None or worker.rank not in entry.waiting:
            return
        entry.waiting.discard(worker.rank)
        entry.survivors_step = max(entry.survivors_step, int(event.get("step", 0)) + 1)
        entry.at_call = event.get("at_call")
        if entry.waiting:
            return
        entry.rejoined = self.clock()
        recovered = entry.record()["recovered_s"]
        if not isinstance(entry, Failure):  # a restart: the switch lost the old job, nothing to remove
            self.say(
                f"every worker moved to job {entry.job_id} (epoch {entry.epoch}) in step {entry.survivors_step}, "
                f"{recovered:.2f} s after {entry.switch} was killed"
            )
            return
        try:  # every survivor is in the new job: nothing needs the old one's stored results any more
            self.control.end_job(entry.old_job_id)
        except ControlError as exc:
            self.say(f"could not remove job {entry.old_job_id}: {exc}")
        self.say(
            f"survivors of {entry.host} rejoined as job {entry.job_id} in step {entry.survivors_step}, "
            f"{recovered:.2f} s after the failure"
        )
