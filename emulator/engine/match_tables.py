"""Match-action tables at run time: entries, lookups, defaults and their control-plane checks.

Lookups follow BMv2's match units (src/bm_sim/match_units.cpp, lookup_structures.cpp):
- exact: a dict from the key to the entry;
- lpm: the longest prefix among entries whose other (exact) fields are equal;
- ternary/range tables (any ternary, optional or range field): the matching entry with the highest
  priority; ties go to the entry with the smallest BMv2 handle (handles are reused lowest-first).
Entry keys are stored masked the way BMv2 masks them (lpm prefix, ternary mask, the key's static
mask), so duplicates are detected exactly when BMv2 detects them.

Priorities follow the P4Runtime convention (larger wins). BMv2's JSON `priority` of const entries
(smaller wins) is converted as PI does: p4runtime = 2**31 - 1 - bmv2.
"""

import bisect
import heapq

from emulator.errors import EntryError
from emulator.program import KeyInfo, TableEntry

BMV2_MAX_PRIORITY = (1 << 31) - 1


class Entry:
    """One table entry (or a default entry): the action to run and its data."""

    __slots__ = (
        "fn",
        "params",
        "action",
        "action_id",
        "keys",
        "priority",
        "handle",
        "packets",
        "bytes",
        "match",
        "sort_key",
    )

    def __init__(self, fn, params, action, action_id, keys=None, priority=None):
        self.fn = fn
        self.params = params
        self.action = action
        self.action_id = action_id
        self.keys = keys
        self.priority = priority
        self.handle = -1
        self.packets = 0
        self.bytes = 0
        self.match = None
        self.sort_key = None


class ActionRef:
    """An action a table may run: its JSON id, compiled function and parameter widths."""

    __slots__ = ("name", "id", "fn", "widths", "param_names")

    def __init__(self, name, action_id, fn, params):
        self.name = name
        self.id = action_id
        self.fn = fn
        self.param_names = [p for p, _ in params]
        self.widths = [w for _, w in params]


def _noop(F, P):
    return None


class KeyField:
    """A key element: what to match, how, and BMv2's static mask (from a slice or `&&&` in P4)."""

    __slots__ = ("name", "match_type", "width", "static_mask")

    def __init__(self, name, match_type, width, static_mask):
        self.name = name
        self.match_type = match_type
        self.width = width
        self.static_mask = static_mask  # None or int

    @property
    def full(self) -> int:
        return (1 << self.width) - 1


