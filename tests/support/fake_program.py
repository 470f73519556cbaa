"""A stand-in engine and its P4Info, so the P4Runtime server is tested apart from the real engine.

FakeSwitch has the engine's API (emulator.switch.SoftwareSwitch) over plain dicts; its program has
one table of each match kind, a direct and an indirect counter, a register, and controller headers.
`fake_p4info()` is the P4Info p4c would write for it. This module holds no tests.
"""

from collections import namedtuple

from p4.config.v1 import p4info_pb2

from emulator.p4rt.entities import EngineEntryError

KeyInfo = namedtuple("KeyInfo", "name match_type bitwidth")
TableInfo = namedtuple("TableInfo", "name keys actions size default_action const_entries")
ActionInfo = namedtuple("ActionInfo", "name params")
RegisterInfo = namedtuple("RegisterInfo", "name size bitwidth")
CounterInfo = namedtuple("CounterInfo", "name size is_direct table")
TableEntry = namedtuple("TableEntry", "keys action params priority")
Program = namedtuple("Program", "tables actions registers counters")

FAKE_JSON = b'{"fake_program": 1}'
CPU_PORT = 64


class EntryError(EngineEntryError):
    """The engine's EntryError, with its `code` (a google.rpc code name)."""

    def __init__(self, message, code="INVALID_ARGUMENT"):
        Exception.__init__(self, message)
        self.code = code


def fake_program() -> Program:
    actions = {
        "NoAction": ActionInfo("NoAction", []),
        "MyIngress.forward": ActionInfo("MyIngress.forward", [("port", 9)]),
        "MyIngress.set_dmac": ActionInfo("MyIngress.set_dmac", [("dmac", 48)]),
        "MyIngress.drop": ActionInfo("MyIngress.drop", []),
    }
    tables = {
        "MyIngress.ipv4_lpm": TableInfo(
            "MyIngress.ipv4_lpm",
            [KeyInfo("hdr.ipv4.dstAddr", "lpm", 32)],
            ["MyIngress.forward", "MyIngress.drop", "NoAction"],
            1024,
            ("MyIngress.drop", []),
            False,
        ),
        "MyIngress.acl": TableInfo(
            "MyIngress.acl",
            [
                KeyInfo("hdr.ipv4.srcAddr", "ternary", 32),
                KeyInfo("hdr.udp.dstPort", "range", 16),
                KeyInfo("standard_metadata.ingress_port", "optional", 9),
            ],
            ["MyIngress.drop", "NoAction"],
            64,
            ("NoAction", []),
            False,
        ),
        "MyIngress.dmac": TableInfo(
            "MyIngress.dmac",
            [KeyInfo("standard_metadata.egress_spec", "exact", 9)],
            ["MyIngress.set_dmac", "NoAction"],
            64,
            ("NoAction", []),
            False,
        ),
        "MyIngress.fixed": TableInfo(
            "MyIngress.fixed",
            [KeyInfo("hdr.ethernet.etherType", "exact", 16)],
            ["MyIngress.drop", "NoAction"],
            4,
            ("NoAction", []),
            True,
        ),
    }
    counters = {
        "MyIngress.port_pkts": CounterInfo("MyIngress.port_pkts", 8, False, None),
        "MyIngress.lpm_hits": CounterInfo("MyIngress.lpm_hits", 1024, True, "MyIngress.ipv4_lpm"),
    }
    registers = {"MyIngress.sums": RegisterInfo("MyIngress.sums", 4, 32)}
    return Program(tables, actions, registers, counters)


