"""The P4Runtime server over real gRPC on 127.0.0.1, with raw protobufs and a stand-in engine.

Covers what p4runtime-shell cannot express (registers, config variants, full-width bytestrings,
batch errors, arbitration notifications, packet I/O); test_emulator_p4runtime_shell.py drives the
same server with p4runtime-shell.
"""

import threading

import grpc
import pytest
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from emulator.p4runtime_server import Device, P4RuntimeServer
from tests.support.fake_program import (
    ACTION_IDS,
    COUNTER_ID,
    CPU_PORT,
    FAKE_JSON,
    REGISTER_ID,
    TABLE_IDS,
    FakeSwitch,
    fake_p4info,
)
from tests.support.p4runtime import Controller as _RawController
from tests.support.p4runtime import entity, update, write_errors


class Controller(_RawController):
    """The raw client, pushing the stand-in program's JSON by default."""

    def set_pipeline(self, action=None, p4info=None, device_config=FAKE_JSON, cookie=None):
        action = SetReq.VERIFY_AND_COMMIT if action is None else action
        return super().set_pipeline(action, p4info, device_config, cookie)


LPM, ACL, DMAC, FIXED = (
    TABLE_IDS[n] for n in ("MyIngress.ipv4_lpm", "MyIngress.acl", "MyIngress.dmac", "MyIngress.fixed")
)
FORWARD, DROP, NOACTION, SET_DMAC = (
    ACTION_IDS[n] for n in ("MyIngress.forward", "MyIngress.drop", "NoAction", "MyIngress.set_dmac")
)
SetReq = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetReq = p4runtime_pb2.GetForwardingPipelineConfigRequest


def lpm_entry(prefix: bytes, plen: int, port: bytes = b"\x02", action=FORWARD):
    te = p4runtime_pb2.TableEntry(table_id=LPM)
    fm = te.match.add(field_id=1)
    fm.lpm.value, fm.lpm.prefix_len = prefix, plen
    te.action.action.action_id = action
    if action == FORWARD:
        te.action.action.params.add(param_id=1, value=port)
    return te


@pytest.fixture
def packets_out():
    return []


@pytest.fixture
def device():
    return Device(device_id=0, cpu_port=CPU_PORT, engine_factory=FakeSwitch.from_json)


@pytest.fixture
def server(device, packets_out):
    srv = P4RuntimeServer(device, packet_out_sink=lambda port, frame: packets_out.append((port, frame)))
    port = srv.start("127.0.0.1:0")
    srv.address = f"127.0.0.1:{port}"
    yield srv
    srv.stop(0)


@pytest.fixture
def ctl(server):
    c = Controller(server.address)
    c.set_pipeline(p4info=fake_p4info())
    yield c
    c.close()


# ------------------------------------------------------------------ arbitration


def test_first_client_is_primary_and_lower_election_id_is_backup_refused_writes(server):
    primary = Controller(server.address, arbitrate=False)
    reply = primary.arbitrate((0, 5))
    assert reply.arbitration.status.code == code_pb2.OK
    assert reply.arbitration.election_id.low == 5
    primary.set_pipeline(p4info=fake_p4info())

    backup = Controller(server.address, election_id=(0, 2), arbitrate=False)
    reply = backup.arbitrate((0, 2))
    assert reply.arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert reply.arbitration.election_id.low == 5  # the highest seen, i.e. the primary's

    with pytest.raises(grpc.RpcError) as err:
        backup.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as err:
        backup.set_pipeline(p4info=fake_p4info())
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # a backup may still read
    assert backup.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM))) == []
    primary.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))

    # the primary leaves: the backup is told there is no primary (NOT_FOUND)
    primary.close()
    assert backup.next_message().arbitration.status.code == code_pb2.NOT_FOUND
    # a higher election id takes over and everybody is told
    newer = Controller(server.address, election_id=(0, 9), arbitrate=False)
    assert newer.arbitrate((0, 9)).arbitration.status.code == code_pb2.OK
    assert backup.next_message().arbitration.status.code == code_pb2.ALREADY_EXISTS
    newer.write(update("table_entry", msg=lpm_entry(b"\x0b\x00\x00\x00", 8)))
    backup.close()
    newer.close()


