"""`thc-worker`: one data-parallel training worker, run on one Mininet host by `thc-run`.

torch.distributed (gloo, over the host's own interface, TCP rendezvous on the first worker) does the
rendezvous and DDP's initial parameter broadcast. Gradients are then aggregated per mode:

  thc    THC through the switch: thc.ddp.thc_hook with a SwitchAggregator (what a user registers on
         their own DDP model on a cluster with a P4 switch)
  terngrad-switch
         TernGrad with a shared scale through the same hook and switch: the job's framing with the
         terngrad quantizer (thc.config.TERNGRAD: a three-level table, no transform)
  fix32  uncompressed: fp32 gradients as SwitchML-style fixed point, summed by the same P4 program
  gloo   no switch program: DDP's own all-reduce over TCP (through the switch as plain IPv4)
  thc-backend, fix32-backend
         DDP without a communication hook on the switch's torch.distributed backend "thc"
         (host_agent.dist_backend): DDP's own all-reduce of each bucket, through the switch as THC or FIX32
  plan   each DDP bucket through the mode a plan file gives it (thc-plan plan --save; thc.mixed)
  thc-ps, fix32-ps
         THC or FIX32 summed by parameter servers instead of the switch: the same hook, its calls split
         over the servers that ``--servers FILE`` lists (host_agent.sharded), each the THC program on a host

and, over gloo through DDP communication hooks (thc.hooks), no switch program either:

  fp16      torch's fp16_compress_hook          powersgd  torch's powerSGD_hook (rank 2)
  topk      thc's TopK 1 % + error feedback     qsgd      thc's QSGD, 4 bits
  terngrad  thc's TernGrad (shared scale)

The switch modes aggregate in one job, described once for the switch and every worker (spec/job.py's
JobSpec): ``--job FILE``, as ``thc-ctl job add --save FILE`` writes it (its id, workers, compression,
framing and key), or, without a file, the job options (``--bits``, ``--granularity``, ..., ``--key``).
The THC codec is the description's (``JobSpec.thc_config()``).

With ``--probe FILE`` the worker does not train: it aggregates ``--probe-rounds`` rounds of seeded random
gradients (``probe_gradient``) through the switch and saves what it sent and got, so a test can recompute
every round with thc's reference aggregation and compare exactly.

Progress goes to stdout as lines ``@thc {json}`` (the runner turns them into progress bars); anything
else on stdout/stderr is ordinary log text. The final record is also written to ``--result``.
Exit status: 0 done, 3 the switch never answered (timeout), 1 any other failure.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from host_agent import identity, workloads

if TYPE_CHECKING:
    import numpy as np

TABLE_MODES = ("thc", "terngrad-switch")  # the job's table codec through the switch (thc.ddp.thc_hook)
BACKEND_MODES = {"thc-backend": "thc", "fix32-backend": "fix32"}  # -> the "thc" backend's THC_MODE
SWITCH_MODES = (*TABLE_MODES, "fix32", *BACKEND_MODES, "plan")  # the modes that need the switch's THC service
PS_MODES = {"thc-ps": "thc", "fix32-ps": "fix32"}  # through parameter servers (--servers) -> the codec's mode
# JobSpec field -> the dest of the job option (spec.job.add_job_options) that sets it without --job FILE
JOB_OPTIONS = {
    "bits": "bits",
    "granularity": "granularity",
    "clip": "clip",
    "table": "table",
    "chunk": "chunk",
    "seed": "thc_seed",
    "error_feedback": "error_feedback",
    "transform": "transform",
    "quantizer": "quantizer",
    "window": "window",
    "slots": "slots",
}
FLAGS = {"error_feedback": "--error-feedback", "transform": "--no-transform"}  # job fields set by a bare flag
FAILOVER_MODES = (*TABLE_MODES, "fix32")  # the modes that go on without a failed worker (--membership)
GLOO_MODES = ("gloo", "fp16", "powersgd", "topk", "qsgd", "terngrad")  # thc.hooks.GLOO_MODES
MODES = ("thc", "fix32", *GLOO_MODES, "terngrad-switch", *BACKEND_MODES, "plan", *PS_MODES)
PROGRESS_PREFIX = "@thc "
EXIT_SWITCH_TIMEOUT = 3


def codec_mode(mode: str) -> str:
    """The switch mode whose codec and hook a mode uses: a ps mode's, else the mode itself."""
    return PS_MODES.get(mode, mode)


def uses_job(mode: str) -> bool:
    """Does the mode aggregate in a THC job (on the switch or on parameter servers)?"""
    return mode in SWITCH_MODES or mode in PS_MODES


