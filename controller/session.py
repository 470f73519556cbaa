"""SwitchSession: everything the controller does to one switch, for the CLI, the runner and tests.

    with SwitchSession("127.0.0.1:50051", device_id=0, name="s1") as s1:
        s1.push()
        s1.install_forwarding(topology)
        job = s1.add_job(JobSpec(job_id=1, workers=4), ["h1", "h2", "h3", "h4"], topology)
        print(s1.read_stats().aggregated)

One module per control of the P4 program does the work (forwarding, jobs, lookup_tables, stats); this
class reads what the switch holds, asks them for the updates, and writes them. With `dry_run=True`
nothing is written: the requests are kept in `dry_requests` (the CLI prints them), and the switch's
state is read when it is reachable, else taken as empty (noted in `notes`).
"""

import json
import random
from dataclasses import dataclass
from pathlib import Path

from p4.v1 import p4runtime_pb2

import contract
from contract.job import JobSpec
from controller import entries, forwarding, jobs, runtime_file, stats, writes
from controller import pool as pools
from controller.connection import SwitchConnection
from controller.errors import BadInput, ControlError, JobRefused, SwitchUnreachable
from controller.p4info import P4Info, load_p4info
from controller.pipeline import check_p4info

REPO = Path(__file__).resolve().parents[1]
DEFAULT_P4INFO = contract.PROGRAM_P4INFO
DEFAULT_BMV2_JSON = contract.PROGRAM_JSON

Update = p4runtime_pb2.Update


@dataclass
class WriteSummary:
    """What a command changed on the switch."""

    inserted: int = 0
    modified: int = 0
    deleted: int = 0

    @classmethod
    def of(cls, updates) -> "WriteSummary":
        s = cls()
        for u in updates:
            kind = u.type
            if kind == Update.INSERT:
                s.inserted += 1
            elif kind == Update.MODIFY:
                s.modified += 1
            elif kind == Update.DELETE:
                s.deleted += 1
        return s

    def __add__(self, other: "WriteSummary") -> "WriteSummary":
        return WriteSummary(
            self.inserted + other.inserted, self.modified + other.modified, self.deleted + other.deleted
        )

    def to_dict(self) -> dict:
        return {"inserted": self.inserted, "modified": self.modified, "deleted": self.deleted}

    def __str__(self) -> str:
        if not (self.inserted or self.modified or self.deleted):
            return "nothing to change"
        return f"{self.inserted} inserted, {self.modified} modified, {self.deleted} deleted"


def read_pipeline(p4info_path: Path, bmv2_json_path: Path, check_contract: bool = True):
    """(P4Info, BMv2 JSON bytes, register words per cell or None) of a pipeline to push, each file checked
    (thc-ctl reads them before it connects, so a bad file is refused before anything is sent)."""
    p4info = load_p4info(p4info_path)
    words = check_p4info(p4info, str(p4info_path)) if check_contract else None
    try:
        config = Path(bmv2_json_path).read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read BMv2 JSON {bmv2_json_path}: {exc.strerror}") from None
    try:
        program = json.loads(config)
    except ValueError as exc:
        raise BadInput(f"{bmv2_json_path} is not JSON ({exc}): expected p4c's BMv2 output") from None
    if not isinstance(program, dict):
        raise BadInput(f"{bmv2_json_path}: a {type(program).__name__}, not p4c's BMv2 output (a JSON object)")
    return p4info, config, words


