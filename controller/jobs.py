"""Jobs on the aggregating switch: job_check.p4 (service_addr, jobs), the job's lookup table
(index_lookup.p4's values), its multicast group, and result_dst.p4 (where each multicast copy of a result
goes).

A job comes from its description (contract/job.py, the one its workers run) and is admitted only if the
program can run it, naming the limit it breaks (controller/README.md, "What gets installed"). Every add (a
re-add is a new run) gives a key its workers put in every packet and a fresh epoch, so the run starts on fresh
register cells (the data plane cannot be reset over P4Runtime). Epochs count up per switch, the last kept in
the jobs table's default entry, so none is given twice while the registers may hold cells of it. The lookup
table, multicast group and result_dst go first and the jobs entry last (requests are UNKNOWN_JOB until then),
removal the reverse, so the data plane never sees half a job."""

import dataclasses
import ipaddress
import random
from dataclasses import asdict, astuple, dataclass, field

from p4.v1 import p4runtime_pb2

import contract
from contract.job import DEFAULT_SLOTS, KEYS, JobSpec
from controller import lookup_tables
from controller import pool as pools
from controller.errors import BadInput, JobRefused
from controller.p4info import P4Info
from controller.writes import DELETE, INSERT, MODIFY, GroupWrite, TableWrite, Write

__all__ = ["DEFAULT_SLOTS", "Job", "JobWorker", "plan_job"]
MCAST_GROUP_BASE = 0x1000  # job j uses multicast group 0x1000 + j: clear of small ids runtime files use


def mcast_group(job_id: int) -> int:
    return MCAST_GROUP_BASE + job_id


@dataclass(frozen=True)
class JobWorker:
    """One worker of a job: its id (replica id and bit in the mask), where results go, and the port."""

    worker_id: int
    mac: str
    ip: str
    port: int | None  # egress port of the multicast replica; None when unknown (no group)
    host: str | None = None  # topology name, when known


@dataclass(frozen=True)
class Job:
    job_id: int
    n_workers: int
    slot_base: int
    n_slots: int
    mcast_grp: int
    worker_mask: int
    lane_bits: int
    epoch: int
    key: int = 0  # every packet of the job carries it (p4/README.md, "Job keys")
    workers: tuple[JobWorker, ...] = field(default=())
    uplink: tuple[int, str] | None = None  # two-level aggregation, on a leaf: (leaf id, spine's service address)
    table: tuple[int, ...] = ()  # the job's lookup table V; () where nothing is looked up (a spine)
    pool: tuple[int, int, int] | None = None  # a pool job's (pool_base, pool_cells, ring_offset) (controller/pool.py)

    @property
    def slots(self) -> range:
        return range(self.slot_base, self.slot_base + self.n_slots)

    def worker_ids(self) -> list[int]:
        return [w for w in range(contract.MAX_WORKERS) if self.worker_mask >> w & 1]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["workers"] = [asdict(w) for w in self.workers]
        d["table"] = list(self.table)
        return d


# ---- admission ----------------------------------------------------------------------------------


def next_epoch(last: int, job_id: int) -> int:
    """The epoch after the last one the switch gave (1 on a freshly pushed program), or JobRefused when the
    program has given them all."""
    if last >= contract.EPOCH_MAX:
        raise JobRefused(
            f"job {job_id}: the switch has given all {contract.EPOCH_MAX} epochs since its program was pushed, "
            "and a reused epoch could meet old cells: push the program again (thc-ctl push), which clears them"
        )
    return last + 1


def check_epoch(epoch: int, last: int, job_id: int) -> None:
    """An epoch asked for must be one the switch has not given yet (above `last`)."""
    if not 1 <= epoch <= contract.EPOCH_MAX:
        raise JobRefused(f"job {job_id}: epoch {epoch} must be 1..{contract.EPOCH_MAX}")
    if epoch <= last:
        raise JobRefused(
            f"job {job_id}: epoch {epoch} may still be in the switch's registers (it has given epochs up to "
            f"{last} since its program was pushed); leave --epoch out, or give one above {last}"
        )


