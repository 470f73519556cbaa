"""Data-parallel training on scikit-learn's digits: the data, the model, and the loop.

Small on purpose: the software switch moves a few thousand packets per second, so the model is an MLP
64 -> 32 -> 10 (2,410 parameters, about 40 THC packets per worker per step). The loop knows nothing about
how gradients are aggregated: it trains whatever (DDP-wrapped) model it is given, and reports through a
callback, so the same code runs with THC through the switch, FIX32 through the switch, or gloo.

Every worker sees the same permutation of the training set each epoch and takes its own slice of each
global batch, so the n workers together see the same samples as one worker with an n-times larger batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

DATA_SEED = 1234  # the train/test split: the same for every run and mode
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200  # optimizer steps (every worker)
    batch_size: int = 32  # per worker
    lr: float = 0.1
    momentum: float = 0.9
    hidden: int = 32
    layers: int = 1  # hidden layers (MODELS)
    seed: int = 0  # model initialisation and batch order

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Digits:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_digits_split() -> Digits:
    """Digits (1,797 8x8 images, ships with scikit-learn), pixels scaled to [0, 1], a fixed stratified
    80/20 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_FRACTION, random_state=DATA_SEED, stratify=y)
    return Digits(
        torch.from_numpy(x_tr), torch.from_numpy(y_tr).long(), torch.from_numpy(x_te), torch.from_numpy(y_te).long()
    )


# thc-worker --model: (hidden width, hidden layers). mlp2-digits (26,122 parameters) has buckets worth
# planning per bucket (thc-plan) and a step the links, not only the switch's packet rate, can bound.
MODELS = {"mlp-digits": (32, 1), "mlp2-digits": (128, 2)}


def make_model(hidden: int = 32, seed: int = 0, layers: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    dims = [64] + [hidden] * layers
    mods = [m for a, b in zip(dims, dims[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
    return nn.Sequential(*mods, nn.Linear(dims[-1], 10))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


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
    """(mean cross-entropy, accuracy) of ``model`` on (x, y)."""
    logits = model(x)
    return float(nn.functional.cross_entropy(logits, y)), float((logits.argmax(1) == y).float().mean())


def train(
    model: nn.Module,
    data: Digits,
    config: TrainConfig,
    rank: int,
    world: int,
    report: Callable[[dict], None],
    evaluate_model: nn.Module | None = None,
) -> dict:
    """Train ``model`` (DDP-wrapped, or plain for world = 1) for ``config.steps`` steps.

    ``report`` receives {"event": "step", ...} after every step and {"event": "epoch", ...} after every
    epoch (test loss and accuracy), both with ``t``, seconds since training started. Returns the history.
    """
    evaluate_model = evaluate_model or getattr(model, "module", model)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    history = {"steps": [], "epochs": []}
    start = time.perf_counter()
    last_epoch = 0

    def end_epoch(epoch: int) -> None:
        test_loss, test_acc = evaluate(evaluate_model, data.x_test, data.y_test)
        record = {
            "event": "epoch",
            "epoch": epoch,
            "step": len(history["steps"]),
            "t": time.perf_counter() - start,
            "test_loss": test_loss,
            "test_acc": test_acc,
        }
        history["epochs"].append(record)
        report(record)

    for epoch, step, idx in batches(len(data.x_train), config.batch_size, rank, world, config.seed, config.steps):
        if epoch != last_epoch:
            end_epoch(last_epoch)
            last_epoch = epoch
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
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
    end_epoch(last_epoch)
    history["train_time"] = time.perf_counter() - start
    return history
