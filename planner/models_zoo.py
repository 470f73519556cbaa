"""Shape-only models for projections: ResNet-50, VGG-16, BERT-base (and the testbed's digits MLPs, as
host_agent.workloads defines them), built from torch.nn on the meta device, so their parameter shapes and
per-layer FLOPs are known and nothing is allocated. torchvision is not a dependency, so the definitions are
here (standard layer shapes; the parameter counts are checked in the tests: 25,557,032, 138,357,544 and
109,482,240).

From a model: DDP's buckets (its assignment by size: parameters in reverse order, the first bucket up to
1 MiB, the others up to 25 MiB) and, given a FLOP rate, when each bucket is ready in the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from host_agent import workloads

from .timeline import Bucket, StepProfile

__all__ = [
    "MODELS",
    "build",
    "LayerCost",
    "layer_costs",
    "ddp_buckets",
    "flop_profile",
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
]

DDP_BUCKET_BYTES = 25 * 2**20  # torch's bucket_cap_mb = 25
DDP_FIRST_BUCKET_BYTES = 2**20  # dist._DEFAULT_FIRST_BUCKET_BYTES


# ---- ResNet-50 (He et al. 2016, torchvision's layout: stride on the 3x3 conv) ------------------------


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    input_shape = (3, 224, 224)

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.relu, self.pool = nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.pool(self.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---- VGG-16 (configuration D, no batch norm) -------------------------------------------------------


class VGG16(nn.Module):
    input_shape = (3, 224, 224)
    CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers, cin = [], 3
        for v in self.CONFIG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
                cin = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, classes)
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


# ---- BERT-base (12 layers, hidden 768, 12 heads, FFN 3072, vocabulary 30522, 512 positions) ---------


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.output = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.softmax(q @ k.transpose(-1, -2) / (h // self.heads) ** 0.5, dim=-1)
        return self.output((scores @ v).transpose(1, 2).reshape(b, s, h))

    def own_flops(self, x_shape) -> float:
        """QKᵀ and the weighted sum of V: 2 · 2 · b · s² · h multiply-adds counted as FLOPs."""
        b, s, h = x_shape
        return 4.0 * b * s * s * h


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.attention, self.norm1 = SelfAttention(hidden, heads), nn.LayerNorm(hidden)
        self.ffn_in, self.act, self.ffn_out = nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ffn_out(self.act(self.ffn_in(x))))


class BertBase(nn.Module):
    seq_len = 128

    def __init__(
        self,
        vocab: int = 30522,
        hidden: int = 768,
        layers: int = 12,
        heads: int = 12,
        ffn: int = 3072,
        positions: int = 512,
    ):
        super().__init__()
        self.word, self.position, self.token_type = (
            nn.Embedding(vocab, hidden),
            nn.Embedding(positions, hidden),
            nn.Embedding(2, hidden),
        )
        self.norm = nn.LayerNorm(hidden)
        self.encoder = nn.Sequential(*[EncoderLayer(hidden, heads, ffn) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        x = self.norm(self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids)))
        return torch.tanh(self.pooler(self.encoder(x)[:, 0]))


def testbed_mlp(name: str) -> nn.Module:
    """The testbed's digits MLP ``name`` as it trains (host_agent.workloads defines it once), with the
    input shape example_input reads."""
    model = workloads.mlp_digits(*workloads.MLP_SHAPES[name])
    model.input_shape = (workloads.DIGITS_FEATURES,)
    return model


MODELS = {
    "resnet50": ResNet50,
    "vgg16": VGG16,
    "bert-base": BertBase,
    "mlp-digits": lambda: testbed_mlp("mlp-digits"),
    "mlp2-digits": lambda: testbed_mlp("mlp2-digits"),
}


def build(name: str) -> nn.Module:
    """The model ``name`` with its parameters on the meta device (shapes only)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    with torch.device("meta"):
        return MODELS[name]()


def example_input(model: nn.Module, batch: int) -> torch.Tensor:
    if isinstance(model, BertBase):
        return torch.zeros(batch, model.seq_len, dtype=torch.long, device="meta")
    return torch.zeros(batch, *model.input_shape, device="meta")


@dataclass(frozen=True)
class LayerCost:
    """One module in forward order: its own forward FLOPs and the parameters it owns directly."""

    name: str
    flops: float
    params: tuple[str, ...]


def layer_costs(model: nn.Module, batch: int) -> list[LayerCost]:
    """Modules in the order their forward ends, with the FLOPs of convolutions, linear layers and attention
    (2 per multiply-add; normalisation and activations are not counted). Runs the model on meta tensors."""
    names = {m: n for n, m in model.named_modules()}
    order: list[LayerCost] = []

    def post(module, inputs, output):
        flops = 0.0
        if isinstance(module, nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
            flops = 2.0 * k * output.numel()
        elif isinstance(module, nn.Linear):
            flops = 2.0 * module.in_features * output.numel()
        elif isinstance(module, SelfAttention):
            flops = module.own_flops(inputs[0].shape)
        prefix = f"{names[module]}." if names[module] else ""
        params = tuple(prefix + p for p, _ in module.named_parameters(recurse=False))
        if flops or params:
            order.append(LayerCost(names[module], flops, params))

    handles = [m.register_forward_hook(post) for m in model.modules()]
    try:
        with torch.no_grad():
            model(example_input(model, batch))
    finally:
        for h in handles:
            h.remove()
    return order


def ddp_buckets(
    model: nn.Module, bucket_bytes: int = DDP_BUCKET_BYTES, first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES
) -> list[list[str]]:
    """Parameter names per bucket as DDP assigns them at construction: in reverse order of
    ``model.parameters()``, a bucket closes once it holds at least its limit (the first bucket's, then
    ``bucket_bytes``). Bucket 0 holds the last layers, whose gradients are ready first."""
    buckets, current, size = [], [], 0
    limit = first_bucket_bytes
    for name, p in reversed(list(model.named_parameters())):
        current.append(name)
        size += p.numel() * p.element_size()
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0, bucket_bytes
    if current:
        buckets.append(current)
    return buckets


def flop_profile(
    model: nn.Module,
    batch: int,
    flops_per_s: float,
    optimizer_s: float = 0.0,
    layer_backward_s: dict[str, float] | None = None,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES,
    name: str = "",
) -> StepProfile:
    """The step of ``model`` on a device of ``flops_per_s`` (achieved, not peak): forward = its FLOPs,
    backward = twice those, layer by layer in reverse order; a bucket is ready when its last parameter's
    layer is done. ``layer_backward_s`` (module name -> seconds) replaces the FLOP estimate of the layers
    it names (a measured trace)."""
    layers = layer_costs(model, batch)
    layer_backward_s = dict(layer_backward_s or {})
    unknown = sorted(set(layer_backward_s) - {layer.name for layer in layers})
    if unknown:
        raise ValueError(f"layer_backward_ms names modules the model does not have: {', '.join(unknown[:5])}")
    forward = sum(layer.flops for layer in layers) / flops_per_s
    ready, t = {}, 0.0
    for layer in reversed(layers):
        t += layer_backward_s.get(layer.name, 2.0 * layer.flops / flops_per_s)
        for p in layer.params:
            ready[p] = t
    sizes = dict((n, p.numel()) for n, p in model.named_parameters())
    buckets = tuple(
        Bucket(i, sum(sizes[p] for p in names), max(ready[p] for p in names))
        for i, names in enumerate(ddp_buckets(model, bucket_bytes, first_bucket_bytes))
    )
    return StepProfile(buckets, forward, t, optimizer_s, name=name)
