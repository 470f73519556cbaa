"""Training workers on Mininet hosts: start one `thc-worker` per worker host, follow their progress.

Workers report on stdout with ``@thc {json}`` lines (host_agent/worker.py); everything they print also
goes to ``<run dir>/<mode>/<host>.log``. A worker that fails stops the whole mode: its last words (the
error line, else the log's tail) are raised, and the other workers are stopped by the caller's ledger.
A mode in which no worker makes progress for ``stall_timeout`` seconds is stopped the same way, so a run
never hangs.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from contract.job import JobSpec
from controller.topology import Topology
from host_agent.worker import EXIT_SWITCH_TIMEOUT, native_libraries
from host_agent.worker_cli import mode_job
from native_build import NATIVE_ENV, native_off
from thc.modes import PS_MODES, SWITCH_MODES, uses_job
from topologies import interrupts
from topologies.ledger import Ledger

PROGRESS_PREFIX = "@thc "
MASTER_PORT = 29500
# a worker's codec and per-request I/O: C (thc/native, host_agent/native), or the numpy reference with I/O in
# Python, which THC_NATIVE=0 in its environment selects (native_build.load_switched)
CODECS = ("native", "numpy")


def add_codec_option(parser) -> None:
    """--codec, the workers' codec: one flag for a before/after of the native data path (thc-run, bench_e2e)."""
    parser.add_argument(
        "--codec",
        choices=CODECS,
        default="native",
        help="the workers' THC/FIX32 codec and per-request I/O: 'native' = compiled C (the numpy path, said "
        "once, where no C compiler is found), 'numpy' = the numpy reference and Python I/O (THC_NATIVE=0), "
        "for a before/after of the native path; results are bit-identical (default native)",
    )


def codec_environment(codec: str) -> dict[str, str]:
    """The environment a worker process gets for `codec` on top of the caller's."""
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r}: expected one of {', '.join(CODECS)}")
    return {NATIVE_ENV: "0"} if codec == "numpy" else {}


class WorkerFailed(RuntimeError):
    pass


def split_mode(mode: str) -> tuple[str, str | None]:
    """thc-run's mode -> thc-worker's mode and a ps mode's placement: "thc-ps:colocated4" -> ("thc-ps",
    "colocated4"); "thc-ps" -> ("thc-ps", None), the topology's first placement."""
    worker_mode, _, placement = mode.partition(":")
    return worker_mode, placement or None


@dataclass
class WorkerOptions:
    """Everything a mode's workers are started with (beyond their own addresses)."""

    mode: str
    steps: int
    batch_size: int | None = None  # None: the model's (host_agent/workloads.py)
    lr: float | None = None  # None: the model's
    seed: int = 0
    spec: JobSpec | None = None  # the switch modes' job description (None: the default description for the topology)
    job_file: Path | None = None  # where the job's description, key included, is written for the workers
    servers_file: Path | None = None  # a ps mode's servers and their keys (host_agent/sharded.py), for the workers
    switch_timeout: float = 30.0
    coalesce: float = 0.5  # thc-worker --coalesce
    master_port: int = MASTER_PORT
    probe_rounds: int = 0  # > 0: aggregate seeded random gradients instead of training
    probe_size: int = 5000
    model: str = "mlp-digits"  # thc-worker --model
    bucket_cap_kb: float | None = None  # DDP bucket limit (None: DDP's default)
    plan: str | None = None  # mode "plan": the plan file (thc-plan plan --save)
    membership: Path | None = None  # thc-worker --membership: notices after a worker failure (failover.py)
    straggler_timeout_ms: float | None = None  # thc-worker --straggler-timeout (None: wait for every worker)
    query_first: bool = False  # thc-worker --query: a retransmission asks the switch first
    stragglers: dict[str, float] = field(default_factory=dict)  # host -> ms slept per step (thc-worker --step-delay)
    kills: dict[str, int] = field(default_factory=dict)  # host -> the step it dies after (thc-worker --die-after-step)
    codec: str = "native"  # CODECS: the workers' codec and I/O (codec_environment)
    fallback_server: str | None = None  # thc-worker --fallback-server IP,MAC: a pool job's (thc-run --trace)

    @property
    def worker_mode(self) -> str:
        """thc-worker's --mode (a ps mode without its placement)."""
        return split_mode(self.mode)[0]

    @property
    def placement(self) -> str | None:
        """A ps mode's placement of servers (None: the topology's first)."""
        return split_mode(self.mode)[1]

    def spec_for(self, topo: Topology) -> JobSpec:
        """The job's description for `topo`'s workers (n follows the topology), as the mode runs it
        (terngrad-switch: with TernGrad's codec, host_agent.worker_cli.mode_job)."""
        spec = self.spec or JobSpec(job_id=1, workers=len(topo.workers))
        spec = spec if spec.workers == len(topo.workers) else spec.replace(workers=len(topo.workers))
        return mode_job(self.mode, spec)


