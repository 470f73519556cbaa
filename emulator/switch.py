"""SoftwareSwitch: a BMv2 JSON program executed packet by packet with simple_switch's semantics.

    sw = SoftwareSwitch.from_json("p4/build/thc.json")
    sw.table_add("MyIngress.ipv4_lpm", [(0x0a000000, 8)], "MyIngress.ipv4_forward", [0x0a0000000001, 2])
    for port, frame in sw.process(1, frame): ...

A packet goes through parser, ingress, clones, resubmit, multicast and egress as simple_switch.cpp takes
it (emulator/README.md, "Packet semantics"), so a program behaves here as on BMv2. All state lives behind
one lock: control-plane calls from other threads and process() never interleave. A Python exception while
processing a packet drops that packet (or that copy), is counted in stats['exceptions'] and logged at
error level; it never leaves process(), as a switch never stops for one bad packet.
"""

import json
import logging
import os

from emulator.engine.compiler import compile_program
from emulator.engine.mirroring import (
    PKT_INSTANCE_TYPE_EGRESS_CLONE,
    PKT_INSTANCE_TYPE_INGRESS_CLONE,
    SESSION_MASK,
)
from emulator.engine.runtime import RNG_DEFAULT_SEED, ParserError
from emulator.errors import LoadError
from emulator.switch_api import (
    CLONE_DIGEST_STAT_KEYS,
    COPY_LIMIT_NOTICE,
    MAX_COPIES,
    MAX_PASSES,
    STAT_KEYS,
    SwitchAPI,
)

log = logging.getLogger("emulator.switch")
trace_log = logging.getLogger("emulator.trace")

PKT_INSTANCE_TYPE_NORMAL = 0
PKT_INSTANCE_TYPE_RECIRC = 4
PKT_INSTANCE_TYPE_REPLICATION = 5
PKT_INSTANCE_TYPE_RESUBMIT = 6

BACKENDS = ("auto", "native", "python")
MAX_LOGGED_TRACEBACKS = 20


def load_config(path_or_dict) -> dict:
    """The BMv2 JSON as a dict, from a path, JSON bytes or a dict (LoadError when it cannot be read)."""
    if isinstance(path_or_dict, dict):
        return path_or_dict
    if isinstance(path_or_dict, (bytes, bytearray)):
        try:
            return json.loads(path_or_dict)
        except ValueError as exc:
            raise LoadError(f"not valid JSON: {exc}") from None
    if isinstance(path_or_dict, (str, os.PathLike)):
        try:
            with open(path_or_dict, encoding="utf-8") as fh:
                return json.load(fh)
        except OSError as exc:
            raise LoadError(f"cannot read {os.fspath(path_or_dict)}: {exc}") from None
        except ValueError as exc:
            raise LoadError(f"{os.fspath(path_or_dict)} is not valid JSON: {exc}") from None
    raise LoadError(f"expected a path, JSON bytes or a dict, got {type(path_or_dict).__name__}")


