"""Data-parallel training: the loop, and the digits MLP it started with (the workloads: host_agent/workloads.py).

The default model is small on purpose: a software switch on a small machine moves few packets a second, so
mlp-digits is an MLP 64 -> 32 -> 10 (2,410 parameters, a few THC requests per worker per step). The loop
knows nothing about how gradients are aggregated: it trains whatever (DDP-wrapped) model it is given, and
reports through a callback, so the same code runs with THC through the switch, FIX32 through the switch,
gloo, or any other communication hook. Classifiers and the character language model share it: the loss
is the cross-entropy of the logits flattened to (samples, classes) against the flattened targets.

Every worker sees the same permutation of the training set each epoch and takes its own slice of each
global batch, so the n workers together see the same samples as one worker with an n-times larger batch.
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from host_agent import workloads

DATA_SEED = workloads.DATA_SEED
TEST_FRACTION = workloads.TEST_FRACTION


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200  # optimizer steps (every worker)
    batch_size: int = 32  # per worker
    lr: float = 0.1
    momentum: float = 0.9
    hidden: int = 32
    layers: int = 1  # hidden layers (workloads.MLP_SHAPES)
    seed: int = 0  # model initialisation and batch order
    optimizer: str = "sgd"  # "sgd" (with momentum) or "adam"
    eval_every: int = 0  # evaluate every this many steps; 0: at the end of every epoch

    def to_dict(self) -> dict:
        return asdict(self)


Digits = workloads.Split  # the digits split, as the mixed-plan test and bench_timeline know it
load_digits_split = workloads.load_digits_split


def config_for(
    workload: workloads.Workload,
    steps: int = 200,
    batch_size: int | None = None,
    lr: float | None = None,
    seed: int = 0,
) -> TrainConfig:
    """The TrainConfig of ``workload``: its optimiser, learning rate, batch size and evaluation interval,
    unless given."""
    return TrainConfig(
        steps=steps,
        batch_size=batch_size or workload.batch_size,
        lr=lr or workload.lr,
        seed=seed,
        optimizer=workload.optimizer,
        eval_every=workload.eval_every,
    )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 of every parameter's bytes, in order: data-parallel workers that end in the same model,
    bit for bit, report the same digest."""
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def batches(n_train: int, batch_size: int, rank: int, world: int, seed: int, steps: int):
    """(epoch, step, this worker's sample indices) for ``steps`` steps: per epoch one shared permutation,
    cut into global batches of ``batch_size * world``; worker ``rank`` takes its slice of each."""
    global_batch = batch_size * world
    per_epoch = n_train // global_batch
    if per_epoch == 0:
        raise ValueError(f"a global batch of {global_batch} is larger than the {n_train} training samples")
    step = 0
    epoch = 0
    while step < steps:
        order = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        for b in range(per_epoch):
            if step == steps:
                return
            start = b * global_batch + rank * batch_size
            yield epoch, step, order[start : start + batch_size]
            step += 1
        epoch += 1


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(mean cross-entropy in nats, accuracy) of ``model`` on (x, y): per sample for a classifier, per
    position for a language model."""
    logits = model(x).flatten(0, -2)
    y = y.flatten()
    correct = int((logits.argmax(1) == y).sum())
    # the count over the total in double precision: a float32 mean makes 342/360 0.94999999 < 0.95
    return float(nn.functional.cross_entropy(logits, y)), correct / y.numel()


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x).flatten(0, -2), y.flatten())


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum)
    raise ValueError(f"optimizer {config.optimizer!r}: choose sgd or adam")


class BackgroundEvaluation:
    """Evaluations of snapshots of the model, one at a time, on a thread of their own at a lower CPU priority
    (nice ``NICE``), so that the rank evaluating goes on training meanwhile instead of holding every other
    rank at the next step's aggregation; torch releases the GIL in its kernels. ``run(model)`` evaluates the
    snapshot it is given; an error it raises comes back at the next ``submit`` or ``wait``."""

    NICE = 10  # a share of the cores the training threads leave idle, not theirs

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._snapshot: nn.Module | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, run: Callable[[nn.Module], None]) -> None:
        """Snapshot the model's parameters and buffers (after the evaluation before has finished) and start
        ``run`` on the snapshot."""
        self.wait()
        if self._snapshot is None:
            self._snapshot = copy.deepcopy(self.model).requires_grad_(False)
        self._snapshot.load_state_dict(self.model.state_dict())
        snapshot = self._snapshot

        def body() -> None:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.NICE)  # this thread only (Linux)
            except OSError:
                pass
            try:
                run(snapshot)
            except BaseException as exc:  # noqa: BLE001 - raised again in the training thread
                self._error = exc

        self._thread = threading.Thread(target=body, name="evaluation", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def train(
    model: nn.Module,
    data: Digits,
    config: TrainConfig,
    rank: int,
    world: int,
    report: Callable[[dict], None],
    evaluate_model: nn.Module | None = None,
    metric: Callable[[float, float], float] | None = None,
    step_delay: float = 0.0,
    evaluates: Callable[[], bool] = lambda: True,
    background: bool = False,
) -> dict:
    """Train ``model`` (DDP-wrapped, or plain for world = 1) for ``config.steps`` steps.

    ``report`` receives {"event": "step", ...} after every step and {"event": "epoch", ...} after every
    evaluation (test loss and accuracy; at the end of every epoch, or every ``config.eval_every`` steps),
    both with ``t``, seconds since training started. ``metric`` (test loss, accuracy -> value) adds the
    workload's metric to each evaluation record. ``step_delay`` s are slept in every step before the
    backward pass (an injected straggler: its gradients reach the aggregation that much later). Returns
    the history. ``evaluates`` says, at each evaluation point, whether this rank evaluates there: the
    replicas are identical, so one rank's evaluation stands for all, and the others go on training instead
    of each spending the same forward pass over the test set on the same shared cores. The evaluation after
    the last step runs on every rank, so each history ends with the final model's figures. ``background``:
    the evaluations before it run on a snapshot in the background (BackgroundEvaluation) while training goes
    on; each record's ``step`` is the snapshot's and its ``t`` the evaluation's end, as before.
    """
    evaluate_model = evaluate_model or getattr(model, "module", model)
    optimizer = make_optimizer(model.parameters(), config)
    history = {"steps": [], "epochs": []}
    start = time.perf_counter()
    last_epoch = 0

    evaluations = BackgroundEvaluation(evaluate_model) if background else None

    def end_epoch(epoch: int, final: bool = False) -> None:
        if not (final or evaluates()):
            return
        step = len(history["steps"])

        def run(m: nn.Module) -> None:
            test_loss, test_acc = evaluate(m, data.x_test, data.y_test)
            record = {
                "event": "epoch",
                "epoch": epoch,
                "step": step,
                "t": time.perf_counter() - start,
                "test_loss": test_loss,
                "test_acc": test_acc,
            }
            if metric is not None:
                record["metric"] = metric(test_loss, test_acc)
            history["epochs"].append(record)
            report(record)

        if evaluations is None:
            run(evaluate_model)
        elif final:
            evaluations.wait()
            run(evaluate_model)
        else:
            evaluations.submit(run)

    for epoch, step, idx in batches(len(data.x_train), config.batch_size, rank, world, config.seed, config.steps):
        if config.eval_every and step and step % config.eval_every == 0:
            end_epoch(last_epoch)
        elif not config.eval_every and epoch != last_epoch:
            end_epoch(last_epoch)
        last_epoch = epoch
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model, data.x_train[idx], data.y_train[idx])
        if step_delay > 0:
            time.sleep(step_delay)
        loss.backward()  # DDP aggregates the gradients here (comm hook or gloo)
        optimizer.step()
        record = {
            "event": "step",
            "step": step + 1,
            "epoch": epoch,
            "loss": float(loss.detach()),
            "step_time": time.perf_counter() - t0,
            "t": time.perf_counter() - start,
        }
        history["steps"].append(record)
        report(record)
    end_epoch(last_epoch, final=True)
    history["train_time"] = time.perf_counter() - start
    return history
