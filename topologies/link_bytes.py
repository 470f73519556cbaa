"""Bytes on every link of a run, counted at the switches' ends of the links.

A worker's own interface counters (its record's `wire_training`) say nothing of a host that runs no worker,
such as a dedicated parameter server, and it is a server's link that bounds a parameter server. Every link
of a topology ends at a switch port, whose interface lives in the root namespace, so its kernel counters
see every link in both directions: rx is what the neighbour sent, tx what it received. The busiest link
per step is the figure each aggregation mode's own bound follows (the README's link-bytes bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controller.topology import Topology


@dataclass(frozen=True)
class Busiest:
    link: str  # "p1-s1": the neighbour and the switch
    direction: str  # "to p1" or "from p1"
    bytes_per_step: float


def snapshot(topo: Topology, root: Path = Path("/sys/class/net")) -> dict[tuple[str, str], tuple[int, int]]:
    """(switch, neighbour) -> (bytes the switch received on that port, bytes it sent), now."""
    counts = {}
    for switch in topo.switches:
        for port, neighbour in topo.neighbors(switch):
            stats = root / topo.switches[switch].interface(port) / "statistics"
            counts[(switch, neighbour)] = (int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text()))
    return counts


def busiest(before: dict, after: dict, steps: int) -> Busiest | None:
    """The link and direction that carried the most bytes between two snapshots, per step."""
    best = None
    for (switch, neighbour), (rx, tx) in after.items():
        rx0, tx0 = before.get((switch, neighbour), (rx, tx))
        for moved, direction in ((rx - rx0, f"from {neighbour}"), (tx - tx0, f"to {neighbour}")):
            if best is None or moved > best[0]:
                best = (moved, f"{neighbour}-{switch}", direction)
    if best is None or steps < 1:
        return None
    return Busiest(best[1], best[2], best[0] / steps)
