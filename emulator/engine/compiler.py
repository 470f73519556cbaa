"""BMv2 JSON (p4c-bm2-ss, v1model) -> CompiledProgram: generated functions plus run-time objects.

Everything the JSON contains is either compiled or refused here, at load time: a construct this
engine does not execute raises UnsupportedConstruct naming it and its JSON path (and P4 source line
when p4c recorded one), so a loaded program never silently behaves differently from BMv2.

`compile_program` runs the phases in the order the generated source lists their parts; each part has
its own module: actions (action_gen), tables and their const entries (table_json), parser
(parser_gen), pipelines, checksums and deparser (control_gen), calculations, action profiles.
"""

import hashlib
import logging
from dataclasses import dataclass, field

from emulator.engine import expressions, runtime, varbit
from emulator.engine.action_gen import CompiledAction
from emulator.engine.calculations import compile_calculation, hash_function
from emulator.engine.codegen import Namespace, Source, annotate_fields, compile_into
from emulator.engine.control_gen import ChecksumGen, PipelineGen, generate_deparser
from emulator.engine.hashes import CustomCrc
from emulator.engine.jsonutil import malformed, unsupported
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
from emulator.engine.primitives import ActionEnv
from emulator.engine.stateful import CounterArray, RegisterArray
from emulator.engine.table_json import build_table, install_default_and_entries, record_default
from emulator.engine.valuesets import ValueSet
from emulator.errors import LoadError
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


