"""The shared pool of cells (p4/README.md, "Shared pool"): where it is, which jobs take their cells from it,
what the switch needs to know about them, and how full it is.

A pool job keeps its bookkeeping slots in the range only pool jobs use (slots SLOTS .. BOOK_SLOTS - 1), and
each of its uses claims a cell of sums from the pool as it starts: the use of (slot, round) takes the cell
ring_offset + round * n_slots + slot around the pool. The pool is the top of the cells of sums, the largest
power of two that no static job's slots reach (static jobs are placed first fit from slot 0), unless a size
is asked for; every pool job on a switch names the same pool. Each job's ring gets RING_WINDOWS * n_slots
cells, placed first fit around the pool, or where it overlaps the fewest other rings' cells when the pool
is short. A pool job is admitted however full the pool is: a use whose cell is taken falls back
(KIND_FALLBACK) and is aggregated elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

import contract
from controller.errors import JobRefused
from controller.p4info import P4Info
from controller.writes import DELETE, INSERT, MODIFY, TableWrite

# A job's uses in flight lie fewer than 3 * n_slots ring positions apart (p4/README.md, "Shared pool"), so a
# ring of 4 * n_slots cells never meets itself.
RING_WINDOWS = 4


@dataclass(frozen=True)
class Pool:
    """Cells base .. base + cells - 1 of the sums (cells: a power of two, or 0)."""

    base: int
    cells: int

    @property
    def slots(self) -> range:
        """The static slots whose cells the pool takes (two cells a slot)."""
        return range(self.base // 2, (self.base + self.cells + 1) // 2)


def _static_cells_end(static_jobs) -> int:
    """The first cell above every static job's cells."""
    return max((2 * (j.slot_base + j.n_slots) for j in static_jobs), default=0)


def place_pool(static_jobs, cells: int | None = None) -> Pool:
    """The pool for a switch holding `static_jobs`: `cells` cells (a power of two, or 0) at the top of the
    cells of sums, or the largest power of two that fits above the static jobs."""
    room = contract.CELLS - _static_cells_end(static_jobs)
    if cells is None:
        cells = 1 << (room.bit_length() - 1) if room > 0 else 0
    elif cells < 0 or cells & (cells - 1) or cells > contract.CELLS:
        raise JobRefused(f"a pool of {cells} cells: the pool is a power of two of cells up to {contract.CELLS}, or 0")
    elif cells > room:
        raise JobRefused(
            f"a pool of {cells} cells does not fit above the static jobs' slots ({room} cells free at the top); "
            "ask for fewer with --pool-cells or remove a static job"
        )
    return Pool(contract.CELLS - cells, cells)


def is_pool_job(job) -> bool:
    return job.pool is not None


def ring_cells(n_slots: int) -> int:
    return RING_WINDOWS * n_slots


def place_ring(n_slots: int, pool: Pool, pool_jobs) -> int:
    """Where a new pool job's ring starts: the first offset whose ring of ring_cells(n_slots) cells meets no
    other pool job's ring, else the other rings' start or end where it meets the fewest of their cells."""
    if pool.cells == 0:
        return 0
    size = min(ring_cells(n_slots), pool.cells)

    def used(job) -> set[int]:
        offset = job.pool[2]
        return {(offset + i) % pool.cells for i in range(min(ring_cells(job.n_slots), pool.cells))}

    taken = [used(j) for j in pool_jobs]
    everyone = set().union(*taken) if taken else set()
    starts = sorted({0} | {(j.pool[2] + ring_cells(j.n_slots)) % pool.cells for j in pool_jobs})

    def overlap(offset: int) -> int:
        return sum(((offset + i) % pool.cells) in everyone for i in range(size))

    return min(starts, key=lambda offset: (overlap(offset), offset))


def fallback_note(job, others) -> str:
    """One line on how the pool job `job` will be served: its uses in flight against the pool's cells, and
    what happens to a use that finds its cell taken."""
    pool = Pool(*job.pool[:2])
    pool_jobs = [j for j in others if is_pool_job(j) and j.job_id != job.job_id] + [job]
    demand = sum(ring_cells(j.n_slots) for j in pool_jobs)
    if pool.cells == 0:
        return (
            f"job {job.job_id}: the pool has no cells (static jobs hold them all): every use falls back "
            "(FALLBACK, counted as POOL_TAKEN) and is aggregated by the parameter server"
        )
    share = demand / pool.cells
    return (
        f"job {job.job_id}: pool of {pool.cells} cells (cells {pool.base}..{pool.base + pool.cells - 1}) for "
        f"rings of {demand} cells of {len(pool_jobs)} pool job(s) ({share:.2f}x; its ring from cell "
        f"{pool.base + job.pool[2]}): a use whose cell is taken "
        "falls back (FALLBACK, counted as POOL_TAKEN) and is aggregated by the parameter server"
    )


