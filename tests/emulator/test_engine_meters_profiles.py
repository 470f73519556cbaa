"""Meters and action profiles/selectors in the Python engine: exact colours under an injected clock,
BMv2's token-bucket arithmetic, member choice by the selector's hash, and the control-plane rules.

The programs are ipv4_forward with meters or an action selector added in p4c's JSON shape
(tests/support/extern_programs.py); expected frames are built with Scapy.
"""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import raw

from emulator.errors import EntryError
from emulator.switch import SoftwareSwitch
from tests.support.checksums import crc16_arc
from tests.support.extern_programs import METER_SIZE, metered_router, selector_router
from tests.support.frames import guided_frames, mutate

LPM, FWD, DROP = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward", "MyIngress.drop"
SW_MAC, HOST_MAC = "00:00:00:00:01:01", "00:00:00:00:00:0a"
GREEN, YELLOW, RED = 0, 1, 2
BACKENDS = ("python", "native")


def _udp(src="192.168.0.1", dst="10.9.8.7", proto_payload=b"payload!"):
    return Ether(dst=SW_MAC, src=HOST_MAC) / IP(src=src, dst=dst, ttl=64) / UDP(sport=1234, dport=5678) / proto_payload


def _forwarded(frame, dmac, tos=0, flags=0, ident=1):
    """What ipv4_forward makes of `frame`, with the colours written where the program puts them."""
    ip = frame[IP]
    out = (
        Ether(dst=dmac, src=SW_MAC)
        / IP(src=ip.src, dst=ip.dst, ttl=ip.ttl - 1, tos=tos, flags=flags, id=ident)
        / ip.payload
    )
    return raw(out)


class Clock:
    def __init__(self):
        self.us = 1_000_000  # any origin: the switch counts from its first reading

    def __call__(self):
        return self.us


@pytest.fixture(params=["python", "native"])
def metered(request):
    clock = Clock()
    sw = SoftwareSwitch.from_json(metered_router(), clock=clock, backend=request.param)
    assert sw.backend == request.param
    sw.table_add(LPM, [(0x0A000000, 8)], FWD, [0xAA, 2])
    return sw, clock


# ----------------------------------------------------------------------------------- meters
def test_unconfigured_meters_are_green_and_direct_meter_writes_on_hits(metered):
    sw, _ = metered
    frame = raw(_udp())
    for _ in range(5):
        assert sw.process(1, frame) == [(2, _forwarded(_udp(), "00:00:00:00:00:aa", GREEN, GREEN, GREEN))]
    assert sw.meter_get("MyIngress.pkt_meter", 2) is None


def test_two_rate_three_colour_packet_meter_follows_bmv2_buckets(metered):
    sw, clock = metered
    # 1000 packets/s committed with a burst of 2, 2000 packets/s peak with a burst of 3
    sw.meter_set("MyIngress.pkt_meter", 2, [(1000, 2), (2000, 3)])
    colours = []
    for at in (0, 0, 0, 0, 500, 1000, 1000, 1000):
        clock.us = 1_000_000 + at
        ((port, out),) = sw.process(1, raw(_udp()))
        colours.append(IP(out[14:]).tos)
    # t=0: peak 3->2 commit 2->1 G; 2->1,1->0 G; 1->0, commit short Y; peak short R.
    # t=500us: peak +1 (500*0.002), commit +0 -> Y. t=1000us: peak +1, commit +1 -> G, then
    # peak 0 -> R, R (the peak bucket refills at 1 token per 500us).
    assert colours == [GREEN, GREEN, YELLOW, RED, YELLOW, GREEN, RED, RED]
    assert sw.meter_get("MyIngress.pkt_meter", 2) == [(1000, 2), (2000, 3)]
    assert sw.meter_get("MyIngress.pkt_meter", 1) is None  # other indices untouched


