"""Varbit fields, header unions (and union stacks), parse value sets, custom CRCs and the random hash
on small hand-built programs (tests/support/bmv2_json.py): exact output frames and parser errors as
BMv2 produces them (parser.cpp extract_VL, header_unions.h, ParseVSet, calculations.cpp crc_custom)."""

import random
import struct
import zlib

import pytest

from emulator.errors import EntryError
from emulator.switch import SoftwareSwitch
from tests.support.bmv2_json import case, default, expr, field, hexv, prim, program, state
from tests.support.checksums import csum16
from tests.support.frames import mutate

ETH = ("ethernet_t", [("dstAddr", 48, False), ("srcAddr", 48, False), ("etherType", 16, False)])
MACS = bytes.fromhex("0000000000020000000000aa")
PACKET_TOO_SHORT, HEADER_TOO_SHORT, STACK_OUT_OF_BOUNDS, INVALID_ARGUMENT = 1, 4, 3, 6


def eth(ether_type: int, src_low: int = 0xAA) -> bytes:
    return bytes.fromhex("000000000002") + (src_low).to_bytes(6, "big") + ether_type.to_bytes(2, "big")


# ------------------------------------------------------------------------------------------ varbit
IPV4_FIELDS = [
    ("version", 4, False),
    ("ihl", 4, False),
    ("diffserv", 8, False),
    ("totalLen", 16, False),
    ("identification", 16, False),
    ("flags", 3, False),
    ("fragOffset", 13, False),
    ("ttl", 8, False),
    ("protocol", 8, False),
    ("hdrChecksum", 16, False),
    ("srcAddr", 32, False),
    ("dstAddr", 32, False),
]


def varbit_program():
    """Ethernet | IPv4 | options (varbit<320>, length (ihl - 5) * 32 as bit<16> arithmetic), or
    Ethernet | blob_len | blob (varbit<64>, length blob_len.nbits) | trailer. Ingress records the
    parser and checksum errors in the Ethernet source, decrements the TTL, and copies the blob."""
    opts_len = expr(
        "&",
        expr("*", expr("&", expr("-", field("ipv4", "ihl"), hexv(5)), hexv(0xFFFF)), hexv(32)),
        hexv(0xFFFF),
    )
    ipv4_inputs = [field("ipv4", f) for f, _, _ in IPV4_FIELDS if f != "hdrChecksum"] + [field("opts", "options")]
    ttl = field("ipv4", "ttl")
    valid = lambda h: expr("d2b", None, field(h, "$valid$"))  # noqa: E731
    # primitive indices count the egress_spec assignment program() puts first (index 0)
    ingress = [
        prim("assign", field("ethernet", "srcAddr"), field("standard_metadata", "parser_error")),  # 1
        prim("assign", field("ethernet", "dstAddr"), field("standard_metadata", "checksum_error")),  # 2
        prim("_jump_if_zero", valid("ipv4"), hexv(8)),  # 3: if (ipv4.isValid()) {
        prim("assign", ttl, expr("&", expr("-", ttl, hexv(1)), hexv(0xFF))),  # 4
        prim("_jump_if_zero", valid("opts"), hexv(7)),  # 5: if (opts.isValid())
        prim("assign", field("ipv4", "diffserv"), hexv(4)),  # 6
        prim("_jump", hexv(15)),  # 7: } else
        prim("_jump_if_zero", valid("blob"), hexv(15)),  # 8: if (blob.isValid()) {
        prim("assign_header", {"type": "header", "value": "copy"}, {"type": "header", "value": "blob"}),  # 9
        prim("assign_VL", field("copy", "data"), field("blob", "data")),  # 10
        prim("_jump_if_zero", expr("==", field("copy", "data"), field("blob", "data")), hexv(13)),  # 11
        prim("assign", field("blob_len", "flags"), hexv(1)),  # 12
        prim("_jump_if_zero", expr("==", field("trailer", "marker"), hexv(2)), hexv(15)),  # 13
        prim("remove_header", {"type": "header", "value": "blob"}),  # 14 }
    ]
    calc = {"name": "ipv4_csum", "id": 0, "algo": "csum16", "input": ipv4_inputs}
    unit = {
        "name": "cksum",
        "id": 0,
        "target": ["ipv4", "hdrChecksum"],
        "type": "generic",
        "calculation": "ipv4_csum",
        "verify": True,
        "update": True,
        "if_cond": valid("ipv4"),
    }
    return program(
        [
            ETH,
            ("ipv4_t", IPV4_FIELDS),
            ("opts_t", [("options", "*")], {"max_length": 40}),
            ("blob_len_t", [("nbits", 8, False), ("flags", 8, False)]),
            ("blob_t", [("data", "*")], {"max_length": 8}),
            ("trailer_t", [("marker", 8, False)]),
        ],
        [
            ("ethernet", "ethernet_t", False),
            ("ipv4", "ipv4_t", False),
            ("opts", "opts_t", False),
            ("blob_len", "blob_len_t", False),
            ("blob", "blob_t", False),
            ("copy", "blob_t", False),
            ("trailer", "trailer_t", False),
        ],
        [
            state(
                "start",
                [prim("extract", {"type": "regular", "value": "ethernet"})],
                [field("ethernet", "etherType")],
                [case("0x0800", "parse_ipv4"), case("0x88b5", "parse_blob"), default()],
            ),
            state(
                "parse_ipv4",
                [prim("extract", {"type": "regular", "value": "ipv4"})],
                [field("ipv4", "ihl")],
                [case("0x05", None), default("parse_options")],
            ),
            state("parse_options", [prim("extract_VL", {"type": "regular", "value": "opts"}, opts_len)]),
            state(
                "parse_blob",
                [
                    prim("extract", {"type": "regular", "value": "blob_len"}),
                    prim("extract_VL", {"type": "regular", "value": "blob"}, field("blob_len", "nbits")),
                    prim("extract", {"type": "regular", "value": "trailer"}),
                ],
            ),
        ],
        ["ethernet", "ipv4", "opts", "blob_len", "blob", "copy", "trailer"],
        ingress,
        calculations=[calc],
        checksums=[unit],
    )


