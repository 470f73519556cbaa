"""Parameter servers on Mininet hosts: the compiled THC program, run by thc-switch on a host's one interface.

Why the switch's own program rather than a server written for the purpose: it already is a parameter
server that sums THC homomorphically (table values added in lanes, never decoded), with the job's key,
window, shadow cells, loss recovery and partial aggregation, and the workers already speak its protocol.
Run on a host, it differs from in-network aggregation only in where the sums are made and which links
carry the bytes, which is the comparison a ps mode is for; a second implementation could differ in more.
How a server is addressed, its multicast group and its P4Runtime socket are in topologies/README.md
("Parameter servers"). Servers run only for the mode that uses them, so no other mode pays for their
port loops.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from contract.job import JobSpec
from controller.jobs import JobWorker
from controller.topology import ParameterServer, Topology
from host_agent.sharded import Server
from topologies import interrupts
from topologies.ledger import Ledger
from topologies.lifecycle import StartStop
from topologies.p4switch import SwitchStartError, wait_answering
from topologies.targets import find_executable, missing_message

SERVER_PORT = 1  # the host's interface is the server's only port


def socket_path(log_dir: Path, name: str) -> Path:
    path = Path(log_dir).resolve() / f"{name}.sock"
    if len(str(path)) > 100:  # a unix socket path has at most 107 bytes
        path = Path("/tmp") / f"thc-run-{os.getpid()}-{name}.sock"
    return path


def server_workers(topo: Topology) -> list[JobWorker]:
    """The job's workers as a server sees them: every replica on its one port, rid = worker id."""
    hosts = [topo.hosts[name] for name in topo.workers]
    return [JobWorker(topo.worker_id(h.name), h.mac, h.address, SERVER_PORT, h.name) for h in hosts]


@dataclass
class RunningServer:
    server: ParameterServer
    process: subprocess.Popen
    socket: Path
    log_file: Path
    session: object = None  # controller.session.SwitchSession, once it answers


class ServerSet(StartStop):
    """One placement's servers for one mode: started in their hosts, programmed, given the job, stopped.

    `net` is the run's EmulatedNetwork (its hosts' namespaces), `ledger` records every process."""

    def __init__(
        self,
        net,
        topo: Topology,
        placement: str | None,
        ledger: Ledger,
        log_dir: Path,
        log_level: str = "info",
        backend: str = "auto",
        say=print,
    ):
        self.net = net
        self.topo = topo
        self.placement = topo.placement(placement)
        self.ledger = ledger
        self.log_dir = Path(log_dir)
        self.log_level = log_level
        self.backend = backend
        self.say = say
        self.running: list[RunningServer] = []
        self.executable = find_executable("emulator")  # servers are the software switch on either target
        if self.executable is None:
            raise SwitchStartError(missing_message("emulator"))

    def start(self, ready_timeout: float = 60.0) -> None:
        """Start every server in its host, wait until each answers P4Runtime, push the program."""
        from controller.session import SwitchSession

        for server in self.placement:
            path = socket_path(self.log_dir, server.name)
            path.unlink(missing_ok=True)  # a socket file left by an earlier run of ours
            log_file = self.log_dir / f"{server.name}.log"
            host = self.topo.hosts[server.host]
            argv = [self.executable, "-i", f"{SERVER_PORT}@{host.interface}", "--device-id", "0", "--log-console"]
            argv += ["-L", self.log_level, "--backend", self.backend, "--no-p4", "--grpc-server-addr", f"unix:{path}"]
            with open(log_file, "wb") as log, interrupts.critical():
                process = self.net.host(server.host).popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
                self.ledger.add_process(process.pid, f"server {server.name}")
            self.running.append(RunningServer(server, process, path, log_file))
        for running in self.running:
            answers = partial(_unix_socket_answers, running.socket)
            who = f"server {running.server.name}"
            wait_answering(running.process, answers, who, str(running.socket), running.log_file, ready_timeout)
            running.session = SwitchSession(f"unix:{running.socket}", device_id=0, name=running.server.name)
            running.session.push()
        where = ", ".join(f"{r.server.host} at {r.server.service_ip}" for r in self.running)
        self.say(f"servers of {self.placement[0].placement} up and programmed: {where}")

    def add_job(self, spec: JobSpec) -> list[Server]:
        """The job on every server (each its own epoch and key), in shard order: what the workers are given."""
        servers = []
        for running in self.running:
            job = running.session.add_job_workers(
                spec.replace(key=0), server_workers(self.topo), service_ip=str(running.server.service_ip)
            )
            server = running.server
            servers.append(Server(server.name, str(server.service_ip), server.service_mac, job.key))
        return servers

    def add_fallback_job(self, spec: JobSpec, job_topo: Topology) -> None:
        """A pool job (its key the switch's) on this placement's one server, which sums the job's uses that
        fell back (controller/pool.py); `job_topo`: the topology with the job's hosts as its workers. The
        server holds the job's window of slots, not its --slots: a worker numbers its requests' slots modulo
        the window, and the server's 1024 slots then hold more jobs at once."""
        (running,) = self.running
        spec = spec.replace(slots=spec.window)
        running.session.serve_fallback(spec, server_workers(job_topo), str(running.server.service_ip))

    def end_fallback_job(self, job_id: int) -> None:
        (running,) = self.running
        running.session.end_fallback(job_id)

    @property
    def fallback_address(self) -> str:
        """thc-worker --fallback-server's IP,MAC: the one server's service address."""
        (running,) = self.running
        return f"{running.server.service_ip},{running.server.service_mac}"

    def stats(self) -> dict:
        """Event counters of every server: {server: {event: packets}}."""
        return {
            r.server.name: {event: packets for event, (packets, _) in r.session.read_stats().events.items()}
            for r in self.running
            if r.session is not None
        }

    def check(self) -> None:
        """Raise if a server has exited (its workers would wait for it until they time out)."""
        for running in self.running:
            code = running.process.poll()
            if code is not None:
                raise SwitchStartError(f"server {running.server.name} exited with code {code}; see {running.log_file}")

    def stop(self) -> None:
        """Stop exactly the servers started here (by their ledger entries) and remove their sockets."""
        for running in self.running:
            if running.session is not None:
                running.session.close()
        pids = {r.process.pid for r in self.running}
        self.ledger.stop_processes([p for p in self.ledger.live_processes() if p.pid in pids], grace=3.0)
        for running in self.running:
            running.process.poll()
            running.socket.unlink(missing_ok=True)
        self.running = []


def _unix_socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        try:
            sock.connect(str(path))
            return True
        except OSError:
            return False
