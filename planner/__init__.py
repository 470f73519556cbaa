"""A per-bucket choice of aggregation mode that minimises the simulated iteration time (Espresso §4.4,
made exact by the timeline's structure).

Espresso simulates whole candidate strategies greedily. Here the timeline is built bucket by bucket in hook
order (timeline.advance), and all the rest of a step depends on after k buckets is four numbers
(timeline.Progress). So every plan's prefix is simulated once, shared by all its completions, and dropped when
another prefix is no worse in all four (dominance), or when a lower bound on any step it can lead to already
exceeds the best uniform plan (Espresso's bubble rule in bound form). What remains is a Pareto front of a few
states per bucket: the search is exact (as fast a plan as ``brute_force``'s) and quick. ``max_front`` caps
the front for adversarial profiles; past it the plan says ``exact=False``."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .timeline import Mode, Progress, StepProfile, Timeline, advance, finish, simulate

__all__ = ["Plan", "best_plan", "brute_force", "uniform"]


@dataclass
class Plan:
    """Bucket index -> mode name, its timeline, how long the search took, how many partial timelines it
    built, and whether it is provably optimal under the model."""

    modes: dict[int, str]
    timeline: Timeline
    search_s: float = 0.0
    evaluations: int = 0
    exact: bool = True

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


def _cost_table(profile: StepProfile, modes: Mapping[str, Mode]) -> list[list[tuple]]:
    """Per bucket in hook order, per mode: (encode, communication, decode seconds, blocking, pipeline),
    computed once (pipeline: Mode.pipeline_s)."""
    return [
        [
            (m.encode.seconds(b.numel), m.comm_s(b.numel), m.decode.seconds(b.numel), m.blocking, m.pipeline_s(b.numel))
            for m in modes.values()
        ]
        for b in profile.buckets
    ]


def _pareto(states: list[tuple[Progress, tuple[int, ...]]]) -> list[tuple[Progress, tuple[int, ...]]]:
    """The states no other state beats in delay, network, last decode and pipeline start at once (first of
    equals kept)."""
    states.sort(key=lambda s: (s[0].delay, s[0].net_free, s[0].last_done, s[0].pipeline_from()))
    kept: list[tuple[Progress, tuple[int, ...]]] = []
    for state in states:
        p = state[0]
        if not any(
            k.net_free <= p.net_free and k.last_done <= p.last_done and k.pipeline_from() <= p.pipeline_from()
            for k, _ in kept
        ):
            kept.append(state)
    return kept


def best_plan(profile: StepProfile, modes: Mapping[str, Mode], max_front: int = 2048) -> Plan:
    """The plan with the shortest simulated step over ``modes`` (name -> Mode), by the pruned search above."""
    if not modes:
        raise ValueError("the planner needs at least one mode")
    began = time.perf_counter()
    names = list(modes)
    buckets = profile.buckets
    costs = _cost_table(profile, modes)
    t0 = profile.forward_s
    # lower-bound pieces for what follows bucket k: the least network time left, and the latest
    # "ready + fastest own path" of any later bucket (both before the delay the prefix adds)
    rest_comm = [0.0] * (len(buckets) + 1)
    rest_path = [0.0] * (len(buckets) + 1)
    for k in range(len(buckets) - 1, -1, -1):
        # a pipelined round's early part may overlap the previous round: only the rest queues for sure
        rest_comm[k] = rest_comm[k + 1] + min(c[1] - (c[4][0] if c[4] else 0.0) for c in costs[k])
        fastest = min(c[0] + c[1] + c[2] for c in costs[k])
        rest_path[k] = max(rest_path[k + 1], t0 + buckets[k].ready_s + fastest)

    def bound(p: Progress, k: int) -> float:
        """No step that continues this state after bucket k-1 can end before this."""
        return (
            max(
                t0 + profile.backward_s + p.delay,
                p.last_done,
                p.net_free + rest_comm[k],
                rest_path[k] + p.delay if k < len(buckets) else 0.0,
            )
            + profile.optimizer_s
        )

    ceiling = min(uniform(profile, modes, n).iteration_s for n in names)
    front: list[tuple[Progress, tuple[int, ...]]] = [(Progress(net_free=t0), ())]
    built, exact = 0, True
    for k, b in enumerate(buckets):
        grown = []
        for state, path in front:
            called = t0 + b.ready_s + state.delay
            for m, (enc, comm, dec, blocking, pipeline) in enumerate(costs[k]):
                after = advance(state, called, enc, comm, dec, blocking, pipeline)[4]
                built += 1
                if bound(after, k + 1) <= ceiling * (1 + 1e-9):
                    grown.append((after, (*path, m)))
        front = _pareto(grown)
        if len(front) > max_front:
            front.sort(key=lambda s: bound(s[0], k + 1))
            front, exact = front[:max_front], False
    if not front:  # rounding lost the uniform plan's own path: it is the answer
        best = min(names, key=lambda n: uniform(profile, modes, n).iteration_s)
        choice = {b.index: best for b in buckets}
    else:
        _, path = min(front, key=lambda s: finish(profile, s[0])[2])
        choice = {b.index: names[m] for b, m in zip(buckets, path)}
    timeline = simulate(profile, _resolve(choice, modes))
    return Plan(choice, timeline, time.perf_counter() - began, built, exact)


def brute_force(profile: StepProfile, modes: Mapping[str, Mode], limit: int = 200_000) -> Plan:
    """The best of every |modes|^buckets plan, each simulated in full (refused above ``limit`` plans); the
    reference the search is tested against."""
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
