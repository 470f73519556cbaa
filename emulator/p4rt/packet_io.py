"""Controller packet headers (`@controller_header("packet_in"/"packet_out")`).

As BMv2's PI server does: a frame the program sends to the CPU port starts with the packet_in header,
whose fields are bit-packed in P4Info order and padded to whole bytes; the server lifts them into
`PacketIn.metadata` and passes the rest as payload. A PacketOut is turned back into such a header
followed by the payload and injected on the CPU port. Without a controller header in the P4Info the
frame passes unchanged.
"""

from p4.v1 import p4runtime_pb2

from emulator.p4rt import bytestrings
from emulator.p4rt.errors import INVALID_ARGUMENT, P4RTError


def _header_bytes(fields) -> int:
    return (sum(f.bitwidth for f in fields) + 7) // 8


def packet_in_from_frame(fields, frame: bytes):
    """A PacketIn for a frame sent to the CPU port, or None when it is shorter than the header."""
    nbytes = _header_bytes(fields)
    if len(frame) < nbytes:
        return None
    msg = p4runtime_pb2.PacketIn(payload=frame[nbytes:])
    if fields:
        header = int.from_bytes(frame[:nbytes], "big")
        shift = nbytes * 8
        for f in fields:
            shift -= f.bitwidth
            value = (header >> shift) & ((1 << f.bitwidth) - 1)
            msg.metadata.add(metadata_id=f.id, value=bytestrings.encode(value))
    return msg


def frame_from_packet_out(fields, packet_out) -> bytes:
    """The frame to inject on the CPU port for a PacketOut; missing metadata fields are zero."""
    if not fields:
        return bytes(packet_out.payload)
    by_id = {f.id: f for f in fields}
    values = {}
    for md in packet_out.metadata:
        f = by_id.get(md.metadata_id)
        if f is None:
            raise P4RTError(INVALID_ARGUMENT, f"PacketOut: unknown metadata id {md.metadata_id}")
        values[f.id] = bytestrings.decode(md.value, f.bitwidth, f"PacketOut metadata '{f.name}'")
    nbytes = _header_bytes(fields)
    header = 0
    for f in fields:
        header = (header << f.bitwidth) | values.get(f.id, 0)
    header <<= nbytes * 8 - sum(f.bitwidth for f in fields)
    return header.to_bytes(nbytes, "big") + bytes(packet_out.payload)
