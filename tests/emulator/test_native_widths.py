"""The native backend's 64-bit arithmetic (emulator/native/cvalues.py) at its edges, against the Python
engine: shifts by 64 or more (run-time and constant), concatenations of exactly 64 bits and past them,
masks at 2**64 - 1 over sums, products, differences and complements that leave 64 bits, comparisons of
such values, signed fields and negative shift amounts, and registers indexed and written with them.

Each group of assignments is one hand-built program (tests/support/bmv2_json.py) run with frames whose
fields take the edge values (0, 1, 2**63, 2**64 - 1, shift amounts 0..255); both backends must send the
same bytes. The generated C is checked to take the 64-bit path these cases are meant to reach.
"""

import json
import random

import pytest

from emulator.switch import SoftwareSwitch
from tests.support.bmv2_json import default, expr, field, hexv, prim, program, state

M64 = (1 << 64) - 1
INPUT = [("a", 64, False), ("b", 64, False), ("c", 64, False), ("k", 8, False), ("s8", 8, True), ("s64", 64, True)]
INPUT += [("n", 8, False)]
RESULT = [(f"r{i}", 64, False) for i in range(12)] + [("t8", 8, True), ("t64", 64, True), ("u16", 16, False)]
RESULT += [("u8", 8, False)]


def h(name):
    return field("h", name)


def r(name):
    return field("r", name)


def op(name, left, right):
    return expr(name, left, right)


def cond(c, yes, no):
    return {"type": "expression", "value": {"op": "?", "left": yes, "right": no, "cond": c}}


def neg(x):
    return op("-", None, x)


def concat(high, low, low_width, width):
    """p4c's `high ++ low` of `width` bits: ((high << low_width) & mask) | low."""
    return op("|", op("&", op("<<", high, hexv(low_width)), hexv((1 << width) - 1)), low)


def set_r(name, value):
    return prim("assign", r(name), value)


