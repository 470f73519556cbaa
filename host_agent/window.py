"""The request schedule (p4/README.md, "Worker protocol") and what it lets a worker send.

Request q of a job (counted from 0 over the whole run, the same sequence on every worker) uses slot
q mod W in round q div W, W the job's window, and may be sent only once the result of request q − W (the
slot's previous use) is back. So the switch never sees a round that the round window of its cells refuses.
"""

from __future__ import annotations

import numpy as np


class Window:
    """The schedule of a job's requests over its W slots, and the requests it lets go, in the order the
    results that freed them came (an operation's first W at its start, then q + W once q is answered)."""

    def __init__(self, size: int):
        self.size = size
        self._free: list[np.ndarray] = []  # request indices within the operation, in the order freed

    def slot(self, q):
        return q % self.size

    def round(self, q):
        return q // self.size

    def number(self, slot, round):
        """The request number q of (slot, round)."""
        return round * self.size + slot

    def open(self, n_requests: int) -> None:
        """A new operation of n requests: the first W may go at once (the previous one is complete)."""
        self._free = [np.arange(min(self.size, n_requests), dtype=np.int64)]

    def answered(self, i: np.ndarray, n_requests: int) -> None:
        """Requests i of the operation are answered: each lets request i + W of the operation go."""
        following = i + self.size
        following = following[following < n_requests]
        if following.size:
            self._free.append(following)

    def take(self) -> np.ndarray | None:
        """Every request let go and not yet taken, in order; None if there is none."""
        if not self._free:
            return None
        idx = self._free[0] if len(self._free) == 1 else np.concatenate(self._free)
        self._free = []
        return idx

    def clear(self) -> None:
        self._free = []

    def __bool__(self) -> bool:
        """Whether requests are waiting to be sent."""
        return bool(self._free)
