"""Parameter servers in topology files: the shipped placements load and route, bad ones are refused naming
the entry and its line, and a star that grows or shrinks keeps what still fits."""

import json

import pytest

from controller.topology import Topology, TopologyError
from tests.support import paths

STAR_PS = paths.TOPOLOGIES / "star4_ps.json"


def star_with(servers) -> dict:
    data = json.loads((paths.TOPOLOGIES / "star4.json").read_text())
    data["servers"] = servers
    return data


def problems_of(data: dict) -> list[str]:
    with pytest.raises(TopologyError) as info:
        Topology.parse(json.dumps(data, indent=2), source="t.json")
    return info.value.problems


def test_shipped_placements():
    topo = Topology.load(STAR_PS)
    assert topo.workers == ("h1", "h2", "h3", "h4")  # the server hosts p1..p4 are no workers
    assert {name: [s.host for s in servers] for name, servers in topo.servers.items()} == {
        "dedicated1": ["p1"],
        "dedicated4": ["p1", "p2", "p3", "p4"],
        "colocated4": ["h1", "h2", "h3", "h4"],
    }
    assert topo.placement() == topo.servers["dedicated1"]  # the first one is the default
    with pytest.raises(KeyError, match="no placement 'nine'.*dedicated1, dedicated4, colocated4"):
        topo.placement("nine")
    with pytest.raises(KeyError, match="has no parameter servers"):
        Topology.load(paths.TOPOLOGIES / "star4.json").placement()
    assert Topology.from_dict(topo.to_dict()) == topo


def test_every_switch_routes_each_server_address_to_its_host():
    topo = Topology.load(STAR_PS)
    routes = {r.prefix: (r.port, r.dst_mac) for r in topo.routes("s1")}
    for server in topo.all_servers():
        assert routes[f"{server.service_ip}/32"] == (topo.port("s1", server.host), server.service_mac)
    assert routes["10.0.0.211/32"] == routes["10.0.0.1/32"][:1] + ("02:00:00:00:02:11",)  # colocated: h1's port


def test_growing_keeps_the_server_hosts_and_shrinking_drops_placements_that_no_longer_fit():
    topo = Topology.load(STAR_PS)
    eight = topo.with_workers(8)
    assert eight.workers == tuple(f"h{i}" for i in range(1, 9))
    assert {"p1", "p4"} <= set(eight.hosts) and eight.port("s1", "p1") == 33
    assert list(eight.servers) == ["dedicated1", "dedicated4", "colocated4"]
    two = topo.with_workers(2)
    assert list(two.servers) == ["dedicated1"]  # four servers for two workers, and h3, h4 are gone


@pytest.mark.parametrize(
    "servers, words",
    [
        ({"one": [{"host": "h9", "service_ip": "10.0.0.201", "service_mac": "02:00:00:00:02:01"}]}, "unknown host"),
        ({"one": [{"host": "h1", "service_ip": "10.0.0.2", "service_mac": "02:00:00:00:02:01"}]}, "host h2's address"),
        ({"one": [{"host": "h1", "service_ip": "10.0.0.254", "service_mac": "02:00:00:00:02:01"}]}, "aggregating"),
        ({"one": [{"host": "h1", "service_ip": "10.0.0.201"}]}, "missing 'service_mac'"),
        ({"one": []}, "1..4 servers"),
        ({"One": [{"host": "h1", "service_ip": "10.0.0.201", "service_mac": "02:00:00:00:02:01"}]}, "placement name"),
        (
            {
                "one": [{"host": "h1", "service_ip": "10.0.0.201", "service_mac": "02:00:00:00:02:01"}],
                "two": [{"host": "h2", "service_ip": "10.0.0.201", "service_mac": "02:00:00:00:02:02"}],
            },
            "server one-h1's service address",
        ),
        (
            {
                "one": [
                    {"host": "h1", "service_ip": "10.0.0.201", "service_mac": "02:00:00:00:02:01"},
                    {"host": "h1", "service_ip": "10.0.0.202", "service_mac": "02:00:00:00:02:02"},
                ]
            },
            "already holds a server of one",
        ),
        ({"one": [{"host": "h1", "ip": "10.0.0.201", "service_mac": "02:00:00:00:02:01"}]}, "unknown key 'ip'"),
    ],
)
def test_bad_servers_are_refused_naming_the_entry_and_its_line(servers, words):
    problems = problems_of(star_with(servers))
    assert any(words in p and p.startswith("t.json:") and "servers" in p for p in problems), problems
