"""P4Runtime service of the software switch, in small pieces.

- ``bytestrings``: P4Runtime's integer encoding (accept any width, answer canonical).
- ``errors``: one exception carrying a canonical gRPC code, and the ``google.rpc.Status`` packing.
- ``binding``: the P4Info <-> engine name mapping, checked when a pipeline is verified.
- ``match_action``: a table entry's match and action <-> the engine's keys, action and parameters.
- ``entities``: protobuf entities <-> engine calls (tables, counters, registers, multicast).
- ``extern_entities``: meters and action profiles; ``direct_entries``: a table entry's direct
  counter and meter; ``clone_sessions``, ``value_sets``, ``digests``: the rest of the entities.
- ``replicas``: what multicast groups and clone sessions share.
- ``arbitration``: StreamChannel primary election.
- ``packet_io``: controller packet-in/packet-out headers.
- ``service``: the gRPC servicer tying it together.
"""