def switch_aggregator(args, on_rejoin=lambda record: None):
    """The worker's SwitchAggregator on its interface, with the protocol options of the command line;
    with ``--membership FILE`` it follows the runner's notices of a new membership after a failure. In a
    ps mode a ShardedAggregator over the servers of ``--servers FILE`` (no failover there)."""
    if args.mode in PS_MODES:
        from host_agent.sharded import ShardedAggregator, load_servers

        servers = load_servers(args.servers)
        return ShardedAggregator.open(
            args.iface, args.spec, args.rank, servers, args.src_ip, args.src_mac, **protocol_options(args)
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
        **protocol_options(args),
    )


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
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="thc-worker", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    g = p.add_argument_group("job")
    g.add_argument("--mode", choices=MODES, default="thc", help="how gradients are aggregated (default thc)")
    g.add_argument(
        "--rank",
        type=int,
        help="this worker's rank = its worker id in the THC job (default: $RANK, which torchrun sets)",
    )
    g.add_argument("--world-size", type=int, help="number of workers (default: $WORLD_SIZE, which torchrun sets)")
    g.add_argument(
        "--master-addr",
        help="IPv4 address of rank 0 for a TCP rendezvous (default: torch's env:// rendezvous from "
        "$MASTER_ADDR and $MASTER_PORT, which torchrun sets)",
    )
    g.add_argument(
        "--master-port", type=int, default=29500, help="TCP rendezvous port with --master-addr (default 29500)"
    )
    g.add_argument(
        "--iface",
        help="this host's interface: gloo and the switch transport use it, and --src-ip/--src-mac default to "
        "its addresses (required for the switch modes; without it gloo picks an interface itself)",
    )
    g.add_argument(
        "--rendezvous-timeout", type=float, default=120.0, help="seconds to wait for all workers to join (default 120)"
    )
    g.add_argument(
        "--job",
        type=Path,
        metavar="FILE",
        help="the job's description (JSON, as thc-ctl job add --save FILE writes it): id, workers, compression, "
        "framing and key, the same on the switch and every worker (default: the job options below)",
    )
    s = p.add_argument_group("switch (thc and fix32)")
    s.add_argument("--service-ip", help="the aggregating switch's THC service address")
    s.add_argument(
        "--servers",
        type=Path,
        metavar="FILE",
        help="thc-ps and fix32-ps: the parameter servers, in shard order, with their service addresses and the "
        "keys of the job on each (JSON, as thc-run writes it: host_agent/sharded.py); instead of --service-ip",
    )
    s.add_argument(
        "--service-mac",
        help="MAC the service address resolves to: the switch's, or the next hop's (default: the kernel's "
        "neighbour entry for --service-ip on --iface; the switch answers no ARP, so a permanent one: ip neigh "
        "replace IP lladdr MAC dev IFACE nud permanent)",
    )
    s.add_argument("--src-ip", help="this host's IPv4 address (default: --iface's)")
    s.add_argument("--src-mac", help="this host's MAC address (default: --iface's)")
    s.add_argument(
        "--job-id", type=int, default=None, help="THC job id installed on the switch (default: --job's, else 1)"
    )
    s.add_argument(
        "--key",
        type=job_key,
        default=None,
        help="the job's key without --job (thc-ctl job add draws one; the switch drops packets with another)",
    )
    s.add_argument(
        "--retransmit-timeout",
        type=float,
        default=0.05,
        help="first retransmission timeout in seconds (default 0.05; then it follows the measured "
        "round trip, RFC 6298)",
    )
    s.add_argument(
        "--min-retransmit-timeout",
        type=float,
        default=0.002,
        help="floor of the adaptive retransmission timeout in seconds (default 0.002: the emulated "
        "star's round trip is about a millisecond)",
    )
    s.add_argument(
        "--dupthresh",
        type=int,
        default=3,
        help="results of later requests after which a missing request is sent again without "
        "waiting for its timer (default 3; 0: timers only)",
    )
    s.add_argument(
        "--coalesce",
        type=float,
        default=0.5,
        help="once all of an operation's requests are sent, let results accumulate for this share of the "
        "time the outstanding ones should take (fewer wake-ups on slow links; default 0.5, 0: off)",
    )
    s.add_argument(
        "--max-retransmit-timeout",
        type=float,
        default=0.25,
        help="longest retransmission timeout in seconds (default 0.25: on a LAN a lost packet "
        "should cost a fraction of a second, not the 1 s of backoff a WAN needs)",
    )
    s.add_argument(
        "--switch-timeout",
        type=float,
        default=30.0,
        help="give up when a result is missing for this many seconds (default 30)",
    )
    s.add_argument(
        "--membership",
        type=Path,
        metavar="FILE",
        help="the runner's membership notices (JSON, host_agent/membership.py): when a worker fails the "
        "survivors continue as the job this file names (default: no failure handling)",
    )
    s.add_argument(
        "--straggler-timeout",
        type=float,
        default=None,
        metavar="MS",
        help="partial aggregation: a request unanswered after MS milliseconds releases its slot, and the "
        "switch returns the sums of the workers that made it, with their count (default off: wait for all; "
        "every worker of the job must use the same setting)",
    )
    from spec.job import add_job_options

    add_job_options(p)
    r = p.add_argument_group("training")
    r.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    r.add_argument(
        "--batch-size", type=int, default=None, help="samples per worker per step (default: the model's, 32 or 16)"
    )
    r.add_argument("--lr", type=float, default=None, help="learning rate (default: the model's, e.g. 0.1 for SGD)")
    r.add_argument("--seed", type=int, default=0, help="model initialisation and batch order (default 0)")
    r.add_argument(
        "--result",
        type=Path,
        help="write the final record (JSON) here; '{rank}' in the path becomes the rank (for torchrun, "
        "whose workers share one command line)",
    )
    r.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        metavar="MS",
        help="sleep MS milliseconds in every step before the backward pass: an injected straggler (thc-run "
        "--straggler HOST:MS sets it on one worker; default 0)",
    )
    r.add_argument(
        "--model",
        default="mlp-digits",
        metavar="NAME",
        help="the workload (host_agent/workloads.py): " + ", ".join(workloads.names()) + " (default mlp-digits)",
    )
    r.add_argument(
        "--bucket-cap-kb",
        type=float,
        default=None,
        help="DDP bucket size limit in KiB, also for the first bucket (default: DDP's 1 MiB, then 25 MiB)",
    )
    r.add_argument(
        "--plan",
        type=Path,
        metavar="FILE.json",
        help="--mode plan: bucket index -> mode (thc, fix32, gloo, gloo-fp16), as thc-plan plan --save writes it",
    )
    q = p.add_argument_group("probe (instead of training)")
    q.add_argument(
        "--probe",
        type=Path,
        metavar="FILE.npz",
        help="aggregate seeded random gradients through the switch, save inputs and results, exit",
    )
    q.add_argument("--probe-size", type=int, default=5000, help="coordinates per probe gradient (default 5000)")
    q.add_argument("--probe-rounds", type=int, default=1, help="probe rounds (default 1)")
    q.add_argument("--probe-seed", type=int, default=7, help="seed of the probe gradients (default 7)")
    return p


