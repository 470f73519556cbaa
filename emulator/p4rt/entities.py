"""P4Runtime entities <-> engine calls, with the spec's validation rules.

Each `write_*` applies one Update to the engine or raises P4RTError; each `read_*` fills one fresh
message per matching entity (wildcards expanded), taken from `new()`, which the servicer points into
its ReadResponse so that nothing is copied (pure-Python protobuf copies cost more than the reads).
Match keys and actions are converted by `match_action`; meters and action profiles are
`extern_entities`' (which this module calls for the indirect and metered forms of a table entry).
"""

from p4.v1 import p4runtime_pb2

from emulator.errors import EntryError as EngineEntryError  # the engine's refusal of an entry
from emulator.p4rt import bytestrings, clone_sessions, extern_entities, replicas
from emulator.p4rt.errors import (
    INVALID_ARGUMENT,
    NOT_FOUND,
    OUT_OF_RANGE,
    PERMISSION_DENIED,
    UNIMPLEMENTED,
    P4RTError,
    engine_error,
    modify_only,
)
from emulator.p4rt.match_action import decode_action, decode_key, encode_action, encode_key, key_id

INSERT, MODIFY, DELETE = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE

# ---------------------------------------------------------------- table entries


def _check_unsupported_fields(table, te, update_type):
    if te.is_const:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': is_const must be false in a write")
    if update_type == DELETE:
        return  # a DELETE is identified by its key alone; the spec says to ignore everything else
    if te.HasField("meter_counter_data"):
        raise P4RTError(UNIMPLEMENTED, f"table '{table.name}': meter counters are not supported (nor by BMv2)")
    if te.HasField("meter_config"):
        if table.direct_meter is None:
            raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' has no direct meter")
        if te.is_default_action:
            raise P4RTError(UNIMPLEMENTED, f"table '{table.name}': BMv2 has no direct meter for the default entry")
    if te.idle_timeout_ns:
        raise P4RTError(UNIMPLEMENTED, f"table '{table.name}': idle timeouts are not supported")
    if te.HasField("counter_data"):
        if table.direct_counter is None:
            raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' has no direct counter")
        if te.is_default_action and (te.counter_data.packet_count or te.counter_data.byte_count):
            raise P4RTError(UNIMPLEMENTED, f"table '{table.name}': the default entry has no direct counter here")


def write_direct_counter(pipe, table, keys, priority, data) -> None:
    """Set an entry's direct counter (TableEntry.counter_data / DirectCounterEntry.data)."""
    writer = getattr(pipe.engine, "direct_counter_write", None)
    if writer is None:
        raise P4RTError(UNIMPLEMENTED, f"table '{table.name}': this engine cannot set direct counters")
    writer(table.name, keys, data.packet_count, data.byte_count, priority=priority)


