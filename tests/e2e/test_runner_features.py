"""The real path of the features the README claims, each in a short `thc-run` on Mininet with the compiled
program on the software switch: a switch process killed and restarted mid-training (re-programmed over
P4Runtime, training going on to its target), a straggler released by partial aggregation, and lost
requests recovered by QUERY and STATUS."""

import json
import subprocess
import sys
from pathlib import Path

from controller.topology import Topology
from tests.support.e2e import REPO, mininet_marks, wait_until_free

pytestmark = mininet_marks()


def thc_run(log_dir: Path, *extra: str) -> tuple[dict, str]:
    """A short thc-run of mode thc on mlp-digits: its summary's one mode and what it printed."""
    wait_until_free(Topology.load(REPO / "topologies" / "star4.json"))
    argv = [sys.executable, "-m", "topologies.runner", "--log-dir", str(log_dir), "--no-pcap", "--modes", "thc"]
    run = subprocess.run(
        [*argv, "--model", "mlp-digits", "--bw", "50", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    summary = json.loads((log_dir / "summary.json").read_text())
    return summary["modes"][0], output


def worker_stats(log_dir: Path) -> list[dict]:
    return [json.loads(p.read_text())["aggregator"] for p in sorted((log_dir / "thc").glob("h*.json"))]


def test_a_switch_killed_mid_training_is_restarted_and_training_reaches_its_target(tmp_path):
    mode, output = thc_run(tmp_path, "--steps", "150", "--restart-switch", "s1:10", "--target-acc", "0.8")
    restarts = [f for f in mode["failures"] if f["kind"] == "switch_restart"]
    assert len(restarts) == 1, output[-3000:]
    restart = restarts[0]
    assert restart["step"] == 10 and restart["reprogrammed_s"] is not None and restart["recovered_s"] is not None
    assert restart["epoch"] is not None  # the job was added again, in a new epoch
    assert mode["steps"] == 150 and mode["steps_to_target"] is not None and mode["steps_to_target"] > 10, output[-3000:]


def test_a_straggler_is_released_and_lost_requests_are_queried(tmp_path):
    extra = ["--steps", "30", "--straggler", "h4:40", "--straggler-timeout", "10", "--query", "--loss", "2"]
    mode, output = thc_run(tmp_path, *extra)
    stats = worker_stats(tmp_path)
    assert len(stats) == 4
    assert sum(s["releases"] for s in stats) > 0, output[-3000:]  # partial aggregation let the others go on
    assert sum(s["partial_results"] for s in stats) > 0
    assert sum(s["statuses"] for s in stats) > 0  # a retransmission asked the switch first
    assert mode["steps"] == 30 and mode["final_metric"] is not None
