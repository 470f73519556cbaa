"""Time to target per model and mode at several link rates: where THC's compression starts to pay.

    sudo .venv/bin/python bench/bench_tta.py [--models cnn-digits,mlp2-digits] [--modes thc,fix32,gloo]
                                             [--bw 50,20,10] [--steps 200] [--workers 4] [--topo FILE]
    sudo .venv/bin/python bench/bench_tta.py --models cnn-digits --bw 16 \\
        --modes thc,thc-ps:dedicated1,thc-ps:colocated4,fix32,gloo   # parameter servers: star4_ps.json

Per model the star is brought up once; at every --bw rate each mode trains from the same initialisation, as
`thc-run` runs it, and the time to target comes from rank 0's evaluations. Each step time is printed beside
its link-bytes bound (the busiest link's busiest direction at the link rate), and THC's speed-ups over every
other mode. Writes bench/out/bench_tta.json, its record and bench/out/bench_tta.png (the crossover per
model). Figures only, no assertion: they depend on the machine and its load."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from usage.args import OneLineParser, folder, input_file, int_in, names_in

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record as bench_record  # noqa: E402
from contract.job import JobSpec  # noqa: E402
from controller.topology import load_for_cli  # noqa: E402
from host_agent import workloads  # noqa: E402
from thc.modes import PS_MODES, RUN_DEFAULT  # noqa: E402
from topologies import report  # noqa: E402
from usage import provenance  # noqa: E402

MODES = RUN_DEFAULT


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--models",
        default="cnn-digits,mlp2-digits",
        type=names_in(workloads.names()),
        help="comma-separated workloads (" + ", ".join(workloads.names()) + "; default cnn-digits,mlp2-digits)",
    )
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default thc,fix32,gloo)")
    p.add_argument("--bw", default="50,20,10", help="link rates in Mbit/s, comma-separated (default 50,20,10)")
    p.add_argument("--steps", type=int_in(1), default=200, help="training steps per mode (default 200)")
    p.add_argument("--workers", type=int_in(1), default=4, help="workers in the star (default 4)")
    p.add_argument(
        "--topo",
        type=input_file,
        default=None,
        help="a star topology file (default topologies/star4.json, or star4_ps.json when a mode is a ps mode)",
    )
    p.add_argument(
        "--backend",
        choices=("auto", "native", "python"),
        default="auto",
        help="software switch engine (default auto = native when it can run the program)",
    )
    p.add_argument("--window", type=int_in(1), default=256, help="requests in flight per worker (default 256)")
    p.add_argument("--out", type=folder, default=REPO / "bench" / "out", help="output directory (default bench/out)")
    p.add_argument(
        "--replot",
        type=input_file,
        nargs="+",
        metavar="JSON",
        help="train nothing: print the tables and draw the plot of earlier runs' bench_tta.json files, "
        "together (e.g. other link rates measured later; into --out)",
    )
    args = p.parse_args(argv)
    try:
        args.models = [workloads.get(m).name for m in args.models.split(",") if m]
    except workloads.UnknownModel as exc:
        p.error(str(exc))
    args.modes = [m for m in args.modes.split(",") if m]
    if unknown := [m for m in args.modes if m.partition(":")[0] not in report.MODE_LABELS]:
        p.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(report.MODE_LABELS)}")
    ps = [m for m in args.modes if m.partition(":")[0] in PS_MODES]
    args.topo = args.topo or REPO / "topologies" / ("star4_ps.json" if ps else "star4.json")
    topo = args.topology = load_for_cli(p, args.topo, args.workers)  # read once, with the options
    for mode in ps:
        try:
            topo.placement(mode.partition(":")[2] or None)
        except KeyError as exc:
            p.error(f"--modes {mode}: {exc.args[0]}")
    try:
        args.rates = sorted({float(b) for b in args.bw.split(",") if b}, reverse=True)
    except ValueError:
        p.error(f"--bw {args.bw!r}: Mbit/s numbers, comma-separated")
    if not args.rates or not all(0 < r <= 1000 for r in args.rates):
        p.error("--bw: rates in (0, 1000] Mbit/s")
    return args


def step_bound_ms(row: report.ModeSummary, bw_mbit: float) -> float:
    """The link-bytes bound of one step: the busiest direction of any link at the link rate (links are full
    duplex; a parameter server's link is counted too), else of the mean worker's link."""
    busiest = row.busiest_link_bytes_per_step or max(row.sent_bytes_per_step, row.received_bytes_per_step)
    return busiest * 8 / (bw_mbit * 1e3)


def record(model: str, bw: float, row: report.ModeSummary) -> dict:
    return {
        "model": model,
        "bw_mbit": bw,
        "mode": row.mode,
        "time_to_target_s": row.time_to_target_s,
        "steps_to_target": row.steps_to_target,
        "target": row.target,
        "metric": row.metric,
        "final_metric": row.final_metric,
        "step_ms": row.step_ms,
        "step_bound_ms": step_bound_ms(row, bw),
        "busiest_link": row.busiest_link,
        "busiest_link_bytes_per_step": row.busiest_link_bytes_per_step,
        "load_average": os.getloadavg(),  # 1, 5 and 15 minutes, when the mode ended
        "summary": asdict(row),
    }


def speedups(records: list[dict]) -> dict[tuple[str, float], dict]:
    """(model, rate) -> THC's time-to-target speed-up over every other mode that ran (None where one of the
    two did not reach the target)."""
    out = {}
    for model, bw in dict.fromkeys((r["model"], r["bw_mbit"]) for r in records):
        tta = {r["mode"]: r["time_to_target_s"] for r in records if (r["model"], r["bw_mbit"]) == (model, bw)}
        thc = tta.get("thc")
        out[(model, bw)] = {
            f"thc_vs_{base}": (tta[base] / thc if thc and tta.get(base) else None) for base in tta if base != "thc"
        }
    return out


def print_model(model: str, records: list[dict], faster: dict) -> None:
    rows = [r for r in records if r["model"] == model]
    if not rows:
        return
    first = rows[0]
    target = f"{first['target']:g} bits/char" if first["metric"] == "bpc" else f"{first['target']:.0%}"
    print(f"\n{model}: time to {target} (rank 0's evaluations); step ms beside its link-bytes bound")
    print(
        f"{'Mbit/s':>6s}  {'mode':28s} {'to target':>10s} {'steps':>6s} {'final':>7s} {'step ms':>8s} "
        f"{'bound':>7s}  busiest link B/step"
    )
    for r in rows:
        tta = "-" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.1f} s"
        steps = "-" if r["steps_to_target"] is None else str(r["steps_to_target"])
        busiest = r.get("busiest_link_bytes_per_step")
        link = "-" if busiest is None else f"{busiest:,.0f} ({r['busiest_link']})"
        print(
            f"{r['bw_mbit']:6g}  {report.label(r['mode']):28s} {tta:>10s} {steps:>6s} "
            f"{r['final_metric']:7.3f} {r['step_ms']:8.1f} {r['step_bound_ms']:7.1f}  {link}"
        )
    for (m, bw), s in faster.items():
        if m == model:
            parts = [f"{v:.2f}x over {report.label(k[7:])}" for k, v in s.items() if v is not None]
            print(f"  THC at {bw:g} Mbit/s: " + (", ".join(parts) if parts else "no speed-up to report"))


def plot(path: Path, models: list[str], faster: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        rates = sorted(bw for m, bw in faster if m == model)
        keys = dict.fromkeys(key for bw in rates for key in faster[(model, bw)])
        for key in keys:
            points = [(bw, faster[(model, bw)][key]) for bw in rates if faster[(model, bw)].get(key) is not None]
            if points:
                ax.plot(*zip(*points), marker="o", label=f"THC via switch over {report.label(key[7:])}")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set(xscale="log", xlabel="link rate (Mbit/s)", ylabel="time-to-target speed-up (x)", title=model)
        ax.set_xticks(rates, [f"{r:g}" for r in rates])  # the measured rates, not powers of ten
        ax.minorticks_off()
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no mode pair reached the target", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report_all(records: list[dict], models: list[str], out: Path) -> None:
    """The tables and the crossover plot of ``records``."""
    faster = speedups(records)
    for model in models:
        print_model(model, records, faster)
    plot(out / "bench_tta.png", models, faster)


# what --replot reads of each run: field -> (its types, whether it may be null)
RUN_FIELDS = {
    "model": ((str,), False),
    "mode": ((str,), False),
    "metric": ((str,), False),
    "target": ((int, float), False),
    "bw_mbit": ((int, float), False),
    "final_metric": ((int, float), False),
    "step_ms": ((int, float), False),
    "step_bound_ms": ((int, float), False),
    "time_to_target_s": ((int, float), True),
    "steps_to_target": ((int,), True),
    "busiest_link_bytes_per_step": ((int, float), True),
}


def replot_runs(path: str) -> list[dict]:
    """The runs of an earlier bench_tta.json, each field --replot reads checked; ValueError says which."""
    try:
        runs = json.loads(Path(path).read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a bench_tta.json a run wrote ({type(exc).__name__}: {exc})") from None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ValueError(f"{path}: 'runs' must be a list of objects, as a run writes it")
    for i, run in enumerate(runs):
        for name, (types, nullable) in RUN_FIELDS.items():
            value = run.get(name)
            ok = (value is None and nullable) or (isinstance(value, types) and not isinstance(value, bool))
            if ok and isinstance(value, (int, float)) and not (math.isfinite(value) and value >= 0):
                ok = False
            if not ok:
                raise ValueError(f"{path}: runs[{i}].{name} = {value!r}: not what a run writes")
        if run["bw_mbit"] <= 0 or (run.get("busiest_link_bytes_per_step") is not None and "busiest_link" not in run):
            raise ValueError(f"{path}: runs[{i}]: not what a run writes (bw_mbit, busiest_link)")
    return runs


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.replot is not None:
        try:
            records = [r for path in args.replot for r in replot_runs(path)]
        except ValueError as exc:
            print(f"bench_tta --replot: {exc}", file=sys.stderr)
            return 2
        records.sort(key=lambda r: (r["model"], -r["bw_mbit"]))
        args.out.mkdir(parents=True, exist_ok=True)
        report_all(records, list(dict.fromkeys(r["model"] for r in records)), args.out)
        print(f"\nwrote {args.out / 'bench_tta.png'}")
        return 0
    if os.geteuid() != 0:
        print("bench_tta needs root (Mininet network namespaces): sudo .venv/bin/python bench/bench_tta.py")
        return 2
    from mininet.log import setLogLevel

    from topologies import one_run
    from topologies.testbed import Testbed
    from topologies.workers import WorkerOptions

    setLogLevel("critical")
    origin = provenance.started(quick=args.steps < 200)
    topo = args.topology.with_link_params(bw=args.rates[0])
    args.out.mkdir(parents=True, exist_ok=True)
    say = lambda message: print(f"bench_tta: {message}", flush=True)
    records: list[dict] = []
    machine_lock = one_run.hold(say)  # noqa: F841  (held while the bench runs: one Mininet run per machine)
    started = time.monotonic()
    run = 0
    for model in args.models:
        with Testbed(topo, args.out / "bench_tta_logs" / model, switch_backend=args.backend, say=say) as bed:
            for bw in args.rates:
                bed.net.set_bandwidth(bw)
                for mode in args.modes:
                    run += 1
                    say(f"{model} at {bw:g} Mbit/s: {mode}, {args.steps} steps")
                    spec = JobSpec(job_id=run % 250 + 1, workers=len(topo.workers), window=args.window)
                    options = WorkerOptions(
                        mode=mode,
                        steps=args.steps,
                        model=model,
                        spec=spec,
                        master_port=29600 + run % 1000,
                        switch_timeout=60,
                    )
                    results = bed.train(mode, options)
                    row = report.summarize(mode, results, workloads.get(model).target, busiest=bed.last_busiest)
                    records.append(record(model, bw, row))
                    tta = "not reached" if row.time_to_target_s is None else f"{row.time_to_target_s:.1f} s"
                    say(f"  {mode}: time to target {tta}, step {row.step_ms:.1f} ms")
    elapsed = time.monotonic() - started
    faster = speedups(records)
    report_all(records, args.models, args.out)
    document = {
        "topology": str(args.topo),
        "workers": args.workers,
        "steps": args.steps,
        "rates_mbit": args.rates,
        "modes": args.modes,
        "runs": records,
        "speedups": [{"model": m, "bw_mbit": bw, **s} for (m, bw), s in faster.items()],
        "elapsed_s": elapsed,
    }
    (args.out / "bench_tta.json").write_text(json.dumps(document, indent=1))
    runs = [{k: v for k, v in r.items() if k != "summary"} for r in records]  # the table's columns, not the log
    figures = {"workers": args.workers, "steps": args.steps, "runs": runs, "speedups": document["speedups"]}
    bench_record.write(args.out, "bench_tta", origin, figures)
    print(f"\nwrote {args.out / 'bench_tta.json'} and {args.out / 'bench_tta.png'} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
