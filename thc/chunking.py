"""Splitting a flat tensor into chunks; THC pads each chunk to a power of two for the Hadamard transform."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Chunk", "ChunkGroup", "plan_chunks", "group_chunks", "next_power_of_two"]


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


@dataclass(frozen=True)
class ChunkGroup:
    """Consecutive chunks with one padded size that can be transformed as one (count, padded) batch.

    Either several full chunks (no padding, so their data is contiguous) or a single chunk.
    """

    chunks: tuple[Chunk, ...]

    @property
    def padded(self) -> int:
        return self.chunks[0].padded

    @property
    def count(self) -> int:
        return len(self.chunks)

    @property
    def start(self) -> int:
        return self.chunks[0].start

    @property
    def size(self) -> int:
        """Entries in the group's buffer: count * padded."""
        return self.count * self.padded


MAX_GROUP = 2**24  # coordinates per batch: bounds the scratch buffers (a few of this many floats)


def group_chunks(chunks: list[Chunk], max_group: int = MAX_GROUP) -> list[ChunkGroup]:
    """Batch runs of full chunks of equal size, up to ``max_group`` coordinates; a padded chunk stands alone."""
    groups: list[list[Chunk]] = []
    for c in chunks:
        full = c.length == c.padded
        last = groups[-1] if groups else None
        if (
            last
            and full
            and last[-1].length == last[-1].padded
            and last[-1].padded == c.padded
            and (len(last) + 1) * c.padded <= max_group
        ):
            last.append(c)
        else:
            groups.append([c])
    return [ChunkGroup(tuple(g)) for g in groups]
