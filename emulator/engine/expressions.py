"""BMv2 JSON expressions -> Python expression source, with BMv2's arithmetic.

BMv2 evaluates expressions with arbitrary precision (GMP) and truncates only when a value is stored
into a field or register; Python ints have the same semantics, so an expression becomes the same
Python expression over `F[slot]` reads. p4c inserts the masks (`& 0xff`, `two_comp_mod`) where P4
wants wrap-around. To skip redundant masks on stores, each compiled value carries `bits`: when known,
0 <= value < 2**bits.
"""

from dataclasses import dataclass

from emulator.engine.jsonutil import hexstr, malformed, unsupported
from emulator.engine.layout import FieldRef, HeaderType, StackSlots, UnionSlots, UnionStackSlots

SHIFT_LIMIT = 1 << 16  # a left shift by more bits than this is refused (memory), unless masked


@dataclass
class Value:
    src: str
    kind: str  # data | bool | header | stack | union | union_stack | string
    bits: int | None = None  # data: known 0 <= v < 2**bits
    const: int | None = None  # data: the value when it is a compile-time constant
    htype: HeaderType | None = None  # header: its type (for field offsets)
    static_base: int | None = None  # header: slot base when known at compile time
    stack: StackSlots | None = None
    field: FieldRef | None = None  # data read straight from a field
    union: UnionSlots | None = None  # union: the union (a union stack's first one when the index is dynamic)
    static_union: bool = False  # union: `union` is the very union (src then names its member bases)
    union_stack: UnionStackSlots | None = None


def _data(src, bits=None, const=None, field=None) -> Value:
    return Value(src, "data", bits=bits, const=const, field=field)


def _const(value: int) -> Value:
    return _data(str(value), bits=value.bit_length() if value >= 0 else None, const=value)


def _bool(src) -> Value:
    return Value(src, "bool")


def _max_bits(*values):
    if any(v.bits is None for v in values):
        return None
    return max(v.bits for v in values)


