"""The controller against BMv2's simple_switch_grpc running p4/build/thc.json: the same commands as on the
software switch, read back after writing. Skipped where BMv2 is not installed
(tests/support/toolchain.py)."""

import json

import pytest

import contract
from controller.connection import SwitchConnection
from controller.errors import NotPrimary, WriteRejected
from controller.session import SwitchSession
from tests.support.bmv2 import Bmv2Process, needs_bmv2
from tests.support.thc_ctl import cli, star4

pytestmark = [
    pytest.mark.bmv2,
    needs_bmv2(),
]


@pytest.fixture(scope="module")
def bmv2(tmp_path_factory):
    """simple_switch_grpc without a program, on a loopback port; a star4 topology naming it."""
    logs = tmp_path_factory.mktemp("bmv2")
    switch = Bmv2Process(logs, ["--no-p4"])
    try:
        topo = logs / "star4.json"
        topo.write_text(json.dumps(star4(switch.port)))
        yield {"addr": switch.address, "topo": topo}
    finally:
        switch.stop()


def test_every_command_on_bmv2(bmv2):
    topo = bmv2["topo"]
    for argv in (["push"], ["forwarding"]):
        status, _, err = cli(*argv, "--topology", topo)
        assert status == 0, err
    with SwitchSession(bmv2["addr"], name="s1") as s:
        assert s.cell_words() == contract.WORDS
        shown = s.show()
        assert len(shown["tables"][contract.IPV4_LPM]) == 4
    status, out, err = cli("job", "add", "--topology", topo, "--id", 1, "--workers", "h1,h2,h3,h4", "--json")
    assert status == 0, err
    job = json.loads(out)
    with SwitchSession(bmv2["addr"], name="s1") as s:
        [listed] = s.list_jobs()
        assert (listed.epoch, listed.worker_mask, listed.lane_bits, listed.key) == (job["epoch"], 0xF, 8, job["key"])
        assert list(listed.table) == job["table"] and job["table"]  # the job's table, read back from PI
        assert s.last_epoch() == job["epoch"] == 1  # PI reads the jobs default entry back: the epoch mark
        assert [w.port for w in listed.workers] == [1, 2, 3, 4]  # BMv2 reads multicast groups back
    status, out, _ = cli("stats", "--topology", topo, "--json")
    assert status == 0 and json.loads(out)["aggregated"] == 0
    assert cli("job", "remove", "--topology", topo, "--id", 1)[0] == 0
    with SwitchSession(bmv2["addr"], name="s1") as s:
        assert s.list_jobs() == []


def test_bmv2_errors_are_reported(bmv2):
    status, _, err = cli("push", "--topology", bmv2["topo"])
    assert status == 0, err
    holder = SwitchConnection(bmv2["addr"], 0, (0, 50))
    try:
        holder.become_primary()
        with SwitchSession(bmv2["addr"], name="s1") as s:
            with pytest.raises(NotPrimary):
                s.install_forwarding(s_topology(bmv2["topo"]))
        same = SwitchSession(bmv2["addr"], election_id=(0, 50), name="s1")
        with pytest.raises(NotPrimary, match="uses election id 0,50; pass another --election-id"):
            same.install_forwarding(s_topology(bmv2["topo"]))
        same.close()
    finally:
        holder.close()
    with SwitchSession(bmv2["addr"], name="s1") as s:
        s.install_forwarding(s_topology(bmv2["topo"]))
        from p4.v1 import p4runtime_pb2

        entry = s.pipeline().table_entry(contract.SERVICE_ADDR, {"hdr.ipv4.dstAddr": "10.0.0.254"}, contract.SERVE, {})
        update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=p4runtime_pb2.Entity(table_entry=entry))
        with pytest.raises(WriteRejected, match="ALREADY_EXISTS"):
            s.conn.write([update], s.pipeline().describe_update)


def s_topology(path):
    from controller.topology import Topology

    return Topology.load(path)
