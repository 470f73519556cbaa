"""Prints every cell of the named registers of a running BMv2, read over its Thrift API, as JSON
({name: [cell, ...]}).

usage: python3 bmv2_registers.py THRIFT_PORT REGISTER_NAME ...

Runs under the Python of simple_switch_CLI (thrift and BMv2's bm_runtime; tests/support/bmv2.py starts
it), not the project's. One bm_register_read_all call per register rather than the CLI's register_read,
whose text output would have to be parsed back.
"""

import json
import sys

from bm_runtime.standard import Standard
from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
from thrift.transport import TSocket, TTransport


def main(argv: list[str]) -> int:
    port, names = int(argv[1]), argv[2:]
    transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", port))
    protocol = TMultiplexedProtocol.TMultiplexedProtocol(TBinaryProtocol.TBinaryProtocol(transport), "standard")
    client = Standard.Client(protocol)
    transport.open()
    try:
        print(json.dumps({name: list(client.bm_register_read_all(0, name)) for name in names}))
    finally:
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