class FakeSwitch:
    """Engine API over dicts. Packets: port 1..8 frames go out unchanged on `forward_to`;
    frames from the CPU port carry a 2-byte packet_out header (egress_port:9, flags:3, pad:4)."""

    def __init__(self):
        self.program = fake_program()
        self.entries = {t: {} for t in self.program.tables}  # table -> {(keys, prio): (action, params)}
        self.defaults = {t: tuple(info.default_action) for t, info in self.program.tables.items()}
        self.registers = {r: [0] * info.size for r, info in self.program.registers.items()}
        self.counters = {c: [(0, 0)] * info.size for c, info in self.program.counters.items() if not info.is_direct}
        self.direct_hits = {}  # (table, keys, prio) -> (packets, bytes)
        self.groups = {}
        self.entries["MyIngress.fixed"][((0x0806,), None)] = ("MyIngress.drop", [])
        self.forward_to = 2
        self.processed = []

    @classmethod
    def from_json(cls, path_or_dict):
        if path_or_dict != {"fake_program": 1}:
            raise ValueError("not the fake program")
        return cls()

    @staticmethod
    def _ident(keys, priority):
        return tuple(k if isinstance(k, int) else tuple(k) for k in keys), priority

    def _check(self, table, action, params):
        info = self.program.tables[table]
        if action not in info.actions:
            raise EntryError(f"action {action} not in table {table}")
        if len(params) != len(self.program.actions[action].params):
            raise EntryError("wrong number of params")

    def table_add(self, table, keys, action, params, priority=None):
        self._check(table, action, params)
        ident = self._ident(keys, priority)
        if ident in self.entries[table]:
            raise EntryError(f"entry already exists in {table}", "ALREADY_EXISTS")
        if len(self.entries[table]) >= self.program.tables[table].size:
            raise EntryError(f"table {table} is full", "RESOURCE_EXHAUSTED")
        self.entries[table][ident] = (action, list(params))

    def table_modify(self, table, keys, action, params, priority=None):
        self._check(table, action, params)
        ident = self._ident(keys, priority)
        if ident not in self.entries[table]:
            raise EntryError(f"entry not found in {table}", "NOT_FOUND")
        self.entries[table][ident] = (action, list(params))

    def table_delete(self, table, keys, priority=None):
        ident = self._ident(keys, priority)
        if ident not in self.entries[table]:
            raise EntryError(f"entry not found in {table}", "NOT_FOUND")
        del self.entries[table][ident]

    def table_entries(self, table):
        return [TableEntry(list(k), a, list(p), prio) for (k, prio), (a, p) in self.entries[table].items()]

    def table_clear(self, table):
        self.entries[table].clear()

    def table_set_default(self, table, action, params):
        self._check(table, action, params)
        self.defaults[table] = (action, list(params))

    def table_get_default(self, table):
        return self.defaults[table]

    def table_reset_default(self, table):
        self.defaults[table] = tuple(self.program.tables[table].default_action)

    def register_read(self, name, index):
        return self.registers[name][index]

    def register_write(self, name, index, value):
        self.registers[name][index] = value

    def register_reset(self, name):
        self.registers[name] = [0] * len(self.registers[name])

    def counter_read(self, name, index):
        return self.counters[name][index]

    def counter_write(self, name, index, packets, nbytes):
        self.counters[name][index] = (packets, nbytes)

    def counter_reset(self, name):
        self.counters[name] = [(0, 0)] * len(self.counters[name])

    def direct_counter_read(self, table, keys, priority=None):
        ident = self._ident(keys, priority)
        if ident not in self.entries[table]:
            raise EntryError(f"entry not found in {table}", "NOT_FOUND")
        return self.direct_hits.get((table,) + ident, (0, 0))

    def direct_counter_write(self, table, keys, packets, nbytes, priority=None):
        self.direct_counter_read(table, keys, priority)  # NOT_FOUND for a missing entry
        self.direct_hits[(table,) + self._ident(keys, priority)] = (packets, nbytes)

    def mc_group_set(self, group_id, replicas):
        self.groups[group_id] = list(replicas)

    def mc_group_delete(self, group_id):
        del self.groups[group_id]

    def mc_groups(self):
        return {g: list(r) for g, r in self.groups.items()}

    @property
    def stats(self):
        return {"packets": len(self.processed)}

    def process(self, port, frame):
        self.processed.append((port, frame))
        if port == CPU_PORT:
            header = int.from_bytes(frame[:2], "big")
            return [(header >> 7, frame[2:])]
        if b"TO_CPU" in frame:
            # packet_in header: ingress_port:9, reason:7
            return [(CPU_PORT, ((port << 7) | 5).to_bytes(2, "big") + frame)]
        return [(self.forward_to, frame)]