def compile_program(cfg: dict, drop_port: int = 511) -> CompiledProgram:
    """Check, lay out and generate the whole program, compile the generated Python once, then bind the
    functions into the tables and load their const entries. The parts are generated in the order the
    generated source lists them: calculations, actions, action profiles, parser, checksums, deparser,
    pipelines."""
    _check_top_level(cfg)
    layout = build_layout(cfg)
    errors = _errors(cfg)
    rt_counters = runtime.RuntimeCounters()
    payload_box = [b""]
    ns = Namespace(_helpers(rt_counters, payload_box))
    src = Source()

    registers, counters, direct = _stateful_arrays(cfg)
    calculations, hashes = _calculations(cfg, layout, ns, src, rt_counters)
    value_sets = _value_sets(cfg)
    meter_clock = MeterClock()
    meters, direct_meters = build_meter_arrays(cfg, layout, meter_clock)
    env = ActionEnv(layout, ns, registers, counters, calculations, drop_port)
    env.meters = meters
    actions_by_id, actions_by_name = _actions(cfg, env, src)
    tables, table_json, profiles = _tables(cfg, layout, ns, src, rt_counters, actions_by_id, actions_by_name)
    bind_direct_meters(direct_meters, tables, table_json)
    for name, binding in direct.items():
        if binding not in tables:
            raise malformed(f"direct counter '{name}' is bound to unknown table {binding!r}", "counter_arrays")
    checksums = _parser_and_deparser(cfg, layout, ns, src, env, errors, value_sets, calculations)
    _pipelines(cfg, layout, ns, src, table_json, actions_by_id)

    source = annotate_fields(src.text(), layout.slot_names())
    ns.globals["_trace"] = _make_trace()
    ns.globals["_hexkey"] = _hexkey
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    fns = compile_into(ns, source, f"<bmv2 program {cfg.get('program', 'p4')} {digest}>")
    _bind(fns, profiles, actions_by_id, tables, table_json)

    std = _std_fields(layout)
    field_lists = _field_lists(cfg, layout)
    learn_lists = load_learn_lists(cfg, layout)
    info = _program_info(cfg, tables, actions_by_id, registers, counters, direct)._replace(
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


def _check_top_level(cfg) -> None:
    if not isinstance(cfg, dict):
        raise LoadError("malformed BMv2 JSON: the top level must be an object")
    _check_version(cfg)
    _refuse_unsupported_sections(cfg)


def _helpers(rt_counters, payload_box) -> dict:
    """The names the generated code finds in its globals: expression, run-time and varbit helpers, the
    payload box the deparser reads, and the trace logger."""
    helpers = dict(expressions.HELPERS)
    helpers.update(runtime.make_helpers(rt_counters))
    helpers.update(varbit.HELPERS)
    helpers["PAYLOAD"] = payload_box
    helpers["_trace_logger"] = trace_log
    return helpers


def _stateful_arrays(cfg) -> tuple[dict, dict, dict]:
    """(registers, indirect counters, direct counter name -> the table it is bound to)."""
    registers = {}
    for r in cfg.get("register_arrays", []):
        registers[r["name"]] = RegisterArray(r["name"], r.get("size", 0), r.get("bitwidth", 0))
    counters, direct = {}, {}
    for c in cfg.get("counter_arrays", []):
        if c.get("is_direct"):
            direct[c["name"]] = c.get("binding")
        else:
            counters[c["name"]] = CounterArray(c["name"], c.get("size", 0))
    return registers, counters, direct


def _calculations(cfg, layout, ns, src, rt_counters) -> tuple[dict, dict]:
    """(calculation name -> its generated function's name, calculation name -> its hash function)."""
    calculations, hashes = {}, {}
    for i, calc in enumerate(cfg.get("calculations", [])):
        fn = hash_function(calc, f"calculations[{i}]", rt_counters.next_random)
        hashes[calc.get("name")] = fn
        calculations[calc.get("name")] = compile_calculation(calc, i, layout, ns, src, fn)
    return calculations, hashes


def _actions(cfg, env, src) -> tuple[dict, dict]:
    """Every action generated: (id -> CompiledAction, name -> the first action of that name)."""
    actions_by_id, actions_by_name = {}, {}
    for i, a in enumerate(cfg.get("actions", [])):
        action = CompiledAction(a, i, env)
        if action.id in actions_by_id:
            raise malformed(f"duplicate action id {action.id}", f"actions[{i}]", a)
        action.generate(src)
        actions_by_id[action.id] = action
        actions_by_name.setdefault(action.name, action)
    return actions_by_id, actions_by_name


def _tables(cfg, layout, ns, src, rt_counters, actions_by_id, actions_by_name) -> tuple[dict, dict, dict]:
    """Every pipeline's action profiles (generated) and tables: (name -> table, name -> (table, its JSON,
    its JSON path), profile name -> ActionProfile)."""
    tables, table_json, profiles = {}, {}, {}
    counters_json = cfg.get("counter_arrays", [])
    for p_index, p in enumerate(cfg.get("pipelines", [])):
        ppath = f"pipelines[{p_index}] '{p.get('name')}'"
        profiles.update(build_action_profiles(p, ppath, cfg, layout, ns, src, rt_counters.next_random))
        for t_index, t in enumerate(p.get("tables", [])):
            tpath = f"{ppath}.tables[{t_index}] '{t.get('name')}'"
            if t.get("name") in tables:
                raise malformed(f"duplicate table name '{t.get('name')}'", tpath, t)
            tables[t["name"]] = build_table(t, tpath, actions_by_id, actions_by_name, layout, counters_json, profiles)
            table_json[t["name"]] = (tables[t["name"]], t, tpath)
    return tables, table_json, profiles


def _parser_and_deparser(cfg, layout, ns, src, env, errors, value_sets, calculations) -> ChecksumGen:
    """The parser, the checksum verification and the deparser generated; their checksum units returned."""
    p_index, parser = _named(cfg.get("parsers", []), "parser", "parsers")
    codecs = {}
    ParserGen(parser, f"parsers[{p_index}]", layout, ns, env, errors, codecs, value_sets).generate(src)
    checksums = ChecksumGen(cfg, layout, ns, calculations)
    checksums.generate_verify(src)
    d_index, deparser = _named(cfg.get("deparsers", []), "deparser", "deparsers")
    generate_deparser(src, deparser, f"deparsers[{d_index}]", env, codecs, checksums)
    return checksums


def _pipelines(cfg, layout, ns, src, table_json, actions_by_id) -> None:
    """Ingress and egress generated, each twice: plain and tracing (`_t`)."""
    # actions must be known to tables before the pipelines are generated (inlining, exit analysis)
    for table, t, tpath in table_json.values():
        record_default(table, t, tpath, actions_by_id)
    pipelines = cfg.get("pipelines", [])
    for pipe_name in ("ingress", "egress"):
        i, p = _named(pipelines, pipe_name, "pipelines")
        ppath = f"pipelines[{i}] '{pipe_name}'"
        for trace, suffix in ((False, ""), (True, "_t")):
            gen = PipelineGen(p, ppath, layout, ns, table_json, actions_by_id, trace)
            gen.generate(src, pipe_name + suffix)


def _bind(fns, profiles, actions_by_id, tables, table_json) -> None:
    """The compiled functions bound into selectors, actions and tables; then defaults and const entries."""
    bind_selectors(profiles, fns)
    for action in actions_by_id.values():
        action.fn = fns[action.fname]
    for table in tables.values():
        for ref in table.actions.values():
            ref.fn = actions_by_id[ref.id].fn
    for table, t, tpath in table_json.values():
        install_default_and_entries(table, t, tpath, actions_by_id)


def _field_lists(cfg, layout) -> dict:
    """field list id -> the PHV slots of its fields."""
    field_lists = {}
    for i, fl in enumerate(cfg.get("field_lists", [])):
        slots = []
        for j, el in enumerate(fl.get("elements", [])):
            if el.get("type") != "field":
                raise unsupported(f"field list element type '{el.get('type')}'", f"field_lists[{i}].elements[{j}]")
            slots.append(layout.field(el["value"][0], el["value"][1], f"field_lists[{i}]").slot)
        field_lists[fl.get("id", i)] = slots
    return field_lists


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


def _program_info(cfg, tables, actions_by_id, registers, counters, direct):
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
