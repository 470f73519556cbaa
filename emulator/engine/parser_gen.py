"""The BMv2 parser -> one generated function `parse(F, D) -> bytes parsed`.

Semantics (bm_sim/parser.cpp): parser ops run in order; an extract needing more bytes than remain,
a failing `verify`, a full header stack or a bad `advance` raise a parser exception, which stops
parsing with `parser_error` set and the headers extracted so far valid (the packet then goes through
ingress as usual: v1model does not drop it). A select compares the byte-padded concatenation of its
key fields with each case (value and optional mask), in order; the `default` case is used when none
matches, and no default means accept. A null next state means accept (p4c also maps an explicit
`transition reject` to null, with a warning).

Generated code: states entered from exactly one place are inlined into their predecessor; the
others become functions `st_<n>(F, D, L, pos)` that return the final position.
"""

from emulator.engine.codegen import each_once, emit_branches, tail_call
from emulator.engine.expressions import ExprCompiler, store
from emulator.engine.headercodec import HeaderCodec
from emulator.engine.jsonutil import hexstr, hexstr_bytes, malformed, unsupported
from emulator.engine.primitives import ActionBody, sibling_clears
from emulator.engine.varbit import field_spec

MAX_INLINE_DEPTH = 24


def split_transitions(st: dict, path: str) -> tuple:
    """(next state of the first `default` case, [(case, its JSON path)]) of a parse state's select."""
    default, cases = None, []
    has_default = False
    for j, t in enumerate(st.get("transitions", [])):
        tpath = f"{path}.transitions[{j}]"
        kind = t.get("type", "hexstr")
        if kind == "hexstr" and t.get("value") == "default":
            kind = "default"  # old JSON format
        if kind == "default":
            if not has_default:
                default, has_default = t.get("next_state"), True
        elif kind == "hexstr":
            cases.append((t, tpath))
        elif kind == "parse_vset":
            cases.append((t, tpath))
        else:
            raise malformed(f"transition type {kind!r}", tpath, t)
    return default, cases


