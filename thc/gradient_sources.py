"""Gradient sources for NMSE measurements: synthetic vectors and real gradients of a small model.

Each function yields rounds; a round is a list of one flat float32 gradient per worker.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .errors import ConfigError

__all__ = ["gaussian_rounds", "lognormal_rounds", "digits_gradient_rounds", "digits_mlp", "WORKLOADS"]


def gaussian_rounds(workers: int, dim: int, rounds: int, seed: int = 0) -> Iterator[list[torch.Tensor]]:
    """Independent N(0, 1) vectors."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(rounds):
        yield [torch.randn(dim, generator=gen) for _ in range(workers)]


def lognormal_rounds(workers: int, dim: int, rounds: int, seed: int = 0) -> Iterator[list[torch.Tensor]]:
    """Heavy-tailed vectors: random signs times exp(N(0, 1)) (a harder case for clipping)."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(rounds):
        yield [
            torch.randn(dim, generator=gen).exp() * (torch.randint(0, 2, (dim,), generator=gen) * 2 - 1)
            for _ in range(workers)
        ]


def digits_mlp(hidden: int = 256) -> torch.nn.Module:
    """The small model of the tests and benchmark: 64 -> hidden -> hidden -> 10 with ReLUs."""
    return torch.nn.Sequential(
        torch.nn.Linear(64, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled 8x8 digits (no download), features scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    return x, y


def digits_gradient_rounds(
    workers: int, dim: int | None, rounds: int, seed: int = 0, batch: int = 32, warmup_steps: int = 50
) -> Iterator[list[torch.Tensor]]:
    """Real gradients: each worker's minibatch gradient of a digits MLP, along an SGD trajectory.

    ``dim`` is ignored (the model fixes it: about 85k parameters); the model first takes a few warm-up steps
    so that the gradients are those of a model in training, not at initialisation.
    """
    torch.manual_seed(seed)
    x, y = load_digits_tensors()
    model = digits_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(seed)
    loss_fn = torch.nn.CrossEntropyLoss()

    def grad_on(idx: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()

    for _ in range(warmup_steps):
        grad_on(torch.randint(0, len(x), (batch,), generator=gen))
        opt.step()
    for _ in range(rounds):
        grads = [grad_on(torch.randint(0, len(x), (batch,), generator=gen)) for _ in range(workers)]
        yield grads
        model.zero_grad()
        offset = 0
        mean = torch.stack(grads).mean(0)
        for p in model.parameters():
            p.grad = mean[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        opt.step()


WORKLOADS = {"gaussian": gaussian_rounds, "lognormal": lognormal_rounds, "digits": digits_gradient_rounds}


def make_rounds(name: str, workers: int, dim: int, rounds: int, seed: int = 0) -> list[list[torch.Tensor]]:
    try:
        source = WORKLOADS[name]
    except KeyError:
        raise ConfigError(f"unknown data {name!r}: choose from {', '.join(WORKLOADS)}") from None
    return list(source(workers, dim, rounds, seed))
