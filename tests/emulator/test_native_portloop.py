"""The native port loop (emulator/native/portloop.c) driven through NativePortLoop with the stub switch.

The C loop works on any datagram socket, so most tests run without root on AF_UNIX socketpairs: that
is where zero-length and over-64-KiB frames can be sent at all. The veth tests (`mininet` marker, as
in test_ports) check the real AF_PACKET path with the shared VethLab. Every test needs a C compiler
(skipped without one; a compile error fails them); the sanitizer build is `slow`.
"""

import os
import re
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from emulator.native.portloop import NativePortLoop
from emulator.native.stub_switch import StubSwitch, load_stub_library, stub_library_path
from emulator.ports import InterfaceError
from native_build import SANITIZER_FLAGS
from tests.support.native import build_or_skip
from tests.support.port_loops import PacketIns, serving
from tests.support.sanitizers import require_libasan
from tests.support.veths import VethLab, make_frame, needs_netns, read_pcap, receive_marked

CPU_PORT = 64
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def lib():
    """The stub library; THC_NATIVE_SANITIZE (set by the sanitizer test for its child) adds flags."""
    return build_or_skip(load_stub_library, os.environ.get("THC_NATIVE_SANITIZE", "").split())


@pytest.fixture
def switch(lib):
    sw = StubSwitch(lib)
    yield sw
    sw.close()


class SocketPorts:
    """Switch ports on AF_UNIX datagram socketpairs: `outside[port]` is the host's end."""

    def __init__(self, loop: NativePortLoop, ports, capture_names=None):
        self.outside = {}
        for port in ports:
            host, switch_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            for sock in (host, switch_end):
                for forced, capped in ((SO_SNDBUFFORCE, socket.SO_SNDBUF), (SO_RCVBUFFORCE, socket.SO_RCVBUF)):
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, forced, 4 << 20)
                    except OSError:  # not root: as much as net.core.wmem_max allows
                        sock.setsockopt(socket.SOL_SOCKET, capped, 4 << 20)
            host.settimeout(10)
            self.outside[port] = host
            loop.attach(port, switch_end, (capture_names or {}).get(port))

    def close(self):
        for sock in self.outside.values():
            sock.close()

    def send_buffer(self, port: int) -> int:
        return self.outside[port].getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


# ------------------------------------------------------------------ socketpairs (no root)


def test_frames_are_forwarded_and_zero_length_and_oversize_frames_do_not_stop_the_loop(lib, switch):
    switch.route(1, 2)
    loop = NativePortLoop(lib, switch.handle, {})
    ports = SocketPorts(loop, (1, 2))
    h1, h2 = ports.outside[1], ports.outside[2]
    try:
        with serving(loop):
            h1.send(b"")
            assert h2.recv(1 << 20) == b""
            h1.send(b"A" * 100_000)  # more than any AF_PACKET frame: processed truncated to 64 KiB
            assert h2.recv(1 << 20) == b"A" * 65536
            for i in range(200):
                h1.send(make_frame(b"frame%d" % i))
            assert [h2.recv(1 << 20) for _ in range(200)] == [make_frame(b"frame%d" % i) for i in range(200)]
        stats = loop.stats
    finally:
        ports.close()
    assert (stats["rx"], stats["tx"], stats["rx_truncated"]) == (202, 202, 1)
    assert stats["batches"] >= 1 and switch.processed == 202


