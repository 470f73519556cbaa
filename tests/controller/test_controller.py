"""Controller unit tests against an in-process mock P4Runtime server: the exact protobufs sent, what
reads back, and the errors users see. See test_controller_support.py for the mock and the P4Info."""

import json
import random

import google.protobuf.text_format
import pytest
from p4.v1 import p4runtime_pb2

import contract
from contract.job import JobSpec
from contract.ticket import Ticket
from controller import jobs, lookup_tables
from controller.ctl_cli import run
from controller.errors import BadInput, JobRefused, NotPrimary, PipelineMismatch, SwitchUnreachable, WriteRejected
from controller.p4info import P4Info
from controller.session import SwitchSession
from controller.topology import Topology
from tests.support.mock_switch import MockSwitch, contract_p4info
from tests.support.thc_ctl import cli, star4
from thc.config import THCConfig
from topologies.targets import free_tcp_port

Update = p4runtime_pb2.Update
WORDS = contract.WORDS  # the mock's program has the default build's cells


def spec(job_id: int, workers: int, **kw) -> JobSpec:
    """A job's description with a fixed key (the tests spell the bytes sent)."""
    kw.setdefault("key", 0xC0FFEE)
    return JobSpec.from_dict({"job_id": job_id, "workers": workers, **kw})  # flat fields, as in a job.json


def two_tier(port1: int, port2: int) -> dict:
    return {
        "name": "two_tier",
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i}/24", "mac": f"08:00:00:00:00:0{i}"} for i in range(1, 5)},
        "switches": {"s1": {"device_id": 0, "grpc_port": port1}, "s2": {"device_id": 1, "grpc_port": port2}},
        "links": [["h1", "s1-p1"], ["h2", "s1-p2"], ["s1-p3", "s2-p3"], ["h3", "s2-p1"], ["h4", "s2-p2"]],
        "aggregation": {"switch": "s2", "service_ip": "10.0.0.254", "service_mac": "02:00:00:00:00:fe"},
    }


@pytest.fixture
def mock():
    switch = MockSwitch(contract_p4info(WORDS))
    switch.start()
    yield switch
    switch.stop()


@pytest.fixture
def topo(mock):
    return Topology.from_dict(star4(int(mock.addr.rsplit(":", 1)[1])))


@pytest.fixture
def session(mock):
    with SwitchSession(mock.addr, 0, (0, 1), name="s1", rng=random.Random(7)) as s:
        yield s


def ids(mock):
    p4 = P4Info(mock.p4info)
    return (
        p4,
        {t.preamble.name: t.preamble.id for t in p4.msg.tables},
        {a.preamble.name: a.preamble.id for a in p4.msg.actions},
    )


def write_request(updates_txt: str, device_id=0, election=(0, 1)) -> p4runtime_pb2.WriteRequest:
    req = p4runtime_pb2.WriteRequest(device_id=device_id)
    req.election_id.high, req.election_id.low = election
    google.protobuf.text_format.Merge(updates_txt, req)
    return req


# ---- pipeline -------------------------------------------------------------------------------------


def test_push_sends_the_p4info_and_the_bmv2_json(mock, tmp_path):
    p4info_file, json_file = tmp_path / "thc.p4info.txtpb", tmp_path / "thc.json"
    p4info_file.write_text(google.protobuf.text_format.MessageToString(contract_p4info(WORDS)))
    json_file.write_text('{"program": "thc.p4"}')
    with SwitchSession(mock.addr, 0, (0, 1), p4info_file, json_file) as s:
        result = s.push()
    expected = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=0, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    expected.election_id.low = 1
    expected.config.p4info.CopyFrom(contract_p4info(WORDS))
    expected.config.p4_device_config = b'{"program": "thc.p4"}'
    assert mock.pipelines == [expected]
    assert result["words"] == WORDS


def test_push_refuses_a_p4info_that_is_not_the_thc_program(mock, tmp_path):
    p4info_file, json_file = tmp_path / "other.txtpb", tmp_path / "other.json"
    p4info_file.write_text(google.protobuf.text_format.MessageToString(contract_p4info(WORDS, drop={contract.JOBS})))
    json_file.write_text("{}")
    with SwitchSession(mock.addr, p4info=p4info_file, bmv2_json=json_file) as s:
        with pytest.raises(PipelineMismatch, match=f"no table '{contract.JOBS}'"):
            s.push()
    assert mock.pipelines == []


