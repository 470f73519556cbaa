"""Timeline model validation on the testbed: predicted vs measured step time per model, mode and link rate,
and the step time of a planned per-bucket mix against all-THC and all-gloo.

    sudo flock /tmp/mininet.lock .venv/bin/python bench/bench_timeline.py [--bw 50,10,5] [--steps 60]
                                                                          [--models mlp-digits,mlp2-digits]

What is measured, once, before the validated runs, and becomes the testbed's hardware profile:
  - on this machine (no Mininet): each model's step (forward, bucket ready times, optimizer) and each
    compressor's encode/decode time per size, multiplied by workers / cores (the workers share the cores);
  - on the testbed at --calibrate-bw (a rate none of the validated runs uses): thc-worker --probe rounds of
    THC, FIX32 and gloo at two sizes, compression subtracted; the lines through them give the switch's
    packets per second and round trip (THC, FIX32) and gloo's per-step latency and byte ceiling.
Then, at every --bw rate, every model trains in every mode; the prediction uses only the profile, the
rate and the locally profiled step, never the run itself. Printed: the per-case error and a last line
``median |error|: <P> %``. Files: bench/out/bench_timeline.json (thc-plan validate reads it),
bench/out/timeline/ (profiles, plans, Gantt PNGs). Figures only, no assertion: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.topology import Topology  # noqa: E402
from spec import contract  # noqa: E402
from spec.job import JobSpec  # noqa: E402
from thc import models_zoo, plan_cli, planner, profiles, profiling  # noqa: E402
from thc.timeline import INACost, StepProfile  # noqa: E402
from topologies.testbed import Testbed  # noqa: E402
from topologies.workers import WorkerOptions  # noqa: E402

MODELS = ("mlp-digits", "mlp2-digits")
BUCKET_KB = {"mlp-digits": 1.0, "mlp2-digits": 4.0}  # a few buckets each, so a plan can mix paths
CHUNK = 2048  # thc-worker's default Hadamard chunk
HEADER_BYTES = contract.FRAME_HEADER_BYTES  # Ethernet + IPv4 + UDP + the THC header
CELL_BYTES = contract.WORDS * contract.WORD_BYTES  # a request carries what one cell holds


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topo", default=str(REPO / "topologies" / "star4.json"), help="topology (default star4)")
    p.add_argument("--workers", type=int, default=None, help="workers (a star grows/shrinks; default: the file's)")
    p.add_argument("--bw", default="50,10,5", help="validated link rates in Mbit/s (default 50,10,5)")
    p.add_argument(
        "--calibrate-bw",
        type=float,
        default=1000.0,
        help="link rate of the calibration probes in Mbit/s (default 1000: links barely matter)",
    )
    p.add_argument("--models", default=",".join(MODELS), help=f"models (default {','.join(MODELS)})")
    p.add_argument("--modes", default="thc,fix32,gloo", help="uniform modes to validate (default thc,fix32,gloo)")
    p.add_argument("--steps", type=int, default=60, help="training steps per run (default 60)")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the measured mean (default 5)")
    p.add_argument("--no-plan", action="store_true", help="skip the planned-mix runs")
    p.add_argument(
        "--probe-sizes",
        default="2048,16384",
        help="calibration probe sizes, about the validated buckets' (default 2048,16384)",
    )
    p.add_argument("--probe-rounds", type=int, default=6, help="calibration rounds per size and mode (default 6)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "out", help="output folder (default bench/out)")
    p.add_argument(
        "--planner-only",
        action="store_true",
        help="only time the planner on the zoo's models (no root, no Mininet) and exit",
    )
    p.add_argument(
        "--planner-gbps",
        default="1,10,25,100",
        help="link rates in Gbit/s the planner is timed at (default 1,10,25,100)",
    )
    return p.parse_args(argv)


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


# ---- local profiling --------------------------------------------------------------------------------


def local_step(model_name: str, contention: float) -> StepProfile:
    """The model's step on this machine, scaled by the contention of workers sharing the cores."""
    import torch

    from host_agent import train

    torch.set_num_threads(1)
    hidden, layers = train.MODELS[model_name]
    model = train.make_model(hidden, 0, layers)
    data = train.load_digits_split()
    cap = int(BUCKET_KB[model_name] * 1024)
    s = profiling.measure_step(
        model,
        data.x_train[:32],
        data.y_train[:32],
        bucket_bytes=cap,
        first_bucket_bytes=cap,
        repeats=50,
        name=model_name,
    )
    return StepProfile(
        tuple(type(b)(b.index, b.numel, b.ready_s * contention) for b in s.buckets),
        s.forward_s * contention,
        s.backward_s * contention,
        s.optimizer_s * contention,
        name=model_name,
    )


