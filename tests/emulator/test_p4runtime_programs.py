"""The P4Runtime server on the real engine with programs compiled by p4c (tests/fixtures/p4/build).

Checks what only real p4c output can: that P4Info and BMv2 JSON bind (names, widths, match kinds),
and that entries written through P4Runtime change what the engine does to packets.
"""

import p4runtime_sh.shell as sh
import pytest
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeWriteException
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.p4runtime_server import Device, P4RuntimeServer
from harness.shell import shell_session
from tests.support.p4runtime import compiled, served_device
from tests.support.paths import PACKET_IO

CPU_PORT = 255


@pytest.fixture
def switch():
    with served_device() as device:
        yield device


@pytest.fixture
def ipv4(switch):
    with shell_session(switch.address, *compiled("ipv4_forward")):
        yield switch


@pytest.fixture
def tagged(switch):
    with shell_session(switch.address, *compiled("counter_register_multicast")):
        yield switch


def test_ipv4_route_installed_by_the_shell_forwards_and_rewrites(ipv4):
    te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
    te.match["hdr.ipv4.dstAddr"] = "10.0.2.0/24"
    te.action["dstAddr"] = "08:00:00:00:02:02"
    te.action["port"] = "2"
    te.insert()
    frame = bytes(
        Ether(dst="08:00:00:00:01:00", src="08:00:00:00:01:01")
        / IP(src="10.0.1.1", dst="10.0.2.2", ttl=64)
        / UDP(sport=1, dport=2)
        / (b"x" * 18)
    )
    [(port, out)] = ipv4.engine.process(1, frame)
    assert port == 2
    packet = Ether(out)
    assert (packet.dst, packet.src, packet[IP].ttl) == ("08:00:00:00:02:02", "08:00:00:00:01:00", 63)
    checksum = packet[IP].chksum
    del packet[IP].chksum
    assert Ether(bytes(packet))[IP].chksum == checksum  # recomputed by the program

    [read] = list(sh.TableEntry("MyIngress.ipv4_lpm").read())
    assert read.match["hdr.ipv4.dstAddr"].lpm.value == bytes([10, 0, 2, 0])
    assert read.action["dstAddr"].value == bytes.fromhex("080000000202")
    assert read.action["port"].value == b"\x02"  # canonical

    [default] = list(sh.TableEntry("MyIngress.ipv4_lpm")(is_default=True).read())
    assert default.action.action_name == "MyIngress.drop"
    elsewhere = bytes(Ether() / IP(dst="10.0.3.3") / UDP())
    assert ipv4.engine.process(1, elsewhere) == []


def test_counters_registers_and_multicast_of_a_compiled_program(tagged):
    rule = sh.TableEntry("TagIngress.classify")(action="TagIngress.set_mcast", priority=10)
    rule.match["hdr.tag.op"] = "0x01&&&0xff"
    rule.action["grp"] = "1"
    rule.action["mark"] = "7"
    rule.insert()
    sh.MulticastGroupEntry(1).add(1, 1).add(2, 1).add(3, 1).insert()

    # p4runtime-shell has no register entity: raw protobufs over its client
    [register_id] = [r.preamble.id for r in sh.context.p4info.registers if r.preamble.name == "TagIngress.acc"]
    write = p4runtime_pb2.WriteRequest()
    cell = write.updates.add(type=p4runtime_pb2.Update.MODIFY).entity.register_entry
    cell.register_id, cell.index.index, cell.data.bitstring = register_id, 3, b"\x00\x00\x00\x64"
    sh.client.write(write)

    tag = bytes([0x01, 3]) + (5).to_bytes(2, "big") + bytes(10)  # op idx value | acc rid eport mark
    frame = bytes.fromhex("ffffffffffff08000000010188b5") + tag
    outputs = tagged.engine.process(1, frame)
    assert sorted(port for port, _ in outputs) == [2, 3]  # the copy back to port 1 is pruned
    for _port, out in outputs:
        acc = int.from_bytes(out[18:22], "big")
        rid = int.from_bytes(out[22:24], "big")
        mark = int.from_bytes(out[26:28], "big")
        assert (acc, rid, mark) == (105, 1, 7)

    read = p4runtime_pb2.ReadRequest(device_id=0)
    query = read.entities.add().register_entry
    query.register_id, query.index.index = register_id, 3
    [reply] = [e for r in sh.client.stub.Read(read) for e in r.entities]
    assert reply.register_entry.data.bitstring == b"\x69"  # 105, canonical

    port_counter = sh.CounterEntry("TagIngress.port_pkts")
    port_counter.index = 1
    [count] = list(port_counter.read())
    assert (count.packet_count, count.byte_count) == (1, len(frame))
    [hits] = list(sh.DirectCounterEntry("TagIngress.classify_hits").read())
    assert hits.packet_count == 1


