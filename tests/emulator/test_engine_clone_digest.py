"""Clone / mirroring, truncate and digest() through the engine, byte for byte, on the fixture
programs clone_mirror.p4 and digest_learn.p4 (simple_switch's semantics: simple_switch.cpp's
ingress_thread / egress_thread, primitives.cpp)."""

import random

import pytest

from emulator.errors import EntryError
from emulator.switch import MAX_COPIES, MAX_PASSES, SoftwareSwitch
from tests.support.frames import guided_frames, mutate
from tests.support.paths import FIXTURE_BUILD

CLONE_JSON = FIXTURE_BUILD / "clone_mirror.json"
DIGEST_JSON = FIXTURE_BUILD / "digest_learn.json"
ETHER = bytes.fromhex("00000000000200000000000188b5")
TAIL = b"TAIL"  # payload after the c header: it must ride along unchanged


def c_frame(kind, session=0, trunc=0, seen=0):
    """Ethernet | c (kind, session, trunc, seen, itype, kept, lost, rid, len, eport) | TAIL."""
    return ETHER + bytes([kind, session, trunc, seen, 0, 0, 0, 0]) + bytes(4) + TAIL


def c_out(frame, *, seen, itype, kept, lost, rid=0, eport):
    """`frame` as the egress rewrites its c header (packet_length is the 30-byte frame's)."""
    recorded = bytes([seen, itype, kept, lost, rid]) + len(frame).to_bytes(2, "big") + eport.to_bytes(2, "big")
    return frame[:17] + recorded + frame[26:]


@pytest.fixture
def sw():
    if not CLONE_JSON.exists():
        pytest.skip("clone_mirror.p4 is not compiled")
    return SoftwareSwitch.from_json(CLONE_JSON)


def test_ingress_clone_is_the_received_frame_with_only_the_field_list_kept(sw):
    sw.mirroring_add(5, egress_port=3)
    frame = c_frame(1, session=5)
    clone = c_out(frame, seen=0x10, itype=1, kept=0x5A, lost=0, eport=3)  # no ingress +1, metadata reset
    original = c_out(frame, seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2)
    assert sw.process(1, frame) == [(3, clone), (2, original)]
    stats = sw.stats
    assert (stats["clones"], stats["packets_out"]) == (1, 2)


def test_clone_without_a_field_list_keeps_no_metadata(sw):
    sw.mirroring_add(5, egress_port=3)
    frame = c_frame(2, session=5)
    assert sw.process(1, frame)[0] == (3, c_out(frame, seen=0x10, itype=1, kept=0, lost=0, eport=3))


def test_clone_survives_the_original_being_dropped(sw):
    sw.mirroring_add(5, egress_port=3)
    frame = c_frame(4, session=5)
    assert sw.process(1, frame) == [(3, c_out(frame, seen=0x10, itype=1, kept=0, lost=0, eport=3))]
    assert sw.stats["dropped_ingress"] == 1


def test_the_last_clone_of_a_pass_wins(sw):
    sw.mirroring_add(99, egress_port=9)
    sw.mirroring_add(5, egress_port=3)
    frame = c_frame(8, session=5)
    assert [p for p, _ in sw.process(1, frame)] == [3, 2]


def test_egress_clone_carries_the_headers_egress_wrote_and_leaves_after_the_original(sw):
    sw.mirroring_add(6, egress_port=4)
    frame = c_frame(3, session=6)
    original = c_out(frame, seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2)
    # the clone's egress starts from the original's rewritten header (seen 0x11) and its own metadata
    clone = c_out(original, seen=0x21, itype=2, kept=0x6B, lost=0, eport=4)
    assert sw.process(1, frame) == [(2, original), (4, clone)]


def test_session_to_a_multicast_group_and_a_port(sw):
    sw.mc_group_set(10, [(4, 1), (5, 2)])
    sw.mirroring_add(7, egress_port=6, mgid=10)
    frame = c_frame(1, session=7)
    out = sw.process(1, frame)
    assert out == [
        (4, c_out(frame, seen=0x10, itype=1, kept=0x5A, lost=0, rid=1, eport=4)),
        (5, c_out(frame, seen=0x10, itype=1, kept=0x5A, lost=0, rid=2, eport=5)),
        (6, c_out(frame, seen=0x10, itype=1, kept=0x5A, lost=0, rid=2, eport=6)),  # BMv2 keeps the last rid
        (2, c_out(frame, seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2)),
    ]
    assert sw.stats["multicast_replicas"] == 0  # clones are not multicast replicas of the original


