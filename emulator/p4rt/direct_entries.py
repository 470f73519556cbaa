"""DirectCounterEntry and DirectMeterEntry: the counter and meter of one table entry, addressed by
that entry. A read selects entries as a table entry read does (and goes through it); a write is a
MODIFY of an entry that exists.
"""

from p4.v1 import p4runtime_pb2

from emulator.errors import EntryError as EngineEntryError  # the engine's refusal of an entry
from emulator.p4rt.entities import read_table_entries, write_direct_counter
from emulator.p4rt.errors import (
    INVALID_ARGUMENT,
    NOT_FOUND,
    UNIMPLEMENTED,
    UNKNOWN,
    P4RTError,
    engine_error,
    modify_only,
)
from emulator.p4rt.extern_entities import fill_meter_config, meter_config
from emulator.p4rt.match_action import decode_key

MODIFY = p4runtime_pb2.Update.MODIFY


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


def _written_entry(pipe, update_type, entry, kind: str, default_refusal: tuple) -> tuple:
    """(table, keys, priority) of a direct `kind` ("counter" or "meter") write, checked: a MODIFY, of
    a table with that resource, of an entry (`default_refusal`: the code and message for the default
    entry, which has none)."""
    table = pipe.binding.table(entry.table_entry.table_id)
    modify_only(update_type, f"table '{table.name}'", f"direct {kind}")
    if getattr(table, f"direct_{kind}") is None:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' has no direct {kind}")
    if entry.table_entry.is_default_action:
        code, message = default_refusal
        raise P4RTError(code, f"table '{table.name}': {message}")
    keys = decode_key(table, entry.table_entry)
    return table, keys, (entry.table_entry.priority if table.needs_priority else None)


def write_direct_counter_entry(pipe, update_type, entry) -> None:
    refusal = (UNIMPLEMENTED, "the default entry has no direct counter here")
    table, keys, priority = _written_entry(pipe, update_type, entry, "counter", refusal)
    if not entry.HasField("data"):
        return
    try:
        write_direct_counter(pipe, table, keys, priority, entry.data)
    except EngineEntryError as exc:
        raise engine_error(exc, f"table '{table.name}' direct counter") from None


def write_direct_meter_entry(pipe, update_type, entry) -> None:
    refusal = (UNKNOWN, "error when writing direct meter spec: BMv2 has none for the default entry")
    table, keys, priority = _written_entry(pipe, update_type, entry, "meter", refusal)
    what = f"table '{table.name}' direct meter"
    config = meter_config(entry.config, entry.HasField("config"), what)
    try:
        pipe.engine.direct_meter_set(table.name, keys, config, priority=priority)
    except EngineEntryError as exc:
        if getattr(exc, "code", None) == "NOT_FOUND":  # PI's server cannot map the entry to a handle
            raise P4RTError(INVALID_ARGUMENT, f"{what}: cannot map table entry to handle: {exc}") from None
        raise P4RTError(UNKNOWN, f"{what}: error when writing direct meter spec: {exc}") from None


def read_direct_meter_entries(pipe, request, new=p4runtime_pb2.DirectMeterEntry) -> list:
    te_filter = request.table_entry
    if te_filter.table_id == 0:  # as BMv2's PI server
        raise P4RTError(UNIMPLEMENTED, "reading all direct meters of all tables is not supported")
    table = pipe.binding.table(te_filter.table_id)
    if table.direct_meter is None:
        raise P4RTError(INVALID_ARGUMENT, f"table '{table.name}' has no direct meter")
    found = []
    for _, te in direct_entries(pipe, te_filter, [table], INVALID_ARGUMENT, "cannot map table entry to handle"):
        dme = new()
        keys = decode_key(table, te)
        priority = te.priority if table.needs_priority else None
        fill_meter_config(dme.config, pipe.engine.direct_meter_get(table.name, keys, priority=priority))
        te.ClearField("counter_data")
        dme.table_entry.CopyFrom(te)
        found.append(dme)
    return found
