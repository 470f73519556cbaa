"""P4Runtime entities <-> engine calls, with the spec's validation rules.

Each `write_*` applies one Update to the engine or raises P4RTError; each `read_*` fills one fresh
message per matching entity (wildcards expanded), taken from `new()`, which the servicer points into
its ReadResponse so that nothing is copied (pure-Python protobuf copies cost more than the reads).
Values going out are canonical bytestrings; values coming in may have any width that fits (see
bytestrings). "Don't care" match fields are omitted on read, as the
spec's read-write symmetry asks.
"""

from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from emulator.p4rt import bytestrings, clone_sessions, extern_entities, replicas
from emulator.p4rt.errors import (
    ALREADY_EXISTS,
    INVALID_ARGUMENT,
    NOT_FOUND,
    OUT_OF_RANGE,
    PERMISSION_DENIED,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    P4RTError,
)

INSERT, MODIFY, DELETE = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE
_TABLE_ONLY = p4info_pb2.ActionRef.TABLE_ONLY
_DEFAULT_ONLY = p4info_pb2.ActionRef.DEFAULT_ONLY

try:  # the engine's refusal of an entry (duplicate, missing, table full, bad action)
    from emulator.errors import EntryError as EngineEntryError
except ImportError:  # pragma: no cover - only before the engine lands

    class EngineEntryError(Exception):
        pass


def engine_error(exc: Exception, what: str) -> P4RTError:
    """Map an engine refusal to a canonical code.

    The engine's EntryError carries `code`, a google.rpc code name, which wins; without one (another
    engine) the message decides: "not found"/"no entry" -> NOT_FOUND, "exists" ->
    ALREADY_EXISTS, "full" -> RESOURCE_EXHAUSTED, anything else INVALID_ARGUMENT.
    """
    message = str(exc)
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        code = code_pb2.Code.Value(code.upper()) if code.upper() in code_pb2.Code.keys() else None
    if not isinstance(code, int):
        low = message.lower()
        if "not found" in low or "no entry" in low or "does not exist" in low or "no such" in low:
            code = NOT_FOUND
        elif "exist" in low or "duplicate" in low:
            code = ALREADY_EXISTS
        elif "full" in low or "capacity" in low:
            code = RESOURCE_EXHAUSTED
        else:
            code = INVALID_ARGUMENT
    subject = " ".join(what.split(" ")[:2])  # "table 'X'": the engine's messages often name it already
    return P4RTError(code, message if subject in message else f"{what}: {message}")


# ---------------------------------------------------------------- match keys


def _decode_key(table, te) -> list:
    """Engine keys (one per match field, in P4Info order) of a TableEntry's `match`."""
    given = {}
    for fm in te.match:
        mf = table.field_by_id.get(fm.field_id)
        if mf is None:
            raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': unknown match field id {fm.field_id}")
        if fm.field_id in given:
            raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': match field '{mf.name}' given twice")
        given[fm.field_id] = fm
    keys = []
    for mf in table.match_fields:
        fm = given.get(mf.id)
        what = f"table '{table.name}' match field '{mf.name}'"
        full = (1 << mf.bitwidth) - 1
        if fm is None:
            if mf.kind == "exact":
                raise P4RTError(INVALID_ARGUMENT, f"{what}: missing (exact fields are mandatory)")
            keys.append({"lpm": (0, 0), "ternary": (0, 0), "range": (0, full), "optional": (0, 0)}[mf.kind])
            continue
        kind = fm.WhichOneof("field_match_type")
        if kind != mf.kind:
            raise P4RTError(INVALID_ARGUMENT, f"{what}: is {mf.kind}, got a {kind} match")
        if kind == "exact":
            keys.append(bytestrings.decode(fm.exact.value, mf.bitwidth, what))
        elif kind == "lpm":
            value = bytestrings.decode(fm.lpm.value, mf.bitwidth, what)
            plen = fm.lpm.prefix_len
            if not 0 < plen <= mf.bitwidth:
                raise P4RTError(
                    INVALID_ARGUMENT,
                    f"{what}: prefix length {plen} outside 1..{mf.bitwidth} (omit the field for a don't-care match)",
                )
            if value & ((1 << (mf.bitwidth - plen)) - 1):
                raise P4RTError(INVALID_ARGUMENT, f"{what}: value has bits set beyond the /{plen} prefix")
            keys.append((value, plen))
        elif kind == "ternary":
            value = bytestrings.decode(fm.ternary.value, mf.bitwidth, what)
            mask = bytestrings.decode(fm.ternary.mask, mf.bitwidth, what + " mask")
            if mask == 0:
                raise P4RTError(INVALID_ARGUMENT, f"{what}: zero mask (omit the field for a don't-care match)")
            if value & ~mask:
                raise P4RTError(INVALID_ARGUMENT, f"{what}: value has bits set outside the mask")
            keys.append((value, mask))
        elif kind == "range":
            low = bytestrings.decode(fm.range.low, mf.bitwidth, what + " low")
            high = bytestrings.decode(fm.range.high, mf.bitwidth, what + " high")
            if low > high:
                raise P4RTError(INVALID_ARGUMENT, f"{what}: low bound {low} above high bound {high}")
            if low == 0 and high == full:
                raise P4RTError(INVALID_ARGUMENT, f"{what}: full range (omit the field for a don't-care match)")
            keys.append((low, high))
        else:  # optional
            keys.append((bytestrings.decode(fm.optional.value, mf.bitwidth, what), full))
    return keys


