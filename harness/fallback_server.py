"""A switch and a fallback server (a parameter server: the THC program on a second software switch) behind
one loopback wire, for pool jobs whose uses fall back (host_agent/pool_fallback.py) and for jobs that use
no switch at all (their workers address the server directly).

The server is a host: everything it takes and sends crosses its one link. With `rate` set (bit/s) and the
wire given, it takes frames one at a time, each for its own and its results' time on that link, and its
results leave when it is done (LoopbackWire.delay_outputs): fallen-back uses queue at the server while the
switch goes on serving the others.
"""

from __future__ import annotations

import dataclasses

from controller import jobs
from controller import pool as pools
from controller.writes import INSERT, EngineWriter
from harness.sim import SimJob, program_engine
from host_agent import wire

SERVER = wire.Endpoint("02:00:00:00:00:fd", "10.0.0.253")
_DST_IP = slice(wire.ETH_LEN + 16, wire.ETH_LEN + 20)


class SwitchAndServer:
    """An engine for a LoopbackWire: frames addressed to `address` go to `server`, others to `switch`."""

    def __init__(self, switch, server, address: wire.Endpoint = SERVER, rate: float = 0.0, lw=None):
        self.switch, self.server = switch, server
        self._ip = wire.ip_bytes(address.ip)
        self.rate, self.wire = rate, lw
        self.server_frames = 0  # frames the server took
        self._server_free = float("-inf")  # when the server is done with the frames it took so far

    def process(self, port, frame):
        if bytes(frame[_DST_IP]) != self._ip:
            return self.switch.process(port, frame)
        self.server_frames += 1
        out = self.server.process(port, frame)
        if self.rate and self.wire is not None:
            size = len(frame) + sum(len(f) for _, f in out)
            arrived = self.wire.switch_done
            self._server_free = max(arrived, self._server_free) + 8 * size / self.rate
            self.wire.delay_outputs(self._server_free - arrived)
        return out


def serve(server, job: SimJob, served: list, fallback: bool = True) -> SimJob:
    """Install `job` on the server engine `server`, which holds the jobs `served` (SimJobs, updated):
    static slots placed first fit among theirs, the job's key and epoch; `fallback`: with a fallback_rounds
    entry, since the server sees only the uses that fell back (controller/pool.py)."""
    base = jobs.free_range(job.spec.slots, [s.job for s in served], None)
    if base is None:
        raise ValueError(f"job {job.job_id}: the fallback server has no free range of {job.spec.slots} slots")
    static = SimJob(job.spec, dataclasses.replace(job.job, pool=None, slot_base=base))
    program_engine(server, static, service=None if served else SERVER)
    if fallback:
        EngineWriter(server).apply([pools.fallback_server_write(INSERT, job.job_id)])
    served.append(static)
    return static
