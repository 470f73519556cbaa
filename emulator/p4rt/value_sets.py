"""P4Runtime ValueSetEntry <-> the engine's parse value sets.

The spec (section "ValueSetEntry"): a write is a MODIFY that replaces the whole set with the given
members; INSERT and DELETE are INVALID_ARGUMENT. A member lists one FieldMatch per match field of
the P4Info value set (exact values; our P4Info binding checks the widths add up to the JSON's
compressed bit width), and the engine takes the fields concatenated in P4Info order. More members
than the P4Info size is RESOURCE_EXHAUSTED. A read with value_set_id 0 answers every value set.
"""

from dataclasses import dataclass

from emulator.errors import EntryError as EngineEntryError  # the engine's refusal of an entry
from emulator.p4rt import bytestrings
from emulator.p4rt.errors import (
    INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    P4RTError,
    engine_error,
    modify_only,
)


@dataclass(frozen=True)
class ValueSetBinding:
    id: int
    name: str
    fields: tuple  # (match field id, name, bitwidth), P4Info order
    size: int

    @property
    def bitwidth(self) -> int:
        return sum(w for _, _, w in self.fields)


def bind_value_sets(p4info, program, refuse) -> dict:
    """id -> ValueSetBinding for every P4Info value set, checked against the engine's program."""
    engine_sets = getattr(program, "value_sets", {}) or {}
    bound = {}
    for vs in p4info.value_sets:
        name = vs.preamble.name
        engine = engine_sets.get(name)
        if engine is None:
            refuse(f"value set '{name}' is not in the device config")
        fields = tuple((m.id, m.name, m.bitwidth) for m in vs.match)
        binding = ValueSetBinding(vs.preamble.id, name, fields, vs.size)
        if binding.bitwidth != engine.bitwidth:
            refuse(f"value set '{name}' is {binding.bitwidth} bits in P4Info, {engine.bitwidth} in the device config")
        bound[vs.preamble.id] = binding
    return bound


def _binding(pipe, value_set_id) -> ValueSetBinding:
    sets = getattr(pipe.binding, "value_sets", {})
    if value_set_id not in sets:
        raise P4RTError(INVALID_ARGUMENT, f"unknown value set id {value_set_id}")
    return sets[value_set_id]


def _member_value(vs: ValueSetBinding, member, k: int) -> int:
    what = f"value set '{vs.name}' member {k}"
    given = {}
    for fm in member.match:
        kind = fm.WhichOneof("field_match_type")
        if kind != "exact":
            raise P4RTError(UNIMPLEMENTED, f"{what}: only exact members are supported, got {kind}")
        if fm.field_id in given:
            raise P4RTError(INVALID_ARGUMENT, f"{what}: match field id {fm.field_id} given twice")
        given[fm.field_id] = fm.exact.value
    value = 0
    for fid, fname, width in vs.fields:
        if fid not in given:
            raise P4RTError(INVALID_ARGUMENT, f"{what}: match field '{fname}' is missing")
        value = (value << width) | bytestrings.decode(given.pop(fid), width, f"{what} field '{fname}'")
    if given:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: unknown match field id {sorted(given)[0]}")
    return value


def write_value_set_entry(pipe, update_type, entry) -> None:
    vs = _binding(pipe, entry.value_set_id)
    modify_only(update_type, f"value set '{vs.name}'", "value set")
    values = [_member_value(vs, m, k) for k, m in enumerate(entry.members)]
    if vs.size and len(values) > vs.size:
        raise P4RTError(RESOURCE_EXHAUSTED, f"value set '{vs.name}' holds at most {vs.size} members")
    try:
        pipe.engine.value_set_replace(vs.name, values)
    except EngineEntryError as exc:
        raise engine_error(exc, f"value set '{vs.name}'") from None


def read_value_set_entries(pipe, request, new) -> list:
    sets = getattr(pipe.binding, "value_sets", {})
    chosen = sets.values() if request.value_set_id == 0 else [_binding(pipe, request.value_set_id)]
    found = []
    for vs in chosen:
        entry = new()
        entry.value_set_id = vs.id
        for value in pipe.engine.value_set_members(vs.name):
            member = entry.members.add()
            shift = vs.bitwidth
            for fid, _, width in vs.fields:
                shift -= width
                fm = member.match.add()
                fm.field_id = fid
                fm.exact.value = bytestrings.encode((value >> shift) & ((1 << width) - 1))
        found.append(entry)
    return found
