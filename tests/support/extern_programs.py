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
