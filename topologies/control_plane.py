"""The control plane of a run: program every switch of a topology through controller.SwitchSession.

One session per switch stays open for the whole run (the runner is the switches' primary controller, as
a real controller would be): push the compiled program, install the routes the topology implies, the THC
lookup table on the aggregating switch, and, before each training mode, the job with a fresh epoch (a new
run of a job must not meet the register cells of the previous one).
"""
from __future__ import annotations

from dataclasses import dataclass

from controller.topology import Topology


@dataclass
class ControlPlane:
    topo: Topology
    sessions: dict      # switch name -> controller.session.SwitchSession

    @classmethod
    def connect(cls, topo: Topology) -> "ControlPlane":
        from controller.session import SwitchSession

        sessions = {}
        for switch in topo.switches.values():
            sessions[switch.name] = SwitchSession(switch.grpc_addr, device_id=switch.device_id, name=switch.name)
        return cls(topo, sessions)

    @property
    def aggregator(self):
        return self.sessions[self.topo.aggregation.switch]

    def program(self, table_values, say=print) -> None:
        """Pipeline and routes on every switch; the lookup table on the aggregating one."""
        for name, session in self.sessions.items():
            pushed = session.push()
            routes = session.install_forwarding(self.topo)
            say(f"{name}: program pushed ({pushed['bmv2_json_bytes'] // 1024} KiB BMv2 JSON), routes {routes}")
        table = self.aggregator.install_table(list(int(v) for v in table_values))
        say(f"{self.topo.aggregation.switch}: THC table {table['values']} in {table['lanes']} lanes "
            f"({table['entries']} entries)")

    def start_job(self, job_id: int, n_slots: int):
        """(Re-)add the job for the topology's workers: a fresh epoch, so the new run starts clean."""
        return self.aggregator.add_job(job_id, list(self.topo.workers), self.topo, n_slots=n_slots)

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
