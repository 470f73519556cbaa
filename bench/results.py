"""Render docs/results.md's measured tables from the benchmarks' records, so that every generated figure
names the command, commit, date and machine load that produced it and cannot drift from its record.

    .venv/bin/python bench/results.py [--add RECORD ...] [--check]      (make results [RECORDS="..."])

A record is what a benchmark writes beside its printout (bench/record.py: bench/out/<name>.record.json)
or thc-run's logs/summary.json; `--add` copies one into docs/results/<name>.json, the records kept in the
repository. The page keeps its hand-written prose; only the regions between ``<!-- results:NAME -->``
and ``<!-- /results:NAME -->`` are rewritten, each from docs/results/NAME.json. `--check` rewrites
nothing and exits 1 when the page differs from what the records render.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/results.py`

from topologies.report import failure_line, label  # noqa: E402  (a mode's name: thc/modes.py's registry)
from usage.args import OneLineParser, input_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
RECORDS = ROOT / "docs" / "results"
REGION = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)
PHASES = ["prepare", "norm round", "encode", "sums", "decode"]  # a THC round's phases, in their order
TARGET_LABELS = {
    "engine": "engine `process()` (Python backend)",
    "thc-switch": "thc-switch on veths",
    "bmv2": "BMv2 `simple_switch_grpc` on veths",
}


def _n(value, digits: int = 1) -> str:
    """A figure as the page prints it: thousands separated, `digits` decimals, '–' for none."""
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def provenance_line(name: str, record: dict) -> str:
    """Who made these figures: the command, commit, date and load; a quick run says so."""
    load = f"load average {record['load_start']:g} → {record['load_end']:g} (1 min, start → end)"
    line = (
        f"Generated from [docs/results/{name}.json](results/{name}.json): `{record['command']}`, commit "
        f"{record['commit'] or 'unknown'}, {record['date']}, {load}."
    )
    if record.get("quick"):
        line += " **Quick run** (fewer rounds or steps than the defaults): its figures are noisier."
    return line


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_host_agent_worker(figures: list[dict]) -> str:
    """bench_host_agent.py --worker-only: a worker's full THC round and its protocol part (CPU per round),
    and the sum phase alone over the veth pair and in process (wall per round)."""
    out = []
    rounds = [f for f in figures if f["figure"] == "full round"]
    if rounds:
        sizes = sorted({f["coords"] for f in rounds})
        rows = []
        for codec in dict.fromkeys(f["codec"] for f in rounds):
            cells = []
            for size in sizes:
                f = next((f for f in rounds if f["codec"] == codec and f["coords"] == size), None)
                if f is None:
                    cells.append("–")
                    continue
                phases = sorted(f["phases_ms"].items(), key=lambda item: PHASES.index(item[0]))
                split = ", ".join(f"{phase} {ms:.2f}" for phase, ms in phases)
                cells.append(f"{f['cpu_ms']:.2f} ({split})")
            rows.append([codec, *cells])
        for f in (f for f in figures if f["figure"] == "protocol part"):
            rows.append(
                [f"{f['codec']}: the protocol alone (norm round + 16-request sum, no codec)"]
                + [f"{f['cpu_ms']:.2f} (norm round {f['norm_ms']:.2f}, sums {f['sums_ms']:.2f})"]
                + ["–"] * (len(sizes) - 1)
            )
        for f in (f for f in figures if f["figure"] == "calls only"):
            rows.append(
                [f"{f['codec']}: its compiled calls alone, no protocol around them (what a native core pays)"]
                + [f"{f['cpu_ms']:.2f}"]
                + ["–"] * (len(sizes) - 1)
            )
        out.append("A full THC round of one worker, ms of the worker's CPU per round:\n")
        out.append(table(["codec", *(f"{s:,} coordinates" for s in sizes)], rows))
    sums = [f for f in figures if f["figure"] in ("veth sums", "in-process")]
    if sums:
        rows = [
            [
                "veth pair, C echo" if f["figure"] == "veth sums" else "in process, echo",
                f["io"],
                f"{f['coords']:,}",
                str(f["window"]),
                f"{f['ms']:.2f}",
                _n(f["coords"] / f["ms"] * 1e3 / 1e6, 1),
            ]
            for f in sums
        ]
        out.append("\nThe sum phase alone (all_sum of given indices, no codec), wall time per round:\n")
        out.append(table(["where", "I/O", "coordinates", "window", "ms/round", "M coordinates/s"], rows))
    return "\n".join(out)


def render_e2e(figures: dict) -> str:
    """bench_e2e.py: aggregation rounds per link rate and mode with the link-bytes bound beside them, and
    the training runs when there were any."""
    out = []
    aggregation = figures.get("aggregation") or []
    if aggregation:
        first = aggregation[0]
        out.append(
            f"{figures.get('workers', '?')} workers, median of {first['rounds']} rounds of "
            f"{first['coordinates']:,} coordinates; bound: the busiest worker link's busiest direction at the "
            "link rate; bytes per worker per round:\n"
        )
        rows = [
            [
                f"{a['bw_mbit']:g}",
                label(a["mode"]),
                _n(a["median_s"] * 1e3),
                _n(a["bound_s"] * 1e3),
                f"{a['x_bound']:.2f}×",
                _n(a["sent_bytes_per_round"], 0),
                _n(a["received_bytes_per_round"], 0),
                str(a["retransmissions"]),
            ]
            for a in aggregation
        ]
        out.append(table(["Mbit/s", "mode", "ms/round", "link bound ms", "× bound", "sent B", "recv B", "retx"], rows))
    training = figures.get("training") or []
    if training:
        out.append("\nTraining:\n")
        out.append(training_table(training, bw=None))
    return "\n".join(out)


def training_table(modes: list[dict], bw: float | None) -> str:
    """thc-run's (and bench_e2e's) per-mode training figures; with the link rate, each step's link-bytes
    bound: the busiest link's bytes per step at that rate."""
    bpc = bool(modes) and modes[0].get("metric") == "bpc"  # a language model's target: validation bits/char
    header = ["mode", "final bpc" if bpc else "final acc", "time to target", "step ms"]
    header += ["link bound ms"] if bw else []
    header += ["aggregation ms/step", "sent B/step/worker", "recv B/step/worker", "retx timer / fast / probe"]
    rows = []
    for m in modes:
        reached = "not reached" if m["time_to_target_s"] is None else f"{m['time_to_target_s']:.1f} s"
        row = [label(m["mode"]), f"{m['final_metric'] if bpc else m['final_acc']:.3f}", reached, _n(m["step_ms"])]
        if bw:
            busiest = m.get("busiest_link_bytes_per_step")
            row.append("–" if busiest is None else _n(busiest * 8 / (bw * 1e6) * 1e3))
        retx = (
            "–"
            if m["mode"] == "gloo"
            else f"{m['timer_retransmissions']} / {m['fast_retransmissions']} / {m['probe_retransmissions']}"
        )
        row += [_n(m["aggregation_ms"]), _n(m["sent_bytes_per_step"], 0), _n(m["received_bytes_per_step"], 0), retx]
        rows.append(row)
    return table(header, rows)


