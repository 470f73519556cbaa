"""Packet-level tests of the THC program (p4/README.md is the contract), on every target present.

Frames are built and read from contract/__init__.py (harness/frames.py); expected sums come from
thc's reference aggregator, never from the switch itself. A request carries one cell: 1,024 coordinates
with 8-bit lanes, 512 with 16-bit lanes, 256 int32 for FIX32 (with the default 128-word cells).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import contract
from contract.job import JobSpec
from controller.jobs import JobWorker
from harness import frames as tp
from harness.switches import SoftwareTarget, program_words
from tests.support.bmv2 import bmv2_binary, needs_bmv2
from tests.support.paths import THC_JSON
from tests.support.targets import Bmv2Target
from thc import make_table
from thc.aggregate import reference_aggregate

pytestmark = pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built")

SERVICE = ("00:00:00:00:00:fe", "10.0.0.254")
JOB, GROUP, KEY = 7, 70, 0x5EC2E7A1
N = 3
WORDS = program_words() if THC_JSON.exists() else contract.WORDS
K8, K16, KFIX = (contract.per_request(lanes, WORDS) for lanes in (8, 16, 32))
TABLE = make_table(bits=4, granularity=30, clip=1 / 32, kind="optimal")
NORM, THC, FIX32 = contract.OP_NORM, contract.OP_THC, contract.OP_FIX32
REQUEST, RESULT, RESULT_RETX, RELEASE, PARTIAL = (
    contract.KIND_REQUEST,
    contract.KIND_RESULT,
    contract.KIND_RESULT_RETX,
    contract.KIND_RELEASE,
    contract.KIND_PARTIAL,
)
LANES_OF = {NORM: 32, THC: 8, FIX32: 32}
NPR = contract.NORMS_PER_REQUEST


def ip_int(ip: str) -> int:
    return struct.unpack("!I", tp.ip_bytes(ip))[0]


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def worker(w: int) -> tuple[str, str]:
    return f"00:00:00:00:00:{w + 1:02x}", f"10.0.0.{w + 1}"


def worker_port(w: int) -> int:
    return w + 1


TARGETS = [
    "emulator",
    "native",
    pytest.param(
        "bmv2",
        marks=[pytest.mark.bmv2, needs_bmv2()],
    ),
]


def job_workers(ids) -> list[JobWorker]:
    return [JobWorker(w, *worker(w), worker_port(w)) for w in ids]


def set_job(t, job_id=JOB, *, lane_bits=8, epoch=5, key=KEY, mask=0b111, replace=False, group=GROUP, **kw):
    """Job `job_id` of the workers in `mask`, planned by the controller, with this file's group, lanes and
    slots pinned."""
    n_slots = kw.pop("n_slots", 4)
    ids = [w for w in range(contract.MAX_WORKERS) if mask >> w & 1]
    spec = JobSpec(job_id, workers=len(ids), slots=n_slots, window=n_slots, key=key)
    t.set_job(
        spec,
        job_workers(ids),
        epoch=epoch,
        replace=replace,
        slot_base=kw.pop("slot_base", 8),
        mcast_grp=group,
        lane_bits=lane_bits,
        **kw,
    )


@pytest.fixture(params=TARGETS)
def target(request, tmp_path):
    if request.param == "bmv2":
        import os

        if os.geteuid() != 0:
            pytest.skip("BMv2 on veth pairs needs root")
        t = Bmv2Target(bmv2_binary(), tmp_path)
    else:
        t = SoftwareTarget(backend="native" if request.param == "native" else "python")
    try:
        t.add_service(ip_int(SERVICE[1]))
        for w in range(4):
            mac, ip = worker(w)
            t.add_route(ip_int(ip), 32, mac_int(mac), worker_port(w))
        set_job(t)
        t.set_group(GROUP, [(worker_port(w), w) for w in range(N)])
        for w in range(N):
            mac, ip = worker(w)
            t.add_result_dst(JOB, w, mac_int(mac), ip_int(ip))
        t.set_table(JOB, TABLE.values, 4)
        yield t
    finally:
        t.close()


def request(w: int, op: int = THC, *, kind: int = REQUEST, lane_bits: int | None = None, **kw) -> bytes:
    kw.setdefault("job_id", JOB)
    kw.setdefault("key", KEY)
    lanes = LANES_OF.get(op, 0) if lane_bits is None else lane_bits
    return tp.frame(worker(w), SERVICE, op=op, kind=kind, worker_id=w, lane_bits=lanes, sport=40000 + w, **kw)


def thc_request(w: int, idx: np.ndarray, lane_bits: int = 8, **kw) -> bytes:
    return request(w, THC, lane_bits=lane_bits, payload=tp.request_payload(idx, lane_bits), **kw)


def fix32_request(w: int, values, **kw) -> bytes:
    return request(w, FIX32, payload=tp.pack_int32(values), **kw)


def norm_request(w: int, values, **kw) -> bytes:
    return request(w, NORM, payload=tp.pack_norms(values), **kw)


def release(w: int, op: int = THC, **kw) -> bytes:
    kw.setdefault("payload", tp.release_payload(op))
    return request(w, op, kind=RELEASE, **kw)


def random_indices(rng, n: int = N, k: int = K8, high: int = 16) -> list[np.ndarray]:
    return [rng.integers(0, high, size=k, dtype=np.uint8) for _ in range(n)]


def send_all(target, frames: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    out = []
    for port, data in frames:
        out += target.send(port, data)
    return out


def parsed(data: bytes) -> tp.Parsed:
    """A frame the switch sent, checked for what every frame must be: a valid IPv4 checksum, lengths that
    say what it carries, and at most a 1500-byte MTU."""
    p = tp.Parsed.of(data)
    assert p.ip_checksum_ok, "IPv4 checksum not updated"
    assert p.lengths_match(len(data)), f"IPv4 length {p.ip_len} / UDP length {p.udp_len} for a {len(data)}-byte frame"
    assert len(data) - tp.ETH <= contract.MTU
    return p


def sums_of(data: bytes) -> list[int]:
    return parsed(data).lanes()


def expected(idx, table=TABLE) -> list[int]:
    return [int(v) for v in reference_aggregate(idx, table)]


def one_round(target, idx: list[np.ndarray], *, slot: int = 0, rnd: int = 0, lane_bits: int = 8):
    frames = [(worker_port(w), thc_request(w, idx[w], lane_bits, slot=slot, round_=rnd)) for w in range(len(idx))]
    return send_all(target, frames)


def assert_exact(out, idx, table=TABLE, kind=RESULT, lane_bits=8) -> None:
    assert sorted(port for port, _ in out) == [worker_port(w) for w in range(N)]
    want = expected(idx, table)
    for port, data in out:
        p = parsed(data)
        assert (p.op, p.kind, p.count, p.lane_bits, p.key) == (THC, kind, N, lane_bits, KEY)
        assert p.worker_id == port - 1
        assert p.lanes() == want


# ---- sums ---------------------------------------------------------------------------------------------


def test_sums_reach_every_worker_after_the_last_arrival(target):
    idx = random_indices(np.random.default_rng(1))
    assert target.send(1, thc_request(0, idx[0])) == []
    assert target.send(2, thc_request(1, idx[1])) == []
    out = target.send(3, thc_request(2, idx[2]))
    assert sorted(port for port, _ in out) == [1, 2, 3]
    for port, data in out:
        w = port - 1
        p = parsed(data)
        assert (p.dst_mac, p.dst_ip, p.src_ip) == (*worker(w), SERVICE[1])
        assert (p.kind, p.count, p.lane_bits, p.worker_id, p.key) == (RESULT, N, 8, w, KEY)
        assert (p.slot, p.round, p.udp_checksum, p.ttl) == (0, 0, 0, 64)
        assert len(p.payload) == WORDS * contract.WORD_BYTES and len(p.lanes()) == K8
        assert p.lanes() == expected(idx)
    events = target.events()
    assert (events["CONSUMED"], events["COMPLETED"]) == (2, 1)


def test_sixteen_bit_lanes_carry_half_as_many_coordinates(target):
    set_job(target, lane_bits=16, epoch=6, replace=True)
    idx = random_indices(np.random.default_rng(2), k=K16)
    out = one_round(target, idx, lane_bits=16)
    assert_exact(out, idx, lane_bits=16)
    assert all(len(parsed(data).lanes()) == K16 for _, data in out)


def lane_table(g: int, bits: int = 4):
    """A uniform table whose last value is g: index 2**bits - 1 is worth exactly g."""
    return make_table(bits=bits, granularity=g, clip=1 / 32, kind="uniform")


def test_eight_bit_lanes_hold_sums_of_255_without_carrying_into_their_neighbours(target):
    table = lane_table(85)  # n*g = 3*85 = 255: the largest sum an 8-bit lane holds
    target.set_table(JOB, table.values, 4, replace=True)
    rng = np.random.default_rng(40)
    idx = random_indices(rng)
    for w in range(N):
        idx[w][0::2] = 15  # every other lane reaches 255 exactly, next to lanes with any sum
    out = one_round(target, idx)
    assert_exact(out, idx, table)
    assert parsed(out[0][1]).lanes()[0::2] == [255] * (K8 // 2)


def test_no_result_outgrows_the_packet_that_makes_it_by_more_than_bmv2s_headroom(target):
    """simple_switch gives a packet 512 bytes of headroom: 16-bit requests and releases carry padding so
    that their results fit (a frame without it is malformed: test_bad_requests_are_dropped_and_counted)."""
    set_job(target, lane_bits=16, epoch=6, replace=True)
    idx = random_indices(np.random.default_rng(17), k=K16)
    sent = [thc_request(w, idx[w], 16) for w in range(N)]
    out = send_all(target, [(worker_port(w), sent[w]) for w in range(N)])
    assert len(out) == N and all(len(data) - len(sent[0]) <= contract.BMV2_HEADROOM for _, data in out)
    assert target.send(1, thc_request(0, idx[0], 16, slot=1)) == []
    assert target.send(1, fix32_request(0, np.arange(KFIX), slot=2)) == []
    for op, slot, lanes in ((THC, 1, 16), (FIX32, 2, 32)):
        frame = release(0, op, slot=slot, lane_bits=lanes)
        out = target.send(1, frame)
        assert len(out) == N and all(len(data) - len(frame) <= contract.BMV2_HEADROOM for _, data in out)
        assert all(parsed(data).count == 1 for _, data in out)
    assert target.events()["DROP_MALFORMED"] == 0


def test_a_sum_of_256_takes_16_bit_lanes_which_hold_it(target):
    from contract.job import JobSpec
    from thc.config import THCConfig

    assert JobSpec(JOB, N, THCConfig(granularity=85)).lane_bits == 8  # n*g = 255
    assert JobSpec(JOB, 4, THCConfig(granularity=64)).lane_bits == 16  # n*g = 256
    four = JOB + 2
    set_job(target, four, lane_bits=16, slot_base=0, mask=0b1111, group=GROUP + 2, epoch=6)
    target.set_group(GROUP + 2, [(worker_port(w), w) for w in range(4)])
    for w in range(4):
        mac, ip = worker(w)
        target.add_result_dst(four, w, mac_int(mac), ip_int(ip))
    target.set_table(four, lane_table(64).values, 4)
    out = send_all(target, [(worker_port(w), thc_request(w, np.full(K16, 15), 16, job_id=four)) for w in range(4)])
    assert len(out) == 4
    for _, data in out:
        assert parsed(data).lanes() == [256] * K16


def test_sixteen_bit_lanes_hold_65535_at_a_spine(target):
    """No table takes a 16-bit lane to its top (g <= 255, n <= 32); a spine adding leaves' partials does."""
    set_job(target, lane_bits=16, epoch=6, mask=0b11, replace=True)
    halves = [np.full(K16, 32767, np.uint16), np.full(K16, 32768, np.uint16)]
    halves[0][1::2], halves[1][1::2] = 1, 2  # neighbours of the full lanes
    out = []
    for leaf in (0, 1):
        payload = halves[leaf].astype(">u2").tobytes()
        out += target.send(worker_port(leaf), request(leaf, THC, kind=PARTIAL, lane_bits=16, count=1, payload=payload))
    assert len(out) == N  # the spine's multicast group still has the job's three replicas
    lanes = parsed(out[0][1]).lanes()
    assert lanes[0::2] == [65535] * (K16 // 2) and lanes[1::2] == [3] * (K16 // 2)


def test_fix32_sums_wrap_like_int32_in_each_lane_alone(target):
    rng = np.random.default_rng(12)
    values = [rng.integers(-(2**30), 2**30, size=KFIX) for _ in range(N)]
    values[0][0], values[1][0], values[2][0] = 2**31 - 1, 1, 0  # the high lane of word 0 wraps
    values[0][1], values[1][1], values[2][1] = -1, -1, 2  # the low lane's carry must not reach word 0's high lane
    values[0][3], values[1][3], values[2][3] = -(2**31), -1, 0  # wraps the other way
    out = send_all(target, [(worker_port(w), fix32_request(w, values[w], slot=1)) for w in range(N)])
    assert len(out) == N
    want = [((int(s) + 2**31) % 2**32) - 2**31 for s in np.sum(np.array(values, dtype=np.int64), axis=0)]
    assert want[:4] == [-(2**31), 0, want[2], 2**31 - 1]
    for _, data in out:
        p = parsed(data)
        assert (p.lane_bits, p.count, len(p.payload)) == (32, N, WORDS * contract.WORD_BYTES)
        assert p.lanes() == want


def random_norms(rng, n: int = N, k: int = NPR) -> np.ndarray:
    """Non-negative float32 norms over many magnitudes, with the edge cases the unsigned compare must order:
    zero, the smallest subnormal, the largest finite value, infinity, and a tie."""
    v = (rng.uniform(0, 1, (n, k)) * 10.0 ** rng.integers(-40, 38, (n, k))).astype(np.float32)
    v[0, 0], v[1 % n, 0] = 0.0, np.float32(1e-45)
    v[0, 1 % k], v[1 % n, 2 % k], v[:, 3 % k] = np.finfo(np.float32).max, np.inf, 7.5
    return v


def assert_maxima(out, norms: np.ndarray, kind=RESULT, count=N, lanes=NPR) -> None:
    """Every worker got the lane-wise maxima bit for bit (unused lanes 0) in a 64-byte payload."""
    assert sorted(port for port, _ in out) == [worker_port(w) for w in range(N)]
    want = np.zeros(NPR, np.float32)
    want[:lanes] = norms.max(axis=0)[:lanes]
    for port, data in out:
        p = parsed(data)
        assert (p.op, p.kind, p.count, p.lane_bits, p.key, p.worker_id) == (NORM, kind, count, 32, KEY, port - 1)
        assert len(data) == tp.PAYLOAD_AT + 8 * contract.NORM_WORDS
        assert p.norms().view(np.uint32).tolist() == want.view(np.uint32).tolist()


@pytest.mark.parametrize("lanes", [1, 7, NPR])
def test_the_norm_round_returns_the_lane_wise_maxima_in_a_frame_of_its_own_length(target, lanes):
    norms = random_norms(np.random.default_rng(lanes), k=lanes)
    frames = [(worker_port(w), norm_request(w, norms[w], slot=3)) for w in range(N)]
    frames[1] = (2, norm_request(1, norms[1], slot=3, total_len=200))  # says 200 bytes, carries 112
    out = send_all(target, frames)
    assert_maxima(out, norms, lanes=lanes)  # lengths: those of what the result carries
    for _, data in out:
        assert parsed(data).norms()[lanes:].tolist() == [0.0] * (NPR - lanes)


def test_a_norm_round_reusing_a_cell_ignores_what_it_held(target):
    """The first NORM request of a use writes (keep = 0): a cell that held THC sums, or larger norms, two
    rounds before does not leak into the maxima."""
    rng = np.random.default_rng(31)
    idx = random_indices(rng)
    assert_exact(one_round(target, idx, slot=2, rnd=0), idx)  # large lanes in every word
    small = random_norms(rng) * np.float32(1e-30)
    out = send_all(target, [(worker_port(w), norm_request(w, small[w], slot=2, round_=2)) for w in range(N)])
    assert_maxima(out, small)
    smaller = small * np.float32(1e-3)
    out = send_all(target, [(worker_port(w), norm_request(w, smaller[w], slot=2, round_=4)) for w in range(N)])
    assert_maxima(out, smaller)


def test_a_norm_duplicate_is_dropped_and_a_retransmission_answered_with_the_maxima(target):
    norms = random_norms(np.random.default_rng(32))
    assert target.send(1, norm_request(0, norms[0], slot=1)) == []
    big = norms[0] * 0 + np.float32(3e38)
    assert target.send(1, norm_request(0, big, slot=1)) == []  # a duplicate never counts, whatever it says
    assert_maxima(send_all(target, [(worker_port(w), norm_request(w, norms[w], slot=1)) for w in (1, 2)]), norms)
    retx = target.send(2, norm_request(1, norms[1], slot=1))
    assert len(retx) == 1
    p = parsed(retx[0][1])
    assert (p.kind, p.count, p.dst_ip) == (RESULT_RETX, N, worker(1)[1])
    assert p.norms().view(np.uint32).tolist() == norms.max(axis=0).view(np.uint32).tolist()
    events = target.events()
    assert (events["DROP_DUPLICATE"], events["COMPLETED"], events["RETX_ANSWERED"]) == (1, 1, 1)


def test_two_jobs_sum_with_their_own_tables_at_once(target):
    other = JOB + 1
    set_job(target, other, slot_base=0, mask=0b1000, group=GROUP + 1, epoch=3, key=KEY ^ 1)
    target.set_group(GROUP + 1, [(worker_port(3), 3)])
    mac, ip = worker(3)
    target.add_result_dst(other, 3, mac_int(mac), ip_int(ip))
    small = make_table(bits=2, granularity=60, clip=1 / 32, kind="uniform")
    target.set_table(other, small.values, 2)
    rng = np.random.default_rng(13)
    mine, theirs = random_indices(rng), random_indices(rng, 1, high=4)
    assert target.send(1, thc_request(0, mine[0])) == []
    solo = target.send(4, thc_request(3, theirs[0], job_id=other, key=KEY ^ 1))
    assert len(solo) == 1 and parsed(solo[0][1]).lanes() == expected(theirs, small)
    assert_exact(send_all(target, [(2, thc_request(1, mine[1])), (3, thc_request(2, mine[2]))]), mine)


# ---- loss recovery ---------------------------------------------------------------------------------


def test_a_duplicate_is_not_counted_twice(target):
    idx = random_indices(np.random.default_rng(3))
    assert target.send(1, thc_request(0, idx[0])) == []
    assert target.send(1, thc_request(0, idx[0])) == []
    assert_exact(send_all(target, [(2, thc_request(1, idx[1])), (3, thc_request(2, idx[2]))]), idx)
    assert target.events()["DROP_DUPLICATE"] == 1


def test_a_retransmission_after_completion_gets_the_stored_result(target):
    idx = random_indices(np.random.default_rng(4))
    one_round(target, idx)
    out = target.send(2, thc_request(1, idx[1]))
    assert len(out) == 1
    port, data = out[0]
    p = parsed(data)
    assert port == 2 and (p.kind, p.key) == (RESULT_RETX, KEY)
    assert (p.dst_mac, p.dst_ip, p.src_ip) == (*worker(1), SERVICE[1])
    assert p.lanes() == expected(idx)
    assert target.events()["RETX_ANSWERED"] == 1


def query(w: int, op: int = THC, **kw) -> bytes:
    return request(w, op, kind=contract.KIND_QUERY, **kw)


def status_of(out, w: int) -> tuple[int, int]:
    """The one STATUS `out` holds, checked for its address and framing: (bitmap, contributions lacking)."""
    ((port, data),) = out
    p = parsed(data)
    assert port == worker_port(w) and len(data) == contract.FRAME_HEADER_BYTES
    assert (p.kind, p.op, p.worker_id, p.key) == (contract.KIND_STATUS, THC, w, KEY)
    assert (p.dst_mac, p.dst_ip, p.src_ip) == (*worker(w), SERVICE[1])
    return p.value, p.count


def test_a_query_gets_the_cells_status_and_changes_nothing(target):
    """p4/README.md, "Queries": a QUERY is answered, header only, with the bitmap of the contributions the
    named use holds and how many it lacks; it writes nothing, so the round completes as if never asked."""
    idx = random_indices(np.random.default_rng(11))
    assert status_of(target.send(1, query(0)), 0) == (0, N)  # not started
    assert target.send(1, thc_request(0, idx[0])) == []
    assert status_of(target.send(2, query(1)), 1) == (0b001, N - 1)  # worker 1's request is missing
    assert status_of(target.send(1, query(0)), 0) == (0b001, N - 1)  # worker 0's is in
    assert status_of(target.send(1, query(0, round_=2)), 0) == (0, N)  # a later use: not started here
    assert_exact(send_all(target, [(2, thc_request(1, idx[1])), (3, thc_request(2, idx[2]))]), idx)
    assert status_of(target.send(3, query(2)), 2) == (0b111, 0)  # complete
    assert target.send(1, query(0, FIX32)) == []  # another op's use
    assert target.send(1, query(0, key=KEY ^ 1)) == []  # not the job's key
    events = target.events()
    assert (events["QUERY_ANSWERED"], events["COMPLETED"], events["CONSUMED"]) == (5, 1, N - 1)
    assert (events["DROP_OP_MISMATCH"], events["DROP_BAD_KEY"]) == (1, 1)


def test_loss_duplicates_and_reordering_leave_every_worker_the_exact_sums(target):
    """Rounds over all slots with requests lost (sent again, as a worker's timer would), duplicated and
    arriving in any order; every worker must end each round with the reference sums."""
    rng = np.random.default_rng(14)
    rounds = 3 if target.name == "bmv2" else 8
    for rnd in range(rounds):
        for slot in range(4):
            idx = random_indices(rng)
            got: dict[int, list[int]] = {}
            pending = [w for w in range(N) for _ in range(1 + int(rng.random() < 0.3))]  # some duplicated
            while len(got) < N:
                rng.shuffle(pending)
                resend = []
                for w in pending:
                    if rng.random() < 0.25:  # lost on the way: the worker sends it again
                        resend.append(w)
                        continue
                    for port, data in target.send(worker_port(w), thc_request(w, idx[w], slot=slot, round_=rnd)):
                        if rng.random() < 0.2:  # a result lost on the way back
                            continue
                        got[port - 1] = parsed(data).lanes()
                pending = resend + [w for w in range(N) if w not in got and w not in resend]
            assert all(lanes == expected(idx) for lanes in got.values()), (rnd, slot)
    assert target.events()["DROP_STALE_ROUND"] == 0


def test_consecutive_rounds_reuse_a_slot_without_the_control_plane(target):
    rng = np.random.default_rng(5)
    for rnd in range(6):
        idx = random_indices(rng)
        assert_exact(one_round(target, idx, slot=1, rnd=rnd), idx)


def test_the_shadow_cell_answers_round_r_while_round_r_plus_1_accumulates(target):
    rng = np.random.default_rng(6)
    for rnd in range(4):  # rounds follow the schedule: a cell's next use is two rounds on
        one_round(target, random_indices(rng), slot=2, rnd=rnd)
    first, second = random_indices(rng), random_indices(rng)
    one_round(target, first, slot=2, rnd=4)
    assert target.send(1, thc_request(0, second[0], slot=2, round_=5)) == []
    late = target.send(3, thc_request(2, first[2], slot=2, round_=4))  # worker 2 lost round 4's result
    assert len(late) == 1 and sums_of(late[0][1]) == expected(first)
    out = send_all(
        target, [(2, thc_request(1, second[1], slot=2, round_=5)), (3, thc_request(2, second[2], slot=2, round_=5))]
    )
    assert_exact(out, second)


def test_an_older_round_is_stale(target):
    rng = np.random.default_rng(7)
    one_round(target, random_indices(rng), slot=0, rnd=0)
    one_round(target, random_indices(rng), slot=0, rnd=2)
    assert target.send(1, thc_request(0, random_indices(rng)[0], slot=0, round_=0)) == []
    assert target.events()["DROP_STALE_ROUND"] == 1


def test_a_new_epoch_starts_on_fresh_cells(target):
    rng = np.random.default_rng(8)
    for rnd in (0, 2, 4):
        assert len(one_round(target, random_indices(rng), slot=0, rnd=rnd)) == N
    set_job(target, epoch=9, replace=True)
    idx = random_indices(rng)
    assert_exact(one_round(target, idx, slot=0, rnd=0), idx)  # a new run counts rounds from 0 again


# ---- what the switch refuses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame_of, event",
    [
        (lambda idx: thc_request(0, idx, job_id=99), "DROP_UNKNOWN_JOB"),
        (lambda idx: thc_request(0, idx, key=KEY + 1), "DROP_BAD_KEY"),
        (lambda idx: release(0, key=0), "DROP_BAD_KEY"),
        (lambda idx: thc_request(3, idx), "DROP_FOREIGN_WORKER"),
        (lambda idx: thc_request(0, idx, slot=4), "DROP_SLOT_RANGE"),
        (lambda idx: norm_request(0, [1.0], version=1), "DROP_BAD_OP"),  # the 64-coordinate format of version 1
        (lambda idx: request(0, NORM, version=2, lane_bits=0), "DROP_BAD_OP"),  # version 2: one norm, no payload
        (lambda idx: request(0, 5), "DROP_BAD_OP"),
        (lambda idx: thc_request(0, idx[:K16], lane_bits=16), "DROP_LANE_MISMATCH"),  # the job's lanes are 8
        (lambda idx: request(0, FIX32, lane_bits=8, payload=bytes(512)), "DROP_LANE_MISMATCH"),
        (lambda idx: request(0, NORM, lane_bits=8, payload=tp.pack_norms([1.0])), "DROP_LANE_MISMATCH"),
        (lambda idx: request(0, NORM, lane_bits=0), "DROP_LANE_MISMATCH"),  # a NORM request without lanes
        (lambda idx: request(0, NORM)[:-6], "DROP_MALFORMED"),  # THC header cut short
        (lambda idx: norm_request(0, [1.0])[:-1], "DROP_MALFORMED"),  # one byte short of NORM_WORDS words
        (lambda idx: thc_request(0, idx)[:-1], "DROP_MALFORMED"),  # one index byte short of a cell
        (lambda idx: release(0, payload=b""), "DROP_MALFORMED"),  # without its padding (BMv2's headroom)
        (lambda idx: release(0, FIX32, payload=bytes(100)), "DROP_MALFORMED"),
    ],
)
def test_bad_requests_are_dropped_and_counted(target, frame_of, event):
    idx = random_indices(np.random.default_rng(9), 1)[0]
    assert target.send(1, frame_of(idx)) == []
    events = target.events()
    assert events[event] == 1
    assert sum(events.values()) == 1


