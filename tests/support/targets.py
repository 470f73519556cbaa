"""Switch targets for the pipeline's packet tests: the same tests run on every target that is present.

A target takes the program's control-plane state in contract terms (p4/README.md) and answers
`send(port, frame) -> [(port, frame), ...]`. The software switch runs in-process; `simple_switch_grpc`
is driven over P4Runtime and veth pairs when it is installed.
"""
from __future__ import annotations

import json
from pathlib import Path

from topologies.targets import find_executable, stop_process
from tests.support import paths

BUILD, THC_JSON, THC_P4INFO = paths.BUILD, paths.THC_JSON, paths.THC_P4INFO

EVENTS = ["CONSUMED", "COMPLETED", "RETX_ANSWERED", "DROP_UNKNOWN_JOB", "DROP_FOREIGN_WORKER",
          "DROP_SLOT_RANGE", "DROP_STALE_ROUND", "DROP_DUPLICATE", "DROP_BAD_INDEX", "DROP_MALFORMED",
          "DROP_BAD_OP", "FORWARDED", "DROP_NO_ROUTE", "DROP_NOT_IPV4"]

LPM = "ThcIngress.forwarding.ipv4_lpm"
SERVICE = "ThcIngress.job_check.service_addr"
JOBS = "ThcIngress.job_check.jobs"
RESULT_DST = "ThcEgress.result_dst"
EVENT_COUNTER = "ThcIngress.thc_events"


def lut_entries(values, bits: int) -> list[tuple[int, int]]:
    """(key, word) of every lookup entry for a table of values (p4/README.md, "Lookup entries")."""
    n = 1 << bits
    return [((hi << 4) | lo, (int(values[hi]) << 16) | int(values[lo])) for hi in range(n) for lo in range(n)]


