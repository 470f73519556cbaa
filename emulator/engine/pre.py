"""The packet replication engine: multicast groups of (egress port, replication id) pairs.

BMv2 (simple_pre) stores a group as nodes (one per rid) with port bitmaps; through P4Runtime, PI
creates those nodes from the group's replica list. The order in which replicas leave differs between
BMv2's egress threads anyway, so the engine keeps the control plane's order.
"""

from emulator.errors import EntryError

MAX_GROUP = 0xFFFF


class ReplicationEngine:
    def __init__(self, port_bits: int = 9, rid_bits: int = 16):
        self.groups = {}  # group id -> tuple of (port, rid)
        self.port_max = (1 << port_bits) - 1
        self.rid_max = (1 << rid_bits) - 1

    def set_group(self, group_id, replicas) -> None:
        if not isinstance(group_id, int) or isinstance(group_id, bool) or not 1 <= group_id <= MAX_GROUP:
            raise EntryError(f"multicast group id {group_id!r} outside 1..{MAX_GROUP}")
        seen = set()
        clean = []
        for replica in replicas:
            try:
                port, rid = replica
            except (TypeError, ValueError):
                raise EntryError(f"multicast group {group_id}: replica {replica!r} is not (egress port, rid)") from None
            for what, v, top in (("port", port, self.port_max), ("rid", rid, self.rid_max)):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= top:
                    raise EntryError(f"multicast group {group_id}: {what} {v!r} outside 0..{top}")
            if (port, rid) in seen:
                raise EntryError(f"multicast group {group_id}: duplicate replica (port {port}, rid {rid})")
            seen.add((port, rid))
            clean.append((port, rid))
        self.groups[group_id] = tuple(clean)

    def delete_group(self, group_id) -> None:
        if group_id not in self.groups:
            raise EntryError(f"multicast group {group_id!r} does not exist", "NOT_FOUND")
        del self.groups[group_id]

    def snapshot(self) -> dict:
        return {g: list(r) for g, r in self.groups.items()}
