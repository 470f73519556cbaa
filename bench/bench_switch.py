"""Packets per second through SoftwareSwitch.process() (the engine alone: no sockets, no gRPC).

    .venv/bin/python bench/bench_switch.py [--packets N] [--seconds S] [--backends python,native]

Every workload runs on every backend asked for in the same run, so they are compared under the same load:
the Python engine through process(), the native backend through process() and batched (process_batch, what
the native port loop does). Workloads: `ipv4` (the fixture IPv4 program, LPM routes, UDP frames) and `thc`
(p4/build/thc.json with a default job of 4 workers: full requests in turn, so every 4th completes a slot and
is multicast). The last line is `thc_data native/python: <N>x`. Writes bench/out/switch.json. Figures, never
assertions."""

import json
import os
import platform
import struct
import sys
import time
from pathlib import Path

import numpy as np

from usage.args import OneLineParser, folder, int_in, names_in, positive_number

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import contract  # noqa: E402
from bench import record as bench_record  # noqa: E402
from contract.job import JobSpec  # noqa: E402
from emulator.switch import SoftwareSwitch  # noqa: E402
from harness.sim import SERVICE, SimJob, program_engine, worker_endpoint, worker_port  # noqa: E402
from host_agent import wire  # noqa: E402
from usage import provenance  # noqa: E402

IPV4_JSON = ROOT / "tests/fixtures/p4/build/ipv4_forward.json"
THC_JSON = ROOT / "p4/build/thc.json"
OUT_DIR = ROOT / "bench" / "out"


