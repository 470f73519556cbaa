"""The engine's control-plane API: table entries, defaults, registers, counters, multicast groups,
and their refusals (EntryError naming the object and the reason, with a P4Runtime-like code)."""

import threading

import pytest

from emulator.errors import EntryError
from emulator.program import TableEntry
from emulator.switch import SoftwareSwitch
from tests.support.paths import FIXTURE_BUILD

BUILD = FIXTURE_BUILD
LPM, FWD = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
CLS, SET_PORT = "TagIngress.classify", "TagIngress.set_port"


@pytest.fixture
def router():
    return SoftwareSwitch.from_json(BUILD / "ipv4_forward.json")


@pytest.fixture
def tagsw():
    return SoftwareSwitch.from_json(BUILD / "counter_register_multicast.json")


def test_add_modify_delete_and_list_entries(router):
    router.table_add(LPM, [(0x0A000000, 8)], FWD, [1, 2])
    router.table_add(LPM, [(0x0B000000, 8)], "MyIngress.drop", [])
    assert router.table_entries(LPM) == [
        TableEntry([(0x0A000000, 8)], FWD, [1, 2], None),
        TableEntry([(0x0B000000, 8)], "MyIngress.drop", [], None),
    ]
    router.table_modify(LPM, [(0x0A000000, 8)], FWD, [3, 4])
    assert router.table_entries(LPM)[0].params == [3, 4]
    router.table_delete(LPM, [(0x0A000000, 8)])
    assert [e.action for e in router.table_entries(LPM)] == ["MyIngress.drop"]
    router.table_clear(LPM)
    assert router.table_entries(LPM) == []


@pytest.mark.parametrize(
    "keys, action, params, priority, match, code",
    [
        ([(0x0A000000, 8)], "MyIngress.nope", [], None, "not an action of this table", "INVALID_ARGUMENT"),
        ([(0x0A000000, 8)], FWD, [1], None, "takes 2 parameter", "INVALID_ARGUMENT"),
        ([(0x0A000000, 8)], FWD, [1, 512], None, "'port' = 512 does not fit in 9 bits", "INVALID_ARGUMENT"),
        ([(1 << 32, 8)], FWD, [1, 2], None, "does not fit in 32 bits", "INVALID_ARGUMENT"),
        ([(0x0A000000, 33)], FWD, [1, 2], None, "prefix length 33", "INVALID_ARGUMENT"),
        ([0x0A000000], FWD, [1, 2], None, "is lpm: give \\(value, prefix_len\\)", "INVALID_ARGUMENT"),
        ([], FWD, [1, 2], None, "expected 1 key field", "INVALID_ARGUMENT"),
        ([(0x0A000000, 8)], FWD, [1, 2], 5, "priority must be None", "INVALID_ARGUMENT"),
    ],
)
def test_bad_entries_are_refused_with_the_reason(router, keys, action, params, priority, match, code):
    with pytest.raises(EntryError, match=match) as exc:
        router.table_add(LPM, keys, action, params, priority=priority)
    assert "MyIngress.ipv4_lpm" in str(exc.value) and exc.value.code == code


def test_duplicate_missing_and_unknown(router, tagsw):
    router.table_add(LPM, [(0x0A000000, 8)], FWD, [1, 2])
    with pytest.raises(EntryError, match="already exists") as exc:
        router.table_add(LPM, [(0x0A000001, 8)], FWD, [1, 2])  # same prefix once masked
    assert exc.value.code == "ALREADY_EXISTS"
    with pytest.raises(EntryError, match="no entry") as exc:
        router.table_modify(LPM, [(0x0C000000, 8)], FWD, [1, 2])
    assert exc.value.code == "NOT_FOUND"
    with pytest.raises(EntryError, match="no entry"):
        router.table_delete(LPM, [(0x0C000000, 8)])
    with pytest.raises(EntryError, match="unknown table 'nope'") as exc:
        router.table_add("nope", [], FWD, [])
    assert exc.value.code == "NOT_FOUND"
    with pytest.raises(EntryError, match="priority is required"):
        tagsw.table_add(CLS, [(1, 0xFF), (0, 0)], SET_PORT, [1])
    with pytest.raises(EntryError, match="is ternary: give \\(value, mask\\)"):
        tagsw.table_add(CLS, [1, (0, 0)], SET_PORT, [1], priority=1)
    tagsw.table_add(CLS, [(1, 0xFF), (0, 0)], SET_PORT, [1], priority=1)
    tagsw.table_add(CLS, [(1, 0xFF), (0, 0)], SET_PORT, [2], priority=2)  # other priority: other entry
    tagsw.table_add(CLS, [(0x01, 0x0F), (0, 0)], SET_PORT, [3], priority=3)
    with pytest.raises(EntryError, match="already exists"):
        tagsw.table_add(CLS, [(0x11, 0x0F), (0, 0)], SET_PORT, [1], priority=3)  # same once masked


