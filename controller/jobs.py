"""Jobs on the aggregating switch: job_check.p4 (service_addr, jobs), the job's multicast group, and
result_dst.p4 (where each multicast copy of a result goes).

A job is admitted only if the program can run it (p4/README.md): at most 32 workers, sums that fit the
16-bit lanes with the installed table (n * g <= 65535; 8-bit result lanes when n * g <= 255), a slot
range inside the 1024 slots that overlaps no other job, room in the 64-entry jobs table. Every add
gives the job a fresh epoch, so a new run starts on fresh register cells (the data plane cannot be reset
over P4Runtime); re-adding an installed job is how a new run starts.

Write order keeps the data plane consistent: the multicast group and result_dst entries go first and the
jobs entry last (requests are dropped as UNKNOWN_JOB until then); removal deletes the jobs entry first.
"""

import ipaddress
import random
from dataclasses import asdict, dataclass, field

from p4.v1 import p4runtime_pb2

from controller import contract
from controller.errors import BadInput, JobRefused
from controller.p4info import P4Info
from controller.writes import DELETE, INSERT, MODIFY, GroupWrite, TableWrite, Write

DEFAULT_SLOTS = 256
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
    workers: tuple[JobWorker, ...] = field(default=())
    uplink: tuple[int, str] | None = None  # two-level aggregation, on a leaf: (leaf id, spine's service address)

    @property
    def slots(self) -> range:
        return range(self.slot_base, self.slot_base + self.n_slots)

    def worker_ids(self) -> list[int]:
        return [w for w in range(contract.MAX_WORKERS) if self.worker_mask >> w & 1]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["workers"] = [asdict(w) for w in self.workers]
        return d


# ---- admission ----------------------------------------------------------------------------------


def lane_bits_for(n_workers: int, max_value: int) -> int:
    """Result lane width: 8 bits when every sum fits a byte, else 16."""
    return 8 if n_workers * max_value <= contract.RESULT8_MAX else 16


def choose_epoch(avoid: set[int], rng: random.Random | None = None) -> int:
    """A random epoch in 1..65535 outside `avoid` (the epochs the switch shows for these slots)."""
    rng = rng or random.SystemRandom()
    while True:
        epoch = rng.randint(1, contract.EPOCH_MAX)
        if epoch not in avoid:
            return epoch


def plan_job(
    job_id: int,
    workers: list[JobWorker],
    existing: list[Job],
    max_value: int | None,
    *,
    n_slots: int = DEFAULT_SLOTS,
    slot_base: int | None = None,
    epoch: int | None = None,
    jobs_capacity: int = contract.JOBS_CAPACITY,
    rng: random.Random | None = None,
    contributors: int | None = None,
) -> Job:
    """The job entry for `workers`, or JobRefused naming the limit it breaks.

    `existing` are the jobs the switch holds (a job with the same id is being replaced: its slots are
    free for the new one, and its epoch is avoided). `max_value` is the installed table's largest value.
    `contributors`: how many workers' values the sums hold (default: the workers); a spine's "workers"
    are leaves whose partials hold all n workers' values, so its lanes are sized for n.
    """
    if not 0 <= job_id <= contract.JOB_ID_MAX:
        raise JobRefused(f"job id {job_id}: must be 0..{contract.JOB_ID_MAX} (hdr.thc.job_id is 8 bits)")
    n = len(workers)
    if n == 0:
        raise JobRefused(f"job {job_id}: needs at least one worker")
    if n > contract.MAX_WORKERS:
        raise JobRefused(
            f"job {job_id}: {n} workers, the program admits at most {contract.MAX_WORKERS} "
            "(THC_MAX_WORKERS: the worker bitmap is 32 bits)"
        )
    ids = [w.worker_id for w in workers]
    bad = [i for i in ids if not 0 <= i < contract.MAX_WORKERS]
    if bad:
        raise JobRefused(f"job {job_id}: worker id {bad[0]} is outside 0..{contract.MAX_WORKERS - 1}")
    if len(set(ids)) != n:
        dup = next(i for i in ids if ids.count(i) > 1)
        raise JobRefused(f"job {job_id}: worker id {dup} appears twice")
    if max_value is None:
        raise JobRefused(
            f"job {job_id}: no lookup table is installed, so the sums' size is unknown: "
            "install one first (thc-ctl table install)"
        )
    summed = n if contributors is None else contributors
    total = summed * max_value
    if total > contract.SUM_LANE_MAX:
        raise JobRefused(
            f"job {job_id}: sums need n*g = {summed}*{max_value} = {total}, more than the 16-bit "
            f"sum lanes hold (n*g <= {contract.SUM_LANE_MAX}); use fewer workers or a table "
            "with a smaller granularity"
        )
    if not 1 <= n_slots <= contract.SLOTS:
        raise JobRefused(f"job {job_id}: {n_slots} slots; a job has 1..{contract.SLOTS} (THC_SLOTS)")
    others = [j for j in existing if j.job_id != job_id]
    previous = next((j for j in existing if j.job_id == job_id), None)
    if previous is None and len(others) >= jobs_capacity:
        raise JobRefused(f"job {job_id}: the jobs table is full ({jobs_capacity} jobs)")
    if slot_base is None:
        slot_base = free_range(n_slots, others, prefer=previous.slot_base if previous else None)
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
    for other in others:
        if slot_base < other.slot_base + other.n_slots and other.slot_base < slot_base + n_slots:
            raise JobRefused(
                f"job {job_id}: slots [{slot_base}, {slot_base + n_slots}) overlap job "
                f"{other.job_id}'s [{other.slot_base}, {other.slot_base + other.n_slots}); "
                "jobs share the 1024 slots without overlapping"
            )
    avoid = {j.epoch for j in existing}
    if epoch is None:
        epoch = choose_epoch(avoid, rng)
    elif not 1 <= epoch <= contract.EPOCH_MAX:
        raise JobRefused(f"job {job_id}: epoch {epoch} must be 1..{contract.EPOCH_MAX}")
    elif previous is not None and epoch == previous.epoch:
        raise JobRefused(f"job {job_id}: epoch {epoch} is the job's current one; a new run needs a new epoch")
    mask = 0
    for i in ids:
        mask |= 1 << i
    ordered = tuple(sorted(workers, key=lambda w: w.worker_id))
    return Job(
        job_id, n, slot_base, n_slots, mcast_group(job_id), mask, lane_bits_for(summed, max_value), epoch, ordered
    )


