"""BMv2 JSON (p4c-bm2-ss, v1model) -> CompiledProgram: generated functions plus run-time objects.

Everything the JSON contains is either compiled or refused here, at load time: a construct this
engine does not execute raises UnsupportedConstruct naming it and its JSON path (and P4 source line
when p4c recorded one), so a loaded program never silently behaves differently from BMv2.
"""

import hashlib
import logging
from dataclasses import dataclass, field

from emulator.engine import expressions, runtime, varbit
from emulator.engine.action_profiles import IndirectTable
from emulator.engine.calculations import compile_calculation, hash_function
from emulator.engine.codegen import Namespace, Source, annotate_fields, compile_into
from emulator.engine.control_gen import ChecksumGen, PipelineGen, generate_deparser
from emulator.engine.hashes import CustomCrc
from emulator.engine.jsonutil import hexstr, malformed, unsupported, where
from emulator.engine.layout import build_layout
from emulator.engine.learning import DigestQueue, load_learn_lists
from emulator.engine.meter_profile_json import (
    bind_direct_meters,
    bind_selectors,
    build_action_profiles,
    build_meter_arrays,
)
from emulator.engine.meters import MeterClock
from emulator.engine.mirroring import MirrorSessions
from emulator.engine.parser_gen import ParserGen
from emulator.engine.pre import ReplicationEngine
from emulator.engine.primitives import ActionBody, ActionEnv
from emulator.engine.stateful import CounterArray, RegisterArray
from emulator.engine.tables import BMV2_MAX_PRIORITY, ActionRef, KeyField, MatchTable
from emulator.engine.valuesets import ValueSet
from emulator.errors import EntryError, LoadError
from emulator.program import (
    ActionInfo,
    ActionProfileInfo,
    CounterInfo,
    DigestInfo,
    MeterInfo,
    ProgramInfo,
    RegisterInfo,
    TableInfo,
    ValueSetInfo,
)

log = logging.getLogger("emulator.switch")
trace_log = logging.getLogger("emulator.trace")

SUPPORTED_MAJOR = 2
MAX_MINOR = 24  # the JSON format version documented by behavioral-model (docs/JSON_format.md)
CORE_ERRORS = (
    "NoError",
    "PacketTooShort",
    "NoMatch",
    "StackOutOfBounds",
    "HeaderTooShort",
    "ParserTimeout",
    "ParserInvalidArgument",
)


class CompiledAction:
    """One JSON action: its generated function `A_<id>(F, P)` and how to inline it."""

    def __init__(self, j: dict, index: int, env: ActionEnv):
        self.json = j
        self.name = j.get("name")
        self.id = j.get("id", index)
        self.path = f"actions[{index}] '{self.name}'"
        self.params = []
        for k, p in enumerate(j.get("runtime_data", [])):
            width = p.get("bitwidth")
            if not isinstance(width, int) or width < 0:
                raise malformed(f"parameter {k} has bad bitwidth {width!r}", self.path, j)
            self.params.append((p.get("name", f"p{k}"), width))
        self.fname = f"A_{self.id}"
        self.env = env
        self.uses_exit = False
        self.inlinable = True
        self._size = None

    @property
    def widths(self):
        return [w for _, w in self.params]

    def generate(self, src) -> None:
        body = ActionBody(self.env, self.path, params=self.widths)
        src.emit(f"def {self.fname}(F, P):")
        with src.indent():
            src.emit(f"# action {self.name}")
            n = len(self.params)
            if n == 1:
                src.emit("p0 = P[0]")
            elif n > 1:
                src.emit(f"{', '.join(f'p{i}' for i in range(n))} = P")
            body.emit(src, self.json.get("primitives", []))
        src.emit()
        self.uses_exit = body.uses_exit
        self.inlinable = not body.uses_return

    def emit_inline(self, src, params) -> None:
        """The body with constant action data, for keyless tables whose default is const."""
        values = list(params)
        body = ActionBody(self.env, self.path, params=self.widths, param_src=lambda i: str(values[i]))
        src.emit(f"# action {self.name}{tuple(values)!r}")
        body.emit(src, self.json.get("primitives", []))

    def emit_inline_data(self, src, data_var: str) -> None:
        """The body reading its action data from the tuple in `data_var` (a table entry's params)."""
        body = ActionBody(self.env, self.path, params=self.widths, param_src=lambda i: f"{data_var}[{i}]")
        body.emit(src, self.json.get("primitives", []))

    def inline_size(self) -> int:
        """Statements the body compiles to (for deciding whether to inline it into a table apply)."""
        if self._size is None:
            trial = Source()
            ActionBody(self.env, self.path, params=self.widths).emit(trial, self.json.get("primitives", []))
            self._size = len(trial.lines)
        return self._size


