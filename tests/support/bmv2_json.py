"""Small v1model BMv2 JSON programs built in Python, for engine tests of single constructs.

The fixture programs (tests/fixtures/p4, compiled by p4c) are the main material; these hand-built
programs reach what p4c does not emit for v1model or emits only in larger programs (a masked value
set case, push/pop on a union stack, a negative varbit length). They follow p4c-bm2-ss's shapes: the
standard_metadata type, field aliases and error values are taken from a compiled fixture.
"""

import json

from tests.support.paths import FIXTURE_BUILD


def field(header, name):
    return {"type": "field", "value": [header, name]}


def hexv(value):
    return {"type": "hexstr", "value": hex(value)}


def expr(op, left, right):
    return {"type": "expression", "value": {"op": op, "left": left, "right": right}}


def prim(op, *params):
    return {"op": op, "parameters": list(params)}


def state(name, ops=(), key=(), transitions=None):
    """A parse state; `transitions` default to accept."""
    return {
        "name": name,
        "id": 0,
        "parser_ops": list(ops),
        "transition_key": list(key),
        "transitions": transitions or [{"type": "default", "value": None, "mask": None, "next_state": None}],
    }


def case(value, next_state, mask=None, kind="hexstr"):
    return {"type": kind, "value": value, "mask": mask, "next_state": next_state}


def default(next_state=None):
    return {"type": "default", "value": None, "mask": None, "next_state": next_state}


def program(header_types, headers, states, order, ingress=(), egress=(), **sections) -> dict:
    """A v1model program: `header_types` as [(name, fields, extra attributes)], `headers` as
    [(name, type, metadata)], the parser states (the first is the start state), the deparser
    order, and the primitives ingress and egress run (egress_spec is set to 2 before `ingress`)."""
    base = json.loads((FIXTURE_BUILD / "ipv4_forward.json").read_text())
    std = next(t for t in base["header_types"] if t["name"] == "standard_metadata")
    types = [dict(std, id=0)]
    for i, (name, fields, *extra) in enumerate(header_types, 1):
        types.append({"name": name, "id": i, "fields": [list(f) for f in fields], **(extra[0] if extra else {})})
    instances = [{"name": "standard_metadata", "id": 0, "header_type": "standard_metadata", "metadata": True}]
    for i, (name, htype, metadata) in enumerate(headers, 1):
        instances.append({"name": name, "id": i, "header_type": htype, "metadata": metadata})
    to_port_2 = prim("assign", field("standard_metadata", "egress_spec"), hexv(2))

    def pipeline(name, pid, action_id):
        call = {"name": f"call_{name}", "id": pid, "action_id": action_id, "next_node": None}
        return {
            "name": name,
            "id": pid,
            "init_table": call["name"],
            "tables": [],
            "action_profiles": [],
            "conditionals": [],
            "action_calls": [call],
        }

    cfg = {
        "__meta__": {"version": [2, 23], "compiler": "tests/support/bmv2_json.py"},
        "header_types": types,
        "headers": instances,
        "header_stacks": [],
        "header_union_types": [],
        "header_unions": [],
        "header_union_stacks": [],
        "field_lists": [],
        "errors": base["errors"],
        "enums": [],
        "parsers": [{"name": "parser", "id": 0, "init_state": states[0]["name"], "parse_states": list(states)}],
        "parse_vsets": [],
        "deparsers": [{"name": "deparser", "id": 0, "order": list(order), "primitives": []}],
        "meter_arrays": [],
        "counter_arrays": [],
        "register_arrays": [],
        "calculations": [],
        "learn_lists": [],
        "actions": [
            {"name": "ingress_body", "id": 0, "runtime_data": [], "primitives": [to_port_2, *ingress]},
            {"name": "egress_body", "id": 1, "runtime_data": [], "primitives": list(egress)},
        ],
        "pipelines": [pipeline("ingress", 0, 0), pipeline("egress", 1, 1)],
        "checksums": [],
        "force_arith": [],
        "extern_instances": [],
        "field_aliases": base["field_aliases"],
    }
    cfg.update(sections)
    return cfg