A, B, C, K, S8, S64, N = (h(x) for x in ("a", "b", "c", "k", "s8", "s64", "n"))
BYTE = [op("&", op(">>", A, hexv(8 * i)), hexv(0xFF)) for i in range(8)]
CASES = {
    "shifts": [
        set_r("r0", op(">>", A, K)),  # amounts 64..255: 0
        set_r("r1", op("&", op("<<", A, K), hexv(M64))),  # p4c's masked shift
        set_r("r2", op("<<", A, K)),  # unmasked: the store keeps the low 64 bits
        set_r("r3", op(">>", A, op("&", K, hexv(63)))),  # an amount known below 64
        set_r("r4", op(">>", A, hexv(64))),
        set_r("r5", op("&", op("<<", A, hexv(64)), hexv(M64))),
        set_r("r6", op("|", op(">>", A, hexv(63)), op("&", op("<<", A, hexv(63)), hexv(M64)))),
        set_r("r7", op(">>", op("&", op("<<", B, K), hexv(M64)), K)),  # b's low 64 - k bits back
        set_r("r8", op("&", op("<<", A, K), hexv((1 << 72) - 1))),  # a mask past 64 bits: in V
        set_r("u16", op("<<", N, K)),
        set_r("u8", op(">>", hexv(0x80), op("&", K, hexv(7)))),
    ],
    "concatenations": [
        set_r("r0", concat(op("&", A, hexv(0xFFFFFFFF)), op("&", B, hexv(0xFFFFFFFF)), 32, 64)),
        set_r("r1", concat(concat(concat(BYTE[0], BYTE[1], 8, 16), BYTE[2], 8, 24), BYTE[3], 8, 32)),
        set_r("r2", concat(A, N, 8, 64)),  # a's top byte falls off: exactly 64 bits kept
        set_r("r3", op(">>", op("|", op("<<", A, hexv(8)), N), hexv(8))),  # 72 bits, then back: a
        set_r("r4", op(">>", concat(A, N, 8, 72), hexv(4))),  # 72-bit concatenation, shifted: a's low 60 and n
        set_r("u16", concat(N, K, 8, 16)),
    ],
    "masks": [
        set_r("r0", op("&", op("+", A, B), hexv(M64))),  # carries out of 64 bits
        set_r("r1", op("&", op("*", A, B), hexv(M64))),  # 128-bit product
        set_r("r2", op("&", op("-", A, B), hexv(M64))),  # negative
        set_r("r3", op("&", op("~", None, A), hexv(M64))),
        set_r("r4", op("&", neg(A), hexv(M64))),
        set_r("r5", op(">>", op("+", A, B), hexv(1))),  # 65 bits: the carry comes back
        set_r("r6", op("&", op(">>", op("+", A, B), hexv(1)), hexv(M64))),
        set_r("r7", cond(op(">", op("+", A, B), C), hexv(1), hexv(0))),  # compared past 64 bits
        set_r("r8", cond(op("==", op("&", op("+", A, B), hexv(M64)), C), A, B)),
        set_r("r9", op("+", op("&", A, B), op("|", A, B))),  # stored: its low 64 bits
        set_r("r10", cond(op("d2b", None, op("-", A, B)), hexv(7), hexv(9))),  # zero only when a == b
        set_r("r11", op("&", op("^", A, hexv(M64)), hexv((1 << 65) - 1))),  # a mask wider than 64 bits
        set_r("u8", op("&", op("+", A, hexv(1)), hexv(0xFF))),
    ],
    "signed": [
        set_r("t8", op(">>", S8, hexv(1))),
        set_r("t64", op(">>", S64, op("&", K, hexv(63)))),
        set_r("r0", op(">>", S64, K)),  # negative values shift to -1, stored as 2**64 - 1
        set_r("r1", op("+", S8, N)),
        set_r("r2", cond(op("<", S64, hexv(0)), A, B)),
        set_r("r3", op("&", op("<<", S8, K), hexv(M64))),
        set_r("r4", op("*", S64, hexv(3))),
        set_r(
            "r5", {"type": "expression", "value": {"op": "two_comp_mod", "left": op("+", S64, A), "right": hexv(64)}}
        ),
        set_r("t8", op("+", A, B)),  # an unsigned sum into a signed field wraps
        set_r("u16", S64),
        set_r("r6", cond(op("==", S8, neg(hexv(1))), hexv(1), hexv(2))),
    ],
    "negative amounts": [
        set_r("r0", op(">>", A, S8)),  # s8 < 0 raises: the packet is dropped
        set_r("r1", op("&", op("<<", A, S8), hexv(M64))),
    ],
    "registers": [
        prim("register_write", {"type": "register_array", "value": "wide"}, K, op("+", A, B)),
        prim("register_read", r("r0"), {"type": "register_array", "value": "wide"}, op("&", K, hexv(0x7F))),
        prim("register_write", {"type": "register_array", "value": "narrow"}, A, S64),  # index a: mostly out
        prim("register_write", {"type": "register_array", "value": "narrow"}, N, op("*", A, B)),
        prim("register_read", r("u16"), {"type": "register_array", "value": "narrow"}, op(">>", N, hexv(1))),
        prim("register_read", r("u8"), {"type": "register_array", "value": "wide"}, S8),  # a negative index
    ],
}
REGISTERS = [
    {"name": "wide", "id": 0, "size": 100, "bitwidth": 64},
    {"name": "narrow", "id": 1, "size": 200, "bitwidth": 16},
]
EDGES = [0, 1, 2, 63, 64, 65, 127, 128, 255, (1 << 63) - 1, 1 << 63, (1 << 63) + 1, M64 - 1, M64, 0xFFFFFFFF]


def widths_program(primitives) -> dict:
    states = [state("start", [prim("extract", {"type": "regular", "value": "h"})], transitions=[default("res")])]
    states.append(state("res", [prim("extract", {"type": "regular", "value": "r"})]))
    return program(
        [("h_t", INPUT), ("r_t", RESULT)],
        [("h", "h_t", False), ("r", "r_t", False)],
        states,
        ["h", "r"],
        ingress=primitives,
        register_arrays=REGISTERS,
    )


