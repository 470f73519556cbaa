"""`thc-run` as a user runs it: a short run ends with a summary, and a run interrupted at any point
(Ctrl-C during bring-up or training, or killed outright and then `thc-run --stop`) leaves no process,
namespace or interface behind. Namespaces are anonymous and die with their last process, so "no recorded
process alive and no recorded interface present" covers all three."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from controller.topology import Topology
from tests.support.e2e import REPO, mininet_marks, wait_until_free
from topologies.ledger import SUPERVISOR_ROLE, Ledger

pytestmark = mininet_marks()

THC_RUN = [sys.executable, "-m", "topologies.runner"]


def start_run(log_dir: Path, *extra: str) -> subprocess.Popen:
    wait_until_free(Topology.load(REPO / "topologies" / "star4.json"))
    return subprocess.Popen(
        THC_RUN + ["--log-dir", str(log_dir), "--no-pcap", *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_ledger(log_dir: Path, condition, timeout: float = 240.0) -> Ledger:
    """The run's ledger once ``condition(ledger)`` holds (polling the file the runner keeps)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ledger = Ledger.load(log_dir / "run-state.json")
        if ledger is not None and condition(ledger):
            return ledger
        time.sleep(0.1)
    raise AssertionError(f"the run never reached the expected state; ledger: {Ledger.load(log_dir / 'run-state.json')}")


def training_started(log_dir: Path, mode: str = "thc"):
    def condition(ledger: Ledger) -> bool:
        logs = list((log_dir / mode).glob("h*.log"))
        return any(p.role.startswith("worker") for p in ledger.processes) and any(
            '"event": "step"' in p.read_text(errors="replace") for p in logs
        )

    return condition


def assert_all_removed(ledger: Ledger) -> None:
    assert ledger.processes and ledger.live_processes() == [], [p.role for p in ledger.live_processes()]
    assert ledger.live_interfaces() == [], [i.name for i in ledger.live_interfaces()]


def test_short_run_prints_a_summary_and_cleans_up(tmp_path):
    run = start_run(tmp_path, "--modes", "thc,gloo", "--steps", "12")
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 0, output
    assert "THC via switch" in output and "gloo all-reduce" in output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [m["mode"] for m in summary["modes"]] == ["thc", "gloo"]
    assert all(m["steps"] == 12 and m["sent_bytes_per_step"] > 0 for m in summary["modes"])
    assert (tmp_path / "training.png").stat().st_size > 0
    assert_all_removed(removed_ledger(tmp_path))


def test_ctrl_c_during_bring_up_leaves_nothing(tmp_path):
    run = start_run(tmp_path, "--modes", "thc", "--steps", "1000")
    wait_for_ledger(tmp_path, lambda ledger: len(ledger.processes) >= 2)  # some hosts exist, not all
    run.send_signal(signal.SIGINT)
    output, _ = run.communicate(timeout=120)
    assert run.returncode == 130, output
    assert "interrupted" in output
    assert_all_removed(removed_ledger(tmp_path))


def test_ctrl_c_during_training_leaves_nothing(tmp_path):
    run = start_run(tmp_path, "--modes", "thc", "--steps", "1000")
    wait_for_ledger(tmp_path, training_started(tmp_path))
    run.send_signal(signal.SIGINT)
    output, _ = run.communicate(timeout=120)
    assert run.returncode == 130, output
    assert_all_removed(removed_ledger(tmp_path))


def test_killed_run_is_removed_by_stop(tmp_path):
    """The fallback when even the run's supervisor was lost (tests/e2e/test_supervisor.py: when it is not)."""
    run = start_run(tmp_path, "--modes", "thc", "--steps", "1000")
    ledger = wait_for_ledger(tmp_path, training_started(tmp_path))
    for entry in ledger.live_processes():
        if entry.role == SUPERVISOR_ROLE:
            os.kill(entry.pid, signal.SIGKILL)  # first: it would remove the run as soon as the runner dies
    run.kill()  # no chance to clean up
    run.communicate(timeout=30)
    ledger = Ledger.load(tmp_path / "run-state.json")
    assert ledger.live_processes() and ledger.live_interfaces(), "a killed runner leaves its network up"
    stop = subprocess.run(
        THC_RUN + ["--stop", "--log-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert_all_removed(removed_ledger(tmp_path))
    again = subprocess.run(
        THC_RUN + ["--stop", "--log-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and "nothing to stop" in again.stdout


def removed_ledger(log_dir: Path) -> Ledger:
    """What the run recorded, as retired by its cleanup (the live file must be gone)."""
    assert not (log_dir / "run-state.json").exists()
    return Ledger.load(log_dir / "run-state.removed.json")