def local_compression(contention: float) -> dict:
    out = {}
    for mode in profiling.PROFILED_MODES:
        enc, dec = profiling.measure_compression(mode, chunk=CHUNK)
        c = contention
        out[mode] = {
            "encode_us": enc.base_s * 1e6 * c,
            "encode_ns_per_coord": enc.per_coord_s * 1e9 * c,
            "decode_us": dec.base_s * 1e6 * c,
            "decode_ns_per_coord": dec.per_coord_s * 1e9 * c,
        }
    return out


# ---- calibration on the testbed -----------------------------------------------------------------------


def probe_seconds(bed: Testbed, mode: str, size: int, rounds: int, job: int) -> float:
    probes = bed.run_workers(
        WorkerOptions(
            mode=mode,
            steps=0,
            job=JobSpec(job_id=job, workers=len(bed.topo.workers)),
            probe_rounds=rounds,
            probe_size=size,
            master_port=29700 + job,
            switch_timeout=60,
        ),
        stall_timeout=300,
    )
    per_round = [max(float(p[f"r{k}_seconds"]) for p in probes) for k in range(1, rounds)]  # round 0: warm-up
    return statistics.median(per_round)


def calibrate(bed: Testbed, sizes: list[int], rounds: int, compression: dict, n: int, say) -> dict:
    """Switch packets/s and round trip (THC, FIX32), gloo's α and byte ceiling, from probe lines."""
    job, fits = 100, {}  # six jobs of 64 slots; the runs then take four more
    for mode in ("thc", "fix32", "gloo"):
        xs, ys = [], []
        for size in sizes:
            t = probe_seconds(bed, mode, size, rounds, job)
            job += 1
            c = compression.get(mode, {})
            comp = (c.get("encode_us", 0) + c.get("decode_us", 0)) * 1e-6 + (
                c.get("encode_ns_per_coord", 0) + c.get("decode_ns_per_coord", 0)
            ) * 1e-9 * size
            agg = max(t - comp, 1e-6)
            if mode == "gloo":
                xs.append(size * 4.0)
            else:
                norms, data = INACost(1e12, n, 1e12, 0.0, op=mode, chunk=CHUNK).packets(size)
                xs.append(norms + data)
            ys.append(agg)
            say(f"calibration {mode} {size} coordinates: {t * 1e3:.1f} ms per round, {agg * 1e3:.1f} ms aggregating")
        slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        intercept = ys[0] - slope * xs[0]
        fits[mode] = (max(slope, 1e-12), max(intercept, 0.0))
    thc_slope, thc_icpt = fits["thc"]
    fix_slope, fix_icpt = fits["fix32"]
    g_slope, g_icpt = fits["gloo"]
    return {
        "switch": {
            "packets_per_s": n / thc_slope,
            "fix32_packets_per_s": n / fix_slope,
            "rtt_us": (thc_icpt + fix_icpt) / 4 * 1e6,  # two operations (norms, data) per bucket
            "window": WorkerOptions.window,  # the window the calibration probes ran with
            "blocking": True,
            "cell_bytes": CELL_BYTES,
            "header_bytes": HEADER_BYTES,
            "chunk": CHUNK,
        },
        "ring": {
            "alpha_us": g_icpt / (2 * (n - 1)) * 1e6,
            "efficiency": 0.95,
            "max_MBps": 2 * (n - 1) / n / g_slope / 1e6,
        },
        "fits": {m: {"slope": a, "intercept_s": b} for m, (a, b) in fits.items()},
    }


# ---- runs ---------------------------------------------------------------------------------------------


def measured_step_ms(results: list[dict], warmup: int) -> float:
    times = [s["step_time"] for r in results for s in r["steps"][warmup:]]
    return 1e3 * statistics.mean(times)


