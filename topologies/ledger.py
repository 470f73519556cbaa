"""The ledger of a run: every process and interface the runner created, kept on disk.

Cleaning up a Mininet run must never touch anything the run did not create (no ``mn -c``, no killing
by name). So the runner writes down each thing *before* relying on it: process ids with their start
time (a recycled pid is never signalled), and root-namespace interfaces with their ifindex (an interface
re-created by someone else under the same name is never deleted). Host namespaces need no entry:
they are anonymous and vanish with the last process inside, which is always one of ours.

``thc-run --stop`` loads the ledger of a crashed or killed run and tears down exactly what it lists; the
run's supervisor (``topologies.supervisor``, listed here too) does the same by itself when the runner dies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SUPERVISOR_ROLE = "supervisor"  # stopped last by a teardown: until then it could finish a cut-short one


@dataclass
class ProcessEntry:
    pid: int
    start_time: int  # /proc/<pid>/stat field 22 (clock ticks after boot): the pid's identity
    role: str  # e.g. "switch s1", "worker h2", "host shell h1"
    stop_signal: str = "SIGTERM"  # Mininet's shells are interactive bash: they ignore SIGTERM, take SIGHUP


@dataclass
class InterfaceEntry:
    name: str
    ifindex: int


@dataclass
class Ledger:
    path: Path
    processes: list[ProcessEntry] = field(default_factory=list)
    interfaces: list[InterfaceEntry] = field(default_factory=list)
    owner_pid: int = field(default_factory=os.getpid)
    owner_start_time: int | None = field(default_factory=lambda: process_start_time(os.getpid()))

    # ---- recording --------------------------------------------------------------------------------

    def add_process(self, pid: int, role: str, stop_signal: str = "SIGTERM") -> None:
        start = process_start_time(pid)
        if start is None:  # already gone: nothing to clean up later
            return
        self.processes.append(ProcessEntry(pid, start, role, stop_signal))
        self.save()

    def add_interface(self, name: str) -> None:
        index = interface_index(name)
        if index is not None:
            self.interfaces.append(InterfaceEntry(name, index))
            self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = {
            "owner_pid": self.owner_pid,
            "owner_start_time": self.owner_start_time,
            "processes": [asdict(p) for p in self.processes],
            "interfaces": [asdict(i) for i in self.interfaces],
        }
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, path: Path) -> Ledger | None:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            return None
        return cls(
            Path(path),
            [ProcessEntry(**p) for p in data.get("processes", [])],
            [InterfaceEntry(**i) for i in data.get("interfaces", [])],
            data.get("owner_pid", 0),
            data.get("owner_start_time"),
        )

    # ---- state ------------------------------------------------------------------------------------

    def live_processes(self) -> list[ProcessEntry]:
        return [p for p in self.processes if process_start_time(p.pid) == p.start_time]

    def live_supervisors(self) -> list[ProcessEntry]:
        """The run's supervisor if it is still up (other than the calling process)."""
        return [p for p in self.live_processes() if p.role == SUPERVISOR_ROLE and p.pid != os.getpid()]

    def wait_for_supervisor(self, timeout: float) -> bool:
        """After the runner died, give its supervisor ``timeout`` s to finish; True if it did."""
        deadline = time.monotonic() + timeout
        while self.live_supervisors():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def live_interfaces(self) -> list[InterfaceEntry]:
        return [i for i in self.interfaces if interface_index(i.name) == i.ifindex]

    def owner_alive(self) -> bool:
        """Is the runner that wrote this ledger still running (a run in progress, not a leftover)?"""
        if self.owner_start_time is None:
            return False
        return process_start_time(self.owner_pid) == self.owner_start_time

    # ---- teardown ---------------------------------------------------------------------------------

    def stop_processes(self, entries: list[ProcessEntry], grace: float = 3.0) -> None:
        """Signal every process (its whole group when it leads one: our children only) with its stop
        signal, give them ``grace`` seconds together, then SIGKILL what is left."""
        for entry in entries:
            _signal(entry, getattr(signal, entry.stop_signal))
        deadline = time.monotonic() + grace
        alive = list(entries)
        while alive:
            for entry in alive:
                _reap(entry.pid)
            alive = [e for e in alive if process_start_time(e.pid) == e.start_time]
            if not alive:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for entry in alive:
            _signal(entry, signal.SIGKILL)
        for _ in range(100):
            for entry in alive:
                _reap(entry.pid)
            alive = [e for e in alive if process_start_time(e.pid) == e.start_time]
            if not alive:
                return
            time.sleep(0.05)

    def teardown(self, grace: float = 3.0, report=print) -> None:
        """Stop every recorded process (newest first: workers, then switches, then host shells),
        delete every recorded interface that is still the same one (their qdiscs and filters go with
        them), stop the run's supervisor (never the calling process itself), then retire the ledger file
        to ``<name>.removed.json`` (a record of what was removed; nothing reads it to act on)."""
        me = os.getpid()
        live = [p for p in self.live_processes() if p.role != SUPERVISOR_ROLE and p.pid != me]
        for entry in reversed(live):
            report(f"stopping {entry.role} (pid {entry.pid})")
        self.stop_processes(live[::-1], grace)
        for entry in self.live_interfaces():
            report(f"deleting interface {entry.name}")
            subprocess.run(["ip", "link", "del", "dev", entry.name], capture_output=True)
        supervisors = self.live_supervisors()
        if supervisors:
            self.stop_processes(supervisors, grace)
        left = [p.role for p in self.live_processes() if p.pid != me] + [i.name for i in self.live_interfaces()]
        if left:
            raise RuntimeError(f"could not remove: {', '.join(left)} (ledger kept in {self.path})")
        try:
            os.replace(self.path, self.removed_path)
        except FileNotFoundError:  # retired meanwhile by the supervisor or `thc-run --stop`
            pass

    @property
    def removed_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".removed.json")


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` or None if there is no such process (zombies count as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    if fields[0] == "Z":
        return None
    return int(fields[19])


def interface_index(name: str) -> int | None:
    """The ifindex of a root-namespace interface, None if it does not exist."""
    try:
        return int(Path(f"/sys/class/net/{name}/ifindex").read_text())
    except (OSError, ValueError):
        return None


def _signal(entry: ProcessEntry, sig: int) -> None:
    if process_start_time(entry.pid) != entry.start_time:
        return
    try:
        if os.getpgid(entry.pid) == entry.pid:
            os.killpg(entry.pid, sig)
        else:
            os.kill(entry.pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect our own exited child so that it stops counting as alive (no-op for other processes)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