def test_a_host_without_the_key_can_neither_take_nor_block_a_cell(target):
    """An intruder's request of exactly the next round, first on the cell, with any op, counts for nothing:
    the workers' own round goes through."""
    idx = random_indices(np.random.default_rng(15))
    for op in (NORM, FIX32, THC):
        payload = {NORM: tp.pack_norms([1.0]), FIX32: bytes(8 * WORDS), THC: tp.pack_indices(idx[0])}[op]
        assert target.send(1, request(0, op, key=0, payload=payload)) == []
    assert_exact(one_round(target, idx), idx)
    assert target.events()["DROP_BAD_KEY"] == 3


def test_a_worker_id_beyond_the_bitmap_is_foreign(target):
    data = bytearray(thc_request(0, random_indices(np.random.default_rng(10), 1)[0]))
    data[tp.THC_AT + 3] = 40  # worker_id
    assert target.send(1, bytes(data)) == []
    assert target.events()["DROP_FOREIGN_WORKER"] == 1


def test_a_bad_ipv4_checksum_is_malformed(target):
    data = bytearray(norm_request(0, [1.0]))
    data[24] ^= 0xFF  # IPv4 header checksum
    assert target.send(1, bytes(data)) == []
    assert target.events()["DROP_MALFORMED"] == 1


