"""One Mininet run per machine.

A run's switch-side interfaces (``s1-eth1``, ...) live in the root namespace under names that every run of a
topology shares, and Mininet deletes an interface of the same name before it makes its own: a second run
started beside the first would tear down the first one's links halfway through its training. So thc-run
holds a lock for the whole run, and a second one waits for it, saying which process it waits for. The
lock is an flock: it goes with the process, however that ends.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

LOCK_PATH = Path("/run/lock/thc-run.lock") if Path("/run/lock").is_dir() else Path("/tmp/thc-run.lock")


def hold(say: Callable[[str], None], path: Path = LOCK_PATH) -> IO:
    """Take the machine's run lock, waiting for another holder; keep the returned file open while the run lasts."""
    lock = open(path, "a+")  # noqa: SIM115  (held open for the run: the lock lives as long as the file)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        say(
            f"another thc-run (pid {holder}) is running on this machine: its Mininet interfaces have the names "
            f"this run needs, so this one waits for it to end ({path}; stop it with `thc-run --stop`)"
        )
        fcntl.flock(lock, fcntl.LOCK_EX)
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock
