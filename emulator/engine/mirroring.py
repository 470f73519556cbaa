"""Mirroring sessions: where `clone` / `clone_preserving_field_list` send their copy.

simple_switch (simple_switch.cpp, MirroringSessions) keeps per session an optional egress port and
an optional multicast group; a clone to a session that is not configured makes no copy. Session ids
run from 0 to 32767 (RegisterAccess::MAX_MIRROR_SESSION_ID); P4Runtime's CloneSessionEntry uses
1..32767 and reaches the same table through emulator/p4rt/clone_sessions.py.
"""

from typing import NamedTuple

from emulator.errors import EntryError

MAX_SESSION_ID = (1 << 15) - 1
SESSION_VALID = 1 << 15  # what the clone primitives OR into the session id (see primitives.py)
SESSION_MASK = SESSION_VALID - 1

PKT_INSTANCE_TYPE_INGRESS_CLONE = 1
PKT_INSTANCE_TYPE_EGRESS_CLONE = 2


class MirrorSession(NamedTuple):
    egress_port: int | None  # a copy to this port ...
    mgid: int | None  # ... and/or one copy per replica of this multicast group (group first)


def _check_id(session_id):
    if not isinstance(session_id, int) or isinstance(session_id, bool) or not 0 <= session_id <= MAX_SESSION_ID:
        raise EntryError(f"mirror session id {session_id!r} outside 0..{MAX_SESSION_ID}")


class MirrorSessions:
    def __init__(self, port_bits: int = 9):
        self.sessions = {}  # session id -> MirrorSession
        self.port_max = (1 << port_bits) - 1

    def set(self, session_id, egress_port=None, mgid=None) -> None:
        """Add or replace a session (simple_switch_CLI's mirroring_add / mirroring_add_mc)."""
        _check_id(session_id)
        if egress_port is None and mgid is None:
            raise EntryError(f"mirror session {session_id}: give an egress port, a multicast group or both")
        for what, v, top in (("egress port", egress_port, self.port_max), ("multicast group", mgid, 0xFFFF)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= top):
                raise EntryError(f"mirror session {session_id}: {what} {v!r} outside 0..{top}")
        self.sessions[session_id] = MirrorSession(egress_port, mgid)

    def delete(self, session_id) -> None:
        _check_id(session_id)
        if self.sessions.pop(session_id, None) is None:
            raise EntryError(f"mirror session {session_id} does not exist", "NOT_FOUND")

    def snapshot(self) -> dict:
        return dict(self.sessions)
