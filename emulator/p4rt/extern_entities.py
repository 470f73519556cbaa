"""P4Runtime meters and action profiles <-> engine calls (MeterEntry, ActionProfileMember,
ActionProfileGroup, the meter config of a DirectMeterEntry or a TableEntry, and the action-profile
forms of TableEntry.action).

Answers as BMv2's PI server does (p4lang/PI proto/frontend device_mgr.cpp, action_prof_mgr.cpp), so a
controller written against simple_switch_grpc sees the same replies: resets, reads of unconfigured meters,
weights read back as written, a refused group INSERT left behind empty, and what BMv2 itself refuses as
UNKNOWN. The rules, entity by entity: emulator/README.md, "P4Runtime"."""

from p4.v1 import p4runtime_pb2

from emulator.errors import EntryError as EngineEntryError  # the engine's refusal of an entry
from emulator.p4rt.errors import (
    INVALID_ARGUMENT,
    NOT_FOUND,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    UNKNOWN,
    P4RTError,
    engine_error,
    modify_only,
)
from emulator.p4rt.match_action import decode_action, encode_action

INSERT, MODIFY, DELETE = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE


def _delete(delete, profile, ident, what) -> None:
    """A member or group delete; BMv2 refuses one still in use, which PI answers as UNKNOWN."""
    try:
        delete(profile.name, ident)
    except EngineEntryError as exc:
        if getattr(exc, "code", None) == "FAILED_PRECONDITION":
            raise P4RTError(UNKNOWN, f"{what}: error when deleting on target: {exc}") from None
        raise


# ---------------------------------------------------------------- meters


U32_MAX, U64_MAX = 2**32 - 1, 2**64 - 1


def meter_config(cfg_msg, has_config: bool, what: str):
    """[(cir, cburst), (pir, pburst)] for the engine, or None (reset), as PI's server converts a
    MeterConfig: -1 stands for the largest value (PI's casts to unsigned), all four -1 resets."""
    if not has_config:
        return None
    if cfg_msg.eburst:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: eburst belongs to single-rate meters; v1model's are two-rate")
    values = (cfg_msg.cir, cfg_msg.cburst, cfg_msg.pir, cfg_msg.pburst)
    if any(v < -1 for v in values):
        raise P4RTError(INVALID_ARGUMENT, f"{what}: negative rate or burst")
    if cfg_msg.cburst > U32_MAX or cfg_msg.pburst > U32_MAX:
        raise P4RTError(UNIMPLEMENTED, f"{what}: burst too large (at most {U32_MAX})")
    if values == (-1, -1, -1, -1):
        return None
    rate = lambda v: U64_MAX if v == -1 else v  # noqa: E731
    burst = lambda v: U32_MAX if v == -1 else v  # noqa: E731
    return [(rate(cfg_msg.cir), burst(cfg_msg.cburst)), (rate(cfg_msg.pir), burst(cfg_msg.pburst))]


def fill_meter_config(msg, config) -> None:
    """Unconfigured meters are read without a config; values as PI writes them (int64, -1 bursts)."""
    if config is None:
        return
    (cir, cburst), (pir, pburst) = config
    signed = lambda v: v - 2**64 if v >= 2**63 else v  # noqa: E731
    msg.cir, msg.pir = signed(cir), signed(pir)
    msg.cburst = -1 if cburst == U32_MAX else cburst
    msg.pburst = -1 if pburst == U32_MAX else pburst


def _meter_index(entry, size, what, write):
    if not entry.HasField("index"):
        return None
    index = entry.index.index
    if index < 0:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: a negative number is not a valid index value")
    if index >= size:  # the target refuses it; PI's server then answers UNKNOWN
        verb = "writing" if write else "reading"
        raise P4RTError(UNKNOWN, f"{what}: error when {verb} meter spec: index {index} outside 0..{size - 1}")
    return index


def write_meter_entry(pipe, update_type, entry) -> None:
    meter = pipe.binding.meter(entry.meter_id)
    what = f"meter '{meter.name}'"
    modify_only(update_type, what, "meter")
    index = _meter_index(entry, meter.size, what, write=True)
    if index is None:
        raise P4RTError(UNIMPLEMENTED, f"{what}: wildcard write is not supported for indirect meters")
    config = meter_config(entry.config, entry.HasField("config"), what)
    try:
        pipe.engine.meter_set(meter.name, index, config)
    except EngineEntryError as exc:  # what BMv2 refuses (committed rate above peak): UNKNOWN from PI
        raise P4RTError(UNKNOWN, f"{what}: error when writing meter spec: {exc}") from None


def read_meter_entries(pipe, request, new=p4runtime_pb2.MeterEntry) -> list:
    meters = pipe.binding.meters.values() if request.meter_id == 0 else [pipe.binding.meter(request.meter_id)]
    found = []
    for meter in meters:
        index = _meter_index(request, meter.size, f"meter '{meter.name}'", write=False)
        for i in range(meter.size) if index is None else (index,):
            entry = new()
            entry.meter_id = meter.id
            entry.index.index = i
            fill_meter_config(entry.config, pipe.engine.meter_get(meter.name, i))
            found.append(entry)
    return found


