"""BMv2 JSON (p4c-bm2-ss, v1model) -> one C file: the native backend's code generator.

It reads the JSON after the Python engine has compiled and validated it, and reuses the engine's layout,
tables, errors and expressions, so both backends run one program one way. One module per part (cprimitives,
cparser, ccontrols, ccalculations, cdeparser, ctarget, cexpr); simple_switch's packet semantics around them
are hand-written C in driver.h. P4 statements carry `#line` directives so debuggers point into the P4
(emulator/README.md, "Native backend"). What C cannot run exactly (fields or action data wider than 64 bits,
select keys wider than 128) raises UnsupportedConstruct, so `--backend auto` falls back to Python."""

from emulator.engine.jsonutil import unsupported
from emulator.native.ccalculations import emit_calculations, with_selector_calculations
from emulator.native.ccontrols import CControl
from emulator.native.cdeparser import checksum_units, emit_deparser, emit_verify_checksums
from emulator.native.cexpr import Consts
from emulator.native.cparser import CParser
from emulator.native.cprimitives import CPrimitives
from emulator.native.csource import RESUME, CSource, cname, identifiers, name_slots, resume_lines
from emulator.native.ctarget import emit_prelude, emit_state_and_api, phv_slots, register_banks

METER_MAX_RATES = 4  # meters.h
MAX_WIDTH = 64


class CGen:
    """The program every part of the generated C reads: the JSON, the engine's compiled program, and
    the C names and indexes of its objects; `generate()` writes the parts in order.

    After generate(): `log_formats` (log_msg calls, by the index the C code passes to sw->log_msg),
    `vset_views` ((value set, key field widths, mask or None) per select case on a value set) and
    `custom_crcs` (the calculations whose CRC parameters NativeSwitch pushes) tell NativeSwitch how to
    drive the library."""

    def __init__(self, cfg: dict, prog, drop_port: int = 511):
        self.cfg, self.selectors = with_selector_calculations(cfg)  # selectors: profile -> C function
        self.prog = prog
        self.drop_port = drop_port
        self.c_file = f"{cname(str(cfg.get('program', 'p4')))}.c"  # the generated file's name in #line directives
        self.layout = prog.layout
        self.consts = Consts()
        self.slots = phv_slots(self.layout)  # [(slot, C name, what it holds)]
        self.slot_macros = {slot: name for slot, name, _ in self.slots}
        self.tables = list(prog.tables)  # table names, by index in the C table array
        self.table_index = {n: i for i, n in enumerate(self.tables)}
        self.registers = list(prog.registers)
        self.register_macros = identifiers(((n, n) for n in self.registers), "REG_")  # REG_x(i): cell i
        self.register_banks = register_banks(prog.registers)
        self.counters = list(prog.counters)
        self.meters = list(prog.meters)  # indirect and direct meter arrays, by index in C
        self.profiles = list(prog.action_profiles)  # action profiles, by index in C
        self.calc_names = {}  # calculation name -> C function
        for i, calc in enumerate(self.cfg.get("calculations", [])):
            self.calc_names.setdefault(calc.get("name"), f"calc_{i}")
        self.actions = {a.get("id", i): a for i, a in enumerate(self.cfg.get("actions", []))}  # id -> JSON
        self.action_fns = identifiers(((aid, a.get("name")) for aid, a in self.actions.items()), "act_")
        self.action_exits = {}  # action id -> may set the exit flag
        self.log_formats = []
        self.vset_views = []
        self.custom_crcs = [n for n, fn in prog.hashes.items() if getattr(fn, "params", None) is not None]
        self.primitives = CPrimitives(self)
        _check(self)

    def generate(self) -> str:
        """The C file: the head (sizes, `struct sw`, the slots' names), constant arrays, the program,
        then the target around it. The program is written first: it finds what the head sizes (value
        set views, log_msg calls)."""
        body = CSource()
        emit_calculations(self, body)
        self.primitives.actions(body)
        CParser(self).emit(body)
        units = checksum_units(self)
        emit_verify_checksums(self, body, units)
        emit_deparser(self, body, units)
        for pipe in ("ingress", "egress"):
            CControl(self, pipe).emit(body)
        head = CSource()
        emit_prelude(self, head)
        tail = CSource()
        emit_state_and_api(self, tail)
        named = name_slots(body.text() + tail.text(), self.slot_macros)
        text = head.text() + "\n".join(self.consts.arrays.values()) + "\n\n" + named
        return resume_lines(f"{RESUME} /* this file's name in debug information and reports */\n" + text, self.c_file)


def _check(gen) -> None:
    """What the native backend cannot run refuses the program here, naming it: `--backend auto` then
    runs the Python backend with a notice."""
    for h in gen.layout.headers.values():
        if h.htype.varbit is not None:
            name = h.htype.fields[h.htype.varbit][0]
            raise unsupported(
                f"the varbit field '{h.name}.{name}' (native backend: varbit fields run on the Python backend)",
                f"header '{h.name}'",
            )
    for h in gen.layout.headers.values():
        for fname, width, _ in h.htype.fields:
            if width > MAX_WIDTH:
                raise unsupported(
                    f"the {width}-bit field '{h.name}.{fname}' (native backend: fields of at most 64 bits)",
                    f"header '{h.name}'",
                )
    for name, reg in gen.prog.registers.items():
        if reg.bitwidth > MAX_WIDTH:
            raise unsupported(f"the {reg.bitwidth}-bit register '{name}' (native backend: at most 64)", name)
    for t in gen.prog.tables.values():
        for ref in t.actions.values():
            if any(w > MAX_WIDTH for w in ref.widths):
                raise unsupported(f"action data wider than 64 bits in '{ref.name}' (native backend)", t.name)
    for name, m in gen.prog.meters.items():
        if m.rate_count > METER_MAX_RATES:  # never v1model's
            raise unsupported(f"meter '{name}' with {m.rate_count} rates (native backend: at most 4)", name)


def generate_c(cfg: dict, prog, drop_port: int = 511) -> str:
    """The C source of the program `cfg`, already compiled (and so validated) by the Python engine."""
    return CGen(cfg, prog, drop_port).generate()
