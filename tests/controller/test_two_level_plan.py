"""controller.two_level on topologies/leaf_spine8.json: the writes it plans, applied to three in-process
software switches wired as the topology's links, give every worker thc's reference sums."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest

from contract.job import JobSpec
from controller import two_level
from controller.errors import BadInput
from controller.topology import Topology
from harness import frames as tp
from harness.leaf_spine import walk, worker_request
from harness.switches import SoftwareTarget
from tests.support.paths import REPO, THC_JSON
from thc.aggregate import reference_aggregate

TOPOLOGY = REPO / "topologies" / "leaf_spine8.json"


def test_the_topology_file_selects_two_levels_and_each_hosts_leaf():
    topo = Topology.load(TOPOLOGY)
    assert topo.two_level and topo.aggregation.switch == "s0"
    assert [topo.leaf_of(h).switch for h in topo.workers] == ["s1"] * 4 + ["s2"] * 4
    assert str(topo.service_of("h5")[0]) == "10.0.0.252"
    assert Topology.from_dict(topo.to_dict()) == topo
    assert not Topology.load(REPO / "topologies" / "two_tier.json").two_level


def test_a_leaf_must_be_a_known_switch_other_than_the_spine():
    data = Topology.load(TOPOLOGY).to_dict()
    data["aggregation"]["leaves"]["s0"] = {"service_ip": "10.0.0.250"}
    data["aggregation"]["leaves"]["s9"] = {"service_ip": "10.0.0.249"}
    with pytest.raises(ValueError) as err:
        Topology.from_dict(data)
    assert "spine" in str(err.value) and "s9" in str(err.value)


def test_one_level_topologies_are_refused():
    topo = Topology.load(REPO / "topologies" / "two_tier.json")
    with pytest.raises(BadInput):
        two_level.plan(topo, JobSpec(job_id=1, workers=4), list(topo.workers))


@pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built")
def test_planned_writes_aggregate_all_eight_workers_exactly():
    topo = Topology.load(TOPOLOGY)
    spec = JobSpec(job_id=5, workers=8, window=4, slots=4, key=0xABCD)
    plan = two_level.fresh_writes(two_level.plan(topo, spec, list(topo.workers), epoch=9))
    switches = {name: SoftwareTarget() for name in topo.switches}
    for name, sw in switches.items():
        for route in topo.routes(name):
            net = ipaddress.IPv4Network(route.prefix)
            sw.add_route(int(net.network_address), net.prefixlen, int(route.dst_mac.replace(":", ""), 16), route.port)
        sw.apply(plan[name])

    rng = np.random.default_rng(7)
    idx = [rng.integers(0, 16, size=spec.coords_per_request, dtype=np.uint8) for _ in topo.workers]
    requests = [(host, worker_request(topo, host, spec, 1, 0, idx[w])) for w, host in enumerate(topo.workers)]
    received = {
        host: frames[0] for host, frames in walk(topo, lambda sw, port, f: switches[sw].send(port, f), requests).items()
    }
    assert sorted(received) == sorted(topo.workers)
    expected = [int(v) for v in reference_aggregate(idx, spec.codec.make_table())]
    for host, frame in received.items():
        thc = tp.Parsed.of(frame)
        assert (thc.kind, thc.count, thc.worker_id, thc.key) == (1, 8, topo.worker_id(host), spec.key)
        assert thc.dst_ip == topo.hosts[host].address
        assert thc.lanes() == expected
    for sw in switches.values():
        sw.close()
