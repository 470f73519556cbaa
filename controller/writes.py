"""Control-plane writes in the program's own terms, applied over P4Runtime or straight to an in-process engine.

The planners (jobs.py, lookup_tables.py) decide *what* the switch must hold and return `TableWrite` and
`GroupWrite` values: a table or multicast group, match values in the table's key order and action
parameters in the action's order, all plain integers (contract.py gives both orders). Two writers carry
them out, so there is one way to program a job whoever runs the switch:

- `to_updates` turns them into P4Runtime `Update`s for `SwitchSession` (any switch: ours, BMv2, hardware);
- `EngineWriter` applies them to an `emulator.switch.SoftwareSwitch` in this process (the in-process
  cluster of harness/sim.py, the packet tests, the benchmarks), with no gRPC in between.
"""

from __future__ import annotations

from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

import contract
from controller.p4info import P4Info

INSERT, MODIFY, DELETE = "insert", "modify", "delete"
_P4RT_KIND = {
    INSERT: p4runtime_pb2.Update.INSERT,
    MODIFY: p4runtime_pb2.Update.MODIFY,
    DELETE: p4runtime_pb2.Update.DELETE,
}


@dataclass(frozen=True)
class TableWrite:
    """One table entry to insert, modify or delete. `match`: one value per key field, in key order
    (an int; (value, prefix length) for lpm); `params`: one int per action parameter, in order.
    `default`: the table's default entry (no match; always a MODIFY)."""

    kind: str
    table: str
    match: tuple
    action: str | None = None
    params: tuple[int, ...] = ()
    default: bool = False


@dataclass(frozen=True)
class GroupWrite:
    """A multicast group of the packet replication engine: (egress port, replica id) per copy."""

    kind: str
    group_id: int
    replicas: tuple[tuple[int, int], ...] = ()


Write = TableWrite | GroupWrite


# ---- P4Runtime ----------------------------------------------------------------------------------


def to_update(p4info: P4Info, write: Write) -> p4runtime_pb2.Update:
    """The P4Runtime Update of one write, names resolved through the P4Info."""
    if isinstance(write, GroupWrite):
        pre = p4runtime_pb2.PacketReplicationEngineEntry()
        pre.multicast_group_entry.multicast_group_id = write.group_id
        for port, rid in write.replicas:
            pre.multicast_group_entry.replicas.add(egress_port=port, instance=rid)
        return p4runtime_pb2.Update(
            type=_P4RT_KIND[write.kind], entity=p4runtime_pb2.Entity(packet_replication_engine_entry=pre)
        )
    spec = contract.table_spec(write.table)
    match = {name: value for (name, _, _), value in zip(spec.keys, write.match)}
    names = spec.default_params if write.default else spec.params
    params = {name: value for (name, _), value in zip(names, write.params)} if write.action else None
    entry = p4info.table_entry(write.table, match, write.action, params, is_default=write.default)
    return p4runtime_pb2.Update(type=_P4RT_KIND[write.kind], entity=p4runtime_pb2.Entity(table_entry=entry))


def to_updates(p4info: P4Info, writes: list[Write]) -> list[p4runtime_pb2.Update]:
    """Updates for `writes`, in order."""
    return [to_update(p4info, write) for write in writes]


# ---- in-process engine --------------------------------------------------------------------------


class EngineWriter:
    """Applies writes to an in-process SoftwareSwitch through its control API (what its P4Runtime server
    does after decoding a Write request)."""

    def __init__(self, engine):
        self.engine = engine

    def apply(self, writes: list[Write]) -> None:
        sw = self.engine
        for write in writes:
            if isinstance(write, GroupWrite):
                if write.kind == DELETE:
                    sw.mc_group_delete(write.group_id)
                else:
                    sw.mc_group_set(write.group_id, list(write.replicas))
            elif write.default:
                sw.table_set_default(write.table, write.action, list(write.params))
            elif write.kind == INSERT:
                sw.table_add(write.table, list(write.match), write.action, list(write.params))
            elif write.kind == MODIFY:
                sw.table_modify(write.table, list(write.match), write.action, list(write.params))
            else:
                sw.table_delete(write.table, list(write.match))
