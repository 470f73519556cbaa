"""Hardware profiles: the cluster a projection or a plan is for, from a JSON file or a preset, and the
aggregation modes (name -> timeline.Mode) its costs give.

A profile is what the projection cannot measure on this testbed (a GPU's compute, a line-rate switch,
a datacenter's links); its fields are in docs/planner.md ("Hardware profiles"). A field of the wrong type
or range is refused in one line that names it (``ProfileError``).
Mode names are the testbed's hook modes (ddp.mixed), as thc/modes.py names them: ``thc`` and ``fix32``
through the switch, ``gloo`` (ring all-reduce, fp32) and ``fp16``; ``topk-allgather`` (TopK 1 % values +
indices, all-gathered: a compressor whose payloads cannot be summed) exists only in projections.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import contract
from thc.limits import DEFAULT_CHUNK
from thc.modes import FIX32, FP16, GLOO, PLANNABLE_MODES, THC

from .timeline import CELL_BYTES, AllGatherCost, INACost, LinearCost, Mode, RingCost

__all__ = [
    "ProfileError",
    "HardwareProfile",
    "PRESETS",
    "load_profile",
    "preset",
    "modes_for",
    "EXECUTABLE_MODES",
    "MODE_LABELS",
]

EXECUTABLE_MODES = PLANNABLE_MODES  # what ddp.mixed's hook can run, uncompressed first
MODE_LABELS = {
    THC: "THC via switch",
    FIX32: "FIX32 via switch",
    GLOO: "ring all-reduce fp32 (gloo)",
    FP16: "ring all-reduce fp16 (gloo)",
    "topk-allgather": "TopK 1% + all-gather",
}


class ProfileError(ValueError):
    """A profile file or field that cannot be used; the message is one line naming the field."""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    workers: int
    link_bps: float
    switch: dict = field(default_factory=dict)
    ring: dict = field(default_factory=dict)
    compute: dict = field(default_factory=dict)
    compression: dict = field(default_factory=dict)

    def with_link(self, link_bps: float, workers: int | None = None) -> HardwareProfile:
        return HardwareProfile(
            self.name, workers or self.workers, link_bps, self.switch, self.ring, self.compute, self.compression
        )

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "workers": self.workers,
            "link_gbps": self.link_bps / 1e9,
            "switch": self.switch,
            "ring": self.ring,
            "compute": self.compute,
            "compression": self.compression,
        }


# field -> (type, default, check, what the check means)
_POSITIVE = (lambda v: v > 0, "a number > 0")
_NONNEG = (lambda v: v >= 0, "a number >= 0")
_SECTIONS = {
    "switch": {
        "packets_per_s": _POSITIVE,
        "fix32_packets_per_s": _POSITIVE,
        "rtt_us": _NONNEG,
        "window": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
        "cell_bytes": (lambda v: v >= 8 and v == int(v), "an integer >= 8 (bytes of sum lanes a packet carries)"),
        "header_bytes": _NONNEG,
        "lane_bits": (lambda v: v is None or v in (8, 16), "8, 16 or null"),
        "granularity": _POSITIVE,
        "chunk": (lambda v: v >= 1 and int(v) & (int(v) - 1) == 0, "a power of two"),
        "blocking": (lambda v: isinstance(v, bool), "true or false"),
    },
    "ring": {
        "alpha_us": _NONNEG,
        "efficiency": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
        "max_MBps": (lambda v: v is None or v > 0, "a number > 0 or null"),
    },
    "compute": {
        "gpu_tflops": _POSITIVE,
        "efficiency": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
        "batch_size": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
        "optimizer_ms": _NONNEG,
        "layer_backward_ms": (
            lambda v: (
                isinstance(v, dict)
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in v.values())
            ),
            "an object of module name -> milliseconds >= 0",
        ),
    },
}
_COMPRESSION_FIELDS = ("encode_us", "encode_ns_per_coord", "decode_us", "decode_ns_per_coord")


def _check(where: str, key: str, value, rule) -> None:
    ok, meaning = rule
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
        good = ok(value) if (numeric or value is None or isinstance(value, (bool, dict))) else False
    except TypeError:
        good = False
    if not good:
        raise ProfileError(f"{where}: field '{key}' must be {meaning}, got {json.dumps(value)}")


def parse_profile(data: dict, where: str = "profile") -> HardwareProfile:
    """A HardwareProfile from a parsed file; ProfileError names the first bad field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a profile is a JSON object, got {type(data).__name__}")
    known = {"name", "workers", "link_gbps", "link_mbps", "switch", "ring", "compute", "compression", "comment"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProfileError(f"{where}: unknown field '{unknown[0]}' (known: {', '.join(sorted(known))})")
    if "workers" not in data:
        raise ProfileError(f"{where}: field 'workers' is missing (the number of data-parallel workers)")
    _check(where, "workers", data["workers"], (lambda v: v >= 2 and v == int(v), "an integer >= 2"))
    if ("link_gbps" in data) == ("link_mbps" in data):
        raise ProfileError(f"{where}: give exactly one of fields 'link_gbps' and 'link_mbps'")
    key = "link_gbps" if "link_gbps" in data else "link_mbps"
    _check(where, key, data[key], _POSITIVE)
    link_bps = data[key] * (1e9 if key == "link_gbps" else 1e6)
    sections = {}
    for section, rules in _SECTIONS.items():
        body = data.get(section, {})
        if not isinstance(body, dict):
            raise ProfileError(f"{where}: field '{section}' must be an object, got {json.dumps(body)}")
        for k, v in body.items():
            if k not in rules:
                raise ProfileError(f"{where}: unknown field '{section}.{k}' (known: {', '.join(rules)})")
            _check(where, f"{section}.{k}", v, rules[k])
        sections[section] = dict(body)
    compression = data.get("compression", {})
    if not isinstance(compression, dict):
        raise ProfileError(f"{where}: field 'compression' must be an object, got {json.dumps(compression)}")
    for mode, costs in compression.items():
        if not isinstance(costs, dict):
            raise ProfileError(f"{where}: field 'compression.{mode}' must be an object, got {json.dumps(costs)}")
        for k, v in costs.items():
            if k not in _COMPRESSION_FIELDS:
                raise ProfileError(
                    f"{where}: unknown field 'compression.{mode}.{k}' (known: {', '.join(_COMPRESSION_FIELDS)})"
                )
            _check(where, f"compression.{mode}.{k}", v, _NONNEG)
    name = data.get("name", where)
    if not isinstance(name, str):
        raise ProfileError(f"{where}: field 'name' must be a string, got {json.dumps(name)}")
    return HardwareProfile(
        name,
        int(data["workers"]),
        float(link_bps),
        sections["switch"],
        sections["ring"],
        sections["compute"],
        dict(compression),
    )


def load_profile(path: str | Path) -> HardwareProfile:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(
            f"{path}: cannot read the profile ({exc.strerror}); give a JSON file or a --preset"
        ) from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text (a hardware profile is JSON)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return parse_profile(data, str(path))


# GPU compression costs are estimates, not measurements (no GPU here): THC is a few memory passes
# (RHT in log2(chunk) stages, rounding, a table lookup) at ~900 GB/s; fp16 is one cast.
_GPU_COMPRESSION = {
    THC: {"encode_us": 50, "encode_ns_per_coord": 0.1, "decode_us": 50, "decode_ns_per_coord": 0.1},
    FIX32: {"encode_us": 20, "encode_ns_per_coord": 0.01, "decode_us": 20, "decode_ns_per_coord": 0.01},
    FP16: {"encode_us": 10, "encode_ns_per_coord": 0.005, "decode_us": 10, "decode_ns_per_coord": 0.005},
    "topk-allgather": {"encode_us": 100, "encode_ns_per_coord": 0.3, "decode_us": 50, "decode_ns_per_coord": 0.05},
}

PRESETS = {
    # A Tofino at line rate: each port forwards its link's packets; rtt of a rack; a large window (1024 slots).
    "tofino": {
        "name": "8 x V100 (fp32), Tofino switch",
        "workers": 8,
        "link_gbps": 100,
        "switch": {"packets_per_s": 4.8e9, "rtt_us": 5, "window": 1024, "blocking": False},
        "ring": {"alpha_us": 20, "efficiency": 0.9},
        "compute": {"gpu_tflops": 15.7, "efficiency": 0.45, "batch_size": 32, "optimizer_ms": 2},
        "compression": _GPU_COMPRESSION,
    },
    # BMv2 (simple_switch_grpc) forwards some tens of thousands of packets per second.
    "bmv2": {
        "name": "8 x V100 (fp32), BMv2 switch",
        "workers": 8,
        "link_gbps": 100,
        "switch": {"packets_per_s": 5e4, "rtt_us": 200, "window": 1024, "blocking": False},
        "ring": {"alpha_us": 20, "efficiency": 0.9},
        "compute": {"gpu_tflops": 15.7, "efficiency": 0.45, "batch_size": 32, "optimizer_ms": 2},
        "compression": _GPU_COMPRESSION,
    },
}


def preset(name: str) -> HardwareProfile:
    if name not in PRESETS:
        raise ProfileError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)} or give --profile FILE")
    return parse_profile(PRESETS[name], f"preset {name}")


