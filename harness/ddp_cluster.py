"""An in-process data-parallel cluster: n worker threads, each a real DDP model on its own gloo process group
(one shared in-process HashStore), aggregating in any mode: thc and fix32 through the fake switch or the
compiled program on the loopback wire (harness.sim, each worker a SwitchAggregator, as thc-worker has on
a Mininet host), the gloo modes through ddp.gloo_hooks. No Mininet, no interfaces, no subprocesses."""

from __future__ import annotations

import gc
import hashlib
import itertools
import os
import sys
import threading
import time
from unittest import mock

import torch
import torch.distributed as dist

from contract.job import JobSpec
from ddp import aggregator_hooks, gloo_hooks
from harness.fake_switch import FakeSwitch
from harness.loopback import LoopbackWire
from harness.sim import SimJob, attach_workers
from host_agent import train, workloads
from host_agent.aggregator import SwitchAggregator
from host_agent.worker import exit_unfinalised
from thc.config import THCConfig
from thc.modes import FIX32, THC

_prefixes = itertools.count()
_seeding = threading.Lock()  # torch.manual_seed is process-wide: one model initialisation at a time


def thc_spec(config: THCConfig, job_id: int, workers: int, **framing) -> JobSpec:
    """The job description whose codec is ``config`` (so the switch sums the table the hooks decode with);
    ``framing``: the rest of the description (window, slots, ...)."""
    return JobSpec(job_id=job_id, workers=workers, codec=config, **framing)


def aggregators_on(engine, job: SimJob, *, loss: float = 0.0, seed: int = 0, **options) -> list[SwitchAggregator]:
    """One SwitchAggregator per worker of ``job`` on a loopback wire to ``engine`` (real clock), each link
    losing ``loss`` of its frames each way (seeded); ``options``: WorkerProtocol's (timeout, deadline, ...)."""
    _, protocols = attach_workers(engine, job, loss_up=loss, loss_down=loss, seed=seed, clock=time.monotonic, **options)
    return [SwitchAggregator(p) for p in protocols]


def switch_aggregators(n: int, config: THCConfig, engine=None) -> list[SwitchAggregator]:
    """n SwitchAggregators on a loopback wire to ``engine`` (default: a FakeSwitch) serving one job."""
    job = SimJob.plan(thc_spec(config, 3, n, window=64, slots=64))
    if engine is None:
        engine = FakeSwitch()
        engine.add_job(job)
    return aggregators_on(engine, job, timeout=0.01, max_timeout=0.1, deadline=60.0)


def jobs_aggregators(engine, jobs: list[SimJob], **options) -> dict[int, list[SwitchAggregator]]:
    """Per job, its SwitchAggregators, every job's workers on one loopback wire to ``engine`` (which serves
    them all: several jobs on one switch). Options: WorkerProtocol's (e.g. straggler_timeout)."""
    lw = LoopbackWire(engine, clock=time.monotonic)
    timers = dict(timeout=0.01, max_timeout=0.1, deadline=60.0) | options
    out = {}
    for job in jobs:
        _, protocols = attach_workers(engine, job, clock=time.monotonic, lw=lw, **timers)
        out[job.job_id] = [SwitchAggregator(p) for p in protocols]
    return out


def gloo_group(store, rank: int, n: int) -> dist.ProcessGroup:
    """A gloo process group on ``store`` without a default group (one per worker thread). DDP needs a
    ProcessGroup; ProcessGroupGloo is only its backend."""
    pg = dist.ProcessGroup(store, rank, n)
    backend = dist.ProcessGroupGloo(store, rank, n)
    pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend)
    return pg


def serialized(hook):
    """``hook`` called under the process-wide seeding lock. torch's powerSGD_hook seeds torch's global RNG
    and draws its first Q matrices in the call (before its asynchronous all-reduces): worker threads of one
    process would interleave those draws, which worker processes never do."""

    def locked(state, bucket):
        with _seeding:
            return hook(state, bucket)

    locked.__name__ = f"serialized_{getattr(hook, '__name__', 'hook')}"
    return locked


def hook_for(
    mode: str,
    rank: int,
    n: int,
    pg,
    aggregator=None,
    config: THCConfig | None = None,
    thc_hook=None,
    fix32_hook=None,
):
    """(state, hook) of ``mode`` for worker ``rank``."""
    if mode == THC:
        return aggregator_hooks.THCHookState(
            config or THCConfig(), aggregator, worker_id=rank
        ), thc_hook or aggregator_hooks.thc_hook
    if mode == FIX32:
        return aggregator_hooks.FixedPointHookState(aggregator, workers=n), fix32_hook or aggregator_hooks.fix32_hook
    state, hook = gloo_hooks.make_gloo_hook(mode, process_group=pg, worker_id=rank)
    return state, serialized(hook) if mode == "powersgd" else hook


