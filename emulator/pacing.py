"""A paced switch: at most N received frames a second, one at a time (`thc-switch --pps N`).

A stand-in for a slower target (BMv2's simple_switch serves far fewer THC frames a second than thc-switch) on
any machine: frames wait in the ports' socket queues, as they wait in front of a slower switch, and each
starts no sooner than 1/N s after the one before. The C port loop (emulator/native/portloop.c) paces the
same way; this is the Python port loop's half.
"""

import time

MIN_PPS = 1.0  # a wait is at most one second, so a paced loop still stops promptly


def service_ns(pps: float | None) -> int:
    """Nanoseconds per frame at `pps` frames a second; 0 (unpaced) for None or 0."""
    if not pps:
        return 0
    if pps < MIN_PPS:
        raise ValueError(f"a paced switch serves at least {MIN_PPS:g} frame a second, got {pps:g}")
    return max(1, round(1e9 / pps))


class Pacer:
    """`wait()` before each frame: returns once the frame's turn has come (an idle switch saves up no
    credit). Deadlines advance by the service time from the last one, not from when the sleep ended, so
    oversleeping does not lower the rate while frames wait."""

    def __init__(self, service_ns: int, clock=time.monotonic_ns, sleep=time.sleep):
        self.service_ns = service_ns
        self._clock, self._sleep = clock, sleep
        self._next = 0

    def wait(self) -> None:
        now = self._clock()
        if self._next > now:
            self._sleep((self._next - now) / 1e9)
        else:
            self._next = now
        self._next += self.service_ns