def test_higher_election_id_takes_over_and_old_primary_loses_writes(server):
    first = Controller(server.address, election_id=(0, 1))
    first.set_pipeline(p4info=fake_p4info())
    second = Controller(server.address, election_id=(1, 0))
    assert first.next_message().arbitration.status.code == code_pb2.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as err:
        first.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    second.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))
    first.close()
    second.close()


def test_arbitration_errors_end_the_stream(server):
    wrong_device = Controller(server.address, arbitrate=False)
    message = wrong_device.arbitrate((0, 1), device_id=7)
    assert isinstance(message, grpc.RpcError) and message.code() == grpc.StatusCode.NOT_FOUND
    wrong_device.close()

    first = Controller(server.address, election_id=(0, 3))
    twin = Controller(server.address, arbitrate=False)
    message = twin.arbitrate((0, 3))
    assert isinstance(message, grpc.RpcError) and message.code() == grpc.StatusCode.INVALID_ARGUMENT
    twin.close()
    first.close()


def test_write_without_arbitration_is_refused(server):
    c = Controller(server.address, arbitrate=False)
    with pytest.raises(grpc.RpcError) as err:
        c.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    c.close()


# ------------------------------------------------------------------ pipeline config


def test_read_and_write_before_any_pipeline_fail_precondition(server):
    c = Controller(server.address)
    with pytest.raises(grpc.RpcError) as err:
        c.read(entity("table_entry", p4runtime_pb2.TableEntry()))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as err:
        c.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert not c.stub.GetForwardingPipelineConfig(GetReq(device_id=0)).HasField("config")
    c.close()


def test_get_pipeline_config_response_types(ctl):
    ctl.set_pipeline(p4info=fake_p4info(), cookie=42)
    get = lambda t: ctl.stub.GetForwardingPipelineConfig(GetReq(device_id=0, response_type=t)).config
    everything = get(GetReq.ALL)
    assert everything.p4info == fake_p4info()
    assert everything.p4_device_config == FAKE_JSON
    assert everything.cookie.cookie == 42
    p4info_only = get(GetReq.P4INFO_AND_COOKIE)
    assert p4info_only.p4info == fake_p4info() and not p4info_only.p4_device_config
    assert p4info_only.cookie.cookie == 42
    device_only = get(GetReq.DEVICE_CONFIG_AND_COOKIE)
    assert device_only.p4_device_config == FAKE_JSON and not device_only.HasField("p4info")
    cookie_only = get(GetReq.COOKIE_ONLY)
    assert cookie_only.cookie.cookie == 42
    assert not cookie_only.HasField("p4info") and not cookie_only.p4_device_config
    with pytest.raises(grpc.RpcError) as err:
        ctl.stub.GetForwardingPipelineConfig(GetReq(device_id=3))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_verify_names_the_object_that_does_not_match(ctl):
    p4info = fake_p4info()
    p4info.tables[0].preamble.name = "MyIngress.ipv4_lmp"
    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.VERIFY, p4info=p4info)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "table 'MyIngress.ipv4_lmp'" in err.value.details()

    p4info = fake_p4info()
    p4info.actions[1].params[0].bitwidth = 16
    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.VERIFY, p4info=p4info)
    assert "action 'MyIngress.forward' parameter 'port'" in err.value.details()

    p4info = fake_p4info()
    p4info.registers[0].preamble.name = "MyIngress.sum"
    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.VERIFY, p4info=p4info)
    assert "register 'MyIngress.sum'" in err.value.details()

    p4info = fake_p4info()
    p4info.counters[0].preamble.name = "MyIngress.nope"
    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.VERIFY, p4info=p4info)
    assert "counter 'MyIngress.nope'" in err.value.details()

    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.VERIFY, p4info=fake_p4info(), device_config=b"{not json")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not BMv2 JSON" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.VERIFY, p4info=fake_p4info(), device_config=b'{"other": 1}')
    assert "cannot be loaded" in err.value.details()
    ctl.set_pipeline(SetReq.VERIFY, p4info=fake_p4info())  # the right pair verifies


