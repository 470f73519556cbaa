"""Action profiles and selectors, and the tables that use them (BMv2's MatchTableIndirect[WS]).

An indirect table's entry points at a member (an action and its data) or, with a selector, at a group of
members, resolved at packet time exactly as BMv2 does (src/bm_sim/match_tables.cpp, action_profile.cpp), so
a program's selector picks the same member here as on BMv2: `hash % group size` over the members in BMv2
handle order, a member of weight w held as w handles as PI's server does (p4lang/PI action_prof_mgr.cpp).
Handles, copies and the corners follow BMv2 too (a hit on an emptied group runs no action; MBR_STILL_USED,
GRP_STILL_USED, EMPTY_GRP): emulator/README.md, "Packet semantics", Action profiles and selectors."""

import heapq

from emulator.engine.match_tables import Entry, MatchTable
from emulator.errors import EntryError

_NO_ACTION = Entry(lambda F, P: None, (), None, None)


class _Handles:
    """BMv2's handle allocator: the lowest free handle first."""

    def __init__(self):
        self.free, self.next = [], 0

    @property
    def in_use(self) -> int:
        return self.next - len(self.free)

    def get(self) -> int:
        if self.free:
            return heapq.heappop(self.free)
        self.next += 1
        return self.next - 1

    def release(self, h: int) -> None:
        heapq.heappush(self.free, h)


class Member:
    __slots__ = ("id", "handle", "copies", "entry", "uses", "weights")

    def __init__(self, member_id, handle, entry):
        self.id = member_id
        self.handle = handle
        self.copies = []  # handles of its copies, for weights above 1 (PI's handles[1:])
        self.entry = entry  # Entry(fn, params, action, action_id), shared by the copies
        self.uses = 0  # table entries and groups pointing at it
        self.weights = {}  # group id -> its weight there

    @property
    def handles(self) -> list:
        return [self.handle, *self.copies]

    def copies_needed(self) -> int:
        return max(self.weights.values(), default=1) - 1


class Group:
    __slots__ = ("id", "handle", "members", "weights", "ordered", "uses")

    def __init__(self, group_id, handle):
        self.id = group_id
        self.handle = handle
        self.members = {}  # member id -> Member
        self.weights = {}  # member id -> weight (how many of its handles are in the group)
        self.ordered = []  # the members' entries by member handle (BMv2's get_nth order)
        self.uses = 0

    def member_handles(self) -> list:
        """[(BMv2 member handle, Member)] of the group, in handle order (a member once per weight)."""
        return sorted(
            ((h, m) for mid, m in self.members.items() for h in m.handles[: self.weights.get(mid, 1)]),
            key=lambda hm: hm[0],
        )

    def reorder(self):
        self.ordered = [m.entry for _, m in self.member_handles()]


