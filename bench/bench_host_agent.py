"""Host-agent figures: frame building and parsing, a raw socket on a veth pair, and the worker against a switch.

    .venv/bin/python bench/bench_host_agent.py [--quick] [--engine p4|fake] [--no-veth] [--worker-only]
        [--before TREE]

The worker side is timed against a switch that costs next to nothing (harness/echo_switch.c), per-packet
transport against the batched one, so its own cost shows; the protocol's goodput through an in-process switch
completes the picture. Every job is a default JobSpec of 4 workers. Run it with PYTHONPATH=. so this tree's
host_agent is the one imported; `--before TREE` also times another tree's worker (same wire format and API).
The veth parts need root and a C compiler, make veth pairs thcB<pid>a/b and thcW<pid>a/b and delete them at
the end. Figures only; nothing here asserts a speed."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/bench_host_agent.py`

from bench import record as bench_record  # noqa: E402
from contract.job import JobSpec  # noqa: E402
from harness.fake_switch import FakeSwitch  # noqa: E402
from harness.sim import SERVICE, SimJob, attach_workers, program_engine, worker_endpoint  # noqa: E402
from host_agent import wire  # noqa: E402
from host_agent.protocol import drive  # noqa: E402
from native_build import native_off  # noqa: E402
from usage import provenance
from usage.args import OneLineParser, folder

ROOT = Path(__file__).resolve().parents[1]
N_WORKERS = 4


def job_for(window: int = 128) -> SimJob:
    """The benchmarks' job: 4 workers, the default codec and cells, `window` requests in flight (and as
    many slots, at least 256), planned as thc-ctl plans it (with a key the switch and workers share)."""
    return SimJob.plan(JobSpec(job_id=1, workers=N_WORKERS, window=window))


def job_table(job: SimJob) -> np.ndarray:
    return np.asarray(job.spec.table_values(), np.int32)


def frame_sizes(spec: JobSpec) -> tuple[int, int, int]:
    """A THC request's lanes, its payload bytes and its result's, as the job frames them."""
    lanes = wire.op_lane_bits(wire.OP_THC, spec.lane_bits)
    return (
        lanes,
        wire.payload_length(wire.OP_THC, wire.KIND_REQUEST, lanes, spec.words),
        wire.payload_length(wire.OP_THC, wire.KIND_RESULT, lanes, spec.words),
    )


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s" if seconds > 0 else "inf"


def bench_codec(n: int) -> None:
    spec = job_for().spec
    k, key = spec.coords_per_request, spec.key
    lanes, request_bytes, result_bytes = frame_sizes(spec)
    src, dst = worker_endpoint(0), SERVICE
    builder = wire.FrameBuilder(src, dst)
    m = min(n, 4096)  # distinct requests, used in turn: n of them would be n * 512 bytes of indices
    packed = wire.pack_nibbles(np.random.default_rng(0).integers(0, 16, m * k, dtype=np.uint8))
    t0 = time.perf_counter()
    for q in range(n):
        r = q % m
        payload = packed[r * request_bytes : (r + 1) * request_bytes]
        builder.frame(wire.OP_THC, wire.KIND_REQUEST, 1, 0, q & 255, q >> 8, 0, payload, lane_bits=lanes, key=key)
    t_build = time.perf_counter() - t0

    back = wire.FrameBuilder(dst, src)
    result = back.frame(
        wire.OP_THC, wire.KIND_RESULT, 1, 0, 3, 4, payload=bytes(result_bytes), count=N_WORKERS,
        lane_bits=lanes, key=key,
    )  # fmt: skip
    dtype = wire.LANE_DTYPES[lanes]
    out = np.zeros(m * k, np.int32)
    t0 = time.perf_counter()
    for q in range(n):
        r = wire.parse_frame(result)
        at = (q % m) * k
        out[at : at + k] = np.frombuffer(r.payload, dtype)
    t_parse = time.perf_counter() - t0

    coords = min(n, 20_000) * k
    idx = np.random.default_rng(1).integers(0, 16, coords, dtype=np.uint8)
    t0 = time.perf_counter()
    wire.pack_nibbles(idx)
    t_pack = time.perf_counter() - t0

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from host_agent.layers import THC, THCIndices

    m = min(n, 500)
    t0 = time.perf_counter()
    for q in range(m):
        bytes(
            Ether(src=src.mac, dst=dst.mac)
            / IP(src=src.ip, dst=dst.ip)
            / UDP()
            / THC(op=2, job_id=1, slot=q & 255, round=q >> 8, lane_bits=lanes, key=key)
            / THCIndices(idx=[1] * k)
        )
    t_scapy = time.perf_counter() - t0

    print(f"codec (one core, Python), K = {k:,} coordinates a request, {lanes}-bit lanes:")
    print(f"  build THC request frames   {rate(n, t_build):>14}  ({t_build / n * 1e6:.2f} µs/frame)")
    print(f"  parse + store {lanes}-bit result {rate(n, t_parse):>13}  ({t_parse / n * 1e6:.2f} µs/frame)")
    print(f"  pack 4-bit indices (numpy) {rate(coords, t_pack):>14} coordinates")
    print(f"  Scapy build, for reference {rate(m, t_scapy):>14}")


# ---- raw sockets over a veth pair ------------------------------------------------------------------


def _blast(iface: str, frame: bytes, n: int, ready, go) -> None:
    """Child process: send `n` copies of `frame` on `iface` as fast as possible."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind((iface, 0))
    ready.set()
    go.wait()
    send = s.send
    for _ in range(n):
        try:
            send(frame)
        except OSError:
            pass
    s.close()


