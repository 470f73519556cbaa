"""`thc-switch`: the software switch with simple_switch_grpc's command line.

    thc-switch [options] [--no-p4 | PROGRAM.json] [-- target options]

A runner can hand the same argv to `simple_switch_grpc` or to `thc-switch`: BMv2's target options
after `--` (`--grpc-server-addr`, `--cpu-port`) are accepted there or before it. Start-up order:
check the interfaces, load the program, open the ports, bind gRPC, print the "ready" line, then
serve until SIGTERM/SIGINT. Exit status 0 after a signal, 2 for a bad command line, a missing
interface, an unloadable program or an address that cannot be bound.
"""

import argparse
import logging
import os
import signal
import sys

from emulator import logging_setup
from emulator.dataplane import DataPlane
from emulator.engine.compiler import compile_program
from emulator.errors import EntryError, LoadError
from emulator.native import c_source
from emulator.p4rt.device import Device
from emulator.p4rt.errors import P4RTError
from emulator.p4runtime_server import BindError, P4RuntimeServer
from emulator.pacing import MIN_PPS, service_ns
from emulator.ports import InterfaceError, interface_exists
from emulator.switch import SoftwareSwitch, load_config
from usage.args import OneLineParser, host_port, input_file, int_in

log = logging.getLogger("emulator.switch_cli")
DEFAULT_GRPC_ADDR = "0.0.0.0:9559"  # simple_switch_grpc's default


class UsageError(Exception):
    pass


def _interface(text: str):
    port, sep, iface = text.partition("@")
    if not sep or not iface or not port.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not PORT@INTERFACE (e.g. 1@veth0)")
    return int(port), iface


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="thc-switch",
        allow_abbrev=False,
        description="Software P4 switch (BMv2 v1model JSON from p4c) with a P4Runtime server; "
        "options follow simple_switch_grpc.",
        epilog="simple_switch_grpc's target options may also come after a lone '--', as in "
        "'thc-switch --no-p4 -i 1@veth0 -- --grpc-server-addr 0.0.0.0:50051 --cpu-port 255'. "
        "Exit status: 0 after SIGTERM/SIGINT, 2 on a start-up error (message on stderr).",
    )
    p.add_argument(
        "program", nargs="?", metavar="PROGRAM.json", help="BMv2 JSON written by p4c (p4c-bm2-ss); omit with --no-p4"
    )
    p.add_argument(
        "--no-p4",
        action="store_true",
        help="start without a program and wait for P4Runtime SetForwardingPipelineConfig",
    )
    p.add_argument(
        "-i",
        "--interface",
        action="append",
        type=_interface,
        default=[],
        metavar="PORT@IFACE",
        help="attach Linux interface IFACE as switch port PORT (repeatable)",
    )
    p.add_argument(
        "--device-id", type=int_in(0, 2**64 - 1), default=0, metavar="N", help="P4Runtime device id (default 0)"
    )
    p.add_argument(
        "--grpc-server-addr",
        type=host_port(0, DEFAULT_GRPC_ADDR),
        default=DEFAULT_GRPC_ADDR,
        metavar="ADDR:PORT",
        help=f"address the P4Runtime gRPC server binds (default {DEFAULT_GRPC_ADDR}; port 0 picks "
        "a free port, printed on the ready line)",
    )
    p.add_argument(
        "--cpu-port",
        type=int_in(0, 511),
        default=None,
        metavar="N",
        help="port number that carries packet-in/packet-out to the P4Runtime controller",
    )
    p.add_argument(
        "--p4info",
        type=input_file,
        metavar="PATH",
        help="P4Info (text or binary) matching PROGRAM.json, so P4Runtime can read and write "
        "at once without SetForwardingPipelineConfig (not a simple_switch_grpc option)",
    )
    p.add_argument(
        "--pcap",
        nargs="?",
        const=".",
        default=None,
        metavar="DIR",
        help="write <iface>_in.pcap and <iface>_out.pcap per interface into DIR "
        "(default: the current directory; created if missing)",
    )
    p.add_argument(
        "--backend",
        choices=("auto", "native", "python"),
        default="auto",
        help="engine backend: 'native' compiles the program to C with the system compiler (gcc) and runs it "
        "without Python per packet; 'python' is the reference engine, which also logs every table hit at "
        "trace level; 'auto' (default) is native, or python with a one-line notice naming what native "
        "cannot run (a construct, or no compiler)",
    )
    p.add_argument(
        "--seed",
        type=lambda v: int(v, 0),
        default=None,
        metavar="N",
        help="seed the generator behind P4's random() and the `random` hash algorithm, so runs are "
        "reproducible (default: a random seed; not a simple_switch_grpc option)",
    )
    p.add_argument(
        "--crc-parameters",
        action="append",
        type=_crc_parameters,
        default=[],
        metavar="CALC=POLY,INIT,XOR,REFLECT_DATA,REFLECT_REMAINDER",
        help="parameters of a crc16_custom/crc32_custom calculation (p4c's name, e.g. calc_0), as BMv2's "
        "runtime CLI set_crc16_parameters/set_crc32_parameters sets them, e.g. calc_0=0x1021,0xffff,0,false,false; "
        "repeatable, applied to every pipeline loaded (not a simple_switch_grpc option)",
    )
    p.add_argument(
        "--pps",
        type=_pps,
        default=None,
        metavar="N",
        help="a slower switch: serve at most N received frames a second (all ports together), one at a time, "
        "the rest waiting in the ports' socket queues; stands in for a slower target, e.g. BMv2's simple_switch "
        f"at a few thousand THC frames a second (at least {MIN_PPS:g}; default: as fast as it can; not a "
        "simple_switch_grpc option)",
    )
    p.add_argument("--log-file", metavar="PATH", help="write the log to PATH")
    p.add_argument("--log-console", action="store_true", help="write the log to stdout")
    p.add_argument(
        "-L",
        "--log-level",
        choices=list(logging_setup.LEVELS),
        default="trace",
        help="log level, as BMv2's -L (default trace, like BMv2; 'info' keeps one line per "
        "P4Runtime request and drops per-packet lines, which is much faster)",
    )
    p.add_argument(
        "--log-flush", action="store_true", help="accepted for BMv2 compatibility (log lines are always flushed)"
    )
    p.add_argument(
        "--p4runtime-log",
        metavar="PATH",
        help="also dump every P4Runtime request in text format to PATH "
        "(like p4lang/tutorials' logs/sN-p4runtime-requests.txt)",
    )
    p.add_argument(
        "--dump-packet-data",
        type=int_in(0),
        default=0,
        metavar="N",
        help="log the first N bytes of every received and sent frame at info",
    )
    p.add_argument(
        "--thrift-port",
        type=int_in(0, 65535),
        metavar="N",
        help="accepted and ignored: the software switch has no Thrift server (use P4Runtime)",
    )
    p.add_argument("--nanolog", metavar="ADDR", help="accepted and ignored (no nanomsg event log)")
    p.add_argument(
        "--dump-generated",
        metavar="FILE",
        help="write the Python source the engine generates for PROGRAM.json to FILE ('-': stdout), "
        "with the P4 source line and field names in comments, then exit; with --backend native, the C "
        "source of the native backend instead (not a simple_switch_grpc option)",
    )
    return p


