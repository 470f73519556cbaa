"""Starting BMv2's simple_switch_grpc for tests: one way, with ports of its own.

BMv2's defaults (Thrift on 9090, ipc:///tmp/bmv2-<id>-notifications.ipc) are machine-wide, so every start
takes a free Thrift port and a notifications socket in its own folder; gRPC listens on a free loopback
port. Readiness is p4lang/tutorials' check: the process is alive and its gRPC port accepts connections.
"""

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from topologies.targets import find_executable, free_tcp_port, stop_process


def bmv2_binary() -> str | None:
    """simple_switch_grpc where the runner looks for it (topologies.targets), else None."""
    return find_executable("bmv2")


class Bmv2Process:
    """A running simple_switch_grpc; `address` is its gRPC endpoint, `log` its combined output."""

    def __init__(self, workdir: Path, args: list[str] = (), start_timeout: float = 60.0, binary: str | None = None):
        binary = binary or bmv2_binary()
        if binary is None:
            pytest.skip("simple_switch_grpc is not installed")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_tcp_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = workdir / "bmv2.log"
        argv = [
            binary,
            "--device-id",
            "0",
            "--notifications-addr",
            f"ipc://{workdir / 'notifications.ipc'}",
            "--thrift-port",
            str(free_tcp_port()),
            *args,
            "--",
            "--grpc-server-addr",
            self.address,
        ]
        env = dict(os.environ)
        lib = Path(binary).resolve().parent.parent / "lib"  # a hand-built BMv2 under its own prefix
        if lib.is_dir():
            env["LD_LIBRARY_PATH"] = f"{lib}:{env.get('LD_LIBRARY_PATH', '')}"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env)
        deadline = time.monotonic() + start_timeout
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"simple_switch_grpc did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.proc)
