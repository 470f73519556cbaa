"""BMv2's hash/checksum algorithms (src/bm_sim/calculations.cpp) over a big-endian byte buffer.

A calculation's input (fields bit-concatenated, BMv2's BufBuilder) is handed over as one integer
`buf` holding `nbytes` bytes big-endian, which avoids building bytes for the common csum16 case.
"""

import zlib


def csum16(buf: int, nbytes: int) -> int:
    """RFC 1071 Internet checksum (BMv2 `csum16`): one's complement of the one's complement sum."""
    if nbytes & 1:
        buf <<= 8  # a trailing odd byte is the high byte of a zero-padded word
    # 2**16 == 1 (mod 0xffff): the residue is the end-around-carry sum, except that a non-zero sum
    # that folds to 0xffff leaves residue 0
    folded = buf % 0xFFFF
    if folded == 0 and buf:
        folded = 0xFFFF
    return ~folded & 0xFFFF


def crc32(buf: int, nbytes: int) -> int:
    """CRC-32 (reflected 0x04C11DB7, init and xor-out 0xFFFFFFFF), BMv2 `crc32`."""
    return zlib.crc32(buf.to_bytes(nbytes, "big"))


def _crc16_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC16 = _crc16_table()


def crc16(buf: int, nbytes: int) -> int:
    """CRC-16/ARC (reflected 0x8005, init 0, no xor-out), BMv2 `crc16`."""
    crc = 0
    for byte in buf.to_bytes(nbytes, "big"):
        crc = (crc >> 8) ^ _CRC16[(crc ^ byte) & 0xFF]
    return crc


def identity(buf: int, nbytes: int) -> int:
    """The first (up to) 8 bytes as a big-endian integer, BMv2 `identity`."""
    return buf >> (8 * (nbytes - 8)) if nbytes > 8 else buf


def xor16(buf: int, nbytes: int) -> int:
    """XOR of the 16-bit big-endian words, a trailing odd byte padded with zero, BMv2 `xor16`."""
    if nbytes & 1:
        buf <<= 8
    result = 0
    while buf:
        result ^= buf & 0xFFFF
        buf >>= 16
    return result


ALGORITHMS = {"csum16": csum16, "crc32": crc32, "crc16": crc16, "identity": identity, "xor16": xor16}


def _reflect(value: int, nbits: int) -> int:
    return int(f"{value:0{nbits}b}"[::-1], 2)


class CustomCrc:
    """BMv2's crcN_custom (calculations.cpp crc_custom<T>): a table-driven CRC whose parameters the
    control plane may change at run time, per calculation (simple_switch's runtime CLI:
    `set_crc16_parameters` / `set_crc32_parameters NAME POLY INIT XOR REFLECT_DATA REFLECT_REMAINDER`).
    Until then it is BMv2's default: CRC-16/ARC for 16 bits, the standard CRC-32 for 32."""

    DEFAULTS = {16: (0x8005, 0x0000, 0x0000, True, True), 32: (0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, True, True)}

    def __init__(self, width: int):
        self.width = width
        self.configure(*self.DEFAULTS[width])

    def configure(self, polynomial, initial, final_xor, reflect_data, reflect_remainder) -> None:
        top = 1 << self.width
        for what, v in (("polynomial", polynomial), ("initial remainder", initial), ("final xor value", final_xor)):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < top:
                raise ValueError(f"crc{self.width} {what} must be a {self.width}-bit value, got {v!r}")
        self.params = (polynomial, initial, final_xor, bool(reflect_data), bool(reflect_remainder))
        mask, shift = top - 1, self.width - 8
        table = []
        for dividend in range(256):
            rem = dividend << shift
            for _ in range(8):
                rem = ((rem << 1) ^ polynomial) & mask if rem >> (self.width - 1) else (rem << 1) & mask
            table.append(rem)
        self._table = table
        self._reflected_bytes = [_reflect(b, 8) for b in range(256)] if reflect_data else list(range(256))

    def __call__(self, buf: int, nbytes: int) -> int:
        _, rem, final_xor, _, reflect_remainder = self.params
        mask, shift, table, rb = (1 << self.width) - 1, self.width - 8, self._table, self._reflected_bytes
        for byte in buf.to_bytes(nbytes, "big"):
            rem = table[rb[byte] ^ (rem >> shift)] ^ ((rem << 8) & mask)
        if reflect_remainder:
            rem = _reflect(rem, self.width)
        return rem ^ final_xor


CUSTOM_CRC_WIDTHS = {"crc16_custom": 16, "crc32_custom": 32}


class RandomHash:
    """The `random` hash algorithm: a draw from the switch's seeded generator (the one behind P4's
    `random`), whatever the input. simple_switch refuses programs that use it ("Unknown hash
    algorithm: random"), so there is nothing to agree with; `seed()` makes runs reproducible."""

    def __init__(self, draw):
        self._draw = draw

    def __call__(self, buf: int, nbytes: int) -> int:
        return self._draw()
