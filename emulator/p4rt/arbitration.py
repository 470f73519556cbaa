"""StreamChannel client arbitration (spec "Client Arbitration and Controller Replication").

For each (device_id, role) the primary is the live stream whose election id equals the highest id the
server has ever seen for that pair; every other stream is a backup. Whenever the primary changes (or
disconnects), every stream of the pair is told with a MasterArbitrationUpdate: OK for the primary,
ALREADY_EXISTS for backups while a primary exists, NOT_FOUND when there is none. A stream without an
election id ranks below every id and never becomes primary.
"""

import queue
import threading

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from emulator.p4rt.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, NOT_FOUND, P4RTError

_UNSET = -1  # ranks below (0, 0)


class Session:
    """One StreamChannel: its identity after arbitration and the queue of messages to send it."""

    OUTBOX_LIMIT = 4096  # packet-ins beyond this are dropped rather than piling up in memory

    def __init__(self, peer: str = ""):
        self.peer = peer
        self.outbox = queue.Queue(self.OUTBOX_LIMIT)
        self.device_id = None
        self.role = None
        self.election_id = None  # int, or _UNSET
        self.config = None

    @property
    def arbitrated(self) -> bool:
        return self.device_id is not None

    def send(self, message) -> bool:
        try:
            self.outbox.put_nowait(message)
            return True
        except queue.Full:
            return False


def election_id_of(uint128, present: bool) -> int:
    return (uint128.high << 64 | uint128.low) if present else _UNSET


class Arbitrator:
    def __init__(self, device_ids):
        self._device_ids = set(device_ids)
        self._lock = threading.Lock()
        self._sessions = {}  # (device_id, role) -> list[Session]
        self._highest = {}  # (device_id, role) -> highest election id seen

    def update(self, session: Session, arbitration) -> None:
        """Handle a MasterArbitrationUpdate from `session`; raise P4RTError to end the stream."""
        device_id = arbitration.device_id
        role = arbitration.role.name
        eid = election_id_of(arbitration.election_id, arbitration.HasField("election_id"))
        if arbitration.role.HasField("config"):
            raise P4RTError(INVALID_ARGUMENT, "role config is not supported: every role has full access")
        with self._lock:
            if not session.arbitrated:
                if device_id not in self._device_ids:
                    raise P4RTError(NOT_FOUND, f"unknown device id {device_id}")
            elif device_id != session.device_id:
                raise P4RTError(FAILED_PRECONDITION, "device id differs from this stream's")
            elif role != session.role:
                raise P4RTError(FAILED_PRECONDITION, "role differs from this stream's; open a new stream")
            key = (device_id, role)
            peers = self._sessions.setdefault(key, [])
            if eid != _UNSET and any(s.election_id == eid for s in peers if s is not session):
                raise P4RTError(INVALID_ARGUMENT, f"election id {eid} is used by another live controller")
            was_primary = self._primary(key) is session
            session.device_id, session.role, session.election_id = device_id, role, eid
            if session not in peers:
                peers.append(session)
            highest = self._highest.get(key, _UNSET)
            if eid != _UNSET and eid >= highest:
                self._highest[key] = eid
                self._notify(key, peers)
            elif was_primary:  # the primary downgraded itself
                self._notify(key, peers)
            else:
                self._notify(key, [session])

    def remove(self, session: Session) -> None:
        """Forget a closed stream; if it was the primary, tell the others there is none."""
        if not session.arbitrated:
            return
        key = (session.device_id, session.role)
        with self._lock:
            peers = self._sessions.get(key, [])
            was_primary = self._primary(key) is session
            if session in peers:
                peers.remove(session)
            if was_primary:
                self._notify(key, peers)

    def is_primary(self, device_id: int, role: str, election_id: int) -> bool:
        """True when (device_id, role, election_id) names the current primary (Write check)."""
        with self._lock:
            primary = self._primary((device_id, role))
            return primary is not None and primary.election_id == election_id

    def primary_session(self, device_id: int, role: str = "") -> Session | None:
        with self._lock:
            return self._primary((device_id, role))

    def _primary(self, key):
        highest = self._highest.get(key)
        if highest is None or highest == _UNSET:
            return None
        for s in self._sessions.get(key, []):
            if s.election_id == highest:
                return s
        return None

    def _notify(self, key, targets):
        primary = self._primary(key)
        highest = self._highest.get(key, _UNSET)
        for s in targets:
            msg = p4runtime_pb2.StreamMessageResponse()
            arb = msg.arbitration
            arb.device_id = key[0]
            if key[1]:
                arb.role.name = key[1]
            if highest != _UNSET:
                arb.election_id.high = highest >> 64
                arb.election_id.low = highest & ((1 << 64) - 1)
            if primary is s:
                arb.status.code = code_pb2.OK
                arb.status.message = "primary"
            elif primary is not None:
                arb.status.code = code_pb2.ALREADY_EXISTS
                arb.status.message = "backup: another controller is primary"
            else:
                arb.status.code = code_pb2.NOT_FOUND
                arb.status.message = "backup: there is no primary"
            s.send(msg)