def test_byte_meter_counts_the_ingress_frame_length(metered):
    sw, clock = metered
    frame = raw(_udp())
    n = len(frame)
    sw.meter_set("MyIngress.byte_meter", 2, [(0, 2 * n), (0, 3 * n - 1)])  # rates 0: buckets never refill
    flags = []
    for _ in range(4):
        ((_, out),) = sw.process(1, frame)
        flags.append(IP(out[14:]).flags.value)
    # peak holds 3n-1 bytes: two frames fit, the third is RED; committed holds 2n: both first frames GREEN
    assert flags == [GREEN, GREEN, RED, RED]


def test_direct_meter_belongs_to_the_entry_and_colours_hits(metered):
    sw, clock = metered
    sw.direct_meter_set(LPM, [(0x0A000000, 8)], [(0, 1), (0, 2)])
    idents = []
    for _ in range(3):
        ((_, out),) = sw.process(1, raw(_udp()))
        idents.append(IP(out[14:]).id)
    assert idents == [GREEN, YELLOW, RED]
    assert sw.direct_meter_get(LPM, [(0x0A000000, 8)]) == [(0, 1), (0, 2)]
    # a miss runs the default drop: no meter, nothing leaves
    assert sw.process(1, raw(_udp(dst="11.0.0.1"))) == []


def test_meter_reset_and_time_refill(metered):
    sw, clock = metered
    sw.meter_set("MyIngress.pkt_meter", 2, [(1_000_000, 1), (1_000_000, 1)])  # 1 packet per microsecond
    assert [IP(sw.process(1, raw(_udp()))[0][1][14:]).tos for _ in range(2)] == [GREEN, RED]
    clock.us += 1
    assert IP(sw.process(1, raw(_udp()))[0][1][14:]).tos == GREEN
    sw.meter_set("MyIngress.pkt_meter", 2, None)
    assert sw.meter_get("MyIngress.pkt_meter", 2) is None
    assert [IP(sw.process(1, raw(_udp()))[0][1][14:]).tos for _ in range(3)] == [GREEN] * 3


def test_rates_read_back_as_pi_converts_them(metered):
    sw, _ = metered
    # PI stores rate/1e6 (a double) and reads int(stored * 1e6): most rates survive, some lose one
    for cir in (1, 3, 7, 999_999, 10**9 + 7, 123_456_789_012):
        sw.meter_set("MyIngress.pkt_meter", 0, [(cir, 5), (cir, 6)])
        expected = int((cir / 1e6) * 1e6)
        assert sw.meter_get("MyIngress.pkt_meter", 0) == [(expected, 5), (expected, 6)]


@pytest.mark.parametrize(
    "name, index, config, match",
    [
        ("MyIngress.pkt_meter", METER_SIZE, [(1, 1), (1, 1)], "outside"),
        ("MyIngress.pkt_meter", 0, [(1, 1)], "2 \\(rate, burst\\) pairs"),
        ("MyIngress.pkt_meter", 0, [(5, 1), (4, 1)], "committed rate exceeds the peak"),
        ("MyIngress.pkt_meter", 0, [(-1, 1), (4, 1)], "rate -1"),
        ("MyIngress.pkt_meter", 0, [(1, 2**32), (4, 1)], "burst"),
        ("MyIngress.lpm_meter", 0, [(1, 1), (1, 1)], "direct meter"),
        ("MyIngress.nope", 0, [(1, 1), (1, 1)], "unknown meter"),
    ],
)
def test_meter_config_errors(metered, name, index, config, match):
    sw, _ = metered
    with pytest.raises(EntryError, match=match):
        sw.meter_set(name, index, config)


