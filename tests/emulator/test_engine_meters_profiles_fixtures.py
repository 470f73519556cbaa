"""The meter and action-profile fixture programs compiled by p4c (tests/fixtures/p4/meters.p4,
action_profiles.p4): exact frames and colours through both backends, and P4Runtime on their real
P4Info through p4runtime-shell.

meters.p4 writes each meter's colour into the frame: Ethernet (0x88b5), then index, packet colour,
byte colour, direct colour (0xff when the direct meter's table missed).
"""

import contextlib
import json
import random
from pathlib import Path

import p4runtime_sh.shell as sh
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import raw

from emulator.p4runtime_server import Device, P4RuntimeServer
from emulator.switch import SoftwareSwitch
from harness.shell import shell_session
from tests.emulator.test_engine_meters_profiles import BACKENDS, Clock
from tests.support.checksums import crc16_arc
from tests.support.frames import guided_frames, mutate
from tests.support.p4runtime import compiled

GREEN, YELLOW, RED = 0, 1, 2
ING = "MyIngress"


def _load(name, backend, **kw):
    _, program = compiled(name)
    return SoftwareSwitch.from_json(program, backend=backend, **kw)


def meter_frame(index, length=0):
    return (
        b"\x00\x00\x00\x00\x00\x02"
        + b"\x00\x00\x00\x00\x00\x01"
        + b"\x88\xb5"
        + bytes([index, 9, 9, 9])
        + bytes(length)
    )


def colours(out):
    [(port, frame)] = out
    assert port == 1
    return tuple(frame[15:18])


# ----------------------------------------------------------------------------------- meters.p4
@pytest.mark.parametrize("backend", BACKENDS)
def test_meters_fixture_colours_frames_exactly(backend):
    clock = Clock()
    sw = _load("meters", backend, clock=clock)
    # unconfigured: green everywhere; the flows table misses, so the direct colour stays 0xff
    frame = meter_frame(3)
    assert sw.process(0, frame) == [(1, frame[:15] + bytes([GREEN, GREEN, 0xFF]))]
    sw.table_add(f"{ING}.flows", [3], f"{ING}.metered", [])
    sw.meter_set(f"{ING}.packet_meter", 3, [(0, 2), (0, 3)])  # no refill: 2 green, 1 yellow, then red
    n = len(meter_frame(3, 40))
    sw.meter_set(f"{ING}.byte_meter", 3, [(0, n), (0, 2 * n)])  # one frame green, one yellow, then red
    sw.direct_meter_set(f"{ING}.flows", [3], [(1000, 1), (1000, 1)])  # one packet per millisecond
    got = []
    for at in (0, 0, 0, 0, 1000):
        clock.us = 5_000_000 + at
        got.append(colours(sw.process(0, meter_frame(3, 40))))
    assert got == [
        (GREEN, GREEN, GREEN),
        (GREEN, YELLOW, RED),
        (YELLOW, RED, RED),
        (RED, RED, RED),
        (RED, RED, GREEN),  # a millisecond later the direct meter's buckets hold one token again
    ]
    # another index is another meter; an index past the array changes neither meter nor colour byte
    assert colours(sw.process(0, meter_frame(4))) == (GREEN, GREEN, 0xFF)
    assert sw.process(0, meter_frame(200)) == [(1, meter_frame(200)[:15] + bytes([9, 9, 0xFF]))]
    assert sw.stats["out_of_bounds"] == 2
    assert sw.meter_get(f"{ING}.packet_meter", 3) == [(0, 2), (0, 3)]
    assert sw.direct_meter_get(f"{ING}.flows", [3]) == [(1000, 1), (1000, 1)]


