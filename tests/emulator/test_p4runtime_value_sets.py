"""P4Runtime ValueSetEntry on the real engine: MODIFY replaces the set, reads answer the members
(field by field, canonical bytestrings), and the spec's refusals (INSERT/DELETE, too many members,
bad widths, missing fields). The program is the hand-built value set program of
test_engine_v1model_constructs, its P4Info written here as p4c would write it."""

import json

import grpc
import pytest
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from emulator.p4runtime_server import Device, P4RuntimeServer
from tests.emulator.test_engine_v1model_constructs import eth, vset_program
from tests.support.p4runtime import Controller, entity, update, write_errors

MODIFY, INSERT, DELETE = p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.DELETE
ETHER_TYPES, KINDS = 0x03000001, 0x03000002  # P4Info ids (p4c's value set prefix is 0x03)


def p4info():
    info = p4info_pb2.P4Info()
    for vid, name, fields, size in (
        (ETHER_TYPES, "ether_types", [("ether_types", 16)], 4),
        (KINDS, "kinds", [("kind", 8), ("sub", 4)], 2),
    ):
        vs = info.value_sets.add()
        vs.preamble.id, vs.preamble.name, vs.size = vid, name, size
        for k, (fname, width) in enumerate(fields, 1):
            m = vs.match.add()
            m.id, m.name, m.bitwidth, m.match_type = k, fname, width, p4info_pb2.MatchField.EXACT
    return info


@pytest.fixture
def ctl():
    device = Device(device_id=0)
    server = P4RuntimeServer(device)
    controller = Controller(f"127.0.0.1:{server.start('127.0.0.1:0')}")
    controller.set_pipeline(p4info=p4info(), device_config=json.dumps(vset_program()).encode())
    controller.device = device
    yield controller
    controller.close()
    server.stop(0)


def vset_entry(vid, *members):
    e = p4runtime_pb2.ValueSetEntry(value_set_id=vid)
    for fields in members:
        m = e.members.add()
        for fid, value in fields:
            fm = m.match.add()
            fm.field_id = fid
            fm.exact.value = value
    return e


def test_modify_replaces_the_set_and_packets_follow(ctl):
    frame = eth(0x9000) + b"\x07\x30\x00"
    assert ctl.device.engine.process(1, frame) == [(2, frame)]
    ctl.write(
        update("value_set_entry", MODIFY, msg=vset_entry(ETHER_TYPES, [(1, b"\x90\x00")], [(1, b"\x90\x01")])),
        update("value_set_entry", MODIFY, msg=vset_entry(KINDS, [(1, b"\x07"), (2, b"\x03")])),
    )
    assert ctl.device.engine.process(1, frame) == [(2, eth(0x9000) + b"\x07\x30\x01")]
    [types, kinds] = ctl.read(entity("value_set_entry", p4runtime_pb2.ValueSetEntry()))
    assert types.value_set_entry == vset_entry(ETHER_TYPES, [(1, b"\x90\x00")], [(1, b"\x90\x01")])
    assert kinds.value_set_entry == vset_entry(KINDS, [(1, b"\x07"), (2, b"\x03")])
    ctl.write(update("value_set_entry", MODIFY, msg=vset_entry(ETHER_TYPES)))  # no members: empty set
    assert ctl.device.engine.process(1, frame) == [(2, frame)]
    [types] = ctl.read(entity("value_set_entry", p4runtime_pb2.ValueSetEntry(value_set_id=ETHER_TYPES)))
    assert list(types.value_set_entry.members) == []


@pytest.mark.parametrize(
    "kind, msg, code, words",
    [
        (INSERT, vset_entry(ETHER_TYPES, [(1, b"\x90\x00")]), grpc.StatusCode.INVALID_ARGUMENT, "only be modified"),
        (DELETE, vset_entry(ETHER_TYPES), grpc.StatusCode.INVALID_ARGUMENT, "only be modified"),
        (
            MODIFY,
            vset_entry(KINDS, *[[(1, bytes([k])), (2, b"\x01")] for k in range(3)]),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "at most 2",
        ),
        (
            MODIFY,
            vset_entry(KINDS, [(1, b"\x07"), (2, b"\x13")]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "does not fit in 4 bits",
        ),
        (MODIFY, vset_entry(KINDS, [(1, b"\x07")]), grpc.StatusCode.INVALID_ARGUMENT, "'sub' is missing"),
        (
            MODIFY,
            vset_entry(KINDS, [(1, b"\x07"), (2, b"\x01"), (3, b"\x01")]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unknown match field id 3",
        ),
        (MODIFY, vset_entry(7), grpc.StatusCode.INVALID_ARGUMENT, "unknown value set id 7"),
        (
            MODIFY,
            vset_entry(ETHER_TYPES, [(1, b"\x90\x00")], [(1, b"\x90\x00")]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "duplicate",
        ),
    ],
)
def test_refusals(ctl, kind, msg, code, words):
    with pytest.raises(grpc.RpcError) as exc:
        ctl.write(update("value_set_entry", kind, msg=msg))
    [err] = write_errors(exc.value)
    assert err.canonical_code == code.value[0] and words in err.message


def test_p4info_value_set_widths_must_match_the_device_config():
    info = p4info()
    info.value_sets[1].match[1].bitwidth = 5
    device = Device(device_id=0)
    server = P4RuntimeServer(device)
    controller = Controller(f"127.0.0.1:{server.start('127.0.0.1:0')}")
    try:
        with pytest.raises(grpc.RpcError) as exc:
            controller.set_pipeline(p4info=info, device_config=json.dumps(vset_program()).encode())
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "value set 'kinds' is 13 bits in P4Info, 12 in the device config" in exc.value.details()
    finally:
        controller.close()
        server.stop(0)
