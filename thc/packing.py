"""Bit packing of b-bit table indices, first coordinate in the high bits (b=4: two per byte, high nibble first).

The packed stream is the big-endian bit string of the indices: every 8 indices of b bits fill exactly b
bytes, so any b from 1 to 8 packs with the same few vectorised shifts. The last byte is zero-padded.
"""

from __future__ import annotations

import numpy as np

from .errors import AggregationError
from .limits import check_bits

__all__ = ["pack_indices", "unpack_indices", "packed_size"]


def packed_size(count: int, bits: int) -> int:
    """Bytes needed for ``count`` indices of ``bits`` bits."""
    return (count * check_bits(bits) + 7) // 8


def pack_indices(idx: np.ndarray, bits: int) -> np.ndarray:
    """Pack b-bit indices (uint8, each < 2**b) into a uint8 array of ceil(len*b/8) bytes."""
    bits = check_bits(bits)
    idx = np.asarray(idx)
    if idx.ndim != 1:
        raise AggregationError(f"pack_indices takes a 1-D index array, got shape {idx.shape}")
    if idx.dtype != np.uint8:
        if idx.dtype.kind not in "iu":
            raise AggregationError(f"indices must be unsigned integers, got dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() > 255):
            raise AggregationError("indices must lie in 0..255")
        idx = idx.astype(np.uint8)
    count = idx.size
    if count and int(idx.max()) >= 2**bits:
        raise AggregationError(f"index {int(idx.max())} does not fit in {bits} bits")
    if bits == 8:
        return idx.copy()
    groups = -(-count // 8)
    padded = np.zeros(groups * 8, dtype=np.uint64)
    padded[:count] = idx
    lanes = padded.reshape(groups, 8)
    word = np.zeros(groups, dtype=np.uint64)
    for k in range(8):  # index k of a group occupies bits [b*(7-k), b*(8-k)) of a b-byte big-endian word
        word |= lanes[:, k] << np.uint64(bits * (7 - k))
    out = np.empty((groups, bits), dtype=np.uint8)
    for m in range(bits):
        out[:, m] = (word >> np.uint64(8 * (bits - 1 - m))) & np.uint64(0xFF)
    return out.reshape(-1)[: packed_size(count, bits)]


def unpack_indices(buf: np.ndarray | bytes, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_indices`: the first ``count`` b-bit indices of ``buf`` as uint8."""
    bits = check_bits(bits)
    data = np.frombuffer(buf, dtype=np.uint8) if isinstance(buf, (bytes, bytearray, memoryview)) else np.asarray(buf)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise AggregationError(f"packed buffer must be 1-D uint8, got {data.dtype} {data.shape}")
    if count < 0 or data.size < packed_size(count, bits):
        raise AggregationError(
            f"{count} indices of {bits} bits need {packed_size(count, bits)} bytes, buffer has {data.size}"
        )
    if bits == 8:
        return data[:count].copy()
    groups = -(-count // 8)
    raw = np.zeros(groups * bits, dtype=np.uint64)
    take = min(data.size, groups * bits)
    raw[:take] = data[:take]
    raw = raw.reshape(groups, bits)
    word = np.zeros(groups, dtype=np.uint64)
    for m in range(bits):
        word |= raw[:, m] << np.uint64(8 * (bits - 1 - m))
    mask = np.uint64(2**bits - 1)
    out = np.empty((groups, 8), dtype=np.uint8)
    for k in range(8):
        out[:, k] = (word >> np.uint64(bits * (7 - k))) & mask
    return out.reshape(-1)[:count]
