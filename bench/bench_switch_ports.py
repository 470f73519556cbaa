"""Frames per second through real interfaces: thc-switch (and BMv2 when installed) on veth pairs.

    sudo .venv/bin/python bench/bench_switch_ports.py [--frames 200000] [--size 64] [--sender c] [--out DIR]

Two veth pairs (unique `bp…` names, removed at the end), the switch on one end of each with an IPv4 route
over P4Runtime; one raw socket blasts a frame into pair A and this process counts what arrives on pair B. The
rate is frames received over the time from the first to the last, so with a sender faster than the switch it
is the switch's forwarding rate, and the loss column shows the overrun. --targets: thc-switch, bmv2, and the
ceilings of the I/O alone (`passthrough`: the port loop without parsing; `native`: the C port loop, and
`native-recvmmsg` without its receive ring). Writes DIR/bench_switch_ports.record.json. Figures, never
assertions."""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as `python bench/bench_switch_ports.py`: bench.record

from bench import record as bench_record  # noqa: E402
from harness.shell import route_to_port_2  # noqa: E402
from topologies.targets import find_executable, free_tcp_port  # noqa: E402
from usage import provenance  # noqa: E402
from usage.args import OneLineParser, folder, input_file, int_in, names_in  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "p4", "build")
DST_MAC = bytes.fromhex("080000000202")
SRC_MAC = bytes.fromhex("080000000101")

PASSTHROUGH = """
import sys
from emulator.p4rt.device import Device, Pipeline
from emulator.ports import PortLoop

class Passthrough:  # rewrites the destination MAC as the route does, parses nothing
    program = None
    def process(self, port, frame):
        return [(2 if port == 1 else 1, bytes.fromhex("080000000202") + frame[6:])]

device = Device()
device.pipeline = Pipeline(Passthrough(), None, None, b"")
loop = PortLoop(device, {1: sys.argv[1], 2: sys.argv[2]})
loop.open()
import signal
signal.signal(signal.SIGTERM, lambda *a: loop.stop())
print("thc-switch ready: passthrough, P4Runtime on none,", flush=True)
loop.run()
loop.close()
"""

NATIVE = """
import os, signal, sys
from emulator.native.portloop import NativePortLoop
from emulator.native.stub_switch import StubSwitch, load_stub_library

lib = load_stub_library()
switch = StubSwitch(lib)
switch.route(1, 2, bytes.fromhex("080000000202"))
switch.route(2, 1, bytes.fromhex("080000000202"))
loop = NativePortLoop(lib, switch.handle, {1: sys.argv[1], 2: sys.argv[2]}, rx_ring=sys.argv[3] == "ring")
loop.open()
signal.signal(signal.SIGTERM, lambda *a: loop.stop())
print("thc-switch ready: native, P4Runtime on none,", flush=True)
before = os.times()
loop.run()
loop.close()
# CPU per frame does not depend on what else the machine runs, unlike frames/s on a shared box; sys is
# the kernel's socket and veth work, including delivery to the receiver, which runs in our sendmmsg.
after = os.times()
cpu = (after.user - before.user) + (after.system - before.system)
stats = loop.stats
print(
    f"  native loop: {dict(stats)}, CPU {cpu:.2f}s "
    f"(user {after.user - before.user:.2f}s), {1e6 * cpu / max(stats['rx'], 1):.2f} us/frame",
    file=sys.stderr,
    flush=True,
)
"""


def ipv4_udp_frame(size: int, dst_ip: str = "10.0.2.2") -> bytes:
    """An Ethernet/IPv4/UDP frame of `size` bytes (without FCS) with a valid IPv4 checksum."""
    payload_len = max(size - 14 - 20 - 8, 0)
    ip_total = 20 + 8 + payload_len
    header = bytearray(
        b"\x45\x00"
        + ip_total.to_bytes(2, "big")
        + b"\x00\x01\x00\x00\x40\x11\x00\x00"
        + socket.inet_aton("10.0.1.1")
        + socket.inet_aton(dst_ip)
    )
    checksum = sum(int.from_bytes(header[i : i + 2], "big") for i in range(0, 20, 2))
    checksum = (checksum & 0xFFFF) + (checksum >> 16)
    header[10:12] = (~checksum & 0xFFFF).to_bytes(2, "big")
    udp = (4321).to_bytes(2, "big") + (1234).to_bytes(2, "big") + (8 + payload_len).to_bytes(2, "big") + b"\0\0"
    return b"\xff" * 6 + SRC_MAC + b"\x08\x00" + bytes(header) + udp + b"\xab" * payload_len


