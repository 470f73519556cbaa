"""`thc-run`: bring up a topology in Mininet, program its P4 switches, train through them, summarise.

    thc-run [--topo topologies/star4.json] [--target emulator|bmv2] [--workers N] [--steps N]
            [--modes thc,fix32,gloo] [--loss PCT] [--bw MBITS] ...
    thc-run --stop

Order of a run: hosts, links and switch processes (our software switch, or BMv2's simple_switch_grpc);
wait until every switch answers on gRPC; push the program and install routes, the THC table and the job
(controller.SwitchSession); start one `thc-worker` per worker host and follow their progress; print the
summary table, write logs/summary.json and logs/training.png. Everything the run creates is written to
logs/run-state.json first and removed on exit, on Ctrl-C, by the run's supervisor when the runner is
killed (topologies/supervisor.py), or by `thc-run --stop` if even that was lost.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from contract.job import JobSpec, JobSpecError, spec_from_options
from controller.topology import MAX_WORKERS, Topology, TopologyError
from emulator.pacing import MIN_PPS
from host_agent import workloads
from planner import testbed_costs
from thc.modes import GLOO_MODES, PLAN, PS_MODES, SWITCH_MODES
from topologies import interrupts, link_rate, pcap_room, plan_probes, supervisor
from topologies.run_cli import DEFAULT_TOPO, PS_TOPO, build_parser
from usage import provenance

REPO = Path(__file__).resolve().parents[1]
STATE_FILE = "run-state.json"
SUPERVISOR_LOG = "supervisor.log"
SUPERVISOR_WAIT = 30.0  # seconds a dead run's supervisor gets to finish before --stop does it


class RunError(RuntimeError):
    """A failure with a message that explains it; printed without a traceback."""


def say(message: str) -> None:
    print(f"thc-run: {message}", flush=True)


def error(message: str) -> None:
    """The one line of a failed run, on stderr."""
    print(f"thc-run: error: {message}", file=sys.stderr, flush=True)


# ---- stop ---------------------------------------------------------------------------------------------


def stop(log_dir: Path) -> int:
    from topologies.ledger import Ledger

    ledger = Ledger.load(log_dir / STATE_FILE)
    if ledger is None:
        say(f"nothing to stop: no {log_dir / STATE_FILE}")
        return 0
    if os.geteuid() != 0:
        raise RunError("stopping a run needs root, as starting it did: sudo make stop")
    if ledger.owner_alive() and ledger.owner_pid != os.getpid():
        say(f"asking the running thc-run (pid {ledger.owner_pid}) to stop")
        os.kill(ledger.owner_pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while ledger.owner_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        ledger = Ledger.load(log_dir / STATE_FILE)
        if ledger is None:
            say("stopped")
            return 0
    if not ledger.owner_alive() and _let_supervisor_finish(ledger, log_dir):
        say("stopped: the run's supervisor removed everything")
        return 0
    ledger.teardown(report=say)
    say("stopped; nothing of the run is left")
    return 0


def prepare_ledger(log_dir: Path):
    """A fresh ledger; leftovers of a crashed run are removed first, a live run is never touched."""
    from topologies.ledger import Ledger

    path = log_dir / STATE_FILE
    old = Ledger.load(path)
    if old is not None:
        if old.owner_alive():
            raise RunError(
                f"another thc-run (pid {old.owner_pid}) is using {log_dir}/; "
                "wait for it, or stop it with `thc-run --stop`"
            )
        if not _let_supervisor_finish(old, log_dir):
            say(f"removing what a previous run left ({path})")
            old.teardown(report=say)
    ledger = Ledger(path)
    ledger.save()
    return ledger


def _let_supervisor_finish(ledger, log_dir: Path) -> bool:
    """A dead run's supervisor may be removing it right now: wait for it rather than race it.
    True when it finished and retired the ledger."""
    if not ledger.live_supervisors():
        return False
    say(
        f"the run's supervisor (pid {ledger.live_supervisors()[0].pid}) is removing it; waiting "
        f"(its log: {log_dir / SUPERVISOR_LOG})"
    )
    ledger.wait_for_supervisor(SUPERVISOR_WAIT)
    return not ledger.path.exists()


# ---- the run ----------------------------------------------------------------------------------------


def load_topology(args) -> Topology:
    ps = any(m.partition(":")[0] in PS_MODES for m in args.modes.split(","))
    path = Path(args.topo or (PS_TOPO if ps else DEFAULT_TOPO))
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        path = REPO / path  # the shipped topologies also work from another directory
    topo = Topology.load(path)
    if args.workers is not None:
        topo = topo.with_workers(args.workers)
    if args.loss is not None and not 0 <= args.loss < 100:
        raise RunError(f"--loss {args.loss}: must be in [0, 100) percent")
    return topo.with_link_params(bw=None if args.bw == "auto" else args.bw, loss=args.loss)


def model_parameters(args) -> int:
    """How many parameters --model has (it is built once, on the CPU, to count them)."""
    from host_agent import train

    return train.count_parameters(workloads.get(args.model).build(args.seed))


def choose_link_rate(args, topo: Topology, parameters: int):
    """--bw auto: measure a step's compute here and pick the rate (link_rate); the topology with it."""
    compute_ms = link_rate.measure_compute_ms(args.model, args.batch_size)
    cores = link_rate.usable_cores()
    choice = link_rate.choose(parameters, len(topo.workers), compute_ms, cores, args.comm_share, steps=args.steps)
    say(choice.describe(len(topo.workers), cores))
    return choice, topo.with_link_params(bw=choice.mbit, loss=args.loss)