class SwitchSession:
    """A controller session with one switch (its own P4Runtime connection: several may coexist)."""

    def __init__(
        self,
        grpc_addr: str = "127.0.0.1:9559",
        device_id: int = 0,
        election_id: tuple[int, int] = (0, 1),
        p4info: str | Path = DEFAULT_P4INFO,
        bmv2_json: str | Path = DEFAULT_BMV2_JSON,
        *,
        name: str | None = None,
        dry_run: bool = False,
        connect_timeout: float = 5.0,
        rng: random.Random | None = None,
    ):
        self.name = name
        self.p4info_path = Path(p4info)
        self.bmv2_json_path = Path(bmv2_json)
        self.dry_run = dry_run
        self.conn = SwitchConnection(grpc_addr, device_id, election_id, connect_timeout, label=name)
        self.dry_requests: list = []  # dry run: the requests that would have been sent, in order
        self.notes: list[str] = []  # dry run: what was assumed
        self._rng = rng
        self._p4info: P4Info | None = None
        self._words: int | None = None
        self._offline = False

    @property
    def label(self) -> str:
        return self.conn.label

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.conn.close()

    # ---- plumbing -------------------------------------------------------------------------------

    def _reachable(self) -> bool:
        """Live: connect or raise. Dry run: connect if possible, else work from an empty switch."""
        if self._offline:
            return False
        try:
            self.conn.connect()
            return True
        except SwitchUnreachable as exc:
            if not self.dry_run:
                raise
            self._offline = True
            self.notes.append(f"{exc}; dry run computed against an empty switch")
            return False

    def pipeline(self) -> P4Info:
        """The running pipeline's P4Info (dry run without a switch, or with an empty one: the file)."""
        if self._p4info is None:
            msg = self.conn.get_p4info() if self._reachable() else None
            if msg is None:
                if not self.dry_run:
                    self.conn.require_p4info()  # raises with the explanation
                msg = load_p4info(self.p4info_path)
                self.notes.append(f"P4Info taken from {self.p4info_path}")
            self._p4info = P4Info(msg)
        return self._p4info

    def thc_pipeline(self) -> tuple[P4Info, int]:
        """The pipeline, checked against the THC contract; and its register words per cell."""
        p4 = self.pipeline()
        if self._words is None:
            self._words = check_p4info(p4.msg, f"the switch {self.label}")
        return p4, self._words

    def cell_words(self) -> int:
        """The running program's register words per cell, which fixes the coordinates per request."""
        return self.thc_pipeline()[1]

    def _read(self, entities: list, optional: bool = False) -> list | None:
        """Entities from the switch ([] in an offline dry run); `optional`: None if the read fails."""
        if not self._reachable():
            return []
        try:
            return self.conn.read(entities)
        except SwitchUnreachable:
            raise
        except ControlError:
            if optional:
                return None
            raise

    def _write(self, updates: list) -> WriteSummary:
        if updates:
            if self.dry_run:
                self.dry_requests.append(self.conn.write_request(updates))
            else:
                describe = self._p4info.describe_update if self._p4info else None
                self.conn.write(updates, describe)
        return WriteSummary.of(updates)

    # ---- pipeline -------------------------------------------------------------------------------

    def push(self, check_contract: bool = True) -> dict:
        """Set the forwarding pipeline from the P4Info and BMv2 JSON files (all entries are lost)."""
        p4info, config, words = read_pipeline(self.p4info_path, self.bmv2_json_path, check_contract)
        self._set_pipeline(p4info, config)
        return {
            "p4info": str(self.p4info_path),
            "bmv2_json": str(self.bmv2_json_path),
            "bmv2_json_bytes": len(config),
            "tables": len(p4info.tables),
            "words": words,
        }

    def _set_pipeline(self, p4info, config: bytes) -> None:
        if self.dry_run:
            request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=self.conn.device_id, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
            )
            request.election_id.high, request.election_id.low = self.conn.election_id
            request.config.p4info.CopyFrom(p4info)
            request.config.p4_device_config = config
            self.dry_requests.append(request)
        else:
            self.conn.set_pipeline(p4info, config)
        self._p4info, self._words = P4Info(p4info), None
        self._offline = self._offline or self.dry_run  # after a (dry) push the switch is empty

    # ---- forwarding -----------------------------------------------------------------------------

    def install_forwarding(self, topology, switch: str | None = None) -> WriteSummary:
        """ipv4_lpm routes of `switch` (default: this session's name) and, on the aggregating switch,
        the service address it serves."""
        switch = switch or self.name
        if switch is None:
            raise BadInput("which switch of the topology is this? pass its name (--switch)")
        p4, _ = self.thc_pipeline()
        wanted = forwarding.route_entries(p4, topology, switch)
        reads = [entries.table_read(p4, contract.IPV4_LPM)]
        if switch == topology.aggregation.switch:
            wanted.append(
                p4.table_entry(
                    contract.SERVICE_ADDR,
                    {"hdr.ipv4.dstAddr": str(topology.aggregation.service_ip)},
                    contract.SERVE,
                    {},
                )
            )
            reads.append(entries.table_read(p4, contract.SERVICE_ADDR))
        installed = [e.table_entry for e in self._read(reads)]
        return self._write(entries.sync_updates(p4, wanted, installed))

    # ---- jobs -----------------------------------------------------------------------------------

    def _job_state(self) -> jobs.JobState:
        p4, _ = self.thc_pipeline()
        found = self._read(jobs.read_entities(p4))
        groups = self._read([jobs.groups_entity()], optional=True)
        return jobs.decode_state(p4, found, groups)

    def add_job(
        self,
        spec: JobSpec,
        hosts: list[str],
        topology,
        switch: str | None = None,
        *,
        slot_base: int | None = None,
        epoch: int | None = None,
        pool: bool = False,
        pool_cells: int | None = None,
    ) -> jobs.Job:
        """Add (or renew, with a fresh epoch) the job `spec` for topology hosts on the aggregating switch."""
        switch = switch or self.name or topology.aggregation.switch
        if switch != topology.aggregation.switch:
            raise JobRefused(
                f"{switch} does not aggregate in topology {topology.name}: jobs live on "
                f"{topology.aggregation.switch}, where the service address "
                f"{topology.aggregation.service_ip} is routed"
            )
        workers = jobs.workers_from_topology(topology, switch, list(hosts))
        return self.add_job_workers(
            spec,
            workers,
            slot_base=slot_base,
            epoch=epoch,
            service_ip=str(topology.aggregation.service_ip),
            pool=pool,
            pool_cells=pool_cells,
        )

    def add_job_workers(
        self,
        spec: JobSpec,
        workers: list[jobs.JobWorker],
        *,
        slot_base: int | None = None,
        epoch: int | None = None,
        service_ip: str | None = None,
        pool: bool = False,
        pool_cells: int | None = None,
    ) -> jobs.Job:
        """Add the job `spec` from explicit workers (id, MAC, IP, port); `service_ip` is served if it is not.

        The description must count exactly these workers and frame for the running program's cells; its
        lookup table, lane width, slots and key go on the switch (a fresh key when it has none: the
        returned Job holds it, for the workers' description). `pool`: the job's uses claim cells from the
        shared pool (controller/pool.py; `pool_cells` sizes it when no pool job names one yet)."""
        p4, words = self.thc_pipeline()
        if len(workers) != spec.workers:
            raise JobRefused(f"job {spec.job_id}: {len(workers)} workers but the description counts {spec.workers}")
        state = self._job_state()
        job = jobs.plan_job(
            spec,
            workers,
            list(state.jobs.values()),
            words=words,
            slot_base=slot_base,
            epoch=epoch,
            last_epoch=state.last_epoch,
            jobs_capacity=p4.table(contract.JOBS).size or 64,
            rng=self._rng,
            pool=pool,
            pool_cells=pool_cells,
        )
        return self.install_job(job, service_ip=service_ip, state=state)

    def serve_fallback(self, spec: JobSpec, workers: list[jobs.JobWorker], service_ip: str) -> jobs.Job:
        """On a fallback server (a parameter server for a pool job's uses that fell back, controller/pool.py):
        the job `spec` (its key the switch's) with slots of its own, and its fallback_rounds entry, since the
        server sees only the uses that fell back."""
        job = self.add_job_workers(spec, workers, service_ip=service_ip)
        p4, _ = self.thc_pipeline()
        self._write(writes.to_updates(p4, [pools.fallback_server_write(writes.INSERT, spec.job_id)]))
        return job

    def end_fallback(self, job_id: int) -> None:
        """On a fallback server: remove what serve_fallback installed for job `job_id`, if it is there."""
        if self.remove_job(job_id, missing_ok=True) is not None:
            p4, _ = self.thc_pipeline()
            self._write(writes.to_updates(p4, [pools.fallback_server_write(writes.DELETE, job_id)]))

    def installed_jobs(self) -> list[jobs.Job]:
        """The jobs entries the switch holds, without their workers (one read: for planning)."""
        return list(self._job_state().jobs.values())

    def last_epoch(self) -> int:
        """The last epoch the switch gave a job since its program was pushed (0: none yet)."""
        return self._job_state().last_epoch

    def install_job(
        self, job: jobs.Job, *, service_ip: str | None = None, state: jobs.JobState | None = None
    ) -> jobs.Job:
        """Write a planned job (jobs.plan_job) over what the switch holds: its group and result_dst entries
        and its uplink (a leaf's) first, the jobs entry last. `service_ip` is served if it is not."""
        p4, _ = self.thc_pipeline()
        state = state or self._job_state()
        missing = [w.worker_id for w in job.workers if w.port is None]
        if missing:
            raise BadInput(f"job {job.job_id}: worker {missing[0]} has no egress port")
        previous = state.jobs.get(job.job_id)
        group_exists = (job.mcast_grp in state.groups) if state.groups is not None else previous is not None
        first, then = jobs.add_writes(
            job,
            previous,
            group_exists,
            set(state.result_dst.get(job.job_id, {})),
            job.job_id in state.uplinks,
            job.job_id in state.tables,
            job.job_id in state.pools,
        )
        if service_ip is not None:
            served = self._read([entries.table_read(p4, contract.SERVICE_ADDR)])
            if not any(
                p4.describe(e.table_entry).get("match", {}).get("hdr.ipv4.dstAddr") == service_ip for e in served
            ):
                first.insert(0, jobs.service_address_write(service_ip))
        self._write(writes.to_updates(p4, first))
        self._write(writes.to_updates(p4, then))
        return job

    def remove_job(self, job_id: int, missing_ok: bool = False) -> jobs.Job | None:
        """Delete job `job_id`: its jobs entry, result_dst entries and multicast group."""
        p4, _ = self.thc_pipeline()
        state = self._job_state()
        job = state.job(job_id)
        if job is None:
            if missing_ok:
                return None
            known = ", ".join(str(j) for j in sorted(state.jobs)) or "none"
            raise BadInput(f"no job {job_id} on {self.label} (jobs: {known})")
        group = job.mcast_grp
        if state.groups is not None and group not in state.groups:
            group = None
        first, then = jobs.remove_writes(
            job_id,
            group,
            set(state.result_dst.get(job_id, {})),
            job_id in state.uplinks,
            job_id in state.tables,
            job,
        )
        self._write(writes.to_updates(p4, first))
        self._write(writes.to_updates(p4, then))
        return job

    def list_jobs(self, topology=None) -> list[jobs.Job]:
        """Installed jobs with their workers (host names when a topology is given)."""
        state = self._job_state()
        by_ip = {h.address: h.name for h in topology.hosts.values()} if topology else None
        return [state.job(j, by_ip) for j in sorted(state.jobs)]

    # ---- counters and inspection ----------------------------------------------------------------

    def read_stats(self, job_ids=None) -> stats.Stats:
        """The event counters, and per job those of `job_ids` (default: every installed job)."""
        p4, _ = self.thc_pipeline()
        if job_ids is None:
            job_ids = [j.job_id for j in self.list_jobs()]
        return stats.decode(p4, self._read([stats.counter_read(p4), *stats.job_counter_reads(p4, job_ids)]))

    def pool_usage(self) -> tuple[pools.Pool | None, list[pools.PoolUse]]:
        """The shared pool and, per pool job, the cells its run holds (claimed - freed, from pool_claims and
        pool_frees at its epoch) and its uses that fell back (POOL_TAKEN) with their FALLBACK answers."""
        p4, _ = self.thc_pipeline()
        pool_jobs = sorted(self._job_state().pool_jobs(), key=lambda j: j.job_id)
        if not pool_jobs:
            return None, []
        counts = pools.decode_counts(p4, self._read(pools.counter_reads(p4, [j.epoch for j in pool_jobs])))
        events = self.read_stats([j.job_id for j in pool_jobs]).jobs
        uses = [
            pools.PoolUse(
                j.job_id,
                j.epoch,
                counts[contract.POOL_CLAIMS].get(j.epoch, 0),
                counts[contract.POOL_FREES].get(j.epoch, 0),
                events[j.job_id].packets("POOL_TAKEN") if j.job_id in events else 0,
                events[j.job_id].packets("POOL_FALLBACK") if j.job_id in events else 0,
            )
            for j in pool_jobs
        ]
        return pools.Pool(*pool_jobs[0].pool[:2]), uses

    def show(self) -> dict:
        """Every table's entries (runtime-file form) and the multicast groups."""
        p4 = self.pipeline()
        tables = list(p4.tables())
        found = self._read([entries.table_read(p4, t.preamble.name) for t in tables]) if tables else []
        by_table = {t.preamble.name: [] for t in tables}
        for e in found:
            d = p4.describe(e.table_entry)
            by_table.setdefault(d["table"], []).append(d)
        return {"tables": by_table, "multicast_group_entries": self.multicast_groups()}

    def multicast_groups(self) -> list[dict] | None:
        """The multicast groups in runtime-file form (None if the switch cannot read them back)."""
        groups = self._read([jobs.groups_entity()], optional=True)
        if groups is None:
            return None
        return [
            {
                "multicast_group_id": g.packet_replication_engine_entry.multicast_group_entry.multicast_group_id,
                "replicas": [
                    {"egress_port": r.egress_port, "instance": r.instance}
                    for r in g.packet_replication_engine_entry.multicast_group_entry.replicas
                ],
            }
            for g in groups
        ]

    # ---- runtime files --------------------------------------------------------------------------

    def apply(self, path: str | Path, push: bool | None = None) -> dict:
        """Apply a p4lang/tutorials-style runtime file. `push`: None = push the file's pipeline only if
        the switch runs another one (or none); True = always; False = never."""
        runtime = runtime_file.load(path)
        pushed = False
        if runtime.p4info is not None and push is not False:
            file_p4info = load_p4info(runtime.p4info)
            running = self.conn.get_p4info() if self._reachable() else None
            same = running is not None and running.SerializeToString(
                deterministic=True
            ) == file_p4info.SerializeToString(deterministic=True)
            if push or not same:
                if runtime.bmv2_json is None:
                    raise BadInput(f"{runtime.path}: names a P4Info but no 'bmv2_json' to push with it")
                try:
                    config = runtime.bmv2_json.read_bytes()
                except OSError as exc:
                    raise BadInput(f"cannot read {runtime.bmv2_json}: {exc.strerror}") from None
                self._set_pipeline(file_p4info, config)
                pushed = True
        elif push:
            raise BadInput(f"{runtime.path} names no pipeline ('p4info', 'bmv2_json') to push")
        p4 = self.pipeline()
        wanted = runtime_file.table_entries(p4, runtime)
        names = sorted({p4.name_of(e.table_id) for e in wanted})
        installed = [e.table_entry for e in self._read([entries.table_read(p4, n) for n in names])] if names else []
        updates = entries.sync_updates(p4, wanted, installed)
        pre = runtime_file.pre_entries(runtime)
        if pre:
            existing = self._pre_ids()
            for entry in pre:
                kind = entry.WhichOneof("type")
                ident = (
                    kind,
                    entry.multicast_group_entry.multicast_group_id
                    if kind == "multicast_group_entry"
                    else entry.clone_session_entry.session_id,
                )
                updates.append(
                    Update(
                        type=Update.MODIFY if ident in existing else Update.INSERT,
                        entity=p4runtime_pb2.Entity(packet_replication_engine_entry=entry),
                    )
                )
        summary = self._write(updates)
        return {"file": str(runtime.path), "pushed": pushed, **summary.to_dict()}

    def _pre_ids(self) -> set:
        """(kind, id) of the multicast groups and clone sessions on the switch (empty if unreadable)."""
        ids = set()
        clone = p4runtime_pb2.PacketReplicationEngineEntry()
        clone.clone_session_entry.session_id = 0
        for entity in (self._read([jobs.groups_entity()], optional=True) or []) + (
            self._read([p4runtime_pb2.Entity(packet_replication_engine_entry=clone)], optional=True) or []
        ):
            pre = entity.packet_replication_engine_entry
            kind = pre.WhichOneof("type")
            ids.add(
                (
                    kind,
                    pre.multicast_group_entry.multicast_group_id
                    if kind == "multicast_group_entry"
                    else pre.clone_session_entry.session_id,
                )
            )
        return ids
