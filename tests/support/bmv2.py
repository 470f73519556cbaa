"""Starting BMv2's simple_switch_grpc for tests: one way, with ports of its own.

BMv2's defaults (Thrift on 9090, ipc:///tmp/bmv2-<id>-notifications.ipc) are machine-wide, so every start
takes a free Thrift port and a notifications socket in its own folder; gRPC listens on a free loopback
port. Readiness is p4lang/tutorials' check: the process is alive and its gRPC port accepts connections.
"""

import os
import shutil
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
        self.thrift_port = free_tcp_port()  # BMv2's runtime CLI (simple_switch_CLI) connects here
        self.log = workdir / "bmv2.log"
        argv = [
            binary,
            "--device-id",
            "0",
            "--notifications-addr",
            f"ipc://{workdir / 'notifications.ipc'}",
            "--thrift-port",
            str(self.thrift_port),
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


def cli_binary(binary: str | None = None) -> str | None:
    """simple_switch_CLI beside simple_switch_grpc, else on PATH, else None."""
    binary = binary or bmv2_binary()
    beside = Path(binary).parent / "simple_switch_CLI" if binary else None
    return str(beside) if beside and os.access(beside, os.X_OK) else shutil.which("simple_switch_CLI")


def cli_interpreter(cli: str) -> list[str]:
    """The command simple_switch_CLI's own line `#!` runs it with: that Python has thrift and BMv2's
    Python runtime (bm_runtime), which the project's venv has not."""
    first = Path(cli).read_text(errors="replace").splitlines()[0]
    argv = first[2:].split() if first.startswith("#!") else ["python3"]
    if Path(argv[0]).name == "env":
        argv = argv[1:]
    found = shutil.which(argv[0])
    if found is None:
        pytest.skip(f"{argv[0]}, the interpreter of {cli}, is not on PATH")
    return [found, *argv[1:]]


def cli_runner(cli: str) -> tuple[list[str], dict]:
    """(argv prefix, environment) that run a script the way simple_switch_CLI runs: its own Python, with
    BMv2's bm_runtime (under a hand-built BMv2's prefix) on the path. Skips, saying which Python and what
    it lacks, when that Python cannot import thrift (`#!/usr/bin/env python3` takes the first python3 on
    PATH, which may be another than the one BMv2 was installed for)."""
    interpreter = cli_interpreter(cli)
    prefix = Path(cli).resolve().parent.parent
    search = [str(d) for d in sorted(prefix.glob("lib/python3*/site-packages")) if (d / "bm_runtime").is_dir()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(search + [os.environ.get("PYTHONPATH", "")])}
    probe = subprocess.run([*interpreter, "-c", "import thrift"], env=env, capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(
            f"{interpreter[0]}, the python3 that runs {cli}, cannot import thrift: put a Python with the thrift "
            "package first on PATH (BMv2's install instructions make one)"
        )
    return interpreter, env


def replace_parse_value_set(thrift_port: int, name: str, members: list[bytes], cli: str | None = None) -> list[bytes]:
    """Makes `members` (each exactly the set's compressed width in bytes) BMv2's value set `name`, over
    its Thrift API (tests/support/bmv2_value_sets.py, which says why not simple_switch_CLI's pvs_add);
    answers the members BMv2 reads back, sorted."""
    cli = cli or cli_binary()
    if cli is None:
        pytest.skip("simple_switch_CLI (for its Python with thrift and bm_runtime) is not installed")
    interpreter, env = cli_runner(cli)
    done = subprocess.run(
        [*interpreter, str(Path(__file__).with_name("bmv2_value_sets.py")), str(thrift_port), name]
        + [m.hex() for m in members],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"setting BMv2's value set {name} failed: {done.stdout}{done.stderr}"
    return [bytes.fromhex(m) for m in done.stdout.split()]
