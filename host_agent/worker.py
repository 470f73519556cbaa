"""`thc-worker`: one data-parallel training worker, run on one Mininet host by `thc-run`.

torch.distributed (gloo, over the host's own interface) does the rendezvous and DDP's initial broadcast;
the gradients are then aggregated by the mode's hook or backend (thc/modes.py; the modes are tabled in
topologies/README.md). The switch modes run one job, described once for the switch and every worker
(contract/job.py), so a worker frames nothing the switch was not told. With ``--probe FILE`` the worker
aggregates seeded random gradients instead of training and saves what it sent and got, so a test can
recompute every round exactly (host_agent/probe.py). The command line and what it resolves are
host_agent/worker_cli.py; this module trains.

Progress goes to stdout as ``@thc {json}`` lines (the runner's progress bars); the final record is also
written to ``--result``. Exit status: 0 done, 3 the switch never answered (timeout), 1 any other failure.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

from host_agent import identity, workloads
from host_agent.probe import PhaseClock, probe, probe_codec, probe_gradient
from host_agent.worker_cli import (
    build_parser,
    given_options,
    job_ticket,
    load_files,
    mode_job,
    resolve_identity,
    switch_aggregator,
)
from host_agent.worker_io import die_after, emit, interface_counters, use_interface
from thc.modes import (
    BACKEND_MODES,
    FAILOVER_MODES,
    FIX32,
    GLOO_MODES,
    MODES,
    PLAN,
    PS_MODES,
    SWITCH_MODES,
    TABLE_MODES,
    THC,
    codec_mode,
    uses_job,
)

# thc-worker's face to thc-run, bench and the tests: its modes, and its command line's and probe's parts
__all__ = [
    "FAILOVER_MODES",
    "MODES",
    "PS_MODES",
    "SWITCH_MODES",
    "PhaseClock",
    "build_parser",
    "given_options",
    "job_ticket",
    "main",
    "mode_job",
    "probe",
    "probe_codec",
    "probe_gradient",
    "resolve_identity",
]

EXIT_SWITCH_TIMEOUT = 3


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
        from ddp import gloo_hooks

        state, hook = gloo_hooks.make_gloo_hook(args.mode, worker_id=args.rank, seed=args.spec.codec.seed)
        return state, hook, None
    plan = None
    if args.mode == PLAN:
        from ddp import mixed

        plan = args.plan_buckets
        if not set(plan.values()) & {THC, FIX32}:
            return mixed.MixedHookState(plan), mixed.mixed_hook, None
    aggregator = switch_aggregator(args, on_rejoin)
    from ddp import aggregator_hooks

    config = args.spec.codec  # the codec the job was described with, on every worker
    if args.mode == PLAN:
        return mixed.MixedHookState(plan, aggregator, config, workers=args.world_size), mixed.mixed_hook, aggregator
    if codec_mode(args.mode) in TABLE_MODES:
        return aggregator_hooks.THCHookState(config, aggregator), aggregator_hooks.thc_hook, aggregator
    return aggregator_hooks.FixedPointHookState(aggregator), aggregator_hooks.fix32_hook, aggregator


def native_libraries() -> tuple:
    """The worker's C, THC's codec and the batched socket helper: modules with build() and load()."""
    from host_agent import native as native_io
    from thc import native as native_codec

    return native_codec, native_io


def load_native() -> None:
    """Build (the first time on this machine) and load the worker's C during set-up: on first use it would
    land in the first training step and in time to accuracy (3.5 s there, four workers compiling on two
    cores). Nothing when THC_NATIVE=0 turns it off."""
    for native in native_libraries():
        native.load()


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
    failed: set[int] = set()

    def rejoined(record):
        failed.update(record["failed"])
        emit(dict(record, event="rejoined", rank=args.rank, step=last_step[0]))

    def evaluates() -> bool:
        """The lowest surviving rank evaluates at each epoch's end (its records are the run's: report.py);
        the others train on."""
        return args.rank == min(set(range(args.world_size)) - failed)

    state, hook, aggregator = make_hook(args, model, rejoined)
    aggregation_seconds: list[float] = []
    if hook is None:  # a backend mode: the process group times its all-reduces as timed() times a hook's
        aggregation_seconds = dist.group.WORLD.aggregation_seconds
    else:
        model.register_comm_hook(state, timed(hook, aggregation_seconds))
    if aggregator is not None:
        load_native()
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

    dies = die_after(args.die_after_step)

    def report(record):
        if record["event"] == "step":
            last_step[0] = record["step"]
        if record["event"] == "step" or evaluates():
            emit(dict(record, rank=args.rank))
        dies(record)

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
                evaluates=evaluates,
                background=True,
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
    if args.mode == PLAN:
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
    if (args.mode == PLAN) != (args.plan is not None):
        print("thc-worker: --mode plan and --plan FILE go together", file=sys.stderr)
        return 2
    try:
        load_files(args)
    except ValueError as exc:
        print(f"thc-worker: {exc}", file=sys.stderr)
        return 2
    try:
        resolve_identity(args)
    except identity.IdentityError as exc:
        print(f"thc-worker: {exc}", file=sys.stderr)
        return 2
    try:
        ticket = job_ticket(args, given_options(parser, argv))
        args.spec = ticket.spec
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
        granted = "" if ticket.grant is None else f", {ticket.grant.describe()}"
        print(f"thc-worker: {args.spec.describe()}, key {args.spec.key:#x}{granted}", flush=True)
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


def exit_unfinalised(code: int) -> NoReturn:
    """End a process that trained through gloo, once it has reported, without finalising its interpreter.
    gloo's threads can still hold a collective's future with a hook's Python callback when the interpreter
    tears down, and destroying it then aborts the process (SIGABRT, "terminate called without an active
    exception" or "... Resource deadlock avoided"; pytorch/pytorch#179291) after it has finished. Flushing
    both streams is all that is left to do; anything else the caller owes (files, queues) it writes first."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def entry() -> None:
    """The process's entry point (``thc-worker``, ``python -m host_agent.worker``, torchrun): main(), then
    ``exit_unfinalised``. main() writes every record it owes, the error's too, before it returns (emit
    flushes each line; a failure's traceback and record are printed in main, not by the interpreter)."""
    exit_unfinalised(main())


if __name__ == "__main__":
    entry()