def _frame(rng) -> bytes:
    values = []
    for _, width, _ in INPUT:
        pick = rng.random()
        if pick < 0.6:
            v = rng.choice(EDGES + [rng.randrange(256)])
        else:
            v = rng.getrandbits(width)
        values.append(v & ((1 << width) - 1))
    packed = 0
    for (_, width, _), v in zip(INPUT, values):
        packed = (packed << width) | v
    nbits = sum(w for _, w, _ in INPUT)
    return packed.to_bytes(nbits // 8, "big") + bytes(sum(w for _, w, _ in RESULT) // 8)


@pytest.mark.parametrize("group", list(CASES))
def test_native_64_bit_arithmetic_agrees_with_python_at_the_edges(group):
    cfg = widths_program(CASES[group])
    py = SoftwareSwitch.from_json(cfg, backend="python")
    nat = SoftwareSwitch.from_json(cfg, backend="native")
    assert type(nat).__name__ == "NativeSwitch"
    rng = random.Random(group)
    for k in range(3000):
        frame = _frame(rng)
        assert py.process(1, frame) == nat.process(1, frame), (k, frame.hex())
    assert py.stats == {key: v for key, v in nat.stats.items() if key in py.stats}
    if group == "negative amounts":
        assert 0 < nat.stats["exceptions"] < 3000  # some packets raised, some did not
    for name, reg in ((x["name"], x) for x in REGISTERS):
        assert [py.register_read(name, i) for i in range(reg["size"])] == nat.register_cells(name)


def _body(c_source: str, function: str) -> str:
    start = c_source.index(f"static void {function}(")
    return c_source[start : c_source.index("\n}\n", start)]


def test_the_edge_cases_take_the_64_bit_path():
    """Run-time shifts by unsigned amounts are uint64_t (guarded where the amount may reach 64), masks
    at 2**64 - 1 drop the V arithmetic under them, and the compare past 64 bits stays in V."""
    shifts = _body(
        SoftwareSwitch.from_json(widths_program(CASES["shifts"]), backend="native").generated_c, "act_ingress_body"
    )
    assert "shr64(" in shifts and "shl64(" in shifts and "v_shr" not in shifts
    assert [line.split(" = ")[0].strip() for line in shifts.splitlines() if "v_shl" in line] == ["F[f_r_r8]"]
    masks = _body(
        SoftwareSwitch.from_json(widths_program(CASES["masks"]), backend="native").generated_c, "act_ingress_body"
    )
    assert "F[f_r_r0] = ((V)(" in masks and "(UV)" not in masks.split("F[f_r_r1]")[0]
    assert "> F[f_h_c]" in masks  # (a + b) > c: 65 bits, compared exactly


def test_thc_lookup_computes_in_64_bits():
    """The widened THC lookup (1,024 selections by a run-time shift): no 128-bit arithmetic, no v_shr."""
    from tests.support.paths import THC_JSON

    sw = SoftwareSwitch.from_json(json.loads(THC_JSON.read_text()), backend="native")
    body = _body(sw.generated_c, "act_ThcIngress_index_lookup_lookup8")
    assert body.count("meta.w") >= 128  # the P4 lines are still there
    assert "v_shr" not in body and "(UV)" not in body and "shr64" not in body  # the amounts are below 64


SANITIZED_CHILD = r"""
import json, random, sys
from emulator.switch import SoftwareSwitch
from tests.emulator.test_native_widths import CASES, _frame, widths_program
total = 0
for group in CASES:
    sw = SoftwareSwitch.from_json(widths_program(CASES[group]), backend="native", sanitize=True)
    rng = random.Random(group)
    for _ in range(5000):
        sw.process(1, _frame(rng))
        total += 1
    sw.close()
print("fuzzed", total)
"""


@pytest.mark.slow
def test_the_64_bit_edges_under_sanitizers(tmp_path):
    """UBSan would report a uint64_t shift by 64 or more that a guard missed."""
    from tests.support import sanitizers

    proc = sanitizers.run_sanitized(SANITIZED_CHILD, cache=tmp_path / "cache", timeout=1500)
    sanitizers.assert_clean(proc, 5000 * len(CASES))
