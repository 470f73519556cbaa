"""The THC program's own frames through BMv2 and through the software switch (Python and native backends):
random THC, FIX32 and NORM requests, QUERYs, RELEASEs, PARTIALs, results to a leaf and malformed frames of
live jobs, each seed a test case. The outputs must be byte-identical (as multisets: BMv2's egress threads
keep no order between ports) and the event counters, all and per job, equal.

BMv2 reads the frames from pcap files (`--use-files`), which it replays in order through its one ingress
thread, so the registers see the frames in the order the software switch does, and 2,000 frames take
seconds rather than the minutes of a frame-by-frame exchange over veths. Nothing here needs root.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from controller.writes import INSERT, TableWrite, to_updates
from harness import frames as tp
from harness.switches import SoftwareTarget, SwitchTarget
from spec import contract
from tests.emulator.test_engine_bmv2 import _collect_output, _InputFifo, _pcap_records
from tests.support.bmv2 import Bmv2Process, bmv2_binary
from tests.support.paths import THC_JSON
from thc import make_table

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.slow,
    pytest.mark.skipif(bmv2_binary() is None, reason="simple_switch_grpc is not installed"),
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
# job id: (workers, lane bits, table, slot_base, n_slots, multicast group, leaf of a spine?)
JOBS = {
    7: ((0, 1, 2), 8, TABLE_8, 0, 4, 70, False),
    9: ((1, 3), 16, TABLE_16, 8, 3, 90, False),
    12: ((0, 2, 3), 8, TABLE_8, 16, 2, 120, True),
}
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
    for epoch, (job_id, (workers, lanes, table, base, slots, group, leaf)) in enumerate(JOBS.items(), start=3):
        t.set_job(
            job_id,
            n_workers=len(workers),
            slot_base=base,
            n_slots=slots,
            mcast_grp=group,
            worker_mask=sum(1 << w for w in workers),
            lane_bits=lanes,
            epoch=epoch,
            key=KEY + job_id,
        )
        t.set_group(group, [(w + 1, w) for w in workers])
        for w in workers:
            t.add_result_dst(job_id, w, mac_int(worker(w)[0]), ip_int(worker(w)[1]))
        t.set_table(job_id, table.values, table.bits)
        if leaf:
            t.apply([TableWrite(INSERT, contract.UPLINK, (job_id,), contract.TO_SPINE, (1, ip_int(SPINE[1])))])


def random_frames(seed: str, count: int) -> list[tuple[int, bytes]]:
    """(port, frame) of the jobs' workers (and the spine, port 5): mostly what the protocol sends, in rounds
    close enough to complete uses, with every field now and then off by what a bug or an attacker sends."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(rng.getrandbits(32))
    frames, use_ops = [], {}
    for _ in range(count):
        job_id = rng.choice([*JOBS, *JOBS, *JOBS, UNKNOWN_JOB])
        workers, lanes, table, _, slots, _, leaf = JOBS.get(job_id, JOBS[7])
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
            + [contract.KIND_RESULT_RETX, contract.KIND_STATUS, rng.randrange(16)]
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
        self.inputs = {p: _InputFifo(workdir / f"p{p}_in.pcap") for p in PORTS}
        interfaces = [arg for p in PORTS for arg in ("-i", f"{p}@p{p}")]
        self.proc = Bmv2Process(workdir, ["--use-files", "0", "--log-level", "error", "--no-p4", *interfaces])
        self.session = SwitchSession(self.proc.address, name="bmv2", connect_timeout=20.0)
        self.session.push()
        self.p4info = self.session._p4info

    def apply(self, writes: list) -> None:
        self.session.conn.write(to_updates(self.p4info, writes))

    def run(self, frames, expected_count: int) -> list[tuple[int, bytes]]:
        for p, fifo in self.inputs.items():
            fifo.feed(_pcap_records([(i, f) for i, (q, f) in enumerate(frames) if q == p]))
        return _collect_output(self.workdir, PORTS, expected_count, self.proc)

    def counters(self) -> tuple[dict, dict]:
        stats = self.session.read_stats(list(JOBS) + [UNKNOWN_JOB])
        events = {name: stats.packets(name) for name in contract.EVENTS}
        jobs = {j: {name: stats.jobs[j].packets(name) for name in contract.EVENTS} for j in stats.jobs}
        return events, jobs

    def close(self) -> None:
        self.session.close()
        self.proc.stop()
        for fifo in self.inputs.values():
            if fifo.writer is None:
                fifo.close()


def software_run(backend: str, frames) -> tuple[list, dict, dict]:
    t = SoftwareTarget(backend)
    program(t)
    out = []
    for port, frame in frames:
        out += t.send(port, frame)
    events = t.events()
    jobs = {j: t.job_events(j) for j in [*JOBS, UNKNOWN_JOB]}
    t.close()
    return sorted(out), events, jobs


@pytest.mark.parametrize("seed", SEEDS)
def test_bmv2_and_the_software_switch_send_the_same_bytes_and_count_the_same_events(seed, tmp_path):
    frames = random_frames(seed, FRAMES_PER_SEED)
    python = software_run("python", frames)
    native = software_run("native", frames)
    assert native == python, "the native backend differs from the Python backend"
    out, events, jobs = python
    # the frames reached every stage that is compared: aggregation, results, drops of several kinds
    assert events["COMPLETED"] > 0 and events["CONSUMED"] > 0 and events["DROP_MALFORMED"] > 0
    assert events["QUERY_ANSWERED"] > 0 and events["FANNED_OUT"] > 0 and events["DROP_BAD_KEY"] > 0
    bmv2 = PcapBmv2(tmp_path)
    try:
        program(bmv2)
        theirs = bmv2.run(frames, len(out))
        their_events, their_jobs = bmv2.counters()
    finally:
        bmv2.close()
    assert len(theirs) == len(out), f"BMv2 sent {len(theirs)} frames, the software switch {len(out)}"
    differing = [i for i, (a, b) in enumerate(zip(theirs, out)) if a != b]
    assert not differing, f"{len(differing)} of {len(out)} output frames differ, the first at {differing[0]}"
    assert their_events == events
    assert their_jobs == jobs