class ExprCompiler:
    """Compiles the type-value objects of one context (an action, a parser state, a condition).

    `params` are the action's runtime data widths (None outside actions); `param_src(i)` names the
    Python variable holding runtime datum i. `parser` enables `lookahead` (reads D at pos).

    The JSON walk (what each operand and operator means, and its checks) is the same for every
    target; the text it writes comes from the hooks below (the class attributes and the methods
    under "target syntax"), which the native backend's C compiler (emulator.native.cexpr) overrides.
    """

    TRUE, FALSE = "True", "False"
    AND, OR, NOT = "and", "or", "not "

    def __init__(self, layout, ns, path, params=None, param_src=None, parser=False):
        self.layout = layout
        self.ns = ns
        self.path = path
        self.params = params
        self.param_src = param_src or (lambda i: f"p{i}")
        self.parser = parser

    # ----------------------------------------------------------------- entry points
    def _of_kind(self, j, kind: str, what: str) -> Value:
        v = self.value(j)
        if v.kind != kind:
            raise malformed(f"expected {what}, got {v.kind}", self.path, j)
        return v

    def data(self, j) -> Value:
        return self._of_kind(j, "data", "an integer value")

    def boolean(self, j) -> Value:
        v = self.value(j)
        if v.kind == "data":  # BMv2 has no implicit conversion; p4c always inserts d2b
            raise malformed("expected a boolean expression, got an integer one", self.path, j)
        if v.kind != "bool":
            raise malformed(f"expected a boolean expression, got {v.kind}", self.path, j)
        return v

    def header(self, j) -> Value:
        return self._of_kind(j, "header", "a header")

    def stack(self, j) -> Value:
        return self._of_kind(j, "stack", "a header stack")

    def lvalue(self, j):
        """(index source, width, signed) of an assignable field reference."""
        if not isinstance(j, dict):
            raise malformed("expected a field reference", self.path, j)
        t = j.get("type")
        if t == "field":
            ref = self._field_ref(j)
            if ref.name == "$valid$":
                raise malformed("the $valid$ field is read-only", self.path, j)
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

    # ----------------------------------------------------------------- values
    def value(self, j) -> Value:
        if not isinstance(j, dict) or "type" not in j:
            raise malformed(f"expected a type/value object, got {j!r}", self.path)
        t = j["type"]
        v = j.get("value")
        if t == "field":
            ref = self._field_ref(j)
            return _data(f"F[{ref.slot}]", bits=None if ref.signed else ref.width, field=ref)
        if t == "hexstr":
            return self._constant(hexstr(v, self.path), j)
        if t == "bool":
            if not isinstance(v, bool):
                raise malformed(f"bool value {v!r}", self.path, j)
            return _bool(self.TRUE if v else self.FALSE)
        if t in ("local", "runtime_data"):
            if self.params is None:
                raise malformed(f"'{t}' outside an action", self.path, j)
            if not isinstance(v, int) or not 0 <= v < len(self.params):
                raise malformed(f"action parameter index {v!r} out of range", self.path, j)
            return _data(self.param_src(v), bits=self.params[v])
        if t == "header":
            h = self.layout.header(v, self.path)
            return Value(str(h.base), "header", htype=h.htype, static_base=h.base)
        if t == "header_stack":
            st = self.layout.stack(v, self.path)
            return Value(repr(st.name), "stack", stack=st)
        if t == "stack_field":
            st, off, width, signed = self._stack_field(j)
            return _data(f"F[{self._last_base(st)} + {off}]", bits=None if signed else width)
        if t == "lookahead":
            return self._lookahead(j)
        if t == "string":
            return Value(repr(str(v)), "string")
        if t == "expression":
            if isinstance(v, dict) and "op" in v:
                return self._op(v)
            if isinstance(v, dict) and "type" in v:
                return self.value(v)
            raise malformed("expression without an op", self.path, j)
        if t == "header_union":
            u = self.layout.union(v, self.path)
            return self._union_value(u)
        if t == "header_union_stack":
            us = self.layout.union_stack(v, self.path)
            return Value(repr(us.name), "union_stack", union_stack=us)
        if t == "union_stack_field":
            base, off, width, signed = self._union_stack_field(j)
            return _data(f"F[{base} + {off}]", bits=None if signed else width)
        if t == "register":
            raise unsupported("register reference inside an expression", self.path, j)
        raise unsupported(f"expression operand type '{t}'", self.path, j)

    def _field_ref(self, j) -> FieldRef:
        v = j.get("value")
        if not isinstance(v, list) or len(v) != 2:
            raise malformed("field reference must be [header, field]", self.path, j)
        return self.layout.field(v[0], v[1], self.path)

    def _stack_field(self, j):
        v = j.get("value")
        if not isinstance(v, list) or len(v) != 2:
            raise malformed("stack field must be [stack, field]", self.path, j)
        st = self.layout.stack(v[0], self.path)
        off = st.htype.offsets.get(v[1])
        if off is None:
            raise malformed(f"stack {v[0]!r} has no field {v[1]!r}", self.path, j)
        if off == st.htype.nfields:
            return st, off, 1, False
        _, width, signed = st.htype.fields[off]
        return st, off, width, signed

    def _union_value(self, u: UnionSlots) -> Value:
        bases = self.ns.const("_UB", tuple(h.base for h in u.members))
        return Value(bases, "union", union=u, static_union=True)

    def union_stack_bases(self, us: UnionStackSlots) -> str:
        """Name of the constant ((member bases of union 0), (of union 1), ...) of a union stack."""
        return self.ns.const("_USB", tuple(tuple(h.base for h in u.members) for u in us.unions))

    def _union_stack_field(self, j):
        """(base source, offset, width, signed) of a field of a member of a union stack's last union."""
        us, member, off, width, signed = self.union_stack_member_field(j)
        bases = self.union_stack_bases(us)
        return f"{bases}[_last_index(F[{us.next_slot}])][{member}]", off, width, signed

    def union_stack_member_field(self, j):
        """(union stack, member index, offset, width, signed) of a union stack field reference, checked;
        both code generators place the base in their own terms."""
        v = j.get("value")
        if not isinstance(v, list) or len(v) != 3:
            raise malformed("union stack field must be [union stack, member, field]", self.path, j)
        us = self.layout.union_stack(v[0], self.path)
        if not us.unions:
            raise malformed("field of an empty union stack", self.path, j)
        member = self._member_index(us.unions[0], v[1], j)
        htype = us.unions[0].members[member].htype
        off = htype.offsets.get(v[2])
        if off is None:
            raise malformed(f"union member {v[1]!r} has no field {v[2]!r}", self.path, j)
        width, signed = (1, False) if off == htype.nfields else htype.fields[off][1:]
        return us, member, off, width, signed

    def _member_index(self, u: UnionSlots, name, j) -> int:
        k = u.member_index(name)
        if k is not None:
            return k
        raise malformed(f"union {u.name!r} has no member {name!r}", self.path, j)

    def _last_base(self, st: StackSlots) -> str:
        bases = self.ns.const("_SB", st.bases)
        return f"{bases}[_last_index(F[{st.next_slot}])]"

    def _field_offset(self, htype, right, j):
        if not isinstance(right, int) or not 0 <= right <= htype.nfields:
            raise malformed(f"field offset {right!r} out of range", self.path, j)
        if right == htype.nfields:
            return right, 1, False
        _, width, signed = htype.fields[right]
        return right, width, signed

    def _lookahead_window(self, j) -> tuple:
        """(bit offset, bit width) of a lookahead, checked."""
        if not self.parser:
            raise malformed("lookahead outside a parser", self.path, j)
        v = j.get("value")
        if not isinstance(v, list) or len(v) != 2:
            raise malformed("lookahead must be [offset, bitwidth]", self.path, j)
        return tuple(v)

    # ----------------------------------------------------------------- operators
    def _op(self, e) -> Value:
        op = e.get("op")
        left, right = e.get("left"), e.get("right")
        if op == "?":
            cond = self.boolean(e.get("cond"))
            lv, rv = self.value(left), self.value(right)
            if lv.kind != rv.kind:
                raise malformed("ternary operator branches differ in type", self.path, e)
            return self._choice(cond, lv, rv)
        if op in ("+", "-") and left is None:
            r = self.data(right)
            return self._unary("-", r) if op == "-" else r
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
            if lv.kind in ("header", "union"):
                src = self._header_eq(lv, rv) if lv.kind == "header" else self._union_eq(lv, rv, e)
                return _bool(src if op == "==" else f"({self.NOT}{src})")
            if lv.kind not in ("data", "bool"):
                raise unsupported(f"'{op}' on {lv.kind} values", self.path, e)
            return self._compare(op, lv, rv)
        if op in (">", ">=", "<", "<="):
            return self._compare(op, self.data(left), self.data(right))
        if op in ("and", "or"):
            lv, rv = self.boolean(left), self.boolean(right)
            return _bool(f"({lv.src} {self.AND if op == 'and' else self.OR} {rv.src})")
        if op == "not":
            return _bool(f"({self.NOT}{self.boolean(right).src})")
        if op == "~":
            return self._unary("~", self.data(right))
        if op == "valid":
            h = self.header(right)
            return _bool(f"(F[{self._slot(h, h.htype.nfields)}] != 0)")
        if op == "d2b":
            return self._d2b(self.data(right))
        if op == "b2d":
            return self._b2d(self.boolean(right))
        if op in ("two_comp_mod", "sat_cast", "usat_cast"):
            return self._cast(op, self.data(left), self.data(right), e)
        if op in ("dereference_header_stack", "dereference_stack"):
            st = self.stack(left).stack
            idx = self.data(right)
            if idx.const is not None:
                if not 0 <= idx.const < len(st.bases):
                    raise malformed(f"stack index {idx.const} out of range", self.path, e)
                base = st.bases[idx.const]
                return Value(str(base), "header", htype=st.htype, static_base=base)
            return Value(self._stack_at(st, idx), "header", htype=st.htype)
        if op == "last_stack_index":
            next_slot, _ = self._any_stack(right)
            return _data(f"(F[{next_slot}] - 1)")
        if op == "size_stack":
            next_slot, depth = self._any_stack(right)
            return _data(f"F[{next_slot}]", bits=depth.bit_length())
        if op == "access_field":
            hdr = self.header(left)
            off, width, signed = self._field_offset(hdr.htype, right, e)
            return _data(f"F[{self._slot(hdr, off)}]", bits=None if signed else width)
        if op == "valid_union":
            u = self.value(right)
            if u.kind != "union":
                raise malformed(f"valid_union of a {u.kind}", self.path, e)
            if u.static_union:
                members = f" {self.OR} ".join(f"F[{h.valid}] != 0" for h in u.union.members)
                return _bool(f"({members})" if members else self.FALSE)
            # a union known only at run time (only _union_at makes one)
            nfields = self.ns.const("_UN", tuple(h.htype.nfields for h in u.union.members))
            return _bool(f"_union_valid(F, {u.src}, {nfields})")
        if op == "dereference_union_stack":
            us = self.value(left)
            if us.kind != "union_stack":
                raise malformed(f"dereference_union_stack of a {us.kind}", self.path, e)
            stack = us.union_stack
            if not stack.unions:
                raise malformed("index into an empty union stack", self.path, e)
            idx = self.data(right)
            if idx.const is not None:
                if not 0 <= idx.const < len(stack.unions):
                    raise malformed(f"union stack index {idx.const} out of range", self.path, e)
                return self._union_value(stack.unions[idx.const])
            return self._union_at(stack, idx, e)
        if op == "access_union_header":
            u = self.value(left)
            if u.kind != "union":
                raise malformed(f"access_union_header of a {u.kind}", self.path, e)
            if not isinstance(right, int) or not 0 <= right < len(u.union.members):
                raise malformed(f"union member offset {right!r} out of range", self.path, e)
            member = u.union.members[right]
            if u.static_union:
                return Value(str(member.base), "header", htype=member.htype, static_base=member.base)
            return Value(f"{u.src}[{right}]", "header", htype=member.htype)  # a union from _union_at
        raise unsupported(f"expression operator '{op}'", self.path, e)

    def _any_stack(self, j):
        """(next slot, depth) of a header stack or a header union stack."""
        v = self.value(j)
        if v.kind == "stack":
            return v.stack.next_slot, len(v.stack.bases)
        if v.kind == "union_stack":
            return v.union_stack.next_slot, len(v.union_stack.unions)
        raise malformed(f"expected a header stack, got {v.kind}", self.path, j)

    def _slot(self, hdr: Value, offset: int) -> str:
        if hdr.static_base is not None:
            return str(hdr.static_base + offset)
        return f"{hdr.src} + {offset}"

    # ----------------------------------------------------------------- target syntax
    def _constant(self, value: int, j) -> Value:
        return _const(value)

    def _lookahead(self, j) -> Value:
        off, width = self._lookahead_window(j)
        return _data(f"_lookahead(D, pos, {off}, {width})", bits=width)

    def _choice(self, cond: Value, a: Value, b: Value) -> Value:
        """`cond ? a : b` of two values of one kind."""
        src = f"({a.src} if {cond.src} else {b.src})"
        if a.kind == "data":
            return _data(src, bits=_max_bits(a, b))
        return Value(src, a.kind, htype=a.htype)

    def _b2d(self, b: Value) -> Value:
        return _data(f"(1 if {b.src} else 0)", bits=1)

    def _d2b(self, v: Value) -> Value:
        return _bool(f"({v.src} != 0)")

    def _unary(self, op: str, v: Value) -> Value:
        """`-v` or `~v`."""
        return _data(f"({op}{v.src})")

    def _compare(self, op: str, a: Value, b: Value) -> Value:
        """`a op b` for ==, !=, <, <=, >, >= of two values of one kind (data, or bool for == and !=)."""
        return _bool(f"({a.src} {op} {b.src})")

    def _header_eq(self, a: Value, b: Value) -> str:
        """BMv2's Header::cmp: equal iff both are valid and all fields are equal."""
        return f"_header_eq(F, {a.src}, {b.src}, {a.htype.nfields})"

    def _union_eq(self, a: Value, b: Value, e) -> str:
        """BMv2's HeaderUnion::cmp: both valid, the same member valid, and that member equal."""
        nfields = self.ns.const("_UN", tuple(h.htype.nfields for h in a.union.members))
        return f"_union_eq(F, {a.src}, {b.src}, {nfields})"

    def _stack_at(self, st: StackSlots, idx: Value) -> str:
        """The base slot of element `idx` (known at run time) of a header stack."""
        return f"_stack_at({self.ns.const('_SB', st.bases)}, {idx.src})"

    def _union_at(self, stack: UnionStackSlots, idx: Value, e) -> Value:
        """Union `idx` (known at run time) of a header union stack: its member bases at run time."""
        bases = self.union_stack_bases(stack)
        return Value(f"{bases}[_stack_at(range({len(stack.unions)}), {idx.src})]", "union", union=stack.unions[0])

    def masked_shift_operands(self, left, right):
        """(a, amount, mask) compiled, when `left & right` is `(a << amount) & mask` with a run-time
        amount and a constant mask (so a target can compute it without the unmasked shift); else None."""
        for shift_j, mask_j in ((left, right), (right, left)):
            if (
                isinstance(shift_j, dict)
                and shift_j.get("type") == "expression"
                and isinstance(shift_j.get("value"), dict)
                and shift_j["value"].get("op") == "<<"
            ):
                amount = self.data(shift_j["value"].get("right"))
                mask = self.data(mask_j)
                if amount.const is None and mask.const is not None and mask.const >= 0:
                    return self.data(shift_j["value"].get("left")), amount, mask
        return None

    def _masked_shift(self, left, right):
        """`(a << b) & mask` with a run-time shift amount: computed without building a huge int."""
        operands = self.masked_shift_operands(left, right)
        if operands is None:
            return None
        a, amount, mask = operands
        return _data(f"_shl_masked({a.src}, {amount.src}, {mask.const})", bits=mask.const.bit_length())

    def _arith(self, op, a: Value, b: Value) -> Value:
        if a.const is not None and b.const is not None:
            folded = fold(op, a.const, b.const)
            if folded is not None:
                return _const(folded)
        bits = None
        if op == "&":
            known = [v.bits for v in (a, b) if v.bits is not None]
            bits = min(known) if known else None
            return _data(f"({a.src} & {b.src})", bits=bits)
        if op in ("|", "^"):
            return _data(f"({a.src} {op} {b.src})", bits=_max_bits(a, b))
        if op == "+":
            mb = _max_bits(a, b)
            return _data(f"({a.src} + {b.src})", bits=None if mb is None else mb + 1)
        if op == "-":
            return _data(f"({a.src} - {b.src})")
        if op == "*":
            bits = a.bits + b.bits if a.bits is not None and b.bits is not None else None
            return _data(f"({a.src} * {b.src})", bits=bits)
        if op == ">>":
            if b.const is not None:
                if b.const < 0:
                    raise malformed("negative shift amount", self.path)
                bits = None if a.bits is None else max(a.bits - b.const, 0)
                return _data(f"({a.src} >> {b.const})", bits=bits)
            return _data(f"_shr({a.src}, {b.src})", bits=a.bits)
        if op == "<<":
            if b.const is not None:
                if b.const < 0:
                    raise malformed("negative shift amount", self.path)
                if b.const > SHIFT_LIMIT:
                    raise unsupported(f"left shift by {b.const} bits", self.path)
                bits = None if a.bits is None else a.bits + b.const
                return _data(f"({a.src} << {b.const})", bits=bits)
            return _data(f"_shl({a.src}, {b.src})")
        if op == "/":
            return _data(f"_div({a.src}, {b.src})", bits=a.bits)
        if op == "%":
            bits = b.const.bit_length() if b.const is not None and b.const > 0 else a.bits
            return _data(f"_mod({a.src}, {b.src})", bits=bits)
        raise AssertionError(op)

    def _cast(self, op, src: Value, width: Value, e) -> Value:
        if width.const is None:
            return _data(f"_{op}({src.src}, {width.src})")
        w = width.const
        if w <= 0:
            raise malformed(f"{op} width {w}", self.path, e)
        if op == "two_comp_mod":
            half = 1 << (w - 1)
            return _data(f"((({src.src}) + {half} & {(1 << w) - 1}) - {half})")
        if op == "usat_cast":
            return _data(f"_usat_cast({src.src}, {w})", bits=w)
        return _data(f"_sat_cast({src.src}, {w})")


