"""BMv2 as a switch target for the pipeline's packet tests (the software switch's target is
topologies/inprocess/switches.py): simple_switch_grpc on veth pairs, programmed over P4Runtime by the
project's controller, with the same calls, so the same tests run on every target that is present.
"""

from __future__ import annotations

from pathlib import Path

from controller.writes import to_updates
from spec import contract
from tests.support.bmv2 import bmv2_binary
from topologies.inprocess.switches import SwitchTarget


class Bmv2Target(SwitchTarget):
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


def bmv2_switches(workdir: Path):
    """A LeafSpine switch factory: each switch a Bmv2Target with its logs in workdir/<name> (root)."""
    import os

    def make(name: str, ports: int) -> Bmv2Target:
        where = workdir / name
        where.mkdir(parents=True, exist_ok=True)
        prefix = f"ls{os.getpid() % 1000}{name[0]}{name[-1]}"  # short: interface names have 15 characters
        return Bmv2Target(bmv2_binary(), where, tuple(range(1, ports + 1)), settle=0.1, veth_prefix=prefix)

    return make
