"""The training workloads by name (``thc-worker --model NAME``, ``thc-run --model NAME``, the benchmarks).

None needs a download: every data set ships inside an installed package or is made in code, with a fixed
seed, so every worker, mode and run sees the same samples. A workload (WORKLOADS, described in
docs/workloads.md) is a model builder, a data loader (train/held-out split), the metric the time to target is
measured on (with its target and direction) and the optimiser settings it trains well with. Importing this
module imports no torch: the CLIs check a name before they pay for torch."""

from __future__ import annotations

import math
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

DATA_SEED = 1234  # every split and every generated sample: the same for every run and mode
TEST_FRACTION = 0.2

__all__ = ["Workload", "Split", "WORKLOADS", "get", "names", "UnknownModel"]


class UnknownModel(ValueError):
    """A model name that is not in WORKLOADS; the message is the one line the CLIs print."""


@dataclass
class Split:
    """Training and held-out samples. Classification: x (N, ...) float, y (N,) long. Language model:
    x (N, T) long token ids, y (N, T) the next token of each position."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    build: Callable[[int], nn.Module]  # seed -> a freshly initialised model
    load: Callable[[], Split]  # cached: a second call costs nothing
    metric: str  # "accuracy" (test accuracy) or "bpc" (validation bits per character)
    target: float  # time to target: the first evaluation at or beyond this value
    lr: float
    batch_size: int = 32  # per worker
    optimizer: str = "sgd"  # "sgd" (momentum 0.9) or "adam"
    eval_every: int = 0  # evaluate every this many steps (0: at the end of every epoch)

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "accuracy"

    def reached(self, value: float) -> bool:
        return value >= self.target if self.higher_is_better else value <= self.target

    def metric_of(self, test_loss: float, test_acc: float) -> float:
        """The workload's metric from an evaluation's mean cross-entropy (nats) and accuracy."""
        return test_acc if self.metric == "accuracy" else test_loss / math.log(2)


# ---- digits (scikit-learn) --------------------------------------------------------------------------


@lru_cache(maxsize=1)
def load_digits_split() -> Split:
    """Digits (1,797 8x8 images, ships with scikit-learn), pixels scaled to [0, 1], a fixed stratified
    80/20 split. x: (N, 64)."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_FRACTION, random_state=DATA_SEED, stratify=y)
    return Split(
        torch.from_numpy(x_tr), torch.from_numpy(y_tr).long(), torch.from_numpy(x_te), torch.from_numpy(y_te).long()
    )


@lru_cache(maxsize=1)
def load_digits16() -> Split:
    """The same split as images (N, 1, 16, 16): bilinear upsampling of the 8x8 digits, so that two 3x3
    convolutions with 2x2 pooling have room to work."""
    import torch

    d = load_digits_split()

    def up(x: torch.Tensor) -> torch.Tensor:
        img = x.view(-1, 1, 8, 8)
        return torch.nn.functional.interpolate(img, size=(16, 16), mode="bilinear", align_corners=False).contiguous()

    return Split(up(d.x_train), d.y_train, up(d.x_test), d.y_test)


DIGITS_FEATURES = 64  # the 8x8 digits, flattened: the MLPs' input
# the digits MLPs by workload name: (hidden width, hidden layers). mlp2-digits (26,122 parameters) has buckets
# worth planning per bucket (thc-plan) and a step the links, not only the switch's packet rate, can bound.
MLP_SHAPES = {"mlp-digits": (32, 1), "mlp2-digits": (128, 2)}