def test_a_switch_running_another_program_is_named_by_its_missing_table():
    other = MockSwitch(contract_p4info(WORDS, drop={contract.RESULT_DST}))
    other.start()
    try:
        with SwitchSession(other.addr, name="s1") as s:
            with pytest.raises(PipelineMismatch, match=f"no table '{contract.RESULT_DST}'"):
                s.read_stats()
    finally:
        other.stop()


def test_a_switch_without_a_pipeline_says_to_push_one():
    empty = MockSwitch(None)
    empty.start()
    try:
        with SwitchSession(empty.addr) as s:
            with pytest.raises(PipelineMismatch, match="runs no P4 program: push one"):
                s.read_stats()
    finally:
        empty.stop()


# ---- forwarding -----------------------------------------------------------------------------------


def test_forwarding_installs_a_route_per_host_and_the_service_address(mock, topo, session):
    summary = session.install_forwarding(topo)
    _, t, a = ids(mock)
    routes = "".join(
        f"""
        updates {{ type: INSERT entity {{ table_entry {{
            table_id: {t[contract.IPV4_LPM]}
            match {{ field_id: 1 lpm {{ value: "\\x0a\\x00\\x00\\x0{i}" prefix_len: 32 }} }}
            action {{ action {{ action_id: {a[contract.IPV4_FORWARD]}
                params {{ param_id: 1 value: "\\x08\\x00\\x00\\x00\\x00\\x0{i}" }}
                params {{ param_id: 2 value: "\\x0{i}" }} }} }} }} }} }}"""
        for i in range(1, 5)
    )
    service = f"""
        updates {{ type: INSERT entity {{ table_entry {{
            table_id: {t[contract.SERVICE_ADDR]}
            match {{ field_id: 1 exact {{ value: "\\x0a\\x00\\x00\\xfe" }} }}
            action {{ action {{ action_id: {a[contract.SERVE]} }} }} }} }} }}"""
    assert mock.writes == [write_request(routes + service)]
    assert (summary.inserted, summary.modified, summary.deleted) == (5, 0, 0)
    mock.clear_log()
    assert str(session.install_forwarding(topo)) == "nothing to change"
    assert mock.writes == []


def test_forwarding_on_two_tiers_routes_the_service_address_toward_the_aggregating_switch(mock):
    topo = Topology.from_dict(two_tier(int(mock.addr.rsplit(":", 1)[1]), free_tcp_port()))
    with SwitchSession(mock.addr, name="s1") as s:
        s.install_forwarding(topo)
        table = s.show()["tables"]
    routes = {tuple(e["match"]["hdr.ipv4.dstAddr"])[0]: e["action_params"] for e in table[contract.IPV4_LPM]}
    assert routes == {
        "10.0.0.1": {"dstAddr": "08:00:00:00:00:01", "port": 1},
        "10.0.0.2": {"dstAddr": "08:00:00:00:00:02", "port": 2},
        "10.0.0.3": {"dstAddr": "08:00:00:00:00:03", "port": 3},
        "10.0.0.4": {"dstAddr": "08:00:00:00:00:04", "port": 3},
        "10.0.0.254": {"dstAddr": "02:00:00:00:00:fe", "port": 3},
    }
    assert table[contract.SERVICE_ADDR] == []  # s1 does not aggregate


# ---- lookup tables --------------------------------------------------------------------------------


def test_a_jobs_table_is_the_bytes_of_two_words_and_a_mask_of_unused_index_bits():
    values = [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30]
    lo, hi, mask = lookup_tables.pack(values, 4)
    assert [(lo >> (8 * j)) & 0xFF for j in range(8)] == values[:8]
    assert [(hi >> (8 * j)) & 0xFF for j in range(8)] == values[8:]
    assert mask == 0 and lookup_tables.unpack(lo, hi, mask) == (values, 4)
    assert lookup_tables.pack([0, 10, 20, 30], 2)[2] == 0xCCCCCCCC  # b = 2: index bits 2 and 3 unused
    assert lookup_tables.index_mask(3) == 0x88888888 and lookup_tables.index_mask(1) == 0xEEEEEEEE
    assert lookup_tables.unpack(lo, hi, 0x12345678) is None


@pytest.mark.parametrize(
    "values, message",
    [
        ([0, 1, 2], "2\\*\\*b values"),
        (list(range(32)), "b = 1..4"),
        ([0, 300], "outside 0..255"),
        ([0, 1.5], "integers"),
    ],
)
def test_tables_the_program_cannot_hold_are_refused(values, message):
    with pytest.raises(BadInput, match=message):
        lookup_tables.check_values(values)


# ---- jobs -----------------------------------------------------------------------------------------


