"""The native port loop: PortLoop's job (emulator/ports.py) done by C, with no Python per packet.

portloop.c is compiled into the same shared object as a switch library (sw_api.h), so its loop calls
sw_process() directly; this class keeps PortLoop's surface (open/close/run/stop/inject, `stats`,
`packet_in`) so the CLI can pick either (emulator/README.md, "Native port loop").

Set `packet_in` before open(): that is when the ports, captures and receive rings go to the C loop, and
frames arriving after open() wait there for run(). Sockets and pcap files come from the same code as
PortLoop's, so captures are identical in name and format. run() starts the C loop on a thread of its own
(ctypes releases the GIL) and hands PacketIn frames to `packet_in(frame)` on the calling thread. There is
no per-packet log (the CLI runs the Python PortLoop when tracing is wanted), and the switch handle is
fixed for the loop's life: a pipeline swap stops the loop first.
"""

import collections
import ctypes
import logging
import os
import select
import threading

from emulator.native.build import NATIVE_DIR
from emulator.pcap import PortCapture
from emulator.ports import close_ports, open_port_socket

log = logging.getLogger("emulator.ports")

PORTLOOP_C = NATIVE_DIR / "portloop.c"
MAX_FRAME = 65536  # PORTLOOP_MAX_FRAME
BATCH = 64


class PortSpec(ctypes.Structure):
    _fields_ = [
        ("port", ctypes.c_uint32),
        ("fd", ctypes.c_int32),
        ("pcap_in_fd", ctypes.c_int32),
        ("pcap_out_fd", ctypes.c_int32),
        ("rx_ring_max_frame", ctypes.c_uint32),
    ]


class LoopConfig(ctypes.Structure):
    _fields_ = [
        ("n_ports", ctypes.c_uint32),
        ("ports", ctypes.POINTER(PortSpec)),
        ("cpu_port", ctypes.c_uint32),
        ("has_cpu_port", ctypes.c_int32),
        ("deliver_packet_in", ctypes.c_int32),
        ("batch", ctypes.c_uint32),
        ("idle_flush_ms", ctypes.c_int32),
        ("service_ns", ctypes.c_uint64),
    ]


STAT_NAMES = (
    "rx",
    "tx",
    "tx_errors",
    "rx_errors",
    "rx_truncated",
    "dropped_no_port",
    "packet_in",
    "packet_in_dropped",
    "injected",
    "inject_dropped",
    "batches",
    "pcap_errors",
    "rx_too_long",
    "rx_rings",
)


class LoopStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in STAT_NAMES]