class ActionProfile:
    def __init__(self, name: str, size: int, selector_name=None):
        self.name = name
        self.size = size
        self.selector_name = selector_name  # the generated calculation of a selector, else None
        self.selector = None  # that function, calc(F, payload) -> int, once compiled
        self.actions = {}  # action name -> ActionRef (every action of the tables using the profile)
        self.tables = []
        self.members = {}  # member id -> Member
        self.oneshot_members = set()  # members of one-shot action sets (no id, not readable)
        self.groups = {}  # group id -> Group
        self._member_handles = _Handles()
        self._group_handles = _Handles()

    @property
    def has_selector(self) -> bool:
        return self.selector_name is not None

    def _err(self, message, code="INVALID_ARGUMENT"):
        return EntryError(f"action profile '{self.name}': {message}", code)

    # ------------------------------------------------------------------ packets
    def resolve(self, e, F):
        """The Entry a hit on indirect entry `e` runs."""
        group = e.group
        if group is None:
            return e.member.entry
        ordered = group.ordered
        if not ordered:
            return _NO_ACTION
        if len(ordered) == 1:
            return ordered[0]
        return ordered[self.selector(F, b"") % len(ordered)]

    # ------------------------------------------------------------------ members
    def _entry(self, action, params):
        ref = self.actions.get(action)
        if ref is None:
            raise self._err(f"action '{action}' is not an action of this profile's tables")
        params = self.tables[0]._params(ref, params) if self.tables else tuple(params)
        return Entry(ref.fn, params, ref.name, ref.id)

    def _member(self, member_id) -> Member:
        m = self.members.get(member_id)
        if m is None:
            raise self._err(f"no member {member_id!r}", "NOT_FOUND")
        return m

    def _group(self, group_id) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            raise self._err(f"no group {group_id!r}", "NOT_FOUND")
        return g

    @staticmethod
    def _check_id(what, value):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise EntryError(f"{what} id must be a non-negative integer, got {value!r}")

    def member_add(self, member_id, action, params) -> None:
        self._check_id("member", member_id)
        if member_id in self.members:
            raise self._err(f"member {member_id} already exists", "ALREADY_EXISTS")
        if self._member_handles.in_use >= self.size:
            raise self._err(f"profile is full ({self.size} members)", "RESOURCE_EXHAUSTED")
        entry = self._entry(action, params)
        self.members[member_id] = Member(member_id, self._member_handles.get(), entry)

    def member_modify(self, member_id, action, params) -> None:
        m = self._member(member_id)
        new = self._entry(action, params)
        e = m.entry  # changed in place: entries and groups hold the same object
        e.fn, e.params, e.action, e.action_id = new.fn, new.params, new.action, new.action_id

    def member_delete(self, member_id) -> None:
        m = self._member(member_id)
        if m.uses:
            raise self._err(
                f"member {member_id} is still used by {m.uses} table entries or groups", "FAILED_PRECONDITION"
            )
        del self.members[member_id]
        self._member_handles.release(m.handle)

    def member_get(self, member_id) -> tuple:
        e = self._member(member_id).entry
        return e.action, list(e.params)

    # ------------------------------------------------------------------ groups
    def _need_selector(self):
        if not self.has_selector:
            raise self._err("groups need an action selector; this is a plain action profile")

    def group_set(self, group_id, members, create: bool) -> None:
        """Create a group (or replace the members of an existing one) with `members`: member ids,
        or (member id, weight) pairs."""
        self._need_selector()
        self._check_id("group", group_id)
        weights = {}
        for item in members:
            mid, weight = item if isinstance(item, tuple) else (item, 1)
            if not isinstance(weight, int) or isinstance(weight, bool) or weight <= 0:
                raise self._err(f"member {mid}: weight must be a positive integer, got {weight!r}")
            self._member(mid)
            if mid in weights:
                raise self._err(f"member {mid} is listed twice for group {group_id}: use weights instead")
            weights[mid] = weight
        if create:
            if group_id in self.groups:
                raise self._err(f"group {group_id} already exists", "ALREADY_EXISTS")
            if len(self.groups) >= self.size:
                raise self._err(f"profile is full ({self.size} groups)", "RESOURCE_EXHAUSTED")
            g = Group(group_id, self._group_handles.get())
            self.groups[group_id] = g
        else:
            g = self._group(group_id)
        touched = sorted(set(g.members) | set(weights))  # PI goes through them by member id
        extra = sum(max(0, w - len(self.members[mid].handles)) for mid, w in weights.items())
        if self._member_handles.in_use + extra > self.size:
            if create:
                del self.groups[group_id]
                self._group_handles.release(g.handle)
            raise self._err(f"profile is full: {extra} copies for weights need room", "RESOURCE_EXHAUSTED")
        for mid in touched:  # allocated before any is given back, as PI does
            m = self.members[mid]
            while len(m.handles) < weights.get(mid, 0):
                m.copies.append(self._member_handles.get())
        for m in g.members.values():
            m.uses -= 1
            del m.weights[group_id]
        g.members = {mid: self.members[mid] for mid in weights}
        g.weights = weights
        for mid, m in g.members.items():
            m.uses += 1
            m.weights[group_id] = weights[mid]
        for mid in touched:
            self._trim_copies(self.members[mid])
        g.reorder()

    def _trim_copies(self, m: Member) -> None:
        """Give back the copies no group needs any more, the last first (PI's purge)."""
        while len(m.copies) > m.copies_needed():
            self._member_handles.release(m.copies.pop())

    def group_delete(self, group_id) -> None:
        g = self._group(group_id)
        if g.uses:
            raise self._err(f"group {group_id} is still used by {g.uses} table entries", "FAILED_PRECONDITION")
        for m in g.members.values():
            m.uses -= 1
            del m.weights[group_id]
            self._trim_copies(m)
        del self.groups[group_id]
        self._group_handles.release(g.handle)

    def group_get(self, group_id) -> dict:
        """{member id: weight}, by member id."""
        g = self._group(group_id)
        return {mid: g.weights[mid] for mid in sorted(g.members)}

    def members_by_handle(self) -> list:
        """[(BMv2 member handle, member id)] of the members and their copies (not one-shot
        members), in handle order: BMv2's member list, which PI's wildcard reads answer."""
        return sorted((h, m.id) for m in self.members.values() for h in m.handles)

    # ------------------------------------------------------------------ table entries
    def target(self, member=None, group=None):
        """(Member, None) or (None, Group) for a table entry; raises EntryError."""
        if (member is None) == (group is None):
            raise self._err("an entry points at exactly one of a member or a group")
        if member is not None:
            return self._member(member), None
        self._need_selector()
        g = self._group(group)
        if not g.members:
            raise self._err(f"group {group} is empty (BMv2 refuses entries pointing at empty groups)")
        return None, g


class IndirectEntry(Entry):
    """A table entry of an indirect table: a member or a group of the table's profile, or a
    one-shot action set (an anonymous group; `oneshot` keeps the actions for reads)."""

    __slots__ = ("member", "group", "oneshot")


