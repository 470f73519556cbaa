"""One description of a job: everything the switch and every worker must agree on, in one place.

A THC job is a compression (bits, granularity, clip, table kind, chunk, seed, error feedback, the transform
and the quantizer: THC's, or TernGrad's with a shared scale) and a framing
(the program's cell size, hence coordinates per request; the window of slots; the job's key). `thc-run` or
`thc-ctl job add` makes a JobSpec once; the switch's entries (the job's lookup table, its lane width, its
slots and key) and each worker's codec and protocol are derived from it, and a worker is handed the whole
description (a JSON file, `thc-worker --job FILE`) instead of rebuilding it from defaults that happen to
match. A description the switch's program cannot run is refused when the job is added, naming the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from spec import contract
from thc.config import QUANTIZERS, TABLE_KINDS, THCConfig, parse_probability, terngrad_conflict
from thc.errors import ConfigError
from usage.args import int_in

__all__ = ["JobSpec", "JobSpecError", "add_job_options", "job_key", "DEFAULT_WINDOW", "DEFAULT_SLOTS", "KEYS", "NO_KEY"]

DEFAULT_WINDOW = 256  # requests in flight per worker: room for 256 K coordinates with 1 KiB cells
DEFAULT_SLOTS = 256
KEYS = range(1, contract.KEY_MAX + 1)  # the keys a job is installed with (thc-ctl --key, controller.jobs.choose_key)
NO_KEY = 0  # a description without a key yet: the controller draws one from KEYS when it adds the job
TERNGRAD_OPTIONS = "--quantizer terngrad --bits 2 --granularity 2 --table uniform --no-transform"  # thc.config.TERNGRAD


class JobSpecError(ValueError):
    """A job description that cannot be used as given; the message names the field and what to change."""


def _int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise JobSpecError(f"job field '{name}' = {value!r}: must be an integer from {low} to {high}")
    return value


@dataclass(frozen=True)
class JobSpec:
    """A job as the switch and its workers see it. `workers` is n, the contributions a complete sum holds
    (on two levels: every worker under the spine). `key` is installed in the switch with the job and put in
    every packet: a packet with another key is dropped (DROP_BAD_KEY); `thc-ctl job add` draws a fresh one."""

    job_id: int
    workers: int
    # THC's own parameters default to the codec's (thc.config.THCConfig, the paper's): one place holds them
    bits: int = THCConfig.bits
    granularity: int = THCConfig.granularity
    clip: float = THCConfig.clip
    table: str = THCConfig.table
    chunk: int = THCConfig.chunk
    seed: int = 0
    error_feedback: bool = False
    transform: bool = True  # the randomized Hadamard transform before quantizing (off: the ablation)
    quantizer: str = "thc"  # or "terngrad": TernGrad's three levels, which fix bits, g, table and transform
    window: int = DEFAULT_WINDOW
    slots: int | None = None  # the job's slots on the switch; None: the window, at least DEFAULT_SLOTS
    words: int = contract.WORDS
    key: int = NO_KEY

    def __post_init__(self) -> None:
        _int("job_id", self.job_id, 0, contract.JOB_ID_MAX)
        _int("workers", self.workers, 1, contract.MAX_WORKERS)
        _int("bits", self.bits, 1, contract.MAX_BITS)
        _int("granularity", self.granularity, 1, contract.TABLE_VALUE_MAX)
        try:
            object.__setattr__(self, "clip", parse_probability(self.clip))
        except ConfigError as exc:
            raise JobSpecError(f"job field 'clip': {exc}") from None
        if self.table not in TABLE_KINDS:
            raise JobSpecError(f"job field 'table' = {self.table!r}: use one of {', '.join(TABLE_KINDS)}")
        c = self.chunk
        if isinstance(c, bool) or not isinstance(c, int) or c < 2 or c > 2**30 or c & (c - 1):
            raise JobSpecError(f"job field 'chunk' = {c!r}: must be a power of two from 2 to 2**30")
        _int("seed", self.seed, 0, 2**63 - 1)
        if not isinstance(self.error_feedback, bool):
            raise JobSpecError(f"job field 'error_feedback' = {self.error_feedback!r}: must be true or false")
        if not isinstance(self.transform, bool):
            raise JobSpecError(f"job field 'transform' = {self.transform!r}: must be true or false")
        if self.quantizer not in QUANTIZERS:
            raise JobSpecError(f"job field 'quantizer' = {self.quantizer!r}: use one of {', '.join(QUANTIZERS)}")
        conflict = terngrad_conflict(self) if self.quantizer == "terngrad" else None
        if conflict:
            raise JobSpecError(
                f"job field '{conflict}' = {getattr(self, conflict)!r}: the terngrad quantizer's three levels are the "
                f"uniform 2-bit table at g = 2 with no transform ({TERNGRAD_OPTIONS})"
            )
        if self.slots is None:
            _int("window", self.window, 1, contract.SLOTS)
            object.__setattr__(self, "slots", max(self.window, DEFAULT_SLOTS))
        _int("slots", self.slots, 1, contract.SLOTS)
        _int("window", self.window, 1, self.slots)
        if self.words not in contract.WORDS_VARIANTS:
            raise JobSpecError(
                f"job field 'words' = {self.words!r}: the program's cells have "
                f"{', '.join(map(str, contract.WORDS_VARIANTS))} words"
            )
        _int("key", self.key, NO_KEY, KEYS[-1])  # KEYS, or NO_KEY
        levels = 1 << self.bits
        if self.quantizer == "thc" and self.granularity < levels - 1:
            raise JobSpecError(
                f"job {self.job_id}: a {self.bits}-bit table has {levels} levels, so g must be at least "
                f"{levels - 1} for each index to stand for its own value (got g={self.granularity}); raise g or "
                "lower --bits"
            )
        total = self.workers * self.granularity
        if total > contract.SUM_LANE_MAX:
            raise JobSpecError(
                f"job {self.job_id}: sums need n*g = {self.workers}*{self.granularity} = {total}, more than "
                f"the switch's widest lanes hold ({contract.SUM_LANE_MAX}); use fewer workers or a smaller "
                "granularity"
            )

    # ---- what follows from it ---------------------------------------------------------------------

    @property
    def lane_bits(self) -> int:
        """THC sum lanes: 8 bits when every sum fits a byte (n*g <= 255), else 16."""
        return contract.LANES_8 if self.workers * self.granularity <= contract.LANE8_MAX else contract.LANES_16

    @property
    def coords_per_request(self) -> int:
        """THC coordinates per request: as many as one cell holds lanes (1,024 or 512 with 1 KiB cells)."""
        return contract.per_request(self.lane_bits, self.words)

    @property
    def fix32_per_request(self) -> int:
        """FIX32 values per request: two int32 per word (256 with 1 KiB cells)."""
        return contract.per_request(contract.LANES_INT32, self.words)

    def thc_config(self) -> THCConfig:
        """The workers' codec."""
        return THCConfig(
            bits=self.bits,
            granularity=self.granularity,
            clip=self.clip,
            table=self.table,
            chunk=self.chunk,
            seed=self.seed,
            error_feedback=self.error_feedback,
            transform=self.transform,
            quantizer=self.quantizer,
        )

    def table_values(self) -> list[int]:
        """V[0 .. 2^b - 1], the table the switch sums with and the workers decode with."""
        return [int(v) for v in self.thc_config().make_table().values]

    def replace(self, **changes) -> JobSpec:
        return dataclasses.replace(self, **changes)

    # ---- as a file --------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["clip"] = _clip_text(self.clip)
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "the job description") -> JobSpec:
        if not isinstance(data, dict):
            raise JobSpecError(f"{where}: a job description is a JSON object, not {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise JobSpecError(f"{where}: unknown field '{unknown[0]}' (fields: {', '.join(sorted(names))})")
        missing = [n for n in ("job_id", "workers") if n not in data]
        if missing:
            raise JobSpecError(f"{where}: field '{missing[0]}' is missing")
        try:
            return cls(**data)
        except JobSpecError as exc:
            raise JobSpecError(f"{where}: {exc}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> JobSpec:
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise JobSpecError(f"cannot read the job description {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise JobSpecError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
        return cls.from_dict(data, str(path))

    def describe(self) -> str:
        """One line for logs: what the job compresses and how it is framed."""
        parts = "" if self.transform else ", no transform"
        parts += ", error feedback" if self.error_feedback else ""
        codec = "TernGrad" if self.quantizer == "terngrad" else f"{self.table} table"
        return (
            f"job {self.job_id}: {self.workers} workers, b={self.bits} g={self.granularity} "
            f"p={_clip_text(self.clip)} {codec}{parts}, {self.lane_bits}-bit lanes, "
            f"{self.coords_per_request} coordinates a request, window {self.window} of {self.slots} slots"
        )


def _clip_text(clip: float) -> str | float:
    """1/32 rather than 0.03125 when the probability is a small fraction."""
    frac = Fraction(clip).limit_denominator(1 << 20)
    if float(frac) == clip and frac.numerator == 1:
        return f"1/{frac.denominator}"
    return clip


# ---- command-line options shared by thc-run, thc-ctl and thc-worker ------------------------------


def job_key(text: str) -> int:
    """argparse type: a job key as thc-ctl prints it, decimal or 0x-hex, in KEYS."""
    try:
        key = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (decimal or 0x...)") from None
    if key not in KEYS:
        raise argparse.ArgumentTypeError(f"{text}: a job key is {KEYS[0]}..2**32-1")
    return key


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The compression and framing options of a job, with their defaults."""
    d = JobSpec(job_id=0, workers=1)
    g = parser.add_argument_group("the job (one description for the switch and every worker)")
    g.add_argument(
        "--bits", type=int_in(1, 4), default=d.bits, help=f"bits per coordinate upstream, 1..4 (default {d.bits})"
    )
    g.add_argument(
        "--granularity",
        type=int_in(1, 255),
        default=d.granularity,
        help=f"table values are integers 0..g, g <= 255 (default {d.granularity}); n*g sets the lane width",
    )
    g.add_argument("--clip", default="1/32", help="two-sided clip probability of N(0,1), e.g. 1/32 (default)")
    g.add_argument("--table", choices=TABLE_KINDS, default=d.table, help="table kind (default optimal)")
    g.add_argument(
        "--chunk", type=int_in(1), default=d.chunk, help=f"largest Hadamard chunk, a power of two (default {d.chunk})"
    )
    g.add_argument(
        "--thc-seed",
        type=int_in(0, 2**64 - 1),
        default=d.seed,
        metavar="S",
        help="the workers' shared seed of the Hadamard signs and rounding streams (default 0)",
    )
    g.add_argument("--error-feedback", action="store_true", help="carry each worker's compression error forward")
    g.add_argument(
        "--no-transform",
        dest="transform",
        action="store_false",
        help="quantize the coordinates as they are, without the randomized Hadamard transform (an ablation)",
    )
    g.add_argument(
        "--quantizer",
        choices=QUANTIZERS,
        default=d.quantizer,
        help=f"thc (default) or terngrad: TernGrad with a shared scale, summed by the switch ({TERNGRAD_OPTIONS})",
    )
    g.add_argument(
        "--window",
        type=int_in(1, contract.SLOTS),
        default=d.window,
        help=f"requests in flight per worker, the same on every worker (default {d.window})",
    )
    g.add_argument(
        "--slots",
        type=int_in(1, contract.SLOTS),
        default=None,
        help="the job's slots on the switch (default: the window, at least 256)",
    )


# JobSpec field -> the dest of its option in add_job_options: what spec_from_options reads, and what
# thc-worker names when its options disagree with a description
OPTION_DESTS = {
    "bits": "bits",
    "granularity": "granularity",
    "clip": "clip",
    "table": "table",
    "chunk": "chunk",
    "seed": "thc_seed",
    "error_feedback": "error_feedback",
    "transform": "transform",
    "quantizer": "quantizer",
    "window": "window",
    "slots": "slots",
}
BARE_FLAGS = {"error_feedback": "--error-feedback", "transform": "--no-transform"}  # fields set by a flag alone


def spec_from_options(args: argparse.Namespace, job_id: int, workers: int, **changes) -> JobSpec:
    """The JobSpec that `add_job_options`' parsed options describe."""
    fields = {field: getattr(args, dest) for field, dest in OPTION_DESTS.items()}
    fields.update(job_id=job_id, workers=workers)
    fields.update(changes)
    return JobSpec(**fields)


def option_as_given(args: argparse.Namespace, field: str) -> str:
    """The option that set `field`, as a command line reads: a bare flag, or the option and its value."""
    dest = OPTION_DESTS[field]
    return BARE_FLAGS.get(field) or f"--{dest.replace('_', '-')} {getattr(args, dest)}"
