"""Switch ports on Linux interfaces: AF_PACKET raw sockets driven by one selector loop.

Each `-i PORT@IFACE` becomes a raw socket bound to that interface (all protocols, promiscuous, large
buffers, the kernel's copies of our own transmissions filtered out with PACKET_IGNORE_OUTGOING). One
thread (the CLI's main thread) waits on all of them with epoll, hands every frame to
`engine.process(port, frame)` and sends what comes out. Frames for the CPU port go to the P4Runtime
server as PacketIn; PacketOuts come back through `inject()`, which wakes the loop through a pipe so
that all data-plane work stays on this one thread. Nothing on the per-frame path logs or allocates
beyond the frame itself unless debug logging or capture is on; the engine logs each packet's way
through the pipeline itself (logger "emulator.trace").
"""

import collections
import fcntl
import logging
import os
import selectors
import socket
import struct

from emulator.pacing import Pacer
from emulator.pcap import PortCapture

log = logging.getLogger("emulator.ports")
trace = logging.getLogger("emulator.trace")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20
PACKET_OUTGOING = 4
SOCKET_BUFFER_BYTES = 8 * 1024 * 1024
MAX_FRAME = 65536
BATCH = 64  # frames taken from one socket before looking at the others


class InterfaceError(Exception):
    """A port's interface is missing or cannot be opened."""


def interface_exists(iface: str) -> bool:
    return os.path.exists(f"/sys/class/net/{iface}")


def close_ports(sockets: dict, captures: dict) -> None:
    """Close a port loop's sockets and pcap captures (port -> each) and forget them."""
    for held in (sockets, captures):
        for each in held.values():
            each.close()
        held.clear()


def open_port_socket(iface: str):
    """A non-blocking raw socket on `iface`; returns (socket, kernel filters our own sends)."""
    if not interface_exists(iface):
        raise InterfaceError(f"interface '{iface}' does not exist")
    # Protocol 0 until bound, so no frame of another interface slips in before bind().
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        for option, fallback in (
            (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF),
            (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF),
        ):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
            except OSError:  # not root: the capped variant
                sock.setsockopt(socket.SOL_SOCKET, fallback, SOCKET_BUFFER_BYTES)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            kernel_filters_outgoing = True
        except OSError:
            kernel_filters_outgoing = False
        sock.bind((iface, ETH_P_ALL))
        ifindex = socket.if_nametoindex(iface)
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise InterfaceError(f"interface '{iface}': {exc.strerror or exc}") from None
    return sock, kernel_filters_outgoing


