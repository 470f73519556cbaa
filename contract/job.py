"""One description of a job: everything the switch and every worker must agree on, in one place.

A THC job is a compression (the codec's THCConfig: bits, granularity, clip, table kind, chunk, seed, error
feedback, the transform and the quantizer, checked by the codec itself) and a framing
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

import contract
from thc.config import MAX_SEED, QUANTIZERS, TABLE_KINDS, TERNGRAD, THCConfig
from thc.errors import ConfigError
from usage.args import int_in

__all__ = [
    "JobSpec",
    "JobSpecError",
    "CODEC_FIELDS",
    "add_job_options",
    "job_key",
    "DEFAULT_WINDOW",
    "DEFAULT_SLOTS",
    "KEYS",
    "NO_KEY",
]

DEFAULT_WINDOW = 256  # requests in flight per worker: room for 256 K coordinates with 1 KiB cells
DEFAULT_SLOTS = 256
KEYS = range(1, contract.KEY_MAX + 1)  # the keys a job is installed with (thc-ctl --key, controller.jobs.choose_key)
NO_KEY = 0  # a description without a key yet: the controller draws one from KEYS when it adds the job
TERNGRAD_OPTIONS = "--quantizer terngrad --bits 2 --granularity 2 --table uniform --no-transform"  # thc.config.TERNGRAD


class JobSpecError(ConfigError):
    """A job description that cannot be used as given; the message names the field and what to change. A
    ConfigError, like the codec's own (THCConfig's): one family of errors for a description that is wrong."""


def _int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise JobSpecError(f"job field '{name}' = {value!r}: must be an integer from {low} to {high}", name)
    return value


CODEC_FIELDS = tuple(f.name for f in dataclasses.fields(THCConfig))  # a description's file holds them flat


@dataclass(frozen=True)
class JobSpec:
    """A job as the switch and its workers see it: the workers' codec (a THCConfig, which validates its own
    fields) and what the switch fixes. `workers` is n, the contributions a complete sum holds (on two levels:
    every worker under the spine). `key` is installed in the switch with the job and put in every packet: a
    packet with another key is dropped (DROP_BAD_KEY); `thc-ctl job add` draws a fresh one."""

    job_id: int
    workers: int
    codec: THCConfig = THCConfig()
    window: int = DEFAULT_WINDOW
    slots: int | None = None  # the job's slots on the switch; None: the window, at least DEFAULT_SLOTS
    words: int = contract.WORDS
    key: int = NO_KEY

    def __post_init__(self) -> None:
        _int("job_id", self.job_id, 0, contract.JOB_ID_MAX)
        _int("workers", self.workers, 1, contract.MAX_WORKERS)
        if not isinstance(self.codec, THCConfig):
            raise JobSpecError(f"job field 'codec' = {self.codec!r}: must be a thc.config.THCConfig", "codec")
        self._check_codec_fits_the_switch()
        if self.slots is None:
            _int("window", self.window, 1, contract.SLOTS)
            object.__setattr__(self, "slots", max(self.window, DEFAULT_SLOTS))
        _int("slots", self.slots, 1, contract.SLOTS)
        _int("window", self.window, 1, self.slots)
        if self.words not in contract.WORDS_VARIANTS:
            raise JobSpecError(
                f"job field 'words' = {self.words!r}: the program's cells have "
                f"{', '.join(map(str, contract.WORDS_VARIANTS))} words",
                "words",
            )
        _int("key", self.key, NO_KEY, KEYS[-1])  # KEYS, or NO_KEY

    def _check_codec_fits_the_switch(self) -> None:
        """The codec is valid (THCConfig said so); what the program fixes on top: indices of at most
        contract.MAX_BITS bits, table values in a byte, a table named by its kind, sums that fit a lane, and
        (for THC's tables) a value of its own for every index."""
        c = self.codec
        _int("bits", c.bits, 1, contract.MAX_BITS)
        _int("granularity", c.granularity, 1, contract.TABLE_VALUE_MAX)
        if not isinstance(c.table, str):
            raise JobSpecError(
                f"job field 'table' = {c.table!r}: a job names its table kind ({', '.join(TABLE_KINDS)})", "table"
            )
        levels = 1 << c.bits
        if c.quantizer == "thc" and c.granularity < levels - 1:
            raise JobSpecError(
                f"job {self.job_id}: a {c.bits}-bit table has {levels} levels, so g must be at least "
                f"{levels - 1} for each index to stand for its own value (got g={c.granularity}); raise g or "
                "lower --bits",
                "granularity",
            )
        total = self.workers * c.granularity
        if total > contract.SUM_LANE_MAX:
            raise JobSpecError(
                f"job {self.job_id}: sums need n*g = {self.workers}*{c.granularity} = {total}, more than "
                f"the switch's widest lanes hold ({contract.SUM_LANE_MAX}); use fewer workers or a smaller "
                "granularity",
                "workers",
            )

    # ---- what follows from it ---------------------------------------------------------------------

    @property
    def lane_bits(self) -> int:
        """THC sum lanes: 8 bits when every sum fits a byte (n*g <= 255), else 16."""
        return contract.LANES_8 if self.workers * self.codec.granularity <= contract.LANE8_MAX else contract.LANES_16

    @property
    def coords_per_request(self) -> int:
        """THC coordinates per request: as many as one cell holds lanes (1,024 or 512 with 1 KiB cells)."""
        return contract.per_request(self.lane_bits, self.words)

    @property
    def fix32_per_request(self) -> int:
        """FIX32 values per request: two int32 per word (256 with 1 KiB cells)."""
        return contract.per_request(contract.LANES_INT32, self.words)

    def table_values(self) -> list[int]:
        """V[0 .. 2^b - 1], the table the switch sums with and the workers decode with."""
        return [int(v) for v in self.codec.make_table().values]

    def replace(self, **changes) -> JobSpec:
        """This job with other framing (window, slots, key, ...) or, for a codec field, another codec."""
        codec = {name: changes.pop(name) for name in CODEC_FIELDS if name in changes}
        if codec:
            changes["codec"] = dataclasses.replace(changes.get("codec", self.codec), **codec)
        return dataclasses.replace(self, **changes)

    # ---- as a file: one flat JSON object, the codec's fields beside the framing ---------------------

    def to_dict(self) -> dict:
        codec = dataclasses.asdict(self.codec)
        codec["clip"] = _clip_text(self.codec.clip)
        framing = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "codec"}
        return {"job_id": self.job_id, "workers": self.workers, **codec, **framing}

    @classmethod
    def from_dict(cls, data: dict, where: str = "the job description") -> JobSpec:
        if not isinstance(data, dict):
            raise JobSpecError(f"{where}: a job description is a JSON object, not {type(data).__name__}")
        framing = {f.name for f in dataclasses.fields(cls)} - {"codec"}
        names = framing | set(CODEC_FIELDS)
        unknown = sorted(set(data) - names)
        if unknown:
            fields = ", ".join(sorted(names))
            raise JobSpecError(f"{where}: unknown field '{unknown[0]}' (fields: {fields})", unknown[0])
        missing = [n for n in ("job_id", "workers") if n not in data]
        if missing:
            raise JobSpecError(f"{where}: field '{missing[0]}' is missing", missing[0])
        try:
            codec = THCConfig(**{name: data[name] for name in CODEC_FIELDS if name in data})
            return cls(codec=codec, **{name: data[name] for name in framing if name in data})
        except ConfigError as exc:
            field = f"field '{exc.field}': " if exc.field and f"'{exc.field}'" not in str(exc) else ""
            tern = data.get("quantizer") == "terngrad" and exc.field in TERNGRAD
            raise JobSpecError(
                f"{where}: {field}{exc}" + (f" ({TERNGRAD_OPTIONS})" if tern else ""), exc.field
            ) from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> JobSpec:
        return cls.from_dict(read_json(path), str(path))

    def describe(self) -> str:
        """One line for logs: what the job compresses and how it is framed."""
        c = self.codec
        parts = "" if c.transform else ", no transform"
        parts += ", error feedback" if c.error_feedback else ""
        kind = "TernGrad" if c.quantizer == "terngrad" else f"{c.table} table"
        return (
            f"job {self.job_id}: {self.workers} workers, b={c.bits} g={c.granularity} "
            f"p={_clip_text(c.clip)} {kind}{parts}, {self.lane_bits}-bit lanes, "
            f"{self.coords_per_request} coordinates a request, window {self.window} of {self.slots} slots"
        )


def read_json(path: str | Path):
    """A job file's JSON (a description, or a ticket: contract/ticket.py), or JobSpecError in one line."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise JobSpecError(f"cannot read the job description {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise JobSpecError(f"{path}: not UTF-8 text (thc-ctl job add --save writes JSON)") from None
    except json.JSONDecodeError as exc:
        raise JobSpecError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None


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
    d = THCConfig()
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
        type=int_in(0, MAX_SEED),
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
        default=DEFAULT_WINDOW,
        help=f"requests in flight per worker, the same on every worker (default {DEFAULT_WINDOW})",
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
    return JobSpec.from_dict(fields, "the job options")


def option_flag(field: str) -> str:
    """The option of add_job_options that sets `field`, as a command line spells it: --thc-seed for seed."""
    return BARE_FLAGS.get(field) or f"--{OPTION_DESTS[field].replace('_', '-')}"


def option_as_given(args: argparse.Namespace, field: str) -> str:
    """The option that set `field`, as a command line reads: a bare flag, or the option and its value."""
    return BARE_FLAGS.get(field) or f"{option_flag(field)} {getattr(args, OPTION_DESTS[field])}"
