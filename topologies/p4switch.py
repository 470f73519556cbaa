"""A Mininet switch node that runs a P4Runtime switch process (our thc-switch or BMv2).

Like Mininet's default switches the node lives in the root namespace with interfaces ``sN-ethK``; unlike
them it needs no Open vSwitch and no OpenFlow controller. The process is started in its own session, so a
Ctrl-C on the runner's terminal reaches the runner (which then stops everything in order) and not the
switch first. ``wait_ready`` is p4lang/tutorials' start check: the process is alive and its gRPC port
accepts connections.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from mininet.node import Switch

from topologies.targets import SwitchLaunch, stop_process


class SwitchStartError(RuntimeError):
    pass


class P4RuntimeSwitchNode(Switch):
    """Mininet node for one P4Runtime switch; ``launch_factory(node)`` gives its command line once its
    interfaces exist, ``on_start(pid, role)`` records the process (the runner's ledger)."""

    def __init__(self, name, launch_factory=None, on_start=None, grpc_port=None, **params):
        params["inNamespace"] = False
        super().__init__(name, **params)
        self.launch_factory = launch_factory
        self.on_start = on_start
        self.grpc_port = grpc_port
        self.process: subprocess.Popen | None = None
        self.launch: SwitchLaunch | None = None

    def start(self, controllers, append: bool = False):  # Mininet's signature; we have no OpenFlow controllers
        """Start the switch process; `append`: keep its log (a restart after a crash, whose last words are there)."""
        self.launch = self.launch_factory(self)
        self.launch.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.launch.log_file, "ab" if append else "wb") as log:
            self.process = subprocess.Popen(
                self.launch.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if self.on_start:
            self.on_start(self.process.pid, f"switch {self.name}")

    def wait_ready(self, timeout: float) -> None:
        """Return once gRPC answers on 127.0.0.1:grpc_port; raise naming the log otherwise."""
        address = f"gRPC 127.0.0.1:{self.grpc_port}"
        answers = lambda: port_open("127.0.0.1", self.grpc_port)
        wait_answering(self.process, answers, f"switch {self.name}", address, self.launch.log_file, timeout)

    def stop(self, deleteIntfs=True):
        stop_process(self.process, timeout=5)
        super().stop(deleteIntfs)


def wait_answering(process, answers, who: str, where: str, log_file: Path, timeout: float) -> None:
    """p4lang/tutorials' start check: return once `answers()` (the process's P4Runtime server accepts a
    connection at `where`) while the process is alive; raise naming its log otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        if code is not None:
            raise SwitchStartError(f"{who} exited with code {code} during start-up; see {log_file}:\n{tail(log_file)}")
        if answers():
            return
        if time.monotonic() > deadline:
            raise SwitchStartError(
                f"{who} did not answer on {where} within {timeout:.0f} s; see {log_file}:\n{tail(log_file)}"
            )
        time.sleep(0.1)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "    (no log written)"
    return "\n".join("    " + line for line in text[-lines:]) or "    (log is empty)"