def bench_veth(n: int) -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("raw socket over veth: skipped (needs root and iproute2)")
        return
    from host_agent.transport import RawSocketTransport

    a, b = f"thcB{os.getpid() % 100000}a", f"thcB{os.getpid() % 100000}b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        for dev in (a, b):
            subprocess.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"], capture_output=True)
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        src, dst = worker_endpoint(0), SERVICE
        spec = job_for().spec
        lanes, request_bytes, result_bytes = frame_sizes(spec)
        request = wire.FrameBuilder(src, dst).frame(
            wire.OP_THC, wire.KIND_REQUEST, 1, 0, 0, 0, payload=bytes(request_bytes), lane_bits=lanes, key=spec.key
        )
        result = wire.FrameBuilder(dst, src).frame(
            wire.OP_THC, wire.KIND_RESULT, 1, 0, 0, 0, payload=bytes(result_bytes), count=N_WORKERS,
            lane_bits=lanes, key=spec.key,
        )  # fmt: skip
        with RawSocketTransport(a) as transport:
            t0 = time.perf_counter()
            for _ in range(n):
                transport.send(request)
            t_send = time.perf_counter() - t0

            ctx = multiprocessing.get_context("fork")
            ready, go = ctx.Event(), ctx.Event()
            child = ctx.Process(target=_blast, args=(b, result, n, ready, go))
            child.start()
            ready.wait(10)
            transport.recv(0.0)  # drain anything left over
            got, first, last = 0, None, None
            go.set()
            while True:
                frames = transport.recv(0.5)
                if not frames:
                    break
                now = time.perf_counter()
                first = first or now
                last = now
                got += len(frames)
            child.join(10)
        print(f"raw AF_PACKET socket over a veth pair ({a}/{b}):")
        print(f"  send {len(request)}-byte THC requests {rate(n, t_send):>13}")
        if got and last > first:
            lost = f"; the other {n - got:,} overflowed the veth backlog or the socket buffer" if got < n else ""
            print(
                f"  receive {len(result)}-byte results {rate(got, last - first):>13}  (sent by another process; "
                f"{got:,} of {n:,} arrived{lost})"
            )
        else:
            print(f"  receive: {got} frames arrived")
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)


# ---- the worker side alone ------------------------------------------------------------------------