@pytest.fixture(scope="module")
def varbit_sw():
    return SoftwareSwitch.from_json(varbit_program())


def ipv4(ihl, options=b"", ttl=64, checksum=None):
    hdr = bytearray(
        struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 20 + len(options), 1, 0, ttl, 17, 0, bytes(4), bytes(4))
    )
    hdr[12:20] = bytes([10, 0, 0, 1, 10, 0, 0, 2])
    hdr += options
    value = csum16(bytes(hdr)) if checksum is None else checksum
    hdr[10:12] = value.to_bytes(2, "big")
    return bytes(hdr)


def expected_eth(parser_error=0, checksum_error=0, ether_type=0x0800):
    return checksum_error.to_bytes(6, "big") + parser_error.to_bytes(6, "big") + ether_type.to_bytes(2, "big")


def test_ipv4_options_are_extracted_checksummed_and_emitted(varbit_sw):
    options = bytes(range(1, 9))  # ihl 7: 8 bytes of options
    frame = eth(0x0800) + ipv4(7, options) + b"payload"
    out_ip = bytearray(ipv4(7, options, ttl=63))
    out_ip[1] = 4  # diffserv: the options header was valid
    out_ip[10:12] = b"\0\0"
    out_ip[10:12] = csum16(bytes(out_ip)).to_bytes(2, "big")  # the options are in the checksum
    assert varbit_sw.process(1, frame) == [(2, expected_eth() + bytes(out_ip) + b"payload")]


def test_a_wrong_checksum_over_the_options_sets_checksum_error(varbit_sw):
    options = bytes(range(1, 9))
    good = ipv4(7, options)
    bad = good[:10] + bytes([good[10] ^ 0xFF, good[11]]) + good[12:]
    ((port, out),) = varbit_sw.process(1, eth(0x0800) + bad)
    assert out[:14] == expected_eth(checksum_error=1)
    assert csum16(out[14:42]) == 0  # update_checksum rewrote it


def test_maximal_and_missing_options(varbit_sw):
    options = bytes(range(40))  # ihl 15: 40 bytes, exactly max_length
    ((_, out),) = varbit_sw.process(1, eth(0x0800) + ipv4(15, options))
    assert out[:14] == expected_eth() and out[34:] == options
    # ihl 4: (4 - 5) wraps in bit<16> -> 65504 bits: more than the packet holds
    ((_, out),) = varbit_sw.process(1, eth(0x0800) + ipv4(4) + bytes(100))
    assert out[:14] == expected_eth(PACKET_TOO_SHORT)
    assert out[14:22] == ipv4(4)[:8] and out[22] == 63 and out[34:] == bytes(100)
    # options cut short: PacketTooShort, the fixed IPv4 header stays valid (its TTL is decremented)
    ((_, out),) = varbit_sw.process(1, eth(0x0800) + ipv4(7, bytes(8))[:24])
    assert out[:14] == expected_eth(PACKET_TOO_SHORT) and out[22] == 63


@pytest.mark.parametrize(
    "nbits, rest, error",
    [
        (12, bytes(10), INVALID_ARGUMENT),  # not whole bytes
        (72, bytes(10), HEADER_TOO_SHORT),  # 9 bytes > max_length 8
        (72, bytes(5), PACKET_TOO_SHORT),  # the packet is checked before max_length
        (64, bytes(3), PACKET_TOO_SHORT),
    ],
)
def test_varbit_length_errors_are_bmv2s(varbit_sw, nbits, rest, error):
    frame = eth(0x88B5) + bytes([nbits, 0]) + rest
    ((_, out),) = varbit_sw.process(1, frame)
    # the blob is not extracted: blob_len stays valid and the rest is payload
    assert out == expected_eth(error, ether_type=0x88B5) + bytes([nbits, 0]) + rest


