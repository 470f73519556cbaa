"""The native backend: the BMv2 JSON compiled to C, built with the system compiler, loaded with ctypes.

`load_native` is what `SoftwareSwitch.from_json(..., backend="native"|"auto")` calls; the Python
engine (emulator/engine/) stays the reference implementation and the fallback. `c_source` is the C
alone, not compiled (`thc-switch --dump-generated FILE --backend native`).
"""

import logging

from emulator.errors import UnsupportedConstruct

log = logging.getLogger("emulator.switch")


def c_source(cfg, program, drop_port=511) -> str:
    """The C the native backend would compile for `program` (UnsupportedConstruct when it cannot)."""
    from emulator.native.cgen import generate_c

    try:
        return generate_c(cfg, program, drop_port)
    except UnsupportedConstruct as exc:
        raise UnsupportedConstruct(f"native backend: {exc}") from None


def load_native(cfg, program, drop_port, trace_level, sanitize=False, required=False):
    """A NativeSwitch for `program`, or None (after a one-line notice) when `required` is false and
    the native backend cannot run it: a construct it does not support, or no C compiler."""
    from emulator.native.native_switch import NativeSwitch
    from native_build import NativeBuildError

    try:
        return NativeSwitch(program, cfg, drop_port=drop_port, trace_level=trace_level, sanitize=sanitize)
    except UnsupportedConstruct as exc:
        if required:
            raise UnsupportedConstruct(f"native backend: {exc}") from None
        log.warning("native backend: %s; running the Python backend instead", exc)
    except NativeBuildError as exc:
        if required:
            raise
        log.warning("native backend unavailable (%s); running the Python backend instead", str(exc).splitlines()[0])
    return None