def _target(figures: dict) -> str:
    """thc-run's time-to-target threshold in its metric's words."""
    if figures["modes"] and figures["modes"][0].get("metric") == "bpc":
        return f"{figures['target']:g} validation bits per character"
    return f"{figures['target']:.0%} test accuracy"


def render_thc_run(figures: dict) -> str:
    """thc-run's logs/summary.json: the modes' training figures and the speed-ups it printed."""
    run = figures["run"]
    bw = figures.get("bw_mbit")
    head = (
        f"{run.get('topology')}, {run.get('workers')} workers, {run.get('target')}, {run.get('model')}, "
        f"{run.get('steps')} steps per mode, "
        + (f"{bw:g} Mbit/s links" if bw else "links not slowed")
        + (" (chosen by `--bw auto`)" if run.get("bw_auto") else "")
        + (f", {run['loss_pct']:g} % loss" if run.get("loss_pct") else "")
        + (f"; time to {_target(figures)}" if figures.get("target") else "")
        + ":\n"
    )
    lines = [head, training_table(figures["modes"], bw)]
    thc = next((m for m in figures["modes"] if m["mode"] == "thc"), None)
    if thc:
        for key, value in sorted(thc.items()):
            if key.startswith("speedup_vs_") and key != "speedup_vs_thc" and value is not None:
                other = label(key.removeprefix("speedup_vs_"))
                lines.append(f"\nTHC reached the target {value:.2f}× sooner than {other}.")
    failures = [failure_line(m["mode"], f) for m in figures["modes"] for f in m.get("failures") or []]
    if failures:
        lines.append("\nFailures (seconds from the kill):\n")
        lines += [f"- {line}" for line in failures]
    return "\n".join(lines)