def test_injected_frames_of_every_size_are_processed_as_received_on_their_port(lib, switch):
    switch.route(CPU_PORT, 2, dst_mac=b"\x02\x00\x00\x00\x00\x09")
    loop = NativePortLoop(lib, switch.handle, {}, cpu_port=CPU_PORT)
    ports = SocketPorts(loop, (1, 2))
    h2 = ports.outside[2]
    try:
        loop.inject(CPU_PORT, make_frame(b"before-run"))  # queued until the loop starts
        with serving(loop):
            assert h2.recv(1 << 20) == b"\x02\x00\x00\x00\x00\x09" + make_frame(b"before-run")[6:]
            loop.inject(CPU_PORT, b"")
            assert h2.recv(1 << 20) == b""
            loop.inject(CPU_PORT, b"\x01\x02\x03")  # shorter than a MAC: forwarded untouched
            assert h2.recv(1 << 20) == b"\x01\x02\x03"
            loop.inject(CPU_PORT, b"B" * 65537)  # longer than any frame: refused, counted
            loop.inject(CPU_PORT, b"C" * 65536)
            assert h2.recv(1 << 20) == b"\x02\x00\x00\x00\x00\x09" + b"C" * 65530
        stats = loop.stats
    finally:
        ports.close()
    assert (stats["injected"], stats["tx"], stats["inject_dropped"]) == (4, 4, 1)
    assert stats["rx"] == 0


def test_a_burst_larger_than_one_output_batch_is_sent_in_pieces_without_loss(lib, switch):
    switch.route(1, 2)
    loop = NativePortLoop(lib, switch.handle, {})
    ports = SocketPorts(loop, (1, 2))
    if ports.send_buffer(1) < 4 << 20:
        ports.close()
        loop.close()
        pytest.skip("needs 4 MiB socket buffers (root, or a larger net.core.wmem_max)")
    frames = [bytes([i]) * 65536 for i in range(24)]  # 1.5 MiB in one batch: out holds 1 MiB
    try:
        for frame in frames:  # queued before run(), so one batch takes them all
            ports.outside[1].send(frame)
        with serving(loop):
            assert [ports.outside[2].recv(1 << 20) for _ in frames] == frames
        stats = loop.stats
    finally:
        ports.close()
    assert (stats["rx"], stats["tx"], stats["tx_errors"]) == (24, 24, 0) and switch.processed == 24


def test_cpu_port_frames_reach_packet_in_and_unknown_ports_are_counted(lib, switch):
    switch.route(1, CPU_PORT)
    switch.route(2, 7)  # port 7 has no socket
    received = []
    rejected_once = []
    all_delivered = threading.Event()

    def packet_in(frame):
        if b"reject" in frame and not rejected_once:
            rejected_once.append(frame)
            return False
        received.append(frame)
        if len(received) == 3:
            all_delivered.set()
        return True

    loop = NativePortLoop(lib, switch.handle, {}, cpu_port=CPU_PORT, packet_in=packet_in)
    ports = SocketPorts(loop, (1, 2))
    try:
        with serving(loop):
            ports.outside[2].send(make_frame(b"nowhere"))
            for marker in (b"to-cpu-1", b"reject", b"to-cpu-2"):
                ports.outside[1].send(make_frame(marker))
            ports.outside[1].send(b"D" * 70_000)  # a PacketIn longer than the 64 KiB take buffer
            assert all_delivered.wait(60)  # a guard against hanging, not a timing assertion
        stats = loop.stats
    finally:
        ports.close()
    assert received == [make_frame(b"to-cpu-1"), make_frame(b"to-cpu-2"), b"D" * 65536]
    assert stats["packet_in"] == 4 and stats["packet_in_dropped"] == 1 and stats["dropped_no_port"] == 1
    assert stats["tx"] == 0


def test_cpu_port_frames_without_a_packet_in_callback_are_never_sent_on_a_socket(lib, switch):
    switch.route(1, 2)
    switch.route(2, 1)
    loop = NativePortLoop(lib, switch.handle, {}, cpu_port=2)  # port 2 is also the CPU port
    ports = SocketPorts(loop, (1, 2))
    try:
        with serving(loop):
            ports.outside[2].send(make_frame(b"to-port-1"))
            assert ports.outside[1].recv(1 << 20) == make_frame(b"to-port-1")
            ports.outside[1].send(make_frame(b"to-cpu"))
            ports.outside[2].send(make_frame(b"fence"))  # processed after "to-cpu": a marker we can wait for
            assert ports.outside[1].recv(1 << 20) == make_frame(b"fence")
        stats = loop.stats
    finally:
        ports.close()
    assert stats["dropped_no_port"] == 1 and stats["tx"] == 2 and stats["packet_in"] == 0