def test_table_full_is_resource_exhausted(tagsw):
    for i in range(16):
        tagsw.table_add("TagIngress.by_value", [(i, i)], SET_PORT, [1], priority=1)
    with pytest.raises(EntryError, match="full") as exc:
        tagsw.table_add("TagIngress.by_value", [(99, 99)], SET_PORT, [1], priority=1)
    assert exc.value.code == "RESOURCE_EXHAUSTED"


def test_defaults(router):
    assert router.table_get_default(LPM) == ("MyIngress.drop", [])
    router.table_set_default(LPM, "NoAction", [])
    assert router.table_get_default(LPM) == ("NoAction", [])
    with pytest.raises(EntryError, match="takes 2 parameter"):
        router.table_set_default(LPM, FWD, [])
    router.table_reset_default(LPM)
    assert router.table_get_default(LPM) == ("MyIngress.drop", [])


def test_registers(tagsw):
    reg = "TagIngress.acc"
    tagsw.register_write(reg, 15, 0xFFFFFFFF)
    assert tagsw.register_read(reg, 15) == 0xFFFFFFFF
    for bad_index in (16, -1):
        with pytest.raises(EntryError, match=r"register 'TagIngress.acc': index .* outside 0..15"):
            tagsw.register_read(reg, bad_index)
    with pytest.raises(EntryError, match="does not fit in 32 bits"):
        tagsw.register_write(reg, 0, 1 << 32)
    with pytest.raises(EntryError, match="unknown register"):
        tagsw.register_read("TagIngress.nope", 0)
    tagsw.register_reset(reg)
    assert tagsw.register_read(reg, 15) == 0


def test_counters(tagsw):
    ctr = "TagIngress.port_pkts"
    tagsw.counter_write(ctr, 3, 10, 1000)
    assert tagsw.counter_read(ctr, 3) == (10, 1000)
    with pytest.raises(EntryError, match="outside 0..7"):
        tagsw.counter_read(ctr, 8)
    with pytest.raises(EntryError, match="direct counter of table 'TagIngress.classify'"):
        tagsw.counter_read("TagIngress.classify_hits", 0)
    tagsw.table_add(CLS, [(1, 0xFF), (0, 0)], SET_PORT, [1], priority=1)
    tagsw.direct_counter_write(CLS, [(1, 0xFF), (0, 0)], 5, 50, priority=1)
    assert tagsw.direct_counter_read(CLS, [(1, 0xFF), (0, 0)], priority=1) == (5, 50)
    tagsw.counter_reset("TagIngress.classify_hits")
    assert tagsw.direct_counter_read(CLS, [(1, 0xFF), (0, 0)], priority=1) == (0, 0)
    with pytest.raises(EntryError, match="no entry"):
        tagsw.direct_counter_read(CLS, [(2, 0xFF), (0, 0)], priority=1)


def test_multicast_groups(tagsw):
    tagsw.mc_group_set(1, [(1, 0), (2, 0)])
    tagsw.mc_group_set(1, [(3, 7)])  # set replaces
    assert tagsw.mc_groups() == {1: [(3, 7)]}
    for gid, replicas, match in (
        (0, [], "outside 1..65535"),
        (1, [(512, 0)], "port 512 outside 0..511"),
        (1, [(1, 0), (1, 0)], "duplicate replica"),
        (2, [(1,)], "not \\(egress port"),
    ):
        with pytest.raises(EntryError, match=match):
            tagsw.mc_group_set(gid, replicas)
    with pytest.raises(EntryError, match="does not exist") as exc:
        tagsw.mc_group_delete(9)
    assert exc.value.code == "NOT_FOUND"


def test_control_plane_calls_from_another_thread_while_packets_flow(router):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import raw

    frame = raw(Ether() / IP(dst="10.0.0.1") / UDP())
    stop = threading.Event()
    errors = []

    def writer():
        i = 0
        while not stop.is_set():
            try:
                router.table_add(LPM, [(i << 8, 24)], FWD, [1, 2])
                router.table_delete(LPM, [(i << 8, 24)])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(300):
            router.process(1, frame)
    finally:
        stop.set()
        t.join()
    assert errors == [] and router.stats["exceptions"] == 0
