"""thc-worker's command line: its options, the job they join (``--job TICKET``, trusted as the controller
granted it, or the job options, checked against the mode), the worker's identity (rank, rendezvous, addresses) and
the aggregator they describe. The training loop and the probe rounds read what this module resolved."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import contract
from host_agent import identity, workloads
from thc.modes import MODES, PS_MODES, TERNGRAD_SWITCH, THC, uses_job
from usage.args import OneLineParser, created_file, input_path, int_in, non_negative_number, positive_number

DESCRIPTION = "`thc-worker`: one data-parallel training worker, run on one Mininet host by `thc-run`."


def switch_aggregator(args, on_rejoin=lambda record: None):
    """The worker's SwitchAggregator on its interface, with the protocol options of the command line;
    with ``--membership FILE`` it follows the runner's notices of a new membership after a failure. In a
    ps mode a ShardedAggregator over the servers of ``--servers FILE`` (no failover there)."""
    if args.mode in PS_MODES:
        from host_agent.sharded import ShardedAggregator

        return ShardedAggregator.open(
            args.iface, args.spec, args.rank, args.server_list, args.src_ip, args.src_mac, **protocol_options(args)
        )
    from host_agent.aggregator import SwitchAggregator
    from host_agent.membership import MembershipFile

    return SwitchAggregator.open(
        args.iface,
        args.spec,
        args.rank,
        args.service_ip,
        args.service_mac,
        args.src_ip,
        args.src_mac,
        membership=MembershipFile(args.membership).poll if args.membership else None,
        on_rejoin=on_rejoin,
        fallback_server=getattr(args, "fallback_server", None),
        **protocol_options(args),
    )


def load_files(args) -> None:
    """Read ``--plan`` and ``--servers`` at start (``args.plan_buckets``, ``args.server_list``), before the
    rendezvous, so that a bad file is one line and no worker waits for this one. ValueError says which."""
    args.plan_buckets = args.server_list = None
    if args.plan is not None:
        from ddp import mixed

        try:
            args.plan_buckets = mixed.load_plan(json.loads(args.plan.read_text(encoding="utf-8")))
        except OSError as exc:
            raise ValueError(f"cannot read --plan {args.plan}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"--plan {args.plan} is not UTF-8 text (thc-plan plan --save writes JSON)") from None
        except ValueError as exc:  # not JSON, or not a plan
            raise ValueError(f"--plan {args.plan}: {exc}") from None
    if args.servers is not None and args.mode in PS_MODES:
        from host_agent.sharded import load_servers

        args.server_list = load_servers(args.servers)


def protocol_options(args) -> dict:
    """SwitchAggregator.open's protocol options from the command line."""
    return dict(
        timeout=args.retransmit_timeout,
        max_timeout=args.max_retransmit_timeout,
        deadline=args.switch_timeout,
        min_timeout=args.min_retransmit_timeout,
        dupthresh=args.dupthresh,
        coalesce=args.coalesce,
        straggler_timeout=None if args.straggler_timeout is None else args.straggler_timeout / 1000,
        query_first=args.query,
    )


