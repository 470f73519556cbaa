"""BMv2 as a switch target for the pipeline's packet tests (the software switch's target is
harness/switches.py): simple_switch_grpc on veth pairs, programmed over P4Runtime by the
project's controller, with the same calls, so the same tests run on every target that is present.
"""

from __future__ import annotations

import re
from pathlib import Path

import contract
from controller.writes import to_updates
from harness.switches import SwitchTarget
from tests.support.bmv2 import bmv2_binary

# A frame the THC program drops in ingress as NOT_IPV4 (etherType 0x88b5, local experimental), sent after each
# test frame on the same port: BMv2 has one ingress thread, so once it has begun the barrier it is done with
# the frame's ingress, and the frame's copies are all known (events() leaves the barriers out).
BARRIER = bytes.fromhex("02000000ffff02000000000088b5") + bytes(46)
HANG_GUARD_S = 60.0  # only so that a BMv2 that stops cannot hang the suite; never reached by a passing test
_LINE = re.compile(r"\[(\d+)\.(\d+)\] \[cxt \d+\] (.*)")


class _Bmv2Log:
    """BMv2's log file (`--log-file`, `--log-flush`: a line is on disk before BMv2 goes on), read on from where
    the last read stopped: (packet id, copy id, message) of every packet line."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.inode = None

    def lines(self) -> list[tuple[int, int, str]]:
        import os

        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            return []
        if self.inode is None:
            self.inode = inode
        assert inode == self.inode, f"{self.path} was rotated: raise --log-file-max-size"
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        out = []
        for raw in complete:
            m = _LINE.search(raw.decode(errors="replace"))
            if m:
                out.append((int(m.group(1)), int(m.group(2)), m.group(3)))
        return out


class Bmv2Target(SwitchTarget):
    """BMv2's simple_switch_grpc on veth pairs, programmed over P4Runtime by the project's controller.

    Port p of the switch is veth `<prefix>p-sw`; the test sends into and listens on its peer. What a frame
    makes BMv2 send is read from BMv2's own debug log, not guessed from a quiet spell: the frame is
    followed by a BARRIER on its port; once the barrier's ingress has ended, the frame's ingress has too
    (its "Replicating packet" lines, or its drop, or its egress port, are all written), and the frame is
    done when every copy has a "Transmitting packet" or "Dropping packet at the end of egress" line. Its
    outputs are then exactly the transmitted copies, read from the veths. No timing is assumed anywhere,
    so a loaded machine makes it slower, never wrong.
    """

    name = "bmv2"

    def __init__(self, binary: str, workdir: Path, ports=(1, 2, 3, 4), veth_prefix: str | None = None):
        import os

        from controller.session import SwitchSession
        from tests.support.bmv2 import Bmv2Process
        from topologies.veth import VethPorts

        self.veths = None
        self.proc = None
        self.session = None
        self.barriers = 0
        try:
            self.veths = VethPorts(veth_prefix or f"tb{os.getpid() % 10000}p", ports)
            self.proc = Bmv2Process(
                workdir,
                # debug, not trace: the packet lines without every register access; one file, never rotated
                ["--log-file", str(workdir / "bmv2"), "--log-flush", "--log-level", "debug"]
                + ["--log-file-max-size", str(1 << 30), "--no-p4", *self.veths.interface_args()],
                binary=binary,
            )
            self.log = _Bmv2Log(workdir / "bmv2.txt")
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
        events = {name: stats.packets(name) for name in contract.EVENTS}
        events["DROP_NOT_IPV4"] -= self.barriers
        return events

    def job_events(self, job_id: int) -> dict[str, int]:
        job = self.session.read_stats([job_id]).jobs[job_id]  # barriers go to no service address: not here
        return {name: job.packets(name) for name in contract.EVENTS}

    def _transmitted(self) -> dict[int, int]:
        """Waits until BMv2 is done with the frame just sent and its barrier; {port: frames sent out of it}."""
        import time

        received = []  # packet ids in the order BMv2 took them: the frame's, then the barrier's
        ingress_done, copies, ended, sent = set(), {}, set(), {}
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            for packet, copy, message in self.log.lines():
                if message.startswith("Processing packet received"):
                    received.append(packet)
                elif message.startswith(("Recirculating", "Resubmitting", "Cloning")):
                    raise AssertionError(f"BMv2 log: {message}: the THC program has no such path")
                elif message == "Dropping packet at the end of ingress":  # after its "Egress port is 511"
                    ingress_done.add(packet)
                    copies[packet] = set()
                elif message.startswith("Egress port is"):
                    ingress_done.add(packet)
                    copies.setdefault(packet, set()).add(copy)
                elif message.startswith("Multicast requested"):
                    ingress_done.add(packet)
                    copies.setdefault(packet, set())
                elif message.startswith("Replicating packet"):
                    copies[packet].add(len(copies[packet]) + 1)  # copies are numbered 1, 2, ... in this order
                elif message.startswith("Transmitting packet of size"):
                    ended.add((packet, copy))
                    port = int(message.rsplit(" ", 1)[1])
                    sent[port] = sent.get(port, 0) + 1
                elif message == "Dropping packet at the end of egress":
                    ended.add((packet, copy))
            assert len(received) <= 2, f"BMv2 took packets {received} for one frame and its barrier"
            if len(received) == 2 and received[1] in ingress_done:
                frame = received[0]
                if all((frame, c) in ended for c in copies.get(frame, ())):
                    return sent
            if self.proc.proc.poll() is not None:
                raise AssertionError(f"BMv2 exited: {self.proc.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"BMv2 did not finish a frame within {HANG_GUARD_S} s (took {received})")
            time.sleep(0.002)

    def send(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        import select
        import time

        self.veths.socks[port].send(frame)
        self.veths.socks[port].send(BARRIER)
        self.barriers += 1
        expected = {p: n for p, n in self._transmitted().items() if p in self.veths.socks}
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + HANG_GUARD_S
        while len(out) < sum(expected.values()):
            ready, _, _ = select.select(list(self.veths.socks.values()), [], [], 1.0)
            out += self.veths.receive_ready(ready)
            assert time.monotonic() < deadline, f"BMv2 transmitted {expected}, the veths brought {len(out)} frames"
        got = {p: sum(1 for q, _ in out if q == p) for p in expected}
        assert got == expected, f"BMv2 transmitted {expected} frames, the veths brought {got}"
        return out

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
        return Bmv2Target(bmv2_binary(), where, tuple(range(1, ports + 1)), veth_prefix=prefix)

    return make
