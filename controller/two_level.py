"""Two-level jobs (p4/README.md, "Two-level aggregation"): one job id on a spine and on each of its leaves.

Every leaf holds a job of its local workers with an `uplink` entry (its completed sums go to the spine as
one PARTIAL); the spine holds a job whose "workers" are the leaves (rid = leaf id, results addressed to
the leaf's service address) with lanes sized for all n workers. All of them share the job id, the slots
and the epoch, so `thc-ctl job list` on any switch tells the same run.

`plan` is pure: it checks every switch's part against what that switch holds before anything is
written, so a refused job leaves every switch as it was. `add_job` then writes the spine first and the
leaves after it (a leaf's first partial finds the spine's job), `remove_job` the leaves first (no new
partial goes up while the spine's job goes away). Every part comes from the one description of the job
(contract/job.py) and carries its key; lookup tables live on the leaves only (the spine adds partial lanes,
which already hold table values), and every part's lanes are sized for all n workers.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from contract.job import JobSpec
from controller import jobs
from controller.errors import BadInput, JobRefused
from controller.writes import Write


@dataclass(frozen=True)
class TwoLevelJob:
    """The parts of one two-level job: the spine's and each leaf's jobs entry, by switch name."""

    spine: str
    parts: dict[str, jobs.Job]  # switch -> its job (the spine's first)
    service_ips: dict[str, str]  # switch -> the address it serves

    @property
    def job(self) -> jobs.Job:
        return self.parts[self.spine]

    @property
    def job_id(self) -> int:
        return self.job.job_id

    @property
    def epoch(self) -> int:
        return self.job.epoch

    @property
    def slot_base(self) -> int:
        return self.job.slot_base

    @property
    def n_slots(self) -> int:
        return self.job.n_slots

    @property
    def lane_bits(self) -> int:
        return self.job.lane_bits

    @property
    def key(self) -> int:
        return self.job.key

    @property
    def n_workers(self) -> int:
        """All workers of the job (the spine's own n counts leaves)."""
        return sum(job.n_workers for name, job in self.parts.items() if name != self.spine)

    @property
    def leaves(self) -> list[str]:
        return [name for name in self.parts if name != self.spine]

    def to_dict(self) -> dict:
        return {
            "job_id": self.job_id,
            "two_level": True,
            "n_workers": self.n_workers,
            "slot_base": self.slot_base,
            "n_slots": self.n_slots,
            "epoch": self.epoch,
            "lane_bits": self.lane_bits,
            "spine": self.spine,
            "parts": {name: job.to_dict() for name, job in self.parts.items()},
        }


def _local_hosts(topology, hosts: list[str]) -> list[tuple[object, list[str]]]:
    """(leaf, its hosts among `hosts`) for every leaf that has any, in the topology's leaf order."""
    if not topology.two_level:
        raise BadInput(f"topology {topology.name} has no aggregation.leaves: it aggregates on one level")
    by_leaf: dict[str, list[str]] = {leaf.switch: [] for leaf in topology.aggregation.leaves}
    for host in hosts:
        if host not in topology.hosts:
            raise BadInput(f"unknown host '{host}' in topology {topology.name} (hosts: {', '.join(topology.hosts)})")
        leaf = topology.leaf_of(host)
        if leaf is None:
            raise BadInput(f"worker {host} is under no leaf of topology {topology.name}: every worker needs one")
        by_leaf[leaf.switch].append(host)
    return [(leaf, by_leaf[leaf.switch]) for leaf in topology.aggregation.leaves if by_leaf[leaf.switch]]


def plan(
    topology,
    spec: JobSpec,
    hosts: list[str],
    existing: dict[str, list[jobs.Job]] | None = None,
    *,
    words: int | None = None,
    slot_base: int | None = None,
    epoch: int | None = None,
    last_epochs: dict[str, int] | None = None,
    rng: random.Random | None = None,
) -> TwoLevelJob:
    """Every switch's part of job `spec` for `hosts`, checked against `existing` (switch -> the jobs it
    holds; missing: none). Leaf ids are given in the topology's leaf order, counting only leaves that
    have workers of the job. The slots are the lowest range free on every switch (or the job's own, when
    it is renewed); the epoch is one none of them has given (`last_epochs`: switch -> the last it gave);
    the key is the description's (or one fresh key for all parts)."""
    existing = existing or {}
    job_id = spec.job_id
    spine = topology.aggregation
    everyone = jobs.workers_from_topology(topology, spine.switch, list(hosts))  # known, distinct workers
    if len(everyone) != spec.workers:
        raise JobRefused(f"job {job_id}: {len(everyone)} worker hosts but the description counts {spec.workers}")
    local = _local_hosts(topology, list(hosts))
    switches = [spine.switch] + [leaf.switch for leaf, _ in local]
    held = [job for name in switches for job in existing.get(name, [])]
    last = max([0] + [(last_epochs or {}).get(name, 0) for name in switches] + [job.epoch for job in held])
    if epoch is None:
        epoch = jobs.next_epoch(last, job_id)
    else:
        jobs.check_epoch(epoch, last, job_id)
    if slot_base is None:
        mine = next((job.slot_base for job in held if job.job_id == job_id), None)
        slot_base = jobs.free_range(spec.slots, [job for job in held if job.job_id != job_id], prefer=mine)
        if slot_base is None:
            raise JobRefused(
                f"job {job_id}: no range of {spec.slots} slots is free on all of {', '.join(switches)}; ask for "
                "fewer with --slots or remove a job"
            )
    spec = spec.replace(key=spec.key or jobs.choose_key(rng))
    parts: dict[str, jobs.Job] = {}
    service_ips = {spine.switch: str(spine.service_ip)}
    options = {"words": words, "slot_base": slot_base, "epoch": epoch}
    leaf_workers = []
    for leaf_id, (leaf, _) in enumerate(local):
        port, _ = topology.next_hop(spine.switch, leaf.switch)
        leaf_workers.append(jobs.JobWorker(leaf_id, leaf.service_mac, str(leaf.service_ip), port, leaf.switch))
    parts[spine.switch] = jobs.plan_job(spec, leaf_workers, existing.get(spine.switch, []), lookups=False, **options)
    for leaf_id, (leaf, names) in enumerate(local):
        job = jobs.plan_job(
            spec, jobs.workers_from_topology(topology, leaf.switch, names), existing.get(leaf.switch, []), **options
        )
        parts[leaf.switch] = dataclasses.replace(job, uplink=(leaf_id, str(spine.service_ip)))
        service_ips[leaf.switch] = str(leaf.service_ip)
    return TwoLevelJob(spine.switch, parts, service_ips)


def fresh_writes(job: TwoLevelJob) -> dict[str, list[Write]]:
    """The writes that install `job` on switches that hold nothing yet: per switch its service address,
    then its job (group, result_dst, uplink, jobs entry)."""
    return {name: jobs.fresh_writes(part, job.service_ips[name]) for name, part in job.parts.items()}


def add_job(
    sessions: dict,
    topology,
    spec: JobSpec,
    hosts: list[str],
    *,
    slot_base: int | None = None,
    epoch: int | None = None,
    rng: random.Random | None = None,
) -> TwoLevelJob:
    """Add (or renew, with a fresh epoch) two-level job `spec` through `sessions` (switch name ->
    controller.session.SwitchSession, the spine's and every leaf's). Every switch's program and holdings
    are checked before anything is written."""
    local = _local_hosts(topology, list(hosts))
    spine = topology.aggregation.switch
    needed = [spine] + [leaf.switch for leaf, _ in local]
    missing = [name for name in needed if name not in sessions]
    if missing:
        raise BadInput(f"two-level job {spec.job_id} needs a session to {', '.join(missing)}")
    words = {sessions[name].cell_words() for name in needed}
    if len(words) > 1:
        raise JobRefused(f"job {spec.job_id}: the switches run programs with different cells ({sorted(words)} words)")
    existing = {name: sessions[name].installed_jobs() for name in needed}
    last_epochs = {name: sessions[name].last_epoch() for name in needed}
    planned = plan(
        topology,
        spec,
        list(hosts),
        existing,
        words=words.pop(),
        slot_base=slot_base,
        epoch=epoch,
        last_epochs=last_epochs,
        rng=rng,
    )
    for name in needed:
        sessions[name].install_job(planned.parts[name], service_ip=planned.service_ips[name])
    return planned


def remove_job(sessions: dict, topology, job_id: int, missing_ok: bool = False) -> TwoLevelJob | None:
    """Remove two-level job `job_id` from every leaf, then from the spine. None if no switch held it
    (with `missing_ok`; else BadInput)."""
    spine = topology.aggregation.switch
    order = [leaf.switch for leaf in topology.aggregation.leaves] + [spine]
    removed = {}
    for name in order:
        job = sessions[name].remove_job(job_id, missing_ok=True)
        if job is not None:
            removed[name] = job
    if not removed:
        if missing_ok:
            return None
        raise BadInput(f"no job {job_id} on {', '.join(order)}")
    parts = {name: removed[name] for name in [spine, *order[:-1]] if name in removed}
    service_ips = {name: "" for name in parts}
    return TwoLevelJob(spine if spine in removed else next(iter(parts)), parts, service_ips)


def list_jobs(sessions: dict, topology) -> list[TwoLevelJob]:
    """Every job id any switch of the aggregation holds, with each switch's part."""
    spine = topology.aggregation.switch
    order = [spine] + [leaf.switch for leaf in topology.aggregation.leaves]
    by_id: dict[int, dict[str, jobs.Job]] = {}
    for name in order:
        for job in sessions[name].list_jobs(topology):
            by_id.setdefault(job.job_id, {})[name] = job
    out = []
    for job_id in sorted(by_id):
        parts = by_id[job_id]
        out.append(TwoLevelJob(spine if spine in parts else next(iter(parts)), parts, dict.fromkeys(parts, "")))
    return out