def test_verify_keeps_state_and_verify_and_commit_resets_it(ctl, device):
    ctl.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))
    engine = device.engine
    ctl.set_pipeline(SetReq.VERIFY, p4info=fake_p4info())
    assert device.engine is engine
    assert len(ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM)))) == 1
    ctl.set_pipeline(SetReq.VERIFY_AND_COMMIT, p4info=fake_p4info())
    assert device.engine is not engine
    assert ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM))) == []


def test_save_then_commit(ctl, device):
    engine = device.engine
    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.COMMIT, device_config=b"")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    ctl.set_pipeline(SetReq.VERIFY_AND_SAVE, p4info=fake_p4info())
    assert device.engine is engine
    with pytest.raises(grpc.RpcError) as err:
        ctl.set_pipeline(SetReq.COMMIT, p4info=fake_p4info())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ctl.set_pipeline(SetReq.COMMIT, device_config=b"")
    assert device.engine is not engine


def test_capabilities_reports_the_bindings_version(server):
    channel = grpc.insecure_channel(server.address)
    reply = p4runtime_pb2_grpc.P4RuntimeStub(channel).Capabilities(p4runtime_pb2.CapabilitiesRequest())
    assert reply.p4runtime_api_version == "1.4.1"
    channel.close()


# ------------------------------------------------------------------ table entries


def test_full_width_and_canonical_bytestrings_are_one_entry_read_back_canonical(ctl, device):
    ctl.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x01\x00", 24, port=b"\x00\x03")))
    with pytest.raises(grpc.RpcError) as err:  # the same entry, canonical this time
        ctl.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x01\x00", 24, port=b"\x03")))
    assert write_errors(err.value)[0].canonical_code == code_pb2.ALREADY_EXISTS
    [e] = ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM)))
    fm = e.table_entry.match[0]
    assert fm.lpm.value == b"\x0a\x00\x01\x00" and fm.lpm.prefix_len == 24
    assert e.table_entry.action.action.params[0].value == b"\x03"  # canonical, not b"\x00\x03"
    assert device.engine.table_entries("MyIngress.ipv4_lpm")[0].keys == [(0x0A000100, 24)]

    small = lpm_entry(b"\x00\x00\x00\x00\x0a\x00\x00\x00", 8, port=b"\x00\x00\x05")  # over-long but fits
    ctl.write(update("table_entry", msg=small))
    assert device.engine.table_entries("MyIngress.ipv4_lpm")[1].keys == [(0x0A000000, 8)]


def test_insert_modify_delete_and_match_filter(ctl, device):
    ctl.write(
        update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8, port=b"\x02")),
        update("table_entry", msg=lpm_entry(b"\x0b\x00\x00\x00", 8, port=b"\x03")),
    )
    ctl.write(update("table_entry", p4runtime_pb2.Update.MODIFY, msg=lpm_entry(b"\x0a\x00\x00\x00", 8, port=b"\x04")))
    one = lpm_entry(b"\x0a\x00\x00\x00", 8)
    one.ClearField("action")
    [e] = ctl.read(entity("table_entry", one))
    assert e.table_entry.action.action.params[0].value == b"\x04"
    ctl.write(update("table_entry", p4runtime_pb2.Update.DELETE, msg=one))
    assert [(k, a, p) for k, a, p, _ in device.engine.table_entries("MyIngress.ipv4_lpm")] == [
        ([(0x0B000000, 8)], "MyIngress.forward", [3])
    ]
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("table_entry", p4runtime_pb2.Update.DELETE, msg=one))
    [error] = write_errors(err.value)
    assert error.canonical_code == code_pb2.NOT_FOUND and "MyIngress.ipv4_lpm" in error.message


