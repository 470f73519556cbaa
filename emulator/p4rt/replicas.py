"""What multicast groups and clone sessions share: their replica lists and the rules of their updates.

A replica names its port either as `egress_port` (a number) or as `port` (a bytestring); it is read
back in the form it was written. A (port, instance) pair may appear once per group or session.
"""

from p4.v1 import p4runtime_pb2

from emulator.p4rt import bytestrings
from emulator.p4rt.errors import ALREADY_EXISTS, INVALID_ARGUMENT, NOT_FOUND, P4RTError

INSERT, MODIFY, DELETE = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE


def check_update(update_type, exists: bool, what: str) -> None:
    """INSERT of something new, MODIFY or DELETE of something that exists; nothing else."""
    if update_type not in (INSERT, MODIFY, DELETE):
        raise P4RTError(INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
    if update_type == INSERT and exists:
        raise P4RTError(ALREADY_EXISTS, f"{what} already exists")
    if update_type != INSERT and not exists:
        raise P4RTError(NOT_FOUND, f"{what} does not exist")


def decode(replicas, what: str) -> tuple[list, bool]:
    """([(port, instance)], whether the ports came as bytestrings) of a message's replicas."""
    pairs, port_as_bytes = [], False
    for r in replicas:
        if r.WhichOneof("port_kind") == "port":
            port = bytestrings.decode(r.port, 32, f"{what} replica port")
            port_as_bytes = True
        else:
            port = r.egress_port
        if (port, r.instance) in pairs:
            raise P4RTError(INVALID_ARGUMENT, f"{what}: replica (port {port}, instance {r.instance}) given twice")
        pairs.append((port, r.instance))
    return pairs, port_as_bytes


def encode(pairs, port_as_bytes: bool, replicas) -> None:
    """Add [(port, instance)] to a message's `replicas`, the ports in the form they were written."""
    for port, instance in pairs:
        r = replicas.add(instance=instance)
        if port_as_bytes:
            r.port = bytestrings.encode(port)
        else:
            r.egress_port = port
