"""What a THC job may be: bits, granularity, clip probability, table kinds and quantizers, each checked
once here so that the config and the tables (which the config builds) share one rule without importing
each other."""

from __future__ import annotations

import math
from fractions import Fraction

from .errors import ConfigError

# The one chunk default, for the codec and every job: small chunks pad little (a bucket of 2,410 parameters
# is 2048 + 512 coordinates, not 4096), and the testbed's models are small. The reference's d is 2^20
# (PAPER_CHUNK), which the NMSE command line and the codec benchmark keep for comparison with the paper.
DEFAULT_CHUNK = 2**11
PAPER_CHUNK = 2**20

__all__ = [
    "MAX_BITS",
    "QUANTIZERS",
    "TABLE_KINDS",
    "TERNGRAD",
    "check_bits",
    "check_granularity",
    "parse_probability",
    "terngrad_conflict",
]

TABLE_KINDS = ("optimal", "uniform")
QUANTIZERS = ("thc", "terngrad")
MAX_BITS = 8
# TernGrad as a table codec: its three levels {-s, 0, s} are the uniform 2-bit table at g = 2, (0, 1, 1, 2)
# (both middle indices stand for 0), and its scale is the largest |x| itself, with no transform before it
TERNGRAD = {"bits": 2, "granularity": 2, "table": "uniform", "transform": False}


def parse_probability(value: str | float | Fraction) -> float:
    """Read a probability written as a float or a fraction ("1/32"); it must lie strictly in (0, 1)."""
    try:
        p = float(Fraction(value.strip())) if isinstance(value, str) else float(value)
    except (ValueError, ZeroDivisionError, TypeError) as exc:
        raise ConfigError(f"clip probability {value!r} is not a number or a fraction like 1/32", "clip") from exc
    if not (math.isfinite(p) and 0.0 < p < 1.0):
        raise ConfigError(f"clip probability p={value!r} must lie strictly between 0 and 1", "clip")
    return p


def check_bits(bits: object) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
        raise ConfigError(f"bits={bits!r} out of range: THC supports 1 to {MAX_BITS} bits per coordinate", "bits")
    return bits


def check_granularity(granularity: object) -> int:
    if isinstance(granularity, bool) or not isinstance(granularity, int) or not 1 <= granularity <= 65535:
        raise ConfigError(
            f"granularity g={granularity!r} out of range: it must be an integer from 1 to 65535", "granularity"
        )
    return granularity


def terngrad_conflict(described: object) -> str | None:
    """The first field TERNGRAD fixes that a terngrad config or job description has otherwise."""
    return next((name for name, want in TERNGRAD.items() if getattr(described, name) != want), None)
