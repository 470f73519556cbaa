"""Room for a run's pcaps, checked before the network starts.

Every switch writes every frame it receives (`<iface>_in.pcap`) and sends (`<iface>_out.pcap`), and a
run of a large model on fast links moves gigabytes per mode, and a run of many modes can fill the disk and
stop mid-run. So the runner bounds the captures first and
refuses a run whose pcaps could not fit, saying how to make room.

The bound: a frame a worker sends is one `_in` record at each switch on its way and a frame it receives
one `_out` record, so each mode writes about every worker's sent plus received bytes per step, per
switch it crosses. Every mode is taken at gloo's fp32 ring all-reduce (FIX32 through the switch moves
about as much; the compressed modes less), every frame through every switch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from topologies.link_rate import gloo_bytes_per_step

HEADROOM = 0.9  # use at most this share of the free space
NOTE_BYTES = 1 << 30  # say how much a run may write from 1 GiB up


class PcapRoomError(ValueError):
    """The run's pcaps could fill the disk."""


def bound_bytes(parameters: int, workers: int, steps: int, modes: int, switches: int = 1) -> int:
    """At most this many bytes of pcap records for the run (headers aside)."""
    per_worker_step = 2 * gloo_bytes_per_step(parameters, workers)  # sent and received
    return int(per_worker_step * workers * steps * modes * switches)


def free_bytes(directory: Path) -> int:
    """Free space on the file system that will hold ``directory`` (which may not exist yet)."""
    path = Path(directory).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def check(bound: int, free: int, directory: Path, what: str) -> str | None:
    """Raise PcapRoomError if ``bound`` bytes of pcaps might not fit in ``free``; a note on a large bound."""
    if bound > HEADROOM * free:
        raise PcapRoomError(
            f"the pcaps of this run could take up to {bound / 1e9:.1f} GB ({what}) and {directory} has "
            f"{free / 1e9:.1f} GB free: give --no-pcap, fewer --steps or --modes, or a --pcap-dir with room"
        )
    if bound >= NOTE_BYTES:
        return f"pcaps: up to {bound / 1e9:.1f} GB in {directory} ({what}; --no-pcap to skip)"
    return None