def _cost(hw: HardwareProfile, mode: str, scale: float) -> tuple[LinearCost, LinearCost]:
    c = hw.compression.get(mode, {})
    return (
        LinearCost(scale * c.get("encode_us", 0) * 1e-6, scale * c.get("encode_ns_per_coord", 0) * 1e-9),
        LinearCost(scale * c.get("decode_us", 0) * 1e-6, scale * c.get("decode_ns_per_coord", 0) * 1e-9),
    )


def modes_for(hw: HardwareProfile, names=EXECUTABLE_MODES, compression_scale: float = 1.0) -> dict[str, Mode]:
    """The aggregation modes ``names`` with this hardware's costs (``compression_scale`` multiplies the
    compression times: CPU contention when several workers share the cores)."""
    s, r = hw.switch, hw.ring
    blocking = bool(s.get("blocking", False))
    ina = dict(
        link_bps=hw.link_bps,
        workers=hw.workers,
        switch_pps=float(s.get("packets_per_s", 4.8e9)),
        rtt_s=float(s.get("rtt_us", 5)) * 1e-6,
        window=int(s.get("window", 1024)),
        cell_bytes=int(s.get("cell_bytes", CELL_BYTES)),
        header_bytes=int(s.get("header_bytes", contract.FRAME_HEADER_BYTES)),
        lane_bits=s.get("lane_bits"),
        granularity=int(s.get("granularity", 30)),
        chunk=int(s.get("chunk", DEFAULT_CHUNK)),
    )
    ring = dict(
        link_bps=hw.link_bps,
        workers=hw.workers,
        alpha_s=float(r.get("alpha_us", 20)) * 1e-6,
        efficiency=float(r.get("efficiency", 0.9)),
    )
    max_Bps = r.get("max_MBps")
    builders = {
        GLOO: lambda: RingCost(bytes_per_coord=4, max_Bps=max_Bps and max_Bps * 1e6, **ring),
        FP16: lambda: RingCost(bytes_per_coord=2, max_Bps=max_Bps and max_Bps * 1e6, **ring),
        FIX32: lambda: INACost(
            op=FIX32, **{**ina, "switch_pps": float(s.get("fix32_packets_per_s", ina["switch_pps"]))}
        ),
        THC: lambda: INACost(op=THC, **ina),
        "topk-allgather": lambda: AllGatherCost(bytes_per_coord=0.01 * 8, **ring),
    }
    out = {}
    for name in names:
        if name not in builders:
            raise ProfileError(f"unknown mode {name!r}: choose from {', '.join(builders)}")
        enc, dec = _cost(hw, name, compression_scale)
        out[name] = Mode(
            name, builders[name](), enc, dec, blocking=blocking and name in (THC, FIX32), label=MODE_LABELS[name]
        )
    return out
