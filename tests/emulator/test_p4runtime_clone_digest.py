"""CloneSessionEntry, DigestEntry, DigestList and DigestListAck through the P4Runtime server on the
real engine, with the fixture programs clone_mirror.p4 and digest_learn.p4 compiled by p4c.

Clone sessions are written with p4runtime-shell (its CloneSessionEntry), digests with the raw client
(tests/support/p4runtime.Controller), whose stream the test reads and acknowledges itself.
"""

import time

import grpc
import p4runtime_sh.shell as sh
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from harness.shell import shell_session
from tests.emulator.test_engine_clone_digest import c_frame, c_out
from tests.support.p4runtime import Controller, compiled, entity, served_device, update, write_errors


@pytest.fixture
def switch():
    with served_device() as device:
        yield device


@pytest.fixture
def mirror(switch):
    with shell_session(switch.address, *compiled("clone_mirror")):
        yield switch


def test_clone_session_written_with_the_shell_clones_through_its_replicas(mirror):
    sh.CloneSessionEntry(5).add(3, 1).add(4, 2).insert()
    [read] = list(sh.CloneSessionEntry(5).read())
    assert [(r._msg.egress_port, r._msg.instance) for r in read.replicas] == [(3, 1), (4, 2)]

    frame = c_frame(1, session=5)
    assert mirror.engine.process(1, frame) == [
        (3, c_out(frame, seen=0x10, itype=1, kept=0x5A, lost=0, rid=1, eport=3)),
        (4, c_out(frame, seen=0x10, itype=1, kept=0x5A, lost=0, rid=2, eport=4)),
        (2, c_out(frame, seen=0x11, itype=0, kept=0x5A, lost=0x77, eport=2)),
    ]

    session = sh.CloneSessionEntry(5).add(6, 0)
    session.modify()
    assert [p for p, _ in mirror.engine.process(1, frame)] == [6, 2]
    # the group behind the session is not one of the controller's multicast groups
    assert list(sh.MulticastGroupEntry().read()) == []
    sh.CloneSessionEntry(5).delete()
    assert [p for p, _ in mirror.engine.process(1, frame)] == [2]
    assert list(sh.CloneSessionEntry().read()) == []


def _clone_write_codes(controller, update_type, **fields):
    session = p4runtime_pb2.PacketReplicationEngineEntry()
    for k, v in fields.items():
        setattr(session.clone_session_entry, k, v)
    try:
        controller.write(update("packet_replication_engine_entry", update_type, msg=session))
    except grpc.RpcError as err:
        return [e.canonical_code for e in write_errors(err)]
    return ["OK"]


def test_clone_session_errors_are_pis(mirror):
    from google.rpc import code_pb2

    c = Controller(mirror.address, election_id=(0, 2))
    try:
        ins, mod, dele = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE
        assert _clone_write_codes(c, ins, session_id=1 << 15) == [code_pb2.INVALID_ARGUMENT]
        assert _clone_write_codes(c, mod, session_id=9) == [code_pb2.NOT_FOUND]
        assert _clone_write_codes(c, dele, session_id=9) == [code_pb2.NOT_FOUND]
        assert _clone_write_codes(c, ins, session_id=9, packet_length_bytes=64) == [code_pb2.UNIMPLEMENTED]
        assert _clone_write_codes(c, ins, session_id=9, class_of_service=1) == [code_pb2.UNIMPLEMENTED]
        assert _clone_write_codes(c, ins, session_id=9) == ["OK"]
        assert _clone_write_codes(c, ins, session_id=9) == [code_pb2.ALREADY_EXISTS]
        query = p4runtime_pb2.PacketReplicationEngineEntry()
        query.clone_session_entry.session_id = 10
        with pytest.raises(grpc.RpcError) as err:
            c.read(entity("packet_replication_engine_entry", query))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        c.close()


# ------------------------------------------------------------------------------------ digests
@pytest.fixture
def learner(switch):
    p4info_path, program = compiled("digest_learn")
    p4info = p4info_pb2.P4Info()
    text_format.Parse(open(p4info_path).read(), p4info)
    c = Controller(switch.address)
    with open(program, "rb") as f:
        c.set_pipeline(p4info=p4info, device_config=f.read())
    c.digest_ids = {d.preamble.name: d.preamble.id for d in p4info.digests}
    yield switch, c
    c.close()


def _configure(c, name, update_type=p4runtime_pb2.Update.INSERT, **config):
    e = p4runtime_pb2.DigestEntry(digest_id=c.digest_ids[name])
    for k, v in config.items():
        setattr(e.config, k, v)
    c.write(update("digest_entry", update_type, msg=e))


def _digest(c):
    message = c.next_message()
    assert message.HasField("digest"), message
    d = message.digest
    return d.digest_id, d.list_id, [tuple(m.bitstring for m in x.struct.members) for x in d.data]