@pytest.mark.parametrize("nbytes", [0, 1, 2, 8])
def test_varbit_copy_assign_equality_and_emit(varbit_sw, nbytes):
    data = bytes(range(0xA0, 0xA0 + nbytes))
    frame = eth(0x88B5) + bytes([nbytes * 8, 0]) + data + bytes([7]) + b"tail"
    out = varbit_sw.process(1, frame)
    # blob and its copy (same width, equal values: flags 1), then the trailer and the payload
    assert out == [(2, expected_eth(ether_type=0x88B5) + bytes([nbytes * 8, 1]) + data + data + bytes([7]) + b"tail")]


def test_remove_header_of_a_varbit_header(varbit_sw):
    data = b"\x01\x02\x03"
    frame = eth(0x88B5) + bytes([24, 0]) + data + bytes([2])
    assert varbit_sw.process(1, frame) == [(2, expected_eth(ether_type=0x88B5) + bytes([24, 1]) + data + bytes([2]))]


def test_negative_varbit_lengths_are_defined_errors():
    """BMv2 reads the length as a C int: 0xFFFFFFE0 is -32 bits; with a fixed part too small to
    absorb it the size check fails (PacketTooShort); BMv2 would extract a negative width otherwise
    (undefined), which we refuse as ParserInvalidArgument."""
    cfg = varbit_program()
    ops = cfg["parsers"][0]["parse_states"][3]["parser_ops"]
    ops[1]["parameters"][1] = hexv(0xFFFFFFE0)
    sw = SoftwareSwitch.from_json(cfg)
    ((_, out),) = sw.process(1, eth(0x88B5) + bytes([0, 0]) + bytes(8))
    assert out[:14] == expected_eth(PACKET_TOO_SHORT, ether_type=0x88B5)


# ------------------------------------------------------------------------------------------ unions
def union_program(extra_ingress=()):
    """Ethernet | tag | u (short or long, chosen by the tag) | up to 3 union stack elements, each a
    kind byte (0x10 small, 0x20 big) and its body. Ingress runs `extra_ingress`."""
    header_types = [
        ETH,
        ("tag_t", [("tag", 8, False), ("flags", 8, False)]),
        ("short_t", [("value", 16, False)]),
        ("long_t", [("value", 32, False)]),
        ("small_t", [("kind", 8, False), ("value", 8, False)]),
        ("big_t", [("kind", 8, False), ("value", 24, False)]),
    ]
    headers = [("ethernet", "ethernet_t", False), ("tag", "tag_t", False)]
    for u in ("u", "copy"):
        headers += [(f"{u}.short", "short_t", False), (f"{u}.long", "long_t", False)]
    for i in range(3):
        headers += [(f"es[{i}].small", "small_t", False), (f"es[{i}].big", "big_t", False)]
    ids = {name: i for i, (name, _, _) in enumerate(headers, 1)}
    unions = [
        {"name": u, "id": k, "union_type": "u_t", "header_ids": [ids[f"{u}.short"], ids[f"{u}.long"]]}
        for k, u in enumerate(("u", "copy"))
    ]
    unions += [
        {
            "name": f"es[{i}]",
            "id": 2 + i,
            "union_type": "e_t",
            "header_ids": [ids[f"es[{i}].small"], ids[f"es[{i}].big"]],
        }
        for i in range(3)
    ]
    union_types = [
        {"name": "u_t", "id": 0, "headers": [["short", "short_t"], ["long", "long_t"]]},
        {"name": "e_t", "id": 1, "headers": [["small", "small_t"], ["big", "big_t"]]},
    ]
    union_stacks = [{"name": "es", "id": 0, "union_type": "e_t", "header_union_ids": [2, 3, 4]}]
    states = [
        state(
            "start",
            [prim("extract", {"type": "regular", "value": "ethernet"})],
            [field("ethernet", "etherType")],
            [case("0x88b6", "parse_tag"), default()],
        ),
        state(
            "parse_tag",
            [prim("extract", {"type": "regular", "value": "tag"})],
            [field("tag", "tag")],
            [case("0x01", "parse_short"), case("0x02", "parse_long"), default()],
        ),
        state(
            "parse_short", [prim("extract", {"type": "regular", "value": "u.short"})], transitions=[default("elements")]
        ),
        state(
            "parse_long", [prim("extract", {"type": "regular", "value": "u.long"})], transitions=[default("elements")]
        ),
        state(
            "elements",
            key=[{"type": "lookahead", "value": [0, 8]}],
            transitions=[case("0x10", "parse_small"), case("0x20", "parse_big"), default()],
        ),
        state(
            "parse_small",
            [prim("extract", {"type": "union_stack", "value": ["es", "small"]})],
            transitions=[default("elements")],
        ),
        state(
            "parse_big",
            [prim("extract", {"type": "union_stack", "value": ["es", "big"]})],
            transitions=[default("elements")],
        ),
    ]
    order = ["ethernet", "tag", "u.short", "u.long"] + [f"es[{i}].{m}" for i in range(3) for m in ("small", "big")]
    order += ["copy.short", "copy.long"]
    return program(
        header_types,
        headers,
        states,
        order,
        list(extra_ingress),
        header_union_types=union_types,
        header_unions=unions,
        header_union_stacks=union_stacks,
    )