def test_clone_to_an_unconfigured_session_makes_no_copy(sw):
    frame = c_frame(1, session=42)
    assert [p for p, _ in sw.process(1, frame)] == [2]
    assert sw.stats["clones_unconfigured"] == 1
    sw.mirroring_add(42, egress_port=3)
    sw.mirroring_delete(42)
    assert [p for p, _ in sw.process(1, frame)] == [2]


def test_truncate_cuts_the_frame_that_leaves_to_the_smallest_length(sw):
    frame = c_frame(5, trunc=20)
    full = c_out(frame, seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2)
    assert sw.process(1, frame) == [(2, full[:20])]
    frame = c_frame(5, trunc=200)  # longer than the frame: nothing to cut
    assert sw.process(1, frame) == [(2, c_out(frame, seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2))]


def test_truncate_in_a_clones_egress_cuts_only_the_clone(sw):
    sw.mirroring_add(6, egress_port=4)
    frame = c_frame(7, session=6, trunc=16)
    original = c_out(frame, seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2)
    clone = c_out(original, seen=0x21, itype=2, kept=0, lost=0, eport=4)
    assert sw.process(1, frame) == [(2, original), (4, clone[:16])]


def test_an_egress_clone_loop_stops_at_the_pass_limit(sw):
    sw.mirroring_add(6, egress_port=4)
    out = sw.process(1, c_frame(6, session=6))
    assert [p for p, _ in out] == [2] + [4] * (MAX_PASSES - 1)
    assert sw.stats["dropped_pass_limit"] == 1


@pytest.mark.timeout(60)  # a regression hangs (a tree of 4^16 copies); the bound makes it 64 egress passes
@pytest.mark.parametrize("backend", ["python", "native"])
def test_clones_that_clone_again_stop_at_the_copy_limit_and_are_logged_once(backend, caplog):
    if not CLONE_JSON.exists():
        pytest.skip("clone_mirror.p4 is not compiled")
    sw = SoftwareSwitch.from_json(CLONE_JSON, backend=backend)
    sw.mc_group_set(1, [(1, 0), (2, 1), (3, 2)])
    sw.mirroring_add(7, egress_port=4, mgid=1)  # every egress pass makes four clones, each of which clones again
    with caplog.at_level("WARNING", logger="emulator.switch"):
        out = sw.process(1, c_frame(6, session=7))
        again = sw.process(1, c_frame(6, session=7))
        other = sw.process(1, c_frame(0))  # the switch goes on forwarding other frames
    assert len(out) == len(again) == MAX_COPIES + 1  # the original and every copy the bound let through
    assert other == [(2, c_out(c_frame(0), seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2))]
    stats = sw.stats
    assert stats["clones"] == 2 * MAX_COPIES
    assert stats["dropped_copy_limit"] >= 2 and stats["dropped_copy_limit"] % 2 == 0
    notices = [r for r in caplog.records if "copies through clones" in r.getMessage()]
    assert len(notices) == 1


def test_mirroring_api_checks_its_arguments(sw):
    with pytest.raises(EntryError, match="outside 0..32767"):
        sw.mirroring_add(1 << 15, egress_port=1)
    with pytest.raises(EntryError, match="egress port, a multicast group or both"):
        sw.mirroring_add(1)
    with pytest.raises(EntryError, match="egress port 512 outside 0..511"):
        sw.mirroring_add(1, egress_port=512)
    with pytest.raises(EntryError) as err:
        sw.mirroring_delete(3)
    assert err.value.code == "NOT_FOUND"
    sw.mirroring_add(0, mgid=3)
    assert sw.mirroring_sessions() == {0: (None, 3)}


