"""The fault campaign: one command, every fault the testbed recovers from, one table.

    sudo .venv/bin/python bench/bench_faults.py [--quick] [--modes thc,fix32] [--steps N] [--model NAME]
                                                [--bw MBITS] [--topo FILE] [--no-mininet] [--no-inprocess]

Per fault and mode: did training complete, are the parameters bit-identical on every rank (and equal to the
lossless run's where the fault must not change the sums), the step time against the lossless run's, and the
retransmissions by kind. Loss, a killed worker, a straggler and a switch restart run on Mininet (root, one
network for the whole campaign); duplication, reordering and a silent leaf run in process (harness/), since
this kernel has no sch_netem to duplicate or reorder on links. Writes bench/out/bench_faults.json and its
record; figures only, no assertion (they depend on the machine and its load)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

from usage.args import OneLineParser, created_file, folder, input_file, int_in, names_in, positive_number

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from bench import record as bench_record  # noqa: E402
from bench.bench_stragglers import make_switch  # noqa: E402
from controller.topology import load_for_cli  # noqa: E402
from harness.ddp_cluster import thc_spec, train_ddp  # noqa: E402
from harness.sim import SimJob, attach_workers  # noqa: E402
from host_agent import workloads  # noqa: E402
from host_agent.aggregator import SwitchAggregator  # noqa: E402
from thc.config import THCConfig  # noqa: E402
from thc.modes import FIX32, THC  # noqa: E402
from topologies.targets import add_target_option  # noqa: E402
from usage import provenance  # noqa: E402

LOSSES = (1.0, 5.0, 10.0)
DUPLICATE = 0.05
DELAY_S, JITTER_S = 0.001, 0.002


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a short run: mlp-digits, 40 steps (in process 30)")
    p.add_argument(
        "--modes",
        default="thc,fix32",
        type=names_in((THC, FIX32)),
        help="switch modes to run every fault in (default thc,fix32)",
    )
    p.add_argument("--steps", type=int_in(1), help="training steps per run (default 200; --quick 40)")
    p.add_argument("--model", help="workload (default cnn-digits, make run's; --quick mlp-digits)")
    p.add_argument(
        "--bw", type=positive_number("Mbit/s"), default=9.0, help="Mininet link rate in Mbit/s (default 9: make run's)"
    )
    p.add_argument(
        "--topo",
        type=input_file,
        default=str(REPO / "topologies" / "star4.json"),
        help="Mininet topology (default star4)",
    )
    add_target_option(p)
    p.add_argument("--no-mininet", action="store_true", help="skip the Mininet faults (no root needed then)")
    p.add_argument("--no-inprocess", action="store_true", help="skip duplication, reordering and the silent leaf")
    p.add_argument("--inprocess-steps", type=int_in(1), help="training steps of the in-process runs (default 100)")
    p.add_argument("--log-dir", type=folder, default=Path("/tmp/bench_faults"), help="the runs' logs")
    p.add_argument("--out", type=created_file, default=REPO / "bench" / "out" / "bench_faults.json")
    args = p.parse_args(argv)
    args.steps = args.steps or (40 if args.quick else 200)
    args.model = args.model or ("mlp-digits" if args.quick else "cnn-digits")
    args.inprocess_steps = args.inprocess_steps or (30 if args.quick else 100)
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.no_mininet:
        args.topology = load_for_cli(p, args.topo)  # a bad file: one line now, not after the in-process runs
    return args


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# ---- Mininet ------------------------------------------------------------------------------------


def mininet_faults(args, topo, mode: str) -> list[tuple[str, float, dict]]:
    """(fault, loss %, run_workers / WorkerOptions arguments) in campaign order, lossless first. The
    straggler is released by partial aggregation in thc; fix32 waits for it (its hook decodes one count
    per bucket, so a released max round fails it)."""
    workers, half = list(topo.workers), max(1, args.steps // 2)
    faults = [("lossless", 0.0, {})]
    faults += [(f"loss {loss:g} %", loss, {}) for loss in LOSSES]
    faults.append(("killed worker", 0.0, {"kill": [(workers[min(2, len(workers) - 1)], half)]}))
    release = {"straggler_timeout_ms": 10.0} if mode == "thc" else {}
    faults.append(("straggler", 0.0, {"stragglers": {workers[-1]: 50.0}, **release}))
    faults.append(("switch restart", 0.0, {"restart": [(topo.aggregation.switch, half)]}))
    return faults


def run_mininet(args) -> list[dict]:
    from topologies import one_run, report
    from topologies.testbed import Testbed
    from topologies.workers import WorkerOptions

    topo = args.topology
    if args.bw:
        topo = topo.with_link_params(bw=args.bw)
    rows, index = [], 0
    # thc-run's machine lock first: one Mininet network at a time (they share interface names)
    with one_run.hold(print), Testbed(topo, args.log_dir, args.target, None, say=lambda m: None) as bed:
        for mode in args.modes:
            baseline = None
            for fault, loss, extra in mininet_faults(args, topo, mode):
                bed.set_loss(loss)
                index += 1
                run = {k: extra[k] for k in ("kill", "restart") if k in extra}
                options = WorkerOptions(
                    mode=mode,
                    steps=args.steps,
                    model=args.model,
                    master_port=29600 + index,
                    straggler_timeout_ms=extra.get("straggler_timeout_ms"),
                    stragglers=extra.get("stragglers", {}),
                )
                started = time.monotonic()
                try:
                    results = bed.run_workers(options, stall_timeout=120.0, start_timeout=180.0, **run)
                except Exception as exc:  # noqa: BLE001 - the campaign goes on; the row says why
                    row = {"fault": fault, "mode": mode, "where": "mininet", "completed": False}
                    row["error"] = str(exc).splitlines()[0]
                    traceback.print_exc(limit=2)
                else:
                    target = workloads.get(args.model).target
                    events = bed.last_switch_events.get(topo.aggregation.switch, {})
                    summary = report.summarize(mode, results, target, events, bed.last_failures)
                    row = mininet_row(fault, mode, results, summary, bed.last_failures)
                row.update(wall_s=round(time.monotonic() - started, 1), load=load(), loss_pct=loss)
                baseline = baseline or (row if fault == "lossless" and row["completed"] else None)
                compare(row, baseline)
                rows.append(row)
                print(line(row), flush=True)
        bed.set_loss(0.0)
    return rows


def mininet_row(fault: str, mode: str, results: list[dict], summary, failures: list[dict]) -> dict:
    digests = {r["parameter_sha256"] for r in results}
    completed = all(len(r["steps"]) == r["config"]["steps"] for r in results)
    return {
        "fault": fault,
        "mode": mode,
        "where": "mininet",
        "completed": completed,
        "workers": len(results),
        "identical": len(digests) == 1,
        "digest": sorted(digests)[0],
        "step_ms": summary.step_ms,
        "final_metric": summary.final_metric,
        "requests": summary.requests,
        "timer": summary.timer_retransmissions,
        "fast": summary.fast_retransmissions,
        "probe": summary.probe_retransmissions,
        "switch_events": {k: v for k, v in summary.switch_events.items() if v},
        "failures": failures,
    }


# ---- in process ---------------------------------------------------------------------------------


def inprocess_run(args, mode: str, fault: str, n: int = 4) -> dict:
    config = THCConfig()
    job = SimJob.plan(thc_spec(config, 3, n, window=64, slots=64))
    sw, backend = make_switch(SimpleNamespace(switch="p4", backend="auto"), job)
    lw, protocols = attach_workers(sw, job, clock=time.monotonic, timeout=0.01, max_timeout=0.1, deadline=60.0)
    if fault == "duplication":
        lw.duplicate_up = lw.duplicate_down = DUPLICATE
    elif fault == "reordering":
        lw.delay_up = lw.delay_down = DELAY_S
        lw.jitter_up = lw.jitter_down = JITTER_S
    aggregators = [SwitchAggregator(p) for p in protocols]
    row = {"fault": fault, "mode": mode, "where": f"in process ({backend})", "workers": n}
    try:
        out = train_ddp("mlp-digits", mode, args.inprocess_steps, n=n, config=config, aggregators=aggregators)
    except Exception as exc:  # noqa: BLE001 - the row says why
        return row | {"completed": False, "error": str(exc).splitlines()[0]}
    stats = [a.stats() for a in aggregators]
    steps = out[0]["history"]["steps"]
    return row | {
        "completed": len(steps) == args.inprocess_steps,
        "identical": all(bool((o["params"] == out[0]["params"]).all()) for o in out),
        "digest": out[0]["params"].numpy().tobytes().hex()[:64],
        "step_ms": 1e3 * statistics.fmean(s["step_time"] for s in steps),
        "final_metric": out[0]["history"]["epochs"][-1]["metric"],
        "requests": sum(s["requests"] for s in stats),
        "timer": sum(s["timer_retransmissions"] for s in stats),
        "fast": sum(s["fast_retransmissions"] for s in stats),
        "probe": sum(s["probe_retransmissions"] for s in stats),
        "duplicated": lw.duplicated_up + lw.duplicated_down,
    }


def silent_leaf_rows(rounds: int) -> list[dict]:
    """Rounds through two leaves of 4 workers with every worker, then with leaf 1 silent: a leaf-0 worker's
    RELEASE goes up past its completed leaf (RELEASE_UP) and the spine releases each round with leaf 0's sums."""
    from harness import frames
    from harness.leaf_spine import LeafSpine
    from thc.aggregate import reference_aggregate

    table = THCConfig().make_table()  # the codec's default table
    rows = []
    for fault in ("lossless", "silent leaf"):
        fabric = LeafSpine(leaves=2, per_leaf=4, table=table, backend="native")
        alive = fabric.local_workers(0) if fault == "silent leaf" else list(range(fabric.n))
        rng = np.random.default_rng(0)
        exact = completed = 0
        started = time.perf_counter()
        try:
            for q in range(rounds):
                slot, rnd = q % fabric.n_slots, q // fabric.n_slots
                idx = [rng.integers(0, 16, size=fabric.coords, dtype=np.uint8) for _ in range(fabric.n)]
                if fault == "lossless":
                    got = fabric.run_round(idx, slot, rnd)
                else:
                    fabric.carry([(w, fabric.request(w, idx[w], slot, rnd)) for w in alive])
                    received = fabric.carry([(alive[0], fabric.release(alive[0], slot, rnd))])
                    got = {w: received[w][0] for w in alive if received.get(w)}
                if sorted(got) != alive:
                    continue
                completed += 1
                expected = [int(v) for v in reference_aggregate([idx[w] for w in alive], table)]
                exact += all(frames.Parsed.of(got[w]).lanes() == expected for w in alive)
            elapsed = time.perf_counter() - started
            events = {k: v for k, v in fabric.spine.events().items() if v}
        finally:
            fabric.close()
        rows.append(
            {
                "fault": fault,
                "mode": "thc rounds",
                "where": "in process (leaf-spine)",
                "completed": completed == rounds,
                "workers": len(alive),
                "identical": exact == rounds,
                "step_ms": 1e3 * elapsed / rounds,
                "rounds": rounds,
                "spine_events": events,
            }
        )
    return rows


