"""An in-process wire: workers' frames go straight into a switch engine, its outputs to the right worker.

The engine is anything with `process(port, frame) -> list[(port, frame)]` (emulator.switch.SoftwareSwitch,
or a fake in a test). Each worker is attached on a port and gets a `LoopbackPort`, a transport like
transport.RawSocketTransport. Loss can be injected each way with a seeded random generator, so a lossy run
is reproducible.

Time: with a `VirtualClock`, waiting costs nothing. A port whose inbox is empty "waits" by moving the clock
forward, and protocol.drive() moves it to the next retransmission deadline when no worker can make
progress, so timeouts and retransmissions run deterministically and instantly. With the real clock
(time.monotonic, the default) ports block on a condition variable, so workers may run in threads.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from typing import Callable


class VirtualClock:
    """A clock that only moves when told to: `clock()` reads it, `advance`/`advance_to` move it."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def advance_to(self, when: float) -> None:
        self.now = max(self.now, when)


class LoopbackWire:
    """Connects simulated workers to one switch engine, with optional loss on either direction.

    `loss_up`: probability that a frame from a worker never reaches the switch; `loss_down`: that a frame
    from the switch never reaches its worker. Frames to ports without a worker are counted in `unrouted`.
    """

    def __init__(self, engine, loss_up: float = 0.0, loss_down: float = 0.0, seed: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.loss_up, self.loss_down = loss_up, loss_down
        self.clock = clock
        self._rng = random.Random(seed)
        self._ports: dict[int, LoopbackPort] = {}
        self._lock = threading.Lock()
        self.dropped_up = self.dropped_down = self.unrouted = 0
        self.frames_to_switch = self.frames_from_switch = 0

    @property
    def virtual(self) -> bool:
        return isinstance(self.clock, VirtualClock)

    def attach(self, port: int) -> "LoopbackPort":
        if port in self._ports:
            raise ValueError(f"port {port} already has a worker")
        endpoint = self._ports[port] = LoopbackPort(self, port)
        return endpoint

    def inject(self, port: int, frame: bytes) -> None:
        """A frame arriving at the switch on `port` (from a worker, or from a test)."""
        deliveries = []
        with self._lock:
            self.frames_to_switch += 1
            if self.loss_up and self._rng.random() < self.loss_up:
                self.dropped_up += 1
                return
            for out_port, out_frame in self.engine.process(port, frame):
                self.frames_from_switch += 1
                if self.loss_down and self._rng.random() < self.loss_down:
                    self.dropped_down += 1
                    continue
                endpoint = self._ports.get(out_port)
                if endpoint is None:
                    self.unrouted += 1
                    continue
                deliveries.append((endpoint, bytes(out_frame)))
        for endpoint, out_frame in deliveries:
            endpoint.deliver(out_frame)


class LoopbackPort:
    """A worker's end of the loopback wire; the same interface as transport.RawSocketTransport."""

    def __init__(self, wire: LoopbackWire, port: int):
        self.wire, self.port = wire, port
        self._inbox: collections.deque[bytes] = collections.deque()
        self._ready = threading.Condition()

    def send(self, frame: bytes) -> None:
        self.wire.inject(self.port, frame)

    def deliver(self, frame: bytes) -> None:
        with self._ready:
            self._inbox.append(frame)
            self._ready.notify()

    def recv(self, timeout: float) -> list[bytes]:
        with self._ready:
            if not self._inbox and timeout > 0:
                if self.wire.virtual:
                    self.wire.clock.advance(timeout)
                else:
                    self._ready.wait(timeout)
            frames = list(self._inbox)
            self._inbox.clear()
        return frames

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return f"loopback wire port {self.port}"
