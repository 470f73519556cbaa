"""Byte-for-byte packet tests of the engine on the fixture programs (tests/fixtures/p4/*.p4).

Each test crafts frames with Scapy, runs them through SoftwareSwitch.process() and compares the exact
output bytes and ports with what simple_switch does for the same program.
"""

import logging
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import raw

from emulator.switch import SoftwareSwitch
from tests.support.checksums import crc16_arc
from tests.support.paths import FIXTURE_BUILD

BUILD = FIXTURE_BUILD

# ----------------------------------------------------------------------------------- ipv4_forward
LPM, FWD = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
SW_MAC, HOST_MAC = "00:00:00:00:01:01", "00:00:00:00:00:0a"


@pytest.fixture
def router():
    sw = SoftwareSwitch.from_json(BUILD / "ipv4_forward.json")
    sw.table_add(LPM, [(0x0A000000, 8)], FWD, [0x0000000000AA, 2])
    sw.table_add(LPM, [(0x0A010000, 16)], FWD, [0x0000000000BB, 3])
    return sw


def _udp(dst="10.9.8.7", ttl=64, payload=b"payload!", **ip):
    return (
        Ether(dst=SW_MAC, src=HOST_MAC)
        / IP(src="192.168.0.1", dst=dst, ttl=ttl, **ip)
        / UDP(sport=1234, dport=5678)
        / payload
    )


def _forwarded(pkt, new_dmac, ttl):
    """What the program makes of `pkt`: MACs rotated, TTL set, IPv4 checksum recomputed."""
    out = pkt.copy()
    out[Ether].src = pkt[Ether].dst
    out[Ether].dst = new_dmac
    out[IP].ttl = ttl
    del out[IP].chksum
    return raw(Ether(raw(out)))


def test_ipv4_forward_rewrites_macs_ttl_and_checksum_exactly(router):
    pkt = _udp()
    out = router.process(1, raw(pkt))
    assert out == [(2, _forwarded(pkt, "00:00:00:00:00:aa", 63))]
    # the checksum the switch wrote is the correct one
    assert IP(out[0][1][14:]).chksum == IP(raw(IP(out[0][1][14:]))).chksum


def test_ipv4_longest_prefix_wins(router):
    pkt = _udp(dst="10.1.2.3")
    assert router.process(1, raw(pkt)) == [(3, _forwarded(pkt, "00:00:00:00:00:bb", 63))]
    router.table_delete(LPM, [(0x0A010000, 16)])
    assert router.process(1, raw(pkt)) == [(2, _forwarded(pkt, "00:00:00:00:00:aa", 63))]


def test_ipv4_ttl_wraps_like_bit8(router):
    pkt = _udp(ttl=0)
    assert router.process(1, raw(pkt)) == [(2, _forwarded(pkt, "00:00:00:00:00:aa", 255))]


def test_ipv4_miss_runs_the_default_drop(router):
    assert router.process(1, raw(_udp(dst="11.0.0.1"))) == []
    stats = router.stats
    assert stats["dropped_ingress"] == 1 and stats["dropped"] == 1 and stats["packets_out"] == 0


def test_default_action_can_be_changed_and_reset(router):
    assert router.table_get_default(LPM) == ("MyIngress.drop", [])
    router.table_set_default(LPM, FWD, [0xCC, 7])
    pkt = _udp(dst="11.0.0.1")
    assert router.process(1, raw(pkt)) == [(7, _forwarded(pkt, "00:00:00:00:00:cc", 63))]
    router.table_reset_default(LPM)
    assert router.process(1, raw(pkt)) == []


def test_bad_ipv4_checksum_sets_checksum_error_and_the_program_drops(router):
    pkt = _udp()
    frame = bytearray(raw(pkt))
    frame[24] ^= 0xFF  # corrupt the IPv4 header checksum
    assert router.process(1, bytes(frame)) == []
    assert router.stats["checksum_errors"] == 1


def test_non_ipv4_goes_to_port_0_unchanged(router):
    # the program only routes IPv4; egress_spec keeps its initial 0, as on simple_switch
    arp = raw(Ether(dst="ff:ff:ff:ff:ff:ff", src=HOST_MAC) / ARP(pdst="10.0.0.1"))
    assert router.process(5, arp) == [(0, arp)]


