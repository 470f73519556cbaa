"""The registry of aggregation modes: the one module that spells a mode's name and says what it needs.

A mode is how a worker's gradients are summed: through the switch's THC service, by parameter servers on
hosts, or over torch's process group (gloo). Everything else (thc-worker's and thc-run's choices, the DDP
hooks, the torch.distributed backend, the probes, the per-bucket plans and the timeline model) reads the
names and families here, the way torch's ``DDPCommHookType`` registers every hook once. It lives in ``thc``,
below every reader (the hooks in ``ddp``, the planner, the workers), since thc imports nothing above it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AggregationMode",
    "REGISTRY",
    "MODES",
    "THC",
    "FIX32",
    "GLOO",
    "FP16",
    "PLAN",
    "TERNGRAD_SWITCH",
    "TABLE_MODES",
    "BACKEND_MODES",
    "SWITCH_MODES",
    "PS_MODES",
    "FAILOVER_MODES",
    "GLOO_MODES",
    "PROBE_MODES",
    "PLANNABLE_MODES",
    "PROBED_PLAN_MODES",
    "RUN_DEFAULT",
    "codec_mode",
    "uses_job",
]

SWITCH, SERVERS, GROUP = "switch", "servers", "gloo"  # where a mode's sums are made


@dataclass(frozen=True)
class AggregationMode:
    """One mode and what it needs. ``codec``: the switch mode whose codec and hook it borrows (a ps or a
    backend mode's), None for the switch and gloo modes themselves."""

    name: str
    sums_on: str  # SWITCH, SERVERS or GROUP
    codec: str | None = None
    table: bool = False  # the codec is the job's table (ddp.aggregator_hooks.thc_hook); a switch mode without it: fix32
    backend: bool = False  # no hook: DDP's own all-reduce goes to the "thc" torch.distributed backend
    failover: bool = False  # goes on without a failed worker (thc-worker --membership)
    probe: bool = False  # thc-worker --probe can time its rounds
    label: str | None = None  # its name in thc-run's tables and plots


THC, FIX32, GLOO, FP16 = "thc", "fix32", "gloo", "fp16"
TERNGRAD_SWITCH, PLAN = "terngrad-switch", "plan"

REGISTRY: dict[str, AggregationMode] = {
    m.name: m
    for m in (
        AggregationMode(THC, SWITCH, table=True, failover=True, probe=True, label="THC via switch"),
        AggregationMode(FIX32, SWITCH, failover=True, probe=True, label="FIX32 via switch"),
        AggregationMode(GLOO, GROUP, probe=True, label="gloo all-reduce"),  # DDP's own fp32 all-reduce
        AggregationMode(FP16, GROUP, label="fp16 hook (gloo)"),  # torch's fp16_compress_hook
        AggregationMode("powersgd", GROUP, label="PowerSGD hook (gloo)"),  # torch's PowerSGD hook
        AggregationMode("topk", GROUP, label="TopK+EF hook (gloo)"),  # thc's baselines, all-gathered (ddp.gloo_hooks)
        AggregationMode("qsgd", GROUP, label="QSGD hook (gloo)"),
        AggregationMode("terngrad", GROUP, label="TernGrad hook (gloo)"),
        AggregationMode(TERNGRAD_SWITCH, SWITCH, table=True, failover=True, probe=True),  # a shared scale
        AggregationMode("thc-backend", SWITCH, codec=THC, backend=True, label="THC backend (DDP, no hook)"),
        AggregationMode("fix32-backend", SWITCH, codec=FIX32, backend=True, label="FIX32 backend (DDP, no hook)"),
        AggregationMode(PLAN, SWITCH),  # each DDP bucket through the mode planner chose for it
        # a ps mode may name a placement of servers: thc-ps:colocated4
        AggregationMode("thc-ps", SERVERS, codec=THC, probe=True, label="THC via PS"),
        AggregationMode("fix32-ps", SERVERS, codec=FIX32, probe=True, label="FIX32 via PS"),
    )
}

MODES = tuple(REGISTRY)  # thc-worker's --mode and thc-run's --modes choices
TABLE_MODES = tuple(m.name for m in REGISTRY.values() if m.table)
BACKEND_MODES = {m.name: m.codec for m in REGISTRY.values() if m.backend}  # -> the backend's THC_MODE
SWITCH_MODES = tuple(m.name for m in REGISTRY.values() if m.sums_on == SWITCH)  # need the switch's THC service
PS_MODES = {m.name: m.codec for m in REGISTRY.values() if m.sums_on == SERVERS}  # -> the codec's mode
FAILOVER_MODES = tuple(m.name for m in REGISTRY.values() if m.failover)
GLOO_MODES = tuple(m.name for m in REGISTRY.values() if m.sums_on == GROUP)  # ddp.gloo_hooks.make_gloo_hook
PROBE_MODES = tuple(m.name for m in REGISTRY.values() if m.probe)
# what a plan's bucket may take (ddp.mixed, the timeline model), uncompressed first: the planner's ties go
# to the first
PLANNABLE_MODES = (GLOO, FP16, FIX32, THC)
PROBED_PLAN_MODES = (THC, FIX32, GLOO)  # the plannable modes --probe can time (not fp16): thc-run --modes plan
RUN_DEFAULT = (THC, FIX32, GLOO)  # thc-run's (and make run's) default --modes


def codec_mode(mode: str) -> str:
    """The switch mode whose codec and hook a mode uses: a ps mode's, else the mode itself."""
    return PS_MODES.get(mode, mode)


def uses_job(mode: str) -> bool:
    """Does the mode aggregate in a THC job (on the switch or on parameter servers)?"""
    return mode in SWITCH_MODES or mode in PS_MODES
