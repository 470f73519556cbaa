"""The protocol's virtual clock: time that moves only when told to, so that in-process runs (the loopback
wire of harness/, protocol.drive) wait for nothing and time out deterministically. The protocol knows it by
type: with it, waiting means moving the clock, never sleeping or holding results back."""

from __future__ import annotations


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