def test_batch_reports_one_error_per_update_and_applies_the_good_ones(ctl, device):
    bad_width = lpm_entry(b"\x01\x0a\x00\x00\x00", 8)  # 33 bits for a 32-bit field
    no_match = p4runtime_pb2.TableEntry(table_id=DMAC)
    no_match.action.action.action_id = SET_DMAC
    no_match.action.action.params.add(param_id=1, value=b"\x01")
    bad_param = lpm_entry(b"\x0c\x00\x00\x00", 8)
    bad_param.action.action.params[0].param_id = 9
    unknown_table = p4runtime_pb2.TableEntry(table_id=12345)
    wrong_action = lpm_entry(b"\x0d\x00\x00\x00", 8, action=SET_DMAC)
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(
            update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)),
            update("table_entry", msg=bad_width),
            update("table_entry", msg=no_match),
            update("table_entry", msg=bad_param),
            update("table_entry", msg=unknown_table),
            update("table_entry", msg=wrong_action),
        )
    errors = write_errors(err.value)
    assert [e.canonical_code for e in errors] == [code_pb2.OK] + [code_pb2.INVALID_ARGUMENT] * 5
    assert "does not fit in 32 bits" in errors[1].message and "hdr.ipv4.dstAddr" in errors[1].message
    assert "'standard_metadata.egress_spec': missing" in errors[2].message
    assert "unknown parameter id 9" in errors[3].message
    assert "unknown table id 12345" in errors[4].message
    assert "MyIngress.set_dmac" in errors[5].message and "MyIngress.ipv4_lpm" in errors[5].message
    assert len(device.engine.table_entries("MyIngress.ipv4_lpm")) == 1


def test_lpm_value_must_respect_prefix(ctl):
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x01", 8)))
    assert "beyond the /8 prefix" in write_errors(err.value)[0].message


def test_ternary_range_optional_with_priority_and_dont_care_omitted_on_read(ctl, device):
    te = p4runtime_pb2.TableEntry(table_id=ACL, priority=10)
    fm = te.match.add(field_id=1)
    fm.ternary.value, fm.ternary.mask = b"\x0a\x00\x00\x00", b"\xff\x00\x00\x00"
    fm = te.match.add(field_id=2)
    fm.range.low, fm.range.high = b"\x10", b"\x00\x20"
    te.action.action.action_id = DROP
    ctl.write(update("table_entry", msg=te))
    [(keys, action, params, prio)] = device.engine.table_entries("MyIngress.acl")
    assert keys == [(0x0A000000, 0xFF000000), (0x10, 0x20), (0, 0)] and prio == 10

    te2 = p4runtime_pb2.TableEntry(table_id=ACL, priority=5)
    te2.match.add(field_id=3).optional.value = b"\x01"
    te2.action.action.action_id = DROP
    ctl.write(update("table_entry", msg=te2))
    read = {
        e.table_entry.priority: e.table_entry
        for e in ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=ACL)))
    }
    te.match[1].range.high = b"\x20"  # read back canonical
    assert read[10] == te
    assert read[5] == te2  # don't-care ternary and range omitted, optional present
    only5 = ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=ACL, priority=5)))
    assert [e.table_entry for e in only5] == [te2]

    no_prio = p4runtime_pb2.TableEntry(table_id=ACL)
    no_prio.MergeFrom(te2)
    no_prio.priority = 0
    prio_on_lpm = lpm_entry(b"\x0a\x00\x00\x00", 8)
    prio_on_lpm.priority = 3
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("table_entry", msg=no_prio), update("table_entry", msg=prio_on_lpm))
    errors = write_errors(err.value)
    assert "priority > 0 is required" in errors[0].message
    assert "priority must be 0" in errors[1].message


