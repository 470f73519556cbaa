"""`thc-plan`: predict a training step's time with the timeline model, plan per-bucket compression, and
project THC in-network aggregation to other clusters.

    thc-plan project --preset tofino --models resnet50,vgg16,bert-base --gbps 10,25,100
    thc-plan plan --preset tofino --model bert-base --gbps 25 --png plan.png --save plan.json
    thc-plan plan --profile bench/out/timeline/testbed-10.json --step-profile bench/out/timeline/mlp2-digits.json
    thc-plan validate --results bench/out/bench_timeline.json

Errors are one line on stderr (``thc-plan: error: ...``) and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

import planner
from thc.modes import FIX32, FP16, GLOO, THC
from usage import provenance
from usage.args import OneLineParser, input_file, input_path, int_in, names_in, output_file, positive_number

from . import models_zoo, profiles
from .timeline import Bucket, StepProfile, Timeline

__all__ = ["main", "step_profile_for", "load_step_profile", "save_step_profile", "draw_gantt"]


class UsageError(Exception):
    pass


def step_profile_for(model: str, hw: profiles.HardwareProfile) -> StepProfile:
    """A zoo model's step on the profile's GPU: FLOPs at gpu_tflops × efficiency, or its layer trace."""
    c = hw.compute
    rate = float(c.get("gpu_tflops", 15.7)) * 1e12 * float(c.get("efficiency", 0.45))
    layer_s = {k: v * 1e-3 for k, v in c.get("layer_backward_ms", {}).items()}
    try:
        return models_zoo.flop_profile(
            models_zoo.build(model),
            int(c.get("batch_size", 32)),
            rate,
            optimizer_s=float(c.get("optimizer_ms", 0)) * 1e-3,
            layer_backward_s=layer_s,
            name=model,
        )
    except ValueError as exc:
        raise profiles.ProfileError(f"{hw.name}: field 'compute.layer_backward_ms': {exc}") from None


def save_step_profile(profile: StepProfile, path: Path) -> None:
    path.write_text(
        json.dumps(
            {
                "name": profile.name,
                "forward_ms": profile.forward_s * 1e3,
                "backward_ms": profile.backward_s * 1e3,
                "optimizer_ms": profile.optimizer_s * 1e3,
                "buckets": [{"index": b.index, "numel": b.numel, "ready_ms": b.ready_s * 1e3} for b in profile.buckets],
            },
            indent=1,
        )
    )


def load_step_profile(path: Path) -> StepProfile:
    """A measured step (the bench writes them): one-line ProfileError naming a bad field."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise profiles.ProfileError(f"{path}: cannot read the step profile ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise profiles.ProfileError(f"{path}: not JSON at line {exc.lineno}: {exc.msg}") from None
    except UnicodeDecodeError:
        raise profiles.ProfileError(f"{path}: not UTF-8 text (the step profile is JSON)") from None
    if not isinstance(data, dict):
        raise profiles.ProfileError(f"{path}: expected a JSON object with forward_ms, backward_ms and buckets")
    for key in ("forward_ms", "backward_ms", "buckets"):
        if key not in data:
            raise profiles.ProfileError(f"{path}: field '{key}' is missing")
    for key in ("forward_ms", "backward_ms", "optimizer_ms"):
        v = data.get(key, 0.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < math.inf:
            raise profiles.ProfileError(f"{path}: field '{key}' must be a number >= 0, got {json.dumps(v)}")
    if not isinstance(data["buckets"], list) or not data["buckets"]:
        raise profiles.ProfileError(f"{path}: field 'buckets' must be a non-empty list of buckets")
    buckets = []
    for i, b in enumerate(data["buckets"]):
        for key in ("index", "numel", "ready_ms"):
            v = b.get(key) if isinstance(b, dict) else None
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise profiles.ProfileError(
                    f"{path}: field 'buckets[{i}].{key}' must be a number >= 0, got {json.dumps(v)}"
                )
        buckets.append(Bucket(int(b["index"]), int(b["numel"]), b["ready_ms"] * 1e-3))
    return StepProfile(
        tuple(buckets),
        data["forward_ms"] * 1e-3,
        data["backward_ms"] * 1e-3,
        data.get("optimizer_ms", 0.0) * 1e-3,
        name=data.get("name", str(path)),
    )


# ---- the Gantt chart -----------------------------------------------------------------------------------

LANES = ("compute", "encode", "network", "decode")
COLOURS = {
    THC: "tab:green",
    FIX32: "tab:orange",
    GLOO: "tab:blue",
    FP16: "tab:cyan",
    "topk-allgather": "tab:purple",
    "forward": "0.55",
    "backward": "0.75",
    "optimizer": "0.4",
}


def draw_gantt(path: Path, timelines: dict[str, Timeline], title: str) -> None:
    """One panel per strategy: lanes compute / encode / network / decode, coloured by mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(timelines), 1, figsize=(11, 1.6 + 1.3 * len(timelines)), sharex=True, squeeze=False)
    end = max(t.iteration_s for t in timelines.values()) * 1e3
    for ax, (label, tl) in zip(axes[:, 0], timelines.items()):
        for seg in tl.segments:
            key = seg.what.split(" ")[-1]
            y = LANES.index(seg.lane)
            ax.barh(
                y,
                (seg.end_s - seg.start_s) * 1e3,
                left=seg.start_s * 1e3,
                height=0.7,
                color=COLOURS.get(key, "0.5"),
                edgecolor="black",
                linewidth=0.3,
            )
        ax.set_yticks(range(len(LANES)), LANES)
        ax.invert_yaxis()
        ax.axvline(tl.iteration_s * 1e3, color="red", lw=1)
        ax.set_title(f"{label}: {tl.iteration_s * 1e3:.1f} ms", fontsize=9, loc="left")
        ax.set_xlim(0, end * 1.02)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms since the step began")
    used = {s.what.split(" ")[-1] for tl in timelines.values() for s in tl.segments}
    handles = [Patch(color=c, label=k) for k, c in COLOURS.items() if k in used]
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize=8)
    fig.suptitle(title, fontsize=10, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- subcommands ----------------------------------------------------------------------------------------


def _check_outputs(args) -> None:
    """Every file the command will write names a file in an existing folder: checked before any work."""
    for option in ("json", "png", "save"):
        path = getattr(args, option, None)
        if path is not None and (Path(path).is_dir() or not Path(path).parent.is_dir()):
            raise UsageError(f"--{option} {path}: name a file in an existing folder")


def _hardware(args) -> profiles.HardwareProfile:
    hw = profiles.load_profile(args.profile) if args.profile else profiles.preset(args.preset)
    if getattr(args, "workers", None) is not None:
        if args.workers < 1:
            raise UsageError(f"--workers {args.workers}: give 1 or more workers")
        hw = hw.with_link(hw.link_bps, args.workers)
    if getattr(args, "gpu_tflops", None) is not None:
        if not 0 < args.gpu_tflops < math.inf:
            raise UsageError(f"--gpu-tflops {args.gpu_tflops:g}: give a rate > 0")
        name = f"{hw.name}, GPU at {args.gpu_tflops:g} TFLOPS peak"
        hw = dataclasses.replace(hw, name=name, compute={**hw.compute, "gpu_tflops": args.gpu_tflops})
    return hw


def _rates(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        rates = [float(x) for x in text.split(",") if x]
    except ValueError:
        raise UsageError(f"--gbps {text!r}: give link rates in Gbit/s separated by commas, e.g. 10,25,100") from None
    if not rates or min(rates) <= 0:
        raise UsageError(f"--gbps {text!r}: every rate must be > 0")
    return rates


def _modes(text: str) -> list[str]:
    names = [m for m in text.split(",") if m]
    if not names:
        raise UsageError("--modes: give at least one mode")
    return names


def cmd_project(args) -> int:
    started = provenance.started(args.argv)
    base = _hardware(args)
    rates = _rates(args.gbps) or [base.link_bps / 1e9]
    models = [m for m in args.models.split(",") if m]
    rows = []
    print(f"{base.name}: {base.workers} workers; iteration ms (speedup over ring all-reduce fp32)")
    print(
        f"{'model':10s} {'Gbit/s':>6s} {'compute':>8s} {'ring fp32':>10s} {'FIX32-INA':>15s} {'THC-INA':>15s} "
        f"{'plan':>15s}  plan's modes"
    )
    for model in models:
        for gbps in rates:
            hw = base.with_link(gbps * 1e9)
            step = step_profile_for(model, hw)
            modes = profiles.modes_for(hw, profiles.EXECUTABLE_MODES)
            ring = planner.uniform(step, modes, GLOO).iteration_s
            fix = planner.uniform(step, modes, FIX32).iteration_s
            thc = planner.uniform(step, modes, THC).iteration_s
            plan = planner.best_plan(step, modes)
            rows.append(
                {
                    "model": model,
                    "gbps": gbps,
                    "workers": hw.workers,
                    "compute_ms": step.compute_s * 1e3,
                    "ring_fp32_ms": ring * 1e3,
                    "fix32_ina_ms": fix * 1e3,
                    "thc_ina_ms": thc * 1e3,
                    "plan_ms": plan.iteration_s * 1e3,
                    "plan_modes": plan.counts(),
                    "thc_vs_ring": ring / thc,
                    "thc_vs_fix32": fix / thc,
                    "plan_search_ms": plan.search_s * 1e3,
                }
            )
            cell = lambda t: f"{t * 1e3:7.1f} ({ring / t:4.2f}x)"
            print(
                f"{model:10s} {gbps:6g} {step.compute_s * 1e3:8.1f} {ring * 1e3:10.1f} {cell(fix):>15s} "
                f"{cell(thc):>15s} {cell(plan.iteration_s):>15s}  "
                + ", ".join(f"{k} {v}" for k, v in sorted(plan.counts().items()))
            )
    headline = {}
    if args.headline:
        print(
            f"\nWhere the model reproduces THC's headline ({HEADLINE[0]:.2f}-{HEADLINE[1]:.2f}x time to accuracy) on "
            f"{base.name}, {base.workers} workers:"
        )
        for model in models:
            headline[model] = headline_rates(model, base)
            print(
                f"{model:10s} over ring fp32: {_band(headline[model]['ring'])}; over FIX32-INA: "
                f"{_band(headline[model][FIX32])}"
            )
    if args.json:  # a record (bench/record.py's form), so that `make results RECORDS=FILE` can keep it
        figures = {"profile": base.to_dict(), "rows": rows, "headline": headline, "headline_band": HEADLINE}
        record = {"benchmark": "thc_plan_project", **provenance.finished(started), "figures": figures}
        Path(args.json).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    return 0


HEADLINE = (1.40, 1.47)  # THC's time to accuracy over the state of the art with in-network aggregation (NSDI'24)


def speedups(step: StepProfile, hw: profiles.HardwareProfile) -> dict[str, float]:
    """THC-INA's predicted step speed-up over ring fp32 and over FIX32-INA (uncompressed INA) on ``hw``."""
    modes = profiles.modes_for(hw, (GLOO, FIX32, THC))
    t = {m: planner.uniform(step, modes, m).iteration_s for m in modes}
    return {"ring": t[GLOO] / t[THC], FIX32: t[FIX32] / t[THC]}


def headline_rates(model: str, base: profiles.HardwareProfile, points: int = 400) -> dict[str, list[float]]:
    """Per baseline, the link rates (Gbit/s, a log grid 1..400) at which THC's predicted speed-up is within
    the paper's 1.40-1.47x (the step's speed-up stands for time to accuracy: same accuracy per step)."""
    step = step_profile_for(model, base)  # the compute does not depend on the link
    grid = [10 ** (k * math.log10(400) / (points - 1)) for k in range(points)]
    out: dict[str, list[float]] = {"ring": [], FIX32: []}
    for gbps in grid:
        for base_name, x in speedups(step, base.with_link(gbps * 1e9)).items():
            if HEADLINE[0] <= x <= HEADLINE[1]:
                out[base_name].append(gbps)
    return out


def _band(rates: list[float]) -> str:
    return f"{min(rates):.3g}-{max(rates):.3g} Gbit/s" if rates else "at no rate in 1-400 Gbit/s"


def cmd_plan(args) -> int:
    hw = _hardware(args)
    rates = _rates(args.gbps)
    if len(rates) > 1:
        raise UsageError("plan takes one --gbps rate")
    if rates:
        hw = hw.with_link(rates[0] * 1e9)
    if (args.model is None) == (args.step_profile is None):
        raise UsageError("give one of --model NAME (a shape-only model) and --step-profile FILE (a measured step)")
    step = load_step_profile(args.step_profile) if args.step_profile else step_profile_for(args.model, hw)
    names = _modes(args.modes)
    modes = profiles.modes_for(hw, names)
    baseline = args.baseline
    if baseline not in modes:
        raise UsageError(f"--baseline {baseline!r} is not one of --modes {','.join(names)}")
    plan = planner.best_plan(step, modes)
    strategies = {"plan": plan.timeline}
    if THC in modes:
        strategies["all THC"] = planner.uniform(step, modes, THC).timeline
    strategies[f"all {baseline}"] = planner.uniform(step, modes, baseline).timeline
    print(
        f"{step.name or 'step'} on {hw.name}: {hw.workers} workers, {hw.link_bps / 1e9:g} Gbit/s; "
        f"{len(step.buckets)} buckets, {step.parameters:,} parameters; compute {step.compute_s * 1e3:.2f} ms"
    )
    print(f"{'bucket':>6s} {'coords':>11s} {'ready ms':>9s}  mode")
    for b in sorted(step.buckets, key=lambda b: b.index):
        print(f"{b.index:6d} {b.numel:11,d} {b.ready_s * 1e3:9.2f}  {plan.modes[b.index]}")
    for label, tl in strategies.items():
        print(f"predicted step, {label:14s}: {tl.iteration_s * 1e3:9.2f} ms")
    print(
        f"search: {plan.evaluations} partial timelines in {plan.search_s * 1e3:.1f} ms"
        + ("" if plan.exact else " (front capped: the plan may not be the best)")
    )
    if args.save:
        Path(args.save).write_text(
            json.dumps(
                {
                    "buckets": {str(k): v for k, v in sorted(plan.modes.items())},
                    "predicted_ms": plan.iteration_s * 1e3,
                    "profile": hw.name,
                },
                indent=1,
            )
        )
        print(f"wrote {args.save} (thc-worker --mode plan --plan {args.save})")
    if args.png:
        draw_gantt(Path(args.png), strategies, f"{step.name or 'step'}: {hw.name}, {hw.link_bps / 1e9:g} Gbit/s")
        print(f"wrote {args.png}")
    return 0


def cmd_validate(args) -> int:
    try:
        data = json.loads(Path(args.results).read_text())
    except OSError as exc:
        raise UsageError(f"{args.results}: {exc.strerror}; run bench/bench_timeline.py first (it writes it)") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{args.results}: not JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{args.results}: not UTF-8 text (bench/bench_timeline.py writes JSON)") from None
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, list):
        raise UsageError(f'{args.results}: expected an object {{"cases": [...]}} as bench/bench_timeline.py writes')
    for i, case in enumerate(cases):
        problem = _case_problem(case)
        if problem:
            raise UsageError(f"{args.results}: cases[{i}]: {problem}")
    print(validation_table(cases))
    return 0