@dataclass
class StdFields:
    """simple_switch's intrinsic fields (resolved through field_aliases); None when absent."""

    ingress_port: object = None
    packet_length: object = None
    instance_type: object = None
    egress_spec: object = None
    egress_port: object = None
    mcast_grp: object = None
    egress_rid: object = None
    parser_error: object = None
    checksum_error: object = None
    ingress_ts: object = None
    egress_ts: object = None
    enq_timestamp: object = None
    enq_qdepth: object = None
    deq_timedelta: object = None
    deq_qdepth: object = None
    priority: object = None


@dataclass
class CompiledProgram:
    info: ProgramInfo
    layout: object
    std: StdFields
    tables: dict  # name -> MatchTable
    registers: dict  # name -> RegisterArray
    counters: dict  # name -> CounterArray (indirect)
    direct_counters: dict  # counter name -> table name
    field_lists: dict  # id -> [slot]
    errors: dict  # error name -> value
    fns: dict  # generated functions by name
    payload_box: list
    runtime_counters: runtime.RuntimeCounters
    source: str
    pre: ReplicationEngine = field(default_factory=ReplicationEngine)
    meters: dict = field(default_factory=dict)  # name -> MeterArray (indirect and direct)
    meter_clock: MeterClock = field(default_factory=MeterClock)
    action_profiles: dict = field(default_factory=dict)  # name -> ActionProfile
    queueing: bool = False
    has_verify: bool = False
    value_sets: dict = field(default_factory=dict)  # name -> ValueSet
    hashes: dict = field(default_factory=dict)  # calculation name -> its hash function (custom CRCs)
    learn_lists: dict = field(default_factory=dict)  # id -> learning.LearnList
    mirror: MirrorSessions = field(default_factory=MirrorSessions)
    digests: DigestQueue = field(default_factory=DigestQueue)


def _check_version(cfg):
    meta = cfg.get("__meta__")
    if not isinstance(meta, dict) or "version" not in meta:
        log.warning("BMv2 JSON has no __meta__.version: assuming a compatible format")
        return
    version = meta["version"]
    if not isinstance(version, list) or len(version) != 2 or not all(isinstance(v, int) for v in version):
        raise malformed(f"__meta__.version {version!r}", "__meta__")
    major, minor = version
    if major != SUPPORTED_MAJOR or minor > MAX_MINOR:
        raise LoadError(
            f"BMv2 JSON format version {major}.{minor} is not supported "
            f"(supported: {SUPPORTED_MAJOR}.0 to {SUPPORTED_MAJOR}.{MAX_MINOR})"
        )


def _refuse_unsupported_sections(cfg):
    for key, what in (("extern_instances", "extern instances"),):
        items = cfg.get(key) or []
        if items:
            first = items[0]
            name = first.get("name") if isinstance(first, dict) else first
            raise unsupported(f"{what} ('{name}')", f"{key}[0]", first)


def _named(items, name, section):
    for i, item in enumerate(items):
        if item.get("name") == name:
            return i, item
    raise LoadError(
        f"malformed BMv2 JSON: no {section[:-1]} named '{name}' "
        f"(simple_switch needs {section} 'parser', 'ingress', 'egress', 'deparser')"
    )


def _errors(cfg):
    errors = {}
    for i, e in enumerate(cfg.get("errors", [])):
        if not isinstance(e, list) or len(e) != 2 or not isinstance(e[1], int):
            raise malformed("error must be [name, value]", f"errors[{i}]")
        errors[e[0]] = e[1]
    nxt = max(errors.values(), default=-1) + 1
    for name in CORE_ERRORS:
        if name not in errors:
            errors[name] = nxt
            nxt += 1
    return errors


