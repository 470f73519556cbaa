"""Ports and operations of thc-switch: pcap files, the command line, and the AF_PACKET loop on veths.

The veth tests (`mininet` marker: root and `ip` needed) make their own namespaces and veth pairs with
a unique prefix and remove them afterwards. Host ends live in namespaces; the switch ports stay in the
root namespace, where the switch (or its loop) runs (helpers in tests/support/veths.py).
"""

import contextlib
import signal
import socket
import subprocess

import pytest

from emulator import switch_cli as cli
from emulator.p4rt.device import Device
from emulator.pcap import PcapWriter
from emulator.ports import PortLoop
from harness.shell import route_to_port_2, shell_session
from tests.support.fake_program import FAKE_JSON, FakeSwitch, fake_p4info
from tests.support.paths import P4_DIR
from tests.support.port_loops import PacketIns, serving
from tests.support.veths import VethLab, make_frame, needs_netns, read_pcap, receive_marked

# ------------------------------------------------------------------ no root needed


def test_pcap_writer_output_reads_back_with_scapy(tmp_path):
    path = str(tmp_path / "x_in.pcap")
    writer = PcapWriter(path)
    writer.write(make_frame(b"one"), timestamp=1000.25)
    writer.write(make_frame(b"two"))
    writer.close()
    frames = read_pcap(path)
    assert frames == [make_frame(b"one"), make_frame(b"two")]


def test_command_line_accepts_simple_switch_grpc_target_options_after_double_dash():
    args = cli.parse_args(
        [
            "--no-p4",
            "-i",
            "1@veth0",
            "--interface",
            "2@veth2",
            "--device-id",
            "3",
            "--pcap",
            "--log-console",
            "-L",
            "info",
            "--thrift-port",
            "9090",
            "--",
            "--grpc-server-addr",
            "127.0.0.1:50051",
            "--cpu-port",
            "255",
        ]
    )
    assert args.no_p4 and args.program is None
    assert args.interface == [(1, "veth0"), (2, "veth2")]
    assert (args.device_id, args.grpc_server_addr, args.cpu_port) == (3, "127.0.0.1:50051", 255)
    assert args.pcap == "." and args.log_console and args.log_level == "info"
    same = cli.parse_args(["build/prog.json", "--grpc-server-addr", "127.0.0.1:50051", "--pcap", "pcaps"])
    assert same.program == "build/prog.json" and same.pcap == "pcaps"
    with pytest.raises(SystemExit):
        cli.parse_args(["--no-p4", "-i", "veth0"])  # not PORT@IFACE


