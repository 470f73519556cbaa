"""NativeSwitch: the switch's API (as SoftwareSwitch's) over the program compiled to C.

The Python engine still loads and validates the program and keeps the control plane's view of every
table (so checks, error messages, handles and reads are the reference implementation's); each change
is mirrored into the C tables, which the packets use. Registers, counters, direct counters,
multicast groups and statistics live in C only: the Python copies are never touched by packets here.
"""

import ctypes
import logging

from emulator.errors import EntryError
from emulator.native.cgen import CGen
from emulator.native.library import LOG_MSG_FN, NOTICE_COPY_LIMIT, NOTICE_FN, SwOut, load_program_library
from emulator.switch_api import CLONE_DIGEST_STAT_KEYS, COPY_LIMIT_NOTICE, MAX_COPIES, STAT_KEYS, SwitchAPI

log = logging.getLogger("emulator.switch")
trace_log = logging.getLogger("emulator.trace")
p4_log = logging.getLogger("emulator.log_msg")

# the order of runtime.h's ST_* enum
NATIVE_STAT_KEYS = (*STAT_KEYS, "dropped_output_full", *CLONE_DIGEST_STAT_KEYS)
DIGEST_CHUNK = 1024  # samples fetched from C per call
U64 = ctypes.c_uint64


def _u64s(values):
    values = list(values) or [0]
    return (U64 * len(values))(*values)


def _prefix_mask(plen, width):
    return ((1 << plen) - 1) << (width - plen) if plen else 0


def log_msg_receiver(formats):
    """The callback C calls for log_msg call `k` (CGen.log_formats[k]) with n 128-bit arguments:
    logged on "emulator.log_msg" as the Python backend logs it."""

    def receive(k, n, args):
        form = formats[k]
        if form.error is not None:
            p4_log.error("%s", form.error)  # simple_switch logs this and exits
            return
        words = ctypes.cast(args, ctypes.POINTER(U64 * (2 * n))).contents if n else ()
        values = [_signed128(words[2 * i] | words[2 * i + 1] << 64) for i in range(n)]
        p4_log.info("%s", form.render(values))

    return receive


def _notice(code):
    """The switch's own notices from C, logged as the Python backend logs them."""
    if code == NOTICE_COPY_LIMIT:
        log.warning(COPY_LIMIT_NOTICE, MAX_COPIES)


def _signed128(x):
    return x - (1 << 128) if x >> 127 else x


