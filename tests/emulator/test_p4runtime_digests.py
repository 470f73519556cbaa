"""DigestManager (emulator/p4rt/digests.py) on a clock the test moves: batching by size and by
timeout, suppression of unacknowledged samples, acks, ack timeouts, configuration errors."""

from types import SimpleNamespace

import pytest
from p4.v1 import p4runtime_pb2

from emulator.p4rt.binding import DigestBinding
from emulator.p4rt.digests import DELETE, INSERT, MODIFY, DigestManager
from emulator.p4rt.errors import ALREADY_EXISTS, INVALID_ARGUMENT, NOT_FOUND, P4RTError

MS = 1_000_000


class Clock:
    def __init__(self):
        self.now = 1_000 * MS

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def mgr(clock):
    binding = SimpleNamespace(
        digests={
            11: DigestBinding(11, "mac_learn_t", "struct", (48, 9)),
            12: DigestBinding(12, "one_t", "bitstring", (16,)),
        }
    )
    return DigestManager(binding, clock=clock)


def entry(digest_id=11, max_timeout_ns=0, max_list_size=0, ack_timeout_ns=0):
    e = p4runtime_pb2.DigestEntry(digest_id=digest_id)
    e.config.max_timeout_ns = max_timeout_ns
    e.config.max_list_size = max_list_size
    e.config.ack_timeout_ns = ack_timeout_ns
    return e


def samples(messages):
    """[(list id, [(member ints)])] of DigestList messages."""
    out = []
    for m in messages:
        data = []
        for d in m.digest.data:
            if d.HasField("struct"):
                data.append(tuple(int.from_bytes(x.bitstring, "big") for x in d.struct.members))
            else:
                data.append(int.from_bytes(d.bitstring, "big"))
        out.append((m.digest.list_id, data))
    return out


def test_nothing_is_sent_before_the_digest_is_configured(mgr):
    assert mgr.learn("mac_learn_t", (1, 2)) == []
    mgr.write(INSERT, entry())
    assert mgr.learn("mac_learn_t", (1, 2)) != []


def test_max_timeout_zero_sends_every_sample_at_once_in_canonical_bytes(mgr):
    mgr.write(INSERT, entry())
    [msg] = mgr.learn("mac_learn_t", (0x0A0B0C0D0E0F, 7))
    assert msg.digest.digest_id == 11 and msg.digest.list_id == 1
    assert [m.bitstring for m in msg.digest.data[0].struct.members] == [bytes.fromhex("0a0b0c0d0e0f"), b"\x07"]
    assert samples(mgr.learn("mac_learn_t", (0x0A0B0C0D0E0F, 7))) == [(2, [(0x0A0B0C0D0E0F, 7)])]  # no ack cache


def test_a_list_is_sent_when_full_or_when_its_first_sample_is_max_timeout_old(mgr, clock):
    mgr.write(INSERT, entry(max_timeout_ns=50 * MS, max_list_size=3))
    assert mgr.learn("mac_learn_t", (1, 1)) == []
    clock.now += 10 * MS
    assert mgr.learn("mac_learn_t", (2, 1)) == []
    assert samples(mgr.learn("mac_learn_t", (3, 1))) == [(1, [(1, 1), (2, 1), (3, 1)])]
    assert mgr.learn("mac_learn_t", (4, 1)) == []
    clock.now += 49 * MS
    assert mgr.poll() == []
    assert mgr.next_deadline() == 1 * MS
    clock.now += 1 * MS
    assert samples(mgr.poll()) == [(2, [(4, 1)])]
    assert mgr.next_deadline() is None


def test_unacknowledged_samples_are_suppressed_until_acked_or_timed_out(mgr, clock):
    mgr.write(INSERT, entry(ack_timeout_ns=100 * MS))
    assert samples(mgr.learn("mac_learn_t", (5, 1))) == [(1, [(5, 1)])]
    assert mgr.learn("mac_learn_t", (5, 1)) == []  # in flight
    assert samples(mgr.learn("mac_learn_t", (6, 1))) == [(2, [(6, 1)])]
    mgr.ack(p4runtime_pb2.DigestListAck(digest_id=11, list_id=1))
    assert samples(mgr.learn("mac_learn_t", (5, 1))) == [(3, [(5, 1)])]
    assert mgr.learn("mac_learn_t", (6, 1)) == []  # list 2 is still not acked
    clock.now += 100 * MS
    assert mgr.poll() == []  # the ack timeout only releases the samples
    assert samples(mgr.learn("mac_learn_t", (6, 1))) == [(4, [(6, 1)])]
    mgr.ack(p4runtime_pb2.DigestListAck(digest_id=99, list_id=1))  # unknown: ignored, as PI does


def test_a_sample_equal_to_one_in_the_list_being_built_is_suppressed_with_ack_timeout(mgr):
    mgr.write(INSERT, entry(max_timeout_ns=10 * MS, max_list_size=2, ack_timeout_ns=10 * MS))
    assert mgr.learn("mac_learn_t", (1, 1)) == []
    assert mgr.learn("mac_learn_t", (1, 1)) == []
    assert samples(mgr.learn("mac_learn_t", (2, 1))) == [(1, [(1, 1), (2, 1)])]


def test_bitstring_digests_are_one_bitstring(mgr):
    mgr.write(INSERT, entry(digest_id=12))
    [msg] = mgr.learn("one_t", (0x0102,))
    assert msg.digest.data[0].bitstring == b"\x01\x02"


def test_configuration_writes_reads_and_errors(mgr):
    def code(update_type, e):
        with pytest.raises(P4RTError) as err:
            mgr.write(update_type, e)
        return err.value.code

    assert code(INSERT, entry(digest_id=5)) == NOT_FOUND
    assert code(MODIFY, entry()) == NOT_FOUND
    assert code(DELETE, entry()) == NOT_FOUND
    assert code(INSERT, entry(max_timeout_ns=-1)) == INVALID_ARGUMENT
    mgr.write(INSERT, entry(max_list_size=4))
    assert code(INSERT, entry()) == ALREADY_EXISTS
    mgr.write(MODIFY, entry(max_list_size=8))
    got = []
    mgr.read(0, lambda: got.append(p4runtime_pb2.DigestEntry()) or got[-1])
    assert [(e.digest_id, e.config.max_list_size) for e in got] == [(11, 8)]
    with pytest.raises(P4RTError) as err:
        mgr.read(12, p4runtime_pb2.DigestEntry)
    assert err.value.code == NOT_FOUND  # known, not configured


def test_delete_forgets_the_config_and_every_pending_sample(mgr):
    mgr.write(INSERT, entry(max_timeout_ns=10 * MS, ack_timeout_ns=10 * MS))
    mgr.learn("mac_learn_t", (1, 1))
    mgr.write(DELETE, entry())
    assert mgr.poll() == [] and mgr.next_deadline() is None
    mgr.write(INSERT, entry())
    assert samples(mgr.learn("mac_learn_t", (1, 1))) == [(1, [(1, 1)])]