@pytest.mark.parametrize("length", [0, 1, 13, 14, 20, 33])
def test_truncated_frames_are_parser_errors_not_crashes(router, length):
    frame = raw(_udp())[:length]
    out = router.process(1, frame)
    stats = router.stats
    assert stats["exceptions"] == 0
    if length < 14:
        # no header extracted: parser_error set, nothing valid to route; the frame leaves unchanged
        assert out == [(0, frame)]
        assert stats["parser_errors"] == 1
    elif length < 34:
        assert out == [(0, frame)]  # ethernet parsed, ipv4 too short: re-emitted unchanged
        assert stats["parser_errors"] == 1
    assert router.process(1, raw(_udp())) != []  # the switch keeps working


def test_trace_logs_table_hits_and_drops(router, caplog):
    with caplog.at_level(logging.DEBUG, logger="emulator.trace"):
        router.process(1, raw(_udp()))
        router.process(1, raw(_udp(dst="11.0.0.1")))
    text = caplog.text
    assert "table MyIngress.ipv4_lpm: hit" in text and "MyIngress.ipv4_forward" in text
    assert "table MyIngress.ipv4_lpm: miss" in text and "drop:" in text


def test_exception_in_an_action_is_counted_logged_and_contained(router, caplog):
    entry = router._prog.tables[LPM].entry([(0x0A000000, 8)])

    def broken(F, P):
        raise RuntimeError("injected bug")

    entry.fn, entry.action_id = broken, -1  # -1: not one of the actions inlined into the table apply
    with caplog.at_level(logging.ERROR, logger="emulator.switch"):
        assert router.process(1, raw(_udp())) == []
    assert router.stats["exceptions"] == 1
    assert "injected bug" in caplog.text
    pkt = _udp(dst="10.1.0.1")  # another entry still works
    assert router.process(1, raw(pkt)) == [(3, _forwarded(pkt, "00:00:00:00:00:bb", 63))]


# ------------------------------------------------------------------------ counter_register_multicast
ING = "TagIngress"
TAG_TYPE = 0x88B5


def tag_frame(op, idx, value, src=0x0000000000A1, ext=None):
    body = struct.pack("!BBHIHHH", op, idx, value, 0, 0, 0, 0)
    if ext is not None:
        body += struct.pack("!I", ext)
    return (0x0000000000FF).to_bytes(6, "big") + src.to_bytes(6, "big") + struct.pack("!H", TAG_TYPE) + body


def parse_tag(frame):
    op, idx, value, acc, rid, eport, mark = struct.unpack("!BBHIHHH", frame[14:28])
    return {"op": op, "idx": idx, "value": value, "acc": acc, "rid": rid, "eport": eport, "mark": mark}


@pytest.fixture
def tagsw():
    return SoftwareSwitch.from_json(BUILD / "counter_register_multicast.json")


def test_indirect_counter_counts_packets_and_ingress_bytes(tagsw):
    f = tag_frame(0x01, 1, 1)
    for _ in range(3):
        tagsw.process(2, f)
    tagsw.process(4, f + b"xx")
    assert tagsw.counter_read(f"{ING}.port_pkts", 2) == (3, 3 * len(f))
    assert tagsw.counter_read(f"{ING}.port_pkts", 4) == (1, len(f) + 2)
    tagsw.counter_reset(f"{ING}.port_pkts")
    assert tagsw.counter_read(f"{ING}.port_pkts", 2) == (0, 0)


def test_register_read_modify_write_accumulates(tagsw):
    tagsw.table_add(f"{ING}.classify", [(0, 0), (0, 0)], f"{ING}.set_port", [9], priority=1)
    out1 = tagsw.process(1, tag_frame(0x01, 3, 500))
    out2 = tagsw.process(1, tag_frame(0x01, 3, 70))
    assert [p for p, _ in out1] == [9] and parse_tag(out1[0][1])["acc"] == 500
    assert parse_tag(out2[0][1])["acc"] == 570
    assert tagsw.register_read(f"{ING}.acc", 3) == 570
    tagsw.register_write(f"{ING}.acc", 3, 0xFFFFFFFF)
    out3 = tagsw.process(1, tag_frame(0x01, 3, 2))
    assert parse_tag(out3[0][1])["acc"] == 1  # bit<32> wraps
    # idx >= 16 is guarded by the program: the register is untouched, acc stays 0
    out4 = tagsw.process(1, tag_frame(0x01, 200, 2))
    assert parse_tag(out4[0][1])["acc"] == 0


