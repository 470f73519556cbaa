"""A job's lookup table in the switch: index_lookup.p4's `values` entry for the job.

The job's 2^b table values V (integers 0..g, g <= 255) are the bytes of set_values' two 64-bit
parameters: V[0..7] in values_lo and V[8..15] in values_hi, V[j] in bits 8(j % 8) + 7 .. 8(j % 8), so the
data plane selects V[x] for an index x with one shift and concatenates eight of them into the lanes of a
register word (p4/README.md, "Lookup"). `index_mask` holds, in each of its eight nibbles, the index bits a
table of 2^b entries never uses; a request that sets one is dropped as BAD_INDEX. Each job carries its own
table, so jobs with different tables share the switch.
"""

import contract
from controller.errors import BadInput
from controller.writes import DELETE, TableWrite


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
        if not 0 <= v <= contract.TABLE_VALUE_MAX:
            raise BadInput(
                f"table value V[{i}] = {v} is outside 0..{contract.TABLE_VALUE_MAX} (values are bytes of the "
                "job's value vector: g <= 255)"
            )
    return ints, bits


def index_mask(bits: int) -> int:
    """The index bits a table of 2^bits entries never uses, in each of eight nibbles."""
    unused = 0xF & ~((1 << bits) - 1)
    return int(f"{unused:x}" * 8, 16)


def pack(values: list[int], bits: int) -> tuple[int, int, int]:
    """set_values' (values_lo, values_hi, index_mask) for checked table values."""
    lo = hi = 0
    for j, v in enumerate(values):
        if j < 8:
            lo |= v << (8 * j)
        else:
            hi |= v << (8 * (j - 8))
    return lo, hi, index_mask(bits)


def unpack(lo: int, hi: int, mask: int) -> tuple[list[int], int] | None:
    """The table (values, bits) set_values' parameters hold, or None if the mask is no table's."""
    for bits in range(1, contract.MAX_BITS + 1):
        if index_mask(bits) == mask:
            vector = [(lo >> (8 * j)) & 0xFF for j in range(8)] + [(hi >> (8 * j)) & 0xFF for j in range(8)]
            return vector[: 1 << bits], bits
    return None


def values_write(kind: str, job_id: int, values: list[int] | None = None, bits: int | None = None) -> TableWrite:
    """The job's table entry (DELETE needs the job id only)."""
    if kind == DELETE:
        return TableWrite(DELETE, contract.VALUES, (job_id,))
    values, bits = check_values(values, bits)
    return TableWrite(kind, contract.VALUES, (job_id,), contract.SET_VALUES, pack(values, bits))