def fold(op, a, b):
    """`a op b` of two constants, or None when BMv2 would raise or the result would be unreasonably wide."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "&":
        return a & b
    if op == "|":
        return a | b
    if op == "^":
        return a ^ b
    if op == "<<" and 0 <= b <= SHIFT_LIMIT:
        return a << b
    if op == ">>" and b >= 0:
        return a >> b
    if op == "/" and a >= 0 and b > 0:
        return a // b
    if op == "%" and a >= 0 and b > 0:
        return a % b
    return None


def store(dst_index: str, width: int, signed: bool, value: Value) -> str:
    """Statement storing `value` into the field at `dst_index`, truncated as BMv2's Field::set."""
    mask = (1 << width) - 1
    if not signed:
        if value.bits is not None and value.bits <= width:
            return f"F[{dst_index}] = {value.src}"
        if value.const is not None:
            return f"F[{dst_index}] = {value.const & mask}"
        return f"F[{dst_index}] = {value.src} & {mask}"
    half = 1 << (width - 1)
    if value.const is not None:
        return f"F[{dst_index}] = {((value.const + half) & mask) - half}"
    if value.field is not None and value.field.signed and value.field.width <= width:
        return f"F[{dst_index}] = {value.src}"
    return f"F[{dst_index}] = (({value.src}) + {half} & {mask}) - {half}"


