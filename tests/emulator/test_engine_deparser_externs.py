"""Extern calls in a v1model deparser (p4c's deparser `primitives`) on both backends.

The program is tests/fixtures/p4/deparser_externs.p4 compiled by p4c-bm2-ss 1.2.5.16: its deparser
takes a digest, logs three messages (one with a signed field, one with a 48-bit one), and
truncates the frame to dp.keep bytes, before emitting. Frames are checked byte for byte, the
messages as BMv2 formats them; the deparser's digest is never sent (simple_switch reads the learn
id after ingress only), while the ingress digest of kind-1 frames is.
"""

import logging
import random
import struct
import zlib

import pytest

from emulator.engine.logmsg import parse_log_format
from emulator.switch import SoftwareSwitch
from tests.support.frames import mutate
from tests.support.paths import FIXTURE_BUILD

JSON = FIXTURE_BUILD / "deparser_externs.json"
DST, SRC = bytes.fromhex("ffffffffffff"), bytes.fromhex("020000000001")
TYPE_DP = 0x88B6


def dp_frame(kind: int, keep: int, delta: int, tag: int, payload: bytes = b"") -> bytes:
    return DST + SRC + TYPE_DP.to_bytes(2, "big") + struct.pack("!BIhI", kind, keep, delta, tag) + payload


@pytest.fixture(params=["python", "native"])
def sw(request):
    switch = SoftwareSwitch.from_json(JSON, backend=request.param)
    assert switch.backend == request.param
    return switch


def test_frames_leave_as_ingress_wrote_them_cut_to_keep_bytes(sw):
    payload = bytes(range(40))
    # from port 1 to port 2, tag + 1, 11 + 14 header bytes and 5 of payload kept
    assert sw.process(1, dp_frame(0, 30, -5, 7, payload)) == [(2, dp_frame(0, 30, -5, 8, payload)[:30])]
    # keep below 20 is raised to 20 by ingress (the tag wraps); a frame shorter than keep is not cut
    assert sw.process(4, dp_frame(1, 3, 1, 0xFFFFFFFF)) == [(1, dp_frame(1, 20, 1, 0)[:20])]
    assert sw.process(1, dp_frame(0, 1000, 0, 0, payload)) == [(2, dp_frame(0, 1000, 0, 1, payload))]
    # not dp, or too short for dp: dropped in ingress, the deparser never runs
    assert sw.process(1, DST + SRC + b"\x08\x00" + bytes(20)) == []
    assert sw.process(1, dp_frame(0, 30, 0, 0)[:20]) == []
    assert sw.stats["exceptions"] == 0


def test_log_msg_lines_are_bmv2s(sw, caplog):
    with caplog.at_level(logging.INFO, logger="emulator.log_msg"):
        sw.process(1, dp_frame(1, 30, -300, 41))
    assert [r.getMessage() for r in caplog.records if r.name == "emulator.log_msg"] == [
        "deparser: kind=1 delta=-300 tag=42",  # the signed field with its sign, the tag ingress wrote
        f"deparser: src={int.from_bytes(SRC, 'big')} of type {TYPE_DP}",
        "deparser done",
    ]


def test_a_deparser_digest_is_not_sent_an_ingress_one_is(sw):
    sw.process(1, dp_frame(0, 30, 0, 0))  # only the deparser's digest(): simple_switch never sends it
    assert sw.digests() == []
    sw.process(1, dp_frame(1, 30, 0, 0))  # the ingress digest, then the deparser's
    assert sw.digests() == [("ingress_seen_t", (int.from_bytes(SRC, "big"), 1))]
    assert sw.stats["digests"] == 1


def test_random_and_truncated_frames_never_raise(sw, caplog):
    rng = random.Random(zlib.crc32(b"deparser_externs"))
    good = [dp_frame(rng.randrange(3), rng.randrange(60), rng.randrange(-(2**15), 2**15), rng.getrandbits(32),
                     bytes(rng.getrandbits(8) for _ in range(rng.randrange(30)))) for _ in range(50)]  # fmt: skip
    frames = good + [mutate(f, rng) for f in good] + [f[: rng.randrange(len(f) + 1)] for f in good]
    frames += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(80))) for _ in range(100)]
    with caplog.at_level(logging.INFO, logger="emulator.log_msg"):
        for frame in frames:
            for _port, out in sw.process(rng.randrange(8), frame):
                assert len(out) <= max(20, int.from_bytes(frame[15:19], "big"))
    assert sw.stats["exceptions"] == 0 and sw.stats["packets_in"] == len(frames)


# ------------------------------------------------------------------------------- BMv2's format reading
@pytest.mark.parametrize(
    "fmt, nargs, pieces",
    [
        ("a={} b={}", 2, ("a=", " b=", "")),
        ("plain", 0, ("plain",)),
        ("x{name}y", 1, ("x", "y")),  # any {...} is a placeholder
        ("x\\{}y{}", 1, ("x{}y", "")),  # an escaped brace is text
        ("x{a\\}b}y", 1, ("x", "y")),  # an escaped } does not close
        ("a{}{}", 1, ("a", "{}")),  # BMv2 resumes one character past a replacement
        ("{}", 0, ("{}",)),  # the first character is never a placeholder
    ],
)
def test_log_format_is_read_as_bmv2_reads_it(fmt, nargs, pieces):
    assert parse_log_format(fmt, nargs).pieces == pieces


@pytest.mark.parametrize(
    "fmt, nargs, error",
    [
        ("{}", 1, "Format string expected (0) argument(s) but go (1)"),
        ("a{}{}", 2, "Format string expected (1) argument(s) but go (2)"),
        ("a={} b", 0, "Format string expected (1) argument(s) but go (0)"),
        ("a={", 1, 'No matching "}" in call to log_msg()'),
    ],
)
def test_formats_simple_switch_exits_on_are_logged_as_its_error(fmt, nargs, error):
    form = parse_log_format(fmt, nargs, {"source_info": {"filename": "p.p4", "line": 9}})
    assert error in form.error and form.error.endswith(": p.p4(9).")
