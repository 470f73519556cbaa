"""BMv2 JSON (p4c-bm2-ss, v1model) -> one C file: the native backend's code generator.

The Python engine compiles and validates the program first (`emulator.engine.compiler`); this
generator reads the same JSON and the engine's layout (the PHV slots), tables and errors, and writes
C with the same structure: one function per action, the parser as one function whose states are
labels, each control as one function whose tables and conditionals are labels, the deparser, and
the checksum units. Every statement carries the P4 source line it came from in a comment, and
fields are named next to their slots. simple_switch's packet semantics around these functions
(resubmit, multicast, egress, recirculate) are hand-written C in driver.h.

Constructs the C backend cannot run exactly (fields or action data wider than 64 bits, select keys
wider than 128 bits) raise UnsupportedConstruct naming them and their P4 line, so `--backend auto`
falls back to the Python backend with a notice.
"""

import functools

from emulator.engine.jsonutil import hexstr, hexstr_bytes, malformed, source_of, unsupported
from emulator.engine.layout import ENGINE_REGISTERS
from emulator.engine.logmsg import parse_log_format
from emulator.engine.parser_gen import split_transitions
from emulator.native.cexpr import CExpr, Consts, c_data, c_int, store

GENERATOR_VERSION = 1
METER_MAX_RATES = 4  # meters.h
MAX_WIDTH = 64
MAX_SELECT_BYTES = 15


def _comment(text: str) -> str:
    return "/* " + text.replace("*/", "* /") + " */"