def flags_of(*conditions):
    """Ingress primitives setting tag.flags bit k when conditions[k] holds (b2d of each)."""
    value = None
    for k, cond in enumerate(conditions):
        bit = expr("<<", expr("b2d", None, cond), hexv(k))
        value = bit if value is None else expr("|", value, bit)
    return [prim("assign", field("tag", "flags"), expr("&", value, hexv(0xFF)))]


def union_valid(name):
    return expr("valid_union", None, {"type": "header_union", "value": name})


def member_valid(header):
    return expr("d2b", None, field(header, "$valid$"))


STATUS = flags_of(
    union_valid("u"), member_valid("u.short"), member_valid("u.long"), union_valid("copy"), union_valid("es[1]")
)


def test_union_member_extraction_and_union_validity():
    sw = SoftwareSwitch.from_json(union_program(STATUS))
    frame = eth(0x88B6) + bytes([1, 0]) + b"\x12\x34" + b"\x10\x55" + b"\x20\x01\x02\x03" + b"\x99"
    # u and u.short valid (flags 0b00011) plus es[1] (bit 4); elements emitted in stack order
    out = eth(0x88B6) + bytes([1, 0b10011]) + b"\x12\x34" + b"\x10\x55" + b"\x20\x01\x02\x03" + b"\x99"
    assert sw.process(1, frame) == [(2, out)]
    frame = eth(0x88B6) + bytes([2, 0]) + b"\x00\x00\x00\x07"
    assert sw.process(1, frame) == [(2, eth(0x88B6) + bytes([2, 0b00101]) + b"\x00\x00\x00\x07")]
    frame = eth(0x88B6) + bytes([3, 0])
    assert sw.process(1, frame) == [(2, eth(0x88B6) + bytes([3, 0]))]


def test_setting_one_member_valid_invalidates_the_other():
    grow = [
        prim("add_header", {"type": "header", "value": "u.long"}),
        prim("assign", field("u.long", "value"), hexv(0xABCDEF01)),
    ]
    sw = SoftwareSwitch.from_json(union_program(grow + STATUS))
    frame = eth(0x88B6) + bytes([1, 0]) + b"\x12\x34" + b"tail"
    assert sw.process(1, frame) == [(2, eth(0x88B6) + bytes([1, 0b00101]) + b"\xab\xcd\xef\x01" + b"tail")]
    # egress sees the packet grown by 2 bytes (BMv2's length register follows add/remove)
    assert sw.stats["packets_out"] == 1


def test_union_copy_takes_the_valid_member_or_none():
    copy = [prim("assign_union", {"type": "header_union", "value": "copy"}, {"type": "header_union", "value": "u"})]
    sw = SoftwareSwitch.from_json(union_program(copy + STATUS))
    frame = eth(0x88B6) + bytes([2, 0]) + b"\x01\x02\x03\x04"
    assert sw.process(1, frame) == [(2, eth(0x88B6) + bytes([2, 0b01101]) + b"\x01\x02\x03\x04" * 2)]
    frame = eth(0x88B6) + bytes([9, 0])  # no member valid: the copy has none either
    assert sw.process(1, frame) == [(2, eth(0x88B6) + bytes([9, 0]))]


def test_union_equality_is_bmv2s():
    copy = [prim("assign_union", {"type": "header_union", "value": "copy"}, {"type": "header_union", "value": "u"})]
    same = expr("==", {"type": "header_union", "value": "copy"}, {"type": "header_union", "value": "u"})
    sw = SoftwareSwitch.from_json(union_program(copy + flags_of(same)))
    frame = eth(0x88B6) + bytes([1, 0]) + b"\x12\x34"
    assert sw.process(1, frame)[0][1][15] == 1
    sw = SoftwareSwitch.from_json(union_program(flags_of(same)))  # no copy: copy invalid -> not equal
    assert sw.process(1, frame)[0][1][15] == 0


def test_union_stack_overflow_is_stack_out_of_bounds():
    record = [prim("assign", field("ethernet", "srcAddr"), field("standard_metadata", "parser_error"))]
    sw = SoftwareSwitch.from_json(union_program(record))
    body = b"\x10\x01" * 4
    ((_, out),) = sw.process(1, eth(0x88B6) + bytes([1, 0, 0, 5]) + body)
    assert out[6:12] == STACK_OUT_OF_BOUNDS.to_bytes(6, "big")
    assert out[14:] == bytes([1, 0, 0, 5]) + body  # three elements emitted, the fourth is payload