def choose_key(rng: random.Random | None = None) -> int:
    """A random 32-bit job key, never 0 (0 is what a description without a key says)."""
    return (rng or random.SystemRandom()).randint(KEYS[0], KEYS[-1])


def plan_job(
    spec: JobSpec,
    workers: list[JobWorker],
    existing: list[Job],
    *,
    words: int | None = None,
    slot_base: int | None = None,
    epoch: int | None = None,
    last_epoch: int = 0,
    jobs_capacity: int = contract.JOBS_CAPACITY,
    rng: random.Random | None = None,
    lookups: bool = True,
    pool: bool = False,
    pool_cells: int | None = None,
) -> Job:
    """The job entry of `spec` for `workers`, or JobRefused naming the limit it breaks.

    `workers` are the switch's inputs: the job's workers on one level, a leaf's own workers, or a spine's
    leaves; `spec.workers` is n, the contributions a complete sum holds, which sizes the lanes. `existing`
    are the jobs the switch holds (a job with the same id is being replaced: its slots are free for the
    new one). `last_epoch`: the last epoch the switch gave (its jobs default entry); the job gets the next
    one, or `epoch` if it is above it. `words`: the switch program's cell size, which must be the one the
    description frames for. `lookups`: install the job's lookup table (not on a spine, whose partials hold
    table values already). The key is the description's, or a fresh one when it has none. `pool`: the job
    claims its cells from the shared pool round by round (controller/pool.py) instead of owning a slot
    range's; `pool_cells` sizes the pool when no pool job names one yet.
    """
    job_id = spec.job_id
    n = len(workers)
    if n == 0:
        raise JobRefused(f"job {job_id}: needs at least one worker")
    if n > spec.workers:
        raise JobRefused(
            f"job {job_id}: {n} inputs on this switch but the description counts {spec.workers} workers; "
            "describe the job with all its workers (--workers)"
        )
    ids = [w.worker_id for w in workers]
    bad = [i for i in ids if not 0 <= i < contract.MAX_WORKERS]
    if bad:
        raise JobRefused(f"job {job_id}: worker id {bad[0]} is outside 0..{contract.MAX_WORKERS - 1}")
    if len(set(ids)) != n:
        dup = next(i for i in ids if ids.count(i) > 1)
        raise JobRefused(f"job {job_id}: worker id {dup} appears twice")
    if words is not None and words != spec.words:
        raise JobRefused(
            f"job {job_id}: the switch's program has {words}-word cells ({contract.per_request(spec.lane_bits, words)} "
            f"coordinates a request) but the job is described for {spec.words}-word cells "
            f"({spec.coords_per_request}); describe it with words={words}, or push the program it was made for"
        )
    n_slots = spec.slots
    others = [j for j in existing if j.job_id != job_id]
    previous = next((j for j in existing if j.job_id == job_id), None)
    if previous is None and len(others) >= jobs_capacity:
        raise JobRefused(f"job {job_id}: the jobs table is full ({jobs_capacity} jobs)")
    pool_jobs = [j for j in others if j.pool is not None]
    static = [j for j in others if j.pool is None]
    pool_place = None
    reserved = pools.Pool(*pool_jobs[0].pool[:2]).slots if pool_jobs else range(0)
    if pool:
        try:
            the_pool = pools.Pool(*pool_jobs[0].pool[:2]) if pool_jobs else pools.place_pool(static, pool_cells)
            pool_place = (*astuple(the_pool), pools.place_ring(n_slots, the_pool, pool_jobs))
            slot_base = free_range(
                n_slots, pool_jobs, previous.slot_base if previous else None, range(contract.SLOTS, contract.BOOK_SLOTS)
            )
            if slot_base is None:
                raise JobRefused(
                    f"no free range of {n_slots} bookkeeping slots among the {contract.POOL_SLOTS} pool jobs' slots "
                    "(THC_BOOK_SLOTS - THC_SLOTS); ask for fewer with --slots or remove a pool job"
                )
        except JobRefused as e:
            raise JobRefused(f"job {job_id}: {e}") from None
    elif slot_base is None:
        # the pool's cells are taken as a static job's slots would be
        pseudo = [Job(-1, 1, reserved.start, len(reserved), 0, 1, 8, 1)] if reserved else []
        slot_base = free_range(n_slots, others + pseudo, prefer=previous.slot_base if previous else None)
        if slot_base is None:
            used = ", ".join(
                f"job {j.job_id}: [{j.slot_base}, {j.slot_base + j.n_slots})"
                for j in sorted(others, key=lambda j: j.slot_base)
            )
            raise JobRefused(
                f"job {job_id}: no free range of {n_slots} slots among the {contract.SLOTS} "
                f"(THC_SLOTS; in use: {used}); ask for fewer with --slots or remove a job"
            )
    elif not 0 <= slot_base or slot_base + n_slots > contract.SLOTS:
        raise JobRefused(
            f"job {job_id}: slots [{slot_base}, {slot_base + n_slots}) leave the "
            f"{contract.SLOTS} slots of the program (THC_SLOTS)"
        )
    if not pool and slot_base < reserved.stop and reserved.start < slot_base + n_slots:
        raise JobRefused(
            f"job {job_id}: slots [{slot_base}, {slot_base + n_slots}) overlap the shared pool's "
            f"[{reserved.start}, {reserved.stop}) (its cells {2 * reserved.start}..{2 * reserved.stop - 1})"
        )
    for other in others:
        if slot_base < other.slot_base + other.n_slots and other.slot_base < slot_base + n_slots:
            raise JobRefused(
                f"job {job_id}: slots [{slot_base}, {slot_base + n_slots}) overlap job "
                f"{other.job_id}'s [{other.slot_base}, {other.slot_base + other.n_slots}); "
                "jobs share the 1024 slots without overlapping"
            )
    last_epoch = max([last_epoch] + [j.epoch for j in existing])  # installed jobs' epochs were given too
    if epoch is None:
        epoch = next_epoch(last_epoch, job_id)
    else:
        check_epoch(epoch, last_epoch, job_id)
    mask = 0
    for i in ids:
        mask |= 1 << i
    ordered = tuple(sorted(workers, key=lambda w: w.worker_id))
    key = spec.key or choose_key(rng)
    table = tuple(spec.table_values()) if lookups else ()
    return Job(
        job_id,
        n,
        slot_base,
        n_slots,
        mcast_group(job_id),
        mask,
        spec.lane_bits,
        epoch,
        key,
        ordered,
        None,
        table,
        pool_place,
    )


