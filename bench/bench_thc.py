"""THC compression speed and accuracy, next to a plain FWHT, a memory copy and the baselines.

    .venv/bin/python bench/bench_thc.py [--quick] [--workers N] [--threads T] [--out DIR]
    .venv/bin/python bench/bench_thc.py --native [--threads T] [--out DIR]   # only the native vs numpy codec

1. Throughput for 2^10 .. 2^24 coordinates: copy, FWHT, THC encode and decode (one full-width chunk, the
   default chunks, thc-worker's chunks) and the baselines, interleaved repetition by repetition so that a busy
   machine slows every column alike; the fixed cost of a call (fixed_cost); and the floor: THC encode + decode
   of 2^24 coordinates at most 3x one 2^24-point FWHT, i.e. the codec costs about a transform.
2. NMSE against bits per coordinate for every compressor, on Gaussian vectors and real minibatch gradients.
--native: the C codec against the numpy reference, interleaved the same way. Writes DIR/thc.json, DIR/thc.png
and the record `make results` keeps (default bench/out). Figures, never assertions."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from usage.args import OneLineParser, folder, int_in

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench import record as bench_record  # noqa: E402
from thc import THCCompressor, THCConfig  # noqa: E402
from thc.baselines import (  # noqa: E402
    FP16,
    QSGD,
    FixedPoint32,
    NoCompression,  # noqa: E402
    TernGrad,
    TopK,
)
from thc.config import DEFAULT_CHUNK, PAPER_CHUNK  # noqa: E402
from thc.gradient_sources import digits_gradient_rounds, gaussian_rounds  # noqa: E402
from thc.hadamard import fwht  # noqa: E402
from thc.simulate import mean_nmse  # noqa: E402
from thc.tables import clipping_error, make_table  # noqa: E402
from thc.workspace import Workspace, empty_cpu  # noqa: E402
from usage import provenance  # noqa: E402

SMALL = 2**16  # sizes up to this one: more repetitions, the fixed-cost fit and the 2^11-chunk rows


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ------------------------------------------------------------------------------------------- native
def codec_table(sizes: list[int], reps: dict[int, int]) -> list[dict]:
    """Per size and path, median encode and decode seconds of one worker (sums of 4 workers' range)."""
    from unittest import mock

    from thc import compressor

    paths = {"native": THCCompressor(THCConfig(chunk=PAPER_CHUNK), worker_id=1)}
    with mock.patch.object(compressor, "load_native", lambda: None):
        paths["numpy"] = THCCompressor(THCConfig(chunk=PAPER_CHUNK), worker_id=1)
    if not paths["native"].native:
        print("the native codec is not loaded (THC_NATIVE=0 or no C compiler): only numpy is measured")
        del paths["native"]
    rows = []
    for n in sizes:
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        calls = {}
        for name, comp in paths.items():
            prep = comp.prepare(x, 1)
            sums = [comp.table.values[i].astype(np.int32) * 4 for i in comp.encode(prep, prep.norms)]
            calls[name] = (
                lambda c=comp, p=prep: c.encode(p, p.norms),
                lambda c=comp, p=prep, s=sums: c.decode(p, s, 4, p.norms),
            )
        times = {(name, phase): [] for name in calls for phase in ("encode", "decode")}
        for _ in range(reps[n]):  # interleaved: a busy moment slows both paths alike
            for name, (enc, dec) in calls.items():
                times[name, "encode"].append(median_time(enc, 1))
                times[name, "decode"].append(median_time(dec, 1))
        for name in calls:
            enc, dec = statistics.median(times[name, "encode"]), statistics.median(times[name, "decode"])
            rows.append({"size": n, "path": name, "encode_s": enc, "decode_s": dec})
    return rows


def print_codec_table(rows: list[dict]) -> None:
    print(
        f"{'coordinates':>12} {'path':>7} {'encode us':>10} {'decode us':>10} "
        f"{'encode coord/s':>15} {'decode coord/s':>15}"
    )
    for r in rows:
        n = r["size"]
        print(
            f"{n:>12,} {r['path']:>7} {r['encode_s'] * 1e6:>10.1f} {r['decode_s'] * 1e6:>10.1f} "
            f"{n / r['encode_s']:>15.3g} {n / r['decode_s']:>15.3g}"
        )


# ------------------------------------------------------------------------------------------- throughput
def thc_phases(n: int, chunk: int, x: torch.Tensor):
    """(encode, decode) closures for one worker; the sums come from the worker's own indices."""
    comp = THCCompressor(THCConfig(chunk=chunk), worker_id=0)
    prep = comp.prepare(x, 0)
    sums = comp.aggregate([comp.encode(prep, prep.norms)])
    state = {"prep": prep}

    def encode():
        p = comp.prepare(x, 1)
        comp.encode(p, p.norms)
        state["prep"] = p

    def decode():
        comp.decode(state["prep"], sums, 1, state["prep"].norms)

    return encode, decode


def baseline_phases(comp, x: torch.Tensor):
    prep = comp.prepare(x, 0)
    payload = comp.encode(prep, prep.stats)
    aggregated = comp.aggregate([payload])

    def encode():
        p = comp.prepare(x, 0)
        comp.encode(p, p.stats)

    def decode():
        comp.decode(prep, aggregated, 1, prep.stats)

    return encode, decode


def throughput(sizes: list[int], reps: int, baseline_max: int) -> tuple[list[dict], dict]:
    rows, floor = [], {}
    for n in sizes:
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        ws, out, dst = Workspace(), empty_cpu(n), empty_cpu(n)
        ops = {
            "copy": lambda: dst.copy_(x),
            "fwht": lambda: fwht(x, out=out, workspace=ws),
        }
        enc, dec = thc_phases(n, n, x)
        ops["thc encode (1 chunk)"], ops["thc decode (1 chunk)"] = enc, dec
        if n > PAPER_CHUNK:
            enc, dec = thc_phases(n, PAPER_CHUNK, x)
            ops["thc encode (2^20 chunks)"], ops["thc decode (2^20 chunks)"] = enc, dec
        if DEFAULT_CHUNK < n <= SMALL:
            enc, dec = thc_phases(n, DEFAULT_CHUNK, x)
            ops["thc encode (2^11 chunks)"], ops["thc decode (2^11 chunks)"] = enc, dec
        times = {name: [] for name in ops}
        for fn in ops.values():  # warm-up: allocations, caches, lazy imports
            fn()
        # a small call takes well under a millisecond: more repetitions for a steady median
        for _ in range(reps * 5 if n < SMALL else reps):
            for name, fn in ops.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        if n <= baseline_max:
            for comp in (FP16(8), FixedPoint32(8), TernGrad(), QSGD(4), TopK(0.01)):
                enc, dec = baseline_phases(comp, x)
                times[f"{comp.name} encode"] = [median_time(enc, max(1, reps // 2))]
                times[f"{comp.name} decode"] = [median_time(dec, max(1, reps // 2))]
        for name, ts in times.items():
            med = statistics.median(ts)
            rows.append(
                {
                    "size": n,
                    "op": name,
                    "seconds": med,
                    "coords_per_s": n / med,
                    "ns_per_coord": med / n * 1e9,
                    "reps": len(ts),
                }
            )
        if n == max(sizes):
            floor = {"size": n, "limit": 3.0, "fwht_s": statistics.median(times["fwht"])}
            variants = [("one chunk", "1 chunk")]
            if n > PAPER_CHUNK:
                variants.append(("2^20 chunks (the paper's d)", "2^20 chunks"))
            for label, key in variants:
                enc, dec = times[f"thc encode ({key})"], times[f"thc decode ({key})"]
                per_rep = [(e + d) / f for e, d, f in zip(enc, dec, times["fwht"])]
                floor[label] = {
                    "encode_s": statistics.median(enc),
                    "decode_s": statistics.median(dec),
                    "ratio_of_medians": (statistics.median(enc) + statistics.median(dec)) / floor["fwht_s"],
                    "median_paired_ratio": statistics.median(per_rep),
                    "paired_ratios": per_rep,
                }
            for label, _ in variants:
                floor[label]["pass"] = floor[label]["median_paired_ratio"] <= floor["limit"]
        print_size(n, [r for r in rows if r["size"] == n])
    return rows, floor


def print_size(n: int, rows: list[dict]) -> None:
    k = int(round(np.log2(n)))
    print(f"\n2^{k} = {n} coordinates")
    print(f"  {'operation':<34} {'ms':>9} {'Mcoord/s':>10} {'ns/coord':>9}")
    for r in rows:
        print(f"  {r['op']:<34} {r['seconds'] * 1e3:>9.3f} {r['coords_per_s'] / 1e6:>10.1f} {r['ns_per_coord']:>9.1f}")


def fixed_cost(rows: list[dict]) -> dict:
    """Per op, the line seconds = fixed + per_coord * n through the medians of sizes <= SMALL.

    Least squares on relative residuals (weights 1/seconds): a busy machine slows a call by a factor, and
    plain least squares would let the largest size alone set the line (and the fixed cost with it).
    """
    fits = {}
    for op in ("thc encode (1 chunk)", "thc decode (1 chunk)", "fwht"):
        pts = sorted((r["size"], r["seconds"]) for r in rows if r["op"] == op and r["size"] <= SMALL)
        if len(pts) >= 2:
            sizes, seconds = np.array(pts, dtype=float).T
            per_coord, fixed = np.polyfit(sizes, seconds, 1, w=1 / seconds)
            fits[op] = {"fixed_s": float(fixed), "per_coord_s": float(per_coord), "sizes": [p[0] for p in pts]}
    return fits


def print_fixed_cost(fits: dict) -> None:
    if not fits:
        return
    sizes = next(iter(fits.values()))["sizes"]
    span = f"2^{int(np.log2(sizes[0]))} .. 2^{int(np.log2(sizes[-1]))}"
    print(f"\nFixed cost per call: line through the medians of {span} coordinates (relative residuals), one chunk")
    for op, f in fits.items():
        print(f"  {op:<34} {f['fixed_s'] * 1e6:>8.1f} us per call + {f['per_coord_s'] * 1e9:5.2f} ns per coordinate")


# ------------------------------------------------------------------------------------------------ NMSE
def best_clip(bits: int, granularity: int) -> float:
    """The p (powers of 1/2) with the least rounding variance + clipping error for this b and g."""
    candidates = [2.0**-k for k in range(1, 25)]
    return min(candidates, key=lambda p: make_table(bits, granularity, p).rounding_variance() + clipping_error(p))


def compressor_grid(workers: int) -> list[tuple[str, str, dict, callable]]:
    """(family, label, params, factory(worker_id)) for every point of the NMSE plot."""
    grid = []
    for bits in range(1, 9):
        g = 2 * (2**bits - 1)
        p = best_clip(bits, g)
        for kind in ("optimal", "uniform"):
            cfg = THCConfig(bits=bits, granularity=g, clip=p, table=kind)
            grid.append(
                (f"THC-{kind}", f"b={bits}", {"bits": bits, "g": g, "p": p}, lambda i, cfg=cfg: THCCompressor(cfg, i))
            )
    grid.append(
        (
            "THC-optimal default",
            "b=4 g=30 p=1/32",
            {"bits": 4, "g": 30, "p": 1 / 32},
            lambda i: THCCompressor(THCConfig(chunk=PAPER_CHUNK), i),
        )
    )
    for bits in (2, 3, 4, 6, 8):
        grid.append(("QSGD", f"b={bits}", {"bits": bits, "bucket": 512}, lambda i, b=bits: QSGD(b, 512, worker_id=i)))
    for ratio in (0.001, 0.01, 0.1):
        grid.append(("TopK+EF", f"{ratio:g}", {"ratio": ratio}, lambda i, r=ratio: TopK(r, worker_id=i)))
    grid.append(("TernGrad", "", {}, lambda i: TernGrad(worker_id=i)))
    grid.append(("fp16", "", {}, lambda i: FP16(workers, worker_id=i)))
    grid.append(("int32 fixed point", "", {}, lambda i: FixedPoint32(workers, worker_id=i)))
    grid.append(("fp32", "", {}, lambda i: NoCompression(worker_id=i)))
    return grid


def nmse_sweep(workers: int, rounds: list[list[torch.Tensor]], data: str) -> list[dict]:
    rows = []
    print(f"\nNMSE, {data}: n={workers} workers, d={rounds[0][0].numel()}, {len(rounds)} rounds")
    print(f"  {'compressor':<22} {'setting':<16} {'up b/c':>8} {'down b/c':>9} {'NMSE':>11}")
    for family, label, params, make in compressor_grid(workers):
        bits = make(0).bits_per_coordinate(workers)
        value = mean_nmse(make, rounds)
        rows.append(
            {
                "family": family,
                "label": label,
                "params": params,
                "up_bits": bits.up,
                "down_bits": bits.down,
                "nmse": value,
            }
        )
        print(f"  {family:<22} {label:<16} {bits.up:>8.3f} {bits.down:>9.3f} {value:>11.3e}")
    return rows


# ------------------------------------------------------------------------------------------------ plot
def plot(path: Path, rows: list[dict], nmse: dict[str, list[dict]], floor: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    ax = axes[0]
    ops = [
        "copy",
        "fwht",
        "thc encode (1 chunk)",
        "thc decode (1 chunk)",
        "thc encode (2^20 chunks)",
        "thc decode (2^20 chunks)",
        "int32 fixed point encode",
        "QSGD b=4 encode",
        "TopK 0.01 +EF encode",
    ]
    for op in ops:
        pts = sorted((r["size"], r["coords_per_s"]) for r in rows if r["op"] == op)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], marker="o", label=op)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("coordinates")
    ax.set_ylabel("million coordinates / s")
    title = "Throughput"
    if floor:
        parts = [f"{floor[k]['median_paired_ratio']:.2f}" for k in ("2^20 chunks (default)", "one chunk") if k in floor]
        title += f"\n2^24 enc+dec / FWHT: {' (2^20 chunks), '.join(parts)} (1 chunk)"
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    for ax, (data, pts) in zip(axes[1:], nmse.items()):
        families = []
        for r in pts:
            if r["family"] not in families:
                families.append(r["family"])
        floor_y = 1e-9  # fp32 and fixed point are exact up to float rounding: drawn on the floor line
        for fam in families:
            sel = sorted((r["up_bits"], max(r["nmse"], floor_y)) for r in pts if r["family"] == fam)
            style = "-o" if len(sel) > 1 else "*" if "default" in fam else "s"
            ax.plot([s[0] for s in sel], [s[1] for s in sel], style, label=fam, markersize=9 if style == "*" else 6)
        ax.axhline(floor_y, color="grey", lw=0.8, ls=":")
        ax.text(2**-4, floor_y * 1.6, "float rounding (fp32, int32 fixed point)", fontsize=7, color="grey")
        ax.set_ylim(floor_y / 3, 10)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("upstream bits per coordinate")
        ax.set_ylabel("NMSE")
        ax.set_title(f"NMSE, {data}")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="sizes 2^10 .. 2^16, 2^20, 2^24; fewer repetitions and rounds"
    )
    parser.add_argument("--workers", type=int_in(1), default=8, help="simulated workers for the NMSE sweep (default 8)")
    parser.add_argument("--threads", type=int_in(1), default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--out", type=folder, default=ROOT / "bench" / "out", help="output folder (default bench/out)")
    parser.add_argument("--native", action="store_true", help="only the native vs numpy codec table")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    origin = provenance.started(quick=args.quick)
    if args.native:
        print(
            f"# THC codec, native vs numpy: torch {torch.__version__}, {torch.get_num_threads()} threads, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
        )
        rows = codec_table([2**14, 2**20], reps={2**14: 301, 2**20: 21})
        print_codec_table(rows)
        bench_record.write(args.out, "bench_thc_native", origin, {"threads": torch.get_num_threads(), "rows": rows})
        return 0
    small = [2**10, 2**12, 2**14, 2**16]
    sizes = small + ([2**20, 2**24] if args.quick else [2**18, 2**20, 2**22, 2**24])
    reps = 5 if args.quick else 9
    rounds = 2 if args.quick else 5
    machine = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
    }
    print(
        f"# THC benchmark: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} CPUs, load average {machine['load_average'][0]:.2f}"
    )

    t0 = time.perf_counter()
    rows, floor = throughput(sizes, reps, baseline_max=2**22 if args.quick else 2**24)
    fits = fixed_cost(rows)
    print_fixed_cost(fits)
    if floor:
        print(
            f"\nFloor at 2^24: encode + decode <= 3 x one FWHT of 2^24 points ({floor['fwht_s'] * 1e3:.0f} ms), "
            f"same run, paired per repetition:"
        )
        for label in (k for k, v in floor.items() if isinstance(v, dict)):  # the chunkings measured
            if label in floor:
                f = floor[label]
                verdict = "PASS" if f["pass"] else "FAIL"
                print(
                    f"  {label:<22} encode {f['encode_s'] * 1e3:6.0f} ms + decode {f['decode_s'] * 1e3:6.0f} ms: "
                    f"median ratio {f['median_paired_ratio']:.2f} {verdict} (ratio of medians "
                    f"{f['ratio_of_medians']:.2f}; per repetition {' '.join(f'{r:.2f}' for r in f['paired_ratios'])})"
                )

    nmse = {
        "gaussian": nmse_sweep(
            args.workers, list(gaussian_rounds(args.workers, 2**16, rounds, seed=1)), "Gaussian N(0,1)"
        ),
        "digits MLP gradients": nmse_sweep(
            args.workers, list(digits_gradient_rounds(args.workers, None, rounds, seed=1)), "digits MLP gradients"
        ),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": machine,
        "quick": args.quick,
        "throughput": rows,
        "fixed_cost": fits,
        "floor": floor,
        "nmse": nmse,
        "seconds": time.perf_counter() - t0,
    }
    (args.out / "thc.json").write_text(json.dumps(result, indent=1))
    plot(args.out / "thc.png", rows, nmse, floor)
    figures = {"threads": torch.get_num_threads(), "workers": args.workers, "rounds": rounds}
    figures |= {"throughput": rows, "fixed_cost": fits, "floor": floor, "nmse": nmse}
    bench_record.write(args.out, "bench_thc", origin, figures)
    print(f"\nwrote {args.out / 'thc.json'} and {args.out / 'thc.png'} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
