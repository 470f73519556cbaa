"""THC frames for the P4 program's packet tests, built and read from contract/__init__.py alone.

The pipeline tests check the switch against the contract (p4/README.md), so their frames come from the
contract's header layout, not from the host agent's code under test: `frame(...)` builds any request,
release, partial or result, and `Parsed` reads one back (lengths, checksum, header, lanes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

import contract

ETH, IPV4, UDP = 14, 20, 8
THC_AT = ETH + IPV4 + UDP
PAYLOAD_AT = THC_AT + contract.THC_HEADER_BYTES
LANE_DTYPE = {8: np.dtype(np.uint8), 16: np.dtype(">u2"), 32: np.dtype(">i4")}


def ip_bytes(ip: str) -> bytes:
    return bytes(int(x) for x in ip.split("."))


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def frame(
    src: tuple[str, str],
    dst: tuple[str, str],
    *,
    op: int,
    kind: int = contract.KIND_REQUEST,
    job_id: int,
    worker_id: int,
    slot: int = 0,
    round_: int = 0,
    count: int = 0,
    lane_bits: int = 0,
    value: int = 0,
    key: int = 0,
    payload: bytes = b"",
    version: int = contract.THC_VERSION,
    total_len: int | None = None,
    sport: int = 40000,
) -> bytes:
    """An Ethernet/IPv4/UDP/THC frame from (mac, ip) `src` to `dst`; `total_len` overrides the IPv4
    total length (the checksum stays valid) to craft a frame that lies about its size."""
    thc = contract.THC_HEADER.pack(
        version, (op << 4) | kind, job_id, worker_id, slot, count, lane_bits, round_ & 0xFFFFFFFF, value, key
    )
    udp_len = UDP + len(thc) + len(payload)
    length = IPV4 + udp_len if total_len is None else total_len
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, length, 0, 0x4000, 64, 17, 0, ip_bytes(src[1]), ip_bytes(dst[1]))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", sport, contract.THC_UDP_PORT, udp_len, 0)
    return mac_bytes(dst[0]) + mac_bytes(src[0]) + b"\x08\x00" + ip + udp + thc + payload


def pack_indices(indices: np.ndarray) -> bytes:
    """Two 4-bit indices per byte, the first in the high nibble."""
    idx = np.asarray(indices, dtype=np.uint8)
    return ((idx[0::2] << 4) | idx[1::2]).astype(np.uint8).tobytes()


def request_payload(indices: np.ndarray, lane_bits: int) -> bytes:
    """A THC request's payload: the packed indices, and the padding 16-bit lanes carry (p4/README.md)."""
    pad = contract.PAD16_BYTES if lane_bits == contract.LANES_16 else 0
    return pack_indices(indices) + bytes(pad)


def release_payload(op: int) -> bytes:
    return bytes(contract.release_payload_bytes(op))


def pack_int32(values) -> bytes:
    return np.asarray(values, dtype=">i4").tobytes()


def pack_norms(values) -> bytes:
    """A NORM request's payload: up to NORMS_PER_REQUEST float32 values' bit patterns, big-endian, the
    first in the high bits of the first word, unused lanes 0."""
    v = np.asarray(values, dtype=np.float32).reshape(-1)
    if v.size > contract.NORMS_PER_REQUEST:
        raise ValueError(f"{v.size} norms: a NORM request carries {contract.NORMS_PER_REQUEST}")
    lanes = np.zeros(contract.NORMS_PER_REQUEST, ">u4")
    lanes[: v.size] = v.view(np.uint32)
    return lanes.tobytes()


@dataclass
class Parsed:
    """A frame the switch sent: addresses, lengths, the THC header and the payload's lanes."""

    dst_mac: str
    src_mac: str
    src_ip: str
    dst_ip: str
    ttl: int
    ip_len: int
    ip_checksum_ok: bool
    udp_len: int
    udp_checksum: int
    version: int
    op: int
    kind: int
    job_id: int
    worker_id: int
    slot: int
    count: int
    lane_bits: int
    round: int
    value: int
    key: int
    payload: bytes

    @classmethod
    def of(cls, data: bytes) -> Parsed:
        ip = data[ETH : ETH + IPV4]
        (ip_len,) = struct.unpack("!H", ip[2:4])
        udp_len, udp_sum = struct.unpack("!HH", data[ETH + IPV4 + 4 : ETH + IPV4 + 8])
        fields = contract.THC_HEADER.unpack_from(data, THC_AT)
        version, op_kind, job_id, worker_id, slot, count, lane_bits, round_, value, key = fields
        return cls(
            data[0:6].hex(":"),
            data[6:12].hex(":"),
            ".".join(map(str, ip[12:16])),
            ".".join(map(str, ip[16:20])),
            ip[8],
            ip_len,
            checksum(ip) == 0,
            udp_len,
            udp_sum,
            version,
            op_kind >> 4,
            op_kind & 0xF,
            job_id,
            worker_id,
            slot,
            count,
            lane_bits,
            round_,
            value,
            key,
            data[PAYLOAD_AT:],
        )

    def lengths_match(self, frame_len: int) -> bool:
        """The IPv4 and UDP lengths say exactly what the frame carries."""
        return self.ip_len == frame_len - ETH and self.udp_len == frame_len - ETH - IPV4

    def lanes(self) -> list[int]:
        """The sums, one per lane, in coordinate order."""
        return [int(v) for v in np.frombuffer(self.payload, dtype=LANE_DTYPE[self.lane_bits])]

    def norms(self) -> np.ndarray:
        """A NORM result's maxima: its NORMS_PER_REQUEST lanes as float32 values."""
        return np.frombuffer(self.payload, dtype=">u4").astype(np.uint32).view(np.float32)
