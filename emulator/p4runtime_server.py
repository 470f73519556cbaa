"""P4Runtime gRPC server of the software switch (the piece p4runtime-shell talks to).

Usage:
    device = Device(device_id=0, cpu_port=255)
    server = P4RuntimeServer(device, packet_out_sink=ports.inject)
    port = server.start("127.0.0.1:0")     # bound before it returns: ready for clients
    ...
    server.stop()

The servicer and its pieces live in emulator/p4rt/.
"""

from concurrent import futures

import grpc
from p4.v1 import p4runtime_pb2_grpc

from emulator.p4rt.device import Device
from emulator.p4rt.service import DigestPump, P4RuntimeServicer

__all__ = ["Device", "P4RuntimeServer", "BindError"]

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # a BMv2 JSON plus P4Info can be tens of MB


class BindError(RuntimeError):
    """The gRPC address cannot be bound (in use, bad host)."""


class P4RuntimeServer:
    def __init__(self, device: Device, packet_out_sink=None, max_workers: int = 16):
        self.device = device
        self.servicer = P4RuntimeServicer(device, packet_out_sink)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="p4rt"),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.servicer, self._server)
        self.port = None
        self._digests = None

    def start(self, address: str) -> int:
        """Bind `address` (HOST:PORT, port 0 = any free port), start serving, return the port."""
        try:
            port = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise BindError(f"cannot bind gRPC address {address}: {exc}") from None
        if not port:
            raise BindError(f"cannot bind gRPC address {address}")
        self._server.start()
        self._digests = DigestPump(self.device, self.servicer.send_to_primary)
        self.port = port
        return port

    def packet_in(self, frame: bytes) -> bool:
        """Hand a frame sent to the CPU port to the primary controller."""
        return self.servicer.packet_in(frame)

    def stop(self, grace: float = 1.0) -> None:
        if self._digests is not None:
            self._digests.stop()
            self._digests = None
        self._server.stop(grace).wait()