class VethPairs:
    """Pairs (A: sender <-> switch port 1), (B: switch port 2 <-> receiver) in the root namespace."""

    def __init__(self):
        tag = uuid.uuid4().hex[:5]
        self.sender, self.port1 = f"bp{tag}a0", f"bp{tag}a1"
        self.port2, self.receiver = f"bp{tag}b1", f"bp{tag}b0"

    def __enter__(self):
        try:
            for a, b in ((self.sender, self.port1), (self.port2, self.receiver)):
                subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
                for iface in (a, b):
                    subprocess.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{iface}.disable_ipv6=1"], capture_output=True)
                    subprocess.run(["ip", "link", "set", iface, "up"], check=True)
        except Exception:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for iface in (self.sender, self.port2):
            subprocess.run(["ip", "link", "del", iface], capture_output=True)


def wait_for_port(address: str, proc, timeout: float = 60.0) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"switch exited with {proc.returncode}")
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answers on {address}")


def start_thc_switch(pairs):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulator",
            "--no-p4",
            "-i",
            f"1@{pairs.port1}",
            "-i",
            f"2@{pairs.port2}",
            "--grpc-server-addr",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    for line in proc.stdout:
        match = re.match(r"thc-switch ready: .* P4Runtime on (\S+),", line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("thc-switch did not start")


def start_passthrough(pairs):
    proc = subprocess.Popen(
        [sys.executable, "-c", PASSTHROUGH, pairs.port1, pairs.port2], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    proc.stdout.readline()
    return proc, None


def start_native(pairs, receive="ring"):
    proc = subprocess.Popen(
        [sys.executable, "-c", NATIVE, pairs.port1, pairs.port2, receive], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    if not proc.stdout.readline():
        proc.wait()
        raise RuntimeError(f"native port loop did not start (exit {proc.returncode})")
    return proc, None


def bmv2_binary():
    return find_executable("bmv2")


def start_bmv2(pairs):
    address = f"127.0.0.1:{free_tcp_port()}"
    proc = subprocess.Popen(
        [
            bmv2_binary(),
            "--no-p4",
            "-i",
            f"1@{pairs.port1}",
            "-i",
            f"2@{pairs.port2}",
            "--",
            "--grpc-server-addr",
            address,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(address, proc)
    return proc, address


def raw_socket(iface: str, blocking: bool) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((iface, 0x0800))
    sock.setblocking(blocking)
    return sock


def blast(pairs, frame: bytes, count: int, idle: float = 1.0):
    """Send `count` frames on A, count arrivals on B; returns (received, seconds first..last arrival)."""
    tx = raw_socket(pairs.sender, True)
    rx = raw_socket(pairs.receiver, False)
    buffer = bytearray(65536)
    received, first, last = 0, None, None

    def drain():
        nonlocal received, first, last
        while True:
            try:
                n = rx.recv_into(buffer)
            except BlockingIOError:
                return
            if n >= 14 and buffer[0:6] == DST_MAC:
                now = time.perf_counter()
                first = first or now
                last = now
                received += 1

    sent = 0
    try:
        while sent < count:
            for _ in range(32):
                try:
                    tx.send(frame)
                    sent += 1
                except OSError:  # ENOBUFS: the qdisc is full; let it drain
                    time.sleep(0.0005)
            drain()
        quiet_since = time.perf_counter()
        while time.perf_counter() - quiet_since < idle:
            before = received
            drain()
            if received != before:
                quiet_since = time.perf_counter()
            else:
                time.sleep(0.001)
    finally:
        tx.close()
        rx.close()
    return received, (last - first) if received > 1 else 0.0


def c_blaster():
    """native_blast.c compiled and loaded (ctypes releases the GIL, so sender and receiver run in parallel)."""
    import ctypes
    from pathlib import Path

    from emulator.native.build import build_native

    lib = ctypes.CDLL(str(build_native([Path(ROOT, "bench", "native_blast.c")], "native_blast")))
    lib.blast_send.restype = ctypes.c_uint64
    lib.blast_send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64]
    lib.blast_receive.restype = ctypes.c_uint64
    pointer = ctypes.POINTER
    lib.blast_receive.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        pointer(ctypes.c_int),
        ctypes.c_int,
        pointer(ctypes.c_uint64),
        pointer(ctypes.c_uint64),
    ]
    return lib


def blast_c(pairs, frame: bytes, count: int, idle: float = 1.0):
    """blast() with the C sender and receiver (sendmmsg/recvmmsg batches); same result."""
    import ctypes
    import threading

    lib = c_blaster()
    tx = raw_socket(pairs.sender, True)
    rx = raw_socket(pairs.receiver, True)
    done = ctypes.c_int(0)
    first, last = ctypes.c_uint64(0), ctypes.c_uint64(0)
    result = {}

    def receive():
        result["received"] = lib.blast_receive(
            rx.fileno(), DST_MAC, ctypes.byref(done), int(idle * 1000), ctypes.byref(first), ctypes.byref(last)
        )

    receiver = threading.Thread(target=receive)
    receiver.start()
    try:
        lib.blast_send(tx.fileno(), frame, len(frame), count)
    finally:
        done.value = 1
        receiver.join()
        tx.close()
        rx.close()
    received = result.get("received", 0)
    return received, (last.value - first.value) / 1e9 if received > 1 else 0.0


def run(name, starter, pairs, args, program, p4info):
    send = blast_c if args.sender == "c" else blast
    proc, address = starter(pairs)
    try:
        if address is not None:
            route_to_port_2(address, p4info, program)
        send(pairs, ipv4_udp_frame(args.size), 2000, idle=0.3)  # warm up
        received, seconds = send(pairs, ipv4_udp_frame(args.size), args.frames)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    rate = (received - 1) / seconds if seconds else 0.0
    print(
        f"{name:12s} {args.frames:9d} {received:9d} {100.0 * (1 - received / args.frames):6.1f}% "
        f"{rate:11.0f} {rate * args.size * 8 / 1e6:8.1f}",
        flush=True,
    )
    return {"target": name, "sent": args.frames, "received": received, "frames_per_s": rate}


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int_in(1), default=200_000, help="frames to send per target")
    parser.add_argument(
        "--size",
        type=int_in(60, 1514, " (an Ethernet frame without FCS)"),
        default=64,
        help="frame size in bytes (without FCS)",
    )
    parser.add_argument("--program", type=input_file, default=os.path.join(FIXTURES, "ipv4_forward.json"))
    parser.add_argument("--p4info", type=input_file, default=os.path.join(FIXTURES, "ipv4_forward.p4info.txtpb"))
    parser.add_argument(
        "--targets",
        default="thc-switch,passthrough,native,bmv2",
        type=names_in(("thc-switch", "passthrough", "native", "native-recvmmsg", "bmv2")),
        help="comma-separated targets to measure (default thc-switch,passthrough,native,bmv2)",
    )
    parser.add_argument(
        "--sender",
        choices=("python", "c"),
        default="python",
        help="traffic source and sink: a Python socket loop, or bench/native_blast.c (sendmmsg/recvmmsg; "
        "needed to load the native loop, which outruns the Python sender)",
    )
    parser.add_argument("--out", type=folder, default=Path(ROOT) / "bench" / "out", help="record folder (bench/out)")
    args = parser.parse_args(argv)
    origin = provenance.started(quick=args.frames < 200_000)
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("bench_switch_ports: needs root and iproute2 (veth pairs)", file=sys.stderr)
        return 2
    starters = {
        "thc-switch": start_thc_switch,
        "passthrough": start_passthrough,
        "native": start_native,
        "native-recvmmsg": lambda pairs: start_native(pairs, "recvmmsg"),
        "bmv2": start_bmv2,
    }
    targets = [t for t in args.targets.split(",") if t]
    print(
        f"IPv4 forwarding through veths, {args.size}-byte frames, program {os.path.relpath(args.program, ROOT)}, "
        f"{args.sender} sender"
    )
    print(f"{'target':12s} {'sent':>9s} {'received':>9s} {'loss':>7s} {'frames/s':>11s} {'Mbit/s':>8s}")
    rows = []
    with VethPairs() as pairs:
        for name in targets:
            if name == "bmv2" and bmv2_binary() is None:
                print(f"{name:12s} skipped: simple_switch_grpc not installed ")
                continue
            rows.append(run(name, starters[name], pairs, args, args.program, args.p4info))
    program = os.path.relpath(args.program, ROOT)
    figures = {"size": args.size, "sender": args.sender, "program": program, "rows": rows}
    bench_record.write(args.out, "bench_switch_ports", origin, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
