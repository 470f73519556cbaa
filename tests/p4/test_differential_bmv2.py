"""The THC program's own frames through BMv2 and through the software switch (Python and native backends):
random THC, FIX32 and NORM requests, QUERYs, RELEASEs, PARTIALs, results to a leaf and malformed frames of
live jobs (static ones, a fallback server's, and pool jobs contending for a pool of four cells), each seed a
test case. The outputs must be byte-identical (as multisets: BMv2's egress threads
keep no order between ports), the event counters, all and per job, equal, and every cell of every register
equal once the frames are through. BMv2's registers are read over its Thrift API, which answers a cell as
a signed 64-bit number and saturates the wide accumulator cells at 2**63 - 1 (its P4Runtime server reads
no registers: "Register reads are not supported yet"); such cells are taken from BMv2's trace log, the
last value it wrote there, and the log is checked against every cell the Thrift API reads exactly.

BMv2 reads the frames from pcap files (`--use-files`), which it replays in order through its one ingress
thread, so the registers see the frames in the order the software switch does, and 2,000 frames take
seconds rather than the minutes of a frame-by-frame exchange over veths. Nothing here needs root.
"""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

import contract
from contract.job import JobSpec
from controller import pool as pools
from controller.jobs import JobWorker
from controller.writes import INSERT, TableWrite, to_updates
from harness import frames as tp
from harness.switches import SoftwareTarget, SwitchTarget
from tests.support.bmv2 import Bmv2Process, needs_bmv2, read_registers
from tests.support.bmv2_pcap import InputFifo, collect_output, pcap_records
from tests.support.paths import THC_JSON
from thc import make_table

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.slow,
    needs_bmv2(),
    pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built"),
]

SEEDS = [f"differential-{i}" for i in range(5)]
FRAMES_PER_SEED = 2_000  # 10,000 frames through BMv2 over the seeds
PORTS = (1, 2, 3, 4, 5)  # 1..4 workers, 5 the way to a spine
SERVICE = ("00:00:00:00:00:fe", "10.0.0.254")
SPINE = ("00:00:00:00:00:99", "10.0.9.1")
KEY = 0x5EC2E7A1
TABLE_8 = make_table(bits=4, granularity=30, clip=1 / 32, kind="optimal")  # 3 · 30 ≤ 255: 8-bit lanes
TABLE_16 = make_table(bits=3, granularity=200, clip=1 / 32, kind="optimal")  # 16-bit lanes, 3-bit indices
# job id: (workers, lane bits, table, slot_base, n_slots, multicast group, leaf of a spine?, pool ring
# offset or None: a pool job, p4/README.md "Shared pool", whose uses contend for POOL's few cells)
JOBS = {
    7: ((0, 1, 2), 8, TABLE_8, 0, 4, 70, False, None),
    9: ((1, 3), 16, TABLE_16, 8, 3, 90, False, None),
    12: ((0, 2, 3), 8, TABLE_8, 16, 2, 120, True, None),
    20: ((0, 1, 2), 8, TABLE_8, contract.SLOTS, 4, 200, False, 0),
    21: ((1, 2, 3), 8, TABLE_8, contract.SLOTS + 8, 3, 210, False, 2),
}
POOL = (contract.CELLS - 4, 4)  # (pool_base, pool_cells)
SPARSE_JOB = 9  # a fallback server's job: any later round may start a slot's next use
UNKNOWN_JOB = 33
USE_OPS = [contract.OP_THC] * 4 + [contract.OP_FIX32] * 2 + [contract.OP_NORM]


def worker(w: int) -> tuple[str, str]:
    return f"00:00:00:00:00:{w + 1:02x}", f"10.0.0.{w + 1}"


