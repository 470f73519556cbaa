"""Moving THC frames between a worker and the wire: a raw AF_PACKET socket for real hosts.

A transport needs `send(frame)`, `recv(timeout) -> list[bytes]` (every frame there, waiting up to `timeout`
for the first; [] on timeout), `close()` and `describe()`. A `BatchTransport` also moves many frames per call
(`send_many(rows)`, `recv_into(buf, lengths, timeout) -> n`); the protocol talks to every transport through
`BatchIO`, which emulates those with send/recv where missing, so there is one code path above it.
RawSocketTransport does one sendmmsg / recvmmsg per batch (host_agent/native/fastio.c, else a Python loop),
and a classic BPF filter drops everything but THC results in the kernel, so Python never sees ARP, IPv6,
other UDP or our own requests. harness/loopback.py has the in-process transport; DatagramTransport takes any
connected datagram socket (no root)."""

from __future__ import annotations

import ctypes
import errno
import select
import socket
import struct
from typing import Protocol

import numpy as np

from host_agent import native, wire

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
SKF_AD_PKTTYPE = 4
SKF_AD_OFF = -0x1000

# Classic BPF opcodes (linux/filter.h).
BPF_LD, BPF_JMP, BPF_RET = 0x00, 0x05, 0x06
BPF_W, BPF_H, BPF_B = 0x00, 0x08, 0x10
BPF_ABS, BPF_K = 0x20, 0x00
BPF_JEQ, BPF_JSET = 0x10, 0x40
ACCEPT_BYTES = 0x40000


class Transport(Protocol):
    def send(self, frame: bytes) -> None: ...

    def recv(self, timeout: float) -> list[bytes]: ...

    def close(self) -> None: ...

    def describe(self) -> str: ...


class BatchTransport(Transport, Protocol):
    def send_many(self, rows: np.ndarray) -> None: ...

    def recv_into(self, buf: np.ndarray, lengths: np.ndarray, timeout: float) -> int: ...


RECV_STRIDE = 2048  # bytes per receive row: a longer frame is cut there (as recv(2048) did); results: <= 1,086


