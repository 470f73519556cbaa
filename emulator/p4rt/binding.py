"""The P4Info <-> engine mapping of one pipeline.

P4Runtime speaks in numeric ids from the P4Info; the engine speaks in the names p4c wrote into the
BMv2 JSON. p4c gives both the same names ("MyIngress.ipv4_lpm"), and lists match fields and action
parameters in the same order, so a binding is a set of id -> name tables plus the widths needed to
decode bytestrings. `bind()` checks every P4Info object against the loaded program and refuses the
pipeline (VERIFY fails) naming the first object that does not agree, so a stale P4Info never reaches
the data plane.
"""

from dataclasses import dataclass, field

from p4.config.v1 import p4info_pb2

from emulator.p4rt.errors import INVALID_ARGUMENT, P4RTError
from emulator.p4rt.value_sets import bind_value_sets

MATCH_KIND = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}
PRIORITY_KINDS = frozenset({"ternary", "range", "optional"})


@dataclass(frozen=True)
class MatchFieldBinding:
    id: int
    name: str
    bitwidth: int
    kind: str  # exact | lpm | ternary | range | optional


@dataclass(frozen=True)
class ParamBinding:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionBinding:
    id: int
    name: str
    params: tuple  # ParamBinding, in declaration order


@dataclass
class TableBinding:
    id: int
    name: str
    match_fields: tuple  # MatchFieldBinding, in key order
    action_scopes: dict  # action id -> ActionRef scope
    const_default_action_id: int
    is_const: bool
    size: int
    direct_counter: str | None = None  # engine name of the direct counter, if any
    direct_meter: str | None = None  # engine name of the direct meter, if any
    action_profile: "ActionProfileBinding | None" = None  # the profile of an indirect table
    needs_priority: bool = False
    field_by_id: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CounterBinding:
    id: int
    name: str
    size: int


@dataclass(frozen=True)
class DirectCounterBinding:
    id: int
    name: str
    table_id: int


@dataclass(frozen=True)
class MeterBinding:
    id: int
    name: str
    size: int
    table_id: int = 0  # a direct meter's table


@dataclass(frozen=True)
class ActionProfileBinding:
    id: int
    name: str
    size: int
    with_selector: bool
    max_group_size: int
    table_ids: tuple


@dataclass(frozen=True)
class RegisterBinding:
    id: int
    name: str
    size: int
    bitwidth: int


@dataclass(frozen=True)
class PacketMetadataBinding:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class DigestBinding:
    id: int
    name: str
    shape: str  # "struct", "tuple" or "bitstring" (P4Info's type_spec), how DigestList data is shaped
    bitwidths: tuple


@dataclass
class PipelineBinding:
    tables: dict = field(default_factory=dict)  # id -> TableBinding
    actions: dict = field(default_factory=dict)  # id -> ActionBinding
    counters: dict = field(default_factory=dict)  # id -> CounterBinding (indirect)
    direct_counters: dict = field(default_factory=dict)  # id -> DirectCounterBinding
    registers: dict = field(default_factory=dict)  # id -> RegisterBinding
    value_sets: dict = field(default_factory=dict)  # id -> value_sets.ValueSetBinding
    digests: dict = field(default_factory=dict)  # id -> DigestBinding
    meters: dict = field(default_factory=dict)  # id -> MeterBinding (indirect)
    direct_meters: dict = field(default_factory=dict)  # id -> MeterBinding (direct)
    action_profiles: dict = field(default_factory=dict)  # id -> ActionProfileBinding
    packet_in: tuple = ()  # PacketMetadataBinding, header order
    packet_out: tuple = ()
    has_packet_out_header: bool = False
    table_by_name: dict = field(default_factory=dict)
    action_by_name: dict = field(default_factory=dict)

    def table(self, table_id: int) -> TableBinding:
        return _by_id(self.tables, table_id, "table")

    def action(self, action_id: int) -> ActionBinding:
        return _by_id(self.actions, action_id, "action")

    def counter(self, counter_id: int) -> CounterBinding:
        return _by_id(self.counters, counter_id, "counter")

    def meter(self, meter_id: int) -> MeterBinding:
        return _by_id(self.meters, meter_id, "meter")

    def action_profile(self, profile_id: int) -> ActionProfileBinding:
        return _by_id(self.action_profiles, profile_id, "action profile")

    def register(self, register_id: int) -> RegisterBinding:
        return _by_id(self.registers, register_id, "register")


