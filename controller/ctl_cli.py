"""thc-ctl: program THC switches over P4Runtime.

    thc-ctl push                                   set the pipeline (p4/build/thc.p4info.txtpb + thc.json)
    thc-ctl forwarding --topology T --all          IPv4 routes to every host, on every switch
    thc-ctl job add --topology T --id 1 --workers h1,h2,h3,h4 --bits 4 --granularity 30 --save job1.json
    thc-ctl job list | job remove --id 1 | table show
    thc-ctl stats | pool | show | apply s1-runtime.json

Every command takes --grpc-addr/--device-id/--election-id (or --topology with --switch/--all),
--dry-run (print the P4Runtime requests instead of sending them) and --json. Errors are one line on
stderr and exit status 1 (2 for bad usage). Everything that can be checked without the switch (options,
the topology file, the table) is checked before connecting.
"""

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass

import google.protobuf.text_format
from google.protobuf import json_format
from p4.v1 import p4runtime_pb2

import contract
from contract.job import KEYS, JobSpec, JobSpecError, add_job_options, spec_from_options
from contract.ticket import Ticket
from controller import jobs, runtime_file, two_level
from controller import pool as pools
from controller.connection import parse_election_id
from controller.errors import BadInput, ControlError
from controller.session import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, SwitchSession, read_pipeline
from usage.args import OneLineParser, host_port, input_file, int_in, output_file, positive_number

DEFAULT_GRPC_ADDR = "127.0.0.1:9559"  # simple_switch_grpc's default


@dataclass(frozen=True)
class SwitchAddress:
    """A switch to talk to: its topology name (if any), P4Runtime address and device id."""

    name: str | None
    grpc_addr: str
    device_id: int


# ---- arguments ----------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("switch")
    g.add_argument(
        "--grpc-addr",
        type=host_port(1, DEFAULT_GRPC_ADDR),
        metavar="HOST:PORT",
        help=f"P4Runtime server of the switch (default: the topology's, else {DEFAULT_GRPC_ADDR})",
    )
    g.add_argument(
        "--device-id", type=_device_id, metavar="N", help="P4Runtime device id (default: the topology's, else 0)"
    )
    g.add_argument(
        "--election-id",
        type=_election_id,
        default="0,1",
        metavar="[HIGH,]LOW",
        help="election id for primary arbitration (default: 0,1)",
    )
    g.add_argument(
        "--topology", type=input_file, metavar="FILE", help="topology file (topologies/*.json): switch addresses, hosts"
    )
    which = g.add_mutually_exclusive_group()
    which.add_argument("--switch", metavar="NAME", help="act on this switch of the topology")
    which.add_argument("--all", action="store_true", help="act on every switch of the topology, one after the other")
    g.add_argument(
        "--connect-timeout",
        type=positive_number("seconds"),
        default=3.0,
        metavar="SEC",
        help="how long to wait for the switch to answer (default: 3)",
    )
    o = parser.add_argument_group("output")
    o.add_argument(
        "--dry-run",
        action="store_true",
        help="print the P4Runtime requests (text protobuf) instead of sending them; the switch is "
        "only read, if it is reachable",
    )
    o.add_argument("--json", action="store_true", help="machine-readable output")
    p = parser.add_argument_group("program")
    p.add_argument(
        "--p4info",
        type=input_file,
        default=str(DEFAULT_P4INFO),
        metavar="FILE",
        help="P4Info to push (and to encode with in a dry run without a switch) (default: %(default)s)",
    )
    p.add_argument(
        "--bmv2-json",
        type=input_file,
        default=str(DEFAULT_BMV2_JSON),
        metavar="FILE",
        help="BMv2 JSON to push (default: %(default)s)",
    )


JOB_ID = int_in(0, contract.JOB_ID_MAX)  # argparse type of a job id


