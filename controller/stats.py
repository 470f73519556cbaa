"""The program's event counters: ThcIngress.thc_events, one cell per event (p4/README.md, Counters).

Aggregated packets are CONSUMED + COMPLETED; COMPLETED is also the number of results multicast.
"""

from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

from controller import contract
from controller.p4info import P4Info


@dataclass(frozen=True)
class Stats:
    events: dict[str, tuple[int, int]]  # event name -> (packets, bytes), every cell in index order

    def packets(self, event: str) -> int:
        return self.events.get(event, (0, 0))[0]

    @property
    def aggregated(self) -> int:
        return self.packets("CONSUMED") + self.packets("COMPLETED")

    @property
    def results(self) -> int:
        return self.packets("COMPLETED")

    @property
    def dropped(self) -> int:
        return sum(p for name, (p, _) in self.events.items() if name.startswith("DROP_"))

    def to_dict(self) -> dict:
        return {
            "events": {k: {"packets": p, "bytes": b} for k, (p, b) in self.events.items()},
            "aggregated": self.aggregated,
            "results_multicast": self.results,
            "dropped": self.dropped,
        }


def event_name(index: int) -> str:
    return contract.EVENTS[index] if index < len(contract.EVENTS) else f"EVENT_{index}"


def counter_read(p4info: P4Info) -> p4runtime_pb2.Entity:
    """A wildcard read of every cell of thc_events (no index: all of them)."""
    return p4runtime_pb2.Entity(
        counter_entry=p4runtime_pb2.CounterEntry(counter_id=p4info.counter(contract.THC_EVENTS).preamble.id)
    )


def decode(p4info: P4Info, entities) -> Stats:
    size = p4info.counter(contract.THC_EVENTS).size
    cells = {i: (0, 0) for i in range(size)}
    for entity in entities:
        entry = entity.counter_entry
        cells[entry.index.index] = (entry.data.packet_count, entry.data.byte_count)
    return Stats({event_name(i): cells[i] for i in sorted(cells)})
