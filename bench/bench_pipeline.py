"""THC data packets per second and coordinates aggregated per second, for several K, on every target.

    .venv/bin/python bench/bench_pipeline.py [--rounds R] [--window W] [--targets engine,thc-switch,bmv2]

K is the program's coordinates per packet: p4/build/thc.json and its variants in p4/build/variants/, all
compiled from the same sources. Targets: `engine` (SoftwareSwitch.process() in this process), `thc-switch`
and `bmv2` (processes on veth pairs, root). The veth targets are programmed by the project's controller and
driven in closed loop by 4 workers' raw sockets, a window of W slots per round as the host agents do; a
request counts as aggregated only when the switch's thc_events counter says so, so losses are reported, not
hidden. Prints a table, writes bench/out/pipeline.json. Figures, never assertions."""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import subprocess
import sys
import time
from pathlib import Path

from usage.args import OneLineParser, folder, int_in, listed, names_in

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import record as bench_record  # noqa: E402
from bench.bench_switch import THC_SPEC, bench_thc, measure, measure_batched  # noqa: E402
from contract.job import JobSpec  # noqa: E402
from controller.jobs import JobWorker  # noqa: E402
from controller.session import SwitchSession  # noqa: E402
from host_agent import wire  # noqa: E402
from topologies.targets import find_executable, free_tcp_port, stop_process  # noqa: E402
from topologies.veth import VethPorts  # noqa: E402
from usage import provenance  # noqa: E402

BUILD = ROOT / "p4" / "build"
PROGRAMS = {  # K -> (BMv2 JSON, P4Info, cell words)
    256: (BUILD / "variants/thc_words32.json", BUILD / "variants/thc_words32.p4info.txtpb", 32),
    512: (BUILD / "variants/thc_words64.json", BUILD / "variants/thc_words64.p4info.txtpb", 64),
    1024: (BUILD / "thc.json", BUILD / "thc.p4info.txtpb", 128),
}
OUT_DIR = ROOT / "bench" / "out"
WORKERS = 4
SERVICE = wire.Endpoint("00:00:00:00:00:fe", "10.0.0.254")
JOB_ID = 1
SENDER = "c"  # --sender
OP = "thc"  # --op


def request_parts(spec: JobSpec) -> tuple[int, bytes, dict]:
    """(op, payload, header fields) of the requests the closed loop sends: THC's 4-bit indices (K a
    request) or, with --op fix32, FIX32's int32 values (a cell's words), both one full cell."""
    op = wire.OP_FIX32 if OP == "fix32" else wire.OP_THC
    lane_bits = wire.op_lane_bits(op, spec.lane_bits)
    length = wire.payload_length(op, wire.KIND_REQUEST, lane_bits, spec.words)
    return op, bytes((i * 37) & 0xFF for i in range(length)), dict(lane_bits=lane_bits, key=spec.key)


def worker_endpoint(w: int) -> wire.Endpoint:
    return wire.Endpoint(f"00:00:00:00:00:{w + 1:02x}", f"10.0.0.{w + 1}")


class VethSwitch:
    """A switch process (thc-switch or simple_switch_grpc) on one veth pair per worker."""

    def __init__(self, target: str, executable: str, workdir: Path, switch_args=()):
        """`switch_args`: more options for the switch's command line (thc-switch --pps N)."""
        self.proc = None
        self.veths = VethPorts(f"bp{os.getpid() % 10000}p", range(1, WORKERS + 1))
        try:
            self.socks = [self.veths.socks[w + 1] for w in range(WORKERS)]
            self.grpc = f"127.0.0.1:{free_tcp_port()}"
            argv = [executable, "--device-id", "0", "--no-p4", *self.veths.interface_args()]
            if target == "bmv2":
                argv += [
                    "--thrift-port",
                    str(free_tcp_port()),
                    "--notifications-addr",
                    f"ipc://{workdir}/bmv2-{os.getpid()}.ipc",
                    "--",
                    "--grpc-server-addr",
                    self.grpc,
                ]
            else:
                argv += ["--grpc-server-addr", self.grpc]
            argv += list(switch_args)
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        stop_process(self.proc)
        self.veths.close()


def program(session: SwitchSession, window: int, words: int) -> JobSpec:
    """The job, as the controller installs it; the description with the switch's key."""
    session.push()
    spec = JobSpec(job_id=JOB_ID, workers=WORKERS, window=window, words=words)
    workers = [JobWorker(w, worker_endpoint(w).mac, worker_endpoint(w).ip, w + 1) for w in range(WORKERS)]
    job = session.add_job_workers(spec, workers, service_ip=SERVICE.ip)
    return spec.replace(key=job.key)