def render_pipeline(figures: list[dict]) -> str:
    """bench_pipeline.py: requests through the program per target and K."""
    targets = list(dict.fromkeys(f["target"] for f in figures))
    ks = sorted({f["k"] for f in figures})
    rows = []
    for k in ks:
        row = [f"{k:,}"]
        for t in targets:
            f = next((f for f in figures if f["target"] == t and f["k"] == k), None)
            row.append(
                "–" if f is None else f"{f['packets_per_s']:,.0f} pkt/s = {f['coordinates_per_s'] / 1e6:,.1f} M coord/s"
            )
        rows.append(row)
    op = figures[0]["op"].upper() if figures else "THC"
    window = figures[0]["window"] if figures else "?"
    lead = f"{op} requests through the program (window {window} on veth targets):\n"
    return lead + "\n" + table(["K (coordinates/packet)", *(TARGET_LABELS.get(t, t) for t in targets)], rows)


def render_two_level(figures: dict) -> str:
    """bench_two_level.py: bytes on the spine links per round, spine-only against two-level aggregation."""
    rows = [
        [f"{r['levels']}", f"{r['workers']}", f"{r['rounds']}", _n(r["spine_link_bytes_per_round"], 0)]
        for r in figures["runs"]
    ]
    lead = f"Loss {figures['loss']:g} per frame and link; sums checked against thc's reference every round:\n\n"
    ratio = f"\n\ntwo-level/one-level spine bytes per round: **{figures['ratio']:.3f}**"
    return lead + table(["levels", "workers", "rounds", "spine-link bytes per round"], rows) + ratio


def render_stragglers(figures: dict) -> str:
    """bench_stragglers.py: waiting for every worker against partial aggregation with one straggler."""
    rows = []
    for name, r in sorted(figures["runs"].items(), key=lambda item: item[0] != "wait"):  # wait first
        reached = "not reached" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.2f} s"
        rows.append(
            [
                "wait for all" if name == "wait" else f"partial ({r['straggler_timeout_ms']:g} ms timeout)",
                _n(r["step_ms"]),
                _n(r["straggler_step_ms"]),
                reached,
                f"{r['final_metric']:.3f}",
                "yes" if r["ranks_identical"] else "no",
                str(r["releases"]),
            ]
        )
    lead = (
        f"{figures['model']}, {figures['workers']} workers in one process, worker {figures['workers'] - 1} "
        f"sleeping {figures['delay_ms']:g} ms a step, {figures['steps']} steps:\n\n"
    )
    header = ["run", "step ms", "straggler's step ms", "time to target", "final", "ranks identical", "releases"]
    return lead + table(header, rows) + f"\n\npartial/wait step time: **{figures['ratio']:.3f}**"


def render_switch(figures: dict) -> str:
    """bench_switch.py: the software switch's engine alone, packets a second per workload, backend and call."""
    columns = [("python", "process"), ("native", "process"), ("native", "batched")]
    labels = {
        ("python", "process"): "Python `process()`",
        ("native", "process"): "native `process()` (a ctypes call per frame)",
        ("native", "batched"): "native batched (`process_batch`, one C call)",
    }
    rows = []
    for workload in sorted({r["workload"] for r in figures["rows"]}):
        cells = []
        for backend, mode in columns:
            r = next(
                (r for r in figures["rows"] if (r["workload"], r["backend"], r["mode"]) == (workload, backend, mode)),
                None,
            )
            cells.append("–" if r is None else f"{r['pps']:,.0f} pkt/s")
        rows.append([workload, *cells])
    lead = f"A THC data packet is a full request of {figures['thc_coords_per_request']:,} coordinates:\n\n"
    return lead + table(["workload", *(labels[c] for c in columns)], rows)