class MatchTable:
    direct_meter = None  # MeterArray of a direct meter (emulator.engine.meters), run on hits
    direct_meter_target = None  # [header, field] its colour is written to
    profile = None  # ActionProfile of an indirect table (emulator.engine.action_profiles)

    def __init__(self, name, keys, kind, actions, size, with_counters, immutable, hidden=False):
        self.name = name
        self.keys = keys  # KeyField list, key order
        self.kind = kind  # exact | lpm | ternary | range
        self.actions = actions  # name -> ActionRef
        self.actions_by_id = {a.id: a for a in actions.values()}
        self.size = size
        self.with_counters = with_counters
        self.immutable = immutable
        self.hidden = hidden
        self.entries = {}  # identity -> Entry, insertion order
        self.exact = {}  # exact tables: lookup key -> Entry
        self._lpm = []  # lpm tables: [(prefix_len, mask, {probe: Entry})], longest first
        self._lpm_index = next((i for i, k in enumerate(keys) if k.match_type == "lpm"), None)
        self._scan = []  # ternary/range tables: entries, best first
        self._free_handles = []
        self._next_handle = 0
        self.default = Entry(_noop, (), None, None)
        self.initial_default = None  # (ActionRef|None, params)
        self.default_action_const = False
        self.default_entry_const = False

    # ------------------------------------------------------------------ info
    def info_keys(self) -> list:
        return [KeyInfo(k.name, k.match_type, k.width) for k in self.keys]

    def needs_priority(self) -> bool:
        return self.kind in ("ternary", "range")

    # ------------------------------------------------------------------ lookups
    def lookup(self, key):
        """Entry matching `key` (a value for one-field tables, else a tuple in key order)."""
        if self.kind == "lpm":
            return self._lookup_lpm(key)
        return self._lookup_scan(key)

    def _lookup_lpm(self, key):
        i = self._lpm_index
        if len(self.keys) == 1:
            for _, mask, bucket in self._lpm:
                e = bucket.get(key & mask)
                if e is not None:
                    return e
            return None
        for _, mask, bucket in self._lpm:
            e = bucket.get(key[:i] + (key[i] & mask,) + key[i + 1 :])
            if e is not None:
                return e
        return None

    def _lookup_scan(self, key):
        if self.kind == "ternary":
            # key is the concatenation of all fields (see ternary_key_layout)
            for e in self._scan:
                mask, value = e.match
                if key & mask == value:
                    return e
            return None
        if len(self.keys) == 1:
            key = (key,)
        for e in self._scan:
            for k, (lo, hi, mask) in zip(key, e.match):
                if mask is None:
                    if not lo <= k <= hi:
                        break
                elif k & mask != lo:
                    break
            else:
                return e
        return None

    def ternary_layout(self):
        """Bit offsets of each field in the combined ternary lookup key (first field highest)."""
        offsets, total = [], 0
        for k in reversed(self.keys):
            offsets.append(total)
            total += k.width
        return list(reversed(offsets))

    # ------------------------------------------------------------------ entries
    def _err(self, message, code="INVALID_ARGUMENT"):
        return EntryError(f"table '{self.name}': {message}", code)

    def _action(self, action):
        ref = self.actions.get(action)
        if ref is None:
            raise self._err(
                f"action '{action}' is not an action of this table (actions: {', '.join(sorted(self.actions))})"
            )
        return ref

    def _params(self, ref, params):
        if params is None:
            params = []
        try:
            params = [int(p) for p in params]
        except (TypeError, ValueError):
            raise self._err(f"action '{ref.name}' parameters must be integers, got {params!r}") from None
        if len(params) != len(ref.widths):
            raise self._err(
                f"action '{ref.name}' takes {len(ref.widths)} parameter(s) "
                f"({', '.join(ref.param_names) or 'none'}), got {len(params)}"
            )
        for name, width, value in zip(ref.param_names, ref.widths, params):
            if not 0 <= value < (1 << width):
                raise self._err(f"action '{ref.name}' parameter '{name}' = {value} does not fit in {width} bits")
        return tuple(params)

    def _check_value(self, k, value, what="value"):
        if isinstance(value, bool) and k.match_type != "valid":
            value = int(value)
        if not isinstance(value, int):
            raise self._err(f"key field '{k.name}' {what} must be an integer, got {value!r}")
        if not 0 <= value <= k.full:
            raise self._err(f"key field '{k.name}' {what} {value:#x} does not fit in {k.width} bits")
        return value

    def canonical_key(self, keys):
        """The keys in canonical API form, masked as BMv2 masks them; raises EntryError."""
        if not self.keys:
            raise self._err("the table has no key: set its default action instead")
        if not isinstance(keys, (list, tuple)):
            raise self._err(f"keys must be a list with one item per key field, got {keys!r}")
        if len(keys) != len(self.keys):
            raise self._err(
                f"expected {len(self.keys)} key field(s) ({', '.join(k.name for k in self.keys)}), got {len(keys)}"
            )
        out = []
        for k, given in zip(self.keys, keys):
            smask = k.full if k.static_mask is None else k.static_mask
            mt = k.match_type
            if mt == "valid":
                if not isinstance(given, (bool, int)) or given not in (0, 1):
                    raise self._err(f"key field '{k.name}' (valid) must be a bool, got {given!r}")
                out.append(bool(given))
            elif mt == "exact":
                if isinstance(given, (tuple, list)):
                    raise self._err(f"key field '{k.name}' is exact: give an integer, got {given!r}")
                out.append(self._check_value(k, given) & smask)
            else:
                if not isinstance(given, (tuple, list)) or len(given) != 2:
                    form = {"lpm": "(value, prefix_len)", "ternary": "(value, mask)", "range": "(low, high)"}[mt]
                    raise self._err(f"key field '{k.name}' is {mt}: give {form}, got {given!r}")
                a, b = given
                if mt == "lpm":
                    a = self._check_value(k, a)
                    if not isinstance(b, int) or not 0 <= b <= k.width:
                        raise self._err(f"key field '{k.name}' prefix length {b!r} outside 0..{k.width}")
                    out.append((a & _prefix_mask(b, k.width) & smask, b))
                elif mt == "ternary":
                    a = self._check_value(k, a)
                    b = self._check_value(k, b, "mask")
                    mask = b & smask
                    out.append((a & mask, mask))
                else:  # range
                    a = self._check_value(k, a, "low")
                    b = self._check_value(k, b, "high")
                    if a > b:
                        raise self._err(f"key field '{k.name}' range low {a:#x} > high {b:#x}")
                    out.append((a, b))
        return tuple(out)

    def _identity(self, keys, priority):
        canon = self.canonical_key(keys)
        if self.needs_priority():
            if priority is None:
                raise self._err("a priority is required (the table has ternary, optional or range keys)")
            if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= BMV2_MAX_PRIORITY:
                raise self._err(f"priority {priority!r} outside 0..{BMV2_MAX_PRIORITY}")
            return canon, priority
        if priority not in (None, 0):
            raise self._err(f"priority must be None for an exact/lpm table, got {priority!r}")
        return canon, None

    def _find(self, keys, priority):
        ident = self._identity(keys, priority)
        entry = self.entries.get(ident)
        if entry is None:
            raise self._err(
                f"no entry with key {list(ident[0])}" + (f" priority {ident[1]}" if ident[1] is not None else ""),
                "NOT_FOUND",
            )
        return ident, entry

    def add(self, keys, action, params, priority=None, force=False):
        if self.immutable and not force:
            raise self._err("the table has const entries and cannot be changed", "PERMISSION_DENIED")
        ident = self._identity(keys, priority)
        ref = self._action(action)
        params = self._params(ref, params)
        if ident in self.entries:
            raise self._err(
                f"an entry with key {list(ident[0])}"
                + (f" priority {ident[1]}" if ident[1] is not None else "")
                + " already exists",
                "ALREADY_EXISTS",
            )
        if len(self.entries) >= self.size:
            raise self._err(f"table is full ({self.size} entries)", "RESOURCE_EXHAUSTED")
        entry = Entry(ref.fn, params, ref.name, ref.id, list(ident[0]), ident[1])
        entry.handle = heapq.heappop(self._free_handles) if self._free_handles else self._next_handle
        if entry.handle == self._next_handle:
            self._next_handle += 1
        self.entries[ident] = entry
        self._index(entry)

    def modify(self, keys, action, params, priority=None):
        if self.immutable:
            raise self._err("the table has const entries and cannot be changed", "PERMISSION_DENIED")
        _, entry = self._find(keys, priority)
        ref = self._action(action)
        params = self._params(ref, params)
        entry.fn, entry.params, entry.action, entry.action_id = ref.fn, params, ref.name, ref.id

    def delete(self, keys, priority=None):
        if self.immutable:
            raise self._err("the table has const entries and cannot be changed", "PERMISSION_DENIED")
        ident, entry = self._find(keys, priority)
        del self.entries[ident]
        self._unindex(entry)
        heapq.heappush(self._free_handles, entry.handle)

    def clear(self):
        if self.immutable:
            raise self._err("the table has const entries and cannot be changed", "PERMISSION_DENIED")
        self.entries.clear()
        self.exact.clear()
        self._lpm.clear()
        self._scan.clear()
        self._free_handles.clear()
        self._next_handle = 0

    def entry(self, keys, priority=None) -> Entry:
        return self._find(keys, priority)[1]

    def list_entries(self) -> list:
        return [TableEntry(list(e.keys), e.action, list(e.params), e.priority) for e in self.entries.values()]

    # ------------------------------------------------------------------ indexes
    def _index(self, entry):
        keys = entry.keys
        if self.kind == "exact":
            probe = _exact_probe(keys)
            self.exact[probe if len(keys) > 1 else probe[0]] = entry
        elif self.kind == "lpm":
            i = self._lpm_index
            plen = keys[i][1]
            width = self.keys[i].width
            probe = tuple(int(k) if not isinstance(k, tuple) else k[0] for k in keys)
            bucket = self._bucket(plen, width)
            bucket[probe if len(keys) > 1 else probe[0]] = entry
        else:
            entry.match = self._scan_match(keys)
            entry.sort_key = (-entry.priority, entry.handle)
            keys_sorted = [e.sort_key for e in self._scan]
            self._scan.insert(bisect.bisect(keys_sorted, entry.sort_key), entry)

    def _unindex(self, entry):
        keys = entry.keys
        if self.kind == "exact":
            probe = _exact_probe(keys)
            del self.exact[probe if len(keys) > 1 else probe[0]]
        elif self.kind == "lpm":
            i = self._lpm_index
            plen = keys[i][1]
            probe = tuple(int(k) if not isinstance(k, tuple) else k[0] for k in keys)
            for n, (length, _, bucket) in enumerate(self._lpm):
                if length == plen:
                    del bucket[probe if len(keys) > 1 else probe[0]]
                    if not bucket:
                        del self._lpm[n]
                    break
        else:
            self._scan.remove(entry)

    def _bucket(self, plen, width):
        for length, _, bucket in self._lpm:
            if length == plen:
                return bucket
        bucket = {}
        self._lpm.append((plen, _prefix_mask(plen, width), bucket))
        self._lpm.sort(key=lambda t: -t[0])
        return bucket

    def _scan_match(self, keys):
        if self.kind == "ternary":
            mask = value = 0
            for k, key, off in zip(self.keys, keys, self.ternary_layout()):
                if k.match_type in ("exact", "valid"):
                    m, v = k.full, int(key)
                elif k.match_type == "lpm":
                    m, v = _prefix_mask(key[1], k.width), key[0]
                else:
                    v, m = key
                mask |= m << off
                value |= v << off
            return mask, value
        match = []  # per field: (lo, hi, None) for a range check, (value, None, mask) for a masked one
        for k, key in zip(self.keys, keys):
            if k.match_type in ("exact", "valid"):
                match.append((int(key), int(key), None))
            elif k.match_type == "range":
                match.append((key[0], key[1], None))
            elif k.match_type == "lpm":
                match.append((key[0], None, _prefix_mask(key[1], k.width)))
            else:
                match.append((key[0], None, key[1]))
        return tuple(match)

    # ------------------------------------------------------------------ defaults
    def set_default(self, action, params, force=False):
        ref = self._action(action)
        params = self._params(ref, params)
        if not force:
            if self.default_entry_const:
                raise self._err("the default entry is const", "PERMISSION_DENIED")
            if self.default_action_const and self.default.action != ref.name:
                raise self._err(f"the default action is const ({self.default.action})", "PERMISSION_DENIED")
        self.default = Entry(ref.fn, params, ref.name, ref.id)

    def get_default(self) -> tuple:
        return self.default.action, list(self.default.params)

    def reset_default(self):
        ref, params = self.initial_default or (None, ())
        if ref is None:
            self.default = Entry(_noop, (), None, None)
        else:
            self.default = Entry(ref.fn, tuple(params), ref.name, ref.id)


def _exact_probe(keys):
    return tuple(int(k) for k in keys)


def _prefix_mask(plen, width):
    return ((1 << plen) - 1) << (width - plen) if plen else 0