def write_table_meter_config(pipe, table, keys, priority, te) -> None:
    """TableEntry.meter_config on INSERT/MODIFY: the entry's direct meter."""
    if table.direct_meter is None:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' has no direct meter")
    config = meter_config(te.meter_config, True, f"table '{table.name}' meter_config")
    try:
        pipe.engine.direct_meter_set(table.name, keys, config, priority=priority)
    except EngineEntryError as exc:
        raise engine_error(exc, f"table '{table.name}'") from None


def read_table_meter_config(pipe, table, entry, te) -> None:
    if table.direct_meter is None:
        return
    config = pipe.engine.direct_meter_get(table.name, entry.keys, priority=entry.priority or None)
    if config is not None:
        fill_meter_config(te.meter_config, config)


# ---------------------------------------------------------------- action profile members and groups


def _action_of(pipe, profile, action_msg, what):
    """(name, params) of a member's action, which must belong to one of the profile's tables."""
    te = p4runtime_pb2.TableEntry()
    te.action.action.CopyFrom(action_msg)
    for tid in profile.table_ids:
        table = pipe.binding.tables[tid]
        if action_msg.action_id in table.action_scopes:
            return decode_action(pipe, table, te, default=False)
    raise P4RTError(INVALID_ARGUMENT, f"{what}: action id {action_msg.action_id} is not an action of its tables")