def render_pool(figures: dict) -> str:
    """bench_pool.py: one trace of jobs under static partitions, the shared pool and no switch, per link rate."""
    setup, trace = figures["setup"], figures["trace"]
    names = POLICY_NAMES
    rows = []
    rates = sorted(figures["rates"], key=float, reverse=True)  # the record's keys are sorted as text
    for rate in rates:
        for policy in sorted(figures["rates"][rate], key=lambda p: list(names).index(p) if p in names else 9):
            f = figures["rates"][rate][policy]
            rows.append(
                [
                    f"{rate} Mbit/s",
                    names.get(policy, policy),
                    _n(f["mean_jct_s"], 2),
                    _n(f["p95_jct_s"], 2),
                    _n(f["mean_wait_s"], 2),
                    f"{f['fallback_share']:.1%}",
                    str(f["wrong_sums"]),
                ]
            )
    lead = (
        f"{len(trace)} jobs of {trace[0]['workers']} workers, {trace[0]['steps']} steps each, arriving over "
        f"{trace[-1]['start']:g} s (virtual time), {setup['budget']} switch slots: "
        f"{setup['budget'] // setup['window']} job(s) fit statically, a pool of {2 * setup['budget']} cells:\n\n"
    )
    header = ["links", "policy", "mean JCT s", "p95 JCT s", "mean wait s", "uses fallen back", "wrong sums"]
    ratios = ", ".join(f"**{figures['ratio'][rate]:.3f}** at {rate} Mbit/s" for rate in rates)
    return lead + table(header, rows) + f"\n\npool/static mean JCT: {ratios} (floor 0.75)"


POLICY_NAMES = {"static": "static partitions", "pool": "shared pool", "none": "no switch (parameter server)"}


def _fell_back(f: dict) -> str:
    """A policy's uses that fell back: none for static partitions (no pool)."""
    return "–" if f["uses"] is None else f"{f['fallback_share']:.1%} ({f['fallbacks']}/{f['uses']})"


def render_pool_trained(figures: dict) -> str:
    """bench_pool.py --trained: the trace trained by thc-run --trace on Mininet, per policy."""
    setup, trace = figures["setup"], figures["trace"]
    rows = []
    order = list(POLICY_NAMES)  # the record's keys are sorted by name
    for policy, f in sorted(figures["policies"].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 9):
        reached = "yes" if not f["unreached"] else "no: " + ", ".join(f["unreached"])
        differ = ", ".join(f["replicas_differ"]) or "0"
        row = [_n(f["mean_jct_s"]), _n(f["p95_jct_s"]), _n(f["mean_wait_s"]), _n(f["mean_run_s"]),
               _n(f["mean_setup_s"]), _n(f["mean_train_s"]), reached, _fell_back(f), differ]  # fmt: skip
        rows.append([POLICY_NAMES.get(policy, policy), *row])
    models = ", ".join(sorted({j["model"] for j in trace}))
    lead = (
        f"{len(trace)} jobs ({models}, {sum(j['workers'] for j in trace)} workers) trained with `thc-run --trace` "
        f"on Mininet, arriving over {trace[-1]['start']:g} s: {setup['slots']} slots a job "
        f"({setup['cells'] // 2 // setup['slots']} fit statically, a pool of {setup['cells']} cells), window "
        f"{setup['window']}, links {setup['bw_mbit']:g} Mbit/s:\n\n"
    )
    header = ["policy", "mean JCT s", "p95 JCT s", "mean wait s", "mean run s", "of it setup s", "training s",
              "every job at its target", "uses fallen back", "jobs whose workers' models differ"]  # fmt: skip
    ratios = figures.get("ratios") or [figures["ratio"]]
    runs = "" if len(ratios) == 1 else f" over {len(ratios)} runs (per run: {', '.join(f'{r:.3f}' for r in ratios)})"
    return lead + table(header, rows) + f"\n\npool/static mean JCT: **{figures['ratio']:.3f}**{runs} (floor 0.75)"