class CSource:
    def __init__(self):
        self.lines = []
        self.depth = 0
        self._tmp = 0

    def emit(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def indent(self):
        src = self

        class _Indent:
            def __enter__(self):
                src.depth += 1

            def __exit__(self, *exc):
                src.depth -= 1

        return _Indent()

    def tmp(self, prefix="t") -> str:
        self._tmp += 1
        return f"{prefix}{self._tmp}"

    def origin(self, obj) -> None:
        where = source_of(obj)
        if where:
            self.emit(_comment(where))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _cname(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


class CGen:
    """Generates the C program for one BMv2 JSON already compiled by the Python engine."""

    def __init__(self, cfg: dict, prog, drop_port: int = 511):
        self.cfg = cfg
        self.prog = prog
        self.drop_port = drop_port
        self.layout = prog.layout
        self.consts = Consts()
        self.src = CSource()
        self.slot_names = self.layout.slot_names()
        self.tables = list(prog.tables)  # table name -> index in the C table array
        self.table_index = {n: i for i, n in enumerate(self.tables)}
        self.registers = list(prog.registers)
        self.counters = list(prog.counters)
        self.meters = list(prog.meters)  # indirect and direct meter arrays, by index in C
        self.profiles = list(prog.action_profiles)  # action profiles, by index in C
        self.selectors = self._selector_calculations()
        self.actions = {}  # action id -> json
        self.action_exits = {}  # action id -> may set the exit flag
        self.log_formats = []  # log_msg calls, by the index the C code passes to sw->log_msg
        self.vset_views = []  # (value set name, key field widths, mask or None) per select case on a set
        self.custom_crcs = [n for n, fn in prog.hashes.items() if getattr(fn, "params", None) is not None]
        self._check_constructs()
        self._check_widths()
        self._refuse_meters_and_profiles()

    # ------------------------------------------------------------------ checks
    def _check_widths(self):
        for h in self.layout.headers.values():
            for fname, width, _ in h.htype.fields:
                if width > MAX_WIDTH:
                    raise unsupported(
                        f"the {width}-bit field '{h.name}.{fname}' (native backend: fields of at most 64 bits)",
                        f"header '{h.name}'",
                    )
        for name, reg in self.prog.registers.items():
            if reg.bitwidth > MAX_WIDTH:
                raise unsupported(f"the {reg.bitwidth}-bit register '{name}' (native backend: at most 64)", name)
        for t in self.prog.tables.values():
            for ref in t.actions.values():
                if any(w > MAX_WIDTH for w in ref.widths):
                    raise unsupported(f"action data wider than 64 bits in '{ref.name}' (native backend)", t.name)

    def _check_constructs(self):
        """Constructs only the Python backend runs: `--backend auto` falls back to it with a notice."""
        for h in self.layout.headers.values():
            if h.htype.varbit is not None:
                name = h.htype.fields[h.htype.varbit][0]
                raise unsupported(
                    f"the varbit field '{h.name}.{name}' (native backend: varbit fields run on the Python backend)",
                    f"header '{h.name}'",
                )

    def _refuse_meters_and_profiles(self):
        """Meters of more than METER_MAX_RATES rates (never v1model's) are refused by name."""
        for name, m in self.prog.meters.items():
            if m.rate_count > METER_MAX_RATES:
                raise unsupported(f"meter '{name}' with {m.rate_count} rates (native backend: at most 4)", name)

    def _selector_calculations(self):
        """Each selector's hash becomes one more calculation (calc_<n> after the JSON's own), so the
        calculation generator emits it: {profile name: C function name}."""
        extra, names = [], {}
        base = len(self.cfg.get("calculations", []) or [])
        for pipe in self.cfg.get("pipelines", []):
            for ap in pipe.get("action_profiles", []) or []:
                selector = ap.get("selector")
                if selector is None:
                    continue
                if selector.get("algo") in ("crc16_custom", "crc32_custom"):  # parameters per calculation
                    raise unsupported(
                        f"the {selector.get('algo')} selector of '{ap.get('name')}' (native backend)", ap.get("name")
                    )
                names[ap.get("name")] = f"calc_{base + len(extra)}"
                extra.append(
                    {
                        "name": f"{ap.get('name')} selector",
                        "algo": selector.get("algo"),
                        "input": selector.get("input", []),
                    }
                )
        if extra:
            self.cfg = dict(self.cfg, calculations=list(self.cfg.get("calculations", []) or []) + extra)
        return names

    def annotate(self, slot) -> str:
        name = self.slot_names.get(slot) if isinstance(slot, int) else None
        return f"/* {name} */" if name else ""

    # ------------------------------------------------------------------ whole program
    def generate(self) -> str:
        body = CSource()
        self.src = body
        self._calculations()
        self._actions()
        self._parser()
        self._checksums()
        self._deparser()
        for pipe in ("ingress", "egress"):
            self._pipeline(pipe)
        head = CSource()
        self._prelude(head)
        tail = CSource()
        self._state_and_api(tail)
        return head.text() + "\n".join(self.consts.arrays.values()) + "\n\n" + body.text() + tail.text()

    def _prelude(self, h):
        L = self.layout
        max_params = max((len(a.get("runtime_data", [])) for a in self.cfg.get("actions", [])), default=0)
        max_keys = max((len(t.keys) for t in self.prog.tables.values()), default=0)
        h.emit(f"/* Generated by emulator/native/cgen.py v{GENERATOR_VERSION} from the BMv2 JSON of")
        h.emit(f" * '{self.cfg.get('program', '?')}'. Do not edit: regenerate from the JSON. */")
        h.emit(f"#define NSLOTS {L.nslots}")
        h.emit(f"#define SW_MAX_PARAMS {max_params}")
        h.emit(f"#define SW_MAX_KEYS {max_keys if max_keys else 1}")
        h.emit(f"#define ERR_NO_ERROR {self.prog.errors['NoError']}")
        h.emit(f"#define ERR_TOO_SHORT {self.prog.errors['PacketTooShort']}")
        h.emit('#include "runtime.h"')
        h.emit('#include "meters.h"')
        h.emit('#include "profiles.h"')
        h.emit()
        h.emit(f"#define NTABLES {len(self.tables)}")
        h.emit(f"#define NREGS {len(self.registers)}")
        h.emit(f"#define NCTRS {len(self.counters)}")
        h.emit(f"#define NVSETS {len(self.vset_views)}")
        h.emit(f"#define NCRCS {len(self.custom_crcs)}")
        h.emit(f"#define NPROFILES {len(self.profiles)}")
        h.emit("struct sw {")
        with h.indent():
            h.emit("pthread_mutex_t mu;")
            h.emit("uint64_t stats[NSTATS];")
            h.emit("uint64_t start_ns, rng;")
            h.emit("table_t tables[NTABLES > 0 ? NTABLES : 1];")
            h.emit("uint64_t *regs[NREGS > 0 ? NREGS : 1];")
            h.emit("uint64_t *ctr_pk[NCTRS > 0 ? NCTRS : 1], *ctr_by[NCTRS > 0 ? NCTRS : 1];")
            h.emit("mc_group_t *mc[MC_GROUPS];")
            h.emit("vset_t vsets[NVSETS > 0 ? NVSETS : 1]; /* one per select case on a value set */")
            h.emit("crc_custom_t crcs[NCRCS > 0 ? NCRCS : 1]; /* " + (", ".join(self.custom_crcs) or "none") + " */")
            h.emit("mirror_session_t mirror[MIRROR_SESSIONS];")
            h.emit("digest_queue_t digests;")
            h.emit("int clock_pinned; int64_t pinned_now;")
            h.emit("profile_t prof[NPROFILES > 0 ? NPROFILES : 1];")
            h.emit("log_msg_fn log_msg; /* formats and logs log_msg calls (sw_set_log_msg); NULL: not logged */")
            for i, name in enumerate(self.meters):
                h.emit(f"meter_t meter_{i}[{max(self.prog.meters[name].size, 1)}]; /* meter {name} */")
        h.emit("};")
        h.emit()
        h.emit("/* log_msg call `id` (cgen's log_formats) with its arguments: Python formats it as BMv2 does */")
        h.emit("static void log_msg(sw_t *sw, uint32_t id, uint32_t n, const V *args) {")
        h.emit("    if (sw->log_msg) sw->log_msg(id, n, args);")
        h.emit("}")
        h.emit()
        h.emit(f"#define NMETERS {len(self.meters)}")
        h.emit("static meter_t *meter_array(sw_t *sw, uint32_t mi, uint32_t *size) {")
        with h.indent():
            h.emit("switch (mi) {")
            for i, name in enumerate(self.meters):
                h.emit(f"case {i}: *size = {self.prog.meters[name].size}; return sw->meter_{i};")
            h.emit("default: *size = 0; return NULL;")
            h.emit("}")
        h.emit("}")
        h.emit()
        for i, name in enumerate(self.registers):
            r = self.prog.registers[name]
            h.emit(f"#define REG_{i} sw->regs[{i}] /* register {name}[{r.size}], {r.bitwidth} bits */")
        h.emit(
            "static const uint32_t reg_size[] = {"
            + (", ".join(str(self.prog.registers[n].size) for n in self.registers) or "0")
            + "};"
        )
        h.emit(
            "static const uint32_t ctr_size[] = {"
            + (", ".join(str(self.prog.counters[n].size) for n in self.counters) or "0")
            + "};"
        )
        h.emit()

    # ------------------------------------------------------------------ actions
    def _actions(self):
        src = self.src
        for i, a in enumerate(self.cfg.get("actions", [])):
            aid = a.get("id", i)
            self.actions[aid] = a
        for aid, a in self.actions.items():
            path = f"actions '{a.get('name')}'"
            widths = [p.get("bitwidth") for p in a.get("runtime_data", [])]
            names = ", ".join(p.get("name", "?") for p in a.get("runtime_data", []))
            src.emit(f"/* action {a.get('name')}({names}) */")
            src.emit(f"static void A_{aid}(sw_t *sw, pkt_t *pk, pass_ctx_t *cx, const uint64_t *P) {{")
            with src.indent():
                src.emit("V *F = pk->F; (void)F; (void)sw; (void)cx; (void)P;")
                exits = self._primitives(src, a.get("primitives", []), path, widths)
            src.emit("}")
            src.emit()
            self.action_exits[aid] = exits

    def _primitives(self, src, prims, path, widths, parser=False) -> bool:
        """Emit a primitive list; jumps become gotos to per-primitive labels. Returns: may exit."""
        jumps = any(p.get("op") in ("_jump", "_jump_if_zero") for p in prims)
        targets = set()
        if jumps:
            for k, p in enumerate(prims):
                if p.get("op") in ("_jump", "_jump_if_zero"):
                    params = p.get("parameters", [])
                    t = hexstr(params[-1].get("value"), f"{path}.primitives[{k}]")
                    if not 0 <= t <= len(prims):
                        raise malformed(f"jump target {t} out of range", f"{path}.primitives[{k}]", p)
                    targets.add(t)
        label = src.tmp("L")
        exits = False
        for k, prim in enumerate(prims):
            ppath = f"{path}.primitives[{k}]"
            if k in targets:
                src.emit(f"{label}_{k}:;")
            op = prim.get("op")
            params = prim.get("parameters", [])
            ex = CExpr(self.layout, self.consts, ppath, params=widths, parser=parser)
            src.origin(prim)
            if op == "_jump":
                src.emit(f"goto {label}_{hexstr(params[-1].get('value'))};")
            elif op == "_jump_if_zero":
                v = ex.value(params[0])
                cond = v.src if v.kind == "bool" else f"({v.src}) != 0"
                src.emit(f"if (!({cond})) goto {label}_{hexstr(params[-1].get('value'))};")
            else:
                exits |= self._primitive(src, ex, op, params, ppath, prim)
        if len(prims) in targets:
            src.emit(f"{label}_{len(prims)}:;")
        return exits

    def _primitive(self, src, ex, op, params, path, prim) -> bool:
        L = self.layout
        if op in ("assign", "modify_field"):
            dst, width, signed = ex.lvalue(params[0])
            src.emit(store(dst, width, signed, ex.data(params[1])) + " " + self.annotate(_as_int(dst)))
        elif op in ("add_to_field", "subtract_from_field"):
            dst, width, signed = ex.lvalue(params[0])
            v = ex.data(params[1])
            sign = "+" if op == "add_to_field" else "-"
            src.emit(store(dst, width, signed, c_data(f"F[{dst}] {sign} ({v.src})")))
        elif op in ("add", "subtract", "bit_and", "bit_or", "bit_xor", "shift_right"):
            dst, width, signed = ex.lvalue(params[0])
            a, b = ex.data(params[1]), ex.data(params[2])
            c_op = {"add": "+", "subtract": "-", "bit_and": "&", "bit_or": "|", "bit_xor": "^"}.get(op)
            value = f"({a.src}) {c_op} ({b.src})" if c_op else f"v_shr(cx, {a.src}, {b.src})"
            src.emit(store(dst, width, signed, c_data(value)))
        elif op == "shift_left":
            dst, width, signed = ex.lvalue(params[0])
            a, b = ex.data(params[1]), ex.data(params[2])
            value = f"v_shl_masked(cx, {a.src}, {b.src}, {c_int((1 << width) - 1)}, {width})"
            src.emit(store(dst, width, signed, c_data(value)))
        elif op == "no_op":
            pass
        elif op == "exit":
            src.emit(f"F[{L.EXIT}] = 1;")
            return True
        elif op == "add_header":
            h = ex.header(params[0])
            n = h.htype.nfields
            base = h.src
            src.emit(f"if (!F[{ex._slot(h, n)}]) {{")
            with src.indent():
                if n:
                    src.emit(f"memset(&F[{base}], 0, sizeof(V) * {n});")
                src.emit(f"F[{ex._slot(h, n)}] = 1;")
                self._clear_siblings(src, h)
                src.emit(f"F[{L.PKTLEN}] += {h.htype.nbits // 8};")
            src.emit("}")
        elif op == "add_header_fast":
            h = ex.header(params[0])
            src.emit(f"F[{ex._slot(h, h.htype.nfields)}] = 1;")
            self._clear_siblings(src, h)
        elif op == "remove_header":
            h = ex.header(params[0])
            valid = ex._slot(h, h.htype.nfields)
            src.emit(f"if (F[{valid}]) {{ F[{L.PKTLEN}] -= {h.htype.nbits // 8}; F[{valid}] = 0; }}")
        elif op in ("assign_header", "copy_header"):
            dst, hsrc = ex.header(params[0]), ex.header(params[1])
            if dst.htype is not hsrc.htype:
                raise malformed("assign_header between different header types", path, prim)
            src.emit(f"assign_header(F, {dst.src}, {hsrc.src}, {dst.htype.nfields});")
            if dst.static_base is not None and self.layout.siblings.get(dst.static_base + dst.htype.nfields):
                src.emit(f"if (F[{dst.static_base + dst.htype.nfields}]) {{")
                with src.indent():
                    self._clear_siblings(src, dst)
                src.emit("}")
        elif op in ("assign_union", "assign_union_stack"):
            dst, other = ex.value(params[0]), ex.value(params[1])
            if op == "assign_union":
                pairs = [(dst.union, other.union)]
            else:
                pairs = list(zip(dst.union_stack.unions, other.union_stack.unions))
                src.emit(f"F[{dst.union_stack.next_slot}] = F[{other.union_stack.next_slot}];")
            for du, su in pairs:  # BMv2: assign_header member by member
                for d, h in zip(du.members, su.members):
                    src.emit(f"assign_header(F, {d.base}, {h.base}, {d.htype.nfields}); /* {d.name} = {h.name} */")
        elif op == "assign_header_stack":
            dst, other = ex.stack(params[0]).stack, ex.stack(params[1]).stack
            if len(dst.headers) != len(other.headers):
                raise malformed("assign_header_stack between stacks of different sizes", path, prim)
            size = dst.headers[0].size if dst.headers else 0
            for d, s in zip(dst.headers, other.headers):
                src.emit(f"memmove(&F[{d.base}], &F[{s.base}], sizeof(V) * {size});")
            src.emit(f"F[{dst.next_slot}] = F[{other.next_slot}];")
        elif op in ("push", "pop"):
            if ex.value(params[0]).kind == "union_stack":
                raise unsupported(f"{op} on a header union stack (native backend)", path, prim)
            st = ex.stack(params[0]).stack
            count = ex.data(params[1])
            size = st.headers[0].size if st.headers else 0
            bases = self.consts.stack_bases(st)
            fn = "stack_push" if op == "push" else "stack_pop"
            src.emit(f"{fn}(cx, F, {bases}, {len(st.bases)}, {size}, {st.next_slot}, {count.src});")
        elif op in ("mark_to_drop", "drop"):
            self._drop(src, params[0].get("value") if op == "mark_to_drop" else None, path)
        elif op == "register_read":
            dst, width, signed = ex.lvalue(params[0])
            r = self._register_index(params[1], path, prim)
            i = src.tmp("i")
            src.emit(f"{{ V {i} = {ex.data(params[2]).src};")
            src.emit(
                f"  if ({i} >= 0 && {i} < {self.prog.registers[self.registers[r]].size}) "
                + store(dst, width, signed, c_data(f"(V)REG_{r}[(size_t){i}]"))
            )
            src.emit(f"  else sw->stats[ST_OUT_OF_BOUNDS]++; }} /* register {self.registers[r]} */")
        elif op == "register_write":
            r = self._register_index(params[0], path, prim)
            reg = self.prog.registers[self.registers[r]]
            i, v = src.tmp("i"), ex.data(params[2])
            src.emit(f"{{ V {i} = {ex.data(params[1]).src};")
            src.emit(
                f"  if ({i} >= 0 && {i} < {reg.size}) REG_{r}[(size_t){i}] = (uint64_t)(({v.src}) & {c_int(reg.mask)});"
            )
            src.emit(f"  else sw->stats[ST_OUT_OF_BOUNDS]++; }} /* register {reg.name} */")
        elif op == "count":
            j = params[0]
            name = j.get("value") if isinstance(j, dict) else None
            if name not in self.prog.counters:
                raise malformed(f"unknown counter {name!r}", path, prim)
            c = self.counters.index(name)
            i = src.tmp("i")
            src.emit(f"{{ V {i} = {ex.data(params[1]).src};")
            src.emit(
                f"  if ({i} >= 0 && {i} < {self.prog.counters[name].size}) {{ sw->ctr_pk[{c}][(size_t){i}]++; "
                f"sw->ctr_by[{c}][(size_t){i}] += (uint64_t)F[{L.ILEN}]; }}"
            )
            src.emit(f"  else sw->stats[ST_OUT_OF_BOUNDS]++; }} /* counter {name} */")
        elif op == "execute_meter":
            j = params[0]
            name = j.get("value") if isinstance(j, dict) else None
            meter = self.prog.meters.get(name)
            if meter is None or meter.table is not None:
                raise malformed(f"execute_meter needs an indirect meter, got {name!r}", path, prim)
            m = self.meters.index(name)
            dst, width, signed = ex.lvalue(params[2])
            amount = f"(uint64_t)F[{L.ILEN}]" if meter.by_bytes else "1"
            i = src.tmp("i")
            src.emit(f"{{ V {i} = {ex.data(params[1]).src};")
            color = c_data(f"(V)meter_execute(&sw->meter_{m}[(size_t){i}], SW_NOW(sw), {amount})")
            src.emit(f"  if ({i} >= 0 && {i} < {meter.size}) " + store(dst, width, signed, color))
            src.emit(f"  else sw->stats[ST_OUT_OF_BOUNDS]++; }} /* meter {name} */")
        elif op == "modify_field_with_hash_based_offset":
            dst, width, signed = ex.lvalue(params[0])
            base = ex.data(params[1])
            calc = self._calc_name(params[2], path, prim)
            size = ex.data(params[3])
            value = c_data(f"hash_offset((V){calc}(pk, cx), {base.src}, {size.src})")
            src.emit(store(dst, width, signed, value))
        elif op == "modify_field_rng_uniform":
            dst, width, signed = ex.lvalue(params[0])
            lo, hi = ex.data(params[1]), ex.data(params[2])
            a, b = src.tmp("lo"), src.tmp("hi")
            src.emit(f"{{ V {a} = {lo.src}, {b} = {hi.src};")
            src.emit(
                f"  if ({a} <= {b}) "
                + store(dst, width, signed, c_data(f"{a} + rng_in_span(&sw->rng, {b} - {a} + 1)"))
                + " }"
            )
        elif op == "log_msg":
            self._log_msg(src, ex, params, path, prim)
        elif op in ("assert", "assume"):
            v = ex.value(params[0])
            cond = v.src if v.kind == "bool" else f"({v.src}) != 0"
            src.emit(f"if (!({cond})) RAISE(cx); /* {op} */")
        elif op in ("clone_ingress_pkt_to_egress", "clone_egress_pkt_to_egress"):
            session, fl = ex.data(params[0]), ex.data(params[1])
            src.emit(f"F[{L.CLONE}] = (({session.src}) & 0xFFFF) | 0x8000; /* {op}: mirroring.SESSION_VALID */")
            src.emit(f"F[{L.CLONE_FL}] = ({fl.src}) & 0xFFFF;")
        elif op == "generate_digest":  # the receiver (params[0]) is ignored, as simple_switch does
            learn_id = ex.data(params[1])
            src.emit(f"F[{L.LEARN}] = ({learn_id.src}) & 0xFFFF; /* digest: taken after ingress */")
        elif op == "truncate":
            length = ex.data(params[0])
            t = src.tmp("n")
            src.emit(f"{{ V {t} = ({length.src}) & (V)UINT64_MAX; /* truncate: the smallest length wins */")
            src.emit(f"  if (F[{L.TRUNC}] < 0 || {t} < F[{L.TRUNC}]) F[{L.TRUNC}] = {t}; }}")
        elif op in ("resubmit", "recirculate"):
            fl = ex.data(params[0])
            reg = L.RESUBMIT if op == "resubmit" else L.RECIRC
            src.emit(f"F[{reg}] = ({fl.src}) & 0xFFFF;")
        else:
            raise unsupported(f"primitive '{op}' (native backend)", path, prim)
        return False

    def _log_msg(self, src, ex, params, path, prim) -> None:
        """The arguments go to sw->log_msg with the call's index in log_formats (its BMv2 reading)."""
        fmt, vec = params
        if not isinstance(fmt, dict) or not isinstance(fmt.get("value"), str):
            raise malformed("log_msg format must be a string", path, prim)
        if not isinstance(vec, dict) or vec.get("type") != "parameters_vector":
            raise malformed("log_msg arguments must be a parameters_vector", path, prim)
        items = vec.get("value") if isinstance(vec.get("value"), list) else []
        form = parse_log_format(fmt["value"], len(items), prim)
        k = len(self.log_formats)
        self.log_formats.append(form)
        if form.error is not None or not items:
            src.emit(f"log_msg(cx->sw, {k}, 0, NULL);")
            return
        args = ", ".join(ex.data(item).src for item in items)
        a = src.tmp("args")
        src.emit(f"{{ const V {a}[] = {{{args}}}; log_msg(cx->sw, {k}, {len(items)}, {a}); }}")

    def _clear_siblings(self, src, h) -> None:
        """A union member known at compile time became valid: the union's other members become invalid."""
        if h.static_base is None:
            return  # a header stack element: never a union member
        for other in self.layout.siblings.get(h.static_base + h.htype.nfields, ()):
            src.emit(f"F[{other}] = 0; {self.annotate(other)}")

    def _drop(self, src, header_name, path):
        port = self.drop_port
        if header_name is None:
            spec = self.layout.resolve("standard_metadata.egress_spec")
            grp = self.layout.resolve("intrinsic_metadata.mcast_grp")
        else:
            h = self.layout.header(header_name, path)
            spec = self.layout.field(header_name, "egress_spec")
            grp = self.layout.field(header_name, "mcast_grp") if "mcast_grp" in h.htype.offsets else None
        src.emit(f"F[{spec.slot}] = {port & spec.mask}; /* mark_to_drop: egress_spec */")
        if grp is not None:
            src.emit(f"F[{grp.slot}] = 0; /* mcast_grp */")

    def _register_index(self, j, path, prim) -> int:
        name = j.get("value") if isinstance(j, dict) else None
        if name not in self.prog.registers:
            raise malformed(f"unknown register {name!r}", path, prim)
        return self.registers.index(name)

    def _calc_name(self, j, path, prim) -> str:
        name = j.get("value") if isinstance(j, dict) else None
        for i, calc in enumerate(self.cfg.get("calculations", [])):
            if calc.get("name") == name:
                return f"calc_{i}"
        raise malformed(f"unknown calculation {name!r}", path, prim)

    # ------------------------------------------------------------------ calculations
    def _calculations(self):
        src = self.src
        algos = {"csum16", "crc32", "crc16", "identity", "xor16", "crc16_custom", "crc32_custom", "random"}
        for i, calc in enumerate(self.cfg.get("calculations", [])):
            path = f"calculations[{i}]"
            algo = calc.get("algo")
            if algo not in algos:
                raise unsupported(
                    f"hash algorithm '{algo}' (native backend: custom CRCs and the random hash run on Python)",
                    path,
                    calc,
                )
            pieces, with_payload = [], False
            for item in calc.get("input", []):
                t = item.get("type")
                if t == "field":
                    h = self.layout.header(item["value"][0], path)
                    ref = self.layout.field(item["value"][0], item["value"][1], path)
                    pieces.append((None if h.metadata else h.valid, f"F[{ref.slot}]", ref.width))
                elif t == "header":
                    h = self.layout.header(item.get("value"), path)
                    for k, (_, width, _) in enumerate(h.htype.fields):
                        pieces.append((None if h.metadata else h.valid, f"F[{h.base + k}]", width))
                elif t == "hexstr":
                    width = item.get("bitwidth")
                    value = hexstr(item.get("value"), path) & ((1 << width) - 1)
                    if width > MAX_WIDTH:
                        raise unsupported(f"a {width}-bit constant in a calculation (native backend)", path, calc)
                    pieces.append((None, c_int(value), width))
                elif t == "payload":
                    with_payload = True
            nbits = sum(w for _, _, w in pieces)
            src.emit(f"/* calculation {calc.get('name')}: {algo} */")
            src.emit(f"static uint64_t calc_{i}(pkt_t *pk, pass_ctx_t *cx) {{")
            with src.indent():
                src.emit("V *F = pk->F; (void)F; (void)cx;")
                extra = " + cx->payload_len" if with_payload else ""
                src.emit(f"uint8_t buf[{(nbits + 7) // 8 + 1}{extra}];")
                src.emit(f"memset(buf, 0, {(nbits + 7) // 8 + 1});")
                src.emit("unsigned bit = 0;")
                for valid, value, width in pieces:
                    put = f"put_bits(buf, bit, {width}, (uint64_t)({value})); bit += {width};"
                    src.emit(f"if (F[{valid}]) {{ {put} }}" if valid is not None else put)
                src.emit("uint32_t n = (bit + 7) >> 3;")
                if with_payload:
                    src.emit("if (cx->payload_len) {")
                    src.emit("    memcpy(buf + n, cx->payload, cx->payload_len);")
                    src.emit("    n += cx->payload_len;")
                    src.emit("}")
                if algo == "random":
                    src.emit(
                        "(void)n; return rng_next(&cx->sw->rng); /* the random hash: a draw, whatever the input */"
                    )
                elif algo in ("crc16_custom", "crc32_custom"):
                    k = self.custom_crcs.index(calc.get("name"))
                    src.emit(f"return h_crc_custom(&cx->sw->crcs[{k}], buf, n);")
                else:
                    src.emit(f"return h_{algo}(buf, n);")
            src.emit("}")
            src.emit()

    # ------------------------------------------------------------------ parser
    def _parser(self):
        parser = next((p for p in self.cfg.get("parsers", []) if p.get("name") == "parser"), None)
        errors = self.prog.errors
        src = self.src
        states = {st.get("name"): (i, st) for i, st in enumerate(parser.get("parse_states", []))}
        too_short = errors["PacketTooShort"]
        src.emit("/* The parser: -1, or the error code that stopped it (bytes parsed so far in *pos_out). */")
        src.emit(
            "static int parse(sw_t *sw, pkt_t *pk, pass_ctx_t *cx, const uint8_t *D, uint32_t L, uint32_t *pos_out) {"
        )
        with src.indent():
            src.emit("V *F = pk->F; (void)sw; uint32_t pos = 0; int err;")
            src.emit("if (setjmp(cx->perr)) { *pos_out = cx->perr_pos; return cx->perr_code; }")
            src.emit(f"goto S_{_cname(parser['init_state'])};")
            for name, (i, st) in states.items():
                path = f"parsers.parse_states[{i}]"
                src.emit(f"S_{_cname(name)}: /* state {name} */")
                with src.indent():
                    for k, op in enumerate(st.get("parser_ops", [])):
                        self._parser_op(src, op, f"{path}.parser_ops[{k}]", too_short)
                    self._transitions(src, st, path)
            src.emit("fail:")
            src.emit("*pos_out = pos;")
            src.emit("return err;")
            src.emit("accept:")
            src.emit("*pos_out = pos;")
            src.emit("return -1;")
        src.emit("}")
        src.emit()

    def _need(self, n, too_short) -> str:
        return f"if (L - pos < (uint32_t)({n})) {{ err = {too_short}; goto fail; }}"

    def _extract_fields(self, src, htype, base: str, nbytes_var=None):
        bit = 0
        for k, (fname, width, signed) in enumerate(htype.fields):
            slot = f"{base} + {k}" if not base.isdigit() else str(int(base) + k)
            if width == 0:
                src.emit(f"F[{slot}] = 0;")
                continue
            if bit % 8 == 0 and width % 8 == 0:
                value = f"rd_be(D + pos + {bit // 8}, {width // 8})"
            else:
                value = f"get_bits(D + pos, {bit}, {width})"
            if signed:
                half = c_int(1 << (width - 1))
                src.emit(f"F[{slot}] = (((V){value}) ^ {half}) - {half}; /* {fname} */")
            else:
                src.emit(f"F[{slot}] = (V){value}; /* {fname} */")
            bit += width
        slot = f"{base} + {htype.nfields}" if not base.isdigit() else str(int(base) + htype.nfields)
        src.emit(f"F[{slot}] = 1; /* $valid$ */")

    def _parser_op(self, src, op, path, too_short):
        kind = op.get("op")
        params = op.get("parameters", [])
        ex = CExpr(self.layout, self.consts, path, parser=True)
        src.origin(op)
        if kind == "extract":
            p = params[0]
            t = p.get("type")
            if t == "regular":
                h = self.layout.header(p.get("value"), path)
                nbytes = h.htype.nbits // 8
                src.emit(f"/* extract {h.name} ({nbytes} bytes) */")
                src.emit(self._need(nbytes, too_short))
                self._extract_fields(src, h.htype, str(h.base))
                for other in self.layout.siblings.get(h.valid, ()):
                    src.emit(f"F[{other}] = 0; {self.annotate(other)} /* the union's other member */")
                src.emit(f"pos += {nbytes};")
            elif t == "stack":
                st = self.layout.stack(p.get("value"), path)
                nbytes = st.htype.nbits // 8
                bases = self.consts.stack_bases(st)
                k = src.tmp("k")
                src.emit(f"{{ /* extract {st.name}.next */ int {k} = (int)F[{st.next_slot}];")
                with src.indent():
                    stack_oob = self.prog.errors["StackOutOfBounds"]
                    src.emit(f"if ({k} >= {len(st.bases)}) {{ err = {stack_oob}; goto fail; }}")
                    src.emit(self._need(nbytes, too_short))
                    b = src.tmp("b")
                    src.emit(f"int {b} = {bases}[{k}];")
                    self._extract_fields(src, st.htype, b)
                    src.emit(f"F[{st.next_slot}] = {k} + 1;")
                    src.emit(f"pos += {nbytes};")
                src.emit("}")
            elif t == "union_stack":
                us = self.layout.union_stack(p.get("value")[0], path)
                if not us.unions:
                    raise malformed("extract into an empty union stack", path, op)
                member = ex._member_index(us.unions[0], p.get("value")[1], op)
                htype = us.unions[0].members[member].htype
                nbytes = htype.nbits // 8
                bases = self.consts.union_stack_bases(us)
                k = src.tmp("k")
                src.emit(f"{{ /* extract {us.name}.next.{p.get('value')[1]} */ int {k} = (int)F[{us.next_slot}];")
                with src.indent():
                    stack_oob = self.prog.errors["StackOutOfBounds"]
                    src.emit(f"if ({k} >= {len(us.unions)}) {{ err = {stack_oob}; goto fail; }}")
                    src.emit(self._need(nbytes, too_short))
                    b = src.tmp("b")
                    src.emit(f"int {b} = {bases}[{k}][{member}];")
                    self._extract_fields(src, htype, b)
                    for other, h in enumerate(us.unions[0].members):
                        if other != member:
                            src.emit(f"F[{bases}[{k}][{other}] + {h.htype.nfields}] = 0; /* {h.name}: invalid */")
                    src.emit(f"F[{us.next_slot}] = {k} + 1;")
                    src.emit(f"pos += {nbytes};")
                src.emit("}")
            else:
                raise unsupported(f"extract of '{t}' (native backend)", path, op)
        elif kind == "set":
            dst, width, signed = ex.lvalue(params[0])
            src.emit(store(dst, width, signed, ex.data(params[1])))
        elif kind == "verify":
            cond = ex.boolean(params[0])
            err = params[1]
            code = str(err) if isinstance(err, int) else f"(int)({ex.data(err).src})"
            src.emit(f"if (!({cond.src})) {{ err = {code}; goto fail; }}")
        elif kind == "shift":
            src.emit(self._need(params[0], too_short))
            src.emit(f"pos += {params[0]};")
        elif kind == "advance":
            v = ex.data(params[0])
            invalid = self.prog.errors["ParserInvalidArgument"]
            t = src.tmp("adv")
            src.emit(f"{{ V {t} = {v.src};")
            src.emit(f"  if ({t} < 0 || ({t} & 7)) {{ err = {invalid}; goto fail; }}")
            src.emit(f"  if ((V)(L - pos) < ({t} >> 3)) {{ err = {too_short}; goto fail; }}")
            src.emit(f"  pos += (uint32_t)({t} >> 3); }}")
        elif kind == "primitive":
            exits = self._primitives(src, [params[0]], path, None, parser=True)
            if exits:
                raise unsupported("exit inside a parser primitive", path, op)
        else:
            raise unsupported(f"parser operation '{kind}'", path, op)

    def _transitions(self, src, st, path):
        default, cases = split_transitions(st, path)
        cases = [t for t, _ in cases]

        def goto(name):
            return "goto accept;" if name is None else f"goto S_{_cname(name)};"

        if not cases:
            src.emit(goto(default))
            return
        ex = CExpr(self.layout, self.consts, path, parser=True)
        comps, key_widths = [], []
        for k in st.get("transition_key", []):
            t = k.get("type")
            if t == "field":
                ref = ex._field_ref(k)
                v, width = f"F[{ref.slot}]", ref.width
                if ref.signed:
                    v = f"(F[{ref.slot}] & {c_int(ref.mask)})"
            elif t == "stack_field":
                stck, off, width, signed = ex._stack_field(k)
                v = f"F[{ex._last_base(stck)} + {off}]"
                if signed:
                    v = f"({v} & {c_int((1 << width) - 1)})"
            elif t == "union_stack_field":
                base, off, width, signed = ex._union_stack_field(k)
                v = f"F[{base} + {off}]"
                if signed:
                    v = f"({v} & {c_int((1 << width) - 1)})"
            elif t == "lookahead":
                off, width = k.get("value")
                if width > 64:
                    raise unsupported(f"lookahead of {width} bits (native backend)", path, st)
                v = f"(V)lookahead(cx, D, L, pos, {off}, {width})"
            else:
                raise unsupported(f"select key type '{t}'", path, k)
            comps.append((v, (width + 7) // 8))
            key_widths.append(width)
        total = sum(n for _, n in comps)
        if total > MAX_SELECT_BYTES:
            raise unsupported(f"a select key of {total} bytes (native backend: at most {MAX_SELECT_BYTES})", path, st)
        parts, shift = [], total * 8
        for v, n in comps:
            shift -= n * 8
            parts.append(f"((UV)({v}) << {shift})" if shift else f"(UV)({v})")
        key = src.tmp("key")
        src.emit(f"{{ UV {key} = {' | '.join(parts)};")
        with src.indent():
            for t in cases:
                if t.get("type") == "parse_vset":
                    self._vset_case(src, t, path, key, key_widths, goto)
                    continue
                value = t.get("value")
                if hexstr_bytes(value, path) != total:
                    raise malformed(f"transition value {value!r} is not {total} bytes wide", path, t)
                v = hexstr(value, path)
                mask = t.get("mask")
                if mask is None:
                    src.emit(f"if ({key} == (UV){c_int(v)}) {goto(t.get('next_state'))}")
                else:
                    m = hexstr(mask, path)
                    src.emit(f"if (({key} & (UV){c_int(m)}) == (UV){c_int(v & m)}) {goto(t.get('next_state'))}")
            src.emit(goto(default))
        src.emit("}")

    def _vset_case(self, src, t, path, key, key_widths, goto):
        """A select case on a parse value set: the (masked) key is one of the view's members, which
        NativeSwitch keeps equal to the Python engine's view of the same set (valuesets.py)."""
        vset = self.prog.value_sets.get(t.get("value"))
        if vset is None:
            raise malformed(f"unknown parse value set {t.get('value')!r}", path, t)
        widths = tuple(key_widths)
        mask = t.get("mask")
        m = None if mask is None else hexstr(mask, path)
        vid = len(self.vset_views)
        self.vset_views.append((vset.name, widths, m))
        probe = key if m is None else f"({key} & (UV){c_int(m)})"
        src.emit(f"if (vset_has(&sw->vsets[{vid}], {probe})) {goto(t.get('next_state'))} /* value set {vset.name} */")

    # ------------------------------------------------------------------ checksums and deparser
    @functools.cached_property
    def checksum_items(self):
        """(name, calculation function, target field, its header's valid slot, condition, JSON) per unit."""
        items = []
        calc_index = {c.get("name"): i for i, c in enumerate(self.cfg.get("calculations", []))}
        for i, c in enumerate(self.cfg.get("checksums", [])):
            path = f"checksums[{i}]"
            target = c.get("target")
            ref = self.layout.field(target[0], target[1], path)
            valid = self.layout.header(target[0], path).valid
            cond = None
            if c.get("if_cond") is not None:
                cond = CExpr(self.layout, self.consts, path + ".if_cond").boolean(c["if_cond"]).src
            items.append((c.get("name"), f"calc_{calc_index[c.get('calculation')]}", ref, valid, cond, c))
        return items

    def _checksums(self):
        src = self.src
        src.emit("/* verify_checksum units: 1 when one of them fails */")
        src.emit("static int verify_checksums(pkt_t *pk, pass_ctx_t *cx) {")
        with src.indent():
            src.emit("V *F = pk->F; (void)F; (void)cx; int bad = 0;")
            for name, calc, ref, valid, cond, c in self.checksum_items:
                if not c.get("verify", True):
                    continue
                test = f"F[{valid}]" + (f" && ({cond})" if cond else "")
                src.emit(f"if ({test} && (V){calc}(pk, cx) != F[{ref.slot}]) bad = 1; /* checksum {name} */")
            src.emit("return bad;")
        src.emit("}")
        src.emit()

    def _deparser(self):
        src = self.src
        deparser = next(d for d in self.cfg.get("deparsers", []) if d.get("name") == "deparser")
        src.emit("/* The deparser: update_checksum units, its primitives, then the valid headers in order, then")
        src.emit(" * the payload. Returns the frame's length, or -1 when it does not fit in `cap` bytes. */")
        src.emit("static int64_t deparse(pkt_t *pk, pass_ctx_t *cx, uint8_t *out, uint32_t cap) {")
        with src.indent():
            src.emit("V *F = pk->F; (void)F; uint32_t n = 0;")
            for name, calc, ref, _, cond, c in self.checksum_items:
                if not c.get("update", True):
                    continue
                stmt = f"F[{ref.slot}] = (V)({calc}(pk, cx) & {c_int(ref.mask)}); /* update checksum {name} */"
                src.emit(f"if ({cond}) {stmt}" if cond else stmt)
            primitives = deparser.get("primitives") or []
            if primitives:  # the extern calls of the deparser, before emitting (BMv2's Deparser::deparse)
                path = f"deparsers '{deparser.get('name')}'"
                if any(p.get("op") in ("_jump", "_jump_if_zero", "exit") for p in primitives):
                    raise unsupported("control flow (a jump or exit) among the deparser's primitives", path)
                src.emit("sw_t *sw = cx->sw; (void)sw;")
                self._primitives(src, primitives, path, None)
            for name in deparser.get("order", []):
                h = self.layout.header(name)
                nbytes = h.htype.nbits // 8
                src.emit(f"if (F[{h.valid}]) {{ /* emit {h.name} */")
                with src.indent():
                    src.emit(f"if (cap - n < {nbytes}) return -1;")
                    bit = 0
                    aligned = all(w % 8 == 0 for _, w, _ in h.htype.fields)
                    if not aligned:
                        src.emit(f"memset(out + n, 0, {nbytes});")
                    for k, (fname, width, signed) in enumerate(h.htype.fields):
                        if width == 0:
                            continue
                        value = f"(uint64_t)F[{h.base + k}]"
                        if signed:
                            value = f"(uint64_t)(F[{h.base + k}] & {c_int((1 << width) - 1)})"
                        if bit % 8 == 0 and width % 8 == 0:
                            src.emit(f"wr_be(out + n + {bit // 8}, {width // 8}, {value}); /* {fname} */")
                        else:
                            src.emit(f"put_bits(out + n, {bit}, {width}, {value}); /* {fname} */")
                        bit += width
                    src.emit(f"n += {nbytes};")
                src.emit("}")
            src.emit("if (cap - n < cx->payload_len) return -1;")
            src.emit("memcpy(out + n, cx->payload, cx->payload_len);")
            src.emit("return (int64_t)n + cx->payload_len;")
        src.emit("}")
        src.emit()

    # ------------------------------------------------------------------ pipelines
    def _pipeline(self, pipe_name):
        src = self.src
        pipeline = next(p for p in self.cfg.get("pipelines", []) if p.get("name") == pipe_name)
        nodes = {}
        for t in pipeline.get("tables", []):
            nodes[t["name"]] = ("table", t)
        for c in pipeline.get("conditionals", []):
            nodes[c["name"]] = ("cond", c)
        for a in pipeline.get("action_calls", []):
            nodes[a["name"]] = ("call", a)
        labels = {name: f"N_{k}" for k, name in enumerate(nodes)}
        exit_slot = self.layout.EXIT

        def goto(name):
            return "return;" if name is None else f"goto {labels[name]};"

        src.emit(f"/* control {pipe_name} */")
        src.emit(f"static void {pipe_name}(sw_t *sw, pkt_t *pk, pass_ctx_t *cx) {{")
        with src.indent():
            src.emit("V *F = pk->F; (void)F; (void)sw; (void)cx;")
            src.emit(goto(pipeline.get("init_table")))
            for name, (kind, j) in nodes.items():
                src.emit(f"{labels[name]}: /* {kind} {name} */")
                with src.indent():
                    src.origin(j)
                    if kind == "cond":
                        cond = CExpr(self.layout, self.consts, f"{pipe_name}.{name}").boolean(j.get("expression"))
                        src.emit(f"if ({cond.src}) {goto(j.get('true_next'))}")
                        src.emit(goto(j.get("false_next")))
                    elif kind == "call":
                        aid = j.get("action_id")
                        src.emit(f"A_{aid}(sw, pk, cx, NULL); /* {self.actions[aid].get('name')} */")
                        if self.action_exits.get(aid):
                            src.emit(f"if (F[{exit_slot}]) return;")
                        src.emit(goto(j.get("next_node")))
                    else:
                        self._table_apply(src, j, goto)
            src.emit("return;")
        src.emit("}")
        src.emit()

    def _table_apply(self, src, j, goto):
        table = self.prog.tables[j["name"]]
        ti = self.table_index[table.name]
        L = self.layout
        src.emit("{")
        with src.indent():
            src.emit(f"table_t *t = &sw->tables[{ti}]; /* {table.name} */")
            src.emit("int32_t e = -1, act; const uint64_t *P;")
            if table.keys:
                keys = []
                for k, kj in zip(table.keys, j.get("key", [])):
                    if k.match_type == "valid":
                        h = self.layout.header(kj.get("target"))
                        keys.append(f"(uint64_t)F[{h.valid}]")
                    else:
                        target = kj.get("target")
                        ref = self.layout.field(target[0], target[1])
                        mask = ref.mask if k.static_mask is None else k.static_mask & ref.mask
                        keys.append(f"(uint64_t)(F[{ref.slot}] & {c_int(mask)}) /* {k.name} */")
                src.emit(f"uint64_t key[{len(keys)}] = {{{', '.join(keys)}}};")
                src.emit("e = tbl_lookup(t, key);")
            src.emit("if (e >= 0) {")
            with src.indent():
                src.emit("act = t->actions[e]; P = &t->params[(size_t)e * t->nparams];")
                if table.with_counters:
                    src.emit(f"t->pk[e]++; t->by[e] += (uint64_t)F[{L.ILEN}];")
                if table.direct_meter is not None:
                    self._direct_meter(src, table)
                if table.profile is not None:
                    k = self.profiles.index(table.profile.name)
                    fn = self.selectors.get(table.profile.name, "NULL")
                    src.emit(f"/* action profile {table.profile.name}: the member to run */")
                    src.emit(f"act = profile_resolve(&sw->prof[{k}], act, P[0], {fn}, pk, cx, &P);")
            src.emit("} else { act = t->def_action; P = t->def_params; }")
            may_exit = False
            src.emit("switch (act) {")
            for ref in table.actions.values():
                src.emit(f"case {ref.id}: A_{ref.id}(sw, pk, cx, P); break; /* {ref.name} */")
                may_exit |= bool(self.action_exits.get(ref.id))
            src.emit("default: break;")
            src.emit("}")
            if may_exit:
                src.emit(f"if (F[{L.EXIT}]) return;")
            nxt = j.get("next_tables", {})
            if "__HIT__" in nxt or "__MISS__" in nxt:
                src.emit(f"if (e >= 0) {goto(nxt.get('__HIT__'))}")
                src.emit(goto(nxt.get("__MISS__")))
            else:
                branches = {}
                for ref in table.actions.values():
                    branches.setdefault(nxt.get(ref.name), []).append(ref.id)
                if table.initial_default is None or table.initial_default[0] is None:
                    branches.setdefault(j.get("base_default_next"), []).append(-1)
                targets = list(branches.items())
                for target, ids in targets[:-1]:
                    cond = " || ".join(f"act == {i}" for i in ids)
                    src.emit(f"if ({cond}) {goto(target)}")
                src.emit(goto(targets[-1][0] if targets else None))
        src.emit("}")

    def _direct_meter(self, src, table):
        """On a hit, before the action: the entry's meter (indexed by its handle) colours the packet."""
        meter = table.direct_meter
        m = self.meters.index(meter.name)
        ref = self.layout.field(table.direct_meter_target[0], table.direct_meter_target[1])
        amount = f"(uint64_t)F[{self.layout.ILEN}]" if meter.by_bytes else "1"
        color = c_data(f"(V)meter_execute(&sw->meter_{m}[t->ids[e]], SW_NOW(sw), {amount})")
        src.emit(f"if ((uint32_t)t->ids[e] < {meter.size}) /* direct meter {meter.name} */")
        src.emit("  " + store(str(ref.slot), ref.width, ref.signed, color) + " " + self.annotate(ref.slot))

    # ------------------------------------------------------------------ state, driver, API
    def _state_and_api(self, t):
        L = self.layout
        std = self.prog.std
        t.emit("/* ---- the target: simple_switch's semantics (driver.h) over this program ---- */")

        def slot(ref):
            return (str(ref.slot), c_int(ref.mask)) if ref is not None else ("-1", "0")

        for name in vars(std):
            s, m = slot(getattr(std, name))
            t.emit(f"#define SLOT_{name.upper()} {s}")
            t.emit(f"#define MASK_{name.upper()} {m}")
        for reg in ENGINE_REGISTERS:
            t.emit(f"#define L_{reg} {getattr(L, reg)}")
        t.emit(f"#define HAS_VERIFY {1 if self.prog.has_verify else 0}")
        t.emit(f"#define QUEUEING {1 if self.prog.queueing else 0}")
        t.emit(f"#define DROP_PORT {self.drop_port}")
        t.emit(f"#define PORT_MAX {std.egress_port.mask}")
        template = [k for k, h in ((h.valid, h) for h in L.headers.values()) if h.metadata]
        t.emit("static void pkt_template(pkt_t *pk) {")
        t.emit("    memset(pk->F, 0, sizeof pk->F);")
        for k in template:
            t.emit(f"    pk->F[{k}] = 1; {self.annotate(k)}")
        t.emit("    pk->F[L_TRUNC] = -1; /* not truncated */")
        t.emit("}")
        t.emit("/* BMv2's PHV::reset_metadata (clones): every metadata header zero and valid */")
        t.emit("static void reset_metadata(pkt_t *pk) {")
        for h in L.headers.values():
            if h.metadata:
                t.emit(
                    f"    memset(&pk->F[{h.base}], 0, sizeof(V) * {h.size - 1}); pk->F[{h.valid}] = 1; /* {h.name} */"
                )
        t.emit("}")
        t.emit("static const int *field_list(uint32_t id, int *n) {")
        t.emit("    switch (id) {")
        for fid, slots in self.prog.field_lists.items():
            body = ", ".join(str(s) for s in slots) or "0"
            t.emit(f"    case {fid}: {{ static const int fl[] = {{{body}}}; *n = {len(slots)}; return fl; }}")
        t.emit("    default: *n = 0; return NULL;")
        t.emit("    }")
        t.emit("}")
        learn_lists = self.prog.learn_lists
        width = max((len(ll.slots) for ll in learn_lists.values()), default=0)
        t.emit(f"#define DIGEST_WIDTH {width} /* fields of the widest learn list */")
        t.emit("static const int *learn_list(uint32_t id, int *n) {")
        t.emit("    switch (id) {")
        for lid, ll in learn_lists.items():
            body = ", ".join(str(slot) for slot in ll.slots) or "0"
            t.emit(f"    /* learn list {ll.name} */")
            t.emit(f"    case {lid}: {{ static const int ll[] = {{{body}}}; *n = {len(ll.slots)}; return ll; }}")
        t.emit("    default: *n = 0; return NULL;")
        t.emit("    }")
        t.emit("}")
        t.emit("static void tables_init(sw_t *sw) {")
        with t.indent():
            if learn_lists:
                t.emit("digest_queue_init(&sw->digests, DIGEST_WIDTH);")
            for i, name in enumerate(self.tables):
                table = self.prog.tables[name]
                nparams = max((len(r.widths) for r in table.actions.values()), default=0)
                if table.profile is not None:
                    nparams = max(nparams, 1)  # an indirect entry's data is its member or group handle
                rng = ", ".join("1" if k.match_type == "range" else "0" for k in table.keys) or "0"
                direct = table.keys[0].width if table.kind == "exact" and len(table.keys) == 1 else 0
                direct = direct if 0 < direct <= 16 else 0
                t.emit(f"{{ static const uint8_t r[] = {{{rng}}}; table_t *t = &sw->tables[{i}];")
                t.emit(
                    f'  t->name = "{name}"; t->exact = {1 if table.kind == "exact" else 0}; '
                    f"t->nkeys = {len(table.keys)}; t->nparams = {nparams}; t->is_range = r; t->def_action = -1; "
                    f"t->direct_bits = {direct}; }}"
                )
            for i, name in enumerate(self.profiles):
                profile = self.prog.action_profiles[name]
                nparams = max((len(r.widths) for r in profile.actions.values()), default=0) or 1
                cap = profile.size + 1
                t.emit(f"{{ profile_t *pr = &sw->prof[{i}]; /* action profile {name} */")
                t.emit(f"  pr->nparams = {nparams}; pr->mcap = {cap}; pr->gcap = {2 * cap};")
                t.emit(f"  pr->mbr_action = malloc(sizeof(int32_t) * {cap});")
                t.emit(f"  for (uint32_t m = 0; pr->mbr_action && m < {cap}; m++) pr->mbr_action[m] = -1;")
                t.emit(f"  pr->mbr_params = calloc({cap} * {nparams}, sizeof(uint64_t));")
                t.emit(f"  pr->grp_n = calloc({2 * cap}, sizeof(uint32_t));")
                t.emit(f"  pr->grp_mbrs = calloc({2 * cap}, sizeof(uint32_t *));")
                t.emit("  if (!pr->mbr_action || !pr->mbr_params || !pr->grp_n || !pr->grp_mbrs)")
                t.emit("    pr->mcap = pr->gcap = 0; /* out of memory: the control plane's pushes fail */ }")
            for i, name in enumerate(self.registers):
                t.emit(f"sw->regs[{i}] = calloc({self.prog.registers[name].size} + 1, sizeof(uint64_t));")
            for i, name in enumerate(self.counters):
                size = self.prog.counters[name].size
                t.emit(f"sw->ctr_pk[{i}] = calloc({size} + 1, sizeof(uint64_t));")
                t.emit(f"sw->ctr_by[{i}] = calloc({size} + 1, sizeof(uint64_t));")
        t.emit("}")
        t.emit('#include "driver.h"')
        t.emit('#include "meters_api.h"')
        t.emit('#include "profiles_api.h"')


def _as_int(s):
    try:
        return int(s)
    except ValueError:
        return None


def generate_c(cfg: dict, prog, drop_port: int = 511) -> str:
    """The C source of the program `cfg`, already compiled (and so validated) by the Python engine."""
    return CGen(cfg, prog, drop_port).generate()
