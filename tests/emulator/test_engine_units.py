"""Engine building blocks on their own: hash algorithms, header codecs, match tables, expressions."""

import random

import pytest

from emulator.engine.codegen import Namespace
from emulator.engine.expressions import HELPERS, ExprCompiler, store
from emulator.engine.hashes import crc16, crc32, csum16, identity, xor16
from emulator.engine.headercodec import HeaderCodec
from emulator.engine.layout import HeaderType, build_layout
from emulator.engine.match_tables import ActionRef, KeyField, MatchTable
from emulator.errors import EntryError
from tests.support.checksums import csum16 as reference_csum16


def _as_int(data: bytes):
    return int.from_bytes(data, "big"), len(data)


def test_csum16_matches_rfc1071_on_random_buffers():
    rng = random.Random(1)
    for n in range(0, 41):
        for _ in range(20):
            data = bytes(rng.randrange(256) for _ in range(n))
            assert csum16(*_as_int(data)) == reference_csum16(data), data.hex()
    # the corner cases of the modular shortcut: all-zero and sums folding to 0xffff
    for data in (b"", b"\0\0", b"\xff\xff", b"\xff\xfe\x00\x01", b"\x80\x00\x7f\xff"):
        assert csum16(*_as_int(data)) == reference_csum16(data), data.hex()


def test_crc_and_simple_hashes_check_values():
    check = b"123456789"
    assert crc16(*_as_int(check)) == 0xBB3D  # CRC-16/ARC
    assert crc32(*_as_int(check)) == 0xCBF43926  # CRC-32
    assert identity(*_as_int(b"\x01\x02\x03")) == 0x010203
    assert identity(*_as_int(bytes(range(1, 11)))) == 0x0102030405060708  # first 8 bytes
    assert xor16(*_as_int(b"\x12\x34\x56\x78\x9a")) == 0x1234 ^ 0x5678 ^ 0x9A00


def _codec_roundtrip(widths, signed=()):
    fields = [(f"f{i}", w, i in signed) for i, w in enumerate(widths)]
    htype = HeaderType("h", fields, {n: i for i, (n, _, _) in enumerate(fields)}, sum(widths))
    codec = HeaderCodec(htype)
    ns = {"S": codec.struct}
    lines = "\n    ".join(codec.extract_lines("S", 0))
    exec(f"def ext(F, D, pos):\n    {lines}\n\ndef pack(F):\n    return {codec.pack_expr('S', 0)}\n", ns)
    return codec, ns["ext"], ns["pack"]


@pytest.mark.parametrize(
    "widths", [[48, 48, 16], [4, 4, 8, 16, 16, 3, 13, 8, 8, 16, 32, 32], [1, 7, 24, 72, 9, 7], [128], [3, 5, 56, 12, 4]]
)
def test_header_codec_roundtrip_and_field_values(widths):
    rng = random.Random(len(widths))
    codec, ext, pack = _codec_roundtrip(widths)
    for _ in range(50):
        data = bytes(rng.randrange(256) for _ in range(codec.nbytes + 3))
        F = [0] * (len(widths) + 1)
        ext(F, data, 3)
        big, shift = int.from_bytes(data[3:], "big"), codec.nbytes * 8
        for i, w in enumerate(widths):
            shift -= w
            assert F[i] == (big >> shift) & ((1 << w) - 1)
        assert F[-1] == 1  # valid
        assert pack(F) == data[3:]


def test_header_codec_signed_fields_are_sign_extended():
    codec, ext, pack = _codec_roundtrip([8, 16, 8], signed={0, 1})
    F = [0] * 4
    ext(F, b"\xff\x80\x00\x05", 0)
    assert F[:3] == [-1, -32768, 5]
    assert pack(F) == b"\xff\x80\x00\x05"


def _noop(F, P):
    return None


def _table(kind, keys, size=8):
    actions = {"a": ActionRef("a", 1, _noop, [("x", 8)]), "b": ActionRef("b", 2, _noop, [])}
    return MatchTable("T", keys, kind, actions, size, False, False)