class SoftwareSwitch(SwitchAPI):
    """The Python engine's data plane over the shared control-plane API; `from_json` chooses the backend."""

    backend = "python"  # the reference engine; emulator.native.native_switch.NativeSwitch says "native"

    def __init__(self, program, drop_port: int = 511, trace_level: int = logging.DEBUG, clock=None):
        super().__init__(program, drop_port=drop_port, trace_level=trace_level, clock=clock)
        self._stats = dict.fromkeys(STAT_KEYS + CLONE_DIGEST_STAT_KEYS, 0)
        self._tracebacks = 0
        self._copies = 0  # made from the frame process() is on (MAX_COPIES)
        self._copy_limit_logged = False
        self._template = program.layout.template()
        fns = program.fns
        self._plain = (fns["parse"], fns["verify_checksums"], fns["ingress"], fns["egress"], fns["deparse"])
        self._traced = (fns["parse"], fns["verify_checksums"], fns["ingress_t"], fns["egress_t"], fns["deparse"])
        fns["_trace"].level = trace_level
        self._has_checksums = program.has_verify
        self._L = program.layout
        std = program.std
        self._std = std
        # (slot, mask) of the intrinsic fields the target writes; None when the program lacks one
        sm = {
            name: (None if getattr(std, name) is None else (getattr(std, name).slot, getattr(std, name).mask))
            for name in vars(std)
        }
        self._f = sm
        self._too_short = program.errors["PacketTooShort"]
        self._no_error = program.errors["NoError"]  # p4c uses 0; older JSON (p4c-bm) may not
        self._spec_slot = std.egress_spec.slot
        self._spec_drop = drop_port & std.egress_spec.mask
        self._spec_reset = (drop_port + 1) & std.egress_spec.mask  # BMv2 sets drop_port + 1 in egress
        self._metadata_ranges = program.layout.metadata_ranges()

    @classmethod
    def from_json(
        cls,
        path_or_dict,
        *,
        drop_port: int = 511,
        trace_level: int = logging.DEBUG,
        backend: str = "python",
        sanitize: bool = False,
        clock=None,
    ):
        """Load a p4c-bm2-ss (v1model) BMv2 JSON: a path, JSON bytes or an already parsed dict.

        Raises LoadError (UnsupportedConstruct for constructs the engine does not execute).
        `trace_level` is the level of the per-packet trace on logger "emulator.trace".
        `backend`: "python" (this class, the reference), "native" (the program compiled to C:
        emulator.native) or "auto" (native, else Python with a one-line notice saying why).
        `sanitize` builds the native code with AddressSanitizer and UBSan (tests).
        `clock`: a callable answering microseconds (any origin), the time meters and timestamps
        see; default the monotonic clock (tests inject one to make meters deterministic).
        """
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        cfg = load_config(path_or_dict)
        program = compile_program(cfg, drop_port=drop_port)
        if backend == "python":
            return cls(program, drop_port=drop_port, trace_level=trace_level, clock=clock)
        from emulator.native import load_native

        native = load_native(cfg, program, drop_port, trace_level, sanitize=sanitize, required=backend == "native")
        if native is not None:
            if clock is not None:
                native.set_clock(clock)
            return native
        return cls(compile_program(cfg, drop_port=drop_port), drop_port=drop_port, trace_level=trace_level, clock=clock)

    # ------------------------------------------------------------------ data plane
    def process(self, port: int, frame: bytes) -> list:
        """Run one received frame through the switch; every (port, frame) that leaves, in order."""
        with self._lock:
            stats = self._stats
            stats["packets_in"] += 1
            out = []
            tracing = False
            try:
                if type(frame) is not bytes:
                    frame = bytes(frame)
                tracing = trace_log.isEnabledFor(self.trace_level)
                if tracing:
                    trace_log.log(self.trace_level, "packet in: port %d, %d bytes", port, len(frame))
                F = self._template[:]
                f = self._f
                n = len(frame)
                slot, mask = f["ingress_port"]
                F[slot] = port & mask
                slot, mask = f["packet_length"]
                F[slot] = n & mask
                if f["ingress_ts"] is not None:
                    slot, mask = f["ingress_ts"]
                    F[slot] = self._now_us() & mask
                L = self._L
                F[L.PKTLEN] = n
                F[L.ILEN] = n
                self._copies = 0
                self._ingress_pass(F, frame, out, self._traced if tracing else self._plain, tracing, 1)
            except Exception:  # noqa: BLE001 - a packet must never take the switch down
                self._exception("packet from port %r", port)
            stats["packets_out"] += len(out)
            if tracing:
                for p, fr in out:
                    trace_log.log(self.trace_level, "packet out: port %d, %d bytes", p, len(fr))
            return out

    def _set(self, F, name, value):
        ref = self._f[name]
        if ref is not None:
            F[ref[0]] = value & ref[1]

    def _exception(self, what, *args):
        self._stats["exceptions"] += 1
        self._stats["dropped"] += 1
        self._stats["dropped_exception"] += 1
        self._tracebacks += 1
        if self._tracebacks <= MAX_LOGGED_TRACEBACKS:
            log.error("exception while processing " + what + ": packet dropped", *args, exc_info=True)
        else:
            log.error("exception while processing " + what + ": packet dropped (traceback omitted)", *args)

    def _drop(self, reason, tracing, why):
        self._stats["dropped"] += 1
        self._stats[reason] += 1
        if tracing:
            trace_log.log(self.trace_level, "drop: %s", why)

    def _ingress_pass(self, F, frame, out, fns, tracing, passes):
        parse, verify, ingress, egress, deparse = fns
        f, L = self._f, self._L
        ingress_length = F[L.PKTLEN]
        try:
            try:
                pos = parse(F, frame)
                if self._no_error:
                    self._set(F, "parser_error", self._no_error)
            except ParserError as err:
                code = self._too_short if err.code is None else err.code
                pos = err.pos
                self._set(F, "parser_error", code)
                self._stats["parser_errors"] += 1
                if tracing:
                    name = next((n for n, v in self._prog.errors.items() if v == code), code)
                    trace_log.log(self.trace_level, "parser error %s after %d bytes", name, pos)
            payload = frame[pos:]
            self._prog.payload_box[0] = payload
            if self._has_checksums:
                bad = verify(F, payload)
                self._set(F, "checksum_error", bad)
                if bad:
                    self._stats["checksum_errors"] += 1
                    if tracing:
                        trace_log.log(self.trace_level, "checksum error")
            F[L.EXIT] = 0
            ingress(F)
            F[L.EXIT] = 0
        except Exception:  # noqa: BLE001
            self._exception("ingress of a packet from port %r", F[f["ingress_port"][0]])
            return

        if F[L.CLONE]:
            self._clone_at_ingress(F, frame, ingress_length, out, fns, tracing, passes)
        if F[L.LEARN]:
            self._learn(F, F[L.LEARN], tracing)
            F[L.LEARN] = 0

        if F[L.RESUBMIT]:
            self._pass_again("resubmit", F, frame, ingress_length, F[L.ILEN], out, fns, tracing, passes)
            return

        mgid = F[f["mcast_grp"][0]] if f["mcast_grp"] is not None else 0
        if mgid:
            replicas = self._prog.pre.groups.get(mgid)
            if not replicas:
                if replicas is None:
                    log.warning("multicast to group %d, which is not configured: packet dropped", mgid)
                self._drop("dropped_no_group", tracing, f"multicast group {mgid} has no replicas")
                return
            self._set(F, "instance_type", PKT_INSTANCE_TYPE_REPLICATION)
            for eg_port, rid in replicas:
                self._stats["multicast_replicas"] += 1
                R = F[:]
                self._set(R, "egress_rid", rid)
                self._clear_registers(R)  # BMv2 clears the copy's registers
                if tracing:
                    trace_log.log(self.trace_level, "multicast group %d: copy to port %d rid %d", mgid, eg_port, rid)
                self._egress_pass(R, eg_port, payload, out, fns, tracing, passes)
            return

        spec = F[self._spec_slot]
        if spec == self._spec_drop:
            self._drop("dropped_ingress", tracing, "egress_spec is the drop port at the end of ingress")
            return
        slot, mask = f["instance_type"]
        F[slot] = PKT_INSTANCE_TYPE_NORMAL
        self._egress_pass(F, spec, payload, out, fns, tracing, passes)

    def _egress_pass(self, F, port, payload, out, fns, tracing, passes):
        egress, deparse = fns[3], fns[4]
        f, L = self._f, self._L
        if f["priority"] is not None and F[f["priority"][0]] >= 1:
            # simple_switch has one queue per port by default: a higher priority is out of range
            log.error("packet priority %d out of range (1 queue per port): packet dropped", F[f["priority"][0]])
            self._drop("dropped_priority", tracing, "priority out of range")
            return
        try:
            if f["egress_ts"] is not None or self._prog.queueing:
                now = self._now_us()
                self._set(F, "egress_ts", now)
                if self._prog.queueing:  # one queue, never waited in: depths and delay are 0
                    self._set(F, "enq_timestamp", now)
            slot, mask = f["egress_port"]
            F[slot] = port & mask
            F[self._spec_slot] = self._spec_reset
            slot, mask = f["packet_length"]
            F[slot] = F[L.PKTLEN] & mask
            self._prog.payload_box[0] = payload
            F[L.EXIT] = 0
            egress(F)
            clone = self._egress_clone(F, tracing) if F[L.CLONE] else None
            if F[self._spec_slot] == self._spec_drop:
                self._drop(
                    "dropped_egress", tracing, f"egress_spec is the drop port at the end of egress (port {port})"
                )
                frame = None
            else:
                frame = deparse(F, payload)
        except Exception:  # noqa: BLE001
            self._exception("egress of a packet to port %r", port)
            return
        if frame is not None:
            self._after_egress(F, port, frame, out, fns, tracing, passes)
        if clone is not None:
            G, session = clone
            if passes >= MAX_PASSES:
                self._drop("dropped_pass_limit", tracing, f"more than {MAX_PASSES} passes (egress clones)")
                return
            self._send_clone(G, session, payload, out, fns, tracing, passes + 1)

    def _after_egress(self, F, port, frame, out, fns, tracing, passes):
        """A deparsed packet: recirculated, or sent (cut to its `truncate` length)."""
        L = self._L
        if F[L.RECIRC]:
            self._pass_again("recirculate", F, frame, len(frame), len(frame), out, fns, tracing, passes)
            return
        if F[L.TRUNC] >= 0:
            frame = frame[: F[L.TRUNC]]
        out.append((port, frame))

    _PASSES = {  # another pass through ingress: (its field list register, counter, instance type)
        "resubmit": ("RESUBMIT", "resubmits", PKT_INSTANCE_TYPE_RESUBMIT),
        "recirculate": ("RECIRC", "recirculations", PKT_INSTANCE_TYPE_RECIRC),
    }

    def _pass_again(self, kind, F, frame, length, ilen, out, fns, tracing, passes):
        """A resubmitted (the packet as it came in) or recirculated (the deparsed one) packet goes through
        ingress again, its field list's metadata kept, unless it has made MAX_PASSES passes already."""
        register, counter, instance_type = self._PASSES[kind]
        field_list = F[getattr(self._L, register)]
        self._stats[counter] += 1
        if tracing:
            trace_log.log(self.trace_level, "%s with field list %d", kind, field_list)
        if passes >= MAX_PASSES:
            self._drop("dropped_pass_limit", tracing, f"more than {MAX_PASSES} passes")
            return
        if not self._copy_allowed(tracing):
            return
        G = self._fresh_with_field_list(F, field_list, instance_type, length)
        G[self._L.ILEN] = ilen
        self._ingress_pass(G, frame, out, fns, tracing, passes + 1)

    # ------------------------------------------------------------------ clones and digests
    def _clear_registers(self, R):
        """What BMv2's RegisterAccess::clear_all and a new Packet object reset in a copy."""
        L = self._L
        R[L.RESUBMIT] = R[L.RECIRC] = R[L.CLONE] = R[L.CLONE_FL] = R[L.LEARN] = 0
        R[L.TRUNC] = -1

    def _reset_metadata(self, G):
        template = self._template
        for start, end in self._metadata_ranges:
            G[start:end] = template[start:end]

    def _session(self, F, tracing):
        """The mirror session F's clone names (None: not configured, counted); clears F's clone registers."""
        L = self._L
        session_id = F[L.CLONE] & SESSION_MASK
        F[L.CLONE] = F[L.CLONE_FL] = 0
        session = self._prog.mirror.sessions.get(session_id)
        if session is None:
            self._stats["clones_unconfigured"] += 1
            if tracing:
                trace_log.log(self.trace_level, "clone to mirror session %d, which is not configured", session_id)
        elif tracing:
            trace_log.log(self.trace_level, "clone to mirror session %d", session_id)
        return session

    def _clone_at_ingress(self, F, frame, ingress_length, out, fns, tracing, passes):
        """simple_switch's ingress clone: the received frame parsed again (ingress_port kept), all
        metadata reset except the field list's, instance_type INGRESS_CLONE, the ingress length."""
        L = self._L
        field_list = F[L.CLONE_FL]
        session = self._session(F, tracing)
        if session is None:
            return
        G = self._template[:]
        slot = self._f["ingress_port"][0]
        G[slot] = F[slot]
        try:
            pos = fns[0](G, frame)
        except ParserError as err:
            pos = err.pos
        except Exception:  # noqa: BLE001 - the clone is lost, the original goes on
            self._exception("the ingress clone of a packet from port %r", F[slot])
            return
        self._reset_metadata(G)
        for slot in self._prog.field_lists.get(field_list, ()):
            G[slot] = F[slot]
        self._set(G, "instance_type", PKT_INSTANCE_TYPE_INGRESS_CLONE)
        G[L.PKTLEN] = ingress_length
        G[L.ILEN] = F[L.ILEN]
        self._send_clone(G, session, frame[pos:], out, fns, tracing, passes)

    def _egress_clone(self, F, tracing):
        """(copy, session) for an egress clone: F's headers as egress left them, metadata reset
        except the field list's, instance_type EGRESS_CLONE; None when the session is not configured."""
        field_list = F[self._L.CLONE_FL]
        session = self._session(F, tracing)
        if session is None:
            return None
        G = F[:]
        self._reset_metadata(G)
        for slot in self._prog.field_lists.get(field_list, ()):
            G[slot] = F[slot]
        self._set(G, "instance_type", PKT_INSTANCE_TYPE_EGRESS_CLONE)
        self._clear_registers(G)
        G[self._L.EXIT] = 0
        return G, session

    def _send_clone(self, G, session, payload, out, fns, tracing, passes):
        """A clone to its session's multicast group (one copy per replica, egress_rid set), then to
        its port, as simple_switch does (the port copy keeps the last replica's egress_rid)."""
        if session.mgid is not None:
            for eg_port, rid in self._prog.pre.groups.get(session.mgid, ()):
                if not self._copy_allowed(tracing):
                    return
                self._stats["clones"] += 1
                self._set(G, "egress_rid", rid)
                self._egress_pass(G[:], eg_port, payload, out, fns, tracing, passes)
        if session.egress_port is not None and self._copy_allowed(tracing):
            self._stats["clones"] += 1
            self._egress_pass(G, session.egress_port, payload, out, fns, tracing, passes)

    def _copy_allowed(self, tracing) -> bool:
        """One more packet made from the received frame (a clone copy, a resubmit, a recirculation):
        False past MAX_COPIES, the copy dropped and counted (logged the first time)."""
        self._copies += 1
        if self._copies <= MAX_COPIES:
            return True
        self._drop("dropped_copy_limit", tracing, f"more than {MAX_COPIES} copies of one frame")
        if not self._copy_limit_logged:
            self._copy_limit_logged = True
            log.warning(COPY_LIMIT_NOTICE, MAX_COPIES)
        return False

    def _learn(self, F, learn_id, tracing):
        learn_list = self._prog.learn_lists.get(learn_id)
        if learn_list is None:
            log.warning("digest with learn list id %d, which the program does not define: ignored", learn_id)
            return
        values = tuple(F[slot] for slot in learn_list.slots)
        self._stats["digests"] += 1
        if tracing:
            trace_log.log(self.trace_level, "digest %s: %s", learn_list.name, ", ".join(hex(v) for v in values))
        self._prog.digests.push(learn_list.name, values)

    def _fresh_with_field_list(self, F, field_list_id, instance_type, length):
        """A new packet state as BMv2 makes it for resubmit/recirculate: metadata reset, the field
        list's fields copied, instance_type and packet_length set."""
        G = self._template[:]
        for slot in self._prog.field_lists.get(field_list_id, ()):
            G[slot] = F[slot]
        self._set(G, "instance_type", instance_type)
        self._set(G, "packet_length", length)
        G[self._L.PKTLEN] = length
        return G

    def seed(self, seed: int) -> None:
        """Seed the generator behind P4's `random` (xorshift64*, the same in both backends)."""
        with self._lock:
            self._prog.runtime_counters.rng = (seed & (2**64 - 1)) or RNG_DEFAULT_SEED

    @property
    def stats(self) -> dict:
        with self._lock:
            self._stats["out_of_bounds"] = self._prog.runtime_counters.out_of_bounds
            self._stats["digests_dropped"] = self._prog.digests.dropped
            return dict(self._stats)
