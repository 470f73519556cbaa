"""An in-process cluster: one switch engine and n workers on a loopback wire, for tests and benchmarks.

`program_engine` installs what one job needs directly through the software switch's control API
(emulator.switch.SoftwareSwitch: table_add / mc_group_set), exactly the entries p4/README.md describes:
the service address, the job, the 32 index lookup tables, the multicast group and the per-worker result
destinations. No IPv4 routes are needed: workers address the service directly and results go out by
multicast or back on the ingress port. (A real deployment uses controller/ and thc-ctl instead.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from host_agent import wire
from host_agent.loopback import LoopbackWire
from host_agent.protocol import WorkerProtocol

SERVICE = wire.Endpoint("02:00:00:00:00:fe", "10.0.0.254")


def worker_endpoint(worker_id: int) -> wire.Endpoint:
    return wire.Endpoint(f"02:00:00:00:01:{worker_id:02x}", f"10.0.1.{worker_id + 1}")


def worker_port(worker_id: int) -> int:
    return worker_id + 1


@dataclass
class SimJob:
    """One job as the controller would install it (set_job's parameters)."""

    job_id: int
    n_workers: int
    table: Sequence[int]
    n_slots: int = 64
    slot_base: int = 0
    epoch: int = 1
    lane_bits: int | None = None  # None: 8 if n·g ≤ 255, else 16, as the controller chooses
    mcast_grp: int | None = None  # None: job_id + 1
    worker_ids: list[int] = field(default_factory=list)  # empty: 0 .. n_workers − 1

    def __post_init__(self):
        if not self.worker_ids:
            self.worker_ids = list(range(self.n_workers))
        if self.lane_bits is None:
            self.lane_bits = 8 if self.n_workers * max(self.table) <= 255 else 16
        if self.mcast_grp is None:
            self.mcast_grp = self.job_id + 1

    @property
    def worker_mask(self) -> int:
        return sum(1 << w for w in self.worker_ids)


def _int(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def program_engine(sw, job: SimJob, service: wire.Endpoint = SERVICE, lookup_tables: bool = True,
                   pairs: int = wire.INDEX_PAIRS) -> None:
    """Install `job` on the engine `sw`; workers are on ports worker_port(w) with worker_endpoint(w)."""
    sw.table_add("ThcIngress.job_check.service_addr", [_int(wire.ip_bytes(service.ip))],
                 "ThcIngress.job_check.serve", [])
    sw.table_add("ThcIngress.job_check.jobs", [job.job_id], "ThcIngress.job_check.set_job",
                 [job.n_workers, job.slot_base, job.n_slots, job.mcast_grp, job.worker_mask, job.lane_bits,
                  job.epoch])
    if lookup_tables:
        install_table(sw, job.table, pairs)
    sw.mc_group_set(job.mcast_grp, [(worker_port(w), w) for w in job.worker_ids])
    for w in job.worker_ids:
        ep = worker_endpoint(w)
        sw.table_add("ThcEgress.result_dst", [job.job_id, w], "ThcEgress.set_result_dst",
                     [_int(wire.mac_bytes(ep.mac)), _int(wire.ip_bytes(ep.ip))])


def install_table(sw, table: Sequence[int], pairs: int = wire.INDEX_PAIRS) -> None:
    """In every lut_i: key hi << 4 | lo → w = V[hi] << 16 | V[lo], for all hi, lo < len(table)."""
    values = [int(v) for v in table]
    for i in range(pairs):
        for hi, vh in enumerate(values):
            for lo, vl in enumerate(values):
                sw.table_add(f"ThcIngress.index_lookup.lut_{i}", [hi << 4 | lo],
                             f"ThcIngress.index_lookup.set_w_{i}", [vh << 16 | vl])


def attach_workers(engine, job: SimJob, window: int | None = None, *, loss_up: float = 0.0,
                   loss_down: float = 0.0, seed: int = 0, clock: Callable[[], float] = time.monotonic,
                   service: wire.Endpoint = SERVICE, **options) -> tuple[LoopbackWire, list[WorkerProtocol]]:
    """A loopback wire to `engine` and one WorkerProtocol per worker of `job` (window: the job's n_slots;
    `options`: WorkerProtocol's keyword arguments, e.g. timeout, deadline, pairs)."""
    lw = LoopbackWire(engine, loss_up=loss_up, loss_down=loss_down, seed=seed, clock=clock)
    protocols = [WorkerProtocol(lw.attach(worker_port(w)), wire.FrameBuilder(worker_endpoint(w), service),
                                job.job_id, w, window or job.n_slots, clock=clock, **options)
                 for w in job.worker_ids]
    return lw, protocols
