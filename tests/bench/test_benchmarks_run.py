"""Every benchmark's quick form runs to its end and prints its table, so that none rots unseen (and every
benchmark in bench/ has one here).

No figure is asserted (figures belong to the machine and the moment); only that the benchmark exits 0,
prints the line that closes its report and writes its results file into a test folder, never bench/out/.
The Mininet ones need root and Mininet, as the end-to-end tests do.
"""

import os
import subprocess
import sys

import pytest

from tests.support.e2e import mininet_marks
from tests.support.paths import REPO

# (benchmark, its quick arguments ({out} is the test's folder), a line its report always prints, file written
# or None for one that writes none)
IN_PROCESS = [
    ("bench_two_level", ["--rounds", "2", "--out", "{out}"], "two-level/one-level spine bytes", "bench_two_level.json"),
    ("bench_stragglers", ["--steps", "4", "--out", "{out}/s.json"], "partial/wait step time", "s.json"),
    (
        "bench_ablation",
        ["--no-tta", "--rounds", "1", "--workers", "8", "--sources", "gaussian", "--out", "{out}"],
        "sums differing from thc's reference aggregation",
        "bench_ablation.json",
    ),
    (
        "bench_faults",
        ["--quick", "--no-mininet", "--inprocess-steps", "6", "--out", "{out}/f.json"],
        "silent leaf",
        "f.json",
    ),
    ("bench_pool", ["--quick", "--rate-mbit", "20", "--out", "{out}"], "pool/static mean JCT", "bench_pool.json"),
    (  # the trace of overlapping aggregation bursts
        "bench_pool",
        ["--quick", "--contention", "--rate-mbit", "20", "--out", "{out}"],
        "pool/static mean JCT",
        "bench_pool.json",
    ),
    ("bench_switch", ["--packets", "200", "--out", "{out}"], "switch.json", "bench_switch.record.json"),
    (
        "bench_pipeline",
        ["--targets", "engine", "--packets", "200", "--k", "1024", "--out", "{out}"],
        "data packets through the pipeline",
        "bench_pipeline.record.json",
    ),
    ("bench_thc", ["--native", "--out", "{out}"], "THC codec, native vs numpy", "bench_thc_native.record.json"),
]
ON_MININET = [  # and the ones that make veth pairs (root)
    (
        "bench_host_agent",
        ["--worker-only", "--quick", "--out", "{out}"],
        "full THC round, 1048576 coordinates",
        "bench_host_agent_worker.record.json",
    ),
    ("bench_tta", ["--modes", "thc", "--bw", "50", "--steps", "10", "--out", "{out}"], "THC at 50", "bench_tta.json"),
    (
        "bench_timeline",
        ["--bw", "50", "--models", "mlp-digits", "--modes", "thc", "--steps", "6", "--warmup", "2", "--no-plan"]
        + ["--out", "{out}"],
        "median |error|",
        "bench_timeline.json",
    ),
    (
        "bench_slow_switch",
        ["--steps", "6", "--pipeline-rounds", "2", "--no-pcap", "--out", "{out}/slow.json"],
        "THC step / FIX32 step",
        "bench_slow_switch.record.json",  # beside slow.json
    ),
    (
        "bench_e2e",
        ["--modes", "thc,fix32", "--steps", "0", "--rounds", "2", "--bw", "100", "--out", "{out}"],
        "wrote",
        "bench_e2e.record.json",
    ),
    (
        "bench_switch_ports",
        ["--frames", "2000", "--targets", "thc-switch,passthrough", "--out", "{out}"],
        "frames/s",
        "bench_switch_ports.record.json",
    ),
]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    "name, args, closing, written",
    [pytest.param(*case, id=case[0]) for case in IN_PROCESS]
    + [pytest.param(*case, id=case[0], marks=mininet_marks()) for case in ON_MININET],
)
def test_a_benchmark_runs_its_quick_form(tmp_path, name, args, closing, written):
    argv = [sys.executable, str(REPO / "bench" / f"{name}.py"), *(a.replace("{out}", str(tmp_path)) for a in args)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-3000:]
    assert closing in report, report[-3000:]
    assert written is None or (tmp_path / written).is_file()


def test_every_benchmark_has_a_quick_form_here():
    """A benchmark added to bench/ without a quick form above would run in no test and rot unseen."""
    scripts = {p.stem for p in (REPO / "bench").glob("bench_*.py")}
    listed = {case[0] for case in IN_PROCESS + ON_MININET}
    assert scripts - listed == set(), "give these a quick form in IN_PROCESS or ON_MININET"
    assert listed - scripts == set(), "these are listed but no longer in bench/"
