"""`--bw auto`: a link rate that makes the run bandwidth-bound on this machine, chosen from a measurement.

On a GPU cluster communication is most of a data-parallel step, which is where gradient compression pays.
Two CPU cores running four workers and a switch compute far slower and move far less, so unconstrained links
leave every mode latency- and CPU-bound. The runner slows the links until plain DDP's ring all-reduce spends
``share`` of its step communicating, from this machine's own compute time per step:

    compute wall per step  = one worker's forward+backward+update x workers / cores (they share the cores)
    gloo bytes per step    = 2 (n - 1) / n x 4 bytes x parameters x TCP/IP framing, per worker and direction
    rate                   = gloo bytes x 8 / (compute wall x share / (1 - share)), rounded down, then raised
                             if need be until gloo's communication fits ``budget_s`` (a busy machine's slow
                             step would otherwise pick slow links and stretch the run)"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

DEFAULT_SHARE = 0.95  # gloo's communication share of its step that --bw auto aims at (the floor: 0.6). THC's
# codec runs on the same 2 cores as the model here, not as GPU kernels: at a lower share it, not the links, bounds THC
DEFAULT_BUDGET_S = 45.0  # at most this much of gloo's training time communicating (make run: <= 3 minutes)
TCP_FRAMING = 1514 / 1448  # an Ethernet frame per 1448-byte TCP segment (timestamps on): 14 + 20 + 32 bytes
MIN_MBIT, MAX_MBIT = 1, 1000  # the rates the runner accepts (htb on a veth)


@dataclass(frozen=True)
class LinkChoice:
    mbit: float
    compute_ms: float  # one worker's step without communication, measured here
    compute_wall_ms: float  # the same with all workers sharing the cores
    gloo_bytes: float  # per worker and direction per step
    gloo_comm_ms: float  # at mbit
    share: float  # gloo's expected communication share at mbit
    raised_for_budget: bool = False  # the share's rate would have exceeded the time budget

    def describe(self, workers: int, cores: int) -> str:
        text = (
            f"links {self.mbit:g} Mbit/s (--bw auto): gloo's all-reduce moves {self.gloo_bytes / 1e3:,.0f} KB per "
            f"worker per step, {self.gloo_comm_ms:.0f} ms at that rate, against {self.compute_wall_ms:.1f} ms of "
            f"compute per step here ({self.compute_ms:.1f} ms per worker, {workers} workers on {cores} cores): "
            f"communication ~{self.share:.0%} of gloo's step"
        )
        if self.raised_for_budget:
            text += " (raised from a slower rate so that the run keeps to its time budget)"
        return text


def gloo_bytes_per_step(parameters: int, workers: int) -> float:
    """Bytes each worker sends (and receives) per step in a ring all-reduce of fp32 gradients."""
    if workers < 2:
        return 0.0
    return 2 * (workers - 1) / workers * 4 * parameters * TCP_FRAMING


def choose(
    parameters: int,
    workers: int,
    compute_ms: float,
    cores: int,
    share: float = DEFAULT_SHARE,
    steps: int | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
) -> LinkChoice:
    """The rate (whole Mbit/s, rounded down) at which gloo's communication is ``share`` of its step; with
    ``steps``, at least the rate (rounded up) at which that communication takes ``budget_s`` in all."""
    if not 0 < share < 1:
        raise ValueError(f"share {share}: must be in (0, 1)")
    wall = compute_ms * max(1.0, workers / cores)
    data = gloo_bytes_per_step(parameters, workers)
    raised = False
    if data == 0:
        mbit = float(MAX_MBIT)
    else:
        comm_ms = wall * share / (1 - share)
        mbit = float(min(MAX_MBIT, max(MIN_MBIT, int(data * 8 / (comm_ms * 1e3)))))
        if steps:
            fits = float(min(MAX_MBIT, math.ceil(data * 8 * steps / (budget_s * 1e6))))
            raised = fits > mbit
            mbit = max(mbit, fits)
    comm = data * 8 / (mbit * 1e3)
    return LinkChoice(mbit, compute_ms, wall, data, comm, comm / (comm + wall) if comm + wall else 0.0, raised)


def measure_compute_ms(model_name: str, batch_size: int | None = None, steps: int = 12, warmup: int = 3) -> float:
    """Median wall time of one training step of ``model_name`` without communication, one thread (as
    each worker runs), on this machine now."""
    import torch

    from host_agent import train, workloads

    workload = workloads.get(model_name)
    config = train.config_for(workload, steps=steps + warmup, batch_size=batch_size)
    data = workload.load()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = workload.build(config.seed)
        optimizer = train.make_optimizer(model.parameters(), config)
        times = []
        for _, step, idx in train.batches(len(data.x_train), config.batch_size, 0, 1, config.seed, config.steps):
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            train.loss_of(model, data.x_train[idx], data.y_train[idx]).backward()
            optimizer.step()
            if step >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return 1e3 * statistics.median(times)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def measured_share(gloo_step_ms: float, gloo_aggregation_ms: float) -> float:
    """gloo's communication share of its step in a finished run (its hook-timed aggregation per step)."""
    return gloo_aggregation_ms / gloo_step_ms if gloo_step_ms > 0 else 0.0