@pytest.mark.parametrize("bits", [2, 3])
def test_an_index_outside_a_smaller_table_is_dropped(target, bits):
    small = make_table(bits=bits, granularity=30, clip=1 / 32, kind="uniform")
    target.set_table(JOB, small.values, bits, replace=True)
    rng = np.random.default_rng(11)
    good = random_indices(rng, high=1 << bits)
    assert_exact(one_round(target, good), good, small)
    bad = good[0].copy()
    bad[K8 - 1] = 1 << bits  # the last index of the cell: the check covers every word
    assert target.send(1, thc_request(0, bad, round_=1)) == []
    assert target.events()["DROP_BAD_INDEX"] == 1


def test_a_job_without_a_table_drops_thc_requests(target):
    other = JOB + 1
    set_job(target, other, slot_base=0, mask=0b1000, group=GROUP + 1, epoch=3)
    assert target.send(4, thc_request(3, random_indices(np.random.default_rng(16), 1)[0], job_id=other)) == []
    assert target.events()["DROP_BAD_INDEX"] == 1


def test_ordinary_ipv4_and_results_for_others_are_forwarded(target):
    mac0, ip0 = worker(0)
    mac3, ip3 = worker(3)
    udp = struct.pack("!HHHH", 5, 6, 13, 0) + b"hello"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 9, 17, 0, tp.ip_bytes(ip0), tp.ip_bytes(ip3))
    ip = ip[:10] + struct.pack("!H", tp.checksum(ip)) + ip[12:]
    plain = tp.mac_bytes(SERVICE[0]) + tp.mac_bytes(mac0) + b"\x08\x00" + ip + udp
    out = target.send(1, plain)
    assert len(out) == 1 and out[0][0] == worker_port(3)
    data = out[0][1]
    assert data[0:6] == tp.mac_bytes(mac3) and data[tp.ETH + 8] == 8 and data.endswith(b"hello")
    # A result crossing this switch towards a worker is not a request: it is forwarded untouched.
    sums = bytes(range(256)) * (K8 // 256)
    result = tp.frame(
        (SERVICE[0], "10.0.9.254"), worker(3), op=THC, kind=RESULT, job_id=JOB, worker_id=3, lane_bits=8, count=2,
        key=KEY, payload=sums,
    )  # fmt: skip
    out = target.send(2, result)
    assert len(out) == 1 and tp.Parsed.of(out[0][1]).payload == sums
    assert target.events()["FORWARDED"] == 2


# ---- a cell's use is (epoch, op, round), and rounds advance only as the worker protocol can (README.md,
# "Round window"): the first use in an epoch is round 0 or 1, the next use two rounds on once the current
# one is complete.


@pytest.mark.parametrize("intruder", [NORM, FIX32])
def test_another_op_on_a_thc_rounds_cell_is_dropped_and_the_round_stays_exact(target, intruder):
    idx = random_indices(np.random.default_rng(20))
    other = norm_request(2, [1.5]) if intruder == NORM else fix32_request(2, [1] * KFIX)
    assert send_all(target, [(1, thc_request(0, idx[0])), (2, thc_request(1, idx[1]))]) == []
    assert target.send(3, other) == []  # worker 2's bit is still free: it must not complete the round
    assert_exact(target.send(3, thc_request(2, idx[2])), idx)
    assert target.send(3, other) == []  # nor be answered from the completed THC round
    retx = target.send(2, thc_request(1, idx[1]))
    assert len(retx) == 1
    p = parsed(retx[0][1])
    assert (p.op, p.kind, p.count, p.lane_bits) == (THC, RESULT_RETX, N, 8)
    assert p.lanes() == expected(idx)
    events = target.events()
    assert (events["DROP_OP_MISMATCH"], events["CONSUMED"], events["COMPLETED"], events["RETX_ANSWERED"]) == (
        2,
        2,
        1,
        1,
    )
    assert sum(events.values()) == 6


def test_a_thc_request_on_a_norm_rounds_cell_is_dropped(target):
    idx = random_indices(np.random.default_rng(21), 1)[0]
    norms = random_norms(np.random.default_rng(21))
    assert send_all(target, [(worker_port(w), norm_request(w, norms[w], slot=3)) for w in (0, 1)]) == []
    assert target.send(3, thc_request(2, idx, slot=3)) == []
    assert_maxima(target.send(3, norm_request(2, norms[2], slot=3)), norms)
    assert target.events()["DROP_OP_MISMATCH"] == 1


def test_a_far_round_is_dropped_and_does_not_poison_the_cell(target):
    rng = np.random.default_rng(22)
    idx = random_indices(rng)
    far = thc_request(1, idx[1], round_=0xFFFFFFF0)  # even: the cell of round 0
    assert target.send(1, thc_request(0, idx[0])) == []
    assert target.send(2, far) == []
    assert_exact(send_all(target, [(2, thc_request(1, idx[1])), (3, thc_request(2, idx[2]))]), idx)
    assert target.send(2, far) == []  # a completed cell moves on only to its next use
    retx = target.send(1, thc_request(0, idx[0]))  # round 0 still answers from the cell
    assert len(retx) == 1 and sums_of(retx[0][1]) == expected(idx)
    for rnd in (1, 2, 3):
        later = random_indices(rng)
        assert_exact(one_round(target, later, rnd=rnd), later)
    events = target.events()
    assert (events["DROP_FAR_ROUND"], events["COMPLETED"], events["RETX_ANSWERED"]) == (2, 4, 1)
    assert events["DROP_STALE_ROUND"] == 0


@pytest.mark.parametrize("new_epoch", [False, True], ids=["fresh-cells", "new-epoch"])
def test_the_first_use_of_a_cell_in_an_epoch_is_round_0_or_1(target, new_epoch):
    rng = np.random.default_rng(23)
    if new_epoch:  # the cells hold rounds 0..3 of epoch 5; epoch 9 starts over
        for rnd in range(4):
            one_round(target, random_indices(rng), slot=1, rnd=rnd)
        set_job(target, epoch=9, replace=True)
    before = target.events()["DROP_FAR_ROUND"]
    for rnd in (2, 3, 4, 0xFFFFFFF0, 0xFFFFFFF1):
        assert target.send(1, thc_request(0, random_indices(rng, 1)[0], slot=1, round_=rnd)) == []
    assert target.events()["DROP_FAR_ROUND"] - before == 5
    for rnd in range(4):
        idx = random_indices(rng)
        assert_exact(one_round(target, idx, slot=1, rnd=rnd), idx)


@pytest.mark.parametrize("start", [0, 1], ids=["even-cell", "odd-cell"])
def test_a_cell_advances_two_rounds_at_a_time_and_only_from_a_complete_use(target, start):
    rng = np.random.default_rng(24 + start)
    idx = random_indices(rng)
    assert_exact(one_round(target, idx, slot=2, rnd=start), idx)
    # stored + 4 would skip a use that no worker can skip
    assert target.send(1, thc_request(0, idx[0], slot=2, round_=start + 4)) == []
    assert target.events()["DROP_FAR_ROUND"] == 1
    nxt = random_indices(rng)
    assert target.send(1, thc_request(0, nxt[0], slot=2, round_=start + 2)) == []  # stored + 2: the next use
    assert target.events()["CONSUMED"] == 3
    # round start + 2 is incomplete: no worker can be at start + 4 yet
    assert target.send(2, thc_request(1, nxt[1], slot=2, round_=start + 4)) == []
    assert target.events()["DROP_FAR_ROUND"] == 2
    out = send_all(
        target,
        [(2, thc_request(1, nxt[1], slot=2, round_=start + 2)), (3, thc_request(2, nxt[2], slot=2, round_=start + 2))],
    )
    assert_exact(out, nxt)
    last = random_indices(rng)
    assert_exact(one_round(target, last, slot=2, rnd=start + 4), last)
    assert target.events()["DROP_STALE_ROUND"] == 0


# ---- partial aggregation (README.md, "Partial aggregation"): a RELEASE completes a use with k < n
# contributions; a late contribution is counted LATE, never added, and answered with the stored result.


def assert_partial(out, idx, ports, kind: int, table=TABLE) -> None:
    """Every frame of `out` carries the sums of `idx` (the contributors' indices) with count len(idx)."""
    assert sorted(port for port, _ in out) == sorted(ports)
    want = expected(idx, table)
    for port, data in out:
        p = parsed(data)
        assert (p.op, p.kind, p.count, p.lane_bits) == (THC, kind, len(idx), 8)
        assert p.worker_id == port - 1
        assert (p.dst_mac, p.dst_ip, p.src_ip) == (*worker(port - 1), SERVICE[1])
        assert p.lanes() == want


@pytest.mark.parametrize("k", [1, 2])
def test_a_release_multicasts_the_sums_of_k_of_n_with_their_count(target, k):
    idx = random_indices(np.random.default_rng(30))
    assert send_all(target, [(worker_port(w), thc_request(w, idx[w], slot=1)) for w in range(k)]) == []
    out = target.send(1, release(0, slot=1))
    assert_partial(out, idx[:k], [worker_port(w) for w in range(N)], kind=RESULT)
    events = target.events()
    assert (events["CONSUMED"], events["RELEASED"], events["COMPLETED"]) == (k, 1, 0)
    # the slot's next use starts two rounds on, as after a complete use
    nxt = random_indices(np.random.default_rng(31))
    assert_exact(one_round(target, nxt, slot=1, rnd=2), nxt)


def test_a_late_contribution_is_counted_dropped_and_answered_with_the_stored_result(target):
    idx = random_indices(np.random.default_rng(32))
    send_all(target, [(1, thc_request(0, idx[0])), (2, thc_request(1, idx[1]))])
    assert len(target.send(2, release(1))) == N
    late = target.send(3, thc_request(2, idx[2]))
    assert_partial(late, idx[:2], [3], kind=RESULT_RETX)  # the stored result, worker 2's indices not in it
    again = target.send(3, thc_request(2, idx[2]))  # still late: it never joins the released use
    assert_partial(again, idx[:2], [3], kind=RESULT_RETX)
    events = target.events()
    assert (events["LATE"], events["CONSUMED"], events["RELEASED"], events["COMPLETED"]) == (2, 2, 1, 0)


def test_a_retransmission_after_a_release_gets_the_stored_result(target):
    idx = random_indices(np.random.default_rng(33))
    send_all(target, [(1, thc_request(0, idx[0])), (2, thc_request(1, idx[1]))])
    target.send(1, release(0))
    retx = target.send(2, thc_request(1, idx[1]))
    assert_partial(retx, idx[:2], [2], kind=RESULT_RETX)
    events = target.events()
    assert (events["RETX_ANSWERED"], events["LATE"], events["DROP_DUPLICATE"]) == (1, 0, 0)


def test_a_release_of_a_complete_use_is_ignored(target):
    idx = random_indices(np.random.default_rng(34))
    assert_exact(one_round(target, idx), idx)
    assert target.send(1, release(0)) == []
    send_all(target, [(1, thc_request(0, idx[0], slot=2)), (2, thc_request(1, idx[1], slot=2))])
    assert len(target.send(1, release(0, slot=2))) == N
    assert target.send(2, release(1, slot=2)) == []  # released already: its result went out
    retx = target.send(1, thc_request(0, idx[0]))  # slot 0 still answers with all three
    assert len(retx) == 1 and sums_of(retx[0][1]) == expected(idx)
    events = target.events()
    assert (events["RELEASE_IGNORED"], events["RELEASED"], events["COMPLETED"]) == (2, 1, 1)


def test_a_release_of_a_use_the_cell_does_not_hold_is_ignored_or_stale(target):
    rng = np.random.default_rng(35)
    assert target.send(1, release(0, slot=3)) == []  # nothing started in this epoch
    for rnd in (0, 2):
        assert_exact(one_round(target, (idx := random_indices(rng)), slot=3, rnd=rnd), idx)
    assert target.send(1, release(0, slot=3, round_=4)) == []  # round 4 has not started
    assert target.send(1, release(0, slot=3, round_=0)) == []  # round 0 is over
    assert target.send(1, release(0, NORM, slot=3, round_=2)) == []  # round 2 is a THC round
    events = target.events()
    assert (events["RELEASE_IGNORED"], events["DROP_STALE_ROUND"], events["DROP_OP_MISMATCH"]) == (2, 1, 1)
    assert events["RELEASED"] == 0


def test_norm_and_fix32_rounds_release_with_their_payload(target):
    norms = random_norms(np.random.default_rng(33))
    send_all(target, [(worker_port(w), norm_request(w, norms[w], slot=0)) for w in range(2)])
    out = target.send(1, release(0, NORM, slot=0))  # 62 bytes: its result gets the NORM_WORDS words
    assert_maxima(out, norms[:2], count=2)
    late = target.send(3, norm_request(2, norms[2] * 0 + np.float32(1e38), slot=0))  # never added: answered
    assert len(late) == 1 and parsed(late[0][1]).norms().tolist() == norms[:2].max(axis=0).tolist()
    values = [[7] * KFIX, [-3] * KFIX]
    send_all(target, [(worker_port(w), fix32_request(w, values[w], slot=1)) for w in (0, 1)])
    out = target.send(2, release(1, FIX32, slot=1))  # a RELEASE without payload: the result gets one
    assert len(out) == N
    for _, data in out:
        p = parsed(data)
        assert (p.count, p.lane_bits) == (2, 32)
        assert p.lanes() == [4] * KFIX


def test_events_are_also_counted_per_job(target):
    other = JOB + 1
    set_job(target, other, slot_base=0, mask=0b1000, group=GROUP + 1, epoch=3)
    target.set_group(GROUP + 1, [(worker_port(3), 3)])
    mac, ip = worker(3)
    target.add_result_dst(other, 3, mac_int(mac), ip_int(ip))
    target.set_table(other, TABLE.values, 4)
    idx = random_indices(np.random.default_rng(36))
    assert_exact(one_round(target, idx), idx)
    solo = random_indices(np.random.default_rng(37), 1)[0]
    out = target.send(4, thc_request(3, solo, job_id=other))
    assert len(out) == 1 and sums_of(out[0][1]) == expected([solo])
    assert target.send(1, thc_request(0, solo, job_id=99)) == []
    mine, theirs, unknown = target.job_events(JOB), target.job_events(other), target.job_events(99)
    assert {k: v for k, v in mine.items() if v} == {"CONSUMED": 2, "COMPLETED": 1}
    assert {k: v for k, v in theirs.items() if v} == {"COMPLETED": 1}
    assert {k: v for k, v in unknown.items() if v} == {"DROP_UNKNOWN_JOB": 1}
