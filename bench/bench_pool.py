"""Switch memory shared by jobs that come and go (issue 39): one trace of jobs under each policy.

    .venv/bin/python bench/bench_pool.py [--quick] [--trace FILE | --contention] [--budget 16] [--rate-mbit 20,2]
    sudo .venv/bin/python bench/bench_pool.py --trained [--trace FILE] [--slots 512] [--bw 2] [--repeat N]

In-process (the default): the compiled program in the software switch, a second one as the fallback server,
every job's workers on one loopback wire and a virtual clock, so every sum is checked against the reference
and the figures do not move with the machine's load. --trained: `thc-run --trace` on Mininet, real workers
training to their targets, whose figures do. Each prints per policy (static partitions, the shared pool, and
in-process no switch) the mean and 95th-percentile job completion time and the share of uses that fell
back, and ends with the pool/static ratio; docs/results.md says what each trace holds and why.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from usage.args import OneLineParser, folder, input_path, int_in, listed, positive_number

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

import contract  # noqa: E402
from bench import record as bench_record  # noqa: E402
from harness.trace_run import POLICIES, Setup, TraceResult, TraceRunner  # noqa: E402
from host_agent import workloads  # noqa: E402
from thc.modes import THC  # noqa: E402
from topologies import job_trace, report  # noqa: E402
from usage import provenance  # noqa: E402

FLOOR = 0.75  # pool mean JCT at most this times static's (issue 39)
# a step of each job is its training plus `compute` s of its own work (50 ms), during which a pool job's cells go
# back to the pool while a static job's sit idle: the case the shared pool is for. trace_bench_busy.json is the
# same trace with no such work (every step aggregates throughout), where the pool has nothing idle to share.
TRAINED_TRACE = REPO / "topologies" / "trace_bench.json"
TRAINED_POLICIES = ("static", "pool")  # thc-run --trace's; no switch at all is the in-process run's
TRAINED_SLOTS = 512  # a static job's slots: 2 jobs fill the switch's 1,024
# requests in flight per worker (thc-run --window): a digits MLP round has 3; the pool's fallback server holds
# each pool job's window of its 1,024 slots, so the default 256 would cap the pool at 4 jobs at once
TRAINED_WINDOW = 64
TRAINED_BW = 2.0  # Mbit/s: a step's sums take a share of it beside its own work (slower links retransmit more)


def fixed_trace(quick: bool) -> list[job_trace.TraceJob]:
    """8 jobs of 4 workers, one every 7.5 s (quick: 4 jobs, one a second, 6 steps)."""
    count, gap, steps = (4, 1.0, 6) if quick else (8, 7.5, 40)
    return [job_trace.TraceJob(f"job{i}", i * gap, "mlp-digits", 4, "thc", steps, 0.5) for i in range(count)]


def burst_trace(quick: bool) -> list[job_trace.TraceJob]:
    """--contention: 8 jobs of 4 workers arriving at once, each step's compute the same (quick: 4 jobs
    of 6 steps), so that their aggregation bursts overlap and contend for the pool's cells every step."""
    count, steps = (4, 6) if quick else (8, 20)
    return [job_trace.TraceJob(f"burst{i}", 0.0, "mlp-digits", 4, "thc", steps, 0.5) for i in range(count)]


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="4 jobs of 6 steps (the test's form)")
    p.add_argument("--trace", type=input_path, help="a trace file (topologies/job_trace.py) instead of the fixed one")
    p.add_argument(
        "--contention",
        action="store_true",
        help="the second built-in trace: jobs arriving together, their aggregation bursts overlapping in the pool",
    )
    p.add_argument(
        "--budget", type=int_in(1, 512), default=16, help="switch slots for the jobs, a power of two (default 16)"
    )
    p.add_argument(
        "--rate-mbit",
        type=listed(positive_number("Mbit/s")),
        default="20,2",
        help="every link's rate, a run per rate (default 20,2)",
    )
    p.add_argument("--out", type=folder, default=REPO / "bench" / "out", help="folder for the results")
    trained = p.add_argument_group("--trained: thc-run --trace on Mininet, real training (root)")
    trained.add_argument(
        "--trained",
        action="store_true",
        help=f"train the trace's jobs on Mininet under static partitions and the shared pool (default trace "
        f"{TRAINED_TRACE.relative_to(REPO)})",
    )
    trained.add_argument(
        "--slots",
        type=int_in(1, contract.SLOTS),
        default=TRAINED_SLOTS,
        help=f"with --trained: each job's slots on the switch (thc-run --slots; default {TRAINED_SLOTS})",
    )
    trained.add_argument(
        "--bw",
        type=positive_number("Mbit/s"),
        default=TRAINED_BW,
        help=f"with --trained: every link's rate in Mbit/s (thc-run --bw; default {TRAINED_BW:g})",
    )
    trained.add_argument(
        "--repeat",
        type=int_in(1, 10),
        default=1,
        metavar="N",
        help="with --trained: run the policies N times, taking turns, and give each over all its runs (default 1)",
    )
    args = p.parse_args(argv)
    if args.trace and args.contention:
        p.error("argument --contention: a built-in trace; --trace gives another (drop one)")
    if args.trained and (args.contention or args.quick):
        p.error(f"argument --trained: {'--contention' if args.contention else '--quick'} is the in-process run's")
    if args.budget & (args.budget - 1):
        p.error(f"argument --budget: {args.budget} is not a power of two (the pool is 2 * budget cells)")
    return args


