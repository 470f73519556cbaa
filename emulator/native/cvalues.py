"""The two C forms of an expression's value, and the width each operator is computed in.

BMv2 computes with arbitrary precision; the generated C can always compute exactly as a signed 128-bit `V`,
but most expressions never leave 64 bits. So a value carries its exact V text (`src`), the range the Python
engine knows (`bits`: 0 <= v < 2**bits) and a uint64_t text (`u64`) equal to it modulo 2**64. Within 64
bits it is computed in uint64_t only; past them the uint64_t text still serves +, -, *, &, |, ^, ~, a left
shift, a mask or store of at most 64 bits (all right modulo 2**64). Operators that look past the low 64 bits
(>>, comparisons, /, %, casts, indexes) use it only for operands exact in 64 bits, else compute in V."""

import re
from dataclasses import dataclass

from emulator.engine.expressions import Value

U64_MAX = (1 << 64) - 1
SAFE_SHIFT_BITS = 6  # an amount below 2**6 = 64: a uint64_t shift needs no guard
NO_RAISE_SHIFT_BITS = 16  # an amount below 2**16 never reaches runtime.h's SHIFT_LIMIT


@dataclass
class CValue(Value):
    u64: str | None = None  # uint64_t text, equal to the value modulo 2**64; None: a cast of `src`


def u64_lit(value: int) -> str:
    """A uint64_t literal of `value` modulo 2**64 (hexadecimal from 2**16 on: those are masks)."""
    value &= U64_MAX
    return f"{value}ull" if value < 1 << 16 else f"{value:#x}ull"


def exact64(v: Value) -> bool:
    """v is known to lie in [0, 2**64): its uint64_t text is the value itself."""
    return v.kind == "data" and v.bits is not None and v.bits <= 64


def ring(v: Value) -> str:
    """The uint64_t text of v (the value modulo 2**64)."""
    u = getattr(v, "u64", None)
    if u is not None:
        return u
    return f"(uint64_t){v.src}" if _primary(v.src) else f"((uint64_t)({v.src}))"


def _primary(src: str) -> bool:
    """`src` is one operand a cast may prefix without parentheses: a name, an indexed slot, a call or a
    parenthesized expression."""
    depth = 0
    for k, ch in enumerate(src):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0 and k != len(src) - 1 and src[k + 1] not in "([":
                return False
        elif depth == 0 and not (ch.isalnum() or ch == "_"):
            return False
    return depth == 0


def narrow(u64: str, bits: int) -> CValue:
    """A value computed in uint64_t and exact there (bits <= 64)."""
    return CValue(f"((V){u64})", "data", bits=bits, u64=u64)


def both(src: str, u64: str, bits: int | None) -> CValue:
    """A value with an exact V text and a uint64_t text modulo 2**64; computed in uint64_t when its range
    allows."""
    if bits is not None and bits <= 64:
        return narrow(u64, bits)
    return CValue(src, "data", bits=bits, u64=u64)


def wide(src: str, bits: int | None = None) -> CValue:
    """A value computed in V only (its uint64_t text, when asked for, is a cast)."""
    return CValue(src, "data", bits=bits)


def ring_op(op: str, a: Value, b: Value) -> CValue:
    """`a op b` for &, |, ^, +, -, *: exact modulo 2**64 from the operands' uint64_t texts."""
    identity = _identity(op, a, b)
    if identity is not None:
        return identity
    return both(f"({a.src} {op} {b.src})", f"({ring(a)} {op} {ring(b)})", _bits(op, a, b))


def _bits(op, a, b):
    """The range of `a op b` from its operands' (the Python engine's rules, expressions.py)."""
    if op == "&":
        known = [v.bits for v in (a, b) if v.bits is not None]
        return min(known) if known else None
    if a.bits is None or b.bits is None:
        return None
    if op in ("|", "^"):
        return max(a.bits, b.bits)
    if op == "+":
        return max(a.bits, b.bits) + 1
    if op == "*":
        return a.bits + b.bits
    return None  # "-": may be negative


def _identity(op, a, b):
    """The operand `a op b` equals, when the other is a constant that changes nothing: p4c masks a value
    to its own width after every operation (`x & 0xff` of an 8-bit x), and concatenates with zeros."""
    for x, c in ((a, b), (b, a)):
        if c.const is None or (x is b and op == "-"):
            continue
        if op in ("|", "^", "+", "-") and c.const == 0:
            return x
        if op == "&" and c.const >= 0 and c.const & (c.const + 1) == 0:  # an all-ones mask, 2**k - 1
            k = c.const.bit_length()
            if exact64(x) and x.bits <= k:
                return x
            if k == 64:
                return narrow(ring(x), 64)
    return None


