"""Ordinary IPv4 forwarding: forwarding.p4's ipv4_lpm, from a topology.

Every switch gets a /32 route to every host (next hop: the port on a shortest path, the host's MAC as
destination) and, unless it aggregates, a /32 route to the service address toward the aggregating
switch; the topology model (controller/topology.py) computes them. Entries for other prefixes (added by
`thc-ctl apply`, say) are left alone.
"""

import contract
from controller.errors import BadInput
from controller.p4info import P4Info


def route_entries(p4info: P4Info, topology, switch: str) -> list:
    """The ipv4_lpm entries of `switch` in `topology`."""
    if switch not in topology.switches:
        raise BadInput(f"no switch '{switch}' in topology {topology.name} (switches: {', '.join(topology.switches)})")
    return [
        p4info.table_entry(
            contract.IPV4_LPM,
            {"hdr.ipv4.dstAddr": route.prefix},
            contract.IPV4_FORWARD,
            {"dstAddr": route.dst_mac, "port": route.port},
        )
        for route in topology.routes(switch)
    ]