def test_job_add_writes_outputs_first_and_the_job_entry_last(mock, topo, session):
    job = session.add_job(spec(3, 3), ["h1", "h2", "h4"], topo, epoch=0x1234)
    _, t, a = ids(mock)
    group = 0x1000 + 3
    lo, hi, mask = lookup_tables.pack(spec(3, 3).table_values(), 4)
    replicas = "".join(f"replicas {{ egress_port: {port} instance: {rid} }}" for port, rid in ((1, 0), (2, 1), (4, 3)))
    dst = "".join(
        f"""updates {{ type: INSERT entity {{ table_entry {{
            table_id: {t[contract.RESULT_DST]}
            match {{ field_id: 1 exact {{ value: "\\003" }} }}
            match {{ field_id: 2 exact {{ value: "{_octal(rid)}" }} }}
            action {{ action {{ action_id: {a[contract.SET_RESULT_DST]}
                params {{ param_id: 1 value: "\\x08\\x00\\x00\\x00\\x00\\x0{host}" }}
                params {{ param_id: 2 value: "\\x0a\\x00\\x00\\x0{host}" }} }} }} }} }} }}"""
        for rid, host in ((0, 1), (1, 2), (3, 4))
    )
    first = f"""
        updates {{ type: INSERT entity {{ table_entry {{
            table_id: {t[contract.SERVICE_ADDR]}
            match {{ field_id: 1 exact {{ value: "\\x0a\\x00\\x00\\xfe" }} }}
            action {{ action {{ action_id: {a[contract.SERVE]} }} }} }} }} }}
        updates {{ type: MODIFY entity {{ table_entry {{
            table_id: {t[contract.JOBS]}
            action {{ action {{ action_id: {a[contract.UNKNOWN_JOB]}
                params {{ param_id: 1 value: "{_octal(0x1234)}" }} }} }}
            is_default_action: true }} }} }}
        updates {{ type: INSERT entity {{ table_entry {{
            table_id: {t[contract.VALUES]}
            match {{ field_id: 1 exact {{ value: "\\003" }} }}
            action {{ action {{ action_id: {a[contract.SET_VALUES]}
                params {{ param_id: 1 value: "{_octal(lo)}" }}
                params {{ param_id: 2 value: "{_octal(hi)}" }}
                params {{ param_id: 3 value: "{_octal(mask)}" }} }} }} }} }} }}
        updates {{ type: INSERT entity {{ packet_replication_engine_entry {{ multicast_group_entry {{
            multicast_group_id: {group} {replicas} }} }} }} }}
        {dst}"""
    params = [(1, 3), (2, 0), (3, 256), (4, group), (5, 0b1011), (6, 8), (7, 0x1234), (8, 0xC0FFEE)]
    then = f"""
        updates {{ type: INSERT entity {{ table_entry {{
            table_id: {t[contract.JOBS]}
            match {{ field_id: 1 exact {{ value: "\\003" }} }}
            action {{ action {{ action_id: {a[contract.SET_JOB]}
                {"".join(f'params {{ param_id: {i} value: "{_octal(v)}" }}' for i, v in params)} }} }} }} }} }}"""
    assert mock.writes == [write_request(first), write_request(then)]
    assert (job.n_workers, job.slot_base, job.n_slots, job.worker_mask, job.lane_bits) == (3, 0, 256, 0b1011, 8)
    assert (job.key, job.table) == (0xC0FFEE, tuple(spec(3, 3).table_values()))
    [listed] = session.list_jobs(topo)
    assert listed == job
    assert [(w.worker_id, w.host, w.port) for w in listed.workers] == [(0, "h1", 1), (1, "h2", 2), (3, "h4", 4)]


def _octal(number: int) -> str:
    data = number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")
    return "".join(f"\\{b:03o}" for b in data)


def test_adding_a_job_again_starts_a_new_run_with_a_fresh_epoch(mock, topo, session):
    first = session.add_job(spec(1, 2), ["h1", "h2"], topo)
    session.add_job(spec(2, 2), ["h3", "h4"], topo)
    mock.clear_log()
    second = session.add_job(spec(1, 3), ["h1", "h2", "h3"], topo)
    assert second.epoch != first.epoch and 1 <= second.epoch <= 0xFFFF
    assert second.slot_base == first.slot_base  # keeps its slots
    kinds = [(u.type, u.entity.WhichOneof("entity")) for r in mock.writes for u in r.updates]
    assert kinds == [
        (Update.MODIFY, "table_entry"),  # the last epoch given, in the jobs default entry
        (Update.MODIFY, "table_entry"),  # the job's table
        (Update.MODIFY, "packet_replication_engine_entry"),
        (Update.MODIFY, "table_entry"),
        (Update.MODIFY, "table_entry"),
        (Update.INSERT, "table_entry"),
        (Update.MODIFY, "table_entry"),
    ]
    jobs_by_id = {j.job_id: j for j in session.list_jobs()}
    assert jobs_by_id[1].epoch == second.epoch and jobs_by_id[1].n_workers == 3
    with pytest.raises(JobRefused, match=f"epoch {second.epoch} may still be in the switch's registers"):
        session.add_job(spec(1, 1), ["h1"], topo, epoch=second.epoch)