def _election_id(text: str) -> str:
    """argparse type: an election id as parse_election_id takes it, checked before anything connects."""
    try:
        parse_election_id(text)
    except ControlError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _integer(what: str):
    """argparse type: an integer, with a message that says what the number is (ranges are checked later)."""

    def parse(text: str) -> int:
        try:
            return int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer ({what})") from None

    return parse


def _device_id(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer (the switch's --device-id)") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"{text!r}: a P4Runtime device id is 0..2**64-1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="thc-ctl",
        description="Program THC aggregation switches over P4Runtime.",
        epilog="Run `thc-ctl COMMAND --help` for the options of a command.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(subparsers, name, help_text, description=None):
        p = subparsers.add_parser(name, help=help_text, description=description or help_text)
        _common(p)
        return p

    command(
        sub,
        "push",
        "set the forwarding pipeline (P4Info + BMv2 JSON); every entry is lost",
        "Set the switch's forwarding pipeline from --p4info and --bmv2-json, after checking that the "
        "P4Info is the THC program's (every table the controller programs is there).",
    )

    command(
        sub,
        "forwarding",
        "install IPv4 routes to every host of the topology",
        "Install a /32 ipv4_lpm route to every host (toward the service address on non-aggregating "
        "switches), and on the aggregating switch the service address it serves. Needs --topology.",
    )

    table = sub.add_parser("table", help="the jobs' lookup tables (index -> value)").add_subparsers(
        dest="table_command", metavar="ACTION", required=True
    )
    command(table, "show", "every job's lookup table on the switch")

    job = sub.add_parser("job", help="aggregation jobs").add_subparsers(
        dest="job_command", metavar="ACTION", required=True
    )
    add = command(
        job,
        "add",
        "add a job (or start a new run of it, with a fresh epoch)",
        "Install a job on the aggregating switch from its one description (the options below, or "
        "--job FILE): its lookup table, jobs entry (lane width, slots, epoch, key), multicast group (one "
        "replica per worker, on the port toward it) and result_dst entries. Re-adding an installed job "
        "gives it a fresh epoch: a new run. --save writes the ticket the workers need (the description and "
        "what the switch granted: key, epoch, slots): `thc-worker --job FILE`. Needs --topology (worker "
        "addresses and ports). On a topology with aggregation.leaves the job goes on the spine and every "
        "leaf of its workers (two-level aggregation; job remove and list act on all of them too).",
    )
    add.add_argument("--id", type=JOB_ID, metavar="J", help=f"job id, 0..{contract.JOB_ID_MAX} (or the --job file's)")
    add.add_argument("--workers", required=True, metavar="h1,h2,...", help="worker hosts of the topology")
    add.add_argument(
        "--job",
        metavar="FILE",
        help="take the job's description from FILE (a JSON JobSpec, or a ticket --save wrote: its key is "
        "kept; its job id and worker count must agree with --id and --workers) instead of the options below",
    )
    add_job_options(add)
    add.add_argument("--slot-base", type=int_in(0), metavar="S", help="first slot (default: the lowest free range)")
    add.add_argument(
        "--epoch", type=int_in(1, 65535), metavar="E", help="epoch 1..65535 (default: random, never the previous one)"
    )
    add.add_argument(
        "--pool",
        action="store_true",
        help="claim cells from the shared pool round by round instead of owning a slot range (admitted "
        "however full the pool is: a round whose cell is taken falls back to the parameter server)",
    )
    add.add_argument(
        "--pool-cells",
        type=int_in(0, contract.CELLS),
        metavar="C",
        help="with --pool, when no pool job has placed it yet: the pool's size in cells (a power of two, or "
        "0; default: the largest power of two above the static jobs' slots)",
    )
    add.add_argument(
        "--key", type=_integer("the job key"), metavar="K", help="the job's key, 1..2**32-1 (default: a fresh one)"
    )
    add.add_argument(
        "--save",
        metavar="FILE",
        type=output_file,
        help="write the job's ticket for the workers (thc-worker --job): its description and grant "
        "(key, epoch, slots; contract/ticket.py)",
    )
    remove = command(job, "remove", "remove a job (jobs entry, multicast group, result_dst entries)")
    remove.add_argument("--id", type=JOB_ID, required=True, metavar="J", help="job id")
    remove.add_argument("--missing-ok", action="store_true", help="succeed if the job is not installed")
    command(job, "list", "the installed jobs and their workers")
    command(sub, "pool", "the shared pool: cells each pool job holds, its rounds that fell back")

    stats_cmd = command(
        sub, "stats", f"the program's event counters ({contract.THC_EVENTS}), and per job ({contract.THC_JOB_EVENTS})"
    )
    stats_cmd.add_argument(
        "--job",
        type=JOB_ID,
        action="append",
        metavar="ID",
        help="only this job's events (repeatable; default: every installed job)",
    )
    show = command(sub, "show", "the tables and their entries, and the multicast groups")
    show.add_argument("--table", metavar="NAME", help="only this table (full name or unique suffix)")
    apply = command(
        sub,
        "apply",
        "apply a runtime file (p4lang/tutorials' sN-runtime.json format)",
        "Apply a runtime file {target, p4info, bmv2_json, table_entries, multicast_group_entries}. "
        "Its pipeline is pushed when the switch runs another one (or none); entries that exist "
        "are modified, so applying twice changes nothing.",
    )
    apply.add_argument("file", metavar="FILE", help="runtime JSON file")
    push_opt = apply.add_mutually_exclusive_group()
    push_opt.add_argument(
        "--push", dest="push", action="store_const", const=True, help="always push the file's pipeline first"
    )
    push_opt.add_argument(
        "--no-push", dest="push", action="store_const", const=False, help="never push; only write the entries"
    )
    return parser


# ---- switches -----------------------------------------------------------------------------------


def load_topology(path: str | None):
    if path is None:
        return None
    from controller.topology import Topology, TopologyError

    try:
        return Topology.load(path)
    except TopologyError as exc:
        raise BadInput(exc.one_line()) from None


def resolve_switches(args, topology, jobs_switch: bool = False) -> list[SwitchAddress]:
    """The switches a command acts on: --all, --switch, the topology's only (or aggregating) switch,
    or a bare --grpc-addr."""
    if (args.all or args.switch) and topology is None:
        raise BadInput(f"--{'all' if args.all else 'switch'} needs --topology")
    if args.all:
        if args.grpc_addr:
            raise BadInput("--all takes the switch addresses from the topology: drop --grpc-addr")
        return [SwitchAddress(s.name, s.grpc_addr, s.device_id) for s in topology.switches.values()]
    switch = None
    if topology is not None:
        if args.switch:
            if args.switch not in topology.switches:
                raise BadInput(
                    f"no switch '{args.switch}' in topology {topology.name} (switches: {', '.join(topology.switches)})"
                )
            switch = topology.switches[args.switch]
        elif args.grpc_addr:
            port = args.grpc_addr.rsplit(":", 1)[-1]
            matches = [s for s in topology.switches.values() if str(s.grpc_port) == port]
            switch = matches[0] if len(matches) == 1 else None
            if switch is None and jobs_switch:
                switch = topology.switches[topology.aggregation.switch]
        elif jobs_switch:
            switch = topology.switches[topology.aggregation.switch]
        elif len(topology.switches) == 1:
            switch = next(iter(topology.switches.values()))
        else:
            raise BadInput(
                f"topology {topology.name} has switches {', '.join(topology.switches)}: "
                "choose one with --switch NAME or --all"
            )
    addr = args.grpc_addr or (switch.grpc_addr if switch else DEFAULT_GRPC_ADDR)  # "" is refused by host_port
    device = args.device_id if args.device_id is not None else (switch.device_id if switch else 0)
    return [SwitchAddress(switch.name if switch else None, addr, device)]


def _needs_topology(args, what: str, topology):
    if topology is None:
        raise BadInput(f"{what} needs --topology FILE (hosts' addresses and the switch ports toward them)")
    return topology


# ---- commands -----------------------------------------------------------------------------------


def job_spec(args) -> JobSpec:
    """The job's one description, from --job FILE or the options (checked before connecting)."""
    hosts = _worker_names(args)
    try:
        if args.job:
            spec = Ticket.load(args.job).spec
            if args.id is not None and args.id != spec.job_id:
                raise BadInput(f"--id {args.id} but {args.job} describes job {spec.job_id}")
            if len(hosts) != spec.workers:
                raise BadInput(f"--workers names {len(hosts)} hosts but {args.job} describes {spec.workers} workers")
        else:
            if args.id is None:
                raise BadInput("job add needs --id (or --job FILE)")
            spec = spec_from_options(args, args.id, len(hosts))
        if args.key is not None:
            if args.key not in KEYS:
                raise BadInput(f"--key {args.key}: a job key is 1..2**32-1")
            spec = spec.replace(key=args.key)
    except JobSpecError as exc:
        raise BadInput(str(exc)) from None
    return spec


def _saved(spec: JobSpec, job, path: str | None) -> str:
    """Write the workers' ticket (the description and what the switch granted: key, epoch, slots); say where."""
    if path is None:
        return ""
    Ticket.granted(spec, job).save(path)
    return f"; ticket for the workers: {path} (thc-worker --job {path})"


def run_on(session: SwitchSession, args, topology):
    """Run the command on one switch; return (result for --json, lines for people)."""
    cmd = args.command
    if cmd == "push":
        r = session.push()
        return r, [
            f"pipeline set: {r['p4info']} + {r['bmv2_json']} ({r['bmv2_json_bytes']} bytes, {r['words']}-word cells)"
        ]
    if cmd == "forwarding":
        topo = _needs_topology(args, "forwarding", topology)
        summary = session.install_forwarding(topo, session.name)
        return summary.to_dict(), [f"forwarding: {summary}"]
    if cmd == "table":
        listed = session.list_jobs()
        lines = [
            f"job {j.job_id}: V={list(j.table)} (b={len(j.table).bit_length() - 1}, g={max(j.table)}), "
            f"{j.lane_bits}-bit lanes"
            if j.table
            else f"job {j.job_id}: no lookup table (a spine: its partials hold table values)"
            for j in listed
        ]
        return {j.job_id: list(j.table) for j in listed}, lines or ["no jobs, so no tables"]
    if cmd == "job":
        return _job_command(session, args, topology)
    if cmd == "stats":
        s = session.read_stats(args.job)
        lines = [
            f"{name:<20} {p:>12} pkts {b:>14} bytes"
            for name, (p, b) in s.events.items()
            if p or name in contract.EVENTS
        ]
        lines.append(f"{'aggregated':<20} {s.aggregated:>12} pkts (CONSUMED + COMPLETED)")
        for job_id, job in sorted(s.jobs.items()):
            lines.append(f"job {job_id}:")
            lines += [f"  {name:<18} {p:>12} pkts {b:>14} bytes" for name, (p, b) in job.events.items() if p]
        return s.to_dict(), lines
    if cmd == "pool":
        return _pool(session)
    if cmd == "show":
        return _show(session, args)
    if cmd == "apply":
        r = session.apply(args.file, push=args.push)
        pushed = "pipeline pushed; " if r["pushed"] else ""
        return r, [f"applied {r['file']}: {pushed}{r['inserted']} inserted, {r['modified']} modified"]
    raise BadInput(f"unknown command {cmd}")


def _worker_names(args) -> list[str]:
    return [h for h in args.workers.replace(" ", "").split(",") if h]


def _job_command(session: SwitchSession, args, topology):
    if args.job_command == "add":
        topo = _needs_topology(args, "job add", topology)
        hosts = _worker_names(args)
        spec = args.job_spec
        previous = {j.job_id: j for j in session.list_jobs()}.get(spec.job_id)
        if args.pool_cells is not None and not args.pool:
            raise BadInput("--pool-cells sizes the shared pool: it needs --pool")
        others = [j for j in session.installed_jobs() if j.job_id != spec.job_id]
        job = session.add_job(
            spec,
            hosts,
            topo,
            session.name,
            slot_base=args.slot_base,
            epoch=args.epoch,
            pool=args.pool,
            pool_cells=args.pool_cells,
        )
        renewed = f" (new run: epoch {previous.epoch} -> {job.epoch})" if previous else ""
        saved = "" if args.dry_run else _saved(spec, job, args.save)
        lines = [
            f"job {job.job_id}{renewed}: {job.n_workers} workers, slots "
            f"[{job.slot_base}, {job.slot_base + job.n_slots}), epoch {job.epoch}, "
            f"{job.lane_bits}-bit lanes ({spec.coords_per_request} coordinates a request), "
            f"multicast group {job.mcast_grp}{saved}"
        ]
        if job.pool is not None:
            lines.append(pools.fallback_note(job, others))
        return {**job.to_dict(), "spec": spec.replace(key=job.key).to_dict()}, lines
    if args.job_command == "remove":
        job = session.remove_job(args.id, missing_ok=args.missing_ok)
        if job is None:
            return {"removed": None}, [f"job {args.id} was not installed"]
        return {"removed": job.to_dict()}, [f"job {job.job_id} removed"]
    listed = session.list_jobs(topology)
    lines = []
    for j in listed:
        lines.append(
            f"job {j.job_id}: {j.n_workers} workers, slots [{j.slot_base}, {j.slot_base + j.n_slots}), "
            f"epoch {j.epoch}, {j.lane_bits}-bit results, group {j.mcast_grp}, mask 0x{j.worker_mask:08x}"
            + (f", cells from the pool (ring from cell {j.pool[0] + j.pool[2]})" if j.pool else "")
        )
        for w in j.workers:
            port = "?" if w.port is None else w.port
            lines.append(f"  worker {w.worker_id:>2} {w.host or '':<6} {w.ip:<15} {w.mac} port {port}")
    return [j.to_dict() for j in listed], lines or ["no jobs"]


def _pool(session: SwitchSession):
    """`thc-ctl pool`: the pool's cells, and per pool job the cells its run holds and its fallbacks."""
    pool, uses = session.pool_usage()
    if pool is None:
        return {"pool": None, "jobs": []}, ["no pool jobs (thc-ctl job add --pool)"]
    held = sum(u.held for u in uses)
    lines = [f"pool: {pool.cells} cells ({pool.base}..{pool.base + pool.cells - 1}), {held} held"]
    lines += [
        f"job {u.job_id}: epoch {u.epoch}, {u.held} cells held ({u.claimed} claimed, {u.freed} freed), "
        f"{u.fallbacks} rounds fell back ({u.fallback_answers} more FALLBACK answers)"
        for u in uses
    ]
    data = {"pool": {"base": pool.base, "cells": pool.cells, "held": held}, "jobs": [u.to_dict() for u in uses]}
    return data, lines


def _two_level_job_command(sessions: dict, args, topology):
    """`job add|remove|list` on a two-level topology: the spine and its leaves (controller/two_level.py)."""
    if args.job_command == "add":
        hosts = _worker_names(args)
        spec = args.job_spec
        if args.pool:
            raise BadInput(
                "--pool: a two-level job keeps static slots on its leaves and spine (the pool is one switch's)"
            )
        previous = {j.job_id: j for j in two_level.list_jobs(sessions, topology)}.get(spec.job_id)
        job = two_level.add_job(sessions, topology, spec, hosts, slot_base=args.slot_base, epoch=args.epoch)
        renewed = f" (new run: epoch {previous.epoch} -> {job.epoch})" if previous else ""
        saved = "" if args.dry_run else _saved(spec, job.job, args.save)
        return {**job.to_dict(), "spec": spec.replace(key=job.key).to_dict()}, [
            f"job {job.job_id}{renewed}: {job.n_workers} workers on two levels (leaves "
            + ", ".join(f"{leaf}: {job.parts[leaf].n_workers}" for leaf in job.leaves)
            + f"; spine {job.spine}), slots [{job.slot_base}, {job.slot_base + job.n_slots}), epoch {job.epoch}, "
            f"{job.lane_bits}-bit lanes{saved}"
        ]
    if args.job_command == "remove":
        job = two_level.remove_job(sessions, topology, args.id, missing_ok=args.missing_ok)
        if job is None:
            return {"removed": None}, [f"job {args.id} was not installed"]
        return {"removed": job.to_dict()}, [f"job {job.job_id} removed from {', '.join(job.parts)}"]
    listed = two_level.list_jobs(sessions, topology)
    lines = []
    for j in listed:
        lines.append(f"job {j.job_id}: {j.n_workers} workers, slots [{j.slot_base}, {j.slot_base + j.n_slots}), "
                     f"epoch {j.epoch}, {j.lane_bits}-bit results")  # fmt: skip
        for name, part in j.parts.items():
            role = "spine" if name == j.spine else f"leaf {part.uplink[0]}" if part.uplink else "no uplink"
            members = ", ".join(w.host or w.ip for w in part.workers)
            lines.append(f"  {name} ({role}): {part.n_workers} of the job's inputs: {members}")
    return [j.to_dict() for j in listed], lines or ["no jobs"]


def _run_two_level_job(args, topology, election_id, out, err) -> int:
    """Open a session to the spine and every leaf, run the job command on all of them, print the result."""
    if args.all:
        raise BadInput("jobs live on the aggregating switches: drop --all")
    names = [topology.aggregation.switch] + [leaf.switch for leaf in topology.aggregation.leaves]
    sessions = {}
    try:
        for name in names:
            switch = topology.switches[name]
            sessions[name] = SwitchSession(
                switch.grpc_addr,
                switch.device_id,
                election_id,
                args.p4info,
                args.bmv2_json,
                name=name,
                dry_run=args.dry_run,
                connect_timeout=args.connect_timeout,
            )
        result, lines = _two_level_job_command(sessions, args, topology)
        if args.dry_run:
            dry = {}
            for name, session in sessions.items():
                dry[name] = [request_dict(r) for r in session.dry_requests]
                if not args.json:
                    for note in session.notes:
                        print(f"# note: {name}: {note}", file=err)
                    for request in session.dry_requests:
                        print(request_text(request, session), file=out)
            if args.json:
                print(json.dumps({"result": result, "dry_run": dry}, indent=2), file=out)
            else:
                print("# (dry run, nothing sent) " + " / ".join(lines[:1]), file=out)
            return 0
    finally:
        for session in sessions.values():
            session.close()
    if args.json:
        print(json.dumps(result, indent=2), file=out)
    else:
        for line in lines:
            print(line, file=out)
    return 0


def _show(session: SwitchSession, args):
    p4 = session.pipeline()
    only = p4.table(args.table).preamble.name if args.table else None
    data = session.show()
    if only:
        data = {**data, "tables": {only: data["tables"].get(only, [])}}
    lines = []
    for name, found in data["tables"].items():
        lines.append(f"{name}: {len(found)} entries")
        for d in found:
            key = " ".join(
                f"{k.rsplit('.', 1)[-1]}={'/'.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in d.get("match", {}).items()
            )
            params = ", ".join(f"{k}={v}" for k, v in d.get("action_params", {}).items())
            lines.append(f"  {key} -> {d.get('action_name', '?').rsplit('.', 1)[-1]}({params})")
    groups = data["multicast_group_entries"]
    if only is None:
        if groups is None:
            lines.append("multicast groups: not readable on this switch")
        for g in groups or []:
            replicas = ", ".join(f"port {r['egress_port']} rid {r['instance']}" for r in g["replicas"])
            lines.append(f"multicast group {g['multicast_group_id']}: {replicas}")
    return data, lines


# ---- output -------------------------------------------------------------------------------------


def _elided(request) -> tuple:
    """A copy of `request` without a pipeline's device config (the BMv2 JSON), and that config's size."""
    if not isinstance(request, p4runtime_pb2.SetForwardingPipelineConfigRequest):
        return request, None
    shown = p4runtime_pb2.SetForwardingPipelineConfigRequest()
    shown.CopyFrom(request)
    size = len(shown.config.p4_device_config)
    shown.config.p4_device_config = b""
    return shown, size


def request_dict(request) -> dict:
    shown, size = _elided(request)
    d = {"type": type(request).__name__, **json_format.MessageToDict(shown, preserving_proto_field_name=True)}
    if size is not None:
        d["p4_device_config_bytes"] = size
    return d


def request_text(request, session: SwitchSession) -> str:
    """A request as text protobuf; a pipeline's device config is elided (it is the BMv2 JSON file)."""
    shown, size = _elided(request)
    if size is not None:
        return (
            f"# SetForwardingPipelineConfigRequest to {session.label}\n"
            f"# config.p4_device_config: {size} bytes of BMv2 JSON (elided)\n"
            + google.protobuf.text_format.MessageToString(shown)
        )
    return (
        f"# WriteRequest to {session.label}: {len(request.updates)} updates\n"
        + google.protobuf.text_format.MessageToString(request)
    )


def run(argv: list[str] | None = None, out=None, err=None) -> int:
    """The CLI; returns the exit status (0 ok, 1 error, 2 usage)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        with contextlib.redirect_stderr(err):  # a usage error is one of this run's error lines
            args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    results = {}
    try:
        election_id = parse_election_id(args.election_id)
        topology = load_topology(args.topology)
        jobs_switch = args.command == "job"
        if jobs_switch and args.all:
            raise BadInput("jobs live on the aggregating switch: drop --all")
        if jobs_switch and args.job_command == "add":
            args.job_spec = job_spec(args)
            if topology is not None:  # the workers' names, before anything is read from or sent to a switch
                jobs.check_worker_names(topology, _worker_names(args))
        if args.command == "push":  # the files, before anything is sent
            read_pipeline(args.p4info, args.bmv2_json)
        if args.command == "apply":
            runtime_file.check(args.file)
        if jobs_switch and topology is not None and topology.two_level and not (args.switch or args.grpc_addr):
            return _run_two_level_job(args, topology, election_id, out, err)
        switches = resolve_switches(args, topology, jobs_switch)
        for switch in switches:
            with SwitchSession(
                switch.grpc_addr,
                switch.device_id,
                election_id,
                args.p4info,
                args.bmv2_json,
                name=switch.name,
                dry_run=args.dry_run,
                connect_timeout=args.connect_timeout,
            ) as session:
                result, lines = run_on(session, args, topology)
                key = switch.name or switch.grpc_addr
                if args.json:
                    if args.dry_run:
                        result = {
                            "result": result,
                            "dry_run": [request_dict(r) for r in session.dry_requests],
                            "notes": session.notes,
                        }
                    results[key] = result
                    continue
                prefix = f"{switch.name}: " if len(switches) > 1 or switch.name else ""
                if args.dry_run:
                    for note in session.notes:
                        print(f"# note: {note}", file=err)
                    for request in session.dry_requests:
                        print(request_text(request, session), file=out)
                    if not session.dry_requests:
                        print(f"# dry run: no request to send to {session.label}", file=out)
                    print(f"# {prefix}(dry run, nothing sent) " + " / ".join(lines[:1]), file=out)
                    continue
                for line in lines:
                    print(prefix + line, file=out)
    except ControlError as exc:
        if args.json and results:
            print(json.dumps(results if len(results) > 1 else next(iter(results.values())), indent=2), file=out)
        print(f"thc-ctl: error: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        print("thc-ctl: interrupted", file=err)
        return 130
    if args.json:
        print(
            json.dumps(next(iter(results.values())) if len(results) == 1 and not args.all else results, indent=2),
            file=out,
        )
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