class EchoSwitch:
    """A switch stand-in that costs next to nothing, so the worker's own cost shows: every request is
    answered at once with the result that all n workers of the job sending the same request would get
    (count n, sums n·table[index] in the job's lanes, a NORM request's own norms as the maxima), computed with numpy for
    everything sent since the last recv; results carry the request's key. This class has only the
    per-packet interface (send one bytes, recv a list of bytes); BatchedEchoSwitch adds send_many /
    recv_into (rows of a numpy buffer)."""

    def __init__(self, job: SimJob, worker_id: int = 0):
        spec = job.spec
        self.n, self.lane_bits = spec.workers, spec.lane_bits
        self.table = job_table(job).astype(np.int64)
        builder = wire.FrameBuilder(SERVICE, worker_endpoint(worker_id))
        self._templates = {}
        for op in (wire.OP_NORM, wire.OP_THC, wire.OP_FIX32):
            lanes = wire.op_lane_bits(op, spec.lane_bits)
            size = wire.payload_length(op, wire.KIND_RESULT, lanes, spec.words)
            frame = builder.frame(
                op, wire.KIND_RESULT, job.job_id, worker_id, 0, 0, 0, bytes(size), spec.workers, lanes, spec.key
            )
            self._templates[op] = np.frombuffer(frame, np.uint8)
        self._pending: list[np.ndarray] = []

    def _answer(self) -> np.ndarray | None:
        if not self._pending:
            return None
        reqs = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = []
        h = wire.THC_OFFSET
        op = int(reqs[0, h + 1]) >> 4
        out = np.empty((len(reqs), len(self._templates[op])), np.uint8)
        out[:] = self._templates[op]
        out[:, h + 4 : h + 6] = reqs[:, h + 4 : h + 6]  # slot
        out[:, h + 8 : h + 12] = reqs[:, h + 8 : h + 12]  # round
        out[:, h + 16 : h + 20] = reqs[:, h + 16 : h + 20]  # key
        body = reqs[:, wire.PAYLOAD_OFFSET :]
        if op == wire.OP_NORM:
            out[:, wire.PAYLOAD_OFFSET :] = body  # every worker sent these norms: they are the maxima
        elif op == wire.OP_THC:
            idx = np.empty((len(reqs), 2 * body.shape[1]), np.uint8)
            idx[:, 0::2], idx[:, 1::2] = body >> 4, body & 0x0F
            sums = self.table[idx] * self.n
            out[:, wire.PAYLOAD_OFFSET :] = sums.astype(wire.LANE_DTYPES[self.lane_bits]).view(np.uint8)
        else:
            sums = np.ascontiguousarray(body).view(">i4").astype(np.int64) * self.n
            out[:, wire.PAYLOAD_OFFSET :] = (sums & 0xFFFFFFFF).astype(">u4").view(np.uint8)
        return out

    def send(self, frame: bytes) -> None:
        self._pending.append(np.frombuffer(frame, np.uint8).reshape(1, -1))

    def recv(self, timeout: float) -> list[bytes]:
        out = self._answer()
        return [] if out is None else [row.tobytes() for row in out]

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return "echo switch"


class BatchedEchoSwitch(EchoSwitch):
    def send_many(self, rows: np.ndarray) -> None:
        self._pending.append(rows)

    def recv_into(self, buf: np.ndarray, lengths: np.ndarray, timeout: float) -> int:
        out = self._answer()
        if out is None:
            return 0
        if len(out) > len(buf):  # keep the rest for the next call
            self._pending = [out[len(buf) :]]
            out = out[: len(buf)]
        buf[: len(out), : out.shape[1]] = out
        lengths[: len(out)] = out.shape[1]
        return len(out)


def bench_worker(coords: int, window: int, repeats: int, batched: bool) -> tuple[float, float]:
    """One worker against the echo switch: seconds per all_sum of `coords` coordinates, and coordinates/s."""
    from host_agent.protocol import WorkerProtocol

    job = job_for(window)
    echo = (BatchedEchoSwitch if batched else EchoSwitch)(job)
    worker = WorkerProtocol(echo, wire.FrameBuilder(worker_endpoint(0), SERVICE), job.spec, 0)
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 16, coords, dtype=np.uint8)]
    want = job.spec.workers * job_table(job)[data[0]]
    worker.all_sum_indices(data)  # warm up (and build the native helper if needed)
    t0 = time.perf_counter()
    for _ in range(repeats):
        sums, _ = worker.all_sum_indices(data)
    elapsed = (time.perf_counter() - t0) / repeats
    if not np.array_equal(sums[0], want):
        raise SystemExit("bench_worker: WRONG SUMS")
    return elapsed, coords / elapsed