def summary(r: TraceResult) -> dict:
    jct = r.jct()
    return {
        "mean_jct_s": float(np.mean(jct)),
        "p95_jct_s": report.percentile95(jct),
        "mean_wait_s": float(np.mean([run.admitted - run.trace.start for run in r.runs])),
        "fallback_share": r.fallbacks / r.uses,
        "fallbacks": r.fallbacks,
        "uses": r.uses,
        "wrong_sums": r.wrong_sums,
        "peak_cells": max(c for _, c in r.occupancy),
        "cells": r.cells,
        "jobs": {run.trace.name: {"arrived": run.trace.start, "admitted": run.admitted, "finished": run.finished}
                 for run in r.runs},
    }  # fmt: skip


def plot(path: Path, results: dict[float, dict[str, TraceResult]]) -> None:
    """The switch's cells held by jobs over time: one panel per link rate, one line per policy with a switch."""
    panels = {
        f"links {rate:g} Mbit/s": {name: (r.occupancy, r.cells) for name, r in per_policy.items()}
        for rate, per_policy in results.items()
    }
    report.plot_occupancy(path, panels, "time (virtual s)")


# ---- --trained: thc-run --trace per policy ------------------------------------------------------------


def trained_command(trace: Path, policy: str, slots: int, bw: float, log_dir: Path) -> list[str]:
    """thc-run --trace for one policy, with this checkout's code, its logs in `log_dir`."""
    return [sys.executable, "-m", "topologies.runner", "--trace", str(trace), "--policy", policy,
            "--slots", str(slots), "--window", str(TRAINED_WINDOW), "--bw", f"{bw:g}", "--no-pcap",
            "--log-dir", str(log_dir)]  # fmt: skip


def trained_summary(summary: dict) -> dict:
    """A policy's figures from thc-run --trace's summary.json (topologies/trace_run.py)."""
    jobs = summary["jobs"]
    return {
        "mean_jct_s": summary["mean_completion_s"],
        "p95_jct_s": summary["p95_completion_s"],
        "mean_wait_s": statistics.mean(r["wait_s"] for r in jobs),
        # start to end, and of it the slowest worker's setup (process start to its first step) and training
        "mean_run_s": statistics.mean(r["completion_s"] - r["wait_s"] for r in jobs),
        "mean_setup_s": statistics.mean(r.get("setup_s", 0.0) for r in jobs),
        "mean_train_s": statistics.mean(r["train_s"] for r in jobs),
        "unreached": [r["name"] for r in jobs if r["time_to_target_s"] is None],
        "fallback_share": summary["fallback_share"],
        "fallbacks": summary["fallbacks"],
        "uses": summary["uses"],
        "replicas_differ": summary["replicas_differ"],
        "cells": summary["cells"],
        "peak_cells": max(c for _, c in summary["occupancy"]),
        "jobs": {r["name"]: {k: r[k] for k in ("arrived_s", "started_s", "finished_s", "time_to_target_s",
                                                "final_metric")} for r in jobs},
    }  # fmt: skip