def test_lpm_longest_prefix_wins_and_masks_values():
    t = _table("lpm", [KeyField("k", "lpm", 32, None)])
    t.add([(0x0A000000, 8)], "a", [1])
    t.add([(0x0A010000, 16)], "a", [2])
    t.add([(0, 0)], "a", [3])
    assert t.lookup(0x0A010203).params == (2,)
    assert t.lookup(0x0A020304).params == (1,)
    assert t.lookup(0x0B000000).params == (3,)
    with pytest.raises(EntryError, match="already exists"):
        t.add([(0x0A0000FF, 8)], "b", [])  # the same prefix once masked, as BMv2 masks it
    t.delete([(0x0A010000, 16)])
    assert t.lookup(0x0A010203).params == (1,)


def test_ternary_priority_then_insertion_handle_decides():
    t = _table("ternary", [KeyField("k", "ternary", 8, None), KeyField("e", "exact", 8, None)])
    t.add([(0x10, 0xF0), 5], "a", [1], priority=10)
    t.add([(0x12, 0xFF), 5], "a", [2], priority=20)
    t.add([(0x00, 0x00), 5], "a", [3], priority=20)
    key = lambda k, e: (k << 8) | e  # noqa: E731 - the combined key the generated code builds
    assert t.lookup(key(0x12, 5)).params == (2,)  # highest priority; tie with entry 3 -> earlier handle
    assert t.lookup(key(0x15, 5)).params == (3,)
    assert t.lookup(key(0x15, 6)) is None
    with pytest.raises(EntryError, match="priority is required"):
        t.add([(0, 0), 1], "b", [])


def test_range_table_matches_inclusive_bounds():
    t = _table("range", [KeyField("r", "range", 16, None)])
    t.add([(100, 200)], "a", [1], priority=1)
    t.add([(150, 150)], "a", [2], priority=2)
    assert t.lookup(100).params == (1,)
    assert t.lookup(150).params == (2,)
    assert t.lookup(200).params == (1,)
    assert t.lookup(201) is None
    with pytest.raises(EntryError, match="low .* > high"):
        t.add([(9, 8)], "a", [0], priority=3)


def test_table_entry_errors_name_the_table_and_the_reason():
    t = _table("exact", [KeyField("k", "exact", 9, None)], size=1)
    with pytest.raises(EntryError, match="table 'T'.*does not fit in 9 bits") as exc:
        t.add([512], "a", [0])
    assert exc.value.code == "INVALID_ARGUMENT"
    with pytest.raises(EntryError, match="not an action of this table"):
        t.add([1], "zz", [])
    with pytest.raises(EntryError, match="takes 1 parameter"):
        t.add([1], "a", [])
    with pytest.raises(EntryError, match="parameter 'x' = 256 does not fit in 8 bits"):
        t.add([1], "a", [256])
    with pytest.raises(EntryError, match="expected 1 key field"):
        t.add([1, 2], "a", [1])
    t.add([1], "a", [1])
    with pytest.raises(EntryError, match="already exists") as exc:
        t.add([1], "a", [1])
    assert exc.value.code == "ALREADY_EXISTS"
    with pytest.raises(EntryError, match="full") as exc:
        t.add([2], "a", [1])
    assert exc.value.code == "RESOURCE_EXHAUSTED"
    with pytest.raises(EntryError, match="no entry") as exc:
        t.delete([3])
    assert exc.value.code == "NOT_FOUND"


def _layout():
    cfg = {
        "header_types": [{"name": "h_t", "id": 0, "fields": [["u8", 8, False], ["s8", 8, True], ["u16", 16, False]]}],
        "headers": [{"name": "h", "id": 0, "header_type": "h_t", "metadata": True}],
    }
    return build_layout(cfg)


def _eval(expr_json, F, params=None, consts=()):
    layout = _layout()
    ns = Namespace(HELPERS)
    ex = ExprCompiler(layout, ns, "test", params=params)
    v = ex.value(expr_json)
    return eval(v.src, ns.globals, {"F": F, **{f"p{i}": c for i, c in enumerate(consts)}})


def _f(name):
    return {"type": "field", "value": ["h", name]}


def _hex(v):
    return {"type": "hexstr", "value": hex(v) if v >= 0 else "-" + hex(-v)}


