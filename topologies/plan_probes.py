"""The planner's measurements that need the running testbed: thc-worker --probe rounds of each mode, and
``thc-run --modes plan``'s plan for a run from its own step profile and probes.

The maths (probed rounds into timeline modes, contention factors, the choice between a mix and a uniform
mode) is planner.testbed_costs; this module drives the testbed for it, here because topologies imports the
planner and the planner imports nothing of topologies.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import planner
from contract.job import JobSpec
from planner.testbed_costs import (
    PROBED_MODES,
    UPPER_QUANTILE,
    choose,
    contention,
    local_step,
    probe_modes,
    scaled_mode,
    write_plan,
)
from topologies.workers import WorkerOptions

__all__ = ["probe", "plan_for_run"]


def probe(bed, mode: str, size: int, rounds: int, job_id: int, port: int) -> dict:
    """thc-worker --probe rounds of ``mode`` at ``size`` coordinates on the running testbed: the median over
    rounds of the workers' mean round time (as a training step is timed: per rank, then the mean over ranks;
    round 0 is a warm-up) and, for the switch modes, its phases' medians."""
    probes = bed.run_workers(
        WorkerOptions(
            mode=mode,
            steps=0,
            spec=JobSpec(job_id=job_id, workers=len(bed.topo.workers)),
            probe_rounds=rounds,
            probe_size=size,
            master_port=port,
            switch_timeout=60,
        ),
        stall_timeout=300,
    )
    per_round = [statistics.mean(float(p[f"r{k}_seconds"]) for p in probes) for k in range(1, rounds)]
    phases = {}
    timed = [k for k in range(1, rounds) if f"r{k}_phases" in probes[0].files]
    for k in timed:
        for p in probes:
            for key, value in json.loads(str(p[f"r{k}_phases"])).items():
                phases.setdefault(key, []).append(value)
    return {
        "mode": mode,
        "size": size,
        "seconds": statistics.median(per_round),
        "rounds_s": per_round,
        "phases_ms": {k: statistics.median(v) for k, v in phases.items() if k.endswith("_ms")},
    }


def plan_for_run(
    bed, model: str, batch_size: int | None, job_id: int, path: Path, measured_s: dict[str, float], say=print
):
    """``thc-run --modes plan``: the plan for this run's model, workers and link rate, from its step
    profiled now and probes of every mode at exactly its buckets' sizes on the running testbed, written to
    ``path`` for the workers. ``measured_s``: the median step of the uniform modes this run already trained
    (mode -> seconds); those modes' contention factors come from them and the plan chooses among them (none
    ran yet: among every probed mode, as probed). Returns the plan and each mode's predicted step (ms)."""
    n = len(bed.topo.workers)
    say(f"plan: profiling {model}'s step in {n} processes at once")
    step = local_step(model, None, n, batch_size=batch_size)
    sizes = sorted({b.numel for b in step.buckets})
    probes = []
    for k, (mode, size) in enumerate((m, s) for m in PROBED_MODES for s in sizes):
        probes.append(probe(bed, mode, size, 8, job_id, 29650 + k))
        say(f"plan: probe {mode} at {size:,} coordinates: {probes[-1]['seconds'] * 1e3:.2f} ms a round")
    raw = probe_modes(probes)
    ran = {m: t for m, t in measured_s.items() if m in raw}
    factors = {m: contention(step, raw[m], t) for m, t in ran.items()}
    modes = {m: scaled_mode(raw[m], f) for m, f in factors.items()} or raw
    upper = probe_modes(probes, quantile=UPPER_QUANTILE)
    plan = choose(step, modes, upper={m: scaled_mode(upper[m], factors.get(m, 1.0)) for m in modes})
    uniform = {m: planner.uniform(step, modes, m).iteration_s * 1e3 for m in modes}
    write_plan(plan, path, predicted_uniform_ms=uniform, contention=factors, probes=probes)
    say(
        f"plan: {', '.join(f'bucket {i} {m}' for i, m in sorted(plan.modes.items()))}; predicted "
        f"{plan.iteration_s * 1e3:.1f} ms a step (uniform: "
        + ", ".join(f"{m} {t:.1f}" for m, t in uniform.items())
        + ("; contention " + ", ".join(f"{m} x{f:.2f}" for m, f in factors.items()) if factors else "")
        + f"); searched in {plan.search_s * 1e3:.1f} ms; {path}"
    )
    return plan, uniform