def free_range(n_slots: int, others: list[Job], prefer: int | None) -> int | None:
    """The lowest slot_base (or `prefer`, if still free) whose range overlaps none of `others`."""

    def free(base: int) -> bool:
        return base + n_slots <= contract.SLOTS and all(
            base >= j.slot_base + j.n_slots or j.slot_base >= base + n_slots for j in others
        )

    if prefer is not None and free(prefer):
        return prefer
    candidates = [0] + sorted(j.slot_base + j.n_slots for j in others)
    for base in candidates:
        if free(base):
            return base
    return None


def check_table_change(jobs: list[Job], max_value: int) -> None:
    """Refuse a new table whose values would overflow an installed job's lanes."""
    for job in jobs:
        total = job.n_workers * max_value
        if total > contract.SUM_LANE_MAX:
            raise JobRefused(
                f"a table with largest value {max_value} overflows job {job.job_id}'s 16-bit "
                f"sums (n*g = {job.n_workers}*{max_value} = {total} > {contract.SUM_LANE_MAX}); "
                "remove the job first"
            )
        if job.lane_bits == 8 and total > contract.RESULT8_MAX:
            raise JobRefused(
                f"a table with largest value {max_value} overflows job {job.job_id}'s 8-bit "
                f"result lanes (n*g = {total} > {contract.RESULT8_MAX}); re-add the job "
                "after installing the table (thc-ctl job add) or remove it first"
            )


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
    }
    if kind == DELETE:
        return TableWrite(DELETE, contract.JOBS, (job.job_id,))
    return TableWrite(
        kind, contract.JOBS, (job.job_id,), contract.SET_JOB, tuple(values[name] for name, _ in contract.SET_JOB_PARAMS)
    )


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
    job: Job, previous: Job | None, group_exists: bool, result_rids: set[int], uplink_installed: bool = False
) -> tuple[list[Write], list[Write]]:
    """(first, then) batches installing `job` over what the switch holds.

    `previous` is the installed job with this id, `group_exists` whether its multicast group is
    there, `result_rids` the egress_rids of the job's result_dst entries on the switch,
    `uplink_installed` whether it has an `uplink` entry for the job (a leaf of two-level aggregation).
    """
    first: list[Write] = [group_write(MODIFY if group_exists else INSERT, job)]
    wanted = {w.worker_id for w in job.workers}
    first += [result_dst_write(MODIFY if w.worker_id in result_rids else INSERT, job.job_id, w) for w in job.workers]
    if job.uplink is not None:
        first.append(uplink_write(MODIFY if uplink_installed else INSERT, job.job_id, *job.uplink))
    elif uplink_installed:
        first.append(uplink_write(DELETE, job.job_id))
    then: list[Write] = [job_write(MODIFY if previous else INSERT, job)]
    then += [result_dst_write(DELETE, job.job_id, rid) for rid in sorted(result_rids - wanted)]
    return first, then


