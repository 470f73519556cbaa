"""Topology files: the shipped ones load, bad ones are refused naming the wrong entry and its line."""

import json

import pytest

from controller.topology import Topology, TopologyError
from tests.support import paths

TOPO_DIR = paths.TOPOLOGIES

STAR = {
    "hosts": {
        "h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01"},
        "h2": {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02"},
    },
    "switches": {"s1": {"device_id": 0, "grpc_port": 50051}},
    "links": [["h1", "s1-p1"], ["h2", "s1-p2"]],
    "aggregation": {"switch": "s1", "service_ip": "10.0.0.254"},
}


def problems_of(data: dict) -> list[str]:
    """Parse ``data`` written one key per line, as people write these files, and return the problems."""
    with pytest.raises(TopologyError) as info:
        Topology.parse(json.dumps(data, indent=2), source="t.json")
    return info.value.problems


def changed(**parts) -> dict:
    data = json.loads(json.dumps(STAR))
    data.update(parts)
    return data


def test_shipped_topologies_load():
    star = Topology.load(TOPO_DIR / "star4.json")
    assert list(star.hosts) == ["h1", "h2", "h3", "h4"] and star.aggregation.switch == "s1"
    two = Topology.load(TOPO_DIR / "two_tier.json")
    agg = two.aggregation.switch
    # the point of this topology: some workers are not adjacent to the aggregating switch
    assert any(agg not in dict(two.neighbors(h)).values() for h in two.workers)


def test_star_routes_and_replicas():
    star = Topology.from_dict(STAR)
    assert [(r.prefix, r.port, r.dst_mac) for r in star.routes("s1")] == [
        ("10.0.0.1/32", 1, "08:00:00:00:00:01"),
        ("10.0.0.2/32", 2, "08:00:00:00:00:02"),
    ]
    assert [(r.port, r.rid) for r in star.replicas()] == [(1, 0), (2, 1)]


def test_two_tier_routes_cross_the_middle_switch():
    two = Topology.load(TOPO_DIR / "two_tier.json")
    # s1 sends the service address toward s2, and s2 reaches h1 through s1
    s1 = {r.prefix: r.port for r in two.routes("s1")}
    assert s1["10.0.0.254/32"] == two.port("s1", "s2")
    assert "10.0.0.254/32" not in {r.prefix for r in two.routes("s2")}
    h1_replica = next(r for r in two.replicas() if r.host == "h1")
    assert h1_replica.port == two.port("s2", "s1") and h1_replica.rid == 0
    assert two.path("h1", "h4") == ["h1", "s1", "s2", "h4"]


def test_star_grows_and_shrinks_with_workers():
    star = Topology.load(TOPO_DIR / "star4.json")
    eight = star.with_workers(8)
    assert list(eight.hosts) == [f"h{i}" for i in range(1, 9)]
    assert eight.hosts["h8"].address == "10.0.0.8" and eight.port("s1", "h8") == 8
    assert len({h.mac for h in eight.hosts.values()}) == 8
    assert list(star.with_workers(2).hosts) == ["h1", "h2"]
    with pytest.raises(TopologyError):
        star.with_workers(33)


def test_two_tier_cannot_grow_but_can_use_fewer_workers():
    two = Topology.load(TOPO_DIR / "two_tier.json")
    assert two.with_workers(3).workers == ("h1", "h2", "h3")
    with pytest.raises(TopologyError, match="not a star"):
        two.with_workers(6)


def test_link_options_both_forms():
    topo = Topology.from_dict(
        changed(links=[["h1", "s1-p1", {"bw": 50, "delay": "2ms", "loss": 1}], ["h2", "s1-p2", "500us", 10]])
    )
    first, second = topo.links
    assert first.params.mininet_kwargs() == {"bw": 50.0, "delay": "2ms", "loss": 1.0}
    assert second.params.mininet_kwargs() == {"bw": 10.0, "delay": "0.5ms"}
    assert topo.with_link_params(loss=5).links[1].params.loss == 5


def test_port_left_out_takes_the_lowest_free_one():
    topo = Topology.from_dict(changed(links=[["h1", "s1"], ["h2", "s1-p1"]]))
    assert topo.port("s1", "h2") == 1 and topo.port("s1", "h1") == 2


def test_unknown_node_in_a_link_names_the_link_and_its_line():
    (problem,) = problems_of(changed(links=[["h1", "s1-p1"], ["h9", "s1-p2"], ["h2", "s1-p3"]]))
    # json.dumps(indent=2): links[1][0] is on line 27 of the text
    assert problem.startswith("t.json:") and "links[1][0]" in problem and "unknown node 'h9'" in problem
    line = int(problem.split(":")[1])
    text = json.dumps(changed(links=[["h1", "s1-p1"], ["h9", "s1-p2"], ["h2", "s1-p3"]]), indent=2)
    assert '"h9"' in text.splitlines()[line - 1]