def test_native_meters_match_python_frame_for_frame():
    """Random frames at random times through both backends with the same meters: the same colours."""
    rng = random.Random(7)
    clocks = [Clock(), Clock()]
    switches = [SoftwareSwitch.from_json(metered_router(), clock=c, backend=b) for c, b in zip(clocks, BACKENDS)]
    for sw in switches:
        for port in range(METER_SIZE):
            sw.table_add(LPM, [(0x0A000000 + (port << 16), 16)], FWD, [0xA0 + port, port])
            sw.meter_set("MyIngress.pkt_meter", port, [(20_000 * port, 3), (40_000 * port, 5)])
            sw.meter_set("MyIngress.byte_meter", port, [(50_000 * port, 1500), (100_000 * port + 50_000, 3000)])
            sw.direct_meter_set(LPM, [(0x0A000000 + (port << 16), 16)], [(10_000, 2), (30_000 + port, 4)])
    now = 1_000_000
    seen = set()
    for _ in range(3000):
        now += rng.choice((0, 0, 1, 7, 50, 400))
        for c in clocks:
            c.us = now
        frame = raw(_udp(dst=f"10.{rng.randrange(METER_SIZE)}.0.1", proto_payload=bytes(rng.randrange(200))))
        out = switches[0].process(1, frame)
        assert out == switches[1].process(1, frame)
        ip = IP(out[0][1][14:])
        seen |= {("packets", ip.tos), ("bytes", ip.flags.value), ("direct", ip.id)}
    # every meter gave every colour: the comparison covered all three outcomes of each
    assert seen == {(m, c) for m in ("packets", "bytes", "direct") for c in (GREEN, YELLOW, RED)}


# ----------------------------------------------------------------------------------- selectors
@pytest.fixture
def ecmp():
    sw = SoftwareSwitch.from_json(selector_router())
    for mid, port in ((10, 1), (20, 2), (30, 3)):
        sw.act_prof_member_add("MyIngress.ecmp", mid, FWD, [0x100 + port, port])
    return sw


def test_group_member_is_crc16_of_the_selector_fields_modulo_size_in_handle_order(ecmp):
    sw = ecmp
    sw.act_prof_member_delete("MyIngress.ecmp", 10)  # frees handle 0 ...
    sw.act_prof_member_add("MyIngress.ecmp", 40, FWD, [0x104, 4])  # ... which member 40 takes
    sw.act_prof_group_set("MyIngress.ecmp", 7, [20, 30, 40])
    sw.table_add_indirect(LPM, [(0x0A000000, 8)], group=7)
    by_handle = [4, 2, 3]  # member 40 (handle 0), 20 (handle 1), 30 (handle 2)
    rng = random.Random(5)
    seen = set()
    for _ in range(60):
        src = f"192.168.{rng.randrange(256)}.{rng.randrange(256)}"
        frame = _udp(src=src)
        key = bytes(int(x) for x in src.split(".")) + bytes([17])
        port = by_handle[crc16_arc(key) % 3]
        seen.add(port)
        assert sw.process(1, raw(frame)) == [(port, _forwarded(frame, f"00:00:00:00:01:0{port}"))]
    assert seen == {2, 3, 4}


