"""Frames and table contents for differential tests of the two engine backends.

`guided_frames` walks a program's parser in its BMv2 JSON and builds frames that take its select
branches (random header bytes, the select key's field patched to a case's value), so random frames
reach deep parser states and the controls behind them; `mutate` then flips, truncates and extends
them. `random_entries` fills a program's tables with valid random entries (with wildcard and /0
entries so lookups hit); `random_value_sets` picks members for its parse value sets, and frames
guided with those members take the value set branches too.
"""

import random

from emulator.engine.jsonutil import hexstr
from emulator.engine.valuesets import pad


def _put_bits(buf: bytearray, bit: int, width: int, value: int) -> None:
    for i in range(width):
        b = bit + i
        v = (value >> (width - 1 - i)) & 1
        if v:
            buf[b >> 3] |= 0x80 >> (b & 7)
        else:
            buf[b >> 3] &= ~(0x80 >> (b & 7)) & 0xFF


def _field_bits(cfg, header_type):
    ht = next(h for h in cfg["header_types"] if h["name"] == header_type)
    out, bit = {}, 0
    for f in ht["fields"]:
        width = 0 if f[1] == "*" else f[1]  # a varbit field: its fixed part is 0 bits
        out[f[0]] = (bit, width)
        bit += width
    return out, bit // 8


def guided_frames(
    cfg: dict, count: int, rng: random.Random, max_states: int = 24, value_sets: dict | None = None
) -> list[bytes]:
    """`value_sets`: {name: [members]} as the switch holds them; select cases on a listed set with
    members are taken like constant cases (with one of the members), others are never chosen."""
    value_sets = value_sets or {}
    parser = next(p for p in cfg["parsers"] if p["name"] == "parser")
    states = {s["name"]: s for s in parser["parse_states"]}
    headers = {h["name"]: h for h in cfg["headers"]}
    stacks = {s["name"]: s for s in cfg.get("header_stacks", [])}
    frames = []
    for _ in range(count):
        buf = bytearray()
        where = {}  # header instance -> byte offset in buf
        stack_next = {}
        state = parser["init_state"]
        for _ in range(max_states):
            if state is None:
                break
            st = states[state]
            for op in st.get("parser_ops", []):
                if op["op"] != "extract":
                    continue
                p = op["parameters"][0]
                if p["type"] == "regular":
                    name = p["value"]
                elif p["type"] == "stack":
                    s = stacks[p["value"]]
                    k = stack_next.get(s["name"], 0)
                    if k >= len(s["header_ids"]):
                        break
                    stack_next[s["name"]] = k + 1
                    name = next(h["name"] for h in cfg["headers"] if h["id"] == s["header_ids"][k])
                    where[s["name"] + ".last"] = len(buf)
                else:
                    continue
                _, nbytes = _field_bits(cfg, headers[name]["header_type"])
                where[name] = len(buf)
                buf += bytes(rng.getrandbits(8) for _ in range(nbytes))
            transitions = st.get("transitions", [])
            cases = [t for t in transitions if t.get("type", "hexstr") == "hexstr" and t["value"] != "default"]
            cases += [t for t in transitions if t.get("type") == "parse_vset" and value_sets.get(t["value"])]
            default = next((t for t in transitions if t.get("type") == "default" or t.get("value") == "default"), None)
            pick = rng.choice(cases) if cases and rng.random() < 0.85 else default
            if pick is None:
                break
            if pick in cases:
                members = value_sets.get(pick["value"]) if pick.get("type") == "parse_vset" else None
                _patch_key(cfg, st, pick, buf, where, headers, stacks, rng, members)
            state = pick.get("next_state")
        buf += bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 0, 1, 8, 20, 64])))
        frames.append(bytes(buf))
    return frames


