"""Switch targets for the pipeline's packet tests: the same tests run on every target that is present.

A target takes the program's control-plane state in contract terms (p4/README.md), programs it with the
controller's own writes, and answers `send(port, frame) -> [(port, frame), ...]`. The software switch
runs in-process; `simple_switch_grpc` is driven over P4Runtime and veth pairs when it is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

from controller import jobs, lookup_tables
from controller.jobs import Job
from controller.writes import INSERT, MODIFY, EngineWriter, GroupWrite, TableWrite, to_updates
from spec import contract
from tests.support import paths
from tests.support.bmv2 import bmv2_binary  # noqa: F401  (re-exported for the pipeline tests)

BUILD, THC_JSON, THC_P4INFO = paths.BUILD, paths.THC_JSON, paths.THC_P4INFO


class _Target:
    """Control-plane calls in contract terms, carried out by the controller's writes (controller/writes.py);
    a target only says how writes reach its switch (`apply`) and how events are read."""

    def apply(self, writes: list) -> None:
        raise NotImplementedError

    def add_route(self, prefix: int, length: int, mac: int, port: int) -> None:
        self.apply([TableWrite(INSERT, contract.IPV4_LPM, ((prefix, length),), contract.IPV4_FORWARD, (mac, port))])

    def add_service(self, ip: int) -> None:
        self.apply([TableWrite(INSERT, contract.SERVICE_ADDR, (ip,), contract.SERVE, ())])

    def set_job(
        self,
        job_id: int,
        *,
        n_workers,
        slot_base,
        n_slots,
        mcast_grp,
        worker_mask,
        lane_bits,
        epoch,
        key=0,
        replace: bool = False,
    ) -> None:
        job = Job(job_id, n_workers, slot_base, n_slots, mcast_grp, worker_mask, lane_bits, epoch, key)
        self.apply([jobs.job_write(MODIFY if replace else INSERT, job)])

    def set_group(self, group: int, replicas: list[tuple[int, int]]) -> None:
        self.apply([GroupWrite(INSERT, group, tuple(replicas))])

    def add_result_dst(self, job_id: int, worker_id: int, mac: int, ip: int) -> None:
        self.apply([TableWrite(INSERT, contract.RESULT_DST, (job_id, worker_id), contract.SET_RESULT_DST, (mac, ip))])

    def set_table(self, job_id: int, values, bits: int | None = None, replace: bool = False) -> None:
        """The job's lookup table (a 2**bits table), as thc-ctl job add installs it."""
        self.apply([lookup_tables.values_write(MODIFY if replace else INSERT, job_id, list(values), bits)])


class SoftwareTarget(_Target):
    """The software switch, in-process: writes go straight to the engine."""

    name = "emulator"

    def __init__(self, backend: str = "python"):
        from emulator.switch import SoftwareSwitch

        self.sw = SoftwareSwitch.from_json(THC_JSON, backend=backend)
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


def program_words(path: Path = THC_JSON) -> int:
    """Register words per cell of a compiled program (THC_WORDS), for tests that must not hard-code K."""
    program = json.loads(path.read_text())
    return sum(1 for r in program["register_arrays"] if r["name"].startswith(contract.ACC_PREFIX))


class Bmv2Target(_Target):
    """BMv2's simple_switch_grpc on veth pairs, programmed over P4Runtime by the project's controller.

    Port p of the switch is veth `<prefix>p-sw`; the test sends into and listens on its peer. A packet is
    processed when the thc_events counter moves (every packet counts exactly one event); its outputs
    are what arrives until the ports stay quiet for `settle` seconds (BMv2 has sent them long before:
    the counter is read over P4Runtime after ingress, and egress takes microseconds).
    """

    name = "bmv2"

    def __init__(
        self, binary: str, workdir: Path, ports=(1, 2, 3, 4), settle: float = 0.5, veth_prefix: str | None = None
    ):
        import os

        from controller.session import SwitchSession
        from tests.support.bmv2 import Bmv2Process
        from topologies.veth import VethPorts

        self.settle = settle
        self.veths = None
        self.proc = None
        self.session = None
        try:
            self.veths = VethPorts(veth_prefix or f"tb{os.getpid() % 10000}p", ports)
            self.proc = Bmv2Process(
                workdir,
                ["--log-file", str(workdir / "bmv2"), "--log-flush", "--no-p4", *self.veths.interface_args()],
                binary=binary,
            )
            self.session = SwitchSession(self.proc.address, name="bmv2", connect_timeout=20.0)
            self.session.push()
            self.p4info = self.session._p4info
        except Exception:
            self.close()
            raise
        self.words = contract.cell_words(self.p4info.msg)

    def apply(self, writes: list) -> None:
        self.session.conn.write(to_updates(self.p4info, writes))

    def events(self) -> dict[str, int]:
        stats = self.session.read_stats([])
        return {name: stats.packets(name) for name in contract.EVENTS}

    def job_events(self, job_id: int) -> dict[str, int]:
        job = self.session.read_stats([job_id]).jobs[job_id]
        return {name: job.packets(name) for name in contract.EVENTS}

    def send(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        import select
        import time

        before = sum(self.events().values())
        self.veths.socks[port].send(frame)
        deadline = time.monotonic() + 60.0
        while sum(self.events().values()) == before:
            if time.monotonic() > deadline:
                raise AssertionError("BMv2 did not count the packet within a minute: is it running?")
            time.sleep(0.01)
        out: list[tuple[int, bytes]] = []
        while True:
            ready, _, _ = select.select(list(self.veths.socks.values()), [], [], self.settle)
            if not ready:
                return out
            out += self.veths.receive_ready(ready)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        if self.proc is not None:
            self.proc.stop()
        if self.veths is not None:
            self.veths.close()
