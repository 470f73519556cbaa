"""Packet-level tests of the THC program (p4/README.md is the contract), on every target present.

Frames are crafted and dissected with the Scapy layers of host_agent.layers; expected sums come from
thc's reference aggregator, never from the switch itself.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import raw

from host_agent.layers import THC, THCFix32, THCIndices, THCResult8, THCResult16
from tests.support.targets import THC_JSON, Bmv2Target, SoftwareTarget, bmv2_binary, program_summary
from thc import make_table
from thc.aggregate import reference_aggregate

pytestmark = pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built")

PORT = 21576
SERVICE_IP, SERVICE_MAC = "10.0.0.254", "00:00:00:00:00:fe"
JOB, GROUP = 7, 70
N = 3
K = program_summary()["coords"] if THC_JSON.exists() else 64
TABLE = make_table(bits=4, granularity=30, clip=1 / 32, kind="optimal")


def ip_int(ip: str) -> int:
    return struct.unpack("!I", bytes(int(x) for x in ip.split(".")))[0]


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def worker_ip(w: int) -> str:
    return f"10.0.0.{w + 1}"


def worker_mac(w: int) -> str:
    return f"00:00:00:00:00:{w + 1:02x}"


def worker_port(w: int) -> int:
    return w + 1


TARGETS = [
    "emulator",
    "native",
    pytest.param(
        "bmv2",
        marks=[pytest.mark.bmv2, pytest.mark.skipif(bmv2_binary() is None, reason="simple_switch_grpc not installed")],
    ),
]


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
        t.add_service(ip_int(SERVICE_IP))
        for w in range(4):
            t.add_route(ip_int(worker_ip(w)), 32, mac_int(worker_mac(w)), worker_port(w))
        t.set_job(JOB, n_workers=N, slot_base=8, n_slots=4, mcast_grp=GROUP, worker_mask=0b111, lane_bits=8, epoch=5)
        t.set_group(GROUP, [(worker_port(w), w) for w in range(N)])
        for w in range(N):
            t.add_result_dst(JOB, w, mac_int(worker_mac(w)), ip_int(worker_ip(w)))
        t.install_table(TABLE.values, 4)
        yield t
    finally:
        t.close()


def request(
    w: int,
    op: str = "THC",
    *,
    slot: int = 0,
    rnd: int = 0,
    job: int = JOB,
    payload=None,
    value: int = 0,
    version: int = 1,
    kind: int = 0,
) -> bytes:
    ops = {"NORM": 1, "THC": 2, "FIX32": 3}
    pkt = (
        Ether(src=worker_mac(w), dst=SERVICE_MAC)
        / IP(src=worker_ip(w), dst=SERVICE_IP)
        / UDP(sport=40000 + w, dport=PORT)
        / THC(version=version, op=ops[op], kind=kind, job_id=job, worker_id=w, slot=slot, round=rnd, value=value)
    )
    if payload is not None:
        pkt = pkt / payload
    return raw(pkt)


def thc_request(w: int, idx: np.ndarray, **kw) -> bytes:
    return request(w, "THC", payload=THCIndices(idx=[int(v) for v in idx]), **kw)


def random_indices(rng, n: int = N) -> list[np.ndarray]:
    return [rng.integers(0, 16, size=K, dtype=np.uint8) for _ in range(n)]


def send_all(target, frames: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    out = []
    for port, frame in frames:
        out += target.send(port, frame)
    return out


def sums_of(frame: bytes) -> list[int]:
    pkt = Ether(frame)
    layer = THCResult8 if pkt[THC].lane_bits == 8 else THCResult16
    return list(pkt[layer].sums)


def assert_valid_ipv4(frame: bytes) -> None:
    pkt = Ether(frame)
    reported = pkt[IP].chksum
    del pkt[IP].chksum
    assert Ether(raw(pkt))[IP].chksum == reported, "IPv4 checksum not updated"
    assert pkt[IP].len == len(frame) - 14
    assert pkt[UDP].len == len(frame) - 34


def one_round(target, idx: list[np.ndarray], *, slot: int = 0, rnd: int = 0):
    frames = [(worker_port(w), thc_request(w, idx[w], slot=slot, rnd=rnd)) for w in range(N)]
    return send_all(target, frames)


def test_sums_reach_every_worker_after_the_last_arrival(target):
    idx = random_indices(np.random.default_rng(1))
    assert target.send(1, thc_request(0, idx[0])) == []
    assert target.send(2, thc_request(1, idx[1])) == []
    out = target.send(3, thc_request(2, idx[2]))
    expected = list(reference_aggregate(idx, TABLE))
    assert sorted(port for port, _ in out) == [1, 2, 3]
    for port, frame in out:
        w = port - 1
        pkt = Ether(frame)
        assert (pkt[Ether].dst, pkt[IP].dst, pkt[IP].src) == (worker_mac(w), worker_ip(w), SERVICE_IP)
        assert (pkt[THC].kind, pkt[THC].count, pkt[THC].lane_bits, pkt[THC].worker_id) == (1, N, 8, w)
        assert (pkt[THC].slot, pkt[THC].round, pkt[UDP].chksum) == (0, 0, 0)
        assert sums_of(frame) == expected
        assert_valid_ipv4(frame)
    events = target.events()
    assert (events["CONSUMED"], events["COMPLETED"]) == (2, 1)


def test_sixteen_bit_lanes_when_the_job_asks(target):
    target.set_job(
        JOB,
        n_workers=N,
        slot_base=8,
        n_slots=4,
        mcast_grp=GROUP,
        worker_mask=0b111,
        lane_bits=16,
        epoch=6,
        replace=True,
    )
    idx = random_indices(np.random.default_rng(2))
    out = one_round(target, idx)
    assert len(out) == N
    for _, frame in out:
        assert Ether(frame)[THC].lane_bits == 16
        assert sums_of(frame) == list(reference_aggregate(idx, TABLE))
        assert_valid_ipv4(frame)


def test_a_duplicate_is_not_counted_twice(target):
    idx = random_indices(np.random.default_rng(3))
    assert target.send(1, thc_request(0, idx[0])) == []
    assert target.send(1, thc_request(0, idx[0])) == []
    out = send_all(target, [(2, thc_request(1, idx[1])), (3, thc_request(2, idx[2]))])
    assert len(out) == N
    assert sums_of(out[0][1]) == list(reference_aggregate(idx, TABLE))
    assert target.events()["DROP_DUPLICATE"] == 1


def test_a_retransmission_after_completion_gets_the_stored_result(target):
    idx = random_indices(np.random.default_rng(4))
    one_round(target, idx)
    out = target.send(2, thc_request(1, idx[1]))
    assert len(out) == 1
    port, frame = out[0]
    pkt = Ether(frame)
    assert port == 2 and pkt[THC].kind == 2
    assert (pkt[Ether].dst, pkt[IP].dst, pkt[IP].src) == (worker_mac(1), worker_ip(1), SERVICE_IP)
    assert sums_of(frame) == list(reference_aggregate(idx, TABLE))
    assert_valid_ipv4(frame)
    assert target.events()["RETX_ANSWERED"] == 1


def test_consecutive_rounds_reuse_a_slot_without_the_control_plane(target):
    rng = np.random.default_rng(5)
    for rnd in range(6):
        idx = random_indices(rng)
        out = one_round(target, idx, slot=1, rnd=rnd)
        assert len(out) == N, f"round {rnd}"
        assert all(sums_of(f) == list(reference_aggregate(idx, TABLE)) for _, f in out), f"round {rnd}"


def test_the_shadow_cell_answers_round_r_while_round_r_plus_1_accumulates(target):
    rng = np.random.default_rng(6)
    for rnd in range(4):  # rounds follow the schedule: a cell's next use is two rounds on
        one_round(target, random_indices(rng), slot=2, rnd=rnd)
    first, second = random_indices(rng), random_indices(rng)
    one_round(target, first, slot=2, rnd=4)
    assert target.send(1, thc_request(0, second[0], slot=2, rnd=5)) == []
    late = target.send(3, thc_request(2, first[2], slot=2, rnd=4))  # worker 2 lost round 4's result
    assert len(late) == 1 and sums_of(late[0][1]) == list(reference_aggregate(first, TABLE))
    out = send_all(
        target, [(2, thc_request(1, second[1], slot=2, rnd=5)), (3, thc_request(2, second[2], slot=2, rnd=5))]
    )
    assert len(out) == N and sums_of(out[0][1]) == list(reference_aggregate(second, TABLE))


def test_an_older_round_is_stale(target):
    rng = np.random.default_rng(7)
    one_round(target, random_indices(rng), slot=0, rnd=0)
    one_round(target, random_indices(rng), slot=0, rnd=2)
    assert target.send(1, thc_request(0, random_indices(rng)[0], slot=0, rnd=0)) == []
    assert target.events()["DROP_STALE_ROUND"] == 1


def test_a_new_epoch_starts_on_fresh_cells(target):
    rng = np.random.default_rng(8)
    for rnd in (0, 2, 4):
        assert len(one_round(target, random_indices(rng), slot=0, rnd=rnd)) == N
    target.set_job(
        JOB, n_workers=N, slot_base=8, n_slots=4, mcast_grp=GROUP, worker_mask=0b111, lane_bits=8, epoch=9, replace=True
    )
    idx = random_indices(rng)
    out = one_round(target, idx, slot=0, rnd=0)  # a new run counts rounds from 0 again
    assert len(out) == N and sums_of(out[0][1]) == list(reference_aggregate(idx, TABLE))


@pytest.mark.parametrize(
    "frame_of, event",
    [
        (lambda idx: thc_request(0, idx, job=99), "DROP_UNKNOWN_JOB"),
        (lambda idx: thc_request(3, idx), "DROP_FOREIGN_WORKER"),
        (lambda idx: thc_request(0, idx, slot=4), "DROP_SLOT_RANGE"),
        (lambda idx: request(0, "NORM", version=2), "DROP_BAD_OP"),
        (lambda idx: request(0, "NORM")[:-6], "DROP_MALFORMED"),  # THC header cut short
    ],
)
def test_bad_requests_are_dropped_and_counted(target, frame_of, event):
    idx = random_indices(np.random.default_rng(9), 1)[0]
    assert target.send(1, frame_of(idx)) == []
    events = target.events()
    assert events[event] == 1
    assert sum(events.values()) == 1


def test_a_worker_id_beyond_the_bitmap_is_foreign(target):
    frame = bytearray(thc_request(0, random_indices(np.random.default_rng(10), 1)[0]))
    frame[42 + 3] = 40  # worker_id
    assert target.send(1, bytes(frame)) == []
    assert target.events()["DROP_FOREIGN_WORKER"] == 1


def test_a_bad_ipv4_checksum_is_malformed(target):
    frame = bytearray(request(0, "NORM"))
    frame[24] ^= 0xFF  # IPv4 header checksum
    assert target.send(1, bytes(frame)) == []
    assert target.events()["DROP_MALFORMED"] == 1


def test_an_index_outside_a_smaller_table_is_dropped(target):
    small = make_table(bits=2, granularity=30, clip=1 / 32, kind="uniform")
    target.install_table(small.values, 2)
    rng = np.random.default_rng(11)
    good = [rng.integers(0, 4, size=K, dtype=np.uint8) for _ in range(N)]
    out = one_round(target, good)
    assert len(out) == N and sums_of(out[0][1]) == list(reference_aggregate(good, small))
    bad = good[0].copy()
    bad[5] = 9
    assert target.send(1, thc_request(0, bad, rnd=1)) == []
    assert target.events()["DROP_BAD_INDEX"] == 1


def test_the_norm_round_returns_the_maximum(target):
    norms = [3.25, 117.5, 0.001]
    bits = [struct.unpack("!I", struct.pack("!f", v))[0] for v in norms]
    out = send_all(target, [(worker_port(w), request(w, "NORM", slot=3, rnd=0, value=bits[w])) for w in range(N)])
    assert len(out) == N
    for _, frame in out:
        pkt = Ether(frame)
        assert struct.unpack("!f", struct.pack("!I", pkt[THC].value))[0] == 117.5
        assert (pkt[THC].kind, pkt[THC].lane_bits, pkt[THC].count) == (1, 0, N)
        assert_valid_ipv4(frame)


def test_fix32_sums_wrap_like_int32(target):
    rng = np.random.default_rng(12)
    values = [rng.integers(-(2**30), 2**30, size=K // 2) for _ in range(N)]
    frames = [
        (worker_port(w), request(w, "FIX32", slot=1, payload=THCFix32(values=[int(v) for v in values[w]])))
        for w in range(N)
    ]
    out = send_all(target, frames)
    assert len(out) == N
    expected = [((int(s) + 2**31) % 2**32) - 2**31 for s in np.sum(values, axis=0)]
    for _, frame in out:
        pkt = Ether(frame)
        assert pkt[THC].lane_bits == 32
        assert list(pkt[THCFix32].values) == expected


def test_ordinary_ipv4_and_results_for_others_are_forwarded(target):
    plain = raw(
        Ether(src=worker_mac(0), dst=SERVICE_MAC)
        / IP(src=worker_ip(0), dst=worker_ip(3), ttl=9)
        / UDP(sport=5, dport=6)
        / b"hello"
    )
    out = target.send(1, plain)
    assert len(out) == 1 and out[0][0] == worker_port(3)
    pkt = Ether(out[0][1])
    assert (pkt[Ether].dst, pkt[IP].ttl, bytes(pkt[UDP].payload)) == (worker_mac(3), 8, b"hello")
    assert_valid_ipv4(out[0][1])
    # A result crossing this switch towards a worker is not a request: it is forwarded untouched.
    result = raw(
        Ether(dst=SERVICE_MAC)
        / IP(src="10.0.9.254", dst=worker_ip(3))
        / UDP(sport=PORT, dport=PORT)
        / THC(op=2, kind=1, job_id=JOB, lane_bits=8, count=2)
        / THCResult8(sums=list(range(K)))
    )
    out = target.send(2, result)
    assert len(out) == 1 and Ether(out[0][1])[THCResult8].sums == list(range(K))
    assert target.events()["FORWARDED"] == 2


# ---- a cell's use is (epoch, op, round), and rounds advance only as the worker protocol can (README.md,
# "Round window"): the first use in an epoch is round 0 or 1, the next use two rounds on once the current
# one is complete.


def norm_bits(value: float) -> int:
    return struct.unpack("!I", struct.pack("!f", value))[0]


def assert_exact(out, idx, table=TABLE) -> None:
    assert sorted(port for port, _ in out) == [worker_port(w) for w in range(N)]
    expected = list(reference_aggregate(idx, table))
    for _, frame in out:
        pkt = Ether(frame)
        assert (pkt[THC].op, pkt[THC].kind, pkt[THC].count) == (2, 1, N)
        assert sums_of(frame) == expected


@pytest.mark.parametrize("intruder", ["NORM", "FIX32"])
def test_another_op_on_a_thc_rounds_cell_is_dropped_and_the_round_stays_exact(target, intruder):
    idx = random_indices(np.random.default_rng(20))
    other = (
        request(2, "NORM", value=norm_bits(1.5))
        if intruder == "NORM"
        else request(2, "FIX32", payload=THCFix32(values=[1] * (K // 2)))
    )
    assert send_all(target, [(1, thc_request(0, idx[0])), (2, thc_request(1, idx[1]))]) == []
    assert target.send(3, other) == []  # worker 2's bit is still free: it must not complete the round
    assert_exact(target.send(3, thc_request(2, idx[2])), idx)
    assert target.send(3, other) == []  # nor be answered from the completed THC round
    retx = target.send(2, thc_request(1, idx[1]))
    assert len(retx) == 1
    pkt = Ether(retx[0][1])
    assert (pkt[THC].op, pkt[THC].kind, pkt[THC].count, pkt[THC].lane_bits) == (2, 2, N, 8)
    assert sums_of(retx[0][1]) == list(reference_aggregate(idx, TABLE))
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
    norms = [norm_bits(v) for v in (2.0, 8.0, 4.0)]
    assert send_all(target, [(worker_port(w), request(w, "NORM", slot=3, value=norms[w])) for w in (0, 1)]) == []
    assert target.send(3, thc_request(2, idx, slot=3)) == []
    out = target.send(3, request(2, "NORM", slot=3, value=norms[2]))
    assert len(out) == N
    for _, frame in out:
        pkt = Ether(frame)
        assert (pkt[THC].op, pkt[THC].count, pkt[THC].value) == (1, N, norm_bits(8.0))
    assert target.events()["DROP_OP_MISMATCH"] == 1


def test_a_far_round_is_dropped_and_does_not_poison_the_cell(target):
    rng = np.random.default_rng(22)
    idx = random_indices(rng)
    far = thc_request(1, idx[1], rnd=0xFFFFFFF0)  # even: the cell of round 0
    assert target.send(1, thc_request(0, idx[0])) == []
    assert target.send(2, far) == []
    assert_exact(send_all(target, [(2, thc_request(1, idx[1])), (3, thc_request(2, idx[2]))]), idx)
    assert target.send(2, far) == []  # a completed cell moves on only to its next use
    retx = target.send(1, thc_request(0, idx[0]))  # round 0 still answers from the cell
    assert len(retx) == 1 and sums_of(retx[0][1]) == list(reference_aggregate(idx, TABLE))
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
        target.set_job(
            JOB,
            n_workers=N,
            slot_base=8,
            n_slots=4,
            mcast_grp=GROUP,
            worker_mask=0b111,
            lane_bits=8,
            epoch=9,
            replace=True,
        )
    before = target.events()["DROP_FAR_ROUND"]
    for rnd in (2, 3, 4, 0xFFFFFFF0, 0xFFFFFFF1):
        assert target.send(1, thc_request(0, random_indices(rng, 1)[0], slot=1, rnd=rnd)) == []
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
    assert target.send(1, thc_request(0, idx[0], slot=2, rnd=start + 4)) == []
    assert target.events()["DROP_FAR_ROUND"] == 1
    nxt = random_indices(rng)
    assert target.send(1, thc_request(0, nxt[0], slot=2, rnd=start + 2)) == []  # stored + 2: the next use
    assert target.events()["CONSUMED"] == 3
    # round start + 2 is incomplete: no worker can be at start + 4 yet
    assert target.send(2, thc_request(1, nxt[1], slot=2, rnd=start + 4)) == []
    assert target.events()["DROP_FAR_ROUND"] == 2
    assert_exact(
        send_all(
            target,
            [(2, thc_request(1, nxt[1], slot=2, rnd=start + 2)), (3, thc_request(2, nxt[2], slot=2, rnd=start + 2))],
        ),
        nxt,
    )
    last = random_indices(rng)
    assert_exact(one_round(target, last, slot=2, rnd=start + 4), last)
    assert target.events()["DROP_STALE_ROUND"] == 0


# ---- partial aggregation (README.md, "Partial aggregation"): a RELEASE completes a use with k < n
# contributions; a late contribution is counted LATE, never added, and answered with the stored result.

RELEASE = 3


def release(w: int, op: str = "THC", **kw) -> bytes:
    return request(w, op, kind=RELEASE, **kw)


def assert_partial(out, idx, ports, kind: int, table=TABLE) -> None:
    """Every frame of `out` carries the sums of `idx` (the contributors' indices) with count len(idx)."""
    assert sorted(port for port, _ in out) == sorted(ports)
    expected = list(reference_aggregate(idx, table))
    for port, frame in out:
        pkt = Ether(frame)
        assert (pkt[THC].op, pkt[THC].kind, pkt[THC].count, pkt[THC].lane_bits) == (2, kind, len(idx), 8)
        assert pkt[THC].worker_id == port - 1
        assert (pkt[Ether].dst, pkt[IP].dst, pkt[IP].src) == (worker_mac(port - 1), worker_ip(port - 1), SERVICE_IP)
        assert sums_of(frame) == expected
        assert_valid_ipv4(frame)


@pytest.mark.parametrize("k", [1, 2])
def test_a_release_multicasts_the_sums_of_k_of_n_with_their_count(target, k):
    idx = random_indices(np.random.default_rng(30))
    assert send_all(target, [(worker_port(w), thc_request(w, idx[w], slot=1)) for w in range(k)]) == []
    out = target.send(1, release(0, slot=1))
    assert_partial(out, idx[:k], [worker_port(w) for w in range(N)], kind=1)
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
    assert_partial(late, idx[:2], [3], kind=2)  # the stored result, worker 2's indices not in it
    again = target.send(3, thc_request(2, idx[2]))  # still late: it never joins the released use
    assert_partial(again, idx[:2], [3], kind=2)
    events = target.events()
    assert (events["LATE"], events["CONSUMED"], events["RELEASED"], events["COMPLETED"]) == (2, 2, 1, 0)


def test_a_retransmission_after_a_release_gets_the_stored_result(target):
    idx = random_indices(np.random.default_rng(33))
    send_all(target, [(1, thc_request(0, idx[0])), (2, thc_request(1, idx[1]))])
    target.send(1, release(0))
    retx = target.send(2, thc_request(1, idx[1]))
    assert_partial(retx, idx[:2], [2], kind=2)
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
    assert len(retx) == 1 and sums_of(retx[0][1]) == list(reference_aggregate(idx, TABLE))
    events = target.events()
    assert (events["RELEASE_IGNORED"], events["RELEASED"], events["COMPLETED"]) == (2, 1, 1)


def test_a_release_of_a_use_the_cell_does_not_hold_is_ignored_or_stale(target):
    rng = np.random.default_rng(35)
    assert target.send(1, release(0, slot=3)) == []  # nothing started in this epoch
    for rnd in (0, 2):
        assert_exact(one_round(target, (idx := random_indices(rng)), slot=3, rnd=rnd), idx)
    assert target.send(1, release(0, slot=3, rnd=4)) == []  # round 4 has not started
    assert target.send(1, release(0, slot=3, rnd=0)) == []  # round 0 is over
    assert target.send(1, release(0, "NORM", slot=3, rnd=2)) == []  # round 2 is a THC round
    events = target.events()
    assert (events["RELEASE_IGNORED"], events["DROP_STALE_ROUND"], events["DROP_OP_MISMATCH"]) == (2, 1, 1)
    assert events["RELEASED"] == 0


def test_norm_and_fix32_rounds_release_with_their_payload(target):
    norms = [norm_bits(v) for v in (2.0, 8.0)]
    send_all(target, [(worker_port(w), request(w, "NORM", slot=0, value=norms[w])) for w in range(2)])
    out = target.send(1, release(0, "NORM", slot=0))
    assert len(out) == N
    for _, frame in out:
        pkt = Ether(frame)
        assert (pkt[THC].op, pkt[THC].count, pkt[THC].value, pkt[THC].lane_bits) == (1, 2, norm_bits(8.0), 0)
        assert_valid_ipv4(frame)
    values = [[7] * (K // 2), [-3] * (K // 2)]
    send_all(
        target, [(worker_port(w), request(w, "FIX32", slot=1, payload=THCFix32(values=values[w]))) for w in (0, 1)]
    )
    out = target.send(2, release(1, "FIX32", slot=1))  # a 58-byte RELEASE: the result gets its payload
    assert len(out) == N
    for _, frame in out:
        pkt = Ether(frame)
        assert (pkt[THC].count, pkt[THC].lane_bits) == (2, 32)
        assert list(pkt[THCFix32].values) == [4] * (K // 2)
        assert_valid_ipv4(frame)


def test_events_are_also_counted_per_job(target):
    other = JOB + 1
    target.set_job(other, n_workers=1, slot_base=0, n_slots=4, mcast_grp=GROUP + 1, worker_mask=0b1000,
                   lane_bits=8, epoch=3)  # fmt: skip
    target.set_group(GROUP + 1, [(worker_port(3), 3)])
    target.add_result_dst(other, 3, mac_int(worker_mac(3)), ip_int(worker_ip(3)))
    idx = random_indices(np.random.default_rng(36))
    assert_exact(one_round(target, idx), idx)
    solo = random_indices(np.random.default_rng(37), 1)[0]
    out = target.send(4, thc_request(3, solo, job=other))
    assert len(out) == 1 and sums_of(out[0][1]) == list(reference_aggregate([solo], TABLE))
    assert target.send(1, thc_request(0, solo, job=99)) == []
    mine, theirs, unknown = target.job_events(JOB), target.job_events(other), target.job_events(99)
    assert {k: v for k, v in mine.items() if v} == {"CONSUMED": 2, "COMPLETED": 1}
    assert {k: v for k, v in theirs.items() if v} == {"COMPLETED": 1}
    assert {k: v for k, v in unknown.items() if v} == {"DROP_UNKNOWN_JOB": 1}
