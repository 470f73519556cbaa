"""The BMv2 parser -> one C function `parse` whose states are labels.

Semantics as the Python engine's (emulator/engine/parser_gen.py, whose select key and case checks
this shares): an extract needing more bytes than remain, a failing `verify`, a full header stack or
a bad `advance` stop parsing with the error code, the headers extracted so far valid. A lookahead
inside an expression reports its error through `cx->perr` (a longjmp back into `parse`).
"""

from emulator.engine.jsonutil import malformed, unsupported
from emulator.engine.parser_gen import select_cases, select_key, split_transitions
from emulator.native.cexpr import CExpr, c_int, store
from emulator.native.csource import cname

MAX_SELECT_BYTES = 15  # the key is one unsigned 128-bit value


class CParser:
    def __init__(self, gen):
        self.gen = gen
        self.layout = gen.layout
        self.errors = gen.prog.errors

    def emit(self, src) -> None:
        parser = next((p for p in self.gen.cfg.get("parsers", []) if p.get("name") == "parser"), None)
        src.emit("/* The parser: -1, or the error code that stopped it (bytes parsed so far in *pos_out). */")
        src.emit(
            "static int parse(sw_t *sw, pkt_t *pk, pass_ctx_t *cx, const uint8_t *D, uint32_t L, uint32_t *pos_out) {"
        )
        with src.indent():
            src.emit("V *F = pk->F; (void)sw; uint32_t pos = 0; int err;")
            src.emit("if (setjmp(cx->perr)) { *pos_out = cx->perr_pos; return cx->perr_code; }")
            src.emit(f"goto {_state_label(parser['init_state'])};")
            for i, st in enumerate(parser.get("parse_states", [])):
                path = f"parsers.parse_states[{i}]"
                src.emit(f"{_state_label(st.get('name'))}: /* state {st.get('name')} */")
                with src.indent():
                    for k, op in enumerate(st.get("parser_ops", [])):
                        with src.at(op):
                            self._op(src, op, f"{path}.parser_ops[{k}]")
                    self._transitions(src, st, path)
            src.emit("fail:")
            src.emit("*pos_out = pos;")
            src.emit("return err;")
            src.emit("accept:")
            src.emit("*pos_out = pos;")
            src.emit("return -1;")
        src.emit("}")
        src.emit()

    def _need(self, n) -> str:
        return f"if (L - pos < (uint32_t)({n})) {{ err = ERR_TOO_SHORT; goto fail; }}"

    # ------------------------------------------------------------------ parser ops
    def _op(self, src, op, path):
        kind = op.get("op")
        params = op.get("parameters", [])
        ex = CExpr(self.layout, self.gen.consts, path, parser=True)
        if kind == "extract":
            self._extract(src, ex, params[0], path, op)
        elif kind == "set":
            dst, width, signed = ex.lvalue(params[0])
            src.emit(store(dst, width, signed, ex.data(params[1])))
        elif kind == "verify":
            cond = ex.boolean(params[0])
            err = params[1]
            code = str(err) if isinstance(err, int) else f"(int)({ex.data(err).src})"
            src.emit(f"if (!({cond.src})) {{ err = {code}; goto fail; }}")
        elif kind == "shift":
            src.emit(self._need(params[0]))
            src.emit(f"pos += {params[0]};")
        elif kind == "advance":
            v = ex.data(params[0])
            t = src.tmp("adv")
            src.emit(f"{{ V {t} = {v.src};")
            src.emit(f"  if ({t} < 0 || ({t} & 7)) {{ err = {self.errors['ParserInvalidArgument']}; goto fail; }}")
            src.emit(f"  if ((V)(L - pos) < ({t} >> 3)) {{ err = ERR_TOO_SHORT; goto fail; }}")
            src.emit(f"  pos += (uint32_t)({t} >> 3); }}")
        elif kind == "primitive":
            if self.gen.primitives.emit(src, [params[0]], path, None, parser=True):
                raise unsupported("exit inside a parser primitive", path, op)
        else:
            raise unsupported(f"parser operation '{kind}'", path, op)

    def _extract(self, src, ex, p, path, op):
        """extract into a header, the next element of a header stack, or a member of the next union
        of a header union stack."""
        t = p.get("type")
        if t == "regular":
            h = self.layout.header(p.get("value"), path)
            nbytes = h.htype.nbits // 8
            src.emit(f"/* extract {h.name} ({nbytes} bytes) */")
            src.emit(self._need(nbytes))
            self._fields(src, h.htype, str(h.base))
            for other in self.layout.siblings.get(h.valid, ()):
                src.emit(f"F[{other}] = 0; /* the union's other member */")
            src.emit(f"pos += {nbytes};")
        elif t == "stack":
            st = self.layout.stack(p.get("value"), path)
            bases = self.gen.consts.stack_bases(st)
            self._extract_next(src, f"{st.name}.next", st.next_slot, len(st.bases), st.htype, lambda k: f"{bases}[{k}]")
        elif t == "union_stack":
            us = self.layout.union_stack(p.get("value")[0], path)
            if not us.unions:
                raise malformed("extract into an empty union stack", path, op)
            member = ex._member_index(us.unions[0], p.get("value")[1], op)
            bases = self.gen.consts.union_stack_bases(us)

            def invalidate_others(k):
                for other, h in enumerate(us.unions[0].members):
                    if other != member:
                        src.emit(f"F[{bases}[{k}][{other}] + {h.htype.nfields}] = 0; /* {h.name}: invalid */")

            self._extract_next(
                src,
                f"{us.name}.next.{p.get('value')[1]}",
                us.next_slot,
                len(us.unions),
                us.unions[0].members[member].htype,
                lambda k: f"{bases}[{k}][{member}]",
                invalidate_others,
            )
        else:
            raise unsupported(f"extract of '{t}' (native backend)", path, op)

    def _extract_next(self, src, what, next_slot, depth, htype, base_of, after=None):
        """Extract into element F[next_slot] of a stack of `depth` (StackOutOfBounds when full), whose
        base slot is `base_of(k)`; `after(k)` emits what else the extract does."""
        nbytes = htype.nbits // 8
        k = src.tmp("k")
        src.emit(f"{{ /* extract {what} */ int {k} = (int)F[{next_slot}];")
        with src.indent():
            src.emit(f"if ({k} >= {depth}) {{ err = {self.errors['StackOutOfBounds']}; goto fail; }}")
            src.emit(self._need(nbytes))
            b = src.tmp("b")
            src.emit(f"int {b} = {base_of(k)};")
            self._fields(src, htype, b)
            if after is not None:
                after(k)
            src.emit(f"F[{next_slot}] = {k} + 1;")
            src.emit(f"pos += {nbytes};")
        src.emit("}")

    def _fields(self, src, htype, base: str):
        """Read one header of type `htype` at `pos` into the slots from `base` (a number: the slots
        have names; or a variable: each field is named in a comment)."""
        static = base.isdigit()
        bit = 0
        for k, (fname, width, signed) in enumerate(htype.fields):
            slot = str(int(base) + k) if static else f"{base} + {k}"
            note = "" if static else f" /* {fname} */"
            if width == 0:
                src.emit(f"F[{slot}] = 0;{note}")
                continue
            if bit % 8 == 0 and width % 8 == 0:
                value = f"rd_be(D + pos + {bit // 8}, {width // 8})"
            else:
                value = f"get_bits(D + pos, {bit}, {width})"
            if signed:
                half = c_int(1 << (width - 1))
                src.emit(f"F[{slot}] = (((V){value}) ^ {half}) - {half};{note}")
            else:
                src.emit(f"F[{slot}] = (V){value};{note}")
            bit += width
        slot = str(int(base) + htype.nfields) if static else f"{base} + {htype.nfields}"
        src.emit(f"F[{slot}] = 1;" + ("" if static else " /* $valid$ */"))

    # ------------------------------------------------------------------ transitions
    def _transitions(self, src, st, path):
        default, cases = split_transitions(st, path)
        if not cases:
            src.emit(_goto(default))
            return
        fields, nbytes = select_key(CExpr(self.layout, self.gen.consts, path, parser=True), st, path)
        if nbytes > MAX_SELECT_BYTES:
            raise unsupported(f"a select key of {nbytes} bytes (native backend: at most {MAX_SELECT_BYTES})", path, st)
        parts = [f"((UV)({v.src}) << {shift})" if shift else f"(UV)({v.src})" for v, _, shift in fields]
        widths = tuple(width for _, width, _ in fields)
        key = src.tmp("key")
        src.emit(f"{{ UV {key} = {' | '.join(parts)};")
        with src.indent():
            for next_state, value, mask, vset in select_cases(cases, nbytes, widths, self.gen.prog.value_sets):
                probe = key if mask is None else f"({key} & (UV){c_int(mask)})"
                if vset is not None:
                    has = f"vset_has(&sw->vsets[{self._vset_view(vset, widths, mask)}], {probe})"
                    src.emit(f"if ({has}) {_goto(next_state)} /* value set {vset.name} */")
                else:
                    match = value if mask is None else value & mask
                    src.emit(f"if ({probe} == (UV){c_int(match)}) {_goto(next_state)}")
            src.emit(_goto(default))
        src.emit("}")

    def _vset_view(self, vset, widths, mask) -> int:
        """The index of a new C view of a value set (members padded per key field, masked), which
        NativeSwitch keeps equal to the Python engine's view of the same set (valuesets.py)."""
        self.gen.vset_views.append((vset.name, widths, mask))
        return len(self.gen.vset_views) - 1


def _state_label(name) -> str:
    return f"S_{cname(name)}"


def _goto(state) -> str:
    return "goto accept;" if state is None else f"goto {_state_label(state)};"
