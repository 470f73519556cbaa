"""The batched worker path: frames built and parsed as rows of numpy buffers (wire.build_rows /
parse_rows), transports that move a batch per call (send_many / recv_into, natively over a raw socket),
and the protocol on top, which must behave exactly as the per-packet path does: the same frames on the
wire in the same order, the same counters, bit-identical sums."""

import ctypes
import socket
import threading

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

import contract
from contract.job import JobSpec
from harness.fake_switch import FakeSwitch
from harness.sim import SERVICE, SimJob, attach_workers, worker_endpoint
from host_agent import native, wire
from host_agent.clock import VirtualClock
from host_agent.layers import THC
from host_agent.protocol import WorkerProtocol, drive
from host_agent.transport import BatchIO, RawSocketTransport, copy_into
from tests.support.native import build_or_skip

TABLE = [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30]  # the default description's
JOB = 7
K, K16, F = contract.per_request(8), contract.per_request(16), contract.per_request(32)  # per request, 1 KiB cells
CELL = 8 * contract.WORDS  # bytes of a result's payload
NORMS = 8 * contract.NORM_WORDS  # bytes of a NORM result's payload
KEY = 0x5EED


def job_of(n: int, window: int, **spec) -> SimJob:
    return SimJob.plan(JobSpec.from_dict({"job_id": JOB, "workers": n, "window": window, "slots": window, **spec}))


class PerFrame:
    """A transport with only the per-packet interface (send one frame, recv a list of frames): the
    protocol then goes through BatchIO's emulation, i.e. the old per-packet path."""

    def __init__(self, transport):
        self.transport = transport

    def send(self, frame):
        self.transport.send(frame)

    def recv(self, timeout):
        return self.transport.recv(timeout)

    def deliver(self, frame):
        self.transport.deliver(frame)

    def next_event(self):
        return self.transport.next_event()

    def describe(self):
        return self.transport.describe()


class Wiretap:
    """Wraps an engine: every frame given to it, with its port, in order."""

    def __init__(self, engine):
        self.engine, self.frames = engine, []

    def process(self, port, frame):
        self.frames.append((port, bytes(frame)))
        return self.engine.process(port, frame)


# ---- building and parsing rows --------------------------------------------------------------------


@pytest.mark.parametrize("op", [wire.OP_NORM, wire.OP_THC, wire.OP_FIX32])
def test_build_rows_equals_frame_builder_byte_for_byte(op):
    rng = np.random.default_rng(op)
    builder = wire.FrameBuilder(worker_endpoint(3), SERVICE)
    n = 50
    slots = rng.integers(0, 1024, n)
    rounds = rng.integers(0, 2**33, n)  # beyond 32 bits: the round field wraps, as frame() does
    values = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    lane_bits = {wire.OP_NORM: 32, wire.OP_THC: 16, wire.OP_FIX32: 32}[op]
    padding = wire.padding(op, wire.KIND_REQUEST, lane_bits)  # 16-bit requests carry 256 bytes of it
    size = wire.payload_length(op, wire.KIND_REQUEST, lane_bits) - padding
    payloads = rng.integers(0, 256, (n, size), dtype=np.uint8) if size else None
    rows = wire.build_rows(
        builder, op, wire.KIND_REQUEST, JOB, 3, slots, rounds, values, payloads, lane_bits=lane_bits, key=KEY
    )
    for i in range(n):
        want = builder.frame(
            op, wire.KIND_REQUEST, JOB, 3, int(slots[i]), int(rounds[i]), int(values[i]),
            (payloads[i].tobytes() if size else b"") + bytes(padding), lane_bits=lane_bits, key=KEY,
        )  # fmt: skip
        assert rows[i].tobytes() == want


