"""Scapy layers of the THC headers (p4/README.md, "Packet formats"), for crafting and dissection.

Importing this module binds `THC` to UDP port 21576 (source or destination), so `rdpcap(...)` and
`Ether(raw)` dissect THC requests and results, and the THC header picks its payload layer from op, kind
and lane_bits, as the switch's parser does: a THC request's 4-bit indices (`THCIndices`, 8- or 16-bit
lanes), and the cell's words of a result, RESULT_RETX or PARTIAL in the lanes lane_bits names
(`THCResult8`, `THCResult16`, `THCFix32`, which is also a FIX32 request's payload). How many a packet holds
follows from the job and the program's cell size, so a payload layer takes every byte the packet has and
builds what it is given. Scapy is slow (milliseconds per packet): the hot path uses wire.py instead.
"""

from __future__ import annotations

from scapy.fields import (
    BitEnumField,
    ByteEnumField,
    ByteField,
    Field,
    FieldListField,
    IntField,
    ShortField,
    SignedIntField,
    XIntField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_top_down

import contract
from host_agent import wire


class NibbleListField(Field):
    """4-bit values packed two per byte, the first in the high nibble (the contract's thc_idx8 / thc_idx16):
    as many as given (an odd count gets one index 0 more), and on dissection two per byte that is left."""

    islist = 1  # a list value is one field value, not a set of packets to generate

    def __init__(self, name: str, default):
        Field.__init__(self, name, default, fmt="s")

    def any2i(self, pkt, x):
        if x is None:
            return None
        values = [int(v) for v in x]
        if any(not 0 <= v <= 15 for v in values):
            raise ValueError(f"{self.name}: indices are 4 bits, 0..15")
        return values

    def i2m(self, pkt, x):
        return wire.pack_nibbles(x if x is not None else [])

    def m2i(self, pkt, x):
        return [int(v) for v in wire.unpack_nibbles(x)]

    def addfield(self, pkt, s, val):
        return s + self.i2m(pkt, val)

    def getfield(self, pkt, s):
        return b"", self.m2i(pkt, s)

    def i2len(self, pkt, x):
        return (len(x or []) + 1) // 2

    def randval(self):
        from scapy.volatile import RandNum

        return [RandNum(0, 15) for _ in range(len(self.default or []))]


def _lanes(name: str, field: Field, lane_bits: int) -> FieldListField:
    """Every lane the packet has (up to any frame's size: Scapy's default stops at 100); by default the zeros
    of the default build's cell."""
    return FieldListField(name, [0] * contract.per_request(lane_bits), field, max_count=1 << 16)


class THC(Packet):
    """The 20-byte THC header."""

    name = "THC"
    fields_desc = [
        ByteField("version", wire.THC_VERSION),
        BitEnumField("op", wire.OP_THC, 4, wire.OP_NAMES),
        BitEnumField("kind", wire.KIND_REQUEST, 4, wire.KIND_NAMES),
        ByteField("job_id", 0),
        ByteField("worker_id", 0),
        ShortField("slot", 0),
        ByteField("count", 0),
        ByteEnumField("lane_bits", 0, {0: "none", 8: "8-bit", 16: "16-bit", 32: "32-bit"}),
        IntField("round", 0),
        XIntField("value", 0),
        XIntField("key", 0),
    ]

    def guess_payload_class(self, payload):
        lanes = {wire.LANES_8: THCResult8, wire.LANES_16: THCResult16, wire.LANES_INT32: THCFix32}
        if (
            self.op == wire.OP_NORM
            and self.lane_bits == wire.LANES_INT32
            and self.kind not in (wire.KIND_RELEASE, wire.KIND_QUERY, wire.KIND_STATUS)
        ):
            return THCNorms
        if self.kind == wire.KIND_REQUEST:
            if self.op == wire.OP_THC and self.lane_bits in (wire.LANES_8, wire.LANES_16):
                return THCIndices
            if self.op == wire.OP_FIX32 and self.lane_bits == wire.LANES_INT32:
                return THCFix32
        elif self.kind in (wire.KIND_RESULT, wire.KIND_RESULT_RETX, wire.KIND_PARTIAL):
            if self.op in (wire.OP_THC, wire.OP_FIX32) and self.lane_bits in lanes:
                return lanes[self.lane_bits]
        return Packet.guess_payload_class(self, payload)

    def mysummary(self):
        return self.sprintf(
            "THC %op% %kind% job=%job_id% worker=%worker_id% slot=%slot% round=%round% lanes=%lane_bits%"
        )


class THCIndices(Packet):
    """THC request payload: one 4-bit table index per coordinate, two per byte (1,024 with 8-bit lanes and
    512 with 16-bit lanes in the default build)."""

    name = "THC indices"
    fields_desc = [NibbleListField("idx", [0] * contract.per_request(wire.LANES_8))]


class THCResult8(Packet):
    """THC result payload with 8-bit lanes: one sum per coordinate."""

    name = "THC result (8-bit lanes)"
    fields_desc = [_lanes("sums", ByteField("sum", 0), wire.LANES_8)]


class THCResult16(Packet):
    """THC result payload with 16-bit lanes: one sum per coordinate."""

    name = "THC result (16-bit lanes)"
    fields_desc = [_lanes("sums", ShortField("sum", 0), wire.LANES_16)]


class THCFix32(Packet):
    """FIX32 request or result payload: two's-complement int32 values, two per word (sums wrap)."""

    name = "THC FIX32"
    fields_desc = [_lanes("values", SignedIntField("value", 0), wire.LANES_INT32)]


class THCNorms(Packet):
    """NORM request, result or partial payload: NORMS_PER_REQUEST float32 bit patterns of non-negative norms
    (a result's: the maxima), two per 64-bit word, the first in the high bits; unused lanes 0."""

    name = "THC norms"
    fields_desc = [
        FieldListField(
            "norms", [0] * wire.NORMS_PER_REQUEST, XIntField("norm", 0), count_from=lambda _: wire.NORMS_PER_REQUEST
        )
    ]


for _payload in (THCIndices, THCResult8, THCResult16, THCFix32, THCNorms):
    _payload.extract_padding = lambda self, s: (b"", s)

# Dissect on either port (requests and results both use 21576); build with both ports set.
bind_bottom_up(UDP, THC, dport=wire.THC_UDP_PORT)
bind_bottom_up(UDP, THC, sport=wire.THC_UDP_PORT)
bind_top_down(UDP, THC, sport=wire.THC_UDP_PORT, dport=wire.THC_UDP_PORT)

__all__ = ["THC", "THCIndices", "THCResult8", "THCResult16", "THCFix32", "THCNorms", "NibbleListField"]