def _by_id(bindings: dict, entity_id: int, what: str):
    """The binding of P4Info id `entity_id` among `bindings`; an unknown id is the request's error."""
    try:
        return bindings[entity_id]
    except KeyError:
        raise P4RTError(INVALID_ARGUMENT, f"unknown {what} id {entity_id}") from None


def _refuse(message: str):
    raise P4RTError(INVALID_ARGUMENT, f"P4Info does not match the device config: {message}")


def _register_bitwidth(reg) -> int:
    spec = reg.type_spec
    if spec.HasField("bitstring"):
        kind = spec.bitstring.WhichOneof("type_spec")
        if kind in ("bit", "int"):
            return getattr(spec.bitstring, kind).bitwidth
    _refuse(f"register '{reg.preamble.name}' has a type other than bit<W>/int<W>")


def _bitstring_width(spec, what) -> int:
    kind = spec.WhichOneof("type_spec")
    if kind in ("bit", "int"):
        return getattr(spec, kind).bitwidth
    _refuse(f"{what} is not bit<W>/int<W> (varbit digests are not supported, as in PI)")


def _digest_shape(digest, type_info) -> tuple:
    """(shape, bitwidths) of a P4Info digest's type_spec, as PI's digest manager reads it."""
    spec, name = digest.type_spec, digest.preamble.name
    kind = spec.WhichOneof("type_spec")
    if kind == "bitstring":
        return "bitstring", (_bitstring_width(spec.bitstring, f"digest '{name}'"),)
    if kind == "tuple":
        members = list(spec.tuple.members)
    elif kind == "struct":
        struct = type_info.structs.get(spec.struct.name)
        if struct is None:
            _refuse(f"digest '{name}': struct '{spec.struct.name}' is not in P4Info's type_info")
        members = [m.type_spec for m in struct.members]
    else:
        _refuse(f"digest '{name}' has a type other than a bitstring, tuple or struct")
    widths = []
    for m in members:
        if not m.HasField("bitstring"):
            _refuse(f"digest '{name}' has a member that is not a bitstring")
        widths.append(_bitstring_width(m.bitstring, f"a member of digest '{name}'"))
    return kind, tuple(widths)