def free_range(
    n_slots: int, others: list[Job], prefer: int | None, within: range = range(contract.SLOTS)
) -> int | None:
    """The lowest slot_base in `within` (or `prefer`, if still free) whose range overlaps none of `others`:
    the static slots by default, a pool job's bookkeeping slots (SLOTS .. BOOK_SLOTS) for pool jobs."""

    def free(base: int) -> bool:
        return (
            within.start <= base
            and base + n_slots <= within.stop
            and all(base >= j.slot_base + j.n_slots or j.slot_base >= base + n_slots for j in others)
        )

    if prefer is not None and free(prefer):
        return prefer
    candidates = [within.start] + sorted(j.slot_base + j.n_slots for j in others)
    for base in candidates:
        if free(base):
            return base
    return None


# ---- writes -------------------------------------------------------------------------------------


def _int_mac(mac: str) -> int:
    return int(mac.replace(":", "").replace("-", ""), 16)


def _int_ip(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def job_write(kind: str, job: Job) -> TableWrite:
    """The jobs entry: set_job's parameters in the action's order (contract.SET_JOB_PARAMS)."""
    values = {
        "n_workers": job.n_workers,
        "slot_base": job.slot_base,
        "n_slots": job.n_slots,
        "mcast_grp": job.mcast_grp,
        "worker_mask": job.worker_mask,
        "lane_bits": job.lane_bits,
        "epoch": job.epoch,
        "key": job.key,
    }
    if kind == DELETE:
        return TableWrite(DELETE, contract.JOBS, (job.job_id,))
    return TableWrite(
        kind, contract.JOBS, (job.job_id,), contract.SET_JOB, tuple(values[name] for name, _ in contract.SET_JOB_PARAMS)
    )


def epoch_mark_write(epoch: int) -> TableWrite:
    """The jobs table's default entry with the last epoch given: it stays unknown_job (drop) for packets."""
    return TableWrite(MODIFY, contract.JOBS, (), contract.UNKNOWN_JOB, (epoch,), default=True)


def result_dst_write(kind: str, job_id: int, worker: JobWorker | int) -> TableWrite:
    """Where the multicast copy for `worker` goes (a worker id alone for DELETE)."""
    if kind == DELETE:
        rid = worker if isinstance(worker, int) else worker.worker_id
        return TableWrite(DELETE, contract.RESULT_DST, (job_id, rid))
    return TableWrite(
        kind,
        contract.RESULT_DST,
        (job_id, worker.worker_id),
        contract.SET_RESULT_DST,
        (_int_mac(worker.mac), _int_ip(worker.ip)),
    )


def group_write(kind: str, job: Job | int) -> GroupWrite:
    """The job's multicast group: one replica (port, rid = worker id) per worker (a group id for DELETE)."""
    if kind == DELETE:
        return GroupWrite(DELETE, job if isinstance(job, int) else job.mcast_grp)
    return GroupWrite(kind, job.mcast_grp, tuple((w.port, w.worker_id) for w in job.workers))


def add_writes(
    job: Job,
    previous: Job | None,
    group_exists: bool,
    result_rids: set[int],
    uplink_installed: bool = False,
    table_installed: bool = False,
    pool_installed: bool = False,
) -> tuple[list[Write], list[Write]]:
    """(first, then) batches installing `job` over what the switch holds.

    `previous` is the installed job with this id, `group_exists` whether its multicast group is
    there, `result_rids` the egress_rids of the job's result_dst entries on the switch,
    `uplink_installed` whether it has an `uplink` entry for the job (a leaf of two-level aggregation),
    `table_installed` whether it has a lookup table (`values` entry) for the job, `pool_installed` whether
    it has a `pool` entry for it (controller/pool.py).
    """
    first: list[Write] = [epoch_mark_write(job.epoch)]
    if job.table:
        first.append(lookup_tables.values_write(MODIFY if table_installed else INSERT, job.job_id, list(job.table)))
    first.append(group_write(MODIFY if group_exists else INSERT, job))
    wanted = {w.worker_id for w in job.workers}
    first += [result_dst_write(MODIFY if w.worker_id in result_rids else INSERT, job.job_id, w) for w in job.workers]
    if job.uplink is not None:
        first.append(uplink_write(MODIFY if uplink_installed else INSERT, job.job_id, *job.uplink))
    elif uplink_installed:
        first.append(uplink_write(DELETE, job.job_id))
    pool_first, pool_then = pools.add_writes(job, previous, pool_installed)
    first += pool_first
    then: list[Write] = [job_write(MODIFY if previous else INSERT, job)]
    then += [result_dst_write(DELETE, job.job_id, rid) for rid in sorted(result_rids - wanted)]
    if table_installed and not job.table:
        then.append(lookup_tables.values_write(DELETE, job.job_id))
    return first, then + pool_then


def fresh_writes(job: Job, service_ip: str | None) -> list[Write]:
    """The writes that install `job` on a switch that holds nothing of it yet, after its service address
    (`service_ip`; None: the switch serves one already)."""
    first, then = add_writes(job, None, False, set())
    return ([service_address_write(service_ip)] if service_ip is not None else []) + first + then


def remove_writes(
    job_id: int,
    group_id: int | None,
    result_rids: set[int],
    uplink_installed: bool = False,
    table_installed: bool = False,
    job: Job | None = None,
) -> tuple[list[Write], list[Write]]:
    """(first, then): the jobs entry first, so no request uses the job while its outputs go away (and, for a
    pool job, its cells are free)."""
    first: list[Write] = [TableWrite(DELETE, contract.JOBS, (job_id,))]
    then: list[Write] = [result_dst_write(DELETE, job_id, rid) for rid in sorted(result_rids)]
    if uplink_installed:
        then.append(uplink_write(DELETE, job_id))
    if table_installed:
        then.append(lookup_tables.values_write(DELETE, job_id))
    if group_id is not None:
        then.append(group_write(DELETE, group_id))
    return first, then + pools.remove_writes(job)


def service_address_write(ip: str) -> TableWrite:
    """Serve THC requests sent to `ip` on this switch."""
    return TableWrite(INSERT, contract.SERVICE_ADDR, (_int_ip(ip),), contract.SERVE, ())


def group_key(group_id: int) -> p4runtime_pb2.PacketReplicationEngineEntry:
    pre = p4runtime_pb2.PacketReplicationEngineEntry()
    pre.multicast_group_entry.multicast_group_id = group_id
    return pre


# ---- reading back -------------------------------------------------------------------------------


def read_entities(p4info: P4Info) -> list[p4runtime_pb2.Entity]:
    """Wildcard reads of the job tables: jobs, result_dst, uplink, values and pool, and the jobs default entry
    (the last epoch given); groups are read apart (groups_entity)."""
    jobs_id = p4info.table(contract.JOBS).preamble.id
    return [
        p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=p4info.table(name).preamble.id))
        for name in (contract.JOBS, contract.RESULT_DST, contract.UPLINK, contract.VALUES, contract.POOL)
    ] + [p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=jobs_id, is_default_action=True))]


