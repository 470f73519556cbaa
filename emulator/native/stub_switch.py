"""The native port loop compiled with a stub switch (stub_switch.c) that only rewrites MACs and routes by
port: the port loop alone, without a pipeline, for its tests and for bench_switch_ports (the ceiling of
the native backend's I/O)."""

import ctypes
from pathlib import Path

from emulator.native.build import build_native
from emulator.native.portloop import PORTLOOP_C, declare_portloop_api

STUB_C = Path(__file__).resolve().parent / "stub_switch.c"


def stub_library_path(extra_flags=()) -> Path:
    return build_native([PORTLOOP_C, STUB_C], "portloop_stub", list(extra_flags))


def load_stub_library(extra_flags=()) -> ctypes.CDLL:
    """portloop.c + stub_switch.c as one loaded library, every function declared."""
    lib = declare_portloop_api(ctypes.CDLL(str(stub_library_path(extra_flags)), use_errno=True))
    lib.stub_route.restype = None
    lib.stub_route.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int32, ctypes.c_char_p]
    lib.stub_processed.restype = ctypes.c_uint64
    lib.stub_processed.argtypes = [ctypes.c_void_p]
    return lib


class StubSwitch:
    """One stub sw_t: `route(in_port, out_port, dst_mac=None)` sets where frames go."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.handle = lib.sw_create()

    def route(self, in_port: int, out_port: int, dst_mac: bytes | None = None) -> None:
        self.lib.stub_route(self.handle, in_port, out_port, dst_mac)

    @property
    def processed(self) -> int:
        return self.lib.stub_processed(self.handle)

    def close(self) -> None:
        if self.handle:
            self.lib.sw_destroy(self.handle)
            self.handle = None
