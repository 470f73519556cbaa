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