def job_key(text: str) -> int:
    """A job key as thc-ctl prints it: decimal or 0x-hex, 32 bits."""
    try:
        key = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (decimal or 0x...)") from None
    if not 0 <= key < 2**32:
        raise argparse.ArgumentTypeError(f"{text}: a job key is 32 bits")
    return key


def given_options(parser: argparse.ArgumentParser, argv) -> set[str]:
    """The job options (their dests) given on the command line, whatever their value: argparse sets a
    default only where the namespace has no value yet."""
    unset = object()
    seen = parser.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(JOB_OPTIONS.values(), unset)))
    return {dest for dest in JOB_OPTIONS.values() if getattr(seen, dest) is not unset}


def mode_job(mode: str, spec):
    """The job a switch mode runs from the description `spec`: terngrad-switch puts TernGrad's codec on its
    framing (thc.config.TERNGRAD), every other mode runs it as described."""
    if mode != "terngrad-switch":
        return spec
    from thc.config import TERNGRAD

    return spec.replace(quantizer="terngrad", **TERNGRAD)


def job_description(args, given: set[str] = frozenset()):
    """The job's JobSpec: ``--job FILE``, refused when it disagrees with this worker's job id, world size,
    key, mode (mode_job) or a job option `given` on the command line (given_options); else the job options
    as the mode runs them, refused when the mode overrides one of them."""
    from spec.job import JobSpec, JobSpecError, spec_from_options

    stated = {field for field, dest in JOB_OPTIONS.items() if dest in given}
    if args.job is None:
        job_id = 1 if args.job_id is None else args.job_id
        options = spec_from_options(args, job_id, args.world_size, key=args.key or 0)
        spec = mode_job(args.mode, options)
        _refuse_other_options(args, stated, spec, options, f"--mode {args.mode} runs", "drop the option")
        return spec
    spec = JobSpec.load(args.job)
    where = f"{args.job} describes job {spec.job_id}"
    if args.job_id is not None and args.job_id != spec.job_id:
        raise JobSpecError(f"{where}, not --job-id {args.job_id}: give the workers the job's own description")
    if spec.workers != args.world_size:
        raise JobSpecError(
            f"{where} with {spec.workers} workers, but the world size is {args.world_size}: start one worker "
            "per worker of the job, each with its rank"
        )
    if args.key is not None and args.key != spec.key:
        raise JobSpecError(f"{where} with key {spec.key:#x}, not --key {args.key:#x}: the file's key is the job's")
    wanted = mode_job(args.mode, spec).quantizer
    if wanted != spec.quantizer:
        raise JobSpecError(
            f"{where} with quantizer {spec.quantizer}, but --mode {args.mode} runs {wanted}: give the workers "
            "the mode's own description"
        )
    if stated:
        options = spec_from_options(args, spec.job_id, spec.workers)
        advice = "the description is the job's; drop the option"
        _refuse_other_options(args, stated, spec, options, f"{where} with", advice)
    return spec


def _refuse_other_options(args, stated: set[str], spec, options, says: str, advice: str) -> None:
    """JobSpecError for the first field `stated` on the command line whose value in `options` is not the
    one in `spec`, naming the option as it was given (a flag, or the option and its value)."""
    from spec.job import JobSpecError

    for field in sorted(stated):
        if getattr(options, field) != getattr(spec, field):
            dest = JOB_OPTIONS[field]
            given = FLAGS.get(field) or f"--{dest.replace('_', '-')} {getattr(args, dest)}"
            raise JobSpecError(f"{says} {field} = {getattr(spec, field)}, not {given}: {advice}")


def probe_gradient(seed: int, rank: int, round_: int, size: int):
    """The random gradient worker ``rank`` aggregates in probe round ``round_`` (heavy-tailed on purpose,
    so that clipping and the norm round matter)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 1009 + round_)
    return torch.randn(size, generator=g) * torch.rand(size, generator=g).pow(4) * (rank + 1)


def probe(args) -> dict:
    """``--probe``: rounds of aggregation of seeded random gradients (THC or FIX32 through the switch, or a
    gloo all-reduce), timed after a barrier; every round's inputs and outputs go to the .npz file."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    aggregator = barrier = None
    if args.mode == "gloo":
        import torch.distributed as dist

        use_interface(args.iface)
        dist.init_process_group(
            "gloo",
            init_method=args.init_method,
            rank=args.rank,
            world_size=args.world_size,
            timeout=timedelta(seconds=args.rendezvous_timeout),
        )
        barrier = dist.barrier
    else:
        aggregator = switch_aggregator(args)
        barrier = lambda: aggregator.all_max(torch.zeros(1))  # a NORM round waits for every worker
    rounds = {"thc": _thc_round, "terngrad-switch": _thc_round, "fix32": _fix32_round, "gloo": _gloo_round}
    if codec_mode(args.mode) not in rounds:
        raise ValueError(f"--probe aggregates with {', '.join([*rounds, *PS_MODES])}, not {args.mode}")
    one_round = rounds[codec_mode(args.mode)]
    codec = probe_codec(args)
    saved = {}
    try:
        emit({"event": "start", "rank": args.rank, "mode": args.mode, "setup_s": 0.0, "parameters": args.probe_size})
        barrier()
        before = interface_counters(args.iface)
        cpu_before = cpu_counters()
        for k in range(args.probe_rounds):
            grad = probe_gradient(args.probe_seed, args.rank, k, args.probe_size)
            start = time.perf_counter()
            arrays = one_round(args, aggregator, grad, k, codec)
            arrays["seconds"] = np.float64(time.perf_counter() - start)
            saved.update({f"r{k}_{name}": value for name, value in arrays.items()})
            emit(
                {
                    "event": "step",
                    "rank": args.rank,
                    "step": k + 1,
                    "loss": 0.0,
                    "step_time": float(arrays["seconds"]),
                    "t": 0.0,
                }
            )
        cpu_after = cpu_counters()
        after = interface_counters(args.iface)
        saved["cpu"] = np.array(json.dumps({k: cpu_after[k] - cpu_before[k] for k in cpu_after}))
        saved["wire"] = np.array(json.dumps({k: after[k] - before[k] for k in after}))
        if aggregator is not None:
            saved["stats"] = np.array(json.dumps(aggregator.stats()))
    finally:
        if aggregator is not None:
            aggregator.close()
        else:
            import torch.distributed as dist

            dist.destroy_process_group()
    args.probe.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.probe, **saved)
    return {"rounds": args.probe_rounds}