# ---- writes and reads ---------------------------------------------------------------------------


def pool_write(kind: str, job_id: int, pool: tuple[int, int, int] | None = None) -> TableWrite:
    """The job's `pool` entry (pool_base, pool_cells, ring_offset): its uses claim cells of the pool from
    ring_offset on (DELETE needs the job id only)."""
    if kind == DELETE:
        return TableWrite(DELETE, contract.POOL, (job_id,))
    return TableWrite(kind, contract.POOL, (job_id,), contract.USE_POOL, tuple(pool))


def live_write(kind: str, epoch: int) -> TableWrite:
    """The epoch's `pool_live` entry: while it is there, cells the epoch holds are not free."""
    if kind == DELETE:
        return TableWrite(DELETE, contract.POOL_LIVE, (epoch,))
    return TableWrite(kind, contract.POOL_LIVE, (epoch,), contract.OWNER_LIVE, ())


def add_writes(job, previous, pool_installed: bool) -> tuple[list, list]:
    """(first, then): the pool entry and the epoch's liveness before the jobs entry; the previous run's
    liveness after it (its cells become free), and the pool entry away if the job is no longer a pool job."""
    first: list = []
    then: list = []
    if job.pool is not None:
        first.append(pool_write(MODIFY if pool_installed else INSERT, job.job_id, job.pool))
        first.append(live_write(INSERT, job.epoch))
    elif pool_installed:
        then.append(pool_write(DELETE, job.job_id))
    if previous is not None and previous.pool is not None and previous.epoch != job.epoch:
        then.append(live_write(DELETE, previous.epoch))
    return first, then


def fallback_server_write(kind: str, job_id: int) -> TableWrite:
    """On a fallback server (a parameter server holding a pool job for its uses that fell back): the job's
    `fallback_rounds` entry, so any later round may start a slot's next use there."""
    if kind == DELETE:
        return TableWrite(DELETE, contract.FALLBACK_ROUNDS, (job_id,))
    return TableWrite(kind, contract.FALLBACK_ROUNDS, (job_id,), contract.ANY_LATER_ROUND, ())


def remove_writes(job) -> list:
    """After the jobs entry is gone: the pool entry and the run's liveness (its cells become free)."""
    if job is None or job.pool is None:
        return []
    return [pool_write(DELETE, job.job_id), live_write(DELETE, job.epoch)]


def decode_entry(p4info: P4Info, entry) -> tuple[int, tuple[int, int, int]] | None:
    """(job id, (pool_base, pool_cells, ring_offset)) of a `pool` entry, else None."""
    d = p4info.describe(entry)
    if d.get("action_name") != contract.USE_POOL:
        return None
    p = d["action_params"]
    return d["match"]["hdr.thc.job_id"], tuple(p[name] for name, _ in contract.USE_POOL_PARAMS)


@dataclass(frozen=True)
class PoolUse:
    """A pool job's cells: claimed and freed by its run (epoch), and its uses that fell back."""

    job_id: int
    epoch: int
    claimed: int
    freed: int
    fallbacks: int  # uses that found their cell taken (POOL_TAKEN)
    fallback_answers: int  # FALLBACK answers to later requests, retransmissions and queries of them

    @property
    def held(self) -> int:
        return self.claimed - self.freed

    def to_dict(self) -> dict:
        return {
            "job": self.job_id,
            "epoch": self.epoch,
            "cells_held": self.held,
            "claimed": self.claimed,
            "freed": self.freed,
            "fallbacks": self.fallbacks,
            "fallback_answers": self.fallback_answers,
        }


def counter_reads(p4info: P4Info, epochs) -> list[p4runtime_pb2.Entity]:
    """One read of pool_claims and one of pool_frees per epoch."""
    reads = []
    for name in (contract.POOL_CLAIMS, contract.POOL_FREES):
        counter_id = p4info.counter(name).preamble.id
        reads += [
            p4runtime_pb2.Entity(
                counter_entry=p4runtime_pb2.CounterEntry(counter_id=counter_id, index=p4runtime_pb2.Index(index=e))
            )
            for e in epochs
        ]
    return reads


def decode_counts(p4info: P4Info, entities) -> dict[str, dict[int, int]]:
    """{POOL_CLAIMS: {epoch: packets}, POOL_FREES: {...}} from the entities counter_reads asked for."""
    ids = {p4info.counter(name).preamble.id: name for name in (contract.POOL_CLAIMS, contract.POOL_FREES)}
    out: dict[str, dict[int, int]] = {name: {} for name in ids.values()}
    for entity in entities:
        entry = entity.counter_entry
        if entry.counter_id in ids:
            out[ids[entry.counter_id]][entry.index.index] = entry.data.packet_count
    return out