def run_inprocess(args) -> list[dict]:
    inprocess_run(args, args.modes[0], "lossless")  # the process's first run pays its warm-up: not measured
    rows = []
    for mode in args.modes:
        baseline = None
        for fault in ("lossless", "duplication", "reordering"):
            row = inprocess_run(args, mode, fault) | {"load": load()}
            baseline = baseline or (row if fault == "lossless" and row["completed"] else None)
            compare(row, baseline)
            rows.append(row)
            print(line(row), flush=True)
    leaf_rows = silent_leaf_rows(rounds=40 if args.quick else 200)
    for row in leaf_rows:
        compare(row, leaf_rows[0])
        rows.append(row)
        print(line(row), flush=True)
    return rows


# ---- the table ----------------------------------------------------------------------------------


def compare(row: dict, baseline: dict | None) -> None:
    """Step time against the lossless run's; the same parameters as it (None where not comparable)."""
    if baseline is None or not row.get("completed") or row is baseline:
        row.setdefault("vs_lossless", 1.0 if row is baseline else None)
        return
    row["vs_lossless"] = row["step_ms"] / baseline["step_ms"]
    if "digest" in row and row["fault"] not in ("killed worker", "straggler"):
        row["same_as_lossless"] = row["digest"] == baseline.get("digest")