def test_ternary_priorities_and_direct_counter(tagsw):
    t = f"{ING}.classify"
    tagsw.table_add(t, [(0x20, 0xF0), (0, 0)], f"{ING}.set_port", [5], priority=10)
    tagsw.table_add(t, [(0x21, 0xFF), (0x0000000000A1, 0xFFFFFFFFFFFF)], f"{ING}.set_port", [6], priority=20)
    assert [p for p, _ in tagsw.process(1, tag_frame(0x21, 0, 0))] == [6]
    assert [p for p, _ in tagsw.process(1, tag_frame(0x21, 0, 0, src=0xB2))] == [5]
    assert [p for p, _ in tagsw.process(1, tag_frame(0x2F, 0, 0))] == [5]
    assert tagsw.process(1, tag_frame(0x31, 0, 0)) == []  # miss: default drop()
    f = tag_frame(0x21, 0, 0)
    assert tagsw.direct_counter_read(t, [(0x21, 0xFF), (0xA1, 0xFFFFFFFFFFFF)], priority=20) == (1, len(f))
    assert tagsw.direct_counter_read(t, [(0x20, 0xF0), (0, 0)], priority=10) == (2, 2 * len(f))
    entries = tagsw.table_entries(t)
    assert [(e.action, e.params, e.priority) for e in entries] == [
        (f"{ING}.set_port", [5], 10),
        (f"{ING}.set_port", [6], 20),
    ]


def test_masked_select_parses_ext_and_range_table_decides(tagsw):
    tagsw.table_add(f"{ING}.classify", [(0, 0), (0, 0)], f"{ING}.set_port", [1], priority=1)
    tagsw.table_add(f"{ING}.by_value", [(100, 199)], f"{ING}.set_port", [2], priority=1)
    tagsw.table_add(f"{ING}.by_value", [(150, 150)], f"{ING}.set_port", [3], priority=5)
    # op 0x1X -> ext parsed (and re-emitted); by_value applies
    for value, port in ((99, 1), (100, 2), (150, 3), (199, 2), (200, 1)):
        frame = tag_frame(0x17, 0, value, ext=0xDEADBEEF)
        out = tagsw.process(4, frame)
        assert [p for p, _ in out] == [port], value
        assert out[0][1][28:32] == b"\xde\xad\xbe\xef"
    # op 0x27 -> no ext: the 4 bytes are payload, by_value not applied
    out = tagsw.process(4, tag_frame(0x27, 0, 150, ext=0xDEADBEEF))
    assert [p for p, _ in out] == [1]


def test_multicast_replicas_carry_metadata_and_rid_and_prune_the_ingress_port(tagsw):
    tagsw.table_add(f"{ING}.classify", [(0x40, 0xF0), (0, 0)], f"{ING}.set_mcast", [7, 0xBEEF], priority=1)
    tagsw.mc_group_set(7, [(1, 100), (2, 200), (3, 300), (3, 301)])
    out = tagsw.process(2, tag_frame(0x41, 0, 0))
    got = [(p, parse_tag(f)["rid"], parse_tag(f)["eport"], parse_tag(f)["mark"]) for p, f in out]
    # the copy to port 2 (the ingress port) is dropped in egress by the program
    assert sorted(got) == [(1, 100, 1, 0xBEEF), (3, 300, 3, 0xBEEF), (3, 301, 3, 0xBEEF)]
    stats = tagsw.stats
    assert stats["multicast_replicas"] == 4 and stats["dropped_egress"] == 1
    assert tagsw.mc_groups() == {7: [(1, 100), (2, 200), (3, 300), (3, 301)]}
    tagsw.mc_group_delete(7)
    assert tagsw.process(2, tag_frame(0x41, 0, 0)) == []
    assert tagsw.stats["dropped_no_group"] == 1


def test_frames_without_the_tag_are_dropped_by_ingress(tagsw):
    assert tagsw.process(1, raw(Ether() / IP() / UDP())) == []
    assert tagsw.stats["dropped_ingress"] == 1


# ------------------------------------------------------------------------------------ expressions
OPS_TYPE = 0x88B6
OUT_FMT = "!BBBBbbHHHBBHBBBBhBB"


@pytest.fixture(scope="module")
def opsw():
    return SoftwareSwitch.from_json(BUILD / "expressions.json")


def ops_frame(a, b, s, t, w, sh, flags, labels=((1, 1),)):
    body = struct.pack("!BBbbHBB", a, b, s, t, w, sh, flags)
    for v, bos in labels:
        body += bytes([v, bos])
    return bytes(6) + bytes(5) + b"\x01" + struct.pack("!H", OPS_TYPE) + body