@dataclass
class Worker:
    host: str
    rank: int
    process: subprocess.Popen
    log_path: Path
    result_path: Path
    log: object = None
    buffer: bytes = b""
    step: int = 0
    started: bool = False
    error: str | None = None
    events: list[dict] = field(default_factory=list)
    lost: bool = False  # died and left behind by the others (on_death)


def worker_command(topo: Topology, host: str, options: WorkerOptions, result_path: Path) -> list[str]:
    """``thc-worker`` arguments for ``host``; its rank is its worker id in the topology."""
    h = topo.hosts[host]
    rank = topo.worker_id(host)
    master = topo.hosts[topo.workers[0]]
    service_ip, service_mac = topo.service_of(host)  # its leaf's, on two levels
    exe = Path(sys.executable).with_name("thc-worker")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "host_agent.worker"]
    argv += [
        "--mode",
        options.worker_mode,
        "--rank",
        str(rank),
        "--world-size",
        str(len(topo.workers)),
        "--master-addr",
        master.address,
        "--master-port",
        str(options.master_port),
        "--iface",
        h.interface,
        "--steps",
        str(options.steps),
        "--seed",
        str(options.seed),
    ]
    if options.batch_size is not None:
        argv += ["--batch-size", str(options.batch_size)]
    if options.lr is not None:
        argv += ["--lr", str(options.lr)]
    if options.probe_rounds:
        argv += [
            "--probe",
            str(result_path),
            "--probe-rounds",
            str(options.probe_rounds),
            "--probe-size",
            str(options.probe_size),
        ]
    else:
        argv += ["--result", str(result_path), "--model", options.model]
        if options.bucket_cap_kb is not None:
            argv += ["--bucket-cap-kb", str(options.bucket_cap_kb)]
        if options.plan is not None:
            argv += ["--plan", str(options.plan)]
        if options.stragglers.get(host):
            argv += ["--step-delay", str(options.stragglers[host])]
        if options.kills.get(host):
            argv += ["--die-after-step", str(options.kills[host])]
    if options.mode in SWITCH_MODES:
        argv += ["--service-ip", str(service_ip), "--service-mac", service_mac]
    elif options.worker_mode in PS_MODES:
        argv += ["--servers", str(options.servers_file)]
    if options.mode in SWITCH_MODES or options.worker_mode in PS_MODES:
        argv += [
            "--src-ip",
            h.address,
            "--src-mac",
            h.mac,
            "--job",
            str(options.job_file),
            "--switch-timeout",
            str(options.switch_timeout),
            "--coalesce",
            str(options.coalesce),
        ]
        if options.straggler_timeout_ms is not None:
            argv += ["--straggler-timeout", str(options.straggler_timeout_ms)]
        if options.query_first:
            argv += ["--query"]
        if options.fallback_server is not None:
            argv += ["--fallback-server", options.fallback_server]
    if options.membership is not None:
        argv += ["--membership", str(options.membership)]
    return argv


def build_native() -> None:
    """Compile the workers' C (host_agent.worker.native_libraries) into the cache they load from. A failure
    is left to the workers, which say it once and take the numpy path (native_build.load_switched)."""
    for native in native_libraries():
        try:
            native.build()
        except native.NativeUnavailable:
            pass


