"""Where every header field lives in a packet's state vector.

A packet's state (BMv2's PHV) is one flat Python list `F`: every header instance owns consecutive
slots (its fields in declaration order, then its `$valid$` bit), every header stack owns a slot with
its `next` index, and a few slots hold per-packet target registers (exit flag, length register,
resubmit/recirculate field lists). Copying a packet for a multicast replica is then one `F[:]`, and
generated code reaches a field by a constant index (`F[17]`).

A header with a variable-length (varbit) field has one more slot after `$valid$`: the field's
current width in bits (BMv2 keeps it in the Field). Header unions own no slots of their own: a union
is valid when one of its members is (BMv2 keeps that invariant: marking a member valid invalidates
the others), and a union stack owns a `next` slot like a header stack.
"""

from dataclasses import dataclass, field

from emulator.engine.jsonutil import malformed, unsupported

VALID = "$valid$"
# the engine's own per-packet registers (BMv2 keeps them in Packet, not in the PHV), one slot each
ENGINE_REGISTERS = ("EXIT", "PKTLEN", "ILEN", "RESUBMIT", "RECIRC", "CLONE", "CLONE_FL", "LEARN", "TRUNC")


@dataclass
class HeaderType:
    name: str
    fields: list  # (name, width, signed)
    offsets: dict  # field name -> offset in the header ("$valid$" -> len(fields))
    nbits: int  # fixed part: a varbit field counts 0 bits (BMv2's get_nbytes_packet before extract)
    varbit: int | None = None  # index of the variable-length field, if any
    max_bytes: int | None = None  # the header's maximum length with its varbit field (JSON max_length)

    @property
    def nfields(self) -> int:
        return len(self.fields)


@dataclass
class HeaderSlots:
    name: str
    htype: HeaderType
    base: int
    metadata: bool
    stack: str | None = None  # name of the header stack this instance belongs to
    union: str | None = None  # name of the header union this instance is a member of

    @property
    def valid(self) -> int:
        return self.base + self.htype.nfields

    @property
    def vlen(self) -> int | None:
        """Slot of the varbit field's current width in bits (None without a varbit field)."""
        return None if self.htype.varbit is None else self.base + self.htype.nfields + 1

    @property
    def nbytes(self) -> int:
        return self.htype.nbits // 8

    @property
    def size(self) -> int:
        """Slots per instance: fields, the validity bit and the varbit width when there is one."""
        return self.htype.nfields + 1 + (self.htype.varbit is not None)


@dataclass
class UnionSlots:
    name: str
    members: list  # HeaderSlots, in the JSON's order (access_union_header's offsets)
    member_names: list  # the union type's member names ("short" for instance "u.short")
    stack: str | None = None  # name of the union stack this union belongs to

    def member_index(self, name: str) -> int | None:
        if name in self.member_names:
            return self.member_names.index(name)
        names = [h.name for h in self.members]
        return names.index(name) if name in names else None

    @property
    def valid_slots(self) -> tuple:
        return tuple(h.valid for h in self.members)


@dataclass
class UnionStackSlots:
    name: str
    unions: list  # UnionSlots, element order
    next_slot: int


@dataclass
class StackSlots:
    name: str
    htype: HeaderType
    headers: list  # HeaderSlots, element order
    next_slot: int

    @property
    def bases(self) -> tuple:
        return tuple(h.base for h in self.headers)


@dataclass(frozen=True)
class FieldRef:
    slot: int
    width: int
    signed: bool
    header: str
    name: str
    mask: int = field(init=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "mask", (1 << self.width) - 1)