def test_packet_out_and_packet_in_with_the_header_layout_p4c_writes():
    import queue

    injected = queue.Queue()
    device = Device(device_id=0, cpu_port=CPU_PORT)
    server = P4RuntimeServer(device, packet_out_sink=lambda port, frame: injected.put((port, frame)))
    address = f"127.0.0.1:{server.start('127.0.0.1:0')}"
    try:
        with shell_session(address, *compiled("packet_io", PACKET_IO)):
            ethernet = bytes.fromhex("02000000000202000000000188b5") + b"payload"
            sh.PacketOut(ethernet, egress_port="2", flags="3").send()
            port, frame = injected.get(timeout=10)
            assert port == CPU_PORT and device.engine.process(port, frame) == [(2, ethernet)]

            [(port, frame)] = device.engine.process(1, ethernet)  # the program sends it to the CPU port
            assert port == CPU_PORT and server.packet_in(frame)
            message = sh.client.get_stream_packet("packet", timeout=10)
            assert message.packet.payload == ethernet
            assert [(m.metadata_id, m.value) for m in message.packet.metadata] == [(1, b"\x01"), (2, b"\x05")]
    finally:
        server.stop(0)


# ------------------------------------------------------------------------------ value sets
@pytest.fixture
def vsets(switch):
    with shell_session(switch.address, *compiled("value_sets")):
        yield switch


def _vset_update(name, *members, kind=p4runtime_pb2.Update.MODIFY):
    """A ValueSetEntry update (p4runtime-shell has no value set entity: raw protobuf through its
    client); `members` are lists of (field id, bytes)."""
    [info] = [v for v in sh.context.p4info.value_sets if v.preamble.name == name]
    update = p4runtime_pb2.Update(type=kind)
    entry = update.entity.value_set_entry
    entry.value_set_id = info.preamble.id
    for fields in members:
        member = entry.members.add()
        for field_id, value in fields:
            match = member.match.add(field_id=field_id)
            match.exact.value = value
    return update


def _read_vsets():
    """{value set name: [[(field id, bytes)] per member]} read back over P4Runtime."""
    names = {v.preamble.id: v.preamble.name for v in sh.context.p4info.value_sets}
    read = p4runtime_pb2.Entity()
    read.value_set_entry.SetInParent()
    return {
        names[e.value_set_entry.value_set_id]: [
            [(m.field_id, m.exact.value) for m in member.match] for member in e.value_set_entry.members
        ]
        for reply in sh.client.read_one(read)
        for e in reply.entities
    }


def test_value_set_entries_over_the_p4info_p4c_writes(vsets):
    """p4c names value sets after their parser and leaves a scalar set's one match field nameless;
    members written over P4Runtime decide the parser's transitions."""
    eth = bytes.fromhex("0000000000020000000000aa")
    frame = eth + b"\x90\x00" + bytes([7, 0x3F, 0xEE, 0]) + b"\x00\x05"
    assert vsets.engine.process(1, frame) == [(2, frame)]  # empty sets

    sh.client.write_update(_vset_update("SParser.ether_types", [(1, b"\x90\x00")], [(1, b"\x88\xb5")]))
    sh.client.write_update(_vset_update("SParser.kinds", [(1, b"\x07"), (2, b"\x03")]))
    parsed = eth + b"\x90\x00" + bytes([7, 0x3F, 0xEE, 2]) + b"\x00\x06"  # p and q parsed, q.value + 1
    assert vsets.engine.process(1, frame) == [(2, parsed)]
    assert vsets.engine.value_set_members("SParser.kinds") == [0x073]
    assert _read_vsets() == {
        "SParser.ether_types": [[(1, b"\x90\x00")], [(1, b"\x88\xb5")]],
        "SParser.kinds": [[(1, b"\x07"), (2, b"\x03")]],
    }

    sh.client.write_update(_vset_update("SParser.kinds"))  # MODIFY with no members empties the set
    assert vsets.engine.process(1, frame)[0][1][17] == 1  # p parsed, q not

    too_many = [[(1, bytes([0x90, k]))] for k in range(5)]  # value_set<bit<16>>(4)
    with pytest.raises(P4RuntimeWriteException, match="RESOURCE_EXHAUSTED"):
        sh.client.write_update(_vset_update("SParser.ether_types", *too_many))
    with pytest.raises(P4RuntimeWriteException, match="INVALID_ARGUMENT"):
        sh.client.write_update(_vset_update("SParser.kinds", [(1, b"\x07"), (2, b"\x13")]))  # sub is 4 bits
    with pytest.raises(P4RuntimeWriteException, match="INVALID_ARGUMENT"):
        insert = p4runtime_pb2.Update.INSERT  # value sets are only ever modified
        sh.client.write_update(_vset_update("SParser.ether_types", [(1, b"\x90\x00")], kind=insert))
    assert vsets.engine.value_set_members("SParser.ether_types") == [0x9000, 0x88B5]  # refusals change nothing
