"""Command line: ``python -m thc table ...`` prints a lookup table; ``python -m thc nmse ...`` compares compressors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from usage.args import OneLineParser, fraction, int_in, names_in

from .config import MAX_SEED, PAPER_CHUNK, parse_probability
from .errors import THCError
from .gradient_sources import WORKLOADS, make_rounds
from .limits import MAX_BITS, check_bits, check_granularity
from .registry import COMPRESSORS, make_compressor
from .simulate import mean_nmse
from .tables import clipping_error, make_table

__all__ = ["main", "build_parser", "parse_args"]

PROG = "python -m thc"
MAX_SIMULATED = 2**28  # workers x coordinates x trials held at once (float32: 1 GiB); more would swap or hang


def _checked(check):
    """argparse type: an integer the codec's own check accepts (its message, under the option's name)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer") from None
        try:
            return check(value)
        except THCError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _probability(text: str) -> float:
    try:
        return parse_probability(text)
    except THCError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _power_of_two(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a power of two") from None
    if value < 2 or value & (value - 1) or value > MAX_SIMULATED:
        raise argparse.ArgumentTypeError(f"{text} is not a power of two in 2..2**28")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        tool=PROG,
        description="THC (Tensor Homomorphic Compression) lookup tables and compressor error measurements.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{table,nmse}")

    table = sub.add_parser(
        "table",
        help="print a lookup table as space-separated integers on one line",
        description="Print the THC lookup table: 2**bits integers from 0 to g, on one line.",
    )
    table.add_argument(
        "--bits", "-b", type=_checked(check_bits), default=4, help="bits per coordinate b, 1..8 (default 4)"
    )
    table.add_argument(
        "--granularity", "-g", type=_checked(check_granularity), default=30, help="largest table value g (default 30)"
    )
    table.add_argument(
        "--clip",
        "-p",
        type=_probability,
        default=1 / 32,
        help="two-sided clip probability p of N(0,1), in (0,1); a fraction like 1/32 is fine (default 1/32)",
    )
    table.add_argument(
        "--kind",
        choices=("optimal", "uniform"),
        default="optimal",
        help="optimal: least rounding variance (exact); uniform: evenly spaced (default optimal)",
    )
    table.add_argument(
        "--stats",
        action="store_true",
        help="also print T, inc, the expected rounding variance and clipping error per coordinate",
    )

    nmse = sub.add_parser(
        "nmse",
        help="print the NMSE of each compressor on simulated workers",
        description="Simulate n workers and print each compressor's NMSE (error of the averaged gradient, "
        "normalised by the mean squared norm of the workers' gradients) and its bits per coordinate.",
    )
    nmse.add_argument(
        "--workers", "-n", type=int_in(1, MAX_SIMULATED), default=4, help="number of simulated workers n (default 4)"
    )
    nmse.add_argument(
        "--dim",
        "-d",
        type=int_in(1, MAX_SIMULATED),
        default=2**16,
        help="coordinates per gradient for synthetic data (default 65536)",
    )
    nmse.add_argument(
        "--trials", type=int_in(1, MAX_SIMULATED), default=5, help="rounds averaged per compressor (default 5)"
    )
    nmse.add_argument(
        "--data",
        choices=sorted(WORKLOADS),
        default="gaussian",
        help="gaussian: N(0,1); lognormal: heavy-tailed; digits: real MLP gradients (default gaussian)",
    )
    nmse.add_argument(
        "--seed", type=int_in(0, MAX_SEED), default=0, help="seed of the data and of every compressor (default 0)"
    )
    nmse.add_argument(
        "--compressors",
        default=",".join(COMPRESSORS),
        type=names_in(COMPRESSORS),
        help=f"comma-separated subset of: {', '.join(COMPRESSORS)} (default all)",
    )
    nmse.add_argument(
        "--bits", "-b", type=_checked(check_bits), default=4, help="THC bits per coordinate b (default 4)"
    )
    nmse.add_argument(
        "--granularity", "-g", type=_checked(check_granularity), default=30, help="THC granularity g (default 30)"
    )
    nmse.add_argument("--clip", "-p", type=_probability, default=1 / 32, help="THC clip probability p (default 1/32)")
    nmse.add_argument(
        "--chunk", type=_power_of_two, default=PAPER_CHUNK, help="a power of two (default 2**20: the paper's d)"
    )
    nmse.add_argument("--error-feedback", action="store_true", help="THC with error feedback (single-round NMSE)")
    nmse.add_argument(
        "--topk-ratio",
        type=fraction("a share of the coordinates", "0.01"),
        default=0.01,
        help="fraction of coordinates TopK keeps (default 0.01)",
    )
    nmse.add_argument(
        "--qsgd-bits", type=int_in(2, MAX_BITS), default=4, help="QSGD bits per coordinate incl. sign, 2..8 (default 4)"
    )
    nmse.add_argument(
        "--qsgd-bucket", type=int_in(1, MAX_SIMULATED), default=512, help="coordinates per QSGD norm (default 512)"
    )
    return parser


def _cmd_table(args: argparse.Namespace) -> int:
    table = make_table(args.bits, args.granularity, args.clip, kind=args.kind)
    print(" ".join(str(int(v)) for v in table.values))
    if args.stats:
        print(
            f"T={table.threshold:.6f} inc={table.inc:.6f} rounding_variance={table.rounding_variance():.6f} "
            f"clipping_error={clipping_error(table.clip):.6f}"
        )
    return 0


def _cmd_nmse(args: argparse.Namespace) -> int:
    names = [s.strip() for s in args.compressors.split(",")]
    params = dict(
        bits=args.bits,
        granularity=args.granularity,
        clip=args.clip,
        chunk=args.chunk,
        seed=args.seed,
        error_feedback=args.error_feedback,
        ratio=args.topk_ratio,
        qsgd_bits=args.qsgd_bits,
        bucket=args.qsgd_bucket,
    )
    rounds = make_rounds(args.data, args.workers, args.dim, args.trials, args.seed)
    dim = rounds[0][0].numel()
    print(f"# n={args.workers} workers, d={dim} coordinates, {args.trials} trials, data={args.data}")
    print(f"{'compressor':<28} {'up b/coord':>10} {'down b/coord':>12} {'NMSE':>12} {'n*NMSE':>10}")
    for name in names:
        comp = make_compressor(name, args.workers, 0, **params)
        value = mean_nmse(lambda i: make_compressor(name, args.workers, i, **params), rounds)
        bits = comp.bits_per_coordinate(args.workers)
        print(f"{comp.name:<28} {bits.up:>10.3f} {bits.down:>12.3f} {value:>12.4e} {value * args.workers:>10.4f}")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The arguments, refused in one line before anything is simulated when the gradients would not fit."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "nmse" and args.workers * args.dim * args.trials > MAX_SIMULATED:
        parser.error(
            f"--workers {args.workers} x --dim {args.dim} x --trials {args.trials} coordinates is more than "
            f"{MAX_SIMULATED:,} held at once: make one smaller"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return _cmd_table(args) if args.command == "table" else _cmd_nmse(args)
    except THCError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
