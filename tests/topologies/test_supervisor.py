"""The run's supervisor removes what the ledger lists once its runner dies, however it died, and only then.

A stand-in runner (a Python process that keeps a ledger, starts the supervisor and a "switch" in its own
session, as thc-run does) is killed with SIGKILL. No root needed: only processes are involved here; the
Mininet test in tests/e2e/test_supervisor.py covers namespaces, links and qdiscs.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from topologies import supervisor
from topologies.ledger import SUPERVISOR_ROLE, Ledger, process_start_time

REPO = Path(__file__).resolve().parents[2]

FAKE_RUNNER = """
import subprocess, sys, time
from pathlib import Path
from topologies.ledger import Ledger
from topologies import supervisor
ledger = Ledger(Path(sys.argv[1]))
ledger.save()
supervisor.start(ledger, Path(sys.argv[2]))
switch = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
ledger.add_process(switch.pid, "switch s1")
print("ready", flush=True)
time.sleep(600)
"""


def start_fake_runner(tmp_path: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_RUNNER, str(tmp_path / "run-state.json"), str(tmp_path / "supervisor.log")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def poll(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def kill_all(entries) -> None:
    """Test cleanup: end what a failed test left (only the processes this test started)."""
    for entry in entries:
        if process_start_time(entry.pid) == entry.start_time:
            os.kill(entry.pid, signal.SIGKILL)


def test_sigkill_of_the_runner_ends_its_switch_and_retires_the_ledger(tmp_path):
    runner = start_fake_runner(tmp_path)
    ledger = Ledger.load(tmp_path / "run-state.json")
    try:
        assert [p.role for p in ledger.live_processes()] == [SUPERVISOR_ROLE, "switch s1"]
        killed = time.monotonic()
        runner.kill()
        runner.wait()
        assert poll(lambda: ledger.live_processes() == [], timeout=20), [p.role for p in ledger.live_processes()]
        assert poll(lambda: not (tmp_path / "run-state.json").exists(), timeout=5)
        print(f"nothing left {time.monotonic() - killed:.2f} s after SIGKILL")
        retired = Ledger.load(tmp_path / "run-state.removed.json")
        assert [p.pid for p in retired.processes] == [p.pid for p in ledger.processes]
        log = (tmp_path / "supervisor.log").read_text()
        assert "is gone" in log and "stopping switch s1" in log and "nothing of the run is left" in log
    finally:
        kill_all(ledger.processes)


def test_a_normal_teardown_stops_the_supervisor_last_and_it_removes_nothing_itself(tmp_path):
    ledger = Ledger(tmp_path / "run-state.json")
    ledger.save()
    sup = supervisor.start(ledger, tmp_path / "supervisor.log")
    switch = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    ledger.add_process(switch.pid, "switch s1")
    try:
        reports = []
        ledger.teardown(grace=2.0, report=reports.append)
        assert reports == [f"stopping switch s1 (pid {switch.pid})"]  # the supervisor is not reported
        assert ledger.live_processes() == [] and sup.process.poll() is not None
        assert (tmp_path / "run-state.removed.json").exists() and not (tmp_path / "run-state.json").exists()
        assert "removing" not in (tmp_path / "supervisor.log").read_text()
    finally:
        kill_all(ledger.processes)


def test_the_supervisor_leaves_a_ledger_of_another_run_alone(tmp_path):
    """The runner finished and a new run took the log directory before the supervisor looked."""
    runner = start_fake_runner(tmp_path)
    first = Ledger.load(tmp_path / "run-state.json")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        newer = Ledger(tmp_path / "run-state.json")  # owned by this test process, which lives on
        newer.add_process(other.pid, "switch of the newer run")
        runner.kill()
        runner.wait()
        sup = [p for p in first.processes if p.role == SUPERVISOR_ROLE]
        assert poll(lambda: Ledger(tmp_path / "x", sup).live_processes() == [], timeout=20)
        assert other.poll() is None and (tmp_path / "run-state.json").exists()
        assert "belongs to another run" in (tmp_path / "supervisor.log").read_text()
    finally:
        kill_all(first.processes)
        other.kill()
        other.wait()
