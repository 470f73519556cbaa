"""The two switch targets and their command lines.

Both take simple_switch_grpc's arguments (``-i PORT@IFACE``, ``--device-id``, ``--pcap DIR``, gRPC
address after ``--``), so the runner starts either the same way and the controller programs either over
P4Runtime. gRPC listens on 127.0.0.1 only: the switch process runs in the root namespace.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

TARGETS = ("emulator", "bmv2")
BMV2_DIRS = ("/opt/p4/bin", "/usr/local/bin")


@dataclass(frozen=True)
class SwitchLaunch:
    """What to run for one switch, and where its console output goes."""

    argv: list[str]
    log_file: Path


def add_target_option(
    parser,
    help: str = "switch: 'emulator' = our thc-switch (default), 'bmv2' = simple_switch_grpc (from /opt/p4/bin or PATH)",
) -> None:
    """--target, one of TARGETS (the software switch unless asked): thc-run's option, and the benchmarks'
    that start a testbed the way it does."""
    parser.add_argument("--target", choices=TARGETS, default="emulator", help=help)


def find_executable(target: str) -> str | None:
    """The switch executable of ``target``, or None when it is not installed."""
    if target == "emulator":
        local = Path(sys.executable).with_name("thc-switch")  # the venv's console script
        return str(local) if local.exists() else shutil.which("thc-switch")
    if target == "bmv2":
        for directory in BMV2_DIRS:
            candidate = Path(directory) / "simple_switch_grpc"
            if candidate.exists() and os.access(candidate, os.X_OK):
                return str(candidate)
        return shutil.which("simple_switch_grpc")
    raise ValueError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")


def missing_message(target: str) -> str:
    if target == "bmv2":
        return (
            "simple_switch_grpc not found in " + ", ".join(BMV2_DIRS) + " or on PATH; install BMv2 with "
            "P4Runtime (p4lang/behavioral-model --with-pi) or use --target emulator"
        )
    return "thc-switch not found next to this Python or on PATH; run `make setup` (pip install -e .)"


def switch_command(
    target: str,
    executable: str,
    name: str,
    device_id: int,
    grpc_port: int,
    interfaces: dict[int, str],
    log_dir: Path,
    pcap_dir: Path | None,
    log_level: str = "info",
    backend: str = "auto",
    pps: float | None = None,
) -> SwitchLaunch:
    """The command line that starts switch ``name`` with ``interfaces`` (port -> interface name).

    The switch starts without a program (``--no-p4``): the controller pushes it over P4Runtime, as on
    a real switch. Its console log (``--log-console`` at ``log_level``) goes to ``log_dir/<name>.log``,
    where a failed start is explained. ``pps`` paces the software switch (thc-switch --pps); BMv2 has no
    such option, so the runner refuses it there.
    """
    log_file = log_dir / f"{name}.log"
    argv = [executable]
    for port, iface in sorted(interfaces.items()):
        argv += ["-i", f"{port}@{iface}"]
    argv += ["--device-id", str(device_id), "--log-console", "-L", log_level]
    if pcap_dir is not None:
        argv += ["--pcap", str(pcap_dir)]
    if target == "bmv2":
        # BMv2's defaults are machine-wide: Thrift on 9090 and ipc:///tmp/bmv2-<device id>-notifications.ipc;
        # a second BMv2 (another switch of this run, or anyone else's) would collide on both
        argv += ["--no-p4", "--notifications-addr", f"ipc://{_notifications_path(log_dir, name)}"]
        if _bmv2_has_thrift(executable):
            argv += ["--thrift-port", str(free_tcp_port())]
        argv += ["--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}"]
    else:
        argv += ["--backend", backend, "--no-p4", "--grpc-server-addr", f"127.0.0.1:{grpc_port}"]
        if pps:
            argv += ["--pps", f"{pps:g}"]
    return SwitchLaunch(argv, log_file)


def _notifications_path(log_dir: Path, name: str) -> Path:
    path = Path(log_dir).resolve() / f"{name}-notifications.ipc"
    if len(str(path)) > 100:  # a unix socket path has at most 107 bytes
        path = Path("/tmp") / f"thc-run-{os.getpid()}-{name}-notifications.ipc"
    return path


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """End a switch process we started: SIGTERM (both targets exit cleanly on it), SIGKILL if it hangs."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_tcp_port() -> int:
    """A TCP port nobody listens on right now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


@cache
def _bmv2_has_thrift(executable: str) -> bool:
    try:
        out = subprocess.run([executable, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--thrift-port" in out.stdout + out.stderr
