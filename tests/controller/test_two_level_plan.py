"""controller.two_level on topologies/leaf_spine8.json: the writes it plans, applied to three in-process
software switches wired as the topology's links, give every worker thc's reference sums."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from controller import two_level
from controller.errors import BadInput
from controller.topology import Topology
from host_agent.layers import THC, THCResult8
from tests.support.leaf_spine import walk, worker_request
from tests.support.paths import REPO
from tests.support.targets import THC_JSON, SoftwareTarget, program_summary
from thc import make_table
from thc.aggregate import reference_aggregate

TOPOLOGY = REPO / "topologies" / "leaf_spine8.json"
TABLE = make_table(bits=4, granularity=30, clip=1 / 32, kind="optimal")


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
        two_level.plan(topo, 1, list(topo.workers), 30)


@pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built")
def test_planned_writes_aggregate_all_eight_workers_exactly():
    topo = Topology.load(TOPOLOGY)
    plan = two_level.fresh_writes(
        two_level.plan(topo, 5, list(topo.workers), int(max(TABLE.values)), n_slots=4, epoch=9)
    )
    switches = {name: SoftwareTarget() for name in topo.switches}
    for name, sw in switches.items():
        for route in topo.routes(name):
            net = ipaddress.IPv4Network(route.prefix)
            sw.add_route(int(net.network_address), net.prefixlen, int(route.dst_mac.replace(":", ""), 16), route.port)
        sw.apply(plan[name])
    for leaf in topo.aggregation.leaves:
        switches[leaf.switch].install_table(TABLE.values, TABLE.bits)

    coords = program_summary()["coords"]
    rng = np.random.default_rng(7)
    idx = [rng.integers(0, 16, size=coords, dtype=np.uint8) for _ in topo.workers]
    requests = [(host, worker_request(topo, host, 5, 1, 0, idx[w])) for w, host in enumerate(topo.workers)]
    received = {
        host: frames[0] for host, frames in walk(topo, lambda sw, port, f: switches[sw].send(port, f), requests).items()
    }
    assert sorted(received) == sorted(topo.workers)
    expected = list(reference_aggregate(idx, TABLE))
    for host, frame in received.items():
        thc = Ether(frame)[THC]
        assert (thc.kind, thc.count, thc.worker_id) == (1, 8, topo.worker_id(host))
        assert Ether(frame)[IP].dst == topo.hosts[host].address
        assert list(thc[THCResult8].sums) == expected
    for sw in switches.values():
        sw.close()
