"""The engine against BMv2 itself: the same fixture programs, control-plane state and frames go
through `simple_switch_grpc` and through SoftwareSwitch, and every frame that leaves must be equal.

Runs only where simple_switch_grpc is installed (PATH or /opt/p4/bin). BMv2 reads and writes pcap
files (`--use-files`), so no interfaces or privileges are needed; its inputs are named pipes that get
their frames only once the program and entries are in place (P4Runtime, and BMv2's Thrift API for
what PI cannot set). Frames leaving on different ports are compared as sorted
lists: BMv2's egress threads do not keep an order between ports.
"""

import queue
import struct
import subprocess
import threading

import pytest

from emulator.switch_api import MAX_COPIES
from tests.support.bmv2 import Bmv2Process, bmv2_binary, cli_binary, cli_runner, needs_bmv2, replace_parse_value_set
from tests.support.bmv2_pcap import HANG_GUARD_S, InputFifo, collect_output, pcap_records
from tests.support.paths import FIXTURE_BUILD
from tests.support.toolchain import missing

BUILD = FIXTURE_BUILD


BINARY = bmv2_binary()
pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.slow,
    needs_bmv2(),
]


# ------------------------------------------------------------------------------ P4Runtime client
class P4RTClient:
    """The subset of SoftwareSwitch's control-plane API needed here, spoken as P4Runtime."""

    def __init__(self, address, program, thrift_port=None):
        import grpc
        from google.protobuf import text_format
        from p4.config.v1 import p4info_pb2
        from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

        self.pb = p4runtime_pb2
        self.channel = grpc.insecure_channel(address)
        grpc.channel_ready_future(self.channel).result(timeout=20)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.requests = queue.Queue()
        self.stream = self.stub.StreamChannel(iter(self.requests.get, None))
        arbitration = p4runtime_pb2.StreamMessageRequest()
        arbitration.arbitration.device_id = 0
        arbitration.arbitration.election_id.low = 1
        self.requests.put(arbitration)
        next(self.stream)  # the arbitration answer
        self.p4info = text_format.Parse((BUILD / f"{program}.p4info.txtpb").read_text(), p4info_pb2.P4Info())
        config = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=0, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        config.election_id.low = 1
        config.config.p4info.CopyFrom(self.p4info)
        config.config.p4_device_config = (BUILD / f"{program}.json").read_bytes()
        self.stub.SetForwardingPipelineConfig(config)
        self.tables = {t.preamble.name: t for t in self.p4info.tables}
        self.actions = {a.preamble.name: a for a in self.p4info.actions}
        self.thrift_port = thrift_port
        self.program = program

    def close(self):
        self.requests.put(None)
        self.channel.close()

    def _write(self, fill, update_type=None):
        """One update (an INSERT unless told), filled in by fill(update)."""
        req = self.pb.WriteRequest(device_id=0)
        req.election_id.low = 1
        update = req.updates.add()
        update.type = self.pb.Update.INSERT if update_type is None else update_type
        fill(update)
        self.stub.Write(req)

    @staticmethod
    def _bytes(value, width):
        return int(value).to_bytes((width + 7) // 8, "big")

    def _action(self, te_action, action, params):
        info = self.actions[action]
        te_action.action_id = info.preamble.id
        for p, value in zip(info.params, params):
            te_action.params.add(param_id=p.id, value=self._bytes(value, p.bitwidth))

    def table_add(self, table, keys, action, params, priority=None):
        info = self.tables[table]

        def fill(update):
            te = update.entity.table_entry
            te.table_id = info.preamble.id
            for mf, key in zip(info.match_fields, keys):
                kind = mf.match_type
                if kind == mf.EXACT:
                    te.match.add(field_id=mf.id).exact.value = self._bytes(key, mf.bitwidth)
                elif kind == mf.LPM and key[1]:
                    m = te.match.add(field_id=mf.id)
                    m.lpm.value, m.lpm.prefix_len = self._bytes(key[0], mf.bitwidth), key[1]
                elif kind == mf.TERNARY and key[1]:
                    m = te.match.add(field_id=mf.id)
                    m.ternary.value = self._bytes(key[0], mf.bitwidth)
                    m.ternary.mask = self._bytes(key[1], mf.bitwidth)
                elif kind == mf.RANGE and key != (0, (1 << mf.bitwidth) - 1):
                    m = te.match.add(field_id=mf.id)
                    m.range.low, m.range.high = (self._bytes(k, mf.bitwidth) for k in key)
            if priority is not None:
                te.priority = priority
            self._action(te.action.action, action, params)

        self._write(fill)

    # PI answers ValueSetEntry writes with UNIMPLEMENTED and has no way to set CRC parameters: these
    # go over BMv2's Thrift runtime API, as a BMv2 user would program them
    def value_set_replace(self, name, members):
        if self.thrift_port is None:
            missing("BMv2 with Thrift (for value sets) is not installed")
        match = next(v for v in self.p4info.value_sets if v.preamble.name == name).match
        size = (sum(m.bitwidth for m in match) + 7) // 8  # BMv2's compressed width, in bytes
        wanted = sorted(m.to_bytes(size, "big") for m in members)
        assert replace_parse_value_set(self.thrift_port, name, wanted, _cli_binary()) == wanted

    def set_crc_parameters(self, name, poly, init, xor_out, reflect_in=True, reflect_out=True):
        import json

        cfg = json.loads((BUILD / f"{self.program}.json").read_text())
        algo = next(c["algo"] for c in cfg["calculations"] if c["name"] == name)
        width = 16 if algo == "crc16_custom" else 32
        flags = f"{str(reflect_in).lower()} {str(reflect_out).lower()}"
        self._cli([f"set_crc{width}_parameters {name} {poly:#x} {init:#x} {xor_out:#x} {flags}"])

    def seed(self, seed):
        """BMv2's random draws cannot be seeded: the tests mask the fields they fill."""

    def _cli(self, commands):
        cli = _cli_binary()
        if cli is None or self.thrift_port is None:
            missing("simple_switch_CLI (and BMv2 with Thrift, for value sets and CRC parameters) is not installed")
        interpreter, env = cli_runner(cli)
        done = subprocess.run(
            [*interpreter, cli, "--thrift-port", str(self.thrift_port)],
            env=env,
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "Error" not in done.stdout, done.stdout + done.stderr

    def mc_group_set(self, group_id, replicas):
        self._write_replicas("multicast_group_entry", "multicast_group_id", group_id, replicas)

    def clone_session_set(self, session_id, replicas):
        self._write_replicas("clone_session_entry", "session_id", session_id, replicas)

    def _write_replicas(self, kind, id_field, ident, replicas):
        """A packet replication engine entry (multicast group or clone session) with its (port, rid) replicas."""

        def fill(update):
            entry = getattr(update.entity.packet_replication_engine_entry, kind)
            setattr(entry, id_field, ident)
            for port, rid in replicas:
                entry.replicas.add(egress_port=port, instance=rid)

        self._write(fill)

    # meters and action profiles (the engine's API, spoken as P4Runtime)
    def digest_configure(self, name, **config):
        """INSERT a DigestEntry for the P4Info digest `name` (config: max_timeout_ns, max_list_size, ...)."""
        did = next(d.preamble.id for d in self.p4info.digests if d.preamble.name == name)

        def fill(update):
            update.type = self.pb.Update.INSERT
            update.entity.digest_entry.digest_id = did
            for key, value in config.items():
                setattr(update.entity.digest_entry.config, key, value)

        self._write(fill)

    def digest_samples(self, count):
        """(digest name, canonical member bytestrings) of the samples the stream brings until `count` came."""
        names = {d.preamble.id: d.preamble.name for d in self.p4info.digests}
        arrived = queue.Queue()

        def read():
            import grpc

            try:
                for message in self.stream:
                    for data in message.digest.data if message.HasField("digest") else ():
                        members = tuple(m.bitstring.lstrip(b"\0") or b"\0" for m in data.struct.members)
                        arrived.put((names.get(message.digest.digest_id), members))
            except grpc.RpcError as exc:
                # close() closes the channel, which cancels the stream under this reader: its normal end.
                # Anything else goes to the test's thread, which raises it if it is still waiting.
                if exc.code() != grpc.StatusCode.CANCELLED:
                    arrived.put(exc)

        threading.Thread(target=read, daemon=True).start()
        samples = []
        while len(samples) < count:
            try:
                sample = arrived.get(timeout=HANG_GUARD_S)
            except queue.Empty:
                break  # the comparison shows what is missing
            if isinstance(sample, Exception):
                raise sample
            samples.append(sample)
        return samples

    def _modify(self, fill):
        self._write(fill, self.pb.Update.MODIFY)

    def _id(self, section, name):
        return next(x.preamble.id for x in getattr(self.p4info, section) if x.preamble.name == name)

    def meter_set(self, name, index, config):
        def fill(update):
            entry = update.entity.meter_entry
            entry.meter_id = self._id("meters", name)
            entry.index.index = index
            (entry.config.cir, entry.config.cburst), (entry.config.pir, entry.config.pburst) = config

        self._modify(fill)

    def direct_meter_set(self, table, keys, config, priority=None):
        info = self.tables[table]

        def fill(update):
            entry = update.entity.direct_meter_entry
            entry.table_entry.table_id = info.preamble.id
            for mf, key in zip(info.match_fields, keys):  # exact keys only, as the fixture has
                entry.table_entry.match.add(field_id=mf.id).exact.value = self._bytes(key, mf.bitwidth)
            (entry.config.cir, entry.config.cburst), (entry.config.pir, entry.config.pburst) = config

        self._modify(fill)

    def act_prof_member_add(self, profile, member_id, action, params):
        def fill(update):
            member = update.entity.action_profile_member
            member.action_profile_id = self._id("action_profiles", profile)
            member.member_id = member_id
            self._action(member.action, action, params)

        self._write(fill)

    def act_prof_group_set(self, profile, group_id, members, create=True):
        def fill(update):
            group = update.entity.action_profile_group
            group.action_profile_id = self._id("action_profiles", profile)
            group.group_id = group_id
            for item in members:
                mid, weight = item if isinstance(item, tuple) else (item, 1)
                group.members.add(member_id=mid, weight=weight)

        (self._write if create else self._modify)(fill)

    def table_add_indirect(self, table, keys, member=None, group=None, priority=None):
        info = self.tables[table]

        def fill(update):
            te = update.entity.table_entry
            te.table_id = info.preamble.id
            for mf, key in zip(info.match_fields, keys):
                if mf.match_type == mf.EXACT:
                    te.match.add(field_id=mf.id).exact.value = self._bytes(key, mf.bitwidth)
                elif mf.match_type == mf.LPM:
                    m = te.match.add(field_id=mf.id)
                    m.lpm.value, m.lpm.prefix_len = self._bytes(key[0], mf.bitwidth), key[1]
            if member is not None:
                te.action.action_profile_member_id = member
            else:
                te.action.action_profile_group_id = group

        self._write(fill)


def clone_session_set(sw, session_id, replicas):
    """A P4Runtime clone session on either target: on the engine, what PI makes of it on BMv2 (the
    replicas as multicast group 32768 + id, the mirror session sending to that group)."""
    if isinstance(sw, P4RTClient):
        sw.clone_session_set(session_id, replicas)
    else:
        sw.mc_group_set(32768 + session_id, replicas)
        sw.mirroring_add(session_id, mgid=32768 + session_id)


# ------------------------------------------------------------------------------ running BMv2
def _cli_binary():
    return cli_binary(BINARY)


def run_bmv2(
    tmp_path, program, setup, frames, expected_count, ports=range(0, 9), log_level="error", after=None, until=None
):
    """Frames [(port, bytes)] through BMv2 with `setup(client)` applied; [(port, bytes)] out, sorted.

    BMv2 reads and writes pcap files (`--use-files`); the input files are named pipes that get their
    frames only after `setup` has returned, so every frame meets the fully programmed switch.
    A `log_level` other than error also logs BMv2's lines to tmp_path/bmv2/bmv2.log; `after(client)`
    runs once the frames are out, before the client closes. `until(out)`: return as soon as it holds
    (for a switch that never stops sending)."""
    ports = sorted(set(ports) | {p for p, _ in frames})
    run_dir = tmp_path / "bmv2"
    run_dir.mkdir()
    inputs = {p: InputFifo(run_dir / f"p{p}_in.pcap") for p in ports}
    client = None
    try:
        interfaces = [arg for p in ports for arg in ("-i", f"{p}@p{p}")]
        switch = Bmv2Process(
            run_dir, ["--use-files", "0", *_log_args(log_level), "--no-p4", *interfaces], binary=BINARY
        )
        try:
            client = P4RTClient(switch.address, program, switch.thrift_port)
            setup(client)
            for p, fifo in inputs.items():
                fifo.feed(pcap_records([(i, f) for i, (q, f) in enumerate(frames) if q == p]))
            out = collect_output(run_dir, ports, expected_count, switch, until)
            if after is not None:
                after(client)
            return out
        finally:
            if client is not None:
                client.close()
            switch.stop()
    finally:
        for fifo in inputs.values():
            if fifo.writer is None:
                fifo.close()


def _log_args(level):
    return ["--log-level", level] if level == "error" else ["--log-console", "--log-level", level]


def run_engine(program, setup, frames, backend="python"):
    from emulator.switch import SoftwareSwitch

    sw = SoftwareSwitch.from_json(BUILD / f"{program}.json", backend=backend)
    setup(sw)
    out = []
    for port, frame in frames:
        out += sw.process(port, frame)
    assert sw.stats["exceptions"] == 0
    return sorted(out)


def compare(tmp_path, program, setup, frames, mask=None):
    engine = run_engine(program, setup, frames)
    bmv2 = run_bmv2(tmp_path, program, setup, frames, len(engine))
    if mask is not None:
        engine, bmv2 = [mask(o) for o in engine], [mask(o) for o in bmv2]
    assert engine, f"{program}: the scenario sent no frame out of the engine, so it compares nothing"
    assert bmv2 == engine


# ------------------------------------------------------------------------------ the scenarios
def test_ipv4_forward_matches_bmv2(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import ARP, Ether
    from scapy.packet import raw

    def setup(sw):
        sw.table_add("MyIngress.ipv4_lpm", [(0x0A000000, 8)], "MyIngress.ipv4_forward", [0xAA, 2])
        sw.table_add("MyIngress.ipv4_lpm", [(0x0A010000, 16)], "MyIngress.ipv4_forward", [0xBB, 3])

    good = raw(Ether(dst="00:00:00:00:01:01") / IP(dst="10.1.2.3", ttl=0) / UDP() / b"data")
    bad = bytearray(good)
    bad[24] ^= 0xFF
    frames = [
        (1, good),
        (1, raw(Ether() / IP(dst="10.9.9.9") / UDP())),
        (1, raw(Ether() / IP(dst="11.0.0.1"))),
        (1, bytes(bad)),
        (2, raw(Ether() / ARP())),
        (3, good[:20]),
        (3, good[:10]),
    ]
    compare(tmp_path, "ipv4_forward", setup, frames)


def test_counters_registers_tables_multicast_match_bmv2(tmp_path):
    ing = "TagIngress"

    def setup(sw):
        sw.table_add(f"{ing}.classify", [(0x40, 0xF0), (0, 0)], f"{ing}.set_mcast", [7, 0xBEEF], priority=5)
        sw.table_add(f"{ing}.classify", [(0x10, 0xF0), (0, 0)], f"{ing}.set_port", [1], priority=5)
        sw.table_add(f"{ing}.classify", [(0x11, 0xFF), (0xA1, 0xFFFFFFFFFFFF)], f"{ing}.set_port", [4], priority=9)
        sw.table_add(f"{ing}.by_value", [(100, 199)], f"{ing}.set_port", [2], priority=1)
        sw.table_add(f"{ing}.by_value", [(150, 150)], f"{ing}.set_port", [3], priority=5)
        sw.mc_group_set(7, [(1, 100), (2, 200), (3, 300)])

    def tag(op, idx, value, src=0xA1, ext=None):
        body = struct.pack("!BBHIHHH", op, idx, value, 0, 0, 0, 0)
        body += struct.pack("!I", ext) if ext is not None else b""
        return bytes(5) + b"\xff" + src.to_bytes(6, "big") + b"\x88\xb5" + body

    frames = [
        (2, tag(0x41, 1, 5)),
        (2, tag(0x41, 1, 6)),
        (2, tag(0x11, 2, 150, ext=1)),
        (2, tag(0x11, 2, 120, src=0xB2, ext=2)),
        (2, tag(0x12, 3, 99, ext=3)),
        (2, tag(0x31, 0, 0)),
        (2, tag(0x41, 200, 1)),
    ]
    compare(tmp_path, "counter_register_multicast", setup, frames)


def test_expressions_match_bmv2(tmp_path):
    def frame(a, b, s, t, w, sh, flags, labels):
        body = struct.pack("!BBbbHBB", a, b, s, t, w, sh, flags) + b"".join(bytes(x) for x in labels)
        return bytes(11) + b"\x01\x88\xb6" + body

    frames = [
        (3, frame(1, 2, 3, 4, 0x1234, 4, 0, [(1, 1)])),
        (3, frame(250, 10, 100, 100, 0xFFFF, 0, 1, [(1, 0), (2, 1)])),
        (3, frame(5, 250, -128, -1, 0x8001, 15, 0b110, [(1, 0), (2, 0), (3, 1)])),
        (3, frame(201, 201, 127, 127, 0x00FF, 16, 0x81, [(9, 1)])),
        (3, frame(0, 0, -5, 3, 0xABCD, 200, 0, [(1, 0), (2, 0), (3, 0), (4, 1)])),
    ]
    compare(tmp_path, "expressions", lambda sw: None, frames)


def test_tables_and_parser_match_bmv2(tmp_path):
    ti = "TIngress"

    def setup(sw):
        sw.table_add(f"{ti}.chooser", [0x10], f"{ti}.set_how", [5])
        sw.table_add(f"{ti}.chooser", [0x20], f"{ti}.to_port", [3])
        sw.table_add(f"{ti}.hitter", [0x40], f"{ti}.set_how", [7])

    def q(key16, flags=0, version=1, after=b"\x00"):
        return bytes(11) + b"\x02\x88\xb8" + struct.pack("!BBHBBBB", version, flags, key16, 0, 0, 0, 0) + after

    frames = [
        (1, q(k)) for k in (0x0001, 0x0002, 0x1234, 0x12FF, 0x1300, 0x2100, 0x2200, 0x4000, 0x3003, 0x300F, 0x3019)
    ]
    frames += [(1, q(0x0001, after=b"\xa5\x00\x00\x00"))]
    frames += [(1, q(0x0002, flags=f)) for f in (0x10, 0x20, 0x40)]
    frames += [
        (1, q(0x0002, flags=0x80)),
        (1, q(0x0001, version=2, after=b"\xa5\x01\x02\x03")),
        (1, q(0x0001, after=b"\xa5\x01")),
        (1, q(0x0001, after=b"")),
        (1, q(0x0002, flags=0x02, after=b"\xee\xee\x01\x02")),
        (1, bytes(14)),
    ]
    compare(tmp_path, "tables_parser", setup, frames)


def test_resubmit_recirculate_and_hashes_match_bmv2(tmp_path):
    def p(kind):
        return (
            bytes(5) + b"\xff\x0a\x0b\x0c\x0d\x0e\x0f\x88\xb7" + struct.pack("!BBBBHHIHH", kind, 0, 0, 0, 0, 0, 0, 0, 0)
        )

    def without_random(out):  # the random() field differs by nature; everything else must not
        port, frame = out
        return port, frame[:28] + frame[30:]

    compare(tmp_path, "passes_externs", lambda sw: None, [(1, p(0)), (1, p(1)), (1, p(2))], mask=without_random)


def test_clones_and_truncate_match_bmv2(tmp_path):
    def c(kind, session=5, trunc=0):
        return (
            bytes.fromhex("00000000000200000000000188b5")
            + bytes([kind, session, trunc, 0, 0, 0, 0, 0])
            + bytes(4)
            + b"TAIL"
        )

    def setup(sw):
        clone_session_set(sw, 5, [(3, 1)])
        clone_session_set(sw, 6, [(4, 2), (5, 3)])

    frames = [(1, c(1)), (1, c(2, 6)), (1, c(3)), (1, c(4)), (1, c(5, trunc=20)), (1, c(7, 6, 16)), (1, c(8))]
    frames += [(1, c(1, session=9))]  # an unconfigured session: no clone
    compare(tmp_path, "clone_mirror", setup, frames)


# ------------------------------------------------------------------ varbit, unions, value sets, custom CRCs
# (not random_hash: simple_switch refuses HashAlgorithm.random, "Unknown hash algorithm")
def test_varbit_ipv4_options_and_blobs_match_bmv2(tmp_path):
    from tests.emulator.test_engine_v1model_fixtures import blob_frame, eth, ipv4

    options = bytes(range(0x41, 0x41 + 40))
    good = ipv4(7, options[:8])
    frames = [(1, eth(0x0800) + ipv4(ihl, options[: 4 * (ihl - 5)]) + b"payload") for ihl in (5, 6, 7, 15)]
    frames += [
        (1, eth(0x0800) + good[:20] + bytes([good[20] ^ 0x80]) + good[21:]),  # checksum wrong over the options
        (1, eth(0x0800) + ipv4(7, bytes(range(1, 9)))[:24]),  # options cut short
        (1, eth(0x0800) + ipv4(4) + bytes(60)),  # ihl 4: (4 - 5) * 32 wraps in bit<16>
    ]
    frames += [(2, blob_frame(8 * n, bytes(range(0xA0, 0xA0 + n)), 1, b"tail")) for n in (0, 1, 3, 8)]
    frames += [(2, blob_frame(24, b"\x01\x02\x03", 2))]  # setInvalid on the varbit header
    frames += [
        (2, eth(0x88B5) + bytes([nbits, 0]) + bytes(rest)) for nbits, rest in ((12, 10), (72, 10), (72, 5), (64, 3))
    ]
    compare(tmp_path, "varbit_options", lambda sw: None, frames)


def test_header_unions_and_union_stacks_match_bmv2(tmp_path):
    from tests.emulator.test_engine_v1model_fixtures import SHORT, eth, u_frame

    long_ = b"\x00\x00\x00\x07"
    frames = [(1, u_frame(1, flags, SHORT)) for flags in (0x00, 0x80, 0x40, 0xC0)]
    frames += [(1, u_frame(2, flags, long_)) for flags in (0x00, 0x80, 0x40)]
    frames += [
        (1, eth(0x88B6) + bytes([3, 0xFF]) + b"rest"),
        (1, u_frame(1, 0, SHORT, b"\x20\x00\x00\x01" + b"\x20\x00\x00\xff" + b"\x20\x00\x00\x03", b"")),
        (1, u_frame(1, 0, SHORT, b"\x10\x01" * 4, b"")),  # a fourth element: StackOutOfBounds
        (1, eth(0x88B6) + bytes([2, 0]) + b"\x00\x00"),  # the member cut short
        (1, eth(0x0800) + b"\x01\x00\x12\x34"),
    ]
    compare(tmp_path, "header_unions", lambda sw: None, frames)


def test_value_sets_match_bmv2(tmp_path):
    from tests.emulator.test_engine_v1model_fixtures import ETHER_TYPES, KINDS, p_frame

    def setup(sw):
        sw.value_set_replace(ETHER_TYPES, [0x9000, 0x88B5])
        sw.value_set_replace(KINDS, [0x073, 0xFF0])

    frames = [
        (1, p_frame(et, kind, sub)) for et in (0x9000, 0x88B5, 0x9001) for kind, sub in ((7, 3), (0xFF, 0), (7, 4))
    ]
    compare(tmp_path, "value_sets", setup, frames)


def _without_random(out):
    """custom_hashes' h.rnd (random() in [5, 5000]) differs by nature; everything else must not."""
    port, frame = out
    return port, frame[:24] + frame[26:]


@pytest.mark.parametrize(
    "crc16, crc32",
    [
        (None, None),  # BMv2's default parameters
        ((0x1021, 0xFFFF, 0x0000, False, False), (0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, True, True)),
        ((0x1021, 0x1D0F, 0xFFFF, True, False), (0x814141AB, 0x00000000, 0x00000000, False, True)),
    ],
)
def test_custom_crcs_match_bmv2(tmp_path, crc16, crc32):
    import random

    from tests.emulator.test_engine_v1model_fixtures import CRC16, CRC32, h_frame

    def setup(sw):
        if crc16 is not None:
            sw.set_crc_parameters(CRC16, *crc16)
            sw.set_crc_parameters(CRC32, *crc32)

    rng = random.Random(str(crc16))
    frames = [(1, h_frame(d)) for d in [0, 0xFFFFFFFF, 0x31323334] + [rng.getrandbits(32) for _ in range(10)]]
    compare(tmp_path, "custom_hashes", setup, frames, mask=_without_random)


@pytest.mark.parametrize(
    "program, ether_type",
    [
        ("varbit_options", b"\x08\x00"),
        ("varbit_options", b"\x88\xb5"),
        ("header_unions", b"\x88\xb6"),
        ("value_sets", b"\x90\x00"),
        ("custom_hashes", b"\x88\xb8"),
    ],
)
def test_random_frames_through_the_new_fixtures_match_bmv2(tmp_path, program, ether_type):
    """Random bodies after the etherType the parser takes; IPv4 frames mostly with version 4 and an
    ihl of at least 5, union frames with kind bytes of the stack, so the parsers go deep."""
    import random

    def setup(sw):
        if program == "value_sets":
            sw.value_set_replace("SParser.ether_types", [0x9000])
            sw.value_set_replace("SParser.kinds", [0x073, 0x070, 0xFF0])

    rng = random.Random(program + ether_type.hex())
    frames = []
    for _ in range(60):
        body = bytearray(rng.randrange(256) for _ in range(rng.randrange(0, 72)))
        if body and ether_type == b"\x08\x00" and rng.random() < 0.8:
            body[0] = 0x40 | rng.choice([5, 6, 7, 8, 15, rng.randrange(16)])
        if ether_type == b"\x88\xb6":
            for i in range(4, len(body), 3):
                body[i] = rng.choice([0x10, 0x20, body[i]])
        if program == "value_sets" and len(body) >= 2 and rng.random() < 0.6:
            body[0:2] = rng.choice([b"\x07\x30", b"\x07\x0f", b"\xff\x00"])
        frames.append((1, bytes(12) + ether_type + bytes(body)))
    compare(tmp_path, program, setup, frames, mask=_without_random if program == "custom_hashes" else None)


@pytest.mark.parametrize(
    "program, ether_type",
    [
        ("ipv4_forward", b"\x08\x00"),
        ("counter_register_multicast", b"\x88\xb5"),
        ("expressions", b"\x88\xb6"),
        ("tables_parser", b"\x88\xb8"),
        ("clone_mirror", b"\x88\xb5"),
    ],
)
def test_random_frames_match_bmv2(tmp_path, program, ether_type):
    """Random headers, random lengths (most frames end early somewhere in the parser)."""
    import random

    setups = {
        "ipv4_forward": lambda sw: sw.table_add("MyIngress.ipv4_lpm", [(0, 1)], "MyIngress.ipv4_forward", [0xAA, 2]),
        "counter_register_multicast": lambda sw: (
            sw.table_add("TagIngress.classify", [(0, 0x80), (0, 0)], "TagIngress.set_mcast", [7, 1], priority=1),
            sw.table_add("TagIngress.classify", [(0x80, 0x80), (0, 0)], "TagIngress.set_port", [3], priority=1),
            sw.mc_group_set(7, [(1, 1), (2, 2)]),
        ),
        "expressions": lambda sw: None,
        "tables_parser": lambda sw: sw.table_add("TIngress.chooser", [0x10], "TIngress.set_how", [5]),
        # odd sessions only, so frames also name unconfigured ones (and 0, which P4Runtime keeps for
        # wildcard reads: PI refuses to configure it)
        "clone_mirror": lambda sw: [clone_session_set(sw, s, [(3, 1), (4, 2)]) for s in range(1, 256, 2)],
    }
    rng = random.Random(program)
    frames = []
    for _ in range(60):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 48)))
        if program == "tables_parser" and rng.random() < 0.7:
            body = b"\x01" + body[1:]  # mostly the right version, so the parser goes further
        if program == "clone_mirror" and body and rng.random() < 0.7:
            body = bytes([rng.choice([1, 2, 3, 4, 5, 7, 8])]) + body[1:]  # mostly a kind that clones
        if program == "clone_mirror" and body[:1] == b"\x06":
            body = b"\x03" + body[1:]  # kind 6 clones its clones: BMv2 would loop forever
        frames.append((1, bytes(12) + ether_type + body))
    compare(tmp_path, program, setups[program], frames)


