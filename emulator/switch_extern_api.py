"""The control-plane API of meters and action profiles, mixed into SoftwareSwitch.

Meter rates are given as P4Runtime gives them: (rate per second, burst) pairs, committed first, in
packets or bytes as the meter counts; reads answer what BMv2 (through PI) answers, `None` for an
unconfigured meter. Direct meters are addressed by their table entry, as direct counters are.
Action profiles are addressed by name, their members and groups by the controller's ids.
"""

from emulator.errors import EntryError


class MeterAndProfileAPI:
    # ------------------------------------------------------------------ meters
    def _meter(self, name):
        arr = self._prog.meters.get(name)
        if arr is None:
            raise EntryError(f"unknown meter '{name}'", "NOT_FOUND")
        if arr.table is not None:
            raise EntryError(f"meter '{name}' is a direct meter of table '{arr.table.name}': use direct_meter_*")
        return arr

    def meter_set(self, name, index, config) -> None:
        """`config`: [(cir, cburst), (pir, pburst)] (units per second, burst in units); None resets."""
        with self._lock:
            self._meter(name).set_config(index, config)

    def meter_get(self, name, index):
        with self._lock:
            return self._meter(name).get_config(index)

    def meter_reset(self, name) -> None:
        """Every index of the meter back to unconfigured (always green)."""
        with self._lock:
            self._meter(name).reset()

    def _direct_meter(self, table, keys, priority):
        t = self._table(table)
        if t.direct_meter is None:
            raise EntryError(f"table '{table}' has no direct meter")
        return t.direct_meter, t.entry(keys, priority).handle

    def direct_meter_set(self, table, keys, config, priority=None) -> None:
        with self._lock:
            arr, handle = self._direct_meter(table, keys, priority)
            arr.set_config(handle, config)

    def direct_meter_get(self, table, keys, priority=None):
        with self._lock:
            arr, handle = self._direct_meter(table, keys, priority)
            return arr.get_config(handle)

    # ------------------------------------------------------------------ action profiles
    def _profile(self, name):
        profile = self._prog.action_profiles.get(name)
        if profile is None:
            raise EntryError(f"unknown action profile '{name}'", "NOT_FOUND")
        return profile

    def _indirect_table(self, name):
        t = self._table(name)
        if t.profile is None:
            raise EntryError(f"table '{name}' has no action profile: use table_add")
        return t

    def act_prof_member_add(self, profile, member_id, action, params) -> None:
        with self._lock:
            self._profile(profile).member_add(member_id, action, params)

    def act_prof_member_modify(self, profile, member_id, action, params) -> None:
        with self._lock:
            self._profile(profile).member_modify(member_id, action, params)

    def act_prof_member_delete(self, profile, member_id) -> None:
        with self._lock:
            self._profile(profile).member_delete(member_id)

    def act_prof_members(self, profile) -> dict:
        """{member id: (action, params)}"""
        with self._lock:
            p = self._profile(profile)
            return {mid: p.member_get(mid) for mid in p.members}

    def act_prof_members_by_handle(self, profile) -> list:
        """[(BMv2 member handle, member id)]: a member once, plus once per copy its weights in groups
        need (see emulator.engine.action_profiles), in handle order."""
        with self._lock:
            return self._profile(profile).members_by_handle()

    def act_prof_group_set(self, profile, group_id, members, create=True) -> None:
        """Create a group with these members (create=False: replace an existing group's members):
        member ids, or (member id, weight) pairs; a member of weight w is chosen w times as often."""
        with self._lock:
            self._profile(profile).group_set(group_id, list(members), create)

    def act_prof_programming(self, profile):
        """How the profile is programmed now: 'oneshot' (one-shot action sets in table entries),
        'manual' (members or groups), or None (empty). P4Runtime servers refuse to mix the two."""
        with self._lock:
            p = self._profile(profile)
            if p.oneshot_members:
                return "oneshot"
            return "manual" if p.members or p.groups else None

    def act_prof_group_delete(self, profile, group_id) -> None:
        with self._lock:
            self._profile(profile).group_delete(group_id)

    def act_prof_groups(self, profile) -> dict:
        """{group id: {member id: weight}}, groups in BMv2 handle order, members by id."""
        with self._lock:
            p = self._profile(profile)
            return {g.id: p.group_get(g.id) for g in sorted(p.groups.values(), key=lambda g: g.handle)}

    def table_add_indirect(self, table, keys, member=None, group=None, oneshot=None, priority=None) -> None:
        """An entry of a table with an action profile: a member id, a group id, or a one-shot
        action set `oneshot=[(action, params) or (action, params, weight), ...]`."""
        with self._lock:
            self._indirect_table(table).add_indirect(keys, priority, member, group, oneshot)

    def table_modify_indirect(self, table, keys, member=None, group=None, oneshot=None, priority=None) -> None:
        with self._lock:
            self._indirect_table(table).modify_indirect(keys, priority, member, group, oneshot)

    def table_indirect_pointer(self, table, keys, priority=None) -> tuple:
        """('member', id) | ('group', id) | ('oneshot', [(action, params, weight)]) of one entry."""
        from emulator.engine.action_profiles import _pointer

        with self._lock:
            return _pointer(self._indirect_table(table).entry(keys, priority))

    def table_indirect_entries(self, table) -> list:
        """[(keys, priority, ('member', id) | ('group', id) | ('oneshot', [(action, params, weight)]))]"""
        with self._lock:
            return self._indirect_table(table).indirect_entries()
