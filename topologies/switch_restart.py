"""A switch restarted during a run (``thc-run --restart-switch SWITCH:STEP``): the injected failure and the
recovery from it.

The switch is killed with SIGKILL, as a crash, and started with the same command line; the new process holds
nothing, so the runner pushes the program and routes again and re-adds the job through the one path that
programs a job, with every worker, a fresh key and an epoch above the job's last (Failover.readmit). Its
notice makes the workers redo the call that was unfinished (host_agent/README.md, "Switch restart"); modes
that follow no notices carry on as their transport lets them. Each restart becomes a record for the summary:
when the switch answered, was programmed, had the job, and every worker had moved (the pause).
topologies/README.md, "A switch that restarts", has the rest."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Restart:
    """One switch restart and the recovery from it (times in seconds, monotonic clock)."""

    switch: str
    step: int  # the step whose report set the restart off
    killed: float
    answering: float | None = None  # the new process answers on gRPC
    programmed: float | None = None  # program and routes pushed again
    admitted: float | None = None  # the job re-added and the notice written
    rejoined: float | None = None  # every worker reported that it moved
    resumed: float | None = None  # every worker reported a step past `past`: training went on
    past: int = 0  # a step that no worker can have finished before the kill (the latest reported + 1)
    generation: int = 0
    job_id: int = 0
    epoch: int = 0
    workers: int = 0
    survivors_step: int = 0  # the step the workers (every one survives a restart) were in when they moved
    at_call: int | None = None  # the first call made in the re-added job (the one redone)
    waiting: set = field(default_factory=set)  # ranks that have not moved yet
    behind: set = field(default_factory=set)  # ranks that have not reported a step past `past` yet

    def record(self) -> dict:
        def since(t):
            return None if t is None else round(t - self.killed, 4)

        return {
            "kind": "switch_restart",
            "switch": self.switch,
            "step": self.step,
            "answering_s": since(self.answering),
            "reprogrammed_s": since(self.programmed),
            "readmitted_s": since(self.admitted),
            "recovered_s": since(self.rejoined),
            "resumed_s": since(self.resumed),
            "resumed_past_step": self.past,
            "job_id": self.job_id,
            "epoch": self.epoch,
            "workers": self.workers,
            "resumed_step": self.survivors_step,
            "at_call": self.at_call,
        }


class SwitchRestarter:
    """Restarts a switch once a worker reports a step; ``failover`` (None: the mode follows no notices)
    re-admits the job. ``bed`` is the Testbed: its network, control plane and counters."""

    def __init__(
        self,
        restarts: list[tuple[str, int]],
        bed,
        failover=None,
        readd: Callable[[], object] | None = None,
        start_timeout: float = 60.0,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.due = sorted(restarts, key=lambda r: r[1])  # (switch, step), earliest first
        self.bed, self.failover, self.readd = bed, failover, readd
        self.start_timeout = start_timeout
        self.say, self.clock = say, clock
        self.restarts: list[Restart] = []
        self.workers: dict = {}  # rank -> Worker, as they report
        self.latest = 0  # the latest step any worker reported

    def on_event(self, worker, event: dict) -> None:
        self.workers[worker.rank] = worker
        if event.get("event") != "step":
            return
        self.latest = max(self.latest, event["step"])
        for restart in self.restarts:
            if restart.behind and event["step"] > restart.past:
                restart.behind.discard(worker.rank)
                if not restart.behind:
                    restart.resumed = self.clock()
        while self.due and event["step"] >= self.due[0][1]:
            name, step = self.due.pop(0)
            self.restart(name, step)

    def restart(self, name: str, step: int) -> Restart:
        bed = self.bed
        bed.keep_counters(name)  # what it counted so far dies with the process
        restart = Restart(name, step, self.clock())
        # a step already reported may be followed by one that finished before the kill, not by two
        restart.past = self.latest + 1
        restart.behind = {rank for rank, w in self.workers.items() if not w.lost}
        bed.net.kill_switch(name)
        self.say(f"{name} killed after step {step} (SIGKILL); starting it again")
        bed.net.restart_switch(name, self.start_timeout)
        restart.answering = self.clock()
        bed.control.reprogram(name)
        restart.programmed = self.clock()
        if self.failover is not None:
            self.failover.readmit(restart)
        elif self.readd is not None:
            self.readd()
            restart.admitted = self.clock()
        self.restarts.append(restart)
        r = restart.record()
        readded = f", job re-added at {r['readmitted_s']:.2f} s" if restart.admitted else ""
        self.say(
            f"{name} restarted: answering {r['answering_s']:.2f} s after the kill, programmed at "
            f"{r['reprogrammed_s']:.2f} s{readded}"
        )
        return restart