def test_a_job_without_a_key_gets_a_fresh_one(mock, topo, session):
    job = session.add_job(JobSpec(job_id=1, workers=2), ["h1", "h2"], topo)
    again = session.add_job(JobSpec(job_id=1, workers=2), ["h1", "h2"], topo)
    assert 1 <= job.key < 2**32 and again.key != job.key
    assert session.list_jobs()[0].key == again.key


def test_jobs_hold_their_own_tables(mock, topo, session):
    session.add_job(spec(1, 2, bits=2, granularity=60, table="uniform"), ["h1", "h2"], topo)
    session.add_job(spec(2, 2), ["h3", "h4"], topo)
    tables = {j.job_id: list(j.table) for j in session.list_jobs()}
    assert tables == {1: [0, 20, 40, 60], 2: spec(2, 2).table_values()}


def test_lane_width_follows_n_times_g(mock, topo, session):
    assert session.add_job(spec(1, 2, granularity=100), ["h1", "h2"], topo).lane_bits == 8  # 2 * 100 <= 255
    assert session.add_job(spec(2, 3, granularity=100), ["h1", "h2", "h3"], topo).lane_bits == 16  # 300 > 255


def test_a_description_for_other_cells_or_other_workers_is_refused(mock, topo, session):
    with pytest.raises(JobRefused, match="128-word cells .1024 coordinates a request. but the job is described for 64"):
        session.add_job(spec(1, 2, words=64), ["h1", "h2"], topo)
    with pytest.raises(JobRefused, match="2 workers but the description counts 3"):
        session.add_job(spec(1, 3), ["h1", "h2"], topo)
    assert session.list_jobs() == []


def test_more_workers_than_the_bitmap_holds_are_refused():
    workers = [jobs.JobWorker(i % 32, "08:00:00:00:00:01", "10.0.0.1", 1) for i in range(33)]
    with pytest.raises(JobRefused, match="counts 32 workers"):
        jobs.plan_job(JobSpec(job_id=1, workers=32), workers, [])


def test_overlapping_slots_are_refused_and_free_ranges_are_found(mock, topo, session):
    session.add_job(spec(1, 2, slots=512), ["h1", "h2"], topo)
    with pytest.raises(JobRefused, match=r"overlap job 1's \[0, 512\)"):
        session.add_job(spec(2, 2, slots=10, window=10), ["h3", "h4"], topo, slot_base=100)
    assert session.add_job(spec(2, 2, slots=512), ["h3", "h4"], topo).slot_base == 512
    with pytest.raises(JobRefused, match="no free range of 1 slots among the 1024"):
        session.add_job(spec(3, 1, slots=1, window=1), ["h1"], topo)


def test_job_remove_deletes_the_job_entry_first(mock, topo, session):
    session.add_job(spec(5, 2), ["h1", "h2"], topo)
    mock.clear_log()
    removed = session.remove_job(5)
    assert removed.job_id == 5
    first, then = mock.writes
    assert [(u.type, u.entity.table_entry.table_id) for u in first.updates] == [
        (Update.DELETE, P4Info(mock.p4info).table(contract.JOBS).preamble.id)
    ]
    assert [u.type for u in then.updates] == [Update.DELETE] * 4  # two result_dst, the table, the group
    assert then.updates[-1].entity.packet_replication_engine_entry.multicast_group_entry.multicast_group_id == 0x1005
    assert session.list_jobs() == [] and mock.groups == {}
    assert mock.table_entries(P4Info(mock.p4info).table(contract.VALUES).preamble.id) == []
    with pytest.raises(BadInput, match="no job 5"):
        session.remove_job(5)
    assert session.remove_job(5, missing_ok=True) is None


