"""Timeline model on the testbed: the planner's speed, then predicted vs measured step time per model, mode
and link rate, and the planned per-bucket mix against the uniform modes.

    .venv/bin/python bench/bench_timeline.py --planner-only          # planner speed, no root
    .venv/bin/python bench/bench_timeline.py --replay bench/out/bench_timeline.json  # the current model on a run
    sudo flock /tmp/mininet.lock .venv/bin/python bench/bench_timeline.py [--bw 50,10,5] [--steps 40]
                                                    [--models mlp-digits,mlp2-digits,cnn-digits]

Calibration and validation in one run, on the same machine state (planner/testbed_costs.py): step profiles,
probe rounds of every mode at every --bw rate, then training in every mode and with the plan. A model's
prediction never uses its own training runs, so the printed ``median |error|: <P> %`` is a prediction's.
Writes bench/out/bench_timeline.json (thc-plan validate reads it), its record and bench/out/timeline/.
Figures only, no assertion: the machine is shared."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from usage.args import OneLineParser, folder, input_file, int_in, listed, names_in, positive_number

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import planner  # noqa: E402
from bench import record as bench_record  # noqa: E402
from contract.job import JobSpec  # noqa: E402
from controller.topology import load_for_cli  # noqa: E402
from host_agent import workloads  # noqa: E402
from planner import (  # noqa: E402
    models_zoo,
    plan_cli,
    profiles,
    testbed_costs,  # noqa: E402
)
from planner.timeline import Bucket, StepProfile  # noqa: E402
from thc.modes import MODES as WORKER_MODES  # noqa: E402
from topologies import interrupts, one_run, plan_probes  # noqa: E402
from topologies.testbed import Testbed  # noqa: E402
from topologies.workers import WorkerOptions  # noqa: E402
from usage import provenance  # noqa: E402

MODELS = ("mlp-digits", "mlp2-digits", "cnn-digits", "cnn1d-signals")
UNIFORM = tuple(m for m in profiles.EXECUTABLE_MODES if m in WORKER_MODES)  # modes the model predicts and runs
# 2-3 buckets each, so a plan can mix
BUCKET_KB = {"mlp-digits": 1.0, "mlp2-digits": 4.0, "cnn-digits": 16.0, "cnn1d-signals": 64.0}


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--topo", type=input_file, default=str(REPO / "topologies" / "star4.json"), help="topology (default star4)"
    )
    p.add_argument(
        "--workers", type=int_in(1), default=None, help="workers (a star grows/shrinks; default: the file's)"
    )
    p.add_argument(
        "--bw",
        type=listed(positive_number("Mbit/s")),
        default="50,10,5",
        help="validated link rates in Mbit/s (default 50,10,5)",
    )
    p.add_argument(
        "--models",
        default=",".join(MODELS),
        type=names_in(workloads.names()),
        help=f"models (default {','.join(MODELS)})",
    )
    p.add_argument(
        "--calibrate-model",
        default=None,
        help="a model trained at every rate before the validated ones, in every mode: how much longer each "
        "mode's rounds take in training than in probes, applied to the validated models (default none: one "
        "model's factors made the other models' errors larger; docs/results.md, History)",
    )
    p.add_argument(
        "--modes",
        default="thc,fix32,gloo",
        type=names_in(UNIFORM),
        help="uniform modes to validate (default thc,fix32,gloo)",
    )
    p.add_argument("--steps", type=int_in(1), default=40, help="training steps per run (default 40)")
    p.add_argument("--warmup", type=int_in(0), default=5, help="first steps left out of the measured mean (default 5)")
    p.add_argument("--no-plan", action="store_true", help="skip the planned-mix runs")
    p.add_argument(
        "--probe-sizes",
        default="",
        help="probe sizes in coordinates, comma-separated (default: each model's own bucket sizes, probed "
        "right before its runs, as thc-run --modes plan does)",
    )
    p.add_argument(
        "--probe-rounds",
        type=int_in(2, why=": the first is a warm-up"),
        default=8,
        help="probe rounds per size and mode, the first a warm-up (default 8)",
    )
    p.add_argument("--out", type=folder, default=REPO / "bench" / "out", help="output folder (default bench/out)")
    p.add_argument(
        "--planner-only",
        action="store_true",
        help="only time the planner on the zoo's models (no root, no Mininet) and exit",
    )
    p.add_argument(
        "--replay",
        type=input_file,
        metavar="BENCH_TIMELINE.json",
        help="no runs: predict the cases of an earlier run's file again with the current model, from that run's "
        "own step profiles and probes, and print its validation table and the plans the planner now makes "
        "(no root; for trying a model change on measured runs)",
    )
    p.add_argument(
        "--planner-gbps",
        type=listed(positive_number("Gbit/s")),
        default="1,10,25,100",
        help="link rates in Gbit/s the planner is timed at (default 1,10,25,100)",
    )
    args = p.parse_args(argv)
    if not args.replay:
        args.topology = load_for_cli(p, args.topo, args.workers)  # a bad file: one line now, not after the planner
    return args


# ---- the planner's speed -------------------------------------------------------------------------------


def planner_speed(rates_gbps: list[float], say=print, repeats: int = 5) -> list[dict]:
    """Time the plan search per zoo model, preset and link rate (median of ``repeats``), with the partial
    timelines it built and whether its plan is provably the model's best."""
    rows = []
    for name in ("tofino", "bmv2"):
        base = profiles.preset(name)
        for model in models_zoo.MODELS:
            for gbps in rates_gbps:
                hw = base.with_link(gbps * 1e9)
                step = plan_cli.step_profile_for(model, hw)
                modes = profiles.modes_for(hw, profiles.EXECUTABLE_MODES)
                plans = [planner.best_plan(step, modes) for _ in range(repeats)]
                ms = statistics.median(p.search_s for p in plans) * 1e3
                rows.append(
                    {
                        "preset": name,
                        "model": model,
                        "gbps": gbps,
                        "buckets": len(step.buckets),
                        "search_ms": ms,
                        "built": plans[0].evaluations,
                        "plans": len(modes) ** len(step.buckets),
                        "exact": plans[0].exact,
                    }
                )
    say(f"{'preset':7s} {'model':12s} {'Gbit/s':>6s} {'buckets':>7s} {'plans':>10s} {'built':>6s} {'ms':>7s} exact")
    for r in rows:
        say(
            f"{r['preset']:7s} {r['model']:12s} {r['gbps']:6g} {r['buckets']:7d} {r['plans']:10.3g} {r['built']:6d} "
            f"{r['search_ms']:7.2f} {r['exact']}"
        )
    worst = max(rows, key=lambda r: r["search_ms"])
    say(
        f"planner: at most {worst['search_ms']:.2f} ms per model and rate ({worst['model']}, {worst['preset']}, "
        f"{worst['gbps']:g} Gbit/s; median of {repeats}; floor 50 ms), "
        f"{sum(r['exact'] for r in rows)}/{len(rows)} plans provably best under the model"
    )
    return rows