def test_default_entry_modify_read_reset_and_refusals(ctl, device):
    default = p4runtime_pb2.TableEntry(table_id=LPM, is_default_action=True)
    default.action.action.action_id = FORWARD
    default.action.action.params.add(param_id=1, value=b"\x07")
    ctl.write(update("table_entry", p4runtime_pb2.Update.MODIFY, msg=default))
    assert device.engine.table_get_default("MyIngress.ipv4_lpm") == ("MyIngress.forward", [7])
    [e] = ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM, is_default_action=True)))
    assert e.table_entry == default
    # an ordinary read leaves the default entry out
    assert ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM))) == []
    reset = p4runtime_pb2.TableEntry(table_id=LPM, is_default_action=True)
    ctl.write(update("table_entry", p4runtime_pb2.Update.MODIFY, msg=reset))
    assert device.engine.table_get_default("MyIngress.ipv4_lpm") == ("MyIngress.drop", [])

    const_default = p4runtime_pb2.TableEntry(table_id=DMAC, is_default_action=True)
    const_default.action.action.action_id = NOACTION
    table_only = p4runtime_pb2.TableEntry(table_id=ACL, is_default_action=True)
    table_only.action.action.action_id = DROP
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(
            update("table_entry", p4runtime_pb2.Update.INSERT, msg=default),
            update("table_entry", p4runtime_pb2.Update.MODIFY, msg=const_default),
        )
    codes = [e.canonical_code for e in write_errors(err.value)]
    assert codes == [code_pb2.INVALID_ARGUMENT, code_pb2.PERMISSION_DENIED]
    default_only = lpm_entry(b"\x0a\x00\x00\x00", 8, action=NOACTION)
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("table_entry", msg=default_only))
    assert write_errors(err.value)[0].canonical_code == code_pb2.PERMISSION_DENIED


def test_const_table_is_read_only_and_reads_as_const(ctl):
    [e] = ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=FIXED)))
    assert e.table_entry.is_const and e.table_entry.match[0].exact.value == b"\x08\x06"
    te = p4runtime_pb2.TableEntry(table_id=FIXED)
    te.match.add(field_id=1).exact.value = b"\x08\x00"
    te.action.action.action_id = DROP
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("table_entry", msg=te))
    assert write_errors(err.value)[0].canonical_code == code_pb2.PERMISSION_DENIED


def test_wildcard_read_over_all_tables_and_entry_metadata(ctl):
    te = lpm_entry(b"\x0a\x00\x00\x00", 8)
    te.metadata = b"cookie"
    ctl.write(update("table_entry", msg=te))
    everything = [e.table_entry for e in ctl.read(entity("table_entry", p4runtime_pb2.TableEntry()))]
    assert {t.table_id for t in everything} == {LPM, FIXED}
    assert [t for t in everything if t.table_id == LPM][0].metadata == b"cookie"


def test_direct_counter_in_table_read_and_direct_counter_entry(ctl, device):
    ctl.write(update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)))
    device.engine.direct_hits[("MyIngress.ipv4_lpm", ((0x0A000000, 8),), None)] = (3, 300)
    query = p4runtime_pb2.TableEntry(table_id=LPM)
    query.counter_data.SetInParent()
    [e] = ctl.read(entity("table_entry", query))
    assert (e.table_entry.counter_data.packet_count, e.table_entry.counter_data.byte_count) == (3, 300)
    [plain] = ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM)))
    assert not plain.table_entry.HasField("counter_data")
    dce = p4runtime_pb2.DirectCounterEntry()
    dce.table_entry.table_id = LPM
    [d] = ctl.read(entity("direct_counter_entry", dce))
    assert d.direct_counter_entry.data.packet_count == 3
    assert d.direct_counter_entry.table_entry.match[0].lpm.prefix_len == 8

    # set through DirectCounterEntry, then through the TableEntry's counter_data on MODIFY
    set_dce = p4runtime_pb2.DirectCounterEntry()
    set_dce.table_entry.CopyFrom(lpm_entry(b"\x0a\x00\x00\x00", 8))
    set_dce.table_entry.ClearField("action")
    set_dce.data.packet_count, set_dce.data.byte_count = 10, 1000
    ctl.write(update("direct_counter_entry", p4runtime_pb2.Update.MODIFY, msg=set_dce))
    assert device.engine.direct_counter_read("MyIngress.ipv4_lpm", [(0x0A000000, 8)]) == (10, 1000)
    reset = lpm_entry(b"\x0a\x00\x00\x00", 8)
    reset.counter_data.SetInParent()
    ctl.write(update("table_entry", p4runtime_pb2.Update.MODIFY, msg=reset))
    assert device.engine.direct_counter_read("MyIngress.ipv4_lpm", [(0x0A000000, 8)]) == (0, 0)
    missing = p4runtime_pb2.DirectCounterEntry()
    missing.table_entry.CopyFrom(lpm_entry(b"\x0b\x00\x00\x00", 8))
    missing.data.packet_count = 1
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("direct_counter_entry", p4runtime_pb2.Update.MODIFY, msg=missing))
    assert write_errors(err.value)[0].canonical_code == code_pb2.NOT_FOUND