def _build_table(t, path, actions_by_id, actions_by_name, layout, counters_json, profiles=None):
    ttype = t.get("type", "simple")
    if ttype not in ("simple", "indirect", "indirect_ws"):
        raise unsupported(f"table implementation '{ttype}' of table '{t.get('name')}'", path, t)
    profile = None
    if ttype != "simple":
        profile = (profiles or {}).get(t.get("action_profile"))
        if profile is None:
            raise malformed(f"table '{t.get('name')}' uses unknown action profile {t.get('action_profile')!r}", path, t)
        if ttype == "indirect_ws" and not profile.has_selector:
            raise malformed(f"table '{t.get('name')}' is indirect_ws but '{profile.name}' has no selector", path, t)
    name = t.get("name")
    keys = []
    kinds = set()
    for k, kj in enumerate(t.get("key", [])):
        kpath = f"{path}.key[{k}]"
        mt = kj.get("match_type")
        if mt not in ("exact", "lpm", "ternary", "range", "valid"):
            raise unsupported(f"match type '{mt}'", kpath, kj)
        kinds.add(mt)
        if mt == "valid":
            h = layout.header(kj.get("target"), kpath)
            keys.append(KeyField(kj.get("name", h.name), "valid", 1, None))
            continue
        target = kj.get("target")
        if not isinstance(target, list) or len(target) != 2:
            raise malformed("key target must be [header, field]", kpath, kj)
        ref = layout.field(target[0], target[1], kpath)
        mask = kj.get("mask")
        keys.append(
            KeyField(
                kj.get("name", f"{target[0]}.{target[1]}"),
                mt,
                ref.width,
                None if mask is None else hexstr(mask, kpath) & ref.mask,
            )
        )
    if sum(1 for k in keys if k.match_type == "lpm") > 1:
        raise malformed(f"table '{name}' has more than one lpm key", path, t)
    derived = "range" if "range" in kinds else "ternary" if "ternary" in kinds else "lpm" if "lpm" in kinds else "exact"
    kind = t.get("match_type", derived)
    if kind not in ("exact", "lpm", "ternary", "range") or (
        keys and kind != derived and not (kind == "ternary" and derived == "lpm")
    ):
        raise malformed(f"table match_type '{kind}' does not fit its keys ({derived})", path, t)
    if kind == "ternary" and any(k.match_type == "range" for k in keys):
        raise malformed("ternary table with a range key", path, t)

    refs = {}
    if "action_ids" in t:
        for aid in t["action_ids"]:
            action = actions_by_id.get(aid)
            if action is None:
                raise malformed(f"unknown action id {aid}", path, t)
            refs[action.name] = ActionRef(action.name, action.id, None, action.params)
    else:
        for aname in t.get("actions", []):
            action = actions_by_name.get(aname)
            if action is None:
                raise malformed(f"unknown action '{aname}'", path, t)
            refs[action.name] = ActionRef(action.name, action.id, None, action.params)

    size = t.get("max_size", 1024)
    with_counters = bool(t.get("with_counters", False))
    if with_counters and not any(c.get("is_direct") and c.get("binding") == name for c in counters_json):
        raise malformed(f"table '{name}' has with_counters but no direct counter is bound to it", path, t)
    if t.get("support_timeout"):
        log.info("table '%s': idle timeout is ignored by the software switch", name)
    hidden = not keys and "." not in name
    if profile is not None:
        if "entries" in t:
            raise unsupported(f"const entries in table '{name}' with an action profile", path, t)
        table = IndirectTable(name, keys, kind, refs, size, with_counters, False, hidden, profile=profile)
        profile.tables.append(table)
        for ref in refs.values():
            profile.actions.setdefault(ref.name, ref)
        return table
    return MatchTable(name, keys, kind, refs, size, with_counters, immutable="entries" in t, hidden=hidden)


def _hexdata(data, widths, path):
    values = [hexstr(v, path) for v in data]
    if len(values) != len(widths):
        raise malformed(f"{len(values)} action data values for {len(widths)} parameters", path)
    return [v & ((1 << w) - 1) for v, w in zip(values, widths)]