def test_bmv2_goes_on_forwarding_while_clones_clone_again(tmp_path):
    """The software switch bounds such a cascade (switch_api.MAX_COPIES, test_engine_clone_digest.py);
    BMv2 queues it without end, and still forwards the next frame."""

    def c(kind, session=0):
        return bytes.fromhex("00000000000200000000000188b5") + bytes([kind, session]) + bytes(10) + b"TAIL"

    def setup(sw):
        clone_session_set(sw, 7, [(3, 1), (4, 2), (5, 3)])

    def forwarded(out):  # the frame after the cascade (its c header's kind byte is 0), and the cascade past
        return any(f[14] == 0 for _, f in out) and len(out) > MAX_COPIES + 1  # the software switch's bound

    out = run_bmv2(tmp_path, "clone_mirror", setup, [(1, c(6, 7)), (1, c(0))], 0, until=forwarded)
    assert forwarded(out), f"BMv2 sent {len(out)} frames; the frame after the cascade is not among them"


def test_meters_match_bmv2(tmp_path):
    """Buckets that never refill (rates 0) make the colours independent of either switch's clock."""
    ing = "MyIngress"

    def setup(sw):
        sw.table_add(f"{ing}.flows", [3], f"{ing}.metered", [])
        sw.meter_set(f"{ing}.packet_meter", 3, [(0, 2), (0, 3)])
        sw.meter_set(f"{ing}.byte_meter", 3, [(0, 60), (0, 130)])
        sw.direct_meter_set(f"{ing}.flows", [3], [(0, 1), (0, 2)])

    def frame(index, pad):
        return bytes(5) + b"\x02" + bytes(5) + b"\x01\x88\xb5" + bytes([index, 9, 9, 9]) + bytes(pad)

    frames = [(1, frame(3, 40)) for _ in range(5)] + [(1, frame(4, 0)), (1, frame(200, 0)), (1, frame(3, 0)[:16])]
    compare(tmp_path, "meters", setup, frames)