def test_pcap_files_match_what_the_python_loop_writes(lib, switch, tmp_path):
    switch.route(1, 2)
    loop = NativePortLoop(lib, switch.handle, {}, pcap_dir=str(tmp_path))
    ports = SocketPorts(loop, (1, 2), capture_names={1: "s1", 2: "s2"})
    frames = [make_frame(b"pcap%d" % i) for i in range(50)] + [b"E" * 70_000]
    try:
        with serving(loop):
            for frame in frames:
                ports.outside[1].send(frame)
            for _ in frames:
                ports.outside[2].recv(1 << 20)
    finally:
        ports.close()
    expected = frames[:-1] + [b"E" * 65535]  # the 64 KiB frame, cut at the files' snap length
    assert read_pcap(str(tmp_path / "s1_in.pcap")) == expected
    assert read_pcap(str(tmp_path / "s2_out.pcap")) == expected
    assert read_pcap(str(tmp_path / "s2_in.pcap")) == [] and read_pcap(str(tmp_path / "s1_out.pcap")) == []
    with open(tmp_path / "s1_in.pcap", "rb") as f:
        from emulator.pcap import _GLOBAL_HEADER

        assert f.read(24) == _GLOBAL_HEADER


def test_a_missing_interface_is_an_interface_error_as_with_the_python_loop(lib, switch):
    loop = NativePortLoop(lib, switch.handle, {1: "thc-no-such0"})
    with pytest.raises(InterfaceError, match="interface 'thc-no-such0' does not exist"):
        loop.open()
    loop.close()  # again, harmless
    loop.inject(1, b"after close")  # ignored, as PortLoop's would be
    assert loop.stats == {}


def test_stop_before_run_and_stop_while_idle_both_end_run(lib, switch):
    loop = NativePortLoop(lib, switch.handle, {})
    loop.stop()
    loop.run()  # returns at once: the stop was remembered
    loop.close()
    with serving(NativePortLoop(lib, switch.handle, {})) as idle:
        assert idle.stats == {}