def test_an_epoch_is_never_given_twice_however_jobs_come_and_go_on_the_same_slots(mock, topo, session):
    """Job A, then B, then A again on the same slots: the registers may still hold A's first cells, so its
    new run must not meet them. The switch keeps the last epoch given in the jobs default entry."""
    given = []
    for job_id in (1, 2, 1):
        given.append(session.add_job(spec(job_id, 2), ["h1", "h2"], topo).epoch)
        session.remove_job(job_id)
    assert given == [1, 2, 3] and session.last_epoch() == 3
    with pytest.raises(JobRefused, match="epoch 2 may still be in the switch's registers .* above 3"):
        session.add_job(spec(4, 1), ["h1"], topo, epoch=2)
    assert session.add_job(spec(4, 1), ["h1"], topo, epoch=900).epoch == 900
    assert session.add_job(spec(5, 1), ["h2"], topo).epoch == 901


def test_a_switch_that_has_given_every_epoch_asks_for_a_push():
    with pytest.raises(JobRefused, match="given all 65535 epochs .* push the program again"):
        jobs.next_epoch(0xFFFF, 3)


# ---- counters, show, runtime files ------------------------------------------------------------------


def test_stats_names_every_cell_and_sums_aggregated_packets(mock, session):
    counter_id = P4Info(mock.p4info).counter(contract.THC_EVENTS).preamble.id
    mock.counters = {(counter_id, 0): (10, 900), (counter_id, 1): (3, 270), (counter_id, 8): (2, 180)}
    s = session.read_stats()
    assert s.events["CONSUMED"] == (10, 900) and s.events["DROP_BAD_INDEX"] == (2, 180)
    assert (s.aggregated, s.results, s.dropped) == (13, 3, 2)
    assert list(s.events)[: len(contract.EVENTS)] == list(contract.EVENTS)


def test_stats_reads_each_installed_jobs_events_from_the_per_job_counter(mock, topo, session):
    session.add_job(spec(1, 2), ["h1", "h2"], topo)
    session.add_job(spec(2, 2), ["h3", "h4"], topo)
    job_counter = P4Info(mock.p4info).counter(contract.THC_JOB_EVENTS).preamble.id
    mock.counters = {
        (job_counter, contract.job_event_cell(1, "COMPLETED")): (5, 500),
        (job_counter, contract.job_event_cell(2, "RELEASED")): (2, 120),
        (job_counter, contract.job_event_cell(2, "LATE")): (1, 90),
        (job_counter, contract.job_event_cell(9, "COMPLETED")): (7, 700),  # no such job installed
    }
    s = session.read_stats()
    assert sorted(s.jobs) == [1, 2]
    assert {k: v for k, v in s.jobs[1].events.items() if v != (0, 0)} == {"COMPLETED": (5, 500)}
    assert (s.jobs[2].packets("RELEASED"), s.jobs[2].packets("LATE"), s.jobs[2].packets("COMPLETED")) == (2, 1, 0)
    assert list(s.jobs[1].events) == list(contract.EVENTS)
    assert session.read_stats([9]).jobs[9].packets("COMPLETED") == 7
    assert s.to_dict()["jobs"]["2"]["LATE"] == {"packets": 1, "bytes": 90}


def test_apply_reads_tutorials_runtime_files_and_is_idempotent(mock, tmp_path):
    p4info_file = tmp_path / "build" / "prog.p4info.txtpb"
    p4info_file.parent.mkdir()
    p4info_file.write_text(google.protobuf.text_format.MessageToString(contract_p4info(WORDS)))
    (tmp_path / "build" / "prog.json").write_text("{}")
    runtime = tmp_path / "s1-runtime.json"
    runtime.write_text(
        json.dumps(
            {
                "target": "bmv2",
                "p4info": "build/prog.p4info.txtpb",
                "bmv2_json": "build/prog.json",
                "table_entries": [
                    {
                        "table": contract.IPV4_LPM,
                        "default_action": True,
                        "action_name": contract.FORWARDING_DROP,
                        "action_params": {},
                    },
                    {
                        "table": contract.IPV4_LPM,
                        "match": {"hdr.ipv4.dstAddr": ["10.0.1.1", 32]},
                        "action_name": contract.IPV4_FORWARD,
                        "action_params": {"dstAddr": "08:00:00:00:01:11", "port": 1},
                    },
                ],
                "multicast_group_entries": [
                    {
                        "multicast_group_id": 1,
                        "replicas": [{"egress_port": 1, "instance": 1}, {"egress_port": 2, "instance": 1}],
                    }
                ],
            }
        )
    )
    with SwitchSession(mock.addr) as s:
        first = s.apply(runtime)
    assert first["pushed"] is False  # the switch already runs this P4Info
    assert (first["inserted"], first["modified"]) == (2, 1)  # the default entry is a MODIFY
    kinds = [u.type for u in mock.writes[0].updates]
    assert kinds == [Update.MODIFY, Update.INSERT, Update.INSERT]
    with SwitchSession(mock.addr) as s:
        again = s.apply(runtime)
        assert (again["inserted"], again["pushed"]) == (0, False)
        shown = s.show()
    assert shown["multicast_group_entries"] == [
        {"multicast_group_id": 1, "replicas": [{"egress_port": 1, "instance": 1}, {"egress_port": 2, "instance": 1}]}
    ]
    assert {
        "table": contract.IPV4_LPM,
        "match": {"hdr.ipv4.dstAddr": ["10.0.1.1", 32]},
        "action_name": contract.IPV4_FORWARD,
        "action_params": {"dstAddr": "08:00:00:00:01:11", "port": 1},
    } in shown["tables"][contract.IPV4_LPM]


