"""THC job parameters, validated once so that every later stage can trust them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ConfigError
from .limits import (
    DEFAULT_CHUNK,
    MAX_BITS,
    PAPER_CHUNK,
    QUANTIZERS,
    TABLE_KINDS,
    TERNGRAD,
    check_bits,
    check_granularity,
    parse_probability,
    terngrad_conflict,
)
from .tables import Table, make_table

MAX_SEED = 2**64 - 1  # numpy's SeedSequence takes any; a seed is written to job.json and given as --thc-seed

__all__ = [
    "THCConfig",
    "DEFAULT_CHUNK",
    "PAPER_CHUNK",
    "parse_probability",
    "check_bits",
    "check_granularity",
    "terngrad_conflict",
    "TABLE_KINDS",
    "QUANTIZERS",
    "TERNGRAD",
    "MAX_BITS",
    "MAX_SEED",
]


@dataclass(frozen=True)
class THCConfig:
    """Parameters shared by every worker of one THC job: the switch sums their table values and every worker
    decodes the sums, so all must hold the same table, seed and chunking.

    bits: b (the table has 2**b entries); granularity: g (table values are integers 0..g); clip: p, the
    two-sided clip probability of N(0, 1), T = Phi^-1(1 - p/2); table: "optimal" (least rounding variance),
    "uniform" or a :class:`thc.tables.Table`; chunk: the largest chunk, a power of two (the last is zero-padded
    to one); seed: fixes every round's Hadamard signs and rounding streams; error_feedback: carry each worker's
    compression error into its next gradient. transform and quantizer are the ablation's switches: without the
    transform coordinates are quantized as they are (thc.direct); "terngrad" is TernGrad's ternary levels,
    scaled by the largest |x| after clipping at T standard deviations (TERNGRAD fixes the other fields it needs)."""

    bits: int = 4
    granularity: int = 30
    clip: float = 1 / 32
    table: str | Table = "optimal"
    chunk: int = DEFAULT_CHUNK
    seed: int = 0
    error_feedback: bool = False
    transform: bool = True
    quantizer: str = "thc"

    def __post_init__(self) -> None:
        check_bits(self.bits)
        check_granularity(self.granularity)
        object.__setattr__(self, "clip", parse_probability(self.clip))
        if isinstance(self.table, str):
            if self.table not in TABLE_KINDS:
                raise ConfigError(f"table kind {self.table!r} unknown: use one of {', '.join(TABLE_KINDS)}", "table")
        else:
            if not isinstance(self.table, Table):
                raise ConfigError(
                    f"table must be 'optimal', 'uniform' or a Table, not {type(self.table).__name__}", "table"
                )
            if (self.table.bits, self.table.granularity) != (self.bits, self.granularity) or not math.isclose(
                self.table.clip, self.clip, rel_tol=1e-12
            ):
                raise ConfigError(
                    f"table (b={self.table.bits}, g={self.table.granularity}, p={self.table.clip}) does not match "
                    f"the config (b={self.bits}, g={self.granularity}, p={self.clip})",
                    "table",
                )
        c = self.chunk
        if isinstance(c, bool) or not isinstance(c, int) or c < 2 or c > 2**30 or c & (c - 1):
            raise ConfigError(f"chunk={c!r} must be a power of two from 2 to 2**30", "chunk")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"seed={self.seed!r} must be an integer from 0 to 2**64-1", "seed")
        if not isinstance(self.error_feedback, bool):
            raise ConfigError(f"error_feedback={self.error_feedback!r} must be True or False", "error_feedback")
        if not isinstance(self.transform, bool):
            raise ConfigError(f"transform={self.transform!r} must be True or False", "transform")
        if self.quantizer not in QUANTIZERS:
            raise ConfigError(f"quantizer {self.quantizer!r} unknown: use one of {', '.join(QUANTIZERS)}", "quantizer")
        conflict = terngrad_conflict(self) if self.quantizer == "terngrad" else None
        if conflict:
            fixed = ", ".join(f"{name}={value!r}" for name, value in TERNGRAD.items())
            raise ConfigError(f"{conflict}={getattr(self, conflict)!r}: the terngrad quantizer needs {fixed}", conflict)

    def make_table(self) -> Table:
        """The lookup table this config names (computed once per process, then cached)."""
        if isinstance(self.table, Table):
            return self.table
        return make_table(self.bits, self.granularity, self.clip, kind=self.table)
