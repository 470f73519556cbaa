"""Bytes on the spine links per round: aggregation at the spine only against two-level aggregation.

    .venv/bin/python bench/bench_two_level.py [--leaves 2] [--per-leaf 4] [--rounds 40] [--loss 0.0]

In process (no root): a spine and `--leaves` leaves, each a software switch running p4/build/thc.json,
chained by harness/leaf_spine.py. A round is one use of one slot; every frame crossing a leaf–spine link is
counted, retransmissions included. `one-level`: the spine aggregates all workers, leaves only route;
`two-level`: each leaf sends one PARTIAL up and multicasts the spine's one result down (p4/README.md,
"Two-level aggregation"). Every round's sums are checked against thc's reference. Writes
bench/out/bench_two_level.json; the last line is `two-level/one-level spine bytes per round: <R>`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from usage.args import OneLineParser, folder, int_in, number_in

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import record as bench_record  # noqa: E402
from harness import frames  # noqa: E402
from harness.leaf_spine import LeafSpine  # noqa: E402
from thc import THCConfig  # noqa: E402
from thc.aggregate import reference_aggregate  # noqa: E402
from usage import provenance  # noqa: E402


def measure(levels: int, args, table) -> dict:
    fabric = LeafSpine(leaves=args.leaves, per_leaf=args.per_leaf, table=table, loss=args.loss, seed=1, levels=levels)
    coords = fabric.coords  # one cell: 1,024 coordinates with 8-bit lanes
    rng = np.random.default_rng(0)
    try:
        for q in range(args.rounds):
            idx = [rng.integers(0, 2**table.bits, size=coords, dtype=np.uint8) for _ in range(fabric.n)]
            results = fabric.run_round(idx, slot=q % fabric.n_slots, rnd=q // fabric.n_slots)
            expected = np.asarray(reference_aggregate(idx, table))
            for frame in results.values():
                if frames.Parsed.of(frame).lanes() != [int(v) for v in expected]:
                    raise SystemExit(f"{levels}-level round {q}: sums differ from thc's reference")
        return {
            "levels": levels,
            "workers": fabric.n,
            "rounds": args.rounds,
            "spine_link_bytes": fabric.spine_link_bytes,
            "spine_link_bytes_per_round": fabric.spine_link_bytes / args.rounds,
            "spine_events": {k: v for k, v in fabric.spine.events().items() if v},
        }
    finally:
        fabric.close()


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int_in(1), default=2)
    parser.add_argument("--per-leaf", type=int_in(1), default=4)
    parser.add_argument("--rounds", type=int_in(1), default=40)
    parser.add_argument(
        "--loss",
        type=number_in(0, 1, "a probability", below_hi=True),
        default=0.0,
        help="loss probability per frame and link (0..1)",
    )
    parser.add_argument(
        "--out", type=folder, default=Path(__file__).resolve().parent / "out", help="output folder (default bench/out)"
    )
    args = parser.parse_args(argv)
    origin = provenance.started(quick=args.rounds < 40)
    table = THCConfig().make_table()  # the codec's default table
    runs = [measure(1, args, table), measure(2, args, table)]
    for run in runs:
        print(
            f"{run['levels']}-level, {run['workers']} workers: {run['spine_link_bytes_per_round']:.0f} bytes "
            f"on the spine links per round ({run['rounds']} rounds, loss {args.loss})"
        )
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_two_level.json").write_text(json.dumps({"loss": args.loss, "runs": runs}, indent=2))
    ratio = runs[1]["spine_link_bytes_per_round"] / runs[0]["spine_link_bytes_per_round"]
    print(f"two-level/one-level spine bytes per round: {ratio:.3f}")
    bench_record.write(out, "bench_two_level", origin, {"loss": args.loss, "runs": runs, "ratio": ratio})
    return 0


if __name__ == "__main__":
    sys.exit(main())
