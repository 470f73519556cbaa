"""The THC wire format (p4/README.md, "Packet formats") as plain bytes, for the hot path.

Scapy (layers.py) is for crafting and dissecting in tests and captures; it builds a few thousand packets
per second. Here a frame is a prebuilt Ethernet/IPv4/UDP prefix per payload length plus one
`struct.pack` of the THC header, and a received frame is checked and decoded with one `struct.unpack_from`:
a few microseconds each. How much payload a packet carries is the job's business (its lane width and the
program's cell size, contract/job.py); this module only moves bytes.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from contract import (  # noqa: F401  (re-exported: the host agent's view of the contract)
    KIND_ACK,
    KIND_FALLBACK,
    KIND_NAMES,
    KIND_PARTIAL,
    KIND_QUERY,
    KIND_RELEASE,
    KIND_REQUEST,
    KIND_RESULT,
    KIND_RESULT_RETX,
    KIND_STATUS,
    LANES_8,
    LANES_16,
    LANES_INT32,
    MAX_WORKERS,
    NORMS_PER_REQUEST,
    OP_FIX32,
    OP_NAMES,
    OP_NORM,
    OP_THC,
    PAD16_BYTES,
    THC_HEADER,
    THC_HEADER_BYTES,
    THC_UDP_PORT,
    THC_VERSION,
    WORDS,
    release_payload_bytes,
    request_payload_bytes,
    result_payload_bytes,
)
from native_build import address_of

ETH_LEN, IPV4_LEN, UDP_LEN, THC_LEN = 14, 20, 8, THC_HEADER_BYTES
THC_OFFSET = ETH_LEN + IPV4_LEN + UDP_LEN  # 42
PAYLOAD_OFFSET = THC_OFFSET + THC_LEN  # 62
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17

# Everything a receiver checks, in one call: ethertype, version/IHL, IPv4 total length, flags/fragment
# offset, protocol, UDP destination port, then the THC header.
_RX = struct.Struct("!12xHBxH2xHxB10x2xH4x" + THC_HEADER.format[1:])
IPV4_MF_OFFSET_MASK = 0x3FFF  # more-fragments flag and fragment offset: any fragment


# What the lanes of a result (and of a FIX32 request) are, by lane_bits: numpy dtypes in wire order.
LANE_DTYPES = {LANES_8: np.dtype(np.uint8), LANES_16: np.dtype(">u2"), LANES_INT32: np.dtype(">i4")}


def op_lane_bits(op: int, job_lane_bits: int) -> int:
    """The lane_bits every packet of `op` carries in a job whose THC sums have `job_lane_bits` lanes."""
    if op == OP_THC:
        return job_lane_bits
    if op in (OP_FIX32, OP_NORM):
        return LANES_INT32  # int32 values, or float32 norms' bit patterns
    raise ValueError(f"unknown THC op {op}")


def payload_length(op: int, kind: int, lane_bits: int, words: int = WORDS) -> int:
    """Bytes after the THC header of a packet of this op, kind and lane width on a program with `words`-word
    cells (the contract's payload table): a request carries what one cell holds, a result the cell's words."""
    if op not in OP_NAMES:
        raise ValueError(f"unknown THC op {op}")
    if kind == KIND_RELEASE:
        return release_payload_bytes(op)
    if kind == KIND_REQUEST:
        allowed = (LANES_8, LANES_16) if op == OP_THC else (op_lane_bits(op, 0),)
        if lane_bits not in allowed:
            raise ValueError(f"{OP_NAMES[op]} requests with lane_bits={lane_bits} are dropped (LANE_MISMATCH)")
        return request_payload_bytes(op, lane_bits, words)
    if kind in (KIND_RESULT, KIND_RESULT_RETX, KIND_PARTIAL):
        return result_payload_bytes(op, words)
    if kind in (KIND_QUERY, KIND_STATUS, KIND_ACK):
        return 0  # the header says it all
    raise ValueError(f"unknown THC kind {kind}")


def mac_bytes(mac: str | bytes) -> bytes:
    if isinstance(mac, bytes):
        if len(mac) != 6:
            raise ValueError(f"a MAC address has 6 bytes, got {len(mac)}")
        return mac
    raw = bytes(int(part, 16) for part in mac.replace("-", ":").split(":"))
    if len(raw) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return raw


def ip_bytes(ip: str | bytes) -> bytes:
    if isinstance(ip, bytes):
        if len(ip) != 4:
            raise ValueError(f"an IPv4 address has 4 bytes, got {len(ip)}")
        return ip
    return ipaddress.IPv4Address(ip).packed


def ipv4_checksum(header: bytes) -> int:
    """The ones'-complement sum of the header's 16-bit words, with the checksum field as zero."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass(frozen=True)
class Endpoint:
    """A host's Ethernet and IPv4 address."""

    mac: str
    ip: str

    def __str__(self) -> str:
        return f"{self.ip} ({self.mac})"


class FrameBuilder:
    """Builds THC frames from one source to one destination; the L2–L4 prefix is built once per length.

    IPv4: no options, DF, identification 0, TTL 64, checksum computed. UDP: both ports 21576,
    checksum 0 (none), so no checksum offload is involved anywhere.
    """

    def __init__(
        self, src: Endpoint, dst: Endpoint, sport: int = THC_UDP_PORT, dport: int = THC_UDP_PORT, ttl: int = 64
    ):
        self.src, self.dst = src, dst
        self._eth = mac_bytes(dst.mac) + mac_bytes(src.mac) + struct.pack("!H", ETHERTYPE_IPV4)
        self._sip, self._dip = ip_bytes(src.ip), ip_bytes(dst.ip)
        self._ports = (sport, dport)
        self._ttl = ttl
        self._prefixes: dict[int, bytes] = {}
        self._templates: dict[tuple, tuple[np.ndarray, int]] = {}  # (the template, where it starts)

    def template(
        self, op: int, kind: int, job_id: int, worker_id: int, size: int, count: int, lane_bits: int, key: int
    ) -> np.ndarray:
        """frame(op, kind, job_id, worker_id, 0, 0, 0, bytes(size), count, lane_bits, key) as a read-only
        uint8 array, built once: build_rows copies it into every row."""
        return self.template_at(op, kind, job_id, worker_id, size, count, lane_bits, key)[0]

    def template_at(
        self, op: int, kind: int, job_id: int, worker_id: int, size: int, count: int, lane_bits: int, key: int
    ) -> tuple[np.ndarray, int]:
        """template(), and where it starts in memory (it never moves), for a C call."""
        at = (op, kind, job_id, worker_id, size, count, lane_bits, key)
        kept = self._templates.get(at)
        if kept is None:
            if len(self._templates) >= 256:  # many jobs or keys over a run: forget them rather than grow
                self._templates.clear()
            row = np.frombuffer(self.frame(op, kind, job_id, worker_id, 0, 0, 0, bytes(size), count, lane_bits, key),
                                np.uint8)  # fmt: skip
            kept = self._templates[at] = (row, address_of(row))
        return kept

    def prefix(self, payload_len: int) -> bytes:
        """Ethernet + IPv4 + UDP headers for a THC packet with `payload_len` bytes after the THC header."""
        prefix = self._prefixes.get(payload_len)
        if prefix is None:
            udp_len = UDP_LEN + THC_LEN + payload_len
            ip = struct.pack(
                "!BBHHHBBH4s4s", 0x45, 0, IPV4_LEN + udp_len, 0, 0x4000, self._ttl, IPPROTO_UDP, 0, self._sip, self._dip
            )
            ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
            udp = struct.pack("!HHHH", self._ports[0], self._ports[1], udp_len, 0)
            prefix = self._prefixes[payload_len] = self._eth + ip + udp
        return prefix

    def frame(
        self,
        op: int,
        kind: int,
        job_id: int,
        worker_id: int,
        slot: int,
        round_: int,
        value: int = 0,
        payload: bytes = b"",
        count: int = 0,
        lane_bits: int = 0,
        key: int = 0,
    ) -> bytes:
        return (
            self.prefix(len(payload))
            + THC_HEADER.pack(
                THC_VERSION,
                (op << 4) | kind,
                job_id,
                worker_id,
                slot,
                count,
                lane_bits,
                round_ & 0xFFFFFFFF,
                value,
                key,
            )
            + payload
        )


class ThcFrame(NamedTuple):
    """The THC header of a received frame and its payload (without any Ethernet padding)."""

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


def parse_frame(frame: bytes) -> ThcFrame | None:
    """Decode a THC frame; None for anything else (not IPv4/UDP to port 21576, IPv4 options, a fragment,
    truncated)."""
    if len(frame) < PAYLOAD_OFFSET:
        return None
    (
        ethertype,
        ver_ihl,
        total_len,
        frag,
        proto,
        dport,
        version,
        op_kind,
        job_id,
        worker_id,
        slot,
        count,
        lane_bits,
        round_,
        value,
        key,
    ) = _RX.unpack_from(frame)
    if (
        ethertype != ETHERTYPE_IPV4
        or ver_ihl != 0x45
        or proto != IPPROTO_UDP
        or dport != THC_UDP_PORT
        or version != THC_VERSION
        or frag & IPV4_MF_OFFSET_MASK
    ):
        return None
    end = ETH_LEN + total_len
    if end > len(frame) or end < PAYLOAD_OFFSET:
        return None
    return ThcFrame(
        op_kind >> 4,
        op_kind & 0x0F,
        job_id,
        worker_id,
        slot,
        count,
        lane_bits,
        round_,
        value,
        key,
        frame[PAYLOAD_OFFSET:end],
    )


def pack_nibbles(indices: np.ndarray) -> bytes:
    """Two 4-bit indices per byte, the first in the high nibble; an odd count is padded with index 0."""
    idx = np.asarray(indices, dtype=np.uint8)
    if idx.size % 2:
        idx = np.concatenate([idx, np.zeros(1, np.uint8)])
    return ((idx[0::2] << 4) | idx[1::2]).astype(np.uint8).tobytes()


def unpack_nibbles(data: bytes, count: int | None = None) -> np.ndarray:
    """The inverse of pack_nibbles: `count` indices (all of them if None)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    out = np.empty(2 * raw.size, np.uint8)
    out[0::2] = raw >> 4
    out[1::2] = raw & 0x0F
    return out if count is None else out[:count]


def float_bits(value: float) -> int:
    """The IEEE-754 float32 bit pattern of `value`, as the switch compares it."""
    return struct.unpack("!I", struct.pack("!f", value))[0]


def bits_float(bits: int) -> float:
    return struct.unpack("!f", struct.pack("!I", bits))[0]


# ---- many frames at once: rows of a numpy buffer -------------------------------------------------------

# The fields a receiver checks and reads, at their offsets in a frame (all big-endian): a numpy structured
# view over rows of a receive buffer reads one field of every frame with one vectorised operation.
_FIELDS = (
    ("ethertype", ">u2", 12),
    ("ver_ihl", "u1", ETH_LEN),
    ("total_len", ">u2", ETH_LEN + 2),
    ("frag", ">u2", ETH_LEN + 6),
    ("proto", "u1", ETH_LEN + 9),
    ("dport", ">u2", ETH_LEN + IPV4_LEN + 2),
    ("version", "u1", THC_OFFSET),
    ("op_kind", "u1", THC_OFFSET + 1),
    ("job_id", "u1", THC_OFFSET + 2),
    ("worker_id", "u1", THC_OFFSET + 3),
    ("slot", ">u2", THC_OFFSET + 4),
    ("count", "u1", THC_OFFSET + 6),
    ("lane_bits", "u1", THC_OFFSET + 7),
    ("round", ">u4", THC_OFFSET + 8),
    ("value", ">u4", THC_OFFSET + 12),
    ("key", ">u4", THC_OFFSET + 16),
)
_ROW_DTYPES: dict[int, np.dtype] = {}


def row_dtype(stride: int) -> np.dtype:
    """A structured dtype of `stride` bytes with the header fields of a THC frame at their offsets."""
    dtype = _ROW_DTYPES.get(stride)
    if dtype is None:
        if stride < PAYLOAD_OFFSET:
            raise ValueError(f"rows of {stride} bytes cannot hold a THC header ({PAYLOAD_OFFSET} bytes)")
        names, formats, offsets = zip(*_FIELDS)
        dtype = _ROW_DTYPES[stride] = np.dtype(
            {"names": names, "formats": formats, "offsets": offsets, "itemsize": stride}
        )
    return dtype


def header_view(rows: np.ndarray) -> np.ndarray:
    """The header fields of every row of a C-contiguous (n, stride) uint8 array, as a 1-d structured view."""
    return rows.view(row_dtype(rows.shape[1])).reshape(rows.shape[0])


class ResultBatch(NamedTuple):
    """The THC headers of n received frames, one array per field (what parse_frame returns, per frame).

    `valid` is parse_frame's `is not None`; the other fields are meaningful only where `valid`. The payload
    of frame i is rows[i, PAYLOAD_OFFSET : PAYLOAD_OFFSET + payload_len[i]]."""

    valid: np.ndarray
    op: np.ndarray
    kind: np.ndarray
    job_id: np.ndarray
    worker_id: np.ndarray
    slot: np.ndarray
    count: np.ndarray
    lane_bits: np.ndarray
    round: np.ndarray
    value: np.ndarray
    key: np.ndarray
    payload_len: np.ndarray
    rows: np.ndarray


# Bytes every THC frame parse_frame accepts has at fixed offsets: ethertype IPv4, version 4 / IHL 5,
# protocol UDP, destination port 21576, THC version 2.
_FIXED = (
    (12, ETHERTYPE_IPV4 >> 8),
    (13, ETHERTYPE_IPV4 & 0xFF),
    (ETH_LEN, 0x45),
    (ETH_LEN + 9, IPPROTO_UDP),
    (ETH_LEN + IPV4_LEN + 2, THC_UDP_PORT >> 8),
    (ETH_LEN + IPV4_LEN + 3, THC_UDP_PORT & 0xFF),
    (THC_OFFSET, THC_VERSION),
)
_FIXED_AT = np.array([offset for offset, _ in _FIXED], np.intp)
_FIXED_IS = np.array([value for _, value in _FIXED], np.uint8)


def parse_rows(rows: np.ndarray, lengths: np.ndarray) -> ResultBatch:
    """parse_frame for every row at once: `rows` (n, stride) uint8 holds frame i in its first lengths[i]
    bytes (bytes beyond are whatever the buffer held). No Python object per frame."""
    n = rows.shape[0]
    lengths = lengths[:n]
    hdr = np.ascontiguousarray(rows[:, :PAYLOAD_OFFSET])  # one pass over the rows; the rest stays in cache
    end = ETH_LEN + ((hdr[:, ETH_LEN + 2].astype(np.int64) << 8) | hdr[:, ETH_LEN + 3])
    valid = (
        (hdr[:, _FIXED_AT] == _FIXED_IS).all(axis=1)
        & (((hdr[:, ETH_LEN + 6] & (IPV4_MF_OFFSET_MASK >> 8)) | hdr[:, ETH_LEN + 7]) == 0)
        & (lengths >= PAYLOAD_OFFSET)
        & (end <= lengths)
        & (end >= PAYLOAD_OFFSET)
    )
    h = header_view(hdr)
    op_kind = h["op_kind"]
    return ResultBatch(
        valid,
        op_kind >> 4,
        op_kind & 0x0F,
        h["job_id"],
        h["worker_id"],
        h["slot"].astype(np.int64),
        h["count"],
        h["lane_bits"],
        h["round"].astype(np.int64),
        h["value"],
        h["key"],
        end - PAYLOAD_OFFSET,
        rows,
    )


def padding(op: int, kind: int, lane_bits: int) -> int:
    """Zero bytes a request or release carries after its payload, so that its result is at most 512 bytes
    longer than it (simple_switch's headroom; p4/README.md, "Cells"): 16-bit THC requests and THC or FIX32
    releases."""
    if kind == KIND_RELEASE:
        return release_payload_bytes(op)
    return PAD16_BYTES if (op, kind, lane_bits) == (OP_THC, KIND_REQUEST, LANES_16) else 0


def build_rows(
    builder: FrameBuilder,
    op: int,
    kind: int,
    job_id: int,
    worker_id: int,
    slots: np.ndarray,
    rounds: np.ndarray,
    values: np.ndarray | None = None,
    payloads: np.ndarray | None = None,
    count: int = 0,
    lane_bits: int = 0,
    key: int = 0,
) -> np.ndarray:
    """FrameBuilder.frame for n frames at once, as the rows of one (n, length) uint8 array: the prefix and
    the constant header fields copied from one frame, slot, round and value written per row by numpy,
    `payloads` ((n, payload bytes) uint8) after the header, then the padding the kind needs (`padding`).
    Row i equals builder.frame(op, kind, job_id, worker_id, slots[i], rounds[i], values[i], payloads[i] +
    bytes(padding(op, kind, lane_bits)), count, lane_bits, key) byte for byte."""
    n = len(slots)
    carried = 0 if payloads is None else payloads.shape[1]
    size = carried + padding(op, kind, lane_bits)
    template = builder.template(op, kind, job_id, worker_id, size, count, lane_bits, key)
    out = np.empty((n, len(template)), np.uint8)
    out[:] = template
    if n == 1:  # one frame (a norm round): its fields by struct, cheaper than a structured view
        _SLOT.pack_into(out[0], THC_OFFSET + 4, int(slots[0]))
        _ROUND.pack_into(out[0], THC_OFFSET + 8, int(rounds[0]) & 0xFFFFFFFF)
        if values is not None:
            _ROUND.pack_into(out[0], THC_OFFSET + 12, int(values[0]) & 0xFFFFFFFF)
    else:
        h = header_view(out)
        h["slot"] = slots
        h["round"] = np.asarray(rounds, dtype=np.int64) & 0xFFFFFFFF
        if values is not None:
            h["value"] = values
    if carried:
        out[:, PAYLOAD_OFFSET : PAYLOAD_OFFSET + carried] = payloads
    return out


def build_requests(
    builder: FrameBuilder,
    op: int,
    job_id: int,
    worker_id: int,
    q0: int,
    n: int,
    window: int,
    payloads: np.ndarray | None,
    lane_bits: int,
    key: int,
    lib=None,
) -> np.ndarray:
    """The frames of requests q0 .. q0 + n − 1 (slot q mod `window`, round q div `window`), request i
    carrying row i of `payloads` ((n, payload bytes) uint8; None: no payload): build_rows' frames byte for
    byte, built in one C call (fastio.c's thc_build_requests) when `lib`, the native helper, is given (one
    frame too: with the template's address cached the call costs less than build_rows' struct path)."""
    if lib is None or payloads is None or n < 1:
        q = q0 + np.arange(n, dtype=np.int64)
        return build_rows(builder, op, KIND_REQUEST, job_id, worker_id, q % window, q // window, None, payloads,
                          lane_bits=lane_bits, key=key)  # fmt: skip
    carried = payloads.shape[1]
    template, template_address = builder.template_at(
        op, KIND_REQUEST, job_id, worker_id, carried + padding(op, KIND_REQUEST, lane_bits), 0, lane_bits, key
    )
    out = np.empty((n, len(template)), np.uint8)
    if not payloads.flags.c_contiguous:
        payloads = np.ascontiguousarray(payloads)
    built = lib.thc_build_requests(address_of(out), len(template), template_address, q0, window,
                                   address_of(payloads), carried, n)  # fmt: skip
    if built != n:
        raise ValueError(f"cannot build {n} requests of {carried} payload bytes from q0 {q0}, window {window}")
    return out


_SLOT = struct.Struct("!H")  # a header's slot
_ROUND = struct.Struct("!I")  # a header's round (and value)
