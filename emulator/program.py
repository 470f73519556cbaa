"""What a loaded program offers the control plane: tables, actions, registers, counters, value sets,
meters and action profiles.

These are the engine's public descriptions (names are the fully qualified names p4c writes into the
BMv2 JSON, which equal the P4Info names). They are plain immutable tuples so that a P4Runtime
binding can compare them with P4Info without knowing the engine.
"""

from typing import NamedTuple


class KeyInfo(NamedTuple):
    name: str
    match_type: str  # exact | lpm | ternary | range | valid  (P4 `optional` appears as ternary in BMv2 JSON)
    bitwidth: int


class TableInfo(NamedTuple):
    name: str
    keys: list  # KeyInfo, in key order
    actions: list  # action names
    size: int
    default_action: tuple  # (action name, [params]) as loaded from the JSON
    const_entries: bool  # entries come from the program (`const entries`) and cannot change
    hidden: bool = False  # synthesized by p4c (keyless wrapper of a direct action call)


class ActionInfo(NamedTuple):
    name: str
    params: list  # (param name, bitwidth)


class RegisterInfo(NamedTuple):
    name: str
    size: int
    bitwidth: int


class CounterInfo(NamedTuple):
    name: str
    size: int
    is_direct: bool
    table: str | None  # the table a direct counter is attached to


class ValueSetInfo(NamedTuple):
    name: str
    bitwidth: int  # members are values of this width (the select key's fields, unpadded)
    size: int | None  # most members it may hold (None: no limit in the JSON)


class DigestInfo(NamedTuple):
    name: str  # the learn list's name, which P4Info uses for the digest
    id: int  # the learn list id
    fields: list  # (field name, bitwidth), in the order of the digest's data


class MeterInfo(NamedTuple):
    name: str
    size: int
    unit: str  # packets | bytes
    table: str | None  # the table a direct meter is attached to


class ActionProfileInfo(NamedTuple):
    name: str
    size: int  # members (and groups) it holds
    tables: list  # names of the tables that use it
    with_selector: bool


class TableEntry(NamedTuple):
    keys: list  # one per key, in the API form of its match type
    action: str
    params: list
    priority: int | None  # larger wins (P4Runtime convention); None for exact/lpm tables


class ProgramInfo(NamedTuple):
    tables: dict  # name -> TableInfo
    actions: dict  # name -> ActionInfo
    registers: dict  # name -> RegisterInfo
    counters: dict  # name -> CounterInfo
    value_sets: dict = {}  # name -> ValueSetInfo (parse value sets)
    custom_crcs: dict = {}  # calculation name -> CRC width (crc16_custom / crc32_custom parameters)
    digests: dict = {}  # name -> DigestInfo (digests: BMv2's learn lists)
    meters: dict | None = None  # name -> MeterInfo
    action_profiles: dict | None = None  # name -> ActionProfileInfo
