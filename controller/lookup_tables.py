"""The THC lookup table in the switch: index_lookup.p4's lut_0 .. lut_{L-1}.

Each lane's table maps one request byte (two 4-bit indices, first coordinate in the high nibble) to the
word V[hi] << 16 | V[lo], so one register add sums two coordinates in two 16-bit lanes (p4/README.md,
"Lookup entries"). For b < 4 bits only hi, lo < 2**b get entries: any other byte misses and the packet
is dropped as BAD_INDEX.

Installing compares with what the switch holds and sends only the difference (INSERT new keys, MODIFY
changed words, DELETE keys the new table has no more), so reinstalling is idempotent and a table with
fewer bits removes the entries it no longer uses.
"""

from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

from controller import contract, wire
from controller.errors import BadInput
from controller.p4info import P4Info
from controller.writes import DELETE, INSERT, MODIFY, TableWrite


def check_values(values, bits: int | None = None) -> tuple[list[int], int]:
    """Table values as Python ints and their bit count; refuses what the program cannot hold."""
    try:
        ints = [int(v) for v in values]
        exact = all(int(v) == v for v in values)
    except (TypeError, ValueError):
        raise BadInput(f"table values must be integers, got {list(values)!r}") from None
    if not exact:
        raise BadInput("table values must be integers (the switch adds them in integer lanes)")
    size = len(ints)
    derived = size.bit_length() - 1
    if size < 2 or size != 1 << derived:
        raise BadInput(f"a table has 2**b values (b = 1..{contract.MAX_BITS}); got {size}")
    if bits is None:
        bits = derived
    if not 1 <= bits <= contract.MAX_BITS:
        raise BadInput(f"bits = {bits}: the program handles b = 1..{contract.MAX_BITS} bits per index")
    if size != 1 << bits:
        raise BadInput(f"a {bits}-bit table has {1 << bits} values; got {size}")
    for i, v in enumerate(ints):
        if not 0 <= v <= contract.SUM_LANE_MAX:
            raise BadInput(f"table value V[{i}] = {v} is outside 0..{contract.SUM_LANE_MAX} (a 16-bit lane)")
    return ints, bits


def words(values: list[int], bits: int) -> dict[int, int]:
    """key (hi << 4 | lo) -> w (V[hi] << 16 | V[lo]) for every pair of indices below 2**bits."""
    n = 1 << bits
    return {(hi << 4) | lo: (values[hi] << 16) | values[lo] for hi in range(n) for lo in range(n)}


def values_from_words(table: dict[int, int]) -> tuple[list[int], int] | None:
    """The table values V a lane's entries encode, or None if they are not a well-formed table."""
    if not table:
        return None
    his = sorted({key >> 4 for key in table})
    n = len(his)
    if n < 2 or n & (n - 1) or his != list(range(n)) or len(table) != n * n:
        return None
    values = [table.get(i << 4 | i, 0) & 0xFFFF for i in range(n)]
    try:
        checked, bits = check_values(values)
    except BadInput:
        return None
    return (checked, bits) if words(checked, bits) == table else None


@dataclass(frozen=True)
class InstalledTable:
    """What the switch's lookup tables hold."""

    values: list[int] | None  # V, or None when the lanes hold no (consistent) table
    bits: int
    lanes: int  # lanes read
    entries: int  # entries over all lanes read
    consistent: bool  # every lane read holds the same well-formed table

    @property
    def max_value(self) -> int:
        """The largest table value g: sums of n workers need n * g to fit their lane."""
        return max(self.values) if self.values else 0

    def to_dict(self) -> dict:
        return {
            "values": self.values,
            "bits": self.bits,
            "max_value": self.max_value,
            "lanes": self.lanes,
            "entries": self.entries,
            "consistent": self.consistent,
        }


def lane_entries(p4info: P4Info, lane: int) -> p4runtime_pb2.Entity:
    """A wildcard read of one lane's table."""
    return p4runtime_pb2.Entity(
        table_entry=p4runtime_pb2.TableEntry(table_id=p4info.table(contract.lut_table(lane)).preamble.id)
    )


@dataclass(frozen=True)
class _Lane:
    table_id: int
    field_id: int
    action_id: int
    param_id: int


def _lanes(p4info: P4Info, lanes: int) -> list[_Lane]:
    out = []
    for i in range(lanes):
        table = p4info.table(contract.lut_table(i))
        action = p4info.action(contract.lut_action(i))
        out.append(_Lane(table.preamble.id, table.match_fields[0].id, action.preamble.id, action.params[0].id))
    return out


def decode_lanes(p4info: P4Info, responses: list[bytes], lanes: int) -> list[dict[int, int]]:
    """Per lane: key -> w, from serialized ReadResponses of the lanes' tables."""
    lane_of = {lane.table_id: i for i, lane in enumerate(_lanes(p4info, lanes))}
    tables: list[dict[int, int]] = [{} for _ in range(lanes)]
    for table_id, key, w in wire.exact_entries(responses):
        lane = lane_of.get(table_id)
        if lane is not None and w is not None:
            tables[lane][key] = w
    return tables


def summarize(tables: list[dict[int, int]]) -> InstalledTable:
    decoded = [values_from_words(t) for t in tables]
    first = decoded[0] if decoded else None
    consistent = first is not None and all(d == first for d in decoded)
    values, bits = first if first else (None, 0)
    return InstalledTable(values, bits, len(tables), sum(len(t) for t in tables), consistent)


def lut_writes(lanes: int, values: list[int], bits: int, installed: list[dict[int, int]]) -> list[TableWrite]:
    """Writes turning `installed` (per lane key -> w) into the table `values` in every lane."""
    wanted = words(values, bits)
    out = []
    for i in range(lanes):
        table, action = contract.lut_table(i), contract.lut_action(i)
        have = installed[i] if i < len(installed) else {}
        for key, w in wanted.items():
            if have.get(key) != w:
                out.append(TableWrite(MODIFY if key in have else INSERT, table, (key,), action, (w,)))
        out += [TableWrite(DELETE, table, (key,)) for key in sorted(set(have) - set(wanted))]
    return out
