"""The one rule for tests that need the toolchain (BMv2's simple_switch_grpc and simple_switch_CLI, p4c, a C
compiler and its sanitizers): where it is missing they skip, as on a user's machine, unless
THC_REQUIRE_TOOLCHAIN is set. .ci/run sets it once it has installed the toolchain, so there such a skip is a
failure naming what is missing, and "no test skipped for lack of BMv2 or p4c" is checked by the run itself.

    pytestmark = unless_installed(bmv2_binary(), "simple_switch_grpc")   # a mark, evaluated at collection
    missing("simple_switch_CLI")                                          # inside a test or fixture
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE = "THC_REQUIRE_TOOLCHAIN"
MARK = "toolchain_missing"


def required() -> bool:
    """Whether the toolchain must be there (THC_REQUIRE_TOOLCHAIN set to anything but empty or 0)."""
    return os.environ.get(REQUIRE, "") not in ("", "0")


def _required_message(what: str) -> str:
    return f"{what}, but {REQUIRE} is set (the toolchain was installed): a test would have been skipped"


def missing(what: str) -> NoReturn:
    """Skip the calling test because `what` is missing (say what, e.g. "simple_switch_grpc is not
    installed"), or fail it where the toolchain is required."""
    if required():
        pytest.fail(_required_message(what), pytrace=False)
    pytest.skip(what)


def unless_installed(found: object, what: str, reason: str | None = None) -> pytest.MarkDecorator:
    """The mark for a test needing `what`, which was `found` (a path, or None/False where it is missing):
    nothing while it is found, skipif where it is missing, and a failure at setup (pytest_runtest_setup
    below) where it is missing and the toolchain is required. `reason` replaces "<what> is not installed"."""
    reason = reason or f"{what} is not installed"
    if found:
        return pytest.mark.skipif(False, reason=reason)
    if required():
        return getattr(pytest.mark, MARK)(reason)
    return pytest.mark.skipif(True, reason=reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}(what): needs a tool missing while {REQUIRE} is set (fails)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fails (an error at setup) a test marked by unless_installed where the toolchain is required
    (tests/conftest.py imports these hooks)."""
    for mark in item.iter_markers(MARK):
        pytest.fail(_required_message(mark.args[0]), pytrace=False)