def step_times(results: list[dict], warmup: int) -> dict:
    """Per step the mean over ranks (they run in lockstep), after ``warmup`` steps: median and mean in ms."""
    per_step = list(zip(*[[s["step_time"] for s in r["steps"]] for r in results]))[warmup:]
    means = [statistics.mean(x) for x in per_step]
    return {"median_ms": 1e3 * statistics.median(means), "mean_ms": 1e3 * statistics.mean(means)}


def step_dict(step) -> dict:
    return {
        "forward_ms": step.forward_s * 1e3,
        "backward_ms": step.backward_s * 1e3,
        "optimizer_ms": step.optimizer_s * 1e3,
        "buckets": [{"index": b.index, "numel": b.numel, "ready_ms": b.ready_s * 1e3} for b in step.buckets],
    }


def switch_ops(result: dict, steps: int) -> dict | None:
    """A training run's aggregation calls through the switch (norm rounds and sums), from the worker's
    aggregator counters: per step, their mean time and the retransmissions; None for gloo."""
    agg = result.get("aggregator")
    if not agg or not agg.get("operations"):
        return None
    return {
        "per_step": agg["operations"] / max(1, steps),
        "mean_ms": agg["operation_seconds"] / agg["operations"] * 1e3,
        "retransmissions": agg.get("retransmissions", 0),
        "srtt_ms": agg.get("srtt", 0.0) * 1e3,
    }


