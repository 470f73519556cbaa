"""What each part of THC buys, measured through the same switch program: the table, the transform, error
feedback, the bits, and TernGrad as a quantizer the switch can sum.

    .venv/bin/python bench/bench_ablation.py --no-tta [--rounds 5] [--workers 8,32] [--variants ...]
    sudo .venv/bin/python bench/bench_ablation.py --tta-only [--tta-variants thc,no-transform] [--bw auto]
    .venv/bin/python bench/bench_ablation.py --report        # print and plot the last results again

Each variant (VARIANTS) is one job description that changes one part of full THC, so the switch program and
the workers run it unchanged. NMSE (no root, harness.sim) on Gaussian vectors and real minibatch gradients,
with the switch's sums checked against thc's reference; time to target (root, Mininet) at the rate
`make run` picks. Writes bench/out/bench_ablation.json and .png; figures only, no assertion (they depend on
the machine and its load)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from usage.args import OneLineParser, folder, int_in

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record as bench_record  # noqa: E402
from contract.job import JobSpec  # noqa: E402
from host_agent.worker_cli import mode_job  # noqa: E402
from thc.config import THCConfig  # noqa: E402
from usage import provenance  # noqa: E402

MODEL = "cnn-digits"  # the time-to-target workload, make run's
SOURCES = ("gaussian", "cnn-digits", "cnn1d-signals")
GAUSSIAN_DIM = 2**16


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    mode: str = "thc"  # the switch mode that runs it (thc-run --modes)
    fields: dict = field(default_factory=dict)  # THCConfig fields that differ from the default codec

    def spec(self, job_id: int, workers: int, **changes) -> JobSpec:
        """The variant's job; `changes` are framing or codec fields (seed=...), as JobSpec.replace takes them."""
        job = JobSpec(job_id=job_id, workers=workers, codec=THCConfig(**self.fields)).replace(**changes)
        return mode_job(self.mode, job)


VARIANTS = {
    v.name: v
    for v in (
        Variant("thc", "full THC", fields={"error_feedback": True}),
        Variant("uniform", "uniform table", fields={"error_feedback": True, "table": "uniform"}),
        Variant("no-transform", "no transform", fields={"error_feedback": True, "transform": False}),
        Variant("no-ef", "no error feedback"),
        Variant("b3", "b = 3", fields={"error_feedback": True, "bits": 3}),
        Variant("b2", "b = 2", fields={"error_feedback": True, "bits": 2}),
        Variant("terngrad", "TernGrad via switch", mode="terngrad-switch"),
    )
}
REFERENCES = {"fix32": "FIX32 via switch", "gloo": "gloo all-reduce"}


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"NMSE variants (default {','.join(VARIANTS)})")
    p.add_argument("--workers", default="8,32", help="worker counts of the NMSE part (default 8,32)")
    p.add_argument("--rounds", type=int_in(1), default=5, help="rounds per source and worker count (default 5)")
    p.add_argument("--sources", default=",".join(SOURCES), help=f"gradient sources (default {','.join(SOURCES)})")
    p.add_argument("--seed", type=int_in(0), default=0, help="gradients and the codecs' seed (default 0)")
    part = p.add_mutually_exclusive_group()
    part.add_argument("--no-tta", action="store_true", help="the NMSE part only (no root needed)")
    part.add_argument("--tta-only", action="store_true", help="the time-to-target part only")
    part.add_argument("--report", action="store_true", help="run nothing: print and plot the saved results")
    p.add_argument("--tta-variants", default=None, help="variants trained to target (default: --variants)")
    p.add_argument(
        "--tta-reference",
        default=",".join(REFERENCES),
        help="other modes trained at the same rate (default fix32,gloo; '' for none)",
    )
    p.add_argument("--steps", type=int_in(1), default=200, help="training steps per run (default 200, as make run)")
    p.add_argument("--tta-workers", type=int_in(1), default=4, help="workers of the time-to-target star (default 4)")
    p.add_argument("--bw", default="auto", help="link rate in Mbit/s, or auto: make run's choice (default auto)")
    p.add_argument("--out", type=folder, default=REPO / "bench" / "out", help="output directory (default bench/out)")
    args = p.parse_args(argv)
    args.variants = _names(p, "--variants", args.variants, VARIANTS)
    args.tta_variants = (
        args.variants if args.tta_variants is None else _names(p, "--tta-variants", args.tta_variants, VARIANTS)
    )
    args.tta_reference = _names(p, "--tta-reference", args.tta_reference, REFERENCES)
    args.sources = _names(p, "--sources", args.sources, SOURCES)
    try:
        args.workers = [int(w) for w in args.workers.split(",") if w]
    except ValueError:
        p.error(f"--workers {args.workers!r}: worker counts, comma-separated")
    if not args.workers or not all(1 <= w <= 32 for w in args.workers):
        p.error("--workers: from 1 to 32 (the switch's bitmap)")
    return args