def start_workers(net, topo: Topology, options: WorkerOptions, ledger: Ledger, run_dir: Path) -> list[Worker]:
    """One worker process per worker host, inside that host's namespace (Mininet's popen)."""
    mode_dir = run_dir / options.mode
    mode_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **codec_environment(options.codec))
    if not native_off(env) and uses_job(options.worker_mode):
        build_native()  # once, here: each worker would compile it at set-up, all at once on the same cores
    workers = []
    for host in topo.workers:
        result_path = mode_dir / (f"{host}.npz" if options.probe_rounds else f"{host}.json")
        result_path.unlink(missing_ok=True)
        argv = worker_command(topo, host, options, result_path)
        with interrupts.critical():
            process = net.host(host).popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=os.getcwd(),
            )
            ledger.add_process(process.pid, f"worker {host} ({options.mode})")
        log_path = mode_dir / f"{host}.log"
        log = open(log_path, "wb")
        log.write((" ".join(argv) + "\n").encode())
        workers.append(Worker(host, topo.worker_id(host), process, log_path, result_path, log))
    return workers


def follow(
    workers: list[Worker],
    on_event: Callable[[Worker, dict], None],
    stall_timeout: float,
    start_timeout: float,
    check: Callable[[], None] = lambda: None,
    on_death: Callable[[Worker], None] | None = None,
) -> None:
    """Read every worker's output until all have exited; ``on_event`` gets each progress record.

    Raises WorkerFailed when a worker exits with an error, or when nothing moves for ``stall_timeout``
    seconds (``start_timeout`` before the first step: imports and rendezvous are slow on 2 cores).
    ``check()`` runs about once a second and may raise to stop early (e.g. a switch process died).
    ``on_death``, when given, is called once for a worker killed by a signal (instead of failing the run)
    and marks it lost: the others go on without it (topologies/failover.py); it raises if they cannot.
    """
    selector = selectors.DefaultSelector()
    for w in workers:
        selector.register(w.process.stdout, selectors.EVENT_READ, w)
    open_streams = len(workers)
    last_progress = time.monotonic()
    closed: list[Worker] = []  # output closed: the process is ending (a killed one is noticed sooner)
    try:
        while open_streams:
            exiting = any(w.process.poll() is None for w in closed)
            ready = selector.select(timeout=0.02 if exiting else 1.0)
            for key, _ in ready:
                w: Worker = key.data
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:  # EOF: the worker is exiting
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                    closed.append(w)
                    continue
                if _take(w, chunk, on_event):
                    last_progress = time.monotonic()
            check()
            failed = _failed(workers)
            if failed and not any(_killed(w) for w in failed):
                time.sleep(0.2)  # an error can be the echo of another worker's death (gloo: connection reset)
                failed = _failed(workers)
            for w in failed:  # what a worker wrote before it exited says why: its error record, its traceback
                if w not in closed and _drain(w, on_event):
                    selector.unregister(w.process.stdout)
                    open_streams -= 1
                    closed.append(w)
            failed.sort(key=_cause_first)
            for w in failed:
                if on_death is None or w.error or w.process.poll() > 0:
                    raise WorkerFailed(_failure_message(w, recoverable=on_death is not None))
                w.lost = True
                on_event(w, {"event": "lost", "rank": w.rank, "step": w.step})
                on_death(w)
                last_progress = time.monotonic()
            limit = stall_timeout if any(w.step for w in workers) else start_timeout
            if time.monotonic() - last_progress > limit:
                slowest = min((w for w in workers if not w.lost), key=lambda w: w.step)
                raise WorkerFailed(
                    f"no progress for {limit:.0f} s (worker {slowest.host} at step {slowest.step}); "
                    f"see {slowest.log_path}"
                )
        for w in workers:
            code = w.process.wait()
            if code != 0 and not w.lost:
                raise WorkerFailed(_failure_message(w))
    finally:
        selector.close()
        for w in workers:
            w.log.close()