def probe_codec(args):
    """The mode's codec, built once per process as a training worker builds it once per run (THC's table
    comes from a dynamic programme: seconds the first time), and run once on a zero gradient so that the
    first timed round pays no lazy initialisation either. None for gloo."""
    import numpy as np
    import torch

    if codec_mode(args.mode) in TABLE_MODES:
        from thc.compressor import THCCompressor

        # the job's codec without error feedback: a probe round depends on its own gradient only
        config = dataclasses.replace(args.spec.thc_config(), error_feedback=False)
        codec = THCCompressor(config, worker_id=args.rank)
    elif codec_mode(args.mode) == "fix32":
        from thc.baselines import FixedPoint32

        codec = FixedPoint32(args.world_size, worker_id=args.rank)
    else:
        return None
    warm = torch.ones(args.probe_size)
    prep = codec.prepare(warm, step=0)
    stats = prep.stats
    encoded = codec.encode(prep, stats)
    if codec_mode(args.mode) in TABLE_MODES:
        sums = [codec.table.values[i].astype(np.int64) for i in encoded]
    else:
        sums = [np.asarray(e, np.int64) for e in encoded]
    codec.decode(prep, sums, 1, stats)
    return codec


def _sums_int64(sums) -> np.ndarray:
    import numpy as np

    return np.concatenate([np.asarray(s, dtype=np.int64) for s in sums])


