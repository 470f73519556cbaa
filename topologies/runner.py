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

import argparse
import errno
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from controller.topology import MAX_WORKERS, Topology, TopologyError
from controller.usage import OneLineParser, positive_number
from emulator.pacing import MIN_PPS
from host_agent import workloads
from host_agent.worker import PS_MODES, SWITCH_MODES
from spec import contract
from spec.job import JobSpec, JobSpecError, add_job_options, spec_from_options
from topologies import interrupts, link_rate, pcap_room, plan_costs, supervisor

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TOPO = "topologies/star4.json"
PS_TOPO = "topologies/star4_ps.json"  # the default when a mode is a ps mode: star4 with server placements
STATE_FILE = "run-state.json"
SUPERVISOR_LOG = "supervisor.log"
SUPERVISOR_WAIT = 30.0  # seconds a dead run's supervisor gets to finish before --stop does it
MODES = ("thc", "fix32", "gloo")  # the default --modes
# thc-worker's; plan: the timeline model's per-bucket plan for this run (topologies/plan_costs.py)
ALL_MODES = ("thc", "fix32", "gloo", "fp16", "powersgd", "topk", "qsgd", "terngrad", "terngrad-switch", "plan")
ALL_MODES += ("thc-backend", "fix32-backend", *PS_MODES)  # a ps mode may name its placement: thc-ps:colocated4


class RunError(RuntimeError):
    """A failure with a message that explains it; printed without a traceback."""