def bind(p4info: p4info_pb2.P4Info, program) -> PipelineBinding:
    """Build the id maps of `p4info` and check them against the engine's `program`.

    `program` has `tables`, `actions`, `registers`, `counters` dicts keyed by JSON name
    (see emulator.switch). Raises P4RTError(INVALID_ARGUMENT) naming the first mismatch.
    """
    binding = PipelineBinding()

    for act in p4info.actions:
        name = act.preamble.name
        engine_action = program.actions.get(name)
        if engine_action is None:
            _refuse(f"action '{name}' is not in the device config")
        params = tuple(ParamBinding(p.id, p.name, p.bitwidth) for p in act.params)
        engine_params = list(engine_action.params)
        if len(params) != len(engine_params):
            _refuse(
                f"action '{name}' has {len(params)} parameters in P4Info, {len(engine_params)} in the device config"
            )
        for param, (engine_name, engine_width) in zip(params, engine_params):
            if param.name != engine_name or param.bitwidth != engine_width:
                _refuse(
                    f"action '{name}' parameter '{param.name}' (bit<{param.bitwidth}>) does not "
                    f"match '{engine_name}' (bit<{engine_width}>) in the device config"
                )
        binding.actions[act.preamble.id] = ActionBinding(act.preamble.id, name, params)
        binding.action_by_name[name] = binding.actions[act.preamble.id]

    for tbl in p4info.tables:
        name = tbl.preamble.name
        engine_table = program.tables.get(name)
        if engine_table is None:
            _refuse(f"table '{name}' is not in the device config")
        fields = []
        for mf in tbl.match_fields:
            kind = MATCH_KIND.get(mf.match_type)
            if kind is None:
                _refuse(f"table '{name}' match field '{mf.name}' has an unsupported match type")
            fields.append(MatchFieldBinding(mf.id, mf.name, mf.bitwidth, kind))
        engine_keys = list(engine_table.keys)
        if len(fields) != len(engine_keys):
            _refuse(f"table '{name}' has {len(fields)} match fields in P4Info, {len(engine_keys)} in the device config")
        for mf, key in zip(fields, engine_keys):
            # BMv2 JSON has no `optional` match kind: p4c writes such keys as ternary.
            engine_kind = "optional" if (mf.kind, key.match_type) == ("optional", "ternary") else key.match_type
            if mf.name != key.name or mf.bitwidth != key.bitwidth or mf.kind != engine_kind:
                _refuse(
                    f"table '{name}' match field '{mf.name}' ({mf.kind}, {mf.bitwidth} bits) does "
                    f"not match '{key.name}' ({key.match_type}, {key.bitwidth} bits) "
                    f"in the device config"
                )
        scopes = {}
        for ref in tbl.action_refs:
            act = binding.actions.get(ref.id)
            if act is None:
                _refuse(f"table '{name}' refers to action id {ref.id} that P4Info does not declare")
            if act.name not in engine_table.actions:
                _refuse(f"table '{name}' action '{act.name}' is not an action of that table in the device config")
            scopes[ref.id] = ref.scope
        table = TableBinding(
            id=tbl.preamble.id,
            name=name,
            match_fields=tuple(fields),
            action_scopes=scopes,
            const_default_action_id=tbl.const_default_action_id,
            is_const=bool(tbl.is_const_table or getattr(engine_table, "const_entries", False)),
            size=tbl.size,
            needs_priority=any(f.kind in PRIORITY_KINDS for f in fields),
            field_by_id={f.id: f for f in fields},
        )
        binding.tables[table.id] = table
        binding.table_by_name[name] = table

    for ctr in p4info.counters:
        name = ctr.preamble.name
        engine_counter = program.counters.get(name)
        if engine_counter is None:
            _refuse(f"counter '{name}' is not in the device config")
        if engine_counter.is_direct:
            _refuse(f"counter '{name}' is indirect in P4Info but direct in the device config")
        if ctr.size != engine_counter.size:
            _refuse(f"counter '{name}' has size {ctr.size} in P4Info, {engine_counter.size} in the device config")
        binding.counters[ctr.preamble.id] = CounterBinding(ctr.preamble.id, name, ctr.size)

    for ctr in p4info.direct_counters:
        name = ctr.preamble.name
        engine_counter = program.counters.get(name)
        if engine_counter is None:
            _refuse(f"direct counter '{name}' is not in the device config")
        table = binding.tables.get(ctr.direct_table_id)
        if table is None:
            _refuse(
                f"direct counter '{name}' is attached to table id {ctr.direct_table_id} that P4Info does not declare"
            )
        if not engine_counter.is_direct or engine_counter.table != table.name:
            _refuse(f"direct counter '{name}' is not attached to table '{table.name}' in the device config")
        table.direct_counter = name
        binding.direct_counters[ctr.preamble.id] = DirectCounterBinding(ctr.preamble.id, name, table.id)

    for reg in p4info.registers:
        name = reg.preamble.name
        engine_register = program.registers.get(name)
        if engine_register is None:
            _refuse(f"register '{name}' is not in the device config")
        width = _register_bitwidth(reg)
        if reg.size != engine_register.size or width != engine_register.bitwidth:
            _refuse(
                f"register '{name}' is bit<{width}>[{reg.size}] in P4Info, "
                f"bit<{engine_register.bitwidth}>[{engine_register.size}] in the device config"
            )
        binding.registers[reg.preamble.id] = RegisterBinding(reg.preamble.id, name, reg.size, width)

    binding.value_sets = bind_value_sets(p4info, program, _refuse)
    _bind_meters_and_profiles(p4info, program, binding)

    engine_digests = getattr(program, "digests", {})
    for digest in p4info.digests:
        name = digest.preamble.name
        engine_digest = engine_digests.get(name)
        if engine_digest is None:
            _refuse(f"digest '{name}' is not in the device config (no learn list of that name)")
        shape, widths = _digest_shape(digest, p4info.type_info)
        engine_widths = tuple(w for _, w in engine_digest.fields)
        if widths != engine_widths:
            _refuse(
                f"digest '{name}' has bit widths {list(widths)} in P4Info, {list(engine_widths)} in the device config"
            )
        binding.digests[digest.preamble.id] = DigestBinding(digest.preamble.id, name, shape, widths)

    for header in p4info.controller_packet_metadata:
        metadata = tuple(PacketMetadataBinding(m.id, m.name, m.bitwidth) for m in header.metadata)
        if header.preamble.name == "packet_in":
            binding.packet_in = metadata
        elif header.preamble.name == "packet_out":
            binding.packet_out = metadata
            binding.has_packet_out_header = True

    return binding


