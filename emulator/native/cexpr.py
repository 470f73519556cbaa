"""BMv2 JSON expressions -> C expressions over the PHV, with the Python engine's arithmetic.

The Python engine (emulator/engine/expressions.py) is the reference: BMv2 computes with arbitrary
precision and truncates on store. Here every value is a signed 128-bit `V`, which gives the same
results for the fields the native backend accepts (at most 64 bits wide): sums, differences and
products of such values fit, and the low bits of a left shift are what a store keeps. Operations
that raise in Python (a negative shift, division by zero, a bad stack index) `RAISE` here, which
drops the packet the same way.
"""

from dataclasses import dataclass

from emulator.engine.expressions import ExprCompiler, fold
from emulator.engine.jsonutil import hexstr, malformed, unsupported
from emulator.engine.layout import StackSlots, UnionSlots, UnionStackSlots


@dataclass
class CVal:
    src: str
    kind: str  # data | bool | header | stack | string
    const: int | None = None
    htype: object = None
    static_base: int | None = None
    stack: StackSlots | None = None
    union: UnionSlots | None = None  # a header union known at compile time
    union_stack: UnionStackSlots | None = None


def c_int(value: int) -> str:
    """A C literal of type V for any value that fits in 128 signed bits."""
    if -(1 << 62) < value < (1 << 62):
        return f"((V){value}LL)"
    if not -(1 << 127) <= value < (1 << 127):
        raise OverflowError(value)
    u = value & ((1 << 128) - 1)
    hi, lo = u >> 64, u & ((1 << 64) - 1)
    return f"((V)(((UV){hi:#x}ULL << 64) | (UV){lo:#x}ULL))"


def _const(value: int) -> CVal:
    return CVal(c_int(value), "data", const=value)


class Consts:
    """Constant arrays the generated code refers to (header stack bases), emitted once each."""

    def __init__(self):
        self.arrays = {}  # name -> C definition

    def stack_bases(self, st: StackSlots) -> str:
        name = "SB_" + "".join(c if c.isalnum() else "_" for c in st.name)
        if name not in self.arrays:
            bases = ", ".join(str(b) for b in st.bases) or "0"
            self.arrays[name] = f"static const int {name}[] = {{{bases}}}; /* header stack {st.name} */"
        return name

    def union_stack_bases(self, us: UnionStackSlots) -> str:
        """USB_x[k][m]: the base slot of member m of union k of a header union stack."""
        name = "USB_" + "".join(c if c.isalnum() else "_" for c in us.name)
        if name not in self.arrays:
            rows = ", ".join("{" + ", ".join(str(h.base) for h in u.members) + "}" for u in us.unions) or "{0}"
            width = max((len(u.members) for u in us.unions), default=1)
            self.arrays[name] = f"static const int {name}[][{width}] = {{{rows}}}; /* union stack {us.name} */"
        return name


