"""MeterEntry, DirectMeterEntry, ActionProfileMember, ActionProfileGroup and the action-profile forms
of TableEntry through p4runtime-shell, against the server on the real engine.

The programs are ipv4_forward with meters or an action selector added in p4c's JSON and P4Info
shapes (tests/support/extern_programs.py); packets through the engine show the writes took effect.
"""

import grpc
import p4runtime_sh.shell as sh
import pytest
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeWriteException
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from harness.shell import shell_session
from tests.support.extern_programs import (
    METER_ID,
    metered_router,
    metered_router_p4info,
    selector_router,
    selector_router_p4info,
    write_program,
)
from tests.support.p4runtime import Controller, entity, served_device, update, write_errors

LPM, FWD = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"


@pytest.fixture
def switch():
    with served_device() as device:
        yield device


@pytest.fixture
def metered(switch, tmp_path):
    with shell_session(switch.address, *write_program(tmp_path, metered_router(), metered_router_p4info())):
        yield switch


@pytest.fixture
def ecmp(switch, tmp_path):
    with shell_session(switch.address, *write_program(tmp_path, selector_router(), selector_router_p4info())):
        yield switch


def _frame(src="192.168.0.1"):
    return bytes(Ether(dst="00:00:00:00:01:01", src="00:00:00:00:00:0a") / IP(src=src, dst="10.1.2.3") / UDP() / b"x")


def _route(**pointer):
    te = sh.TableEntry(LPM)
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    for k, v in pointer.items():
        setattr(te, k, v)
    return te


# ----------------------------------------------------------------------------------- meters
def test_meter_entry_modify_read_and_reset(metered):
    m = sh.MeterEntry("MyIngress.pkt_meter")
    m.index = 2
    m.cir, m.cburst, m.pir, m.pburst = 1000, 2, 2000, 3
    m.modify()
    read = {e.index: e for e in sh.MeterEntry("MyIngress.pkt_meter").read()}
    assert sorted(read) == [0, 1, 2, 3]
    cfg = read[2].msg().config
    assert (cfg.cir, cfg.cburst, cfg.pir, cfg.pburst) == (1000, 2, 2000, 3)
    assert not read[0].msg().HasField("config")  # unconfigured: no config, as BMv2's server answers
    te = sh.TableEntry(LPM)(action=FWD)
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    te.action["dstAddr"], te.action["port"] = "00:00:00:00:00:aa", "2"
    te.insert()
    m.cir, m.pir = 0, 0  # buckets that never refill: colours independent of the clock
    m.modify()
    colours = [IP(metered.engine.process(1, _frame())[0][1][14:]).tos for _ in range(4)]
    assert colours == [0, 0, 1, 2]
    reset = sh.MeterEntry("MyIngress.pkt_meter")
    reset.index = 2
    reset.modify()  # no config: back to unconfigured
    assert not [e for e in sh.MeterEntry("MyIngress.pkt_meter").read() if e.msg().HasField("config")]


def test_direct_meter_through_table_entry_and_direct_meter_entry(metered):
    te = sh.TableEntry(LPM)(action=FWD)
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    te.action["dstAddr"], te.action["port"] = "00:00:00:00:00:aa", "2"
    te.meter_config.cir, te.meter_config.cburst = 0, 1
    te.meter_config.pir, te.meter_config.pburst = 0, 2
    te.insert()
    assert [IP(metered.engine.process(1, _frame())[0][1][14:]).id for _ in range(3)] == [0, 1, 2]
    [dme] = list(sh.DirectMeterEntry("MyIngress.lpm_meter").read())
    assert (dme.msg().config.cburst, dme.msg().config.pburst) == (1, 2)
    d = sh.DirectMeterEntry("MyIngress.lpm_meter")
    d.table_entry.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    d.cir, d.cburst, d.pir, d.pburst = 5, 6, 7, 8
    d.modify()
    q = sh.TableEntry(LPM)
    q.meter_config.cir = 0  # asks for the meter config in the answer
    [read] = list(q.read())
    assert (read.msg().meter_config.cir, read.msg().meter_config.pburst) == (5, 8)


