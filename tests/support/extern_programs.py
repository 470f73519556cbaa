"""Meter and action-profile programs derived from the compiled ipv4_forward fixture, in the shape
p4c-bm2-ss writes (behavioral-model docs/JSON_format.md: meter_arrays, execute_meter, direct_meters,
action_profiles with a selector, tables of type indirect/indirect_ws).

They let the engine's meter and profile semantics be tested where p4c is not installed; the fixture
programs tests/fixtures/p4/meters.p4 and action_profiles.p4 are the same constructs from P4 source.
This module holds no tests.
"""

import copy
import json

from tests.support.paths import FIXTURE_BUILD

METER_SIZE = 4
LPM_TABLE = "MyIngress.ipv4_lpm"


def _base():
    return json.loads((FIXTURE_BUILD / "ipv4_forward.json").read_text())


def _action(cfg, name):
    return next(a for a in cfg["actions"] if a["name"] == name)


def _table(cfg, name):
    return next(t for t in cfg["pipelines"][0]["tables"] if t["name"] == name)


def metered_router() -> dict:
    """ipv4_forward whose forward action runs a packet meter (colour -> ipv4.diffserv) and a byte
    meter (colour -> ipv4.flags), both indexed by the egress port, and whose LPM table has a direct
    packet meter (colour -> ipv4.identification, written on hits)."""
    cfg = _base()
    cfg["meter_arrays"] = [
        {
            "name": "MyIngress.pkt_meter",
            "id": 0,
            "is_direct": False,
            "size": METER_SIZE,
            "rate_count": 2,
            "type": "packets",
        },
        {
            "name": "MyIngress.byte_meter",
            "id": 1,
            "is_direct": False,
            "size": METER_SIZE,
            "rate_count": 2,
            "type": "bytes",
        },
        {
            "name": "MyIngress.lpm_meter",
            "id": 2,
            "is_direct": True,
            "size": 1024,
            "rate_count": 2,
            "type": "packets",
            "binding": "MyIngress.ipv4_lpm",
            "result_target": ["ipv4", "identification"],
        },
    ]
    fwd = _action(cfg, "MyIngress.ipv4_forward")
    port = {"type": "runtime_data", "value": 1}
    for name, dst in (("MyIngress.pkt_meter", "diffserv"), ("MyIngress.byte_meter", "flags")):
        fwd["primitives"].append(
            {
                "op": "execute_meter",
                "parameters": [{"type": "meter_array", "value": name}, port, {"type": "field", "value": ["ipv4", dst]}],
            }
        )
    _table(cfg, "MyIngress.ipv4_lpm")["direct_meters"] = "MyIngress.lpm_meter"
    return cfg


def selector_router(with_selector=True) -> dict:
    """ipv4_forward whose LPM table takes its actions from an action selector (crc16 over the IPv4
    source address and protocol), or from a plain action profile."""
    cfg = _base()
    profile = {"name": "MyIngress.ecmp", "id": 0, "max_size": 16}
    if with_selector:
        profile["selector"] = {
            "algo": "crc16",
            "input": [
                {"type": "field", "value": ["ipv4", "srcAddr"]},
                {"type": "field", "value": ["ipv4", "protocol"]},
            ],
        }
    cfg["pipelines"][0]["action_profiles"] = [profile]
    t = _table(cfg, "MyIngress.ipv4_lpm")
    t["type"] = "indirect_ws" if with_selector else "indirect"
    t["action_profile"] = "MyIngress.ecmp"
    t.pop("default_entry", None)
    return copy.deepcopy(cfg)


# P4Info id prefixes (p4runtime's p4info.proto P4Ids)
ACTION_PROFILE_ID, METER_ID, DIRECT_METER_ID = 0x11000001, 0x14000001, 0x15000001


def _p4info():
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2

    return text_format.Parse((FIXTURE_BUILD / "ipv4_forward.p4info.txtpb").read_text(), p4info_pb2.P4Info())


def metered_router_p4info():
    """The P4Info p4c writes for metered_router(): two meters and a direct meter on the LPM table."""
    from p4.config.v1 import p4info_pb2

    info = _p4info()
    for k, (name, unit) in enumerate((("MyIngress.pkt_meter", "PACKETS"), ("MyIngress.byte_meter", "BYTES"))):
        m = info.meters.add(size=METER_SIZE)
        m.preamble.id, m.preamble.name, m.preamble.alias = METER_ID + k, name, name.split(".")[1]
        m.spec.unit = p4info_pb2.MeterSpec.Unit.Value(unit)
    lpm = next(t for t in info.tables if t.preamble.name == LPM_TABLE)
    d = info.direct_meters.add(direct_table_id=lpm.preamble.id)
    d.preamble.id, d.preamble.name, d.preamble.alias = DIRECT_METER_ID, "MyIngress.lpm_meter", "lpm_meter"
    d.spec.unit = p4info_pb2.MeterSpec.PACKETS
    lpm.direct_resource_ids.append(DIRECT_METER_ID)
    return info


def selector_router_p4info(with_selector=True):
    """The P4Info p4c writes for selector_router(): the LPM table's implementation is the profile."""
    info = _p4info()
    lpm = next(t for t in info.tables if t.preamble.name == LPM_TABLE)
    ap = info.action_profiles.add(with_selector=with_selector, size=16)
    ap.preamble.id, ap.preamble.name, ap.preamble.alias = ACTION_PROFILE_ID, "MyIngress.ecmp", "ecmp"
    ap.table_ids.append(lpm.preamble.id)
    lpm.implementation_id = ACTION_PROFILE_ID
    return info


def write_program(directory, cfg, p4info, name="program"):
    """(p4info path, json path) of a program written to `directory` (for p4runtime-shell's setup)."""
    from google.protobuf import text_format

    json_path = directory / f"{name}.json"
    json_path.write_text(json.dumps(cfg))
    p4info_path = directory / f"{name}.p4info.txtpb"
    p4info_path.write_text(text_format.MessageToString(p4info))
    return str(p4info_path), str(json_path)