def write_action_profile_member(pipe, update_type, member) -> None:
    profile = pipe.binding.action_profile(member.action_profile_id)
    what = f"action profile '{profile.name}' member {member.member_id}"
    engine = pipe.engine
    _check_programming(pipe, profile, "manual")
    try:
        if update_type == DELETE:
            _delete(engine.act_prof_member_delete, profile, member.member_id, what)
            return
        if not member.HasField("action"):
            raise P4RTError(INVALID_ARGUMENT, f"{what}: no action given")
        name, params = _action_of(pipe, profile, member.action, what)
        if update_type == INSERT:
            engine.act_prof_member_add(profile.name, member.member_id, name, params)
        elif update_type == MODIFY:
            engine.act_prof_member_modify(profile.name, member.member_id, name, params)
        else:
            raise P4RTError(INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
    except EngineEntryError as exc:
        raise engine_error(exc, what) from None


def _profiles_read(pipe, request) -> list:
    """The action profiles a member or group read asks for: one, or all for id 0 (a wildcard)."""
    if request.action_profile_id == 0:
        return list(pipe.binding.action_profiles.values())
    return [pipe.binding.action_profile(request.action_profile_id)]


def read_action_profile_members(pipe, request, new=p4runtime_pb2.ActionProfileMember) -> list:
    """Members in BMv2 handle order, a member once per handle it holds (PI answers its copies for
    weights too); a member id that does not exist answers nothing, as PI does."""
    profiles = _profiles_read(pipe, request)
    found = []
    for profile in profiles:
        members = pipe.engine.act_prof_members(profile.name)
        if request.member_id:
            listed = [request.member_id] if request.member_id in members else []
        else:
            listed = [mid for _, mid in pipe.engine.act_prof_members_by_handle(profile.name)]
        for mid in listed:
            msg = new()
            msg.action_profile_id, msg.member_id = profile.id, mid
            action, params = members[mid]
            holder = p4runtime_pb2.TableEntry()
            encode_action(pipe, action, params, holder)
            msg.action.CopyFrom(holder.action.action)
            found.append(msg)
    return found


def _check_weights(weights, limit, what) -> None:
    """PI's checks before any member is looked at: positive weights, then their sum (the members
    BMv2's group will hold) within `limit` (0: none)."""
    if any(w <= 0 for w in weights):
        raise P4RTError(INVALID_ARGUMENT, f"{what}: member weight must be a positive integer value")
    if limit and sum(weights) > limit:
        raise P4RTError(RESOURCE_EXHAUSTED, f"{what}: the sum of member weights {sum(weights)} exceeds {limit}")


def _check_programming(pipe, profile, mode):
    """One-shot action sets and members/groups cannot be mixed in one selector (PI's rule)."""
    current = pipe.engine.act_prof_programming(profile.name)
    if profile.with_selector and current not in (None, mode):
        raise P4RTError(INVALID_ARGUMENT, f"action profile '{profile.name}': invalid attempt to mix programming modes")


def write_action_profile_group(pipe, update_type, group) -> None:
    """In PI's order: the group's max_size, the group itself (an INSERT creates it empty first, and
    it stays when its members are refused), then weights, their sum, and the members."""
    profile = pipe.binding.action_profile(group.action_profile_id)
    what = f"action profile '{profile.name}' group {group.group_id}"
    key = (profile.id, group.group_id)
    engine = pipe.engine
    _check_programming(pipe, profile, "manual")
    try:
        if update_type == DELETE:
            _delete(engine.act_prof_group_delete, profile, group.group_id, what)
            pipe.group_max_size.pop(key, None)
            return
        if update_type == INSERT:
            if group.max_size < 0:
                raise P4RTError(INVALID_ARGUMENT, f"{what}: max_size cannot be less than 0")
            if profile.max_group_size and group.max_size > profile.max_group_size:
                raise P4RTError(
                    INVALID_ARGUMENT, f"{what}: max_size {group.max_size} above the profile's {profile.max_group_size}"
                )
            engine.act_prof_group_set(profile.name, group.group_id, [], create=True)
            pipe.group_max_size[key] = group.max_size
        elif update_type == MODIFY:
            if group.group_id not in engine.act_prof_groups(profile.name):
                raise P4RTError(NOT_FOUND, f"{what}: no such group")
            if group.max_size and group.max_size != pipe.group_max_size.get(key, 0):
                raise P4RTError(INVALID_ARGUMENT, f"{what}: max_size cannot change")
        else:
            raise P4RTError(INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
        weights = [m.weight for m in group.members]  # watch ports are accepted and ignored
        _check_weights(weights, pipe.group_max_size.get(key, 0) or profile.max_group_size, what)
        members = [(m.member_id, m.weight) for m in group.members]
        engine.act_prof_group_set(profile.name, group.group_id, members, create=False)
    except EngineEntryError as exc:
        raise engine_error(exc, what) from None


def read_action_profile_groups(pipe, request, new=p4runtime_pb2.ActionProfileGroup) -> list:
    profiles = _profiles_read(pipe, request)
    found = []
    for profile in profiles:
        if not profile.with_selector:
            continue
        groups = pipe.engine.act_prof_groups(profile.name)  # in BMv2 handle order
        for gid in groups:
            if request.group_id and gid != request.group_id:  # a missing one answers nothing, as in PI
                continue
            msg = new()
            msg.action_profile_id, msg.group_id = profile.id, gid
            msg.max_size = pipe.group_max_size.get((profile.id, gid), 0)
            for mid, weight in groups[gid].items():
                msg.members.add(member_id=mid, weight=weight)
            found.append(msg)
    return found


# ---------------------------------------------------------------- table entries of indirect tables


def write_indirect_entry(pipe, table, update_type, keys, priority, te) -> None:
    """INSERT/MODIFY of an entry whose action is a member, a group or a one-shot action set."""
    profile = table.action_profile
    kind = te.action.WhichOneof("type")
    what = f"table '{table.name}'"
    target = {}
    if kind == "action_profile_member_id":
        target["member"] = te.action.action_profile_member_id
    elif kind in ("action_profile_group_id", "action_profile_action_set"):
        if not profile.with_selector:
            raise P4RTError(INVALID_ARGUMENT, f"{what}: '{profile.name}' is an action profile without a selector")
        if kind == "action_profile_group_id":
            target["group"] = te.action.action_profile_group_id
        else:  # PI's order: programming mode, an empty set, the actions, weights and their sum
            _check_programming(pipe, profile, "oneshot")
            apas = te.action.action_profile_action_set.action_profile_actions
            if not apas:
                raise P4RTError(UNIMPLEMENTED, f"{what}: no support for empty action profile groups")
            actions = [decode_action(pipe, table, _wrap(apa.action), default=False) for apa in apas]
            _check_weights([apa.weight for apa in apas], profile.max_group_size, what)
            target["oneshot"] = [(name, params, apa.weight) for (name, params), apa in zip(actions, apas)]
    elif kind == "action":
        raise P4RTError(INVALID_ARGUMENT, f"{what} uses action profile '{profile.name}': give a member or group")
    else:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: no action given")
    if update_type == INSERT:
        pipe.engine.table_add_indirect(table.name, keys, priority=priority, **target)
    else:
        pipe.engine.table_modify_indirect(table.name, keys, priority=priority, **target)


def _wrap(action_msg):
    te = p4runtime_pb2.TableEntry()
    te.action.action.CopyFrom(action_msg)
    return te


def encode_indirect_action(pipe, table, entry, te) -> None:
    kind, value = pipe.engine.table_indirect_pointer(table.name, entry.keys, priority=entry.priority or None)
    if kind == "member":
        te.action.action_profile_member_id = value
    elif kind == "group":
        te.action.action_profile_group_id = value
    else:
        action_set = te.action.action_profile_action_set
        for action, params, weight in value:
            apa = action_set.action_profile_actions.add(weight=weight)
            holder = p4runtime_pb2.TableEntry()
            encode_action(pipe, action, params, holder)
            apa.action.CopyFrom(holder.action.action)
