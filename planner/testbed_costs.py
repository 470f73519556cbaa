"""The timeline model's costs for this testbed, measured on it as it runs, and the plan for a run.

Both are measured right before the runs they predict (the bench and ``thc-run --modes plan``), because a
shared 2-core machine's costs do not keep:

- the step: forward pass, when each DDP bucket is ready and the optimizer, profiled in n processes at once
  (no network), so the CPU contention of n workers is in the figures rather than assumed;
- the aggregation: thc-worker --probe rounds of THC, FIX32 and gloo at a few sizes on the running testbed
  (topologies.plan_probes), each round from the call to the decoded result, the slowest worker's.

Every testbed mode hands a bucket to one aggregation thread and returns (gloo: its own thread), so each is a
non-blocking Mode whose whole round is its communication, interpolated between the probed sizes."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import statistics
from pathlib import Path

import planner
from planner import models_zoo
from planner.timeline import Bucket, MeasuredCost, Mode, StepProfile, simulate
from thc.modes import FIX32, GLOO, PROBED_PLAN_MODES, THC

__all__ = [
    "PROBED_MODES",
    "PIPELINED_MODES",
    "MIX_MARGIN",
    "UPPER_QUANTILE",
    "MIXABLE",
    "local_step",
    "probe_modes",
    "median_step_s",
    "scaled_mode",
    "contention",
    "choose",
    "upper_step_s",
    "write_plan",
]

PROBED_MODES = PROBED_PLAN_MODES  # what a plan chooses from on the testbed (fp16: not probed)
# Modes whose next round's early part the model overlaps with this round's sums. ddp.aggregator_hooks's THC
# hook does send the next bucket's norm round while this bucket's sums are out, but on the testbed that buys no
# time: 4 workers and the switch on 2 cores, the norm round waits for CPU the sums already use. The pipelined
# model under-predicted every THC case on a quiet machine, the serial one did not (docs/results.md, History,
# "Validation of the timeline model"); so every mode's rounds run one after another here, as FIX32's hook runs
# them.
PIPELINED_MODES: tuple[str, ...] = ()
# the probe phases of a round before its sums go out: the early part is preparation and the norm round
EARLY_PHASES, BEFORE_SUMS = ("prepare_ms", "norm_ms"), ("prepare_ms", "norm_ms", "encode_ms")


def _profile_one(args) -> dict:
    """One process's step profile of ``model`` (runs in a child: torch with one thread, as a worker)."""
    model_name, cap_kb, repeats, batch = args
    import torch

    from host_agent import workloads
    from planner import profiling

    torch.set_num_threads(1)
    w = workloads.get(model_name)
    data = w.load()
    batch = batch or w.batch_size
    cap = models_zoo.DDP_BUCKET_BYTES if cap_kb is None else int(cap_kb * 1024)
    first = models_zoo.DDP_FIRST_BUCKET_BYTES if cap_kb is None else cap
    s = profiling.measure_step(
        w.build(0), data.x_train[:batch], data.y_train[:batch], bucket_bytes=cap,
        first_bucket_bytes=first, repeats=repeats, lr=w.lr,
    )  # fmt: skip
    return {
        "forward_s": s.forward_s,
        "backward_s": s.backward_s,
        "optimizer_s": s.optimizer_s,
        "buckets": [(b.index, b.numel, b.ready_s) for b in s.buckets],
        "ddp_step_s": _ddp_step(w, data, batch, cap, first, repeats),
    }


def _ddp_step(w, data, batch: int, cap: int, first: int, repeats: int) -> float:
    """The median step of the model under DDP (a world of one) whose hook hands each bucket to an
    aggregation thread that returns it at once: the step's compute plus what DDP and the hand-over to the
    thread cost, which a plain step does not have."""
    import time

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp.aggregator_hooks import SerialRunner
    from host_agent import train

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = DDP(w.build(0), bucket_cap_mb=cap / 2**20)
        runner = SerialRunner("null-aggregation")

        def null_hook(_state, bucket):  # the thc and fix32 hooks' shape: the bucket goes to the thread
            buffer = bucket.buffer()
            return runner.submit(lambda: buffer)

        ddp.register_comm_hook(None, null_hook)
        opt = train.make_optimizer(ddp.parameters(), train.config_for(w, steps=1))
        x, y = data.x_train[:batch], data.y_train[:batch]
        times = []
        for k in range(repeats + 3):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            train.loss_of(ddp, x, y).backward()
            opt.step()
            if k >= 3:
                times.append(time.perf_counter() - t0)
        runner.close()
        return statistics.median(times)
    finally:
        dist.destroy_process_group()


