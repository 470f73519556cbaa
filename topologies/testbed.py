"""A running testbed: the emulated network, its programmed switches, and worker runs on it.

    with Testbed(Topology.load("topologies/star4.json"), log_dir=Path("logs")) as bed:
        results = bed.run_workers(WorkerOptions(mode="thc", steps=100))

The runner, the end-to-end tests and the benchmark all go through this class, so they bring the network
up, program it and clean it up the same way. Leaving the ``with`` block (normally, by an exception or a
KeyboardInterrupt) stops exactly what the ledger lists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from contract.ticket import Ticket
from controller.topology import Topology
from host_agent.sharded import save_servers
from thc.modes import FAILOVER_MODES, PS_MODES, SWITCH_MODES
from topologies import link_bytes
from topologies.control_plane import ControlPlane, counter_delta
from topologies.failover import Failover, KillSwitch
from topologies.ledger import Ledger
from topologies.lifecycle import StartStop
from topologies.network import EmulatedNetwork
from topologies.progress import Progress
from topologies.servers import ServerSet
from topologies.switch_restart import SwitchRestarter
from topologies.workers import Worker, WorkerOptions, follow, load_results, start_workers, stop_workers


class Testbed(StartStop):
    def __init__(
        self,
        topo: Topology,
        log_dir: Path,
        target: str = "emulator",
        pcap_dir: Path | None = None,
        executable: str | None = None,
        switch_log_level: str = "info",
        switch_backend: str = "auto",
        switch_pps: float | None = None,
        say: Callable[[str], None] = print,
        ledger: Ledger | None = None,
        start_timeout: float = 60.0,
        net: EmulatedNetwork | None = None,
    ):
        """``net``: the network to run on (tests pass a stand-in); by default the topology's EmulatedNetwork."""
        self.topo = topo
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.say = say
        self.start_timeout = start_timeout
        self.ledger = ledger or Ledger(self.log_dir / "run-state.json")
        self.net = net or EmulatedNetwork(
            topo,
            target,
            self.ledger,
            self.log_dir,
            pcap_dir,
            executable=executable,
            say=say,
            switch_log_level=switch_log_level,
            switch_backend=switch_backend,
            switch_pps=switch_pps,
        )
        self.control: ControlPlane | None = None
        self.last_switch_events: dict = {}
        self.last_failures: list[dict] = []  # the last run's worker failures and switch restarts
        self._kept_counters: dict = {}  # switch -> event counters read just before it was killed
        self._job_epoch = 0  # the epoch of the job start_job installed last
        self.last_busiest: link_bytes.Busiest | None = None  # the last run's busiest link, per step

    def start(self) -> None:
        self.net.start(ready_timeout=self.start_timeout)
        self.control = ControlPlane.connect(self.topo)
        self.control.program(say=self.say)

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        self.net.stop(say=lambda message: None)

    # ---- runs -------------------------------------------------------------------------------------

    def start_job(
        self, options: WorkerOptions, job_topo: Topology | None = None, run_dir: Path | None = None, **placement
    ) -> WorkerOptions:
        """Install the job from its description with a fresh epoch and key (every switch mode run is a new
        run of the job), and write the ticket the workers start from (contract/ticket.py). A trace's
        job (topologies/trace_run.py) gives `job_topo`, the topology with its hosts as the workers, its
        `run_dir` for the file, and `placement`: ControlPlane.add_job's pool and pool_cells."""
        spec = options.spec_for(job_topo or self.topo)
        if job_topo is None:
            job = self.control.add_job(spec)
        else:
            job = self.control.add_job(spec, topology=job_topo, **placement)
        ticket = Ticket.granted(spec, job)
        self._job_epoch = job.epoch
        path = (run_dir or self.log_dir) / options.mode / "job.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        ticket.save(path)
        return dataclasses.replace(options, spec=ticket.spec, job_file=path)

    def start_ps_job(self, options: WorkerOptions, servers: ServerSet) -> WorkerOptions:
        """Install the job on every server of a ps mode (each its own epoch and key) and write what the
        workers start from: the description (job.json) and the servers with their keys (servers.json)."""
        spec = options.spec_for(self.topo)
        mode_dir = self.log_dir / options.mode
        mode_dir.mkdir(parents=True, exist_ok=True)
        job_file, servers_file = mode_dir / "job.json", mode_dir / "servers.json"
        spec.save(job_file)
        save_servers(servers_file, servers.add_job(spec))
        return dataclasses.replace(options, spec=spec, job_file=job_file, servers_file=servers_file)

    def end_job(self, options: WorkerOptions, job_ids: list[int] | None = None) -> None:
        """Remove the job (and the survivors' jobs after a failure) once its run is over, so its slots are
        free for the next run: with windows of 256 slots, four runs' jobs would fill the switch's 1024
        slots (best effort: a switch that died has no job to remove, and the run's own error says why)."""
        if self.control is None:
            return
        for job_id in job_ids or [options.spec_for(self.topo).job_id]:
            try:
                self.control.end_job(job_id)
            except Exception as exc:  # noqa: BLE001 - never hide the run's own outcome
                self.say(f"{self.topo.aggregation.switch}: could not remove job {job_id}: {exc}")

    def run_workers(
        self,
        options: WorkerOptions,
        on_event: Callable[[Worker, dict], None] = lambda w, e: None,
        stall_timeout: float = 120.0,
        start_timeout: float = 180.0,
        kill: list[tuple[str, int]] = (),
        restart: list[tuple[str, int]] = (),
    ) -> list:
        """Run one worker per worker host to the end: the training records (JSON) or, for probes, the
        saved arrays (numpy NpzFile per worker, in rank order). Switch counter deltas of the run are
        left in ``last_switch_events``. In the modes that survive a worker failure (thc, fix32 training)
        a worker that dies is left behind and the others go on as a new job (topologies/failover.py);
        its record is in ``last_failures``. ``kill``: (host, step) pairs, SIGKILL to that worker once it
        reports that step (an injected failure). ``restart``: (switch, step) pairs, that switch killed and
        restarted once a worker reports that step (topologies/switch_restart.py; in ``last_failures`` too).
        A ps mode's servers (topologies/servers.py) run for the mode only; the link that carried the most
        bytes per step (probes: per round) from the moment every worker was ready is left in
        ``last_busiest``."""
        run = dict(
            on_event=on_event, stall_timeout=stall_timeout, start_timeout=start_timeout, kill=kill, restart=restart
        )
        if options.worker_mode not in PS_MODES:
            return self._run(options, **run)
        net = self.net
        placement, level, backend = options.placement, net.switch_log_level, net.switch_backend
        with ServerSet(net, self.topo, placement, self.ledger, self.log_dir, level, backend, self.say) as servers:
            return self._run(self.start_ps_job(options, servers), servers=servers, **run)

    def train(self, label: str, options: WorkerOptions, **run) -> list:
        """run_workers with a progress bar of the run (`label`: the mode as the user named it), closed when
        the run ends; `run`: run_workers' other arguments."""
        progress = Progress(label, options.steps, len(self.topo.workers))
        try:
            return self.run_workers(options, progress, **run)
        finally:
            progress.close()

    def _run(
        self, options, on_event, stall_timeout, start_timeout, kill, restart, servers: ServerSet | None = None
    ) -> list:
        """run_workers' run, with a ps mode's servers up."""
        failover = None
        self.last_failures = []
        self._kept_counters = {}
        killer = KillSwitch(kill)
        if kill and not options.probe_rounds:  # each dies after its step itself (KillSwitch)
            options = dataclasses.replace(options, kills=dict(kill))
        failover_mode = options.mode in FAILOVER_MODES and not options.probe_rounds
        if failover_mode:
            options = dataclasses.replace(options, membership=self.log_dir / options.mode / "membership.json")
        if options.mode in SWITCH_MODES:
            options = self.start_job(options)
        if failover_mode:
            failover = Failover(
                self.control, self.topo, options.spec, options.membership, say=self.say, epoch=self._job_epoch
            )
            failover.killed = killer.killed
        readd = (lambda: self.control.add_job(options.spec)) if options.mode in SWITCH_MODES else None
        restarter = SwitchRestarter(restart, self, failover, readd, self.start_timeout, self.say)
        self.last_busiest = None
        try:
            before = self._stats(servers)
            workers = start_workers(self.net, self.topo, options, self.ledger, self.log_dir)
            if failover is not None:
                failover.workers = workers
            ready, links = set(), {}

            def events(w, e):
                killer.on_event(w, e)
                restarter.on_event(w, e)
                if failover is not None:
                    failover.on_event(w, e)
                if e.get("event") == "start":
                    ready.add(w.rank)
                    if len(ready) == len(workers):
                        links.update(link_bytes.snapshot(self.topo))
                on_event(w, e)

            def check():
                self.net.check_switches()
                if servers is not None:
                    servers.check()

            try:
                follow(
                    workers,
                    events,
                    stall_timeout=stall_timeout,
                    start_timeout=start_timeout,
                    check=check,
                    on_death=failover.on_death if failover is not None else None,
                )
            except BaseException:  # a failed worker, or Ctrl-C: stop the workers before their job is removed
                stop_workers(workers, self.ledger)  # the others would only wait for the failed one
                raise
            if links:  # per training step, or per probe round
                steps = options.probe_rounds or options.steps
                self.last_busiest = link_bytes.busiest(links, link_bytes.snapshot(self.topo), steps)
            self.last_switch_events = counter_delta(self._stats(servers), before)
            if failover is not None:
                self.last_failures = [f.record() for f in failover.failures]
            self.last_failures += [r.record() for r in restarter.restarts]
        finally:
            if options.mode in SWITCH_MODES:
                self.end_job(options, failover.jobs if failover is not None else None)
        if options.probe_rounds:
            import numpy as np

            return [np.load(w.result_path) for w in workers]
        return load_results(workers)

    def _stats(self, servers: ServerSet | None) -> dict:
        """Event counters of every switch, and of a ps mode's servers: {name: {event: packets}}; a switch
        restarted during the run counts what it counted before it was killed too."""
        out = self.control.stats() | (servers.stats() if servers is not None else {})
        for name, kept in self._kept_counters.items():
            out[name] = {event: n + kept.get(event, 0) for event, n in out[name].items()}
        return out

    def keep_counters(self, name: str) -> None:
        """Switch `name` is about to be killed: keep what it counted (a restarted one counts from 0)."""
        now = self.control.stats()[name]
        kept = self._kept_counters.get(name, {})
        self._kept_counters[name] = {event: n + kept.get(event, 0) for event, n in now.items()}

    def set_loss(self, loss_percent: float) -> None:
        self.net.set_loss(loss_percent)
