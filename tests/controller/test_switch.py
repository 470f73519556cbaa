"""The controller against the software switch (emulator/) running the compiled program p4/build/thc.json:
every command, each read back after writing, and one job aggregating real packets.

The switch's P4Runtime server runs in-process on an ephemeral loopback port (one thc-switch process is
also started, to drive it exactly as a user would). Skipped until p4/build/ holds the compiled program.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import contract
from contract.job import JobSpec
from controller.session import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, SwitchSession
from harness import frames as tp
from tests.support import paths
from tests.support.thc_ctl import cli, star4

REPO = paths.REPO
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    not (DEFAULT_BMV2_JSON.exists() and DEFAULT_P4INFO.exists()),
    reason="p4/build/thc.json or thc.p4info.txtpb is missing (they are committed)",
)


@pytest.fixture(scope="module")
def switch(tmp_path_factory):
    """A software switch (no program yet) serving P4Runtime on loopback, and a topology naming it."""
    from emulator.p4rt.device import Device
    from emulator.p4runtime_server import P4RuntimeServer

    device = Device(device_id=0)
    server = P4RuntimeServer(device)
    port = server.start("127.0.0.1:0")
    topo_file = tmp_path_factory.mktemp("topo") / "star4.json"
    topo_file.write_text(json.dumps(star4(port)))
    yield SimpleNamespace(addr=f"127.0.0.1:{port}", device=device, topo=topo_file)
    server.stop()


@pytest.fixture(scope="module")
def programmed(switch):
    """push and forwarding through the CLI, as a user runs them."""
    for argv in (["push"], ["forwarding"]):
        status, out, err = cli(*argv, "--topology", switch.topo)
        assert status == 0, err
    return switch


def test_push_and_forwarding_read_back(programmed):
    with SwitchSession(programmed.addr, name="s1") as s:
        shown = s.show()
        assert s.cell_words() == contract.WORDS
    routes = {e["match"]["hdr.ipv4.dstAddr"][0]: e["action_params"] for e in shown["tables"][contract.IPV4_LPM]}
    for i in range(1, 5):
        assert routes[f"10.0.0.{i}"] == {"dstAddr": f"08:00:00:00:00:0{i}", "port": i}
    assert [e["match"] for e in shown["tables"][contract.SERVICE_ADDR]] == [{"hdr.ipv4.dstAddr": "10.0.0.254"}]
    assert shown["tables"][contract.VALUES] == []  # tables come with jobs
    status, out, _ = cli("forwarding", "--topology", programmed.topo)
    assert status == 0 and "nothing to change" in out


def test_a_job_brings_its_table_and_takes_it_away(programmed):
    def table():
        with SwitchSession(programmed.addr, name="s1") as s:
            return {j.job_id: list(j.table) for j in s.list_jobs()}

    add = ["job", "add", "--topology", programmed.topo, "--id", 6, "--workers", "h1,h2", "--window", 16]
    assert cli(*add, "--bits", 2, "--granularity", 60, "--table", "uniform")[0] == 0
    assert table() == {6: [0, 20, 40, 60]}
    assert cli(*add)[0] == 0  # a new run with the default description: 4 bits, g = 30
    assert table() == {6: JobSpec(job_id=6, workers=2).table_values()}
    assert cli("job", "remove", "--topology", programmed.topo, "--id", 6)[0] == 0
    with SwitchSession(programmed.addr, name="s1") as s:
        assert s.show()["tables"][contract.VALUES] == []


def test_job_add_list_renew_remove(programmed):
    status, out, err = cli(
        "job", "add", "--topology", programmed.topo, "--id", 7, "--workers", "h1,h3", "--window", 16, "--json"
    )
    assert status == 0, err
    added = json.loads(out)
    del added["spec"]
    with SwitchSession(programmed.addr, name="s1") as s:
        [listed] = s.list_jobs()
        groups = s.multicast_groups()
    assert listed.to_dict() == {**added, "workers": [{**w, "host": None} for w in added["workers"]]}
    assert added["n_slots"] == 256 and added["key"] != 0  # the window's slots, at least 256; a fresh key
    assert {
        "multicast_group_id": 0x1007,
        "replicas": [{"egress_port": 1, "instance": 0}, {"egress_port": 3, "instance": 2}],
    } in groups
    status, out, _ = cli(
        "job", "add", "--topology", programmed.topo, "--id", 7, "--workers", "h1,h3", "--window", 16, "--json"
    )
    renewed = json.loads(out)
    assert status == 0 and renewed["epoch"] != added["epoch"] and renewed["slot_base"] == added["slot_base"]
    status, out, _ = cli("job", "list", "--topology", programmed.topo)
    assert status == 0 and re.search(r"worker  2 h3\s+10.0.0.3\s+08:00:00:00:00:03 port 3", out), out
    assert cli("job", "remove", "--topology", programmed.topo, "--id", 7)[0] == 0
    with SwitchSession(programmed.addr, name="s1") as s:
        assert s.list_jobs() == []
        assert all(g["multicast_group_id"] != 0x1007 for g in s.multicast_groups())


def test_a_job_framed_for_other_cells_is_refused_before_anything_is_written(programmed):
    from controller.errors import JobRefused
    from controller.topology import Topology

    topo = Topology.load(programmed.topo)
    with SwitchSession(programmed.addr, name="s1") as s:
        with pytest.raises(JobRefused, match=r"128-word cells .* described for 32-word cells \(256\)"):
            s.add_job(JobSpec(job_id=9, workers=2, words=32), ["h1", "h2"], topo)
        assert all(j.job_id != 9 for j in s.list_jobs())


def test_the_installed_job_aggregates_packets_and_stats_count_them(programmed):
    from controller.topology import Topology

    service = ("02:00:00:00:00:fe", "10.0.0.254")
    spec = JobSpec(job_id=2, workers=2, window=8, slots=8)
    table = np.array(spec.table_values())
    with SwitchSession(programmed.addr, name="s1") as s:
        topo = Topology.load(programmed.topo)
        job = s.add_job(spec, ["h2", "h4"], topo)
        before = s.read_stats()
        engine = programmed.device.engine
        rng = np.random.default_rng(1)
        indices = {w: rng.integers(0, 16, spec.coords_per_request) for w in (1, 3)}
        outputs = []
        for worker_id, host in ((1, "h2"), (3, "h4")):
            h = topo.hosts[host]
            frame = tp.frame(
                (h.mac, h.address), service, op=contract.OP_THC, job_id=job.job_id, worker_id=worker_id, slot=3,
                lane_bits=spec.lane_bits, key=job.key, payload=tp.pack_indices(indices[worker_id]),
            )  # fmt: skip
            outputs.append(engine.process(worker_id + 1, frame))
        after = s.read_stats()
        s.remove_job(2)
    assert outputs[0] == []  # the first contribution waits
    results = {port: tp.Parsed.of(frame) for port, frame in outputs[1]}
    assert sorted(results) == [2, 4]  # one copy toward each worker
    expected = table[indices[1]] + table[indices[3]]
    for port, result in results.items():
        assert (result.kind, result.job_id, result.worker_id, result.count) == (contract.KIND_RESULT, 2, port - 1, 2)
        assert result.lane_bits == 8 and result.lanes() == list(expected)
    assert after.packets("CONSUMED") - before.packets("CONSUMED") == 1
    assert after.packets("COMPLETED") - before.packets("COMPLETED") == 1
    assert after.aggregated - before.aggregated == 2


def test_stats_show_and_apply_through_the_cli(programmed, tmp_path):
    status, out, _ = cli("stats", "--topology", programmed.topo, "--json")
    events = json.loads(out)["events"]
    assert status == 0 and list(events)[: len(contract.EVENTS)] == list(contract.EVENTS)
    runtime = tmp_path / "s1-runtime.json"
    runtime.write_text(
        json.dumps(
            {
                "target": "bmv2",
                "p4info": str(DEFAULT_P4INFO),
                "bmv2_json": str(DEFAULT_BMV2_JSON),
                "table_entries": [
                    {
                        "table": contract.IPV4_LPM,
                        "match": {"hdr.ipv4.dstAddr": ["10.0.9.0", 24]},
                        "action_name": contract.IPV4_FORWARD,
                        "action_params": {"dstAddr": "08:00:00:00:09:00", "port": 4},
                    }
                ],
                "multicast_group_entries": [{"multicast_group_id": 9, "replicas": [{"egress_port": 1, "instance": 0}]}],
            }
        )
    )
    status, out, err = cli("apply", runtime, "--topology", programmed.topo)
    assert status == 0 and "2 inserted" in out and "pipeline pushed" not in out, err
    status, out, _ = cli("apply", runtime, "--topology", programmed.topo, "--json")
    assert status == 0 and json.loads(out)["inserted"] == 0
    status, out, _ = cli("show", "--topology", programmed.topo, "--table", "ipv4_lpm")
    assert status == 0 and "dstAddr=10.0.9.0/24 -> ipv4_forward(dstAddr=08:00:00:00:09:00, port=4)" in out


def test_dry_run_leaves_the_switch_as_it_was(programmed):
    status, out, err = cli("job", "add", "--topology", programmed.topo, "--id", 9, "--workers", "h1,h2", "--dry-run")
    assert status == 0, err
    assert contract.JOBS not in out and "table_entry" in out and "multicast_group_entry" in out
    with SwitchSession(programmed.addr, name="s1") as s:
        assert all(j.job_id != 9 for j in s.list_jobs())


def test_a_rejected_entry_quotes_the_switch(programmed):
    with SwitchSession(programmed.addr, name="s1") as s:
        with pytest.raises(Exception) as caught:
            s.conn.write([_duplicate_service_entry(s)], s.pipeline().describe_update)
    assert "ALREADY_EXISTS" in str(caught.value) and "service_addr" in str(caught.value)


def test_a_second_controller_is_told_about_the_election_id(programmed):
    from controller.connection import SwitchConnection
    from controller.errors import NotPrimary
    from controller.topology import Topology

    topo = Topology.load(programmed.topo)
    spec = JobSpec(job_id=8, workers=1)
    holder = SwitchConnection(programmed.addr, 0, (0, 7))
    try:
        holder.become_primary()
        with SwitchSession(programmed.addr, election_id=(0, 7), name="s1") as same:
            with pytest.raises(NotPrimary, match="uses election id 0,7; pass another --election-id"):
                same.add_job(spec, ["h1"], topo)
        with SwitchSession(programmed.addr, election_id=(0, 3), name="s1") as lower:
            with pytest.raises(NotPrimary, match="holds election id 0,7 and ours is 0,3"):
                lower.add_job(spec, ["h1"], topo)
    finally:
        holder.close()


def _duplicate_service_entry(session):
    from p4.v1 import p4runtime_pb2

    entry = session.pipeline().table_entry(
        contract.SERVICE_ADDR, {"hdr.ipv4.dstAddr": "10.0.0.254"}, contract.SERVE, {}
    )
    return p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=p4runtime_pb2.Entity(table_entry=entry))


def test_thc_ctl_drives_a_thc_switch_process(tmp_path):
    """Both as processes, as a user starts them: thc-switch --no-p4 on port 0, then thc-ctl."""
    switch = subprocess.Popen(
        [sys.executable, "-m", "emulator", "--no-p4", "-L", "off", "--grpc-server-addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        ready = switch.stdout.readline()
        match = re.search(r"P4Runtime on ([\d.]+:\d+)", ready)
        assert match, ready + switch.stderr.read()
        addr = match.group(1)
        thc_ctl = VENV_BIN / "thc-ctl"
        command = [str(thc_ctl)] if thc_ctl.exists() else [sys.executable, "-m", "controller.ctl_cli"]
        pushed = subprocess.run(
            command + ["push", "--grpc-addr", addr], capture_output=True, text=True, cwd=REPO, timeout=300
        )
        assert pushed.returncode == 0, pushed.stderr
        stats = subprocess.run(
            command + ["stats", "--grpc-addr", addr, "--json"], capture_output=True, text=True, cwd=REPO, timeout=120
        )
        assert stats.returncode == 0 and json.loads(stats.stdout)["aggregated"] == 0, stats.stderr
        wrong = subprocess.run(
            command + ["stats", "--grpc-addr", addr, "--device-id", "3"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert wrong.returncode == 1 and "device" in wrong.stderr and "Traceback" not in wrong.stderr
    finally:
        switch.terminate()
        try:
            switch.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(switch.pid, 9)
            switch.wait()


FIXTURE = REPO / "tests" / "fixtures" / "p4" / "build"


@pytest.mark.skipif(not (FIXTURE / "ipv4_forward.json").exists(), reason="the engine's fixture programs are not built")
def test_apply_programs_a_tutorials_style_switch(tmp_path):
    """`apply` with a runtime file in p4lang/tutorials' format, on another program (the engine's
    ipv4_forward fixture, tutorials' basic.p4): the pipeline is pushed, entries forward packets, and the
    THC commands name what this program lacks."""
    from emulator.p4rt.device import Device
    from emulator.p4runtime_server import P4RuntimeServer

    device = Device(device_id=0)
    server = P4RuntimeServer(device)
    addr = f"127.0.0.1:{server.start('127.0.0.1:0')}"
    try:
        runtime = tmp_path / "s1-runtime.json"
        runtime.write_text(
            json.dumps(
                {
                    "target": "bmv2",
                    "p4info": str(FIXTURE / "ipv4_forward.p4info.txtpb"),
                    "bmv2_json": str(FIXTURE / "ipv4_forward.json"),
                    "table_entries": [
                        {
                            "table": "MyIngress.ipv4_lpm",
                            "default_action": True,
                            "action_name": "MyIngress.drop",
                            "action_params": {},
                        },
                        {
                            "table": "MyIngress.ipv4_lpm",
                            "match": {"hdr.ipv4.dstAddr": ["10.0.1.1", 32]},
                            "action_name": "MyIngress.ipv4_forward",
                            "action_params": {"dstAddr": "08:00:00:00:01:11", "port": 1},
                        },
                        {
                            "table": "MyIngress.ipv4_lpm",
                            "match": {"hdr.ipv4.dstAddr": ["10.0.2.0", 24]},
                            "action_name": "MyIngress.ipv4_forward",
                            "action_params": {"dstAddr": "08:00:00:00:02:22", "port": 2},
                        },
                    ],
                }
            )
        )
        status, out, err = cli("apply", runtime, "--grpc-addr", addr)
        assert status == 0 and "pipeline pushed; 2 inserted, 1 modified" in out, err
        status, out, _ = cli("show", "--grpc-addr", addr)
        assert status == 0 and "dstAddr=10.0.2.0/24 -> ipv4_forward(dstAddr=08:00:00:00:02:22, port=2)" in out
        status, _, err = cli("stats", "--grpc-addr", addr)
        assert status == 1 and f"no table '{contract.IPV4_LPM}'" in err
        frame = tp.frame(
            ("08:00:00:00:03:33", "10.0.3.3"), ("00:00:00:00:00:01", "10.0.2.7"), op=1, job_id=0, worker_id=0
        )
        [(port, out_frame)] = device.engine.process(3, frame)
        assert port == 2 and out_frame[:6] == bytes.fromhex("080000000222")
    finally:
        server.stop()