# ------------------------------------------------------------------ run-time helpers
def _shl(a, b):
    if b < 0:
        raise ValueError(f"negative shift amount {b}")
    if b > SHIFT_LIMIT and a:
        raise OverflowError(f"left shift by {b} bits (result not masked)")
    return a << b


def _shl_masked(a, b, mask):
    if b < 0:
        raise ValueError(f"negative shift amount {b}")
    if b >= mask.bit_length():
        return 0
    return (a << b) & mask


def _shr(a, b):
    if b < 0:
        raise ValueError(f"negative shift amount {b}")
    return a >> b


def _div(a, b):
    if a < 0 or b <= 0:
        raise ValueError(f"division {a} / {b}: BMv2 requires a >= 0 and b > 0")
    return a // b


def _mod(a, b):
    if a < 0 or b <= 0:
        raise ValueError(f"modulo {a} % {b}: BMv2 requires a >= 0 and b > 0")
    return a % b


def _two_comp_mod(x, w):
    half = 1 << (w - 1)
    return ((x + half) & ((1 << w) - 1)) - half


def _usat_cast(x, w):
    top = (1 << w) - 1
    return top if x > top else (0 if x < 0 else x)


def _sat_cast(x, w):
    top = (1 << (w - 1)) - 1
    bottom = -(1 << (w - 1))
    return top if x > top else (bottom if x < bottom else x)