def main(argv=None) -> int:
    args = parse_args(argv)
    speed = planner_speed([float(g) for g in args.planner_gbps.split(",") if g])
    if args.planner_only:
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
    sizes = [int(s) for s in args.probe_sizes.split(",")]
    topo = Topology.load(args.topo)
    if args.workers:
        topo = topo.with_workers(args.workers)
    n = len(topo.workers)
    contention = max(1.0, n / (os.cpu_count() or 1))
    out = args.out / "timeline"
    out.mkdir(parents=True, exist_ok=True)
    say = lambda message: tqdm.write(f"bench_timeline: {message}")
    started = time.monotonic()

    say(f"profiling on this machine (contention x{contention:g}: {n} workers on {os.cpu_count()} cores)")
    steps = {m: local_step(m, contention) for m in models}
    for m, s in steps.items():
        plan_cli.save_step_profile(s, out / f"{m}.json")
    compression = local_compression(contention)

    cases, mixes = [], []
    topo = topo.with_link_params(bw=args.calibrate_bw)
    with Testbed(topo, args.out / "bench_timeline_logs", say=say) as bed:
        cal = calibrate(bed, sizes, args.probe_rounds, compression, n, say)
        say(
            f"testbed: switch {cal['switch']['packets_per_s']:,.0f} THC / {cal['switch']['fix32_packets_per_s']:,.0f} "
            f"FIX32 packets/s, rtt {cal['switch']['rtt_us']:.0f} us; gloo alpha {cal['ring']['alpha_us']:.0f} us, "
            f"ceiling {cal['ring']['max_MBps']:.1f} MB/s"
        )
        base = {
            "name": f"testbed ({n} workers, software switch, Mininet)",
            "workers": n,
            "link_mbps": rates[0],
            "switch": cal["switch"],
            "ring": cal["ring"],
            "compression": compression,
        }
        job = 200
        runs = [(bw, m, mode) for bw in rates for m in models for mode in modes + ([] if args.no_plan else ["plan"])]
        bar = tqdm(total=len(runs), desc="runs", unit="run")
        for bw in rates:
            bed.net.set_bandwidth(bw)
            hw = profiles.parse_profile({**base, "link_mbps": bw}, "testbed")
            (out / f"testbed-{bw:g}.json").write_text(json.dumps({**base, "link_mbps": bw}, indent=1))
            for m in models:
                step = steps[m]
                mode_set = profiles.modes_for(hw, profiles.EXECUTABLE_MODES)
                plan = planner.best_plan(step, mode_set)
                plan_path = out / f"plan-{m}-{bw:g}.json"
                plan_path.write_text(
                    json.dumps(
                        {
                            "buckets": {str(k): v for k, v in sorted(plan.modes.items())},
                            "predicted_ms": plan.iteration_s * 1e3,
                        }
                    )
                )
                timelines = {
                    "plan": plan.timeline,
                    "all THC": planner.uniform(step, mode_set, "thc").timeline,
                    "all gloo": planner.uniform(step, mode_set, "gloo").timeline,
                }
                plan_cli.draw_gantt(out / f"gantt-{m}-{bw:g}.png", timelines, f"{m} on the testbed at {bw:g} Mbit/s")
                measured = {}
                for mode in modes + ([] if args.no_plan else ["plan"]):
                    job += 1
                    # four job ids in turn: adding one again renews it with a fresh epoch (slots are not used up)
                    options = WorkerOptions(
                        mode=mode,
                        steps=args.steps,
                        job=JobSpec(job_id=1 + job % 4, workers=len(bed.topo.workers)),
                        master_port=29800 + job,
                        switch_timeout=60,
                        model=m,
                        bucket_cap_kb=BUCKET_KB[m],
                        plan=str(plan_path) if mode == "plan" else None,
                    )
                    results = bed.run_workers(options)
                    ms = measured_step_ms(results, args.warmup)
                    measured[mode] = ms
                    if mode == "plan":
                        predicted = plan.iteration_s * 1e3
                        got = min(results, key=lambda r: r["rank"]).get("bucket_modes")
                        mixes.append({"model": m, "mbps": bw, "plan": plan.modes, "executed": got})
                    else:
                        predicted = planner.uniform(step, mode_set, mode).iteration_s * 1e3
                    cases.append(
                        {
                            "model": m,
                            "mode": mode,
                            "mbps": bw,
                            "measured_ms": ms,
                            "predicted_ms": predicted,
                            "final_acc": min(results, key=lambda r: r["rank"])["final_test_acc"],
                        }
                    )
                    say(f"{m} {mode} at {bw:g} Mbit/s: measured {ms:.1f} ms, predicted {predicted:.1f} ms")
                    bar.update()
                if "plan" in measured:
                    mixes[-1].update({f"{k}_ms": v for k, v in measured.items()})
        bar.close()
    elapsed = time.monotonic() - started
    result = {
        "workers": n,
        "calibration": cal,
        "compression": compression,
        "cases": cases,
        "mixes": mixes,
        "steps": args.steps,
        "warmup": args.warmup,
        "elapsed_s": elapsed,
        "planner": speed,
    }
    (args.out / "bench_timeline.json").write_text(json.dumps(result, indent=1, default=str))
    if mixes:
        print("\nPlanned mix vs all-THC vs all-gloo (measured ms per step; the plan's modes per bucket):")
        for x in mixes:
            print(
                f"{x['model']:12s} {x['mbps']:5g} Mbit/s  plan {x.get('plan_ms', 0):7.1f}  "
                f"THC {x.get('thc_ms', 0):7.1f}  "
                f"gloo {x.get('gloo_ms', 0):7.1f}  plan = {x['plan']}, executed {x['executed']}"
            )
    print(f"\nwrote {args.out / 'bench_timeline.json'} and {out}/ ({elapsed:.0f} s)\n")
    print(plan_cli.validation_table(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