def groups_entity() -> p4runtime_pb2.Entity:
    """A wildcard read of every multicast group (group id 0)."""
    return p4runtime_pb2.Entity(packet_replication_engine_entry=group_key(0))


@dataclass
class JobState:
    """What the switch holds about jobs, decoded."""

    jobs: dict[int, Job]
    result_dst: dict[int, dict[int, tuple[str, str]]]  # job -> rid -> (mac, ip)
    groups: dict[int, list[tuple[int, int]]] | None  # group -> [(port, rid)]; None: not readable
    uplinks: dict[int, tuple[int, str]] = field(default_factory=dict)  # job -> (leaf id, spine address)
    tables: dict[int, tuple[int, ...]] = field(default_factory=dict)  # job -> its lookup table V
    last_epoch: int = 0  # the last epoch given on the switch (the jobs default entry; 0: none yet)
    pools: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # pool job -> its use_pool parameters

    def job(self, job_id: int, hosts_by_ip: dict[str, str] | None = None) -> Job | None:
        """The job with its workers (addresses from result_dst, ports from its multicast group)."""
        job = self.jobs.get(job_id)
        if job is None:
            return None
        dsts = self.result_dst.get(job_id, {})
        ports = {rid: port for port, rid in (self.groups or {}).get(job.mcast_grp, [])}
        workers = tuple(
            JobWorker(
                rid, *dsts.get(rid, ("?", "?")), ports.get(rid), (hosts_by_ip or {}).get(dsts.get(rid, ("", ""))[1])
            )
            for rid in job.worker_ids()
        )
        return dataclasses.replace(
            job, workers=workers, uplink=self.uplinks.get(job_id), table=self.tables.get(job_id, ())
        )

    def pool_jobs(self) -> list[Job]:
        return [job for job in self.jobs.values() if job.pool is not None]


