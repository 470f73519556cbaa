"""`SwitchAggregator`: the THC DDP hook's aggregator, served by the P4 switch.

The hook (thc.ddp) asks an aggregator for two things per bucket: the element-wise max of the workers'
chunk norms, and per coordinate the sum over workers of the table values of their indices together with
the number of contributors. The switch does both: NORM requests keep a running max of float32 bit
patterns; THC requests carry 4-bit indices that the switch maps to table values with the lookup tables the
controller installed, and sums. The table passed here is therefore only checked against what the switch
can do (the values must be the ones installed with `thc-ctl`); the sums come from the switch.

The FIX32 baseline (uncompressed, SwitchML-style fixed point) goes through the same program without a
table: `all_sum_int32`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from host_agent import wire
from host_agent.protocol import WorkerProtocol
from host_agent.transport import RawSocketTransport

SUM_LANE_MAX = 0xFFFF  # the switch sums in 16-bit lanes


class SwitchAggregator:
    """Aggregates through the switch for one worker of one job. Blocking; raises AggregationTimeout.

    Build it with `open(...)` on a host (a raw socket on the worker's interface), or around any
    WorkerProtocol (e.g. one on the in-process loopback wire).
    """

    def __init__(self, protocol: WorkerProtocol, n_workers: int):
        if not 1 <= n_workers <= wire.MAX_WORKERS:
            raise ValueError(f"n_workers {n_workers} is not 1..{wire.MAX_WORKERS}")
        self.protocol = protocol
        self.n_workers = n_workers
        if protocol.n_workers is None:  # results with a count above the job's n are then refused
            protocol.n_workers = n_workers

    @classmethod
    def open(
        cls,
        iface: str,
        job_id: int,
        worker_id: int,
        n_workers: int,
        service_ip: str,
        service_mac: str,
        src_ip: str,
        src_mac: str,
        window: int = 128,
        timeout: float = 0.05,
        max_timeout: float = 1.0,
        deadline: float = 30.0,
        pairs: int = wire.INDEX_PAIRS,
        min_timeout: float = 0.002,
        dupthresh: int = 3,
        coalesce: float = 0.5,
    ) -> SwitchAggregator:
        """A raw socket on `iface`, sending to the switch's service address (service_ip, service_mac: the
        MAC of the next hop towards the switch, i.e. the switch port's) from this host's (src_ip, src_mac).

        `window` must be the same on every worker and at most the job's n_slots; `timeout` is the first
        retransmission timeout, which then follows the measured round trip (never below `min_timeout`) and
        doubles per expiry up to `max_timeout`; `dupthresh` results of later requests make a missing one be
        sent again at once (0: timers only); `deadline` the time after which a missing result raises
        AggregationTimeout; `coalesce` the share of the outstanding results' expected time a blocking call
        lets them accumulate once everything is sent (WorkerProtocol.hold; 0: take each batch at once).
        `pairs`: the program's THC_PAIRS (32 for p4/build/thc.json; 16 or
        64 for the variants in p4/build/variants/).
        """
        transport = RawSocketTransport(iface, src_ip=src_ip)
        builder = wire.FrameBuilder(wire.Endpoint(src_mac, src_ip), wire.Endpoint(service_mac, service_ip))
        try:
            protocol = WorkerProtocol(
                transport,
                builder,
                job_id,
                worker_id,
                window,
                timeout=timeout,
                min_timeout=min_timeout,
                max_timeout=max_timeout,
                deadline=deadline,
                pairs=pairs,
                dupthresh=dupthresh,
                n_workers=n_workers,
                coalesce=coalesce,
            )
        except Exception:
            transport.close()
            raise
        return cls(protocol, n_workers)

    # ---- the hook's interface ----------------------------------------------------------------------

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        """Element-wise max over workers of non-negative float32 values (the chunk norms)."""
        values = t.detach().to("cpu", torch.float32).reshape(-1).numpy()
        maxima = self.protocol.all_max(values)
        return torch.from_numpy(maxima).reshape(t.shape).to(device=t.device, dtype=t.dtype)

    def all_sum_table_values(self, indices: Sequence[np.ndarray], table) -> tuple[list[np.ndarray], int]:
        """Per chunk and coordinate, Σ_workers table[index]; and the number of workers summed.

        `indices`: one uint8 array of table indices (one per coordinate) per chunk. `table`: the 2^b
        integer values (a sequence, array or an object with `.values`), as installed in the switch.
        """
        values = np.asarray(getattr(table, "values", table)).reshape(-1)
        if not 2 <= values.size <= 16:
            raise ValueError(f"the switch takes tables of 2..16 entries (b = 1..4 bits), got {values.size}")
        if values.min() < 0 or self.n_workers * int(values.max()) > SUM_LANE_MAX:
            raise ValueError(
                f"sums of {self.n_workers} × table values up to {int(values.max())} do not fit the "
                f"switch's 16-bit lanes (n·g must be ≤ {SUM_LANE_MAX})"
            )
        for chunk in indices:
            if chunk.size and int(np.max(chunk)) >= values.size:
                raise ValueError(
                    f"index {int(np.max(chunk))} is outside the table of {values.size} entries: "
                    f"the switch would drop the packet (BAD_INDEX)"
                )
        return self.protocol.all_sum_indices(indices)

    def all_sum_int32(self, values: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
        """FIX32 baseline: per chunk and coordinate the int32 sum over workers (wrapping), and the number
        of workers summed."""
        return self.protocol.all_sum_fix32(values)

    # ---- bookkeeping ------------------------------------------------------------------------------

    def stats(self) -> dict:
        return self.protocol.stats()

    def close(self) -> None:
        self.protocol.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
