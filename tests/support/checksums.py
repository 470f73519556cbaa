"""Reference checksums, bit by bit from their definitions: what the engines' hashes are checked against."""

import struct


def csum16(data: bytes) -> int:
    """The Internet checksum (RFC 1071), BMv2's csum16: ones' complement of the ones' complement sum."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC (BMv2's crc16), bit by bit."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc
