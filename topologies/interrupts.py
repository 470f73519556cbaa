"""Ctrl-C that never falls between creating something and writing it down.

The runner's cleanup removes what the ledger lists; a KeyboardInterrupt raised after a process was
started but before its pid was recorded would leak that process. Blocking the signals is no answer
(children inherit a blocked mask across exec, and Mininet's shells would then ignore SIGHUP), so the
runner's handlers raise KeyboardInterrupt at once outside ``critical()`` blocks and hold it until the
end of the block inside one. Without ``install()`` (library use, tests) ``critical()`` changes nothing.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_depth = 0
_pending: str | None = None


def _handler(signum, _frame):
    global _pending
    name = signal.Signals(signum).name
    if _depth:
        _pending = name
        return
    raise KeyboardInterrupt(name)


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, deferred inside critical blocks."""
    for sig in _HANDLED:
        signal.signal(sig, _handler)


def ignore() -> None:
    """From now on the signals are ignored: used while cleaning up, which must not be cut short."""
    for sig in _HANDLED:
        signal.signal(sig, signal.SIG_IGN)


@contextmanager
def critical():
    """Hold interrupts until the block ends (then raise the held one)."""
    global _depth, _pending
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _pending is not None:
            name, _pending = _pending, None
            raise KeyboardInterrupt(name)
