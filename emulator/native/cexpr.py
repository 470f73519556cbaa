"""BMv2 JSON expressions -> C expressions over the PHV, with the Python engine's arithmetic.

The Python engine (emulator/engine/expressions.py) is the reference: BMv2 computes with arbitrary
precision and truncates on store. Here a value is exact as a signed 128-bit `V`, which gives the same
results for the fields the native backend accepts (at most 64 bits wide): sums, differences and
products of such values fit, and the low bits of a left shift are what a store keeps. Where its
range allows, a value is computed in uint64_t instead (cvalues: which operators, in which width).
Operations that raise in Python (a negative shift, division by zero, a bad stack index) `RAISE` here,
which drops the packet the same way.
"""

from emulator.engine.expressions import ExprCompiler, Value, fold
from emulator.engine.jsonutil import malformed, unsupported
from emulator.engine.layout import StackSlots, UnionSlots, UnionStackSlots
from emulator.native import cvalues
from emulator.native.cvalues import CValue, exact64, ring, u64_lit

MAX_CONSTANT_BITS = 126  # a constant keeps a margin below V's 128 bits, so sums of two still fit


def c_int(value: int) -> str:
    """A C literal of type V for any value that fits in 128 signed bits."""
    if -(1 << 62) < value < (1 << 62):
        return f"((V){value}LL)"
    if not -(1 << 127) <= value < (1 << 127):
        raise OverflowError(value)
    u = value & ((1 << 128) - 1)
    hi, lo = u >> 64, u & ((1 << 64) - 1)
    return f"((V)(((UV){hi:#x}ULL << 64) | (UV){lo:#x}ULL))"


def c_data(src: str) -> Value:
    """An integer value computed by the C expression `src`."""
    return Value(src, "data")


def _const(value: int) -> Value:
    return cvalues.constant(value, c_int(value))


