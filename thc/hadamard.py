"""Walsh–Hadamard transforms and THC's randomized Hadamard transform (RHT).

On the CPU the transform is k radix-2 butterfly stages in a fixed order, so each output is a fixed sequence
of IEEE-754 additions and a C loop running the same stages (thc/native/codec.c) reproduces it bit for bit:
that is what lets the native codec be checked against this reference exactly. On other devices (CUDA) it is
a few matmul stages (H_n = H_r1 (x) ... (x) H_rs, each r_i <= 64), whose summation order the BLAS chooses,
so bit-identity holds on the CPU only.

The RHT of a chunk v is r = H (D v) / sqrt(d), D a diagonal of random signs drawn from a seed shared by all
workers afresh for every (round, tensor, chunk): no randomness on the wire, no D reused across rounds. The
inverse is D H r / sqrt(d)."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from numpy.random.bit_generator import ISeedSequence

from .errors import ConfigError
from .intraop import one_thread_if_small
from .streams import spawn_seeds
from .workspace import Workspace

__all__ = [
    "MAX_RADIX",
    "fwht",
    "hadamard_matrix",
    "stage_radices",
    "sign_bits",
    "sign_bit_rows",
    "sign_stream_prefix",
    "sign_mask",
    "sign_masks",
    "flip_signs_",
    "randomized_hadamard",
    "inverse_randomized_hadamard",
]

MAX_RADIX = 64
_SIGN_DOMAIN = 0x5349474E  # "SIGN": keeps the sign streams apart from every other use of the seed


@functools.lru_cache(maxsize=64)
def _hadamard_cpu(r: int, dtype: torch.dtype) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=dtype)
    while h.shape[0] < r:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def hadamard_matrix(r: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """The r x r Sylvester Hadamard matrix (entries +-1, unnormalised)."""
    if r < 1 or r & (r - 1):
        raise ConfigError(f"Hadamard size {r} is not a power of two")
    return _hadamard(r, dtype, torch.device(device))


@functools.lru_cache(maxsize=64)
def _hadamard(r: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return _hadamard_cpu(r, dtype) if device.type == "cpu" else _hadamard_cpu(r, dtype).to(device)


def stage_radices(n: int) -> list[int]:
    """Split log2(n) into the fewest stages of at most log2(MAX_RADIX) bits, as evenly as possible."""
    if n < 1 or n & (n - 1):
        raise ConfigError(f"Walsh–Hadamard length {n} is not a power of two")
    return list(_radices(n))


@functools.lru_cache(maxsize=64)
def _radices(n: int) -> tuple[int, ...]:
    k = n.bit_length() - 1
    if k == 0:
        return ()
    per = int(math.log2(MAX_RADIX))
    stages = -(-k // per)
    base, extra = divmod(k, stages)
    return tuple(2 ** (base + (1 if i < extra else 0)) for i in range(stages))


def fwht(
    x: torch.Tensor,
    out: torch.Tensor | None = None,
    workspace: Workspace | None = None,
    scale: float = 1.0,
    shift: float = 0.0,
) -> torch.Tensor:
    """Unnormalised Walsh–Hadamard transform of the last dimension (Sylvester order): H x, with H H = n I.

    x: float tensor (..., n), n a power of two; it is not modified. out: optional contiguous tensor of x's
    shape for the result. workspace: scratch buffers reused across calls (faster for large n).
    Returns scale * H x + shift. On the CPU: radix-2 butterflies, then the scale and the shift as two more
    ops (never fused, so every step is one rounding); elsewhere matmul stages with the affine map fused into
    the last one (addmm). A small transform runs on one thread (thc.intraop).
    """
    if not x.is_floating_point():
        raise ConfigError(f"fwht needs a floating-point tensor, got {x.dtype}")
    n = x.shape[-1] if x.dim() > 0 else 1
    radices = stage_radices(n)
    batch = x.numel() // n if n else 0
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if not radices:
        out.copy_(x)
        if scale != 1.0:
            out.mul_(scale)
        return out.add_(shift) if shift != 0.0 else out
    ws = workspace if workspace is not None else Workspace()
    with one_thread_if_small(batch * n, x.device):
        if x.device.type == "cpu":
            _butterflies(x.reshape(batch * n), out.view(-1), n, ws)
            if scale != 1.0:
                out.mul_(scale)
            return out.add_(shift) if shift != 0.0 else out
        _matmul_stages(x.reshape(batch * n), out, batch, n, radices, ws, scale, shift)
    return out


def _butterflies(src: torch.Tensor, out: torch.Tensor, n: int, ws: Workspace) -> None:
    """out = H src for rows of n points: stage h = 1, 2, ..., n/2 maps (a, b) at distance h to (a+b, a-b).

    Stages alternate between out and a scratch buffer, arranged so that the last one writes out.
    """
    stages = n.bit_length() - 1
    if src.data_ptr() == out.data_ptr():  # the first stage must not overwrite what it still reads
        src = src.clone()
    spare = ws.get("fwht.ping", src.numel(), src.dtype, src.device) if stages > 1 else out
    for k in range(stages):
        h = 1 << k
        dst = out if (stages - 1 - k) % 2 == 0 else spare
        a, b = src.view(-1, 2, h), dst.view(-1, 2, h)
        torch.add(a[:, 0], a[:, 1], out=b[:, 0])
        torch.sub(a[:, 0], a[:, 1], out=b[:, 1])
        src = dst


def _matmul_stages(
    src: torch.Tensor,
    out: torch.Tensor,
    batch: int,
    n: int,
    radices: list[int],
    ws: Workspace,
    scale: float,
    shift: float,
) -> None:
    """out = scale * H src + shift as matmul stages of radix <= MAX_RADIX (non-CPU devices).

    The stages call mm and bmm, the kernels torch.matmul would pick, without its dispatch.
    """
    x = src
    ping = ws.get("fwht.ping", batch * n, x.dtype, x.device) if len(radices) > 1 else None
    pong = ws.get("fwht.pong", batch * n, x.dtype, x.device) if len(radices) > 2 else None
    a = batch
    for i, r in enumerate(radices):
        b = n * batch // (a * r)
        last = i == len(radices) - 1
        dst = out.view(-1) if last else (ping if i % 2 == 0 else pong)
        h = _hadamard(r, x.dtype, x.device)
        if b == 1:  # always the last stage: a plain GEMM, with the affine map fused in
            if last and (scale != 1.0 or shift != 0.0):
                bias = torch.full((1,), shift, dtype=x.dtype, device=x.device)
                torch.addmm(bias, src.view(a, r), h, beta=1, alpha=scale, out=dst.view(a, r))
            else:
                torch.mm(src.view(a, r), h, out=dst.view(a, r))
        elif a == 1:
            torch.mm(h, src.view(r, b), out=dst.view(r, b))
        else:  # H applied to each of a matrices: matmul's broadcast, as one bmm
            torch.bmm(h.expand(a, r, r), src.view(a, r, b), out=dst.view(a, r, b))
        src = dst
        a *= r


def sign_bits(seed: int, step: int, key: int, chunk: int, n: int) -> np.ndarray:
    """n random sign bits, packed 8 per byte, shared by all workers for (seed, step, key, chunk).

    Drawn from numpy's SeedSequence/PCG64, so every worker (and every device) gets the same bits: the
    bytes of numpy's Generator.bytes (the 64-bit draws, little-endian), read without building a Generator.
    """
    return _packed_bits(np.random.SeedSequence(entropy=seed, spawn_key=(_SIGN_DOMAIN, key, step, chunk)), n)


def sign_stream_prefix(step: int, key: int) -> tuple[int, int, int]:
    """The spawn key of a round's sign streams without the chunk: chunk c's is this + (c,)."""
    return (_SIGN_DOMAIN, key, step)


def sign_bit_rows(seed: int, step: int, key: int, first: int, count: int, n: int) -> np.ndarray:
    """sign_bits of chunks first .. first + count - 1 (each of n coordinates), one row per chunk."""
    rows = np.empty((count, (n + 7) // 8), dtype=np.uint8)
    for row, seed_seq in zip(rows, spawn_seeds(seed, sign_stream_prefix(step, key), first, count)):
        row[:] = _packed_bits(seed_seq, n)
    return rows


def _packed_bits(seed_seq: ISeedSequence, n: int) -> np.ndarray:
    raw = np.random.PCG64(seed_seq).random_raw((n + 63) // 64)
    return raw.astype("<u8", copy=False).view(np.uint8)[: (n + 7) // 8]


# byte -> its 8 bits, most significant first, as float32 sign-bit masks (0 or 0x80000000)
_SIGN_LUT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.uint32) << np.uint32(31)


def sign_mask(bits: np.ndarray, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """Expand packed sign bits (first coordinate in the high bit) into float32 sign-bit masks for n coordinates."""
    mask = np.take(_SIGN_LUT, bits[: (n + 7) // 8].astype(np.intp), axis=0).reshape(-1)[:n]
    if out is None:
        return mask
    out[:] = mask
    return out


def sign_masks(rows: np.ndarray, n: int) -> np.ndarray:
    """sign_mask of every row of packed bits (one row per chunk of n coordinates), concatenated."""
    masks = np.take(_SIGN_LUT, rows[:, : (n + 7) // 8].astype(np.intp), axis=0).reshape(len(rows), -1)
    return masks[:, :n].reshape(-1)


def flip_signs_(x: torch.Tensor, mask: np.ndarray) -> torch.Tensor:
    """x <- D x in place for a contiguous float32 tensor, by xor-ing the float sign bits with the mask."""
    if x.dtype != torch.float32:
        raise ConfigError(f"flip_signs_ works on float32 tensors, got {x.dtype}")
    if x.device.type == "cpu":
        xv = x.numpy().view(np.uint32)
        np.bitwise_xor(xv, mask[: x.numel()], out=xv)
    else:
        m = torch.from_numpy(mask[: x.numel()].view(np.int32)).to(x.device)
        x.view(torch.int32).bitwise_xor_(m)
    return x


def randomized_hadamard(x: torch.Tensor, seed: int, step: int = 0, key: int = 0, chunk: int = 0) -> torch.Tensor:
    """Orthonormal RHT of a 1-D float32 tensor whose length is a power of two: H (D x) / sqrt(d)."""
    d = x.numel()
    mask = sign_mask(sign_bits(seed, step, key, chunk, d), d)
    y = flip_signs_(x.detach().to(torch.float32).clone().contiguous(), mask)
    return fwht(y).mul_(1.0 / math.sqrt(d))


def inverse_randomized_hadamard(
    r: torch.Tensor, seed: int, step: int = 0, key: int = 0, chunk: int = 0
) -> torch.Tensor:
    """Inverse of :func:`randomized_hadamard`: D H r / sqrt(d)."""
    d = r.numel()
    mask = sign_mask(sign_bits(seed, step, key, chunk, d), d)
    y = fwht(r.detach().to(torch.float32).contiguous()).mul_(1.0 / math.sqrt(d))
    return flip_signs_(y, mask)