def _pps(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of frames per second") from None
    if not value >= MIN_PPS or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: give a rate of at least {MIN_PPS:g} frame a second")
    return value


def _crc_parameters(text: str):
    """CALC=POLY,INIT,XOR,REFLECT_DATA,REFLECT_REMAINDER -> (CALC, (poly, init, xor, bool, bool))."""
    name, sep, rest = text.partition("=")
    parts = rest.split(",")
    if not sep or not name or len(parts) != 5:
        raise argparse.ArgumentTypeError(f"expected CALC=POLY,INIT,XOR,REFLECT_DATA,REFLECT_REMAINDER, got {text!r}")
    flags = []
    for p in parts[3:]:
        if p.lower() not in ("true", "false", "1", "0"):
            raise argparse.ArgumentTypeError(f"reflect flags are true or false, got {p!r}")
        flags.append(p.lower() in ("true", "1"))
    try:
        numbers = [int(p, 0) for p in parts[:3]]
    except ValueError:
        raise argparse.ArgumentTypeError(f"polynomial, initial and xor values must be integers in {text!r}") from None
    return name, (*numbers, *flags)


def configure_engine(engine, seed=None, crc_parameters=()):
    """Apply --seed and --crc-parameters to a freshly loaded engine (EntryError if a CRC is unknown)."""
    if seed is not None:
        engine.seed(seed)
    for name, params in crc_parameters:
        engine.set_crc_parameters(name, *params)
    return engine


def dump_generated(program: str, out: str, backend: str = "python") -> int:
    """Compile PROGRAM.json as the switch would and write the generated source (for `native`, the C,
    which is not compiled)."""
    try:
        if backend == "native":
            cfg = load_config(program)
            source = c_source(cfg, compile_program(cfg))
        else:
            source = SoftwareSwitch.from_json(program).generated_source
    except OSError as exc:
        return _fail(f"cannot read '{exc.filename}': {exc.strerror}")
    except LoadError as exc:
        return _fail(f"{program}: {exc}")
    if out == "-":
        sys.stdout.write(source)
        return 0
    try:
        with open(out, "w") as f:
            f.write(source)
    except OSError as exc:
        return _fail(f"cannot write '{out}': {exc.strerror}")
    return 0


def parse_args(argv):
    # simple_switch_grpc separates target options with a lone '--'; here they are ordinary options.
    return build_parser().parse_args([a for a in argv if a != "--"])


def _fail(message: str) -> int:
    print(f"thc-switch: {message}", file=sys.stderr, flush=True)
    return 2


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.program and args.no_p4:
        return _fail("give either PROGRAM.json or --no-p4, not both")
    if not args.program and not args.no_p4:
        return _fail("no program: give the BMv2 JSON file, or --no-p4 to wait for SetForwardingPipelineConfig")
    if args.dump_generated is not None:
        if not args.program:
            return _fail("--dump-generated needs PROGRAM.json")
        return dump_generated(args.program, args.dump_generated, args.backend)
    ports = {}
    for port, iface in args.interface:
        if port in ports:
            return _fail(f"port {port} given twice ({ports[port]} and {iface})")
        ports[port] = iface
    for port, iface in sorted(ports.items()):
        if not interface_exists(iface):
            return _fail(f"interface '{iface}' (port {port}) does not exist")
    if args.pcap is not None:
        try:
            os.makedirs(args.pcap, exist_ok=True)
        except OSError as exc:
            return _fail(f"cannot create pcap directory '{args.pcap}': {exc.strerror}")

    for option, path in (("--log-file", args.log_file), ("--p4runtime-log", args.p4runtime_log)):
        if path is not None and (os.path.isdir(path) or not os.path.isdir(os.path.dirname(path) or ".")):
            return _fail(f"{option} {path}: name a file in an existing folder")
    handlers = logging_setup.configure(args.log_level, args.log_console, args.log_file, args.p4runtime_log)
    try:
        return _serve(args, ports)
    finally:
        logging_setup.shutdown(handlers)


def _serve(args, ports) -> int:
    if args.thrift_port is not None:
        log.warning(
            "--thrift-port %d ignored: the software switch has no Thrift server; use P4Runtime", args.thrift_port
        )

    def engine_factory(config):
        engine = SoftwareSwitch.from_json(config, backend=args.backend)
        try:
            return configure_engine(engine, args.seed, args.crc_parameters)
        except EntryError as exc:
            raise LoadError(f"--crc-parameters: {exc}") from None

    device = Device(device_id=args.device_id, cpu_port=args.cpu_port, engine_factory=engine_factory)
    if args.program:
        try:
            device.load_file(args.program, args.p4info)
        except OSError as exc:
            return _fail(f"cannot read '{exc.filename}': {exc.strerror}")
        except P4RTError as exc:
            return _fail(f"{args.program}: {exc.message}")
    elif args.p4info:
        return _fail("--p4info needs PROGRAM.json")

    loop = DataPlane(
        device, ports, pcap_dir=args.pcap, dump_packet_bytes=args.dump_packet_data, service_ns=service_ns(args.pps)
    )
    server = P4RuntimeServer(device, packet_out_sink=loop.inject)
    loop.packet_in = server.packet_in
    try:
        loop.open()
    except InterfaceError as exc:
        loop.close()
        return _fail(str(exc))
    try:
        grpc_port = server.start(args.grpc_server_addr)
    except BindError as exc:
        loop.close()
        return _fail(str(exc))

    def stop(signum, _frame):
        log.info("signal %s: shutting down", signal.Signals(signum).name)
        loop.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    addr = args.grpc_server_addr
    where = addr if addr.startswith("unix:") else f"{addr.rsplit(':', 1)[0]}:{grpc_port}"  # port 0: the one bound
    port_list = " ".join(f"{p}@{i}" for p, i in sorted(ports.items())) or "none"
    ready = (
        f"thc-switch ready: device {args.device_id}, P4Runtime on {where}, "
        f"ports {port_list}, program {args.program or '(none: waiting for SetForwardingPipelineConfig)'}"
        + (f", paced to {args.pps:g} frames/s" if args.pps else "")
    )
    log.info("%s", ready)
    print(ready, flush=True)
    try:
        loop.run()
    finally:
        server.stop(grace=0.5)
        loop.close()
        log.info(
            "stopped; port statistics: %s", ", ".join(f"{k}={v}" for k, v in sorted(loop.stats.items())) or "no traffic"
        )
        engine = device.engine
        if engine is not None and hasattr(engine, "stats"):
            log.info("engine statistics: %s", engine.stats)
    return 0
