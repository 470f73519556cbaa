"""BMv2 reading and writing pcap files (`--use-files`): the input files as named pipes that get their
frames only once the test has programmed the switch, and the output files read back once BMv2 is done.
For the tests that send frames through simple_switch_grpc without root (tests/emulator/test_engine_bmv2.py,
tests/p4/test_differential_bmv2.py)."""

import os
import struct
import threading
import time

import pytest

PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


def pcap_records(frames):
    """frames: [(sequence number, bytes)]; BMv2 replays all inputs in timestamp order."""
    return b"".join(
        struct.pack("<IIII", 1 + i // 1000, 1000 * (i % 1000), len(frame), len(frame)) + frame for i, frame in frames
    )


class InputFifo:
    """A port's input "pcap file" as a named pipe: BMv2 opens it and reads its header at start-up,
    then waits in its first read until `feed` writes the frames. So the frames reach BMv2 only once
    the test has programmed it, however slowly, and no start delay has to be guessed."""

    def __init__(self, path):
        os.mkfifo(path)
        # read-write, so the open does not wait for BMv2 (a FIFO's write-only open waits for a reader)
        self.fd = os.open(path, os.O_RDWR)
        os.write(self.fd, PCAP_HEADER)
        self.writer = None

    def feed(self, data):
        """Writes the records and closes: BMv2 reads them, then the end of the file."""

        def write_all():
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
            self.close()

        # a thread per port: BMv2 takes one record at a time from each file in timestamp order, so
        # writing one port's frames to the end before the next port's could fill the pipe and wait
        self.writer = threading.Thread(target=write_all, daemon=True)
        self.writer.start()

    def close(self):
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


def read_pcap(path):
    if not path.exists():
        return []
    data = path.read_bytes()
    frames, pos = [], 24
    while pos + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from("<IIII", data, pos)
        if pos + 16 + caplen > len(data):
            break  # a record still being written
        frames.append(data[pos + 16 : pos + 16 + caplen])
        pos += 16 + caplen
    return frames


SETTLE_S = 1.0  # once the expected number is out, frames BMv2 sends beyond it arrive within this
HANG_GUARD_S = 300  # only so that a BMv2 that stops sending cannot hang the run


def collect_output(run_dir, ports, expected_count, switch, until=None):
    """What BMv2 wrote to the output pcaps, once `expected_count` frames are there and no more come
    (or as soon as `until(out)` holds)."""
    deadline = time.monotonic() + HANG_GUARD_S
    out, last_total, last_change = [], -1, time.monotonic()
    while True:
        out = [(p, f) for p in ports for f in read_pcap(run_dir / f"p{p}_out.pcap")]
        now = time.monotonic()
        if until is not None and until(out):
            return sorted(out)
        if len(out) != last_total:
            last_total, last_change = len(out), now
        if len(out) >= expected_count and now - last_change > SETTLE_S:
            return sorted(out)
        if switch.proc.poll() is not None:
            pytest.fail(f"BMv2 exited while processing the frames: {switch.log.read_text()[-2000:]}")
        if now > deadline:
            return sorted(out)  # the comparison shows what is missing
        time.sleep(0.05)