@pytest.mark.parametrize("case", [(wire.OP_NORM, 32), (wire.OP_THC, 8), (wire.OP_THC, 16), (wire.OP_FIX32, 32)])
def test_build_requests_in_c_equals_build_rows_byte_for_byte(case):
    op, lane_bits = case
    lib = native._declare(ctypes.CDLL(str(build_or_skip(native.build))))  # whatever THC_NATIVE says
    rng = np.random.default_rng(op * 100 + lane_bits)
    builder = wire.FrameBuilder(worker_endpoint(2), SERVICE)
    size = wire.payload_length(op, wire.KIND_REQUEST, lane_bits) - wire.padding(op, wire.KIND_REQUEST, lane_bits)
    for q0, n, window in [(0, 1, 8), (5, 40, 16), (2**32 * 3 - 7, 9, 1), (12345, 300, 1024), (2**40 + 3, 17, 65536)]:
        payloads = rng.integers(0, 256, (n, size), dtype=np.uint8)
        q = q0 + np.arange(n, dtype=np.int64)
        want = wire.build_rows(builder, op, wire.KIND_REQUEST, JOB, 2, q % window, q // window, None, payloads,
                               lane_bits=lane_bits, key=KEY)  # fmt: skip
        args = (builder, op, JOB, 2, q0, n, window, payloads, lane_bits, KEY)
        assert wire.build_requests(*args, lib).tobytes() == want.tobytes()
        assert wire.build_requests(*args, None).tobytes() == want.tobytes()  # the numpy fallback
    with pytest.raises(ValueError, match="cannot build"):
        wire.build_requests(builder, op, JOB, 2, -1, 2, 8, np.zeros((2, size), np.uint8), lane_bits, KEY, lib)