def test_duplicate_names_and_addresses():
    data = changed()
    data["hosts"]["h2"]["ip"] = "10.0.0.1/24"
    assert any("hosts.h2.ip" in p and "already used by h1" in p for p in problems_of(data))
    data = changed()
    data["hosts"]["h2"]["mac"] = "08:00:00:00:00:01"
    assert any("hosts.h2.mac" in p for p in problems_of(data))
    data = changed(switches={"s1": {}, "h1": {}})
    assert any("both a host and a switch" in p for p in problems_of(data))
    data = changed(switches={"s1": {"grpc_port": 50051}, "s2": {"grpc_port": 50051}})
    assert any("switches.s2.grpc_port" in p for p in problems_of(data))


def test_duplicate_keys_in_the_file_are_refused():
    text = (
        '{"hosts": {"h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01"},\n'
        '           "h1": {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02"}},\n'
        ' "switches": {"s1": {}}, "links": [["h1", "s1"]],\n'
        ' "aggregation": {"switch": "s1", "service_ip": "10.0.0.254"}}'
    )
    with pytest.raises(TopologyError, match=r"t.json:2: hosts.h1: 'h1' appears twice"):
        Topology.parse(text, source="t.json")


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("ip", "10.0.0.300/24", "IPv4 address with prefix"),
        ("ip", "10.0.0.1", "IPv4 address with prefix"),
        ("ip", "10.0.0.255/24", "broadcast"),
        ("mac", "08:00:00:00:01", "MAC address"),
        ("mac", "01:00:5e:00:00:01", "multicast MAC"),
    ],
)
def test_bad_host_fields(field, value, words):
    data = changed()
    data["hosts"]["h2"][field] = value
    (problem,) = problems_of(data)
    assert f"hosts.h2.{field}" in problem and words in problem


@pytest.mark.parametrize(
    "options, words",
    [
        ({"bw": 0}, "bw (Mbit/s)"),
        ({"bw": 5000}, "bw (Mbit/s)"),
        ({"loss": 100}, "loss (percent)"),
        ({"loss": -1}, "loss (percent)"),
        ({"delay": "fast"}, "delay must be"),
        ({"max_queue_size": 0}, "integer"),
        ({"jitter": "1ms"}, "unknown key 'jitter'"),
    ],
)
def test_bad_link_numbers(options, words):
    (problem,) = problems_of(changed(links=[["h1", "s1-p1"], ["h2", "s1-p2", options]]))
    assert "links[1][2]" in problem and words in problem


@pytest.mark.parametrize(
    "links, words",
    [
        ([["h1", "s1-p1"], ["h2", "s1-p1"]], "already used by links[0]"),
        ([["h1", "s1-p1"], ["h2", "h1"]], "links two hosts"),
        ([["h1", "s1-p1"], ["h2", "s1-p0"]], "port must be"),
        ([["h1", "s1-p1"], ["h2-p1", "s1-p2"]], "a host has one interface"),
        ([["h1", "s1-p1"]], "host h2 has no link"),
        ([["h1", "s1-p1"], ["h2", "s1-p2"], ["h1", "s1-p3"]], "duplicate link between h1 and s1"),
        ([["h1", "s1-p1"], "h2 s1"], "must be [node, node]"),
    ],
)
def test_bad_links(links, words):
    assert any(words in p for p in problems_of(changed(links=links)))


def test_host_with_two_links_is_refused():
    data = changed(
        switches={"s1": {}, "s2": {}}, links=[["h1", "s1-p1"], ["h2", "s1-p2"], ["s1-p3", "s2-p1"], ["h1", "s2-p2"]]
    )
    (problem,) = problems_of(data)
    assert "links[3]" in problem and "host h1 already has a link (links[0])" in problem


def test_unconnected_switch_is_refused():
    data = changed(switches={"s1": {}, "s2": {}}, links=[["h1", "s1-p1"], ["h2", "s2-p1"]])
    assert any("h2 is not connected to the aggregating switch s1" in p for p in problems_of(data))


def test_bad_aggregation():
    assert any(
        'unknown switch "s7"' in p
        for p in problems_of(changed(aggregation={"switch": "s7", "service_ip": "10.0.0.254"}))
    )
    assert any(
        "is host h1's address" in p
        for p in problems_of(changed(aggregation={"switch": "s1", "service_ip": "10.0.0.1"}))
    )
    assert any("missing 'aggregation'" in p for p in problems_of({k: v for k, v in STAR.items() if k != "aggregation"}))


def test_several_errors_are_reported_together():
    data = changed(links=[["h1", "s1-p1"], ["h2", "s9"]])
    data["hosts"]["h1"]["mac"] = "zz"
    problems = problems_of(data)
    assert any("hosts.h1.mac" in p for p in problems) and any("unknown node 's9'" in p for p in problems)


def test_invalid_json_names_the_line():
    with pytest.raises(TopologyError, match=r"t.json:3: not valid JSON"):
        Topology.parse('{\n "hosts": {},\n "links": [,]\n}', source="t.json")


def test_unknown_top_level_key_catches_typos():
    assert any("unknown key 'link'" in p for p in problems_of(changed(link=[])))