class SoftwareTarget:
    """The software switch, in-process: control-plane calls go straight to the engine."""

    name = "emulator"

    def __init__(self):
        from emulator.switch import SoftwareSwitch
        self.sw = SoftwareSwitch.from_json(THC_JSON)
        self.pairs = sum(1 for t in self.sw.program.tables if ".lut_" in t)

    def add_route(self, prefix: int, length: int, mac: int, port: int) -> None:
        self.sw.table_add(LPM, [(prefix, length)], "ThcIngress.forwarding.ipv4_forward", [mac, port])

    def add_service(self, ip: int) -> None:
        self.sw.table_add(SERVICE, [ip], "ThcIngress.job_check.serve", [])

    def set_job(self, job_id: int, *, n_workers, slot_base, n_slots, mcast_grp, worker_mask, lane_bits,
                epoch, replace: bool = False) -> None:
        params = [n_workers, slot_base, n_slots, mcast_grp, worker_mask, lane_bits, epoch]
        add = self.sw.table_modify if replace else self.sw.table_add
        add(JOBS, [job_id], "ThcIngress.job_check.set_job", params)

    def set_group(self, group: int, replicas: list[tuple[int, int]]) -> None:
        self.sw.mc_group_set(group, replicas)

    def add_result_dst(self, job_id: int, worker_id: int, mac: int, ip: int) -> None:
        self.sw.table_add(RESULT_DST, [job_id, worker_id], "ThcEgress.set_result_dst", [mac, ip])

    def install_table(self, values, bits: int) -> None:
        for i in range(self.pairs):
            table = f"ThcIngress.index_lookup.lut_{i}"
            self.sw.table_clear(table)
            for key, word in lut_entries(values, bits):
                self.sw.table_add(table, [key], f"ThcIngress.index_lookup.set_w_{i}", [word])

    def send(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        return self.sw.process(port, frame)

    def events(self) -> dict[str, int]:
        return {name: self.sw.counter_read(EVENT_COUNTER, i)[0] for i, name in enumerate(EVENTS)}

    def close(self) -> None:
        assert self.sw.stats.get("exceptions", 0) == 0, "the engine raised while processing a packet"


def bmv2_binary() -> str | None:
    """simple_switch_grpc where the runner looks for it (topologies.targets), else None."""
    return find_executable("bmv2")


def program_summary() -> dict:
    """Names and sizes from the compiled JSON, for tests that must not hard-code K."""
    program = json.loads(THC_JSON.read_text())
    pairs = sum(1 for t in program["pipelines"][0]["tables"] if ".lut_" in t["name"])
    return {"pairs": pairs, "coords": 2 * pairs}


class Bmv2Target:
    """BMv2's simple_switch_grpc on veth pairs, programmed over P4Runtime by the project's controller.

    Port p of the switch is veth `<prefix>p-sw`; the test sends into and listens on its peer. A packet is
    processed when the thc_events counter moves (every packet counts exactly one event); its outputs
    are what arrives until the ports stay quiet for `settle` seconds (BMv2 has sent them long before:
    the counter is read over P4Runtime after ingress, and egress takes microseconds).
    """

    name = "bmv2"

    def __init__(self, binary: str, workdir: Path, ports=(1, 2, 3, 4), settle: float = 0.5):
        import os
        import subprocess

        from controller.session import SwitchSession
        from p4.v1 import p4runtime_pb2
        from topologies.targets import free_tcp_port
        from topologies.veth import VethPorts

        self._pb = p4runtime_pb2
        self.settle = settle
        self.veths = None
        self.proc = None
        self.session = None
        try:
            self.veths = VethPorts(f"tb{os.getpid() % 10000}p", ports)
            grpc_port = free_tcp_port()
            args = [binary, "--device-id", "0", "--thrift-port", str(free_tcp_port()),
                    "--log-file", str(workdir / "bmv2"), "--log-flush", "--no-p4",
                    *self.veths.interface_args(), "--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}"]
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.session = SwitchSession(f"127.0.0.1:{grpc_port}", name="bmv2", connect_timeout=20.0)
            self.session.push()
            self.p4info = self.session._p4info
        except Exception:
            self.close()
            raise
        self.pairs = sum(1 for t in self.p4info.tables() if ".lut_" in t.preamble.name)

    def _write(self, kind, entries) -> None:
        updates = []
        for e in entries:
            entity = (self._pb.Entity(table_entry=e) if isinstance(e, self._pb.TableEntry)
                      else self._pb.Entity(packet_replication_engine_entry=e))
            updates.append(self._pb.Update(type=kind, entity=entity))
        self.session.conn.write(updates)

    def _insert(self, *entries) -> None:
        self._write(self._pb.Update.INSERT, entries)

    def add_route(self, prefix: int, length: int, mac: int, port: int) -> None:
        self._insert(self.p4info.table_entry(LPM, {"hdr.ipv4.dstAddr": (prefix, length)},
                                             "ThcIngress.forwarding.ipv4_forward", {"dstAddr": mac, "port": port}))

    def add_service(self, ip: int) -> None:
        self._insert(self.p4info.table_entry(SERVICE, {"hdr.ipv4.dstAddr": ip}, "ThcIngress.job_check.serve", {}))

    def set_job(self, job_id: int, *, n_workers, slot_base, n_slots, mcast_grp, worker_mask, lane_bits,
                epoch, replace: bool = False) -> None:
        params = dict(n_workers=n_workers, slot_base=slot_base, n_slots=n_slots, mcast_grp=mcast_grp,
                      worker_mask=worker_mask, lane_bits=lane_bits, epoch=epoch)
        entry = self.p4info.table_entry(JOBS, {"hdr.thc.job_id": job_id}, "ThcIngress.job_check.set_job", params)
        self._write(self._pb.Update.MODIFY if replace else self._pb.Update.INSERT, [entry])

    def set_group(self, group: int, replicas: list[tuple[int, int]]) -> None:
        pre = self._pb.PacketReplicationEngineEntry()
        pre.multicast_group_entry.multicast_group_id = group
        for port, rid in replicas:
            pre.multicast_group_entry.replicas.add(egress_port=port, instance=rid)
        self._insert(pre)

    def add_result_dst(self, job_id: int, worker_id: int, mac: int, ip: int) -> None:
        self._insert(self.p4info.table_entry(
            RESULT_DST, {"hdr.thc.job_id": job_id, "standard_metadata.egress_rid": worker_id},
            "ThcEgress.set_result_dst", {"dmac": mac, "dip": ip}))

    def install_table(self, values, bits: int) -> None:
        self.session.install_table(list(values), bits)

    def events(self) -> dict[str, int]:
        stats = self.session.read_stats()
        return {name: stats.packets(name) for name in EVENTS}

    def send(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        import select
        import time

        before = sum(self.events().values())
        self.veths.socks[port].send(frame)
        deadline = time.monotonic() + 60.0
        while sum(self.events().values()) == before:
            if time.monotonic() > deadline:
                raise AssertionError("BMv2 did not count the packet within a minute: is it running?")
            time.sleep(0.01)
        out: list[tuple[int, bytes]] = []
        while True:
            ready, _, _ = select.select(list(self.veths.socks.values()), [], [], self.settle)
            if not ready:
                return out
            out += self.veths.receive_ready(ready)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        stop_process(self.proc)
        if self.veths is not None:
            self.veths.close()