def _wrap8s(v):
    return ((v + 128) & 0xFF) - 128


def expected_out(a, b, s, t, w, sh, flags):
    branch = 1 if flags & 1 else 2
    inner = 1 if a > 100 else 2 if b > 100 else 3
    tern = 0xEE if flags & 0x80 else max(a, b)
    return {
        "sum": (a + b) & 0xFF,
        "diff": (a - b) & 0xFF,
        "satsum": min(a + b, 255),
        "satdiff": max(a - b, 0),
        "ssum": _wrap8s(s + t),
        "ssat": max(-128, min(127, s + t)),
        "mul": (w * a) & 0xFFFF,
        "shl": (w << sh) & 0xFFFF,
        "shr": w >> sh,
        "hi": w >> 8,
        "cmp": (s < t) | ((a < b) << 1),
        "cat": (a << 8) | b,
        "neg": ~a & 0xFF,
        "tern": tern,
        "branch": branch,
        "inner": inner,
        "sext": s,
        "big": 1 if a > 200 else 0,
    }


OUT_NAMES = [
    "sum",
    "diff",
    "satsum",
    "satdiff",
    "ssum",
    "ssat",
    "mul",
    "shl",
    "shr",
    "hi",
    "cmp",
    "cat",
    "neg",
    "tern",
    "branch",
    "inner",
    "sext",
    "big",
    "depth",
]


def run_ops(sw, *args, labels=((1, 1),)):
    out = sw.process(3, ops_frame(*args, labels=labels))
    assert len(out) == 1 and out[0][0] == 1
    frame = out[0][1]
    values = dict(zip(OUT_NAMES, struct.unpack(OUT_FMT, frame[22 : 22 + struct.calcsize(OUT_FMT)])))
    rest = frame[22 + struct.calcsize(OUT_FMT) :]
    return values, rest


@pytest.mark.parametrize(
    "args",
    [
        (1, 2, 3, 4, 0x1234, 4, 0),
        (250, 10, 100, 100, 0xFFFF, 0, 1),
        (5, 250, -128, -1, 0x8001, 15, 0),
        (201, 201, 127, 127, 0x00FF, 16, 1),
        (0, 0, -5, 3, 0xABCD, 200, 0),
        (150, 50, -100, -100, 3, 255, 1),
    ],
)
def test_arithmetic_matches_p4_semantics(opsw, args):
    values, _ = run_ops(opsw, *args)
    exp = expected_out(*args)
    for name, v in exp.items():
        assert values[name] == v, (name, args)


def test_exit_skips_the_rest_of_ingress(opsw):
    values, _ = run_ops(opsw, 9, 3, 0, 0, 0, 0, 0x80)
    assert values["tern"] == 0xEE  # set right before exit; the later assignment never ran
    assert values["sum"] == 12


def test_header_stack_parsed_in_a_loop_and_push_pop(opsw):
    labels = ((1, 0), (2, 0), (3, 1))
    values, rest = run_ops(opsw, 1, 2, 0, 0, 0, 0, 0, labels=labels)
    assert values["depth"] == 3 and rest == b"\x01\x00\x02\x00\x03\x01"
    values, rest = run_ops(opsw, 1, 2, 0, 0, 0, 0, 0b010, labels=labels)  # pop_front(1)
    assert values["depth"] == 2 and rest == b"\x02\x00\x03\x01"
    values, rest = run_ops(opsw, 1, 2, 0, 0, 0, 0, 0b100, labels=((5, 1),))  # push_front(1)
    assert values["depth"] == 2 and rest == b"\x77\x00\x05\x01"


def test_stack_overflow_is_a_parser_error_and_ingress_still_runs(opsw):
    before = opsw.stats["parser_errors"]
    labels = ((1, 0), (2, 0), (3, 0), (4, 1))  # a 4th label does not fit lbl[3]
    out = opsw.process(3, ops_frame(1, 2, 0, 0, 0, 0, 0, labels=labels))
    assert opsw.stats["parser_errors"] == before + 1
    frame = out[0][1]
    values = dict(zip(OUT_NAMES, struct.unpack(OUT_FMT, frame[22 : 22 + struct.calcsize(OUT_FMT)])))
    assert values["sum"] == 3 and values["depth"] == 3
    # the 3 labels, then the unparsed 4th as payload
    assert frame[22 + struct.calcsize(OUT_FMT) :] == b"\x01\x00\x02\x00\x03\x00\x04\x01"


