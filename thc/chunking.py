"""Splitting a flat tensor into chunks; THC pads each chunk to a power of two for the Hadamard transform."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Chunk", "plan_chunks", "next_power_of_two"]


@dataclass(frozen=True)
class Chunk:
    """Coordinates [start, start + length) of the flat tensor, carried in a buffer of ``padded`` entries."""

    index: int
    start: int
    length: int
    padded: int

    @property
    def stop(self) -> int:
        return self.start + self.length


def next_power_of_two(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def plan_chunks(numel: int, chunk: int, pad_to_power_of_two: bool = True) -> list[Chunk]:
    """Full chunks of ``chunk`` coordinates, then the remainder (padded up to a power of two if asked)."""
    chunks = []
    for i, start in enumerate(range(0, numel, chunk)):
        length = min(chunk, numel - start)
        padded = next_power_of_two(length) if pad_to_power_of_two else length
        chunks.append(Chunk(i, start, length, padded))
    return chunks
