"""A switch programmed in contract terms, in-process: the same calls for the software switch here and for
BMv2 in the tests (tests/support/targets.py), so the packet tests, the leaf-spine fabric and its benchmark
run on whichever switch is present.

A target takes the program's control-plane state in contract terms (p4/README.md), programs it with the
controller's own writes, and answers `send(port, frame) -> [(port, frame), ...]`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import contract
from contract.job import JobSpec
from controller import jobs, lookup_tables
from controller.jobs import Job, JobWorker
from controller.writes import INSERT, MODIFY, EngineWriter, GroupWrite, TableWrite


class SwitchTarget:
    """Control-plane calls in contract terms, carried out by the controller's writes (controller/writes.py);
    a target only says how writes reach its switch (`apply`) and how events are read."""

    def apply(self, writes: list) -> None:
        raise NotImplementedError

    def add_route(self, prefix: int, length: int, mac: int, port: int) -> None:
        self.apply([TableWrite(INSERT, contract.IPV4_LPM, ((prefix, length),), contract.IPV4_FORWARD, (mac, port))])

    def add_service(self, ip: int) -> None:
        self.apply([TableWrite(INSERT, contract.SERVICE_ADDR, (ip,), contract.SERVE, ())])

    def set_job(self, spec: JobSpec, workers: list[JobWorker], *, epoch: int, replace: bool = False, **pinned) -> Job:
        """Write the jobs entry of `spec` for `workers` as the controller plans it (jobs.plan_job: the mask,
        slot count, key and epoch checked and derived as thc-ctl does); its group, result destinations and
        table are the other calls'. A packet test puts the switch in states a planner would not choose (a
        group of its own, 16-bit lanes for a few workers, bookkeeping slots), so `pinned` fields (slot_base,
        mcast_grp, lane_bits) replace the plan's."""
        job = jobs.plan_job(spec, workers, [], epoch=epoch, lookups=False)
        job = dataclasses.replace(job, **pinned)
        self.apply([jobs.job_write(MODIFY if replace else INSERT, job)])
        return job

    def set_group(self, group: int, replicas: list[tuple[int, int]]) -> None:
        self.apply([GroupWrite(INSERT, group, tuple(replicas))])

    def add_result_dst(self, job_id: int, worker_id: int, mac: int, ip: int) -> None:
        self.apply([TableWrite(INSERT, contract.RESULT_DST, (job_id, worker_id), contract.SET_RESULT_DST, (mac, ip))])

    def set_table(self, job_id: int, values, bits: int | None = None, replace: bool = False) -> None:
        """The job's lookup table (a 2**bits table), as thc-ctl job add installs it."""
        self.apply([lookup_tables.values_write(MODIFY if replace else INSERT, job_id, list(values), bits)])


class SoftwareTarget(SwitchTarget):
    """The software switch, in-process: writes go straight to the engine."""

    name = "emulator"

    def __init__(self, backend: str = "python"):
        from emulator.switch import SoftwareSwitch

        self.sw = SoftwareSwitch.from_json(contract.PROGRAM_JSON, backend=backend)
        self.name = "emulator" if backend == "python" else f"emulator-{backend}"
        self.words = sum(1 for r in self.sw.program.registers if r.startswith(contract.ACC_PREFIX))
        self.writer = EngineWriter(self.sw)

    def apply(self, writes: list) -> None:
        self.writer.apply(writes)

    def send(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        return self.sw.process(port, frame)

    def events(self) -> dict[str, int]:
        return {name: self.sw.counter_read(contract.THC_EVENTS, i)[0] for i, name in enumerate(contract.EVENTS)}

    def job_events(self, job_id: int) -> dict[str, int]:
        return {
            name: self.sw.counter_read(contract.THC_JOB_EVENTS, contract.job_event_cell(job_id, name))[0]
            for name in contract.EVENTS
        }

    def close(self) -> None:
        assert self.sw.stats.get("exceptions", 0) == 0, "the engine raised while processing a packet"


def program_words(path: Path = contract.PROGRAM_JSON) -> int:
    """Register words per cell of a compiled program (THC_WORDS), for tests that must not hard-code K."""
    program = json.loads(path.read_text())
    return sum(1 for r in program["register_arrays"] if r["name"].startswith(contract.ACC_PREFIX))