def trained_combine(runs: list[dict]) -> dict:
    """One policy's figures over its runs (trained_summary's each): the means of the runs' means, the p95 of
    every job's completion, the jobs that missed their target or whose models differ named with their run,
    the fallbacks summed."""

    def mean(key: str) -> float:
        return statistics.mean(f[key] for f in runs)

    def named(key: str) -> list[str]:
        return [f"{name} (run {i})" for i, f in enumerate(runs, 1) for name in f[key]]

    completions = [j["finished_s"] - j["arrived_s"] for f in runs for j in f["jobs"].values()]
    uses = None if runs[0]["uses"] is None else sum(f["uses"] for f in runs)
    fallbacks = sum(f["fallbacks"] for f in runs)
    return {
        **{key: mean(key) for key in ("mean_jct_s", "mean_wait_s", "mean_run_s", "mean_setup_s", "mean_train_s")},
        "p95_jct_s": report.percentile95(completions),
        "unreached": named("unreached"),
        "fallback_share": fallbacks / uses if uses else 0.0,
        "fallbacks": fallbacks,
        "uses": uses,
        "replicas_differ": named("replicas_differ"),
        "cells": runs[0]["cells"],
        "peak_cells": max(f["peak_cells"] for f in runs),
        "runs": len(runs),
    }


def trained_line(policy: str, f: dict) -> str:
    """One policy's printed line."""
    reached = "every job reached its target" if not f["unreached"] else f"target missed by {', '.join(f['unreached'])}"
    fell = "-" if f["uses"] is None else f"{f['fallback_share']:.1%} ({f['fallbacks']}/{f['uses']} uses)"
    return (
        f"{policy:<7} mean JCT {f['mean_jct_s']:6.1f} s  p95 {f['p95_jct_s']:6.1f} s  mean wait "
        f"{f['mean_wait_s']:5.1f} s  mean run {f['mean_run_s']:5.1f} s (setup {f['mean_setup_s']:4.1f} s, training "
        f"{f['mean_train_s']:5.1f} s)  "
        f"fell back {fell}  peak cells {f['peak_cells']}/{f['cells']}  {reached}; jobs whose workers' models "
        f"differ: {len(f['replicas_differ'])}"
    )


def trained_verdict(figures: dict[str, dict]) -> tuple[float, list[str]]:
    """The pool/static mean JCT ratio and the floor's lines: the ratio, every job at its target, no models
    that differ (a trained run's stand-in for wrong sums)."""
    ratio = figures["pool"]["mean_jct_s"] / figures["static"]["mean_jct_s"]
    unreached = sorted({n for f in figures.values() for n in f["unreached"]})
    differ = sorted({n for f in figures.values() for n in f["replicas_differ"]})
    return ratio, [
        f"floor: pool mean JCT <= {FLOOR}x static's: {'met' if ratio <= FLOOR else 'missed'} ({ratio:.3f})",
        "floor: every job reaches its target: " + ("met" if not unreached else f"missed ({', '.join(unreached)})"),
        "wrong sums: not compared in a trained run; jobs whose workers' models differ: "
        + (", ".join(differ) if differ else "0"),
    ]


