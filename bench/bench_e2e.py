"""End-to-end benchmark: THC vs uncompressed in-network aggregation (FIX32) vs gloo all-reduce, on one
emulated topology with bandwidth-limited links.

    sudo .venv/bin/python bench/bench_e2e.py [--bw 50,10,5] [--workers 4] [--steps 150] [--target emulator]
                                             [--loss 0,1,5]

On one network, brought up once: aggregation rounds (thc-worker --probe) at every --bw rate, each time beside
its link-bytes bound (the busiest worker link's busiest direction at the link rate), so a reader sees how far
a mode is from what the links allow; then digits training at the first rate, once per --loss, with how the
losses were recovered. Writes bench/out/bench_e2e.json and .png; figures only, no assertion (they depend on
the machine and its load)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

from usage.args import (
    OneLineParser,
    folder,
    fraction,
    input_file,
    int_in,
    listed,
    names_in,
    non_negative_number,
    number_in,
    positive_number,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record as bench_record  # noqa: E402
from contract.job import DEFAULT_WINDOW, JobSpec  # noqa: E402
from controller.topology import Topology  # noqa: E402
from thc.modes import MODES as ALL_MODES  # noqa: E402
from thc.modes import PS_MODES, RUN_DEFAULT  # noqa: E402
from topologies import (  # noqa: E402
    one_run,  # noqa: E402
    report,
)
from topologies.targets import add_target_option  # noqa: E402
from topologies.testbed import Testbed  # noqa: E402
from topologies.workers import WorkerOptions, add_codec_option  # noqa: E402
from usage import provenance  # noqa: E402

MODES = RUN_DEFAULT


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--topo",
        type=input_file,
        default=str(REPO / "topologies" / "star4.json"),
        help="topology file (default topologies/star4.json)",
    )
    p.add_argument(
        "--workers", type=int_in(1), default=None, help="workers (a star grows/shrinks; default: the file's)"
    )
    p.add_argument(
        "--backend",
        choices=("auto", "native", "python"),
        default="auto",
        help="software switch engine (target emulator; default auto = native when it can run the program)",
    )
    add_target_option(p)
    p.add_argument(
        "--bw",
        type=listed(positive_number("Mbit/s")),
        default="50,10,5",
        help="link rates in Mbit/s, comma-separated (default 50,10,5)",
    )
    p.add_argument(
        "--loss",
        type=listed(number_in(0, 100, "a percentage", below_hi=True)),
        default="0",
        help="percent loss on every link, per direction; comma-separated for one training run per "
        "rate, e.g. 0,1,5 (default 0)",
    )
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        type=names_in(ALL_MODES, placed=PS_MODES),
        help=f"modes, comma-separated (default {','.join(MODES)})",
    )
    p.add_argument(
        "--window",
        type=int_in(1),
        default=DEFAULT_WINDOW,
        help=f"requests in flight per worker (the job's window; default {DEFAULT_WINDOW})",
    )
    p.add_argument(
        "--coalesce",
        type=non_negative_number("seconds"),
        default=WorkerOptions.coalesce,
        help=f"thc-worker --coalesce (default {WorkerOptions.coalesce}; 0: take every batch of results at once)",
    )
    p.add_argument("--size", type=int_in(1), default=16384, help="coordinates per aggregation round (default 16384)")
    p.add_argument(
        "--rounds",
        type=int_in(0),
        default=5,
        help="timed aggregation rounds per mode (default 5; 0 skips the aggregation part)",
    )
    p.add_argument(
        "--steps", type=int_in(0), default=150, help="training steps per mode (default 150; 0 skips training)"
    )
    p.add_argument(
        "--target-acc",
        type=fraction("an accuracy", "0.9"),
        default=0.9,
        help="test accuracy for the time-to-accuracy column (default 0.9)",
    )
    add_codec_option(p)
    p.add_argument(
        "--out", type=folder, default=REPO / "bench" / "out", help="where JSON and plots go (default bench/out)"
    )
    return p.parse_args(argv)


def switch_cpu_s(bed: Testbed) -> float:
    """CPU seconds (user + system, all threads) the switch processes have used so far."""
    total = 0.0
    for node in bed.net.net.switches:
        process = getattr(node, "process", None)
        if process is None or process.poll() is not None:
            continue
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def aggregation_figures(
    bed: Testbed,
    mode: str,
    size: int,
    rounds: int,
    job_id: int,
    port: int,
    bw: float,
    window: int,
    coalesce: float,
    codec: str = "native",
) -> dict:
    marks = {}  # the switch's CPU when every worker has started (before the barrier) and at the last round

    def on_event(worker, event):
        kind = event.get("event")
        if kind == "start":
            marks["started"] = marks.get("started", 0) + 1
            if marks["started"] == len(bed.topo.workers):
                marks["first"] = switch_cpu_s(bed)
        elif kind == "step" and event.get("step") == rounds:
            marks["last"] = switch_cpu_s(bed)

    probes = bed.run_workers(
        WorkerOptions(
            mode=mode,
            steps=0,
            spec=(spec := JobSpec(job_id=job_id, workers=len(bed.topo.workers), window=window)),
            probe_rounds=rounds,
            probe_size=size,
            master_port=port,
            switch_timeout=60,
            coalesce=coalesce,
            codec=codec,
        ),
        on_event=on_event,
        stall_timeout=300,
    )
    switch_cpu = marks.get("last", float("nan")) - marks.get("first", float("nan"))  # barrier + the rounds
    # a round ends for everyone when the last worker has its result: the slowest worker's time counts
    per_round = [max(float(p[f"r{k}_seconds"]) for p in probes) for k in range(rounds)]
    seconds = statistics.median(per_round)
    stats = [json.loads(str(p["stats"])) for p in probes] if "stats" in probes[0].files else []
    timed = [k for k in range(rounds) if f"r{k}_phases" in probes[0].files]
    phases = [[json.loads(str(p[f"r{k}_phases"])) for p in probes] for k in timed]
    retx = sum(s["retransmissions"] for s in stats)
    cpu = [json.loads(str(p["cpu"])) for p in probes] if "cpu" in probes[0].files else []
    if cpu:  # per round: the machine's busy CPU (all cores, from rank 0's view) and the workers' own
        per_round_cpu = {
            "machine_busy_ms": cpu[0]["machine_busy_s"] / rounds * 1e3,
            "machine_total_ms": cpu[0]["machine_total_s"] / rounds * 1e3,
            "workers_ms": sum(c["process_s"] for c in cpu) / rounds * 1e3,
            "wall_ms": cpu[0]["wall_s"] / rounds * 1e3,
            "switch_ms": switch_cpu / rounds * 1e3,  # from the last worker's start to the last round's end
            "sleeps_per_worker": statistics.mean(c.get("sleeps", float("nan")) for c in cpu) / rounds,
        }
    else:
        per_round_cpu = {}
    wire = [json.loads(str(p["wire"])) for p in probes]
    return {
        "mode": mode,
        "bw_mbit": bw,
        "coordinates": size,
        "rounds": rounds,
        "seconds_per_round": per_round,
        "median_s": seconds,
        "goodput_coords_s": size / seconds,
        "retransmissions": retx,
        "sent_bytes_per_round": statistics.mean(w["tx_bytes"] for w in wire) / rounds,
        # what a worker's round must send at least: its indices (THC, b bits each) or int32 values (FIX32)
        "payload_bytes_per_round": {"thc": size * spec.codec.bits / 8, "fix32": size * 4}.get(mode),
        "received_bytes_per_round": statistics.mean(w["rx_bytes"] for w in wire) / rounds,
        "switch_events": bed.last_switch_events.get(bed.topo.aggregation.switch, {}),
        "phases": phase_medians(phases),
        "cpu": per_round_cpu,
    } | link_bound(wire, rounds, bw, seconds)


def sent_over_payload(a: dict) -> str:
    """Bytes a worker sent per round over its payload's bytes, '-' for gloo (no payload figure)."""
    payload = a.get("payload_bytes_per_round")
    return f"{a['sent_bytes_per_round'] / payload:.3f}" if payload else "-"


