"""numpy's SeedSequence(entropy, spawn_key=prefix + (i,)) for a run of i at once, as seeds for PCG64.

THC keys every random stream by a spawn key that ends with the chunk: one stream per chunk for the
Hadamard signs, one per chunk and worker for the rounding. numpy hashes each key into a pool of four
words and PCG64 then hashes the pool into its state: per chunk, that is most of what a small chunk costs.
The chunks share the key's prefix, so its pool is hashed once, by numpy, and only the last word is hashed
in here, for all chunks at once: numpy's algorithm (O'Neill's seed_seq) with its constants, as uint32
arrays. The streams are numpy's exactly; tests/thc/test_streams.py compares them.
"""

from __future__ import annotations

import numpy as np
from numpy.random.bit_generator import ISeedSequence

__all__ = ["spawn_seeds"]

POOL = 4  # numpy's default pool size, in 32-bit words
INIT_A, MULT_A = 0x43B0D7E5, 0x931E8875  # hashing entropy into the pool
INIT_B, MULT_B = 0x8B51F9DD, 0x58F38DED  # hashing the pool into output words
MIX_L, MIX_R = 0xCA01F9DD, 0x4973F715
MASK = 0xFFFFFFFF
MIN_BATCH = 4  # below this many seeds numpy's own SeedSequence is as fast


def _words(value: int) -> int:
    """How many 32-bit words numpy makes of a non-negative integer (0 is one word)."""
    return max(1, (value.bit_length() + 31) // 32)


def _hash_consts(init: int, mult: int, start: int, count: int) -> np.ndarray:
    """The hash constant before each of `count` consecutive hashes, the first being hash number `start`."""
    h = init * pow(mult, start, 1 << 32) & MASK
    out = []
    for _ in range(count + 1):
        out.append(h)
        h = h * mult & MASK
    return np.array(out, dtype=np.uint32)


def _xorshift(x: np.ndarray) -> np.ndarray:
    return np.bitwise_xor(x, x >> np.uint32(16), out=x)


class _Seed(ISeedSequence):
    """A seed whose first output words are already known (PCG64 asks for four 64-bit words)."""

    def __init__(self, pool: np.ndarray, words: np.ndarray) -> None:
        self.pool, self.words = pool, words  # uint32: the pool, its first hashed words

    def generate_state(self, n_words: int, dtype=np.uint32) -> np.ndarray:
        wide = np.dtype(dtype) == np.uint64
        count = n_words * (2 if wide else 1)
        if count <= self.words.size:
            state = self.words[:count]
        else:  # numpy's loop, for more words than were made in advance
            consts = _hash_consts(INIT_B, MULT_B, 0, count)
            state = self.pool[np.arange(count) % POOL] ^ consts[:-1]
            state = _xorshift(state * consts[1:])
        return state.astype("<u4").view("<u8").astype(np.uint64) if wide else state.copy()


def spawn_seeds(entropy: int, prefix: tuple[int, ...], first: int, count: int) -> list[ISeedSequence]:
    """Seeds equal to SeedSequence(entropy, spawn_key=prefix + (i,)) for i = first .. first + count - 1.

    entropy and the prefix are non-negative integers; prefix is not empty.
    """
    if count < MIN_BATCH or first + count > 1 << 32:
        return [np.random.SeedSequence(entropy, spawn_key=(*prefix, i)) for i in range(first, first + count)]
    pool = np.random.SeedSequence(entropy, spawn_key=prefix).pool.astype(np.uint32)
    # the entropy words hashed so far: the entropy padded to the pool (a spawn key is given), then the prefix
    hashed = max(POOL, _words(entropy)) + sum(_words(k) for k in prefix)
    # numpy hashed the first POOL words into the pool, mixed every pool word with every other, then mixed
    # each later word into every pool word; the last word, i, is mixed in the same way
    consts = _hash_consts(INIT_A, MULT_A, POOL * POOL + POOL * (hashed - POOL), POOL)[:, None]
    last = np.arange(first, first + count, dtype=np.uint32)
    h = _xorshift((last ^ consts[:-1]) * consts[1:])
    pools = _xorshift(np.uint32(MIX_L) * pool[:, None] - np.uint32(MIX_R) * h)  # (POOL, count)
    consts = _hash_consts(INIT_B, MULT_B, 0, 2 * POOL)[:, None]
    words = _xorshift((pools[np.arange(2 * POOL) % POOL] ^ consts[:-1]) * consts[1:])  # (2 POOL, count)
    return [_Seed(p, w) for p, w in zip(pools.T.copy(), words.T.copy())]