def _frames_to_parse(rng):
    back = wire.FrameBuilder(SERVICE, worker_endpoint(0))
    good16 = back.frame(
        wire.OP_THC, wire.KIND_RESULT, JOB, 0, 5, 9, payload=np.arange(K16, dtype=">u2").tobytes(), count=4,
        lane_bits=16, key=KEY,
    )  # fmt: skip
    good8 = back.frame(
        wire.OP_THC, wire.KIND_RESULT_RETX, JOB, 2, 1, 2**32 - 1, payload=bytes(CELL), count=2, lane_bits=8,
        key=0xFFFFFFFF,
    )  # fmt: skip
    norm = back.frame(wire.OP_NORM, wire.KIND_RESULT, 1, 0, 3, 4, payload=bytes(range(64)), count=4, lane_bits=32)
    fix = back.frame(wire.OP_FIX32, wire.KIND_RESULT, 1, 0, 3, 4, payload=bytes(CELL), count=4, lane_bits=32)
    request = wire.FrameBuilder(worker_endpoint(0), SERVICE).frame(
        wire.OP_THC, wire.KIND_REQUEST, 1, 0, 0, 0, 0, bytes(K // 2), lane_bits=8
    )
    truncated = bytearray(good16)
    truncated[16:18] = (1500).to_bytes(2, "big")  # IPv4 total length beyond the frame
    too_short_ip = bytearray(norm)
    too_short_ip[16:18] = (30).to_bytes(2, "big")  # IPv4 total length shorter than the THC header
    frames = [
        good16,
        good8,
        norm,
        norm + bytes(6),  # Ethernet padding is not payload
        fix,
        request,
        bytes(truncated),
        bytes(too_short_ip),
        good16[:61],  # one byte short of a THC header
        good16[:10],
        b"",
        good16[:-1],
        bytes(Ether() / ARP()),
        bytes(Ether() / IP() / UDP(sport=wire.THC_UDP_PORT, dport=53) / Raw(bytes(16))),
        bytes(Ether() / IP(options=b"\x01\x01\x01\x01") / UDP(dport=wire.THC_UDP_PORT) / THC()),
        bytes(Ether() / IP(flags="MF") / UDP(dport=wire.THC_UDP_PORT) / THC(kind=1)),
        bytes(Ether() / IP(frag=3) / UDP(dport=wire.THC_UDP_PORT) / THC(kind=1)),
        bytes(Ether() / IP(proto=6) / UDP(dport=wire.THC_UDP_PORT) / THC(kind=1)),
        bytes(Ether() / IP() / UDP(dport=wire.THC_UDP_PORT) / THC(version=1, kind=1)),  # the 64-coordinate format
    ]
    for _ in range(200):  # single-byte corruptions of good frames, anywhere in the header
        frame = bytearray((good16, good8, norm, fix)[rng.integers(0, 4)])
        frame[rng.integers(0, wire.PAYLOAD_OFFSET)] = rng.integers(0, 256)
        frames.append(bytes(frame))
    frames += [rng.integers(0, 256, rng.integers(0, 1200), dtype=np.uint8).tobytes() for _ in range(50)]
    return frames


def test_parse_rows_agrees_with_parse_frame_on_good_and_malformed_frames():
    rng = np.random.default_rng(1)
    frames = _frames_to_parse(rng)
    stride = 1200
    buf = np.full((len(frames), stride), 0x45, np.uint8)  # a reused buffer: stale bytes beyond each frame
    lengths = np.zeros(len(frames), np.int32)
    for i, frame in enumerate(frames):
        frame = frame[:stride]
        buf[i, : len(frame)] = np.frombuffer(frame, np.uint8)
        lengths[i] = len(frame)
    parsed = wire.parse_rows(buf, lengths)
    for i, frame in enumerate(frames):
        want = wire.parse_frame(frame[:stride])
        assert bool(parsed.valid[i]) == (want is not None), i
        if want is None:
            continue
        got = (
            parsed.op[i], parsed.kind[i], parsed.job_id[i], parsed.worker_id[i], parsed.slot[i], parsed.count[i],
            parsed.lane_bits[i], parsed.round[i], parsed.value[i], parsed.key[i],
        )  # fmt: skip
        assert tuple(int(x) for x in got) == tuple(want[:10]), i
        payload = buf[i, wire.PAYLOAD_OFFSET : wire.PAYLOAD_OFFSET + parsed.payload_len[i]].tobytes()
        assert payload == want.payload, i
    assert parsed.valid[:6].all() and not parsed.valid[6:19].any()


def test_batch_io_emulates_batches_over_a_per_frame_transport():
    class Queue:
        def __init__(self):
            self.sent, self.inbox = [], []

        def send(self, frame):
            self.sent.append(frame)

        def recv(self, timeout):
            out, self.inbox = self.inbox, []
            return out

    q = Queue()
    io = BatchIO(q, capacity=2, stride=64)
    assert not io.batched
    rows = np.arange(3 * 10, dtype=np.uint8).reshape(3, 10)
    io.send(rows)
    assert q.sent == [bytes(range(10)), bytes(range(10, 20)), bytes(range(20, 30))]
    q.inbox = [b"a" * 100, b"b" * 5, b"c" * 64]  # more than the capacity: the buffer grows; cut to the stride
    assert io.recv(0.0) == 3
    assert io.lengths[:3].tolist() == [64, 5, 64]
    assert io.buf[0, :64].tobytes() == b"a" * 64 and io.buf[1, :5].tobytes() == b"b" * 5
    assert io.recv(0.0) == 0


# ---- the protocol: the per-packet path against the batched one --------------------------------------


def tapped_workers(new_engine, *, loss, duplicate, jitter, window, seed, **options):
    """4 workers of a job on a loopback wire with `loss`, `duplicate` and `jitter` each way (a virtual
    clock), to an engine behind a Wiretap: (the tap, the workers, the clock)."""
    job = job_of(4, window)
    tap = Wiretap(new_engine(job))
    clock = VirtualClock()
    lw, workers = attach_workers(tap, job, loss_up=loss, loss_down=loss, seed=seed, clock=clock, **options)
    lw.duplicate_up = lw.duplicate_down = duplicate
    if jitter:
        lw.delay_up = lw.delay_down = 0.0005
        lw.service_time = 0.0001
        lw.jitter_up = lw.jitter_down = jitter
    return tap, workers, clock


def _run(new_engine, per_frame, numpy_take, *, seed, **scenario):
    tap, workers, clock = tapped_workers(new_engine, seed=seed, **scenario)
    for w in workers:
        if per_frame:
            w.transport = PerFrame(w.transport)
        if numpy_take:
            w._native = None
    rng = np.random.default_rng(seed)
    results, expected = [], []
    for lengths in ([K * 30 + 7], [5, K * 3], [10 * K]):
        data = [[rng.integers(0, 16, n, dtype=np.uint8) for n in lengths] for _ in workers]
        ops = [w.start_sum_indices(d) for w, d in zip(workers, data)]
        drive(workers)
        table = np.asarray(TABLE, np.int32)
        expected.append([sum(table[d[c]] for d in data) for c in range(len(lengths))])
        results.append([op.result() for op in ops])
        norms = [rng.uniform(0, 1, 40).astype(np.float32) for _ in workers]
        ops = [w.start_max(v) for w, v in zip(workers, norms)]
        drive(workers)
        expected.append(np.max(norms, axis=0))
        results.append([op.result() for op in ops])
        values = [[rng.integers(-(2**31), 2**31, 3 * F + 9, dtype=np.int64).astype(np.int32)] for _ in workers]
        ops = [w.start_sum_fix32(v) for w, v in zip(workers, values)]
        drive(workers)
        expected.append([np.sum([v[0] for v in values], axis=0, dtype=np.int32)])
        results.append([op.result() for op in ops])
    return tap.frames, [w.stats() for w in workers], clock(), results, expected


SCENARIOS = {
    "clean": dict(loss=0.0, duplicate=0.0, jitter=0.0, window=8, seed=1),
    "loss": dict(loss=0.1, duplicate=0.0, jitter=0.0, window=8, seed=2),
    "loss, duplicates, reordering": dict(loss=0.05, duplicate=0.05, jitter=0.002, window=16, seed=3),
    "heavy loss, no early retransmission": dict(
        loss=0.2, duplicate=0.1, jitter=0.001, window=4, seed=4, early_retransmit=False
    ),
    "timers only": dict(loss=0.1, duplicate=0.0, jitter=0.003, window=32, seed=5, dupthresh=0),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_per_packet_and_batched_paths_run_identically(new_engine, scenario):
    """Same seed: the same frames reach the switch in the same order, the runs end at the same virtual
    time with the same counters, and every result is bit-identical (and exact) — frames sent and received
    one by one with results sorted by numpy, in batches sorted by numpy, and in batches sorted in C."""
    per_packet = _run(new_engine, True, True, **SCENARIOS[scenario])
    runs = [_run(new_engine, False, True, **SCENARIOS[scenario])]
    if native.load() is not None:
        runs.append(_run(new_engine, False, False, **SCENARIOS[scenario]))
    for frames, stats, end, results, expected in runs:
        assert frames == per_packet[0]
        assert stats == per_packet[1]
        assert end == per_packet[2]
        for got, old, want in zip(results, per_packet[3], expected):
            for mine, theirs in zip(got, old):
                if isinstance(mine, np.ndarray):  # NORM: float32 maxima
                    assert mine.tobytes() == theirs.tobytes() == np.asarray(want, np.float32).tobytes()
                    continue
                assert mine[1] == theirs[1] == 4
                for a, b, w in zip(mine[0], theirs[0], want):
                    assert a.dtype == b.dtype == np.int32
                    assert a.tobytes() == b.tobytes() == np.asarray(w, np.int32).tobytes()
        if SCENARIOS[scenario]["loss"]:
            assert sum(s["retransmissions"] for s in stats) > 0  # there was loss to recover from


def _crafted(op, slot, rnd, count, lane_bits, payload=b"", value=0, job=JOB, kind=wire.KIND_RESULT, key=None):
    """A frame to worker 0 of job_of(2, 4) (its key by default)."""
    key = job_of(2, 4).spec.key if key is None else key
    return wire.FrameBuilder(SERVICE, worker_endpoint(0)).frame(
        op, kind, job, 0, slot, rnd, value, payload, count=count, lane_bits=lane_bits, key=key
    )


def native_helper_or_skip() -> None:
    """fastio.c built and loaded: skipped where no C compiler runs; a compile error fails the test (load()
    would only print it and let the transport batch in Python)."""
    build_or_skip(native.build)
    assert native.load() is not None, "host_agent/native built but did not load (THC_NATIVE=0 set?)"


@pytest.mark.parametrize("take", ["native", "numpy"])
@pytest.mark.parametrize("per_frame", [False, True], ids=["batched", "per-packet"])
def test_malformed_and_unfitting_results_in_one_batch_are_counted_not_stored(per_frame, take):
    """One receive batch holding garbage, short and truncated frames, results of another op, count or
    lane width, another job's or key, a stale round, and good results with copies before and after them:
    each is counted as the per-packet code counted it, only the good ones are stored, and the operation then
    completes with exact sums."""
    job = job_of(2, 4)
    engine = FakeSwitch()
    engine.add_job(job)
    _, (a, b) = attach_workers(engine, job, clock=VirtualClock())
    if per_frame:
        a.transport = PerFrame(a.transport)
    if take == "numpy":
        a._native = None
    else:
        native_helper_or_skip()
    op_a = a.start_sum_indices([np.full(K * 3, 3, np.uint8)])  # requests 0..2: slots 0..2, round 0
    a.pump()
    good0 = _crafted(wire.OP_THC, 0, 0, 2, 8, bytes([TABLE[3] + TABLE[5]]) * K)
    good1 = _crafted(wire.OP_THC, 1, 0, 2, 8, bytes([TABLE[3] + TABLE[5]]) * K)
    truncated = bytearray(good1)
    truncated[16:18] = (1500).to_bytes(2, "big")
    batch = [
        b"\x00" * 20,  # ignored: too short
        bytes(truncated),  # ignored: IPv4 length beyond the frame
        bytes(Ether() / ARP()),  # ignored
        _crafted(wire.OP_THC, 0, 0, 2, 8, bytes(CELL), job=JOB + 1),  # ignored: another job
        _crafted(wire.OP_THC, 0, 0, 0, 8, bytes(K // 2), kind=wire.KIND_REQUEST),  # ignored: a request
        _crafted(wire.OP_THC, 0, 0, 2, 8, bytes(CELL), key=KEY),  # another key: counted apart
        _crafted(wire.OP_THC, 0, 5, 2, 8, bytes(CELL)),  # stale: never requested
        _crafted(wire.OP_FIX32, 0, 0, 2, 32, bytes(CELL)),  # rejected: another op, before the good one
        _crafted(wire.OP_THC, 0, 0, 3, 8, bytes(CELL)),  # rejected: count > n
        good0,  # accepted
        good0,  # duplicate
        _crafted(wire.OP_NORM, 0, 0, 2, 32, bytes(NORMS)),  # after slot 0's answer: a duplicate, as before
        _crafted(wire.OP_THC, 1, 0, 2, 16, bytes(CELL)),  # rejected: not the job's lane width
        _crafted(wire.OP_THC, 1, 0, 2, 8, bytes(CELL // 2)),  # rejected: half a cell
        good1[:-3],  # ignored: cut short
        good1,  # accepted
    ]
    for frame in batch:
        a.transport.deliver(frame)
    a.pump()
    stats = a.stats()
    kinds = ("ignored_frames", "bad_key_results", "stale_results", "rejected_results", "duplicate_results")
    assert {k: stats[k] for k in kinds} == dict(
        ignored_frames=6, bad_key_results=1, stale_results=1, rejected_results=4, duplicate_results=2
    )
    assert stats["results"] == 2 and stats["packets_received"] == len(batch) and not op_a.complete
    b.start_sum_indices([np.full(K * 3, 5, np.uint8)])
    drive([a, b])
    sums, count = op_a.result()
    assert count == 2 and sums[0].tolist() == [TABLE[3] + TABLE[5]] * (3 * K)


def _twin_workers(op_kind, lane_bits):
    """Two identical workers (one job, window 8) with an operation of `op_kind` in flight: 24 requests,
    the first 8 sent, the first 3 answered."""
    job = job_of(4, 8, granularity=30 if lane_bits == 8 else 100)
    assert job.spec.lane_bits == lane_bits
    twins = []
    for _ in range(2):
        engine = FakeSwitch()
        engine.add_job(job)
        _, (w, *_) = attach_workers(engine, job, clock=VirtualClock())
        if op_kind == wire.OP_NORM:
            op = w.start_max(np.ones(24 * wire.NORMS_PER_REQUEST, np.float32))
        elif op_kind == wire.OP_THC:
            op = w.start_sum_indices([np.zeros(job.spec.coords_per_request * 24, np.uint8)])
        else:
            op = w.start_sum_fix32([np.zeros(F * 24, np.int32)])
        w.pump()  # the first window goes out (the other workers never send: nothing completes)
        w.transport.recv(0.0)
        op.done[:3] = True
        op.outstanding -= 3
        twins.append((w, op))
    return twins


@pytest.mark.parametrize("op_kind", [wire.OP_NORM, wire.OP_THC, wire.OP_FIX32])
def test_native_and_numpy_take_sort_random_batches_alike(op_kind):
    """Batches of results of every kind of fit and misfit, duplicates, other jobs, stale rounds and
    corrupted frames: the C take and the numpy take accept the same rows, count the same, store the same."""
    native_helper_or_skip()
    rng = np.random.default_rng(op_kind)
    back = wire.FrameBuilder(SERVICE, worker_endpoint(0))
    kinds = ("ignored_frames", "bad_key_results", "stale_results", "duplicate_results", "rejected_results")
    seen = dict.fromkeys(("accepted", *kinds), 0)
    for trial in range(40):
        lane_bits = int(rng.choice([8, 16]))
        (a, op_a), (b, op_b) = _twin_workers(op_kind, lane_bits)
        b._native = None
        frames = []
        for _ in range(int(rng.integers(1, 60))):
            q = int(rng.integers(0, 30))
            op = int(rng.choice([op_kind, op_kind, op_kind, wire.OP_NORM, wire.OP_THC, wire.OP_FIX32]))
            lanes = {wire.OP_NORM: 32, wire.OP_FIX32: 32, wire.OP_THC: lane_bits}[op]
            if rng.random() < 0.1:
                lanes = int(rng.choice([0, 8, 16, 32, 12]))
            size = CELL if op != wire.OP_NORM else NORMS
            if rng.random() < 0.1:
                size = int(rng.choice([0, K // 2, NORMS, CELL - 8, CELL + 8, int(rng.integers(0, 1100))]))
            key = a.key if rng.random() < 0.9 else int(rng.integers(0, 2**32))
            frame = back.frame(
                op, int(rng.choice([1, 1, 1, 2, 0])), JOB if rng.random() < 0.9 else JOB + 1, 0, q % 8, q // 8,
                int(rng.integers(0, 2**32)), rng.integers(0, 256, size, dtype=np.uint8).tobytes(),
                count=int(rng.choice([4, 4, 4, 0, 3, 5])), lane_bits=lanes, key=key,
            )  # fmt: skip
            if rng.random() < 0.05:
                frame = frame[: int(rng.integers(0, len(frame)))]
            frames.append(frame)
        io = BatchIO(None, capacity=len(frames))
        copy_into(frames, io.buf, io.lengths)
        rows_a, i_a = a._native.take(op_a, io, len(frames), a.next_request)
        rows_b, i_b = b._sorter.take(op_b, wire.parse_rows(io.buf, io.lengths), b.next_request)
        assert rows_a.tolist() == rows_b.tolist() and i_a.tolist() == i_b.tolist(), trial
        assert a.stats() == b.stats(), trial
        assert op_a.count == op_b.count, trial
        assert op_a.sums.tobytes() == op_b.sums.tobytes() and op_a.counts.tobytes() == op_b.counts.tobytes()
        assert op_a.done.tolist() == op_b.done.tolist()  # the take stores; the bookkeeping comes after
        seen["accepted"] += len(i_a)
        for kind in kinds:
            seen[kind] += a.stats()[kind]
    assert all(seen.values()), seen  # every way of sorting a result happened


# ---- the raw socket: native batches over a veth pair -------------------------------------------------


class LossyEcho:
    """The contract's fake switch (a one-worker job) behind the other end of a veth pair, in a thread;
    it drops the first copy of every 7th request and the first result of every 11th (and answers every
    QUERY)."""

    def __init__(self, iface, job):
        self.switch = FakeSwitch()
        self.switch.add_job(job)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.bind((iface, 0))
        self.sock.settimeout(0.05)
        self.seen: dict[tuple[int, int], int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve)

    def serve(self):
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(2048)
            except TimeoutError:
                continue
            p = wire.parse_frame(frame)
            if p is None or p.kind not in (wire.KIND_REQUEST, wire.KIND_QUERY):
                continue
            if p.kind == wire.KIND_QUERY:  # the worker asks before it sends a request again: always answered
                for _, out in self.switch.process(1, frame):
                    self.sock.send(out)
                continue
            key = (p.slot, p.round)
            copies = self.seen[key] = self.seen.get(key, 0) + 1
            number = p.round * 8 + p.slot
            if copies == 1 and number % 7 == 3:
                continue
            for _, out in self.switch.process(1, frame):
                if copies == 1 and number % 11 == 5:
                    continue
                self.sock.send(out)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("python_loop", [False, True], ids=["native", "python-loop"])
def test_raw_socket_batches_recover_losses_over_a_veth_pair(veth, python_loop):
    a, b = veth
    job = SimJob.plan(JobSpec(job_id=9, workers=1, window=8, slots=8))
    me = worker_endpoint(0)
    with LossyEcho(b, job), RawSocketTransport(a, src_ip=None) as transport:
        if python_loop:
            transport._native = None  # as without a C compiler
        else:
            native_helper_or_skip()
        worker = WorkerProtocol(
            transport, wire.FrameBuilder(me, SERVICE), job.spec, 0, timeout=0.02, min_timeout=0.002, deadline=20.0
        )
        assert worker._io.batched
        rng = np.random.default_rng(0)
        data = [rng.integers(0, 16, K * 40 + 3, dtype=np.uint8), rng.integers(0, 16, 100, dtype=np.uint8)]
        sums, count = worker.all_sum_indices(data)
        assert count == 1
        for got, want in zip(sums, data):
            np.testing.assert_array_equal(got, np.asarray(TABLE)[want])
        norms = rng.uniform(0, 1, 20).astype(np.float32)
        assert worker.all_max(norms).tobytes() == norms.tobytes()
        stats = worker.stats()
        assert stats["results"] == stats["requests"] == 41 + 1 + 2  # 20 norms: two NORM requests
        assert stats["retransmissions"] > 0  # the dropped requests and results were recovered


# ---- the native helper's build ------------------------------------------------------------------------


def test_a_missing_compiler_names_the_debian_package(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("THC_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, no gcc
    with pytest.raises(native.NativeUnavailable, match=r"Debian package gcc"):
        native.build()
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native.NativeUnavailable, match=r"Debian package gcc"):
        native.build()
    assert native.load() is None  # the transport batches in Python instead, and says so in one line
    notice = capsys.readouterr().err.strip().splitlines()
    assert len(notice) == 1 and "gcc" in notice[0]
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setenv("THC_NATIVE", "1")  # required: a clear error instead
    with pytest.raises(native.NativeUnavailable, match=r"gcc"):
        native.load()