# ------------------------------------------------------------------ counters, registers, multicast


def test_indirect_counter_read_one_and_wildcard_and_write(ctl, device):
    device.engine.counter_write("MyIngress.port_pkts", 2, 5, 500)
    one = p4runtime_pb2.CounterEntry(counter_id=COUNTER_ID)
    one.index.index = 2
    [e] = ctl.read(entity("counter_entry", one))
    assert (e.counter_entry.data.packet_count, e.counter_entry.data.byte_count) == (5, 500)
    every = ctl.read(entity("counter_entry", p4runtime_pb2.CounterEntry(counter_id=COUNTER_ID)))
    assert [x.counter_entry.index.index for x in every] == list(range(8))
    assert len(ctl.read(entity("counter_entry", p4runtime_pb2.CounterEntry()))) == 8
    reset = p4runtime_pb2.CounterEntry(counter_id=COUNTER_ID)
    reset.data.SetInParent()
    ctl.write(update("counter_entry", p4runtime_pb2.Update.MODIFY, msg=reset))
    assert device.engine.counter_read("MyIngress.port_pkts", 2) == (0, 0)
    out_of_range = p4runtime_pb2.CounterEntry(counter_id=COUNTER_ID)
    out_of_range.index.index = 8
    with pytest.raises(grpc.RpcError) as err:
        ctl.read(entity("counter_entry", out_of_range))
    assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("counter_entry", p4runtime_pb2.Update.INSERT, msg=one))
    assert write_errors(err.value)[0].canonical_code == code_pb2.INVALID_ARGUMENT


def test_register_write_and_read_one_and_all(ctl, device):
    reg = p4runtime_pb2.RegisterEntry(register_id=REGISTER_ID)
    reg.index.index = 1
    reg.data.bitstring = b"\x00\x00\x01\x02"
    ctl.write(update("register_entry", p4runtime_pb2.Update.MODIFY, msg=reg))
    assert device.engine.register_read("MyIngress.sums", 1) == 0x102
    [e] = ctl.read(entity("register_entry", reg))
    assert e.register_entry.data.bitstring == b"\x01\x02"
    every = ctl.read(entity("register_entry", p4runtime_pb2.RegisterEntry()))
    assert [x.register_entry.data.bitstring for x in every] == [b"\x00", b"\x01\x02", b"\x00", b"\x00"]
    fill = p4runtime_pb2.RegisterEntry(register_id=REGISTER_ID)
    fill.data.bitstring = b"\x07"
    ctl.write(update("register_entry", p4runtime_pb2.Update.MODIFY, msg=fill))
    assert [device.engine.register_read("MyIngress.sums", i) for i in range(4)] == [7] * 4
    too_wide = p4runtime_pb2.RegisterEntry(register_id=REGISTER_ID)
    too_wide.index.index = 0
    too_wide.data.bitstring = b"\x01\x00\x00\x00\x00"
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("register_entry", p4runtime_pb2.Update.MODIFY, msg=too_wide))
    assert "does not fit in 32 bits" in write_errors(err.value)[0].message


