"""Loading: the fixtures load; every construct the engine does not execute is a load-time error that
names the construct and where it is (JSON path, P4 source line); malformed input is a LoadError."""

import copy
import json

import pytest

from emulator.errors import LoadError, UnsupportedConstruct
from emulator.switch import SoftwareSwitch
from tests.support.paths import FIXTURE_BUILD

BUILD = FIXTURE_BUILD
FIXTURES = (
    "ipv4_forward",
    "counter_register_multicast",
    "expressions",
    "passes_externs",
    "tables_parser",
    "meters",
    "action_profiles",
)


def cfg(name="ipv4_forward"):
    return json.loads((BUILD / f"{name}.json").read_text())


def action(config, name):
    for i, a in enumerate(config["actions"]):
        if a["name"] == name:
            return i, a
    raise KeyError(name)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_loads_from_path_bytes_and_dict(name):
    path = BUILD / f"{name}.json"
    for source in (path, str(path), path.read_bytes(), cfg(name)):
        sw = SoftwareSwitch.from_json(source)
        assert sw.program.tables and sw.program.actions


def test_program_info_uses_p4info_names():
    info = SoftwareSwitch.from_json(BUILD / "ipv4_forward.json").program
    t = info.tables["MyIngress.ipv4_lpm"]
    assert [tuple(k) for k in t.keys] == [("hdr.ipv4.dstAddr", "lpm", 32)]
    assert set(t.actions) == {"MyIngress.ipv4_forward", "MyIngress.drop", "NoAction"}
    assert t.size == 1024 and t.default_action == ("MyIngress.drop", []) and not t.const_entries
    assert info.actions["MyIngress.ipv4_forward"].params == [("dstAddr", 48), ("port", 9)]
    tags = SoftwareSwitch.from_json(BUILD / "counter_register_multicast.json").program
    assert tags.registers["TagIngress.acc"] == ("TagIngress.acc", 16, 32)
    assert tags.counters["TagIngress.port_pkts"] == ("TagIngress.port_pkts", 8, False, None)
    direct = tags.counters["TagIngress.classify_hits"]
    assert direct.is_direct and direct.table == "TagIngress.classify"
    keys = tags.tables["TagIngress.classify"].keys
    assert [(k.match_type, k.bitwidth) for k in keys] == [("ternary", 8), ("ternary", 48)]
    assert tags.tables["TagIngress.by_value"].keys[0].match_type == "range"


def test_unknown_primitive_is_named_with_its_location():
    c = cfg()
    i, a = action(c, "MyIngress.ipv4_forward")
    a["primitives"].append(
        {
            "op": "frobnicate",
            "parameters": [],
            "source_info": {"filename": "x.p4", "line": 42, "source_fragment": "frob()"},
        }
    )
    with pytest.raises(UnsupportedConstruct) as exc:
        SoftwareSwitch.from_json(c)
    msg = str(exc.value)
    assert "primitive 'frobnicate'" in msg and f"actions[{i}] 'MyIngress.ipv4_forward'" in msg
    assert "x.p4:42" in msg


def _find_op(node, op):
    """The first expression object with this op, anywhere in `node`."""
    if isinstance(node, dict):
        if node.get("op") == op and "left" in node:
            return node
        for v in node.values():
            found = _find_op(v, op)
            if found is not None:
                return found
    elif isinstance(node, list):
        for v in node:
            found = _find_op(v, op)
            if found is not None:
                return found
    return None


def test_unknown_expression_operator_is_named():
    c = cfg()
    _, a = action(c, "MyIngress.ipv4_forward")
    expr = _find_op(a, "+")  # the TTL decrement
    expr["op"] = "**"
    with pytest.raises(UnsupportedConstruct, match=r"expression operator '\*\*'.*MyIngress.ipv4_forward"):
        SoftwareSwitch.from_json(c)


@pytest.mark.parametrize(
    "section, item, words",
    [
        ("extern_instances", {"name": "e", "id": 0, "type": "x", "attribute_values": []}, r"extern instances"),
    ],
)
def test_unsupported_sections_are_refused(section, item, words):
    c = cfg()
    c[section] = [item]
    with pytest.raises(UnsupportedConstruct, match=words):
        SoftwareSwitch.from_json(c)


