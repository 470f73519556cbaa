"""A per-bucket choice of aggregation mode that minimises the simulated iteration time (Espresso §4.4).

Espresso's greedy order: the largest buckets first (their fixed costs are amortised best, so they gain
most), ties broken by closeness to the output layer (DDP's bucket 0 is ready first and overlaps least).
Each bucket takes the mode that gives the shortest simulated step with every other choice fixed. One
greedy pass can be undone by a later choice (a bucket made blocking delays those after it), so passes
repeat until none changes anything: a coordinate descent that ends in a plan no single change improves,
and then no change of two buckets at once either.
``brute_force`` tries every plan, for tests and small models.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .timeline import Mode, StepProfile, Timeline, simulate

__all__ = ["Plan", "greedy_plan", "brute_force", "uniform"]


@dataclass
class Plan:
    """Bucket index -> mode name, its timeline, and how long the search took."""

    modes: dict[int, str]
    timeline: Timeline
    search_s: float = 0.0
    evaluations: int = 0

    @property
    def iteration_s(self) -> float:
        return self.timeline.iteration_s

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in self.modes.values():
            out[name] = out.get(name, 0) + 1
        return out


def _resolve(choice: Mapping[int, str], modes: Mapping[str, Mode]) -> dict[int, Mode]:
    return {i: modes[name] for i, name in choice.items()}


def uniform(profile: StepProfile, modes: Mapping[str, Mode], name: str) -> Plan:
    """Every bucket through ``name``."""
    choice = {b.index: name for b in profile.buckets}
    return Plan(choice, simulate(profile, _resolve(choice, modes)))


def greedy_plan(
    profile: StepProfile, modes: Mapping[str, Mode], start: str | None = None, max_passes: int = 10, pairs: bool = True
) -> Plan:
    """Espresso's greedy search over ``modes`` (name -> Mode), from every bucket in ``start`` (default the
    first mode: uncompressed, as Espresso starts), then repeated passes until no bucket changes; with
    ``pairs``, also until no change of two buckets at once helps (O(buckets² · modes²) simulations a pass)."""
    if not modes:
        raise ValueError("the planner needs at least one mode")
    began = time.perf_counter()
    start = start if start is not None else next(iter(modes))
    if start not in modes:
        raise ValueError(f"start mode {start!r} is not one of {sorted(modes)}")
    choice = {b.index: start for b in profile.buckets}
    best = simulate(profile, _resolve(choice, modes)).iteration_s
    order = sorted(profile.buckets, key=lambda b: (-b.numel, b.index))
    evaluations = 1
    for _ in range(max_passes):
        changed = False
        for b in order:
            for name in modes:
                if name == choice[b.index]:
                    continue
                trial = {**choice, b.index: name}
                t = simulate(profile, _resolve(trial, modes)).iteration_s
                evaluations += 1
                if t < best * (1 - 1e-12):
                    best, choice, changed = t, trial, True
        if not changed and pairs and len(order) > 1:
            # no single change helps: try changing two buckets at once (a bucket made blocking can pay off
            # only once another one stops queueing behind it), then go back to single changes
            for a, b in itertools.combinations(order, 2):
                for na, nb in itertools.product(modes, repeat=2):
                    if na == choice[a.index] or nb == choice[b.index]:
                        continue
                    trial = {**choice, a.index: na, b.index: nb}
                    t = simulate(profile, _resolve(trial, modes)).iteration_s
                    evaluations += 1
                    if t < best * (1 - 1e-12):
                        best, choice, changed = t, trial, True
        if not changed:
            break
    timeline = simulate(profile, _resolve(choice, modes))
    return Plan(choice, timeline, time.perf_counter() - began, evaluations)


def brute_force(profile: StepProfile, modes: Mapping[str, Mode], limit: int = 200_000) -> Plan:
    """The best of every |modes|^buckets plan (refused above ``limit`` plans)."""
    indices = [b.index for b in profile.buckets]
    names: Sequence[str] = list(modes)
    if len(names) ** len(indices) > limit:
        raise ValueError(f"{len(names)}^{len(indices)} plans exceed the brute-force limit of {limit}")
    began = time.perf_counter()
    best_choice, best_t, count = None, float("inf"), 0
    for combo in itertools.product(names, repeat=len(indices)):
        choice = dict(zip(indices, combo))
        t = simulate(profile, _resolve(choice, modes)).iteration_s
        count += 1
        if t < best_t:
            best_choice, best_t = choice, t
    return Plan(best_choice, simulate(profile, _resolve(best_choice, modes)), time.perf_counter() - began, count)