def _patch_key(cfg, st, case, buf, where, headers, stacks, rng, members=None):
    """Write the case's value (under its mask) into the frame bytes the select key reads; for a
    value set case (`members` given), one of its members laid out like the key."""
    keys = st.get("transition_key", [])
    widths = []
    for k in keys:
        if k["type"] in ("field", "stack_field"):
            hname, fname = k["value"]
            if k["type"] == "stack_field":
                htype = stacks[hname]["header_type"]
                hname = hname + ".last"
            else:
                htype = headers.get(hname, {}).get("header_type")
            if htype is None or hname not in where:
                return
            bits, _ = _field_bits(cfg, htype)
            widths.append(("f", where[hname], bits[fname]))
        elif k["type"] == "lookahead":
            widths.append(("l", len(buf), tuple(k["value"])))
        else:
            return
    total = sum(((w[2][1] + 7) // 8) for w in widths)
    if members is not None:
        value = pad(rng.choice(members), [w[2][1] for w in widths])
    else:
        value = hexstr(case["value"])
    mask = hexstr(case["mask"]) if case.get("mask") else (1 << (8 * total)) - 1
    shift = total * 8
    for kind, off, (bit, width) in widths:
        nbytes = (width + 7) // 8
        shift -= nbytes * 8
        part_v = (value >> shift) & ((1 << (nbytes * 8)) - 1)
        part_m = (mask >> shift) & ((1 << (nbytes * 8)) - 1)
        field_value = (part_v & part_m) | (rng.getrandbits(nbytes * 8) & ~part_m)
        field_value &= (1 << width) - 1
        if kind == "l":
            need = off + (bit + width + 7) // 8
            if len(buf) < need:
                buf += bytes(need - len(buf))
            _put_bits(buf, off * 8 + bit, width, field_value)
        else:
            _put_bits(buf, off * 8 + bit, width, field_value)


def mutate(frame: bytes, rng: random.Random) -> bytes:
    b = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        choice = rng.random()
        if choice < 0.5 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif choice < 0.75:
            b = b[: rng.randint(0, len(b))]
        else:
            b += bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))
    return bytes(b)


def random_entries(program, rng: random.Random, per_table: int = 6) -> list[tuple]:
    """[(table, keys, action, params, priority)] of valid random entries for every table that
    accepts entries, including catch-all ones (ternary mask 0, lpm /0, full ranges)."""
    out = []
    for name, t in program.tables.items():
        if t.const_entries or not t.keys or t.hidden:
            continue
        actions = [a for a in t.actions if a is not None]
        if not actions:
            continue
        priority_needed = any(k.match_type in ("ternary", "range") for k in t.keys)
        for n in range(per_table):
            catch_all = n == 0
            keys = []
            for k in t.keys:
                width = k.bitwidth
                full = (1 << width) - 1
                v = rng.getrandbits(width) if width else 0
                if k.match_type == "valid":
                    keys.append(rng.random() < 0.8)
                elif k.match_type == "exact":
                    keys.append(v if rng.random() < 0.7 else rng.randint(0, min(full, 3)))
                elif k.match_type == "lpm":
                    plen = 0 if catch_all else rng.randint(0, width)
                    keys.append((v & (((1 << plen) - 1) << (width - plen)) if plen else 0, plen))
                elif k.match_type == "ternary":
                    m = 0 if catch_all else rng.getrandbits(width)
                    keys.append((v & m, m))
                else:
                    lo, hi = sorted((v, rng.getrandbits(width) if width else 0))
                    keys.append((0, full) if catch_all else (lo, hi))
            action = rng.choice(actions)
            widths = program.actions[action].params
            params = [rng.getrandbits(w) if w else 0 for _, w in widths]
            priority = rng.randint(1, 1000) if priority_needed else None
            out.append((name, keys, action, params, priority))
    return out


def random_value_sets(program, rng: random.Random) -> dict:
    """{value set: [members]}: random distinct members for each of a program's parse value sets, up
    to its size (at most 4), for `SoftwareSwitch.value_set_replace` and `guided_frames`."""
    out = {}
    for name, vs in program.value_sets.items():
        limit = min(vs.size or 4, 4)
        out[name] = list(dict.fromkeys(rng.getrandbits(vs.bitwidth) for _ in range(rng.randint(1, limit))))
    return out
