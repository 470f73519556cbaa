"""thc.streams makes numpy's seeds, word for word: the codec's signs and rounding depend on it."""

import numpy as np
import pytest

from thc.streams import MIN_BATCH, spawn_seeds


def keys(count):
    """Entropies and prefixes of every length in words, zeros and 32-bit boundaries included."""
    rng = np.random.default_rng(0)
    special = [0, 1, 2**32 - 1, 2**32, 2**64 - 1, 2**64, 2**100 + 7]

    def value():
        return int(rng.choice(special)) if rng.random() < 0.3 else int(rng.integers(0, 2**63)) >> int(rng.integers(64))

    for _ in range(count):
        yield value(), tuple(value() for _ in range(int(rng.integers(1, 7))))


@pytest.mark.parametrize("first, count", [(0, MIN_BATCH), (0, 37), (5, 1), (1000, 8), (2**32 - 6, 6), (2**32 - 3, 6)])
def test_seeds_make_numpys_state_words(first, count):
    for entropy, prefix in keys(60):
        got = spawn_seeds(entropy, prefix, first, count)
        assert len(got) == count
        for i, seed in enumerate(got):
            want = np.random.SeedSequence(entropy, spawn_key=(*prefix, first + i))
            for n_words, dtype in ((4, np.uint64), (8, np.uint32), (3, np.uint32), (11, np.uint32), (6, np.uint64)):
                a, b = seed.generate_state(n_words, dtype), want.generate_state(n_words, dtype)
                assert a.dtype == b.dtype and np.array_equal(a, b), (entropy, prefix, first + i, n_words, dtype)


def test_pcg64_streams_from_the_seeds_are_numpys():
    prefix = (0x524F554E, 3, 1, 2**40)
    for i, seed in enumerate(spawn_seeds(7, prefix, 0, 16)):
        want = np.random.PCG64(np.random.SeedSequence(7, spawn_key=(*prefix, i))).random_raw(64)
        assert np.array_equal(np.random.PCG64(seed).random_raw(64), want)


def test_a_seed_hands_out_copies():
    seed = spawn_seeds(1, (2,), 0, MIN_BATCH)[0]
    words = seed.generate_state(8)
    words[:] = 0
    assert seed.generate_state(8).any()