def _set_defaults_and_entries(table, t, path, actions_by_id):
    """Install the JSON default entry and const entries (after action functions exist)."""
    table.reset_default()
    for i, e in enumerate(t.get("entries", [])):
        epath = f"{path}.entries[{i}]"
        match_key = e.get("match_key", [])
        if len(match_key) != len(table.keys):
            raise malformed(f"{len(match_key)} key fields for {len(table.keys)}", epath, e)
        keys = []
        for k, (mk, field_) in enumerate(zip(match_key, table.keys)):
            mt = mk.get("match_type")
            if mt != field_.match_type:
                raise malformed(f"key field {k} is {mt}, the table says {field_.match_type}", epath, e)
            if mt == "valid":
                keys.append(bool(mk.get("key")))
            elif mt == "exact":
                keys.append(hexstr(mk.get("key"), epath))
            elif mt == "lpm":
                keys.append((hexstr(mk.get("key"), epath), mk.get("prefix_length")))
            elif mt == "ternary":
                keys.append((hexstr(mk.get("key"), epath), hexstr(mk.get("mask"), epath)))
            else:
                keys.append((hexstr(mk.get("start"), epath), hexstr(mk.get("end"), epath)))
        ae = e.get("action_entry", {})
        action = actions_by_id.get(ae.get("action_id"))
        if action is None:
            raise malformed(f"entry action id {ae.get('action_id')!r} is unknown", epath, e)
        params = _hexdata(ae.get("action_data", []), action.widths, epath)
        priority = None
        if table.needs_priority():
            bmv2 = e.get("priority", i + 1)
            priority = BMV2_MAX_PRIORITY - bmv2  # P4Runtime convention, as PI converts it
        try:
            table.add(keys, action.name, params, priority, force=True)
        except EntryError as exc:
            raise LoadError(f"malformed BMv2 JSON: const entry at {where(epath, e)}: {exc}") from None


