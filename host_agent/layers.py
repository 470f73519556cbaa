"""Scapy layers of the THC headers (p4/README.md, "Packet formats"), for crafting and dissection.

Importing this module binds `THC` to UDP port 21576 (source or destination), so `rdpcap(...)` and
`Ether(raw)` dissect THC requests and results, and the THC header picks its payload layer from op, kind
and lane_bits. Scapy is slow (milliseconds per packet): the hot path uses wire.py instead.
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

from host_agent import wire


class NibbleListField(Field):
    """`count` 4-bit values packed two per byte, the first in the high nibble (the contract's thc_idx)."""

    __slots__ = ["count"]
    islist = 1  # a list value is one field value, not a set of packets to generate

    def __init__(self, name: str, default, count: int):
        if count % 2:
            raise ValueError("nibbles come in pairs")
        self.count = count
        Field.__init__(self, name, default, fmt=f"{count // 2}s")

    def any2i(self, pkt, x):
        if x is None:
            return None
        values = [int(v) for v in x]
        if len(values) > self.count or any(not 0 <= v <= 15 for v in values):
            raise ValueError(f"{self.name}: at most {self.count} values in 0..15")
        return values + [0] * (self.count - len(values))

    def i2m(self, pkt, x):
        return wire.pack_nibbles(x if x is not None else [0] * self.count)

    def m2i(self, pkt, x):
        return [int(v) for v in wire.unpack_nibbles(x, self.count)]

    def addfield(self, pkt, s, val):
        return s + self.i2m(pkt, val)

    def getfield(self, pkt, s):
        size = self.count // 2
        return s[size:], self.m2i(pkt, s[:size])

    def i2len(self, pkt, x):
        return self.count // 2

    def randval(self):
        from scapy.volatile import RandNum

        return [RandNum(0, 15) for _ in range(self.count)]


def _fixed_list(name: str, field: Field, count: int) -> FieldListField:
    return FieldListField(name, [0] * count, field, count_from=lambda pkt: count)


class THC(Packet):
    """The 16-byte THC header."""

    name = "THC"
    fields_desc = [
        ByteField("version", wire.THC_VERSION),
        BitEnumField("op", wire.OP_THC, 4, wire.OP_NAMES),
        BitEnumField("kind", wire.KIND_REQUEST, 4, wire.KIND_NAMES),
        ByteField("job_id", 0),
        ByteField("worker_id", 0),
        ShortField("slot", 0),
        ByteField("count", 0),
        ByteEnumField("lane_bits", 0, {0: "none", 8: "8-bit", 16: "16-bit", 32: "int32"}),
        IntField("round", 0),
        XIntField("value", 0),
    ]

    def guess_payload_class(self, payload):
        if self.kind == wire.KIND_RELEASE:
            return Packet.guess_payload_class(self, payload)
        if self.op == wire.OP_THC:
            if self.kind == wire.KIND_REQUEST:
                return THCIndices
            if self.lane_bits == 8:
                return THCResult8
            if self.lane_bits == 16:
                return THCResult16
        elif self.op == wire.OP_FIX32:
            return THCFix32
        return Packet.guess_payload_class(self, payload)

    def mysummary(self):
        return self.sprintf("THC %op% %kind% job=%job_id% worker=%worker_id% slot=%slot% round=%round%")


class THCIndices(Packet):
    """THC request payload: K = 64 table indices, two per byte."""

    name = "THC indices"
    fields_desc = [NibbleListField("idx", None, wire.COORDS_PER_PACKET)]


class THCResult8(Packet):
    """THC result payload with 8-bit lanes: one sum per coordinate."""

    name = "THC result (8-bit lanes)"
    fields_desc = [_fixed_list("sums", ByteField("sum", 0), wire.COORDS_PER_PACKET)]


class THCResult16(Packet):
    """THC result payload with 16-bit lanes: one sum per coordinate."""

    name = "THC result (16-bit lanes)"
    fields_desc = [_fixed_list("sums", ShortField("sum", 0), wire.COORDS_PER_PACKET)]


class THCFix32(Packet):
    """FIX32 request or result payload: 32 two's-complement int32 values (sums wrap)."""

    name = "THC FIX32"
    fields_desc = [_fixed_list("values", SignedIntField("value", 0), wire.FIX32_PER_PACKET)]


for _payload in (THCIndices, THCResult8, THCResult16, THCFix32):
    _payload.extract_padding = lambda self, s: (b"", s)

# Dissect on either port (requests and results both use 21576); build with both ports set.
bind_bottom_up(UDP, THC, dport=wire.THC_UDP_PORT)
bind_bottom_up(UDP, THC, sport=wire.THC_UDP_PORT)
bind_top_down(UDP, THC, sport=wire.THC_UDP_PORT, dport=wire.THC_UDP_PORT)

__all__ = ["THC", "THCIndices", "THCResult8", "THCResult16", "THCFix32", "NibbleListField"]