def plan_comparison(mixes: list[dict]) -> str:
    """The plan's measured step against the best uniform mode's. A plan that is one mode for every bucket
    runs that mode's own hook: its run repeats that mode's run, so its ratio is the spread between two runs
    of one configuration, and the choice itself is judged by that mode's own run ("chosen / best")."""
    lines = ["\nThe plan against the best uniform mode (measured ms per step, median over steps):"]
    for x in mixes:
        ratio = x["plan_ms"] / x["best_uniform_ms"]
        same = x.get("uniform")
        note = f"  = uniform {same}: chosen / best {x['measured'][same] / x['best_uniform_ms']:.3f}" if same else ""
        lines.append(
            f"{x['model']:12s} {x['mbps']:5g} Mbit/s  plan {x['plan_ms']:7.1f}  best uniform "
            f"{x['best_uniform']} {x['best_uniform_ms']:7.1f}  ratio {ratio:.3f}  plan {x['plan']}{note}"
        )
    ratios = [x["plan_ms"] / x["best_uniform_ms"] for x in mixes]
    own = [x["measured"][x["uniform"]] if x.get("uniform") else x["plan_ms"] for x in mixes]
    chosen = [t / x["best_uniform_ms"] for x, t in zip(mixes, own)]
    repeats = [x["plan_ms"] / x["measured"][x["uniform"]] for x in mixes if x.get("uniform")]
    lines.append(
        f"worst plan / best uniform: {max(ratios):.3f} (floor 1.05), within 1.05: {sum(r <= 1.05 for r in ratios)} "
        f"of {len(ratios)}; the choice (a uniform plan judged by its mode's own run): worst {max(chosen):.3f}, "
        f"within 1.05: {sum(c <= 1.05 for c in chosen)} of {len(chosen)}"
    )
    if repeats:
        lines.append(
            f"two runs of one configuration (a uniform plan's run / its mode's run): "
            f"{min(repeats):.3f}-{max(repeats):.3f}, median {statistics.median(repeats):.3f} (the machine's spread)"
        )
    return "\n".join(lines)


def load_average() -> float:
    return os.getloadavg()[0]