def _op(op, left, right, **more):
    return {"type": "expression", "value": {"op": op, "left": left, "right": right, **more}}


def test_expressions_follow_bmv2_infinite_precision_then_masks():
    F = [200, -3, 0xFFFF, 1]
    assert _eval(_op("&", _op("+", _f("u8"), _hex(100)), _hex(0xFF)), F) == 44
    assert _eval(_op("+", _f("u8"), _hex(100)), F) == 300  # no implicit truncation
    assert _eval(_op("two_comp_mod", _op("+", _f("s8"), _hex(-126)), _hex(8)), F) == 127
    assert _eval(_op("usat_cast", _op("+", _f("u8"), _f("u8")), _hex(8)), F) == 255
    assert _eval(_op("sat_cast", _op("+", _f("s8"), _hex(-200)), _hex(8)), F) == -128
    assert _eval(_op("&", _op("<<", _f("u16"), _f("u8")), _hex(0xFFFF)), F) == 0  # shift 200: masked
    assert _eval(_op("?", _hex(1), _hex(2), cond=_op("<", _f("s8"), _hex(0))), F) == 1
    assert _eval(_op("b2d", None, _op("d2b", None, _f("u8"))), F) == 1
    assert _eval(_op("&", _op("~", None, _f("u8")), _hex(0xFF)), F) == 55


def test_store_truncates_like_bmv2_fields():
    ns = {}
    v = ExprCompiler(_layout(), Namespace(HELPERS), "t").value(_op("+", _f("s8"), _hex(200)))
    exec(store("1", 8, True, v), ns, ns.update(F=[0, 100, 0, 1]) or ns)
    assert ns["F"][1] == 44  # 300 wraps to 44 as int<8>
    v = ExprCompiler(_layout(), Namespace(HELPERS), "t").value(_op("-", _f("u8"), _hex(201)))
    ns = {"F": [200, 0, 0, 1]}
    exec(store("0", 8, False, v), ns)
    assert ns["F"][0] == 255


def test_lpm_with_exact_fields_needs_them_equal():
    t = _table("lpm", [KeyField("vrf", "exact", 8, None), KeyField("ip", "lpm", 32, None)])
    t.add([1, (0x0A000000, 8)], "a", [1])
    t.add([2, (0x0A000000, 16)], "a", [2])
    t.add([1, (0x0A010000, 16)], "a", [3])
    assert t.lookup((1, 0x0A010101)).params == (3,)
    assert t.lookup((1, 0x0A020101)).params == (1,)
    assert t.lookup((2, 0x0A000101)).params == (2,)
    assert t.lookup((2, 0x0A010101)) is None
    assert t.lookup((3, 0x0A010101)) is None


def test_range_table_with_exact_ternary_and_lpm_fields():
    keys = [
        KeyField("e", "exact", 8, None),
        KeyField("r", "range", 16, None),
        KeyField("t", "ternary", 8, None),
        KeyField("l", "lpm", 16, None),
    ]
    t = _table("range", keys)
    t.add([7, (10, 20), (0x0A, 0x0F), (0xAB00, 8)], "a", [1], priority=5)
    t.add([7, (0, 0xFFFF), (0, 0), (0, 0)], "a", [2], priority=1)
    assert t.lookup((7, 15, 0xFA, 0xABCD)).params == (1,)
    assert t.lookup((7, 21, 0xFA, 0xABCD)).params == (2,)  # out of range
    assert t.lookup((7, 15, 0xFB, 0xABCD)).params == (2,)  # ternary mismatch
    assert t.lookup((7, 15, 0xFA, 0xAC00)).params == (2,)  # prefix mismatch
    assert t.lookup((8, 15, 0xFA, 0xABCD)) is None


def test_static_key_mask_applies_to_entries_and_duplicates():
    t = _table("ternary", [KeyField("f", "ternary", 8, 0xF0)])
    t.add([(0x1F, 0xFF)], "a", [1], priority=1)
    assert t.list_entries()[0].keys == [(0x10, 0xF0)]
    with pytest.raises(EntryError, match="already exists"):
        t.add([(0x10, 0xF0)], "a", [1], priority=1)
