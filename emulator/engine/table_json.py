"""A table's JSON -> its MatchTable (or IndirectTable), and the default and const entries the JSON gives it.

Two steps, because the pipelines are generated between them: `build_table` and `record_default` (the
default action, so the pipeline generator can inline a const default) run before code generation;
`install_default_and_entries` runs once the action functions exist, and loads the const entries.
"""

import logging

from emulator.engine.action_profiles import IndirectTable
from emulator.engine.jsonutil import hexstr, malformed, unsupported, where
from emulator.engine.match_tables import BMV2_MAX_PRIORITY, ActionRef, KeyField, MatchTable
from emulator.errors import EntryError, LoadError

log = logging.getLogger("emulator.switch")


def build_table(t, path, actions_by_id, actions_by_name, layout, counters_json, profiles=None):
    """The table `t` (JSON at `path`) with its keys, kind and actions checked; an IndirectTable when it uses
    an action profile (one of `profiles`), which then lists it."""
    ttype = t.get("type", "simple")
    if ttype not in ("simple", "indirect", "indirect_ws"):
        raise unsupported(f"table implementation '{ttype}' of table '{t.get('name')}'", path, t)
    profile = None
    if ttype != "simple":
        profile = (profiles or {}).get(t.get("action_profile"))
        if profile is None:
            raise malformed(f"table '{t.get('name')}' uses unknown action profile {t.get('action_profile')!r}", path, t)
        if ttype == "indirect_ws" and not profile.has_selector:
            raise malformed(f"table '{t.get('name')}' is indirect_ws but '{profile.name}' has no selector", path, t)
    name = t.get("name")
    keys = []
    kinds = set()
    for k, kj in enumerate(t.get("key", [])):
        kpath = f"{path}.key[{k}]"
        mt = kj.get("match_type")
        if mt not in ("exact", "lpm", "ternary", "range", "valid"):
            raise unsupported(f"match type '{mt}'", kpath, kj)
        kinds.add(mt)
        if mt == "valid":
            h = layout.header(kj.get("target"), kpath)
            keys.append(KeyField(kj.get("name", h.name), "valid", 1, None))
            continue
        target = kj.get("target")
        if not isinstance(target, list) or len(target) != 2:
            raise malformed("key target must be [header, field]", kpath, kj)
        ref = layout.field(target[0], target[1], kpath)
        mask = kj.get("mask")
        keys.append(
            KeyField(
                kj.get("name", f"{target[0]}.{target[1]}"),
                mt,
                ref.width,
                None if mask is None else hexstr(mask, kpath) & ref.mask,
            )
        )
    if sum(1 for k in keys if k.match_type == "lpm") > 1:
        raise malformed(f"table '{name}' has more than one lpm key", path, t)
    derived = "range" if "range" in kinds else "ternary" if "ternary" in kinds else "lpm" if "lpm" in kinds else "exact"
    kind = t.get("match_type", derived)
    if kind not in ("exact", "lpm", "ternary", "range") or (
        keys and kind != derived and not (kind == "ternary" and derived == "lpm")
    ):
        raise malformed(f"table match_type '{kind}' does not fit its keys ({derived})", path, t)
    if kind == "ternary" and any(k.match_type == "range" for k in keys):
        raise malformed("ternary table with a range key", path, t)

    refs = {}
    if "action_ids" in t:
        for aid in t["action_ids"]:
            action = actions_by_id.get(aid)
            if action is None:
                raise malformed(f"unknown action id {aid}", path, t)
            refs[action.name] = ActionRef(action.name, action.id, None, action.params)
    else:
        for aname in t.get("actions", []):
            action = actions_by_name.get(aname)
            if action is None:
                raise malformed(f"unknown action '{aname}'", path, t)
            refs[action.name] = ActionRef(action.name, action.id, None, action.params)

    size = t.get("max_size", 1024)
    with_counters = bool(t.get("with_counters", False))
    if with_counters and not any(c.get("is_direct") and c.get("binding") == name for c in counters_json):
        raise malformed(f"table '{name}' has with_counters but no direct counter is bound to it", path, t)
    if t.get("support_timeout"):
        log.info("table '%s': idle timeout is ignored by the software switch", name)
    hidden = not keys and "." not in name
    if profile is not None:
        if "entries" in t:
            raise unsupported(f"const entries in table '{name}' with an action profile", path, t)
        table = IndirectTable(name, keys, kind, refs, size, with_counters, False, hidden, profile=profile)
        profile.tables.append(table)
        for ref in refs.values():
            profile.actions.setdefault(ref.name, ref)
        return table
    return MatchTable(name, keys, kind, refs, size, with_counters, immutable="entries" in t, hidden=hidden)


def action_data(data, widths, path):
    """Action data from the JSON (hex strings), one value per parameter, cut to its width."""
    values = [hexstr(v, path) for v in data]
    if len(values) != len(widths):
        raise malformed(f"{len(values)} action data values for {len(widths)} parameters", path)
    return [v & ((1 << w) - 1) for v, w in zip(values, widths)]


def install_default_and_entries(table, t, path, actions_by_id):
    """Install the JSON default entry and const entries (after action functions exist)."""
    table.reset_default()
    for i, e in enumerate(t.get("entries", [])):
        epath = f"{path}.entries[{i}]"
        match_key = e.get("match_key", [])
        if len(match_key) != len(table.keys):
            raise malformed(f"{len(match_key)} key fields for {len(table.keys)}", epath, e)
        keys = []
        for k, (mk, field_) in enumerate(zip(match_key, table.keys)):
            mt = mk.get("match_type")
            if mt != field_.match_type:
                raise malformed(f"key field {k} is {mt}, the table says {field_.match_type}", epath, e)
            if mt == "valid":
                keys.append(bool(mk.get("key")))
            elif mt == "exact":
                keys.append(hexstr(mk.get("key"), epath))
            elif mt == "lpm":
                keys.append((hexstr(mk.get("key"), epath), mk.get("prefix_length")))
            elif mt == "ternary":
                keys.append((hexstr(mk.get("key"), epath), hexstr(mk.get("mask"), epath)))
            else:
                keys.append((hexstr(mk.get("start"), epath), hexstr(mk.get("end"), epath)))
        ae = e.get("action_entry", {})
        action = actions_by_id.get(ae.get("action_id"))
        if action is None:
            raise malformed(f"entry action id {ae.get('action_id')!r} is unknown", epath, e)
        params = action_data(ae.get("action_data", []), action.widths, epath)
        priority = None
        if table.needs_priority():
            bmv2 = e.get("priority", i + 1)
            priority = BMV2_MAX_PRIORITY - bmv2  # P4Runtime convention, as PI converts it
        try:
            table.add(keys, action.name, params, priority, force=True)
        except EntryError as exc:
            raise LoadError(f"malformed BMv2 JSON: const entry at {where(epath, e)}: {exc}") from None


def record_default(table, t, path, actions_by_id):
    """Record the JSON default (action and constness) so pipeline generation can inline it."""
    d = t.get("default_entry")
    if d is None:
        return
    action = actions_by_id.get(d.get("action_id"))
    if action is None:
        raise malformed(f"default entry action id {d.get('action_id')!r} is unknown", path, t)
    ref = table.actions.get(action.name)
    if ref is None:
        ref = ActionRef(action.name, action.id, None, action.params)
        table.actions[action.name] = ref
        table.actions_by_id[action.id] = ref
    params = action_data(d.get("action_data", []), action.widths, f"{path}.default_entry")
    table.initial_default = (ref, tuple(params))
    table.default_action_const = bool(d.get("action_const", False))
    table.default_entry_const = bool(d.get("action_entry_const", False))
