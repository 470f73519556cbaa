"""P4Runtime binary strings (spec section "Bytestrings").

Clients may send any width as long as the value fits the P4Info bitwidth (p4runtime-shell sends the
shortest form, other clients the full width); the server always answers with the shortest form so that
reads are symmetric with what a canonical client wrote.
"""

from emulator.p4rt.errors import INVALID_ARGUMENT, P4RTError


def encode(value: int) -> bytes:
    """Canonical (shortest) big-endian string of a non-negative integer; zero is one byte."""
    if value <= 0:
        return b"\x00"
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def decode(data: bytes, bitwidth: int, what: str) -> int:
    """Integer of `data`, refused when empty or wider than `bitwidth` bits.

    `what` names the field in the error message ("match field 'hdr.ipv4.dstAddr'").
    Like BMv2's PI server, a value that does not fit is INVALID_ARGUMENT (the spec says OUT_OF_RANGE).
    """
    if not data:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: empty bytestring")
    value = int.from_bytes(data, "big")
    if value.bit_length() > bitwidth:
        raise P4RTError(INVALID_ARGUMENT, f"{what}: value 0x{value:x} does not fit in {bitwidth} bits")
    return value