# ---------------------------------------------------------------------------------- passes_externs
P_TYPE = 0x88B7
P_FMT = "!BBBBHHIHH"
SRC_MAC = 0x0A0B0C0D0E0F


@pytest.fixture
def passw():
    return SoftwareSwitch.from_json(BUILD / "passes_externs.json")


def p_frame(kind):
    return (
        (0x0000000000FF).to_bytes(6, "big")
        + SRC_MAC.to_bytes(6, "big")
        + struct.pack("!H", P_TYPE)
        + struct.pack(P_FMT, kind, 0, 0, 0, 0, 0, 0, 0, 0)
    )


def p_fields(frame):
    names = ["kind", "n_seen", "itype", "passes", "len", "crc16", "crc32", "csum", "rnd"]
    return dict(zip(names, struct.unpack(P_FMT, frame[14:30])))


def test_hash_extern_uses_bmv2_algorithms(passw):
    import zlib

    ((port, frame),) = passw.process(1, p_frame(0))
    v = p_fields(frame)
    data = SRC_MAC.to_bytes(6, "big") + b"\x00"  # the hashed field list: srcAddr, kind
    assert port == 2
    assert v["crc16"] == crc16_arc(data)
    assert v["crc32"] == zlib.crc32(data) % 0xFFFFFFFF
    s = sum(struct.unpack("!3H", data[:6])) + (data[6] << 8)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    assert v["csum"] == ~s & 0xFFFF
    assert 100 <= v["rnd"] <= 200
    assert (v["passes"], v["itype"], v["n_seen"], v["len"]) == (1, 0, 0, len(p_frame(0)))


def test_resubmit_reparses_the_original_with_the_field_list(passw):
    ((port, frame),) = passw.process(1, p_frame(1))
    v = p_fields(frame)
    # the first pass's header changes are gone; meta.n survived; instance_type RESUBMIT (6)
    assert (port, v["passes"], v["itype"], v["n_seen"]) == (2, 1, 6, 7)
    assert passw.stats["resubmits"] == 1


def test_recirculate_reparses_the_deparsed_packet_with_the_field_list(passw):
    ((port, frame),) = passw.process(1, p_frame(2))
    v = p_fields(frame)
    # the first pass's changes were deparsed and parsed again; instance_type RECIRC (4)
    assert (port, v["passes"], v["itype"], v["n_seen"]) == (2, 2, 4, 9)
    assert passw.stats["recirculations"] == 1


def test_failed_assert_drops_the_packet_and_counts_an_exception(passw, caplog):
    with caplog.at_level(logging.ERROR, logger="emulator.switch"):
        assert passw.process(1, p_frame(3)) == []
    assert passw.stats["exceptions"] == 1 and "assert failed" in caplog.text
    assert passw.process(1, p_frame(0)) != []


def test_log_msg_is_logged(passw, caplog):
    with caplog.at_level(logging.INFO, logger="emulator.log_msg"):
        passw.process(1, p_frame(0))
    assert "kind=0 passes=1" in caplog.text


def test_endless_recirculation_stops_at_the_pass_limit(passw):
    # BMv2 would recirculate this packet forever; the engine drops it after 16 passes
    assert passw.process(1, p_frame(4)) == []
    stats = passw.stats
    assert stats["dropped_pass_limit"] == 1 and stats["recirculations"] == 16


# ----------------------------------------------------------------------------------- tables_parser
Q_TYPE = 0x88B8
TI = "TIngress"


@pytest.fixture
def tparse():
    sw = SoftwareSwitch.from_json(BUILD / "tables_parser.json")
    sw.table_add(f"{TI}.chooser", [0x10], f"{TI}.set_how", [5])
    sw.table_add(f"{TI}.chooser", [0x20], f"{TI}.to_port", [3])
    sw.table_add(f"{TI}.hitter", [0x40], f"{TI}.set_how", [7])
    return sw


def q_frame(key16, flags=0, version=1, after=b""):
    return (
        bytes(6)
        + bytes(5)
        + b"\x02"
        + struct.pack("!H", Q_TYPE)
        + struct.pack("!BBHBBBB", version, flags, key16, 0, 0, 0, 0)
        + after
    )


def q_out(out):
    ((port, frame),) = out
    version, flags, key16, cls, how, err, port_out = struct.unpack("!BBHBBBB", frame[14:22])
    return port, {"cls": cls, "how": how, "err": err, "port_out": port_out}, frame[22:]