RUNTIME_INDEX = [
    prim(
        "assign",
        {
            "type": "expression",
            "value": {
                "op": "access_field",
                "left": expr(
                    "access_union_header",
                    expr(
                        "dereference_union_stack", {"type": "header_union_stack", "value": "es"}, field("tag", "flags")
                    ),
                    1,
                ),
                "right": 1,
            },
        },
        hexv(0x0A0B0C),
    )
]
PUSH = [prim("push", {"type": "header_union_stack", "value": "es"}, hexv(1))]
UNION_EQ = expr("==", {"type": "header_union", "value": "copy"}, {"type": "header_union", "value": "u"})
COPY = [prim("assign_union", {"type": "header_union", "value": "copy"}, {"type": "header_union", "value": "u"})]
GROW = [
    prim("add_header", {"type": "header", "value": "u.long"}),
    prim("assign", field("u.long", "value"), hexv(0xABCDEF01)),
]


def test_union_stack_element_by_runtime_index_and_push():
    """es[tag.flags].big.value = 0x0A0B0C through dereference_union_stack/access_union_header, then
    push_front(1): BMv2 rotates whole unions and invalidates nothing (HeaderUnion::mark_invalid is a
    no-op), so the last element comes round to the front."""
    sw = SoftwareSwitch.from_json(union_program(RUNTIME_INDEX + PUSH))
    elements = b"\x10\x01" + b"\x20\x00\x00\x02" + b"\x10\x03"
    frame = eth(0x88B6) + bytes([1, 1, 0, 5]) + elements
    out = sw.process(1, frame)
    expected = eth(0x88B6) + bytes([1, 1, 0, 5]) + b"\x10\x03" + b"\x10\x01" + b"\x20\x0a\x0b\x0c"
    assert out == [(2, expected)]
    # an index past the stack is an exception: the packet is dropped and counted
    assert sw.process(1, eth(0x88B6) + bytes([1, 5, 0, 5]) + elements) == []
    assert sw.stats["exceptions"] == 1


# ------------------------------------------------------------------------------------------ value sets
def vset_program(mask=None):
    return program(
        [ETH, ("p_t", [("kind", 8, False), ("sub", 4, False), ("pad", 4, False), ("hit", 8, False)])],
        [("ethernet", "ethernet_t", False), ("p", "p_t", False)],
        [
            state(
                "start",
                [prim("extract", {"type": "regular", "value": "ethernet"})],
                [field("ethernet", "etherType")],
                [case("0x0800", None), case("ether_types", "parse_p", kind="parse_vset"), default()],
            ),
            state(
                "parse_p",
                [prim("extract", {"type": "regular", "value": "p"})],
                [field("p", "kind"), field("p", "sub")],
                [case("kinds", "hit", mask=mask, kind="parse_vset"), default()],
            ),
            state("hit", [prim("set", field("p", "hit"), hexv(1))]),
        ],
        ["ethernet", "p"],
        parse_vsets=[
            {"name": "ether_types", "id": 0, "compressed_bitwidth": 16},
            {"name": "kinds", "id": 1, "compressed_bitwidth": 12},
        ],
    )


def test_value_sets_match_what_the_control_plane_put_in():
    sw = SoftwareSwitch.from_json(vset_program())
    p = b"\x07\x30\x00"
    frame = eth(0x9000) + p
    assert sw.process(1, frame) == [(2, frame)]  # empty set: default
    sw.value_set_add("ether_types", 0x9000)
    sw.value_set_add("kinds", 0x073)  # kind 7, sub 3: the key is padded to 0x0703
    assert sw.process(1, frame) == [(2, eth(0x9000) + b"\x07\x30\x01")]
    assert sw.process(1, eth(0x9000) + b"\x07\x40\x00") == [(2, eth(0x9000) + b"\x07\x40\x00")]
    assert sw.value_set_members("kinds") == [0x073]
    sw.value_set_delete("ether_types", 0x9000)
    assert sw.process(1, frame) == [(2, frame)]
    sw.value_set_replace("ether_types", [0x9001, 0x9000])
    assert sw.process(1, frame) == [(2, eth(0x9000) + b"\x07\x30\x01")]
    assert sw.value_set_members("ether_types") == [0x9001, 0x9000]


def test_a_masked_value_set_case_masks_the_members():
    sw = SoftwareSwitch.from_json(vset_program(mask="0xff00"))  # only p.kind counts
    sw.value_set_add("ether_types", 0x9000)
    sw.value_set_add("kinds", 0x07F)
    assert sw.process(1, eth(0x9000) + b"\x07\x30\x00")[0][1][-1] == 1


