"""The control-plane API both backends share, over the Python engine's program objects.

Tables, registers, counters, parse value sets, custom CRCs, multicast groups, mirroring sessions and
digests (meters and action profiles: switch_extern_api) keep the reference implementation's checks,
errors, handles and state here. SoftwareSwitch (emulator.switch) runs packets over that state; a
backend that keeps packet state elsewhere (emulator.native.native_switch.NativeSwitch) mirrors each change.
Every call takes the switch's lock, which is not reentrant.
"""

import logging
import threading
import time

from emulator.errors import EntryError
from emulator.switch_extern_api import MeterAndProfileAPI

STAT_KEYS = (
    "packets_in",
    "packets_out",
    "dropped",
    "dropped_ingress",
    "dropped_egress",
    "dropped_no_group",
    "dropped_priority",
    "dropped_exception",
    "dropped_pass_limit",
    "dropped_copy_limit",
    "parser_errors",
    "checksum_errors",
    "exceptions",
    "multicast_replicas",
    "resubmits",
    "recirculations",
    "out_of_bounds",
)
# Bounds on what one received frame may become, so that no program and no entries can make process()
# run forever (an egress clone whose clones clone again grows a tree of copies). BMv2 has neither bound:
# it queues every clone, resubmit and recirculation, and a cascade there fills its queues (64 packets a
# port by default) and drops, while it goes on answering other frames. Past a bound the copy is dropped
# and counted, and the first time is logged, on both backends alike (native/ctarget.py hands both numbers
# to driver.h).
MAX_PASSES = 16  # passes in a chain: resubmits, recirculations and clones of clones
MAX_COPIES = 64  # packets made from one received frame by clones, resubmits and recirculations: a queue's worth
COPY_LIMIT_NOTICE = (
    "a frame made more than %d copies through clones, resubmits and recirculations: the rest were dropped "
    "(stats['dropped_copy_limit']; logged once)"
)

# kept by both backends too (in runtime.h's enum they follow the native-only "dropped_output_full")
CLONE_DIGEST_STAT_KEYS = ("clones", "clones_unconfigured", "digests", "digests_dropped")