def check_pcap_room(args, topo: Topology, pcap_dir: Path, parameters: int, modes: list[str]) -> None:
    """Refuse a run whose pcaps could fill the disk (pcap_room), before anything starts."""
    bound = pcap_room.bound_bytes(parameters, len(topo.workers), args.steps, len(modes), len(topo.switches))
    what = f"{len(modes)} modes x {args.steps} steps, {parameters:,} parameters, {len(topo.workers)} workers"
    try:
        note = pcap_room.check(bound, pcap_room.free_bytes(pcap_dir), pcap_dir, what)
    except pcap_room.PcapRoomError as exc:
        raise RunError(str(exc)) from None
    if note:
        say(note)


def check_worker_protocol_options(args, modes: list[str]) -> None:
    """--query and --straggler-timeout change how workers run the aggregation protocol; with only gloo
    modes nothing runs it, and an option that changes nothing is refused rather than ignored."""
    given = [name for name, on in (("--query", args.query), ("--straggler-timeout", args.straggler_timeout)) if on]
    if given and all(mode in GLOO_MODES for mode in modes):
        raise RunError(
            f"{' and '.join(given)}: no mode of --modes {','.join(modes)} aggregates through the switch or "
            "parameter servers, whose protocol they change; add thc or fix32, or drop them"
        )


def parse_modes(text: str) -> list[str]:
    """--modes as a list: its names were checked where the option is parsed (usage.args.names_in)."""
    return [m.strip() for m in text.split(",")]


def check_placements(modes: list[str], topo: Topology) -> None:
    """Every ps mode's placement of servers must be in the topology (no placement named: its first)."""
    from topologies.workers import split_mode

    for mode in modes:
        worker_mode, placement = split_mode(mode)
        if worker_mode in PS_MODES:
            try:
                topo.placement(placement)
            except KeyError as exc:
                raise RunError(f"--modes {mode}: {exc.args[0]}") from None


def check_model(name: str) -> str:
    try:
        return workloads.get(name).name
    except workloads.UnknownModel as exc:
        raise RunError(str(exc)) from None


def check_switch_exe(path: str | None) -> None:
    if path is not None and not (Path(path).is_file() and os.access(path, os.X_OK)):
        raise RunError(
            f"--switch-exe {path}: no executable file there; give the path of thc-switch or "
            "simple_switch_grpc, or drop the option"
        )


def check_switch_pps(args) -> None:
    if args.switch_pps is None:
        return
    if args.target != "emulator":
        raise RunError(
            "--switch-pps paces the software switch; BMv2 runs at its own pace: drop it or use --target emulator"
        )
    if args.switch_pps < MIN_PPS:
        raise RunError(
            f"--switch-pps {args.switch_pps:g}: the software switch serves at least {MIN_PPS:g} frame a second"
        )


def check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise RunError("needs root for Mininet's network namespaces: run `sudo make run` (or sudo thc-run ...)")
    from controller.session import DEFAULT_BMV2_JSON, DEFAULT_P4INFO

    for path in (DEFAULT_BMV2_JSON, DEFAULT_P4INFO):
        if not Path(path).exists():
            raise RunError(
                f"{path} is missing: the compiled P4 program (run `make p4` with p4c, "
                "or use a checkout that has p4/build/)"
            )


def check_stragglers(stragglers, topo) -> None:
    """Every --straggler host must be a worker of the topology."""
    for host, _ in stragglers:
        if host not in topo.workers:
            raise RunError(f"--straggler {host}: not a worker of {topo.name} ({', '.join(topo.workers)})")