def test_value_set_errors():
    sw = SoftwareSwitch.from_json(vset_program())
    with pytest.raises(EntryError, match="not a 12-bit value") as exc:
        sw.value_set_add("kinds", 1 << 12)
    assert exc.value.code == "INVALID_ARGUMENT"
    sw.value_set_add("kinds", 5)
    with pytest.raises(EntryError) as exc:
        sw.value_set_add("kinds", 5)
    assert exc.value.code == "ALREADY_EXISTS"
    with pytest.raises(EntryError) as exc:
        sw.value_set_delete("kinds", 6)
    assert exc.value.code == "NOT_FOUND"
    with pytest.raises(EntryError) as exc:
        sw.value_set_add("nope", 1)
    assert exc.value.code == "NOT_FOUND"
    assert sw.program.value_sets["kinds"].bitwidth == 12


# ------------------------------------------------------------------------------------------ hashes
def hash_program(algo, width, data_bits=72):
    ingress = [
        prim(
            "modify_field_with_hash_based_offset",
            field("h", "out"),
            hexv(0),
            {"type": "calculation", "value": "calc_0"},
            hexv(1 << width),
        )
    ]
    return program(
        [ETH, ("h_t", [("data", data_bits, False), ("out", 32, False)])],
        [("ethernet", "ethernet_t", False), ("h", "h_t", False)],
        [
            state(
                "start",
                [
                    prim("extract", {"type": "regular", "value": "ethernet"}),
                    prim("extract", {"type": "regular", "value": "h"}),
                ],
            )
        ],
        ["ethernet", "h"],
        ingress,
        calculations=[{"name": "calc_0", "id": 0, "algo": algo, "input": [field("h", "data")]}],
    )


def run_hash(sw, data=b"123456789"):
    ((_, out),) = sw.process(1, eth(0x88B8) + data + bytes(4))
    return int.from_bytes(out[-4:], "big")


def test_custom_crcs_default_to_bmv2s_and_take_parameters():
    crc16 = SoftwareSwitch.from_json(hash_program("crc16_custom", 16))
    assert run_hash(crc16) == 0xBB3D  # CRC-16/ARC check value: BMv2's default parameters
    assert crc16.program.custom_crcs == {"calc_0": 16}
    crc16.set_crc_parameters("calc_0", 0x1021, 0xFFFF, 0x0000, False, False)
    assert run_hash(crc16) == 0x29B1  # CRC-16/CCITT-FALSE
    assert crc16.crc_parameters("calc_0") == (0x1021, 0xFFFF, 0, False, False)
    crc32 = SoftwareSwitch.from_json(hash_program("crc32_custom", 32))
    assert run_hash(crc32) == zlib.crc32(b"123456789") == 0xCBF43926
    crc32.set_crc_parameters("calc_0", 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, True, True)
    assert run_hash(crc32) == 0xE3069283  # CRC-32C
    crc32.set_crc_parameters("calc_0", 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, False, False)
    assert run_hash(crc32) == 0xFC891918  # CRC-32/BZIP2
    with pytest.raises(EntryError, match="32-bit value"):
        crc32.set_crc_parameters("calc_0", 1 << 32, 0, 0)
    with pytest.raises(EntryError, match="no crc16_custom/crc32_custom calculation 'calc_9'") as exc:
        crc32.set_crc_parameters("calc_9", 1, 0, 0)
    assert exc.value.code == "NOT_FOUND"


def test_the_random_hash_is_reproducible_with_the_seed():
    sw = SoftwareSwitch.from_json(hash_program("random", 10))
    sw.seed(42)
    first = [run_hash(sw) for _ in range(20)]
    sw.seed(42)
    assert [run_hash(sw) for _ in range(20)] == first
    assert all(0 <= v < 1024 for v in first) and len(set(first)) > 10


# ------------------------------------------------------------------------------------------ robustness
@pytest.mark.parametrize("build", [varbit_program, union_program, vset_program])
def test_random_and_truncated_frames_never_raise(build):
    sw = SoftwareSwitch.from_json(build())
    if build is vset_program:
        sw.value_set_add("ether_types", 0x9000)
        sw.value_set_add("kinds", 0x073)
    rng = random.Random(build.__name__)
    seeds = [
        eth(0x0800) + ipv4(7, bytes(8)),
        eth(0x88B5) + bytes([16, 0, 1, 2, 3]),
        eth(0x88B6) + bytes([1, 0, 1, 2, 0x10, 1, 0x20, 1, 2, 3]),
    ]
    seeds.append(eth(0x9000) + b"\x07\x30\x00")
    for seed in seeds:
        for n in range(len(seed) + 1):
            sw.process(1, seed[:n])
        for _ in range(300):
            sw.process(1, mutate(seed, rng))
    for _ in range(300):
        sw.process(1, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80))))
    assert sw.stats["exceptions"] == 0