class IndirectTable(MatchTable):
    """A match table whose entries point into an action profile (JSON type indirect/indirect_ws)."""

    def __init__(self, *args, profile: ActionProfile, **kwargs):
        super().__init__(*args, **kwargs)
        self.profile = profile

    def add(self, keys, action, params, priority=None, force=False):
        raise self._err(
            f"entries of this table point into action profile '{self.profile.name}': give a member or a group"
        )

    def modify(self, keys, action, params, priority=None):
        self.add(keys, action, params, priority)

    def add_indirect(self, keys, priority=None, member=None, group=None, oneshot=None) -> None:
        """Point a new entry at a member, a group, or (oneshot: [(action, params)]) an action set."""
        ident = self._identity(keys, priority)
        if ident in self.entries:
            raise self._err(f"an entry with key {list(ident[0])} already exists", "ALREADY_EXISTS")
        m, g = self._target(keys, priority, member, group, oneshot)
        if len(self.entries) >= self.size:
            if oneshot is not None:
                _oneshot_release(self, g)
            raise self._err(f"table is full ({self.size} entries)", "RESOURCE_EXHAUSTED")
        entry = IndirectEntry(None, (), None, None, list(ident[0]), ident[1])
        self._link(entry, m, g, oneshot)
        entry.handle = heapq.heappop(self._free_handles) if self._free_handles else self._next_handle
        if entry.handle == self._next_handle:
            self._next_handle += 1
        self.entries[ident] = entry
        self._index(entry)

    def modify_indirect(self, keys, priority=None, member=None, group=None, oneshot=None) -> None:
        _, entry = self._find(keys, priority)
        m, g = self._target(keys, priority, member, group, oneshot)
        self._unlink(entry)
        self._link(entry, m, g, oneshot)

    def _target(self, keys, priority, member, group, oneshot):
        """(member, group) an entry is to point at: the profile's, or a one-shot action set's new group."""
        if oneshot is None:
            return self.profile.target(member, group)
        if member is not None or group is not None:
            raise self._err("a one-shot action set excludes a member or group")
        return None, _oneshot_add(self, keys, priority, oneshot)

    def _link(self, entry, member, group, oneshot):
        entry.member, entry.group = member, group
        entry.oneshot = None if oneshot is None else _oneshot_items(oneshot)
        (member or group).uses += 1

    def _unlink(self, entry):
        (entry.member or entry.group).uses -= 1
        if entry.oneshot is not None:
            _oneshot_release(self, entry.group)

    def delete(self, keys, priority=None):
        _, entry = self._find(keys, priority)
        super().delete(keys, priority)
        self._unlink(entry)

    def clear(self):
        for e in self.entries.values():
            self._unlink(e)
        super().clear()

    def set_default(self, action, params, force=False):
        if force:  # the JSON's default entry: a plain action, as BMv2 loads it
            return super().set_default(action, params, force=True)
        raise self._err("the default entry of a table with an action profile cannot be changed here", "UNIMPLEMENTED")

    def indirect_entries(self) -> list:
        """[(keys, priority, ('member', id) | ('group', id) | ('oneshot', [(action, params, weight)]))]"""
        return [(list(e.keys), e.priority, _pointer(e)) for e in self.entries.values()]


def _pointer(e):
    if e.oneshot is not None:
        return ("oneshot", [(a, list(p), w) for a, p, w in e.oneshot])
    return ("member", e.member.id) if e.member else ("group", e.group.id)


def _oneshot_items(actions) -> list:
    """[(action, params, weight)] of a one-shot set given as (action, params[, weight]) items."""
    items = []
    for item in actions:
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise EntryError(f"a one-shot action is (action, params) or (action, params, weight), got {item!r}")
        action, params, weight = item if len(item) == 3 else (*item, 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight <= 0:
            raise EntryError(f"one-shot action '{action}': weight must be a positive integer, got {weight!r}")
        items.append((action, list(params), weight))
    return items


def _oneshot_add(table, keys, priority, actions):
    """A one-shot action set: an anonymous group of anonymous members, owned by the entry. An action
    of weight w is w members in a row (PI creates them so, each with its own BMv2 handle)."""
    profile = table.profile
    profile._need_selector()
    items = _oneshot_items(actions)
    if not items:
        raise profile._err("a one-shot action set needs at least one action")
    total = sum(w for _, _, w in items)
    if profile._member_handles.in_use + total > profile.size:
        raise profile._err(f"profile is full ({profile.size} members)", "RESOURCE_EXHAUSTED")
    entries = [(profile._entry(a, p), w) for a, p, w in items]
    g = Group(None, profile._group_handles.get())
    for e, weight in entries:
        for _ in range(weight):
            m = Member(None, profile._member_handles.get(), e)
            g.members[-1 - len(g.members)] = m
            profile.oneshot_members.add(m)
    g.reorder()
    return g


def _oneshot_release(table, group):
    profile = table.profile
    for m in group.members.values():
        profile._member_handles.release(m.handle)
        profile.oneshot_members.discard(m)
    profile._group_handles.release(group.handle)
