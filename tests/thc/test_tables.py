"""Lookup tables: the reference table, exact optimality against brute force, validation."""

import itertools

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import norm

from thc import Table, make_table
from thc.errors import ConfigError, TableError, THCError
from thc.tables import (
    clip_threshold,
    clipping_error,
    optimal_values,
    segment_cost,
    table_from_values,
    table_rounding_variance,
    uniform_values,
)

REFERENCE = [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30]


def test_reference_table_b4_g30_p1_32():
    table = make_table(bits=4, granularity=30, clip=1 / 32, kind="optimal")
    assert table.values.tolist() == REFERENCE
    assert table.values.dtype == np.int64
    assert (table.bits, table.granularity, table.clip) == (4, 30, 1 / 32)
    assert table.threshold == pytest.approx(2.15387, abs=1e-5)
    assert table.inc == pytest.approx(0.143592, abs=1e-6)


def test_clip_may_be_given_as_a_fraction_string_and_tables_are_cached():
    assert make_table(4, 30, "1/32") is make_table(4, 30, 1 / 32)


def test_known_per_coordinate_errors_at_the_default():
    assert make_table(4, 30, 1 / 32).rounding_variance() == pytest.approx(0.01307, abs=5e-6)
    assert make_table(4, 30, 1 / 32, "uniform").rounding_variance() == pytest.approx(0.01332, abs=5e-6)
    assert make_table(4, 34, 1 / 1024).rounding_variance() == pytest.approx(0.0238, abs=5e-5)
    assert clipping_error(1 / 32) == pytest.approx(0.00727, abs=5e-6)


def test_segment_cost_matches_numerical_integration():
    for lo, hi in [(-2.15, -1.9), (-0.1, 0.2), (1.0, 2.15), (-3.0, 3.0)]:
        expected = quad(lambda z: norm.pdf(z) * (z - lo) * (hi - z), lo, hi)[0]
        assert float(segment_cost(lo, hi)) == pytest.approx(expected, rel=1e-9, abs=1e-15)
    T = clip_threshold(1 / 32)
    assert 2 * quad(lambda z: (z - T) ** 2 * norm.pdf(z), T, np.inf)[0] == pytest.approx(clipping_error(1 / 32))


def brute_force_best(bits, g, p):
    """Least objective over every symmetric non-decreasing integer table (enumerates the lower half)."""
    half = 2 ** (bits - 1)
    inc = 2 * clip_threshold(p) / g
    levels = (np.arange(g + 1) - g / 2) * inc
    cost = segment_cost(levels[:, None], levels[None, :])
    lowers = np.array(list(itertools.combinations_with_replacement(range(g // 2 + 1), half - 1)), dtype=np.int64)
    lowers = np.concatenate([np.zeros((len(lowers), 1), np.int64), lowers], axis=1)
    full = np.concatenate([lowers, g - lowers[:, ::-1]], axis=1)
    total = cost[full[:, :-1], full[:, 1:]].sum(axis=1)
    return float(total.min())


@pytest.mark.parametrize(
    "bits,g,p",
    [
        (1, 7, 0.1),
        (2, 2, 0.5),
        (2, 5, 1 / 32),
        (2, 9, 0.2),
        (3, 6, 1 / 32),
        (3, 7, 0.05),
        (3, 14, 1 / 32),
        (3, 20, 0.3),
        (4, 30, 1 / 32),
    ],
)
def test_optimal_table_is_the_exact_minimiser(bits, g, p):
    table = make_table(bits, g, p, "optimal")
    assert table_rounding_variance(table) == pytest.approx(brute_force_best(bits, g, p), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("bits", range(1, 9))
def test_every_bit_width_gives_a_valid_table_no_worse_than_uniform(bits):
    g = 2 * (2**bits - 1)
    opt = make_table(bits, g, 1 / 32, "optimal")
    uni = make_table(bits, g, 1 / 32, "uniform")
    assert opt.values.size == uni.values.size == 2**bits
    assert opt.rounding_variance() <= uni.rounding_variance() + 1e-15
    assert uni.values.tolist() == [2 * j for j in range(2**bits)]


def test_uniform_rounds_symmetrically_when_g_is_not_a_multiple():
    values = uniform_values(4, 34)
    assert values[0] == 0 and values[-1] == 34 and np.all(values + values[::-1] == 34)
    assert np.all(np.diff(values) >= 2)


def test_duplicate_values_are_allowed_when_g_is_small():
    values = optimal_values(3, 4, 0.1)
    assert np.all(np.diff(values) >= 0) and np.any(np.diff(values) == 0)


@pytest.mark.parametrize(
    "values,message",
    [
        ([0, 2, 1, 3], "not increasing"),
        ([0, 1, 1, 3], "not symmetric"),
        ([1, 2, 3, 4], "from 0 to g"),
        ([0, 1, 2], "2\\*\\*b entries"),
        ([0, 1.5, 1.5, 3], "integers"),
    ],
)
def test_malformed_tables_are_refused_with_the_reason(values, message):
    with pytest.raises(TableError, match=message):
        table_from_values(values, clip=1 / 32, granularity=3)


def test_table_values_are_read_only():
    with pytest.raises(ValueError):
        make_table().values[0] = 1


@pytest.mark.parametrize("bits", [0, 9, -1, 2.5, True])
def test_bits_out_of_range(bits):
    with pytest.raises(ConfigError, match="bits"):
        make_table(bits=bits)


@pytest.mark.parametrize("clip", [0, 1, -0.1, 1.5, float("nan"), "abc", "1/0"])
def test_clip_probability_outside_0_1(clip):
    with pytest.raises(THCError, match="clip probability"):
        make_table(clip=clip)


def test_unknown_kind_and_granularity():
    with pytest.raises(ConfigError, match="kind"):
        make_table(kind="best")
    with pytest.raises(ConfigError, match="granularity"):
        make_table(granularity=0)


def test_table_repr_and_levels():
    t = make_table()
    assert "0 3 5 7" in repr(t)
    assert t.levels[0] == pytest.approx(-t.threshold) and t.levels[-1] == pytest.approx(t.threshold)
    assert isinstance(t, Table)
