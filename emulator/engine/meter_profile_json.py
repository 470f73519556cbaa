"""The JSON's `meter_arrays` and pipelines' `action_profiles` -> run-time objects (BMv2's
P4Objects::init_meter_arrays and init_action_profiles), checked at load time."""

from emulator.engine.action_profiles import ActionProfile
from emulator.engine.calculations import compile_calculation, hash_function
from emulator.engine.jsonutil import malformed, unsupported
from emulator.engine.meters import MeterArray


def build_meter_arrays(cfg, layout, clock):
    """({name: MeterArray}, {name: (MeterArray, json, path)} of the direct ones)."""
    meters, direct = {}, {}
    for i, m in enumerate(cfg.get("meter_arrays", []) or []):
        path = f"meter_arrays[{i}] '{m.get('name')}'"
        unit = m.get("type")
        if unit not in ("packets", "bytes"):
            raise malformed(f"meter type {unit!r} (packets or bytes)", path, m)
        rate_count = m.get("rate_count", 2)
        size = m.get("size", 0)
        if not isinstance(rate_count, int) or rate_count < 1 or not isinstance(size, int) or size < 0:
            raise malformed("meter rate_count and size must be non-negative integers", path, m)
        if m.get("name") in meters:
            raise malformed(f"duplicate meter name '{m.get('name')}'", path, m)
        array = MeterArray(m.get("name"), unit, rate_count, size, clock)
        meters[array.name] = array
        if m.get("is_direct"):
            direct[array.name] = (array, m, path)
    return meters, direct


def bind_direct_meters(direct, tables, table_json):
    """Attach each direct meter to its table, with the field its colour is written to."""
    for name, (array, m, path) in direct.items():
        table_name = m.get("binding")
        table = tables.get(table_name)
        if table is None:
            raise malformed(f"direct meter '{name}' is bound to unknown table {table_name!r}", path, m)
        target = m.get("result_target")
        if not isinstance(target, list) or len(target) != 2:
            raise malformed("a direct meter needs result_target [header, field]", path, m)
        array.table = table
        table.direct_meter = array
        table.direct_meter_target = target
    for table, t, tpath in table_json.values():
        name = t.get("direct_meters")
        if name is not None and getattr(table, "direct_meter", None) is None:
            raise malformed(f"table '{table.name}' names direct meter {name!r}, which is not bound to it", tpath, t)
        if name is not None and table.direct_meter.size != table.size:
            table.direct_meter.resize(table.size)  # one meter per entry handle, as BMv2 sizes it


def build_action_profiles(pipeline, ppath, cfg, layout, ns, src, draw_random):
    """{name: ActionProfile} of one pipeline; a selector's hash becomes a generated calculation."""
    profiles = {}
    base = len(cfg.get("calculations", []) or [])
    for i, ap in enumerate(pipeline.get("action_profiles", []) or []):
        path = f"{ppath}.action_profiles[{i}] '{ap.get('name')}'"
        size = ap.get("max_size", 0)
        if not isinstance(size, int) or size < 0:
            raise malformed("max_size must be a non-negative integer", path, ap)
        calc = None
        selector = ap.get("selector")
        if selector is not None:
            for j, item in enumerate(selector.get("input", [])):
                if item.get("type") != "field":
                    raise unsupported(f"selector input type {item.get('type')!r}", f"{path}.selector.input[{j}]", item)
            spec = {
                "name": f"{ap.get('name')}.selector",
                "algo": selector.get("algo"),
                "input": selector.get("input", []),
            }
            index = base + 1000 * (1 + int(ppath.split("[")[1].split("]")[0])) + i
            calc = compile_calculation(
                spec, index, layout, ns, src, hash_function(spec, f"{path}.selector", draw_random)
            )
        profile = ActionProfile(ap.get("name"), size)
        profile.selector_name = calc  # bound to the generated function by bind_selectors
        profiles[profile.name] = profile
    return profiles


def bind_selectors(profiles, fns):
    for profile in profiles.values():
        if profile.selector_name is not None:
            profile.selector = fns[profile.selector_name]