class PhaseClock:
    """Where a probe round's time goes: per phase its wall time and this thread's CPU time (ms), and for
    each aggregation call when its first result came (the wait for the slowest worker) and its
    retransmissions. Saved with the round as ``r{k}_phases`` (JSON)."""

    def __init__(self, aggregator=None):
        self.aggregator = aggregator
        self.records: dict[str, float] = {}
        self._seen = self._last_operation()
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def _last_operation(self):
        return getattr(getattr(self.aggregator, "protocol", None), "last_operation", None)

    def lap(self, name: str) -> None:
        import numpy as np

        wall, cpu = time.perf_counter(), time.thread_time()
        self.records[f"{name}_ms"] = (wall - self._wall) * 1e3
        self.records[f"{name}_cpu_ms"] = (cpu - self._cpu) * 1e3
        op = self._last_operation()
        if op is not None and op is not self._seen:  # the phase ran an aggregation call
            self._seen = op
            if op.first_result is not None:
                self.records[f"{name}_first_result_ms"] = (op.first_result - op.started) * 1e3
            self.records[f"{name}_op_ms"] = (op.finished - op.started) * 1e3
            if op.n:
                sent = op.first_sent.max() - op.started
                self.records[f"{name}_all_sent_ms"] = sent * 1e3  # the window let the last request go
                at = np.sort(op.answered_at) - op.started
                for q in (50, 90):
                    self.records[f"{name}_results{q}_ms"] = float(at[min(op.n - 1, op.n * q // 100)]) * 1e3
            self.records[f"{name}_requests"] = op.n
            self.records[f"{name}_transmissions"] = int(op.attempts.sum())
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def saved(self):
        import numpy as np

        return np.array(json.dumps(self.records))


def _thc_round(args, aggregator, grad, k: int, compressor=None) -> dict:
    import numpy as np

    compressor = compressor if compressor is not None else probe_codec(args)
    clock = PhaseClock(aggregator)
    prep = compressor.prepare(grad, step=k)
    clock.lap("prepare")
    max_norms = aggregator.all_max(prep.norms)
    clock.lap("norm")
    indices = compressor.encode(prep, max_norms)
    clock.lap("encode")
    sums, contributors = aggregator.all_sum_table_values(indices, compressor.table)
    clock.lap("sum")
    decoded = compressor.decode(prep, sums, contributors, max_norms)
    clock.lap("decode")
    return {
        "max_norms": max_norms.numpy(),
        "indices": np.concatenate(indices),
        "sums": _sums_int64(sums),
        "decoded": decoded.numpy(),
        "contributors": np.int64(contributors),
        "phases": clock.saved(),
    }


def _fix32_round(args, aggregator, grad, k: int, codec=None) -> dict:
    import numpy as np

    codec = codec if codec is not None else probe_codec(args)
    clock = PhaseClock(aggregator)
    prep = codec.prepare(grad, step=k)
    clock.lap("prepare")
    stats = aggregator.all_max(prep.stats)
    clock.lap("norm")
    words = codec.encode(prep, stats)
    clock.lap("encode")
    sums, contributors = aggregator.all_sum_int32(words)
    clock.lap("sum")
    decoded = codec.decode(prep, sums, contributors, stats)
    clock.lap("decode")
    return {
        "stats": stats.numpy(),
        "words": np.concatenate(words),
        "sums": _sums_int64(sums),
        "decoded": decoded.numpy(),
        "contributors": np.int64(contributors),
        "phases": clock.saved(),
    }


def _gloo_round(args, _aggregator, grad, _k: int, _codec=None) -> dict:
    import numpy as np
    import torch.distributed as dist

    total = grad.clone()
    dist.all_reduce(total)
    return {
        "sums": total.numpy(),
        "decoded": (total / args.world_size).numpy(),
        "contributors": np.int64(args.world_size),
    }


_emitting = threading.Lock()  # the aggregation thread reports too (a rejoin): one whole line at a time


def emit(record: dict) -> None:
    with _emitting:
        print(PROGRESS_PREFIX + json.dumps(record), flush=True)


def cpu_counters() -> dict:
    """Seconds so far: wall, this process's CPU, and the whole machine's busy and total CPU time
    (/proc/stat, all cores: not namespaced, so any worker sees the switch's and the other workers' load)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return {
        "wall_s": time.perf_counter(),
        "process_s": time.process_time(),
        "machine_busy_s": (total - idle) / hz,
        "machine_total_s": total / hz,
    }


def use_interface(iface: str | None) -> None:
    """gloo's traffic on ``iface`` (without it gloo picks the interface its hostname resolves to)."""
    if iface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = iface


def interface_counters(iface: str | None) -> dict:
    """Bytes and packets on ``iface`` as this network namespace sees it (/proc/self/net/dev); empty
    without an interface (a worker under torchrun that was not told one)."""
    if iface is None:
        return {}
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == iface:
            f = [int(x) for x in rest.split()]
            return {"rx_bytes": f[0], "rx_packets": f[1], "tx_bytes": f[8], "tx_packets": f[9]}
    raise ValueError(f"no interface {iface} in this namespace")


def timed(hook, seconds: list[float], clock=time.perf_counter):
    """``hook`` (a DDP communication hook) that also appends each bucket's aggregation time to
    ``seconds``: from the call to the moment its future completes, less what an earlier bucket's time
    already covers. Non-blocking hooks overlap: bucket 2 is handed over while bucket 1 is still at the
    switch, and its wait for bucket 1 must not count twice, so the sum over buckets is the wall time during
    which some aggregation was in progress."""
    lock = threading.Lock()
    covered = [0.0]  # the latest completion so far

    def timed_hook(state, bucket):
        start = clock()

        def finished(fut):
            end = clock()
            with lock:
                seconds.append(max(0.0, end - max(start, covered[0])))
                covered[0] = max(covered[0], end)
            return fut.value()

        return hook(state, bucket).then(finished)

    timed_hook.__name__ = f"timed_{getattr(hook, '__name__', 'hook')}"
    return timed_hook


def make_hook(args, model, on_rejoin=lambda record: None):
    """(hook state, hook, aggregator or None) for ``args.mode``; ``on_rejoin`` gets the aggregator's
    records of moving to a new membership (``--membership``)."""
    if args.mode in BACKEND_MODES:  # no hook: DDP's own all-reduce goes to the switch's process group
        import torch.distributed as dist

        return None, None, dist.group.WORLD.options.aggregator
    if args.mode in GLOO_MODES:
        from thc import hooks

        state, hook = hooks.make_gloo_hook(args.mode, worker_id=args.rank, seed=args.spec.seed)
        return state, hook, None
    plan = None
    if args.mode == "plan":
        from thc import mixed

        plan = mixed.load_plan(json.loads(args.plan.read_text()))
        if not set(plan.values()) & {"thc", "fix32"}:
            return mixed.MixedHookState(plan), mixed.mixed_hook, None
    aggregator = switch_aggregator(args, on_rejoin)
    from thc import ddp

    config = args.spec.thc_config()  # the codec the job was described with, on every worker
    if args.mode == "plan":
        return mixed.MixedHookState(plan, aggregator, config, workers=args.world_size), mixed.mixed_hook, aggregator
    if codec_mode(args.mode) in TABLE_MODES:
        return ddp.THCHookState(config, aggregator), ddp.thc_hook, aggregator
    return ddp.FixedPointHookState(aggregator), ddp.fix32_hook, aggregator


def is_switch_timeout(exc: BaseException) -> bool:
    """The switch (or a server) did not answer: an AggregationTimeout, found by its type (run() raises what
    the aggregation raised, not DDP's RuntimeError of its text)."""
    from host_agent.protocol import AggregationTimeout

    return isinstance(exc, AggregationTimeout)


@contextlib.contextmanager
def aggregation_errors_as_raised(state, group):
    """Training under it raises an aggregation thread's error itself. DDP re-raises the error of a future a
    communication hook or the process group's all-reduce returned as a RuntimeError carrying only its text
    (a blocking hook's error passes unchanged); the threads keep the exception (the hook state's
    ``runner.errors``, the thc process group's ``errors``), and the first of them replaces the RuntimeError."""
    try:
        yield
    except RuntimeError as exc:
        kept = [*getattr(getattr(state, "runner", None), "errors", ()), *getattr(group, "errors", ())]
        if not kept:
            raise
        raise kept[0] from exc


def process_group(args) -> tuple[str, object]:
    """The backend of the worker's process group and its options: the switch's "thc" backend with this
    worker's aggregator in the backend modes, gloo in every other."""
    if args.mode not in BACKEND_MODES:
        return "gloo", None
    from host_agent import dist_backend

    options = dist_backend.Options(args.spec, switch_aggregator(args), BACKEND_MODES[args.mode], iface=args.iface)
    return dist_backend.NAME, options


def run(args) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from host_agent import train

    torch.set_num_threads(1)
    use_interface(args.iface)
    before = interface_counters(args.iface)
    started = time.perf_counter()
    backend, pg_options = process_group(args)
    dist.init_process_group(
        backend,
        init_method=args.init_method,
        rank=args.rank,
        world_size=args.world_size,
        timeout=timedelta(seconds=args.rendezvous_timeout),
        pg_options=pg_options,
    )
    workload = workloads.get(args.model)
    config = train.config_for(workload, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    data = workload.load()
    cap = {} if args.bucket_cap_kb is None else {"bucket_cap_mb": args.bucket_cap_kb / 1024}
    # with failure handling nothing may use gloo after the start: DDP would broadcast the buffers (e.g.
    # charlm's constant attention mask) from rank 0 before every forward pass, and rank 0 may be the dead one
    tolerant = {"broadcast_buffers": False} if args.membership else {}
    model = DDP(workload.build(config.seed), **cap, **tolerant)  # broadcasts rank 0's parameters
    last_step = [0]

    def rejoined(record):
        emit(dict(record, event="rejoined", rank=args.rank, step=last_step[0]))

    state, hook, aggregator = make_hook(args, model, rejoined)
    aggregation_seconds: list[float] = []
    if hook is None:  # a backend mode: the process group times its all-reduces as timed() times a hook's
        aggregation_seconds = dist.group.WORLD.aggregation_seconds
    else:
        model.register_comm_hook(state, timed(hook, aggregation_seconds))
    dist.barrier()
    setup_seconds = time.perf_counter() - started
    emit(
        {
            "event": "start",
            "rank": args.rank,
            "mode": args.mode,
            "setup_s": setup_seconds,
            "parameters": train.count_parameters(model.module),
        }
    )
    at_start = interface_counters(args.iface)

    def report(record):
        if record["event"] == "step":
            last_step[0] = record["step"]
        if record["event"] == "step" or args.rank == 0:
            emit(dict(record, rank=args.rank))

    try:
        with aggregation_errors_as_raised(state, dist.group.WORLD):
            history = train.train(
                model,
                data,
                config,
                args.rank,
                args.world_size,
                report,
                metric=workload.metric_of,
                step_delay=args.step_delay / 1000,
            )
    finally:
        at_end = interface_counters(args.iface)
    result = {
        "event": "done",
        "rank": args.rank,
        "mode": args.mode,
        "world_size": args.world_size,
        "workers_at_end": aggregator.n_workers if aggregator is not None else args.world_size,
        "config": config.to_dict(),
        "job": args.spec.to_dict() if uses_job(args.mode) else None,
        "parameters": train.count_parameters(model.module),
        "parameter_sha256": train.parameter_digest(model.module),
        "setup_s": setup_seconds,
        "train_s": history["train_time"],
        "final_test_acc": history["epochs"][-1]["test_acc"],
        "final_test_loss": history["epochs"][-1]["test_loss"],
        "epochs": history["epochs"],
        "steps": [{k: s[k] for k in ("step", "t", "loss", "step_time")} for s in history["steps"]],
        "aggregation_s": aggregation_seconds,
        "wire_training": {k: at_end[k] - at_start[k] for k in at_end},
        "wire_total": {k: at_end[k] - before[k] for k in at_end},
        "aggregator": aggregator.stats() if aggregator is not None else None,
        "model": args.model,
        "metric": workload.metric,
        "target": workload.target,
        "final_metric": history["epochs"][-1]["metric"],
        "bucket_cap_kb": args.bucket_cap_kb,
    }
    result["step_delay_ms"] = args.step_delay
    result["straggler_timeout_ms"] = args.straggler_timeout
    if args.mode == "plan":
        result["plan_counts"] = state.counts
        result["bucket_modes"] = {str(k): v for k, v in sorted(state.bucket_modes.items())}
    if hasattr(state, "close"):
        state.close()  # thc_hook's aggregation thread
    if aggregator is not None:
        aggregator.close()
    # DDP's reducer holds the hook's futures, and gloo's threads the callbacks of the last collectives: let
    # them go while the interpreter is alive (entry() then exits without finalising it)
    del model, state, hook
    gc.collect()
    if aggregator is None or not aggregator.generation:
        # after a failure the group has a dead rank: tearing it down could wait for it, and the process
        # ends here anyway
        dist.destroy_process_group()
    return result


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
    if args.src_mac is None:
        args.src_mac = identity.interface_mac(args.iface)
    if args.src_ip is None:
        args.src_ip = identity.interface_ipv4(args.iface)
    if args.service_mac is None and args.service_ip is not None:
        args.service_mac = identity.neighbour_mac(args.service_ip, args.iface)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        workloads.get(args.model)
    except workloads.UnknownModel as exc:
        print(f"thc-worker: {exc}", file=sys.stderr)
        return 2
    if args.straggler_timeout is not None and not args.straggler_timeout > 0:
        print(f"thc-worker: --straggler-timeout {args.straggler_timeout:g} must be > 0 ms", file=sys.stderr)
        return 2
    if args.step_delay < 0:
        print(f"thc-worker: --step-delay {args.step_delay:g} must be >= 0 ms", file=sys.stderr)
        return 2
    if (args.mode == "plan") != (args.plan is not None):
        print("thc-worker: --mode plan and --plan FILE go together", file=sys.stderr)
        return 2
    try:
        resolve_identity(args)
    except identity.IdentityError as exc:
        print(f"thc-worker: {exc}", file=sys.stderr)
        return 2
    try:
        args.spec = job_description(args, given_options(parser, argv))
    except ValueError as exc:  # JobSpecError: the file, the field and what to change
        print(f"thc-worker: {exc}", file=sys.stderr)
        return 2
    if args.membership and args.probe:
        print("thc-worker: --membership is for training; --probe rounds stop at a worker failure", file=sys.stderr)
        return 2
    if args.straggler_timeout is not None and args.mode in BACKEND_MODES:
        print(
            f"thc-worker: --straggler-timeout is for the hook modes: --mode {args.mode}'s sums need every worker",
            file=sys.stderr,
        )
        return 2
    if args.membership and args.mode not in FAILOVER_MODES:
        print(
            f"thc-worker: --membership works with --mode {' or '.join(FAILOVER_MODES)} (a worker failure in "
            f"--mode {args.mode} stops the run: {args.mode} needs every rank)",
            file=sys.stderr,
        )
        return 2
    if args.servers is not None and args.mode not in PS_MODES:
        print(f"thc-worker: --servers is for --mode {' or '.join(PS_MODES)}, not {args.mode}", file=sys.stderr)
        return 2
    addresses = ("servers",) if args.mode in PS_MODES else ("service_ip", "service_mac")
    missing = [o for o in (*addresses, "src_ip", "src_mac") if getattr(args, o) is None]
    if uses_job(args.mode) and missing:
        print(
            f"thc-worker: --mode {args.mode} needs " + ", ".join("--" + m.replace("_", "-") for m in missing),
            file=sys.stderr,
        )
        return 2
    print(f"thc-worker: {Path(__file__).resolve()}", flush=True)  # which checkout runs (logs)
    if args.mode in SWITCH_MODES:
        print(f"thc-worker: {args.spec.describe()}, key {args.spec.key:#x}", flush=True)
    elif args.mode in PS_MODES:
        print(f"thc-worker: {args.spec.describe()}, summed by the servers of {args.servers}", flush=True)
    try:
        result = probe(args) if args.probe else run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one clear line for the runner, the traceback for the log
        traceback.print_exc()
        timeout = is_switch_timeout(exc)
        where = f"the servers of {args.servers}" if args.mode in PS_MODES else f"the switch at {args.service_ip}"
        message = (
            f"no answer from {where} for {args.switch_timeout:g} s: is it up and "
            f"is job {args.spec.job_id} installed? ({exc})"
            if timeout
            else f"{type(exc).__name__}: {exc}"
        )
        emit({"event": "error", "rank": args.rank, "mode": args.mode, "message": message})
        return EXIT_SWITCH_TIMEOUT if timeout else 1
    if args.result:
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(json.dumps(result))
    emit({"event": "done", "rank": args.rank, "mode": args.mode, "final_test_acc": result.get("final_test_acc")})
    return 0


def entry() -> None:
    """The process's entry point (``thc-worker``, ``python -m host_agent.worker``, torchrun): main(), then an
    exit that skips the interpreter's finalisation. gloo's threads can still hold a collective's future with
    a hook's Python callback when the interpreter tears down, and destroying it then aborts the process
    (SIGABRT, "terminate called without an active exception"; pytorch/pytorch#179291) after the worker has
    finished and reported. main() writes every record it owes, the error's too, before it returns (emit
    flushes each line; a failure's traceback and record are printed in main, not by the interpreter), so
    flushing both streams is all that is left to do before the exit."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
