"""The run's supervisor: when `thc-run` dies, even by SIGKILL, it removes what the run's ledger lists.

Without it a killed runner leaves its switch processes running (they are in their own sessions, so that
a Ctrl-C reaches the runner first) and its switch-to-switch links in the root namespace, until someone
runs `thc-run --stop`. The supervisor is a separate process in its own session, started right after the
ledger and recorded in it. It blocks on a pipe whose only write end the runner holds: the pipe reports
end-of-file when the runner is gone, however it went. It then does exactly what `thc-run --stop` does
(``Ledger.teardown``: the listed processes, then the listed interfaces, whose qdiscs and loss filters go
with them) and exits. A runner that stops normally tears down itself and ends the supervisor last.

    python -m topologies.supervisor --ledger logs/run-state.json --fd 3 --owner PID:START
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from topologies.ledger import SUPERVISOR_ROLE, Ledger, process_start_time

REPO = Path(__file__).resolve().parents[1]
OWNER_EXIT_WAIT = 10.0  # after end-of-file the runner is exiting; it is a zombie or gone within this


class Supervisor:
    """The runner's end: the pipe's write end, kept open for the runner's whole life."""

    def __init__(self, ledger: Ledger, log_file: Path):
        read_end, self._write_end = os.pipe()  # both non-inheritable: no other child holds the pipe
        owner = f"{ledger.owner_pid}:{ledger.owner_start_time}"
        with open(log_file, "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "topologies.supervisor",
                    "--ledger",
                    str(ledger.path),
                    "--fd",
                    str(read_end),
                    "--owner",
                    owner,
                ],
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO,
            )
        os.close(read_end)
        ledger.add_process(self.process.pid, SUPERVISOR_ROLE)


def start(ledger: Ledger, log_file: Path) -> Supervisor:
    """Start the supervisor of ``ledger``'s run (call right after the ledger exists, before anything)."""
    return Supervisor(ledger, log_file)


def say(message: str) -> None:
    print(f"thc-run supervisor: {time.strftime('%H:%M:%S')} {message}", flush=True)


def supervise(ledger_path: Path, fd: int, owner_pid: int, owner_start: int | None) -> int:
    while os.read(fd, 4096):  # nothing is ever written: this returns b"" once the runner is gone
        pass
    deadline = time.monotonic() + OWNER_EXIT_WAIT
    while process_start_time(owner_pid) == owner_start and time.monotonic() < deadline:
        time.sleep(0.05)
    ledger = Ledger.load(ledger_path)
    if ledger is None:
        say("the run ended and removed everything itself")
        return 0
    if (ledger.owner_pid, ledger.owner_start_time) != (owner_pid, owner_start):
        say(f"{ledger_path} now belongs to another run (pid {ledger.owner_pid}); leaving it alone")
        return 0
    if ledger.owner_alive():
        say(f"thc-run (pid {owner_pid}) closed the pipe but is still running; leaving its run to it")
        return 1
    say(f"thc-run (pid {owner_pid}) is gone; removing what {ledger_path} lists")
    try:
        ledger.teardown(report=say)
    except RuntimeError as exc:
        say(f"error: {exc}; run `thc-run --stop`")
        return 1
    say("nothing of the run is left")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="topologies.supervisor", description=__doc__.split("\n\n")[0])
    p.add_argument("--ledger", required=True, type=Path)
    p.add_argument("--fd", required=True, type=int, help="read end of the runner's pipe")
    p.add_argument("--owner", required=True, help="PID:START_TIME of the runner")
    args = p.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP):  # a closing terminal or a Ctrl-C is the runner's to handle
        signal.signal(sig, signal.SIG_IGN)
    pid, _, start_time = args.owner.partition(":")
    return supervise(args.ledger, args.fd, int(pid), None if start_time == "None" else int(start_time))


if __name__ == "__main__":
    sys.exit(main())