@dataclass
class Layout:
    header_types: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)  # name -> HeaderSlots
    by_id: dict = field(default_factory=dict)  # JSON header id -> HeaderSlots
    stacks: dict = field(default_factory=dict)  # name -> StackSlots
    unions: dict = field(default_factory=dict)  # name -> UnionSlots
    union_stacks: dict = field(default_factory=dict)  # name -> UnionStackSlots
    siblings: dict = field(default_factory=dict)  # valid slot of a union member -> the others' valid slots
    aliases: dict = field(default_factory=dict)  # "intrinsic_metadata.mcast_grp" -> (header, field)
    nslots: int = 0
    # per-packet target registers
    EXIT: int = -1
    PKTLEN: int = -1  # BMv2's packet length register (ingress length +/- add/remove_header)
    ILEN: int = -1  # ingress length: what counters count as bytes
    RESUBMIT: int = -1
    RECIRC: int = -1
    CLONE: int = -1  # BMv2's clone register: mirror session id | 0x8000 once clone() ran, else 0
    CLONE_FL: int = -1  # the clone's field list id
    LEARN: int = -1  # the learn list id of the last digest() (0: none)
    TRUNC: int = -1  # truncate(): bytes the frame keeps when it leaves (-1: not truncated)

    def header(self, name: str, path: str = "?") -> HeaderSlots:
        try:
            return self.headers[name]
        except KeyError:
            if name in self.unions:
                # p4c 1.2.5 emits `hdr.stack[i].isValid()` of a union stack element so; simple_switch
                # looks the name up among headers and refuses to load the program, as this does
                raise malformed(
                    f"{name!r} is a header union, referenced as a header (simple_switch refuses this too:"
                    " p4c writes a union stack element's isValid() so; test its members' validity instead)",
                    path,
                ) from None
            raise malformed(f"unknown header instance {name!r}", path) from None

    def stack(self, name: str, path: str = "?") -> StackSlots:
        return _named(self.stacks, name, "header stack", path)

    def union(self, name: str, path: str = "?") -> UnionSlots:
        return _named(self.unions, name, "header union", path)

    def union_stack(self, name: str, path: str = "?") -> UnionStackSlots:
        return _named(self.union_stacks, name, "header union stack", path)

    def field(self, header: str, name: str, path: str = "?") -> FieldRef:
        h = self.header(header, path)
        offset = h.htype.offsets.get(name)
        if offset is None:
            raise malformed(f"header {header!r} has no field {name!r}", path)
        if offset == h.htype.nfields:
            return FieldRef(h.valid, 1, False, header, name)
        _, width, signed = h.htype.fields[offset]
        return FieldRef(h.base + offset, width, signed, header, name)

    def resolve(self, dotted: str) -> FieldRef | None:
        """A target-known field ('standard_metadata.egress_spec', 'intrinsic_metadata.mcast_grp')
        through the JSON's field_aliases; None when the program does not define it."""
        target = self.aliases.get(dotted)
        if target is None:
            header, _, name = dotted.partition(".")
        else:
            header, name = target
        h = self.headers.get(header)
        if h is None or name not in h.htype.offsets:
            return None
        return self.field(header, name)

    def slot_names(self) -> dict[int, str]:
        """slot -> 'header.field' (and 'header.$valid$', the engine's own registers), for generated code."""
        names = {}
        for h in self.headers.values():
            for k, (fname, _, _) in enumerate(h.htype.fields):
                names[h.base + k] = f"{h.name}.{fname}"
            names[h.valid] = f"{h.name}.$valid$"
            if h.vlen is not None:
                names[h.vlen] = f"{h.name}.$varbit_width$"
        for s in self.stacks.values():
            names[s.next_slot] = f"{s.name}.$next$"
        for s in self.union_stacks.values():
            names[s.next_slot] = f"{s.name}.$next$"
        for reg in ENGINE_REGISTERS:
            names[getattr(self, reg)] = f"<{reg.lower()}>"
        return names

    def template(self) -> list:
        """The state of a packet before parsing: all zero, metadata valid, headers invalid."""
        state = [0] * self.nslots
        for h in self.headers.values():
            if h.metadata:
                state[h.valid] = 1
        state[self.TRUNC] = -1
        return state

    def metadata_ranges(self) -> list:
        """(start, end) slot ranges of the metadata headers: what BMv2's PHV::reset_metadata resets."""
        return [(h.base, h.base + h.size) for h in self.headers.values() if h.metadata]