# ------------------------------------------------------------------------------------------ thc-switch options
def test_seed_and_crc_parameters_options():
    from emulator.switch_cli import configure_engine, parse_args

    args = parse_args(["--seed", "0x2a", "--crc-parameters", "calc_0=0x1021,0xffff,0,false,false", "x.json"])
    assert args.seed == 42 and args.crc_parameters == [("calc_0", (0x1021, 0xFFFF, 0, False, False))]
    sw = configure_engine(SoftwareSwitch.from_json(hash_program("crc16_custom", 16)), args.seed, args.crc_parameters)
    assert run_hash(sw) == 0x29B1
    with pytest.raises(SystemExit):
        parse_args(["--crc-parameters", "calc_0=0x1021,0xffff", "x.json"])
    with pytest.raises(EntryError, match="calc_7"):
        configure_engine(sw, None, [("calc_7", (1, 0, 0, True, True))])


# ------------------------------------------------------------------------------------------ native backend
@pytest.mark.parametrize(
    "build, words",
    [
        (varbit_program, r"varbit field 'opts.options'"),
        (lambda: union_program(RUNTIME_INDEX), r"header union stack indexed at run time"),
        (lambda: union_program(PUSH), r"push on a header union stack"),
        (lambda: union_program(flags_of(UNION_EQ)), r"'==' on union values"),
    ],
)
def test_native_refuses_python_only_constructs_by_name_and_auto_falls_back(build, words, caplog):
    from emulator.errors import UnsupportedConstruct

    with pytest.raises(UnsupportedConstruct, match=rf"native backend: .*{words}"):
        SoftwareSwitch.from_json(build(), backend="native")
    with caplog.at_level("WARNING", logger="emulator.switch"):
        sw = SoftwareSwitch.from_json(build(), backend="auto")
    assert type(sw) is SoftwareSwitch
    assert any(
        "Python backend instead" in r.getMessage() and "native backend" in r.getMessage() for r in caplog.records
    )


@pytest.mark.parametrize("mask", [None, "0xff00"])
def test_native_value_sets_agree_with_python(mask):
    """The same frames through both backends while the sets change: identical output."""
    py = SoftwareSwitch.from_json(vset_program(mask), backend="python")
    nat = SoftwareSwitch.from_json(vset_program(mask), backend="native")
    assert type(nat).__name__ == "NativeSwitch"
    rng = random.Random(f"vsets {mask}")
    for step in range(40):
        op = rng.choice(["add", "add", "delete", "replace"])
        name, width = rng.choice([("ether_types", 16), ("kinds", 12)])
        value = rng.choice([0x9000, 0x9001, 0x073, 0x0F0, rng.getrandbits(width)]) & ((1 << width) - 1)
        outcomes = []
        for sw in (py, nat):
            try:
                if op == "replace":
                    sw.value_set_replace(name, sorted({value, value ^ 1}))
                else:
                    getattr(sw, f"value_set_{op}")(name, value)
                outcomes.append("ok")
            except EntryError as exc:
                outcomes.append(exc.code)
        assert outcomes[0] == outcomes[1]
        assert py.value_set_members(name) == nat.value_set_members(name)
        for _ in range(50):
            ether_type = rng.choice([0x9000, 0x9001, 0x0800, rng.getrandbits(16)])
            frame = eth(ether_type) + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 6)))
            assert py.process(1, frame) == nat.process(1, frame), (step, frame.hex())
    assert py.stats == {k: v for k, v in nat.stats.items() if k in py.stats}


@pytest.mark.parametrize(
    "algo, width, params",
    [
        ("crc16_custom", 16, (0x1021, 0xFFFF, 0x0000, False, False)),
        ("crc16_custom", 16, (0x8BB7, 0x0000, 0x0000, False, False)),
        ("crc32_custom", 32, (0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, True, True)),
        ("crc32_custom", 32, (0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, False, False)),
        ("random", 12, None),
    ],
)
def test_native_custom_crcs_and_random_hash_agree_with_python(algo, width, params):
    py = SoftwareSwitch.from_json(hash_program(algo, width, data_bits=64), backend="python")
    nat = SoftwareSwitch.from_json(hash_program(algo, width, data_bits=64), backend="native")
    assert type(nat).__name__ == "NativeSwitch"
    py.seed(7)
    nat.seed(7)
    rng = random.Random(algo)
    frames = [eth(0x88B8) + rng.randbytes(rng.choice([8, 12])) for _ in range(200)]
    for frame in frames:  # BMv2's defaults first
        assert py.process(1, frame) == nat.process(1, frame)
    if params is not None:
        py.set_crc_parameters("calc_0", *params)
        nat.set_crc_parameters("calc_0", *params)
        assert nat.crc_parameters("calc_0") == params
        for frame in frames:
            assert py.process(1, frame) == nat.process(1, frame)
    assert run_hash(py, b"12345678") == run_hash(nat, b"12345678")