def test_missing_interface_is_one_line_and_exit_2(capsys):
    assert cli.main(["--no-p4", "-i", "1@thc-no-such0", "--grpc-server-addr", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "thc-switch: interface 'thc-no-such0' (port 1) does not exist"


def test_missing_program_or_both_program_and_no_p4_exit_2(capsys, tmp_path):
    assert cli.main([]) == 2
    assert cli.main([str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert cli.main([str(tmp_path / "x.json"), "--no-p4"]) == 2


@pytest.mark.parametrize("content", [b"tables { nonsense", b"\xff\xfe\x00"], ids=["not-protobuf", "not-utf8"])
def test_a_p4info_that_does_not_parse_is_one_line_and_exit_2(capsys, tmp_path, content):
    p4info = tmp_path / "bad.p4info.txtpb"
    p4info.write_bytes(content)
    program = str(P4_DIR / "build" / "thc.json")
    assert cli.main([program, "--p4info", str(p4info), "--grpc-server-addr", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{p4info} is not a P4Info" in err and "Traceback" not in err, err


@pytest.mark.parametrize("option", ["--log-file", "--p4runtime-log"])
def test_a_log_file_in_a_missing_folder_is_one_line_and_exit_2(capsys, tmp_path, option):
    path = tmp_path / "no" / "such" / "switch.log"
    assert cli.main(["--no-p4", option, str(path), "--grpc-server-addr", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"thc-switch: {option} {path}: name a file in an existing folder"


# ------------------------------------------------------------------ veths


class BoomSwitch(FakeSwitch):
    """Raises on frames carrying BOOM, as a malformed frame might make an engine do."""

    def process(self, port, frame):
        if b"BOOM" in frame:
            raise ValueError("malformed")
        return super().process(port, frame)


@needs_netns()
def test_port_loop_forwards_between_veths_survives_engine_errors_and_writes_pcaps(tmp_path):
    with VethLab(2) as lab:
        device = Device(engine_factory=lambda _: BoomSwitch())
        device.commit(device.build(fake_p4info(), FAKE_JSON))
        loop = PortLoop(device, {1: lab.switch_ifaces[0], 2: lab.switch_ifaces[1]}, pcap_dir=str(tmp_path))
        loop.open()
        h1, h2 = lab.host_socket(0), lab.host_socket(1)
        try:
            with serving(loop):
                h1.send(make_frame(b"BOOM"))
                for i in range(3):
                    h1.send(make_frame(b"hello%d" % i))
                    assert receive_marked(h2, b"hello%d" % i) == make_frame(b"hello%d" % i)
        finally:
            h1.close()
            h2.close()
        engine = device.engine
        # only frames from host 1 reached the engine: our own sends on port 2 are not read back
        assert {port for port, _ in engine.processed} == {1}
        assert loop.stats["engine_errors"] == 1 and loop.stats["tx"] == 3
        received = read_pcap(str(tmp_path / f"{lab.switch_ifaces[0]}_in.pcap"))
        sent = read_pcap(str(tmp_path / f"{lab.switch_ifaces[1]}_out.pcap"))
        assert make_frame(b"BOOM") in received
        assert [f for f in sent if b"hello" in f] == [make_frame(b"hello%d" % i) for i in range(3)]
        assert read_pcap(str(tmp_path / f"{lab.switch_ifaces[1]}_in.pcap")) == [] or all(
            b"hello" not in f for f in read_pcap(str(tmp_path / f"{lab.switch_ifaces[1]}_in.pcap"))
        )


@needs_netns()
def test_packet_out_is_injected_on_the_cpu_port_and_packet_in_reaches_the_callback():
    with VethLab(2) as lab:
        device = Device(cpu_port=64, engine_factory=lambda _: FakeSwitch())
        device.commit(device.build(fake_p4info(), FAKE_JSON))
        packet_in = PacketIns()
        loop = PortLoop(device, {1: lab.switch_ifaces[0], 2: lab.switch_ifaces[1]}, packet_in=packet_in)
        loop.open()
        h1, h2 = lab.host_socket(0), lab.host_socket(1)
        try:
            with serving(loop):
                loop.inject(64, (2 << 7).to_bytes(2, "big") + make_frame(b"from-controller"))
                assert receive_marked(h2, b"from-controller") == make_frame(b"from-controller")
                h1.send(make_frame(b"TO_CPU"))
                assert packet_in.arrived.wait(5)
        finally:
            h1.close()
            h2.close()
        assert packet_in.frames == [((1 << 7) | 5).to_bytes(2, "big") + make_frame(b"TO_CPU")]


# ------------------------------------------------------------------ the process


def start_switch(*args, cwd=None):
    """Start thc-switch as a subprocess; returns (process, gRPC address) once it printed "ready"."""
    import re
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd
    )
    for line in proc.stdout:
        match = re.match(r"thc-switch ready: .* P4Runtime on (\S+),", line)
        if match:
            return proc, match.group(1)
    proc.wait()
    raise AssertionError(f"thc-switch did not start (exit {proc.returncode}): {proc.stderr.read()}")


@contextlib.contextmanager
def switch_process(*args, stop=signal.SIGTERM):
    """thc-switch started with `args` for the block (yields its gRPC address); sent `stop` after it, on
    which it must exit 0."""
    proc, address = start_switch(*args)
    try:
        yield address
    finally:
        proc.send_signal(stop)
        assert proc.wait(timeout=30) == 0


@contextlib.contextmanager
def host_sockets(lab, *ethertype):
    """Raw sockets on the lab's first two hosts for the block."""
    h1, h2 = lab.host_socket(0, *ethertype), lab.host_socket(1, *ethertype)
    try:
        yield h1, h2
    finally:
        h1.close()
        h2.close()


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_switch_process_serves_p4runtime_logs_requests_and_exits_0_on_signal(tmp_path, signum):
    import grpc
    from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

    from tests.support.p4runtime import Controller

    log_file = tmp_path / "s1.log"
    requests_file = tmp_path / "s1-p4runtime-requests.txt"
    args = ["--no-p4", "--grpc-server-addr", "127.0.0.1:0", "--log-file", str(log_file), "-L", "info"]
    args += ["--thrift-port", "9090", "--p4runtime-log", str(requests_file)]
    controller = None
    try:
        with switch_process(*args, stop=getattr(signal, signum)) as address:
            with grpc.insecure_channel(address) as channel:
                stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
                assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version == "1.4.1"
                read = p4runtime_pb2.ReadRequest(device_id=0)
                read.entities.add().table_entry.table_id = 7
                with pytest.raises(grpc.RpcError) as err:
                    list(stub.Read(read))
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # no pipeline yet
            controller = Controller(address)  # an open StreamChannel must not hold the shutdown up
    finally:
        if controller is not None:
            controller.close()
    log = log_file.read_text()
    assert "thc-switch ready" in log and "P4Runtime Capabilities" in log
    assert "StreamChannel arbitration" in log
    assert "--thrift-port 9090 ignored" in log
    assert "] [thc-switch] [I] [thread " in log  # BMv2's line shape
    requests = requests_file.read_text()
    assert "[Read]" in requests and "table_id: 7" in requests  # the full request, in text format


def test_switch_process_refuses_a_busy_grpc_address_with_exit_2():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        import sys

        done = subprocess.run(
            [sys.executable, "-m", "emulator", "--no-p4", "--grpc-server-addr", f"127.0.0.1:{holder.getsockname()[1]}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.close()
    assert done.returncode == 2
    assert "cannot bind gRPC address" in done.stderr


@needs_netns()
def test_thc_switch_on_veths_forwards_with_a_route_from_p4runtime_and_writes_pcaps(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from tests.support.p4runtime import compiled

    p4info, program = compiled("ipv4_forward")
    pcaps = tmp_path / "pcaps"
    with VethLab(2) as lab:
        s1, s2 = lab.switch_ifaces
        args = [program, "-i", f"1@{s1}", "-i", f"2@{s2}", "--grpc-server-addr", "127.0.0.1:0"]
        args += ["--pcap", str(pcaps), "--log-file", str(tmp_path / "s1.log"), "-L", "info"]
        with switch_process(*args) as address:
            route_to_port_2(address, p4info, program)
            with host_sockets(lab, 0x0800) as (h1, h2):
                frame = bytes(
                    Ether(dst="08:00:00:00:01:00", src="08:00:00:00:01:01")
                    / IP(src="10.0.1.1", dst="10.0.2.2", ttl=64)
                    / UDP(sport=7, dport=7)
                    / b"veth-test-payload"
                )
                h1.send(frame)
                out = Ether(receive_marked(h2, b"veth-test-payload"))
                assert (out.dst, out.src, out[IP].ttl) == ("08:00:00:00:02:02", "08:00:00:00:01:00", 63)
        assert frame in read_pcap(str(pcaps / f"{s1}_in.pcap"))
        assert bytes(out) in read_pcap(str(pcaps / f"{s2}_out.pcap"))
        log = (tmp_path / "s1.log").read_text()
        assert "P4Runtime Write: INSERT table_entry MyIngress.ipv4_lpm" in log


@needs_netns()
def test_thc_switch_cpu_port_packet_io_with_target_options_after_double_dash():
    from tests.support.p4runtime import compiled
    from tests.support.paths import PACKET_IO

    p4info, program = compiled("packet_io", PACKET_IO)
    with VethLab(2) as lab:
        s1, s2 = lab.switch_ifaces
        args = ["--no-p4", "-i", f"1@{s1}", "-i", f"2@{s2}", "--", "--grpc-server-addr", "127.0.0.1:0"]
        with switch_process(*args, "--cpu-port", "255") as address:
            with shell_session(address, p4info, program) as sh, host_sockets(lab) as (h1, h2):
                sh.PacketOut(make_frame(b"from-controller"), egress_port="2").send()
                assert receive_marked(h2, b"from-controller") == make_frame(b"from-controller")
                h1.send(make_frame(b"to-controller"))
                message = sh.client.get_stream_packet("packet", timeout=10)
                assert message.packet.payload == make_frame(b"to-controller")
                assert message.packet.metadata[0].value == b"\x01"  # ingress port