def test_meter_errors_have_their_codes(metered):
    ctl = Controller(metered.address, election_id=(0, 2))
    try:
        bad = p4runtime_pb2.MeterEntry(meter_id=METER_ID)
        bad.index.index = 9
        bad.config.cir, bad.config.pir = 1, 1
        swapped = p4runtime_pb2.MeterEntry(meter_id=METER_ID)
        swapped.index.index = 0
        swapped.config.cir, swapped.config.pir = 5, 4
        insert = p4runtime_pb2.MeterEntry(meter_id=METER_ID)
        with pytest.raises(grpc.RpcError) as exc:
            ctl.write(
                update("meter_entry", p4runtime_pb2.Update.MODIFY, msg=bad),
                update("meter_entry", p4runtime_pb2.Update.MODIFY, msg=swapped),
                update("meter_entry", p4runtime_pb2.Update.INSERT, msg=insert),
            )
        errors = write_errors(exc.value)
        codes = [e.canonical_code for e in errors]
        # what BMv2 itself refuses comes back UNKNOWN from its PI server; so do we
        unknown, invalid = grpc.StatusCode.UNKNOWN.value[0], grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert codes == [unknown, unknown, invalid]
        assert "committed rate exceeds the peak" in errors[1].message
        wildcard = p4runtime_pb2.MeterEntry(meter_id=METER_ID)
        with pytest.raises(grpc.RpcError) as exc:
            ctl.write(update("meter_entry", p4runtime_pb2.Update.MODIFY, msg=wildcard))
        assert write_errors(exc.value)[0].canonical_code == grpc.StatusCode.UNIMPLEMENTED.value[0]
        # all four -1: PI's spelling of "unconfigured"
        minus = p4runtime_pb2.MeterEntry(meter_id=METER_ID)
        minus.index.index = 1
        minus.config.cir = minus.config.cburst = minus.config.pir = minus.config.pburst = -1
        ctl.write(update("meter_entry", p4runtime_pb2.Update.MODIFY, msg=minus))
        [read] = ctl.read(entity("meter_entry", p4runtime_pb2.MeterEntry(meter_id=METER_ID, index=minus.index)))
        assert not read.meter_entry.HasField("config")
    finally:
        ctl.close()


# ----------------------------------------------------------------------------------- action profiles
def _member(mid, port):
    m = sh.ActionProfileMember("MyIngress.ecmp")(member_id=mid, action=FWD)
    m.action["dstAddr"], m.action["port"] = f"00:00:00:00:01:{port:02x}", str(port)
    m.insert()


def test_members_groups_and_entries_round_trip_and_forward(ecmp):
    for mid, port in ((1, 1), (2, 2), (3, 3)):
        _member(mid, port)
    g = sh.ActionProfileGroup("MyIngress.ecmp")(group_id=7)
    g.add(3).add(1)
    g.insert()
    _route(group_id=7).insert()
    ports = {ecmp.engine.process(1, _frame(src=f"10.9.{i}.1"))[0][0] for i in range(40)}
    assert ports == {1, 3}
    members = {m.member_id: m for m in sh.ActionProfileMember("MyIngress.ecmp").read()}
    assert sorted(members) == [1, 2, 3] and members[2].action["port"].value == b"\x02"
    [group] = list(sh.ActionProfileGroup("MyIngress.ecmp").read())
    assert group.group_id == 7 and sorted(m.member_id for m in group.members) == [1, 3]
    [entry] = list(sh.TableEntry(LPM).read())
    assert entry.group_id == 7
    # a member in a group cannot go; a group in use cannot go
    with pytest.raises(P4RuntimeWriteException) as exc:
        sh.ActionProfileMember("MyIngress.ecmp")(member_id=1).delete()
    assert "still used" in str(exc.value)
    entry.member_id = 2
    entry.modify()
    assert {ecmp.engine.process(1, _frame(src=f"10.9.{i}.1"))[0][0] for i in range(5)} == {2}
    sh.ActionProfileGroup("MyIngress.ecmp")(group_id=7).delete()


def test_weighted_group_is_read_back_and_forwards_by_weight(ecmp):
    for mid, port in ((1, 1), (2, 2)):
        _member(mid, port)
    g = sh.ActionProfileGroup("MyIngress.ecmp")(group_id=7)
    g.add(2, weight=3).add(1, weight=1)
    g.insert()
    _route(group_id=7).insert()
    ports = [ecmp.engine.process(1, _frame(src=f"10.{i}.{7 * i % 256}.{i * i % 256}"))[0][0] for i in range(200)]
    assert 100 < ports.count(2) < 200 and ports.count(1) > 20  # three handles of member 2, one of 1
    [group] = list(sh.ActionProfileGroup("MyIngress.ecmp").read())
    assert [(m.member_id, m.weight) for m in group.members] == [(1, 1), (2, 3)]
    # a wildcard read lists member 2 once per handle (itself and two copies), as PI does
    assert [m.member_id for m in sh.ActionProfileMember("MyIngress.ecmp").read()] == [1, 2, 2, 2]
    big = sh.ActionProfileGroup("MyIngress.ecmp")(group_id=8, max_size=3)
    big.add(2, weight=3).add(1, weight=1)
    with pytest.raises(P4RuntimeWriteException, match="RESOURCE_EXHAUSTED"):
        big.insert()
    [empty] = [g for g in sh.ActionProfileGroup("MyIngress.ecmp").read() if g.group_id == 8]
    assert empty.max_size == 3 and not empty.members  # PI leaves the refused group behind, empty


