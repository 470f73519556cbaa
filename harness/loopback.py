"""An in-process wire: workers' frames go straight into a switch engine, its outputs to the right worker.

The engine is anything with `process(port, frame) -> list[(port, frame)]` (emulator.switch.SoftwareSwitch,
or a fake in a test). Each worker is attached on a port and gets a `LoopbackPort`, a transport like
transport.RawSocketTransport. Loss, duplication, latency and reordering can be injected each way with a
seeded random generator, so a lossy or reordering run is reproducible.

Time: with a `VirtualClock`, waiting costs nothing. A port whose inbox is empty "waits" by moving the clock
forward, and protocol.drive() moves it to the next retransmission deadline or the next frame in flight
when no worker can make progress, so timeouts and retransmissions run deterministically and instantly.
With the real clock (time.monotonic, the default) ports block on a condition variable, so workers may run
in threads.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable

from host_agent.clock import VirtualClock

_TO_SWITCH, _TO_WORKER = 0, 1


class LoopbackWire:
    """Connects simulated workers to one switch engine, with the link faults the protocol must survive.

    Each direction (`_up`: worker to switch, `_down`: back) may lose, duplicate, delay and jitter frames
    (jitter larger than the gap between frames reorders them), and have a link rate; the switch may take
    `service_time` per frame, one at a time, as a software switch's queue. With any latency, service time or
    rate the wire is timed: frames wait in a queue by arrival time and are handed over when the clock reaches
    it (`next_event()` says when). Random draws happen only for the features that are on, so a seed gives
    the same run as before when they are off. Frames to ports without a worker are counted in `unrouted`.
    """

    def __init__(
        self,
        engine,
        loss_up: float = 0.0,
        loss_down: float = 0.0,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        *,  # the link model; also settable as attributes (sim.attach_workers builds the wire with loss and seed)
        duplicate_up: float = 0.0,  # probability that a frame arrives twice
        duplicate_down: float = 0.0,
        delay_up: float = 0.0,  # one-way latency (s)
        delay_down: float = 0.0,
        jitter_up: float = 0.0,  # extra latency drawn uniformly from [0, jitter) per frame (and per copy)
        jitter_down: float = 0.0,
        service_time: float = 0.0,  # seconds the switch takes per frame, in arrival order
        rate_up: float = 0.0,  # bit/s of each worker's link (0: unlimited); frames wait for it in arrival order
        rate_down: float = 0.0,
    ):
        self.engine = engine
        self.loss_up, self.loss_down = loss_up, loss_down
        self.duplicate_up, self.duplicate_down = duplicate_up, duplicate_down
        self.delay_up, self.delay_down = delay_up, delay_down
        self.jitter_up, self.jitter_down = jitter_up, jitter_down
        self.service_time = service_time
        self.rate_up, self.rate_down = rate_up, rate_down
        self.clock = clock
        self._rng = random.Random(seed)
        self._ports: dict[int, LoopbackPort] = {}
        self._lock = threading.Lock()
        self._events: list[tuple[float, int, int, int, bytes]] = []  # (time, order, direction, port, frame)
        self._order = itertools.count()
        self._switch_free = float("-inf")  # when the switch has finished the frames given to it so far
        self._output_delay = 0.0  # how much later than that the outputs of the frame in process leave
        self._link_free: dict[tuple[int, int], float] = {}  # (direction, port) -> when its link is free
        self.dropped_up = self.dropped_down = self.unrouted = 0
        self.duplicated_up = self.duplicated_down = 0
        self.frames_to_switch = self.frames_from_switch = 0

    @property
    def virtual(self) -> bool:
        return isinstance(self.clock, VirtualClock)

    @property
    def timed(self) -> bool:
        return bool(
            self.delay_up
            or self.delay_down
            or self.jitter_up
            or self.jitter_down
            or self.service_time
            or self.rate_up
            or self.rate_down
        )

    def attach(self, port: int) -> LoopbackPort:
        if port in self._ports:
            raise ValueError(f"port {port} already has a worker")
        endpoint = self._ports[port] = LoopbackPort(self, port)
        return endpoint

    def detach(self, port: int) -> None:
        """The worker on `port` has left (a job that ended): frames to the port are unrouted from now on,
        and a later worker may be attached there."""
        self._ports.pop(port, None)

    def inject(self, port: int, frame: bytes) -> None:
        """A frame sent towards the switch on `port` (from a worker, or from a test)."""
        deliveries = []
        with self._lock:
            self.frames_to_switch += 1
            if self.loss_up and self._rng.random() < self.loss_up:
                self.dropped_up += 1
                return
            copies = 1
            if self.duplicate_up and self._rng.random() < self.duplicate_up:
                self.duplicated_up += 1
                copies = 2
            if self.timed:
                now = self.clock()
                for _ in range(copies):
                    sent = self._serialise(_TO_SWITCH, port, now, len(frame))
                    self._push(sent + self.delay_up + self._jitter(self.jitter_up), _TO_SWITCH, port, frame)
                deliveries = self._run_due(now)
            else:
                for _ in range(copies):
                    deliveries += self._at_switch(0.0, port, frame)
        for endpoint, out_frame in deliveries:
            endpoint.deliver(out_frame)

    def hold_switch(self, seconds: float) -> None:
        """The switch takes no frame for `seconds` after the one it is processing, and that one's outputs
        leave only then (a software switch descheduled). For an engine to call from its process()."""
        self._switch_free += seconds

    def delay_outputs(self, seconds: float) -> None:
        """The outputs of the frame being processed leave `seconds` after the switch is done with it, while
        the switch goes on with the next frame (a host behind the switch, busy with its own queue). For an
        engine to call from its process(); `switch_done` is when the switch is done with the frame."""
        self._output_delay += seconds

    @property
    def switch_done(self) -> float:
        return self._switch_free

    def next_event(self) -> float | None:
        """When the next frame in flight arrives (at the switch or a worker); None if none is."""
        with self._lock:
            return self._events[0][0] if self._events else None

    def run_due(self) -> None:
        """Hand over every frame whose arrival time has come."""
        if not self._events:
            return
        with self._lock:
            deliveries = self._run_due(self.clock())
        for endpoint, out_frame in deliveries:
            endpoint.deliver(out_frame)

    # ---- under the lock ---------------------------------------------------------------------------

    def _jitter(self, jitter: float) -> float:
        return self._rng.random() * jitter if jitter else 0.0

    def _serialise(self, direction: int, port: int, ready: float, length: int) -> float:
        """When a frame of `length` bytes, ready at `ready`, has left on `port`'s link in `direction`."""
        rate = self.rate_up if direction == _TO_SWITCH else self.rate_down
        if not rate:
            return ready
        link = (direction, port)
        done = max(ready, self._link_free.get(link, float("-inf"))) + 8 * length / rate
        self._link_free[link] = done
        return done

    def _push(self, when: float, direction: int, port: int, frame: bytes) -> None:
        heapq.heappush(self._events, (when, next(self._order), direction, port, frame))

    def _run_due(self, now: float) -> list:
        deliveries, events = [], self._events
        while events and events[0][0] <= now:
            when, _, direction, port, frame = heapq.heappop(events)
            if direction == _TO_SWITCH:
                deliveries += self._at_switch(when, port, frame)
            else:
                endpoint = self._ports.get(port)
                if endpoint is None:
                    self.unrouted += 1
                else:
                    deliveries.append((endpoint, frame))
        return deliveries

    def _at_switch(self, arrival: float, port: int, frame: bytes) -> list:
        """The switch takes a frame that arrived at `arrival`; its outputs leave when it is done."""
        deliveries = []
        timed = self.timed
        if timed:
            self._switch_free = max(arrival, self._switch_free) + self.service_time
        self._output_delay = 0.0
        for out_port, out_frame in self.engine.process(port, frame):
            self.frames_from_switch += 1
            if self.loss_down and self._rng.random() < self.loss_down:
                self.dropped_down += 1
                continue
            copies = 1
            if self.duplicate_down and self._rng.random() < self.duplicate_down:
                self.duplicated_down += 1
                copies = 2
            out_frame = bytes(out_frame)
            for _ in range(copies):
                if timed:
                    sent = self._serialise(_TO_WORKER, out_port, self._switch_free + self._output_delay, len(out_frame))
                    self._push(
                        sent + self.delay_down + self._jitter(self.jitter_down),
                        _TO_WORKER,
                        out_port,
                        out_frame,
                    )
                    continue
                endpoint = self._ports.get(out_port)
                if endpoint is None:
                    self.unrouted += 1
                    continue
                deliveries.append((endpoint, out_frame))
        return deliveries


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

    def next_event(self) -> float | None:
        """When the wire next hands a frame over (to anyone): protocol.drive() moves a virtual clock there."""
        return self.wire.next_event()

    def send_many(self, rows) -> None:
        """Every row of a (n, length) uint8 array as one frame, in order (transport.BatchTransport)."""
        inject, port = self.wire.inject, self.port
        for row in rows:
            inject(port, row.tobytes())

    def _wait(self, timeout: float) -> None:
        wire = self.wire
        wire.run_due()
        if not self._inbox and timeout > 0:
            if wire.virtual:
                until = wire.clock() + timeout
                due = wire.next_event()
                wire.clock.advance_to(until if due is None else min(until, due))
                wire.run_due()
            else:
                due = wire.next_event()
                with self._ready:
                    if not self._inbox:
                        self._ready.wait(timeout if due is None else max(0.0, min(timeout, due - wire.clock())))
                wire.run_due()

    def recv(self, timeout: float) -> list[bytes]:
        self._wait(timeout)
        with self._ready:
            frames = list(self._inbox)
            self._inbox.clear()
        return frames

    def recv_into(self, buf, lengths, timeout: float) -> int:
        """Up to len(buf) waiting frames into rows of `buf` (cut to its stride), their lengths into
        `lengths`; the rest stay for the next call (transport.BatchTransport)."""
        self._wait(timeout)
        stride, n = buf.shape[1], 0
        with self._ready:
            inbox = self._inbox
            while inbox and n < len(buf):
                frame = inbox.popleft()
                size = min(len(frame), stride)
                buf[n, :size] = memoryview(frame)[:size]
                lengths[n] = size
                n += 1
        return n

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return f"loopback wire port {self.port}"
