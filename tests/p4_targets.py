"""Switch targets for the pipeline's packet tests: the same tests run on every target that is present.

A target takes the program's control-plane state in contract terms (p4/README.md) and answers
`send(port, frame) -> [(port, frame), ...]`. The software switch runs in-process; `simple_switch_grpc`
is driven over P4Runtime and veth pairs when it is installed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

BUILD = Path(__file__).resolve().parents[1] / "p4" / "build"
THC_JSON = BUILD / "thc.json"
THC_P4INFO = BUILD / "thc.p4info.txtpb"

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
    """simple_switch_grpc on PATH or in /opt/p4/bin (a hand-built toolchain), else None."""
    found = shutil.which("simple_switch_grpc")
    if found:
        return found
    local = Path("/opt/p4/bin/simple_switch_grpc")
    return str(local) if local.exists() else None


def program_summary() -> dict:
    """Names and sizes from the compiled JSON, for tests that must not hard-code K."""
    program = json.loads(THC_JSON.read_text())
    pairs = sum(1 for t in program["pipelines"][0]["tables"] if ".lut_" in t["name"])
    return {"pairs": pairs, "coords": 2 * pairs}