def remove_writes(
    job_id: int, group_id: int | None, result_rids: set[int], uplink_installed: bool = False
) -> tuple[list[Write], list[Write]]:
    """(first, then): the jobs entry first, so no request uses the job while its outputs go away."""
    first: list[Write] = [TableWrite(DELETE, contract.JOBS, (job_id,))]
    then: list[Write] = [result_dst_write(DELETE, job_id, rid) for rid in sorted(result_rids)]
    if uplink_installed:
        then.append(uplink_write(DELETE, job_id))
    if group_id is not None:
        then.append(group_write(DELETE, group_id))
    return first, then


def service_address_write(ip: str) -> TableWrite:
    """Serve THC requests sent to `ip` on this switch."""
    return TableWrite(INSERT, contract.SERVICE_ADDR, (_int_ip(ip),), contract.SERVE, ())


def group_key(group_id: int) -> p4runtime_pb2.PacketReplicationEngineEntry:
    pre = p4runtime_pb2.PacketReplicationEngineEntry()
    pre.multicast_group_entry.multicast_group_id = group_id
    return pre


# ---- reading back -------------------------------------------------------------------------------


def read_entities(p4info: P4Info) -> list[p4runtime_pb2.Entity]:
    """Wildcard reads of the job tables: jobs, result_dst and uplink (groups are read apart: see
    groups_entity)."""
    return [
        p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=p4info.table(name).preamble.id))
        for name in (contract.JOBS, contract.RESULT_DST, contract.UPLINK)
    ]


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
        return Job(**{**asdict(job), "workers": workers, "uplink": self.uplinks.get(job_id)})


def decode_state(p4info: P4Info, table_entities, group_entities) -> JobState:
    jobs_id = p4info.table(contract.JOBS).preamble.id
    dst_id = p4info.table(contract.RESULT_DST).preamble.id
    uplink_id = p4info.table(contract.UPLINK).preamble.id
    jobs: dict[int, Job] = {}
    result_dst: dict[int, dict[int, tuple[str, str]]] = {}
    uplinks: dict[int, tuple[int, str]] = {}
    for entity in table_entities:
        entry = entity.table_entry
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
            )
        elif entry.table_id == dst_id and d.get("action_name") == contract.SET_RESULT_DST:
            p = d["action_params"]
            job_id, rid = d["match"]["hdr.thc.job_id"], d["match"]["standard_metadata.egress_rid"]
            result_dst.setdefault(job_id, {})[rid] = (p["dmac"], p["dip"])
        elif entry.table_id == uplink_id and d.get("action_name") == contract.TO_SPINE:
            p = d["action_params"]
            uplinks[d["match"]["hdr.thc.job_id"]] = (p["leaf_id"], p["spine_addr"])
    groups = None
    if group_entities is not None:
        groups = {}
        for entity in group_entities:
            g = entity.packet_replication_engine_entry.multicast_group_entry
            groups[g.multicast_group_id] = [(r.egress_port, r.instance) for r in g.replicas]
    return JobState(jobs, result_dst, groups, uplinks)


def workers_from_topology(topology, switch: str, hosts: list[str]) -> list[JobWorker]:
    """JobWorkers for topology hosts: worker id = index in the topology's `workers`, the replica port
    = the port of `switch` on the shortest path to the host."""
    if len(set(hosts)) != len(hosts):
        dup = next(h for h in hosts if hosts.count(h) > 1)
        raise BadInput(f"worker {dup} is listed twice")
    workers = []
    for name in hosts:
        host = topology.hosts.get(name)
        if host is None:
            raise BadInput(f"unknown host '{name}' in topology {topology.name} (hosts: {', '.join(topology.hosts)})")
        if name not in topology.workers:
            raise BadInput(
                f"host '{name}' is not a worker of topology {topology.name} (workers: {', '.join(topology.workers)})"
            )
        port, _ = topology.next_hop(switch, name)
        workers.append(JobWorker(topology.worker_id(name), host.mac, host.address, port, name))
    return workers


# ---- two-level aggregation ------------------------------------------------------------------------


def uplink_write(kind: str, job_id: int, leaf_id: int = 0, spine_ip: str = "0.0.0.0") -> TableWrite:
    """On a leaf: the job's completed sums go to the spine at `spine_ip` as a PARTIAL of worker `leaf_id`
    (DELETE needs the job id only)."""
    if kind == DELETE:
        return TableWrite(DELETE, contract.UPLINK, (job_id,))
    return TableWrite(kind, contract.UPLINK, (job_id,), contract.TO_SPINE, (leaf_id, _int_ip(spine_ip)))
