"""Reference aggregation: table lookups, integer sums, lane sizing and refusal."""

import numpy as np
import pytest

from thc import make_table
from thc.aggregate import check_lanes, lane_bits_needed, lane_dtype, max_workers, reference_aggregate
from thc.errors import AggregationError, LaneOverflowError, THCError


def test_lane_bits_needed():
    assert lane_bits_needed(1, 30) == 5
    assert lane_bits_needed(8, 30) == 8  # 240 fits a byte
    assert lane_bits_needed(9, 30) == 9  # 270 does not
    assert lane_bits_needed(32, 30) == 10
    assert lane_bits_needed(1, 1) == 1
    assert max_workers(30, 8) == 8 and max_workers(30, 16) == 2184


def test_a_job_that_cannot_fit_is_refused_naming_the_limit():
    check_lanes(8, 30, 8)
    with pytest.raises(LaneOverflowError) as info:
        check_lanes(9, 30, 8)
    message = str(info.value)
    assert "270" in message and "255" in message and "at most 8 workers" in message and "9 bits" in message
    assert isinstance(info.value, THCError)


def test_sums_are_table_values_added_per_coordinate():
    table = make_table()
    rng = np.random.default_rng(0)
    workers = [rng.integers(0, 16, 1000).astype(np.uint8) for _ in range(5)]
    sums = reference_aggregate(workers, table)
    assert sums.dtype == np.int64
    assert np.array_equal(sums, sum(table.values[w] for w in workers))


def test_lane_sized_accumulation_refuses_overflowing_jobs():
    table = make_table()
    full = [np.full(4, 15, np.uint8)] * 9  # every worker sends the top value, 30
    with pytest.raises(LaneOverflowError, match="8-bit lane"):
        reference_aggregate(full, table, lane_bits=8)
    assert reference_aggregate(full[:8], table, lane_bits=8).tolist() == [240] * 4
    assert reference_aggregate(full, table).tolist() == [270] * 4  # lanes sized from n and g
    assert lane_dtype(9) == np.uint16


def test_partial_aggregation_sums_only_who_arrived():
    table = make_table()
    idx = [np.array([0, 15, 7], np.uint8), np.array([15, 15, 8], np.uint8)]
    assert reference_aggregate(idx[:1], table).tolist() == [0, 30, 14]
    assert reference_aggregate(idx, table).tolist() == [30, 60, 30]


def test_malformed_contributions_are_refused():
    table = make_table()
    with pytest.raises(AggregationError, match="at least one"):
        reference_aggregate([], table)
    with pytest.raises(AggregationError, match="all must match"):
        reference_aggregate([np.zeros(3, np.uint8), np.zeros(4, np.uint8)], table)
    with pytest.raises(AggregationError, match="index 16"):
        reference_aggregate([np.array([16], np.uint8)], table)
