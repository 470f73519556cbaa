"""THC headers: the fast codec (wire.py) against the Scapy layers (layers.py), dissection of captures, and
the raw-socket transport's kernel filter over a veth pair."""

import socket
import time

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import rdpcap, wrpcap

import contract
from host_agent import wire
from host_agent.layers import THC, THCFix32, THCIndices, THCNorms, THCResult8, THCResult16

SRC = wire.Endpoint("02:00:00:00:01:02", "10.0.1.3")
DST = wire.Endpoint("02:00:00:00:00:fe", "10.0.0.254")
W = contract.WORDS  # the default build's cell: 128 words, 1 KiB
KEY = 0xC0FFEE42


def scapy_frame(thc, payload=None):
    pkt = (
        Ether(src=SRC.mac, dst=DST.mac)
        / IP(src=SRC.ip, dst=DST.ip, id=0, flags="DF", ttl=64)
        / UDP(sport=wire.THC_UDP_PORT, dport=wire.THC_UDP_PORT, chksum=0)
        / thc
    )
    return bytes(pkt / payload if payload is not None else pkt)


# (header fields, payload layer, frame length): what one 1 KiB cell's request or result is on the wire
CASES = {
    "norm request": (
        dict(op=wire.OP_NORM, kind=wire.KIND_REQUEST, lane_bits=32),
        THCNorms(norms=[wire.float_bits(2.5 * i) for i in range(wire.NORMS_PER_REQUEST)]),
        62 + 8 * contract.NORM_WORDS,
    ),
    "thc request, 8-bit lanes": (
        dict(op=wire.OP_THC, kind=wire.KIND_REQUEST, lane_bits=8),
        THCIndices(idx=[i % 16 for i in range(8 * W)]),
        62 + 4 * W,
    ),
    "thc request, 16-bit lanes": (
        dict(op=wire.OP_THC, kind=wire.KIND_REQUEST, lane_bits=16),
        THCIndices(idx=[(i * 7) % 16 for i in range(4 * W)]),
        62 + 2 * W + contract.PAD16_BYTES,  # padded: its result may outgrow it by 512 bytes at most
    ),
    "fix32 request": (
        dict(op=wire.OP_FIX32, kind=wire.KIND_REQUEST, lane_bits=32),
        THCFix32(values=[(-1) ** i * i * 1000 for i in range(2 * W)]),
        62 + 8 * W,
    ),
    "thc release": (dict(op=wire.OP_THC, kind=wire.KIND_RELEASE, lane_bits=16), None, 62 + 512),
    "norm release": (dict(op=wire.OP_NORM, kind=wire.KIND_RELEASE, lane_bits=32), None, 62),
    "thc result 8": (
        dict(op=wire.OP_THC, kind=wire.KIND_RESULT, count=4, lane_bits=8),
        THCResult8(sums=[i % 256 for i in range(8 * W)]),
        62 + 8 * W,
    ),
    "thc result 16": (
        dict(op=wire.OP_THC, kind=wire.KIND_RESULT_RETX, count=9, lane_bits=16),
        THCResult16(sums=[100 * i for i in range(4 * W)]),
        62 + 8 * W,
    ),
    "thc partial": (
        dict(op=wire.OP_THC, kind=wire.KIND_PARTIAL, count=3, lane_bits=16),
        THCResult16(sums=[65535 - i for i in range(4 * W)]),
        62 + 8 * W,
    ),
    "fix32 result": (
        dict(op=wire.OP_FIX32, kind=wire.KIND_RESULT, count=2, lane_bits=32),
        THCFix32(values=[-(2**31), 2**31 - 1] + list(range(2 - 2 * W, 0))),
        62 + 8 * W,
    ),
    "norm result": (
        dict(op=wire.OP_NORM, kind=wire.KIND_RESULT, count=4, lane_bits=32),
        THCNorms(norms=[wire.float_bits(9.5)] + [0] * (wire.NORMS_PER_REQUEST - 1)),
        62 + 8 * contract.NORM_WORDS,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_fast_builder_matches_scapy_byte_for_byte(case):
    fields, payload, size = CASES[case]
    header = dict(job_id=5, worker_id=2, slot=513, round=0xDEADBEEF, key=KEY, **fields)
    padding = bytes(wire.padding(fields["op"], fields["kind"], fields.get("lane_bits", 0)))
    layers = [layer for layer in (payload, Raw(padding) if padding else None) if layer is not None]
    want = scapy_frame(THC(**header), layers[0] / layers[1] if len(layers) == 2 else (layers or [None])[0])
    builder = wire.FrameBuilder(SRC, DST)
    got = builder.frame(
        header["op"],
        header["kind"],
        5,
        2,
        513,
        0xDEADBEEF,
        header.get("value", 0),
        (bytes(payload) if payload is not None else b"") + padding,
        header.get("count", 0),
        header.get("lane_bits", 0),
        KEY,
    )
    assert got == want
    assert len(got) == size <= 14 + contract.MTU  # every frame of the default build fits the links' MTU
    lane_bits = fields.get("lane_bits", 0)
    assert len(got) - wire.PAYLOAD_OFFSET == wire.payload_length(fields["op"], fields["kind"], lane_bits)
    assert wire.parse_frame(got).key == KEY
    dissected = Ether(got)
    assert bytes(dissected) == got and dissected[THC].key == KEY
    if payload is not None:
        assert type(dissected[THC].payload) is type(payload)


@pytest.mark.parametrize("words", contract.WORDS_VARIANTS)
def test_payload_lengths_follow_the_cell_size(words):
    """A request carries what one cell of `words` words holds, a result the cell's words: the table of
    p4/README.md, for the default build and the variants."""
    assert wire.payload_length(wire.OP_THC, wire.KIND_REQUEST, 8, words) == 4 * words  # 8 * words indices
    # 4 * words indices, and the padding that keeps a result within simple_switch's 512 bytes of headroom
    assert wire.payload_length(wire.OP_THC, wire.KIND_REQUEST, 16, words) == 2 * words + contract.PAD16_BYTES
    assert wire.payload_length(wire.OP_FIX32, wire.KIND_REQUEST, 32, words) == 8 * words
    for op in (wire.OP_THC, wire.OP_FIX32):
        for kind in (wire.KIND_RESULT, wire.KIND_RESULT_RETX, wire.KIND_PARTIAL):
            assert wire.payload_length(op, kind, 0, words) == 8 * words
        assert wire.payload_length(op, wire.KIND_RELEASE, 32 if op == wire.OP_FIX32 else 8, words) == 512
    # NORM: NORM_WORDS words of norms whatever the cell size; a RELEASE's 64-byte result needs no padding
    assert wire.payload_length(wire.OP_NORM, wire.KIND_REQUEST, 32, words) == 8 * contract.NORM_WORDS
    assert wire.payload_length(wire.OP_NORM, wire.KIND_RELEASE, 32, words) == 0
    assert wire.payload_length(wire.OP_NORM, wire.KIND_RESULT, 32, words) == 8 * contract.NORM_WORDS
    for op, lanes in ((wire.OP_THC, 32), (wire.OP_THC, 0), (wire.OP_FIX32, 8), (wire.OP_NORM, 8), (wire.OP_NORM, 0)):
        with pytest.raises(ValueError, match="LANE_MISMATCH"):
            wire.payload_length(op, wire.KIND_REQUEST, lanes, words)


def test_ipv4_checksum_is_what_scapy_computes():
    frame = wire.FrameBuilder(SRC, DST).frame(wire.OP_THC, 0, 1, 1, 1, 1, payload=bytes(512), lane_bits=8)
    pkt = Ether(frame)
    stored = pkt[IP].chksum
    del pkt[IP].chksum
    assert Ether(bytes(pkt))[IP].chksum == stored
    assert pkt[UDP].chksum == 0


def test_nibbles_first_coordinate_high():
    assert wire.pack_nibbles(np.array([1, 2, 15, 0, 7], np.uint8)) == bytes([0x12, 0xF0, 0x70])
    assert bytes(THCIndices(idx=[1, 2, 15])) == bytes([0x12, 0xF0])  # as many as given, an odd one padded
    assert len(bytes(THCIndices())) == 4 * W  # by default an 8-bit-lane request of the default build
    assert wire.unpack_nibbles(bytes([0x12, 0xF0]), 3).tolist() == [1, 2, 15]


def test_capture_dissects_thc_fields_and_payload_by_op_kind_lanes(tmp_path):
    builder = wire.FrameBuilder(SRC, DST)
    back = wire.FrameBuilder(DST, SRC)
    k8, k16 = 8 * W, 4 * W
    frames = [
        builder.frame(
            wire.OP_NORM,
            wire.KIND_REQUEST,
            3,
            1,
            7,
            12,
            payload=np.float32([1.5] * wire.NORMS_PER_REQUEST).view(np.uint32).astype(">u4").tobytes(),
            lane_bits=32,
            key=KEY,
        )
        + bytes(2),
        builder.frame(
            wire.OP_THC, wire.KIND_REQUEST, 3, 1, 7, 12, payload=wire.pack_nibbles(np.arange(k8) % 16), lane_bits=8
        ),
        back.frame(
            wire.OP_THC, wire.KIND_RESULT, 3, 1, 7, 12, payload=bytes(range(256)) * (k8 // 256), count=4, lane_bits=8
        ),
        back.frame(
            wire.OP_THC,
            wire.KIND_RESULT,
            3,
            1,
            7,
            12,
            payload=np.arange(k16, dtype=">u2").tobytes(),
            count=4,
            lane_bits=16,
        ),
        builder.frame(
            wire.OP_FIX32,
            wire.KIND_REQUEST,
            3,
            1,
            7,
            12,
            payload=np.arange(-W, W, dtype=">i4").tobytes(),
            lane_bits=32,
        ),
        builder.frame(wire.OP_THC, wire.KIND_REQUEST, 3, 1, 7, 12, payload=bytes(2 * W), lane_bits=32),  # refused
    ]
    path = tmp_path / "thc.pcap"
    wrpcap(str(path), [Ether(f) for f in frames])
    pkts = rdpcap(str(path))
    norm, idx, res8, res16, fix, mismatch = pkts
    assert (norm[THC].op, norm[THC].kind, norm[THC].job_id, norm[THC].worker_id, norm[THC].slot, norm[THC].round) == (
        wire.OP_NORM,
        wire.KIND_REQUEST,
        3,
        1,
        7,
        12,
    )
    assert norm[THCNorms].norms == [wire.float_bits(1.5)] * wire.NORMS_PER_REQUEST and norm[THC].key == KEY
    assert idx[THCIndices].idx == [i % 16 for i in range(k8)]
    assert res8[THCResult8].sums == list(range(256)) * (k8 // 256)
    assert res16[THCResult16].sums == list(range(k16))
    assert fix[THCFix32].values == list(range(-W, W))
    assert THCResult16 not in res8 and THCResult8 not in res16
    assert THCIndices not in mismatch and Raw in mismatch  # lane_bits the parser does not take: not dissected
    shown = res16.show(dump=True)
    for name in (
        "op",
        "kind",
        "job_id",
        "worker_id",
        "slot",
        "count",
        "lane_bits",
        "round",
        "value",
        "key",
        "RESULT",
        "16-bit",
    ):
        assert name in shown


def test_parse_frame_rejects_what_is_not_a_thc_frame():
    good = wire.FrameBuilder(SRC, DST).frame(wire.OP_NORM, wire.KIND_RESULT, 1, 2, 3, 4, 99, count=4, key=KEY)
    assert wire.parse_frame(good) == wire.ThcFrame(wire.OP_NORM, wire.KIND_RESULT, 1, 2, 3, 4, 0, 4, 99, KEY, b"")
    assert wire.parse_frame(good + bytes(2)).payload == b""  # Ethernet padding is not payload
    other_port = bytes(Ether() / IP() / UDP(sport=wire.THC_UDP_PORT, dport=53) / Raw(bytes(16)))
    with_options = bytes(Ether() / IP(options=b"\x01\x01\x01\x01") / UDP(dport=wire.THC_UDP_PORT) / THC())
    fragment = bytes(Ether() / IP(flags="MF") / UDP(dport=wire.THC_UDP_PORT) / THC(kind=1))
    old_version = bytes(Ether() / IP() / UDP(dport=wire.THC_UDP_PORT) / THC(version=1, kind=1))
    for frame in (other_port, with_options, fragment, old_version, bytes(Ether() / ARP()), good[:61], good[:-1]):
        assert wire.parse_frame(frame) is None
    truncated = bytearray(good)
    truncated[16:18] = (200).to_bytes(2, "big")  # IPv4 total length beyond the frame
    assert wire.parse_frame(bytes(truncated)) is None


# ---- the raw socket over a veth pair -------------------------------------------------------------


def test_raw_socket_sends_frames_and_receives_only_thc_results(veth):
    from host_agent.transport import RawSocketTransport

    a, b = veth
    peer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    peer.bind((b, 0))
    peer.settimeout(0.5)
    with RawSocketTransport(a) as transport:
        request = wire.FrameBuilder(SRC, DST).frame(
            wire.OP_THC, wire.KIND_REQUEST, 1, 2, 3, 4, payload=bytes(range(256)) * 2, lane_bits=8, key=KEY
        )
        seen, deadline = None, time.monotonic() + 10
        while seen is None and time.monotonic() < deadline:
            transport.send(request)
            try:
                frame = peer.recv(2048)
            except TimeoutError:
                continue
            if wire.parse_frame(frame) is not None:  # skip unrelated frames the kernel may send
                seen = frame
        assert seen == request

        back = wire.FrameBuilder(DST, SRC)
        result = back.frame(
            wire.OP_THC, wire.KIND_RESULT, 1, 2, 3, 4, payload=bytes(8 * W), count=2, lane_bits=16, key=KEY
        )
        noise = [
            bytes(Ether(dst=SRC.mac) / ARP()),
            bytes(Ether(dst=SRC.mac) / IP(dst=SRC.ip) / UDP(dport=53) / Raw(bytes(40))),
            back.frame(wire.OP_THC, wire.KIND_REQUEST, 1, 2, 3, 4, payload=bytes(256), lane_bits=16),  # not for us
            bytes(Ether(dst=SRC.mac) / IP(dst=SRC.ip, flags="MF") / UDP(dport=wire.THC_UDP_PORT) / THC(kind=1)),
        ]
        for frame in noise + [result]:
            peer.send(frame)
        got: list[bytes] = []
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            got += transport.recv(0.5)
        got += transport.recv(0.0)
        assert got == [result]
        assert transport.recv(0.0) == []
    peer.close()


def test_switch_aggregator_open_over_a_real_interface(veth):
    """SwitchAggregator.open on one end of a veth pair; the contract's fake switch on the other end."""
    import threading

    import torch

    from contract.job import JobSpec
    from harness.fake_switch import FakeSwitch
    from harness.sim import SERVICE, SimJob, worker_endpoint
    from host_agent.aggregator import SwitchAggregator
    from thc.config import THCConfig

    a, b = veth
    job = SimJob.plan(JobSpec(9, 1, THCConfig(bits=3, granularity=64, table="uniform"), window=8, slots=8))
    table = list(job.job.table)
    switch = FakeSwitch()
    switch.add_job(job)
    stop = threading.Event()
    side = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    side.bind((b, 0))
    side.settimeout(0.05)

    def serve():
        while not stop.is_set():
            try:
                frame = side.recv(2048)
            except TimeoutError:
                continue
            for _, out in switch.process(1, frame):
                side.send(out)

    server = threading.Thread(target=serve)
    server.start()
    me = worker_endpoint(0)
    try:
        with SwitchAggregator.open(
            a, job.spec, 0, SERVICE.ip, SERVICE.mac, me.ip, me.mac, timeout=0.05, deadline=10.0
        ) as agg:
            rng = np.random.default_rng(0)
            idx = [rng.integers(0, 8, 16 * 1024, dtype=np.uint8), rng.integers(0, 8, 10, dtype=np.uint8)]
            sums, count = agg.all_sum_table_values(idx, table)
            assert count == 1
            for got, want in zip(sums, idx):
                np.testing.assert_array_equal(got, np.asarray(table)[want])
            norms = torch.tensor([[3.0, 0.5]])
            assert torch.equal(agg.all_max(norms), norms)
            stats = agg.stats()
            assert stats["results"] == stats["requests"] == 16 + 1 + 1  # both norms in one NORM request
    finally:
        stop.set()
        server.join(5)
        side.close()