def render_trace(figures: dict) -> str:
    """thc-run --trace's logs/summary.json: its jobs and the policy's summary line."""
    rows = []
    for r in figures["jobs"]:
        tta = "not reached" if r["time_to_target_s"] is None else _n(r["time_to_target_s"])
        fell = "–" if r["uses"] is None else f"{r['fallbacks']}/{r['uses']}"
        rows.append([r["name"], label(r["mode"]), r["model"], str(r["workers"]), _n(r["wait_s"]),
                     _n(r["completion_s"]), tta, fell])  # fmt: skip
    bw = figures.get("bw_mbit")
    lead = (
        f"`thc-run --trace {figures['trace']}` on {figures['topology']}, {figures['target']}, "
        + (f"{bw:g} Mbit/s links" if bw else "links not slowed")
        + f", policy {POLICY_NAMES.get(figures['policy'], figures['policy'])}:\n\n"
    )
    header = ["job", "mode", "model", "workers", "wait s", "completion s", "to target s", "rounds fallen back"]
    reached = "every job reached its target" if figures.get("all_reached") else "not every job reached its target"
    tail = (
        f"\n\nMean completion **{figures['mean_completion_s']:.1f} s**, p95 {figures['p95_completion_s']:.1f} s, "
        f"rounds fallen back {figures['fallback_share']:.1%}; {reached}."
    )
    return lead + table(header, rows) + tail


def render_faults(figures: dict) -> str:
    """bench_faults.py: every fault and mode in the benchmark's own columns (bench_faults.cells)."""
    from bench import bench_faults

    where = []
    if figures.get("steps"):
        where.append(f"on Mininet {figures['model']}, {figures['steps']} steps at {figures['bw_mbit']:g} Mbit/s")
    if figures.get("inprocess_steps"):
        where.append(f"in process mlp-digits, {figures['inprocess_steps']} steps")
    lead = f"Modes {', '.join(figures['modes'])}; " + "; ".join(where) + ":\n\n"
    return lead + table(list(bench_faults.HEADER), [bench_faults.cells(r) for r in figures["rows"]])


def render_ablation(figures: dict) -> str:
    """bench_ablation.py: its own tables (bench_ablation.tables) of the parts the run measured."""
    from bench import bench_ablation

    return bench_ablation.tables(figures).strip("\n")


def render_planner(figures: dict) -> str:
    """bench_timeline.py --planner-only: the plan search's time per preset, model and link rate."""
    speed = figures["planner"]
    rates = sorted({r["gbps"] for r in speed})
    rows = []
    for preset, model in dict.fromkeys((r["preset"], r["model"]) for r in speed):
        found = {r["gbps"]: r for r in speed if (r["preset"], r["model"]) == (preset, model)}
        first = next(iter(found.values()))
        cells = [f"{found[g]['search_ms']:.2f}" if g in found else "–" for g in rates]
        best = "yes" if all(r["exact"] for r in found.values()) else "no"
        rows.append([preset, model, str(first["buckets"]), f"{first['plans']:.3g}", *cells, best])
    header = ["preset", "model", "buckets", "plans", *(f"ms at {g:g} Gbit/s" for g in rates), "provably best"]
    worst = max(r["search_ms"] for r in speed)
    lead = "The plan search's time, median of 5 searches per model and link rate:\n\n"
    return lead + table(header, rows) + f"\n\nat most **{worst:.2f} ms** per model and rate"


def render_timeline(figures: dict) -> str:
    """bench_timeline.py on Mininet: measured against predicted step time per uniform mode's case (as
    plan_cli.validation_table counts them), then each plan against the best uniform mode."""
    rows, errors = [], []
    for c in (c for c in figures["cases"] if c["mode"] != "plan"):
        error = (c["predicted_ms"] - c["measured_ms"]) / c["measured_ms"] * 100
        errors.append(abs(error))
        rows.append([c["model"], label(c["mode"]), f"{c['mbps']:g}", _n(c["measured_ms"]), _n(c["predicted_ms"])])
        rows[-1].append(f"{error:+.1f} %")
    lead = (
        f"{figures['workers']} workers, {figures['steps']} steps a run, the first {figures['warmup']} left out, "
        "median step:\n\n"
    )
    out = lead + table(["model", "mode", "Mbit/s", "measured ms", "predicted ms", "error"], rows)
    if errors:
        out += f"\n\nmedian |error| **{statistics.median(errors):.1f} %** over {len(errors)} cases"
    mixes = [
        [x["model"], f"{x['mbps']:g}", ", ".join(f"{v}" for v in x["plan"].values()), _n(x["plan_ms"])]
        + [f"{label(x['best_uniform'])} {_n(x['best_uniform_ms'])}", f"{x['plan_ms'] / x['best_uniform_ms']:.3f}"]
        for x in figures["mixes"]
    ]
    if mixes:
        header = ["model", "Mbit/s", "plan per bucket", "plan ms", "best uniform ms", "plan / best"]
        out += "\n\n" + table(header, mixes)
    return out