@pytest.mark.parametrize("backend", BACKENDS)
def test_weighted_members_are_copies_in_handle_order_as_pi_makes_them(backend):
    """Weights as PI programs BMv2: a member of weight w is w handles (copies allocated by member id,
    given back when no group needs them), the hash picks among all handles in handle order."""
    sw = SoftwareSwitch.from_json(selector_router(), backend=backend)
    for mid, port in ((10, 1), (20, 2), (30, 3)):  # handles 0, 1, 2
        sw.act_prof_member_add("MyIngress.ecmp", mid, FWD, [0x100 + port, port])
    sw.act_prof_group_set("MyIngress.ecmp", 7, [(20, 2), (30, 1), (10, 3)])
    sw.table_add_indirect(LPM, [(0x0A000000, 8)], group=7)

    def expect(by_handle):
        rng = random.Random(len(by_handle))
        for _ in range(40):
            src = f"192.168.{rng.randrange(256)}.{rng.randrange(256)}"
            key = bytes(int(x) for x in src.split(".")) + bytes([17])
            port = by_handle[crc16_arc(key) % len(by_handle)]
            frame = _udp(src=src)
            assert sw.process(1, raw(frame)) == [(port, _forwarded(frame, f"00:00:00:00:01:0{port}"))]

    # member 10's copies take handles 3 and 4, member 20's handle 5
    assert sw.act_prof_members_by_handle("MyIngress.ecmp") == [(0, 10), (1, 20), (2, 30), (3, 10), (4, 10), (5, 20)]
    expect([1, 2, 3, 1, 1, 2])
    assert sw.act_prof_groups("MyIngress.ecmp") == {7: {10: 3, 20: 2, 30: 1}}
    # member 30's copy is allocated (handle 6) before 10's and 20's copies are given back
    sw.act_prof_group_set("MyIngress.ecmp", 7, [(30, 2), (10, 1)], create=False)
    assert sw.act_prof_members_by_handle("MyIngress.ecmp") == [(0, 10), (1, 20), (2, 30), (6, 30)]
    expect([1, 3, 3])
    sw.act_prof_member_add("MyIngress.ecmp", 40, FWD, [0x104, 4])  # the lowest free handle: 3
    sw.act_prof_member_modify("MyIngress.ecmp", 30, FWD, [0x105, 5])  # the copy runs the new action
    sw.act_prof_group_set("MyIngress.ecmp", 7, [(30, 2), (40, 1)], create=False)
    expect([5, 4, 5])  # handles 2 (30), 3 (40), 6 (30)
    sw.table_delete(LPM, [(0x0A000000, 8)])
    sw.act_prof_group_delete("MyIngress.ecmp", 7)
    assert sw.act_prof_members_by_handle("MyIngress.ecmp") == [(0, 10), (1, 20), (2, 30), (3, 40)]


@pytest.mark.parametrize("weight", [0, -1, True, 1.5])
def test_weights_must_be_positive_integers(ecmp, weight):
    with pytest.raises(EntryError, match="weight must be a positive integer"):
        ecmp.act_prof_group_set("MyIngress.ecmp", 1, [(10, weight)])
    with pytest.raises(EntryError, match="weight must be a positive integer"):
        ecmp.table_add_indirect(LPM, [(0x0A000000, 8)], oneshot=[(FWD, [1, 1], weight)])
    assert ecmp.act_prof_groups("MyIngress.ecmp") == {}


