"""THC and FIX32 through a switch as slow as BMv2, against issue 31's three floors.

    sudo .venv/bin/python bench/bench_slow_switch.py [--pps 900] [--steps 60] [--bw 20] [--model cnn-digits]
    sudo .venv/bin/python bench/bench_slow_switch.py --target bmv2      # BMv2 itself, where installed

On one target (thc-switch slowed to --pps frames a second, or BMv2), first bench_pipeline's closed loop at
that pace, then `thc-run --modes thc,fix32` through it; each step is printed beside its link-bytes bound, then
the floors (FLOOR_*: retransmissions, THC's step against FIX32's, THC against the pipeline). The pipeline
counts every worker's request while a run counts the model's parameters once, so THC's coordinates per second
are compared as n x coords/s. Writes bench/out/slow_switch.json and the record `make results` keeps. Figures,
never assertions: they depend on the machine and its load."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from usage.args import OneLineParser, created_file, input_file, int_in, positive_number

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import record as bench_record  # noqa: E402
from bench.bench_pipeline import bench_veth  # noqa: E402
from controller.topology import load_for_cli  # noqa: E402
from topologies.targets import add_target_option  # noqa: E402
from usage import provenance  # noqa: E402

OUT = REPO / "bench" / "out" / "slow_switch.json"
BMV2_THC_PPS = 900  # the default pace: BMv2's, as bench_pipeline measures it (docs/results.md, "A slow switch")
K = 1024  # coordinates a THC request of the run's program (p4/build/thc.json, 8-bit lanes)
FLOOR_RETX, FLOOR_STEP, FLOOR_COORDS = 0.01, 0.7, 0.7


def parse_args(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_option(p, help="the software switch slowed to --pps (default), or BMv2 at its own pace")
    p.add_argument(
        "--pps",
        type=positive_number("frames a second"),
        default=BMV2_THC_PPS,
        help=f"frames a second the software switch is slowed to (default {BMV2_THC_PPS}: BMv2's THC rate here)",
    )
    p.add_argument("--steps", type=int_in(1), default=60, help="training steps per mode (default 60)")
    p.add_argument("--bw", type=positive_number("Mbit/s"), default=20.0, help="link rate in Mbit/s (default 20)")
    p.add_argument("--model", default="cnn-digits", help="workload (default cnn-digits, make run's)")
    p.add_argument(
        "--topo", type=input_file, default=None, help="topology file for thc-run (default: thc-run's, star4.json)"
    )
    p.add_argument(
        "--pipeline-window", type=int_in(1, 1024), default=32, help="slots per closed-loop round (default 32)"
    )
    p.add_argument("--pipeline-rounds", type=int_in(1), default=25, help="closed-loop rounds (default 25)")
    p.add_argument("--no-pcap", action="store_true", help="run without pcaps (make run writes them)")
    p.add_argument(
        "--out", type=created_file, default=OUT, help="the results file (default bench/out/slow_switch.json)"
    )
    args = p.parse_args(argv)
    if args.topo:
        load_for_cli(p, args.topo)  # a bad file: one line now, not thc-run's failure after the pipeline's run
    return args


def pipeline(args) -> dict | None:
    target = "bmv2" if args.target == "bmv2" else "thc-switch"
    switch_args = () if args.target == "bmv2" else ("--pps", f"{args.pps:g}")
    return bench_veth(target, K, args.pipeline_rounds, args.pipeline_window, switch_args)


def run_modes(args, workdir: Path) -> dict:
    """thc-run --modes thc,fix32 through the target; its summary.json."""
    argv = [sys.executable, "-m", "topologies.runner", "--target", args.target, "--modes", "thc,fix32"]
    argv += ["--steps", str(args.steps), "--bw", f"{args.bw:g}", "--model", args.model]
    argv += ["--log-dir", str(workdir / "logs"), "--pcap-dir", str(workdir / "pcaps")]
    if args.target == "emulator":
        argv += ["--switch-pps", f"{args.pps:g}"]
    if args.no_pcap:
        argv.append("--no-pcap")
    if args.topo:
        argv += ["--topo", str(Path(args.topo).resolve())]
    log = workdir / "thc-run.log"
    print(f"running: {' '.join(argv[1:])} (console: {log})", file=sys.stderr, flush=True)
    with open(log, "wb") as out:
        code = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT).returncode
    summary = workdir / "logs" / "summary.json"
    if code != 0 or not summary.exists():
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"thc-run failed (exit {code}); its last lines:\n" + "\n".join(tail))
    return json.loads(summary.read_text())


def floors(summary: dict, pipe: dict | None) -> list[tuple[str, float, float, bool]]:
    """(what, measured, floor, met) per floor."""
    rows = {m["mode"]: m for m in summary["modes"]}
    out = []
    for mode, row in rows.items():
        late = (row["timer_retransmissions"] + row["probe_retransmissions"]) / max(1, row["requests"])
        out.append((f"{mode}: timer + probe retransmissions / requests", late, FLOOR_RETX, late <= FLOOR_RETX))
    thc, fix32 = rows.get("thc"), rows.get("fix32")
    if thc and fix32:
        ratio = thc["step_ms"] / fix32["step_ms"]
        out.append(("THC step / FIX32 step", ratio, FLOOR_STEP, ratio <= FLOOR_STEP))
    if thc and pipe:
        share = thc["workers"] * thc["goodput_coords_s"] / pipe["coordinates_per_s"]
        out.append(("THC n x coords/s / pipeline coords/s", share, FLOOR_COORDS, share >= FLOOR_COORDS))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench_slow_switch: needs root (veths, Mininet): sudo .venv/bin/python bench/...", file=sys.stderr)
        return 1
    origin = provenance.started(quick=args.steps < 60)
    load_before = os.getloadavg()[0]
    pipe = pipeline(args)
    if pipe is None:
        print(f"bench_slow_switch: target {args.target} is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="slow-switch-") as tmp:
        started = time.monotonic()
        summary = run_modes(args, Path(tmp))
        minutes = (time.monotonic() - started) / 60
    pace = "BMv2 at its own pace" if args.target == "bmv2" else f"software switch paced to {args.pps:g} frames/s"
    print(f"\n{pace}; {args.model}, {args.steps} steps, {args.bw:g} Mbit/s links ({minutes:.1f} min)")
    print(
        f"pipeline: {pipe['packets_per_s']:,.0f} THC requests/s, {pipe['coordinates_per_s']:,.0f} coordinates/s "
        f"(K = {K}, window {args.pipeline_window}; {pipe['sent'] - pipe['aggregated']} of {pipe['sent']} "
        "requests not aggregated)"
    )
    print(
        f"{'mode':<6} {'step ms':>8} {'bound ms':>9} {'coords/s':>10} {'requests':>9} {'timer':>6} {'fast':>5} "
        f"{'probe':>6} {'late %':>7}"
    )
    for m in summary["modes"]:
        bound_ms = m["busiest_link_bytes_per_step"] * 8 / (args.bw * 1e6) * 1e3
        late = (m["timer_retransmissions"] + m["probe_retransmissions"]) / max(1, m["requests"])
        print(
            f"{m['mode']:<6} {m['step_ms']:>8.1f} {bound_ms:>9.1f} {m['goodput_coords_s']:>10,.0f} "
            f"{m['requests']:>9,} {m['timer_retransmissions']:>6} {m['fast_retransmissions']:>5} "
            f"{m['probe_retransmissions']:>6} {late:>7.2%}"
        )
    print("floors (issue 31):")
    results = floors(summary, pipe)
    floor_rows = [dict(what=w, value=v, floor=f, met=m) for w, v, f, m in results]
    for what, value, floor, met in results:
        sign = "<=" if "retransmissions" in what or "step" in what else ">="
        print(f"  {what:<48} {value:>8.3f}  {sign} {floor:<5g} {'met' if met else 'NOT MET'}")
    load_after = os.getloadavg()[0]
    print(f"load average {load_before:.1f} before, {load_after:.1f} after (2 cores: figures are noisy under load)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "target": args.target,
                "pps": None if args.target == "bmv2" else args.pps,
                "pipeline": pipe,
                "modes": summary["modes"],
                "floors": floor_rows,
                "load": [load_before, load_after],
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")
    pps = None if args.target == "bmv2" else args.pps
    figures = {"target": args.target, "pps": pps, "window": args.pipeline_window, "model": args.model}
    figures |= {"steps": args.steps, "bw_mbit": args.bw, "k": K, "pipeline": pipe}
    figures |= {"modes": summary["modes"], "floors": floor_rows}
    bench_record.write(args.out.parent, "bench_slow_switch", origin, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