def test_action_selector_and_profile_match_bmv2(tmp_path):
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether
    from scapy.packet import raw

    ing = "MyIngress"

    def setup(sw):
        for mid in (1, 2, 3):
            sw.act_prof_member_add(f"{ing}.ecmp_selector", mid, f"{ing}.set_nexthop", [mid, 0x0200 + mid])
        sw.act_prof_member_add(f"{ing}.ecmp_selector", 9, f"{ing}.drop", [])
        sw.act_prof_group_set(f"{ing}.ecmp_selector", 10, [3, 1, 2])
        sw.table_add_indirect(f"{ing}.ecmp", [(0x0A000000, 8)], group=10)
        sw.table_add_indirect(f"{ing}.ecmp", [(0x0B000000, 8)], member=2)
        sw.table_add_indirect(f"{ing}.ecmp", [(0x0C000000, 8)], member=9)
        sw.act_prof_member_add(f"{ing}.tos_profile", 1, f"{ing}.set_tos", [0xB8])
        sw.table_add_indirect(f"{ing}.tos", [17], member=1)

    frames = [
        (1, raw(Ether() / IP(src=f"172.16.{i}.{7 * i % 256}", dst=f"{10 + i % 3}.1.2.3", proto=17 if i % 4 else 6)))
        for i in range(40)
    ]
    compare(tmp_path, "action_profiles", setup, frames)