def mlp_digits(hidden: int = 32, layers: int = 1) -> nn.Module:
    """The digits MLP, 64 -> hidden (``layers`` times) -> 10, on torch's current device: defined once, for
    training here and for the planner's shape-only models (planner.models_zoo builds it on the meta device)."""
    from torch import nn

    dims = [DIGITS_FEATURES] + [hidden] * layers
    mods = [m for a, b in zip(dims, dims[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
    return nn.Sequential(*mods, nn.Linear(dims[-1], 10))


def make_mlp(hidden: int = 32, layers: int = 1, *, seed: int = 0) -> nn.Module:
    """The digits MLP initialised from ``seed``."""
    import torch

    torch.manual_seed(seed)
    return mlp_digits(hidden, layers)


def make_cnn_digits(seed: int = 0) -> nn.Module:
    """1x16x16 -> conv 16 -> pool -> conv 32 -> pool -> 512 -> 64 -> 10 (38,282 parameters)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


# ---- MNIST-1D-style signals (generated) ---------------------------------------------------------------

SIGNAL_LEN = 40
SIGNAL_SAMPLES = 5000


def _templates(rng) -> list:
    """Ten class templates of 12 points: smoothed seeded random walks, normalised, pairwise distinct."""
    import numpy as np

    out = []
    kernel = np.array([0.25, 0.5, 0.25])
    while len(out) < 10:
        t = np.convolve(np.cumsum(rng.normal(size=14)), kernel, mode="valid")  # 12 points
        t = (t - t.mean()) / (t.std() + 1e-9)
        if all(np.abs(t - o).mean() > 0.6 for o in out):
            out.append(t)
    return out


@lru_cache(maxsize=1)
def load_signals() -> Split:
    """MNIST-1D-style (Greydanus 2020) signals made in code: a class template of 12 points is stretched
    (x0.8..1.25), scaled (x0.7..1.3), placed at a random offset in 40 samples, sheared by a random linear
    ramp, and buried in correlated (smoothed) plus white noise. 5,000 samples, balanced, 80/20 split.
    x: (N, 1, 40)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(DATA_SEED)
    templates = _templates(rng)
    t_axis = np.arange(SIGNAL_LEN, dtype=np.float64)
    xs, ys = [], []
    for i in range(SIGNAL_SAMPLES):
        label = i % 10
        tpl = templates[label]
        length = int(round(12 * rng.uniform(0.8, 1.25)))
        shape = np.interp(np.linspace(0, 11, length), np.arange(12), tpl) * rng.uniform(0.7, 1.3)
        sig = np.zeros(SIGNAL_LEN)
        offset = rng.integers(0, SIGNAL_LEN - length + 1)
        sig[offset : offset + length] = shape
        sig += rng.uniform(-0.75, 0.75) * (t_axis / SIGNAL_LEN - 0.5)  # shear
        corr = np.convolve(rng.normal(size=SIGNAL_LEN + 4), np.ones(5) / 5, mode="valid")
        sig += 0.6 * corr + 0.15 * rng.normal(size=SIGNAL_LEN)
        xs.append(sig)
        ys.append(label)
    x = torch.tensor(np.array(xs), dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(ys, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(DATA_SEED))
    cut = int(len(x) * (1 - TEST_FRACTION))
    tr, te = order[:cut], order[cut:]
    return Split(x[tr].contiguous(), y[tr], x[te].contiguous(), y[te])


def make_cnn1d(seed: int = 0) -> nn.Module:
    """1x40 -> conv 32 (k5) -> conv 64 (k3, /2) -> conv 64 (k3, /2) -> 640 -> 128 -> 10 (102,090 parameters)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv1d(1, 32, 5, padding=2),
        nn.ReLU(),
        nn.Conv1d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv1d(64, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 10, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


# ---- characters of the standard library ---------------------------------------------------------------

CONTEXT = 64
VOCAB = ["\t", "\n", *[chr(c) for c in range(32, 127)], "\x00"]  # the last id: any other character
TRAIN_CHARS = 2_000_000
VAL_CHARS = 200_000
VAL_WINDOWS = 256


def stdlib_files() -> list[Path]:
    """The top-level .py files of the running interpreter's standard library, sorted by name."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def encode_text(text: str):
    """Token ids of ``text`` (int64): tab, newline and printable ASCII have their own, anything else the last."""
    import numpy as np

    table = np.full(128, len(VOCAB) - 1, dtype=np.int64)
    for i, ch in enumerate(VOCAB[:-1]):
        table[ord(ch)] = i
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return np.where(codes < 128, table[np.minimum(codes, 127)], len(VOCAB) - 1)


@lru_cache(maxsize=1)
def load_stdlib_chars() -> Split:
    """Windows of 64 characters (and the next 64 as targets) from the standard library's source: the files
    in a seeded order, the first ones up to 200k characters held out for validation (so validation text
    comes from modules never seen in training), the next up to 2 M characters for training."""
    import numpy as np
    import torch

    files = stdlib_files()
    if len(files) < 10:
        raise RuntimeError(f"found only {len(files)} .py files in {sysconfig.get_paths()['stdlib']}")
    order = np.random.default_rng(DATA_SEED).permutation(len(files))
    val, train = [], []
    val_n = train_n = 0
    for i in order:
        text = files[i].read_text(encoding="utf-8", errors="replace")
        if val_n < VAL_CHARS:
            val.append(text)
            val_n += len(text)
        elif train_n < TRAIN_CHARS:
            train.append(text)
            train_n += len(text)

    def windows(parts: list[str], limit: int) -> torch.Tensor:
        ids = encode_text("".join(parts)[:limit])
        n = (len(ids) - 1) // CONTEXT
        return torch.from_numpy(np.stack([ids[k * CONTEXT : k * CONTEXT + CONTEXT + 1] for k in range(n)]))

    tr = windows(train, TRAIN_CHARS)
    va = windows(val, VAL_CHARS)
    pick = torch.randperm(len(va), generator=torch.Generator().manual_seed(DATA_SEED))[:VAL_WINDOWS]
    va = va[pick.sort().values]
    return Split(tr[:, :-1].contiguous(), tr[:, 1:].contiguous(), va[:, :-1].contiguous(), va[:, 1:].contiguous())


class CharTransformer:
    """Namespace of the LM's sizes (a class so that the docs can name them)."""

    d_model = 128
    heads = 4
    layers = 4
    ff = 512


def make_charlm(seed: int = 0) -> nn.Module:
    import torch
    from torch import nn

    class CharLM(nn.Module):
        """Pre-norm causal transformer: token and position embeddings, 4 layers of d=128 (4 heads, ff 512),
        no dropout (so that every mode computes the same function), a linear head over the vocabulary."""

        def __init__(self) -> None:
            super().__init__()
            c = CharTransformer
            self.embed = nn.Embedding(len(VOCAB), c.d_model)
            self.position = nn.Embedding(CONTEXT, c.d_model)
            layer = nn.TransformerEncoderLayer(c.d_model, c.heads, c.ff, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, c.layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(c.d_model)
            self.head = nn.Linear(c.d_model, len(VOCAB))
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = x.shape[1]
            h = self.embed(x) + self.position(torch.arange(t, device=x.device))
            h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
            return self.head(self.norm(h))

    torch.manual_seed(seed)
    return CharLM()


# ---- the registry ---------------------------------------------------------------------------------------

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "mlp-digits",
            "MLP 64-32-10 (2,410 parameters), scikit-learn's 8x8 digits",
            lambda seed: make_mlp(*MLP_SHAPES["mlp-digits"], seed=seed),
            load_digits_split,
            "accuracy",
            0.9,
            lr=0.1,
        ),
        Workload(
            "mlp2-digits",
            "MLP 64-128-128-10 (26,122 parameters), scikit-learn's 8x8 digits",
            lambda seed: make_mlp(*MLP_SHAPES["mlp2-digits"], seed=seed),
            load_digits_split,
            "accuracy",
            0.9,
            lr=0.1,
        ),
        Workload(
            "cnn-digits",
            "CNN (38,282 parameters), the digits upsampled to 16x16",
            make_cnn_digits,
            load_digits16,
            "accuracy",
            0.95,
            lr=0.05,
        ),
        Workload(
            "cnn1d-signals",
            "1-D CNN (102,090 parameters), 5,000 MNIST-1D-style signals made in code",
            make_cnn1d,
            load_signals,
            "accuracy",
            0.85,
            lr=0.2,  # lower rates sit at chance for many steps first
        ),
        Workload(
            "charlm-stdlib",
            "character transformer (0.83 M parameters), the Python standard library's source",
            make_charlm,
            load_stdlib_chars,
            "bpc",
            3.0,
            lr=2e-3,
            batch_size=16,
            optimizer="adam",
            eval_every=25,
        ),
    )
}


def names() -> list[str]:
    return list(WORKLOADS)


def get(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownModel(f"unknown model {name!r}; choose from {', '.join(WORKLOADS)}") from None