# (coordinates per round, window): a small model, and 256 K and 1 M coordinates (250 and 1,000 requests)
WORKER_RUNS = ((2_410, 128), (256_000, 128), (1_024_000, 1024))
QUICK_COORDS = 128_000


def report_worker(quick: bool) -> None:
    batched_api = hasattr(__import__("host_agent.transport", fromlist=["BatchIO"]), "BatchIO")
    spec = job_for().spec
    k = spec.coords_per_request
    print(
        f"the worker side alone, one worker against an echo switch (numpy, next to no cost), "
        f"{spec.lane_bits}-bit results, K = {k:,} coordinates a request:"
    )
    for coords, window in WORKER_RUNS:
        if quick:
            coords = min(coords, QUICK_COORDS)
        repeats = max(3, 2_000_000 // coords) if not quick else 3
        modes = [("per-packet send/recv", False)] + ([("batched send_many/recv_into", True)] if batched_api else [])
        for label, batched in modes:
            seconds, cps = bench_worker(coords, window, repeats, batched)
            print(
                f"  {coords:>9,} coordinates, window {window:>4}, {label:<28} {seconds * 1e3:8.2f} ms/round "
                f"{cps:>14,.0f} coordinates/s {cps / k:>10,.0f} requests/s"
            )
            bench_record.note(
                {"figure": "in-process", "coords": coords, "window": window, "io": label, "ms": seconds * 1e3}
            )


# ---- the worker side over a real raw socket ----------------------------------------------------------


def build_echo_switch() -> Path:
    """harness/echo_switch.c compiled (once per source) into the native cache: a THC echo in C, far faster
    than the worker, so the figures over the veth pair are the worker's."""
    import contract
    from native_build import build_executable

    source = ROOT / "harness" / "echo_switch.c"
    wire_format = (
        f"-DTHC_VERSION={contract.THC_VERSION}",
        f"-DNORM_BYTES={contract.NORM_PAYLOAD_BYTES}",
        f"-DPAD16={contract.PAD16_BYTES}",
    )
    return build_executable([source], "echo_switch", ("-O2", "-Wall", *wire_format))


class _PerPacket:
    """Hides a transport's batch methods: the protocol then sends and receives frame by frame."""

    def __init__(self, transport):
        self.send, self.recv, self.describe, self.close = (
            transport.send, transport.recv, transport.describe, transport.close
        )  # fmt: skip


def veth_worker(iface: str, mode: str, quick: bool) -> None:
    """One worker on `iface` (echo_switch.c on the other end): ms per round and coordinates/s; `mode`
    native (sendmmsg/recvmmsg), python-loop (batches, one send()/recv() per frame), per-packet (the
    transport's per-frame interface only)."""
    from host_agent.protocol import WorkerProtocol
    from host_agent.transport import RawSocketTransport

    transport = RawSocketTransport(iface)
    if mode == "python-loop":
        transport._native = None
    chosen = _PerPacket(transport) if mode == "per-packet" else transport
    for coords, window in WORKER_RUNS:
        if quick:
            coords = min(coords, QUICK_COORDS)
        job = job_for(window)
        k = job.spec.coords_per_request
        worker = WorkerProtocol(
            chosen, wire.FrameBuilder(worker_endpoint(0), SERVICE), job.spec, 0, deadline=20.0,
            first_request=0 if coords == WORKER_RUNS[0][0] else 10**6 * window,
        )  # fmt: skip
        rng = np.random.default_rng(0)
        data = [rng.integers(0, 16, coords, dtype=np.uint8)]
        want = job.spec.workers * job_table(job)[data[0]]
        worker.all_sum_indices(data)  # warm up: the RTO adapts
        repeats = 3 if quick else max(3, 2_000_000 // coords)
        before = worker.stats()["retransmissions"]
        t0 = time.perf_counter()
        for _ in range(repeats):
            sums, _ = worker.all_sum_indices(data)
        seconds = (time.perf_counter() - t0) / repeats
        if not np.array_equal(sums[0], want):
            raise SystemExit("veth_worker: WRONG SUMS")
        retx = worker.stats()["retransmissions"] - before
        print(
            f"  {coords:>9,} coordinates, window {window:>4}, {mode:<12} {seconds * 1e3:8.2f} ms/round "
            f"{coords / seconds:>12,.0f} coordinates/s {coords / seconds / k:>9,.0f} "
            f"requests/s, {retx / repeats:.1f} retransmissions/round",
            flush=True,
        )
        bench_record.note({"figure": "veth sums", "coords": coords, "window": window, "io": mode, "ms": seconds * 1e3})
    transport.close()


ROUND_SIZES = (16_384, 1_048_576)  # a small DDP bucket (the figures issue 38 sets floors on), and 1 M


def veth_round(iface: str, quick: bool) -> None:
    """One worker's full THC rounds on `iface` (echo_switch.c on the other end), as the DDP hook runs them
    in training (ddp.aggregator_hooks's blocking round through a SwitchAggregator): prepare, the norm round, encode, the
    sums and decode, each phase's CPU (this process, every thread) per round; "sums" is the rest of the
    round (starting the sum operation, waiting for it, and the hook's own glue). The echo answers a NORM
    with the worker's own norms and a THC request with n times its own table values, so the round decodes
    to this worker's own quantized gradient. Which codec runs is the environment's (THC_NATIVE, as
    everywhere)."""
    import torch

    from ddp.aggregator_hooks import THCHookState, thc_reduce
    from host_agent.aggregator import SwitchAggregator
    from host_agent.protocol import WorkerProtocol
    from host_agent.transport import RawSocketTransport

    torch.set_num_threads(1)  # as thc-run's workers run (OMP_NUM_THREADS=1): idle OpenMP threads spin on CPU
    transport = RawSocketTransport(iface)
    for i, coords in enumerate(ROUND_SIZES):
        job = job_for(1024 if coords > 100_000 else 128)
        worker = WorkerProtocol(
            transport, wire.FrameBuilder(worker_endpoint(0), SERVICE), job.spec, 0, deadline=20.0,
            first_request=i * 10**7,
        )  # fmt: skip
        agg = SwitchAggregator(worker)
        state = THCHookState(job.spec.codec, agg, worker_id=0)
        comp = state.compressor_for(0, coords)
        grad = torch.from_numpy(np.random.default_rng(coords).standard_normal(coords).astype(np.float32))
        bucket = grad.clone()
        phases = dict.fromkeys(("prepare", "norm round", "encode", "sums", "decode"), 0.0)
        norm_finished, inside = [False], [False]

        def timed(phase, fn, norm_only=False):
            def run(*args, **kwargs):
                if (norm_only and norm_finished[0]) or inside[0]:  # a phase's own inner calls: timed once
                    return fn(*args, **kwargs)
                t, inside[0] = time.process_time(), True
                try:
                    return fn(*args, **kwargs)
                finally:
                    phases[phase] += time.process_time() - t
                    norm_finished[0], inside[0] = norm_finished[0] or norm_only, False

            return run

        comp.prepare = timed("prepare", comp.prepare)
        comp.encode_packed = timed("encode", comp.encode_packed)
        comp.encode = timed("encode", comp.encode)
        comp.decode_lanes = timed("decode", comp.decode_lanes)
        comp.decode = timed("decode", comp.decode)
        agg.start_max = timed("norm round", agg.start_max)
        agg.finish = timed("norm round", agg.finish, norm_only=True)
        total = [0.0]

        def one_round(step):
            bucket.copy_(grad)  # the bucket as backward left it (decode writes the average into it)
            norm_finished[0] = False
            t = time.process_time()
            out = thc_reduce(state, bucket, 0, step)
            total[0] += time.process_time() - t
            return out

        repeats = 3 if quick else max(20, 4_000_000 // coords)  # a fraction of a second of rounds
        warm = 1 if quick else min(20, repeats)  # builds, the RTO adapts, caches fill: as in a long training run
        for step in range(warm):
            one_round(step)
        phases, total[0] = dict.fromkeys(phases, 0.0), 0.0
        wall = time.perf_counter()
        for step in range(warm, warm + repeats):
            out = one_round(step)
        wall = (time.perf_counter() - wall) / repeats
        if not torch.isfinite(out).all() or out.shape != grad.shape:
            raise SystemExit("veth_round: WRONG RESULT")
        phases["sums"] = total[0] - sum(phases.values())
        cpu = total[0] / repeats
        split = ", ".join(f"{name} {seconds / repeats * 1e3:.3f}" for name, seconds in phases.items())
        print(
            f"  full THC round, {coords} coordinates: {cpu * 1e3:.3f} ms of CPU ({split}); "
            f"{wall * 1e3:.3f} ms wall, {coords / cpu:,.0f} coordinates/s of CPU",
            flush=True,
        )
        note_round(
            "full round",
            coords=coords,
            cpu_ms=cpu * 1e3,
            wall_ms=wall * 1e3,
            phases_ms={name: seconds / repeats * 1e3 for name, seconds in phases.items()},
        )
        state.close()
        if i == 0:
            protocol_round(worker, 100 if quick else 1000)
            calls_only_round(transport, job, grad, repeats * 4, first_request=worker.next_request + 10**6)
    transport.close()


def calls_only_round(transport, job: SimJob, grad, repeats: int, first_request: int) -> None:
    """The same 16,384-coordinate round as the product's compiled calls alone, with no protocol around
    them: prepare, one NORM frame out and back, encode_packed, the request frames built and sent in one
    call, results received in batches and their lanes copied out in one pass, decode_lanes. Nothing is
    booked, timed out or checked beyond the frame count. What a native worker core would still pay; the
    full round's excess over it is the protocol's and the hook's Python."""
    import torch

    from host_agent import native
    from host_agent.operation import pack_norms
    from thc.compressor import THCCompressor

    spec = job.spec
    builder, lib = wire.FrameBuilder(worker_endpoint(0), SERVICE), native.load()
    comp = THCCompressor(spec.codec, 0)
    k = spec.coords_per_request
    buf, lengths = np.zeros((256, 2048), np.uint8), np.zeros(256, np.int32)
    out = torch.empty_like(grad)
    q = first_request

    def exchange(op, rows, per_packet):
        """rows as requests of `op`, sent in one call; their results' lanes as int32 (one row each)."""
        nonlocal q
        n, lane_bits = len(rows), wire.op_lane_bits(op, spec.lane_bits)
        frames = wire.build_requests(builder, op, spec.job_id, 0, q, n, spec.window, rows, lane_bits, spec.key, lib)
        q += n
        transport.send_many(frames)
        got = 0
        while got < n:
            got += transport.recv_into(buf[got:], lengths[got:], 1.0) or _lost(got, n)
        dtype = wire.LANE_DTYPES[lane_bits]
        raw = buf[:n, wire.PAYLOAD_OFFSET : wire.PAYLOAD_OFFSET + per_packet * dtype.itemsize]
        return np.ascontiguousarray(raw).view(dtype).astype(np.int32)

    def one_round(step):
        prep = comp.prepare(grad, step)
        payloads, _ = pack_norms(prep.norms.numpy())
        norm_rows = payloads.reshape(-1, wire.request_payload_bytes(wire.OP_NORM, wire.LANES_INT32))
        maxima = exchange(wire.OP_NORM, norm_rows, wire.NORMS_PER_REQUEST).reshape(-1).view(np.float32)
        max_norms = torch.from_numpy(maxima[: len(prep.chunks)].copy())
        packed = np.empty(comp.packed_bytes(prep, k), np.uint8)
        comp.encode_packed(prep, max_norms, packed, k)
        sums = exchange(wire.OP_THC, packed.reshape(-1, k // 2), k).reshape(-1)
        comp.decode_lanes(prep, sums, k, spec.workers, max_norms, out=out)

    for step in range(20):
        one_round(step)
    t = time.process_time()
    for step in range(20, 20 + repeats):
        one_round(step)
    cpu = (time.process_time() - t) / repeats
    print(f"  its compiled calls alone (no protocol around them; what a native core pays): {cpu * 1e3:.3f} ms of CPU")
    note_round("calls only", cpu_ms=cpu * 1e3)


def _lost(got: int, n: int) -> int:
    raise SystemExit(f"calls_only_round: {got} of {n} results within 1 s (the echo lost a frame)")


def protocol_round(worker, repeats: int) -> None:
    """The protocol part of a 16,384-coordinate round alone (no codec): all_max of 8 norms, then
    all_sum_indices of 8 chunks of 2,048 indices, `repeats` times; CPU of this process per round."""
    rng = np.random.default_rng(16_384)
    norms = rng.uniform(0, 1, 8).astype(np.float32)
    chunks = [rng.integers(0, 16, 2048, dtype=np.uint8) for _ in range(8)]
    for _ in range(20):  # warm up
        worker.all_max(norms)
        worker.all_sum_indices(chunks)
    norm = sums = 0.0
    for _ in range(repeats):
        t0 = time.process_time()
        worker.all_max(norms)
        t1 = time.process_time()
        worker.all_sum_indices(chunks)
        t2 = time.process_time()
        norm, sums = norm + t1 - t0, sums + t2 - t1
    print(
        f"  protocol part of that round (norm round + 16-request THC sum, no codec): "
        f"{(norm + sums) / repeats * 1e3:.3f} ms of CPU (norm round {norm / repeats * 1e3:.3f}, "
        f"sums {sums / repeats * 1e3:.3f})",
        flush=True,
    )
    note_round(
        "protocol part",
        cpu_ms=(norm + sums) / repeats * 1e3,
        norm_ms=norm / repeats * 1e3,
        sums_ms=sums / repeats * 1e3,
    )


def note_round(figure: str, **values) -> None:
    """A veth round's figure for the record, with the codec that ran it (THC_NATIVE=0: numpy's)."""
    codec = "numpy" if native_off() else "native"
    bench_record.note({"figure": figure, "codec": codec, **values})


def bench_veth_worker(quick: bool, before: str | None) -> None:
    """veth_worker in a child process per mode, echo_switch.c in another, over a fresh veth pair; `before`:
    also the worker of another source tree (the code before this change), per packet as it was."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("worker over a veth pair: skipped (needs root and iproute2)")
        return
    a, b = f"thcW{os.getpid() % 100000}a", f"thcW{os.getpid() % 100000}b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    echo = None
    try:
        for dev in (a, b):
            subprocess.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"], capture_output=True)
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        time.sleep(0.5)  # carrier up
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        me = [sys.executable, str(Path(__file__).resolve())]
        job = job_for()
        argv = [str(build_echo_switch()), b, str(job.spec.workers), str(job.spec.words), *map(str, job_table(job))]
        echo = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        echo.stdout.readline()
        print(
            f"the worker over a raw socket on a veth pair ({a}/{b}), harness/echo_switch.c (C) on the other end, "
            f"{job.spec.lane_bits}-bit lanes, K = {job.spec.coords_per_request:,} coordinates a request:"
        )
        runs = [(mode, str(ROOT)) for mode in ("per-packet", "python-loop", "native")]
        if before:
            runs.insert(0, ("before", before))
        for mode, tree in runs:
            args = [*me, "--veth-worker", a, "--mode", "per-packet" if mode == "before" else mode]
            if mode == "before":
                print(f"  (before: the worker of {tree}, per packet)", flush=True)
            subprocess.run([*args, *(["--quick"] if quick else [])], env=dict(env, PYTHONPATH=tree), check=False)
        for label, native in (("native", ""), ("numpy (THC_NATIVE=0)", "0")):
            print(f"  {label}:", flush=True)
            child = [*me, "--veth-round", a, *(["--quick"] if quick else [])]
            subprocess.run(child, env=dict(env, THC_NATIVE=native), check=False)
    finally:
        if echo is not None:
            echo.terminate()
            echo.wait(10)
        subprocess.run(["ip", "link", "del", a], capture_output=True)


# ---- protocol goodput ------------------------------------------------------------------------------


def make_engine(kind: str, job: SimJob):
    if kind == "p4":
        from emulator.switch import SoftwareSwitch

        sw = SoftwareSwitch.from_json(str(ROOT / "p4" / "build" / "thc.json"))
        program_engine(sw, job)
        return sw
    sw = FakeSwitch()
    sw.add_job(job)
    return sw


def bench_protocol(kind: str, coords: int, window: int, loss: float) -> None:
    n = N_WORKERS
    job = job_for(window)
    engine = make_engine(kind, job)
    _, workers = attach_workers(engine, job, loss_up=loss, loss_down=loss, seed=1)
    rng = np.random.default_rng(0)
    data = [[rng.integers(0, 16, coords, dtype=np.uint8)] for _ in range(n)]
    t0 = time.perf_counter()
    ops = [w.start_sum_indices(d) for w, d in zip(workers, data)]
    drive(workers)
    elapsed = time.perf_counter() - t0
    want = sum(job_table(job)[d[0]] for d in data)
    exact = all(np.array_equal(op.result()[0][0], want) for op in ops)
    packets = sum(w.stats()["packets_sent"] for w in workers)
    retx = sum(w.stats()["retransmissions"] for w in workers)
    rto = max(w.stats()["rto"] for w in workers)
    label = "compiled thc.json on the software switch" if kind == "p4" else "the contract's fake switch (Python)"
    print(
        f"protocol, {n} workers in one process, {label}, window {window}, loss {loss:.0%} each way, "
        f"K = {job.spec.coords_per_request:,}:"
    )
    print(
        f"  {coords:,} coordinates per worker in {elapsed:.2f} s: {coords / elapsed:,.0f} coordinates/s "
        f"aggregated ({packets / elapsed:,.0f} requests/s into the switch, {retx} retransmissions, "
        f"RTO {rto * 1e3:.0f} ms, "
        f"{'exact' if exact else 'WRONG SUMS'})"
    )

    norms = rng.uniform(0, 1, size=(n, 256)).astype(np.float32)
    t0 = time.perf_counter()
    for w, v in zip(workers, norms):
        w.start_max(v)
    drive(workers)
    elapsed = time.perf_counter() - t0
    print(f"  NORM: {256 / elapsed:,.0f} maxima/s")


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--engine", choices=["p4", "fake", "auto"], default="auto")
    parser.add_argument("--no-veth", action="store_true")
    parser.add_argument("--worker-only", action="store_true", help="only the worker side (echo switch, veth)")
    parser.add_argument("--before", metavar="TREE", help="also time the worker of this source tree over the veth")
    parser.add_argument(
        "--out",
        type=folder,
        default=ROOT / "bench" / "out",
        metavar="DIR",
        help="where --worker-only writes its record (default bench/out)",
    )
    parser.add_argument("--veth-worker", metavar="IFACE", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="native", help=argparse.SUPPRESS)
    parser.add_argument("--veth-round", metavar="IFACE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n = 20_000 if args.quick else 100_000
    if args.veth_worker:
        veth_worker(args.veth_worker, args.mode, args.quick)
        return 0
    if args.veth_round:
        veth_round(args.veth_round, args.quick)
        return 0
    if args.worker_only:
        started = provenance.started(quick=args.quick)
        with bench_record.Notes() as notes:
            report_worker(args.quick)
            if not args.no_veth:
                bench_veth_worker(args.quick, args.before)
        bench_record.write(Path(args.out), "bench_host_agent_worker", started, notes.figures)
        return 0
    bench_codec(n)
    if not args.no_veth:
        bench_veth(n)
    report_worker(args.quick)
    if not args.no_veth:
        bench_veth_worker(args.quick, args.before)
    engine = args.engine
    if engine == "auto":
        try:
            import emulator.switch  # noqa: F401

            engine = "p4" if (ROOT / "p4" / "build" / "thc.json").exists() else "fake"
        except ImportError:
            engine = "fake"
    coords = 32_000 if args.quick else 256_000  # 32 and 250 requests per worker
    for kind in [engine, "fake"] if engine == "p4" else ["fake"]:
        bench_protocol(kind, coords, 128, 0.0)
    bench_protocol(engine, coords // 4, 128, 0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