def test_weighted_one_shot_set_is_read_back(ecmp):
    te = sh.TableEntry(LPM)
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    for port, weight in ((4, 3), (5, 1)):
        a = sh.Action(FWD)
        a["dstAddr"], a["port"] = f"00:00:00:00:01:{port:02x}", str(port)
        te.oneshot.add(a, weight=weight)
    te.insert()
    [entry] = list(sh.TableEntry(LPM).read())
    assert [(a.action["port"].value, a.weight) for a in entry.oneshot.actions] == [(b"\x04", 3), (b"\x05", 1)]


def test_one_shot_action_set_is_written_and_read_back(ecmp):
    te = sh.TableEntry(LPM)
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    for port in (4, 5):
        a = sh.Action(FWD)
        a["dstAddr"], a["port"] = f"00:00:00:00:01:{port:02x}", str(port)
        te.oneshot.add(a)
    te.insert()
    ports = {ecmp.engine.process(1, _frame(src=f"10.9.{i}.1"))[0][0] for i in range(40)}
    assert ports == {4, 5}
    [entry] = list(sh.TableEntry(LPM).read())
    assert [a.action["port"].value for a in entry.oneshot.actions] == [b"\x04", b"\x05"]
    assert list(sh.ActionProfileMember("MyIngress.ecmp").read()) == []  # one-shot members are hidden


def test_indirect_table_refuses_direct_actions_and_zero_weights(ecmp):
    _member(1, 1)
    info = selector_router_p4info()
    lpm = next(t for t in info.tables if t.preamble.name == LPM)
    fwd = next(a for a in info.actions if a.preamble.name == FWD)
    te = p4runtime_pb2.TableEntry(table_id=lpm.preamble.id)
    fm = te.match.add(field_id=1)
    fm.lpm.value, fm.lpm.prefix_len = bytes([10, 0, 0, 0]), 8
    te.action.action.action_id = fwd.preamble.id
    te.action.action.params.add(param_id=1, value=b"\xaa")
    te.action.action.params.add(param_id=2, value=b"\x02")
    g = sh.ActionProfileGroup("MyIngress.ecmp")(group_id=1)
    g.add(1, weight=0)
    with pytest.raises(P4RuntimeWriteException, match="weight must be a positive integer"):
        g.insert()
    empty = sh.ActionProfileGroup("MyIngress.ecmp")(group_id=2)
    empty.insert()
    with pytest.raises(P4RuntimeWriteException, match="empty"):
        _route(group_id=2).insert()
    with pytest.raises(P4RuntimeWriteException, match="no member 9"):
        _route(member_id=9).insert()
    ctl = Controller(
        ecmp.address, election_id=(0, 2)
    )  # last: a higher election id takes over from the shell, which refuses this one itself
    try:
        with pytest.raises(grpc.RpcError) as exc:
            ctl.write(update("table_entry", msg=te))
        [error] = write_errors(exc.value)
        assert error.canonical_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "give a member or group" in error.message
    finally:
        ctl.close()


def test_one_shot_and_manual_programming_do_not_mix(ecmp):
    _member(1, 1)
    te = sh.TableEntry(LPM)
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    a = sh.Action(FWD)
    a["dstAddr"], a["port"] = "00:00:00:00:01:04", "4"
    te.oneshot.add(a)
    with pytest.raises(P4RuntimeWriteException, match="mix programming modes"):
        te.insert()
    sh.ActionProfileMember("MyIngress.ecmp")(member_id=1).delete()
    te.insert()  # the selector is empty again: one-shot programming may start
    with pytest.raises(P4RuntimeWriteException, match="mix programming modes"):
        _member(2, 2)


def test_p4info_meters_and_profiles_must_match_the_json():
    from p4.config.v1 import p4info_pb2

    from emulator.p4rt.binding import bind
    from emulator.p4rt.errors import P4RTError
    from emulator.switch import SoftwareSwitch

    program = SoftwareSwitch.from_json(metered_router()).program
    bind(metered_router_p4info(), program)  # agrees
    info = metered_router_p4info()
    info.meters[1].spec.unit = p4info_pb2.MeterSpec.PACKETS  # the JSON's byte_meter counts bytes
    with pytest.raises(P4RTError, match="meter 'MyIngress.byte_meter' counts packets with size 4 in P4Info, bytes"):
        bind(info, program)
    selector = SoftwareSwitch.from_json(selector_router()).program
    bind(selector_router_p4info(), selector)
    with pytest.raises(P4RTError, match="action profile 'MyIngress.ecmp' lacks a selector only in P4Info"):
        bind(selector_router_p4info(with_selector=False), selector)