class NativeSwitch(SwitchAPI):
    backend = "native"

    def __init__(self, program, cfg, drop_port=511, trace_level=logging.DEBUG, sanitize=False):
        super().__init__(program, drop_port=drop_port, trace_level=trace_level)
        gen = CGen(cfg, program, drop_port)
        self.c_source = gen.generate()
        self._vset_views = gen.vset_views  # C view index -> (value set, key widths, mask)
        self._crc_index = {name: k for k, name in enumerate(gen.custom_crcs)}
        self.lib = load_program_library(self.c_source, str(cfg.get("program", "p4")), sanitize=sanitize)
        self.handle = self.lib.sw_create()
        if not self.handle:
            raise MemoryError("sw_create failed")
        self._out = SwOut()
        self._log_msg_fn = None  # the ctypes callback must live as long as the library may call it
        if gen.log_formats:
            self._log_msg_fn = LOG_MSG_FN(log_msg_receiver(gen.log_formats))
            self.lib.sw_set_log_msg(self.handle, self._log_msg_fn)
        self._notice_fn = NOTICE_FN(_notice)  # kept alive as long as the library may call it
        self.lib.sw_set_notice(self.handle, self._notice_fn)
        self._table_index = {name: i for i, name in enumerate(program.tables)}
        self._reg_index = {name: i for i, name in enumerate(program.registers)}
        self._ctr_index = {name: i for i, name in enumerate(program.counters)}
        self._meter_index = {name: i for i, name in enumerate(program.meters)}
        self._profile_index = {name: i for i, name in enumerate(program.action_profiles)}
        for table in program.tables.values():
            for entry in table.entries.values():
                self._push_entry(table, entry)
            self._push_default(table)
        for name in self._crc_index:
            self._push_crc(name)

    def close(self):
        if getattr(self, "handle", None):
            self.lib.sw_destroy(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @property
    def generated_c(self) -> str:
        return self.c_source

    # ------------------------------------------------------------------ data plane
    def process(self, port: int, frame: bytes) -> list:
        if type(frame) is not bytes:
            frame = bytes(frame)
        tracing = trace_log.isEnabledFor(self.trace_level)
        with self._lock:
            out = self._out
            out.count = out.used = 0
            if self._clock is not None:
                self.lib.sw_pin_clock(self.handle, 1, self._now_us())
            self.lib.sw_process_locked(self.handle, port & 0xFFFFFFFF, frame, len(frame), ctypes.byref(out))
            base = ctypes.addressof(out.buf)
            result = [(out.port[i], ctypes.string_at(base + out.off[i], out.len[i])) for i in range(out.count)]
        if tracing:
            trace_log.log(self.trace_level, "packet in: port %d, %d bytes (native backend)", port, len(frame))
            for p, fr in result:
                trace_log.log(self.trace_level, "packet out: port %d, %d bytes", p, len(fr))
        return result

    @staticmethod
    def prepare_batch(frames) -> tuple:
        """[(port, frame)] as the C arrays process_batch() takes (built once, run many times)."""
        n = len(frames)
        ports = (ctypes.c_uint32 * max(n, 1))(*(p for p, _ in frames))
        offs, lens, pos = [], [], 0
        for _, f in frames:
            offs.append(pos)
            lens.append(len(f))
            pos += len(f)
        blob = b"".join(f for _, f in frames)
        buf = ctypes.create_string_buffer(blob, len(blob) or 1)
        return n, ports, buf, (ctypes.c_uint32 * max(n, 1))(*offs), (ctypes.c_uint32 * max(n, 1))(*lens)

    def process_batch(self, frames, keep: bool = True) -> int:
        """Run [(port, frame)] (or a prepare_batch() result) in one C call; with keep=False the output
        is only counted (benchmarks). Returns the number of frames that left (keep=True keeps at most
        SW_MAX_OUT of them in the output buffer)."""
        batch = frames if isinstance(frames, tuple) else self.prepare_batch(frames)
        n, ports, buf, off, ln = batch
        with self._lock:
            self._out.count = self._out.used = 0
            if self._clock is not None:
                self.lib.sw_pin_clock(self.handle, 1, self._now_us())
            return self.lib.sw_process_batch(self.handle, n, ports, buf, off, ln, ctypes.byref(self._out), int(keep))

    @property
    def stats(self) -> dict:
        values = (U64 * self.lib.sw_nstats())()
        self.lib.sw_stats(self.handle, values)
        return dict(zip(NATIVE_STAT_KEYS, values))

    def seed(self, seed: int) -> None:
        """Seed the generator behind P4's `random` (xorshift64*, the same in both backends)."""
        self.lib.sw_seed(self.handle, seed & (2**64 - 1))

    # ------------------------------------------------------------------ tables: Python checks, C data
    def _push_entry(self, table, entry):
        km = []
        for k, key in zip(table.keys, entry.keys):
            full = k.full
            if k.match_type in ("exact", "valid"):
                v = int(key)
                km += [v, v, full]
            elif k.match_type == "lpm":
                km += [key[0], key[0], _prefix_mask(key[1], k.width)]
            elif k.match_type == "ternary":
                km += [key[0], key[0], key[1]]
            else:  # range
                km += [key[0], key[1], 0]
        if table.kind == "lpm":
            plen = entry.keys[table._lpm_index][1]
            sort_key = (-plen, entry.handle)
        elif table.kind in ("ternary", "range"):
            sort_key = (-entry.priority, entry.handle)
        else:
            sort_key = (0, entry.handle)
        action, params = self._entry_data(table, entry)
        rc = self.lib.sw_tbl_add(
            self.handle,
            self._table_index[table.name],
            entry.handle,
            action,
            _u64s(km),
            sort_key[0],
            sort_key[1],
            _u64s(params),
        )
        if rc != 0:
            raise MemoryError(f"table '{table.name}': the native backend could not add an entry")

    def _push_default(self, table):
        d = table.default
        action = -1 if d.action_id is None else d.action_id
        self.lib.sw_tbl_set_default(self.handle, self._table_index[table.name], action, _u64s(d.params))

    def table_add(self, table, keys, action, params, priority=None) -> None:
        with self._lock:
            t = self._table(table)
            t.add(keys, action, params, priority)
            self._push_entry(t, t.entry(keys, priority))

    def table_modify(self, table, keys, action, params, priority=None) -> None:
        with self._lock:
            t = self._table(table)
            t.modify(keys, action, params, priority)
            e = t.entry(keys, priority)
            self.lib.sw_tbl_modify(self.handle, self._table_index[t.name], e.handle, e.action_id, _u64s(e.params))

    def table_delete(self, table, keys, priority=None) -> None:
        with self._lock:
            t = self._table(table)
            handle = t.entry(keys, priority).handle
            t.delete(keys, priority)
            self.lib.sw_tbl_delete(self.handle, self._table_index[t.name], handle)

    def table_clear(self, table) -> None:
        with self._lock:
            t = self._table(table)
            t.clear()
            self.lib.sw_tbl_clear(self.handle, self._table_index[t.name])

    def table_set_default(self, table, action, params) -> None:
        with self._lock:
            t = self._table(table)
            t.set_default(action, params)
            self._push_default(t)

    def table_reset_default(self, table) -> None:
        with self._lock:
            t = self._table(table)
            t.reset_default()
            self._push_default(t)

    def _direct_entry(self, table, keys, priority):
        t = self._table(table)
        if not t.with_counters:
            raise EntryError(f"table '{table}' has no direct counter")
        return t, t.entry(keys, priority)

    def direct_counter_read(self, table, keys, priority=None) -> tuple:
        with self._lock:
            t, e = self._direct_entry(table, keys, priority)
            v = (U64 * 2)()
            self.lib.sw_tbl_counter(self.handle, self._table_index[t.name], e.handle, v, 0)
            return int(v[0]), int(v[1])

    def direct_counter_write(self, table, keys, packets, nbytes, priority=None) -> None:
        with self._lock:
            t, e = self._direct_entry(table, keys, priority)
            for what, v in (("packets", packets), ("bytes", nbytes)):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**64:
                    raise EntryError(f"table '{table}' direct counter: {what} must be a non-negative integer")
            self.lib.sw_tbl_counter(self.handle, self._table_index[t.name], e.handle, _u64s([packets, nbytes]), 1)

    # ------------------------------------------------------------------ registers and counters
    def register_read(self, name, index) -> int:
        with self._lock:
            reg = self._register(name)
            reg._index(index)
            v = U64()
            self.lib.sw_reg(self.handle, self._reg_index[name], index, ctypes.byref(v), 0)
            return int(v.value)

    def register_write(self, name, index, value) -> None:
        with self._lock:
            reg = self._register(name)
            reg._index(index)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= reg.mask:
                raise EntryError(f"register '{name}': value {value!r} does not fit in {reg.bitwidth} bits")
            self.lib.sw_reg(self.handle, self._reg_index[name], index, ctypes.byref(U64(value)), 1)

    def register_reset(self, name) -> None:
        with self._lock:
            reg = self._register(name)
            self.lib.sw_reg_all(self.handle, self._reg_index[name], (U64 * max(reg.size, 1))(), 1)

    def register_cells(self, name) -> list:
        """Every cell of a register in one call (tests and tools)."""
        with self._lock:
            reg = self._register(name)
            cells = (U64 * max(reg.size, 1))()
            self.lib.sw_reg_all(self.handle, self._reg_index[name], cells, 0)
            return [int(c) for c in cells[: reg.size]]

    def counter_read(self, name, index) -> tuple:
        with self._lock:
            self._counter(name)._index(index)
            v = (U64 * 2)()
            self.lib.sw_ctr(self.handle, self._ctr_index[name], index, v, 0)
            return int(v[0]), int(v[1])

    def counter_write(self, name, index, packets, bytes) -> None:  # noqa: A002 - the API's name
        with self._lock:
            ctr = self._counter(name)
            ctr._index(index)
            for what, v in (("packets", packets), ("bytes", bytes)):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**64:
                    raise EntryError(f"counter '{name}': {what} must be a non-negative integer, got {v!r}")
            self.lib.sw_ctr(self.handle, self._ctr_index[name], index, _u64s([packets, bytes]), 1)

    def counter_reset(self, name) -> None:
        with self._lock:
            if name in self._prog.direct_counters:
                table = self._prog.direct_counters[name]
                self.lib.sw_tbl_counter_reset(self.handle, self._table_index[table])
                return
            self._counter(name)
            self.lib.sw_ctr_reset(self.handle, self._ctr_index[name])

    # ------------------------------------------------------------------ multicast
    def mc_group_set(self, group_id, replicas) -> None:
        with self._lock:
            self._prog.pre.set_group(group_id, replicas)
            group = self._prog.pre.groups[group_id]
            n = len(group)
            ports = (ctypes.c_uint32 * max(n, 1))(*(p for p, _ in group))
            rids = (ctypes.c_uint32 * max(n, 1))(*(r for _, r in group))
            if self.lib.sw_mc_set(self.handle, group_id, n, ports, rids) != 0:
                raise MemoryError(f"multicast group {group_id}: the native backend could not store it")

    # ------------------------------------------------------------------ custom CRCs: Python checks, C tables
    def _push_crc(self, name):
        crc = self._prog.hashes[name]
        poly, init, xor_out, reflect_data, reflect_remainder = crc.params
        rc = self.lib.sw_crc_set(
            self.handle, self._crc_index[name], crc.width, poly, init, xor_out, reflect_data, reflect_remainder
        )
        if rc != 0:
            raise ValueError(f"calculation '{name}': the native backend refused its CRC parameters")

    def set_crc_parameters(self, calculation, *params, **kw) -> None:
        super().set_crc_parameters(calculation, *params, **kw)
        with self._lock:
            self._push_crc(calculation)

    # ------------------------------------------------------------------ parse value sets: Python checks, C views
    def _push_value_set(self, name):
        vset = self._value_set(name)
        for vid, (vname, widths, mask) in enumerate(self._vset_views):
            if vname != name:
                continue
            members = sorted(vset.view(widths, mask))
            halves = [h for m in members for h in (m & (2**64 - 1), m >> 64)]
            if self.lib.sw_vset_set(self.handle, vid, len(members), _u64s(halves)) != 0:
                raise MemoryError(f"value set '{name}': the native backend could not store it")

    def value_set_add(self, name, value) -> None:
        with self._lock:
            self._value_set(name).add(value)
            self._push_value_set(name)

    def value_set_delete(self, name, value) -> None:
        with self._lock:
            self._value_set(name).delete(value)
            self._push_value_set(name)

    def value_set_replace(self, name, values) -> None:
        with self._lock:
            self._value_set(name).replace(values)
            self._push_value_set(name)

    def mc_group_delete(self, group_id) -> None:
        with self._lock:
            self._prog.pre.delete_group(group_id)
            self.lib.sw_mc_delete(self.handle, group_id)

    # ------------------------------------------------------------------ mirroring
    def mirroring_add(self, session_id, egress_port=None, mgid=None) -> None:
        with self._lock:
            self._prog.mirror.set(session_id, egress_port, mgid)
            port = -1 if egress_port is None else egress_port
            group = -1 if mgid is None else mgid
            if self.lib.sw_mirror_set(self.handle, session_id, port, group) != 0:
                raise MemoryError(f"mirror session {session_id}: the native backend could not store it")

    def mirroring_delete(self, session_id) -> None:
        with self._lock:
            self._prog.mirror.delete(session_id)
            self.lib.sw_mirror_delete(self.handle, session_id)

    # ------------------------------------------------------------------ digests
    def digests(self) -> list:
        """The samples queued in C since the last call, oldest first: (digest name, values).

        The C port loop cannot call a listener: the P4Runtime digest pump finds them by polling."""
        lists = self._prog.learn_lists
        if not lists:
            return []
        width = self.lib.sw_digest_width()
        ids = (ctypes.c_uint32 * DIGEST_CHUNK)()
        vals = (U64 * (DIGEST_CHUNK * width))()
        out = []
        while True:
            n = self.lib.sw_digests(self.handle, DIGEST_CHUNK, ids, vals)
            for k in range(n):
                ll = lists[ids[k]]
                out.append((ll.name, tuple(vals[k * width : k * width + len(ll.slots)])))
            if n < DIGEST_CHUNK:
                return out

    # ------------------------------------------------------------------ meters and the clock
    def set_clock(self, clock=None) -> None:
        """As SwitchAPI.set_clock; an injected clock is read before each process() or
        process_batch() call and pinned in C for that call (the port loop runs on the real clock)."""
        super().set_clock(clock)
        self._clock = clock
        if getattr(self, "handle", None):
            self.lib.sw_pin_clock(self.handle, 0, 0)  # unpinned: the library's own monotonic clock

    def _push_meter(self, name, index):
        arr = self._prog.meters[name]
        config = arr.meters[index].rates
        rates = [] if config is None else [r.info_rate for r in reversed(config)]
        bursts = [] if config is None else [r.burst for r in reversed(config)]
        n = len(rates)
        rc = self.lib.sw_meter_set(
            self.handle,
            self._meter_index[name],
            index,
            n,
            (ctypes.c_double * max(n, 1))(*rates),
            _u64s(bursts),
        )
        if rc != 0:
            raise EntryError(f"meter '{name}': the native backend refused index {index}")

    def meter_set(self, name, index, config) -> None:
        with self._lock:
            self._meter(name).set_config(index, config)
            self._push_meter(name, index)

    def meter_reset(self, name) -> None:
        with self._lock:
            self._meter(name).reset()
            self.lib.sw_meter_reset(self.handle, self._meter_index[name])

    def direct_meter_set(self, table, keys, config, priority=None) -> None:
        with self._lock:
            arr, handle = self._direct_meter(table, keys, priority)
            arr.set_config(handle, config)
            self._push_meter(arr.name, handle)

    # ------------------------------------------------------------------ action profiles
    def _entry_data(self, table, entry):
        """(action, params) of an entry as C stores it: for an indirect entry, its pointer kind
        (profiles.h PTR_MEMBER 0 / PTR_GROUP 1) and the member or group handle."""
        if table.profile is None:
            return entry.action_id, entry.params
        if entry.member is not None:
            return 0, (entry.member.handle,)
        return 1, (entry.group.handle,)

    def _push_member(self, profile, member):
        """The member and its copies (one per unit of weight above 1): the same action at each handle."""
        e = member.entry
        params = _u64s(e.params)
        for h in member.handles:
            rc = self.lib.sw_prof_member(self.handle, self._profile_index[profile.name], h, e.action_id, params)
            if rc != 0:
                raise MemoryError(f"action profile '{profile.name}': the native backend could not store a member")

    def _push_group(self, profile, group):
        handles = [h for h, _ in group.member_handles()]
        n = len(handles)
        rc = self.lib.sw_prof_group(
            self.handle, self._profile_index[profile.name], group.handle, n, (ctypes.c_uint32 * max(n, 1))(*handles)
        )
        if rc != 0:
            raise MemoryError(f"action profile '{profile.name}': the native backend could not store a group")

    # the engine's methods take the lock themselves (it is not reentrant): they run first, then
    # their result is pushed into C under the lock; no table entry can point at the new state before.
    def act_prof_member_add(self, profile, member_id, action, params) -> None:
        super().act_prof_member_add(profile, member_id, action, params)
        with self._lock:
            p = self._profile(profile)
            self._push_member(p, p.members[member_id])

    def act_prof_member_modify(self, profile, member_id, action, params) -> None:
        super().act_prof_member_modify(profile, member_id, action, params)
        with self._lock:
            p = self._profile(profile)
            self._push_member(p, p.members[member_id])

    def act_prof_group_set(self, profile, group_id, member_ids, create=True) -> None:
        super().act_prof_group_set(profile, group_id, member_ids, create)
        with self._lock:
            p = self._profile(profile)
            group = p.groups[group_id]
            for m in group.members.values():  # copies the new weights need
                self._push_member(p, m)
            self._push_group(p, group)

    def act_prof_group_delete(self, profile, group_id) -> None:
        with self._lock:
            group = self._profile(profile).groups.get(group_id)
        super().act_prof_group_delete(profile, group_id)
        with self._lock:
            group.members = {}
            self._push_group(self._profile(profile), group)  # emptied: its handle may be reused

    def _push_indirect(self, table, keys, priority):
        t = self._table(table)
        entry = t.entry(keys, priority)
        if entry.oneshot is not None:  # its anonymous members and group
            for m in entry.group.members.values():
                self._push_member(t.profile, m)
            self._push_group(t.profile, entry.group)
        return t, entry

    def table_add_indirect(self, table, keys, member=None, group=None, oneshot=None, priority=None) -> None:
        super().table_add_indirect(table, keys, member, group, oneshot, priority)
        with self._lock:
            t, entry = self._push_indirect(table, keys, priority)
            self._push_entry(t, entry)

    def table_modify_indirect(self, table, keys, member=None, group=None, oneshot=None, priority=None) -> None:
        super().table_modify_indirect(table, keys, member, group, oneshot, priority)
        with self._lock:
            t, entry = self._push_indirect(table, keys, priority)
            action, params = self._entry_data(t, entry)
            self.lib.sw_tbl_modify(self.handle, self._table_index[t.name], entry.handle, action, _u64s(params))