class SwitchAPI(MeterAndProfileAPI):
    def __init__(self, program, drop_port: int = 511, trace_level: int = logging.DEBUG, clock=None):
        self._prog = program
        self.program = program.info
        self.drop_port = drop_port
        self.trace_level = trace_level
        self._lock = threading.Lock()
        self.set_clock(clock)

    @property
    def generated_source(self) -> str:
        """The Python source generated for the program (for debugging the engine)."""
        return self._prog.source

    def set_clock(self, clock=None) -> None:
        """The switch's clock: `clock()` answers microseconds; None = the monotonic clock. Time
        restarts at 0 (timestamps, meters' refill) from this call, as BMv2's starts at start-up."""
        self._clock = clock
        if clock is None:
            start = time.monotonic()
            self._now_us = lambda: int((time.monotonic() - start) * 1e6)
        else:
            origin = clock()
            self._now_us = lambda: clock() - origin
        self._prog.meter_clock.now = self._now_us

    # ------------------------------------------------------------------ tables
    def _table(self, name):
        table = self._prog.tables.get(name)
        if table is None:
            raise EntryError(f"unknown table '{name}'", "NOT_FOUND")
        return table

    def table_add(self, table, keys, action, params, priority=None) -> None:
        with self._lock:
            self._table(table).add(keys, action, params, priority)

    def table_modify(self, table, keys, action, params, priority=None) -> None:
        with self._lock:
            self._table(table).modify(keys, action, params, priority)

    def table_delete(self, table, keys, priority=None) -> None:
        with self._lock:
            self._table(table).delete(keys, priority)

    def table_entries(self, table) -> list:
        with self._lock:
            return self._table(table).list_entries()

    def table_clear(self, table) -> None:
        with self._lock:
            self._table(table).clear()

    def table_set_default(self, table, action, params) -> None:
        with self._lock:
            self._table(table).set_default(action, params)

    def table_get_default(self, table) -> tuple:
        with self._lock:
            return self._table(table).get_default()

    def table_reset_default(self, table) -> None:
        with self._lock:
            self._table(table).reset_default()

    def direct_counter_read(self, table, keys, priority=None) -> tuple:
        with self._lock:
            t = self._table(table)
            if not t.with_counters:
                raise EntryError(f"table '{table}' has no direct counter")
            e = t.entry(keys, priority)
            return e.packets, e.bytes

    def direct_counter_write(self, table, keys, packets, nbytes, priority=None) -> None:
        with self._lock:
            t = self._table(table)
            if not t.with_counters:
                raise EntryError(f"table '{table}' has no direct counter")
            for what, v in (("packets", packets), ("bytes", nbytes)):
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise EntryError(f"table '{table}' direct counter: {what} must be a non-negative integer")
            e = t.entry(keys, priority)
            e.packets, e.bytes = packets, nbytes

    # ------------------------------------------------------------------ registers and counters
    def _register(self, name):
        reg = self._prog.registers.get(name)
        if reg is None:
            raise EntryError(f"unknown register '{name}'", "NOT_FOUND")
        return reg

    def register_read(self, name, index) -> int:
        with self._lock:
            return self._register(name).read(index)

    def register_write(self, name, index, value) -> None:
        with self._lock:
            self._register(name).write(index, value)

    def register_reset(self, name) -> None:
        with self._lock:
            self._register(name).reset()

    def _counter(self, name):
        ctr = self._prog.counters.get(name)
        if ctr is None:
            if name in self._prog.direct_counters:
                raise EntryError(
                    f"counter '{name}' is a direct counter of table "
                    f"'{self._prog.direct_counters[name]}': use direct_counter_read"
                )
            raise EntryError(f"unknown counter '{name}'", "NOT_FOUND")
        return ctr

    def counter_read(self, name, index) -> tuple:
        with self._lock:
            return self._counter(name).read(index)

    def counter_write(self, name, index, packets, bytes) -> None:  # noqa: A002 - the API's name
        with self._lock:
            self._counter(name).write(index, packets, bytes)

    def counter_reset(self, name) -> None:
        with self._lock:
            if name in self._prog.direct_counters:
                for e in self._prog.tables[self._prog.direct_counters[name]].entries.values():
                    e.packets = e.bytes = 0
                return
            self._counter(name).reset()

    # ------------------------------------------------------------------ parse value sets
    def _value_set(self, name):
        vset = self._prog.value_sets.get(name)
        if vset is None:
            raise EntryError(f"unknown value set '{name}'", "NOT_FOUND")
        return vset

    def value_set_add(self, name, value) -> None:
        """Add a member: an int of the set's bit width (the select key's fields concatenated)."""
        with self._lock:
            self._value_set(name).add(value)

    def value_set_delete(self, name, value) -> None:
        with self._lock:
            self._value_set(name).delete(value)

    def value_set_replace(self, name, values) -> None:
        """Make `values` the whole set at once (what P4Runtime's ValueSetEntry MODIFY does)."""
        with self._lock:
            self._value_set(name).replace(values)

    def value_set_members(self, name) -> list:
        with self._lock:
            return self._value_set(name).members()

    # ------------------------------------------------------------------ custom CRC parameters
    def set_crc_parameters(
        self, calculation, polynomial, initial, final_xor, reflect_data=True, reflect_remainder=True
    ) -> None:
        """Parameters of a crc16_custom / crc32_custom calculation, as simple_switch's runtime CLI
        `set_crc16_parameters` / `set_crc32_parameters` sets them (per calculation name, e.g. p4c's
        `calc_0`; `program.custom_crcs` lists them)."""
        with self._lock:
            crc = self._custom_crc(calculation)
            try:
                crc.configure(polynomial, initial, final_xor, reflect_data, reflect_remainder)
            except ValueError as exc:
                raise EntryError(f"calculation '{calculation}': {exc}") from None

    def crc_parameters(self, calculation) -> tuple:
        """(polynomial, initial, final_xor, reflect_data, reflect_remainder) of a custom CRC."""
        with self._lock:
            return self._custom_crc(calculation).params

    def _custom_crc(self, calculation):
        if calculation not in self.program.custom_crcs:
            known = ", ".join(sorted(self.program.custom_crcs)) or "none"
            raise EntryError(
                f"no crc16_custom/crc32_custom calculation '{calculation}' (the program's: {known})", "NOT_FOUND"
            )
        return self._prog.hashes[calculation]

    # ------------------------------------------------------------------ multicast
    def mc_group_set(self, group_id, replicas) -> None:
        with self._lock:
            self._prog.pre.set_group(group_id, replicas)

    def mc_group_delete(self, group_id) -> None:
        with self._lock:
            self._prog.pre.delete_group(group_id)

    def mc_groups(self) -> dict:
        with self._lock:
            return self._prog.pre.snapshot()

    # ------------------------------------------------------------------ mirroring sessions
    def mirroring_add(self, session_id, egress_port=None, mgid=None) -> None:
        """Add or replace a mirror session: copies to `egress_port` and/or one per replica of the
        multicast group `mgid` (simple_switch_CLI's mirroring_add / mirroring_add_mc)."""
        with self._lock:
            self._prog.mirror.set(session_id, egress_port, mgid)

    def mirroring_delete(self, session_id) -> None:
        with self._lock:
            self._prog.mirror.delete(session_id)

    def mirroring_sessions(self) -> dict:
        """session id -> MirrorSession(egress_port, mgid)."""
        with self._lock:
            return self._prog.mirror.snapshot()

    # ------------------------------------------------------------------ digests
    def digests(self) -> list:
        """Digest samples since the last call, oldest first: (digest name, tuple of field values)."""
        with self._lock:
            return self._prog.digests.drain()

    def set_digest_listener(self, callback) -> None:
        """`callback()` runs (under the switch's lock: keep it short) whenever a sample is queued."""
        with self._lock:
            self._prog.digests.listener = callback