def _int_range(lo: int, hi: int | None = None, why: str = ""):
    """argparse type: an integer in lo..hi (hi None: no upper bound); the message says the range and why."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"{value}: must be {bound}{why}")
        return value

    return parse


def _host_step(text: str, example: str = "h3:50", what: str = "HOST") -> tuple[str, int]:
    host, sep, step = text.rpartition(":")
    if not sep or not host or not step.isdigit() or int(step) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {what}:STEP, like {example}")
    return host, int(step)


def _switch_step(text: str) -> tuple[str, int]:
    return _host_step(text, "s1:50", "SWITCH")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: an accuracy in (0, 1], like 0.9")
    return value


def _bandwidth(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: Mbit/s as a number, or 'auto'") from None
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"{text}: must be in (0, 1000] Mbit/s")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text}: a share in (0, 1), like 0.9")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="thc-run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run THC in-network aggregation on an emulated network: Mininet hosts, P4Runtime "
        "switches (the software switch or BMv2), one training worker per host.",
        epilog="Examples:\n"
        "  thc-run                                   star of 4 workers, software switch, all modes\n"
        "  thc-run --workers 8 --modes thc --steps 100\n"
        "  thc-run --topo topologies/two_tier.json --loss 1\n"
        "  thc-run --target bmv2                     the same on simple_switch_grpc\n"
        "  thc-run --stop                            remove what a crashed or killed run left\n"
        "Files: logs/<switch>.log (switch console), logs/<mode>/<host>.log and .json (workers),\n"
        "logs/summary.json, logs/training.png, pcaps/<iface>_{in,out}.pcap, logs/run-state.json.\n"
        "Needs root (network namespaces). Never runs `mn -c`: cleanup removes only what the run made.",
    )
    net = p.add_argument_group("network")
    net.add_argument(
        "--topo",
        default=None,
        metavar="FILE",
        help=f"topology JSON (default {DEFAULT_TOPO}, or {PS_TOPO} when a mode is a ps mode; format: "
        "controller/topology.py)",
    )
    net.add_argument(
        "--target",
        choices=("emulator", "bmv2"),
        default="emulator",
        help="switch: 'emulator' = our thc-switch (default), 'bmv2' = simple_switch_grpc (from /opt/p4/bin or PATH)",
    )
    net.add_argument(
        "--workers",
        type=_int_range(1, MAX_WORKERS, " (the switch's worker bitmap)"),
        metavar="N",
        help="number of workers: a star topology grows/shrinks to N hosts, others use their first N",
    )
    net.add_argument(
        "--bw",
        type=_bandwidth,
        metavar="MBITS|auto",
        help="bandwidth of every link in Mbit/s (htb), or 'auto': slow enough that gloo's all-reduce spends "
        "--comm-share of its step communicating, from this machine's measured compute per step "
        "(topologies/link_rate.py; make run's default), raised if need be so that gloo's communication "
        f"over --steps fits {link_rate.DEFAULT_BUDGET_S:g} s. Default: unconstrained",
    )
    net.add_argument(
        "--comm-share",
        type=_share,
        default=link_rate.DEFAULT_SHARE,
        metavar="S",
        help=f"with --bw auto: gloo's communication share of its step to aim at (default {link_rate.DEFAULT_SHARE})",
    )
    net.add_argument(
        "--loss", type=float, metavar="PCT", help="random loss of every link, percent per direction (e.g. 1)"
    )
    net.add_argument("--switch-exe", metavar="PATH", help="switch executable to use instead of the target's")
    net.add_argument(
        "--switch-log-level",
        default="info",
        choices=("trace", "debug", "info", "warn", "error", "off"),
        help="switch log level (-L); trace logs every table hit and is much slower (default info)",
    )
    net.add_argument(
        "--backend",
        choices=("auto", "native", "python"),
        default="auto",
        help="engine of the software switch (target emulator): 'native' = the program compiled to C, "
        "'python' = the reference engine, 'auto' = native unless it cannot run the program (default auto)",
    )
    net.add_argument(
        "--switch-pps",
        type=positive_number(),
        default=None,
        metavar="N",
        help="slow the software switch (target emulator) to N received frames a second (thc-switch --pps): "
        "BMv2's pace on any machine, e.g. 2000 (default: as fast as it can)",
    )
    net.add_argument("--no-pcap", action="store_true", help="do not write pcaps (default: pcaps/ per interface)")
    net.add_argument(
        "--start-timeout",
        type=positive_number(),
        default=60.0,
        metavar="S",
        help="seconds a switch may take to answer on gRPC (default 60)",
    )
    tr = p.add_argument_group("training")
    tr.add_argument(
        "--modes",
        default=",".join(MODES),
        metavar="LIST",
        help="comma-separated modes to run in turn: thc (THC through the switch), terngrad-switch "
        "(TernGrad with a shared scale through the switch), fix32 "
        "(uncompressed fixed point through the switch), gloo (DDP all-reduce over TCP), thc-backend, "
        "fix32-backend (DDP without a hook on the switch's torch.distributed backend), and over gloo "
        "through DDP communication hooks: fp16, powersgd (torch's hooks), topk, qsgd, terngrad (thc's "
        "baselines); plan (each DDP bucket through thc, fix32 or gloo as the timeline model's planner chooses "
        "for this model, workers and link rate, from probes of each mode taken just before; logs/plan.json); "
        "thc-ps, fix32-ps (THC or FIX32 summed by parameter servers on hosts: the topology's "
        "first placement of servers, or thc-ps:NAME for placement NAME, e.g. with topologies/star4_ps.json "
        f"thc-ps:dedicated1, thc-ps:colocated4) (default {','.join(MODES)})",
    )
    tr.add_argument(
        "--model",
        default="mlp-digits",
        metavar="NAME",
        help="the workload: " + ", ".join(workloads.names()) + " (default mlp-digits; host_agent/workloads.py)",
    )
    tr.add_argument(
        "--steps", type=_int_range(1), default=200, metavar="N", help="training steps per mode (default 200)"
    )
    tr.add_argument(
        "--batch-size",
        type=_int_range(1),
        default=None,
        metavar="N",
        help="samples per worker per step (default: the model's, 32 or 16)",
    )
    tr.add_argument(
        "--lr", type=positive_number(), default=None, help="learning rate (default: the model's, 0.1 for mlp-digits)"
    )
    tr.add_argument(
        "--seed", type=_int_range(0, 2**32 - 1), default=0, help="model initialisation and batch order (default 0)"
    )
    tr.add_argument(
        "--target-acc",
        type=_fraction,
        default=None,
        metavar="A",
        help="accuracy for the time-to-accuracy column (default: the model's target, 0.9 for mlp-digits; "
        "charlm-stdlib is timed to its bits-per-character target instead)",
    )
    tr.add_argument(
        "--job-id",
        type=_int_range(0, contract.JOB_ID_MAX, " (the THC header's 8-bit job id)"),
        default=1,
        help="THC job id on the switch (default 1)",
    )
    tr.add_argument(
        "--switch-timeout",
        type=positive_number(),
        default=30.0,
        metavar="S",
        help="a worker gives up when the switch has not answered for S seconds (default 30)",
    )
    tr.add_argument(
        "--straggler",
        type=_straggler,
        action="append",
        default=[],
        metavar="HOST:MS",
        help="make HOST a straggler: it sleeps MS milliseconds in every training step (repeatable)",
    )
    tr.add_argument(
        "--straggler-timeout",
        type=positive_number(),
        default=None,
        metavar="MS",
        help="partial aggregation: a worker whose request waited MS milliseconds releases the slot and "
        "the switch returns the sums so far with their count (default off: wait for every worker)",
    )
    tr.add_argument(
        "--stall-timeout",
        type=positive_number(),
        default=120.0,
        metavar="S",
        help="stop a mode when no worker progresses for S seconds (default 120)",
    )
    tr.add_argument(
        "--kill",
        action="append",
        default=[],
        type=_host_step,
        metavar="HOST:STEP",
        help="inject a worker failure: SIGKILL to worker HOST once it reports step STEP (thc and fix32 go on "
        "with the survivors as a new job; other modes stop with an error); may be repeated",
    )
    tr.add_argument(
        "--restart-switch",
        action="append",
        default=[],
        type=_switch_step,
        metavar="SWITCH:STEP",
        help="inject a switch crash: SIGKILL to SWITCH's process once a worker reports step STEP, then start it "
        "again (same ports), push the program, routes and the job again (fresh key, new epoch); thc, fix32 and "
        "terngrad-switch redo the unfinished round there, gloo and the ps modes lose packets meanwhile, the "
        "backend modes may time out; the summary gives the pause in seconds. Its pcaps start over. May be "
        "repeated; applies to every mode",
    )
    add_job_options(p)
    out = p.add_argument_group("files and control")
    out.add_argument("--log-dir", default="logs", metavar="DIR", help="logs and results (default logs/)")
    out.add_argument("--pcap-dir", default="pcaps", metavar="DIR", help="pcap files (default pcaps/)")
    out.add_argument(
        "--stop",
        action="store_true",
        help="stop a run (or remove what a crashed one left): exactly the processes and "
        "interfaces listed in <log-dir>/run-state.json, nothing else",
    )
    return p


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


def parse_modes(text: str) -> list[str]:
    from topologies.workers import split_mode

    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if split_mode(m)[0] not in ALL_MODES or (":" in m and split_mode(m)[0] not in PS_MODES)]
    if unknown or not modes or len(set(modes)) != len(modes):
        raise RunError(
            f"--modes {text!r}: choose from {', '.join(ALL_MODES)}, each once (a ps mode may name the topology's "
            "placement of servers: thc-ps:colocated4)"
        )
    return modes


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


class Progress:
    """One tqdm bar per mode: the slowest worker's step, rank 0's loss and latest test accuracy.

    Its time estimate is the mode's own average pace since its first step (tqdm's smoothing off): steps
    arrive in bursts between evaluations, and a smoothed rate would swing with each pause."""

    def __init__(self, mode: str, steps: int, n_workers: int, clock=None):
        from tqdm import tqdm

        interactive = sys.stderr.isatty()
        self.bar = tqdm(
            total=steps,
            desc=f"{mode:5s} starting",
            unit="step",
            dynamic_ncols=True,
            mininterval=0.2 if interactive else 10.0,
            smoothing=0,
            bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}",
        )
        if clock is not None:  # tests: a clock of their own
            self.bar._time = clock
        self.mode = mode
        self.n_workers = n_workers
        self.steps: dict[int, int] = {}
        self.lost: set[int] = set()  # ranks that died (the others go on without them)
        self.ready = 0
        self.loss = None
        self.acc = None

    def __call__(self, worker, event: dict) -> None:
        kind = event.get("event")
        if kind == "start":
            self.ready += 1
            self.bar.set_description_str(f"{self.mode:5s} {self.ready}/{self.n_workers} ready", refresh=False)
        elif kind == "step":
            if not self.steps:
                self.bar.reset()  # the rate and ETA count from the first step, not from the workers' start
            self.steps[worker.rank] = event["step"]
            if worker.rank == 0:
                self.loss = event["loss"]
            slowest = min(self.steps.get(r, 0) for r in range(self.n_workers) if r not in self.lost)
            if slowest > self.bar.n:
                self.bar.set_description_str(f"{self.mode:5s} training", refresh=False)
                self._postfix()
                self.bar.update(slowest - self.bar.n)  # redraws at most every mininterval
        elif kind == "lost":
            self.lost.add(worker.rank)
            self.bar.write(f"  {self.mode}: worker {worker.host} (rank {worker.rank}) died after step {event['step']}")
        elif kind == "rejoined":
            if worker.rank == min(r for r in range(self.n_workers) if r not in self.lost):
                why = " after the switch restart" if event.get("restarted") else ""
                self.bar.write(
                    f"  {self.mode}: {event['n_workers']} workers go on as job {event['job_id']} "
                    f"(epoch {event['epoch']}){why} from step {event['step'] + 1}"
                )
        elif kind == "epoch":
            self.acc = event["test_acc"]
            self._postfix()
            bpc = event.get("metric", event["test_acc"]) != event["test_acc"]  # the LM: bits per character
            self.bar.write(
                f"  {self.mode} epoch {event['epoch'] + 1:2d}: test accuracy {event['test_acc']:.3f}, "
                f"test loss {event['test_loss']:.3f}"
                + (f", {event['metric']:.3f} bits/char" if bpc else "")
                + f"  ({event['t']:.1f} s)"
            )

    def _postfix(self):
        parts = []
        if self.loss is not None:
            parts.append(f"loss {self.loss:.3f}")
        if self.acc is not None:
            parts.append(f"acc {self.acc:.3f}")
        self.bar.set_postfix_str(", ".join(parts), refresh=False)

    def close(self):
        self.bar.close()


def _straggler(text: str) -> tuple[str, float]:
    """--straggler HOST:MS -> (host, ms)."""
    host, sep, ms = text.rpartition(":")
    try:
        delay = float(ms)
    except ValueError:
        delay = -1.0
    if not sep or not host or not delay >= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not HOST:MS (a host name and milliseconds >= 0)")
    return host, delay


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


def run(args) -> int:
    from topologies import one_run, report
    from topologies.testbed import Testbed
    from topologies.workers import WorkerOptions

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
    check_placements(modes, topo)
    job = job_spec(args, topo)
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
    log_dir = Path(args.log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    ledger = prepare_ledger(log_dir)
    supervisor.start(ledger, log_dir / SUPERVISOR_LOG)  # first: it removes the run if this process dies
    (log_dir / "topology.json").write_text(json.dumps(topo.to_dict(), indent=1))
    _quiet_mininet()
    bed = Testbed(
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
        "bw_auto": None if auto is None else asdict(auto),
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
            options = WorkerOptions(
                mode=mode,
                steps=args.steps,
                batch_size=args.batch_size,
                lr=args.lr,
                seed=args.seed,
                model=args.model,
                job=job,
                switch_timeout=args.switch_timeout,
                master_port=29500 + index,
                straggler_timeout_ms=args.straggler_timeout,
                stragglers=dict(args.straggler),
            )
            if mode == "plan":
                path = log_dir / "plan.json"
                plan_costs.plan_for_run(bed, args.model, args.batch_size, job.job_id, path, step_s, say)
                options.plan = str(path)
            if mode in SWITCH_MODES:
                where = ", ".join([topo.aggregation.switch] + [leaf.switch for leaf in topo.aggregation.leaves])
                say(f"{mode}: {options.job_for(topo).describe()} on {where} (fresh epoch and key)")
            elif options.worker_mode in PS_MODES:
                servers = topo.placement(options.placement)
                where = ", ".join(f"{s.host}" for s in servers)
                say(f"{mode}: {options.job_for(topo).describe()} on {len(servers)} servers ({where}), each a share")
            progress = Progress(mode, args.steps, len(topo.workers))
            try:
                results = bed.run_workers(
                    options,
                    progress,
                    stall_timeout=args.stall_timeout,
                    start_timeout=args.stall_timeout + 60,
                    kill=args.kill,
                    restart=args.restart_switch,
                )
            finally:
                progress.close()
            events = bed.last_switch_events.get(topo.aggregation.switch, {})
            target_acc = args.target_acc if args.target_acc is not None else workloads.get(args.model).target
            summaries.append(
                report.summarize(
                    mode, results, target_acc, events, bed.last_failures, bed.last_switch_events, bed.last_busiest
                )
            )
            curves[mode] = min(results, key=lambda r: r["rank"])
            step_s[mode] = plan_costs.median_step_s(results)  # --modes plan's calibration
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
    except TopologyError as exc:  # one problem: one line; several: the list, each naming file and line
        error(exc.problems[0] if len(exc.problems) == 1 else str(exc))
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