# ----------------------------------------------------------------------------------- action_profiles.p4
def ecmp_frame(src, proto=17):
    return raw(
        Ether(dst="00:00:00:00:01:01", src="00:00:00:00:00:0a") / IP(src=src, dst="10.1.2.3", proto=proto) / b"data"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_action_profiles_fixture_selects_members_by_crc16(backend):
    sw = _load("action_profiles", backend)
    sel, prof = f"{ING}.ecmp_selector", f"{ING}.tos_profile"
    for mid in (1, 2, 3):
        sw.act_prof_member_add(sel, mid, f"{ING}.set_nexthop", [mid, 0x0200 + mid])
    sw.act_prof_group_set(sel, 10, [3, 1, 2])
    sw.table_add_indirect(f"{ING}.ecmp", [(0x0A000000, 8)], group=10)
    sw.act_prof_member_add(prof, 1, f"{ING}.set_tos", [0xB8])
    sw.table_add_indirect(f"{ING}.tos", [17], member=1)
    rng = random.Random(3)
    for _ in range(30):
        src = f"172.{rng.randrange(32)}.{rng.randrange(256)}.{rng.randrange(256)}"
        frame = ecmp_frame(src)
        port = 1 + crc16_arc(bytes(int(x) for x in src.split(".")) + b"\x11") % 3
        expected = bytearray(frame)
        expected[0:6] = (0x0200 + port).to_bytes(6, "big")
        expected[15] = 0xB8  # diffserv from the tos profile's member
        assert sw.process(1, frame) == [(port, bytes(expected))]
    # protocol 6 misses the tos table: diffserv unchanged; 11.0.0.0 misses ecmp: dropped
    assert sw.process(1, ecmp_frame("1.1.1.1", proto=6))[0][1][15] == 0
    assert sw.process(1, raw(Ether() / IP(dst="11.0.0.1") / UDP())) == []


@pytest.mark.parametrize("name", ["meters", "action_profiles"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_fixture_random_and_truncated_frames_never_raise(name, backend):
    sw = _load(name, backend, clock=Clock())
    if name == "meters":
        sw.table_add(f"{ING}.flows", [1], f"{ING}.metered", [])
        sw.meter_set(f"{ING}.packet_meter", 1, [(5, 1), (9, 2)])
        sw.direct_meter_set(f"{ING}.flows", [1], [(5, 1), (9, 2)])
    else:
        sw.act_prof_member_add(f"{ING}.ecmp_selector", 1, f"{ING}.set_nexthop", [1, 1])
        sw.act_prof_group_set(f"{ING}.ecmp_selector", 1, [1])
        sw.table_add_indirect(f"{ING}.ecmp", [(0, 1)], group=1)
    rng = random.Random(name)
    _, program = compiled(name)
    seeds = guided_frames(json.loads(Path(program).read_text()), 200, rng)
    frames = seeds + [mutate(f, rng) for f in seeds] + [f[: rng.randrange(len(f) + 1)] for f in seeds]
    for f in frames:
        sw.process(rng.randrange(4), f)
    assert sw.stats["exceptions"] == 0


# ----------------------------------------------------------------------------------- P4Runtime
@pytest.fixture
def shell():
    device = Device(device_id=0)
    server = P4RuntimeServer(device)
    address = f"127.0.0.1:{server.start('127.0.0.1:0')}"
    with contextlib.ExitStack() as sessions:

        def setup(name):
            sessions.enter_context(shell_session(address, *compiled(name)))
            return device

        yield setup
    server.stop(0)


def test_meters_fixture_over_p4runtime_shell(shell):
    device = shell("meters")
    m = sh.MeterEntry(f"{ING}.packet_meter")
    m.index = 5
    m.cir, m.cburst, m.pir, m.pburst = 0, 1, 0, 1
    m.modify()
    te = sh.TableEntry(f"{ING}.flows")(action=f"{ING}.metered")
    te.match["hdr.m.index"] = "5"
    te.meter_config.cir, te.meter_config.cburst, te.meter_config.pir, te.meter_config.pburst = 0, 2, 0, 2
    te.insert()
    got = [colours(device.engine.process(0, meter_frame(5))) for _ in range(3)]
    assert got == [(GREEN, GREEN, GREEN), (RED, GREEN, GREEN), (RED, GREEN, RED)]
    [dme] = list(sh.DirectMeterEntry(f"{ING}.flow_meter").read())
    assert (dme.msg().config.cburst, dme.msg().config.pburst) == (2, 2)
    configured = [e.index for e in sh.MeterEntry(f"{ING}.packet_meter").read() if e.msg().HasField("config")]
    assert configured == [5]


def test_action_profiles_fixture_over_p4runtime_shell(shell):
    device = shell("action_profiles")
    for mid in (1, 2):
        m = sh.ActionProfileMember(f"{ING}.ecmp_selector")(member_id=mid, action=f"{ING}.set_nexthop")
        m.action["port"], m.action["dmac"] = str(mid), f"00:00:00:00:02:0{mid}"
        m.insert()
    g = sh.ActionProfileGroup(f"{ING}.ecmp_selector")(group_id=4)
    g.add(1).add(2)
    g.insert()
    te = sh.TableEntry(f"{ING}.ecmp")
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    te.group_id = 4
    te.insert()
    ports = {device.engine.process(1, ecmp_frame(f"172.16.0.{i}"))[0][0] for i in range(30)}
    assert ports == {1, 2}
    [entry] = list(sh.TableEntry(f"{ING}.ecmp").read())
    assert entry.group_id == 4
    [group] = list(sh.ActionProfileGroup(f"{ING}.ecmp_selector").read())
    assert sorted(m.member_id for m in group.members) == [1, 2]