def select_key(ex, st, path) -> tuple:
    """The key of a parse state's select, compiled by `ex` (either backend's expression compiler):
    ([(field value, bit width, left shift)], key bytes). BMv2 concatenates the key fields, each
    padded to whole bytes, a signed one as its two's complement bits."""
    keys = st.get("transition_key") or []
    if not keys:
        raise malformed("select cases without a transition key", path, st)
    fields = []
    for j, k in enumerate(keys):
        t = k.get("type")
        if t == "field":
            ref = ex._field_ref(k)
            width, signed = ref.width, ref.signed
        elif t == "stack_field":
            _, _, width, signed = ex._stack_field(k)
        elif t == "union_stack_field":
            _, _, width, signed = ex._union_stack_field(k)
        elif t == "lookahead":
            width, signed = ex._lookahead_window(k)[1], False
        else:
            raise unsupported(f"select key type '{t}'", f"{path}.transition_key[{j}]", k)
        value = ex.data(k)
        if signed:
            value = ex._arith("&", value, ex._constant((1 << width) - 1, k))
        fields.append((value, width))
    nbytes = sum((width + 7) // 8 for _, width in fields)
    placed, shift = [], nbytes * 8
    for value, width in fields:
        shift -= (width + 7) // 8 * 8
        placed.append((value, width, shift))
    return placed, nbytes


def select_cases(cases, nbytes: int, widths: list, vsets: dict) -> list:
    """[(next state, value, mask or None, value set or None)] of a select's cases (split_transitions'),
    checked against its key: values and masks of `nbytes` bytes, value sets as wide as the key's
    fields (`widths`)."""
    checked = []
    for t, tpath in cases:
        mask = t.get("mask")
        if mask is not None:
            if hexstr_bytes(mask, tpath) != nbytes:
                raise malformed(f"transition mask {mask!r} is not {nbytes} bytes wide", tpath, t)
            mask = hexstr(mask, tpath)
        if t.get("type") == "parse_vset":
            vset = vsets.get(t.get("value"))
            if vset is None:
                raise malformed(f"unknown parse value set {t.get('value')!r}", tpath, t)
            if sum(widths) != vset.bitwidth:
                raise malformed(
                    f"value set '{vset.name}' is {vset.bitwidth} bits, its select key {sum(widths)}", tpath, t
                )
            checked.append((t.get("next_state"), None, mask, vset))
            continue
        value = t.get("value")
        if hexstr_bytes(value, tpath) != nbytes:
            raise malformed(f"transition value {value!r} is not {nbytes} bytes wide", tpath, t)
        checked.append((t.get("next_state"), hexstr(value, tpath), mask, None))
    return checked


class ParserGen:
    def __init__(self, parser: dict, path: str, layout, ns, env, errors: dict, codecs: dict, vsets=None):
        self.parser = parser
        self.path = path
        self.layout = layout
        self.ns = ns
        self.env = env
        self.errors = errors  # error name -> value
        self.codecs = codecs  # header type name -> (HeaderCodec, struct name)
        self.vsets = vsets or {}  # value set name -> ValueSet
        self.states = {}
        for i, st in enumerate(parser.get("parse_states", [])):
            self.states[st.get("name")] = (i, st)
        self.indegree = {name: 0 for name in self.states}
        init = parser.get("init_state")
        if init not in self.states:
            raise malformed(f"init_state {init!r} is not a state", path, parser)
        self.indegree[init] += 1
        for _name, (i, st) in self.states.items():
            for t in st.get("transitions", []):
                nxt = t.get("next_state")
                if nxt is None:
                    continue
                if nxt not in self.states:
                    raise malformed(f"transition to unknown state {nxt!r}", f"{path}.parse_states[{i}]", st)
                self.indegree[nxt] += 1
        self.functions = {}  # state name -> function name (states compiled as functions)

    def codec(self, htype):
        entry = self.codecs.get(htype.name)
        if entry is None:
            try:
                codec = HeaderCodec(htype)
            except ValueError as exc:
                raise unsupported(str(exc), self.path) from None
            entry = (codec, self.ns.add("_hs", codec.struct))
            self.codecs[htype.name] = entry
        return entry

    def generate(self, src) -> str:
        init = self.parser["init_state"]
        pending = [init]
        self.functions[init] = "st_0"
        for name in each_once(pending):
            src.emit(f"def {self.functions[name]}(F, D, L, pos):")
            with src.indent():
                self._state(src, name, pending, 0)
            src.emit()
        src.emit("def parse(F, D):")
        with src.indent():
            src.emit("return st_0(F, D, len(D), 0)")
        src.emit()
        return "parse"

    def _goto(self, src, name, pending, depth):
        if name is None:
            src.emit("return pos")
            return
        if self.indegree[name] == 1 and depth < MAX_INLINE_DEPTH and name not in self.functions:
            self._state(src, name, pending, depth + 1)
            return
        src.emit(f"return {tail_call(self.functions, pending, name, 'st_')}(F, D, L, pos)")

    def _state(self, src, name, pending, depth):
        i, st = self.states[name]
        path = f"{self.path}.parse_states[{i}]"
        src.emit(f"# state {name}")
        for k, op in enumerate(st.get("parser_ops", [])):
            self._op(src, op, f"{path}.parser_ops[{k}]")
        self._transitions(src, st, path, pending, depth)

    # ------------------------------------------------------------------ parser ops
    def _too_short(self, need: str) -> str:
        return f"if L - pos < {need}: raise ParserError(None, pos)"

    def _op(self, src, op, path):
        kind = op.get("op")
        params = op.get("parameters", [])
        ex = ExprCompiler(self.layout, self.ns, path, parser=True)
        if kind == "extract":
            if len(params) != 1:
                raise malformed("extract takes one parameter", path, op)
            self._extract(src, params[0], path, op)
        elif kind == "set":
            if len(params) != 2:
                raise malformed("set takes two parameters", path, op)
            dst, width, signed = ex.lvalue(params[0])
            v = ex.value(params[1])
            if v.kind == "bool":
                v = ex.value({"type": "expression", "value": {"op": "b2d", "left": None, "right": params[1]}})
            elif v.kind != "data":
                raise malformed(f"set source must be an integer, got {v.kind}", path, op)
            src.emit(store(dst, width, signed, v))
        elif kind == "verify":
            if len(params) != 2:
                raise malformed("verify takes (condition, error)", path, op)
            cond = ex.boolean(params[0])
            err = params[1]
            code = str(err) if isinstance(err, int) else ex.data(err).src
            src.emit(f"if not {cond.src}: raise ParserError({code}, pos)")
        elif kind == "shift":
            if len(params) != 1 or not isinstance(params[0], int):
                raise malformed("shift takes a byte count", path, op)
            src.emit(self._too_short(str(params[0])))
            src.emit(f"pos += {params[0]}")
        elif kind == "advance":
            if len(params) != 1:
                raise malformed("advance takes one parameter", path, op)
            v = ex.data(params[0])
            invalid = self.errors["ParserInvalidArgument"]
            if v.const is not None:
                if v.const < 0:
                    raise malformed("negative advance", path, op)
                if v.const % 8:
                    src.emit(f"raise ParserError({invalid}, pos)")
                    return
                src.emit(self._too_short(str(v.const // 8)))
                src.emit(f"pos += {v.const // 8}")
            else:
                t = src.tmp("adv")
                src.emit(f"{t} = {v.src}")
                src.emit(f"if {t} < 0 or {t} & 7: raise ParserError({invalid}, pos)")
                src.emit(self._too_short(f"({t} >> 3)"))
                src.emit(f"pos += {t} >> 3")
        elif kind == "primitive":
            if len(params) != 1 or not isinstance(params[0], dict):
                raise malformed("primitive takes one primitive call", path, op)
            body = ActionBody(self.env, path)
            body.emit(src, [params[0]])
            if body.uses_return:
                raise unsupported("control flow inside a parser primitive", path, op)
        elif kind == "extract_VL":
            if len(params) != 2:
                raise malformed("extract_VL takes (header, length expression)", path, op)
            self._extract(src, params[0], path, op, ex.data(params[1]))
        else:
            raise unsupported(f"parser operation '{kind}'", path, op)

    def _extract(self, src, param, path, op, vl_bits=None):
        """extract / extract_VL into a header, the next element of a stack, or a member of the next
        union of a union stack. `vl_bits` is the compiled width expression of extract_VL."""
        t = param.get("type") if isinstance(param, dict) else None
        if t == "regular":
            h = self.layout.header(param.get("value"), path)
            self._extract_into(src, h.htype, h.base, vl_bits, path, op)
            for line in sibling_clears(self.layout, h.valid):
                src.emit(line)
        elif t == "stack":
            st = self.layout.stack(param.get("value"), path)
            if not st.headers:
                raise malformed("extract into an empty stack", path, op)
            bases = self.ns.const("_SB", st.bases)
            k, b = src.tmp("k"), src.tmp("b")
            src.emit(f"{k} = F[{st.next_slot}]")
            src.emit(f"if {k} >= {len(st.bases)}: raise ParserError({self.errors['StackOutOfBounds']}, pos)")
            src.emit(f"{b} = {bases}[{k}]")
            self._extract_into(src, st.htype, b, vl_bits, path, op)
            src.emit(f"F[{st.next_slot}] = {k} + 1")
        elif t == "union_stack":
            value = param.get("value")
            if not isinstance(value, list) or len(value) != 2:
                raise malformed("union_stack extract takes [union stack, member]", path, op)
            us = self.layout.union_stack(value[0], path)
            if not us.unions:
                raise malformed("extract into an empty union stack", path, op)
            ex = ExprCompiler(self.layout, self.ns, path, parser=True)
            member = ex._member_index(us.unions[0], value[1], op)
            bases = ex.union_stack_bases(us)
            k, u = src.tmp("k"), src.tmp("u")
            src.emit(f"{k} = F[{us.next_slot}]")
            src.emit(f"if {k} >= {len(us.unions)}: raise ParserError({self.errors['StackOutOfBounds']}, pos)")
            src.emit(f"{u} = {bases}[{k}]")
            self._extract_into(src, us.unions[0].members[member].htype, f"{u}[{member}]", vl_bits, path, op)
            for other in range(len(us.unions[0].members)):
                if other != member:
                    src.emit(f"F[{u}[{other}] + {us.unions[0].members[other].htype.nfields}] = 0")
            src.emit(f"F[{us.next_slot}] = {k} + 1")
        else:
            raise malformed(f"extract parameter type {t!r}", path, op)

    def _extract_into(self, src, htype, base, vl_bits, path, op):
        """Read one header of type `htype` at `pos` into the slots at `base` (an int or a variable)."""
        if htype.varbit is None:
            if vl_bits is not None:
                raise malformed(f"extract_VL into '{htype.name}', which has no varbit field", path, op)
            codec, sname = self.codec(htype)
            src.emit(self._too_short(str(codec.nbytes)))
            for line in codec.extract_lines(sname, base):
                src.emit(line)
            src.emit(f"pos += {codec.nbytes}")
            return
        if vl_bits is None:
            raise unsupported(f"extract of the varbit header type '{htype.name}' without a length", path, op)
        spec = self.ns.const("_VL", field_spec(htype))
        need = src.tmp("n")
        src.emit(
            f"{need} = _check_vl_extract(D, pos, {vl_bits.src}, {htype.nbits // 8}, {htype.max_bytes}, "
            f"{self.errors['ParserInvalidArgument']}, {self.errors['HeaderTooShort']})"
        )
        src.emit(f"_extract_vl(F, D, pos, {base}, {spec}, ({need} - {htype.nbits // 8}) * 8, {need})")
        src.emit(f"pos += {need}")

    # ------------------------------------------------------------------ transitions
    def _transitions(self, src, st, path, pending, depth):
        default, cases = split_transitions(st, path)
        if not cases:
            self._goto(src, default, pending, depth)
            return
        ex = ExprCompiler(self.layout, self.ns, path, parser=True)
        fields, nbytes = select_key(ex, st, path)
        kv = src.tmp("key")
        src.emit(f"{kv} = " + " | ".join(f"({v.src} << {shift})" if shift else v.src for v, _, shift in fields))
        widths = [width for _, width, _ in fields]

        def condition(value, mask, vset) -> str:
            if vset is not None:
                return self._vset_condition(vset, widths, mask, kv)
            if mask is None:
                return f"{kv} == {value}"
            return f"{kv} & {mask} == {value & mask}"

        branches = (
            (condition(value, mask, vset), next_state)
            for next_state, value, mask, vset in select_cases(cases, nbytes, widths, self.vsets)
        )
        emit_branches(src, branches, default, lambda target: self._goto(src, target, pending, depth))

    def _vset_condition(self, vset, widths, mask, kv) -> str:
        """`key in value set` (BMv2's ParseSwitchCaseVSet: members byte-padded per key field, then
        masked with the transition's mask)."""
        if mask is None:
            members = self.ns.add("_vset", vset.view(widths), vset.name)
            return f"{kv} in {members}"
        masked = self.ns.add("_vsetm", vset.view(widths, mask), f"{vset.name}_{mask:x}")
        return f"({kv} & {mask}) in {masked}"
