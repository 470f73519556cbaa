"""A job's ticket: its description and what the controller granted it, in one file a worker loads and trusts.

`thc-ctl job add --save FILE` and the testbed (topologies/testbed.py) write it from the description and
the controller's job (`Ticket.granted`); `thc-worker --job FILE` and THC_JOB (host_agent/dist_backend.py)
read it. The file is a JSON object of two parts:

    {"job": {the description's flat fields, as JobSpec.to_dict writes them, without "key"},
     "grant": {"key": K, "epoch": E, "slot_base": B, "n_slots": N, "pool": null or {"base", "cells", "ring_offset"}}}

A file of a description alone (JobSpec.save, what --save wrote before tickets) still loads, as a ticket
without a grant whose key is the description's own: the parameter-server modes write one (each server
grants its own key, in servers.json, so no single grant fits), and a description keyed by hand
(`thc-ctl job add --job FILE --key K`) names a job its workers can join all the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import contract
from contract.job import KEYS, JobSpec, JobSpecError, read_json

__all__ = ["Grant", "Ticket"]

POOL_FIELDS = ("base", "cells", "ring_offset")


def _int(where: str, name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise JobSpecError(f"{where}: grant field '{name}' = {value!r}: must be an integer from {low} to {high}", name)
    return value


@dataclass(frozen=True)
class Grant:
    """What the controller gave a job when it added it: the key every packet carries, the epoch its cells
    start from, its slots (slot_base .. slot_base + n_slots - 1; on two levels the spine's) and, for a pool
    job, where its ring lies in the shared pool (base, cells, ring_offset: controller/pool.py)."""

    key: int
    epoch: int
    slot_base: int
    n_slots: int
    pool: tuple[int, int, int] | None = None

    @classmethod
    def of(cls, job) -> Grant:
        """The grant of a controller job (controller.jobs.Job, or a two_level.TwoLevelJob, which has no pool)."""
        pool = getattr(job, "pool", None)
        return cls(job.key, job.epoch, job.slot_base, job.n_slots, None if pool is None else tuple(pool))

    @property
    def slots(self) -> range:
        return range(self.slot_base, self.slot_base + self.n_slots)

    def describe(self) -> str:
        """For a worker's log line: the epoch and where the job's cells are."""
        where = f"slots {self.slot_base}..{self.slot_base + self.n_slots - 1}"
        if self.pool is not None:
            base, cells, offset = self.pool
            where += f" and pool cells {base}..{base + cells - 1} from ring offset {offset}"
        return f"epoch {self.epoch}, {where}"

    def to_dict(self) -> dict:
        pool = None if self.pool is None else dict(zip(POOL_FIELDS, self.pool))
        return {
            "key": self.key,
            "epoch": self.epoch,
            "slot_base": self.slot_base,
            "n_slots": self.n_slots,
            "pool": pool,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> Grant:
        if not isinstance(data, dict):
            raise JobSpecError(f"{where}: a ticket's grant is a JSON object, not {type(data).__name__}", "grant")
        names = ("key", "epoch", "slot_base", "n_slots", "pool")
        unknown = sorted(set(data) - set(names))
        missing = [n for n in names if n not in data]
        if unknown or missing:
            said = f"unknown field '{unknown[0]}'" if unknown else f"field '{missing[0]}' is missing"
            raise JobSpecError(f"{where}: grant {said} (fields: {', '.join(names)})", (unknown or missing)[0])
        _int(where, "key", data["key"], KEYS[0], KEYS[-1])
        _int(where, "epoch", data["epoch"], 1, contract.EPOCH_MAX)
        _int(where, "n_slots", data["n_slots"], 1, contract.SLOTS)
        _int(where, "slot_base", data["slot_base"], 0, contract.BOOK_SLOTS - data["n_slots"])
        pool = data["pool"]
        if pool is not None:
            if not isinstance(pool, dict) or sorted(pool) != sorted(POOL_FIELDS):
                raise JobSpecError(f"{where}: grant field 'pool' is null or {{{', '.join(POOL_FIELDS)}}}", "pool")
            pool = tuple(_int(where, f"pool.{n}", pool[n], 0, contract.CELLS) for n in POOL_FIELDS)
        return cls(data["key"], data["epoch"], data["slot_base"], data["n_slots"], pool)


@dataclass(frozen=True)
class Ticket:
    """A job as its workers are handed it: `spec`, the description (its key the granted one), and `grant`,
    what the controller gave it (None for a description alone: see the module docstring)."""

    spec: JobSpec
    grant: Grant | None = None

    def __post_init__(self) -> None:
        if self.grant is not None and self.grant.key != self.spec.key:
            raise JobSpecError(f"a ticket's key is its grant's: {self.grant.key:#x}, not {self.spec.key:#x}", "key")
        if self.grant is not None and self.grant.n_slots != self.spec.slots:
            raise JobSpecError(
                f"job {self.spec.job_id}: granted {self.grant.n_slots} slots, but its description asks for "
                f"{self.spec.slots}",
                "n_slots",
            )

    @classmethod
    def granted(cls, spec: JobSpec, job) -> Ticket:
        """The ticket of the controller's `job`, added from the description `spec`: the one way a ticket is made."""
        return cls(spec.replace(key=job.key), Grant.of(job))

    def to_dict(self) -> dict:
        if self.grant is None:
            return self.spec.to_dict()
        description = self.spec.to_dict()
        del description["key"]  # the grant's
        return {"job": description, "grant": self.grant.to_dict()}

    @classmethod
    def from_dict(cls, data: object, where: str = "the ticket") -> Ticket:
        if not isinstance(data, dict) or not ({"job", "grant"} & set(data)):
            return cls(JobSpec.from_dict(data, where))  # a description alone
        unknown = sorted(set(data) - {"job", "grant"})
        missing = [n for n in ("job", "grant") if n not in data]
        if unknown or missing:
            said = f"unknown part '{unknown[0]}'" if unknown else f"part '{missing[0]}' is missing"
            raise JobSpecError(f'{where}: {said} (a ticket is {{"job": ..., "grant": ...}})', (unknown or missing)[0])
        grant = Grant.from_dict(data["grant"], where)
        description = data["job"]
        if isinstance(description, dict) and "key" in description:
            raise JobSpecError(f"{where}: the job's key is the grant's, not a field of its description", "key")
        if isinstance(description, dict):
            description = {**description, "key": grant.key}
        spec = JobSpec.from_dict(description, where)
        try:
            return cls(spec, grant)
        except JobSpecError as exc:
            raise JobSpecError(f"{where}: {exc}", exc.field) from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Ticket:
        """The ticket in `path`, or JobSpecError in one line naming the file and the field."""
        return cls.from_dict(read_json(path), str(path))