def replay(path: Path) -> int:
    """--replay: the cases of an earlier run predicted again by the current model from what that run measured
    before them (step profiles, probes, calibration factors), never from the runs themselves."""
    try:
        cases, plans = _replayed(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
        print(
            f"bench_timeline --replay: {path} is not a bench_timeline.json ({type(exc).__name__}: {exc}); "
            "give the file a run wrote",
            file=sys.stderr,
        )
        return 2
    for line in plans:
        print(line)
    print(plan_cli.validation_table(cases))
    return 0


def _replayed(run: dict) -> tuple[list[dict], list[str]]:
    """replay's cases and each model's plan at each rate; any field of the wrong shape raises (replay says
    which file)."""
    profiles_by_rate, probes_by_rate, runs = run["steps_profiled"], run["probes"], run["cases"]
    factors_by_rate = run.get("calibration", {}).get("factors", {})
    cases, plans = [], []
    for rate, by_model in probes_by_rate.items():
        factors = factors_by_rate.get(rate) or {}
        for m, probes in by_model.items():
            s = profiles_by_rate[rate][m]
            buckets = tuple(Bucket(b["index"], b["numel"], b["ready_ms"] * 1e-3) for b in s["buckets"])
            ms = (s["forward_ms"], s["backward_ms"], s["optimizer_ms"])
            step = StepProfile(buckets, *(x * 1e-3 for x in ms), name=m)
            scale = lambda modes: {k: testbed_costs.scaled_mode(v, factors.get(k, 1.0)) for k, v in modes.items()}
            modes = scale(testbed_costs.probe_modes(probes))
            upper = scale(testbed_costs.probe_modes(probes, quantile=testbed_costs.UPPER_QUANTILE))
            for c in runs:
                if c["model"] == m and str(c["mbps"]) == rate and c["mode"] in modes:
                    predicted = planner.uniform(step, modes, c["mode"]).iteration_s * 1e3
                    cases.append(dict(c, predicted_ms=predicted))
            plan = testbed_costs.choose(step, modes, upper=upper)
            plans.append(f"{m} at {float(rate):g} Mbit/s: the plan now {plan.modes}, {plan.iteration_s * 1e3:.1f} ms")
    return cases, plans


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.replay:
        return replay(Path(args.replay))
    origin = provenance.started(quick=args.steps < 40 or args.models != ",".join(MODELS) or args.bw != "50,10,5")
    speed = planner_speed([float(g) for g in args.planner_gbps.split(",") if g])
    if args.planner_only:
        bench_record.write(args.out, "bench_timeline_planner", dict(origin, quick=False), {"planner": speed})
        return 0
    if os.geteuid() != 0:
        print(
            "bench_timeline needs root (Mininet): sudo flock /tmp/mininet.lock .venv/bin/python bench/bench_timeline.py"
        )
        return 2
    from mininet.log import setLogLevel
    from tqdm import tqdm

    setLogLevel("critical")
    rates = [float(b) for b in args.bw.split(",") if b]
    models = [m for m in args.models.split(",") if m]
    modes = [m for m in args.modes.split(",") if m]
    sizes = [int(s) for s in args.probe_sizes.split(",") if s]
    topo = args.topology
    n = len(topo.workers)
    out = args.out / "timeline"
    out.mkdir(parents=True, exist_ok=True)
    say = lambda message: tqdm.write(f"bench_timeline: {message}")
    started = time.monotonic()

    say(f"profiling each model's step in {n} processes at once on {os.cpu_count()} cores (load {load_average():.2f})")
    first = [m for m in [args.calibrate_model, *models] if m]
    steps = {m: testbed_costs.local_step(m, BUCKET_KB.get(m), n, repeats=10) for m in first}
    for m, st in steps.items():
        say(
            f"{m}: forward {st.forward_s * 1e3:.2f} ms, backward {st.backward_s * 1e3:.2f} ms, optimizer "
            f"{st.optimizer_s * 1e3:.2f} ms, buckets {[b.numel for b in st.buckets]}"
        )

    cases, mixes, probes_by_rate, profiled, counter = [], [], {}, {}, [0]

    def next_job() -> tuple[int, int]:
        counter[0] += 1  # four job ids in turn: adding one again renews it with a fresh epoch
        return 1 + counter[0] % 4, 29700 + counter[0]

    run_modes = modes + ([] if args.no_plan else ["plan"])
    cal = args.calibrate_model
    everyone = [cal, *models] if cal else models
    sizes_of = {m: sizes or sorted({b.numel for b in steps[m].buckets}) for m in everyone}
    probes_per = {m: len(testbed_costs.PROBED_MODES) * len(sizes_of[m]) for m in everyone}
    total = len(rates) * sum(probes_per[m] + len(run_modes) for m in models)
    total += len(rates) * (probes_per[cal] + len(modes)) if cal else 0
    calibration = {}

    def measure_costs(bed, m: str, bw: float, bar):
        """Right before a model's runs, the machine's state of the moment: its step in n processes at once
        (the first profile, before the network came up, gave the bucket sizes), then probes of every mode
        at its bucket sizes."""
        step = steps[m] = testbed_costs.local_step(m, BUCKET_KB.get(m), n)
        profiled.setdefault(str(bw), {})[m] = step_dict(step)
        plan_cli.save_step_profile(step, out / f"{m}-{bw:g}.json")  # thc-plan plan --step-profile
        probes = []
        for mode in testbed_costs.PROBED_MODES:
            for size in sizes_of[m]:
                probes.append(plan_probes.probe(bed, mode, size, args.probe_rounds, *next_job()))
                say(f"{bw:g} Mbit/s probe {mode} {size}: {probes[-1]['seconds'] * 1e3:.2f} ms a round")
                bar.update()
        probes_by_rate.setdefault(bw, {})[m] = probes
        return (
            step,
            testbed_costs.probe_modes(probes),
            testbed_costs.probe_modes(probes, quantile=testbed_costs.UPPER_QUANTILE),
        )

    def train(bed, m: str, mode: str, plan_path=None, uniform: str | None = None) -> tuple[dict, list]:
        """``mode``'s run of model ``m``; a plan that is one mode for every bucket (``uniform``) runs with that
        mode's own hook (the mixed hook would do the same work)."""
        job_id, port = next_job()
        if mode == "plan" and uniform is not None:
            mode = uniform
        options = WorkerOptions(
            mode=mode,
            steps=args.steps,
            spec=JobSpec(job_id=job_id, workers=n),
            master_port=port,
            switch_timeout=60,
            model=m,
            bucket_cap_kb=BUCKET_KB.get(m),
            plan=str(plan_path) if mode == "plan" else None,
        )
        results = bed.run_workers(options)
        return step_times(results, args.warmup), results

    interrupts.install()  # Ctrl-C, SIGTERM, SIGHUP: KeyboardInterrupt, held while a process is being recorded
    interrupted = False
    machine_lock = one_run.hold(say)  # noqa: F841  (held while the bench runs: one Mininet run per machine)

    def validate(bed, bar) -> None:
        """Every rate: the calibration model's runs if any, then each model's costs, plan and runs."""
        for bw in rates:
            bed.net.set_bandwidth(bw)
            # the calibration model: how much longer each mode's rounds take in training than in probes
            factors = {}
            if cal:
                step, raw, _ = measure_costs(bed, cal, bw, bar)
            for mode in modes if cal else ():
                got, _ = train(bed, cal, mode)
                factors[mode] = testbed_costs.contention(step, raw[mode], got["median_ms"] * 1e-3)
                say(f"calibration {cal} {mode} at {bw:g} Mbit/s: {got['median_ms']:.1f} ms, x{factors[mode]:.2f}")
                bar.update()
            calibration[str(bw)] = factors
            for m in models:
                step, raw, raw_upper = measure_costs(bed, m, bw, bar)
                mode_set = {k: testbed_costs.scaled_mode(v, factors.get(k, 1.0)) for k, v in raw.items()}
                upper = {k: testbed_costs.scaled_mode(v, factors.get(k, 1.0)) for k, v in raw_upper.items()}
                plan = testbed_costs.choose(step, mode_set, upper=upper)
                plan_path = testbed_costs.write_plan(plan, out / f"plan-{m}-{bw:g}.json")
                timelines = {"plan": plan.timeline}
                timelines.update({f"all {x}": planner.uniform(step, mode_set, x).timeline for x in modes})
                plan_cli.draw_gantt(out / f"gantt-{m}-{bw:g}.png", timelines, f"{m} on the testbed at {bw:g} Mbit/s")
                measured, sizes = {}, [b.numel for b in step.buckets]
                for mode in run_modes:
                    one = set(plan.modes.values())
                    got, results = train(bed, m, mode, plan_path, one.pop() if len(one) == 1 else None)
                    measured[mode] = got["median_ms"]
                    predicted = (plan if mode == "plan" else planner.uniform(step, mode_set, mode)).iteration_s * 1e3
                    raw_ms = None if mode == "plan" else planner.uniform(step, raw, mode).iteration_s * 1e3
                    rank0 = min(results, key=lambda r: r["rank"])
                    cases.append(
                        {
                            "model": m,
                            "mode": mode,
                            "mbps": bw,
                            "measured_ms": got["median_ms"],
                            "measured_mean_ms": got["mean_ms"],
                            "predicted_ms": predicted,
                            "predicted_probes_only_ms": raw_ms,
                            # the last 10 steps' per-bucket aggregation times, in completion order
                            "aggregation_ms": [1e3 * x for x in rank0.get("aggregation_s", [])[-10 * len(sizes) :]],
                            "switch_ops": switch_ops(rank0, args.steps),
                            "final_acc": rank0["final_test_acc"],
                            "load": load_average(),
                        }
                    )
                    say(f"{m} {mode} at {bw:g} Mbit/s: {got['median_ms']:.1f} ms measured, {predicted:.1f} predicted")
                    bar.update()
                if "plan" in measured:
                    best = min((x for x in modes), key=lambda x: measured[x])
                    one = set(plan.modes.values())
                    mixes.append(
                        {
                            "model": m,
                            "mbps": bw,
                            "plan": plan.modes,
                            "uniform": one.pop() if len(one) == 1 else None,
                            "predicted_upper_ms": testbed_costs.upper_step_s(step, plan, upper) * 1e3,
                            "executed": min(results, key=lambda r: r["rank"]).get("bucket_modes"),
                            "plan_ms": measured["plan"],
                            "best_uniform": best,
                            "best_uniform_ms": measured[best],
                            "measured": measured,
                        }
                    )

    with Testbed(topo.with_link_params(bw=rates[0]), args.out / "bench_timeline_logs", say=say) as bed:
        bar = tqdm(total=total, desc="runs")
        try:
            validate(bed, bar)
        except KeyboardInterrupt:
            interrupted = True
            say("interrupted: stopping the network; the cases measured so far are written")
        finally:
            interrupts.ignore()  # a second Ctrl-C must not cut the cleanup short
            bar.close()
    elapsed = time.monotonic() - started
    result = {
        "workers": n,
        "steps_profiled": profiled,
        "probes": {str(k): v for k, v in probes_by_rate.items()},
        "calibration": {"model": cal, "factors": calibration},
        "cases": cases,
        "mixes": mixes,
        "steps": args.steps,
        "warmup": args.warmup,
        "elapsed_s": elapsed,
        "planner": speed,
        "interrupted": interrupted,
    }
    (args.out / "bench_timeline.json").write_text(json.dumps(result, indent=1, default=str))
    figures = {k: result[k] for k in ("workers", "steps", "warmup", "cases", "mixes", "interrupted")}
    bench_record.write(args.out, "bench_timeline", origin, json.loads(json.dumps(figures, default=str)))
    print(f"\nwrote {args.out / 'bench_timeline.json'} and {out}/ ({elapsed:.0f} s)\n")
    print(plan_cli.validation_table([c for c in cases if c["mode"] != "plan"]))
    if mixes:
        print(plan_comparison(mixes))
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