def job_spec(args, topo: Topology) -> JobSpec:
    """The switch modes' one job description, from the job options (checked before anything starts)."""
    try:
        return spec_from_options(args, args.job_id, len(topo.workers))
    except JobSpecError as exc:
        raise RunError(str(exc)) from None


def aggregation_text(topo: Topology) -> str:
    """Where the topology aggregates, for the run's first line."""
    agg = topo.aggregation
    if not topo.two_level:
        return f"{agg.switch} aggregates at {agg.service_ip}"
    leaves = ", ".join(f"{leaf.switch} at {leaf.service_ip}" for leaf in agg.leaves)
    return f"two-level aggregation: leaves {leaves} send partials to the spine {agg.switch} at {agg.service_ip}"


def testbed(args, topo: Topology, pcap_dir: Path | None):
    """The run's Testbed, not started yet: its log folder, a fresh ledger and the supervisor that removes the
    run if this process dies, the topology it runs written down."""
    from topologies.testbed import Testbed

    log_dir = Path(args.log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    ledger = prepare_ledger(log_dir)
    supervisor.start(ledger, log_dir / SUPERVISOR_LOG)  # first: it removes the run if this process dies
    (log_dir / "topology.json").write_text(json.dumps(topo.to_dict(), indent=1))
    _quiet_mininet()
    return Testbed(
        topo,
        log_dir,
        args.target,
        pcap_dir,
        executable=args.switch_exe,
        switch_log_level=args.switch_log_level,
        switch_backend=args.backend,
        switch_pps=args.switch_pps,
        say=say,
        ledger=ledger,
        start_timeout=args.start_timeout,
    )


def run(args) -> int:
    from topologies import one_run, report
    from topologies.workers import MASTER_PORT

    if args.trace is not None:
        return run_trace(args)
    modes = parse_modes(args.modes)  # every option is checked before anything needs root
    check_model(args.model)
    topo = load_topology(args)
    for host, step in args.kill:
        if host not in topo.workers:
            raise RunError(f"--kill {host}:{step}: {host} is not a worker of {topo.name} ({', '.join(topo.workers)})")
        if step >= args.steps:
            raise RunError(f"--kill {host}:{step}: the run has {args.steps} steps, so the kill would never happen")
    for switch, step in args.restart_switch:
        if switch not in topo.switches:
            raise RunError(
                f"--restart-switch {switch}:{step}: {switch} is not a switch of {topo.name} "
                f"({', '.join(topo.switches)})"
            )
        if step >= args.steps:
            raise RunError(
                f"--restart-switch {switch}:{step}: the run has {args.steps} steps, so it would never happen"
            )
    check_stragglers(args.straggler, topo)
    check_worker_protocol_options(args, modes)
    check_placements(modes, topo)
    spec = job_spec(args, topo)
    check_switch_exe(args.switch_exe)
    check_switch_pps(args)
    pcap_dir = None if args.no_pcap else Path(args.pcap_dir).resolve()
    parameters = model_parameters(args)
    if pcap_dir is not None:
        check_pcap_room(args, topo, pcap_dir, parameters, modes)
    check_prerequisites()
    # held until this process ends: Mininet's interface names are the machine's, and --bw auto measures its CPU
    args.machine_lock = one_run.hold(say)
    auto = None
    if args.bw == "auto":
        auto, topo = choose_link_rate(args, topo, parameters)
        args.bw = auto.mbit
    bed = testbed(args, topo, pcap_dir)
    log_dir = bed.log_dir
    summaries, curves, step_s = [], {}, {}
    run_info = {
        "topology": topo.name,
        "target": args.target,
        "workers": len(topo.workers),
        "steps": args.steps,
        "bw_mbit": args.bw,
        "loss_pct": args.loss,
        "modes": modes,
        "model": args.model,
        "codec": args.codec,
        "bw_auto": None if auto is None else asdict(auto),
        "provenance": provenance.started(quick=args.steps < 200),  # docs/results.md names it (make results)
    }
    summary_path = log_dir / "summary.json"
    args.saved = []  # modes whose results are in summary.json (what a full disk leaves: main says so)
    try:
        say(
            f"topology {topo.name}: {len(topo.workers)} workers, switches {', '.join(topo.switches)} "
            f"({args.target}), {aggregation_text(topo)}"
            + (f"; links {args.bw:g} Mbit/s" if args.bw else "")
            + (f"; {args.loss:g}% loss" if args.loss else "")
        )
        bed.start()
        for index, mode in enumerate(modes):
            options = worker_options(
                args,
                mode=mode,
                steps=args.steps,
                model=args.model,
                spec=spec,
                master_port=MASTER_PORT + index,
                stragglers=dict(args.straggler),
            )
            if mode == PLAN:
                path = log_dir / "plan.json"
                plan_probes.plan_for_run(bed, args.model, args.batch_size, spec.job_id, path, step_s, say)
                options.plan = str(path)
            if mode in SWITCH_MODES:
                where = ", ".join([topo.aggregation.switch] + [leaf.switch for leaf in topo.aggregation.leaves])
                say(f"{mode}: {options.spec_for(topo).describe()} on {where} (fresh epoch and key)")
            elif options.worker_mode in PS_MODES:
                servers = topo.placement(options.placement)
                where = ", ".join(f"{s.host}" for s in servers)
                say(f"{mode}: {options.spec_for(topo).describe()} on {len(servers)} servers ({where}), each a share")
            results = bed.train(
                mode,
                options,
                stall_timeout=args.stall_timeout,
                start_timeout=args.stall_timeout + 60,
                kill=args.kill,
                restart=args.restart_switch,
            )
            events = bed.last_switch_events.get(topo.aggregation.switch, {})
            target_acc = args.target_acc if args.target_acc is not None else workloads.get(args.model).target
            summaries.append(
                report.summarize(
                    mode, results, target_acc, events, bed.last_failures, bed.last_switch_events, bed.last_busiest
                )
            )
            curves[mode] = min(results, key=lambda r: r["rank"])
            step_s[mode] = testbed_costs.median_step_s(results)  # --modes plan's calibration
            run_info["provenance"] = provenance.finished(run_info["provenance"])
            report.write_json(summary_path, summaries, run_info)  # each mode's results as soon as they exist
            args.saved = [row.mode for row in summaries]
        print()
        print(report.table(summaries))
        for line in report.failure_lines(summaries) + report.verdict_lines(summaries):
            print(line)
        if args.loss:
            print(report.loss_lines(summaries, args.loss))
        report.plot(
            log_dir / "training.png",
            curves,
            f"{topo.name}, {len(topo.workers)} workers, {args.target}"
            + (f", {args.bw:g} Mbit/s" if args.bw else "")
            + (f", {args.loss:g}% loss" if args.loss else "")
            + f", {args.model}",
            summaries,
        )
        say(f"summary: {log_dir / 'summary.json'}, plot: {log_dir / 'training.png'}")
        return 0
    finally:
        interrupts.ignore()  # a second Ctrl-C must not cut the cleanup short
        say("stopping the network")
        bed.stop()
        say("network stopped; nothing of the run is left")


# ---- a trace of jobs -----------------------------------------------------------------------------------


def load_trace(args):
    """--trace's jobs, the topology they run on (every job's workers at once, unless --workers) and their
    schedule, checked before anything needs root: RunError in one line."""
    from topologies import job_trace, trace_run
    from topologies.trace_schedule import Schedule

    try:
        trace = job_trace.load(args.trace, models=workloads.names(), modes=trace_run.MODES)
        if args.workers is None:
            args.workers = min(sum(j.workers for j in trace), MAX_WORKERS)
        if args.topo is None:
            args.topo = PS_TOPO  # its placement dedicated1 is the pool policy's fallback server
        topo = load_topology(args)
        if topo.two_level:
            raise RunError(f"--trace runs on one switch; {topo.name} aggregates on two levels")
        if args.policy == "pool" and trace_run.fallback_placement(topo) is None:
            raise RunError(
                f"--policy pool: {topo.name} has no placement of one server for the fallback server "
                f"(a 'servers' entry, e.g. dedicated1 of {PS_TOPO})"
            )
        return trace, topo, Schedule(trace, list(topo.workers), str(args.trace))
    except job_trace.TraceError as exc:
        raise RunError(str(exc)) from None


def run_trace(args) -> int:
    """thc-run --trace: the trace's jobs on one testbed (topologies/trace_run.py), its summary and plot."""
    from topologies import job_trace, one_run, trace_run
    from topologies.servers import ServerSet

    if args.bw == "auto":
        raise RunError("--bw auto measures one model's step; with --trace give --bw MBITS, or no --bw")
    faults = [name for name, given in (("--kill", args.kill), ("--restart-switch", args.restart_switch),
              ("--straggler", args.straggler)) if given]  # fmt: skip
    if faults:
        raise RunError(f"{faults[0]} injects a fault into a --modes run; a trace's jobs take none (drop it)")
    defaults = build_parser()
    replaced = [f"--{dest.replace('_', '-')}" for dest in ("modes", "model", "steps", "job_id")
                if getattr(args, dest) != defaults.get_default(dest)]  # fmt: skip
    if replaced:
        raise RunError(f"{replaced[0]}: each job of the trace gives its own mode, model and steps, and gets its own "
                       f"job id (drop {replaced[0]})")  # fmt: skip
    trace, topo, schedule = load_trace(args)
    if args.pool_cells is not None and args.policy != "pool":
        raise RunError("--pool-cells sizes the shared pool: it needs --policy pool")
    if args.pool_cells and args.pool_cells & (args.pool_cells - 1):
        raise RunError(f"--pool-cells {args.pool_cells}: the pool is a power of two of cells, or 0")
    spec = job_spec(args, topo)
    check_switch_exe(args.switch_exe)
    check_switch_pps(args)
    pcap_dir = None if args.no_pcap else Path(args.pcap_dir).resolve()
    check_prerequisites()
    args.machine_lock = one_run.hold(say)
    bed = testbed(args, topo, pcap_dir)
    base = worker_options(args, mode=trace[0].mode, steps=trace[0].steps)
    servers = None
    if args.policy == "pool":
        placement = trace_run.fallback_placement(topo)

        def servers():
            level, backend = args.switch_log_level, args.backend
            return ServerSet(bed.net, topo, placement, bed.ledger, bed.log_dir, level, backend, say)

    provenance_record = provenance.started(quick=False)
    try:
        say(
            f"trace {args.trace}: {len(trace)} jobs on {topo.name} ({len(topo.workers)} worker hosts, switch "
            f"{topo.aggregation.switch} on {args.target}), policy {args.policy}"
            + (f"; links {args.bw:g} Mbit/s" if args.bw else "")
        )
        bed.start()
        run = trace_run.TraceRun(
            bed, schedule, args.policy, base, spec, servers, args.pool_cells, args.target_acc, args.stall_timeout, say
        )
        try:
            summary = run.run()
        except job_trace.TraceError as exc:  # a job that can never start
            raise RunError(f"{args.trace}: {exc}") from None
        summary.update(
            trace=str(args.trace),
            topology=topo.name,
            target=args.target,
            bw_mbit=args.bw,
            provenance=provenance.finished(provenance_record),
        )
        path = bed.log_dir / "summary.json"
        path.write_text(json.dumps(summary, indent=1) + "\n")
        trace_run.plot(bed.log_dir / "occupancy.png", summary, f"{topo.name}, {args.target}, policy {args.policy}")
        print()
        print(trace_run.table(summary))
        say(f"summary: {path}, plot: {bed.log_dir / 'occupancy.png'}")
        return 0
    finally:
        interrupts.ignore()
        say("stopping the network")
        bed.stop()
        say("network stopped; nothing of the run is left")


def worker_options(args, **run):
    """The workers' options that every run of one thc-run shares (training and timeouts from its command
    line), with the run's own (`run`: mode, steps, the job, ...): a WorkerOptions."""
    from topologies.workers import WorkerOptions

    return WorkerOptions(
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        switch_timeout=args.switch_timeout,
        straggler_timeout_ms=args.straggler_timeout,
        query_first=args.query,
        bucket_cap_kb=args.bucket_cap_kb,
        codec=args.codec,
        **run,
    )


def disk_full_line(exc: OSError, saved: list[str], summary: Path) -> str:
    """The one line a full disk gets: what could not be written, and what of the run was kept."""
    where = f"writing {exc.filename}" if exc.filename else "writing"
    kept = (
        f"the results of {', '.join(saved)} are in {summary}" if saved else "no mode had finished, so nothing was saved"
    )
    return f"the disk is full ({exc.strerror} while {where}): {kept}; free space (or give --no-pcap) and run again"


def _quiet_mininet() -> None:
    """Mininet reports tc's harmless htb 'quantum' warning as an error; our own checks report failures."""
    from mininet.log import setLogLevel

    setLogLevel("critical")


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error (already printed, one line)
        return int(exc.code or 0)
    if args.stop:
        try:
            return stop(Path(args.log_dir).resolve())
        except (RunError, RuntimeError) as exc:
            error(str(exc))
            return 1
    interrupts.install()
    from topologies.network import NetworkError
    from topologies.p4switch import SwitchStartError
    from topologies.workers import WorkerFailed

    try:
        return run(args)
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        error(disk_full_line(exc, getattr(args, "saved", []), Path(args.log_dir).resolve() / "summary.json"))
        return 1
    except TopologyError as exc:  # the first problem, naming file and line, and how many more
        error(exc.one_line())
        return 1
    except (RunError, NetworkError, SwitchStartError, WorkerFailed) as exc:
        error(str(exc))
        return 1
    except Exception as exc:
        if type(exc).__module__.startswith("controller"):  # the controller's errors explain themselves
            error(f"controller: {exc}")
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