def write_table_entry(pipe, update_type, te) -> None:
    table = pipe.binding.table(te.table_id)
    if te.is_default_action:
        _write_default_entry(pipe, table, update_type, te)
        return
    if table.is_const:
        raise P4RTError(PERMISSION_DENIED, f"table '{table.name}' has const entries")
    if not table.match_fields and update_type == INSERT:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' is keyless: set its default entry instead")
    _check_unsupported_fields(table, te, update_type)
    keys = decode_key(table, te)
    if table.needs_priority:
        if te.priority <= 0:
            raise P4RTError(
                INVALID_ARGUMENT,
                f"table '{table.name}': a priority > 0 is required (the table has ternary, range or optional fields)",
            )
        priority = te.priority
    else:
        if te.priority:
            raise P4RTError(
                INVALID_ARGUMENT, f"table '{table.name}': priority must be 0 (the table has only exact and lpm fields)"
            )
        priority = None
    identity = key_id(keys, priority)
    engine = pipe.engine
    try:
        if update_type == INSERT:
            if table.action_profile is not None:
                extern_entities.write_indirect_entry(pipe, table, update_type, keys, priority, te)
            else:
                name, params = decode_action(pipe, table, te, default=False)
                engine.table_add(table.name, keys, name, params, priority=priority)
            if te.HasField("counter_data"):
                write_direct_counter(pipe, table, keys, priority, te.counter_data)
        elif update_type == MODIFY:
            if te.action.WhichOneof("type") is None:  # no action: only direct resources change
                if not any(key_id(e.keys, e.priority) == identity for e in engine.table_entries(table.name)):
                    raise P4RTError(NOT_FOUND, f"table '{table.name}': no such entry")
            elif table.action_profile is not None:
                extern_entities.write_indirect_entry(pipe, table, update_type, keys, priority, te)
            else:
                name, params = decode_action(pipe, table, te, default=False)
                engine.table_modify(table.name, keys, name, params, priority=priority)
            if te.HasField("counter_data"):
                write_direct_counter(pipe, table, keys, priority, te.counter_data)
        if update_type in (INSERT, MODIFY) and te.HasField("meter_config"):
            extern_entities.write_table_meter_config(pipe, table, keys, priority, te)
        if update_type == DELETE:
            engine.table_delete(table.name, keys, priority=priority)
            pipe.entry_metadata.pop((table.id, identity), None)
            return
        if update_type not in (INSERT, MODIFY):
            raise P4RTError(INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
    except EngineEntryError as exc:
        raise engine_error(exc, f"table '{table.name}'") from None
    if te.metadata or te.controller_metadata:
        pipe.entry_metadata[(table.id, identity)] = (te.metadata, te.controller_metadata)
    else:
        pipe.entry_metadata.pop((table.id, identity), None)


def _write_default_entry(pipe, table, update_type, te):
    if update_type != MODIFY:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': the default entry can only be modified")
    if len(te.match) or te.priority:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': a default entry has no match and priority 0")
    if table.const_default_action_id:
        raise P4RTError(PERMISSION_DENIED, f"table '{table.name}': the default action is const")
    _check_unsupported_fields(table, te, update_type)
    try:
        if te.action.WhichOneof("type") is None:
            pipe.engine.table_reset_default(table.name)
        else:
            name, params = decode_action(pipe, table, te, default=True)
            pipe.engine.table_set_default(table.name, name, params)
    except EngineEntryError as exc:
        raise engine_error(exc, f"table '{table.name}' default entry") from None


def _entry_proto(pipe, table, entry, with_counter: bool, te, with_meter: bool = False):
    te.table_id = table.id
    encode_key(table, entry.keys, te)
    if table.needs_priority and entry.priority:
        te.priority = entry.priority
    if table.action_profile is not None:
        extern_entities.encode_indirect_action(pipe, table, entry, te)
    else:
        encode_action(pipe, entry.action, entry.params, te)
    if with_meter:
        extern_entities.read_table_meter_config(pipe, table, entry, te)
    if table.is_const:
        te.is_const = True
    stored = pipe.entry_metadata.get((table.id, key_id(entry.keys, entry.priority or None)))
    if stored:
        te.metadata, te.controller_metadata = stored
    if with_counter and table.direct_counter is not None:
        packets, nbytes = pipe.engine.direct_counter_read(table.name, entry.keys, priority=entry.priority or None)
        te.counter_data.packet_count = packets
        te.counter_data.byte_count = nbytes
    return te


def read_table_entries(pipe, request, new=p4runtime_pb2.TableEntry) -> list:
    """Entries matching the filter `request` (spec "Wildcard Reads")."""
    with_counter = request.HasField("counter_data")
    with_meter = request.HasField("meter_config")
    if request.table_id == 0:
        tables = list(pipe.binding.tables.values())
    else:
        tables = [pipe.binding.table(request.table_id)]
    found = []
    for table in tables:
        if request.is_default_action:
            action, params = pipe.engine.table_get_default(table.name)
            te = new()
            te.table_id, te.is_default_action = table.id, True
            encode_action(pipe, action, params, te)
            found.append(te)
            continue
        wanted_key = None
        if len(request.match) and request.table_id:
            wanted_key = key_id(decode_key(table, request), request.priority or None)
        wanted_action = None
        if request.table_id and request.action.WhichOneof("type") == "action":
            wanted_action = request.action.action.action_id
        for entry in pipe.engine.table_entries(table.name):
            if wanted_key is not None and key_id(entry.keys, entry.priority or None) != wanted_key:
                continue
            if request.table_id and request.priority and entry.priority != request.priority:
                continue
            if wanted_action is not None:
                action = pipe.binding.action_by_name.get(entry.action)
                if action is None or action.id != wanted_action:
                    continue
            if request.table_id and request.metadata:
                stored = pipe.entry_metadata.get((table.id, key_id(entry.keys, entry.priority or None)))
                if not stored or stored[0] != request.metadata:
                    continue
            found.append(_entry_proto(pipe, table, entry, with_counter, new(), with_meter))
    return found


# ---------------------------------------------------------------- counters


def _indices(size: int, index_msg, has_index: bool, what: str):
    if not has_index:
        return range(size)
    index = index_msg.index
    if index < 0:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: negative index {index}")
    if index >= size:
        raise P4RTError(OUT_OF_RANGE, f"{what}: index {index} outside 0..{size - 1}")
    return (index,)


def read_counter_entries(pipe, request, new=p4runtime_pb2.CounterEntry) -> list:
    counters = pipe.binding.counters.values() if request.counter_id == 0 else [pipe.binding.counter(request.counter_id)]
    found = []
    for counter in counters:
        what = f"counter '{counter.name}'"
        has_index = request.counter_id != 0 and request.HasField("index")
        for i in _indices(counter.size, request.index, has_index, what):
            packets, nbytes = pipe.engine.counter_read(counter.name, i)
            entry = new()
            entry.counter_id = counter.id
            entry.index.index = i
            entry.data.packet_count = packets
            entry.data.byte_count = nbytes
            found.append(entry)
    return found


def write_counter_entry(pipe, update_type, entry) -> None:
    counter = pipe.binding.counter(entry.counter_id)
    what = f"counter '{counter.name}'"
    modify_only(update_type, what, "counter")
    if not entry.HasField("data"):
        return
    for i in _indices(counter.size, entry.index, entry.HasField("index"), what):
        pipe.engine.counter_write(counter.name, i, entry.data.packet_count, entry.data.byte_count)


# ---------------------------------------------------------------- registers


def read_register_entries(pipe, request, new=p4runtime_pb2.RegisterEntry) -> list:
    registers = (
        pipe.binding.registers.values() if request.register_id == 0 else [pipe.binding.register(request.register_id)]
    )
    found = []
    for reg in registers:
        has_index = request.register_id != 0 and request.HasField("index")
        for i in _indices(reg.size, request.index, has_index, f"register '{reg.name}'"):
            entry = new()
            entry.register_id = reg.id
            entry.index.index = i
            entry.data.bitstring = bytestrings.encode(pipe.engine.register_read(reg.name, i))
            found.append(entry)
    return found


def write_register_entry(pipe, update_type, entry) -> None:
    reg = pipe.binding.register(entry.register_id)
    what = f"register '{reg.name}'"
    modify_only(update_type, what, "register")
    if entry.data.WhichOneof("data") != "bitstring":
        raise P4RTError(INVALID_ARGUMENT, f"{what}: data must be a bitstring of {reg.bitwidth} bits")
    value = bytestrings.decode(entry.data.bitstring, reg.bitwidth, what)
    for i in _indices(reg.size, entry.index, entry.HasField("index"), what):
        pipe.engine.register_write(reg.name, i, value)


# ---------------------------------------------------------------- multicast


def write_pre_entry(pipe, update_type, pre) -> None:
    kind = pre.WhichOneof("type")
    if kind == "clone_session_entry":
        clone_sessions.write_clone_session(pipe, update_type, pre.clone_session_entry)
        return
    if kind != "multicast_group_entry":
        raise P4RTError(
            INVALID_ARGUMENT, "PacketReplicationEngineEntry has neither a multicast group nor a clone session"
        )
    group = pre.multicast_group_entry
    gid = group.multicast_group_id
    what = f"multicast group {gid}"
    if gid == 0:
        raise P4RTError(INVALID_ARGUMENT, "multicast group id 0 is reserved for wildcard reads")
    replicas.check_update(update_type, gid in pipe.engine.mc_groups(), what)
    if update_type == DELETE:
        pipe.engine.mc_group_delete(gid)
        pipe.mc_group_extras.pop(gid, None)
        return
    pairs, port_as_bytes = replicas.decode(group.replicas, what)
    pipe.engine.mc_group_set(gid, pairs)
    pipe.mc_group_extras[gid] = (port_as_bytes, group.metadata)


def read_pre_entries(pipe, request, new=p4runtime_pb2.PacketReplicationEngineEntry) -> list:
    kind = request.WhichOneof("type")
    if kind == "clone_session_entry":
        clone_sessions.read_clone_sessions(pipe, request.clone_session_entry, new)
        return []
    if kind != "multicast_group_entry":
        raise P4RTError(
            INVALID_ARGUMENT, "PacketReplicationEngineEntry has neither a multicast group nor a clone session"
        )
    gid = request.multicast_group_entry.multicast_group_id
    groups = pipe.engine.mc_groups()
    if gid:
        if gid not in groups:
            raise P4RTError(NOT_FOUND, f"multicast group {gid} does not exist")
        groups = {gid: groups[gid]}
    else:  # the groups behind clone sessions are not the controller's (PI skips them too)
        groups = {g: r for g, r in groups.items() if g < clone_sessions.FIRST_RESERVED_GROUP}
    found = []
    for group_id in sorted(groups):
        port_as_bytes, metadata = pipe.mc_group_extras.get(group_id, (False, b""))
        pre = new()
        entry = pre.multicast_group_entry
        entry.multicast_group_id = group_id
        entry.metadata = metadata
        replicas.encode(groups[group_id], port_as_bytes, entry.replicas)
        found.append(pre)
    return found


# ---------------------------------------------------------------- digests


def write_digest_entry(pipe, update_type, entry) -> None:
    pipe.digests.write(update_type, entry)


def read_digest_entries(pipe, request, new=p4runtime_pb2.DigestEntry) -> None:
    pipe.digests.read(request.digest_id, new)