def render_tta(figures: dict) -> str:
    """bench_tta.py: time to target per model, link rate and mode, the step beside its link-bytes bound."""
    rows = [
        [
            r["model"],
            f"{r['bw_mbit']:g}",
            label(r["mode"]),
            "not reached" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.1f} s",
            "–" if r["steps_to_target"] is None else str(r["steps_to_target"]),
            f"{r['final_metric']:.3f}",
            _n(r["step_ms"]),
            _n(r["step_bound_ms"]),
            _n(r["busiest_link_bytes_per_step"], 0),
        ]
        for r in figures["runs"]
    ]
    header = ["model", "Mbit/s", "mode", "to target", "steps", "final", "step ms", "link bound ms", "busiest B/step"]
    lead = f"{figures['workers']} workers, {figures['steps']} steps a run:\n\n"
    lines = [lead + table(header, rows)]
    for s in figures["speedups"]:
        over = [f"{v:.2f}× over {label(k[7:])}" for k, v in s.items() if k.startswith("thc_vs_") and v is not None]
        lines.append(f"THC, {s['model']} at {s['bw_mbit']:g} Mbit/s: " + (", ".join(over) or "no speed-up to report"))
    return "\n\n".join(lines)


def render_thc_plan_project(figures: dict) -> str:
    """`thc-plan project --json`: the timeline model's iteration time per model and link rate for ring fp32,
    FIX32-INA, THC-INA and the per-bucket plan, and where THC's predicted speed-up is the paper's headline."""
    profile = figures["profile"]
    compute = profile["compute"]

    def cell(ms: float, ring_ms: float) -> str:
        return f"{_n(ms)} ({ring_ms / ms:.2f}×)"

    rows = [
        [r["model"], f"{r['gbps']:g}", _n(r["compute_ms"]), _n(r["ring_fp32_ms"])]
        + [cell(r[k], r["ring_fp32_ms"]) for k in ("fix32_ina_ms", "thc_ina_ms", "plan_ms")]
        + [", ".join(f"{mode} {n}" for mode, n in sorted(r["plan_modes"].items()))]
        for r in figures["rows"]
    ]
    lead = (
        f"{profile['name']}, {profile['workers']} workers, GPU at {compute['efficiency']:.0%} of "
        f"{compute['gpu_tflops']:g} TFLOPS, batch {compute['batch_size']}; predicted iteration ms "
        "(speed-up over ring fp32):\n\n"
    )
    header = ["model", "Gbit/s", "compute ms", "ring fp32 ms", "FIX32-INA", "THC-INA", "plan", "plan's buckets"]
    out = lead + table(header, rows)

    def band(rates: list[float]) -> str:
        return f"**{min(rates):.3g}–{max(rates):.3g} Gbit/s**" if rates else "at no rate in 1–400 Gbit/s"

    if figures["headline"]:
        low, high = figures["headline_band"]
        out += f"\n\nLink rates at which THC-INA's predicted speed-up is the paper's {low:.2f}–{high:.2f}×:\n\n"
        out += "\n".join(
            f"- {model}: over ring fp32 {band(h['ring'])}, over FIX32-INA {band(h['fix32'])}"
            for model, h in ((m, figures["headline"][m]) for m in dict.fromkeys(r["model"] for r in figures["rows"]))
            if model in figures["headline"]
        )
    return out


