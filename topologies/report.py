"""The end of a run: one summary row per training mode, a table on the console, JSON and plots in logs/.

Figures come from the workers' own records (host_agent/worker.py): test accuracy per epoch on rank 0,
time per step, the time each DDP bucket's aggregation took, and the bytes the worker's interface actually
sent and received during training (/proc/net/dev inside its namespace, so headers, retransmissions and
gloo's TCP are all counted). Switch figures are counter deltas over the mode; the busiest link is counted
at the switches' ends of every link (topologies/link_bytes.py), so a parameter server's link counts too.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from thc.modes import FIX32, GLOO, PS_MODES, REGISTRY, THC, uses_job

MODE_LABELS = {m.name: m.label for m in REGISTRY.values() if m.label}


def label(mode: str) -> str:
    """A mode's name in tables and plots; a ps mode's with its placement: "THC via PS (colocated4)"."""
    base, _, placement = mode.partition(":")
    return MODE_LABELS.get(base, base) + (f" ({placement})" if placement else "")


def via_job(mode: str) -> bool:
    """A mode that aggregates in a THC job, whose workers count retransmissions (switch or servers)."""
    return uses_job(mode.partition(":")[0])


@dataclass
class ModeSummary:
    mode: str
    workers: int
    steps: int
    parameters: int
    final_acc: float
    target_acc: float
    time_to_target_s: float | None  # training seconds until the first epoch at >= target_acc
    train_s: float
    step_ms: float  # mean wall time of one optimizer step (all workers)
    aggregation_ms: float  # mean time to aggregate one step's gradients
    goodput_coords_s: float  # parameters aggregated per second of aggregation
    sent_bytes_per_step: float  # per worker, on its interface, during training
    received_bytes_per_step: float
    retransmissions: int  # requests the workers sent again (switch modes)
    switch_events: dict  # aggregating switch: event -> packets during the mode
    timer_retransmissions: int = 0  # of those: sent again because the request's timer expired
    fast_retransmissions: int = 0  # sent again because results of later requests showed it lost
    probe_retransmissions: int = 0  # sent again because no result came for the gap timeout
    rejected_results: int = 0  # results that did not fit their request (op, count, lane width)
    requests: int = 0  # first transmissions, all workers
    metric: str = "accuracy"  # the model's target metric: "accuracy" or "bpc" (validation bits per character)
    final_metric: float | None = None  # its last evaluation
    target: float | None = None  # the time to target's threshold on that metric
    steps_to_target: int | None = None  # the optimizer steps done by the evaluation that reached it
    failures: list = field(default_factory=list)  # workers that died and the recovery (topologies/failover.py)
    events_by_switch: dict = field(default_factory=dict)  # every switch: event -> packets (two levels: leaves too)
    busiest_link: str = ""  # the link and direction that carried the most bytes, e.g. "p1-s1 from p1"
    busiest_link_bytes_per_step: float | None = None  # its bytes per step (None: not counted)


def summarize(
    mode: str,
    results: list[dict],
    target_acc: float,
    switch_events: dict | None = None,
    failures: list | None = None,
    events_by_switch: dict | None = None,
    busiest=None,
) -> ModeSummary:
    """The mode's row from the workers' records (after a failure: the survivors'); `busiest`: the run's
    link_bytes.Busiest, when counted."""
    rank0 = min(results, key=lambda r: r["rank"])
    steps = rank0["config"]["steps"]
    metric = rank0.get("metric", "accuracy")
    if metric == "accuracy":  # --target-acc applies
        target = target_acc
        hit = next((e for e in rank0["epochs"] if e["test_acc"] >= target), None)
    else:  # lower is better: the model's own target (thc-worker records it)
        target = rank0["target"]
        hit = next((e for e in rank0["epochs"] if e["metric"] <= target), None)
    reached = None if hit is None else hit["t"]
    step_times = [s["step_time"] for r in results for s in r["steps"]]
    aggregation = [sum(r["aggregation_s"]) / max(len(r["steps"]), 1) for r in results]
    aggregation_s = statistics.mean(aggregation)
    stats = [r.get("aggregator") or {} for r in results]
    retx = sum(s.get("retransmissions", 0) for s in stats)
    return ModeSummary(
        mode=mode,
        workers=len(results),
        steps=steps,
        parameters=rank0["parameters"],
        final_acc=rank0["final_test_acc"],
        target_acc=target_acc,
        time_to_target_s=reached,
        train_s=max(r["train_s"] for r in results),
        step_ms=1e3 * statistics.mean(step_times),
        aggregation_ms=1e3 * aggregation_s,
        goodput_coords_s=rank0["parameters"] / aggregation_s if aggregation_s > 0 else 0.0,
        sent_bytes_per_step=statistics.mean(r["wire_training"]["tx_bytes"] / steps for r in results),
        received_bytes_per_step=statistics.mean(r["wire_training"]["rx_bytes"] / steps for r in results),
        retransmissions=retx,
        switch_events=switch_events or {},
        events_by_switch=events_by_switch or {},
        timer_retransmissions=sum(s.get("timer_retransmissions", 0) for s in stats),
        fast_retransmissions=sum(s.get("fast_retransmissions", 0) for s in stats),
        probe_retransmissions=sum(s.get("probe_retransmissions", 0) for s in stats),
        requests=sum(s.get("requests", 0) for s in stats),
        rejected_results=sum(s.get("rejected_results", 0) for s in stats),
        metric=metric,
        final_metric=rank0.get("final_metric", rank0["final_test_acc"]),
        target=target,
        steps_to_target=None if hit is None else hit["step"],
        failures=list(failures or []),
        busiest_link="" if busiest is None else f"{busiest.link} {busiest.direction}",
        busiest_link_bytes_per_step=None if busiest is None else busiest.bytes_per_step,
    )


def table(rows: list[ModeSummary]) -> str:
    """The console summary, one line per mode."""
    if not rows:
        return "(no mode finished)"
    bpc = rows[0].metric == "bpc"
    target = rows[0].target if rows[0].target is not None else rows[0].target_acc
    header = [
        "mode",
        "final bpc" if bpc else "final acc",
        f"time to {target:g} bpc" if bpc else f"time to {target:.0%}",
        "train s",
        "step ms",
        "aggr ms/step",
        "coords/s",
        "sent B/step",
        "recv B/step",
        "busiest link B/step",
        "retx timer/fast/probe",
    ]
    lines = []
    for r in rows:
        lines.append(
            [
                label(r.mode) + (f" [{r.workers} left]" if worker_failures(r) else ""),
                f"{r.final_metric:.3f}" if bpc else f"{r.final_acc:.3f}",
                "-" if r.time_to_target_s is None else f"{r.time_to_target_s:.1f} s",
                f"{r.train_s:.1f}",
                f"{r.step_ms:.1f}",
                f"{r.aggregation_ms:.1f}",
                f"{r.goodput_coords_s:,.0f}",
                f"{r.sent_bytes_per_step:,.0f}",
                f"{r.received_bytes_per_step:,.0f}",
                "-" if r.busiest_link_bytes_per_step is None else f"{r.busiest_link_bytes_per_step:,.0f}",
                retx_split(r) if via_job(r.mode) else "-",
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    rule = "-" * len(fmt(header))
    return "\n".join([fmt(header), rule] + [fmt(row) for row in lines])


def worker_failures(r: ModeSummary) -> list[dict]:
    """The mode's worker failures (not its switch restarts)."""
    return [f for f in r.failures if f.get("kind") != "switch_restart"]


def restart_line(mode: str, f: dict) -> str:
    """A switch restart: how long the switch, its program, the job and the workers took (the pause)."""
    if f["recovered_s"] is not None:
        resumed = f"every worker moved in step {f['resumed_step']}: a pause of {f['recovered_s']:.2f} s"
    elif f["readmitted_s"] is None and f.get("resumed_s") is not None:  # a mode without a job: gloo, ps
        resumed = (
            f"training went on: every worker past step {f['resumed_past_step']} {f['resumed_s']:.2f} s after the kill"
        )
    else:
        resumed = "not every worker moved to the re-added job"
    job = (
        f", job {f['job_id']} re-added (epoch {f['epoch']}) at {f['readmitted_s']:.2f} s"
        if f["readmitted_s"] is not None
        else ""
    )
    return (
        f"{label(mode)}: switch {f['switch']} killed after step {f['step']} and restarted; answering "
        f"{f['answering_s']:.2f} s after the kill, programmed at {f['reprogrammed_s']:.2f} s{job}; {resumed}"
    )


def failure_line(mode: str, f: dict) -> str:
    """A worker failure (who, after which step, how the survivors recovered) or a switch restart, as the
    summary's `failures` record it; the console and docs/results.md (bench/results.py) print this line."""
    if f.get("kind") == "switch_restart":
        return restart_line(mode, f)
    how = "killed by an injected failure" if f["injected"] else "died"
    recovered = (
        f"all moved in step {f['survivors_step']}, {f['recovered_s']:.2f} s after the failure"
        if f["recovered_s"] is not None
        else "not all survivors moved"
    )
    return (
        f"{label(mode)}: worker {f['host']} (rank {f['rank']}) {how} ({f['signal']}) "
        f"after step {f['step']}; survivors re-admitted as job {f['job_id']} (epoch {f['epoch']}, "
        f"{f['workers']} workers) {f['readmitted_s']:.2f} s after it, {recovered}"
    )


def failure_lines(rows: list[ModeSummary]) -> list[str]:
    """One line per worker failure and per switch restart of every mode."""
    return [failure_line(r.mode, f) for r in rows for f in r.failures]


def retx_split(r: ModeSummary) -> str:
    return f"{r.timer_retransmissions}/{r.fast_retransmissions}/{r.probe_retransmissions}"


def loss_lines(rows: list[ModeSummary], loss_pct: float | None, lossless: dict[str, float] | None = None) -> str:
    """One line per switch mode: step time at this loss (next to the lossless step time when known) and how
    lost packets were recovered: timer expiries vs fast retransmissions (later results showed the loss) vs
    gap-timer probes (the tail of an operation)."""
    lines = []
    for r in rows:
        if not via_job(r.mode):
            continue
        base = (lossless or {}).get(r.mode)
        versus = f" vs {base:.1f} ms lossless ({r.step_ms / base:.2f}x)" if base else ""
        per = r.retransmissions / r.requests if r.requests else 0.0
        lines.append(
            f"{label(r.mode)} at {loss_pct or 0:g}% loss: step {r.step_ms:.1f} ms{versus}; "
            f"retransmissions {r.retransmissions} ({per:.1%} of {r.requests} requests): "
            f"timer {r.timer_retransmissions}, fast {r.fast_retransmissions}, probe {r.probe_retransmissions}"
            + (f"; {r.rejected_results} results rejected" if r.rejected_results else "")
        )
    return "\n".join(lines)


def speedups(rows: list[ModeSummary]) -> dict[str, dict]:
    """mode -> {"speedup_vs_gloo", "speedup_vs_fix32", "speedup_vs_thc"}: the other mode's time to target
    over this one's (None when either mode did not run or did not reach the target); and
    {"bytes_allow_vs_gloo", ...}: the speed-up the bytes on the busiest direction of a worker's link alone
    would allow."""
    by_mode = {r.mode: r for r in rows}
    out = {}
    for r in rows:
        out[r.mode] = {}
        for base in (GLOO, FIX32, THC):
            other = by_mode.get(base)
            ok = other is not None and other.time_to_target_s is not None and r.time_to_target_s
            out[r.mode][f"speedup_vs_{base}"] = other.time_to_target_s / r.time_to_target_s if ok else None
            out[r.mode][f"bytes_allow_vs_{base}"] = bytes_ratio(other, r) if other is not None else None
    return out


def verdict_lines(rows: list[ModeSummary]) -> list[str]:
    """Under the table: how bandwidth-bound gloo was, THC's time to target against FIX32's and gloo's with
    the final metrics side by side, and in-network aggregation against each ps mode."""
    return _thc_lines(rows) + ps_lines(rows)


def ps_lines(rows: list[ModeSummary]) -> list[str]:
    """One line per ps mode: its time to target against the same codec summed in the switch, and both
    modes' busiest links per step (the bound a server's link sets)."""
    by_mode = {r.mode: r for r in rows}
    lines = []
    for r in rows:
        codec = PS_MODES.get(r.mode.partition(":")[0])
        switch = by_mode.get(codec)
        if codec is None:
            continue
        target = _target_text(r)
        reached = f"reached {target} in {r.time_to_target_s:.1f} s" if r.time_to_target_s else f"missed {target}"
        line = f"{label(r.mode)} {reached} (final {_metric_text(r)})"
        if switch is not None and switch.time_to_target_s and r.time_to_target_s:
            line += f"; {label(codec)} was {r.time_to_target_s / switch.time_to_target_s:.2f}x sooner"
        if r.busiest_link_bytes_per_step and switch is not None and switch.busiest_link_bytes_per_step:
            line += (
                f"; busiest link {r.busiest_link_bytes_per_step:,.0f} B/step ({r.busiest_link}) against "
                f"{switch.busiest_link_bytes_per_step:,.0f} ({switch.busiest_link})"
            )
        lines.append(line)
    return lines


def _thc_lines(rows: list[ModeSummary]) -> list[str]:
    by_mode = {r.mode: r for r in rows}
    lines = []
    gloo = by_mode.get(GLOO)
    if gloo is not None and gloo.step_ms > 0:
        share = gloo.aggregation_ms / gloo.step_ms
        bound = "bandwidth-bound" if share >= 0.6 else "not bandwidth-bound (below 60 %)"
        lines.append(
            f"gloo's communication: {share:.0%} of its step "
            f"({gloo.aggregation_ms:.1f} of {gloo.step_ms:.1f} ms): {bound}"
        )
    thc = by_mode.get(THC)
    if thc is None:
        return lines
    target = _target_text(thc)
    if thc.time_to_target_s is None:
        lines.append(f"THC via switch did not reach {target} in {thc.steps} steps")
        return lines
    faster = speedups(rows)[THC]
    parts = []
    for base in (FIX32, GLOO):
        other = by_mode.get(base)
        if other is None:
            continue
        allowed = faster[f"bytes_allow_vs_{base}"]
        allows = f"; the bytes alone would allow {allowed:.2f}x" if allowed is not None else ""
        if faster[f"speedup_vs_{base}"] is None:
            parts.append(f"{MODE_LABELS[base]} did not reach it{allows}")
        else:
            parts.append(
                f"{faster[f'speedup_vs_{base}']:.2f}x {MODE_LABELS[base]} ({other.time_to_target_s:.1f} s, "
                f"final {_metric_text(other)}{allows})"
            )
    lines.append(
        f"THC via switch reached {target} in {thc.time_to_target_s:.1f} s (final {_metric_text(thc)})"
        + (": speed-up " + "; ".join(parts) if parts else "")
    )
    return lines


def bytes_ratio(other: ModeSummary, thc: ModeSummary) -> float | None:
    """How much sooner THC could be if time were bytes: the busiest direction of a worker's link per step,
    `other`'s over THC's (both reach their targets in the same steps on these models)."""
    mine = max(thc.sent_bytes_per_step, thc.received_bytes_per_step)
    theirs = max(other.sent_bytes_per_step, other.received_bytes_per_step)
    return theirs / mine if mine > 0 and theirs > 0 else None


def _target_text(r: ModeSummary) -> str:
    return f"{r.target:g} bits/char" if r.metric == "bpc" else f"{r.target_acc:.0%} accuracy"


def _metric_text(r: ModeSummary) -> str:
    return f"{r.final_metric:.3f} bits/char" if r.metric == "bpc" else f"{r.final_acc:.3f}"


def write_json(path: Path, rows: list[ModeSummary], run_info: dict) -> None:
    """logs/summary.json: at top level the model, link rate and target metric; per mode its figures,
    with time_to_target_s, final_metric and the speed-ups over gloo and FIX32."""
    faster = speedups(rows)
    document = {
        "model": run_info.get("model"),
        "bw_mbit": run_info.get("bw_mbit"),
        "target": rows[0].target if rows else None,
        "run": run_info,
        "modes": [asdict(r) | faster[r.mode] for r in rows],
    }
    path.write_text(json.dumps(document, indent=1))


def plot(path: Path, curves: dict[str, dict], title: str, rows: list[ModeSummary] | None = None) -> None:
    """The figure of ``draw`` written to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    fig = draw(curves, title, rows)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(curves: dict[str, dict], title: str, rows: list[ModeSummary] | None = None):
    """Test loss and accuracy against training wall time, one line per mode; with ``rows`` the accuracy
    target as a dashed line and each mode's time to target marked on its curve and in the legend.

    ``curves``: mode -> rank 0's result record (its ``epochs``). Returns the matplotlib Figure (its two axes:
    loss, accuracy), so that a test can read what it shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for mode, record in curves.items():
        t = [0.0] + [e["t"] for e in record["epochs"]]
        first = record["steps"][0]["loss"] if record["steps"] else None
        loss = [first] + [e["test_loss"] for e in record["epochs"]]
        acc = [0.1] + [e["test_acc"] for e in record["epochs"]]  # untrained: chance on 10 classes
        name = label(mode)
        row = next((r for r in rows or () if r.mode == mode), None)
        if row is not None and row.metric == "accuracy":
            reached = "not reached" if row.time_to_target_s is None else f"{row.time_to_target_s:.1f} s"
            name += f" ({reached} to {row.target_acc:.0%})"
        ax_loss.plot(t, loss, marker=".", label=name)
        (line,) = ax_acc.plot(t, acc, marker=".", label=name)
        if row is not None and row.metric == "accuracy" and row.time_to_target_s is not None:
            at = next(e["test_acc"] for e in record["epochs"] if e["t"] == row.time_to_target_s)
            ax_acc.plot(
                [row.time_to_target_s], [at], marker="o", markersize=10, fillstyle="none", color=line.get_color()
            )
    accuracy_rows = [r for r in rows or () if r.metric == "accuracy"]
    if accuracy_rows:
        ax_acc.axhline(accuracy_rows[0].target_acc, color="grey", linestyle="--", linewidth=1)
    ax_loss.set(xlabel="training wall time (s)", ylabel="test loss (cross-entropy)", yscale="log")
    ax_acc.set(xlabel="training wall time (s)", ylabel="test accuracy", ylim=(0, 1))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def percentile95(values) -> float:
    """The 95th percentile of job completion times (numpy's linear interpolation), as bench_pool and thc-run
    --trace report them."""
    import numpy as np

    return float(np.percentile(values, 95))


def plot_occupancy(path: Path, panels: dict[str, dict[str, tuple[list, int]]], xlabel: str) -> None:
    """The switch's cells held by jobs over time, written to ``path`` (PNG): one panel per title of
    ``panels``, one step line per name in it, from (occupancy, cells): (time, cells held) samples and the
    cells the jobs may use (a line of 0 cells, a policy with no switch, is left out). bench/bench_pool.py
    draws its policies per link rate with it, thc-run --trace its run's policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.8 * len(panels)), squeeze=False)
    for ax, (title, lines) in zip(axes[:, 0], panels.items()):
        for name, (occupancy, cells) in lines.items():
            if cells:
                t, held = zip(*occupancy)
                ax.step(t, held, where="post", label=f"{name} (of {cells} cells)")
        ax.set_title(title)
        ax.set_ylabel("cells held")
        if ax.get_legend_handles_labels()[0]:  # a pool of no cells draws no line
            ax.legend(loc="upper right")
    axes[-1, 0].set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