def test_weighted_selector_group_matches_bmv2(tmp_path):
    """Members of weight 2 to 4 in two groups that share members, one group changed afterwards: the
    copies PI adds for the weights interleave in BMv2's handle order, which the selector's hash
    indexes. Both backends send what BMv2 sends."""
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether
    from scapy.packet import raw

    ing, sel = "MyIngress", "MyIngress.ecmp_selector"

    def setup(sw):
        for mid in (1, 2, 3):
            sw.act_prof_member_add(sel, mid, f"{ing}.set_nexthop", [mid, 0x0200 + mid])
        sw.act_prof_member_add(sel, 9, f"{ing}.drop", [])
        sw.act_prof_group_set(sel, 10, [(3, 2), (1, 1), (2, 3)])
        sw.act_prof_group_set(sel, 11, [(1, 2), (9, 2)])
        sw.act_prof_group_set(sel, 10, [(1, 4), (2, 1), (3, 1)], create=False)  # copies given back, added
        sw.act_prof_member_add(sel, 4, f"{ing}.set_nexthop", [4, 0x0204])  # takes a freed copy's handle
        sw.act_prof_group_set(sel, 12, [(4, 3), (2, 2)])
        sw.table_add_indirect(f"{ing}.ecmp", [(0x0A000000, 8)], group=10)
        sw.table_add_indirect(f"{ing}.ecmp", [(0x0B000000, 8)], group=11)
        sw.table_add_indirect(f"{ing}.ecmp", [(0x0C000000, 8)], group=12)

    frames = [
        (1, raw(Ether() / IP(src=f"172.16.{i}.{7 * i % 256}", dst=f"{10 + i % 3}.1.2.3", proto=17 if i % 4 else 6)))
        for i in range(90)
    ]
    engine = {backend: run_engine("action_profiles", setup, frames, backend) for backend in ("python", "native")}
    assert engine["python"] == engine["native"]
    assert len({out[0] for out in engine["python"]}) >= 4, "the hash should spread the frames over the members"
    assert run_bmv2(tmp_path, "action_profiles", setup, frames, len(engine["python"])) == engine["python"]