def _power(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"


def render_thc_native(figures: dict) -> str:
    """bench_thc.py --native: one worker's encode and decode, the C codec and the numpy reference."""
    rows = [
        [f"{r['size']:,}", r["path"], _n(r["encode_s"] * 1e6), _n(r["decode_s"] * 1e6)]
        + [_n(r["size"] / r["encode_s"] / 1e6), _n(r["size"] / r["decode_s"] / 1e6)]
        for r in figures["rows"]
    ]
    lead = f"One worker, one chunk, {figures['threads']} torch thread(s), medians, µs per call:\n\n"
    header = ["coordinates", "path", "encode µs", "decode µs", "encode M coord/s", "decode M coord/s"]
    return lead + table(header, rows)


def render_thc(figures: dict) -> str:
    """bench_thc.py: copy, FWHT and THC encode/decode per size (one chunk and 2^20 chunks), the 3x-FWHT
    floor at the largest size, and the NMSE of every compressor on both gradient sources."""
    ops = ["copy", "fwht", "thc encode (1 chunk)", "thc decode (1 chunk)"]
    ops += ["thc encode (2^20 chunks)", "thc decode (2^20 chunks)"]
    seconds = {(r["size"], r["op"]): r["seconds"] for r in figures["throughput"]}
    sizes = sorted({r["size"] for r in figures["throughput"]})
    rows = [[_power(n)] + [_n(seconds[n, op] * 1e3, 3) if (n, op) in seconds else "–" for op in ops] for n in sizes]
    out = f"Medians, {figures['threads']} torch thread(s), ms per call:\n\n" + table(["coordinates", *ops], rows)
    floor = figures["floor"]
    if floor:
        out += (
            f"\n\nFloor at {_power(floor['size'])}: encode + decode ≤ {floor['limit']:g}× one FWHT "
            f"({_n(floor['fwht_s'] * 1e3, 0)} ms), median of the paired ratios: "
        )
        out += "; ".join(
            f"{chunks} **{f['median_paired_ratio']:.2f}** ({'pass' if f['pass'] else 'FAIL'})"
            for chunks, f in floor.items()
            if isinstance(f, dict)
        )
    sources = sorted(figures["nmse"])  # records are written with sorted keys: one order either way
    nmse = [
        [r["family"], r["label"], f"{r['up_bits']:.3g}", f"{r['down_bits']:.3g}"]
        + [f"{figures['nmse'][source][i]['nmse']:.2e}" for source in sources]
        for i, r in enumerate(figures["nmse"][sources[0]])
    ]
    out += f"\n\nNMSE with {figures['workers']} workers, mean of {figures['rounds']} rounds:\n\n"
    return out + table(["compressor", "setting", "bits up", "bits down", *(f"NMSE {s}" for s in sources)], nmse)


def render_switch_ports(figures: dict) -> str:
    """bench_switch_ports.py: IPv4 forwarding through veth pairs, frames a second per target."""
    rows = [
        [r["target"], f"{r['sent']:,}", f"{r['received']:,}", f"{1 - r['received'] / r['sent']:.1%}"]
        + [_n(r["frames_per_s"], 0), _n(r["frames_per_s"] * figures["size"] * 8 / 1e6)]
        for r in figures["rows"]
    ]
    lead = (
        f"IPv4 forwarding ({figures['program']}) through veth pairs, {figures['size']}-byte frames, "
        f"{figures['sender']} sender; the rate is frames received over the time from the first to the last:\n\n"
    )
    return lead + table(["target", "sent", "received", "loss", "frames/s", "Mbit/s"], rows)


def render_slow_switch(figures: dict) -> str:
    """bench_slow_switch.py: the pipeline's pace, then THC and FIX32 training through the same slow target,
    each step beside its link-bytes bound, and issue 31's floors."""
    pipe = figures["pipeline"]
    pace = "BMv2 at its own pace" if figures["target"] == "bmv2" else f"software switch at {figures['pps']:g} frames/s"
    out = (
        f"{pace}; pipeline (K = {figures['k']:,}, window {figures['window']}): "
        f"{_n(pipe['packets_per_s'], 0)} THC requests/s = {_n(pipe['coordinates_per_s'], 0)} coordinates/s. "
        f"`thc-run --modes thc,fix32`, {figures['model']}, {figures['steps']} steps, {figures['bw_mbit']:g} Mbit/s:\n\n"
    )
    rows = []
    for m in figures["modes"]:
        late = (m["timer_retransmissions"] + m["probe_retransmissions"]) / max(1, m["requests"])
        bound = m["busiest_link_bytes_per_step"] * 8 / (figures["bw_mbit"] * 1e6) * 1e3
        retx = f"{m['timer_retransmissions']} / {m['fast_retransmissions']} / {m['probe_retransmissions']}"
        row = [label(m["mode"]), _n(m["step_ms"]), _n(bound), _n(m["goodput_coords_s"], 0), f"{m['requests']:,}"]
        rows.append(row + [retx, f"{late:.2%}"])
    header = ["mode", "step ms", "link bound ms", "coords/s", "requests", "retx timer / fast / probe", "late"]
    out += table(header, rows) + "\n\nFloors (issue 31):\n\n"
    return out + "\n".join(
        f"- {f['what']}: **{f['value']:.3f}** (floor {f['floor']:g}, {'met' if f['met'] else 'not met'})"
        for f in figures["floors"]
    )


RENDERERS = {
    "bench_pool": render_pool,
    "bench_pool_trained": render_pool_trained,
    "thc_run_trace": render_trace,
    "bench_host_agent_worker": render_host_agent_worker,
    "bench_e2e": render_e2e,
    "bench_pipeline": render_pipeline,
    "thc_run": render_thc_run,
    "bench_two_level": render_two_level,
    "bench_stragglers": render_stragglers,
    "bench_switch": render_switch,
    "bench_faults": render_faults,
    "bench_ablation": render_ablation,
    "bench_timeline_planner": render_planner,
    "bench_timeline": render_timeline,
    "bench_tta": render_tta,
    "thc_plan_project": render_thc_plan_project,
    "bench_thc_native": render_thc_native,
    "bench_thc": render_thc,
    "bench_switch_ports": render_switch_ports,
    "bench_slow_switch": render_slow_switch,
}


def render_record(name: str, record: dict) -> str:
    """One generated region's body: the provenance line, then the record's tables."""
    return f"{provenance_line(name, record)}\n\n{RENDERERS[record['benchmark']](record['figures'])}\n"


def load_records(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))}