def _ipv4_checksum(header: bytes) -> int:
    s = sum(struct.unpack("!10H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4_udp_frame(dst_mac, src_mac, src_ip, dst_ip, sport, dport, payload: bytes, ttl=64) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(udp), 0, 0, ttl, 17, 0, src_ip, dst_ip))
    ip[10:12] = struct.pack("!H", _ipv4_checksum(bytes(ip)))
    eth = dst_mac.to_bytes(6, "big") + src_mac.to_bytes(6, "big") + b"\x08\x00"
    return eth + bytes(ip) + udp


def measure(sw, traffic, packets: int, seconds: float) -> dict:
    """Run `traffic` (a list of (port, frame)) round-robin until `packets` are done or `seconds` pass."""
    process = sw.process
    n = len(traffic)
    done = out = 0
    start = time.perf_counter()
    deadline = start + seconds
    while done < packets:
        batch = min(1000, packets - done)
        for i in range(done, done + batch):
            port, frame = traffic[i % n]
            out += len(process(port, frame))
        done += batch
        if time.perf_counter() > deadline:
            break
    return figures(done, out, time.perf_counter() - start)


def measure_batched(sw, traffic, packets: int) -> dict:
    """The native backend's batched entry point: all frames in one C call, output counted only."""
    batch = sw.prepare_batch([traffic[i % len(traffic)] for i in range(packets)])
    start = time.perf_counter()
    out = sw.process_batch(batch, keep=False)
    return figures(packets, out, time.perf_counter() - start)


def figures(packets: int, frames_out: int, elapsed: float) -> dict:
    return {
        "packets": packets,
        "frames_out": frames_out,
        "seconds": round(elapsed, 4),
        "pps": round(packets / elapsed, 1),
        "us_per_packet": round(elapsed / packets * 1e6, 3),
    }


def run_modes(backend, make_switch, traffic, packets, seconds, check) -> dict:
    """{mode: figures} for one backend: 'process' always, 'batched' on the native backend."""
    results = {}
    sw = make_switch(backend)
    results["process"] = measure(sw, traffic, packets, seconds)
    check(sw, results["process"])
    if backend == "native":
        sw = make_switch(backend)  # fresh state: the same requests again
        results["batched"] = measure_batched(sw, traffic, packets)
        check(sw, results["batched"])
    return results


def bench_ipv4(packets, seconds, backend="python"):
    sw = SoftwareSwitch.from_json(IPV4_JSON, backend=backend)
    table, action = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
    for i in range(64):
        sw.table_add(table, [((10 << 24) | (i << 16), 16)], action, [0x020000000000 + i, 1 + i % 8])
    sw.table_add(table, [(10 << 24, 8)], action, [0x02000000FFFF, 9])
    traffic = []
    for i in range(256):
        dst = (10 << 24) | ((i % 64) << 16) | (i + 1)
        traffic.append(
            (1 + i % 4, ipv4_udp_frame(0x0200000000AA, 0x0200000000BB, 0x0B000001, dst, 1000 + i, 2000, bytes(18)))
        )
    return sw, traffic


def _ipv4_check(sw, result):
    stats = sw.stats
    assert stats["exceptions"] == 0, stats  # a benchmark of a broken run would be meaningless
    assert result["frames_out"] == result["packets"], result  # every frame is forwarded


# ---------------------------------------------------------------------------- THC (p4/README.md)
THC_SPEC = JobSpec(job_id=1, workers=4, window=256, slots=256)  # the default codec: n*g = 120, 8-bit lanes, K = 1024


def bench_thc(packets, seconds, json_path=THC_JSON, backend="python", spec=THC_SPEC):
    """THC data packets: every worker of a 4-worker job sends its request for each (slot, round).

    The job is planned and programmed as the controller does it (harness.sim: the controller's writes
    applied to the engine), and the requests are the host agent's own frames (host_agent.wire.FrameBuilder):
    full cells of spec.coords_per_request 4-bit indices in the job's lanes, with its key."""
    sw = SoftwareSwitch.from_json(json_path, backend=backend)
    job = SimJob.plan(spec)
    program_engine(sw, job)
    spec = job.spec  # with the key the switch holds
    lane_bits = wire.op_lane_bits(contract.OP_THC, spec.lane_bits)
    size = wire.payload_length(contract.OP_THC, contract.KIND_REQUEST, lane_bits, spec.words)
    builders = {w: wire.FrameBuilder(worker_endpoint(w), SERVICE) for w in job.worker_ids}
    offsets = np.arange(size)
    traffic = []
    for q in range(-(-packets // spec.workers)):  # q-th request of the job: slot q mod slots, round q div slots
        slot, rnd = q % job.job.n_slots, q // job.job.n_slots
        for w in job.worker_ids:
            indices = (((q + w + offsets) * 7) & 0xFF).astype(np.uint8).tobytes()  # b = 4: every nibble valid
            frame = builders[w].frame(
                contract.OP_THC, contract.KIND_REQUEST, job.job_id, w, slot, rnd,
                payload=indices, lane_bits=lane_bits, key=spec.key,
            )  # fmt: skip
            traffic.append((worker_port(w), frame))
    # every request is new (no retransmissions): 3 of 4 are aggregated and dropped, the 4th
    # completes its slot and leaves as 4 multicast copies rewritten by egress
    return sw, traffic


def _thc_check(sw, result):
    stats = sw.stats
    assert stats["exceptions"] == 0, stats
    events = {name: sw.counter_read(contract.THC_EVENTS, i)[0] for i, name in enumerate(contract.EVENTS)}
    result["events"] = {
        "consumed": events["CONSUMED"],
        "completed": events["COMPLETED"],
        "other": sum(events.values()) - events["CONSUMED"] - events["COMPLETED"],
    }
    assert result["events"]["other"] == 0, result  # every request aggregated or completed


def main(argv=None):
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int_in(1), default=20000, help="packets per workload and backend (default 20000)")
    ap.add_argument(
        "--seconds", type=positive_number("seconds"), default=10.0, help="time cap of a process() run (default 10)"
    )
    ap.add_argument(
        "--backends",
        default="python,native",
        type=names_in(("python", "native")),
        help="comma-separated engine backends to measure: python, native (default python,native)",
    )
    ap.add_argument("--out", type=folder, default=OUT_DIR, help="output folder (default bench/out)")
    args = ap.parse_args(argv)
    origin = provenance.started(quick=args.packets < 20000)
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in ("python", "native"):
            ap.error(f"--backends: unknown backend {b!r} (python, native)")
    report = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "workloads": {},
        "thc_coords_per_request": THC_SPEC.coords_per_request,
    }
    workloads = {"ipv4_forward": (lambda b: bench_ipv4(args.packets, args.seconds, b), _ipv4_check)}
    if THC_JSON.exists():
        workloads["thc_data"] = (lambda b: bench_thc(args.packets, args.seconds, backend=b), _thc_check)
    else:
        report["workloads"]["thc_data"] = {"skipped": f"{THC_JSON.relative_to(ROOT)} not built"}
        print(f"thc_data       skipped: {THC_JSON.relative_to(ROOT)} not built")
    for name, (setup, check) in workloads.items():
        report["workloads"][name] = {}
        for backend in backends:
            _, traffic = setup(backend)
            modes = run_modes(backend, lambda b: setup(b)[0], traffic, args.packets, args.seconds, check)
            report["workloads"][name][backend] = modes
            for mode, r in modes.items():
                coords = f", {r['pps'] * THC_SPEC.coords_per_request:,.0f} coordinates/s" if name == "thc_data" else ""
                print(
                    f"{name:14s} {backend:7s} {mode:8s} {r['pps']:>12,.0f} packets/s  "
                    f"({r['us_per_packet']} us/packet, {r['packets']} packets, {r['frames_out']} frames out{coords})"
                )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "switch.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'switch.json'}")
    rows = [
        {"workload": name, "backend": backend, "mode": mode, "pps": r["pps"], "us_per_packet": r["us_per_packet"]}
        for name, by_backend in report["workloads"].items()
        for backend, modes in by_backend.items()
        if backend in backends
        for mode, r in modes.items()
    ]
    figures = {"rows": rows, "thc_coords_per_request": THC_SPEC.coords_per_request}
    bench_record.write(args.out, "bench_switch", origin, figures)
    thc = report["workloads"].get("thc_data", {})
    if "python" in thc and "native" in thc:
        ratio = thc["native"]["batched"]["pps"] / thc["python"]["process"]["pps"]
        per_call = thc["native"]["process"]["pps"] / thc["python"]["process"]["pps"]
        print(f"thc_data native/python (process() per frame): {per_call:.1f}x")
        print(f"thc_data native/python: {ratio:.1f}x")


if __name__ == "__main__":
    main()