def in_threads(n: int, fn, timeout: float = 300.0) -> list:
    out, errors = [None] * n, []

    def run(w):
        try:
            out[w] = fn(w)
        except BaseException as exc:  # noqa: BLE001 - reported below with the rank
            errors.append((w, repr(exc)[:800]))

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    return out


def _train_rank(
    rank, n, pg, workload, data, cfg, mode, aggregator, config, thc_hook, fix32_hook, bucket_cap_mb, step_delay=0.0
):
    """One worker's part of ``train_ddp``: the loss on a fixed batch before and after, final parameters,
    the training history, each step's digests; it sleeps ``step_delay`` s per step (an injected straggler)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    probe = slice(0, 64)
    with _seeding:
        model = workload.build(cfg.seed)
    with torch.no_grad():
        before = float(train.loss_of(model, data.x_train[probe], data.y_train[probe]))
    cap = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    wrapped = DDP(model, process_group=pg, **cap)
    state, hook = hook_for(mode, rank, n, pg, aggregator, config, thc_hook, fix32_hook)
    wrapped.register_comm_hook(state, hook)
    digests = []  # per step: what the aggregation averaged, and the model the optimiser made of it
    history = train.train(
        wrapped,
        data,
        cfg,
        rank,
        n,
        lambda record: digests.append(step_digests(model)) if record["event"] == "step" else None,
        metric=workload.metric_of,
        step_delay=step_delay,
    )
    with torch.no_grad():
        after = float(train.loss_of(model, data.x_train[probe], data.y_train[probe]))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    del wrapped  # the reducer goes before its process group
    gc.collect()
    if hasattr(state, "close"):
        state.close()  # thc_hook's aggregation thread
    return {"before": before, "after": after, "params": params, "state": state, "history": history, "digests": digests}


def step_digests(model) -> tuple[str, str]:
    """SHA-256 of the model's gradients and of its parameters, taken after an optimiser step (the gradients
    are still the step's averages then): replicas agree on both at every step."""
    grads, params = hashlib.sha256(), hashlib.sha256()
    for p in model.parameters():
        grads.update(b"-" if p.grad is None else p.grad.detach().contiguous().numpy().tobytes())
        params.update(p.detach().contiguous().numpy().tobytes())
    return grads.hexdigest(), params.hexdigest()


def replica_divergence(ranks: list[dict]) -> str:
    """Where the ranks of a train_ddp run parted, for an assertion's message: the first step after which a
    rank's averaged gradients differ from rank 0's (the aggregation gave them other results, or they
    decoded the same ones differently), or only its parameters (the optimiser or DDP); and each rank's
    aggregator counters of retransmissions and of results taken more than once."""
    lines = []
    for rank, out in enumerate(ranks[1:], start=1):
        for step, (mine, first) in enumerate(zip(out.get("digests", []), ranks[0].get("digests", [])), start=1):
            if mine != first:
                what = "gradients" if mine[0] != first[0] else "parameters (the same gradients)"
                lines.append(f"rank {rank} differs from rank 0 after step {step}: {what}")
                break
    for rank, out in enumerate(ranks):
        stats = getattr(getattr(out.get("state"), "aggregator", None), "stats", None)
        if callable(stats):
            counts = stats()
            keys = ("timer_retransmissions", "retransmissions", "duplicate_results", "stale_results")
            lines.append(f"rank {rank}: " + ", ".join(f"{key} {counts[key]}" for key in keys))
    if not lines and not all(out.get("digests") for out in ranks):
        return "a rank recorded no step digests"
    return "; ".join(lines) or "no step digests differ"