def compile_program(cfg: dict, drop_port: int = 511) -> CompiledProgram:
    if not isinstance(cfg, dict):
        raise LoadError("malformed BMv2 JSON: the top level must be an object")
    _check_version(cfg)
    _refuse_unsupported_sections(cfg)
    layout = build_layout(cfg)
    errors = _errors(cfg)
    rt_counters = runtime.RuntimeCounters()
    helpers = dict(expressions.HELPERS)
    helpers.update(runtime.make_helpers(rt_counters))
    helpers.update(varbit.HELPERS)
    payload_box = [b""]
    helpers["PAYLOAD"] = payload_box
    helpers["_trace_logger"] = trace_log
    ns = Namespace(helpers)
    src = Source()

    registers = {}
    for r in cfg.get("register_arrays", []):
        registers[r["name"]] = RegisterArray(r["name"], r.get("size", 0), r.get("bitwidth", 0))
    counters, direct = {}, {}
    counters_json = cfg.get("counter_arrays", [])
    for c in counters_json:
        if c.get("is_direct"):
            direct[c["name"]] = c.get("binding")
        else:
            counters[c["name"]] = CounterArray(c["name"], c.get("size", 0))

    calculations, hashes = {}, {}
    for i, calc in enumerate(cfg.get("calculations", [])):
        fn = hash_function(calc, f"calculations[{i}]", rt_counters.next_random)
        hashes[calc.get("name")] = fn
        calculations[calc.get("name")] = compile_calculation(calc, i, layout, ns, src, fn)
    value_sets = _value_sets(cfg)
    meter_clock = MeterClock()
    meters, direct_meters = build_meter_arrays(cfg, layout, meter_clock)

    env = ActionEnv(layout, ns, registers, counters, calculations, drop_port)
    env.meters = meters
    actions_by_id, actions_by_name = {}, {}
    for i, a in enumerate(cfg.get("actions", [])):
        action = CompiledAction(a, i, env)
        if action.id in actions_by_id:
            raise malformed(f"duplicate action id {action.id}", f"actions[{i}]", a)
        action.generate(src)
        actions_by_id[action.id] = action
        actions_by_name.setdefault(action.name, action)

    tables, table_json, profiles = {}, {}, {}
    pipelines = cfg.get("pipelines", [])
    for p_index, p in enumerate(pipelines):
        ppath = f"pipelines[{p_index}] '{p.get('name')}'"
        profiles.update(build_action_profiles(p, ppath, cfg, layout, ns, src, rt_counters.next_random))
        for t_index, t in enumerate(p.get("tables", [])):
            tpath = f"{ppath}.tables[{t_index}] '{t.get('name')}'"
            if t.get("name") in tables:
                raise malformed(f"duplicate table name '{t.get('name')}'", tpath, t)
            tables[t["name"]] = _build_table(t, tpath, actions_by_id, actions_by_name, layout, counters_json, profiles)
            table_json[t["name"]] = (tables[t["name"]], t, tpath)
    bind_direct_meters(direct_meters, tables, table_json)
    for name, binding in direct.items():
        if binding not in tables:
            raise malformed(f"direct counter '{name}' is bound to unknown table {binding!r}", "counter_arrays")

    parsers = cfg.get("parsers", [])
    p_index, parser = _named(parsers, "parser", "parsers")
    codecs = {}
    pgen = ParserGen(parser, f"parsers[{p_index}]", layout, ns, env, errors, codecs, value_sets)
    pgen.generate(src)

    checksums = ChecksumGen(cfg, layout, ns, calculations)
    checksums.generate_verify(src)
    d_index, deparser = _named(cfg.get("deparsers", []), "deparser", "deparsers")
    generate_deparser(src, deparser, f"deparsers[{d_index}]", env, codecs, checksums)

    # actions must be known to tables before the pipelines are generated (inlining, exit analysis)
    for table, t, tpath in table_json.values():
        _set_defaults_and_entries_early(table, t, tpath, actions_by_id)
    for pipe_name in ("ingress", "egress"):
        i, p = _named(pipelines, pipe_name, "pipelines")
        ppath = f"pipelines[{i}] '{pipe_name}'"
        for trace, suffix in ((False, ""), (True, "_t")):
            gen = PipelineGen(p, ppath, layout, ns, table_json, actions_by_id, trace)
            gen.generate(src, pipe_name + suffix)

    source = annotate_fields(src.text(), layout.slot_names())
    ns.globals["_trace"] = _make_trace()
    ns.globals["_hexkey"] = _hexkey
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    fns = compile_into(ns, source, f"<bmv2 program {cfg.get('program', 'p4')} {digest}>")

    bind_selectors(profiles, fns)
    # bind the generated action functions into tables, then load defaults and const entries
    for action in actions_by_id.values():
        action.fn = fns[action.fname]
    for table in tables.values():
        for ref in table.actions.values():
            ref.fn = actions_by_id[ref.id].fn
    for table, t, tpath in table_json.values():
        _set_defaults_and_entries(table, t, tpath, actions_by_id)

    std = _std_fields(layout)
    field_lists = {}
    for i, fl in enumerate(cfg.get("field_lists", [])):
        slots = []
        for j, el in enumerate(fl.get("elements", [])):
            if el.get("type") != "field":
                raise unsupported(f"field list element type '{el.get('type')}'", f"field_lists[{i}].elements[{j}]")
            slots.append(layout.field(el["value"][0], el["value"][1], f"field_lists[{i}]").slot)
        field_lists[fl.get("id", i)] = slots

    learn_lists = load_learn_lists(cfg, layout)
    info = _program_info(cfg, tables, actions_by_id, registers, counters, direct, table_json)
    info = info._replace(
        value_sets={n: ValueSetInfo(n, v.bitwidth, v.max_size) for n, v in value_sets.items()},
        custom_crcs={n: fn.width for n, fn in hashes.items() if isinstance(fn, CustomCrc)},
        digests={ll.name: DigestInfo(ll.name, ll.id, list(ll.fields)) for ll in learn_lists.values()},
        meters={
            n: MeterInfo(n, m.size, m.unit, m.table.name if m.table is not None else None) for n, m in meters.items()
        },
        action_profiles={
            n: ActionProfileInfo(n, p.size, [t.name for t in p.tables], p.has_selector) for n, p in profiles.items()
        },
    )
    queueing = all(getattr(std, f) is not None for f in ("enq_timestamp", "enq_qdepth", "deq_timedelta", "deq_qdepth"))
    pre = ReplicationEngine(
        port_bits=std.egress_port.width, rid_bits=std.egress_rid.width if std.egress_rid is not None else 16
    )
    return CompiledProgram(
        info=info,
        layout=layout,
        std=std,
        tables=tables,
        registers=registers,
        counters=counters,
        direct_counters=direct,
        field_lists=field_lists,
        errors=errors,
        fns=fns,
        payload_box=payload_box,
        runtime_counters=rt_counters,
        source=source,
        pre=pre,
        meters=meters,
        meter_clock=meter_clock,
        action_profiles=profiles,
        queueing=queueing,
        has_verify=checksums.has_verify,
        value_sets=value_sets,
        hashes=hashes,
        learn_lists=learn_lists,
        mirror=MirrorSessions(port_bits=std.egress_port.width),
    )


