"""thc-worker's modes and their families: which need the switch's THC service, which go through parameter
servers, which survive a failed worker. One place, for the worker, its command line and thc-run."""

TABLE_MODES = ("thc", "terngrad-switch")  # the job's table codec through the switch (thc.ddp.thc_hook)
BACKEND_MODES = {"thc-backend": "thc", "fix32-backend": "fix32"}  # -> the "thc" backend's THC_MODE
SWITCH_MODES = (*TABLE_MODES, "fix32", *BACKEND_MODES, "plan")  # the modes that need the switch's THC service
PS_MODES = {"thc-ps": "thc", "fix32-ps": "fix32"}  # through parameter servers (--servers) -> the codec's mode
FAILOVER_MODES = (*TABLE_MODES, "fix32")  # the modes that go on without a failed worker (--membership)
GLOO_MODES = ("gloo", "fp16", "powersgd", "topk", "qsgd", "terngrad")  # thc.hooks.GLOO_MODES
MODES = ("thc", "fix32", *GLOO_MODES, "terngrad-switch", *BACKEND_MODES, "plan", *PS_MODES)


def codec_mode(mode: str) -> str:
    """The switch mode whose codec and hook a mode uses: a ps mode's, else the mode itself."""
    return PS_MODES.get(mode, mode)


def uses_job(mode: str) -> bool:
    """Does the mode aggregate in a THC job (on the switch or on parameter servers)?"""
    return mode in SWITCH_MODES or mode in PS_MODES