def local_step(
    model_name: str, bucket_cap_kb: float | None, workers: int, repeats: int = 40, batch_size: int | None = None
) -> StepProfile:
    """``model_name``'s step profiled in ``workers`` processes at once (the median process per figure)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        runs = pool.map(_profile_one, [(model_name, bucket_cap_kb, repeats, batch_size)] * workers)
    med = lambda key: statistics.median(r[key] for r in runs)
    buckets = tuple(
        Bucket(index, numel, statistics.median(r["buckets"][k][2] for r in runs))
        for k, (index, numel, _) in enumerate(runs[0]["buckets"])
    )
    # what DDP and the hand-over to the aggregation thread add to a step: at its end (the reducer's
    # finalisation waits for the last bucket's future)
    overhead = max(0.0, med("ddp_step_s") - med("forward_s") - med("backward_s") - med("optimizer_s"))
    return StepProfile(buckets, med("forward_s"), med("backward_s"), med("optimizer_s") + overhead, name=model_name)


def median_step_s(results: list[dict], warmup: int = 5) -> float:
    """A training run's step: per step the mean over ranks (they run in lockstep), the median after
    ``warmup`` steps."""
    per_step = list(zip(*[[s["step_time"] for s in r.get("steps", [])] for r in results]))
    per_step = per_step[warmup:] or per_step
    return statistics.median(statistics.mean(x) for x in per_step) if per_step else float("nan")


def probe_modes(
    probes: list[dict], names=PROBED_MODES, quantile: float | None = None, pipelined: tuple = PIPELINED_MODES
) -> dict[str, Mode]:
    """Non-blocking modes whose communication is the probed round time at each size (module docstring): the
    median round, or the ``quantile`` (0-1) of the probe's rounds. A ``pipelined`` mode whose probes timed
    their phases gets its early part and when its sums go out from them (timeline.Mode)."""
    out = {}
    for name in names:
        mine = [p for p in probes if p["mode"] == name]
        if not mine:
            raise ValueError(f"no probe of mode {name!r}: probe it first (topologies.plan_probes.probe)")
        points = tuple((p["size"], _round_s(p, quantile)) for p in mine)
        pipeline = {}
        if name in pipelined and all(set(BEFORE_SUMS) <= set(p.get("phases_ms", {})) for p in mine):
            ms = lambda p, keys: sum(p["phases_ms"][k] for k in keys) / 1e3
            part = lambda keys: MeasuredCost(tuple((p["size"], ms(p, keys)) for p in mine))
            pipeline = {"early": part(EARLY_PHASES), "sums_at": part(BEFORE_SUMS)}
        out[name] = Mode(name, MeasuredCost(points), label=f"{name} (measured on the testbed)", **pipeline)
    return out


def _round_s(probe: dict, quantile: float | None) -> float:
    rounds = sorted(probe.get("rounds_s") or ())
    if quantile is None or len(rounds) < 2:
        return probe["seconds"]
    return statistics.quantiles(rounds, n=100, method="inclusive")[min(98, max(0, round(quantile * 100) - 1))]


def scaled_mode(mode: Mode, factor: float) -> Mode:
    """``mode`` with its measured round times (and their parts) multiplied by ``factor``."""
    scale = lambda cost: None if cost is None else MeasuredCost(tuple((n, t * factor) for n, t in cost.points))
    return dataclasses.replace(mode, comm=scale(mode.comm), early=scale(mode.early), sums_at=scale(mode.sums_at))


def contention(step: StepProfile, mode: Mode, measured_s: float, low: float = 0.25, high: float = 8.0) -> float:
    """How much longer ``mode``'s rounds take inside training than in probes: the factor on its probed
    round times under which the model predicts ``measured_s``, a step measured in training on this
    testbed (bisection; the prediction grows with the factor). Probes run one thread per worker; in
    training each worker's compute thread, its aggregation thread, the switch and the other workers share
    the cores, and every round's norm and sum wait for the slowest of them."""
    predict = lambda f: planner.uniform(step, {mode.name: scaled_mode(mode, f)}, mode.name).iteration_s
    if predict(low) >= measured_s:
        return low
    if predict(high) <= measured_s:
        return high
    for _ in range(40):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if predict(mid) < measured_s else (low, mid)
    return (low * high) ** 0.5


MIX_MARGIN = 0.05  # a mix must promise this much over the best uniform mode: the model's median error
UPPER_QUANTILE = 0.75  # the probes' rounds a mix must still win with (choose's ``upper``)


# Modes one plan may mix. THC and FIX32 buckets in one step are not among them: plans that mixed them ran from
# far faster to far slower than the best uniform mode, which the probes of each op alone cannot see
# (docs/results.md, History); kept out until that is understood.
MIXABLE = ((THC, GLOO), (FIX32, GLOO))


def choose(
    step: StepProfile, modes: dict[str, Mode], margin: float = MIX_MARGIN, upper: dict[str, Mode] | None = None
) -> planner.Plan:
    """The best plan over each MIXABLE set of ``modes``, unless the best uniform mode is predicted within
    ``margin`` of it: then that mode for every bucket (a predicted gain below the model's error is none).
    ``upper``: the same modes with each probe's upper-quartile round (probe_modes(quantile=UPPER_QUANTILE),
    scaled as ``modes`` are); a mix must then win by ``margin`` even with its own modes' rounds there,
    against the uniform mode's median: on a loaded machine the probes spread and the planner stays uniform
    unless a mix gains more than that spread (two runs of one configuration then differ by more than the margin)."""
    mixes = [planner.best_plan(step, {m: modes[m] for m in group}) for group in MIXABLE if set(group) <= set(modes)]
    uniform = min((planner.uniform(step, modes, m) for m in modes), key=lambda p: p.iteration_s)
    best = min(mixes, key=lambda p: p.iteration_s, default=uniform)
    searched = sum(p.search_s for p in mixes), sum(p.evaluations for p in mixes)
    bar = (1 - margin) * uniform.iteration_s
    if best.iteration_s > bar or (upper is not None and upper_step_s(step, best, upper) > bar):
        best = uniform
    best.search_s, best.evaluations = searched
    return best


def upper_step_s(step: StepProfile, plan: planner.Plan, upper: dict[str, Mode]) -> float:
    """``plan``'s predicted step with its modes' rounds at the probes' upper quartile."""
    return simulate(step, {i: upper[m] for i, m in plan.modes.items()}).iteration_s


def write_plan(plan: planner.Plan, path: Path, **extra) -> Path:
    """The plan as thc-worker --mode plan --plan FILE reads it (ddp.mixed.load_plan)."""
    path.write_text(
        json.dumps(
            {
                "buckets": {str(k): v for k, v in sorted(plan.modes.items())},
                "predicted_ms": plan.iteration_s * 1e3,
                **extra,
            },
            indent=1,
        )
    )
    return path
