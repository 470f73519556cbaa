"""kill -9 of `thc-run` mid-training leaves nothing: the run's supervisor removes every process, namespace,
link and qdisc of the run within seconds, with no `thc-run --stop`.

The two-switch topology with bandwidth and loss: its s1-s2 link lives in the root namespace (it does not
vanish with a host namespace), and every link end carries htb and clsact qdiscs.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from controller.topology import Topology
from tests.support.e2e import REPO, mininet_marks, wait_until_free
from topologies.ledger import Ledger
from topologies.p4switch import port_open

pytestmark = mininet_marks()

THC_RUN = [sys.executable, "-m", "topologies.runner"]
TOPO = REPO / "topologies" / "two_tier.json"
DEADLINE = 30.0  # seconds after the kill; the supervisor needs the ledger's grace (3 s) at most


def net_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def processes_in(namespaces: set[str]) -> list[int]:
    """Every process on the machine that is still inside one of ``namespaces``."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and net_namespace(int(p)) in namespaces]


def qdiscs(iface: str) -> str:
    out = subprocess.run(["tc", "qdisc", "show", "dev", iface], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def wait_for_training(log_dir: Path, run: subprocess.Popen, timeout: float = 300.0) -> Ledger:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.poll() is None, run.stdout.read()
        ledger = Ledger.load(log_dir / "run-state.json")
        logs = list((log_dir / "thc").glob("h*.log"))
        if (
            ledger
            and any(p.role.startswith("worker") for p in ledger.processes)
            and any('"event": "step"' in p.read_text(errors="replace") for p in logs)
        ):
            return ledger
        time.sleep(0.2)
    raise AssertionError("training never started")


def test_sigkill_of_thc_run_leaves_nothing_within_seconds(tmp_path):
    topo = Topology.load(TOPO)
    wait_until_free(topo)
    run = subprocess.Popen(
        THC_RUN
        + [
            "--topo",
            str(TOPO),
            "--log-dir",
            str(tmp_path),
            "--no-pcap",
            "--modes",
            "thc",
            "--steps",
            "1000",
            "--bw",
            "100",
            "--loss",
            "1",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ledger = wait_for_training(tmp_path, run)
        hosts = [p for p in ledger.live_processes() if p.role.startswith("host ")]
        namespaces = {net_namespace(p.pid) for p in hosts} - {None, net_namespace(os.getpid())}
        names = [i.name for i in ledger.interfaces]
        assert len(namespaces) == 4 and {"s1-eth3", "s2-eth3"} <= set(names)
        assert "htb" in qdiscs("s1-eth3") and "clsact" in qdiscs("s1-eth3")
        assert any(p.role == "switch s1" for p in ledger.live_processes())

        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=30)
        killed = time.monotonic()

        def leftovers() -> list:
            left = [p.role for p in ledger.live_processes()]
            left += [f"interface {n}" for n in names if Path(f"/sys/class/net/{n}").exists()]
            left += [f"qdisc on {n}" for n in names if qdiscs(n)]
            left += [f"pid {pid} in a host namespace" for pid in processes_in(namespaces)]
            left += [s.grpc_addr for s in topo.switches.values() if port_open("127.0.0.1", s.grpc_port)]
            return left

        while leftovers() and time.monotonic() - killed < DEADLINE:
            time.sleep(0.1)
        assert leftovers() == []
        print(f"nothing of the run left {time.monotonic() - killed:.1f} s after SIGKILL of thc-run")
        assert not (tmp_path / "run-state.json").exists() and (tmp_path / "run-state.removed.json").exists()
        assert "nothing of the run is left" in (tmp_path / "supervisor.log").read_text()
        stop = subprocess.run(
            THC_RUN + ["--stop", "--log-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert stop.returncode == 0 and "nothing to stop" in stop.stdout, stop.stdout + stop.stderr
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if (tmp_path / "run-state.json").exists():  # the test failed: the fallback removes the run
            subprocess.run(THC_RUN + ["--stop", "--log-dir", str(tmp_path)], cwd=REPO, timeout=120)