def ip_int(ip: str) -> int:
    return int.from_bytes(tp.ip_bytes(ip), "big")


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def program(t: SwitchTarget) -> None:
    """The same control-plane state on every target, in contract terms (the controller's writes)."""
    t.add_service(ip_int(SERVICE[1]))
    for w in range(4):
        t.add_route(ip_int(worker(w)[1]), 32, mac_int(worker(w)[0]), w + 1)
    t.add_route(ip_int(SPINE[1]), 32, mac_int(SPINE[0]), 5)
    for epoch, (job_id, (workers, lanes, table, base, slots, group, leaf, ring)) in enumerate(JOBS.items(), start=3):
        t.set_job(
            JobSpec(job_id, workers=len(workers), slots=slots, window=slots, key=KEY + job_id),
            [JobWorker(w, *worker(w), w + 1) for w in workers],
            epoch=epoch,
            slot_base=base,
            mcast_grp=group,
            lane_bits=lanes,
        )
        t.set_group(group, [(w + 1, w) for w in workers])
        for w in workers:
            t.add_result_dst(job_id, w, mac_int(worker(w)[0]), ip_int(worker(w)[1]))
        t.set_table(job_id, table.values, table.bits)
        if leaf:
            t.apply([TableWrite(INSERT, contract.UPLINK, (job_id,), contract.TO_SPINE, (1, ip_int(SPINE[1])))])
        if ring is not None:
            t.apply([pools.pool_write(INSERT, job_id, (*POOL, ring)), pools.live_write(INSERT, epoch)])
    t.apply([pools.fallback_server_write(INSERT, SPARSE_JOB)])