HEADER = ("fault", "mode", "where", "done", "ranks =", "= lossless", "step ms", "× lossless", "retx t/f/p", "t+p %req")


def cells(row: dict) -> list[str]:
    yes = lambda v: "-" if v is None else ("yes" if v else "NO")  # noqa: E731
    retx = f"{row['timer']}/{row['fast']}/{row['probe']}" if "timer" in row else "-"
    share = f"{100 * (row['timer'] + row['probe']) / row['requests']:.3f}" if row.get("requests") else "-"
    return [
        row["fault"],
        row["mode"],
        row["where"],
        yes(row["completed"]) + ("" if row["completed"] else f" ({row.get('error', '')[:60]})"),
        yes(row.get("identical")),
        yes(row.get("same_as_lossless")),
        f"{row['step_ms']:.1f}" if "step_ms" in row else "-",
        f"{row['vs_lossless']:.2f}" if row.get("vs_lossless") is not None else "-",
        retx,
        share,
    ]


def line(row: dict) -> str:
    return "  ".join(f"{h}: {c}" for h, c in zip(HEADER, cells(row)))


def table(rows: list[dict]) -> str:
    body = [cells(r) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(HEADER)]
    fmt = lambda cs: "  ".join(c.ljust(w) for c, w in zip(cs, widths))  # noqa: E731
    return "\n".join([fmt(HEADER), "-" * len(fmt(HEADER))] + [fmt(b) for b in body])


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.no_mininet and os.geteuid() != 0:
        print("bench_faults: the Mininet faults need root (sudo), or give --no-mininet", file=sys.stderr)
        return 2
    origin = provenance.started(quick=args.steps < 200 or args.inprocess_steps < 100)
    print(
        f"fault campaign: modes {', '.join(args.modes)}; Mininet {args.model}, {args.steps} steps, "
        f"{args.bw:g} Mbit/s; in process mlp-digits, {args.inprocess_steps} steps; load average {load()} "
        f"on {os.cpu_count()} cores",
        flush=True,
    )
    rows = []
    if not args.no_mininet:
        rows += run_mininet(args)
    if not args.no_inprocess:
        rows += run_inprocess(args)
    print()
    print(table(rows))
    print(f"load average at the end {load()}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: str(v) for k, v in vars(args).items()}
    args.out.write_text(json.dumps({"args": settings, "rows": rows}, indent=1, default=str))
    print(f"written {args.out}")
    figures = {
        "modes": args.modes,
        "model": args.model if not args.no_mininet else None,
        "steps": args.steps if not args.no_mininet else None,
        "bw_mbit": args.bw if not args.no_mininet else None,
        "inprocess_steps": args.inprocess_steps if not args.no_inprocess else None,
        "rows": json.loads(json.dumps(rows, default=str)),
    }
    bench_record.write(args.out.parent, "bench_faults", origin, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