def train_ddp(
    model_name: str,
    mode: str,
    steps: int,
    n: int = 2,
    batch_size: int | None = None,
    config: THCConfig | None = None,
    thc_hook=None,
    bucket_cap_mb: float | None = None,
    fix32_hook=None,
    aggregators: list[SwitchAggregator] | None = None,
    seed: int = 0,
    step_delays: dict[int, float] | None = None,
) -> list[dict]:
    """Train ``model_name`` for ``steps`` steps on n workers in ``mode``; per rank: the training loss on a
    fixed batch before and after, the final parameters (flat), the training history and each step's
    step_digests (replica_divergence compares them).

    ``aggregators``: the workers' SwitchAggregators (default: a FakeSwitch's); ``step_delays``: rank ->
    seconds that rank sleeps per step (an injected straggler)."""
    workload = workloads.get(model_name)
    data = workload.load()
    cfg = train.config_for(workload, steps=steps, batch_size=batch_size, seed=seed)
    if aggregators is not None:
        aggs = aggregators
    else:
        aggs = switch_aggregators(n, config or THCConfig()) if mode in (THC, FIX32) else [None] * n
    store = dist.HashStore()
    prefix = f"c{next(_prefixes)}"

    def work(rank):
        pg = gloo_group(dist.PrefixStore(prefix, store), rank, n)
        return _train_rank(
            rank,
            n,
            pg,
            workload,
            data,
            cfg,
            mode,
            aggs[rank],
            config,
            thc_hook,
            fix32_hook,
            bucket_cap_mb,
            step_delay=(step_delays or {}).get(rank, 0.0),
        )

    return in_threads(n, work)


def _process_rank(rank, n, store_path, model_name, mode, steps, batch_size, results):
    torch.set_num_threads(1)
    workload = workloads.get(model_name)
    cfg = train.config_for(workload, steps=steps, batch_size=batch_size)
    pg = gloo_group(dist.FileStore(store_path, n), rank, n)
    out = _train_rank(rank, n, pg, workload, workload.load(), cfg, mode, None, None, None, None, None)
    # numpy, not a tensor: a tensor would travel as a shared-memory handle that dies with this process
    results.put((rank, {key: out[key] for key in ("before", "after", "digests")} | {"params": out["params"].numpy()}))
    results.close()
    results.join_thread()  # the record is in the pipe: end as thc-worker does
    exit_unfinalised(0)


def train_ddp_in_processes(
    model_name: str, mode: str, steps: int, tmp_path, n: int = 2, batch_size: int | None = None, timeout: float = 300.0
) -> list[dict]:
    """``train_ddp`` for the gloo modes with every rank a process of its own, as thc-worker runs them: for
    hooks that must not share a process (torch's powerSGD_hook, whose future callbacks wait on nested
    all-reduces, aborts the interpreter now and then with ranks as threads, and rarely as processes too:
    "terminate called ... Resource deadlock avoided"). A rank ends as thc-worker does, without finalising
    its interpreter once it has reported. A rank that dies ends the wait at once; a run in which one aborted
    (SIGABRT) before it reported is run once more, with a notice, and a second abort is an error."""
    try:
        return _train_in_processes(model_name, mode, steps, tmp_path, n, batch_size, timeout)
    except RankAborted as exc:
        print(f"ddp_cluster: {exc}; running the {n} ranks once more", file=sys.stderr)
    return _train_in_processes(model_name, mode, steps, tmp_path, n, batch_size, timeout)


class RankAborted(RuntimeError):
    """A rank process died of SIGABRT before it reported."""


def _train_in_processes(model_name, mode, steps, tmp_path, n, batch_size, timeout) -> list[dict]:
    import multiprocessing
    import queue
    import signal

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    store_path = str(tmp_path / f"store-{next(_prefixes)}")
    procs = [
        ctx.Process(target=_process_rank, args=(r, n, store_path, model_name, mode, steps, batch_size, results))
        for r in range(n)
    ]
    # with one OpenMP thread, as thc-run starts its workers: torch.set_num_threads(1) holds for a rank's own
    # threads, not for gloo's, where powerSGD_hook's callbacks run their matrix products; there the ranks'
    # float sums could take different orders and the replicas part (mlp2-digits, 1 run in 2 on 2 cores)
    with mock.patch.dict(os.environ, OMP_NUM_THREADS="1"):  # what a spawned process starts with
        for p in procs:
            p.start()
    out: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n:
            try:
                rank, record = results.get(timeout=0.5)
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in out]
                if dead:
                    rank, code = dead[0]
                    if code == -signal.SIGABRT:
                        raise RankAborted(f"rank {rank} of {mode} aborted (SIGABRT) before it reported") from None
                    raise RuntimeError(f"rank {rank} of {mode} exited with code {code} before it reported") from None
                if time.monotonic() > deadline:
                    missing = n - len(out)
                    raise TimeoutError(f"{missing} of {n} ranks of {mode} did not report in {timeout:g} s") from None
                continue
            out[rank] = dict(record, params=torch.from_numpy(record["params"]))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return [out[r] for r in range(n)]