NUMBER = (int, float)
CASE_FIELDS = {"model": str, "mode": str, "mbps": NUMBER, "measured_ms": NUMBER, "predicted_ms": NUMBER}


def _case_problem(case) -> str | None:
    """What is wrong with one validation case (None: nothing): its fields, their types, a measured time > 0."""
    if not isinstance(case, dict):
        return f"expected an object with {', '.join(CASE_FIELDS)}"
    for name, kind in CASE_FIELDS.items():
        value = case.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"field '{name}' is missing or not a {'string' if kind is str else 'number'}"
        if kind is not str and not (value >= 0 and math.isfinite(value)):
            return f"field '{name}' is {value}: must be a finite number >= 0"
    if case["measured_ms"] == 0:
        return "field 'measured_ms' is 0: a measured step takes time"
    return None


def validation_table(cases: list[dict]) -> str:
    """Predicted vs measured step time per case, and a last line ``median |error|: <P> %``."""
    if not cases:
        return "no cases\nmedian |error|: n/a %"
    lines = [f"{'model':12s} {'mode':10s} {'Mbit/s':>7s} {'measured ms':>12s} {'predicted ms':>13s} {'error':>8s}"]
    errors = []
    for c in cases:
        err = (c["predicted_ms"] - c["measured_ms"]) / c["measured_ms"] * 100
        errors.append(abs(err))
        lines.append(
            f"{c['model']:12s} {c['mode']:10s} {c['mbps']:7g} {c['measured_ms']:12.2f} "
            f"{c['predicted_ms']:13.2f} {err:+7.1f}%"
        )
    worst = max(range(len(cases)), key=lambda i: errors[i])
    w = cases[worst]
    lines.append(
        f"worst |error|: {errors[worst]:.1f} % ({w['model']} {w['mode']} at {w['mbps']:g} Mbit/s); cases beyond "
        f"20 %: {sum(e > 20 for e in errors)} of {len(errors)}"
    )
    lines.append(f"median |error|: {statistics.median(errors):.1f} %")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="thc-plan",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Modes: " + ", ".join(f"{k} = {v}" for k, v in profiles.MODE_LABELS.items()),
    )
    sub = p.add_subparsers(dest="command", required=True)

    def hardware(sp):
        g = sp.add_mutually_exclusive_group()
        g.add_argument(
            "--profile",
            type=input_file,
            metavar="FILE.json",
            help="hardware profile file (format: planner/profiles.py)",
        )
        g.add_argument(
            "--preset",
            default="tofino",
            choices=sorted(profiles.PRESETS),
            help="built-in hardware profile when no --profile (default tofino: 8 x V100, 100 Gbit/s)",
        )
        sp.add_argument("--workers", type=int_in(1), help="override the profile's number of workers")
        sp.add_argument(
            "--gpu-tflops",
            type=positive_number("TFLOPS"),
            metavar="T",
            help="override the profile's peak GPU rate (TFLOPS; the profile's efficiency still applies)",
        )

    pr = sub.add_parser("project", help="iteration time and speedup of THC-INA, FIX32-INA and ring fp32 per model")
    hardware(pr)
    pr.add_argument(
        "--models",
        default="resnet50,vgg16,bert-base",
        type=names_in(models_zoo.MODELS),
        help=f"comma-separated shape-only models (default resnet50,vgg16,bert-base; "
        f"known: {', '.join(models_zoo.MODELS)})",
    )
    pr.add_argument("--gbps", help="link rates in Gbit/s, comma-separated (default: the profile's)")
    pr.add_argument(
        "--json",
        type=output_file,
        metavar="FILE",
        help="also write the rows as a record with the command, commit, date and load (make results keeps it)",
    )
    pr.add_argument(
        "--headline",
        action="store_true",
        help="also find the link rates (1-400 Gbit/s) at which THC-INA's predicted speed-up over ring fp32 "
        "and over FIX32-INA is the paper's 1.40-1.47x",
    )
    pr.set_defaults(func=cmd_project)

    pl = sub.add_parser(
        "plan", help="per-bucket plan, its predicted time against all-THC and all-uncompressed, and a Gantt chart"
    )
    hardware(pl)
    pl.add_argument("--model", help=f"shape-only model ({', '.join(models_zoo.MODELS)})")
    pl.add_argument(
        "--step-profile",
        type=input_path,
        metavar="FILE.json",
        help="a measured step instead (bucket sizes, ready times; bench/bench_timeline.py writes them)",
    )
    pl.add_argument("--gbps", help="link rate in Gbit/s (default: the profile's)")
    pl.add_argument(
        "--modes",
        default=",".join(profiles.EXECUTABLE_MODES),
        type=names_in(profiles.EXECUTABLE_MODES),
        help=f"modes to choose from (default {','.join(profiles.EXECUTABLE_MODES)})",
    )
    pl.add_argument(
        "--baseline",
        default=GLOO,
        help=f"the uncompressed mode the search starts from and compares with (default {GLOO})",
    )
    pl.add_argument(
        "--png",
        type=output_file,
        metavar="FILE.png",
        help="draw the step's timeline for the plan, all-THC, all-baseline",
    )
    pl.add_argument(
        "--save", type=output_file, metavar="FILE.json", help="write the plan for thc-worker --mode plan --plan FILE"
    )
    pl.set_defaults(func=cmd_plan)

    va = sub.add_parser("validate", help="predicted vs measured step times of testbed runs (bench/bench_timeline.py)")
    va.add_argument(
        "--results",
        default="bench/out/bench_timeline.json",
        help="the benchmark's results (default bench/out/bench_timeline.json)",
    )
    va.set_defaults(func=cmd_validate)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    args.argv = None if argv is None else ["thc-plan", *map(str, argv)]  # the command a record names
    try:
        _check_outputs(args)
        return args.func(args)
    except (UsageError, profiles.ProfileError, ValueError) as exc:
        print(f"thc-plan: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
