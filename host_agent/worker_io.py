"""What a worker process reports and reads of its host, in training and in probe rounds alike: its
progress lines (``@thc {json}``, which thc-run follows), the bytes on its interface and the CPU time."""

from __future__ import annotations

import json
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

PROGRESS_PREFIX = "@thc "

_emitting = threading.Lock()  # the aggregation thread reports too (a rejoin): one whole line at a time


def emit(record: dict) -> None:
    with _emitting:
        print(PROGRESS_PREFIX + json.dumps(record), flush=True)


def die_after(step: int | None) -> Callable[[dict], None]:
    """An injected failure (thc-worker --die-after-step): a step record's check that, at `step`, emits a
    "dying" record with the time (time.monotonic, one clock for every process on the machine) and ends the
    process with SIGKILL, as a crashed host would; nothing for any other step, or when `step` is None."""

    def check(record: dict) -> None:
        if step is not None and record.get("event") == "step" and record.get("step") == step:
            emit({"event": "dying", "step": step, "t": time.monotonic()})
            os.kill(os.getpid(), signal.SIGKILL)

    return check


def cpu_counters() -> dict:
    """Seconds so far: wall, this process's CPU, and the whole machine's busy and total CPU time
    (/proc/stat, all cores: not namespaced, so any worker sees the switch's and the other workers' load);
    and the times this process went to sleep waiting (voluntary context switches: each a wake-up later)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return {
        "wall_s": time.perf_counter(),
        "process_s": time.process_time(),
        "machine_busy_s": (total - idle) / hz,
        "machine_total_s": total / hz,
        "sleeps": resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw,
    }


def use_interface(iface: str | None) -> None:
    """gloo's traffic on ``iface`` (without it gloo picks the interface its hostname resolves to)."""
    if iface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = iface


def interface_counters(iface: str | None) -> dict:
    """Bytes and packets on ``iface`` as this network namespace sees it (/proc/self/net/dev); empty
    without an interface (a worker under torchrun that was not told one)."""
    if iface is None:
        return {}
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == iface:
            f = [int(x) for x in rest.split()]
            return {"rx_bytes": f[0], "rx_packets": f[1], "tx_bytes": f[8], "tx_packets": f[9]}
    raise ValueError(f"no interface {iface} in this namespace")