@pytest.mark.parametrize(
    "key16, after, cls",
    [
        (0x0001, b"", 1),
        (0x0001, b"\xa5\x00\x00\x00", 2),
        (0x0002, b"", 0),  # exact, isValid() key
        (0x1234, b"", 4),
        (0x12FF, b"", 3),
        (0x1300, b"", 0),  # lpm, default set_cls(0)
        (0x2100, b"", 6),
        (0x2200, b"", 5),
        (0x4000, b"", 7),  # ternary: order, then _
        (0x3003, b"", 8),
        (0x300F, b"", 9),
        (0x3019, b"", 10),  # range on a slice
    ],
)
def test_const_entries_of_every_match_kind(tparse, key16, after, cls):
    after = after or b"\x00"  # the parser looks one byte ahead after q
    port, q, rest = q_out(tparse.process(1, q_frame(key16, after=after)))
    assert q["cls"] == cls and q["err"] == 0 and rest == after


def test_lookahead_past_the_end_is_packet_too_short(tparse):
    # p4c turns lookahead<bit<8>>() into a parser `set` from a lookahead, which BMv2 checks
    port, q, rest = q_out(tparse.process(1, q_frame(0x0001)))
    assert q["err"] == 2 and q["cls"] == 1 and rest == b""


def test_switch_on_action_run_and_hit_miss(tparse):
    def run(flags):
        return q_out(tparse.process(1, q_frame(0x0002, flags=flags, after=b"\x00")))

    assert run(0x10)[1]["how"] == 105
    port, q, _ = run(0x20)
    assert (port, q["how"], q["port_out"]) == (3, 50, 3)
    assert run(0x40)[1]["how"] == 207
    assert run(0x80)[1]["how"] == 222


def test_parser_verify_error_reaches_ingress(tparse):
    # verify fails right after q: opt is not parsed, ingress sees parser_error == BadVersion
    port, q, rest = q_out(tparse.process(1, q_frame(0x0001, version=2, after=b"\xa5\x01\x02\x03")))
    assert q["err"] == 1 and q["cls"] == 1 and rest == b"\xa5\x01\x02\x03"
    assert tparse.stats["parser_errors"] == 1


def test_lookahead_then_short_extract_is_packet_too_short(tparse):
    port, q, rest = q_out(tparse.process(1, q_frame(0x0001, after=b"\xa5\x01")))
    assert q["err"] == 2 and q["cls"] == 1 and rest == b"\xa5\x01"


def test_advance_removes_the_skipped_bytes_like_bmv2(tparse):
    port, q, rest = q_out(tparse.process(1, q_frame(0x0002, flags=0x02, after=b"\xee\xee\x01\x02")))
    assert q["err"] == 0 and rest == b"\x01\x02"


def test_exit_after_mark_to_drop(tparse):
    assert tparse.process(1, bytes(14)) == []
    assert tparse.stats["dropped_ingress"] == 1


# ------------------------------------------------------------------------------------ robustness
@pytest.mark.parametrize(
    "program", ["ipv4_forward", "counter_register_multicast", "expressions", "passes_externs", "tables_parser"]
)
def test_random_and_truncated_frames_never_raise(program):
    """Frames of random bytes, and valid-looking frames cut at every length, only ever take the
    parser-error path: no exception is counted and the switch keeps answering."""
    import random

    sw = SoftwareSwitch.from_json(BUILD / f"{program}.json")
    rng = random.Random(program)
    ether_types = (b"\x08\x00", b"\x88\xb5", b"\x88\xb6", b"\x88\xb7", b"\x88\xb8")
    failing_asserts = 0
    for n in range(400):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80)))
        if n % 5 == 0 and body:
            body = b"\x03" + body[1:]
        frame = bytes(12) + rng.choice(ether_types) + body
        frame = frame[: rng.randrange(0, len(frame) + 1)] if n % 2 else frame
        if program == "passes_externs" and frame[12:14] == b"\x88\xb7" and len(frame) >= 30 and frame[14] == 3:
            failing_asserts += 1  # assert(kind != 3) fails: BMv2 aborts, the engine drops
        out = sw.process(rng.randrange(8), frame)
        assert all(isinstance(p, int) and isinstance(f, bytes) for p, f in out)
    stats = sw.stats
    assert stats["exceptions"] == failing_asserts
    assert failing_asserts > 0 if program == "passes_externs" else failing_asserts == 0
    assert stats["packets_in"] == 400
