"""native_build: the one compile-and-cache step of emulator/native and host_agent/native."""

import pytest

from native_build import CompilerMissing, NativeBuildError, build_shared
from tests.support import toolchain
from tests.support.native import build_or_skip, require_c_compiler


def test_build_shared_caches_by_content_and_names_the_compiler_error(tmp_path, monkeypatch):
    monkeypatch.setenv("THC_NATIVE_CACHE", str(tmp_path / "cache"))
    first = build_shared(["int answer(void) { return 42; }\n"], "answer")
    assert build_shared(["int answer(void) { return 42; }\n"], "answer") == first
    other = build_shared(["int answer(void) { return 43; }\n"], "answer")
    assert other != first and first.exists() and other.exists()
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]  # no scratch dirs left behind
    with pytest.raises(NativeBuildError, match="(?s)compiling broken failed.*error: expected expression"):
        build_shared(["int broken(void) { return }\n"], "broken")


def test_a_changed_header_in_an_include_directory_rebuilds(tmp_path, monkeypatch):
    monkeypatch.setenv("THC_NATIVE_CACHE", str(tmp_path / "cache"))
    include = tmp_path / "include"
    include.mkdir()
    (include / "answer.h").write_text("#define ANSWER 42\n")
    source = '#include "answer.h"\nint answer(void) { return ANSWER; }\n'
    first = build_shared([source], "answer", include_dirs=(include,))
    assert build_shared([source], "answer", include_dirs=(include,)) == first
    (include / "answer.h").write_text("#define ANSWER 43\n")
    assert build_shared([source], "answer", include_dirs=(include,)) != first


def test_build_shared_without_a_compiler_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NativeBuildError, match="Debian package gcc"):
        build_shared(["int x;\n"], "nothing")


def test_the_tests_skip_without_a_compiler_and_fail_on_a_compile_error(tmp_path, monkeypatch):
    """tests/support/native.py: the rule every test of the project's C follows."""
    monkeypatch.setenv("THC_NATIVE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(NativeBuildError, match="expected expression") as rejected:
        build_or_skip(build_shared, ["int broken(void) { return }\n"], "broken")
    assert not isinstance(rejected.value, CompilerMissing)
    monkeypatch.delenv(toolchain.REQUIRE, raising=False)  # as on a user's machine (CI's failure: test_toolchain)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="Debian package gcc"):
        build_or_skip(build_shared, ["int x;\n"], "nothing")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(pytest.skip.Exception, match="does not run"):
        require_c_compiler()
