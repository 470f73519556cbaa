"""Bringing a table to a wanted set of entries with the fewest updates.

Keys are compared in decoded form (p4info.describe), so an entry read back from the switch matches the
one we would build however the server spelled its byte strings. Entries that are already right are not
sent again: installing twice is a no-op.
"""

import json

from p4.v1 import p4runtime_pb2

from controller.p4info import P4Info

Update = p4runtime_pb2.Update


def entry_key(p4info: P4Info, entry: p4runtime_pb2.TableEntry) -> str:
    d = p4info.describe(entry)
    return json.dumps(
        [d["table"], d.get("match", {}), d.get("priority", 0), bool(d.get("default_action"))], sort_keys=True
    )


def entry_action(p4info: P4Info, entry: p4runtime_pb2.TableEntry) -> str:
    d = p4info.describe(entry)
    return json.dumps([d.get("action_name"), d.get("action_params", {})], sort_keys=True)


def table_read(p4info: P4Info, table: str) -> p4runtime_pb2.Entity:
    """A wildcard read of every entry of `table`."""
    return p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=p4info.table(table).preamble.id))


def sync_updates(p4info: P4Info, wanted: list, installed: list, delete_others: bool = False) -> list:
    """Updates turning `installed` entries into `wanted` ones: INSERT missing keys, MODIFY changed ones
    (default entries are always MODIFY, as P4Runtime requires), optionally DELETE the rest."""
    have = {entry_key(p4info, e): e for e in installed}
    updates, seen = [], set()
    for entry in wanted:
        key = entry_key(p4info, entry)
        seen.add(key)
        old = have.get(key)
        if old is not None and entry_action(p4info, old) == entry_action(p4info, entry):
            continue
        kind = Update.MODIFY if old is not None or entry.is_default_action else Update.INSERT
        updates.append(Update(type=kind, entity=p4runtime_pb2.Entity(table_entry=entry)))
    if delete_others:
        for key, entry in have.items():
            if key not in seen and not entry.is_default_action:
                stale = p4runtime_pb2.TableEntry()
                stale.CopyFrom(entry)
                stale.ClearField("action")
                updates.append(Update(type=Update.DELETE, entity=p4runtime_pb2.Entity(table_entry=stale)))
    return updates
