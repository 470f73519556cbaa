"""The compiled program behind the software switch's own native port loop, paced as `thc-switch --pps N`
paces it, with each worker on an AF_UNIX socketpair: the protocol against a slow switch (BMv2's pace)
without root, Mininet or BMv2. The frames take the path they take in thc-switch (socket, C loop, pacing,
pipeline, socket); only the interfaces are socketpairs instead of veths.

    with PacedSwitch(job, pps=2000) as switch:
        workers = switch.protocols(timeout=0.05)  # WorkerProtocols, one per worker of the job
        ...                                      # each on a thread of its own (real clock)
    switch.loop_stats  # rx, tx, batches...
"""

from __future__ import annotations

import socket
import threading

import contract
from emulator.native.portloop import NativePortLoop
from emulator.pacing import service_ns
from emulator.switch import SoftwareSwitch
from harness.sim import SERVICE, SimJob, program_engine, worker_endpoint, worker_port
from host_agent import wire
from host_agent.protocol import WorkerProtocol
from host_agent.transport import DatagramTransport

SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
SOCKET_BYTES = 4 << 20


def _size_buffers(sock: socket.socket) -> None:
    for forced, capped in ((SO_SNDBUFFORCE, socket.SO_SNDBUF), (SO_RCVBUFFORCE, socket.SO_RCVBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, forced, SOCKET_BYTES)
        except OSError:  # not root: as much as net.core.wmem_max / rmem_max allow
            sock.setsockopt(socket.SOL_SOCKET, capped, SOCKET_BYTES)


class PacedSwitch:
    """`job` installed on the native engine of the compiled program, served by a NativePortLoop paced to
    `pps` received frames a second (None: unpaced) on one socketpair per worker."""

    def __init__(self, job: SimJob, pps: float | None):
        self.job = job
        self.engine = SoftwareSwitch.from_json(contract.PROGRAM_JSON, backend="native")
        program_engine(self.engine, job)
        self.loop = NativePortLoop(self.engine.lib, self.engine.handle, {}, service_ns=service_ns(pps))
        self.hosts: dict[int, socket.socket] = {}
        self._switch_ends: list[socket.socket] = []
        for w in job.worker_ids:
            host, switch_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            for sock in (host, switch_end):
                _size_buffers(sock)
            self.hosts[w] = host
            self._switch_ends.append(switch_end)
            self.loop.attach(worker_port(w), switch_end)
        self._thread = threading.Thread(target=self.loop.run, name="paced-switch", daemon=True)
        self._thread.start()
        self.loop_stats: dict = {}

    def protocols(self, **options) -> list[WorkerProtocol]:
        """One WorkerProtocol per worker of the job on its socketpair (`options`: WorkerProtocol's)."""
        return [
            WorkerProtocol(
                DatagramTransport(self.hosts[w], f"socketpair to port {worker_port(w)}"),
                wire.FrameBuilder(worker_endpoint(w), SERVICE),
                self.job.spec,
                w,
                **options,
            )
            for w in self.job.worker_ids
        ]

    def close(self) -> None:
        self.loop.stop()
        self._thread.join(30)
        self.loop_stats = dict(self.loop.stats)
        if not self._thread.is_alive():
            self.loop.close()  # closes the switch ends
        for sock in self.hosts.values():
            sock.close()

    def __enter__(self) -> PacedSwitch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
