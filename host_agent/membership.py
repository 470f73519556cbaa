"""Membership notices: how the runner tells a job's surviving workers that a worker failed.

When a worker dies, the runner admits the survivors as a new job (the job's description with a fresh job
id, n − 1 workers and a fresh key; a fresh epoch, the dead worker's replica and mask bit gone) and writes a
notice into a small JSON file that every worker of the mode was started with (`thc-worker --membership
FILE`). The file is the whole channel: Mininet's hosts share the file system, it is written atomically (a
rename), and a worker only has to look at its modification time now and then while it waits for the
switch. A notice is never taken back; a later failure writes a later generation.

The same notice tells the workers that the switch restarted (`restarted`): the switch lost every cell and
stored result, the runner pushed the program again and re-added the job with every worker, a fresh key and
a fresh epoch, and the workers redo the call that was unfinished there (host_agent/aggregator.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Membership:
    """The job the survivors continue in, from generation 1 on (generation 0 is the job they started in)."""

    generation: int
    job_id: int  # the survivors' job: a fresh id, so nothing the old membership sent can reach its cells
    workers: tuple[int, ...]  # worker ids (ranks) of the survivors; n = len(workers)
    epoch: int = 0  # the epoch the controller gave the new job (for the record: workers send no epoch)
    failed: tuple[int, ...] = field(default=())  # the worker ids that left since the previous generation
    key: int = 0  # the new job's key: the survivors put it in every packet (the switch drops other keys)
    restarted: bool = False  # the switch restarted and lost its state; nobody failed (failed is empty)

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Membership:
        d = json.loads(text)
        return cls(
            int(d["generation"]),
            int(d["job_id"]),
            tuple(d["workers"]),
            int(d.get("epoch", 0)),
            tuple(d.get("failed", ())),
            int(d.get("key", 0)),
            bool(d.get("restarted", False)),
        )


class MembershipFile:
    """The notice file: `write` (the runner) replaces it atomically; `poll` (a worker) returns the notice
    when it changed since the last poll, looking at most every `interval` seconds (one stat)."""

    def __init__(self, path: Path | str, interval: float = 0.02, clock: Callable[[], float] = time.monotonic):
        self.path = Path(path)
        self.interval = interval
        self.clock = clock
        self._next = 0.0
        self._seen: tuple[int, int] | None = None

    def write(self, notice: Membership) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(notice.to_json())
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def poll(self) -> Membership | None:
        now = self.clock()
        if now < self._next:
            return None
        self._next = now + self.interval
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return None
        self._seen = stamp
        return Membership.from_json(self.path.read_text())


class MembershipBoard:
    """An in-process notice board with the same `poll` (tests: the controller-equivalent posts, every
    worker of the process sees the latest notice once)."""

    def __init__(self):
        self.latest: Membership | None = None

    def post(self, notice: Membership) -> None:
        self.latest = notice

    def reader(self) -> Callable[[], Membership | None]:
        seen = [None]

        def poll() -> Membership | None:
            notice = self.latest
            if notice is None or notice is seen[0]:
                return None
            seen[0] = notice
            return notice

        return poll