def _encode_key(table, keys, te) -> None:
    """Fill `te.match` from engine keys, omitting don't-care fields."""
    for mf, key in zip(table.match_fields, keys):
        full = (1 << mf.bitwidth) - 1
        if mf.kind == "exact":
            te.match.add(field_id=mf.id).exact.value = bytestrings.encode(int(key))
            continue
        first, second = key
        if mf.kind == "lpm":
            if second:
                fm = te.match.add(field_id=mf.id)
                fm.lpm.value = bytestrings.encode(first)
                fm.lpm.prefix_len = second
        elif mf.kind == "ternary":
            if second:
                fm = te.match.add(field_id=mf.id)
                fm.ternary.value = bytestrings.encode(first & second)
                fm.ternary.mask = bytestrings.encode(second)
        elif mf.kind == "range":
            if not (first == 0 and second == full):
                fm = te.match.add(field_id=mf.id)
                fm.range.low = bytestrings.encode(first)
                fm.range.high = bytestrings.encode(second)
        else:  # optional
            if second:
                te.match.add(field_id=mf.id).optional.value = bytestrings.encode(first)


def _key_id(keys, priority) -> tuple:
    """Hashable identity of an entry (for the per-entry metadata store)."""
    return tuple(k if isinstance(k, int) else tuple(k) for k in keys), priority


# ---------------------------------------------------------------- actions


def _decode_action(pipe, table, te, default: bool):
    """(action name, params) of a TableEntry's action, checked against the table's P4Info."""
    kind = te.action.WhichOneof("type")
    if kind != "action":
        if kind is None:
            raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': no action given")
        raise P4RTError(
            UNIMPLEMENTED,
            f"table '{table.name}': {kind} needs an action profile, which the software switch does not support",
        )
    action_msg = te.action.action
    scope = table.action_scopes.get(action_msg.action_id)
    if scope is None:
        name = pipe.binding.actions.get(action_msg.action_id)
        label = f"'{name.name}'" if name else f"id {action_msg.action_id}"
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': action {label} is not an action of this table")
    action = pipe.binding.actions[action_msg.action_id]
    if default and scope == _TABLE_ONLY:
        raise P4RTError(
            PERMISSION_DENIED, f"table '{table.name}': action '{action.name}' is @tableonly, not a default action"
        )
    if not default and scope == _DEFAULT_ONLY:
        raise P4RTError(
            PERMISSION_DENIED, f"table '{table.name}': action '{action.name}' is @defaultonly, not an entry action"
        )
    given = {}
    by_id = {p.id: p for p in action.params}
    for param in action_msg.params:
        if param.param_id not in by_id:
            raise P4RTError(INVALID_ARGUMENT, f"action '{action.name}': unknown parameter id {param.param_id}")
        if param.param_id in given:
            raise P4RTError(
                INVALID_ARGUMENT, f"action '{action.name}': parameter '{by_id[param.param_id].name}' given twice"
            )
        given[param.param_id] = param.value
    values = []
    for p in action.params:
        if p.id not in given:
            raise P4RTError(INVALID_ARGUMENT, f"action '{action.name}': parameter '{p.name}' missing")
        values.append(bytestrings.decode(given[p.id], p.bitwidth, f"action '{action.name}' parameter '{p.name}'"))
    return action.name, values


def _encode_action(pipe, action_name, params, te) -> None:
    action = pipe.binding.action_by_name.get(action_name)
    if action is None:  # an engine action absent from P4Info (role subset); report it by name only
        return
    msg = te.action.action
    msg.action_id = action.id
    for p, value in zip(action.params, params):
        msg.params.add(param_id=p.id, value=bytestrings.encode(int(value)))


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