_METER_UNITS = {p4info_pb2.MeterSpec.PACKETS: "packets", p4info_pb2.MeterSpec.BYTES: "bytes"}


def _bind_meters_and_profiles(p4info, program, binding) -> None:
    meters = getattr(program, "meters", None) or {}
    for m in p4info.meters:
        name = m.preamble.name
        engine_meter = meters.get(name)
        if engine_meter is None or engine_meter.table is not None:
            _refuse(f"meter '{name}' is not an indirect meter in the device config")
        if m.size != engine_meter.size or _METER_UNITS.get(m.spec.unit) != engine_meter.unit:
            _refuse(
                f"meter '{name}' counts {_METER_UNITS.get(m.spec.unit, 'unknown units')} with size {m.size} in P4Info, "
                f"{engine_meter.unit} with size {engine_meter.size} in the device config"
            )
        binding.meters[m.preamble.id] = MeterBinding(m.preamble.id, name, m.size)
    for m in p4info.direct_meters:
        name = m.preamble.name
        engine_meter = meters.get(name)
        table = binding.tables.get(m.direct_table_id)
        if engine_meter is None or table is None or engine_meter.table != table.name:
            _refuse(f"direct meter '{name}' is not attached to table id {m.direct_table_id} in the device config")
        if _METER_UNITS.get(m.spec.unit) != engine_meter.unit:
            _refuse(f"direct meter '{name}' counts {engine_meter.unit} in the device config")
        table.direct_meter = name
        binding.direct_meters[m.preamble.id] = MeterBinding(m.preamble.id, name, engine_meter.size, table.id)
    profiles = getattr(program, "action_profiles", None) or {}
    for ap in p4info.action_profiles:
        name = ap.preamble.name
        engine_profile = profiles.get(name)
        if engine_profile is None:
            _refuse(f"action profile '{name}' is not in the device config")
        if bool(ap.with_selector) != engine_profile.with_selector:
            _refuse(f"action profile '{name}' {'has' if ap.with_selector else 'lacks'} a selector only in P4Info")
        tables = []
        for tid in ap.table_ids:
            table = binding.tables.get(tid)
            if table is None or table.name not in engine_profile.tables:
                _refuse(f"action profile '{name}' is not used by table id {tid} in the device config")
            tables.append(tid)
        binding.action_profiles[ap.preamble.id] = ActionProfileBinding(
            ap.preamble.id, name, ap.size, bool(ap.with_selector), ap.max_group_size, tuple(tables)
        )
        for tid in tables:
            binding.tables[tid].action_profile = binding.action_profiles[ap.preamble.id]
    for tbl in p4info.tables:
        if tbl.implementation_id and tbl.implementation_id not in binding.action_profiles:
            _refuse(
                f"table '{tbl.preamble.name}' uses implementation id {tbl.implementation_id}, not an action profile"
            )
