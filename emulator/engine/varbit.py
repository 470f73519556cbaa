"""Headers with a variable-length (varbit) field: extract_VL, emit, and their checks.

BMv2 (parser.cpp extract_VL, headers.cpp, fields.cpp): the field's width in bits is computed by the
extract's expression before anything is read; it must be a multiple of 8 (else
ParserInvalidArgument), the packet must hold the fixed part plus that many bytes (else
PacketTooShort), and the header's JSON `max_length` must not be exceeded (else HeaderTooShort).
The width then belongs to the field (our `$varbit_width$` slot, see layout.py): emit writes that many
bits, `assign_VL` and header copies carry it, checksums read that many bits, and `==` compares the
values only (BMv2's Field::operator==).

These headers are rare and short, so they go through the run-time helpers below (one integer per
header) instead of the struct-based codec of headercodec.py.
"""

from emulator.engine.runtime import ParserError

INT32 = 1 << 32


def field_spec(htype) -> tuple:
    """((width, signed) per field, the varbit one as (None, False)) for the helpers below."""
    return tuple((None if k == htype.varbit else w, s) for k, (_, w, s) in enumerate(htype.fields))


def bmv2_int(nbits: int) -> int:
    """The width as BMv2 reads it: `Data::get<int>()`, the low 32 bits as a signed int."""
    nbits &= INT32 - 1
    return nbits - INT32 if nbits >= INT32 >> 1 else nbits


def check_vl_extract(D, pos, nbits, fixed_bytes, max_bytes, invalid_argument, too_short_header):
    """Raise the parser error BMv2 raises for this extract_VL, else return the bytes it takes."""
    nbits = bmv2_int(nbits)
    if nbits % 8:  # C++'s %: -4 % 8 is -4, not 0
        raise ParserError(invalid_argument, pos)
    need = fixed_bytes + int(nbits / 8)
    if need < 0 or len(D) - pos < need:
        raise ParserError(None, pos)  # BMv2: the negative sum becomes a huge size_t
    if max_bytes < need:
        raise ParserError(too_short_header, pos)
    if nbits < 0:
        # BMv2 would extract a field of negative width (undefined behaviour): refuse it as an
        # invalid argument, the closest defined outcome
        raise ParserError(invalid_argument, pos)
    return need


def extract_vl(F, D, pos, base, spec, nbits, nbytes):
    """Set the fields, validity and varbit width of the header at `base` from D[pos:pos+nbytes]."""
    value = int.from_bytes(D[pos : pos + nbytes], "big")
    shift = nbytes * 8
    for k, (width, signed) in enumerate(spec):
        if width is None:
            width = nbits
        shift -= width
        v = (value >> shift) & ((1 << width) - 1)
        if signed and width:
            half = 1 << (width - 1)
            v = (v ^ half) - half
        F[base + k] = v
    n = len(spec)
    F[base + n] = 1
    F[base + n + 1] = nbits


def pack_vl(F, base, spec) -> bytes:
    """The header's bytes: every field at its width, the varbit field at its current width."""
    acc, nbits = 0, 0
    n = len(spec)
    for k, (width, _) in enumerate(spec):
        if width is None:
            width = F[base + n + 1]
        acc = (acc << width) | (F[base + k] & ((1 << width) - 1))
        nbits += width
    return acc.to_bytes(nbits >> 3, "big")


def header_bytes(F, base, htype) -> int:
    """Bytes the header takes in the packet now (BMv2's get_nbytes_packet)."""
    if htype.varbit is None:
        return htype.nbits // 8
    return (htype.nbits + F[base + htype.nfields + 1]) // 8


HELPERS = {"_check_vl_extract": check_vl_extract, "_extract_vl": extract_vl, "_pack_vl": pack_vl}