def _write_direct_counter(pipe, table, keys, priority, data) -> None:
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
    keys = _decode_key(table, te)
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
    identity = _key_id(keys, priority)
    engine = pipe.engine
    try:
        if update_type == INSERT:
            if table.action_profile is not None:
                extern_entities.write_indirect_entry(pipe, table, update_type, keys, priority, te)
            else:
                name, params = _decode_action(pipe, table, te, default=False)
                engine.table_add(table.name, keys, name, params, priority=priority)
            if te.HasField("counter_data"):
                _write_direct_counter(pipe, table, keys, priority, te.counter_data)
        elif update_type == MODIFY:
            if te.action.WhichOneof("type") is None:  # no action: only direct resources change
                if not any(_key_id(e.keys, e.priority) == identity for e in engine.table_entries(table.name)):
                    raise P4RTError(NOT_FOUND, f"table '{table.name}': no such entry")
            elif table.action_profile is not None:
                extern_entities.write_indirect_entry(pipe, table, update_type, keys, priority, te)
            else:
                name, params = _decode_action(pipe, table, te, default=False)
                engine.table_modify(table.name, keys, name, params, priority=priority)
            if te.HasField("counter_data"):
                _write_direct_counter(pipe, table, keys, priority, te.counter_data)
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
            name, params = _decode_action(pipe, table, te, default=True)
            pipe.engine.table_set_default(table.name, name, params)
    except EngineEntryError as exc:
        raise engine_error(exc, f"table '{table.name}' default entry") from None


def _entry_proto(pipe, table, entry, with_counter: bool, te, with_meter: bool = False):
    te.table_id = table.id
    _encode_key(table, entry.keys, te)
    if table.needs_priority and entry.priority:
        te.priority = entry.priority
    if table.action_profile is not None:
        extern_entities.encode_indirect_action(pipe, table, entry, te)
    else:
        _encode_action(pipe, entry.action, entry.params, te)
    if with_meter:
        extern_entities.read_table_meter_config(pipe, table, entry, te)
    if table.is_const:
        te.is_const = True
    stored = pipe.entry_metadata.get((table.id, _key_id(entry.keys, entry.priority or None)))
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
            _encode_action(pipe, action, params, te)
            found.append(te)
            continue
        wanted_key = None
        if len(request.match) and request.table_id:
            wanted_key = _key_id(_decode_key(table, request), request.priority or None)
        wanted_action = None
        if request.table_id and request.action.WhichOneof("type") == "action":
            wanted_action = request.action.action.action_id
        for entry in pipe.engine.table_entries(table.name):
            if wanted_key is not None and _key_id(entry.keys, entry.priority or None) != wanted_key:
                continue
            if request.table_id and request.priority and entry.priority != request.priority:
                continue
            if wanted_action is not None:
                action = pipe.binding.action_by_name.get(entry.action)
                if action is None or action.id != wanted_action:
                    continue
            if request.table_id and request.metadata:
                stored = pipe.entry_metadata.get((table.id, _key_id(entry.keys, entry.priority or None)))
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
    if update_type != MODIFY:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: counter entries can only be modified")
    if not entry.HasField("data"):
        return
    for i in _indices(counter.size, entry.index, entry.HasField("index"), what):
        pipe.engine.counter_write(counter.name, i, entry.data.packet_count, entry.data.byte_count)


def read_direct_counter_entries(pipe, request, new=p4runtime_pb2.DirectCounterEntry) -> list:
    te_filter = request.table_entry
    if te_filter.table_id == 0:
        tables = [pipe.binding.tables[d.table_id] for d in pipe.binding.direct_counters.values()]
    else:
        table = pipe.binding.table(te_filter.table_id)
        if table.direct_counter is None:
            raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' has no direct counter")
        tables = [table]
    found = []
    for _, te in direct_entries(pipe, te_filter, tables, NOT_FOUND, "no such entry", counter_data=True):
        dce = new()
        dce.data.CopyFrom(te.counter_data)
        te.ClearField("counter_data")
        dce.table_entry.CopyFrom(te)
        found.append(dce)
    return found


def direct_entries(pipe, te_filter, tables, missing_code: int, missing: str, counter_data: bool = False):
    """(table, TableEntry) of every entry of ``tables`` that a direct counter or meter read's table_entry
    filter selects; a filter with a match that selects nothing is ``missing_code`` (BMv2's PI answers
    NOT_FOUND for counters, INVALID_ARGUMENT for meters)."""
    for table in tables:
        query = p4runtime_pb2.TableEntry()
        query.CopyFrom(te_filter)
        query.table_id = table.id
        if counter_data:
            query.counter_data.SetInParent()
        entries = read_table_entries(pipe, query)
        if len(te_filter.match) and not entries:
            raise P4RTError(missing_code, f"table '{table.name}': {missing}")
        for te in entries:
            yield table, te


def write_direct_counter_entry(pipe, update_type, entry) -> None:
    table = pipe.binding.table(entry.table_entry.table_id)
    if update_type != MODIFY:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}': direct counter entries can only be modified")
    if table.direct_counter is None:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' has no direct counter")
    if entry.table_entry.is_default_action:
        raise P4RTError(UNIMPLEMENTED, f"table '{table.name}': the default entry has no direct counter here")
    keys = _decode_key(table, entry.table_entry)
    priority = entry.table_entry.priority if table.needs_priority else None
    if not entry.HasField("data"):
        return
    try:
        _write_direct_counter(pipe, table, keys, priority, entry.data)
    except EngineEntryError as exc:
        raise engine_error(exc, f"table '{table.name}' direct counter") from None


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
    if update_type != MODIFY:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: register entries can only be modified")
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
