"""CloneSessionEntry (PacketReplicationEngineEntry.clone_session_entry) <-> the engine's mirroring.

As PI does for simple_switch_grpc (proto/frontend/src/pre_clone_mgr.cpp, bmv2's pi_clone_imp.cpp):
session ids 1..32767; each session's replicas become the multicast group 32768 + session id, and
the mirror session sends to that group, so every clone leaves as a replica (its egress_rid is the
replica's instance, its instance_type the clone's). Those groups are left out of wildcard multicast
group reads. `class_of_service` and `packet_length_bytes` other than 0 are UNIMPLEMENTED: simple_switch
has neither (its mirroring sessions cannot truncate). PI answers UNIMPLEMENTED for the first but
UNKNOWN for the second (bmv2's _pi_clone_session_set refuses a max_packet_length as "not implemented
by target", which PI's PreCloneMgr reports as UNKNOWN); the spec's code for a feature a target lacks
is UNIMPLEMENTED.
"""

from p4.v1 import p4runtime_pb2

from emulator.p4rt import replicas
from emulator.p4rt.errors import INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, P4RTError
from emulator.p4rt.replicas import DELETE

FIRST_RESERVED_GROUP = 1 << 15
MIN_SESSION, MAX_SESSION = 1, (1 << 15) - 1


def group_of(session_id: int) -> int:
    return FIRST_RESERVED_GROUP + session_id


def write_clone_session(pipe, update_type, session) -> None:
    sid = session.session_id
    what = f"clone session {sid}"
    if not MIN_SESSION <= sid <= MAX_SESSION:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: id outside {MIN_SESSION}..{MAX_SESSION}")
    replicas.check_update(update_type, sid in pipe.clone_sessions, what)
    engine = pipe.engine
    if update_type == DELETE:
        engine.mirroring_delete(sid)
        engine.mc_group_delete(group_of(sid))
        del pipe.clone_sessions[sid]
        return
    if session.class_of_service:
        raise P4RTError(UNIMPLEMENTED, f"{what}: class_of_service is not supported (simple_switch neither)")
    if session.packet_length_bytes:
        raise P4RTError(
            UNIMPLEMENTED, f"{what}: packet_length_bytes is not supported (simple_switch cannot truncate clones)"
        )
    pairs, port_as_bytes = replicas.decode(session.replicas, what)
    engine.mc_group_set(group_of(sid), pairs)
    engine.mirroring_add(sid, mgid=group_of(sid))
    stored = p4runtime_pb2.CloneSessionEntry()
    stored.CopyFrom(session)
    pipe.clone_sessions[sid] = (stored, port_as_bytes)


def read_clone_sessions(pipe, request, new) -> None:
    sid = request.session_id
    if sid:
        if sid not in pipe.clone_sessions:
            raise P4RTError(NOT_FOUND, f"clone session {sid} does not exist")
        chosen = [sid]
    else:
        chosen = sorted(pipe.clone_sessions)
    groups = pipe.engine.mc_groups()
    for session_id in chosen:
        stored, port_as_bytes = pipe.clone_sessions[session_id]
        entry = new().clone_session_entry
        entry.session_id = session_id
        entry.class_of_service = stored.class_of_service
        entry.packet_length_bytes = stored.packet_length_bytes
        replicas.encode(groups.get(group_of(session_id), ()), port_as_bytes, entry.replicas)