def build_layout(cfg: dict) -> Layout:
    layout = Layout()
    for i, ht in enumerate(cfg.get("header_types", [])):
        path = f"header_types[{i}]"
        fields = []
        varbit = None
        for j, f in enumerate(ht.get("fields", [])):
            if not isinstance(f, list) or len(f) < 2:
                raise malformed("field must be [name, width(, signed)]", f"{path}.fields[{j}]")
            name, width = f[0], f[1]
            if width == "*":
                if varbit is not None:
                    raise malformed("more than one variable-length field in a header type", path, ht)
                varbit, width = j, 0  # the maximum width is known once the fixed part is
            if not isinstance(width, int) or width < 0:
                raise malformed(f"bad width {width!r}", f"{path}.fields[{j}]")
            signed = bool(f[2]) if len(f) > 2 else False
            if len(f) > 3 and f[3]:
                raise unsupported(f"saturating field '{ht.get('name')}.{name}'", f"{path}.fields[{j}]", ht)
            fields.append((name, width, signed))
        offsets = {name: k for k, (name, _, _) in enumerate(fields)}
        offsets[VALID] = len(fields)
        nbits = sum(w for _, w, _ in fields)
        max_bytes = None
        if varbit is not None:
            max_bytes = ht.get("max_length")
            if not isinstance(max_bytes, int) or max_bytes * 8 < nbits:
                raise malformed(f"header type with a varbit field needs a max_length, got {max_bytes!r}", path, ht)
            name, _, signed = fields[varbit]
            if signed:
                raise unsupported(f"signed variable-length field '{ht.get('name')}.{name}'", path, ht)
            fields[varbit] = (name, max_bytes * 8 - nbits, False)
        layout.header_types[ht["name"]] = HeaderType(ht["name"], fields, offsets, nbits, varbit, max_bytes)

    slot = 0
    for i, h in enumerate(cfg.get("headers", [])):
        path = f"headers[{i}]"
        htype = layout.header_types.get(h.get("header_type"))
        if htype is None:
            raise malformed(f"header {h.get('name')!r} has unknown type {h.get('header_type')!r}", path)
        slots = HeaderSlots(h["name"], htype, slot, bool(h.get("metadata", False)))
        slot += slots.size
        layout.headers[h["name"]] = slots
        layout.by_id[h.get("id", i)] = slots

    for i, s in enumerate(cfg.get("header_stacks", [])):
        path = f"header_stacks[{i}]"
        members = []
        for hid in s.get("header_ids", []):
            h = layout.by_id.get(hid)
            if h is None:
                raise malformed(f"stack {s.get('name')!r} refers to unknown header id {hid}", path)
            h.stack = s["name"]
            members.append(h)
        htype = layout.header_types.get(s.get("header_type"), members[0].htype if members else None)
        layout.stacks[s["name"]] = StackSlots(s["name"], htype, members, slot)
        slot += 1

    slot = _build_unions(cfg, layout, slot)

    for i, alias in enumerate(cfg.get("field_aliases", [])):
        try:
            name, (header, fname) = alias
        except (TypeError, ValueError):
            raise malformed("field alias must be [name, [header, field]]", f"field_aliases[{i}]") from None
        layout.aliases[name] = (header, fname)

    for reg in ENGINE_REGISTERS:
        setattr(layout, reg, slot)
        slot += 1
    layout.nslots = slot
    return layout


def _build_unions(cfg: dict, layout: Layout, slot: int) -> int:
    """Header unions (their members already have slots) and union stacks (a `next` slot each)."""
    by_id = {}
    types = {t.get("name"): [m[0] for m in t.get("headers", [])] for t in cfg.get("header_union_types", [])}
    for i, u in enumerate(cfg.get("header_unions", [])):
        path = f"header_unions[{i}]"
        members = []
        for hid in u.get("header_ids", []):
            h = layout.by_id.get(hid)
            if h is None or h.union is not None or h.stack is not None:
                raise malformed(f"union {u.get('name')!r}: bad member header id {hid}", path)
            h.union = u["name"]
            members.append(h)
        names = types.get(u.get("union_type"))
        if names is None or len(names) != len(members):
            names = [h.name.rsplit(".", 1)[-1] for h in members]
        union = UnionSlots(u["name"], members, names)
        layout.unions[u["name"]] = union
        by_id[u.get("id", i)] = union
        for h in members:
            layout.siblings[h.valid] = tuple(m.valid for m in members if m is not h)
    for i, s in enumerate(cfg.get("header_union_stacks", [])):
        path = f"header_union_stacks[{i}]"
        unions = []
        for uid in s.get("header_union_ids", []):
            u = by_id.get(uid)
            if u is None or u.stack is not None:
                raise malformed(f"union stack {s.get('name')!r}: bad union id {uid}", path)
            u.stack = s["name"]
            unions.append(u)
        shapes = {tuple(h.htype.name for h in u.members) for u in unions}
        if len(shapes) > 1:
            raise malformed(f"union stack {s.get('name')!r} mixes union types", path)
        layout.union_stacks[s["name"]] = UnionStackSlots(s["name"], unions, slot)
        slot += 1
    return slot


def _named(instances: dict, name: str, what: str, path: str):
    """The program's `what` called `name`, or the malformed-program error that names it."""
    try:
        return instances[name]
    except KeyError:
        raise malformed(f"unknown {what} {name!r}", path) from None