def test_deparser_primitives_match_bmv2(tmp_path):
    """deparser_externs: the frames (truncated in the deparser), the log_msg lines, which BMv2 logs at
    info (its egress threads interleave frames, so the lines are compared sorted), and the digests on
    BMv2's P4Runtime stream: the ingress ones of kind-1 frames, never the deparser's."""
    import logging
    import re

    from emulator.switch import SoftwareSwitch
    from tests.emulator.test_engine_deparser_externs import dp_frame

    frames = []
    for i in range(12):
        frame = bytearray(dp_frame(i % 3, 15 + 3 * i, (-1) ** i * 37 * i, 1000 * i, bytes(range(i * 2))))
        frame[6:12] = bytes([2, 0, 0, 0, 0, i])  # a source MAC per frame
        frames.append((1 + i % 3, bytes(frame)))
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    p4_log = logging.getLogger("emulator.log_msg")
    p4_log.addHandler(handler)
    p4_log.setLevel(logging.INFO)
    try:
        sw = SoftwareSwitch.from_json(BUILD / "deparser_externs.json")
        engine = sorted(o for port, frame in frames for o in sw.process(port, frame))
    finally:
        p4_log.removeHandler(handler)
    kind1 = sorted(("ingress_seen_t", (f[6:12].lstrip(b"\0"), b"\x01")) for _, f in frames if f[14] == 1)
    ours_digests = [(n, (v[0].to_bytes(6, "big").lstrip(b"\0"), bytes([v[1]]))) for n, v in sw.digests()]
    theirs_digests = []

    def setup(client):  # both digests sent within a millisecond (PI's sweep: every 100 ms or more)
        client.digest_configure("ingress_seen_t", max_timeout_ns=1_000_000, max_list_size=1)
        client.digest_configure("deparser_seen_t", max_timeout_ns=1_000_000, max_list_size=1)

    bmv2 = run_bmv2(
        tmp_path, "deparser_externs", setup, frames, len(engine), log_level="info",
        after=lambda client: theirs_digests.extend(client.digest_samples(len(kind1))),
    )  # fmt: skip
    log = (tmp_path / "bmv2" / "bmv2.log").read_text()
    theirs = sorted(re.findall(r"^\[[^]]*\] \[[^]]*\] \[I\] \[thread \d+\] (deparser.*)$", log, re.M))
    assert engine and bmv2 == engine
    assert len(lines) == 3 * len(engine) and theirs == sorted(lines)
    # the ingress digests only, on both: the deparser's is never sent
    assert sorted(ours_digests) == kind1 and sorted(theirs_digests) == kind1