def shift_right(a: Value, b: Value) -> CValue:
    """`a >> b`: exact in uint64_t when a is and b is a known non-negative amount; else runtime.h's
    v_shr (which raises on a negative amount), or a plain V shift when the amount is below 64."""
    if b.const is not None:
        c = b.const
        bits = None if a.bits is None else max(a.bits - c, 0)
        if exact64(a):
            return narrow(f"({ring(a)} >> {c})" if c < 64 else f"(0ull * {ring(a)})", bits)
        return wide(f"({a.src} >> {min(c, 127)})", bits)
    if exact64(b) and exact64(a):
        if b.bits <= SAFE_SHIFT_BITS:  # below 64: a plain shift
            return narrow(f"({ring(a)} >> {ring(b)})", a.bits)
        return narrow(f"shr64({ring(a)}, {ring(b)})", a.bits)
    if exact64(b) and b.bits <= SAFE_SHIFT_BITS:
        return wide(f"({a.src} >> (unsigned){ring(b)})", a.bits)
    return wide(f"v_shr(cx, {a.src}, {b.src})", a.bits)


def shift_left(a: Value, b: Value) -> CValue:
    """`a << b`: its low 64 bits from a's, by a constant or by a run-time amount that cannot make
    runtime.h's v_shl raise (known below 2**16); else v_shl."""
    if b.const is not None:
        c = b.const
        bits = None if a.bits is None else a.bits + c
        v = f"((V)0 * {a.src})" if c >= 127 else f"((V)((UV){a.src} << {c}))"
        return both(v, f"({ring(a)} << {c})" if c < 64 else f"(0ull * {ring(a)})", bits)
    v = f"v_shl(cx, {a.src}, {b.src})"
    if not (exact64(b) and b.bits <= NO_RAISE_SHIFT_BITS):
        return wide(v)
    bits = None if a.bits is None else a.bits + (1 << b.bits) - 1
    amount = ring(b)
    u = f"({ring(a)} << {amount})" if b.bits <= SAFE_SHIFT_BITS else f"shl64({ring(a)}, {amount})"
    return both(v, u, bits)


def masked_shift_left(a: Value, amount: Value, mask: int, wide_src: str) -> CValue:
    """`(a << amount) & mask` with a run-time amount and a constant mask: in uint64_t when the mask fits
    and the amount is known non-negative, else `wide_src` (runtime.h's v_shl_masked)."""
    if mask > U64_MAX or not exact64(amount):
        return wide(wide_src, mask.bit_length())
    shifted = f"({ring(a)} << {ring(amount)})"
    if amount.bits > SAFE_SHIFT_BITS:  # amounts of 64 or more shift everything out
        shifted = f"shl64({ring(a)}, {ring(amount)})"
    return narrow(f"({shifted} & {u64_lit(mask)})", mask.bit_length())


def compare(op: str, a: Value, b: Value) -> str | None:
    """The C text of `a op b` in uint64_t, when both are exact there; None: compare in V."""
    if exact64(a) and exact64(b):
        return f"({ring(a)} {op} {ring(b)})"
    return None


def choice(cond: str, a: Value, b: Value) -> CValue:
    """`cond ? a : b` of two integer values. In uint64_t without a branch (runtime.h's sel64) when neither
    arm can raise, so both may be computed: a selection on data, such as a table value picked by an index
    bit, would be mispredicted half the time."""
    bits = None if a.bits is None or b.bits is None else max(a.bits, b.bits)
    ua, ub = ring(a), ring(b)
    u = f"sel64({cond}, {ua}, {ub})" if _pure(ua) and _pure(ub) else f"(({cond}) ? {ua} : {ub})"
    return both(f"(({cond}) ? {a.src} : {b.src})", u, bits)


def _pure(text: str) -> bool:
    """C text that cannot raise nor read the packet: every helper that may (v_shr, stack_at, lookahead,
    ...) takes the pass context `cx`."""
    return re.search(r"\bcx\b", text) is None


def unary(op: str, v: Value) -> CValue:
    """`-v` or `~v`: possibly negative, right modulo 2**64 from v's uint64_t text."""
    return CValue(f"({op}{v.src})", "data", u64=f"({op}{ring(v)})")


def constant(value: int, v_text: str) -> CValue:
    """A compile-time constant, `v_text` its V literal."""
    bits = value.bit_length() if value >= 0 else None
    return CValue(v_text, "data", bits=bits, const=value, u64=u64_lit(value))


def from_bool(cond: str) -> CValue:
    """A boolean as the integer 0 or 1."""
    return narrow(f"((uint64_t)({cond}))", 1)