def test_stop_from_a_signal_handler_ends_run_on_the_main_thread(lib, switch):
    script = textwrap.dedent(
        """
        import os, signal, threading
        from emulator.native.portloop import NativePortLoop
        from emulator.native.stub_switch import StubSwitch, load_stub_library
        lib = load_stub_library()
        loop = NativePortLoop(lib, StubSwitch(lib).handle, {})
        signal.signal(signal.SIGTERM, lambda *a: loop.stop())
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        loop.run()
        loop.close()
        print("returned")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "returned"


# ------------------------------------------------------------------ veths (root)


@needs_netns()
@pytest.mark.parametrize("rx_ring", [True, False], ids=["tpacket-ring", "recvmmsg"])
def test_native_loop_forwards_between_veths_with_pcaps_packet_in_and_packet_out(lib, switch, tmp_path, rx_ring):
    switch.route(1, 2)
    switch.route(2, CPU_PORT)
    switch.route(CPU_PORT, 1)
    packet_in = PacketIns()
    with VethLab(2) as lab:
        s1, s2 = lab.switch_ifaces
        h1, h2 = lab.host_socket(0), lab.host_socket(1)
        loop = NativePortLoop(
            lib, switch.handle, {1: s1, 2: s2}, cpu_port=CPU_PORT, pcap_dir=str(tmp_path), rx_ring=rx_ring
        )
        loop.packet_in = packet_in
        loop.open()
        h1.send(make_frame(b"hello0"))  # between open() and run(): waits for the loop
        try:
            with serving(loop):
                for i in range(3):
                    if i:
                        h1.send(make_frame(b"hello%d" % i))
                    assert receive_marked(h2, b"hello%d" % i) == make_frame(b"hello%d" % i)
                h2.send(make_frame(b"TO_CPU"))
                assert packet_in.arrived.wait(10)
                loop.inject(CPU_PORT, make_frame(b"from-controller"))
                assert receive_marked(h1, b"from-controller") == make_frame(b"from-controller")
            stats = loop.stats
        finally:
            h1.close()
            h2.close()
    assert make_frame(b"TO_CPU") in packet_in.frames
    assert stats["tx"] >= 4 and stats["injected"] == 1 and stats["tx_errors"] == 0
    assert stats["rx_rings"] == (2 if rx_ring else 0)
    assert [f for f in read_pcap(str(tmp_path / f"{s1}_in.pcap")) if b"hello" in f] == [
        make_frame(b"hello%d" % i) for i in range(3)
    ]
    assert [f for f in read_pcap(str(tmp_path / f"{s2}_out.pcap")) if b"hello" in f] == [
        make_frame(b"hello%d" % i) for i in range(3)
    ]
    # our own sends on port 2 are not read back: its capture holds only what host 2 sent
    assert all(b"hello" not in f for f in read_pcap(str(tmp_path / f"{s2}_in.pcap")))
    assert make_frame(b"from-controller") in read_pcap(str(tmp_path / f"{s1}_out.pcap"))


@needs_netns()
def test_frames_above_the_mtu_are_counted_as_tx_errors_on_veths(lib, switch):
    switch.route(CPU_PORT, 2)
    with VethLab(2) as lab:
        loop = NativePortLoop(lib, switch.handle, dict(enumerate(lab.switch_ifaces, 1)), cpu_port=CPU_PORT)
        loop.open()
        h2 = lab.host_socket(1)
        try:
            with serving(loop):
                loop.inject(CPU_PORT, make_frame(b"X") + b"\0" * 9000)  # veth MTU 1500: the kernel refuses
                loop.inject(CPU_PORT, b"")  # shorter than an Ethernet header
                loop.inject(CPU_PORT, make_frame(b"after-the-bad-ones"))
                assert receive_marked(h2, b"after-the-bad-ones") == make_frame(b"after-the-bad-ones")
            stats = loop.stats
        finally:
            h2.close()
    assert stats["injected"] == 3 and stats["tx"] + stats["tx_errors"] == 3 and stats["tx_errors"] >= 1


@needs_netns()
def test_a_frame_longer_than_its_ring_slot_is_counted_and_dropped(lib, switch):
    """Ring slots are sized at open() from the MTU; a frame that outgrew them must not be half-read."""
    switch.route(1, 2)
    with VethLab(2) as lab:
        s1 = lab.switch_ifaces[0]
        loop = NativePortLoop(lib, switch.handle, dict(enumerate(lab.switch_ifaces, 1)))
        loop.open()  # slots for 1500-byte links (2 KiB)
        h1, h2 = lab.host_socket(0), lab.host_socket(1)
        subprocess.run(["ip", "link", "set", s1, "mtu", "4000"], check=True)
        subprocess.run(["ip", "-n", lab.namespaces[0], "link", "set", "eth0", "mtu", "4000"], check=True)
        try:
            with serving(loop):
                h1.send(make_frame(b"too-long") + b"\0" * 3000)
                h1.send(make_frame(b"fits"))
                assert receive_marked(h2, b"fits") == make_frame(b"fits")
            stats = loop.stats
        finally:
            h1.close()
            h2.close()
    assert stats["rx_rings"] == 2 and stats["rx_too_long"] == 1 and stats["tx"] == 1


# ------------------------------------------------------------------ sanitizers


@pytest.mark.slow
def test_the_loop_under_address_and_undefined_behaviour_sanitizers(lib):
    """The other tests of this file again (veths too when root), in a child whose library has ASan+UBSan."""
    flags = [*SANITIZER_FLAGS, "-fno-sanitize-recover=undefined"]
    asan = require_libasan()
    build_or_skip(stub_library_path, flags)
    env = dict(
        os.environ,
        LD_PRELOAD=asan,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        THC_NATIVE_SANITIZE=" ".join(flags),
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", __file__],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert "AddressSanitizer" not in output and "runtime error" not in output, output[-4000:]
    assert done.returncode == 0, output[-4000:]
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) >= 10, output[-4000:]  # the child did run them, not skip them
