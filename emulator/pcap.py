"""Per-port pcap capture, named as BMv2's --pcap names it: `<dir>/<iface>_in.pcap` for frames received
on an interface and `<dir>/<iface>_out.pcap` for frames sent on it.

Classic libpcap format (microsecond timestamps, Ethernet link type), written through a buffer that the
port loop flushes whenever it goes idle and on shutdown, so a capture costs one small write per frame
on the hot path and no system call.
"""

import os
import struct
import time

_GLOBAL_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)  # LINKTYPE_ETHERNET
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    def __init__(self, path: str):
        self.path = path
        self._file = open(path, "wb", buffering=1 << 16)
        self._file.write(_GLOBAL_HEADER)

    def write(self, frame: bytes, timestamp: float | None = None) -> None:
        ts = time.time() if timestamp is None else timestamp
        seconds = int(ts)
        length = len(frame)
        self._file.write(_RECORD.pack(seconds, int((ts - seconds) * 1e6), min(length, 65535), length))
        self._file.write(frame[:65535])

    def flush(self) -> None:
        self._file.flush()

    def fileno(self) -> int:
        """The file's descriptor, everything buffered written out: the native port loop appends records there."""
        self._file.flush()
        return self._file.fileno()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class PortCapture:
    """The in/out pair of one interface."""

    def __init__(self, directory: str, iface: str):
        self.received = PcapWriter(os.path.join(directory, f"{iface}_in.pcap"))
        self.sent = PcapWriter(os.path.join(directory, f"{iface}_out.pcap"))

    def flush(self) -> None:
        self.received.flush()
        self.sent.flush()

    def close(self) -> None:
        self.received.close()
        self.sent.close()