# ---- errors ---------------------------------------------------------------------------------------


def test_an_unreachable_switch_names_the_address_and_what_to_check():
    addr = f"127.0.0.1:{free_tcp_port()}"
    with SwitchSession(addr, connect_timeout=0.3) as s:
        with pytest.raises(SwitchUnreachable, match=f"no P4Runtime server answers at {addr}.*switch is running"):
            s.read_stats()


def test_a_backup_controller_is_told_who_is_primary(mock, topo, session):
    mock.primary_election_id = (0, 9)
    with pytest.raises(NotPrimary, match="holds election id 0,9 and ours is 0,1; pass a higher --election-id"):
        session.install_forwarding(topo)
    assert mock.writes == []


def test_a_rejected_entry_shows_the_switch_error_for_that_entry(mock, topo, session):
    lpm = P4Info(mock.p4info).table(contract.IPV4_LPM).preamble.id

    def refuse_h3(update):
        entry = update.entity.table_entry
        if entry.table_id == lpm and entry.match[0].lpm.value == bytes([10, 0, 0, 3]):
            return 8, "table full"  # RESOURCE_EXHAUSTED
        return None

    mock.reject = refuse_h3
    with pytest.raises(WriteRejected) as caught:
        session.install_forwarding(topo)
    message = str(caught.value)
    assert "rejected 1 of 5 updates" in message
    assert f"INSERT {contract.IPV4_LPM} dstAddr=10.0.0.3/32 -> ipv4_forward" in message
    assert "RESOURCE_EXHAUSTED: table full" in message
    assert caught.value.failures[0][0] == 2


# ---- CLI ------------------------------------------------------------------------------------------

