"""Exceptions raised by the THC library.

Every error the library raises on bad input is a ``THCError``; it subclasses ``ValueError`` so that callers
that already guard against bad values keep working. The subclasses say which part of the input was wrong,
and every message names the offending value and the limit it broke.
"""

__all__ = [
    "THCError",
    "ConfigError",
    "TableError",
    "GradientError",
    "LaneOverflowError",
    "AggregationError",
    "MembershipChanged",
]


class THCError(ValueError):
    """Base class of every error raised by :mod:`thc` on bad input."""


class ConfigError(THCError):
    """A parameter is out of range: bits, granularity, clip probability, chunk size, seed, kind. `field` names
    the THCConfig field when there is one, so that a job description read from a file can say which line
    to change."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class TableError(THCError):
    """A lookup table is malformed: wrong length, endpoints, not symmetric or not increasing."""


class GradientError(THCError):
    """A gradient cannot be compressed: NaN or Inf, empty, or an unsupported dtype."""


class LaneOverflowError(THCError):
    """The sums of a job cannot fit the aggregator's lanes (n * g >= 2**lane_bits)."""


class AggregationError(THCError):
    """Aggregated data does not match the compressed tensor: wrong chunk count, length or range."""


class MembershipChanged(RuntimeError):
    """The aggregator's set of contributors changed during a round (a worker failed and the job was
    admitted again without it): nothing of the round was aggregated, and the caller redoes the round
    from its norm phase with the inputs it still holds. Not bad input, so not a THCError."""