def test_bad_table_implementations_and_meter_types_are_refused():
    c = cfg()
    table = c["pipelines"][0]["tables"][0]
    table["type"] = "indirect"
    table["action_profile"] = "nowhere"
    with pytest.raises(LoadError, match=rf"table '{table['name']}' uses unknown action profile 'nowhere'"):
        SoftwareSwitch.from_json(c)
    table["type"] = "hashed"
    with pytest.raises(UnsupportedConstruct, match=rf"table implementation 'hashed'.*{table['name']}"):
        SoftwareSwitch.from_json(c)
    c = cfg()
    c["meter_arrays"] = [{"name": "m", "id": 0, "is_direct": False, "size": 4, "rate_count": 2, "type": "tokens"}]
    with pytest.raises(LoadError, match=r"meter type 'tokens'.*meter_arrays\[0\] 'm'"):
        SoftwareSwitch.from_json(c)


def test_malformed_varbits_unions_and_value_sets_are_load_errors():
    c = cfg()
    c["header_types"][-1]["fields"].append(["opts", "*"])  # no max_length
    with pytest.raises(LoadError, match=r"varbit field needs a max_length.*header_types\["):
        SoftwareSwitch.from_json(c)
    c = cfg()
    c["header_types"][-1]["fields"] += [["a", "*"], ["b", "*"]]
    c["header_types"][-1]["max_length"] = 64
    with pytest.raises(LoadError, match=r"more than one variable-length field"):
        SoftwareSwitch.from_json(c)
    c = cfg()
    c["header_unions"] = [{"name": "u", "id": 0, "union_type": "u_t", "header_ids": [999]}]
    with pytest.raises(LoadError, match=r"union 'u': bad member header id 999"):
        SoftwareSwitch.from_json(c)
    c = cfg()
    c["parse_vsets"] = [{"name": "vs", "id": 0, "compressed_bitwidth": 0}]
    with pytest.raises(LoadError, match=r"value set 'vs' has bad compressed_bitwidth"):
        SoftwareSwitch.from_json(c)


def test_unknown_parser_op_and_hash_algorithm_are_refused():
    c = cfg()
    c["parsers"][0]["parse_states"][0]["parser_ops"].append({"op": "teleport", "parameters": []})
    with pytest.raises(UnsupportedConstruct, match=r"parser operation 'teleport' at parsers\[0\]"):
        SoftwareSwitch.from_json(c)
    c = cfg()
    c["calculations"][0]["algo"] = "crc64_custom"
    with pytest.raises(UnsupportedConstruct, match=r"hash algorithm 'crc64_custom'.*calculations\[0\]"):
        SoftwareSwitch.from_json(c)


@pytest.mark.parametrize("version", [[3, 0], [1, 0], [2, 99]])
def test_json_format_version_is_checked(version):
    c = cfg()
    c["__meta__"]["version"] = version
    with pytest.raises(LoadError, match="format version"):
        SoftwareSwitch.from_json(c)


def test_malformed_inputs_are_load_errors(tmp_path):
    with pytest.raises(LoadError, match="not valid JSON"):
        SoftwareSwitch.from_json(b"{nope")
    with pytest.raises(LoadError, match="cannot read"):
        SoftwareSwitch.from_json(tmp_path / "missing.json")
    c = cfg()
    c["pipelines"] = [p for p in c["pipelines"] if p["name"] != "egress"]
    with pytest.raises(LoadError, match="egress"):
        SoftwareSwitch.from_json(c)
    c = cfg()
    _, a = action(c, "MyIngress.ipv4_forward")
    a["primitives"][0]["parameters"][0]["value"] = ["no_such_header", "f"]
    with pytest.raises(LoadError, match="unknown header instance 'no_such_header'"):
        SoftwareSwitch.from_json(c)


def test_the_loaded_config_is_not_modified():
    c = cfg("expressions")
    before = copy.deepcopy(c)
    SoftwareSwitch.from_json(c)
    assert c == before