# ------------------------------------------------------------------------------------ digests
@pytest.fixture
def learner():
    if not DIGEST_JSON.exists():
        pytest.skip("digest_learn.p4 is not compiled")
    return SoftwareSwitch.from_json(DIGEST_JSON)


def test_digest_sample_is_the_fields_at_the_end_of_ingress(learner):
    info = learner.program.digests
    assert {n: [w for _, w in d.fields] for n, d in info.items()} == {"mac_learn_t": [48, 9], "type_seen_t": [16, 8]}
    frame = bytes.fromhex("ffffffffffff0a0b0c0d0e0f0800") + bytes(20)
    assert learner.process(7, frame) == [(1, frame)]
    assert learner.digests() == [("mac_learn_t", (0x0A0B0C0D0E0F, 7))]
    assert learner.digests() == []  # drained


def test_the_last_digest_of_a_pass_is_the_one_sent(learner):
    frame = bytes.fromhex("ffffffffffff0a0b0c0d0e0f88b6")
    learner.process(3, frame)
    assert learner.digests() == [("type_seen_t", (0x88B6, 0xA5))]
    assert learner.stats["digests"] == 1


def test_digest_listener_is_called_per_sample_and_the_queue_is_bounded(learner):
    calls = []
    learner.set_digest_listener(lambda: calls.append(1))
    learner._prog.digests.limit = 2
    for port in range(3):
        learner.process(port, bytes(14))
    assert len(calls) == 2
    assert learner.stats["digests_dropped"] == 1
    assert [v for _, v in learner.digests()] == [(0, 0), (0, 1)]


# ------------------------------------------------------------------------------------ robustness
@pytest.mark.parametrize("path", [CLONE_JSON, DIGEST_JSON], ids=lambda p: p.stem)
def test_random_and_truncated_frames_never_raise(path):
    if not path.exists():
        pytest.skip(f"{path.name} is not compiled")
    sw = SoftwareSwitch.from_json(path)
    sw.mirroring_add(5, egress_port=3)
    sw.mc_group_set(7, [(1, 1), (4, 2)])
    sw.mirroring_add(6, mgid=7, egress_port=9)
    rng = random.Random(path.stem)
    import json

    frames = guided_frames(json.loads(path.read_text()), 300, rng)
    frames += [mutate(f, rng) for f in frames[:200]]
    frames += [f[: rng.randrange(len(f) + 1)] for f in frames[:200]]
    frames += [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64))) for _ in range(200)]
    for f in frames:
        out = sw.process(rng.randrange(8), f)
        assert all(isinstance(p, int) and isinstance(fr, bytes) for p, fr in out)
    assert sw.stats["exceptions"] == 0
    assert sw.stats["packets_in"] == len(frames)


# ------------------------------------------------------------------------------------ native backend
def test_native_backend_clones_truncates_and_digests_like_python(sw, learner):
    """The scenarios above through the native backend (test_native_parity covers random frames)."""
    nat = SoftwareSwitch.from_json(CLONE_JSON, backend="native")
    for s in (sw, nat):
        s.mc_group_set(10, [(4, 1), (5, 2)])
        s.mirroring_add(7, egress_port=6, mgid=10)
        s.mirroring_add(6, egress_port=4)
    for frame in (c_frame(1, 7), c_frame(2, 7), c_frame(3, 6), c_frame(4, 7), c_frame(5, 0, 20), c_frame(6, 6)):
        assert nat.process(1, frame) == sw.process(1, frame)
    frame = c_frame(7, session=6, trunc=16)
    assert nat.process(1, frame) == sw.process(1, frame) != []
    assert {k: nat.stats[k] for k in sw.stats} == sw.stats

    native_learner = SoftwareSwitch.from_json(DIGEST_JSON, backend="native")
    for port, ether_type in ((3, "0800"), (4, "88b6")):
        frame = bytes.fromhex("ffffffffffff0a0b0c0d0e0f" + ether_type)
        assert native_learner.process(port, frame) == learner.process(port, frame)
    assert (
        native_learner.digests()
        == learner.digests()
        == [
            ("mac_learn_t", (0x0A0B0C0D0E0F, 3)),
            ("type_seen_t", (0x88B6, 0xA5)),
        ]
    )
