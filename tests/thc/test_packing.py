"""Bit packing of b-bit indices."""

import numpy as np
import pytest

from thc.errors import AggregationError, ConfigError
from thc.packing import pack_indices, packed_size, unpack_indices


def test_b4_packs_two_per_byte_first_in_the_high_nibble():
    packed = pack_indices(np.array([0x1, 0x2, 0xA, 0xF, 0x7], dtype=np.uint8), 4)
    assert packed.dtype == np.uint8
    assert packed.tolist() == [0x12, 0xAF, 0x70]


def test_known_layouts_for_other_widths():
    assert pack_indices(np.array([1, 0, 1, 1, 0, 0, 0, 1, 1], np.uint8), 1).tolist() == [0b10110001, 0b10000000]
    assert pack_indices(np.array([3, 0, 2, 1], np.uint8), 2).tolist() == [0b11001001]
    assert pack_indices(np.array([5, 3], np.uint8), 3).tolist() == [0b10101100]


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 1000, 4099])
def test_round_trip_for_every_width_and_length(bits, count):
    idx = np.random.default_rng(bits * 10000 + count).integers(0, 2**bits, count).astype(np.uint8)
    packed = pack_indices(idx, bits)
    assert packed.size == packed_size(count, bits) == (count * bits + 7) // 8
    assert np.array_equal(unpack_indices(packed, bits, count), idx)
    assert np.array_equal(unpack_indices(packed.tobytes(), bits, count), idx)
    # the packed stream is the big-endian bit string of the indices
    bitstring = np.unpackbits(idx[:, None], axis=1)[:, 8 - bits :].reshape(-1)
    assert np.array_equal(packed, np.packbits(bitstring))


def test_index_too_wide_and_short_buffer_are_refused():
    with pytest.raises(AggregationError, match="does not fit in 3 bits"):
        pack_indices(np.array([8], np.uint8), 3)
    with pytest.raises(AggregationError, match="need 5 bytes"):
        unpack_indices(np.zeros(4, np.uint8), 4, 10)
    with pytest.raises(ConfigError, match="bits"):
        pack_indices(np.array([1], np.uint8), 9)