def run_trained(args) -> int:
    trace_path = args.trace or TRAINED_TRACE
    try:
        trace = job_trace.load(trace_path, models=workloads.names())
    except job_trace.TraceError as e:
        print(f"bench_pool: {e}", file=sys.stderr)
        return 2
    origin = provenance.started()
    args.out.mkdir(parents=True, exist_ok=True)
    resolved = trace_path.resolve()  # thc-run runs in REPO: a path in it is shown from there
    shown = resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved
    print(
        f"{len(trace)} jobs ({sum(j.workers for j in trace)} workers) trained with thc-run --trace {shown} "
        f"on Mininet: {args.slots} slots a job ({contract.SLOTS // args.slots} fit statically, a pool of "
        f"{contract.CELLS} cells), links {args.bw:g} Mbit/s; load average before "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    runs: list[dict[str, dict]] = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    for run in range(1, args.repeat + 1):
        runs.append({})
        for policy in TRAINED_POLICIES:  # taking turns, so that the machine's load drifts on both alike
            log_dir = args.out / (f"bench_pool_trained_{policy}" + (f"_{run}" if args.repeat > 1 else ""))
            command = trained_command(shown, policy, args.slots, args.bw, log_dir)  # thc-run runs in REPO
            log_dir.mkdir(parents=True, exist_ok=True)
            with open(log_dir / "thc-run.out", "w") as out:
                done = subprocess.run(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode != 0:
                tail = (log_dir / "thc-run.out").read_text().strip().splitlines()[-5:]
                print(f"bench_pool: thc-run --policy {policy} failed ({done.returncode}):", *tail, sep="\n  ")
                return 1
            runs[-1][policy] = trained_summary(json.loads((log_dir / "summary.json").read_text()))
            print(("" if args.repeat == 1 else f"run {run}: ") + trained_line(policy, runs[-1][policy]))
    ratios = [trained_verdict(r)[0] for r in runs]
    figures = runs[0] if args.repeat == 1 else {p: trained_combine([r[p] for r in runs]) for p in TRAINED_POLICIES}
    if args.repeat > 1:
        print(f"over {args.repeat} runs (pool/static mean JCT per run: {', '.join(f'{r:.3f}' for r in ratios)}):")
        for policy in TRAINED_POLICIES:
            print(trained_line(policy, figures[policy]))
    ratio, verdicts = trained_verdict(figures)
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(*verdicts, sep="\n")
    document = {
        "setup": {"slots": args.slots, "window": TRAINED_WINDOW, "bw_mbit": args.bw, "cells": contract.CELLS},
        "trace": [vars(j) for j in trace],
        "policies": figures,
        "ratio": ratio,
        "ratios": ratios,  # each run's
        "runs": runs,
    }
    (args.out / "bench_pool_trained.json").write_text(json.dumps(document, indent=1) + "\n")
    bench_record.write(args.out, "bench_pool_trained", origin, document)
    print(f"pool/static mean JCT (trained): {ratio:.3f}")
    return 0 if all(not f["replicas_differ"] for f in figures.values()) else 1


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.trained:
        return run_trained(args)
    origin = provenance.started(quick=args.quick)
    try:
        # in-process every job sums THC frames and trains nothing: its model is a name, its steps its length
        if args.trace:
            trace = job_trace.load(args.trace, models=workloads.names(), modes={THC})
        else:
            trace = (burst_trace if args.contention else fixed_trace)(args.quick)
    except job_trace.TraceError as e:
        print(f"bench_pool: {e}", file=sys.stderr)
        return 2
    rates = [float(r) for r in args.rate_mbit.split(",")]
    window = Setup().window
    print(
        f"{len(trace)} jobs ({sum(j.workers for j in trace)} workers), in-process on the software switch, virtual "
        f"time; {args.budget} slots ({args.budget // window} job(s) of {window} slots fit statically, a pool of "
        f"{2 * args.budget} cells); load average before {' '.join(f'{x:.2f}' for x in os.getloadavg())} on "
        f"{os.cpu_count()} cores"
    )
    results, figures, ratios = {}, {}, {}
    for rate in rates:
        setup = Setup(budget=args.budget, rate=rate * 1e6)
        results[rate], figures[f"{rate:g}"] = {}, {}
        for policy in POLICIES:
            r = results[rate][policy] = TraceRunner(trace, policy, setup, seed=1).run()
            f = figures[f"{rate:g}"][policy] = summary(r)
            print(
                f"{rate:g} Mbit/s {policy:<7} mean JCT {f['mean_jct_s']:7.2f} s  p95 {f['p95_jct_s']:7.2f} s  "
                f"mean wait {f['mean_wait_s']:6.2f} s  fell back {f['fallback_share']:6.1%} "
                f"({f['fallbacks']}/{f['uses']} uses)  peak cells {f['peak_cells']}/{f['cells']}  "
                f"wrong sums {f['wrong_sums']}"
            )
            if args.trace:
                print(
                    "  completion (s after arrival): "
                    + ", ".join(f"{run.trace.name} {run.finished - run.trace.start:.2f}" for run in r.runs)
                )
        ratios[f"{rate:g}"] = figures[f"{rate:g}"]["pool"]["mean_jct_s"] / figures[f"{rate:g}"]["static"]["mean_jct_s"]
    args.out.mkdir(parents=True, exist_ok=True)
    plot(args.out / "bench_pool_occupancy.png", results)
    wrong = sum(f["wrong_sums"] for per_rate in figures.values() for f in per_rate.values())
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for rate, ratio in ratios.items():
        verdict = "met" if ratio <= FLOOR else "missed"
        print(f"floor at {rate} Mbit/s: pool mean JCT <= {FLOOR}x static's: {verdict} ({ratio:.3f})")
    print(f"wrong sums: {wrong}")
    document = {
        "setup": {"budget": args.budget, "window": window, "requests": Setup().requests},
        "trace": [vars(j) for j in trace],
        "rates": figures,
        "ratio": ratios,
    }
    (args.out / "bench_pool.json").write_text(json.dumps(document, indent=1) + "\n")
    bench_record.write(args.out, "bench_pool", origin, document)
    print("pool/static mean JCT: " + ", ".join(f"{r:.3f} at {rate} Mbit/s" for rate, r in ratios.items()))
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