def test_weights_beyond_the_profile_size_are_refused_before_any_copy(ecmp):
    """BMv2 has no limit (PI would create 2**31 members); the engine's profile holds 16 handles."""
    with pytest.raises(EntryError, match="full") as exc:
        ecmp.act_prof_group_set("MyIngress.ecmp", 1, [(10, 2**31 - 1)])
    assert exc.value.code == "RESOURCE_EXHAUSTED"
    assert ecmp.act_prof_groups("MyIngress.ecmp") == {}
    ecmp.act_prof_group_set("MyIngress.ecmp", 1, [(10, 14)])  # 3 members + 13 copies: full
    with pytest.raises(EntryError, match="full"):
        ecmp.act_prof_member_add("MyIngress.ecmp", 40, FWD, [1, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_weighted_one_shot_actions_are_members_in_a_row(backend):
    sw = SoftwareSwitch.from_json(selector_router(), backend=backend)
    actions = [(FWD, [0x105, 5], 2), (FWD, [0x106, 6]), (FWD, [0x105, 5], 1)]
    sw.table_add_indirect(LPM, [(0x0A000000, 8)], oneshot=actions)
    assert sw.table_indirect_entries(LPM) == [
        ([(0x0A000000, 8)], None, ("oneshot", [(FWD, [0x105, 5], 2), (FWD, [0x106, 6], 1), (FWD, [0x105, 5], 1)]))
    ]
    for src in ("1.2.3.4", "5.6.7.8", "9.9.9.9", "10.0.0.1", "172.16.5.5"):
        key = bytes(int(x) for x in src.split(".")) + bytes([17])
        assert sw.process(1, raw(_udp(src=src)))[0][0] == (5, 5, 6, 5)[crc16_arc(key) % 4]


def test_member_entries_modify_and_reference_rules(ecmp):
    sw = ecmp
    sw.table_add_indirect(LPM, [(0x0A000000, 8)], member=20)
    frame = _udp()
    assert sw.process(1, raw(frame)) == [(2, _forwarded(frame, "00:00:00:00:01:02"))]
    sw.act_prof_member_modify("MyIngress.ecmp", 20, FWD, [0x1FF, 5])
    assert sw.process(1, raw(frame)) == [(5, _forwarded(frame, "00:00:00:00:01:ff"))]
    with pytest.raises(EntryError, match="still used") as exc:
        sw.act_prof_member_delete("MyIngress.ecmp", 20)
    assert exc.value.code == "FAILED_PRECONDITION"
    sw.act_prof_group_set("MyIngress.ecmp", 1, [])
    with pytest.raises(EntryError, match="empty"):
        sw.table_modify_indirect(LPM, [(0x0A000000, 8)], group=1)
    sw.act_prof_group_set("MyIngress.ecmp", 1, [30], create=False)
    sw.table_modify_indirect(LPM, [(0x0A000000, 8)], group=1)
    sw.act_prof_member_delete("MyIngress.ecmp", 20)  # no longer used
    assert sw.process(1, raw(frame)) == [(3, _forwarded(frame, "00:00:00:00:01:03"))]
    with pytest.raises(EntryError, match="still used"):
        sw.act_prof_group_delete("MyIngress.ecmp", 1)
    assert sw.table_indirect_entries(LPM) == [([(0x0A000000, 8)], None, ("group", 1))]
    sw.table_delete(LPM, [(0x0A000000, 8)])
    sw.act_prof_group_delete("MyIngress.ecmp", 1)
    sw.act_prof_member_delete("MyIngress.ecmp", 30)
    assert sw.act_prof_members("MyIngress.ecmp") == {10: (FWD, [0x101, 1])}
    with pytest.raises(EntryError, match="give a member or a group"):
        sw.table_add(LPM, [(0x0A000000, 8)], FWD, [1, 1])


def test_group_emptied_after_the_entry_runs_no_action(ecmp):
    sw = ecmp
    sw.act_prof_group_set("MyIngress.ecmp", 1, [10])
    sw.table_add_indirect(LPM, [(0x0A000000, 8)], group=1)
    sw.act_prof_group_set("MyIngress.ecmp", 1, [], create=False)
    # no action: egress_spec stays 0 and the frame leaves unchanged on port 0
    assert sw.process(1, raw(_udp())) == [(0, raw(_udp()))]


def test_one_shot_action_set_selects_like_a_group_and_frees_its_members(ecmp):
    sw = ecmp
    actions = [(FWD, [0x105, 5]), (FWD, [0x106, 6])]
    sw.table_add_indirect(LPM, [(0x0A000000, 8)], oneshot=actions)
    assert sw.table_indirect_entries(LPM) == [
        ([(0x0A000000, 8)], None, ("oneshot", [(FWD, [0x105, 5], 1), (FWD, [0x106, 6], 1)]))
    ]
    for src in ("1.2.3.4", "5.6.7.8", "9.9.9.9"):
        key = bytes(int(x) for x in src.split(".")) + bytes([17])
        port = (5, 6)[crc16_arc(key) % 2]
        assert sw.process(1, raw(_udp(src=src)))[0][0] == port
    assert sw.act_prof_members("MyIngress.ecmp").keys() == {10, 20, 30}  # one-shot members are not listed
    sw.table_delete(LPM, [(0x0A000000, 8)])
    # the profile holds 16 members: the one-shot's two were given back
    for mid in range(100, 113):
        sw.act_prof_member_add("MyIngress.ecmp", mid, DROP, [])
    with pytest.raises(EntryError, match="full") as exc:
        sw.act_prof_member_add("MyIngress.ecmp", 200, DROP, [])
    assert exc.value.code == "RESOURCE_EXHAUSTED"


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_profile_has_members_but_no_groups(backend):
    sw = SoftwareSwitch.from_json(selector_router(with_selector=False), backend=backend)
    sw.act_prof_member_add("MyIngress.ecmp", 1, FWD, [0xAA, 2])
    with pytest.raises(EntryError, match="need an action selector"):
        sw.act_prof_group_set("MyIngress.ecmp", 1, [1])
    with pytest.raises(EntryError, match="need an action selector"):
        sw.table_add_indirect(LPM, [(0x0A000000, 8)], oneshot=[(FWD, [0xAA, 2])])
    sw.table_add_indirect(LPM, [(0x0A000000, 8)], member=1)
    frame = _udp()
    assert sw.process(1, raw(frame)) == [(2, _forwarded(frame, "00:00:00:00:00:aa"))]


def test_native_profiles_match_python_through_random_control_plane_changes():
    """Members, groups, one-shot sets and entries changed at random between frames: both backends
    send the same frames (ports and bytes) and refuse the same changes."""
    rng = random.Random(11)
    switches = [SoftwareSwitch.from_json(selector_router(), backend=b) for b in BACKENDS]
    prefixes = [(0x0A000000 + (k << 16), 16) for k in range(6)]

    def both(method, *args, **kw):
        outcomes = []
        for sw in switches:
            try:
                getattr(sw, method)(*args, **kw)
                outcomes.append("ok")
            except EntryError as exc:
                outcomes.append(exc.code)
        assert outcomes[0] == outcomes[1], (method, args, kw, outcomes)

    for step in range(400):
        op = rng.randrange(7)
        mid, gid, key = rng.randrange(12), rng.randrange(5), [rng.choice(prefixes)]
        port = rng.randrange(1, 9)
        if op == 0:
            both("act_prof_member_add", "MyIngress.ecmp", mid, FWD, [0x100 + port, port])
        elif op == 1:
            action, params = (DROP, []) if port > 6 else (FWD, [port, port])
            both("act_prof_member_modify", "MyIngress.ecmp", mid, action, params)
        elif op == 2:
            both("act_prof_member_delete", "MyIngress.ecmp", mid)
        elif op == 3:
            members = [(m, rng.choice((1, 1, 2, 3))) for m in rng.sample(range(12), rng.randrange(4))]
            both("act_prof_group_set", "MyIngress.ecmp", gid, members, create=rng.random() < 0.5)
        elif op == 4:
            both("act_prof_group_delete", "MyIngress.ecmp", gid)
        elif op == 5:
            oneshot = [(FWD, [p, p], rng.randrange(1, 3)) for p in range(1, rng.randrange(2, 5))]
            pointer = rng.choice(({"member": mid}, {"group": gid}, {"oneshot": oneshot}))
            both(rng.choice(("table_add_indirect", "table_modify_indirect")), LPM, key, **pointer)
        else:
            both("table_delete", LPM, key)
        for _ in range(5):
            src = f"172.16.{rng.randrange(256)}.{rng.randrange(256)}"
            frame = raw(_udp(src=src, dst=f"10.{rng.randrange(6)}.1.1"))
            assert switches[0].process(1, frame) == switches[1].process(1, frame), step


@pytest.mark.parametrize("make", [metered_router, selector_router])
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_and_truncated_frames_never_raise(make, backend):
    cfg = make()
    sw = SoftwareSwitch.from_json(cfg, clock=Clock(), backend=backend)
    if make is metered_router:
        sw.table_add(LPM, [(0x0A000000, 8)], FWD, [0xAA, 2])
        sw.meter_set("MyIngress.pkt_meter", 2, [(1, 1), (2, 2)])
        sw.direct_meter_set(LPM, [(0x0A000000, 8)], [(1, 1), (2, 2)])
    else:
        sw.act_prof_member_add("MyIngress.ecmp", 1, FWD, [0xAA, 2])
        sw.act_prof_member_add("MyIngress.ecmp", 2, FWD, [0xBB, 3])
        sw.act_prof_group_set("MyIngress.ecmp", 1, [1, 2])
        sw.table_add_indirect(LPM, [(0, 1)], group=1)
        sw.table_add_indirect(LPM, [(0x80000000, 1)], member=2)
    rng = random.Random(12)
    frames = guided_frames(cfg, 300, rng)
    frames += [mutate(f, rng) for f in frames] + [f[: rng.randrange(len(f) + 1)] for f in frames]
    frames += [bytes(rng.randrange(256) for _ in range(rng.randrange(80))) for _ in range(100)]
    for f in frames:
        sw.process(1, f)
    assert sw.stats["exceptions"] == 0


SANITIZED_CHILD = r"""
import random
from emulator.errors import EntryError
from emulator.switch import SoftwareSwitch
from tests.support.extern_programs import metered_router, selector_router
from tests.support.frames import guided_frames, mutate
LPM, FWD = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
now = [0]
total = 0
for make in (metered_router, selector_router):
    cfg = make()
    sw = SoftwareSwitch.from_json(cfg, backend="native", sanitize=True, clock=lambda: now[0])
    rng = random.Random(make.__name__)
    seeds = guided_frames(cfg, 200, rng)
    for i in range(25_000):
        if i % 50 == 0:  # change the control plane now and then; refusals are expected
            try:
                if make is metered_router:
                    k = rng.randrange(4)
                    sw.table_add(LPM, [(rng.getrandbits(32) & 0xFF000000, 8)], FWD, [k, k])
                    sw.meter_set("MyIngress.pkt_meter", k, [(rng.randrange(10**6), rng.randrange(9)), (10**6, 9)])
                    sw.meter_set("MyIngress.byte_meter", k, None if rng.random() < 0.2 else [(0, 500), (10, 900)])
                    e = rng.choice(sw.table_entries(LPM))
                    sw.direct_meter_set(LPM, e.keys, [(1000, 1), (2000, 2)])
                else:
                    m = rng.randrange(20)
                    rng.choice((
                        lambda: sw.act_prof_member_add("MyIngress.ecmp", m, FWD, [m, m % 8]),
                        lambda: sw.act_prof_member_delete("MyIngress.ecmp", m),
                        lambda: sw.act_prof_group_set(
                            "MyIngress.ecmp", m % 4, [(k, rng.randrange(1, 4)) for k in rng.sample(range(20), 3)],
                            create=rng.random() < .5),
                        lambda: sw.act_prof_group_delete("MyIngress.ecmp", m % 4),
                        lambda: sw.table_add_indirect(LPM, [(m << 24, 8)], group=m % 4),
                        lambda: sw.table_add_indirect(LPM, [(m << 24, 8)], oneshot=[(FWD, [1, 1]), (FWD, [2, 2])]),
                        lambda: sw.table_delete(LPM, [(m << 24, 8)]),
                    ))()
            except EntryError:
                pass
        now[0] += rng.choice((0, 1, 10, 1000))
        if rng.random() < 0.7:
            frame = mutate(rng.choice(seeds), rng)
        else:
            frame = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 120)))
        sw.process(rng.randrange(8), frame)
        total += 1
    sw.close()
print("fuzzed", total)
"""


@pytest.mark.slow
def test_meters_and_profiles_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    from tests.support import sanitizers

    proc = sanitizers.run_sanitized(SANITIZED_CHILD, cache=tmp_path / "cache", timeout=3000)
    sanitizers.assert_clean(proc, 50000)