def _wait_until(condition):
    """Wait (at most 10 s) for something another thread does; the test then asserts on it."""
    for _ in range(1000):
        if condition():
            return
        time.sleep(0.01)


MAC_A = bytes.fromhex("0a0b0c0d0e0f")
MAC_B = bytes.fromhex("0a0000000001")


def test_digest_lists_reach_the_primary_with_the_p4info_ids(learner):
    device, c = learner
    _configure(c, "mac_learn_t")  # max_timeout_ns 0: one list per sample
    [read] = c.read(entity("digest_entry", p4runtime_pb2.DigestEntry()))
    assert read.digest_entry.digest_id == c.digest_ids["mac_learn_t"]

    device.engine.process(7, bytes(6) + MAC_A + b"\x08\x00")
    assert _digest(c) == (c.digest_ids["mac_learn_t"], 1, [(MAC_A, b"\x07")])
    device.engine.process(3, bytes(6) + MAC_B + b"\x88\xb6")  # the second digest() of the pass wins
    _configure(c, "type_seen_t")
    device.engine.process(3, bytes(6) + MAC_B + b"\x88\xb6")
    assert _digest(c) == (c.digest_ids["type_seen_t"], 1, [(b"\x88\xb6", b"\xa5")])


def test_unacked_samples_are_suppressed_and_an_ack_releases_them(learner):
    device, c = learner
    _configure(c, "mac_learn_t", ack_timeout_ns=3600 * 10**9)
    frame_a, frame_b = bytes(6) + MAC_A + b"\x08\x00", bytes(6) + MAC_B + b"\x08\x00"
    device.engine.process(1, frame_a)
    assert _digest(c)[1:] == (1, [(MAC_A, b"\x01")])
    device.engine.process(1, frame_a)  # the same sample, not acknowledged: suppressed
    device.engine.process(1, frame_b)
    assert _digest(c)[1:] == (2, [(MAC_B, b"\x01")])

    ack = p4runtime_pb2.StreamMessageRequest()
    ack.digest_ack.digest_id, ack.digest_ack.list_id = c.digest_ids["mac_learn_t"], 1
    c.requests.put(ack)
    digests = device.pipeline.digests
    _wait_until(lambda: 1 not in digests.by_id[c.digest_ids["mac_learn_t"]].in_flight)
    device.engine.process(1, frame_a)
    assert _digest(c)[1:] == (3, [(MAC_A, b"\x01")])


def test_a_list_waits_for_max_list_size(learner):
    device, c = learner
    _configure(c, "mac_learn_t", max_list_size=3, max_timeout_ns=3600 * 10**9)
    for port in (1, 2, 3):
        device.engine.process(port, bytes(6) + MAC_A + b"\x08\x00")
    assert _digest(c)[1:] == (1, [(MAC_A, b"\x01"), (MAC_A, b"\x02"), (MAC_A, b"\x03")])


def test_the_shell_configures_digests_and_sniffs_lists(switch):
    with shell_session(switch.address, *compiled("digest_learn")):
        d = sh.DigestEntry("mac_learn_t")
        d.max_list_size = 1
        d.insert()
        [read] = list(sh.DigestEntry("mac_learn_t").read())
        assert read.max_list_size == 1
        lists = sh.DigestList()
        switch.engine.process(4, bytes(6) + MAC_A + b"\x08\x00")
        message = lists.digest_list_queue.get(timeout=10)  # what sniff() collects, without its wait
        assert [m.bitstring for m in message.digest.data[0].struct.members] == [MAC_A, b"\x04"]


def test_a_digest_in_the_deparser_reaches_no_controller(switch):
    """deparser_externs.p4 takes a digest in its deparser, which simple_switch never sends (the learn
    id is read after ingress), and one in ingress for kind-1 frames. Both configured to be sent at
    once: the first list on the stream is the ingress digest of the second frame."""
    from tests.emulator.test_engine_deparser_externs import SRC, dp_frame

    p4info_path, program = compiled("deparser_externs")
    p4info = p4info_pb2.P4Info()
    text_format.Parse(open(p4info_path).read(), p4info)
    c = Controller(switch.address)
    try:
        with open(program, "rb") as f:
            c.set_pipeline(p4info=p4info, device_config=f.read())
        c.digest_ids = {d.preamble.name: d.preamble.id for d in p4info.digests}
        _configure(c, "deparser_seen_t")
        _configure(c, "ingress_seen_t")
        switch.engine.process(1, dp_frame(0, 30, 0, 0))  # the deparser's digest only
        switch.engine.process(1, dp_frame(1, 30, 0, 0))  # the ingress digest and the deparser's
        assert _digest(c) == (c.digest_ids["ingress_seen_t"], 1, [(SRC, b"\x01")])
    finally:
        c.close()
