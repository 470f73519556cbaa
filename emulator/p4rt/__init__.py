"""P4Runtime service of the software switch, in small pieces.

- ``bytestrings``: P4Runtime's integer encoding (accept any width, answer canonical).
- ``errors``: one exception carrying a canonical gRPC code, and the ``google.rpc.Status`` packing.
- ``binding``: the P4Info <-> engine name mapping, checked when a pipeline is verified.
- ``entities``: protobuf entities <-> engine calls (tables, counters, registers, multicast).
- ``arbitration``: StreamChannel primary election.
- ``packet_io``: controller packet-in/packet-out headers.
- ``service``: the gRPC servicer tying it together.
"""