def decode_state(p4info: P4Info, table_entities, group_entities) -> JobState:
    jobs_id = p4info.table(contract.JOBS).preamble.id
    dst_id = p4info.table(contract.RESULT_DST).preamble.id
    uplink_id = p4info.table(contract.UPLINK).preamble.id
    values_id = p4info.table(contract.VALUES).preamble.id
    pool_id = p4info.table(contract.POOL).preamble.id
    pool_of: dict[int, tuple[int, int, int]] = {}
    jobs: dict[int, Job] = {}
    result_dst: dict[int, dict[int, tuple[str, str]]] = {}
    uplinks: dict[int, tuple[int, str]] = {}
    tables: dict[int, tuple[int, ...]] = {}
    last_epoch = 0
    for entity in table_entities:
        entry = entity.table_entry
        if entry.is_default_action and entry.table_id == jobs_id:
            d = p4info.describe(entry)
            if d.get("action_name") == contract.UNKNOWN_JOB:
                last_epoch = int(d["action_params"].get("last_epoch", 0))
            continue
        if entry.is_default_action or not entry.match:
            continue
        d = p4info.describe(entry)
        if entry.table_id == jobs_id and d.get("action_name") == contract.SET_JOB:
            p = d["action_params"]
            job_id = d["match"]["hdr.thc.job_id"]
            jobs[job_id] = Job(
                job_id,
                p["n_workers"],
                p["slot_base"],
                p["n_slots"],
                p["mcast_grp"],
                p["worker_mask"],
                p["lane_bits"],
                p["epoch"],
                p["key"],
            )
        elif entry.table_id == dst_id and d.get("action_name") == contract.SET_RESULT_DST:
            p = d["action_params"]
            job_id, rid = d["match"]["hdr.thc.job_id"], d["match"]["standard_metadata.egress_rid"]
            result_dst.setdefault(job_id, {})[rid] = (p["dmac"], p["dip"])
        elif entry.table_id == uplink_id and d.get("action_name") == contract.TO_SPINE:
            p = d["action_params"]
            uplinks[d["match"]["hdr.thc.job_id"]] = (p["leaf_id"], p["spine_addr"])
        elif entry.table_id == values_id and d.get("action_name") == contract.SET_VALUES:
            p = d["action_params"]
            table = lookup_tables.unpack(p["values_lo"], p["values_hi"], p["index_mask"])
            tables[d["match"]["hdr.thc.job_id"]] = tuple(table[0]) if table else ()
        elif entry.table_id == pool_id:
            found = pools.decode_entry(p4info, entry)
            if found is not None:
                pool_of[found[0]] = found[1]
    jobs = {j: dataclasses.replace(job, pool=pool_of.get(j)) for j, job in jobs.items()}
    groups = None
    if group_entities is not None:
        groups = {}
        for entity in group_entities:
            g = entity.packet_replication_engine_entry.multicast_group_entry
            groups[g.multicast_group_id] = [(r.egress_port, r.instance) for r in g.replicas]
    return JobState(jobs, result_dst, groups, uplinks, tables, last_epoch, pool_of)


