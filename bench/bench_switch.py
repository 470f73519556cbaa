"""Packets per second through SoftwareSwitch.process() (the engine alone: no sockets, no gRPC).

    .venv/bin/python bench/bench_switch.py [--packets N] [--seconds S]

Workloads:
- ipv4: tests/fixtures/p4/build/ipv4_forward.json, 64 LPM routes, UDP frames to varying hosts
  (parse, checksum verify, one LPM lookup, TTL decrement, checksum update, deparse).
- thc: p4/build/thc.json configured as p4/README.md describes (a job of 4 workers, 32 lookup tables
  of 256 entries), THC data requests (K = 64 coordinates) from the 4 workers in turn, so every 4th
  packet completes a slot and is multicast to the 4 workers (egress rewrites each copy).
Prints the figures and writes bench/out/switch.json. Figures, never assertions.
"""
import argparse
import json
import os
import platform
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emulator.switch import SoftwareSwitch  # noqa: E402

IPV4_JSON = ROOT / "tests/fixtures/p4/build/ipv4_forward.json"
THC_JSON = ROOT / "p4/build/thc.json"
OUT = ROOT / "bench/out/switch.json"


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
    elapsed = time.perf_counter() - start
    return {"packets": done, "frames_out": out, "seconds": round(elapsed, 3),
            "pps": round(done / elapsed, 1), "us_per_packet": round(elapsed / done * 1e6, 2)}


def bench_ipv4(packets, seconds):
    sw = SoftwareSwitch.from_json(IPV4_JSON)
    table, action = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
    for i in range(64):
        sw.table_add(table, [((10 << 24) | (i << 16), 16)], action, [0x020000000000 + i, 1 + i % 8])
    sw.table_add(table, [(10 << 24, 8)], action, [0x02000000FFFF, 9])
    traffic = []
    for i in range(256):
        dst = (10 << 24) | ((i % 64) << 16) | (i + 1)
        traffic.append((1 + i % 4, ipv4_udp_frame(0x0200000000AA, 0x0200000000BB, 0x0B000001, dst,
                                                  1000 + i, 2000, bytes(18))))
    result = measure(sw, traffic, packets, seconds)
    stats = sw.stats
    assert stats["exceptions"] == 0, stats  # a benchmark of a broken run would be meaningless
    return result


# ---------------------------------------------------------------------------- THC (p4/README.md)
THC_UDP_PORT = 21576
SERVICE_IP = 0x0A0000FE
OP_THC, KIND_REQUEST = 2, 0


def thc_request(worker: int, job_id: int, slot: int, rnd: int, indices: bytes) -> bytes:
    """A THC data request as p4/README.md lays it out: 16-byte THC header + 32 index bytes."""
    thc = struct.pack("!BBBBHBBII", 1, (OP_THC << 4) | KIND_REQUEST, job_id, worker, slot, 0, 0, rnd, 0)
    src_ip = 0x0A000001 + worker
    return ipv4_udp_frame(0x0200000000FE, 0x020000000001 + worker, src_ip, SERVICE_IP,
                          40000 + worker, THC_UDP_PORT, thc + indices)


def configure_thc(sw, n_workers: int, job_id: int = 1, epoch: int = 1) -> None:
    """Program the switch as the controller would for one job (names from p4/README.md)."""
    ing = "ThcIngress"
    sw.table_add(f"{ing}.job_check.service_addr", [SERVICE_IP], f"{ing}.job_check.serve", [])
    mask = (1 << n_workers) - 1
    # set_job(n_workers, slot_base, n_slots, mcast_grp, worker_mask, lane_bits, epoch)
    sw.table_add(f"{ing}.job_check.jobs", [job_id], f"{ing}.job_check.set_job",
                 [n_workers, 0, 256, job_id, mask, 16, epoch])
    values = [(v * 3) % 16 for v in range(16)]
    pairs = sum(1 for name in sw.program.tables if name.startswith(f"{ing}.index_lookup.lut_"))
    for i in range(pairs):
        t = f"{ing}.index_lookup.lut_{i}"
        for key in range(256):
            hi, lo = key >> 4, key & 15
            sw.table_add(t, [key], f"{ing}.index_lookup.set_w_{i}", [(values[hi] << 16) | values[lo]])
    sw.mc_group_set(job_id, [(1 + w, w) for w in range(n_workers)])
    for w in range(n_workers):
        sw.table_add("ThcEgress.result_dst", [job_id, w], "ThcEgress.set_result_dst",
                     [0x020000000001 + w, 0x0A000001 + w])
        sw.table_add(f"{ing}.forwarding.ipv4_lpm", [(0x0A000001 + w, 32)],
                     f"{ing}.forwarding.ipv4_forward", [0x020000000001 + w, 1 + w])


def bench_thc(packets, seconds, json_path=THC_JSON):
    """THC data packets: every worker of a 4-worker job sends its request for each (slot, round)."""
    sw = SoftwareSwitch.from_json(json_path)
    n_workers = 4
    configure_thc(sw, n_workers)
    pairs = sum(1 for name in sw.program.tables if name.startswith("ThcIngress.index_lookup.lut_"))
    traffic = []
    for q in range(-(-packets // n_workers)):  # q-th request of the job: slot q mod 256, round q div 256
        slot, rnd = q % 256, q // 256
        for w in range(n_workers):
            indices = bytes(((q + w + i) * 7) & 0xFF for i in range(pairs))
            traffic.append((1 + w, thc_request(w, 1, slot, rnd, indices)))
    # every request is new (no retransmissions): 3 of 4 are aggregated and dropped, the 4th
    # completes its slot and leaves as 4 multicast copies rewritten by egress
    result = measure(sw, traffic, packets, seconds)
    stats = sw.stats
    assert stats["exceptions"] == 0, stats
    events = [sw.counter_read("ThcIngress.thc_events", i)[0] for i in range(16)]
    result["events"] = {"consumed": events[0], "completed": events[1], "other": sum(events[2:])}
    result["coordinates_per_packet"] = 2 * pairs
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=20000, help="packets per workload (default 20000)")
    ap.add_argument("--seconds", type=float, default=10.0, help="time cap per workload (default 10)")
    args = ap.parse_args(argv)
    report = {"python": platform.python_version(), "machine": platform.machine(),
              "cpus": os.cpu_count(), "workloads": {}}
    report["workloads"]["ipv4_forward"] = bench_ipv4(args.packets, args.seconds)
    if THC_JSON.exists():
        report["workloads"]["thc_data"] = bench_thc(args.packets, args.seconds)
    else:
        report["workloads"]["thc_data"] = {"skipped": f"{THC_JSON.relative_to(ROOT)} not built"}
    for name, r in report["workloads"].items():
        if "pps" in r:
            print(f"{name:14s} {r['pps']:>10,.0f} packets/s  ({r['us_per_packet']} us/packet, "
                  f"{r['packets']} packets, {r['frames_out']} frames out)")
        else:
            print(f"{name:14s} skipped: {r['skipped']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
