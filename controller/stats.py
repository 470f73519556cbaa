"""The program's event counters (p4/README.md, Counters): ThcIngress.thc_events, one cell per event, and
ThcIngress.thc_job_events, the same events per job id (cell job_id · 32 + event).

Aggregated packets are CONSUMED + COMPLETED; results multicast are COMPLETED + RELEASED.
"""

from dataclasses import dataclass, field

from p4.v1 import p4runtime_pb2

import contract
from controller.p4info import P4Info

Cells = dict[str, tuple[int, int]]  # event name -> (packets, bytes)


def _packets(events: Cells, event: str) -> int:
    return events.get(event, (0, 0))[0]


@dataclass(frozen=True)
class JobStats:
    """One job's events, from thc_job_events."""

    job_id: int
    events: Cells  # every event of the contract, in index order

    def packets(self, event: str) -> int:
        return _packets(self.events, event)

    def to_dict(self) -> dict:
        return {k: {"packets": p, "bytes": b} for k, (p, b) in self.events.items()}


@dataclass(frozen=True)
class Stats:
    events: Cells  # every cell of thc_events in index order
    jobs: dict[int, JobStats] = field(default_factory=dict)  # per job id, for the jobs that were asked for

    def packets(self, event: str) -> int:
        return _packets(self.events, event)

    @property
    def aggregated(self) -> int:
        return self.packets("CONSUMED") + self.packets("COMPLETED")

    @property
    def results(self) -> int:
        return self.packets("COMPLETED") + self.packets("RELEASED")

    @property
    def dropped(self) -> int:
        return sum(p for name, (p, _) in self.events.items() if name.startswith("DROP_"))

    def to_dict(self) -> dict:
        return {
            "events": {k: {"packets": p, "bytes": b} for k, (p, b) in self.events.items()},
            "aggregated": self.aggregated,
            "results_multicast": self.results,
            "dropped": self.dropped,
            "jobs": {str(j): s.to_dict() for j, s in sorted(self.jobs.items())},
        }


def event_name(index: int) -> str:
    return contract.EVENTS[index] if index < len(contract.EVENTS) else f"EVENT_{index}"


def counter_read(p4info: P4Info) -> p4runtime_pb2.Entity:
    """A wildcard read of every cell of thc_events (no index: all of them)."""
    return p4runtime_pb2.Entity(
        counter_entry=p4runtime_pb2.CounterEntry(counter_id=p4info.counter(contract.THC_EVENTS).preamble.id)
    )


def job_counter_reads(p4info: P4Info, job_ids) -> list[p4runtime_pb2.Entity]:
    """One read per event cell of each job in `job_ids` (not the whole 8192-cell counter)."""
    counter_id = p4info.counter(contract.THC_JOB_EVENTS).preamble.id
    return [
        p4runtime_pb2.Entity(
            counter_entry=p4runtime_pb2.CounterEntry(
                counter_id=counter_id, index=p4runtime_pb2.Index(index=contract.job_event_cell(job, event))
            )
        )
        for job in job_ids
        for event in contract.EVENTS
    ]


def decode(p4info: P4Info, entities) -> Stats:
    """Stats from the entities read with counter_read and job_counter_reads (in any order)."""
    events_id = p4info.counter(contract.THC_EVENTS).preamble.id
    size = p4info.counter(contract.THC_EVENTS).size
    cells = {i: (0, 0) for i in range(size)}
    per_job: dict[int, dict[int, tuple[int, int]]] = {}
    for entity in entities:
        entry = entity.counter_entry
        data = (entry.data.packet_count, entry.data.byte_count)
        if entry.counter_id == events_id:
            cells[entry.index.index] = data
        else:
            job, event = divmod(entry.index.index, contract.EVENT_CELLS)
            per_job.setdefault(job, {})[event] = data
    jobs = {
        job: JobStats(job, {name: got.get(i, (0, 0)) for i, name in enumerate(contract.EVENTS)})
        for job, got in per_job.items()
    }
    return Stats({event_name(i): cells[i] for i in sorted(cells)}, jobs)
