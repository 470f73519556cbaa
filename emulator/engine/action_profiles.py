"""Action profiles and selectors, and the tables that use them (BMv2's MatchTableIndirect[WS]).

An action profile holds members (an action and its data) and, with a selector, groups of members.
A table entry of an indirect table points at a member, or (selector) at a group; the lookup resolves
the pointer at packet time (src/bm_sim/match_tables.cpp, action_profile.cpp):
- a member runs its action;
- a group runs member number `hash % group size` among its members ordered by BMv2 member handle
  (handles are allocated lowest-free first, so this is creation order with reuse); `hash` is the
  selector's calculation over its fields (the whole output of the algorithm);
- a hit on a group emptied after the entry was added runs no action (BMv2 logs an error and
  leaves the next node undefined; here the table continues as on a miss).
Members still used by an entry or a group, and groups used by an entry, cannot be deleted; an entry
cannot point at an empty group (BMv2's MBR_STILL_USED, GRP_STILL_USED, EMPTY_GRP).
"""

import heapq

from emulator.engine.tables import Entry, MatchTable
from emulator.errors import EntryError

_NO_ACTION = Entry(lambda F, P: None, (), None, None)


class _Handles:
    """BMv2's handle allocator: the lowest free handle first."""

    def __init__(self):
        self.free, self.next = [], 0

    def get(self) -> int:
        if self.free:
            return heapq.heappop(self.free)
        self.next += 1
        return self.next - 1

    def release(self, h: int) -> None:
        heapq.heappush(self.free, h)


class Member:
    __slots__ = ("id", "handle", "entry", "uses")

    def __init__(self, member_id, handle, entry):
        self.id = member_id
        self.handle = handle
        self.entry = entry  # Entry(fn, params, action, action_id)
        self.uses = 0  # table entries and groups pointing at it


class Group:
    __slots__ = ("id", "handle", "members", "ordered", "uses")

    def __init__(self, group_id, handle):
        self.id = group_id
        self.handle = handle
        self.members = {}  # member id -> Member
        self.ordered = []  # the members' entries by member handle (BMv2's get_nth order)
        self.uses = 0

    def reorder(self):
        self.ordered = [m.entry for m in sorted(self.members.values(), key=lambda m: m.handle)]


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
        if len(self.members) + len(self.oneshot_members) >= self.size:
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

    def group_set(self, group_id, member_ids, create: bool) -> None:
        """Create a group (or replace the members of an existing one) with `member_ids`."""
        self._need_selector()
        self._check_id("group", group_id)
        members = []
        for mid in member_ids:
            m = self._member(mid)
            if m in members:
                raise self._err(f"member {mid} is listed twice for group {group_id}")
            members.append(m)
        if create:
            if group_id in self.groups:
                raise self._err(f"group {group_id} already exists", "ALREADY_EXISTS")
            if len(self.groups) >= self.size:
                raise self._err(f"profile is full ({self.size} groups)", "RESOURCE_EXHAUSTED")
            g = Group(group_id, self._group_handles.get())
            self.groups[group_id] = g
        else:
            g = self._group(group_id)
        for m in g.members.values():
            m.uses -= 1
        g.members = {m.id: m for m in members}
        for m in members:
            m.uses += 1
        g.reorder()

    def group_delete(self, group_id) -> None:
        g = self._group(group_id)
        if g.uses:
            raise self._err(f"group {group_id} is still used by {g.uses} table entries", "FAILED_PRECONDITION")
        for m in g.members.values():
            m.uses -= 1
        del self.groups[group_id]
        self._group_handles.release(g.handle)

    def group_get(self, group_id) -> list:
        return sorted(self._group(group_id).members)

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
        if oneshot is not None:
            if member is not None or group is not None:
                raise self._err("a one-shot action set excludes a member or group")
            m, g = None, _oneshot_add(self, keys, priority, oneshot)
        else:
            m, g = self.profile.target(member, group)
        if len(self.entries) >= self.size:
            if oneshot is not None:
                _oneshot_release(self, g)
            raise self._err(f"table is full ({self.size} entries)", "RESOURCE_EXHAUSTED")
        entry = IndirectEntry(None, (), None, None, list(ident[0]), ident[1])
        entry.member, entry.group = m, g
        entry.oneshot = None if oneshot is None else [(a, list(p)) for a, p in oneshot]
        (m or g).uses += 1
        entry.handle = heapq.heappop(self._free_handles) if self._free_handles else self._next_handle
        if entry.handle == self._next_handle:
            self._next_handle += 1
        self.entries[ident] = entry
        self._index(entry)

    def modify_indirect(self, keys, priority=None, member=None, group=None, oneshot=None) -> None:
        _, entry = self._find(keys, priority)
        if oneshot is not None:
            if member is not None or group is not None:
                raise self._err("a one-shot action set excludes a member or group")
            m, g = None, _oneshot_add(self, keys, priority, oneshot)
        else:
            m, g = self.profile.target(member, group)
        self._unlink(entry)
        entry.member, entry.group = m, g
        entry.oneshot = None if oneshot is None else [(a, list(p)) for a, p in oneshot]
        (m or g).uses += 1

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
        """[(keys, priority, ('member', id) | ('group', id) | ('oneshot', [(action, params)]))]"""
        return [(list(e.keys), e.priority, _pointer(e)) for e in self.entries.values()]


def _pointer(e):
    if e.oneshot is not None:
        return ("oneshot", [(a, list(p)) for a, p in e.oneshot])
    return ("member", e.member.id) if e.member else ("group", e.group.id)


def _oneshot_add(table, keys, priority, actions):
    """A one-shot action set: an anonymous group of anonymous members, owned by the entry."""
    profile = table.profile
    profile._need_selector()
    if not actions:
        raise profile._err("a one-shot action set needs at least one action")
    if len(profile.members) + len(profile.oneshot_members) + len(actions) > profile.size:
        raise profile._err(f"profile is full ({profile.size} members)", "RESOURCE_EXHAUSTED")
    entries = [profile._entry(a, p) for a, p in actions]
    g = Group(None, profile._group_handles.get())
    for k, e in enumerate(entries):
        m = Member(None, profile._member_handles.get(), e)
        g.members[-1 - k] = m
        profile.oneshot_members.add(m)
    g.reorder()
    return g


def _oneshot_release(table, group):
    profile = table.profile
    for m in group.members.values():
        profile._member_handles.release(m.handle)
        profile.oneshot_members.discard(m)
    profile._group_handles.release(group.handle)