def declare_portloop_api(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Give the port loop's functions in `lib` their C signatures (ctypes would guess int for all)."""
    handle, sw = ctypes.c_void_p, ctypes.c_void_p
    for name, restype, argtypes in (
        ("sw_portloop_create", handle, []),
        ("sw_portloop_destroy", None, [handle]),
        ("sw_portloop_open", ctypes.c_int, [handle, sw, ctypes.POINTER(LoopConfig)]),
        ("sw_portloop_run", ctypes.c_int, [handle]),
        ("sw_portloop_stop", None, [handle]),
        ("sw_portloop_inject", ctypes.c_int, [handle, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32]),
        ("sw_portloop_packet_in_fd", ctypes.c_int, [handle]),
        ("sw_portloop_take_packet_in", ctypes.c_int64, [handle, ctypes.c_void_p, ctypes.c_uint32]),
        ("sw_portloop_stats", None, [handle, ctypes.POINTER(LoopStats)]),
        ("sw_create", sw, []),
        ("sw_destroy", None, [sw]),
    ):
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


def link_frame_bytes(iface: str) -> int:
    """The longest frame `iface` receives: MTU plus Ethernet header and one VLAN tag."""
    try:
        with open(f"/sys/class/net/{iface}/mtu") as f:
            return int(f.read()) + 18
    except (OSError, ValueError):
        return 1518


class NativePortLoop:
    """PortLoop's surface over the C loop; `switch` is the sw_t* (an int) the loop drives."""

    def __init__(
        self,
        library,
        switch,
        ports: dict,
        cpu_port: int | None = None,
        pcap_dir=None,
        packet_in=None,
        rx_ring: bool = True,
        service_ns: int = 0,
    ):
        """`ports` maps port number -> interface name; `packet_in(frame)` receives CPU-port frames.

        `rx_ring=False` receives with recvmmsg instead of a TPACKET_V2 ring (see portloop.c).
        `service_ns` > 0 paces the loop: one received frame per service_ns at most (emulator/pacing.py).
        """
        self.lib = declare_portloop_api(library)
        self.switch = switch
        self.ports = dict(ports)
        self.cpu_port = cpu_port
        self.pcap_dir = pcap_dir
        self.packet_in = packet_in
        self.rx_ring = rx_ring
        self.service_ns = service_ns
        self.batch = BATCH
        self._sockets = {}  # port -> socket
        self._captures = {}  # port -> PortCapture
        self._ring_frames = {}  # port -> largest frame its receive ring holds
        self._callback_rejected = 0
        self._handle_lock = threading.Lock()  # inject()/stop() from other threads never race destroy()
        self._handle = self.lib.sw_portloop_create()
        if not self._handle:
            raise OSError(ctypes.get_errno(), "sw_portloop_create failed")
        self._final_stats = None
        self._handed_over = False  # sw_portloop_open() has the ports
        self._running = False

    # ------------------------------------------------------------ setup / teardown

    def open(self) -> None:
        """Open every port's socket (InterfaceError names the first interface that fails)."""
        try:
            for port, iface in sorted(self.ports.items()):
                ring_frame = link_frame_bytes(iface) if self.rx_ring else 0
                self.attach(port, open_port_socket(iface)[0], iface, ring_frame)
            self._hand_over()
        except Exception:
            self.close()
            raise

    def attach(self, port: int, sock, capture_name: str | None = None, ring_frame: int = 0) -> None:
        """Serve `port` on an already open datagram socket (open() uses AF_PACKET ones); `ring_frame` > 0
        asks for a receive ring with slots for frames that long. Only before open() or run()."""
        if self._handed_over:
            raise RuntimeError("attach() after the ports went to the C loop")
        self._sockets[port] = sock
        self._ring_frames[port] = ring_frame
        if self.pcap_dir is not None and capture_name is not None:
            self._captures[port] = PortCapture(self.pcap_dir, capture_name)

    def adopt_captures(self, captures: dict) -> None:
        """Write pcap files another loop opened (they stay that loop's to close). Before run()."""
        if self._handed_over:
            raise RuntimeError("adopt_captures() after the ports went to the C loop")
        self._captures.update(captures)

    def release(self) -> None:
        """Forget the sockets and captures, so close() leaves them open for another loop."""
        self._sockets.clear()
        self._captures.clear()

    def close(self) -> None:
        if self._running:
            raise RuntimeError("close() while run() is serving; stop() and let run() return first")
        with self._handle_lock:  # first: it flushes the captures and takes the rings off the sockets
            if self._handle:
                self._final_stats = self._read_stats()
                self.lib.sw_portloop_destroy(self._handle)
                self._handle = None
        close_ports(self._sockets, self._captures)

    # ------------------------------------------------------------ control from other threads

    def inject(self, port: int, frame: bytes) -> None:
        """Process `frame` as if received on `port` (PacketOut on the CPU port); thread-safe.

        A frame the loop cannot take (queue of 4096 full, longer than 64 KiB) counts as inject_dropped.
        """
        with self._handle_lock:
            if self._handle:
                self.lib.sw_portloop_inject(self._handle, port, frame, len(frame))

    def stop(self) -> None:
        """Make run() return; safe from a signal handler or another thread, also before run()."""
        # no _handle_lock: a signal handler interrupting close() on the same thread would deadlock
        if self._handle:
            self.lib.sw_portloop_stop(self._handle)

    # ------------------------------------------------------------ counters

    @property
    def stats(self) -> collections.Counter:
        """PortLoop's counter names (rx, tx, tx_errors, dropped_no_port, packet_in...), zeros left out."""
        raw = self._read_stats() if self._handle else (self._final_stats or {})
        counts = collections.Counter({name: value for name, value in raw.items() if value})
        counts["packet_in_dropped"] += self._callback_rejected
        return +counts

    def _read_stats(self) -> dict:
        stats = LoopStats()
        self.lib.sw_portloop_stats(self._handle, ctypes.byref(stats))
        return {name: getattr(stats, name) for name in STAT_NAMES}

    # ------------------------------------------------------------ the loop

    def _hand_over(self) -> None:
        """Give the ports to the C loop (sw_portloop_open): rings are set up now, so frames that arrive
        between open() and run() wait in them as they would in a socket's queue."""
        specs = (PortSpec * max(len(self._sockets), 1))()
        for spec, (port, sock) in zip(specs, sorted(self._sockets.items())):
            capture = self._captures.get(port)
            spec.port = port
            spec.fd = sock.fileno()
            spec.pcap_in_fd = capture.received.fileno() if capture else -1
            spec.pcap_out_fd = capture.sent.fileno() if capture else -1
            spec.rx_ring_max_frame = self._ring_frames.get(port, 0)
        config = LoopConfig(
            n_ports=len(self._sockets),
            ports=specs,
            cpu_port=self.cpu_port if self.cpu_port is not None else 0,
            has_cpu_port=int(self.cpu_port is not None),
            deliver_packet_in=int(self.packet_in is not None),
            batch=self.batch,
            idle_flush_ms=100,
            service_ns=self.service_ns,
        )
        if self.lib.sw_portloop_open(self._handle, self.switch, ctypes.byref(config)) != 0:
            raise OSError(ctypes.get_errno(), "sw_portloop_open failed")
        self._handed_over = True

    def run(self) -> None:
        """Serve until stop(): the C loop on its own thread, PacketIn delivery on this one."""
        if not self._handed_over:
            self._hand_over()
        outcome = {}

        ended_r, ended_w = os.pipe()

        def serve():
            try:
                outcome["result"] = self.lib.sw_portloop_run(self._handle)
                outcome["errno"] = ctypes.get_errno()
            finally:
                os.write(ended_w, b"\0")  # wakes the poll below at once: the caller may start the next loop

        wake_fd = self.lib.sw_portloop_packet_in_fd(self._handle)
        poller = select.poll()
        poller.register(wake_fd, select.POLLIN)
        poller.register(ended_r, select.POLLIN)
        buffer = ctypes.create_string_buffer(MAX_FRAME)
        self._running = True
        loop_thread = threading.Thread(target=serve, name="native-portloop", daemon=True)
        loop_thread.start()
        try:
            while loop_thread.is_alive():
                poller.poll(1000)  # woken by PacketIns and by the loop's end; a signal runs its handler
                try:
                    os.read(wake_fd, 8)
                except BlockingIOError:
                    pass
                buffer = self._deliver_packet_ins(buffer)
        except BaseException:  # e.g. KeyboardInterrupt: the C loop must not outlive run()
            self.stop()
            raise
        finally:
            loop_thread.join()
            self._running = False
            os.close(ended_r)
            os.close(ended_w)
        self._deliver_packet_ins(buffer)
        if outcome.get("result", 0) != 0:
            raise OSError(outcome.get("errno", 0), "native port loop failed to start")

    def _deliver_packet_ins(self, buffer):
        take = self.lib.sw_portloop_take_packet_in
        while True:
            length = take(self._handle, buffer, len(buffer))
            if length < 0:
                return buffer
            if length > len(buffer):
                buffer = ctypes.create_string_buffer(length)
                continue
            frame = buffer.raw[:length]
            callback = self.packet_in
            if callback is None or not callback(frame):
                self._callback_rejected += 1
