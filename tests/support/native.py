"""The one rule for tests of the project's C (emulator/native, host_agent/native, the port loop's stub):
a machine without a C compiler skips them; a compiler that rejects the project's C fails them.

    lib = build_or_skip(load_stub_library)          # skipped without cc/gcc, the compiler's error otherwise
    require_c_compiler()                            # before code that swallows build errors (host_agent)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from native_build import CompilerMissing, check_compiler
from tests.support.toolchain import missing

T = TypeVar("T")


def require_c_compiler() -> None:
    """Skip the calling test where no C compiler runs (the message says what to install), and only there;
    fail it there where the toolchain is required (tests/support/toolchain.py)."""
    try:
        check_compiler()
    except CompilerMissing as exc:
        missing(str(exc))


def build_or_skip(build: Callable[..., T], *args, **kwargs) -> T:
    """`build(*args, **kwargs)` after require_c_compiler(): a NativeBuildError it raises (the compiler
    rejected the sources) is not caught, so the test fails with the compiler's output."""
    require_c_compiler()
    return build(*args, **kwargs)