def phase_medians(phases: list[list[dict]]) -> dict:
    """Per phase figure (thc-worker's PhaseClock), the median over rounds of the mean and of the max over
    workers."""
    if not phases:
        return {}
    out = {}
    for key in phases[0][0]:
        per_round = [[w[key] for w in workers if key in w] for workers in phases]
        out[key] = {
            "mean": statistics.median(statistics.mean(r) for r in per_round if r),
            "max": statistics.median(max(r) for r in per_round if r),
        }
    return out


PHASES = ("prepare", "norm", "encode", "sum", "decode")


def breakdown_lines(aggregation: list[dict]) -> list[str]:
    """Where a round's time goes, per worker (mean over workers, median over rounds): wall ms (CPU ms of the
    worker's thread) per phase; for the two aggregation calls also when the first result came."""
    lines = [
        f"{'Mbit/s':>6s}  {'mode':6s} "
        + " ".join(f"{p + ' wall(cpu)':>17s}" for p in PHASES)
        + f" {'norm 1st':>8s} {'sum 1st':>8s} {'sum tx/req':>10s}"
    ]
    for a in aggregation:
        ph = a.get("phases") or {}
        if not ph:
            continue
        get = lambda key: ph.get(key, {}).get("mean", float("nan"))
        cells = " ".join(f"{get(p + '_ms'):8.1f} ({get(p + '_cpu_ms'):5.1f})" for p in PHASES)
        lines.append(
            f"{a['bw_mbit']:6g}  {a['mode']:6s} {cells} {get('norm_first_result_ms'):8.1f} "
            f"{get('sum_first_result_ms'):8.1f} {get('sum_transmissions'):5.0f}/{get('sum_requests'):<4.0f}"
        )
    return lines


