"""Smoke test of the project's program on the engine: p4/build/thc.json loads and forwards plain IPv4.

Deeper THC behaviour (aggregation, loss recovery) is tested with the program's own tests.
"""

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import raw

import contract
from emulator.switch import SoftwareSwitch
from tests.support import paths

THC_JSON = paths.THC_JSON

LPM = contract.IPV4_LPM
FWD = contract.IPV4_FORWARD


@pytest.fixture(scope="module")
def thc():
    return SoftwareSwitch.from_json(THC_JSON)


def test_thc_program_loads_with_its_tables(thc):
    tables = thc.program.tables
    assert LPM in tables and contract.JOBS in tables
    assert contract.VALUES in tables
    assert sum(1 for name in thc.program.registers if name.startswith(contract.ACC_PREFIX)) == contract.WORDS


def test_thc_program_forwards_plain_ipv4(thc):
    thc.table_add(LPM, [(0x0A000200, 24)], FWD, [0x0000000002AA, 4])
    pkt = (
        Ether(dst="00:00:00:00:01:01", src="00:00:00:00:00:01")
        / IP(src="10.0.1.1", dst="10.0.2.2", ttl=17)
        / UDP(sport=1, dport=2)
        / b"plain"
    )
    out = thc.process(1, raw(pkt))
    expected = pkt.copy()
    expected[Ether].src, expected[Ether].dst = "00:00:00:00:01:01", "00:00:00:00:02:aa"
    expected[IP].ttl = 16
    del expected[IP].chksum
    assert out == [(4, raw(Ether(raw(expected))))]
    assert thc.stats["exceptions"] == 0


def test_thc_program_drops_what_it_should(thc):
    arp = raw(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP())
    assert thc.process(1, arp) == []
    no_route = Ether() / IP(dst="192.0.2.1") / UDP()
    assert thc.process(1, raw(no_route)) == []
    assert thc.stats["exceptions"] == 0