def test_multicast_group_insert_read_modify_delete(ctl, device):
    pre = p4runtime_pb2.PacketReplicationEngineEntry()
    pre.multicast_group_entry.multicast_group_id = 1
    pre.multicast_group_entry.replicas.add(egress_port=1, instance=1)
    pre.multicast_group_entry.replicas.add(egress_port=2, instance=1)
    ctl.write(update("packet_replication_engine_entry", msg=pre))
    assert device.engine.mc_groups() == {1: [(1, 1), (2, 1)]}
    [e] = ctl.read(entity("packet_replication_engine_entry", pre))
    assert e.packet_replication_engine_entry == pre
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("packet_replication_engine_entry", msg=pre))
    assert write_errors(err.value)[0].canonical_code == code_pb2.ALREADY_EXISTS

    modern = p4runtime_pb2.PacketReplicationEngineEntry()
    modern.multicast_group_entry.multicast_group_id = 1
    modern.multicast_group_entry.replicas.add(port=b"\x03", instance=2)
    ctl.write(update("packet_replication_engine_entry", p4runtime_pb2.Update.MODIFY, msg=modern))
    wildcard = p4runtime_pb2.PacketReplicationEngineEntry()
    wildcard.multicast_group_entry.SetInParent()
    [e] = ctl.read(entity("packet_replication_engine_entry", wildcard))
    assert e.packet_replication_engine_entry == modern  # answered in the form it was written
    ctl.write(update("packet_replication_engine_entry", p4runtime_pb2.Update.DELETE, msg=modern))
    assert device.engine.mc_groups() == {}
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(update("packet_replication_engine_entry", p4runtime_pb2.Update.DELETE, msg=modern))
    assert write_errors(err.value)[0].canonical_code == code_pb2.NOT_FOUND


def test_unsupported_entities_and_atomicity_are_refused_clearly(ctl):
    with pytest.raises(grpc.RpcError) as err:
        ctl.read(entity("extern_entry", p4runtime_pb2.ExternEntry()))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert ctl.read(entity("meter_entry", p4runtime_pb2.MeterEntry())) == []  # this program has no meters
    with pytest.raises(grpc.RpcError) as err:
        ctl.write(
            update("table_entry", msg=lpm_entry(b"\x0a\x00\x00\x00", 8)),
            atomicity=p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR,
        )
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_batched_read_with_a_bad_request_returns_details(ctl):
    bad = p4runtime_pb2.TableEntry(table_id=999)
    with pytest.raises(grpc.RpcError) as err:
        ctl.read(entity("table_entry", p4runtime_pb2.TableEntry(table_id=LPM)), entity("table_entry", bad))
    errors = write_errors(err.value)
    assert [e.canonical_code for e in errors] == [code_pb2.OK, code_pb2.INVALID_ARGUMENT]


# ------------------------------------------------------------------ packet I/O


def test_packet_out_builds_the_controller_header_and_packet_in_lifts_it(ctl, server, packets_out):
    out = p4runtime_pb2.StreamMessageRequest()
    out.packet.payload = b"payload"
    out.packet.metadata.add(metadata_id=1, value=b"\x03")  # egress_port 3 (9 bits)
    out.packet.metadata.add(metadata_id=2, value=b"\x05")  # flags 5 (3 bits)
    ctl.requests.put(out)
    server.servicer.packet_in(((4 << 7) | 5).to_bytes(2, "big") + b"frame")
    message = ctl.next_message()
    assert message.packet.payload == b"frame"
    assert [(m.metadata_id, m.value) for m in message.packet.metadata] == [(1, b"\x04"), (2, b"\x05")]
    # the PacketOut was handled before the PacketIn was answered? Not necessarily: wait for it
    while not packets_out:
        threading.Event().wait(0.01)
    header = (3 << 7 | 5 << 4).to_bytes(2, "big")  # 9 + 3 bits, padded to 16
    assert packets_out == [(CPU_PORT, header + b"payload")]


def test_packet_out_from_a_backup_is_refused_on_the_stream(ctl, server, packets_out):
    backup = Controller(server.address, election_id=(0, 0))
    out = p4runtime_pb2.StreamMessageRequest()
    out.packet.payload = b"x"
    backup.requests.put(out)
    message = backup.next_message()
    assert message.error.canonical_code == code_pb2.PERMISSION_DENIED
    assert packets_out == []
    backup.close()
