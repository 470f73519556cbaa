"""Names <-> ids of one pipeline, and table entries built from readable values (and back).

Indexing reuses p4runtime-shell's `Context` (full names or unique suffixes, as in the shell), but one
instance per switch instead of the shell's process-wide global, so one process can program several
switches. Values are sent as canonical (shortest) byte strings, like p4runtime-shell.

Readable values: integers; "10.0.0.1" for 32-bit fields; "08:00:00:00:00:01" for 48-bit fields;
"0x1f" or "31" strings. LPM keys are "10.0.0.1/32" or [value, prefix_len] (p4lang/tutorials' form),
ternary keys [value, mask], range keys [low, high].
"""

import ipaddress
from pathlib import Path

import google.protobuf.text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.bytes_utils import to_canonical_bytes
from p4runtime_sh.context import Context, P4Type

from controller.errors import BadInput

MatchField = p4info_pb2.MatchField


def load_p4info(path: str | Path) -> p4info_pb2.P4Info:
    """A P4Info from a text (.txt, .txtpb, .pb.txt) or binary file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read P4Info file {path}: {exc.strerror}") from None
    msg = p4info_pb2.P4Info()
    try:
        if b"preamble" in data[:4096] or path.suffix in (".txt", ".txtpb") or path.name.endswith(".pb.txt"):
            google.protobuf.text_format.Merge(data.decode(), msg, allow_unknown_field=True)
        else:
            msg.ParseFromString(data)
    except Exception as exc:  # text_format.ParseError, DecodeError, UnicodeDecodeError
        raise BadInput(f"{path} is not a P4Info file: {str(exc).splitlines()[0]}") from None
    return msg


class P4Info:
    """One pipeline's P4Info with lookups by name and the encoding of entries."""

    def __init__(self, msg: p4info_pb2.P4Info):
        self.msg = msg
        self._ctx = Context()
        self._ctx.set_p4info(msg)

    # ---- lookups --------------------------------------------------------------------------------

    def _get(self, kind: P4Type, name: str):
        obj = self._ctx.get_obj(kind, name)
        if obj is None:
            known = ", ".join(sorted(n for n, _ in self._ctx.get_objs(kind))) or "none"
            raise BadInput(f"no {kind.pretty_name} '{name}' in the P4Info ({kind.pretty_names}: {known})")
        return obj

    def has_table(self, name: str) -> bool:
        return self._ctx.get_obj(P4Type.table, name) is not None

    def table(self, name: str) -> p4info_pb2.Table:
        return self._get(P4Type.table, name)

    def action(self, name: str) -> p4info_pb2.Action:
        return self._get(P4Type.action, name)

    def counter(self, name: str) -> p4info_pb2.Counter:
        return self._get(P4Type.counter, name)

    def name_of(self, obj_id: int) -> str:
        try:
            return self._ctx.get_name_from_id(obj_id)
        except KeyError:
            return f"<id {obj_id}>"

    def tables(self) -> list[p4info_pb2.Table]:
        return list(self.msg.tables)

    @staticmethod
    def _field(table: p4info_pb2.Table, name: str) -> p4info_pb2.MatchField:
        exact = [mf for mf in table.match_fields if mf.name == name]
        if exact:
            return exact[0]
        by_suffix = [mf for mf in table.match_fields if mf.name.endswith("." + name)]
        if len(by_suffix) == 1:
            return by_suffix[0]
        known = ", ".join(mf.name for mf in table.match_fields)
        raise BadInput(f"table '{table.preamble.name}' has no key '{name}' (keys: {known})")

    @staticmethod
    def _param(action: p4info_pb2.Action, name: str):
        for p in action.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in action.params) or "none"
        raise BadInput(f"action '{action.preamble.name}' has no parameter '{name}' (parameters: {known})")

    # ---- building entries -----------------------------------------------------------------------

    def table_entry(
        self,
        table: str,
        match: dict | None = None,
        action: str | None = None,
        params: dict | None = None,
        priority: int = 0,
        is_default: bool = False,
    ) -> p4runtime_pb2.TableEntry:
        """A TableEntry from readable values; the action must be one the table allows."""
        t = self.table(table)
        entry = p4runtime_pb2.TableEntry(table_id=t.preamble.id)
        for name, value in (match or {}).items():
            entry.match.append(self._field_match(t, self._field(t, name), value))
        entry.match.sort(key=lambda fm: fm.field_id)
        if priority:
            entry.priority = priority
        if is_default:
            entry.is_default_action = True
        if action is not None:
            a = self.action(action)
            if a.preamble.id not in {ref.id for ref in t.action_refs}:
                allowed = ", ".join(self.name_of(ref.id) for ref in t.action_refs)
                raise BadInput(f"table '{t.preamble.name}' has no action '{action}' (actions: {allowed})")
            entry.action.action.action_id = a.preamble.id
            given = dict(params or {})
            for p in a.params:
                if p.name not in given:
                    raise BadInput(f"action '{a.preamble.name}' needs parameter '{p.name}' ({p.bitwidth} bits)")
                entry.action.action.params.add(
                    param_id=p.id,
                    value=encode(given.pop(p.name), p.bitwidth, f"parameter '{p.name}' of '{a.preamble.name}'"),
                )
            if given:
                self._param(a, next(iter(given)))  # raises, naming the unknown parameter
        return entry

    def _field_match(self, table, mf: p4info_pb2.MatchField, value) -> p4runtime_pb2.FieldMatch:
        what = f"key '{mf.name}' of '{table.preamble.name}'"
        fm = p4runtime_pb2.FieldMatch(field_id=mf.id)
        width = mf.bitwidth
        if mf.match_type == MatchField.EXACT:
            fm.exact.value = encode(value, width, what)
        elif mf.match_type == MatchField.LPM:
            if isinstance(value, str) and "/" in value:
                value, plen = value.split("/", 1)
            elif isinstance(value, (list, tuple)) and len(value) == 2:
                value, plen = value
            else:
                value, plen = value, width
            try:
                plen = int(plen)
            except (TypeError, ValueError):
                raise BadInput(f"{what}: prefix length {plen!r} is not an integer") from None
            if not 1 <= plen <= width:
                raise BadInput(f"{what}: prefix length {plen} must be 1..{width}")
            number = to_int(value, width, what)
            if number & ((1 << (width - plen)) - 1):
                raise BadInput(
                    f"{what}: {format_value(number, width, mf.name)}/{plen} has bits set beyond the prefix length"
                )
            fm.lpm.value = to_canonical_bytes(number.to_bytes((width + 7) // 8, "big"))
            fm.lpm.prefix_len = plen
        elif mf.match_type == MatchField.TERNARY:
            val, mask = _pair(value, what, "[value, mask]")
            val, mask = to_int(val, width, what), to_int(mask, width, what)
            fm.ternary.value = canonical(val & mask)
            fm.ternary.mask = canonical(mask)
        elif mf.match_type == MatchField.RANGE:
            low, high = _pair(value, what, "[low, high]")
            low, high = to_int(low, width, what), to_int(high, width, what)
            if low > high:
                raise BadInput(f"{what}: range low {low} is above high {high}")
            fm.range.low = canonical(low)
            fm.range.high = canonical(high)
        elif mf.match_type == MatchField.OPTIONAL:
            fm.optional.value = encode(value, width, what)
        else:
            raise BadInput(f"{what}: match type {mf.match_type} is not supported")
        return fm

    # ---- reading entries back -------------------------------------------------------------------

    def describe(self, entry: p4runtime_pb2.TableEntry) -> dict:
        """A table entry in p4lang/tutorials' runtime-file form (what `thc-ctl apply` reads back)."""
        table = self._ctx.get_obj_by_id(entry.table_id)
        out: dict = {"table": table.preamble.name}
        if entry.is_default_action:
            out["default_action"] = True
        fields = {mf.id: mf for mf in table.match_fields}
        match = {}
        for fm in entry.match:
            mf = fields.get(fm.field_id)
            name = mf.name if mf else f"<field {fm.field_id}>"
            width = mf.bitwidth if mf else 0
            kind = fm.WhichOneof("field_match_type")
            if kind == "exact":
                match[name] = format_value(_int(fm.exact.value), width, name)
            elif kind == "lpm":
                match[name] = [format_value(_int(fm.lpm.value), width, name), fm.lpm.prefix_len]
            elif kind == "ternary":
                match[name] = [format_value(_int(fm.ternary.value), width, name), _int(fm.ternary.mask)]
            elif kind == "range":
                match[name] = [_int(fm.range.low), _int(fm.range.high)]
            elif kind == "optional":
                match[name] = format_value(_int(fm.optional.value), width, name)
        if match:
            out["match"] = match
        if entry.priority:
            out["priority"] = entry.priority
        if entry.action.HasField("action"):
            action = self._ctx.get_obj_by_id(entry.action.action.action_id)
            widths = {p.id: (p.name, p.bitwidth) for p in action.params}
            out["action_name"] = action.preamble.name
            out["action_params"] = {
                widths[p.param_id][0]: format_value(_int(p.value), widths[p.param_id][1], widths[p.param_id][0])
                for p in entry.action.action.params
                if p.param_id in widths
            }
        return out

    def describe_line(self, entry: p4runtime_pb2.TableEntry) -> str:
        """One line: `table key=value -> action(param=value)`."""
        d = self.describe(entry)
        if d.get("default_action"):
            key = "(default)"
        else:
            key = " ".join(f"{_short(k)}={_show(v)}" for k, v in d.get("match", {}).items()) or "(any)"
        params = ", ".join(f"{k}={_show(v)}" for k, v in d.get("action_params", {}).items())
        prio = f" priority={d['priority']}" if "priority" in d else ""
        return f"{d['table']} {key}{prio} -> {_short(d.get('action_name', '?'))}({params})"

    def describe_update(self, update: p4runtime_pb2.Update) -> str:
        kind = p4runtime_pb2.Update.Type.Name(update.type)
        which = update.entity.WhichOneof("entity")
        if which == "table_entry":
            return f"{kind} {self.describe_line(update.entity.table_entry)}"
        if which == "packet_replication_engine_entry":
            group = update.entity.packet_replication_engine_entry.multicast_group_entry
            replicas = ", ".join(f"port {r.egress_port} rid {r.instance}" for r in group.replicas)
            return f"{kind} multicast group {group.multicast_group_id} [{replicas}]"
        return f"{kind} {which}"


def _pair(value, what: str, form: str):
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return value
    raise BadInput(f"{what}: expected {form}, got {value!r}")


def _int(data: bytes) -> int:
    return int.from_bytes(data, "big")


def canonical(number: int) -> bytes:
    """The shortest big-endian byte string of a non-negative integer (one zero byte for 0)."""
    return to_canonical_bytes(number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big"))


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _show(value) -> str:
    if isinstance(value, list):
        return "/".join(str(v) for v in value) if len(value) == 2 and isinstance(value[1], int) else str(value)
    return str(value)


def to_int(value, bitwidth: int, what: str) -> int:
    """An integer from an int, an IPv4 or MAC string, or a decimal/hex string; checked against the width."""
    if isinstance(value, bool):
        raise BadInput(f"{what}: {value!r} is not a number")
    if isinstance(value, bytes):
        number = int.from_bytes(value, "big")
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            if text.count(".") == 3:
                number = int(ipaddress.IPv4Address(text))
            elif text.count(":") == 5:
                parts = text.split(":")
                if not all(1 <= len(p) <= 2 for p in parts):
                    raise ValueError
                number = int("".join(p.zfill(2) for p in parts), 16)
            else:
                number = int(text, 0)
        except ValueError:
            raise BadInput(f"{what}: cannot read {value!r} as a number, IPv4 or MAC address") from None
    else:
        raise BadInput(f"{what}: {value!r} is not a number")
    if number < 0 or number.bit_length() > bitwidth:
        raise BadInput(f"{what}: {value!r} does not fit in {bitwidth} bits")
    return number


def encode(value, bitwidth: int, what: str) -> bytes:
    """The canonical P4Runtime byte string of `value` for a field of `bitwidth` bits."""
    return canonical(to_int(value, bitwidth, what))


def format_value(number: int, bitwidth: int, name: str = ""):
    """A readable form: MAC for 48 bits, dotted quad for 32-bit address fields, else the integer."""
    if bitwidth == 48:
        raw = number.to_bytes(6, "big")
        return ":".join(f"{b:02x}" for b in raw)
    lname = name.lower()
    if bitwidth == 32 and ("addr" in lname or lname.endswith("ip") or lname in ("dip", "sip")):
        return str(ipaddress.IPv4Address(number))
    return number