def _last_index(n):
    if n <= 0:
        raise IndexError("'.last' of an empty header stack")
    return n - 1


def _stack_at(bases, idx):
    if not 0 <= idx < len(bases):
        raise IndexError(f"header stack index {idx} out of range 0..{len(bases) - 1}")
    return bases[idx]


def _header_eq(F, a, b, nfields):
    return bool(F[a + nfields] and F[b + nfields] and F[a : a + nfields] == F[b : b + nfields])


def _union_valid(F, bases, nfields):
    return any(F[b + n] for b, n in zip(bases, nfields))


def _union_eq(F, a, b, nfields):
    for k, n in enumerate(nfields):
        if F[a[k] + n]:
            return bool(F[b[k] + n]) and F[a[k] : a[k] + n] == F[b[k] : b[k] + n]
    return False  # an invalid union equals nothing


HELPERS = {
    "_shl": _shl,
    "_shl_masked": _shl_masked,
    "_shr": _shr,
    "_div": _div,
    "_mod": _mod,
    "_two_comp_mod": _two_comp_mod,
    "_usat_cast": _usat_cast,
    "_sat_cast": _sat_cast,
    "_last_index": _last_index,
    "_stack_at": _stack_at,
    "_header_eq": _header_eq,
    "_union_valid": _union_valid,
    "_union_eq": _union_eq,
}