def link_bound(wire: list[dict], rounds: int, bw_mbit: float, seconds: float) -> dict:
    """The link-bytes bound of a round: the busiest direction of the busiest worker link, at the link
    rate (links are full duplex; the switch's side of each link carries the same bytes)."""
    busiest = max(max(w["tx_bytes"], w["rx_bytes"]) for w in wire) / rounds
    bound = busiest * 8 / (bw_mbit * 1e6)
    return {"bound_s": bound, "x_bound": seconds / bound if bound else float("inf")}


def main(argv=None) -> int:
    args = parse_args(argv)
    origin = provenance.started(quick=args.rounds < 5 or 0 < args.steps < 150)
    if os.geteuid() != 0:
        print("bench_e2e needs root (Mininet network namespaces): sudo .venv/bin/python bench/bench_e2e.py")
        return 2
    from mininet.log import setLogLevel

    setLogLevel("critical")
    modes = [m for m in args.modes.split(",") if m]
    rates = [float(b) for b in args.bw.split(",") if b]
    losses = [float(x) for x in args.loss.split(",") if x] or [0.0]
    topo = Topology.load(args.topo)
    if args.workers:
        topo = topo.with_workers(args.workers)
    topo = topo.with_link_params(bw=rates[0], loss=losses[0] or None)
    args.out.mkdir(parents=True, exist_ok=True)
    log_dir = args.out / "bench_e2e_logs"
    say = lambda message: print(f"bench_e2e: {message}", flush=True)
    aggregation, training, training_loss, curves = [], [], [], {}
    started = time.monotonic()
    machine_lock = one_run.hold(say)  # noqa: F841  (held while the bench runs: one Mininet run per machine)
    with Testbed(topo, log_dir, target=args.target, say=say, switch_backend=args.backend) as bed:
        say(f"{topo.name}: {len(topo.workers)} workers, target {args.target}")
        job = 1
        for bw in rates if args.rounds else []:
            bed.net.set_bandwidth(bw)
            for mode in modes:
                say(f"aggregation at {bw:g} Mbit/s: {mode}, {args.rounds} rounds of {args.size} coordinates")
                aggregation.append(
                    aggregation_figures(
                        bed, mode, args.size, args.rounds, job, 29600 + job, bw, args.window, args.coalesce, args.codec
                    )
                )
                job += 1
        bed.net.set_bandwidth(rates[0])
        for k, loss in enumerate(losses if args.steps else []):
            if k:
                bed.net.set_loss(loss)
            for i, mode in enumerate(modes):
                say(f"training: {mode}, {args.steps} steps, {loss:g}% loss")
                run = 10 + k * len(modes) + i
                results = bed.run_workers(
                    WorkerOptions(
                        mode=mode,
                        steps=args.steps,
                        spec=JobSpec(job_id=run, workers=len(topo.workers), window=args.window),
                        master_port=29600 + run,
                        switch_timeout=60,
                        codec=args.codec,
                    )
                )
                training.append(
                    report.summarize(
                        mode, results, args.target_acc, bed.last_switch_events.get(topo.aggregation.switch, {})
                    )
                )
                training_loss.append(loss)
                if k == 0:
                    curves[mode] = min(results, key=lambda r: r["rank"])
    elapsed = time.monotonic() - started

    if aggregation:
        print(
            f"\nAggregation of {args.size} coordinates, {len(topo.workers)} workers ({args.target}, "
            f"{args.codec} codec), median of {args.rounds} rounds; bytes per worker per round on its interface "
            "(x payload: sent over the bytes of the THC indices, b bits a coordinate, or of the FIX32 int32 values):"
        )
        print(
            f"{'Mbit/s':>6s}  {'mode':18s} {'ms/round':>9s} {'bound ms':>9s} {'x bound':>8s} {'coords/s':>12s} "
            f"{'sent B':>10s} {'x payload':>9s} {'recv B':>10s} {'retx':>5s} {'switch pkts':>11s}"
        )
        for a in aggregation:
            events = a["switch_events"]
            aggregated = events.get("CONSUMED", 0) + events.get("COMPLETED", 0)
            print(
                f"{a['bw_mbit']:6g}  {report.MODE_LABELS[a['mode']]:18s} {a['median_s'] * 1e3:9.1f} "
                f"{a['bound_s'] * 1e3:9.1f} {a['x_bound']:8.2f} "
                f"{a['goodput_coords_s']:12,.0f} {a['sent_bytes_per_round']:10,.0f} "
                f"{sent_over_payload(a):>9s} {a['received_bytes_per_round']:10,.0f} "
                f"{a['retransmissions']:5d} {aggregated if a['mode'] != 'gloo' else '-':>11}"
            )
    if any(a.get("cpu") for a in aggregation):
        print(
            "\nCPU per round (mean over the timed rounds; machine = all cores, everything running, incl. the "
            "switch and the kernel; workers = the worker processes' own CPU; sleeps = the times a worker went "
            "to sleep waiting, each a wake-up):"
        )
        print(
            f"{'Mbit/s':>6s}  {'mode':6s} {'wall ms':>8s} {'machine busy ms':>16s} {'busy share':>11s} "
            f"{'workers ms':>11s} {'switch ms':>10s} {'(w+s)/2 ms':>11s} {'sleeps/worker':>14s}"
        )
        for a in aggregation:
            c = a.get("cpu")
            if c:
                share = c["machine_busy_ms"] / c["machine_total_ms"] if c["machine_total_ms"] else float("nan")
                print(
                    f"{a['bw_mbit']:6g}  {a['mode']:6s} {c['wall_ms']:8.1f} {c['machine_busy_ms']:16.1f} "
                    f"{share:11.0%} {c['workers_ms']:11.1f} {c.get('switch_ms', float('nan')):10.1f} "
                    f"{(c['workers_ms'] + c.get('switch_ms', float('nan'))) / 2:11.1f} "
                    f"{c.get('sleeps_per_worker', float('nan')):14.1f}"
                )
    if any(a.get("phases") for a in aggregation):
        print("\nWhere a round goes per worker (ms wall, thread CPU in brackets; mean over workers, median of rounds):")
        print("\n".join(breakdown_lines(aggregation)))
    for loss in dict.fromkeys(training_loss):
        rows = [t for t, pct in zip(training, training_loss) if pct == loss]
        print(f"\nTraining on digits at {rates[0]:g} Mbit/s, {loss:g}% loss, {args.steps} steps per mode:")
        print(report.table(rows))
    if len(set(training_loss)) > 1 or any(training_loss):
        lossless = {t.mode: t.step_ms for t, pct in zip(training, training_loss) if pct == 0}
        print(
            f"\nStep time under loss ({len(topo.workers)} workers, {args.target}; retransmissions: timer "
            f"expiries, fast = later results showed the loss, probe = the gap timer at an operation's tail):"
        )
        for loss in dict.fromkeys(training_loss):
            if loss:
                print(report.loss_lines([t for t, pct in zip(training, training_loss) if pct == loss], loss, lossless))
    result = {
        "topology": topo.name,
        "workers": len(topo.workers),
        "bw_mbit": rates,
        "loss_pct": losses,
        "target": args.target,
        "codec": args.codec,
        "aggregation": aggregation,
        "training": [dict(asdict(t), loss_pct=pct) for t, pct in zip(training, training_loss)],
        "elapsed_s": elapsed,
    }
    (args.out / "bench_e2e.json").write_text(json.dumps(result, indent=1))
    bench_record.write(args.out, "bench_e2e", origin, {k: result[k] for k in ("aggregation", "training", "workers")})
    if aggregation:
        plot(args.out / "bench_e2e.png", aggregation, curves, args, len(topo.workers))
    print(f"\nwrote {args.out / 'bench_e2e.json'} and {args.out / 'bench_e2e.png'} ({elapsed:.0f} s)")
    return 0


