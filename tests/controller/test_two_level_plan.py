"""controller.jobs.plan_two_level on topologies/leaf_spine8.json: the writes it plans, applied to three
in-process software switches wired as the topology's links, give every worker thc's reference sums."""

from __future__ import annotations

import ipaddress
from collections import deque

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import raw

from controller import contract, jobs
from controller.errors import BadInput
from controller.topology import Topology
from host_agent.layers import THC, THCIndices, THCResult8
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
        jobs.plan_two_level(topo, 1, list(topo.workers), 30)


@pytest.mark.skipif(not THC_JSON.exists(), reason="p4/build/thc.json not built")
def test_planned_writes_aggregate_all_eight_workers_exactly():
    topo = Topology.load(TOPOLOGY)
    plan = jobs.plan_two_level(topo, 5, list(topo.workers), int(max(TABLE.values)), n_slots=4, epoch=9)
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
    queue = deque()
    for w, host in enumerate(topo.workers):
        ip, mac = topo.service_of(host)
        h = topo.hosts[host]
        frame = raw(
            Ether(src=h.mac, dst=mac)
            / IP(src=h.address, dst=str(ip))
            / UDP(sport=40000, dport=contract.THC_UDP_PORT)
            / THC(version=1, op=contract.OP_THC, kind=0, job_id=5, worker_id=w, slot=1, round=0)
            / THCIndices(idx=[int(v) for v in idx[w]])
        )
        link = topo.links_of(host)[0]
        queue.append((link.other(host).node, link.other(host).port, frame))
    received = {}
    while queue:
        switch, port, frame = queue.popleft()
        for out_port, out in switches[switch].send(port, frame):
            link = next(link for link in topo.links_of(switch) if link.end(switch).port == out_port)
            peer = link.other(switch)
            if peer.node in topo.hosts:
                received[peer.node] = out
            else:
                queue.append((peer.node, peer.port, out))
    assert sorted(received) == sorted(topo.workers)
    expected = list(reference_aggregate(idx, TABLE))
    for host, frame in received.items():
        thc = Ether(frame)[THC]
        assert (thc.kind, thc.count, thc.worker_id) == (1, 8, topo.worker_id(host))
        assert Ether(frame)[IP].dst == topo.hosts[host].address
        assert list(thc[THCResult8].sums) == expected
    for sw in switches.values():
        sw.close()