class BatchIO:
    """Batched sending and receiving over any Transport, for the protocol.

    `send(rows)`: every row of a C-contiguous (n, length) uint8 array is one frame. `recv(timeout) -> n`:
    the frames that are there (waiting up to `timeout` s for the first) are in `buf[:n]`, their lengths in
    `lengths[:n]`; valid until the next recv. A transport with send_many / recv_into is called directly;
    for one with only send / recv, frames are sent one by one and received frames copied into the buffer
    (all that recv returned: the buffer grows rather than holding frames back to a later call).
    """

    def __init__(self, transport: Transport, capacity: int = 1024, stride: int = RECV_STRIDE):
        self.transport = transport
        self.batched = callable(getattr(transport, "send_many", None)) and callable(
            getattr(transport, "recv_into", None)
        )
        self.stride = stride
        self.preloaded = 0  # frames already in the buffer for the native take (receive.NativeSorter.wait)
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self.buf = np.zeros((capacity, self.stride), np.uint8)
        self.lengths = np.zeros(capacity, np.int32)
        self.buf_address, self.lengths_address = self.buf.ctypes.data, self.lengths.ctypes.data

    def send(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        if self.batched:
            self.transport.send_many(rows)
            return
        send = self.transport.send
        for row in rows:
            send(row.tobytes())

    def recv(self, timeout: float) -> int:
        if self.batched:
            return self.transport.recv_into(self.buf, self.lengths, timeout)
        frames = self.transport.recv(timeout)
        if len(frames) > len(self.buf):
            self._allocate(len(frames))
        return copy_into(frames, self.buf, self.lengths)


def copy_into(frames, buf: np.ndarray, lengths: np.ndarray) -> int:
    """Copy frames (bytes) into rows of `buf`, cut to its stride, and their lengths into `lengths`."""
    stride = buf.shape[1]
    for i, frame in enumerate(frames):
        n = min(len(frame), stride)
        buf[i, :n] = np.frombuffer(frame, np.uint8, n)
        lengths[i] = n
    return len(frames)


def _assemble(program: list[tuple]) -> list[tuple[int, int, int, int]]:
    """Resolve symbolic jump targets: entries are ("label", name) or (code, k, jt, jf) with jt/jf names."""
    labels, code = {}, []
    for entry in program:
        if entry[0] == "label":
            labels[entry[1]] = len(code)
        else:
            code.append(entry)
    out = []
    for pc, (op, k, jt, jf) in enumerate(code):
        rel = [0 if target is None else labels[target] - pc - 1 for target in (jt, jf)]
        out.append((op, k & 0xFFFFFFFF, rel[0], rel[1]))
    return out


def thc_result_filter(port: int = wire.THC_UDP_PORT) -> list[tuple[int, int, int, int]]:
    """BPF: IPv4 without options, UDP, not a fragment, destination `port`, not sent by this host, THC kind
    other than REQUEST (a result). The same checks as wire.parse_frame makes, done in the kernel."""
    ld_h, ld_b, ld_w = BPF_LD | BPF_H | BPF_ABS, BPF_LD | BPF_B | BPF_ABS, BPF_LD | BPF_W | BPF_ABS
    jeq, jset = BPF_JMP | BPF_JEQ | BPF_K, BPF_JMP | BPF_JSET | BPF_K
    return _assemble(
        [
            (ld_h, 12, None, None),
            (jeq, wire.ETHERTYPE_IPV4, None, "drop"),
            (ld_b, 14, None, None),
            (jeq, 0x45, None, "drop"),
            (ld_b, 23, None, None),
            (jeq, wire.IPPROTO_UDP, None, "drop"),
            (ld_h, 20, None, None),
            (jset, wire.IPV4_MF_OFFSET_MASK, "drop", None),
            (ld_h, 36, None, None),
            (jeq, port, None, "drop"),
            (ld_w, SKF_AD_OFF + SKF_AD_PKTTYPE, None, None),
            (jeq, PACKET_OUTGOING, "drop", None),
            (ld_b, wire.THC_OFFSET + 1, None, None),
            (jset, 0x0F, None, "drop"),
            (BPF_RET | BPF_K, ACCEPT_BYTES, None, None),
            ("label", "drop"),
            (BPF_RET | BPF_K, 0, None, None),
        ]
    )


def drop_all_filter() -> list[tuple[int, int, int, int]]:
    return [(BPF_RET | BPF_K, 0, 0, 0)]


def attach_filter(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    """SO_ATTACH_FILTER with a classic BPF program (struct sock_fprog)."""
    raw = b"".join(struct.pack("HBBI", op, jt, jf, k) for op, k, jt, jf in program)
    buf = ctypes.create_string_buffer(raw)
    fprog = struct.pack("HL", len(program), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


class DatagramTransport:
    """A connected datagram socket whose every frame is the worker's (an AF_UNIX socketpair's end whose
    other end is a switch port): what the port sends to it is what the worker gets, so no filter."""

    def __init__(self, sock: socket.socket, name: str = "datagram socket"):
        self._sock = sock
        self.name = name
        sock.setblocking(False)

    def send(self, frame: bytes) -> None:
        try:
            self._sock.send(frame)
        except OSError as exc:
            if exc.errno in (errno.ENOBUFS, errno.EAGAIN):
                return  # the queue is full: a loss like any other, the timer retransmits
            raise

    def recv(self, timeout: float) -> list[bytes]:
        frames: list[bytes] = []
        if timeout > 0 and not select.select([self._sock], [], [], timeout)[0]:
            return frames
        while True:
            try:
                frames.append(self._sock.recv(65536))
            except BlockingIOError:
                return frames

    def close(self) -> None:
        self._sock.close()

    def describe(self) -> str:
        return self.name


class RawSocketTransport:
    """One AF_PACKET socket on `iface`: prebuilt frames out, filtered THC results in.

    `absorb_udp`: the kernel also sees every result addressed to this host and, with nothing listening on
    UDP port 21576, would answer each with an ICMP port unreachable towards the switch. A UDP socket bound
    to the port with a drop-everything filter silences that (best effort: skipped if the address is not
    configured on this host).
    """

    def __init__(
        self,
        iface: str,
        src_ip: str | None = None,
        rcvbuf: int = 8 << 20,
        sndbuf: int = 4 << 20,
        batch: int = 512,
        absorb_udp: bool = True,
    ):
        self.iface = iface
        self.batch = batch
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        try:
            attach_filter(sock, thc_result_filter())
            try:
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            except OSError:
                pass  # Linux < 4.20: the BPF program's packet-type check does the same
            for opt, size in ((socket.SO_RCVBUF, rcvbuf), (socket.SO_SNDBUF, sndbuf)):
                try:
                    sock.setsockopt(socket.SOL_SOCKET, opt, size)
                except OSError:
                    pass
            sock.bind((iface, ETH_P_IP))
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._fileno = sock.fileno()
        self._absorber = self._open_absorber(src_ip) if absorb_udp and src_ip else None
        self._native = native.load()

    @staticmethod
    def _open_absorber(src_ip: str) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            attach_filter(sock, drop_all_filter())
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.bind((src_ip, wire.THC_UDP_PORT))
        except OSError:
            sock.close()
            return None
        return sock

    def send(self, frame: bytes) -> None:
        try:
            self._sock.send(frame)
        except OSError as exc:
            if exc.errno in (errno.ENOBUFS, errno.EAGAIN):
                return  # the device queue is full: a loss like any other, the timer retransmits
            raise

    def recv(self, timeout: float) -> list[bytes]:
        sock = self._sock
        frames: list[bytes] = []
        try:
            frames.append(sock.recv(2048, socket.MSG_DONTWAIT))
        except BlockingIOError:
            if timeout <= 0 or not select.select([self._fileno], [], [], timeout)[0]:
                return frames
        recv = sock.recv
        while len(frames) < self.batch:
            try:
                frames.append(recv(2048, socket.MSG_DONTWAIT))
            except BlockingIOError:
                break
        return frames

    def send_many(self, rows: np.ndarray) -> None:
        """Every row of a (n, length) uint8 array as one frame: one sendmmsg per 64 frames."""
        rows = np.ascontiguousarray(rows, dtype=np.uint8)
        if rows.ndim != 2:
            raise ValueError(f"send_many takes a (frames, length) array, got shape {rows.shape}")
        if self._native is None:
            for row in rows:
                self.send(row.tobytes())
            return
        n, length = rows.shape
        if n:
            err = self._native.thc_send_rows(self._fileno, rows.ctypes.data, length, length, n)
            if err < 0:
                raise OSError(-err, f"sendmmsg on {self.iface}: {errno.errorcode.get(-err, -err)}")

    def recv_into(self, buf: np.ndarray, lengths: np.ndarray, timeout: float) -> int:
        """Up to len(buf) frames into the rows of `buf` (C-contiguous (capacity, stride) uint8; longer frames
        are cut to the stride) and their lengths into `lengths` (int32), waiting up to `timeout` s for the
        first; the number received (0 on timeout)."""
        if buf.dtype != np.uint8 or buf.ndim != 2 or not buf.flags.c_contiguous:
            raise ValueError("recv_into needs a C-contiguous (capacity, stride) uint8 buffer")
        if lengths.dtype != np.int32 or len(lengths) < len(buf) or not lengths.flags.c_contiguous:
            raise ValueError("recv_into needs a contiguous int32 lengths array as long as the buffer")
        if self._native is None:
            saved, self.batch = self.batch, len(buf)
            try:
                return copy_into(self.recv(timeout), buf, lengths)
            finally:
                self.batch = saved
        got = self._native.thc_recv_rows(
            self._fileno, buf.ctypes.data, buf.shape[1], len(buf), max(0, int(timeout * 1e9)), lengths.ctypes.data
        )
        if got < 0:
            raise OSError(-got, f"recvmmsg on {self.iface}: {errno.errorcode.get(-got, -got)}")
        return got

    def fileno(self) -> int:
        return self._fileno

    def close(self) -> None:
        self._sock.close()
        if self._absorber is not None:
            self._absorber.close()

    def describe(self) -> str:
        return f"raw socket on {self.iface}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
