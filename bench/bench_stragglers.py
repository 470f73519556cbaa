"""Stragglers: one worker delayed per step, "wait for all" against partial aggregation.

    .venv/bin/python bench/bench_stragglers.py [--steps 150] [--delay-ms 50] [--straggler-timeout-ms 10]
                                               [--workers 4] [--backend auto] [--switch p4]

In process (no root): the compiled program in the software switch, DDP workers as threads on the loopback
wire (harness/ddp_cluster.py) training mlp-digits; the last worker sleeps --delay-ms every step. Two runs
from the same model: `wait` (every slot waits for all workers) and `partial` (--straggler-timeout releases
the slot with the sums so far; p4/README.md, "Partial aggregation"). Per run: step time of a punctual worker
and of the straggler, time to target, the switch's events. Writes bench/out/bench_stragglers.json; the last
line is `partial/wait step time: <R>`. Figures only, no assertion: they depend on the machine and its load."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from usage.args import OneLineParser, created_file, int_in, positive_number

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import contract  # noqa: E402
from bench import record as bench_record  # noqa: E402
from harness.ddp_cluster import jobs_aggregators, thc_spec, train_ddp  # noqa: E402
from harness.fake_switch import FakeSwitch  # noqa: E402
from harness.sim import SimJob, program_engine  # noqa: E402
from host_agent import workloads  # noqa: E402
from thc.config import THCConfig  # noqa: E402
from usage import provenance  # noqa: E402

MODEL = "mlp-digits"


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int_in(1), default=150, help="training steps per run (default 150)")
    p.add_argument(
        "--workers",
        type=int_in(2, why=": one of them straggles"),
        default=4,
        help="workers; the last one straggles (default 4)",
    )
    p.add_argument(
        "--delay-ms",
        type=positive_number("milliseconds"),
        default=50.0,
        help="the straggler's sleep per step (default 50)",
    )
    p.add_argument(
        "--straggler-timeout-ms",
        type=positive_number("milliseconds"),
        default=10.0,
        help="partial run's release deadline (default 10)",
    )
    p.add_argument("--backend", choices=("auto", "native", "python"), default="auto", help="software switch engine")
    p.add_argument(
        "--switch",
        choices=("p4", "fake"),
        default="p4",
        help="p4: the compiled program (default); fake: harness.fake_switch (the contract in Python)",
    )
    p.add_argument("--out", type=created_file, default=REPO / "bench" / "out" / "bench_stragglers.json")
    return p.parse_args(argv)


def make_switch(args, job: SimJob):
    if args.switch == "fake":
        sw = FakeSwitch()
        sw.add_job(job)
        return sw, "fake"
    from emulator.switch import SoftwareSwitch

    path = str(REPO / "p4" / "build" / "thc.json")
    backends = ("native", "python") if args.backend == "auto" else (args.backend,)
    for backend in backends:
        try:
            sw = SoftwareSwitch.from_json(path, backend=backend)
        except Exception as exc:  # noqa: BLE001 - auto falls back to the Python engine, said below
            if backend == backends[-1]:
                raise
            print(f"  ({backend} backend unavailable: {exc}; trying the next)")
            continue
        program_engine(sw, job)
        return sw, backend
    raise AssertionError("unreachable")


def switch_events(sw) -> dict[str, int]:
    if isinstance(sw, FakeSwitch):
        return dict(sw.event_counts())
    cells = {name: sw.counter_read(contract.THC_EVENTS, i)[0] for i, name in enumerate(contract.EVENTS)}
    return {k: v for k, v in cells.items() if v}


def one_run(args, straggler_timeout: float | None) -> dict:
    config = THCConfig()
    job = SimJob.plan(thc_spec(config, 3, args.workers, window=64, slots=64))
    sw, backend = make_switch(args, job)
    aggregators = jobs_aggregators(sw, [job], straggler_timeout=straggler_timeout)[job.job_id]
    straggler = args.workers - 1
    started = time.perf_counter()
    out = train_ddp(
        MODEL,
        "thc",
        args.steps,
        n=args.workers,
        config=config,
        aggregators=aggregators,
        step_delays={straggler: args.delay_ms / 1000},
    )
    wall = time.perf_counter() - started
    workload = workloads.get(MODEL)
    punctual, late = out[0]["history"], out[straggler]["history"]
    reached = [e["t"] for e in punctual["epochs"] if workload.reached(e["metric"])]
    identical = all(bool((o["params"] == out[0]["params"]).all()) for o in out)
    stats = [a.stats() for a in aggregators]
    return {
        "switch": backend,
        "straggler_timeout_ms": None if straggler_timeout is None else straggler_timeout * 1000,
        "step_ms": statistics.fmean(s["step_time"] for s in punctual["steps"]) * 1000,
        "straggler_step_ms": statistics.fmean(s["step_time"] for s in late["steps"]) * 1000,
        "train_s": punctual["train_time"],
        "wall_s": wall,
        "time_to_target_s": reached[0] if reached else None,
        "final_metric": punctual["epochs"][-1]["metric"],
        "ranks_identical": identical,
        "events": switch_events(sw),
        "releases": sum(s["releases"] for s in stats),
        "partial_results": stats[0]["partial_results"],
        "straggler_early_results": stats[straggler]["early_results"],
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    origin = provenance.started(quick=args.steps < 150)
    workload = workloads.get(MODEL)
    print(
        f"{MODEL}, {args.workers} workers, worker {args.workers - 1} sleeps {args.delay_ms:g} ms per step, "
        f"{args.steps} steps, target {workload.metric} {workload.target}; load average before "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    runs = {}
    for name, timeout in (("wait", None), ("partial", args.straggler_timeout_ms / 1000)):
        runs[name] = one_run(args, timeout)
        r = runs[name]
        ttt = "never" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.2f} s"
        print(
            f"{name:<8} step {r['step_ms']:7.1f} ms (straggler {r['straggler_step_ms']:6.1f} ms)  "
            f"to target {ttt:>8}  final {workload.metric} {r['final_metric']:.3f}  "
            f"ranks identical {r['ranks_identical']}  releases {r['releases']}  "
            f"RELEASED {r['events'].get('RELEASED', 0)}  LATE {r['events'].get('LATE', 0)}  "
            f"straggler's early results {r['straggler_early_results']}  [{r['switch']}]"
        )
    load = os.getloadavg()
    print(f"load average after {' '.join(f'{x:.2f}' for x in load)}")
    ratio = runs["partial"]["step_ms"] / runs["wait"]["step_ms"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs, "ratio": ratio}, indent=1)
    )
    print(f"partial/wait step time: {ratio:.3f}")
    figures = {"model": MODEL, "workers": args.workers, "delay_ms": args.delay_ms, "steps": args.steps}
    bench_record.write(args.out.parent, "bench_stragglers", origin, {**figures, "runs": runs, "ratio": ratio})
    return 0


if __name__ == "__main__":
    sys.exit(main())
