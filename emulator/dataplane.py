"""The switch's data plane: one set of ports, served by the loop that fits the committed pipeline.

A pipeline whose engine is native (emulator.native) is served by the C port loop compiled into its
own library: no Python per packet. Any other engine (the Python one, a program the native backend
refused, no pipeline yet), or a run that asked for per-packet logs or packet dumps, is served by the
Python PortLoop. Sockets and pcap files are opened once and handed from one loop to the next; a
newly committed pipeline stops the running loop and the next one starts over the new engine, so
P4Runtime can replace the program at any time (thc-run pushes it after the switch starts).
"""

import collections
import logging
import threading

from emulator.ports import PortLoop

log = logging.getLogger("emulator.ports")
trace_log = logging.getLogger("emulator.trace")


class DataPlane:
    def __init__(
        self, device, ports: dict, pcap_dir=None, packet_in=None, dump_packet_bytes: int = 0, service_ns: int = 0
    ):
        """`service_ns` > 0 paces whichever loop serves to one received frame per service_ns (--pps)."""
        self.device = device
        self.service_ns = service_ns
        self.python = PortLoop(
            device, ports, pcap_dir=pcap_dir, dump_packet_bytes=dump_packet_bytes, service_ns=service_ns
        )
        self.packet_in = packet_in
        self.native_allowed = dump_packet_bytes == 0
        self._native_stats = collections.Counter()
        self._current = None
        self._generation = 0
        self._stopped = False
        self._guard = threading.Lock()
        device.add_commit_listener(self._pipeline_changed)

    # ------------------------------------------------------------ PortLoop's surface
    def open(self) -> None:
        self.python.open()

    def close(self) -> None:
        self.python.close()

    @property
    def stats(self) -> collections.Counter:
        return self.python.stats + self._native_stats

    def inject(self, port: int, frame: bytes) -> None:
        """A PacketOut: into whichever loop serves now (thread-safe)."""
        (self._current or self.python).inject(port, frame)

    def stop(self) -> None:
        """Make run() return (signal handlers, other threads)."""
        self._stopped = True
        loop = self._current
        if loop is not None:
            loop.stop()

    def _pipeline_changed(self) -> None:
        with self._guard:
            self._generation += 1
            loop = self._current
        if loop is not None:
            loop.stop()  # run() picks the loop for the new engine

    def _wants_native(self, engine) -> bool:
        if not self.native_allowed or getattr(engine, "backend", "python") != "native":
            return False
        return not trace_log.isEnabledFor(getattr(engine, "trace_level", logging.DEBUG))

    # ------------------------------------------------------------ serving
    def run(self) -> None:
        self.python.packet_in = self.packet_in
        while not self._stopped:
            with self._guard:
                generation = self._generation
                engine = self.device.engine  # held until its loop returns: the C loop drives it
                loop = self._native_loop(engine) if self._wants_native(engine) else self.python
                self._current = loop
            if self._stopped:
                break
            if loop is self.python:
                log.info("data plane: Python port loop (%s)", getattr(engine, "backend", "no pipeline"))
                if generation == self._generation:
                    self.python.run()
            else:
                log.info("data plane: native port loop")
                try:
                    if generation == self._generation:
                        loop.run()
                finally:
                    self._native_stats += loop.stats
                    loop.release()  # the sockets and captures stay open for the next loop
                    loop.close()
            del engine

    def _native_loop(self, engine):
        """A C loop for `engine` on the ports' sockets. They receive with recvmmsg, not a receive ring:
        a ring is torn down with its loop and the frames in it with it, whereas a socket's queue keeps
        what arrives while one loop hands over to the next (a pipeline pushed, a route inserted and a
        frame sent right after must not lose the frame)."""
        from emulator.native.portloop import NativePortLoop

        loop = NativePortLoop(
            engine.lib,
            engine.handle,
            {},
            cpu_port=self.device.cpu_port,
            packet_in=self.packet_in,
            rx_ring=False,
            service_ns=self.service_ns,
        )
        sockets, captures = self.python.open_ports()
        for port, sock in sorted(sockets.items()):
            loop.attach(port, sock, None, 0)
        loop.adopt_captures(captures)
        return loop
