"""p4runtime-shell, unmodified, driving the software switch's P4Runtime server.

The server runs in-process on 127.0.0.1 with an ephemeral port; p4runtime-shell's client is a
process-wide global, so every test sets it up and tears it down through the `shell` fixture. The
stand-in engine (test_emulator_p4runtime_fakes) keeps these tests independent of the engine; the
fixture programs compiled by p4c are exercised in test_emulator_p4runtime_programs.py.
"""

import queue

import grpc
import p4runtime_sh.shell as sh
import pytest
from google.protobuf import text_format
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeWriteException

from emulator.p4runtime_server import Device, P4RuntimeServer
from harness.shell import shell_session
from tests.support.fake_program import CPU_PORT, FAKE_JSON, FakeSwitch, fake_p4info


@pytest.fixture
def switch():
    device = Device(device_id=0, cpu_port=CPU_PORT, engine_factory=FakeSwitch.from_json)
    injected = queue.Queue()
    server = P4RuntimeServer(device, packet_out_sink=lambda port, frame: injected.put((port, frame)))
    server.injected = injected
    server.address = f"127.0.0.1:{server.start('127.0.0.1:0')}"
    yield server
    server.stop(0)


@pytest.fixture
def shell(switch, tmp_path):
    p4info = tmp_path / "fake.p4info.txtpb"
    p4info.write_text(text_format.MessageToString(fake_p4info()))
    program = tmp_path / "fake.json"
    program.write_bytes(FAKE_JSON)
    with shell_session(switch.address, p4info, program):
        yield switch.device


def test_table_entry_insert_read_modify_delete(shell):
    te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.forward")
    te.match["hdr.ipv4.dstAddr"] = "10.0.1.0/24"
    te.action["port"] = "2"
    te.insert()
    assert shell.engine.table_entries("MyIngress.ipv4_lpm")[0][:3] == ([(0x0A000100, 24)], "MyIngress.forward", [2])

    [read] = list(sh.TableEntry("MyIngress.ipv4_lpm").read())
    assert read.match["hdr.ipv4.dstAddr"].lpm.value == bytes([10, 0, 1, 0])
    assert read.match["hdr.ipv4.dstAddr"].lpm.prefix_len == 24
    assert read.action["port"].value == b"\x02"

    te.action["port"] = "3"
    te.modify()
    [read] = list(sh.TableEntry("MyIngress.ipv4_lpm").read())
    assert read.action["port"].value == b"\x03"
    te.delete()
    assert list(sh.TableEntry("MyIngress.ipv4_lpm").read()) == []


def test_ternary_entry_with_priority(shell):
    te = sh.TableEntry("MyIngress.acl")(action="MyIngress.drop", priority=7)
    te.match["hdr.ipv4.srcAddr"] = "10.0.0.0&&&255.0.0.0"
    te.match["hdr.udp.dstPort"] = "100..200"
    te.insert()
    [read] = list(sh.TableEntry("MyIngress.acl").read())
    assert read.priority == 7
    assert read.match["hdr.udp.dstPort"].range.low == b"\x64"
    assert shell.engine.table_entries("MyIngress.acl")[0].keys == [(0x0A000000, 0xFF000000), (100, 200), (0, 0)]


def test_default_entry_modify_and_read(shell):
    default = sh.TableEntry("MyIngress.ipv4_lpm")(is_default=True, action="MyIngress.forward")
    default.action["port"] = "9"
    default.modify()
    assert shell.engine.table_get_default("MyIngress.ipv4_lpm") == ("MyIngress.forward", [9])
    [read] = list(sh.TableEntry("MyIngress.ipv4_lpm")(is_default=True).read())
    assert read.is_default and read.action["port"].value == b"\x09"


def test_counter_entry_read(shell):
    shell.engine.counter_write("MyIngress.port_pkts", 2, 11, 1100)
    counter = sh.CounterEntry("MyIngress.port_pkts")
    counter.index = 2
    [read] = list(counter.read())
    assert (read.packet_count, read.byte_count) == (11, 1100)
    assert len(list(sh.CounterEntry("MyIngress.port_pkts").read())) == 8  # wildcard index


def test_direct_counter_entry_read(shell):
    te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.forward")
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    te.action["port"] = "1"
    te.insert()
    shell.engine.direct_hits[("MyIngress.ipv4_lpm", ((0x0A000000, 8),), None)] = (4, 256)
    [read] = list(sh.DirectCounterEntry("MyIngress.lpm_hits").read())
    assert (read.packet_count, read.byte_count) == (4, 256)


def test_multicast_group_insert_and_read(shell):
    sh.MulticastGroupEntry(1).add(1, 1).add(2, 1).add(3, 2).insert()
    assert shell.engine.mc_groups() == {1: [(1, 1), (2, 1), (3, 2)]}
    [read] = list(sh.MulticastGroupEntry(1).read())
    assert [(r.egress_port, r.instance) for r in read.replicas] == [(1, 1), (2, 1), (3, 2)]


def test_write_errors_reach_the_shell_with_the_table_and_reason(shell):
    te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.forward")
    te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    te.action["port"] = "1"
    te.insert()
    with pytest.raises(P4RuntimeWriteException) as err:
        te.insert()
    message = str(err.value)
    assert "ALREADY_EXISTS" in message and "MyIngress.ipv4_lpm" in message

    missing = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.forward")
    missing.match["hdr.ipv4.dstAddr"] = "11.0.0.0/8"
    missing.action["port"] = "1"
    with pytest.raises(P4RuntimeWriteException) as err:
        missing.delete()
    assert "NOT_FOUND" in str(err.value)

    no_key = sh.TableEntry("MyIngress.dmac")(action="MyIngress.set_dmac")
    no_key.action["dmac"] = "00:00:00:00:00:01"
    with pytest.raises(P4RuntimeWriteException) as err:
        no_key.insert()
    assert "INVALID_ARGUMENT" in str(err.value) and "standard_metadata.egress_spec" in str(err.value)


def test_second_client_with_lower_election_id_cannot_write(shell, switch, capsys):
    backup = P4RuntimeClient(0, switch.address, (0, 0))
    try:
        assert "not the primary" in capsys.readouterr().out
        te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.forward")
        te.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
        te.action["port"] = "1"
        from p4.v1 import p4runtime_pb2

        update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        update.entity.table_entry.CopyFrom(te.msg())
        with pytest.raises(grpc.RpcError) as err:
            backup.write_update(update)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        te.insert()  # the primary still can
    finally:
        backup.tear_down()


def test_api_version(shell):
    assert sh.APIVersion() == "1.4.1"


def test_packet_out_and_packet_in_through_the_shell(shell, switch):
    sh.PacketOut(b"hello", egress_port="3", flags="1").send()
    assert switch.injected.get(timeout=10) == (CPU_PORT, (3 << 7 | 1 << 4).to_bytes(2, "big") + b"hello")
    assert switch.packet_in(((5 << 7) | 2).to_bytes(2, "big") + b"to-controller")
    message = sh.client.get_stream_packet("packet", timeout=10)
    assert message.packet.payload == b"to-controller"
    assert {m.metadata_id: m.value for m in message.packet.metadata} == {1: b"\x05", 2: b"\x02"}