class CExpr(ExprCompiler):
    """Compiles the type-value objects of one context (action, parser state, condition) to C.

    The JSON walking it shares with the Python engine's ExprCompiler (field references, header stack
    fields, field offsets, the kind checks of header() and stack()) is inherited; every emitted string
    is its own.

    `params`: runtime data widths of an action (None elsewhere), read from `P[i]`.
    `parser`: lookahead reads the packet at `pos`.
    """

    def __init__(self, layout, consts: Consts, path: str, params=None, parser=False):
        self.layout = layout
        self.consts = consts
        self.path = path
        self.params = params
        self.parser = parser

    def data(self, j) -> CVal:
        v = self.value(j)
        if v.kind == "bool":
            return CVal(f"((V)({v.src}))", "data")
        if v.kind != "data":
            raise malformed(f"expected an integer value, got {v.kind}", self.path, j)
        return v

    def boolean(self, j) -> CVal:
        v = self.value(j)
        if v.kind != "bool":
            raise malformed(f"expected a boolean expression, got {v.kind}", self.path, j)
        return v

    def lvalue(self, j):
        """(C slot index expression, width, signed) of an assignable field."""
        t = j.get("type") if isinstance(j, dict) else None
        if t == "field":
            ref = self._field_ref(j)
            return str(ref.slot), ref.width, ref.signed
        if t == "stack_field":
            st, off, width, signed = self._stack_field(j)
            return f"{self._last_base(st)} + {off}", width, signed
        if t == "union_stack_field":
            base, off, width, signed = self._union_stack_field(j)
            return f"{base} + {off}", width, signed
        if t == "expression":
            inner = j.get("value")
            if isinstance(inner, dict) and "op" not in inner and "type" in inner:
                return self.lvalue(inner)
            if isinstance(inner, dict) and inner.get("op") == "access_field":
                hdr = self.header(inner.get("left"))
                off, width, signed = self._field_offset(hdr.htype, inner.get("right"), inner)
                return self._slot(hdr, off), width, signed
        raise malformed("expected an assignable field", self.path, j)

    # ------------------------------------------------------------------ values
    def value(self, j) -> CVal:
        if not isinstance(j, dict) or "type" not in j:
            raise malformed(f"expected a type/value object, got {j!r}", self.path)
        t, v = j["type"], j.get("value")
        if t == "field":
            ref = self._field_ref(j)
            return CVal(f"F[{ref.slot}]", "data")
        if t == "hexstr":
            value = hexstr(v, self.path)
            if not -(1 << 126) <= value < (1 << 126):
                raise unsupported(f"constant {v} wider than 126 bits (native backend)", self.path, j)
            return _const(value)
        if t == "bool":
            return CVal("1" if v else "0", "bool")
        if t in ("local", "runtime_data"):
            if self.params is None or not isinstance(v, int) or not 0 <= v < len(self.params):
                raise malformed(f"action parameter {v!r} out of range", self.path, j)
            return CVal(f"((V)P[{v}])", "data")
        if t == "header":
            h = self.layout.header(v, self.path)
            return CVal(str(h.base), "header", htype=h.htype, static_base=h.base)
        if t == "header_stack":
            st = self.layout.stack(v, self.path)
            return CVal(st.name, "stack", stack=st)
        if t == "stack_field":
            st, off, _, _ = self._stack_field(j)
            return CVal(f"F[{self._last_base(st)} + {off}]", "data")
        if t == "header_union":
            return CVal(v, "union", union=self.layout.union(v, self.path))
        if t == "header_union_stack":
            return CVal(v, "union_stack", union_stack=self.layout.union_stack(v, self.path))
        if t == "union_stack_field":
            base, off, _, _ = self._union_stack_field(j)
            return CVal(f"F[{base} + {off}]", "data")
        if t == "lookahead":
            if not self.parser:
                raise malformed("lookahead outside a parser", self.path, j)
            off, width = v
            if width > 64:
                raise unsupported(f"lookahead of {width} bits (native backend: at most 64)", self.path, j)
            return CVal(f"((V)lookahead(cx, D, L, pos, {off}, {width}))", "data")
        if t == "string":
            return CVal("0", "string")
        if t == "expression":
            if isinstance(v, dict) and "op" in v:
                return self._op(v)
            if isinstance(v, dict) and "type" in v:
                return self.value(v)
            raise malformed("expression without an op", self.path, j)
        raise unsupported(f"expression operand type '{t}'", self.path, j)

    def _last_base(self, st) -> str:
        return f"{self.consts.stack_bases(st)}[stack_last(cx, F[{st.next_slot}])]"

    def _union_stack_field(self, j):
        """(C base of the member in the last union, offset, width, signed) of a union stack field."""
        us, member, off, width, signed = self.union_stack_member_field(j)
        base = f"{self.consts.union_stack_bases(us)}[stack_last(cx, F[{us.next_slot}])][{member}]"
        return base, off, width, signed

    def _slot(self, hdr: CVal, offset: int) -> str:
        if hdr.static_base is not None:
            return str(hdr.static_base + offset)
        return f"({hdr.src}) + {offset}"

    # ------------------------------------------------------------------ operators
    def _op(self, e) -> CVal:
        op = e.get("op")
        left, right = e.get("left"), e.get("right")
        if op == "?":
            cond = self.boolean(e.get("cond"))
            lv, rv = self.value(left), self.value(right)
            if lv.kind != rv.kind:
                raise malformed("ternary operator branches differ in type", self.path, e)
            return CVal(f"(({cond.src}) ? {lv.src} : {rv.src})", lv.kind, htype=lv.htype)
        if op in ("+", "-") and left is None:
            r = self.data(right)
            return CVal(f"(-{r.src})", "data") if op == "-" else r
        if op in ("+", "-", "*", "&", "|", "^", "<<", ">>", "%", "/"):
            if op == "&":
                shifted = self._masked_shift(left, right)
                if shifted is not None:
                    return shifted
            return self._arith(op, self.data(left), self.data(right))
        if op in ("==", "!="):
            lv, rv = self.value(left), self.value(right)
            if lv.kind != rv.kind:
                raise malformed(f"'{op}' between {lv.kind} and {rv.kind}", self.path, e)
            if lv.kind == "header":
                eq = f"header_eq(F, {lv.src}, {rv.src}, {lv.htype.nfields})"
                return CVal(eq if op == "==" else f"(!{eq})", "bool")
            if lv.kind not in ("data", "bool"):
                raise unsupported(f"'{op}' on {lv.kind} values", self.path, e)
            return CVal(f"({lv.src} {op} {rv.src})", "bool")
        if op in (">", ">=", "<", "<="):
            lv, rv = self.data(left), self.data(right)
            return CVal(f"({lv.src} {op} {rv.src})", "bool")
        if op in ("and", "or"):
            lv, rv = self.boolean(left), self.boolean(right)
            return CVal(f"({lv.src} {'&&' if op == 'and' else '||'} {rv.src})", "bool")
        if op == "not":
            return CVal(f"(!{self.boolean(right).src})", "bool")
        if op == "~":
            return CVal(f"(~{self.data(right).src})", "data")
        if op == "valid":
            h = self.header(right)
            return CVal(f"(F[{self._slot(h, h.htype.nfields)}] != 0)", "bool")
        if op == "d2b":
            return CVal(f"({self.data(right).src} != 0)", "bool")
        if op == "b2d":
            return CVal(f"((V)({self.boolean(right).src}))", "data")
        if op in ("two_comp_mod", "sat_cast", "usat_cast"):
            return CVal(f"v_{op}(cx, {self.data(left).src}, {self.data(right).src})", "data")
        if op in ("dereference_header_stack", "dereference_stack"):
            st = self.stack(left).stack
            idx = self.data(right)
            if idx.const is not None:
                if not 0 <= idx.const < len(st.bases):
                    raise malformed(f"stack index {idx.const} out of range", self.path, e)
                base = st.bases[idx.const]
                return CVal(str(base), "header", htype=st.htype, static_base=base)
            bases = self.consts.stack_bases(st)
            return CVal(f"stack_at(cx, {bases}, {len(st.bases)}, {idx.src})", "header", htype=st.htype)
        if op == "last_stack_index":
            st = self.stack(right).stack
            return CVal(f"(F[{st.next_slot}] - 1)", "data")
        if op == "size_stack":
            st = self.stack(right).stack
            return CVal(f"F[{st.next_slot}]", "data")
        if op == "valid_union":
            u = self.value(right)
            if u.kind != "union":
                raise malformed(f"valid_union of a {u.kind}", self.path, e)
            return CVal("(" + " || ".join(f"F[{h.valid}] != 0" for h in u.union.members) + ")" or "0", "bool")
        if op == "dereference_union_stack":
            us = self.value(left)
            idx = self.data(right)
            if us.kind != "union_stack":
                raise malformed(f"dereference_union_stack of a {us.kind}", self.path, e)
            if idx.const is None:
                raise unsupported("a header union stack indexed at run time (native backend)", self.path, e)
            if not 0 <= idx.const < len(us.union_stack.unions):
                raise malformed(f"union stack index {idx.const} out of range", self.path, e)
            u = us.union_stack.unions[idx.const]
            return CVal(u.name, "union", union=u)
        if op == "access_union_header":
            u = self.value(left)
            if u.kind != "union" or not isinstance(right, int) or not 0 <= right < len(u.union.members):
                raise malformed("access_union_header needs a union and a member offset", self.path, e)
            h = u.union.members[right]
            return CVal(str(h.base), "header", htype=h.htype, static_base=h.base)
        if op == "access_field":
            hdr = self.header(left)
            off, _, _ = self._field_offset(hdr.htype, right, e)
            return CVal(f"F[{self._slot(hdr, off)}]", "data")
        raise unsupported(f"expression operator '{op}'", self.path, e)

    def _masked_shift(self, left, right):
        operands = self.masked_shift_operands(left, right)
        if operands is None:
            return None
        a, amount, mask = operands
        return CVal(f"v_shl_masked(cx, {a.src}, {amount.src}, {mask.src}, {mask.const.bit_length()})", "data")

    def _arith(self, op, a: CVal, b: CVal) -> CVal:
        if a.const is not None and b.const is not None:
            folded = fold(op, a.const, b.const)
            if folded is not None and -(1 << 126) <= folded < (1 << 126):
                return _const(folded)
        if op in ("&", "|", "^", "+", "-", "*"):
            return CVal(f"({a.src} {op} {b.src})", "data")
        if op == ">>":
            if b.const is not None:
                if b.const < 0:
                    raise malformed("negative shift amount", self.path)
                return CVal(f"({a.src} >> {min(b.const, 127)})", "data")
            return CVal(f"v_shr(cx, {a.src}, {b.src})", "data")
        if op == "<<":
            if b.const is not None:
                if b.const < 0:
                    raise malformed("negative shift amount", self.path)
                if b.const >= 127:
                    return CVal(f"((V)0 * {a.src})", "data")
                return CVal(f"((V)((UV){a.src} << {b.const}))", "data")
            return CVal(f"v_shl(cx, {a.src}, {b.src})", "data")
        if op == "/":
            return CVal(f"v_div(cx, {a.src}, {b.src})", "data")
        if op == "%":
            return CVal(f"v_mod(cx, {a.src}, {b.src})", "data")
        raise AssertionError(op)


def store(dst: str, width: int, signed: bool, value: CVal) -> str:
    """`F[dst] = value` truncated as BMv2's Field::set (two's complement for signed fields)."""
    if width > 64:
        raise unsupported(f"a {width}-bit field (native backend: at most 64 bits)", "store")
    mask = c_int((1 << width) - 1)
    if value.kind == "bool":
        value = CVal(f"((V)({value.src}))", "data")
    if not signed:
        if value.const is not None:
            return f"F[{dst}] = {c_int(value.const & ((1 << width) - 1))};"
        return f"F[{dst}] = ({value.src}) & {mask};"
    half = c_int(1 << (width - 1)) if width else c_int(0)
    return f"F[{dst}] = ((({value.src}) + {half}) & {mask}) - {half};"
