"""A TableEntry's match and action <-> the engine's keys and (action name, params), checked as the
P4Runtime spec asks. Shared by table entries, direct resources and action profile members.

Values going out are canonical bytestrings; values coming in may have any width that fits (see
bytestrings). "Don't care" match fields are left out on the way out, as the spec's read-write
symmetry asks.
"""

from p4.config.v1 import p4info_pb2

from emulator.p4rt import bytestrings
from emulator.p4rt.errors import INVALID_ARGUMENT, PERMISSION_DENIED, UNIMPLEMENTED, P4RTError

_TABLE_ONLY = p4info_pb2.ActionRef.TABLE_ONLY
_DEFAULT_ONLY = p4info_pb2.ActionRef.DEFAULT_ONLY


def decode_key(table, te) -> list:
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


def encode_key(table, keys, te) -> None:
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


def key_id(keys, priority) -> tuple:
    """Hashable identity of an entry (for the per-entry metadata store)."""
    return tuple(k if isinstance(k, int) else tuple(k) for k in keys), priority


# ---------------------------------------------------------------- actions


def decode_action(pipe, table, te, default: bool):
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


def encode_action(pipe, action_name, params, te) -> None:
    action = pipe.binding.action_by_name.get(action_name)
    if action is None:  # an engine action absent from P4Info (role subset); report it by name only
        return
    msg = te.action.action
    msg.action_id = action.id
    for p, value in zip(action.params, params):
        msg.params.add(param_id=p.id, value=bytestrings.encode(int(value)))
