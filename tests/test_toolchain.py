"""tests/support/toolchain.py: a test needing BMv2, p4c or a C compiler skips where it is missing, unless
THC_REQUIRE_TOOLCHAIN is set (.ci/run sets it once it has installed the toolchain); then it fails, naming
what is missing. The tools are hidden here by an empty PATH (and no BMv2 folders)."""

import re
import subprocess
import sys

import pytest

import topologies.targets
from tests.support import bmv2, paths, sanitizers, toolchain
from tests.support.native import require_c_compiler

FAILED = pytest.fail.Exception
SKIPPED = pytest.skip.Exception


@pytest.fixture
def no_tools(tmp_path, monkeypatch):
    """No simple_switch_grpc, simple_switch_CLI, p4c or gcc to be found."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(topologies.targets, "BMV2_DIRS", ())
    return tmp_path


@pytest.mark.parametrize("required", [False, True], ids=["user", "ci"])
def test_each_missing_tool_skips_or_fails_naming_it(no_tools, monkeypatch, required):
    if required:
        monkeypatch.setenv(toolchain.REQUIRE, "1")
    else:
        monkeypatch.delenv(toolchain.REQUIRE, raising=False)
    outcome = FAILED if required else SKIPPED
    assert bmv2.bmv2_binary() is None
    cases = {
        "simple_switch_grpc": lambda: bmv2.Bmv2Process(no_tools / "bmv2"),
        "simple_switch_CLI": lambda: bmv2.read_registers(9090, ["thc_job_events"]),
        "gcc": require_c_compiler,
        "libasan": sanitizers.require_libasan,
    }
    for name, run in cases.items():
        with pytest.raises(outcome, match=re.escape(name)) as raised:
            run()
        assert (toolchain.REQUIRE in str(raised.value)) == required, name
    assert not (no_tools / "bmv2").exists()  # nothing started


def test_the_mark_is_nothing_while_the_tool_is_found_and_a_setup_failure_when_required(no_tools, monkeypatch):
    monkeypatch.setenv(toolchain.REQUIRE, "1")
    assert toolchain.unless_installed("/usr/bin/p4c", "p4c").name == "skipif"
    assert toolchain.unless_installed("/usr/bin/p4c", "p4c").args == (False,)
    assert bmv2.needs_bmv2().name == toolchain.MARK
    monkeypatch.setenv(toolchain.REQUIRE, "0")
    assert bmv2.needs_bmv2().name == "skipif" and bmv2.needs_bmv2().args == (True,)


TEST_FILE = """
import shutil
from tests.support.toolchain import unless_installed

pytestmark = unless_installed(shutil.which("p4c-bm2-ss"), "p4c-bm2-ss (p4c's BMv2 backend)")

def test_compiles():
    pass
"""


@pytest.mark.parametrize("required", [False, True], ids=["user", "ci"])
def test_a_marked_test_is_reported_skipped_or_failed(no_tools, required):
    """A whole pytest run, as CI's: tests/conftest.py's hook turns the mark into a test failed at its setup."""
    (no_tools / "test_marked.py").write_text(TEST_FILE)
    hooks = "from tests.support.toolchain import pytest_configure, pytest_runtest_setup  # noqa\n"
    (no_tools / "conftest.py").write_text(hooks)
    env = {"PATH": str(no_tools / "empty-bin"), "PYTHONPATH": str(paths.REPO)}
    if required:
        env[toolchain.REQUIRE] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", str(no_tools / "test_marked.py")],
        cwd=no_tools,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    if required:
        assert done.returncode == 1 and "1 error" in out and "warning" not in out, out  # failed at setup
        assert "p4c-bm2-ss (p4c's BMv2 backend) is not installed" in out and toolchain.REQUIRE in out, out
    else:
        assert done.returncode == 0 and "1 skipped" in out, out


def test_ci_requires_the_toolchain_once_it_has_installed_it():
    script = (paths.REPO / ".ci" / "run").read_text()
    installed = script.index('bash "$p4_toolchain"')
    required = script.index(f"export {toolchain.REQUIRE}=1")
    assert installed < required < script.index("make test") and required < script.index("else")


SKIP_CALL = re.compile(r"(pytest\.skip\(|skipif\()(?P<args>[^\n]*(\n[^\n]*){0,2})")
TOOLS = re.compile(r"simple_switch|p4c|compiler|libasan|thrift", re.IGNORECASE)


def test_no_test_skips_for_a_missing_tool_past_the_rule():
    """Every skip for BMv2, p4c or a compiler goes through tests/support/toolchain.py."""
    offenders = []
    for path in sorted((paths.REPO / "tests").rglob("*.py")):
        if path.name in ("toolchain.py", "test_toolchain.py") or "fixtures" in path.parts:
            continue
        for call in SKIP_CALL.finditer(path.read_text()):
            if TOOLS.search(call["args"]):
                offenders.append(f"{path.relative_to(paths.REPO)}: {call[0].splitlines()[0]}")
    assert not offenders, offenders