SANITIZED_CHILD = r"""
import json, random, sys
from emulator.switch import SoftwareSwitch
from tests.support.frames import mutate
total = 0
for path in json.loads(sys.argv[1]):
    sw = SoftwareSwitch.from_json(json.load(open(path)), backend="native", sanitize=True)
    rng = random.Random(path.rsplit("/", 1)[-1])  # the file's name: the same frames in every folder
    if "ether_types" in sw.program.value_sets:
        sw.value_set_replace("ether_types", [0x9000, 0x9001])
        sw.value_set_replace("kinds", [0x073, 0x0F0])
    for name in sw.program.custom_crcs:
        sw.set_crc_parameters(name, 0x1021, 0xFFFF, 0, False, True)
    eth = bytes.fromhex("0000000000020000000000aa")
    seeds = [eth + bytes([0x90, 0, 7, 0x30, 0]), eth + bytes([0x88, 0xB8]) + bytes(12)]
    seeds.append(eth + bytes([0x88, 0xB6, 1, 0, 0x12, 0x34, 0x10, 0x55, 0x20, 1, 2, 3, 0x10, 7]))
    for i in range(20000):
        if i % 500 == 0 and sw.program.value_sets:
            sw.value_set_replace("ether_types", [0x9000, rng.getrandbits(16) | 1])
            sw.value_set_replace("kinds", [rng.getrandbits(12)])
        frame = mutate(rng.choice(seeds), rng) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 200))
        sw.process(rng.randrange(4), frame)
        total += 1
    sw.close()
print("fuzzed", total)
"""


@pytest.mark.slow
def test_native_unions_value_sets_and_crcs_under_sanitizers(tmp_path):
    import json

    from tests.support import sanitizers

    paths = []
    for name, cfg in (
        ("vsets", vset_program()),
        ("vsets_masked", vset_program("0xff00")),
        ("crc16", hash_program("crc16_custom", 16, 64)),
        ("crc32", hash_program("crc32_custom", 32, 64)),
        ("random", hash_program("random", 12, 64)),
        ("unions", union_program(GROW + COPY + STATUS)),
    ):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cfg))
        paths.append(str(path))
    proc = sanitizers.run_sanitized(SANITIZED_CHILD, json.dumps(paths), cache=tmp_path / "cache", timeout=1500)
    sanitizers.assert_clean(proc, 20000 * len(paths))


@pytest.mark.parametrize(
    "ingress",
    [STATUS, GROW + STATUS, COPY + STATUS, GROW + COPY + STATUS],
    ids=["status", "grow", "copy", "grow-copy"],
)
def test_native_header_unions_agree_with_python(ingress):
    extra = [prim("assign", field("ethernet", "srcAddr"), field("standard_metadata", "parser_error"))]
    cfg = union_program(extra + ingress)
    py = SoftwareSwitch.from_json(cfg, backend="python")
    nat = SoftwareSwitch.from_json(cfg, backend="native")
    assert type(nat).__name__ == "NativeSwitch"
    rng = random.Random(str(ingress))
    seeds = [
        eth(0x88B6) + bytes([1, 0]) + b"\x12\x34" + b"\x10\x55" + b"\x20\x01\x02\x03" + b"\x10\x07" + b"\x99",
        eth(0x88B6) + bytes([2, 0]) + b"\x00\x00\x00\x07" + b"\x20\x01\x02\x03",
        eth(0x88B6) + bytes([1, 0, 0, 5]) + b"\x10\x01" * 4,
    ]
    for seed in seeds:
        for n in range(len(seed) + 1):
            assert py.process(1, seed[:n]) == nat.process(1, seed[:n])
        for _ in range(300):
            frame = mutate(seed, rng)
            assert py.process(1, frame) == nat.process(1, frame), frame.hex()
    assert py.stats == {k: v for k, v in nat.stats.items() if k in py.stats}


@pytest.mark.parametrize("backend", ["python", "native"])
def test_a_select_on_the_last_union_stack_element(backend):
    """transition select(es.last.small.value) { 0xff: accept; default: elements; }"""
    cfg = union_program(STATUS)
    st = next(s for s in cfg["parsers"][0]["parse_states"] if s["name"] == "parse_small")
    st["transition_key"] = [{"type": "union_stack_field", "value": ["es", "small", "value"]}]
    st["transitions"] = [case("0xff", None), default("elements")]
    sw = SoftwareSwitch.from_json(cfg, backend=backend)
    assert sw.backend == backend
    frame = eth(0x88B6) + bytes([1, 0]) + b"\x12\x34" + b"\x10\x01" + b"\x10\xff" + b"\x10\x02"
    out = eth(0x88B6) + bytes([1, 0b10011]) + b"\x12\x34" + b"\x10\x01" + b"\x10\xff" + b"\x10\x02"
    assert sw.process(1, frame) == [(2, out)]  # the third element is payload, es[2] invalid
    frame = eth(0x88B6) + bytes([1, 0]) + b"\x12\x34" + b"\x10\xff" + b"\x10\x02"
    assert sw.process(1, frame) == [(2, eth(0x88B6) + bytes([1, 0b00011]) + b"\x12\x34" + b"\x10\xff" + b"\x10\x02")]