def _preamble(obj, id_, name):
    obj.preamble.id = id_
    obj.preamble.name = name
    obj.preamble.alias = name.split(".")[-1]


TABLE_IDS = {
    "MyIngress.ipv4_lpm": 33554433,
    "MyIngress.acl": 33554434,
    "MyIngress.dmac": 33554435,
    "MyIngress.fixed": 33554436,
}
ACTION_IDS = {
    "NoAction": 16777217,
    "MyIngress.forward": 16777218,
    "MyIngress.set_dmac": 16777219,
    "MyIngress.drop": 16777220,
}
COUNTER_ID = 302011111
DIRECT_COUNTER_ID = 318767105
REGISTER_ID = 369098753


def fake_p4info() -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    program = fake_program()
    for name, action in program.actions.items():
        a = info.actions.add()
        _preamble(a, ACTION_IDS[name], name)
        for i, (pname, width) in enumerate(action.params, 1):
            a.params.add(id=i, name=pname, bitwidth=width)
    kinds = {
        "exact": p4info_pb2.MatchField.EXACT,
        "lpm": p4info_pb2.MatchField.LPM,
        "ternary": p4info_pb2.MatchField.TERNARY,
        "range": p4info_pb2.MatchField.RANGE,
        "optional": p4info_pb2.MatchField.OPTIONAL,
    }
    for name, table in program.tables.items():
        t = info.tables.add()
        _preamble(t, TABLE_IDS[name], name)
        for i, key in enumerate(table.keys, 1):
            t.match_fields.add(id=i, name=key.name, bitwidth=key.bitwidth, match_type=kinds[key.match_type])
        for action in table.actions:
            ref = t.action_refs.add(id=ACTION_IDS[action])
            if action == "NoAction" and name == "MyIngress.ipv4_lpm":
                ref.scope = p4info_pb2.ActionRef.DEFAULT_ONLY
        t.size = table.size
        if name == "MyIngress.dmac":
            t.const_default_action_id = ACTION_IDS["NoAction"]
        if name == "MyIngress.fixed":
            t.is_const_table = True
        if name == "MyIngress.ipv4_lpm":
            t.direct_resource_ids.append(DIRECT_COUNTER_ID)
    c = info.counters.add()
    _preamble(c, COUNTER_ID, "MyIngress.port_pkts")
    c.spec.unit = p4info_pb2.CounterSpec.BOTH
    c.size = 8
    d = info.direct_counters.add()
    _preamble(d, DIRECT_COUNTER_ID, "MyIngress.lpm_hits")
    d.spec.unit = p4info_pb2.CounterSpec.BOTH
    d.direct_table_id = TABLE_IDS["MyIngress.ipv4_lpm"]
    r = info.registers.add()
    _preamble(r, REGISTER_ID, "MyIngress.sums")
    r.type_spec.bitstring.bit.bitwidth = 32
    r.size = 4
    pin = info.controller_packet_metadata.add()
    _preamble(pin, 67146229, "packet_in")
    pin.metadata.add(id=1, name="ingress_port", bitwidth=9)
    pin.metadata.add(id=2, name="reason", bitwidth=7)
    pout = info.controller_packet_metadata.add()
    _preamble(pout, 67121543, "packet_out")
    pout.metadata.add(id=1, name="egress_port", bitwidth=9)
    pout.metadata.add(id=2, name="flags", bitwidth=3)
    return info
