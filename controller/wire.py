"""Protobuf wire format for the bulk of the control plane: lookup-table entries.

p4runtime-shell pins protobuf < 3.21, whose pure-Python implementation spends ~0.2 ms building and
~0.2 ms serializing (or parsing) each table entry: a 32-lane lookup table is 8192 entries, seconds per
install. The entries are all alike (one exact key, one parameter), so they are encoded and decoded here
directly, byte-identical to what protobuf writes (fields in number order, zero scalars omitted; a test
checks it). Field numbers come from the generated descriptors, not from memory.
"""

from p4.v1 import p4runtime_pb2 as p4rt


def _number(message, field: str) -> int:
    return message.DESCRIPTOR.fields_by_name[field].number


_UPDATE_TYPE, _UPDATE_ENTITY = _number(p4rt.Update, "type"), _number(p4rt.Update, "entity")
_ENTITY_TABLE_ENTRY = _number(p4rt.Entity, "table_entry")
_TE_TABLE_ID, _TE_MATCH, _TE_ACTION = (_number(p4rt.TableEntry, f) for f in ("table_id", "match", "action"))
_FM_FIELD_ID, _FM_EXACT = _number(p4rt.FieldMatch, "field_id"), _number(p4rt.FieldMatch, "exact")
_EXACT_VALUE = _number(p4rt.FieldMatch.Exact, "value")
_TA_ACTION = _number(p4rt.TableAction, "action")
_A_ACTION_ID, _A_PARAMS = _number(p4rt.Action, "action_id"), _number(p4rt.Action, "params")
_P_ID, _P_VALUE = _number(p4rt.Action.Param, "param_id"), _number(p4rt.Action.Param, "value")
_WR_DEVICE, _WR_ELECTION, _WR_UPDATES = (_number(p4rt.WriteRequest, f) for f in ("device_id", "election_id", "updates"))
_U128_HIGH, _U128_LOW = _number(p4rt.Uint128, "high"), _number(p4rt.Uint128, "low")
_RR_ENTITIES = _number(p4rt.ReadResponse, "entities")

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int_field(number: int, value: int) -> bytes:
    return varint(number << 3 | _VARINT) + varint(value) if value else b""


def _bytes_field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | _LENGTH) + varint(len(data)) + data


def exact_update(
    kind: int,
    table_id: int,
    field_id: int,
    key: bytes,
    action_id: int = 0,
    param_id: int = 0,
    value: bytes | None = None,
) -> bytes:
    """A serialized Update of a one-key exact entry (with a one-parameter action unless DELETE)."""
    match = _bytes_field(
        _TE_MATCH, _int_field(_FM_FIELD_ID, field_id) + _bytes_field(_FM_EXACT, _bytes_field(_EXACT_VALUE, key))
    )
    entry = _int_field(_TE_TABLE_ID, table_id) + match
    if action_id:
        params = (
            b""
            if value is None
            else _bytes_field(_A_PARAMS, _int_field(_P_ID, param_id) + _bytes_field(_P_VALUE, value))
        )
        entry += _bytes_field(_TE_ACTION, _bytes_field(_TA_ACTION, _int_field(_A_ACTION_ID, action_id) + params))
    entity = _bytes_field(_ENTITY_TABLE_ENTRY, entry)
    return _int_field(_UPDATE_TYPE, kind) + _bytes_field(_UPDATE_ENTITY, entity)


def write_request(device_id: int, election_id: tuple[int, int], updates: list[bytes]) -> bytes:
    """A serialized WriteRequest carrying already serialized updates."""
    election = _int_field(_U128_HIGH, election_id[0]) + _int_field(_U128_LOW, election_id[1])
    head = _int_field(_WR_DEVICE, device_id) + (_bytes_field(_WR_ELECTION, election) if election else b"")
    return head + b"".join(_bytes_field(_WR_UPDATES, u) for u in updates)


def update_type(update: bytes) -> int:
    """The `type` of a serialized Update (INSERT, MODIFY, DELETE)."""
    return next((value for number, value in fields(update) if number == _UPDATE_TYPE), 0)


def fields(data: bytes):
    """(number, value) of each field of a message; value is an int (varint, fixed) or bytes."""
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _read_varint(view, pos)
        number, kind = tag >> 3, tag & 7
        if kind == _VARINT:
            value, pos = _read_varint(view, pos)
        elif kind == _LENGTH:
            size, pos = _read_varint(view, pos)
            value, pos = bytes(view[pos : pos + size]), pos + size
        elif kind == _FIXED32:
            value, pos = int.from_bytes(view[pos : pos + 4], "little"), pos + 4
        elif kind == _FIXED64:
            value, pos = int.from_bytes(view[pos : pos + 8], "little"), pos + 8
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        if pos > end:
            raise ValueError("truncated protobuf message")
        yield number, value


def _read_varint(view, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def exact_entries(read_responses: list[bytes]) -> list[tuple[int, int, int | None]]:
    """(table_id, key, first parameter or None) of every table entry in serialized ReadResponses whose
    match is one exact field. Entries of another shape are skipped."""
    found = []
    for response in read_responses:
        for number, entity in fields(response):
            if number != _RR_ENTITIES:
                continue
            for enumber, entry in fields(entity):
                if enumber != _ENTITY_TABLE_ENTRY:
                    continue
                table_id, keys, param = 0, [], None
                for tnumber, value in fields(entry):
                    if tnumber == _TE_TABLE_ID:
                        table_id = value
                    elif tnumber == _TE_MATCH:
                        for fnumber, fvalue in fields(value):
                            if fnumber == _FM_EXACT:
                                keys.extend(int.from_bytes(v, "big") for n, v in fields(fvalue) if n == _EXACT_VALUE)
                    elif tnumber == _TE_ACTION:
                        for anumber, action in fields(value):
                            if anumber != _TA_ACTION:
                                continue
                            for pnumber, pvalue in fields(action):
                                if pnumber == _A_PARAMS and param is None:
                                    param = next(
                                        (int.from_bytes(v, "big") for n, v in fields(pvalue) if n == _P_VALUE), 0
                                    )
                if len(keys) == 1:
                    found.append((table_id, keys[0], param))
    return found