COMMANDS = [
    ["push"],
    ["forwarding"],
    ["table", "show"],
    ["job", "add"],
    ["job", "remove"],
    ["job", "list"],
    ["stats"],
    ["show"],
    ["apply"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_documents_every_option(command, capsys):
    assert run(command + ["--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--grpc-addr", "--device-id", "--election-id", "--dry-run", "--json", "--topology", "--switch"):
        assert option in text


def test_cli_end_to_end_on_one_switch(mock, tmp_path):
    port = int(mock.addr.rsplit(":", 1)[1])
    topo_file = tmp_path / "star4.json"
    topo_file.write_text(json.dumps(star4(port)))
    assert cli("forwarding", "--topology", str(topo_file))[0] == 0
    saved = tmp_path / "job1.json"
    status, out, err = cli(
        "job", "add", "--topology", str(topo_file), "--id", "1", "--workers", "h1,h2,h3,h4", "--window", "64",
        "--slots", "64", "--bits", "3", "--save", str(saved), "--json",
    )  # fmt: skip
    assert status == 0, err
    added = json.loads(out)
    assert added["worker_mask"] == 0xF and added["n_slots"] == 64 and added["lane_bits"] == 8
    ticket = Ticket.load(saved)  # what the workers get: the job's description and the switch's grant
    described = ticket.spec
    grant = (ticket.grant.key, ticket.grant.epoch, ticket.grant.slot_base, ticket.grant.n_slots)
    assert grant == (added["key"], added["epoch"], added["slot_base"], 64) and ticket.grant.pool is None
    assert (described.job_id, described.workers, described.codec.bits, described.window) == (1, 4, 3, 64)
    assert described.key == added["key"] != 0 and list(added["table"]) == described.table_values()
    status, out, _ = cli("table", "show", "--grpc-addr", mock.addr)
    assert status == 0 and f"job 1: V={described.table_values()} (b=3, g=30), 8-bit lanes" in out
    status, out, _ = cli("job", "list", "--grpc-addr", mock.addr, "--json")
    assert status == 0 and [j["epoch"] for j in json.loads(out)] == [added["epoch"]]
    status, out, _ = cli("stats", "--grpc-addr", mock.addr, "--json")
    assert status == 0 and json.loads(out)["aggregated"] == 0
    status, out, _ = cli("show", "--grpc-addr", mock.addr)
    assert status == 0 and f"{contract.VALUES}: 1 entries" in out and "multicast group 4097" in out
    status, out, _ = cli("job", "remove", "--grpc-addr", mock.addr, "--id", "1")
    assert status == 0 and "job 1 removed" in out


def test_cli_all_programs_every_switch_of_the_topology(tmp_path):
    s1, s2 = MockSwitch(contract_p4info(WORDS)), MockSwitch(contract_p4info(WORDS))
    try:
        ports = [int(m.start().rsplit(":", 1)[1]) for m in (s1, s2)]
        s2.device_id = 1
        topo_file = tmp_path / "two_tier.json"
        topo_file.write_text(json.dumps(two_tier(*ports)))
        status, out, err = cli("forwarding", "--topology", str(topo_file), "--all")
        assert status == 0, err
        assert out.splitlines() == [
            "s1: forwarding: 5 inserted, 0 modified, 0 deleted",
            "s2: forwarding: 5 inserted, 0 modified, 0 deleted",
        ]
        assert s2.writes[0].device_id == 1
        status, out, _ = cli("forwarding", "--topology", str(topo_file))
        assert status == 1
    finally:
        s1.stop()
        s2.stop()


def test_dry_run_prints_the_request_a_live_run_sends(mock, tmp_path, topo):
    port = int(mock.addr.rsplit(":", 1)[1])
    topo_file = tmp_path / "star4.json"
    topo_file.write_text(json.dumps(star4(port)))
    status, out, _ = cli("forwarding", "--topology", str(topo_file), "--dry-run")
    assert status == 0 and mock.writes == []
    printed = p4runtime_pb2.WriteRequest()
    google.protobuf.text_format.Merge(out, printed)  # '#' lines are comments
    assert cli("forwarding", "--topology", str(topo_file))[0] == 0
    assert mock.writes == [printed]


def test_dry_run_without_a_switch_encodes_with_the_p4info_file(tmp_path):
    p4info_file = tmp_path / "thc.p4info.txtpb"
    p4info_file.write_text(google.protobuf.text_format.MessageToString(contract_p4info(WORDS)))
    topo_file = tmp_path / "star4.json"
    topo_file.write_text(json.dumps(star4(free_tcp_port())))
    status, out, err = cli(
        "job", "add", "--id", "1", "--workers", "h1,h2", "--topology", str(topo_file), "--connect-timeout", "0.2",
        "--dry-run", "--p4info", str(p4info_file),
    )  # fmt: skip
    assert status == 0, err
    assert "computed against an empty switch" in err
    requests = [chunk for chunk in out.split("# WriteRequest")[1:]]
    first, then = (p4runtime_pb2.WriteRequest() for _ in range(2))
    google.protobuf.text_format.Merge(requests[0].split("\n", 1)[1], first)
    google.protobuf.text_format.Merge(requests[1].split("\n", 1)[1], then)
    kinds = [u.entity.WhichOneof("entity") for u in first.updates]
    assert kinds == ["table_entry"] * 3 + ["packet_replication_engine_entry", "table_entry", "table_entry"]
    assert len(then.updates) == 1
    assert [u.type for u in [*first.updates, *then.updates]] == [Update.INSERT, Update.MODIFY] + [Update.INSERT] * 5
    assert first.updates[1].entity.table_entry.is_default_action  # the epoch mark: jobs' default entry


@pytest.mark.parametrize(
    "argv, status, message",
    [
        (["stats", "--grpc-addr", "127.0.0.1:{free}", "--connect-timeout", "0.2"], 1, "no P4Runtime server answers at"),
        (["job", "add", "--id", "1", "--workers", "h1", "--grpc-addr", "{addr}"], 1, "needs --topology"),
        (["job", "add", "--id", "1", "--workers", "h9", "--topology", "{topo}"], 1, "unknown host 'h9'"),
        (
            ["job", "add", "--id", "300", "--workers", "h1", "--topology", "{topo}"],
            2,
            "argument --id: 300: must be 0..255",
        ),
        (
            ["job", "add", "--id", "1", "--workers", "h1", "--bits", "6", "--topology", "{topo}"],
            2,
            "argument --bits: 6: must be 1..4",
        ),
        (
            ["job", "add", "--id", "1", "--workers", "h1", "--granularity", "300", "--topology", "{topo}"],
            2,
            "argument --granularity: 300: must be 1..255",
        ),
        (
            ["job", "add", "--id", "1", "--workers", "h1,h2", "--job", "{missing}", "--topology", "{topo}"],
            1,
            "cannot read",
        ),
        (["job", "add", "--id", "1", "--workers", "h1", "--clip", "2", "--topology", "{topo}"], 1, "strictly between"),
        (["stats", "--switch", "s1"], 1, "--switch needs --topology"),
        (["stats", "--election-id", "x", "--grpc-addr", "{addr}"], 2, "argument --election-id: election id 'x'"),
        (["apply", "{missing}", "--grpc-addr", "{addr}"], 1, "cannot read runtime file"),
        (["forwarding", "--topology", "{bad_topo}"], 1, "unknown node 'h9'"),
    ],
)
def test_bad_input_is_one_line_and_refused(mock, tmp_path, argv, status, message):
    """Exit 2: refused as the arguments are read (usage); 1: refused by the checks that follow, before connecting."""
    port = int(mock.addr.rsplit(":", 1)[1])
    topo_file = tmp_path / "star4.json"
    topo_file.write_text(json.dumps(star4(port)))
    bad = star4(port)
    bad["links"].append(["h9", "s1-p9"])
    bad_file = tmp_path / "bad.json"
    bad_file.write_text(json.dumps(bad))
    values = {
        "free": free_tcp_port(),
        "addr": mock.addr,
        "topo": topo_file,
        "bad_topo": bad_file,
        "missing": tmp_path / "missing.json",
    }
    got, out, err = cli(*[a.format(**values) for a in argv])
    assert got == status, err
    assert err.startswith("thc-ctl: error: ") and message in err and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_usage_errors_exit_2(capsys):
    assert run(["job", "add", "--id", "1"]) == 2  # --workers missing
    assert "--workers" in capsys.readouterr().err
    assert run(["frobnicate"]) == 2


def test_dry_run_push_elides_the_bmv2_json(tmp_path):
    p4info_file, json_file = tmp_path / "thc.p4info.txtpb", tmp_path / "thc.json"
    p4info_file.write_text(google.protobuf.text_format.MessageToString(contract_p4info(WORDS)))
    json_file.write_text('{"program": "thc.p4"}')
    argv = [
        "push",
        "--grpc-addr",
        f"127.0.0.1:{free_tcp_port()}",
        "--connect-timeout",
        "0.2",
        "--dry-run",
        "--p4info",
        str(p4info_file),
        "--bmv2-json",
        str(json_file),
    ]
    status, out, _ = cli(*argv)
    assert status == 0 and "# config.p4_device_config: 21 bytes of BMv2 JSON (elided)" in out
    printed = p4runtime_pb2.SetForwardingPipelineConfigRequest()
    google.protobuf.text_format.Merge(out, printed)
    assert printed.config.p4info == contract_p4info(WORDS) and printed.action == printed.VERIFY_AND_COMMIT
    status, out, _ = cli(*argv, "--json")
    [request] = json.loads(out)["dry_run"]
    assert status == 0 and request["type"] == "SetForwardingPipelineConfigRequest"
    assert request["p4_device_config_bytes"] == 21 and "p4_device_config" not in request["config"]


def test_a_job_file_is_the_description_it_installs(mock, tmp_path):
    port = int(mock.addr.rsplit(":", 1)[1])
    topo_file = tmp_path / "star4.json"
    topo_file.write_text(json.dumps(star4(port)))
    described = tmp_path / "described.json"
    JobSpec(job_id=4, workers=2, codec=THCConfig(granularity=60, table="uniform", bits=2), key=77).save(described)
    ticket = tmp_path / "ticket.json"
    status, out, err = cli("job", "add", "--topology", str(topo_file), "--workers", "h1,h2", "--job", str(described),
                           "--save", str(ticket), "--json")  # fmt: skip
    assert status == 0, err
    added = json.loads(out)
    assert (added["job_id"], added["key"], added["table"]) == (4, 77, [0, 20, 40, 60])
    status, out, err = cli("job", "add", "--topology", str(topo_file), "--workers", "h1,h2", "--job", str(ticket),
                           "--json")  # fmt: skip
    assert status == 0, err  # a ticket is a description too: a new run of its job, its key kept
    again = json.loads(out)
    assert (again["key"], again["table"]) == (77, added["table"]) and again["epoch"] != added["epoch"]
    status, _, err = cli("job", "add", "--topology", str(topo_file), "--workers", "h1", "--job", str(described))
    assert status == 1 and "names 1 hosts but" in err