def random_frames(seed: str, count: int) -> list[tuple[int, bytes]]:
    """(port, frame) of the jobs' workers (and the spine, port 5): mostly what the protocol sends, in rounds
    close enough to complete uses, with every field now and then off by what a bug or an attacker sends."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(rng.getrandbits(32))
    frames, use_ops = [], {}
    for _ in range(count):
        job_id = rng.choice([*JOBS, *JOBS, *JOBS, UNKNOWN_JOB])
        workers, lanes, table, _, slots, _, leaf, _ = JOBS.get(job_id, JOBS[7])
        w = rng.choice(workers) if rng.random() < 0.95 else rng.randrange(40)
        slot = rng.randrange(slots + (1 if rng.random() < 0.05 else 0))
        rnd = rng.choice([0, 0, 1, 1, 2, 3, rng.getrandbits(32)]) if rng.random() < 0.98 else 7
        # one op a use, as workers keep it (so that uses complete), and now and then another
        op = use_ops.setdefault(
            (job_id, slot, rnd), rng.choice([contract.OP_THC] * 4 + [contract.OP_FIX32] * 2 + [contract.OP_NORM])
        )
        if rng.random() < 0.05:
            op = rng.randrange(16)
        kind = rng.choice(
            [contract.KIND_REQUEST] * 10
            + [contract.KIND_QUERY, contract.KIND_RELEASE, contract.KIND_PARTIAL, contract.KIND_RESULT]
            + [contract.KIND_RESULT_RETX, contract.KIND_STATUS, contract.KIND_ACK, rng.randrange(16)]
        )
        op_lanes = lanes if op == contract.OP_THC else contract.LANES_INT32
        if rng.random() < 0.03:
            op_lanes = rng.choice([0, 8, 16, 32, 64])
        if kind == contract.KIND_REQUEST and op == contract.OP_THC:
            high = 1 << (table.bits if rng.random() < 0.97 else 4)
            indices = nrng.integers(0, high, size=contract.per_request(lanes), dtype=np.uint8)
            payload = tp.request_payload(indices, lanes)
        elif kind == contract.KIND_REQUEST and op == contract.OP_FIX32:
            payload = tp.pack_int32(nrng.integers(-(2**31), 2**31, size=contract.WORDS * 2, dtype=np.int64))
        elif kind == contract.KIND_REQUEST and op == contract.OP_NORM:
            payload = tp.pack_norms(nrng.uniform(0, 1e6, size=rng.randint(1, contract.NORMS_PER_REQUEST)))
        elif kind == contract.KIND_RELEASE and op in contract.OP_NAMES:
            payload = tp.release_payload(op)
        elif kind in (contract.KIND_PARTIAL, contract.KIND_RESULT, contract.KIND_RESULT_RETX):
            payload = nrng.integers(0, 256, size=contract.result_payload_bytes(op), dtype=np.uint8).tobytes()
        else:
            payload = b""
        src = SPINE if kind in (contract.KIND_RESULT, contract.KIND_RESULT_RETX) and leaf else worker(w % 4)
        frame = tp.frame(
            src,
            SERVICE if rng.random() < 0.95 else worker(rng.randrange(4)),
            op=op,
            kind=kind,
            job_id=job_id,
            worker_id=w,
            slot=slot,
            round_=rnd,
            count=rng.randrange(5) if kind == contract.KIND_PARTIAL else 0,
            lane_bits=op_lanes,
            key=KEY + job_id if rng.random() < 0.97 else rng.getrandbits(32),
            payload=payload,
            version=contract.THC_VERSION if rng.random() < 0.98 else rng.randrange(256),
            sport=40000 + w,
        )
        if rng.random() < 0.05:  # malformed: cut short, a bit flipped (in the IPv4 header: a bad checksum)
            frame = frame[: rng.randrange(14, len(frame))] if rng.random() < 0.5 else flip(frame, rng)
        port = 5 if src == SPINE else w % 4 + 1
        frames.append((port, frame))
    return frames


def flip(frame: bytes, rng: random.Random) -> bytes:
    b = bytearray(frame)
    i = rng.randrange(len(b))
    b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


class PcapBmv2(SwitchTarget):
    """simple_switch_grpc reading its ports from pcap files, programmed over P4Runtime by the controller."""

    def __init__(self, workdir):
        from controller.session import SwitchSession

        self.workdir = workdir
        self.inputs = {p: InputFifo(workdir / f"p{p}_in.pcap") for p in PORTS}
        interfaces = [arg for p in PORTS for arg in ("-i", f"{p}@p{p}")]
        # trace: its "Wrote register" lines give the full value of the cells its Thrift API saturates
        trace = ["--log-console", "--log-level", "trace"]
        self.proc = Bmv2Process(workdir, ["--use-files", "0", *trace, "--no-p4", *interfaces])
        self.session = SwitchSession(self.proc.address, name="bmv2", connect_timeout=20.0)
        self.session.push()
        self.p4info = self.session._p4info

    def apply(self, writes: list) -> None:
        self.session.conn.write(to_updates(self.p4info, writes))

    def run(self, frames, expected_count: int) -> list[tuple[int, bytes]]:
        for p, fifo in self.inputs.items():
            fifo.feed(pcap_records([(i, f) for i, (q, f) in enumerate(frames) if q == p]))
        return collect_output(self.workdir, PORTS, expected_count, self.proc)

    def counters(self) -> tuple[dict, dict]:
        stats = self.session.read_stats(list(JOBS) + [UNKNOWN_JOB])
        events = {name: stats.packets(name) for name in contract.EVENTS}
        jobs = {j: {name: stats.jobs[j].packets(name) for name in contract.EVENTS} for j in stats.jobs}
        return events, jobs

    def registers(self, widths: dict[str, int]) -> dict[str, list[int]]:
        """Every cell as the Thrift API reads it (call before close)."""
        return read_registers(self.proc.thrift_port, sorted(widths))

    def close(self) -> None:
        self.session.close()
        self.proc.stop()
        for fifo in self.inputs.values():
            if fifo.writer is None:
                fifo.close()


def register_widths() -> dict[str, int]:
    """Every register of the compiled program: name -> bit width (BMv2's Thrift API answers a wide cell
    as a signed 64-bit number, so both sides are read modulo 2**width)."""
    return {r["name"]: r["bitwidth"] for r in json.loads(THC_JSON.read_text())["register_arrays"]}


def software_registers(sw, widths: dict[str, int]) -> dict[str, list[int]]:
    sizes = {name: reg.size for name, reg in sw.program.registers.items()}
    cells = {
        name: sw.register_cells(name)
        if hasattr(sw, "register_cells")
        else [sw.register_read(name, i) for i in range(n)]
        for name, n in sizes.items()
    }
    return {name: [cell & ((1 << widths[name]) - 1) for cell in cells[name]] for name in widths}


def software_run(backend: str, frames) -> tuple[list, dict, dict, dict]:
    t = SoftwareTarget(backend)
    program(t)
    out = []
    for port, frame in frames:
        out += t.send(port, frame)
    events = t.events()
    jobs = {j: t.job_events(j) for j in [*JOBS, UNKNOWN_JOB]}
    registers = software_registers(t.sw, register_widths())
    t.close()
    return sorted(out), events, jobs, registers


SATURATED = 2**63 - 1  # what BMv2's Thrift API answers for a cell of 2**63 or more
WROTE = re.compile(r"Wrote register '([^']+)' at index (\d+) with value (\d+)")


def exact_registers(thrift: dict[str, list[int]], log: str, widths: dict[str, int]) -> tuple[dict, int]:
    """BMv2's registers with each saturated wide cell replaced by the last value its trace log shows it
    wrote there; the log must agree with every written cell the Thrift API read exactly. Answers the
    registers and how many cells came from the log."""
    last = {}
    for name, index, value in WROTE.findall(log):
        last[name, int(index)] = int(value)
    registers, from_log = {}, 0
    for name, cells in thrift.items():
        exact = []
        for i, cell in enumerate(cells):
            logged = last.get((name, i))
            if widths[name] >= 64 and cell == SATURATED:
                assert logged is not None, f"{name}[{i}] is saturated but BMv2's log shows no write to it"
                exact.append(logged)
                from_log += 1
            else:
                assert logged is None or logged == cell, f"{name}[{i}]: Thrift {cell}, the log's last write {logged}"
                exact.append(cell)
        registers[name] = exact
    return registers, from_log


def first_difference(theirs: dict[str, list[int]], ours: dict[str, list[int]]) -> str:
    """Where two register dumps differ first, and how many cells differ, for the failure message."""
    cells = [(name, i, a, b) for name in ours for i, (a, b) in enumerate(zip(theirs[name], ours[name])) if a != b]
    if not cells:
        return "the same cells"
    name, i, a, b = cells[0]
    return f"{len(cells)} cells differ, the first {name}[{i}]: BMv2 {a:#x}, the software switch {b:#x}"


@pytest.mark.parametrize("seed", SEEDS)
def test_bmv2_and_the_software_switch_send_the_same_bytes_and_count_the_same_events(seed, tmp_path):
    frames = random_frames(seed, FRAMES_PER_SEED)
    python = software_run("python", frames)
    native = software_run("native", frames)
    assert native == python, "the native backend differs from the Python backend"
    out, events, jobs, registers = python
    # the frames reached every stage that is compared: aggregation, results, drops of several kinds
    assert events["COMPLETED"] > 0 and events["CONSUMED"] > 0 and events["DROP_MALFORMED"] > 0
    assert events["QUERY_ANSWERED"] > 0 and events["FANNED_OUT"] > 0 and events["DROP_BAD_KEY"] > 0
    assert (
        events["POOL_TAKEN"] > 0 and events["POOL_FALLBACK"] > 0 and jobs[20]["COMPLETED"] + jobs[21]["COMPLETED"] > 0
    )
    bmv2 = PcapBmv2(tmp_path)
    try:
        program(bmv2)
        theirs = bmv2.run(frames, len(out))
        their_events, their_jobs = bmv2.counters()
        thrift = bmv2.registers(register_widths())
    finally:
        bmv2.close()
    their_registers, from_log = exact_registers(thrift, bmv2.proc.log.read_text(), register_widths())
    assert len(theirs) == len(out), f"BMv2 sent {len(theirs)} frames, the software switch {len(out)}"
    differing = [i for i, (a, b) in enumerate(zip(theirs, out)) if a != b]
    assert not differing, f"{len(differing)} of {len(out)} output frames differ, the first at {differing[0]}"
    assert their_events == events
    assert their_jobs == jobs
    assert sorted(their_registers) == sorted(registers)
    assert their_registers == registers, first_difference(their_registers, registers)
    # the registers were written: slots were taken and sums accumulated, so an all-zero dump cannot pass
    assert any(any(cells) for name, cells in registers.items() if name.startswith(contract.ACC_PREFIX))
    assert from_log < sum(len(cells) for cells in registers.values()) // 2  # most cells read over Thrift
