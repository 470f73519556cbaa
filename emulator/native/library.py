"""Generated C -> a loaded shared object: compile with the system C compiler, cache, bind with ctypes.

The C is compiled once per (generated source, compiler flags) and cached, so a switch that restarts
with the same program loads in milliseconds. ctypes rather than cffi: the library's API is a dozen
plain C functions over integers and pointers, ctypes ships with Python (no build step, no new
dependency), and it releases the GIL during every call, which the port loop's thread relies on.
"""

import ctypes

from emulator.native.build import build_native
from emulator.native.portloop import PORTLOOP_C  # compiled into every program's library: it calls sw_process
from native_build import SANITIZER_FLAGS

SW_MAX_OUT = 256
SW_OUT_BUF = 1 << 20
# runtime.h's log_msg_fn: (call index, argument count, the arguments as C's 128-bit V values)
LOG_MSG_FN = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)
# runtime.h's notice_fn: one of the switch's own notices (NOTICE_*), once each
NOTICE_FN = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
NOTICE_COPY_LIMIT = 1


class SwOut(ctypes.Structure):
    """sw_api.h's sw_out_t: the frames one call produced."""

    _fields_ = [
        ("count", ctypes.c_uint32),
        ("used", ctypes.c_uint32),
        ("port", ctypes.c_uint32 * SW_MAX_OUT),
        ("off", ctypes.c_uint32 * SW_MAX_OUT),
        ("len", ctypes.c_uint32 * SW_MAX_OUT),
        ("buf", ctypes.c_uint8 * SW_OUT_BUF),
    ]


def _bind(lib):
    P, U32, U64, I32, I64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    sigs = {
        "sw_create": (P, []),
        "sw_destroy": (None, [P]),
        "sw_lock": (None, [P]),
        "sw_unlock": (None, [P]),
        "sw_process_locked": (ctypes.c_int, [P, U32, ctypes.c_char_p, U32, ctypes.POINTER(SwOut)]),
        "sw_process_batch": (U64, [P, U32, u32p, ctypes.c_void_p, u32p, u32p, ctypes.POINTER(SwOut), ctypes.c_int]),
        "sw_nstats": (U32, []),
        "sw_stats": (None, [P, u64p]),
        "sw_seed": (None, [P, U64]),
        "sw_set_log_msg": (None, [P, LOG_MSG_FN]),
        "sw_set_notice": (None, [P, NOTICE_FN]),
        "sw_tbl_add": (ctypes.c_int, [P, U32, I32, I32, u64p, I64, I64, u64p]),
        "sw_tbl_modify": (ctypes.c_int, [P, U32, I32, I32, u64p]),
        "sw_tbl_delete": (ctypes.c_int, [P, U32, I32]),
        "sw_tbl_clear": (None, [P, U32]),
        "sw_tbl_set_default": (None, [P, U32, I32, u64p]),
        "sw_tbl_counter": (ctypes.c_int, [P, U32, I32, u64p, ctypes.c_int]),
        "sw_tbl_counter_reset": (None, [P, U32]),
        "sw_reg": (ctypes.c_int, [P, U32, U32, u64p, ctypes.c_int]),
        "sw_reg_all": (ctypes.c_int, [P, U32, u64p, ctypes.c_int]),
        "sw_ctr": (ctypes.c_int, [P, U32, U32, u64p, ctypes.c_int]),
        "sw_ctr_reset": (None, [P, U32]),
        "sw_mc_set": (ctypes.c_int, [P, U32, U32, u32p, u32p]),
        "sw_mc_delete": (ctypes.c_int, [P, U32]),
        "sw_vset_set": (ctypes.c_int, [P, U32, U32, u64p]),
        "sw_crc_set": (ctypes.c_int, [P, U32, U32, U64, U64, U64, ctypes.c_int, ctypes.c_int]),
        "sw_mirror_set": (ctypes.c_int, [P, U32, I32, I32]),
        "sw_mirror_delete": (ctypes.c_int, [P, U32]),
        "sw_digest_width": (U32, []),
        "sw_digests": (U32, [P, U32, u32p, u64p]),
        "sw_meter_set": (ctypes.c_int, [P, U32, U32, U32, ctypes.POINTER(ctypes.c_double), u64p]),
        "sw_meter_reset": (ctypes.c_int, [P, U32]),
        "sw_pin_clock": (None, [P, ctypes.c_int, I64]),
        "sw_prof_member": (ctypes.c_int, [P, U32, U32, I32, u64p]),
        "sw_prof_group": (ctypes.c_int, [P, U32, U32, U32, u32p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


# The sanitized build (tests) at -O0: gcc takes 24 s over thc.p4's generated C at -O0 against ~270 s at -O1
# or -Og, and a fuzz campaign runs only seconds of frames a program; the sanitizers check as much at -O0.
SANITIZED_FLAGS = (*SANITIZER_FLAGS, "-O0")


def load_program_library(c_source: str, program_name: str, sanitize: bool = False):
    """Compile (or take from the cache) the generated C of one program; returns the bound library."""
    flags = SANITIZED_FLAGS if sanitize else ()
    name = "sw_" + "".join(c if c.isalnum() else "_" for c in program_name)[:40]
    path = build_native([c_source, PORTLOOP_C], name, extra_flags=flags)
    return _bind(ctypes.CDLL(str(path)))