def closed_loop(switch: VethSwitch, spec: JobSpec, rounds: int, patience: float = 2.0) -> dict:
    """Rounds of `window` slots from every worker; returns requests sent, results seen, seconds."""
    builders = [wire.FrameBuilder(worker_endpoint(w), SERVICE, sport=40000 + w) for w in range(WORKERS)]
    op, payload, header = request_parts(spec)
    window = spec.window
    sent = results = 0
    incomplete_rounds = 0
    start = time.perf_counter()
    for rnd in range(rounds):
        for slot in range(window):
            for w, sock in enumerate(switch.socks):
                sock.send(builders[w].frame(op, wire.KIND_REQUEST, JOB_ID, w, slot, rnd, payload=payload, **header))
                sent += 1
        expected, seen = window * WORKERS, 0
        while seen < expected:
            ready, _, _ = select.select(switch.socks, [], [], patience)
            if not ready:
                incomplete_rounds += 1
                break
            for _, data in switch.veths.receive_ready(ready):
                parsed = wire.parse_frame(data)
                if parsed is not None and parsed.kind != wire.KIND_REQUEST and parsed.round == rnd:
                    seen += 1
        results += seen
    seconds = time.perf_counter() - start - incomplete_rounds * patience
    return {"sent": sent, "results": results, "seconds": seconds, "incomplete_rounds": incomplete_rounds}


def closed_loop_batched(switch: VethSwitch, spec: JobSpec, rounds: int, patience: float = 2.0) -> dict:
    """The same closed loop with every round's frames prebuilt as numpy rows, sent with one sendmmsg per
    64 frames and received with recvmmsg (host_agent's native helper): the sender must not be what
    limits a switch that forwards hundreds of thousands of frames a second."""
    import numpy as np

    from host_agent import native

    lib = native.load()
    builders = [wire.FrameBuilder(worker_endpoint(w), SERVICE, sport=40000 + w) for w in range(WORKERS)]
    op, payload, header = request_parts(spec)
    window = spec.window
    rows = []  # rows[rnd][w]: (window, frame length) uint8
    for rnd in range(rounds):
        per_worker = []
        for w in range(WORKERS):
            frames = [
                builders[w].frame(op, wire.KIND_REQUEST, JOB_ID, w, slot, rnd, payload=payload, **header)
                for slot in range(window)
            ]
            per_worker.append(np.frombuffer(b"".join(frames), dtype=np.uint8).reshape(window, -1).copy())
        rows.append(per_worker)
    for sock in switch.socks:  # our own sends are not results
        sock.setsockopt(263, 23, 1)  # SOL_PACKET, PACKET_IGNORE_OUTGOING
    stride = 2048
    buf = np.zeros((256, stride), dtype=np.uint8)
    lens = np.zeros(256, dtype=np.int32)
    fds = [sock.fileno() for sock in switch.socks]
    sent = results = incomplete_rounds = 0
    start = time.perf_counter()
    for rnd in range(rounds):
        for w, fd in enumerate(fds):
            r = rows[rnd][w]
            lib.thc_send_rows(fd, r.ctypes.data, r.shape[1], r.shape[1], r.shape[0])
            sent += r.shape[0]
        seen = [0] * WORKERS
        deadline = time.perf_counter() + patience
        while min(seen) < window:
            progress = False
            for w, fd in enumerate(fds):
                if seen[w] >= window:
                    continue
                n = lib.thc_recv_rows(fd, buf.ctypes.data, stride, len(buf), 1_000_000, lens.ctypes.data)
                if n > 0:
                    ipv4 = (buf[:n, 12] == 0x08) & (buf[:n, 13] == 0x00)
                    seen[w] += int(ipv4.sum())
                    progress = True
            if not progress and time.perf_counter() > deadline:
                incomplete_rounds += 1
                break
        results += sum(min(s, window) for s in seen)
    seconds = time.perf_counter() - start - incomplete_rounds * patience
    return {"sent": sent, "results": results, "seconds": seconds, "incomplete_rounds": incomplete_rounds}


def bench_veth(target: str, k: int, rounds: int, window: int, switch_args=(), logs: Path = OUT_DIR) -> dict | None:
    executable = find_executable("emulator" if target == "thc-switch" else "bmv2")
    if executable is None or os.geteuid() != 0:
        return None
    program_json, p4info, words = PROGRAMS[k]
    switch = VethSwitch("bmv2" if target == "bmv2" else "emulator", executable, logs, switch_args)
    try:
        with SwitchSession(
            switch.grpc, p4info=p4info, bmv2_json=program_json, connect_timeout=60.0, name=target
        ) as session:
            spec = program(session, window, words)
            batched = target != "bmv2" and SENDER == "c"
            run = (closed_loop_batched if batched else closed_loop)(switch, spec, rounds)
            stats = session.read_stats()
    finally:
        switch.close()
    aggregated = stats.aggregated
    return {
        "packets_per_s": aggregated / run["seconds"],
        "coordinates_per_s": aggregated * (spec.fix32_per_request if OP == "fix32" else k) / run["seconds"],
        "aggregated": aggregated,
        "sent": run["sent"],
        "results": run["results"],
        "incomplete_rounds": run["incomplete_rounds"],
        "dropped": stats.dropped,
    }