def _names(parser, option: str, text: str, known) -> list[str]:
    names = [n for n in text.split(",") if n]
    if unknown := [n for n in names if n not in known]:
        parser.error(f"{option}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def conditions() -> dict:
    """When and on what the figures were taken: the commit ("+changes" for a modified tree) and the load."""
    return {"commit": provenance.commit(), "load": list(os.getloadavg())}


# ---- gradients -----------------------------------------------------------------------------------


def gradient_rounds(source: str, workers: int, rounds: int, seed: int) -> list[list]:
    """`rounds` rounds of one flat float32 gradient per worker."""
    if source == "gaussian":
        from thc.gradient_sources import gaussian_rounds

        return list(gaussian_rounds(workers, GAUSSIAN_DIM, rounds, seed))
    return model_gradient_rounds(source, workers, rounds, seed)


def model_gradient_rounds(name: str, workers: int, rounds: int, seed: int, warmup: int = 30) -> list[list]:
    """Each worker's gradient on its own minibatch of workload `name`, along an SGD trajectory that steps
    on the exact average (after `warmup` single-batch steps, so that the model is in training)."""
    import torch

    from host_agent import train, workloads

    workload = workloads.get(name)
    data = workload.load()
    model = workload.build(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=workload.lr)
    gen = torch.Generator().manual_seed(seed)

    def gradient() -> torch.Tensor:
        batch = torch.randint(0, len(data.x_train), (workload.batch_size,), generator=gen)
        model.zero_grad()
        train.loss_of(model, data.x_train[batch], data.y_train[batch]).backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()

    def step(flat: torch.Tensor) -> None:
        offset = 0
        for p in model.parameters():
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        optimizer.step()

    for _ in range(warmup):
        step(gradient())
    out = []
    for _ in range(rounds):
        grads = [gradient() for _ in range(workers)]
        out.append(grads)
        step(torch.stack(grads).mean(0))
    return out


# ---- NMSE through the compiled program ----------------------------------------------------------


def program_switch(spec: JobSpec):
    """The compiled program in the software switch (native backend where it can run), with `spec`'s job."""
    from emulator.switch import SoftwareSwitch
    from harness.sim import SimJob, program_engine

    job = SimJob.plan(spec)
    path = str(REPO / "p4" / "build" / "thc.json")
    try:
        engine = SoftwareSwitch.from_json(path, backend="native")
    except Exception:  # noqa: BLE001 - no compiler: the Python engine runs the same program
        engine = SoftwareSwitch.from_json(path)
    program_engine(engine, job)
    return engine, job


def nmse_run(spec: JobSpec, rounds: list[list]) -> dict:
    """The variant's NMSE over `rounds`, every round through the program, and its bytes per coordinate.

    NMSE = ||mean_i x_i - x_hat||^2 / mean_i ||x_i||^2, the mean over rounds, and the same for the sum over all
    rounds: equal to the per-round figure for independent errors, below it where error feedback carries them
    over. Bytes: the frames a worker sent (norm round, padded requests) and received, over the coordinates."""
    import numpy as np
    import torch

    from harness.sim import attach_workers, thc_round
    from host_agent.clock import VirtualClock
    from thc import THCCompressor
    from thc.metrics import nmse

    engine, job = program_switch(spec)
    _, workers = attach_workers(engine, job, clock=VirtualClock())
    comps = [THCCompressor(job.spec.codec, worker_id=w) for w in job.worker_ids]
    per_round, drift, energy, wrong = [], None, 0.0, 0
    for t, grads in enumerate(rounds):
        preps, maxima, indices, ops = thc_round(workers, comps, grads, t)
        sums, count = ops[0].result()
        reference = comps[0].aggregate(indices)
        wrong += sum(int((np.asarray(s) != r).sum()) for s, r in zip(sums, reference))
        wrong += sum(int((np.asarray(s) != r).sum()) for op in ops[1:] for s, r in zip(op.result()[0], sums))
        estimate = comps[0].decode(preps[0], sums, count, maxima)
        per_round.append(nmse(grads, estimate))
        error = estimate.double() - torch.stack(grads).double().mean(0)
        drift = error if drift is None else drift + error
        energy += float(torch.stack(grads).double().square().sum(1).mean())
    coords = rounds[0][0].numel() * len(rounds)
    stats = workers[0].stats()
    return {
        "nmse": float(np.mean(per_round)),
        "nmse_rounds": per_round,
        "nmse_of_sum": float(drift.square().sum()) / energy,
        "sums_differing_from_reference": wrong,
        "lane_bits": spec.lane_bits,
        "up_bytes_per_coord": stats["bytes_sent"] / coords,
        "down_bytes_per_coord": stats["bytes_received"] / coords,
    }


def nmse_part(args) -> dict:
    import torch

    torch.set_num_threads(1)
    before = conditions()
    started = time.monotonic()
    rows = []
    for source in args.sources:
        for n in args.workers:
            say(f"{source}, {n} workers: making {args.rounds} rounds of gradients")
            rounds = gradient_rounds(source, n, args.rounds, args.seed)
            for name in args.variants:
                spec = VARIANTS[name].spec(1, n, seed=args.seed)
                row = {"variant": name, "source": source, "workers": n, **nmse_run(spec, rounds)}
                rows.append(row)
                say(f"  {name:13s} NMSE {row['nmse']:.3g} (of the {args.rounds}-round sum {row['nmse_of_sum']:.3g})")
    return {
        "rows": rows,
        "rounds": args.rounds,
        "gaussian_dim": GAUSSIAN_DIM,
        "elapsed_s": time.monotonic() - started,
        "before": before,
        "after": conditions(),
    }


# ---- time to target in Mininet ------------------------------------------------------------------


def link_rate(args, workers: int, say) -> tuple[float, dict | None]:
    """--bw, or make run's choice (thc-run --bw auto) from this machine's compute per step now."""
    if args.bw != "auto":
        return float(args.bw), None
    from dataclasses import asdict

    from host_agent import train, workloads
    from topologies import link_rate as rates

    parameters = train.count_parameters(workloads.get(MODEL).build(0))
    compute_ms = rates.measure_compute_ms(MODEL)
    choice = rates.choose(parameters, workers, compute_ms, rates.usable_cores(), steps=args.steps)
    say(choice.describe(workers, rates.usable_cores()))
    return choice.mbit, asdict(choice)


def tta_part(args) -> dict:
    from mininet.log import setLogLevel

    from controller.topology import Topology
    from host_agent import workloads
    from topologies import report
    from topologies.testbed import Testbed
    from topologies.workers import WorkerOptions

    setLogLevel("critical")
    before = conditions()
    started = time.monotonic()
    bw, auto = link_rate(args, args.tta_workers, say)
    topo = Topology.load(REPO / "topologies" / "star4.json").with_workers(args.tta_workers).with_link_params(bw=bw)
    runs = [(name, VARIANTS[name].mode) for name in args.tta_variants] + [(m, m) for m in args.tta_reference]
    rows = []
    with Testbed(topo, args.out / "bench_ablation_logs", say=say) as bed:
        for index, (name, mode) in enumerate(runs):
            variant = VARIANTS.get(name)
            job = (
                variant.spec(index % 250 + 1, args.tta_workers)
                if variant
                else JobSpec(index % 250 + 1, args.tta_workers)
            )
            say(f"{name} at {bw:g} Mbit/s: {mode}, {args.steps} steps" + (f" ({job.describe()})" if variant else ""))
            load = os.getloadavg()[0]
            options = WorkerOptions(
                mode=mode, steps=args.steps, model=MODEL, spec=job, master_port=29700 + index, switch_timeout=60
            )
            results = bed.train(mode, options)
            summary = report.summarize(mode, results, workloads.get(MODEL).target)
            rows.append(
                {
                    "variant": name,
                    "mode": mode,
                    "job": job.to_dict() if mode != "gloo" else None,
                    "time_to_target_s": summary.time_to_target_s,
                    "steps_to_target": summary.steps_to_target,
                    "final_metric": summary.final_metric,
                    "step_ms": summary.step_ms,
                    "sent_bytes_per_step": summary.sent_bytes_per_step,
                    "received_bytes_per_step": summary.received_bytes_per_step,
                    "load_at_start": load,
                }
            )
            tta = "not reached" if summary.time_to_target_s is None else f"{summary.time_to_target_s:.1f} s"
            say(f"  {name}: time to target {tta}, step {summary.step_ms:.1f} ms, final {summary.final_metric:.3f}")
    return {
        "rows": rows,
        "model": MODEL,
        "target": workloads.get(MODEL).target,
        "workers": args.tta_workers,
        "steps": args.steps,
        "bw_mbit": bw,
        "bw_auto": auto,
        "elapsed_s": time.monotonic() - started,
        "before": before,
        "after": conditions(),
    }


# ---- the table and the plot ---------------------------------------------------------------------


def describe(name: str) -> str:
    """b, g, table, transform, error feedback of a variant (FIX32 and gloo: their own words)."""
    if name not in VARIANTS:
        return {"fix32": "int32 fixed point", "gloo": "fp32 ring all-reduce"}[name]
    spec = VARIANTS[name].spec(1, 8)
    codec = spec.codec
    table = "(0,1,1,2) max scale" if codec.quantizer == "terngrad" else codec.table
    return (
        f"b={codec.bits} g={codec.granularity} {table}, "
        + ("RHT" if codec.transform else "no RHT")
        + (", EF" if codec.error_feedback else "")
    )


def _sci(x: float) -> str:
    return f"{x:#.2g}" if x >= 0.01 else f"{x:.1e}".replace("e-0", "e-")


def _loads(part: dict) -> str:
    """The range of the 1-minute load averages a part saw (at its start, its end and each run's start)."""
    loads = [part["before"]["load"][0], part["after"]["load"][0]] + [r.get("load_at_start", 0) for r in part["rows"]]
    loads = [x for x in loads if x]
    return f"{min(loads):.1f}–{max(loads):.1f}"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _label(name: str) -> str:
    return VARIANTS[name].label if name in VARIANTS else REFERENCES[name]


def tables(doc: dict) -> str:
    """The ablation table (wire bytes and NMSE on cnn-digits, time to target) and the NMSE per source, in
    markdown: printed by the benchmark, and docs/results.md's region (bench/results.py) from its record."""
    out = []
    nmse, tta = doc.get("nmse", {"rows": []}), doc.get("tta", {"rows": []})
    cell = {(r["variant"], r["source"], r["workers"]): r for r in nmse["rows"]}
    runs = {r["variant"]: r for r in tta["rows"]}
    workers = sorted({r["workers"] for r in nmse["rows"]})
    names = list(dict.fromkeys([r["variant"] for r in nmse["rows"] + tta["rows"]]))
    if nmse["rows"]:
        out.append(f"\nNMSE: commit {nmse['before']['commit']}, {nmse['rounds']} rounds a source, load {_loads(nmse)}")
    if tta["rows"]:
        how = "make run's --bw auto" if tta["bw_auto"] else "given"
        out.append(
            f"time to {tta['target']:.0%}: {tta['model']}, {tta['workers']} workers, {tta['bw_mbit']:g} Mbit/s "
            f"({how}), {tta['steps']} steps, commit {tta['before']['commit']}, load {_loads(tta)}"
        )
    per = " / ".join(f"{n} w." for n in workers)
    header = ["variant", "codec", "up B/coord", f"down B/coord {per}", f"NMSE cnn-digits {per}"]
    header += [f"time to {tta['target']:.0%}" if tta["rows"] else "time to target", "steps", "final acc"]
    rows = []
    for name in names:
        wire = [cell.get((name, "cnn-digits", n)) for n in workers]
        row = [_label(name), describe(name)]
        row.append(f"{wire[0]['up_bytes_per_coord']:.2f}" if wire and wire[0] else "–")
        row.append(" / ".join(f"{w['down_bytes_per_coord']:.2f}" if w else "–" for w in wire) or "–")
        row.append(" / ".join(_sci(w["nmse"]) if w else "–" for w in wire) or "–")
        run = runs.get(name)
        if run is None:
            row += ["–", "–", "–"]
        else:
            row.append("not reached" if run["time_to_target_s"] is None else f"{run['time_to_target_s']:.1f} s")
            row.append("–" if run["steps_to_target"] is None else str(run["steps_to_target"]))
            row.append(f"{run['final_metric']:.3f}")
        rows.append(row)
    out.append("")
    out.append(_markdown(header, rows))
    if not nmse["rows"]:
        return "\n".join(out)
    sources = list(dict.fromkeys(r["source"] for r in nmse["rows"]))
    out.append(f"\nNMSE per round (in brackets: of the {nmse['rounds']}-round sum), through the compiled program:\n")
    header = ["variant"] + [f"{s} {n} w." for s in sources for n in workers]
    rows = []
    for name in [n for n in names if n in VARIANTS]:
        found = [cell.get((name, s, n)) for s in sources for n in workers]
        rows.append([_label(name)] + [f"{_sci(r['nmse'])} ({_sci(r['nmse_of_sum'])})" if r else "–" for r in found])
    out.append(_markdown(header, rows))
    wrong = sum(r["sums_differing_from_reference"] for r in nmse["rows"])
    out.append(f"\nsums differing from thc's reference aggregation: {wrong}")
    return "\n".join(out)


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    nmse, tta = doc.get("nmse"), doc.get("tta")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    if nmse:
        names = list(dict.fromkeys(r["variant"] for r in nmse["rows"]))
        series = list(dict.fromkeys((r["source"], r["workers"]) for r in nmse["rows"]))
        width = 0.8 / len(series)
        cell = {(r["variant"], r["source"], r["workers"]): r for r in nmse["rows"]}
        for i, (source, n) in enumerate(series):
            found = [cell.get((name, source, n)) for name in names]
            heights = [r["nmse"] if r else np.nan for r in found]
            x = np.arange(len(names)) + (i - (len(series) - 1) / 2) * width
            sums = [r["nmse_of_sum"] if r else np.nan for r in found]
            left.plot(x, sums, "k_", markersize=8, label=f"of the {nmse['rounds']}-round sum" if i == 0 else None)
            left.bar(x, heights, width, label=f"{source}, {n} w.")
        left.set_xticks(range(len(names)), [_label(n) for n in names], rotation=20, ha="right")
        left.set(yscale="log", ylabel="NMSE per round (bars)", title="NMSE through the compiled program")
        top = max(r["nmse"] for r in nmse["rows"])
        left.set_ylim(top=top * 20)  # room for the legend above the bars
        left.legend(fontsize=7, ncol=4, loc="upper center")
        left.grid(axis="y", alpha=0.3, which="both")
    if tta:
        rows = tta["rows"]
        labels = [_label(r["variant"]) for r in rows]
        times = [r["time_to_target_s"] or 0.0 for r in rows]
        bars = right.bar(range(len(rows)), times, color=["C0" if r["variant"] in VARIANTS else "grey" for r in rows])
        for bar, r in zip(bars, rows):
            if r["time_to_target_s"] is None:
                right.text(bar.get_x() + bar.get_width() / 2, 0, "not reached", rotation=90, ha="center", va="bottom")
        right.set_xticks(range(len(rows)), labels, rotation=20, ha="right")
        right.set(ylabel="seconds", title=f"time to {tta['target']:.0%}, {tta['model']}, {tta['bw_mbit']:g} Mbit/s")
        right.grid(axis="y", alpha=0.3)
    else:
        right.text(0.5, 0.5, "time to target not measured", ha="center", transform=right.transAxes)
        right.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def say(message: str) -> None:
    print(f"bench_ablation: {message}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    path = args.out / "bench_ablation.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    measured = {}  # this run's parts: its record holds only them (the file keeps the other part's last results)
    if not args.report:
        if not args.no_tta and os.geteuid() != 0:
            print("the time-to-target part needs root (Mininet): run it with sudo, or give --no-tta")
            return 2
        args.out.mkdir(parents=True, exist_ok=True)
        origin = provenance.started(quick=args.rounds < 5 or args.steps < 200 or len(args.workers) < 2)
        if not args.tta_only:
            doc["nmse"] = measured["nmse"] = nmse_part(args)
            path.write_text(json.dumps(doc, indent=1))
        if not args.no_tta:
            doc["tta"] = measured["tta"] = tta_part(args)
            path.write_text(json.dumps(doc, indent=1))
    if not doc:
        print(f"nothing measured yet: {path} does not exist")
        return 2
    print(tables(doc))
    plot(doc, args.out / "bench_ablation.png")
    print(f"\nwrote {path} and {args.out / 'bench_ablation.png'}")
    if measured:
        bench_record.write(args.out, "bench_ablation", origin, measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