def build_parser() -> argparse.ArgumentParser:
    """thc-worker's options, group by group in the order --help lists them."""
    from contract.job import add_job_options

    p = OneLineParser(prog="thc-worker", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_job_group(p.add_argument_group("job"))
    s = p.add_argument_group("switch (thc and fix32)")
    _add_switch_addresses(s)
    _add_retransmission(s)
    _add_failure_handling(s)
    add_job_options(p)
    _add_training(p.add_argument_group("training"))
    _add_probe(p.add_argument_group("probe (instead of training)"))
    return p


def _add_job_group(g) -> None:
    """The job this worker joins: its mode, rank, rendezvous, interface and description."""
    g.add_argument("--mode", choices=MODES, default=THC, help=f"how gradients are aggregated (default {THC})")
    g.add_argument(
        "--rank",
        type=int_in(0),
        help="this worker's rank = its worker id in the THC job (default: $RANK, which torchrun sets)",
    )
    g.add_argument("--world-size", type=int_in(1), help="number of workers (default: $WORLD_SIZE, which torchrun sets)")
    g.add_argument(
        "--master-addr",
        help="IPv4 address of rank 0 for a TCP rendezvous (default: torch's env:// rendezvous from "
        "$MASTER_ADDR and $MASTER_PORT, which torchrun sets)",
    )
    g.add_argument(
        "--master-port",
        type=int_in(1, 65535),
        default=29500,
        help="TCP rendezvous port with --master-addr (default 29500)",
    )
    g.add_argument(
        "--iface",
        help="this host's interface: gloo and the switch transport use it, and --src-ip/--src-mac default to "
        "its addresses (required for the switch modes; without it gloo picks an interface itself)",
    )
    g.add_argument(
        "--rendezvous-timeout",
        type=positive_number("seconds"),
        default=120.0,
        help="seconds to wait for all workers to join (default 120)",
    )
    g.add_argument(
        "--job",
        type=input_path,
        metavar="FILE",
        help="the job's ticket (JSON, as thc-ctl job add --save FILE writes it: contract/ticket.py): its "
        "description (id, workers, compression, framing), the same on the switch and every worker, and the "
        "switch's grant (key, epoch, slots); the job options, --job-id and --key then stay unset (default: the "
        "job options below describe the job)",
    )


def _wire_address(parse: str, what: str):
    """argparse type: an address host_agent.wire's `parse` (ip_bytes, mac_bytes) takes, given back as
    written: one the frames could not carry fails here, not mid-run."""

    def check(text: str) -> str:
        from host_agent import wire

        try:
            getattr(wire, parse)(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        return text

    return check


ipv4_address = _wire_address("ip_bytes", "an IPv4 address, like 10.0.0.1")
mac_address = _wire_address("mac_bytes", "a MAC address, like 02:00:00:00:00:01")


def fallback_endpoint(text: str):
    """argparse type: a fallback server's address, IP,MAC (host_agent/pool_fallback.py)."""
    from host_agent import wire

    ip, _, mac = (part.strip() for part in text.partition(","))
    try:
        return wire.Endpoint(mac_address(mac), ipv4_address(ip))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected IP,MAC (e.g. 10.0.0.253,02:00:00:00:00:fd)") from None


def _add_switch_addresses(s) -> None:
    """Where the switch (or the parameter servers) and this host are; the job's id and key."""
    from contract.job import job_key

    s.add_argument("--service-ip", type=ipv4_address, help="the aggregating switch's THC service address")
    s.add_argument(
        "--servers",
        type=input_path,
        metavar="FILE",
        help="thc-ps and fix32-ps: the parameter servers, in shard order, with their service addresses and the "
        "keys of the job on each (JSON, as thc-run writes it: host_agent/sharded.py); instead of --service-ip",
    )
    s.add_argument(
        "--service-mac",
        type=mac_address,
        help="MAC the service address resolves to: the switch's, or the next hop's (default: the kernel's "
        "neighbour entry for --service-ip on --iface; the switch answers no ARP, so a permanent one: ip neigh "
        "replace IP lladdr MAC dev IFACE nud permanent)",
    )
    s.add_argument(
        "--fallback-server",
        type=fallback_endpoint,
        metavar="IP,MAC",
        help="a pool job's fallback server (a parameter server holding the same job, thc-ctl job add --pool): "
        "a round the switch answers FALLBACK for is sent there (default: none; such a round then times out)",
    )
    s.add_argument("--src-ip", type=ipv4_address, help="this host's IPv4 address (default: --iface's)")
    s.add_argument("--src-mac", type=mac_address, help="this host's MAC address (default: --iface's)")
    s.add_argument(
        "--job-id",
        type=int_in(0, contract.JOB_ID_MAX),
        default=None,
        help="THC job id installed on the switch, without --job (default 1)",
    )
    s.add_argument(
        "--key",
        type=job_key,
        default=None,
        help="the job's key without --job (thc-ctl job add draws one; the switch drops packets with another)",
    )


def _add_retransmission(s) -> None:
    """When a request is sent again, and when the worker gives up on the switch."""
    s.add_argument(
        "--retransmit-timeout",
        type=positive_number("seconds"),
        default=0.05,
        help="first retransmission timeout in seconds (default 0.05; then it follows the measured "
        "round trip, RFC 6298)",
    )
    s.add_argument(
        "--min-retransmit-timeout",
        type=positive_number("seconds"),
        default=0.002,
        help="floor of the adaptive retransmission timeout in seconds (default 0.002: the emulated "
        "star's round trip is about a millisecond)",
    )
    s.add_argument(
        "--dupthresh",
        type=int_in(0),
        default=3,
        help="results of later requests after which a missing request is sent again without "
        "waiting for its timer (default 3; 0: timers only)",
    )
    s.add_argument(
        "--coalesce",
        type=non_negative_number(),
        default=0.5,
        help="once all of an operation's requests are sent, let results accumulate for this share of the "
        "time the outstanding ones should take (fewer wake-ups on slow links; default 0.5, 0: off)",
    )
    s.add_argument(
        "--max-retransmit-timeout",
        type=positive_number("seconds"),
        default=0.25,
        help="longest backed-off retransmission timeout in seconds (default 0.25: on a LAN a lost packet "
        "should cost a fraction of a second, not the 1 s of backoff a WAN needs); it bounds the backoff, "
        "never the measured round trip (srtt + 4 rttvar), which behind a slow switch such as BMv2 is longer",
    )
    s.add_argument(
        "--query",
        action="store_true",
        help="ask the switch with a header-only QUERY before retransmitting: its STATUS says whether this "
        'worker\'s request (or its result) is missing (p4/README.md, "Queries"), so only that worker resends '
        "it; fewer bytes under loss, one more round trip per lost request (default off: resend at once)",
    )
    s.add_argument(
        "--switch-timeout",
        type=positive_number("seconds"),
        default=30.0,
        help="give up when a result is missing for this many seconds (default 30)",
    )


def _add_failure_handling(s) -> None:
    """A failed worker (the runner's notices) and stragglers (partial aggregation)."""
    s.add_argument(
        "--membership",
        type=Path,
        metavar="FILE",
        help="the runner's membership notices (JSON, host_agent/membership.py): when a worker fails the "
        "survivors continue as the job this file names (default: no failure handling)",
    )
    s.add_argument(
        "--straggler-timeout",
        type=positive_number("milliseconds"),
        default=None,
        metavar="MS",
        help="partial aggregation: a request unanswered after MS milliseconds releases its slot, and the "
        "switch returns the sums of the workers that made it, with their count (default off: wait for all; "
        "every worker of the job must use the same setting)",
    )


def _add_training(r) -> None:
    """The workload and its optimisation."""
    r.add_argument("--steps", type=int_in(0), default=200, help="optimizer steps (default 200; 0 with --probe)")
    r.add_argument(
        "--batch-size",
        type=int_in(1),
        default=None,
        help="samples per worker per step (default: the model's, 32 or 16)",
    )
    r.add_argument(
        "--lr", type=positive_number(), default=None, help="learning rate (default: the model's, e.g. 0.1 for SGD)"
    )
    r.add_argument(
        "--seed", type=int_in(0, 2**32 - 1), default=0, help="model initialisation and batch order (default 0)"
    )
    r.add_argument(
        "--result",
        type=created_file,
        help="write the final record (JSON) here; '{rank}' in the path becomes the rank (for torchrun, "
        "whose workers share one command line)",
    )
    r.add_argument(
        "--step-delay",
        type=non_negative_number("milliseconds"),
        default=0.0,
        metavar="MS",
        help="sleep MS milliseconds in every step before the backward pass: an injected straggler (thc-run "
        "--straggler HOST:MS sets it on one worker; default 0)",
    )
    r.add_argument(
        "--die-after-step",
        type=int_in(1),
        default=None,
        metavar="N",
        help="an injected failure: once step N is reported, say so and end this process with SIGKILL, as a "
        "crashed host would (thc-run --kill HOST:N sets it, so the failure lands after exactly step N)",
    )
    r.add_argument(
        "--model",
        default="mlp-digits",
        metavar="NAME",
        help="the workload (host_agent/workloads.py): " + ", ".join(workloads.names()) + " (default mlp-digits)",
    )
    r.add_argument(
        "--bucket-cap-kb",
        type=positive_number("KiB"),
        default=None,
        help="DDP bucket size limit in KiB, also for the first bucket (default: DDP's 1 MiB, then 25 MiB)",
    )
    r.add_argument(
        "--plan",
        type=input_path,
        metavar="FILE.json",
        help="--mode plan: bucket index -> mode (thc, fix32, gloo, fp16), as thc-plan plan --save writes it",
    )


def _add_probe(q) -> None:
    """Probe rounds instead of training (bench and the exactness tests)."""
    q.add_argument(
        "--probe",
        type=created_file,
        metavar="FILE.npz",
        help="aggregate seeded random gradients through the switch, save inputs and results, exit",
    )
    q.add_argument(
        "--probe-size", type=int_in(1, 2**30), default=5000, help="coordinates per probe gradient (default 5000)"
    )
    q.add_argument("--probe-rounds", type=int_in(1), default=1, help="probe rounds (default 1)")
    q.add_argument("--probe-seed", type=int_in(0, 2**32 - 1), default=7, help="seed of the probe gradients (default 7)")


def given_options(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The job options (their dests) given on the command line, whatever their value: argparse sets a
    default only where the namespace has no value yet."""
    from contract.job import OPTION_DESTS

    unset = object()
    seen = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(OPTION_DESTS.values(), unset)))
    return {dest for dest in OPTION_DESTS.values() if getattr(seen, dest) is not unset}


def mode_job(mode: str, spec):
    """The job a switch mode runs from the description `spec`: terngrad-switch puts TernGrad's codec on its
    framing (thc.config.TERNGRAD), every other mode runs it as described."""
    if mode != TERNGRAD_SWITCH:
        return spec
    from thc.config import TERNGRAD

    return spec.replace(quantizer="terngrad", **TERNGRAD)


def job_ticket(args, given: set[str] = frozenset()):
    """The job this worker joins, as a contract.ticket.Ticket. ``--job FILE``: the ticket the controller
    granted (thc-ctl job add --save, the testbed), trusted as it is: a flag that would describe the job
    again (--job-id, --key, a job option `given` on the command line, see given_options) is refused in one
    line, and so are a world size other than its workers and a --mode that does not run its codec. Without
    a file: the job options as the mode runs them (no grant), refused when the mode overrides one given."""
    from contract.job import OPTION_DESTS, TERNGRAD_OPTIONS, JobSpecError, option_flag, spec_from_options
    from contract.ticket import Ticket

    stated = {field for field, dest in OPTION_DESTS.items() if dest in given}
    if args.job is None:
        job_id = 1 if args.job_id is None else args.job_id
        options = spec_from_options(args, job_id, args.world_size, key=args.key or 0)
        spec = mode_job(args.mode, options)
        _refuse_overridden(args, stated, options, spec)
        return Ticket(spec)
    held = [("--job-id", "id", "job_id")] if args.job_id is not None else []
    held += [("--key", "key", "key")] if args.key is not None else []
    held += [(option_flag(field), field, field) for field in sorted(stated)]
    if held:
        flag, what, field = held[0]
        raise JobSpecError(f"drop {flag}: the ticket {args.job} holds the job's {what}", field)
    ticket = Ticket.load(args.job)
    spec = ticket.spec
    if args.world_size != spec.workers:
        raise JobSpecError(
            f"{args.job} is a ticket for job {spec.job_id}'s {spec.workers} workers, but this worker's world "
            f"has {args.world_size}: start it with its job's ticket",
            "workers",
        )
    runs = mode_job(args.mode, spec)
    if runs != spec:
        raise JobSpecError(
            f"--mode {args.mode} runs {runs.codec.quantizer}, but the ticket {args.job} "
            f"quantizes with {spec.codec.quantizer}: add the job with {TERNGRAD_OPTIONS} (or run --mode thc)",
            "quantizer",
        )
    return ticket


def _refuse_overridden(args, stated: set[str], options, spec) -> None:
    """Without --job: JobSpecError, in one line, for the first job option `stated` on the command line whose
    value in `options` is not the one the mode runs (`spec`: terngrad-switch's own bits, table, ...)."""
    from contract.job import JobSpecError, option_as_given

    given, runs = options.to_dict(), spec.to_dict()  # flat, as a file has them
    for field in sorted(stated):
        if given[field] != runs[field]:
            flag = option_as_given(args, field)
            raise JobSpecError(f"--mode {args.mode} runs {field} = {runs[field]}, not {flag}: drop the option", field)


def resolve_identity(args) -> None:
    """Fill in rank, world size and rendezvous (``args.init_method``) from the options or torchrun's
    environment, and, for the switch modes, the addresses the options left out from ``--iface``."""
    who = identity.resolve(args.rank, args.world_size, args.master_addr, args.master_port)
    args.rank, args.world_size, args.init_method = who.rank, who.world_size, who.init_method
    if args.result is not None:
        args.result = Path(str(args.result).replace("{rank}", str(args.rank)))
    if not uses_job(args.mode):
        return
    if args.iface is None:
        raise identity.IdentityError(f"--mode {args.mode} needs --iface: the interface on the way to the switch")
    mac = identity.interface_mac(args.iface)  # the interface is there: refused now, not after the rendezvous
    if args.src_mac is None:
        args.src_mac = mac
    if args.src_ip is None:
        args.src_ip = identity.interface_ipv4(args.iface)
    if args.service_mac is None and args.service_ip is not None:
        args.service_mac = identity.neighbour_mac(args.service_ip, args.iface)
