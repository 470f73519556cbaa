"""Two-level jobs over P4Runtime, as thc-ctl and the runner install them: three software switches (spine s0,
leaves s1 and s2 of topologies/leaf_spine8.json), each serving P4Runtime in-process, programmed through
`thc-ctl`; packets are then carried across the topology's links between their engines. Sums are checked
against thc's reference aggregation; entries are checked by reading the switches back."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

import contract
from contract.job import JobSpec
from controller.session import DEFAULT_BMV2_JSON, SwitchSession
from controller.topology import Topology
from harness import frames as tp
from harness.leaf_spine import walk, worker_request
from tests.support.paths import REPO
from tests.support.thc_ctl import cli
from thc.aggregate import reference_aggregate

pytestmark = pytest.mark.skipif(not DEFAULT_BMV2_JSON.exists(), reason="p4/build/thc.json not built")

HOSTS = [f"h{i}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    """leaf_spine8 with each switch's P4Runtime server on an ephemeral loopback port, programmed like
    thc-run does it: pipeline and routes everywhere (each job brings its table to the leaves)."""
    from emulator.p4rt.device import Device
    from emulator.p4runtime_server import P4RuntimeServer

    data = json.loads((REPO / "topologies" / "leaf_spine8.json").read_text())
    devices, servers = {}, []
    for name, switch in data["switches"].items():
        devices[name] = Device(device_id=switch["device_id"])
        servers.append(P4RuntimeServer(devices[name]))
        switch["grpc_port"] = servers[-1].start("127.0.0.1:0")
    path = tmp_path_factory.mktemp("topo") / "leaf_spine8.json"
    path.write_text(json.dumps(data))
    topo = Topology.load(path)
    for argv in (["push", "--all"], ["forwarding", "--all"]):
        status, _, err = cli(*argv, "--topology", path)
        assert status == 0, err
    yield SimpleNamespace(path=path, topo=topo, devices=devices)
    for server in servers:
        server.stop()


def add(fabric, job_id: int, hosts: list[str], *options) -> tuple[dict, JobSpec]:
    """`thc-ctl job add` on the fabric: its JSON answer and the description the workers get (with the key)."""
    status, out, err = cli("job", "add", "--topology", fabric.path, "--id", job_id, "--workers", ",".join(hosts),
                           *options, "--json")  # fmt: skip
    assert status == 0, err
    job = json.loads(out)
    return job, JobSpec.from_dict(job["spec"])


def aggregate(fabric, spec: JobSpec, hosts: list[str], slot: int, rnd: int, seed: int) -> tuple[dict, list]:
    """One round of `hosts` through the fabric: what each host received, and the reference sums."""
    rng = np.random.default_rng(seed)
    idx = {h: rng.integers(0, 16, size=spec.coords_per_request, dtype=np.uint8) for h in hosts}
    frames = [(h, worker_request(fabric.topo, h, spec, slot, rnd, idx[h])) for h in hosts]
    received = walk(fabric.topo, lambda sw, port, f: fabric.devices[sw].engine.process(port, f), frames)
    table = spec.codec.make_table()
    return received, [int(v) for v in reference_aggregate([idx[h] for h in hosts], table)]


def assert_exact(received: dict, expected: list, hosts: list[str], topo) -> None:
    assert sorted(received) == sorted(hosts)
    for host in hosts:
        (frame,) = received[host]
        thc = tp.Parsed.of(frame)
        assert (thc.kind, thc.count, thc.worker_id) == (1, len(hosts), topo.worker_id(host)), host
        assert thc.lanes() == expected, host


def held(fabric) -> dict:
    """Per switch: job ids, uplink entries and multicast groups it holds."""
    out = {}
    for name, switch in fabric.topo.switches.items():
        with SwitchSession(switch.grpc_addr, device_id=switch.device_id, name=name) as s:
            shown = s.show()
            out[name] = {
                "jobs": sorted(e["match"]["hdr.thc.job_id"] for e in shown["tables"][contract.JOBS]),
                "uplink": sorted(
                    (e["match"]["hdr.thc.job_id"], e["action_params"]["leaf_id"])
                    for e in shown["tables"][contract.UPLINK]
                ),
                "groups": sorted(g["multicast_group_id"] for g in shown["multicast_group_entries"]),
            }
    return out


def test_job_add_installs_spine_and_leaves_and_aggregates_exactly(fabric):
    job, spec = add(fabric, 3, HOSTS, "--window", 8, "--slots", 8)
    assert (job["two_level"], job["n_workers"], job["lane_bits"]) == (True, 8, 8)
    assert {part["key"] for part in job["parts"].values()} == {spec.key} and spec.key != 0
    assert [bool(part["table"]) for part in job["parts"].values()] == [False, True, True]  # no lookups at the spine
    assert {name: part["n_workers"] for name, part in job["parts"].items()} == {"s0": 2, "s1": 4, "s2": 4}
    assert {part["epoch"] for part in job["parts"].values()} == {job["epoch"]}
    assert held(fabric) == {
        "s0": {"jobs": [3], "uplink": [], "groups": [0x1003]},
        "s1": {"jobs": [3], "uplink": [(3, 0)], "groups": [0x1003]},
        "s2": {"jobs": [3], "uplink": [(3, 1)], "groups": [0x1003]},
    }
    for q in range(3):
        received, expected = aggregate(fabric, spec, HOSTS, slot=q, rnd=0, seed=q)
        assert_exact(received, expected, HOSTS, fabric.topo)

    status, out, err = cli("job", "list", "--topology", fabric.path)
    assert status == 0, err
    assert "job 3: 8 workers" in out and "s1 (leaf 0): 4 of the job's inputs: h1, h2, h3, h4" in out

    # a re-add is a new run: a fresh epoch on every switch, the same slots, and round 0 aggregates again
    renewed, spec = add(fabric, 3, HOSTS, "--window", 8, "--slots", 8)
    assert renewed["epoch"] != job["epoch"] and renewed["slot_base"] == job["slot_base"]
    received, expected = aggregate(fabric, spec, HOSTS, slot=0, rnd=0, seed=9)
    assert_exact(received, expected, HOSTS, fabric.topo)

    status, out, err = cli("job", "remove", "--topology", fabric.path, "--id", 3)
    assert status == 0 and "removed from s0, s1, s2" in out, err
    assert all(state == {"jobs": [], "uplink": [], "groups": []} for state in held(fabric).values())
    status, _, err = cli("job", "remove", "--topology", fabric.path, "--id", 3)
    assert status == 1 and "no job 3" in err


def test_survivors_of_a_failure_are_a_second_job_next_to_the_first(fabric):
    """What the runner's failover does: the seven survivors as a new job id, with the old job still in
    place (a survivor that is behind may still need its stored results)."""
    survivors = [h for h in HOSTS if h != "h3"]
    specs = {job_id: add(fabric, job_id, hosts, "--window", 16, "--slots", 16)[1]
             for job_id, hosts in ((1, HOSTS), (2, survivors))}  # fmt: skip
    status, out, _ = cli("job", "list", "--topology", fabric.path, "--json")
    listed = {j["job_id"]: j for j in json.loads(out)}
    assert (listed[1]["slot_base"], listed[2]["slot_base"]) == (0, 16)  # a range free on every switch
    assert listed[2]["parts"]["s1"]["n_workers"] == 3 and listed[2]["n_workers"] == 7
    received, expected = aggregate(fabric, specs[2], survivors, slot=5, rnd=0, seed=4)
    assert_exact(received, expected, survivors, fabric.topo)
    for job_id in (1, 2):
        assert cli("job", "remove", "--topology", fabric.path, "--id", job_id)[0] == 0


def test_a_job_too_large_for_the_lanes_is_refused_before_anything_is_written(fabric, tmp_path):
    status, _, err = cli("job", "add", "--topology", fabric.path, "--id", 4, "--workers", "h1,h2", "--slots", 2000)
    assert status == 2 and "argument --slots: 2000: must be 1..1024" in err
    status, _, err = cli("job", "add", "--topology", fabric.path, "--id", 4, "--workers", ",".join(HOSTS),
                         "--granularity", 40)  # fmt: skip
    assert status == 0, err  # 8 * 40 = 320: 16-bit lanes on all three switches
    assert cli("job", "remove", "--topology", fabric.path, "--id", 4)[0] == 0
    assert all(state["jobs"] == [] for state in held(fabric).values())
    status, _, err = cli("job", "add", "--topology", fabric.path, "--id", 4, "--workers", "h1,h9")
    assert status == 1 and "h9" in err
