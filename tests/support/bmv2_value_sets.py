"""Replaces the members of a parse value set in a running BMv2, over its Thrift API.

usage: python3 bmv2_value_sets.py THRIFT_PORT VALUE_SET_NAME [MEMBER_HEX ...]; prints the members BMv2
reads back (bm_parse_vset_get), sorted, in hex.

Runs under the Python of simple_switch_CLI (thrift and BMv2's bm_runtime; tests/support/bmv2.py
starts it), not the project's. Not through the CLI's `pvs_add`: under Python 3 its parse_pvs_value
sizes the value with `(bitwidth + 7) / 8`, a true division, so int_to_bytes pads one byte too many
(0x9000 for a 16-bit set goes as 00 90 00), and simple_switch does not refuse the value but aborts on
`assert(new_v.size() == width)` in ParseVSetCommon::add (parser.cpp), dropping the Thrift
connection. Here each member is sent with exactly the set's width in bytes, which the caller gives.
"""

import sys

from bm_runtime.standard import Standard
from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
from thrift.transport import TSocket, TTransport


def main(argv: list[str]) -> int:
    port, name, members = int(argv[1]), argv[2], [bytes.fromhex(m) for m in argv[3:]]
    transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", port))
    protocol = TMultiplexedProtocol.TMultiplexedProtocol(TBinaryProtocol.TBinaryProtocol(transport), "standard")
    client = Standard.Client(protocol)
    transport.open()
    try:
        client.bm_parse_vset_clear(0, name)
        for member in members:
            client.bm_parse_vset_add(0, name, member)
        print(" ".join(sorted(v.hex() for v in client.bm_parse_vset_get(0, name))))
    finally:
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