def plot(path: Path, aggregation: list[dict], curves: dict, args, n_workers: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if curves:
        fig, (ax_time, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    else:  # --steps 0: no training, no accuracy panel
        fig, ax_time = plt.subplots(1, 1, figsize=(6, 4))
    rates = sorted({a["bw_mbit"] for a in aggregation}, reverse=True)
    modes = list(dict.fromkeys(a["mode"] for a in aggregation))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        heights = [
            next(a["median_s"] * 1e3 for a in aggregation if a["mode"] == mode and a["bw_mbit"] == r) for r in rates
        ]
        xs = [x + i * width for x in range(len(rates))]
        ax_time.bar(xs, heights, width, label=report.MODE_LABELS[mode])
        bounds = [  # the link bytes' bound beside each bar: how far the round is from its bytes
            next(a.get("bound_s", 0.0) * 1e3 for a in aggregation if a["mode"] == mode and a["bw_mbit"] == r)
            for r in rates
        ]
        ax_time.hlines(bounds, [x - width / 2 for x in xs], [x + width / 2 for x in xs], colors="black", lw=1.5)
    ax_time.set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(rates))], [f"{r:g} Mbit/s" for r in rates])
    ax_time.set(ylabel=f"ms per aggregation of {args.size} coordinates", title="aggregation step")
    ax_time.set_ylim(0, 1.3 * max(a["median_s"] * 1e3 for a in aggregation))
    ax_time.plot([], [], color="black", lw=1.5, label="link bound")
    ax_time.legend(loc="upper center", ncol=len(modes) + 1, fontsize=8)
    if curves:
        for mode, record in curves.items():
            t = [0.0] + [e["t"] for e in record["epochs"]]
            acc = [0.1] + [e["test_acc"] for e in record["epochs"]]
            ax_acc.plot(t, acc, marker=".", label=report.MODE_LABELS[mode])
        ax_acc.axhline(args.target_acc, color="grey", lw=0.8, ls="--")
        ax_acc.set(
            xlabel="training wall time (s)",
            ylabel="test accuracy",
            ylim=(0, 1),
            title=f"time to accuracy at {rates[0]:g} Mbit/s",
        )
        ax_acc.legend()
    fig.suptitle(f"{n_workers} workers, {args.target}" + (f"; training at {rates[0]:g} Mbit/s" if curves else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