def _value_sets(cfg) -> dict:
    sets = {}
    for i, v in enumerate(cfg.get("parse_vsets", [])):
        path = f"parse_vsets[{i}]"
        width = v.get("compressed_bitwidth")
        if not isinstance(width, int) or width <= 0:
            raise malformed(f"value set {v.get('name')!r} has bad compressed_bitwidth {width!r}", path, v)
        max_size = v.get("max_size")
        sets[v.get("name")] = ValueSet(v.get("name"), v.get("id", i), width, max_size if max_size else None)
    return sets


def _set_defaults_and_entries_early(table, t, path, actions_by_id):
    """Record the JSON default (action and constness) so pipeline generation can inline it."""
    d = t.get("default_entry")
    if d is None:
        return
    action = actions_by_id.get(d.get("action_id"))
    if action is None:
        raise malformed(f"default entry action id {d.get('action_id')!r} is unknown", path, t)
    ref = table.actions.get(action.name)
    if ref is None:
        ref = ActionRef(action.name, action.id, None, action.params)
        table.actions[action.name] = ref
        table.actions_by_id[action.id] = ref
    params = _hexdata(d.get("action_data", []), action.widths, f"{path}.default_entry")
    table.initial_default = (ref, tuple(params))
    table.default_action_const = bool(d.get("action_const", False))
    table.default_entry_const = bool(d.get("action_entry_const", False))


def _std_fields(layout) -> StdFields:
    std = StdFields()
    names = {
        "ingress_port": "standard_metadata.ingress_port",
        "packet_length": "standard_metadata.packet_length",
        "instance_type": "standard_metadata.instance_type",
        "egress_spec": "standard_metadata.egress_spec",
        "egress_port": "standard_metadata.egress_port",
        "mcast_grp": "intrinsic_metadata.mcast_grp",
        "egress_rid": "intrinsic_metadata.egress_rid",
        "parser_error": "standard_metadata.parser_error",
        "checksum_error": "standard_metadata.checksum_error",
        "ingress_ts": "intrinsic_metadata.ingress_global_timestamp",
        "egress_ts": "intrinsic_metadata.egress_global_timestamp",
        "enq_timestamp": "queueing_metadata.enq_timestamp",
        "enq_qdepth": "queueing_metadata.enq_qdepth",
        "deq_timedelta": "queueing_metadata.deq_timedelta",
        "deq_qdepth": "queueing_metadata.deq_qdepth",
        "priority": "intrinsic_metadata.priority",
    }
    for attr, dotted in names.items():
        setattr(std, attr, layout.resolve(dotted))
    for attr in ("ingress_port", "packet_length", "instance_type", "egress_spec", "egress_port"):
        if getattr(std, attr) is None:
            raise LoadError(f"malformed BMv2 JSON: simple_switch requires the field standard_metadata.{attr}")
    return std


def _program_info(cfg, tables, actions_by_id, registers, counters, direct, table_json):
    actions = {}
    for a in actions_by_id.values():
        actions.setdefault(a.name, ActionInfo(a.name, list(a.params)))
    tinfo = {}
    for name, table in tables.items():
        ref, params = table.initial_default or (None, ())
        default = (ref.name if ref else None, list(params))
        tinfo[name] = TableInfo(
            name, table.info_keys(), list(table.actions), table.size, default, table.immutable, table.hidden
        )
    rinfo = {n: RegisterInfo(n, r.size, r.bitwidth) for n, r in registers.items()}
    cinfo = {n: CounterInfo(n, c.size, False, None) for n, c in counters.items()}
    for c in cfg.get("counter_arrays", []):
        if c.get("is_direct"):
            binding = c.get("binding")
            cinfo[c["name"]] = CounterInfo(c["name"], c.get("size", tables[binding].size), True, binding)
    return ProgramInfo(tinfo, actions, rinfo, cinfo)


def _make_trace():
    def _trace(msg, *args):
        trace_log.log(_trace.level, msg, *args)

    _trace.level = logging.DEBUG
    return _trace


def _hexkey(key):
    if isinstance(key, tuple):
        return "(" + ", ".join(hex(k) for k in key) + ")"
    return hex(key)