def _take(w: Worker, chunk: bytes, on_event: Callable[[Worker, dict], None]) -> bool:
    """Log a chunk of a worker's output and pass on its progress records; whether it held one."""
    w.log.write(chunk)
    w.log.flush()
    w.buffer += chunk
    *lines, w.buffer = w.buffer.split(b"\n")
    progressed = False
    for line in lines:
        text = line.decode(errors="replace").rstrip("\r")
        if text.startswith(PROGRESS_PREFIX):
            event = json.loads(text[len(PROGRESS_PREFIX) :])
            progressed = True
            _note(w, event)
            on_event(w, event)
    return progressed


def _drain(w: Worker, on_event: Callable[[Worker, dict], None], within: float = 2.0) -> bool:
    """Read what an exited worker left in its pipe (it can exit before the loop has read its last lines);
    whether its output reached its end within ``within`` seconds (a child may still hold the pipe)."""
    if w.process.poll() is None:
        return False
    fd = w.process.stdout.fileno()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return False
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            return True
        _take(w, chunk, on_event)
    return False


def _failed(workers: list[Worker]) -> list[Worker]:
    return [w for w in workers if not w.lost and (w.error or (w.process.poll() not in (None, 0)))]


def _cause_first(w: Worker) -> int:
    """Sort key of failed workers, the likely cause first: one killed by a signal, then one whose switch
    never answered (its exit status says so), then the rest, often echoes of the first (gloo: a peer's
    connection reset)."""
    if _killed(w):
        return 0
    return 1 if w.process.poll() == EXIT_SWITCH_TIMEOUT else 2


def _killed(w: Worker) -> bool:
    code = w.process.poll()
    return code is not None and code < 0


def _note(w: Worker, event: dict) -> None:
    kind = event.get("event")
    if kind == "step":
        w.step = event["step"]
    elif kind == "start":
        w.started = True
    elif kind == "error":
        w.error = event.get("message", "failed")
    w.events.append(event)


def _failure_message(w: Worker, recoverable: bool = False) -> str:
    code = w.process.poll()
    reason = w.error or (f"killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}")
    if code is not None and code < 0 and not recoverable:
        reason += " (a worker failure stops this mode: only thc and fix32 go on with the survivors)"
    if not w.error:
        try:
            tail = w.log_path.read_text(errors="replace").splitlines()[-8:]
        except OSError:
            tail = []
        reason += "".join("\n    " + line for line in tail)
    return f"worker {w.host} (rank {w.rank}): {reason}\n  full log: {w.log_path}"


def load_results(workers: list[Worker]) -> list[dict]:
    """The final records of the workers that finished (not of those lost on the way).

    Only the lowest surviving rank evaluates at each epoch's end (host_agent/worker.py), and its record is
    the run's (report.py): a lost worker that evaluated before it died had its evaluations in its events,
    so they go first into that record's ``epochs``."""
    survivors = [w for w in workers if not w.lost]
    missing = [w for w in survivors if not w.result_path.exists()]
    if missing:
        raise WorkerFailed(
            f"worker {missing[0].host} exited without writing {missing[0].result_path}; see {missing[0].log_path}"
        )
    results = [json.loads(w.result_path.read_text()) for w in survivors]
    lost = [e for w in workers if w.lost for e in w.events if e.get("event") == "epoch"]
    if lost and results:
        reporter = min(results, key=lambda r: r["rank"])
        own = {e["step"] for e in reporter["epochs"]}
        earlier = [{k: v for k, v in e.items() if k != "rank"} for e in lost if e["step"] not in own]
        reporter["epochs"] = sorted(earlier + reporter["epochs"], key=lambda e: e["step"])
    return results


def stop_workers(workers: list[Worker], ledger: Ledger) -> None:
    """Stop the workers that are still running (after another one failed), through their ledger entries."""
    pids = {w.process.pid for w in workers if w.process.poll() is None}
    ledger.stop_processes([p for p in ledger.live_processes() if p.pid in pids], grace=2.0)
    for w in workers:
        w.process.poll()