def workers_from_topology(topology, switch: str, hosts: list[str]) -> list[JobWorker]:
    """JobWorkers for topology hosts: worker id = index in the topology's `workers`, the replica port
    = the port of `switch` on the shortest path to the host."""
    check_worker_names(topology, hosts)
    workers = []
    for name in hosts:
        port, _ = topology.next_hop(switch, name)
        host = topology.hosts[name]
        workers.append(JobWorker(topology.worker_id(name), host.mac, host.address, port, name))
    return workers


def check_worker_names(topology, hosts: list[str]) -> None:
    """BadInput unless every name is a worker of the topology, once (thc-ctl checks before it connects)."""
    if len(set(hosts)) != len(hosts):
        dup = next(h for h in hosts if hosts.count(h) > 1)
        raise BadInput(f"worker {dup} is listed twice")
    for name in hosts:
        if name not in topology.hosts:
            raise BadInput(f"unknown host '{name}' in topology {topology.name} (hosts: {', '.join(topology.hosts)})")
        if name not in topology.workers:
            raise BadInput(
                f"host '{name}' is not a worker of topology {topology.name} (workers: {', '.join(topology.workers)})"
            )


# ---- two-level aggregation ------------------------------------------------------------------------


def uplink_write(kind: str, job_id: int, leaf_id: int = 0, spine_ip: str = "0.0.0.0") -> TableWrite:
    """On a leaf: the job's completed sums go to the spine at `spine_ip` as a PARTIAL of worker `leaf_id`
    (DELETE needs the job id only)."""
    if kind == DELETE:
        return TableWrite(DELETE, contract.UPLINK, (job_id,))
    return TableWrite(kind, contract.UPLINK, (job_id,), contract.TO_SPINE, (leaf_id, _int_ip(spine_ip)))