def render(page: str, records: dict[str, dict]) -> str:
    """`page` with every generated region rewritten from its record; a region without a record is an
    error, since the page would then show figures no record backs."""

    def body(match: re.Match) -> str:
        name = match["name"]
        if name not in records:
            raise SystemExit(f"results: docs/results.md has a region {name!r} but there is no docs/results/{name}.json")
        return match.group(1) + render_record(name, records[name]) + match.group(4)

    return REGION.sub(body, page)


def as_record(path: Path) -> tuple[str, dict]:
    """A benchmark's record as is, or thc-run's summary.json made one (benchmark thc_run)."""
    document = json.loads(Path(path).read_text())
    if "benchmark" in document:
        return document["benchmark"], document
    if "modes" in document and "provenance" in document.get("run", {}):
        run = document["run"]
        figures = {k: document[k] for k in ("model", "bw_mbit", "target", "run", "modes")}
        return "thc_run", {"benchmark": "thc_run", **run["provenance"], "figures": figures}
    if {"policy", "jobs", "provenance"} <= set(document):  # thc-run --trace's summary
        figures = {k: v for k, v in document.items() if k not in ("provenance", "occupancy")}
        return "thc_run_trace", {"benchmark": "thc_run_trace", **document["provenance"], "figures": figures}
    raise SystemExit(f"results: {path} is neither a benchmark's record nor a thc-run summary with its provenance")


def main(argv=None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--add", nargs="+", type=input_file, default=[], metavar="RECORD", help="records to keep first")
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/results.md is not what the records render")
    ap.add_argument("--name", help="keep the one --add record under this name (default: its benchmark's)")
    args = ap.parse_args(argv)
    for path in args.add:
        name, record = as_record(path)
        name = args.name or name
        RECORDS.mkdir(parents=True, exist_ok=True)
        (RECORDS / f"{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"kept {path} as docs/results/{name}.json")
    page = PAGE.read_text()
    rendered = render(page, load_records(RECORDS))
    if args.check:
        if rendered != page:
            print("docs/results.md is not what docs/results/*.json render: run `make results`", file=sys.stderr)
            return 1
        return 0
    if rendered != page:
        PAGE.write_text(rendered)
        print("rewrote docs/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
