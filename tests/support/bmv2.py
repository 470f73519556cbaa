"""Starting BMv2's simple_switch_grpc for tests: one way, with ports of its own.

BMv2's defaults (Thrift on 9090, ipc:///tmp/bmv2-<id>-notifications.ipc) are machine-wide, so every start
takes a free Thrift port and a notifications socket in its own folder; gRPC listens on a free loopback
port. Readiness is p4lang/tutorials' check: the process is alive and its gRPC port accepts connections.
"""

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.toolchain import missing, unless_installed
from topologies.targets import find_executable, free_tcp_port, stop_process


def bmv2_binary() -> str | None:
    """simple_switch_grpc where the runner looks for it (topologies.targets), else None."""
    return find_executable("bmv2")


def needs_bmv2() -> pytest.MarkDecorator:
    """The mark of a test that runs simple_switch_grpc: skipped without it, failed where the toolchain is
    required (tests/support/toolchain.py)."""
    return unless_installed(bmv2_binary(), "simple_switch_grpc")


class Bmv2Process:
    """A running simple_switch_grpc; `address` is its gRPC endpoint, `log` its combined output."""

    def __init__(self, workdir: Path, args: list[str] = (), start_timeout: float = 60.0, binary: str | None = None):
        binary = binary or bmv2_binary()
        if binary is None:
            missing("simple_switch_grpc is not installed")
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


def cli_interpreters(cli: str) -> list[list[str]]:
    """The commands that may run simple_switch_CLI, best first: $BMV2_PYTHON when set, then the interpreter
    its own line `#!` names, found in every PATH directory in order (not only the first: the project's venv
    comes first on PATH here and has no thrift; the Python BMv2 was installed for, e.g. a venv with thrift,
    may come later)."""
    first = Path(cli).read_text(errors="replace").splitlines()[0]
    argv = first[2:].split() if first.startswith("#!") else ["python3"]
    if Path(argv[0]).name == "env":
        argv = argv[1:]
    found = []
    if os.environ.get("BMV2_PYTHON"):
        found.append([os.environ["BMV2_PYTHON"]])
    if os.path.isabs(argv[0]):
        found.append(argv)
    else:
        seen = set()  # /bin is often /usr/bin (a venv's python3 is a link to the system's: not resolved)
        for directory in os.environ.get("PATH", "").split(os.pathsep):
            candidate = Path(directory or ".") / argv[0]
            where = Path(directory or ".").resolve()
            if candidate.is_file() and os.access(candidate, os.X_OK) and where not in seen:
                seen.add(where)
                found.append([str(candidate), *argv[1:]])
    return found


def cli_runner(cli: str) -> tuple[list[str], dict]:
    """(argv prefix, environment) that run a script the way simple_switch_CLI runs: the first interpreter of
    cli_interpreters that can import thrift (BMv2's CLI needs it; the project's venv has not), with BMv2's
    bm_runtime (under a hand-built BMv2's prefix) on the path. Skips naming every Python tried when none
    can."""
    prefix = Path(cli).resolve().parent.parent
    search = [str(d) for d in sorted(prefix.glob("lib/python3*/site-packages")) if (d / "bm_runtime").is_dir()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(search + [os.environ.get("PYTHONPATH", "")])}
    tried = []
    for interpreter in cli_interpreters(cli):
        probe = subprocess.run([*interpreter, "-c", "import thrift"], env=env, capture_output=True, timeout=60)
        if probe.returncode == 0:
            return interpreter, env
        tried.append(interpreter[0])
    missing(
        f"no Python that can run {cli} (it needs the thrift package): tried {', '.join(tried) or 'none on PATH'}; "
        "put the Python BMv2 was installed for (e.g. its venv's bin/) on PATH, or name it in BMV2_PYTHON"
    )


def replace_parse_value_set(thrift_port: int, name: str, members: list[bytes], cli: str | None = None) -> list[bytes]:
    """Makes `members` (each exactly the set's compressed width in bytes) BMv2's value set `name`, over
    its Thrift API (tests/support/bmv2_value_sets.py, which says why not simple_switch_CLI's pvs_add);
    answers the members BMv2 reads back, sorted."""
    cli = cli or cli_binary()
    if cli is None:
        missing("simple_switch_CLI (for its Python with thrift and bm_runtime) is not installed")
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


def read_registers(thrift_port: int, names: list[str], cli: str | None = None) -> dict[str, list[int]]:
    """Every cell of each named register of a running BMv2, over its Thrift API
    (tests/support/bmv2_registers.py): {name: [cell, ...]}."""
    cli = cli or cli_binary()
    if cli is None:
        missing("simple_switch_CLI (for its Python with thrift and bm_runtime) is not installed")
    interpreter, env = cli_runner(cli)
    done = subprocess.run(
        [*interpreter, str(Path(__file__).with_name("bmv2_registers.py")), str(thrift_port), *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"reading BMv2's registers failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return json.loads(done.stdout)