def _fits(value: int) -> bool:
    return -(1 << MAX_CONSTANT_BITS) <= value < (1 << MAX_CONSTANT_BITS)


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

    The JSON walk and its checks are the Python engine's ExprCompiler; this class gives its hooks
    their C text (and refuses what the native backend does not run: union stacks indexed at run
    time, `==` on unions, lookaheads wider than 64 bits).

    `params`: runtime data widths of an action (None elsewhere), read from `P[i]`.
    `parser`: lookahead reads the packet at `pos`.
    """

    TRUE, FALSE = "1", "0"
    AND, OR, NOT = "&&", "||", "!"

    def __init__(self, layout, consts: Consts, path: str, params=None, parser=False):
        super().__init__(layout, None, path, params, param_src=lambda i: f"((V)P[{i}])", parser=parser)
        self.consts = consts

    def data(self, j) -> Value:
        """An integer value; in C a boolean is one too (0 or 1)."""
        v = self.value(j)
        if v.kind == "bool":
            return cvalues.from_bool(v.src)
        if v.kind != "data":
            raise malformed(f"expected an integer value, got {v.kind}", self.path, j)
        return v

    def value(self, j) -> Value:
        v = super().value(j)
        if isinstance(j, dict) and j.get("type") in ("runtime_data", "local"):
            return CValue(v.src, "data", bits=v.bits, u64=f"P[{j['value']}]")  # P: the uint64_t action data
        if v.field is not None and not v.field.signed and v.field.width in (8, 16, 32):
            # read through its C type, so the compiler knows the range too (a 1-bit slice is 0 or 1)
            return CValue(v.src, "data", bits=v.bits, field=v.field, u64=f"(uint64_t)(uint{v.field.width}_t){v.src}")
        return v

    # ------------------------------------------------------------------ places
    def _last_base(self, st) -> str:
        return f"{self.consts.stack_bases(st)}[stack_last(cx, F[{st.next_slot}])]"

    def _union_stack_field(self, j):
        """(C base of the member in the last union, offset, width, signed) of a union stack field."""
        us, member, off, width, signed = self.union_stack_member_field(j)
        base = f"{self.consts.union_stack_bases(us)}[stack_last(cx, F[{us.next_slot}])][{member}]"
        return base, off, width, signed

    def _union_value(self, u: UnionSlots) -> Value:
        return Value(u.name, "union", union=u, static_union=True)

    def _stack_at(self, st: StackSlots, idx: Value) -> str:
        return f"stack_at(cx, {self.consts.stack_bases(st)}, {len(st.bases)}, {idx.src})"

    def _union_at(self, stack: UnionStackSlots, idx: Value, e) -> Value:
        raise unsupported("a header union stack indexed at run time (native backend)", self.path, e)

    # ------------------------------------------------------------------ values and operators
    def _constant(self, value: int, j) -> Value:
        if not _fits(value):
            raise unsupported(f"constant {value:#x} wider than {MAX_CONSTANT_BITS} bits (native backend)", self.path, j)
        return _const(value)

    def _lookahead(self, j) -> Value:
        off, width = self._lookahead_window(j)
        if width > 64:
            raise unsupported(f"lookahead of {width} bits (native backend: at most 64)", self.path, j)
        return cvalues.narrow(f"lookahead(cx, D, L, pos, {off}, {width})", width)

    def _choice(self, cond: Value, a: Value, b: Value) -> Value:
        if a.kind == "data":
            return cvalues.choice(cond.src, a, b)
        return Value(f"(({cond.src}) ? {a.src} : {b.src})", a.kind, htype=a.htype)

    def _b2d(self, b: Value) -> Value:
        return cvalues.from_bool(b.src)

    def _d2b(self, v: Value) -> Value:
        return Value(f"({ring(v)} != 0)", "bool") if exact64(v) else super()._d2b(v)

    def _unary(self, op: str, v: Value) -> Value:
        return cvalues.unary(op, v)

    def _compare(self, op: str, a: Value, b: Value) -> Value:
        narrow = cvalues.compare(op, a, b) if a.kind == "data" else None
        return Value(narrow, "bool") if narrow else super()._compare(op, a, b)

    def _header_eq(self, a: Value, b: Value) -> str:
        return f"header_eq(F, {a.src}, {b.src}, {a.htype.nfields})"

    def _union_eq(self, a: Value, b: Value, e) -> str:
        raise unsupported(f"'{e.get('op')}' on union values (native backend)", self.path, e)

    def _cast(self, op, src: Value, width: Value, e) -> Value:
        bits = width.const if op == "usat_cast" and width.const is not None and width.const > 0 else None
        return cvalues.wide(f"v_{op}(cx, {src.src}, {width.src})", bits)

    def _masked_shift(self, left, right):
        operands = self.masked_shift_operands(left, right)
        if operands is None:
            return None
        a, amount, mask = operands
        m = mask.const
        return cvalues.masked_shift_left(
            a, amount, m, f"v_shl_masked(cx, {a.src}, {amount.src}, {c_int(m)}, {m.bit_length()})"
        )

    def _arith(self, op, a: Value, b: Value) -> Value:
        if a.const is not None and b.const is not None:
            folded = fold(op, a.const, b.const)
            if folded is not None and _fits(folded):
                return _const(folded)
        if op in ("&", "|", "^", "+", "-", "*"):
            return cvalues.ring_op(op, a, b)
        if op in (">>", "<<"):
            if b.const is not None and b.const < 0:
                raise malformed("negative shift amount", self.path)
            return cvalues.shift_right(a, b) if op == ">>" else cvalues.shift_left(a, b)
        if op == "/":
            return cvalues.wide(f"v_div(cx, {a.src}, {b.src})", a.bits)
        if op == "%":
            bits = b.const.bit_length() if b.const is not None and b.const > 0 else a.bits
            return cvalues.wide(f"v_mod(cx, {a.src}, {b.src})", bits)
        raise AssertionError(op)


def store(dst: str, width: int, signed: bool, value: Value) -> str:
    """`F[dst] = value` truncated as BMv2's Field::set (two's complement for signed fields): the value's
    low `width` bits, so its uint64_t text suffices."""
    if width > 64:
        raise unsupported(f"a {width}-bit field (native backend: at most 64 bits)", "store")
    mask = (1 << width) - 1
    if value.kind == "bool":
        value = cvalues.from_bool(value.src)
    if value.const is not None:
        v = value.const & mask
        return f"F[{dst}] = {c_int(v - (1 << width) if signed and width and v >> (width - 1) else v)};"
    if not signed:
        if exact64(value) and value.bits <= width:
            return f"F[{dst}] = {value.src};"
        return f"F[{dst}] = (V)({ring(value)} & {u64_lit(mask)});"
    half = 1 << (width - 1)
    return f"F[{dst}] = (V)(({ring(value)} + {u64_lit(half)}) & {u64_lit(mask)}) - {c_int(half)};"
