"""The control plane of a run: program every switch of a topology through controller.SwitchSession.

One session per switch stays open for the whole run (the runner is the switches' primary controller, as
a real controller would be): push the compiled program, install the routes the topology implies, and,
before each training mode, the job from its description (contract/job.py) with a fresh epoch and key (a new
run of a job must not meet the register cells of the previous one); the job brings its lookup table.

A topology with ``aggregation.leaves`` aggregates on two levels: the job goes on the spine and the leaves,
its table on the leaves (controller/two_level.py); everything else here is the same for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contract.job import JobSpec
from controller import two_level
from controller.errors import JobRefused
from controller.topology import Topology


@dataclass
class ControlPlane:
    topo: Topology
    sessions: dict  # switch name -> controller.session.SwitchSession
    say: Callable[[str], None] = print

    @classmethod
    def connect(cls, topo: Topology) -> ControlPlane:
        from controller.session import SwitchSession

        sessions = {}
        for switch in topo.switches.values():
            sessions[switch.name] = SwitchSession(switch.grpc_addr, device_id=switch.device_id, name=switch.name)
        return cls(topo, sessions)

    @property
    def aggregator(self):
        return self.sessions[self.topo.aggregation.switch]

    def program(self, say=print) -> None:
        """Pipeline and routes on every switch (the lookup table comes with each job: add_job)."""
        self.say = say
        for name, session in self.sessions.items():
            pushed = session.push()
            routes = session.install_forwarding(self.topo)
            say(f"{name}: program pushed ({pushed['bmv2_json_bytes'] // 1024} KiB BMv2 JSON), routes {routes}")

    def reprogram(self, name: str) -> None:
        """Switch `name` restarted with nothing: a new session to it (the old one's stream died with the
        process), the program pushed and its routes installed again, as `program` did at the start."""
        from controller.session import SwitchSession

        self.sessions[name].close()
        switch = self.topo.switches[name]
        self.sessions[name] = SwitchSession(switch.grpc_addr, device_id=switch.device_id, name=name)
        pushed = self.sessions[name].push()
        routes = self.sessions[name].install_forwarding(self.topo)
        self.say(f"{name}: program pushed again ({pushed['bmv2_json_bytes'] // 1024} KiB BMv2 JSON), routes {routes}")

    def last_epoch(self) -> int:
        """The latest epoch any aggregating switch gave a job since its program was pushed."""
        return max(self.sessions[name].last_epoch() for name in self.aggregating)

    @property
    def aggregating(self) -> list[str]:
        """The switches that hold jobs and sum: the aggregating switch, or the spine and its leaves."""
        return [self.topo.aggregation.switch] + [leaf.switch for leaf in self.topo.aggregation.leaves]

    def add_job(
        self,
        spec: JobSpec,
        hosts: list[str] | None = None,
        epoch: int | None = None,
        *,
        topology: Topology | None = None,
        pool: bool = False,
        pool_cells: int | None = None,
    ):
        """Add (or renew) the job `spec` for `hosts` (default: every worker) wherever this topology
        aggregates, with a fresh epoch (`epoch`: this one, above every switch's last) and, unless the
        description has one, a fresh key: a jobs.Job, or a two_level.TwoLevelJob (both have job_id, epoch,
        slot_base, n_slots, key). `topology`: the job's view of this topology, whose workers are its hosts
        with worker ids 0..n-1 (a trace job's, topologies/trace_run.py; default: the run's). `pool`: its
        uses claim cells from the shared pool (`pool_cells` sizes it when no pool job has placed it yet)."""
        topology = topology or self.topo
        hosts = list(topology.workers) if hosts is None else hosts
        if self.topo.two_level:
            if pool:
                raise JobRefused("the shared pool is a one-switch feature: two-level jobs own their slots")
            return two_level.add_job(self.sessions, topology, spec, hosts, epoch=epoch)
        return self.aggregator.add_job(spec, hosts, topology, epoch=epoch, pool=pool, pool_cells=pool_cells)

    def end_job(self, job_id: int) -> None:
        """Remove the job (its jobs entries, result_dst and uplink entries and multicast groups) if it is there."""
        if self.topo.two_level:
            two_level.remove_job(self.sessions, self.topo, job_id, missing_ok=True)
        else:
            self.aggregator.remove_job(job_id, missing_ok=True)

    def job_ids(self) -> set[int]:
        """Job ids installed on any aggregating switch."""
        return {job.job_id for name in self.aggregating for job in self.sessions[name].installed_jobs()}

    def stats(self) -> dict:
        """Event counters of every switch: {switch: {event: packets}}."""
        out = {}
        for name, session in self.sessions.items():
            out[name] = {event: packets for event, (packets, _) in session.read_stats().events.items()}
        return out

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()


def counter_delta(after: dict, before: dict) -> dict:
    return {sw: {ev: n - before.get(sw, {}).get(ev, 0) for ev, n in events.items()} for sw, events in after.items()}
