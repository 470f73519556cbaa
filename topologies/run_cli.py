"""thc-run's command line: its options by group, the types that check them, and the modes it offers."""

from __future__ import annotations

import argparse

import contract
from contract.job import add_job_options
from controller.topology import MAX_WORKERS
from host_agent import workloads
from thc.modes import MODES as WORKER_MODES
from thc.modes import PS_MODES, RUN_DEFAULT
from topologies import link_rate
from topologies.targets import add_target_option
from topologies.workers import add_codec_option
from usage.args import OneLineParser, folder, fraction, input_file, int_in, names_in, number_in, positive_number

DEFAULT_TOPO = "topologies/star4.json"
PS_TOPO = "topologies/star4_ps.json"  # the default when a mode is a ps mode: star4 with server placements

MODES = RUN_DEFAULT  # the default --modes
# thc-worker's; plan: the timeline model's per-bucket plan for this run (topologies/plan_probes.py); a ps mode
# may name its placement: thc-ps:colocated4
ALL_MODES = WORKER_MODES


def _host_step(text: str, example: str = "h3:50", what: str = "HOST") -> tuple[str, int]:
    host, sep, step = text.rpartition(":")
    if not sep or not host or not step.isdigit() or int(step) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {what}:STEP, like {example}")
    return host, int(step)


def _switch_step(text: str) -> tuple[str, int]:
    return _host_step(text, "s1:50", "SWITCH")


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
        "  thc-run --trace jobs.json --policy pool   jobs that come and go, sharing the switch\n"
        "  thc-run --stop                            remove what a crashed or killed run left\n"
        "Files: logs/<switch>.log (switch console), logs/<mode>/<host>.log and .json (workers),\n"
        "logs/summary.json, logs/training.png, pcaps/<iface>_{in,out}.pcap, logs/run-state.json.\n"
        "Needs root (network namespaces). Never runs `mn -c`: cleanup removes only what the run made.",
    )
    _network_options(p.add_argument_group("network"))
    training = p.add_argument_group("training")
    _training_options(training)
    _fault_options(training)
    _trace_options(p.add_argument_group("a trace of jobs that come and go"))
    add_job_options(p)
    _file_options(p.add_argument_group("files and control"))
    return p


def _trace_options(g) -> None:
    """--trace and how the jobs share the switch's memory (topologies/trace_run.py)."""
    from topologies.trace_run import POLICIES

    g.add_argument(
        "--trace",
        type=input_file,
        metavar="FILE",
        help="run a trace of jobs instead of --modes (topologies/job_trace.py: each job's start, model, workers, "
        "mode, steps, compute): each job programmed when it starts and removed when its workers are done, "
        f"on {PS_TOPO} by default; logs/summary.json per job, logs/occupancy.png (--modes, --model, --steps "
        "and --job-id are the trace's, so they are refused with it)",
    )
    g.add_argument(
        "--policy",
        choices=POLICIES,
        default="pool",
        help="with --trace: 'static' = each job owns a slot range (waits while none is free), 'pool' = its "
        "rounds claim cells from the shared pool, a round whose cell is taken going to a fallback server that "
        "thc-run starts on the topology's placement of one server (default pool)",
    )
    g.add_argument(
        "--pool-cells",
        type=int_in(0, contract.CELLS),
        metavar="C",
        help="with --policy pool: the pool's size in cells, a power of two, or 0: no cells, every round falls "
        "back (default: every cell of the switch)",
    )


def _network_options(net) -> None:
    """The topology and target, the links (rate, loss) and the switch (executable, engine, pace, logs)."""
    net.add_argument(
        "--topo",
        type=input_file,
        default=None,
        metavar="FILE",
        help=f"topology JSON (default {DEFAULT_TOPO}, or {PS_TOPO} when a mode is a ps mode; format: "
        "controller/topology_file.py)",
    )
    add_target_option(net)
    net.add_argument(
        "--workers",
        type=int_in(1, MAX_WORKERS, " (the switch's worker bitmap)"),
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
        "--loss",
        type=number_in(0, 100, "a percentage", below_hi=True),
        metavar="PCT",
        help="random loss of every link, percent per direction (e.g. 1)",
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


def _training_options(tr) -> None:
    """What each mode trains and how long a worker waits for the switch."""
    tr.add_argument(
        "--modes",
        default=",".join(MODES),
        type=names_in(ALL_MODES, placed=PS_MODES),
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
    tr.add_argument("--steps", type=int_in(1), default=200, metavar="N", help="training steps per mode (default 200)")
    tr.add_argument(
        "--batch-size",
        type=int_in(1),
        default=None,
        metavar="N",
        help="samples per worker per step (default: the model's, 32 or 16)",
    )
    tr.add_argument(
        "--lr", type=positive_number(), default=None, help="learning rate (default: the model's, 0.1 for mlp-digits)"
    )
    tr.add_argument(
        "--bucket-cap-kb",
        type=positive_number(),
        default=None,
        metavar="KB",
        help="DDP's gradient bucket limit in KiB, for every mode (default: DDP's, 25 MiB: one bucket for the "
        "small models); smaller buckets let the first ones' aggregation overlap the rest of the backward pass "
        "and THC's norm round overlap the previous bucket's sums",
    )
    add_codec_option(tr)
    tr.add_argument(
        "--seed", type=int_in(0, 2**32 - 1), default=0, help="model initialisation and batch order (default 0)"
    )
    tr.add_argument(
        "--target-acc",
        type=fraction("an accuracy", "0.9"),
        default=None,
        metavar="A",
        help="accuracy for the time-to-accuracy column (default: the model's target, 0.9 for mlp-digits; "
        "charlm-stdlib is timed to its bits-per-character target instead)",
    )
    tr.add_argument(
        "--job-id",
        type=int_in(0, contract.JOB_ID_MAX, " (the THC header's 8-bit job id)"),
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


def _fault_options(tr) -> None:
    """Injected faults: stragglers and partial aggregation, stalls, killed workers, restarted switches."""
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
        "--query",
        action="store_true",
        help='workers ask the switch with a header-only QUERY before they retransmit (p4/README.md, "Queries"): '
        "only a worker whose request or result is missing sends it again; fewer bytes under loss, one more "
        "round trip per lost request (default off: every worker resends the request itself)",
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
        help="inject a worker failure: worker HOST ends itself with SIGKILL right after step STEP (thc-worker "
        "--die-after-step; thc and fix32 go on with the survivors as a new job; other modes stop with an "
        "error); may be repeated",
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


def _file_options(out) -> None:
    """Where logs and pcaps go, and --stop."""
    out.add_argument("--log-dir", default="logs", type=folder, metavar="DIR", help="logs and results (default logs/)")
    out.add_argument("--pcap-dir", default="pcaps", type=folder, metavar="DIR", help="pcap files (default pcaps/)")
    out.add_argument(
        "--stop",
        action="store_true",
        help="stop a run (or remove what a crashed one left): exactly the processes and "
        "interfaces listed in <log-dir>/run-state.json, nothing else",
    )


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