class PortLoop:
    """The data plane: sockets for the ports, the engine in between."""

    def __init__(
        self,
        device,
        ports: dict,
        pcap_dir: str | None = None,
        packet_in=None,
        dump_packet_bytes: int = 0,
        service_ns: int = 0,
    ):
        """`ports` maps port number -> interface name; `packet_in(frame)` receives CPU-port frames;
        `service_ns` > 0 paces the loop to one received frame per service_ns (emulator/pacing.py)."""
        self.device = device
        self.ports = dict(ports)
        self.pcap_dir = pcap_dir
        self.packet_in = packet_in
        self.dump_packet_bytes = dump_packet_bytes
        self.pacer = Pacer(service_ns) if service_ns else None
        self.stats = collections.Counter()
        self._sockets = {}  # port -> socket
        self._captures = {}  # port -> PortCapture
        self._filters_outgoing = {}  # port -> bool
        self._injected = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._running = False
        self._selector = None

    # ------------------------------------------------------------ setup / teardown

    def open(self) -> None:
        """Open every port's socket (InterfaceError names the first interface that fails)."""
        try:
            for port, iface in sorted(self.ports.items()):
                sock, filters = open_port_socket(iface)
                self._sockets[port] = sock
                self._filters_outgoing[port] = filters
                if self.pcap_dir is not None:
                    self._captures[port] = PortCapture(self.pcap_dir, iface)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        close_ports(self._sockets, self._captures)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def open_ports(self) -> tuple[dict, dict]:
        """The open sockets and pcap captures by port (another loop may serve them in turn)."""
        return self._sockets, self._captures

    # ------------------------------------------------------------ control from other threads

    def inject(self, port: int, frame: bytes) -> None:
        """Process `frame` as if received on `port` (PacketOut on the CPU port); thread-safe."""
        self._injected.append((port, frame))
        self._wake()

    def stop(self) -> None:
        """Make run() return; safe from a signal handler or another thread."""
        self._running = False
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (already awake) or closed (shutting down)

    # ------------------------------------------------------------ the loop

    def run(self, idle_flush_seconds: float = 0.1) -> None:
        selector = selectors.DefaultSelector()
        self._selector = selector
        selector.register(self._wake_r, selectors.EVENT_READ, None)
        for port, sock in self._sockets.items():
            selector.register(sock, selectors.EVENT_READ, port)
        self._running = True
        buffer = bytearray(MAX_FRAME)
        view = memoryview(buffer)
        try:
            while self._running:
                events = selector.select(idle_flush_seconds)
                if not events:
                    self._flush_captures()
                    continue
                for key, _ in events:
                    if key.data is None:
                        self._drain_wake_pipe()
                        self._process_injected()
                    else:
                        self._receive(key.data, key.fileobj, buffer, view)
        finally:
            selector.close()
            self._selector = None
            self._flush_captures()

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _process_injected(self) -> None:
        while self._injected:
            port, frame = self._injected.popleft()
            self.stats["injected"] += 1
            self._forward(port, frame)

    def _receive(self, port, sock, buffer, view) -> None:
        """Up to BATCH frames from one port, each processed and sent at once.

        The hot path: everything it touches per frame is a local, counters are summed per batch.
        """
        capture = self._captures.get(port)
        filters_outgoing = self._filters_outgoing[port]
        debug = trace.isEnabledFor(logging.DEBUG)
        dump = self.dump_packet_bytes
        engine = self.device.engine
        cpu_port = self.device.cpu_port
        packet_in = self.packet_in
        sockets = self._sockets
        captures = self._captures
        process = engine.process if engine is not None else None
        pacer = self.pacer
        rx = tx = tx_errors = no_port = engine_errors = to_cpu = 0
        try:
            for _ in range(BATCH if pacer is None else 1):  # paced: one frame at a time
                try:
                    if filters_outgoing:
                        n = sock.recv_into(buffer)
                    else:
                        n, address = sock.recvfrom_into(buffer)
                        if address[2] == PACKET_OUTGOING:
                            continue
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # e.g. the interface went down: count, keep serving the others
                    self.stats["rx_errors"] += 1
                    log.debug("receive on port %d failed: %s", port, exc)
                    break
                frame = bytes(view[:n])
                rx += 1
                if capture is not None:
                    capture.received.write(frame)
                if dump:
                    trace.info("Packet data received on port %d: %s", port, frame[:dump].hex())
                if process is None:
                    continue
                if pacer is not None:
                    pacer.wait()
                try:
                    outputs = process(port, frame)
                except Exception as exc:  # never let one frame stop the switch
                    engine_errors += 1
                    log.warning("engine failed on a frame from port %d: %s: %s", port, type(exc).__name__, exc)
                    continue
                for out_port, out_frame in outputs:
                    out = sockets.get(out_port)
                    if out is None or out_port == cpu_port:
                        if out_port == cpu_port and packet_in is not None:
                            to_cpu += 1
                            if not packet_in(out_frame):
                                self.stats["packet_in_dropped"] += 1
                        else:
                            no_port += 1
                        continue
                    try:
                        out.send(out_frame)
                    except OSError as exc:  # queue full, frame above the MTU, interface down
                        tx_errors += 1
                        if debug:
                            trace.debug("Sending %d bytes out of port %d failed: %s", len(out_frame), out_port, exc)
                        continue
                    tx += 1
                    if captures:
                        out_capture = captures.get(out_port)
                        if out_capture is not None:
                            out_capture.sent.write(out_frame)
                    if dump:
                        trace.info("Packet data sent on port %d: %s", out_port, out_frame[:dump].hex())
        finally:
            stats = self.stats
            stats["rx"] += rx
            stats["tx"] += tx
            if tx_errors:
                stats["tx_errors"] += tx_errors
            if no_port:
                stats["dropped_no_port"] += no_port
            if engine_errors:
                stats["engine_errors"] += engine_errors
            if to_cpu:
                stats["packet_in"] += to_cpu
            if process is None and rx:
                stats["dropped_no_pipeline"] += rx

    def _forward(self, port: int, frame: bytes) -> None:
        engine = self.device.engine
        stats = self.stats
        if engine is None:
            stats["dropped_no_pipeline"] += 1
            return
        try:
            outputs = engine.process(port, frame)
        except Exception as exc:  # never let one frame stop the switch
            stats["engine_errors"] += 1
            log.warning("engine failed on a frame from port %d: %s: %s", port, type(exc).__name__, exc)
            return
        cpu_port = self.device.cpu_port
        for out_port, out_frame in outputs:
            if out_port == cpu_port and self.packet_in is not None:
                stats["packet_in"] += 1
                if not self.packet_in(out_frame):
                    stats["packet_in_dropped"] += 1
                continue
            sock = self._sockets.get(out_port)
            if sock is None:
                stats["dropped_no_port"] += 1
                continue
            try:
                sock.send(out_frame)
            except OSError:  # queue full, frame above the MTU, interface down
                stats["tx_errors"] += 1
                continue
            stats["tx"] += 1
            capture = self._captures.get(out_port)
            if capture is not None:
                capture.sent.write(out_frame)
            if self.dump_packet_bytes:
                trace.info("Packet data sent on port %d: %s", out_port, out_frame[: self.dump_packet_bytes].hex())

    def _flush_captures(self) -> None:
        for capture in self._captures.values():
            capture.flush()
