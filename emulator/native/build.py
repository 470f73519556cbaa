"""The switch's C builds: native_build's compile-and-cache step with the flags the generated program and
the port loop need, and this folder's headers (driver.h, sw_api.h, ...) on the include path.

    from emulator.native.build import build_native
    lib = ctypes.CDLL(str(build_native([generated_c_text, PORTLOOP_C], "sw_prog")))
"""

from pathlib import Path

from native_build import build_shared

NATIVE_DIR = Path(__file__).resolve().parent
# -g: a gdb or sanitizer report names the P4 lines (#line); -pthread: the port loop's threads; the generated
# program has labels and helpers it may not use
FLAGS = ("-O2", "-g", "-pthread", "-Wall", "-Wno-unused-label", "-Wno-unused-function")


def build_native(sources: list[Path | str], name: str, extra_flags: list[str] | tuple[str, ...] = ()) -> Path:
    """Compile `sources` (Paths or C text) with FLAGS + `extra_flags` into the cache; the object's path."""
    return build_shared(sources, name, (*FLAGS, *extra_flags), include_dirs=(NATIVE_DIR,))