def bench_engine(k: int, packets: int, backend: str = "python") -> dict:
    """The engine in this process: Python process() per frame, or the native backend batched."""
    json_path, _, words = PROGRAMS[k]
    spec = THC_SPEC.replace(words=words)  # the job framed for the variant's cells
    sw, traffic = bench_thc(packets, seconds=30.0, json_path=json_path, backend=backend, spec=spec)
    if backend == "native":
        result = measure_batched(sw, traffic, packets)
    else:
        result = measure(sw, traffic, packets, 30.0)
    pps = result["pps"]
    return {"packets_per_s": pps, "coordinates_per_s": pps * k}


def _program_k(text: str) -> int:
    """argparse type: a K the program is built for (PROGRAMS)."""
    k = int_in(1)(text)
    if k not in PROGRAMS:
        raise argparse.ArgumentTypeError(f"{k}: the program is built for K = {', '.join(map(str, PROGRAMS))}")
    return k


def main(argv=None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int_in(1), default=20, help="closed-loop rounds per veth target (default 20)")
    ap.add_argument(
        "--window",
        type=int_in(1, 1024),
        default=1000,
        help="slots per round on veth targets (default 1000; the program has 1024)",
    )
    ap.add_argument("--packets", type=int_in(1), default=8000, help="requests through the engine per K (default 8000)")
    ap.add_argument(
        "--targets",
        default="engine,thc-switch,bmv2",
        type=names_in(("engine", "thc-switch", "bmv2")),
        help="comma-separated subset of engine, thc-switch, bmv2 (absent ones are skipped)",
    )
    ap.add_argument(
        "--k",
        type=listed(_program_k),
        default="256,512,1024",
        help="coordinates per packet to measure (default 256,512,1024)",
    )
    ap.add_argument(
        "--sender",
        choices=("c", "python"),
        default="c",
        help="how the 4 workers send and receive on veths: 'c' = prebuilt rows through sendmmsg/recvmmsg "
        "(host_agent's native helper; default), 'python' = one send()/recv() per frame",
    )
    ap.add_argument(
        "--op",
        choices=("thc", "fix32"),
        default="thc",
        help="requests of THC (K 4-bit indices, default) or FIX32 (a cell of int32 values: BMv2's cost of "
        "an uncompressed frame, beside THC's)",
    )
    ap.add_argument("--out", type=folder, default=OUT_DIR, help="output folder (default bench/out)")
    args = ap.parse_args(argv)
    started = provenance.started(quick=args.rounds < 20 or args.packets < 8000)
    args.out.mkdir(parents=True, exist_ok=True)  # the veth switches' logs go there too
    global SENDER, OP
    SENDER, OP = args.sender, args.op
    targets = args.targets.split(",")
    ks = [int(k) for k in args.k.split(",")]
    results: dict[str, dict[int, dict | None]] = {t: {} for t in targets}
    for k in ks:
        for target in targets:
            if target == "engine":
                results[target][k] = None if OP == "fix32" else bench_engine(k, args.packets)  # THC only
            else:
                results[target][k] = bench_veth(target, k, args.rounds, args.window, logs=args.out)
            print(f"  measured {target} K={k}", file=sys.stderr)

    print(f"\n{OP.upper()} data packets through the pipeline ({WORKERS} workers; packets/s | coordinates aggregated/s)")
    print(f"{'K':>5} " + " ".join(f"{t:>26}" for t in targets))
    for k in ks:
        cells = []
        for t in targets:
            r = results[t][k]
            cells.append(
                f"{'absent':>26}" if r is None else f"{r['packets_per_s']:>10,.0f} | {r['coordinates_per_s']:>13,.0f}"
            )
        print(f"{k:>5} " + " ".join(cells))
    for t in targets:
        for k in ks:
            r = results[t][k]
            if r and r.get("incomplete_rounds"):
                print(
                    f"note: {t} K={k}: {r['incomplete_rounds']} rounds lost packets "
                    f"({r['sent'] - r['aggregated']} of {r['sent']} requests not aggregated)"
                )
    (args.out / "pipeline.json").write_text(
        json.dumps(
            {
                "machine": platform.node(),
                "cpus": os.cpu_count(),
                "workers": WORKERS,
                "window": args.window,
                "rounds": args.rounds,
                "results": {t: {str(k): v for k, v in r.items()} for t, r in results.items()},
            },
            indent=2,
        )
    )
    print(f"wrote {args.out / 'pipeline.json'}")
    figures = [
        {"target": t, "k": k, "op": OP, "window": args.window, "sender": SENDER, **r}
        for t, by_k in results.items()
        for k, r in by_k.items()
        if r is not None
    ]
    bench_record.write(args.out, "bench_pipeline", started, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
