"""The control plane of a run: program every switch of a topology through controller.SwitchSession.

One session per switch stays open for the whole run (the runner is the switches' primary controller, as
a real controller would be): push the compiled program, install the routes the topology implies, the THC
lookup table on the aggregating switch, and, before each training mode, the job with a fresh epoch (a new
run of a job must not meet the register cells of the previous one).

A topology with ``aggregation.leaves`` aggregates on two levels: the table goes on every leaf and a job
on the spine and the leaves (controller/two_level.py); everything else here is the same for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller import two_level
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
        """Pipeline and routes on every switch (the lookup table comes with each job: start_job)."""
        self.say = say
        for name, session in self.sessions.items():
            pushed = session.push()
            routes = session.install_forwarding(self.topo)
            say(f"{name}: program pushed ({pushed['bmv2_json_bytes'] // 1024} KiB BMv2 JSON), routes {routes}")

    @property
    def aggregating(self) -> list[str]:
        """The switches that hold jobs and sum: the aggregating switch, or the spine and its leaves."""
        return [self.topo.aggregation.switch] + [leaf.switch for leaf in self.topo.aggregation.leaves]

    @property
    def table_switches(self) -> list[str]:
        """Where the lookup table goes: the switches that look up workers' indices (leaves on two levels)."""
        return self.aggregating[1:] if self.topo.two_level else self.aggregating

    def start_job(self, job_id: int, n_slots: int, table: list[int]):
        """(Re-)add the job for the topology's workers with the table they decode with: the table is
        installed where it differs, then read back and compared when the job is added (a fresh epoch, so
        the new run starts clean)."""
        for name in self.table_switches:
            installed = self.sessions[name].install_table(table)
            if installed["inserted"] or installed["modified"] or installed["deleted"]:
                self.say(
                    f"{name}: THC table {installed['values']} in {installed['lanes']} "
                    f"lanes ({installed['entries']} entries)"
                )
        return self.add_job(job_id, list(self.topo.workers), n_slots, table=table)

    def add_job(self, job_id: int, hosts: list[str], n_slots: int, table: list[int] | None = None):
        """Add (or renew) job `job_id` for `hosts` wherever this topology aggregates: a jobs.Job, or a
        two_level.TwoLevelJob (both have job_id, epoch, slot_base, n_slots). With `table` the switches'
        lanes are read back and compared with it first (seconds); without, the installed one is trusted."""
        if self.topo.two_level:
            return two_level.add_job(self.sessions, self.topo, job_id, hosts, n_slots=n_slots, table=table)
        return self.aggregator.add_job(job_id, hosts, self.topo, n_slots=n_slots, table=table)

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
