"""p4runtime-shell, unmodified, as a controller of a switch under test: one session helper, so that tests
and benchmarks push a pipeline the same way (device 0, election id (0, 1), the shell's global client).

    with shell_session(address, p4info, program) as sh:
        sh.TableEntry(...)...
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def shell_session(address: str, p4info, program):
    """Set the pipeline over P4Runtime at `address` and yield the shell module; tear its client down after."""
    import p4runtime_sh.shell as sh

    sh.setup(
        device_id=0,
        grpc_addr=address,
        election_id=(0, 1),
        config=sh.FwdPipeConfig(str(p4info), str(program)),
        verbose=False,
    )
    try:
        yield sh
    finally:
        sh.teardown()


def route_to_port_2(address: str, p4info, program) -> None:
    """Push ipv4_forward.p4 and route 10.0.2.0/24 out of port 2 (to 08:00:00:00:02:02), as its tutorial does."""
    with shell_session(address, p4info, program) as sh:
        route = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
        route.match["hdr.ipv4.dstAddr"] = "10.0.2.0/24"
        route.action["dstAddr"] = "08:00:00:00:02:02"
        route.action["port"] = "2"
        route.insert()
